/*
 * Slot 0 of the framework in front of a third-party provider that lies (liar.c), configured
 * before the software token:
 *
 *   hostile FRAMEWORK LIAR LIAR_B LIAR_LEGACY WORKDIR     ($HOSTILE_ONLY=CASE: one case)
 *
 * LIAR and LIAR_B are two copies of liar.c's module, LIAR_LEGACY its build without
 * C_GetInterface; WORKDIR an empty directory for the configurations and the gate file.
 * Checked:
 * - an update whose output length the framework refuses (beyond the room given) ends the
 *   operation in the provider too: the session can start another (PKCS#11 3.2 §5.2, an
 *   error ends the operation);
 * - C_SessionCancel on slot 0 ends an operation in a 2.40 provider, which has no
 *   C_SessionCancel of its own;
 * - a 2.40 function list stamped 3.0 or 3.2, from a module without C_GetInterface, is read
 *   as what C_GetFunctionList returns, a CK_FUNCTION_LIST: nothing past its end is called;
 * - a clone given handle 0 (CK_INVALID_HANDLE) passes the provider over instead of calling
 *   the application's key invalid;
 * - a return value no specification defines does not reach the application: slot 0 tries
 *   the next provider, the provider's own slot answers CKR_GENERAL_ERROR;
 * - CKR_BUFFER_TOO_SMALL with a length that fits the room is a provider failure: slot 0
 *   gives the call to the next provider;
 * - a provider slow to take a key's clone holds up no clone into another provider.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pkcs11.h"
#include "ckr_names.h"
#include "expect.h"

static CK_FUNCTION_LIST_3_0 *F;
static const char *WORK;

/* Writes a configuration naming `first` (and `second`, if any) before the software token,
 * and points OPENCF_CONF at it. */
static void configure(const char *first, const char *first_off, const char *second,
                      const char *second_off)
{
    static int n;
    char path[4096];
    snprintf(path, sizeof(path), "%s/opencf-%d.toml", WORK, n++);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(2);
    }
    fprintf(f, "[metaslot]\nkeystore = \"OpenCF Softtoken\"\n\n");
    fprintf(f, "[[provider]]\nname = \"liar\"\nmodule = \"%s\"\n", first);
    if (first_off)
        fprintf(f, "disabled = [\"%s\"]\n", first_off);
    if (second) {
        fprintf(f, "\n[[provider]]\nname = \"liar-b\"\nmodule = \"%s\"\n", second);
        if (second_off)
            fprintf(f, "disabled = [\"%s\"]\n", second_off);
    }
    fprintf(f, "\n[[provider]]\nname = \"softtoken\"\nmodule = \"libopencf_softtoken.so\"\n");
    fclose(f);
    setenv("OPENCF_CONF", path, 1);
}

static CK_UTF8CHAR PIN_DEFAULT[] = "changeme";
static CK_UTF8CHAR PIN[] = "hostile-user-pin";
#define PINLEN(p) ((CK_ULONG)(sizeof(p) - 1))

/* A session of slot 0, the user logged in (the fresh token's expired default PIN is changed
 * on the first login). */
static CK_SESSION_HANDLE open_slot0(void)
{
    CK_SESSION_HANDLE s;
    must("C_OpenSession", F->C_OpenSession(0, CKF_SERIAL_SESSION | CKF_RW_SESSION, NULL, NULL, &s));
    CK_RV rv = F->C_Login(s, CKU_USER, PIN, PINLEN(PIN));
    if (rv != CKR_OK && rv != CKR_USER_ALREADY_LOGGED_IN) {
        must("C_Login (default PIN)", F->C_Login(s, CKU_USER, PIN_DEFAULT, PINLEN(PIN_DEFAULT)));
        must("C_SetPIN", F->C_SetPIN(s, PIN_DEFAULT, PINLEN(PIN_DEFAULT), PIN, PINLEN(PIN)));
    }
    return s;
}

/* A public, extractable AES session key in slot 0 (so that slot 0 may clone it). */
static CK_OBJECT_HANDLE aes_key(CK_SESSION_HANDLE s, const char *label)
{
    static CK_OBJECT_CLASS cls = CKO_SECRET_KEY;
    static CK_KEY_TYPE kt = CKK_AES;
    static CK_BBOOL t = CK_TRUE, fa = CK_FALSE;
    static CK_BYTE value[16] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };
    CK_ATTRIBUTE tmpl[] = {
        { CKA_CLASS, &cls, sizeof(cls) },
        { CKA_KEY_TYPE, &kt, sizeof(kt) },
        { CKA_TOKEN, &fa, sizeof(fa) },
        { CKA_SENSITIVE, &fa, sizeof(fa) },
        { CKA_EXTRACTABLE, &t, sizeof(t) },
        { CKA_ENCRYPT, &t, sizeof(t) },
        { CKA_VALUE, value, sizeof(value) },
        { CKA_LABEL, (void *)label, strlen(label) },
    };
    CK_OBJECT_HANDLE k;
    must("C_CreateObject", F->C_CreateObject(s, tmpl, sizeof(tmpl) / sizeof(tmpl[0]), &k));
    return k;
}

static CK_MECHANISM ECB = { CKM_AES_ECB, NULL, 0 };
static CK_BYTE IV[16];
static CK_MECHANISM CBC = { CKM_AES_CBC, IV, sizeof(IV) };
static CK_MECHANISM SHA = { CKM_SHA256, NULL, 0 };
static CK_BYTE DATA[16] = "sixteen bytes!!";

static void start(const char *mode, const char *stamp)
{
    setenv("LIAR_MODE", mode, 1);
    if (stamp)
        setenv("LIAR_STAMP", stamp, 1);
    else
        unsetenv("LIAR_STAMP");
    must("C_Initialize", F->C_Initialize(NULL));
}

static void stop(void)
{
    must("C_Finalize", F->C_Finalize(NULL));
}

/* A case in front of provider `module` alone (before the software token), in `mode`: a slot 0
 * session, logged in, and in `k` (unless NULL) a key slot 0 may clone. */
static CK_SESSION_HANDLE begin(const char *module, const char *mode, const char *stamp,
                               CK_OBJECT_HANDLE *k)
{
    configure(module, NULL, NULL, NULL);
    start(mode, stamp);
    CK_SESSION_HANDLE s = open_slot0();
    if (k)
        *k = aes_key(s, "k");
    return s;
}

/* The liar's own slot: the one whose token is labelled "Liar". */
static CK_SLOT_ID liar_slot(void)
{
    CK_SLOT_ID slots[32];
    CK_ULONG n = 32;
    must("C_GetSlotList", F->C_GetSlotList(CK_TRUE, slots, &n));
    for (CK_ULONG i = 0; i < n; i++) {
        CK_TOKEN_INFO ti;
        if (F->C_GetTokenInfo(slots[i], &ti) == CKR_OK && memcmp(ti.label, "Liar ", 5) == 0)
            return slots[i];
    }
    fprintf(stderr, "setup: no slot of the liar\n");
    exit(2);
}

static void overlong_update(const char *liar)
{
    CK_OBJECT_HANDLE k;
    CK_SESSION_HANDLE s = begin(liar, "overlong-update", NULL, &k);
    CK_BYTE out[64];
    CK_ULONG n = sizeof(out);
    expect("overlong update: C_EncryptInit", F->C_EncryptInit(s, &ECB, k), CKR_OK);
    expect("overlong update: C_EncryptUpdate with the length beyond the room refused",
           F->C_EncryptUpdate(s, DATA, sizeof(DATA), out, &n), CKR_GENERAL_ERROR);
    expect("overlong update: the operation is over (C_EncryptFinal)",
           F->C_EncryptFinal(s, out, &n), CKR_OPERATION_NOT_INITIALIZED);
    expect("overlong update: a new C_EncryptInit in the session",
           F->C_EncryptInit(s, &ECB, k), CKR_OK);
    n = sizeof(out);
    expect("overlong update: C_Encrypt", F->C_Encrypt(s, DATA, sizeof(DATA), out, &n), CKR_OK);
    stop();
}

static void short_buffer_too_small(const char *liar)
{
    CK_OBJECT_HANDLE k;
    CK_SESSION_HANDLE s = begin(liar, "short-bts", NULL, &k);
    CK_BYTE out[64];
    CK_ULONG n = sizeof(out);
    expect("too small for a length that fits: C_EncryptInit", F->C_EncryptInit(s, &ECB, k),
           CKR_OK);
    CK_RV rv = F->C_Encrypt(s, DATA, sizeof(DATA), out, &n);
    expect("too small for a length that fits: C_Encrypt done by the next provider", rv, CKR_OK);
    check("too small for a length that fits: the whole output", rv != CKR_OK || n == sizeof(DATA));
    stop();
}

static void handle_zero(const char *liar)
{
    CK_OBJECT_HANDLE k;
    CK_SESSION_HANDLE s = begin(liar, "handle0", NULL, &k);
    CK_BYTE out[64];
    CK_ULONG n = sizeof(out);
    expect("clone given handle 0: C_EncryptInit goes on to the next provider",
           F->C_EncryptInit(s, &ECB, k), CKR_OK);
    expect("clone given handle 0: C_Encrypt", F->C_Encrypt(s, DATA, sizeof(DATA), out, &n),
           CKR_OK);
    stop();
}

static void undefined_rv(const char *liar)
{
    CK_SESSION_HANDLE s = begin(liar, "undefined-rv", NULL, NULL);
    CK_BYTE out[64];
    CK_ULONG n = sizeof(out);
    expect("undefined return value: slot 0 C_DigestInit goes on to the next provider",
           F->C_DigestInit(s, &SHA), CKR_OK);
    expect("undefined return value: slot 0 C_Digest", F->C_Digest(s, DATA, sizeof(DATA), out, &n),
           CKR_OK);
    CK_SESSION_HANDLE own;
    must("C_OpenSession (liar)", F->C_OpenSession(liar_slot(), CKF_SERIAL_SESSION, NULL, NULL, &own));
    expect("undefined return value: the provider's own slot answers CKR_GENERAL_ERROR",
           F->C_DigestInit(own, &SHA), CKR_GENERAL_ERROR);
    stop();
}

static void cancel_in_legacy(const char *legacy)
{
    CK_OBJECT_HANDLE k;
    CK_SESSION_HANDLE s = begin(legacy, "", NULL, &k);
    CK_BYTE out[64];
    CK_ULONG n = 0;
    expect("2.40 provider: C_EncryptInit", F->C_EncryptInit(s, &ECB, k), CKR_OK);
    expect("2.40 provider: size query", F->C_Encrypt(s, DATA, sizeof(DATA), NULL, &n), CKR_OK);
    expect("2.40 provider: C_SessionCancel", F->C_SessionCancel(s, CKF_ENCRYPT), CKR_OK);
    expect("2.40 provider: C_EncryptInit after the cancel", F->C_EncryptInit(s, &ECB, k), CKR_OK);
    expect("2.40 provider: size query", F->C_Encrypt(s, DATA, sizeof(DATA), NULL, &n), CKR_OK);
    expect("2.40 provider: C_EncryptInit(NULL) ends it", F->C_EncryptInit(s, NULL, k), CKR_OK);
    expect("2.40 provider: C_EncryptInit after it", F->C_EncryptInit(s, &ECB, k), CKR_OK);
    n = sizeof(out);
    expect("2.40 provider: C_Encrypt", F->C_Encrypt(s, DATA, sizeof(DATA), out, &n), CKR_OK);
    stop();
}

static void legacy_stamped(const char *legacy, const char *stamp)
{
    char what[128];
    CK_OBJECT_HANDLE k;
    CK_SESSION_HANDLE s = begin(legacy, "", stamp, &k);
    CK_INFO info;
    snprintf(what, sizeof(what), "2.40 table stamped %s: C_GetInfo", stamp);
    expect(what, F->C_GetInfo(&info), CKR_OK);
    CK_ULONG n = 0;
    snprintf(what, sizeof(what), "2.40 table stamped %s: C_EncryptInit", stamp);
    expect(what, F->C_EncryptInit(s, &ECB, k), CKR_OK);
    expect("  size query", F->C_Encrypt(s, DATA, sizeof(DATA), NULL, &n), CKR_OK);
    /* The framework ends the operation in the provider: a 3.x layout would have taken an
     * address past the table for its C_SessionCancel. */
    expect("  C_SessionCancel", F->C_SessionCancel(s, CKF_ENCRYPT), CKR_OK);
    expect("  C_EncryptInit after it", F->C_EncryptInit(s, &ECB, k), CKR_OK);
    stop();
}

struct job {
    CK_MECHANISM *mech;
    const char *label;
    CK_RV rv;
};

static void *encrypt_job(void *arg)
{
    struct job *j = arg;
    CK_SESSION_HANDLE s = open_slot0();
    CK_OBJECT_HANDLE k = aes_key(s, j->label);
    CK_BYTE out[64];
    CK_ULONG n = sizeof(out);
    j->rv = F->C_EncryptInit(s, j->mech, k);
    if (j->rv == CKR_OK)
        j->rv = F->C_Encrypt(s, DATA, sizeof(DATA), out, &n);
    F->C_CloseSession(s);
    return NULL;
}

static void slow_clone(const char *liar, const char *liar_b)
{
    char gate[4096], late[4200];
    snprintf(gate, sizeof(gate), "%s/gate", WORK);
    snprintf(late, sizeof(late), "%s.late", gate);
    unlink(gate);
    unlink(late);
    setenv("LIAR_GATE", gate, 1);
    /* The first liar serves ECB only, the second CBC only. */
    configure(liar, "CKM_AES_CBC", liar_b, "CKM_AES_ECB");
    start("gate", NULL);
    struct job slow = { &ECB, "gated", 0 }, other = { &CBC, "free", 0 };
    pthread_t t;
    pthread_create(&t, NULL, encrypt_job, &slow);
    sleep(1); /* the slow clone is under way (or the check below proves nothing) */
    encrypt_job(&other);
    /* Only now may the first provider take its clone. */
    FILE *f = fopen(gate, "w");
    if (f)
        fclose(f);
    pthread_join(t, NULL);
    expect("slow clone: the other provider's operation", other.rv, CKR_OK);
    expect("slow clone: the slow provider's operation", slow.rv, CKR_OK);
    check("slow clone: the other provider's clone did not wait for the slow one",
          access(late, F_OK) != 0);
    stop();
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: hostile FRAMEWORK LIAR LIAR_B LIAR_LEGACY WORKDIR\n");
        return 2;
    }
    WORK = argv[5];
    setvbuf(stdout, NULL, _IOLBF, 0);
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "%s\n", dlerror());
        return 2;
    }
    CK_C_GetFunctionList gfl = (CK_C_GetFunctionList)dlsym(lib, "C_GetFunctionList");
    CK_C_GetInterface gi = (CK_C_GetInterface)dlsym(lib, "C_GetInterface");
    CK_INTERFACE *iface;
    CK_VERSION v30 = { 3, 0 };
    if (!gfl || !gi || gi((CK_UTF8CHAR *)"PKCS 11", &v30, &iface, 0) != CKR_OK) {
        fprintf(stderr, "setup: no PKCS#11 3.0 interface\n");
        return 2;
    }
    F = (CK_FUNCTION_LIST_3_0 *)iface->pFunctionList;
    /* $HOSTILE_ONLY=NAME runs one case. */
    const char *only = getenv("HOSTILE_ONLY");
#define CASE(name, call)                                                               \
    if (!only || strcmp(only, name) == 0)                                              \
        call;
    CASE("overlong-update", overlong_update(argv[2]));
    CASE("short-bts", short_buffer_too_small(argv[2]));
    CASE("handle0", handle_zero(argv[2]));
    CASE("undefined-rv", undefined_rv(argv[2]));
    CASE("legacy-cancel", cancel_in_legacy(argv[4]));
    CASE("legacy-stamped", legacy_stamped(argv[4], "3.0"));
    CASE("legacy-stamped", legacy_stamped(argv[4], "3.2"));
    CASE("slow-clone", slow_clone(argv[2], argv[3]));
    if (failures) {
        printf("hostile: %d failure(s)\n", failures);
        return 1;
    }
    printf("hostile: all passed\n");
    return 0;
}
