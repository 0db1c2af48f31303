/*
 * A PKCS#11 provider that breaks the specification on purpose, for hostile.c: the framework
 * must stay correct in front of a third-party module that lies. It is a small fake token (one
 * slot; CKM_AES_ECB, CKM_AES_CBC and CKM_SHA256, whose outputs are not real cryptography:
 * hostile.c checks return codes and where calls go, never these values), and it breaks one
 * rule at a time, as $LIAR_MODE says (read at every call):
 *
 *   overlong-update  C_EncryptUpdate answers CKR_OK with a length beyond the room given,
 *                    and keeps its operation;
 *   short-bts        C_Encrypt with a buffer answers CKR_BUFFER_TOO_SMALL with a length
 *                    that fits the room (and keeps its operation);
 *   handle0          C_CreateObject answers CKR_OK with handle 0;
 *   undefined-rv     C_EncryptInit and C_DigestInit answer 0x12345678 (no operation starts);
 *   gate             C_CreateObject of an object labelled "gated" waits until the file
 *                    $LIAR_GATE exists (at most 20 s; after that it makes $LIAR_GATE.late
 *                    and fails).
 *
 * Built with -DLIAR_LEGACY it has no C_GetInterface: C_GetFunctionList answers a 2.40
 * CK_FUNCTION_LIST (so no C_SessionCancel), stamped with the version $LIAR_STAMP gives
 * ("3.0", "3.2"; 2.40 otherwise) and followed in memory by entries that are not functions.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>

#include "pkcs11.h"

#define MAX_SESSIONS 64
#define MAX_OBJECTS 256

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static struct {
    int open;
    int encrypting, encrypt_multi, digesting;
} sessions[MAX_SESSIONS + 1];
static int objects[MAX_OBJECTS + 1];

static int mode(const char *m)
{
    const char *v = getenv("LIAR_MODE");
    return v && strcmp(v, m) == 0;
}

static void pad(CK_UTF8CHAR *dst, size_t n, const char *s)
{
    memset(dst, ' ', n);
    memcpy(dst, s, strlen(s) < n ? strlen(s) : n);
}

#define SESSION(h)                                                                     \
    do {                                                                               \
        if (!initialized)                                                              \
            return CKR_CRYPTOKI_NOT_INITIALIZED;                                       \
        if ((h) == 0 || (h) > MAX_SESSIONS || !sessions[h].open)                       \
            return CKR_SESSION_HANDLE_INVALID;                                         \
    } while (0)

static CK_RV l_Initialize(void *args)
{
    (void)args;
    if (initialized)
        return CKR_CRYPTOKI_ALREADY_INITIALIZED;
    initialized = 1;
    memset(sessions, 0, sizeof(sessions));
    memset(objects, 0, sizeof(objects));
    return CKR_OK;
}

static CK_RV l_Finalize(void *r)
{
    if (r)
        return CKR_ARGUMENTS_BAD;
    initialized = 0;
    return CKR_OK;
}

static CK_RV l_GetInfo(CK_INFO *i)
{
    if (!i)
        return CKR_ARGUMENTS_BAD;
    memset(i, 0, sizeof(*i));
    i->cryptokiVersion.major = 3;
    pad(i->manufacturerID, 32, "OpenCF tests");
    pad(i->libraryDescription, 32, "Liar");
    return CKR_OK;
}

static CK_RV l_GetSlotList(CK_BBOOL present, CK_SLOT_ID *list, CK_ULONG *n)
{
    (void)present;
    if (!n)
        return CKR_ARGUMENTS_BAD;
    if (list) {
        if (*n < 1) {
            *n = 1;
            return CKR_BUFFER_TOO_SMALL;
        }
        list[0] = 1;
    }
    *n = 1;
    return CKR_OK;
}

static CK_RV l_GetSlotInfo(CK_SLOT_ID s, CK_SLOT_INFO *i)
{
    if (s != 1)
        return CKR_SLOT_ID_INVALID;
    memset(i, 0, sizeof(*i));
    pad(i->slotDescription, 64, "Liar slot");
    pad(i->manufacturerID, 32, "OpenCF tests");
    i->flags = CKF_TOKEN_PRESENT;
    return CKR_OK;
}

static CK_RV l_GetTokenInfo(CK_SLOT_ID s, CK_TOKEN_INFO *i)
{
    if (s != 1)
        return CKR_SLOT_ID_INVALID;
    memset(i, 0, sizeof(*i));
    pad(i->label, 32, "Liar");
    pad(i->manufacturerID, 32, "OpenCF tests");
    pad(i->model, 16, "liar");
    pad(i->serialNumber, 16, "1");
    i->flags = CKF_TOKEN_INITIALIZED;
    i->ulMaxSessionCount = CK_EFFECTIVELY_INFINITE;
    i->ulMaxRwSessionCount = CK_EFFECTIVELY_INFINITE;
    return CKR_OK;
}

static CK_RV l_GetMechanismList(CK_SLOT_ID s, CK_MECHANISM_TYPE *list, CK_ULONG *n)
{
    if (s != 1)
        return CKR_SLOT_ID_INVALID;
    if (list) {
        if (*n < 3) {
            *n = 3;
            return CKR_BUFFER_TOO_SMALL;
        }
        list[0] = CKM_AES_ECB;
        list[1] = CKM_AES_CBC;
        list[2] = CKM_SHA256;
    }
    *n = 3;
    return CKR_OK;
}

static CK_RV l_GetMechanismInfo(CK_SLOT_ID s, CK_MECHANISM_TYPE m, CK_MECHANISM_INFO *i)
{
    if (s != 1)
        return CKR_SLOT_ID_INVALID;
    if (m == CKM_AES_ECB || m == CKM_AES_CBC) {
        i->ulMinKeySize = 16;
        i->ulMaxKeySize = 32;
        i->flags = CKF_ENCRYPT;
    } else if (m == CKM_SHA256) {
        i->ulMinKeySize = i->ulMaxKeySize = 0;
        i->flags = CKF_DIGEST;
    } else {
        return CKR_MECHANISM_INVALID;
    }
    return CKR_OK;
}

static CK_RV l_OpenSession(CK_SLOT_ID s, CK_FLAGS f, void *app, CK_NOTIFY notify,
                           CK_SESSION_HANDLE *h)
{
    (void)f;
    (void)app;
    (void)notify;
    if (s != 1)
        return CKR_SLOT_ID_INVALID;
    pthread_mutex_lock(&lock);
    for (CK_SESSION_HANDLE i = 1; i <= MAX_SESSIONS; i++) {
        if (!sessions[i].open) {
            memset(&sessions[i], 0, sizeof(sessions[i]));
            sessions[i].open = 1;
            *h = i;
            pthread_mutex_unlock(&lock);
            return CKR_OK;
        }
    }
    pthread_mutex_unlock(&lock);
    return CKR_SESSION_COUNT;
}

static CK_RV l_CloseSession(CK_SESSION_HANDLE h)
{
    SESSION(h);
    sessions[h].open = 0;
    return CKR_OK;
}

static CK_RV l_CloseAllSessions(CK_SLOT_ID s)
{
    (void)s;
    memset(sessions, 0, sizeof(sessions));
    return CKR_OK;
}

static CK_RV l_GetSessionInfo(CK_SESSION_HANDLE h, CK_SESSION_INFO *i)
{
    SESSION(h);
    i->slotID = 1;
    i->state = CKS_RW_PUBLIC_SESSION;
    i->flags = CKF_SERIAL_SESSION | CKF_RW_SESSION;
    i->ulDeviceError = 0;
    return CKR_OK;
}

static int gated(CK_ATTRIBUTE *t, CK_ULONG n)
{
    for (CK_ULONG i = 0; i < n; i++)
        if (t[i].type == CKA_LABEL && t[i].ulValueLen == 5 && memcmp(t[i].pValue, "gated", 5) == 0)
            return 1;
    return 0;
}

static CK_RV l_CreateObject(CK_SESSION_HANDLE h, CK_ATTRIBUTE *t, CK_ULONG n, CK_OBJECT_HANDLE *o)
{
    SESSION(h);
    if (mode("gate") && gated(t, n)) {
        const char *gate = getenv("LIAR_GATE");
        int i;
        for (i = 0; i < 200 && gate && access(gate, F_OK) != 0; i++)
            usleep(100 * 1000);
        if (i == 200) {
            char late[4096];
            snprintf(late, sizeof(late), "%s.late", gate ? gate : "/tmp/liar-gate");
            FILE *f = fopen(late, "w");
            if (f)
                fclose(f);
            return CKR_DEVICE_ERROR;
        }
    }
    pthread_mutex_lock(&lock);
    for (CK_OBJECT_HANDLE i = 1; i <= MAX_OBJECTS; i++) {
        if (!objects[i]) {
            objects[i] = 1;
            pthread_mutex_unlock(&lock);
            *o = mode("handle0") ? 0 : i;
            return CKR_OK;
        }
    }
    pthread_mutex_unlock(&lock);
    return CKR_DEVICE_MEMORY;
}

static CK_RV l_DestroyObject(CK_SESSION_HANDLE h, CK_OBJECT_HANDLE o)
{
    SESSION(h);
    if (o == 0 || o > MAX_OBJECTS || !objects[o])
        return CKR_OBJECT_HANDLE_INVALID;
    objects[o] = 0;
    return CKR_OK;
}

static CK_RV l_EncryptInit(CK_SESSION_HANDLE h, CK_MECHANISM *m, CK_OBJECT_HANDLE k)
{
    SESSION(h);
    if (mode("undefined-rv"))
        return 0x12345678UL;
    if (!m)
        return CKR_ARGUMENTS_BAD;
    if (m->mechanism != CKM_AES_ECB && m->mechanism != CKM_AES_CBC)
        return CKR_MECHANISM_INVALID;
    if (k == 0 || k > MAX_OBJECTS || !objects[k])
        return CKR_KEY_HANDLE_INVALID;
    if (sessions[h].encrypting)
        return CKR_OPERATION_ACTIVE;
    sessions[h].encrypting = 1;
    sessions[h].encrypt_multi = 0;
    return CKR_OK;
}

/* Not AES: a stand-in output of the input's length. */
static void fake(CK_BYTE *out, const CK_BYTE *in, CK_ULONG n)
{
    for (CK_ULONG i = 0; i < n; i++)
        out[i] = in[i] ^ 0x5a;
}

static CK_RV l_Encrypt(CK_SESSION_HANDLE h, CK_BYTE *in, CK_ULONG n, CK_BYTE *out, CK_ULONG *len)
{
    SESSION(h);
    if (!sessions[h].encrypting)
        return CKR_OPERATION_NOT_INITIALIZED;
    if (!len || (!in && n)) {
        sessions[h].encrypting = 0;
        return CKR_ARGUMENTS_BAD;
    }
    if (n % 16) {
        sessions[h].encrypting = 0;
        return CKR_DATA_LEN_RANGE;
    }
    if (!out) {
        *len = n;
        return CKR_OK;
    }
    if (mode("short-bts")) {
        *len = 1;
        return CKR_BUFFER_TOO_SMALL;
    }
    if (*len < n) {
        *len = n;
        return CKR_BUFFER_TOO_SMALL;
    }
    fake(out, in, n);
    *len = n;
    sessions[h].encrypting = 0;
    return CKR_OK;
}

static CK_RV l_EncryptUpdate(CK_SESSION_HANDLE h, CK_BYTE *in, CK_ULONG n, CK_BYTE *out,
                             CK_ULONG *len)
{
    SESSION(h);
    if (!sessions[h].encrypting)
        return CKR_OPERATION_NOT_INITIALIZED;
    if (!len || (!in && n) || n % 16) {
        sessions[h].encrypting = 0;
        return CKR_ARGUMENTS_BAD;
    }
    sessions[h].encrypt_multi = 1;
    if (!out) {
        *len = n;
        return CKR_OK;
    }
    if (mode("overlong-update")) {
        *len += 100;
        return CKR_OK;
    }
    if (*len < n) {
        *len = n;
        return CKR_BUFFER_TOO_SMALL;
    }
    fake(out, in, n);
    *len = n;
    return CKR_OK;
}

static CK_RV l_EncryptFinal(CK_SESSION_HANDLE h, CK_BYTE *out, CK_ULONG *len)
{
    (void)out;
    SESSION(h);
    if (!sessions[h].encrypting)
        return CKR_OPERATION_NOT_INITIALIZED;
    if (!len) {
        sessions[h].encrypting = 0;
        return CKR_ARGUMENTS_BAD;
    }
    *len = 0;
    if (out)
        sessions[h].encrypting = 0;
    return CKR_OK;
}

static CK_RV l_DigestInit(CK_SESSION_HANDLE h, CK_MECHANISM *m)
{
    SESSION(h);
    if (mode("undefined-rv"))
        return 0x12345678UL;
    if (!m)
        return CKR_ARGUMENTS_BAD;
    if (m->mechanism != CKM_SHA256)
        return CKR_MECHANISM_INVALID;
    if (sessions[h].digesting)
        return CKR_OPERATION_ACTIVE;
    sessions[h].digesting = 1;
    return CKR_OK;
}

static CK_RV l_Digest(CK_SESSION_HANDLE h, CK_BYTE *in, CK_ULONG n, CK_BYTE *out, CK_ULONG *len)
{
    SESSION(h);
    (void)in;
    (void)n;
    if (!sessions[h].digesting)
        return CKR_OPERATION_NOT_INITIALIZED;
    if (!len) {
        sessions[h].digesting = 0;
        return CKR_ARGUMENTS_BAD;
    }
    if (!out) {
        *len = 32;
        return CKR_OK;
    }
    if (*len < 32) {
        *len = 32;
        return CKR_BUFFER_TOO_SMALL;
    }
    memset(out, 0xd1, 32);
    *len = 32;
    sessions[h].digesting = 0;
    return CKR_OK;
}

static CK_RV l_DigestFinal(CK_SESSION_HANDLE h, CK_BYTE *out, CK_ULONG *len)
{
    return l_Digest(h, NULL, 0, out, len);
}

#ifndef LIAR_LEGACY
static CK_RV l_SessionCancel(CK_SESSION_HANDLE h, CK_FLAGS f)
{
    SESSION(h);
    if (f & CKF_ENCRYPT)
        sessions[h].encrypting = 0;
    if (f & CKF_DIGEST)
        sessions[h].digesting = 0;
    return CKR_OK;
}
#endif

#define ENTRIES                                                                        \
    .C_Initialize = l_Initialize, .C_Finalize = l_Finalize, .C_GetInfo = l_GetInfo,    \
    .C_GetSlotList = l_GetSlotList, .C_GetSlotInfo = l_GetSlotInfo,                    \
    .C_GetTokenInfo = l_GetTokenInfo, .C_GetMechanismList = l_GetMechanismList,        \
    .C_GetMechanismInfo = l_GetMechanismInfo, .C_OpenSession = l_OpenSession,          \
    .C_CloseSession = l_CloseSession, .C_CloseAllSessions = l_CloseAllSessions,        \
    .C_GetSessionInfo = l_GetSessionInfo, .C_CreateObject = l_CreateObject,            \
    .C_DestroyObject = l_DestroyObject, .C_EncryptInit = l_EncryptInit,                \
    .C_Encrypt = l_Encrypt, .C_EncryptUpdate = l_EncryptUpdate,                        \
    .C_EncryptFinal = l_EncryptFinal, .C_DigestInit = l_DigestInit,                    \
    .C_Digest = l_Digest, .C_DigestFinal = l_DigestFinal

#ifdef LIAR_LEGACY

/* A 2.40 table, and after it in memory what a reader of a 3.x layout would take for the
 * 3.x functions: addresses that are not code. */
static struct {
    CK_FUNCTION_LIST list;
    void *beyond[32];
} legacy = {
    .list = { .version = { 2, 40 }, ENTRIES },
    .beyond = { (void *)3, (void *)3, (void *)3, (void *)3, (void *)3, (void *)3, (void *)3,
                (void *)3, (void *)3, (void *)3, (void *)3, (void *)3, (void *)3, (void *)3,
                (void *)3, (void *)3, (void *)3, (void *)3, (void *)3, (void *)3, (void *)3,
                (void *)3, (void *)3, (void *)3, (void *)3, (void *)3, (void *)3, (void *)3,
                (void *)3, (void *)3, (void *)3, (void *)3 },
};

CK_RV C_GetFunctionList(CK_FUNCTION_LIST **out)
{
    if (!out)
        return CKR_ARGUMENTS_BAD;
    const char *stamp = getenv("LIAR_STAMP");
    legacy.list.version.major = 2;
    legacy.list.version.minor = 40;
    if (stamp && strcmp(stamp, "3.0") == 0) {
        legacy.list.version.major = 3;
        legacy.list.version.minor = 0;
    } else if (stamp && strcmp(stamp, "3.2") == 0) {
        legacy.list.version.major = 3;
        legacy.list.version.minor = 2;
    }
    *out = &legacy.list;
    return CKR_OK;
}

#else

static CK_FUNCTION_LIST_3_0 list3 = { .version = { 3, 0 }, ENTRIES,
                                      .C_SessionCancel = l_SessionCancel };
static CK_INTERFACE iface = { (CK_UTF8CHAR *)"PKCS 11", &list3, 0 };

CK_RV C_GetInterface(CK_UTF8CHAR *name, CK_VERSION *v, CK_INTERFACE **out, CK_FLAGS f)
{
    (void)f;
    if (!out)
        return CKR_ARGUMENTS_BAD;
    if (name && strcmp((const char *)name, "PKCS 11") != 0)
        return CKR_ARGUMENTS_BAD;
    if (v && !(v->major == 3 && v->minor == 0))
        return CKR_ARGUMENTS_BAD;
    *out = &iface;
    return CKR_OK;
}

CK_RV C_GetFunctionList(CK_FUNCTION_LIST **out)
{
    if (!out)
        return CKR_ARGUMENTS_BAD;
    *out = (CK_FUNCTION_LIST *)&list3;
    return CKR_OK;
}

#endif
