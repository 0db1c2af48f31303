/*
 * Table-driven bad-input / error-path test for a PKCS#11 module.
 *
 * Every case is a row { name, accepted CK_RV set, function }.  Rows run in
 * table order and share state (sessions, keys) built by earlier rows, so the
 * order of the table matters.  Where PKCS#11 3.2 allows more than one return
 * code, the row accepts a small set and a comment says why.
 *
 * Usage: badinput /path/to/module.so
 *        badinput --accel /path/to/libopencf_accel.so   (the accelerator provider's table)
 * Prints one line per failing case (and per skipped one) and a final
 * "N passed, N failed" line.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pkcs11.h"
#include "ckr_names.h"

static CK_FUNCTION_LIST *F;

/* Pseudo return value used by cases that check more than the CK_RV
 * (e.g. a length written back); the reason is kept in check_msg. */
#define CHECK_FAILED 0xFFFF0001UL
static char check_msg[256];

static CK_RV check_fail(const char *fmt, const char *a, unsigned long v)
{
    snprintf(check_msg, sizeof check_msg, fmt, a, v);
    return CHECK_FAILED;
}

static const char *rvname(CK_RV rv)
{
    static char tmp[320];
    if (rv == CHECK_FAILED) {
        snprintf(tmp, sizeof tmp, "CHECK_FAILED(%s)", check_msg);
        return tmp;
    }
    return ckr_name(rv);
}

/* ------------------------------------------------------------------ */
/* Shared state                                                        */

#define SLOT0 0UL
#define SLOT1 1UL
#define BAD_SLOT 4242UL
#define DEAD 0xdeadbeefUL
#define UNKNOWN_MECH 0x7ffffff0UL /* below CKM_VENDOR_DEFINED, unassigned */

static CK_SESSION_HANDLE s_ro, s_rw, s_closed, s1;
static CK_OBJECT_HANDLE k_aes;      /* AES, encrypt/decrypt only, extractable, not sensitive */
static CK_OBJECT_HANDLE k_noenc;    /* AES, CKA_ENCRYPT false */
static CK_OBJECT_HANDLE k_hmac;     /* generic secret, sign only */
static CK_OBJECT_HANDLE k_hmac2;    /* generic secret, sign + verify */
static CK_OBJECT_HANDLE k_sens;     /* generated AES, sensitive, unextractable */
static CK_OBJECT_HANDLE k_wrapper;  /* AES, wrap/unwrap, not trusted */
static CK_OBJECT_HANDLE k_wwt;      /* AES, extractable, CKA_WRAP_WITH_TRUSTED */
static CK_OBJECT_HANDLE k_tok;      /* token AES key */
static CK_OBJECT_HANDLE k_destroyed;

static CK_BBOOL T = CK_TRUE, Fa = CK_FALSE;
static CK_OBJECT_CLASS cls_secret = CKO_SECRET_KEY;
static CK_KEY_TYPE kt_aes = CKK_AES, kt_gen = CKK_GENERIC_SECRET, kt_des3 = CKK_DES3;
static CK_ULONG len16 = 16, len32 = 32, len7 = 7;
static CK_BYTE v16[16] = "0123456789abcdef";
static CK_BYTE v32[32] = "0123456789abcdef0123456789abcdef";
static CK_BYTE data16[16] = "sixteen bytes!!!";
static CK_BYTE iv[16];
static CK_BYTE out[512];
static CK_ULONG outlen;
static CK_BYTE out2[512];

static CK_UTF8CHAR so_pin[] = "changeme";
static CK_UTF8CHAR init_pin[] = "changeme";
static CK_UTF8CHAR new_pin[] = "n3w-user-pin";
static CK_UTF8CHAR wrong_pin[] = "wrong-pin-x";
static CK_UTF8CHAR s1_user_pin[] = "slot1-user";
static CK_UTF8CHAR *user_pin = init_pin;
#define PINLEN(p) ((CK_ULONG)strlen((const char *)(p)))

static CK_MECHANISM m_ecb = { CKM_AES_ECB, NULL, 0 };
static CK_MECHANISM m_cbcpad = { CKM_AES_CBC_PAD, iv, sizeof iv };
static CK_MECHANISM m_sha = { CKM_SHA256, NULL, 0 };
static CK_MECHANISM m_hmac = { CKM_SHA256_HMAC, NULL, 0 };
static CK_MECHANISM m_gen = { CKM_AES_KEY_GEN, NULL, 0 };
static CK_MECHANISM m_unknown = { UNKNOWN_MECH, NULL, 0 };

#define A(t, v) { (t), &(v), sizeof(v) }

/* ------------------------------------------------------------------ */
/* Generic dispatcher: call one PKCS#11 function with otherwise-valid
 * arguments, so a case can vary just the session handle.              */

#define OPS(X)                                                               \
    X(GetInfo) X(GetSlotList) X(GetSlotInfo) X(GetTokenInfo)                 \
    X(GetMechanismList) X(GetMechanismInfo) X(InitToken) X(WaitForSlotEvent) \
    X(OpenSession) X(CloseAllSessions) SESSION_OPS(X) OPTIONAL_OPS(X)        \
    X(Finalize)

/* functions every module implements: bad session handle must be reported */
#define SESSION_OPS(X)                                                       \
    X(GetSessionInfo) X(InitPIN) X(SetPIN) X(Login) X(Logout)                \
    X(CreateObject) X(CopyObject) X(DestroyObject) X(GetObjectSize)          \
    X(GetAttributeValue) X(SetAttributeValue) X(FindObjectsInit)             \
    X(FindObjects) X(FindObjectsFinal) X(EncryptInit) X(Encrypt)             \
    X(EncryptUpdate) X(EncryptFinal) X(DecryptInit) X(Decrypt)               \
    X(DecryptUpdate) X(DecryptFinal) X(DigestInit) X(Digest)                 \
    X(DigestUpdate) X(DigestKey) X(DigestFinal) X(SignInit) X(Sign)          \
    X(SignUpdate) X(SignFinal) X(VerifyInit) X(Verify) X(VerifyUpdate)       \
    X(VerifyFinal) X(GenerateKey) X(GenerateKeyPair) X(WrapKey)              \
    X(UnwrapKey) X(DeriveKey) X(SeedRandom) X(GenerateRandom)                \
    X(CloseSession)

/* functions a module may legitimately not support at all: such a module
 * returns CKR_FUNCTION_NOT_SUPPORTED whatever the session handle.  The
 * legacy C_GetFunctionStatus / C_CancelFunction always return
 * CKR_FUNCTION_NOT_PARALLEL in PKCS#11 >= 2.01. */
#define OPTIONAL_OPS(X)                                                      \
    X(GetOperationState) X(SetOperationState) X(SignRecoverInit)             \
    X(SignRecover) X(VerifyRecoverInit) X(VerifyRecover)                     \
    X(DigestEncryptUpdate) X(DecryptDigestUpdate) X(SignEncryptUpdate)       \
    X(DecryptVerifyUpdate) X(GetFunctionStatus) X(CancelFunction)

enum op {
#define E(n) OP_##n,
    OPS(E)
#undef E
    OP_COUNT
};

static CK_RV op_call(int op, CK_SESSION_HANDLE s)
{
    CK_INFO info;
    CK_SLOT_INFO si;
    CK_TOKEN_INFO ti;
    CK_SESSION_INFO ssi;
    CK_MECHANISM_INFO mi;
    CK_SLOT_ID slots[8], slot;
    CK_MECHANISM_TYPE mechs[256];
    CK_ULONG n = 8, l = sizeof out;
    CK_OBJECT_HANDLE h = 0, h2 = 0, objs[4];
    CK_ATTRIBUTE a_label[] = { { CKA_LABEL, (void *)"x", 1 } };
    CK_ATTRIBUTE a_val[] = { { CKA_KEY_TYPE, out2, sizeof(CK_ULONG) } };
    CK_ATTRIBUTE a_new[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes),
                             A(CKA_VALUE, v16) };
    CK_ATTRIBUTE a_gen[] = { A(CKA_VALUE_LEN, len16) };
    CK_ATTRIBUTE a_unw[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes) };
    CK_MECHANISM m_rsa = { CKM_RSA_PKCS_KEY_PAIR_GEN, NULL, 0 };
    CK_ULONG bits = 2048;
    CK_ATTRIBUTE a_pub[] = { A(CKA_MODULUS_BITS, bits) };
    CK_ATTRIBUTE a_priv[] = { A(CKA_SIGN, T) };
    CK_BYTE label[32];
    CK_BYTE derive_data[16] = { 0 };
    CK_KEY_DERIVATION_STRING_DATA dsd = { derive_data, sizeof derive_data };
    CK_MECHANISM m_derive = { CKM_AES_ECB_ENCRYPT_DATA, &dsd, sizeof dsd };

    memset(label, ' ', sizeof label);
    memcpy(label, "badinput", 8);
    switch (op) {
    case OP_GetInfo: return F->C_GetInfo(&info);
    case OP_GetSlotList: return F->C_GetSlotList(CK_FALSE, slots, &n);
    case OP_GetSlotInfo: return F->C_GetSlotInfo(SLOT0, &si);
    case OP_GetTokenInfo: return F->C_GetTokenInfo(SLOT0, &ti);
    case OP_GetMechanismList: n = 256; return F->C_GetMechanismList(SLOT0, mechs, &n);
    case OP_GetMechanismInfo: return F->C_GetMechanismInfo(SLOT0, CKM_AES_ECB, &mi);
    case OP_InitToken: return F->C_InitToken(SLOT1, so_pin, PINLEN(so_pin), label);
    case OP_WaitForSlotEvent: return F->C_WaitForSlotEvent(CKF_DONT_BLOCK, &slot, NULL);
    case OP_OpenSession: return F->C_OpenSession(SLOT0, CKF_SERIAL_SESSION, NULL, NULL, &h);
    case OP_CloseAllSessions: return F->C_CloseAllSessions(BAD_SLOT);
    case OP_Finalize: return F->C_Finalize(NULL);
    case OP_GetSessionInfo: return F->C_GetSessionInfo(s, &ssi);
    case OP_InitPIN: return F->C_InitPIN(s, new_pin, PINLEN(new_pin));
    case OP_SetPIN: return F->C_SetPIN(s, user_pin, PINLEN(user_pin), user_pin, PINLEN(user_pin));
    case OP_Login: return F->C_Login(s, CKU_USER, user_pin, PINLEN(user_pin));
    case OP_Logout: return F->C_Logout(s);
    case OP_CreateObject: return F->C_CreateObject(s, a_new, 3, &h);
    case OP_CopyObject: return F->C_CopyObject(s, k_aes, a_label, 1, &h);
    case OP_DestroyObject: return F->C_DestroyObject(s, k_aes);
    case OP_GetObjectSize: return F->C_GetObjectSize(s, k_aes, &n);
    case OP_GetAttributeValue: return F->C_GetAttributeValue(s, k_aes, a_val, 1);
    case OP_SetAttributeValue: return F->C_SetAttributeValue(s, k_aes, a_label, 1);
    case OP_FindObjectsInit: return F->C_FindObjectsInit(s, NULL, 0);
    case OP_FindObjects: return F->C_FindObjects(s, objs, 4, &n);
    case OP_FindObjectsFinal: return F->C_FindObjectsFinal(s);
    case OP_EncryptInit: return F->C_EncryptInit(s, &m_ecb, k_aes);
    case OP_Encrypt: return F->C_Encrypt(s, data16, 16, out, &l);
    case OP_EncryptUpdate: return F->C_EncryptUpdate(s, data16, 16, out, &l);
    case OP_EncryptFinal: return F->C_EncryptFinal(s, out, &l);
    case OP_DecryptInit: return F->C_DecryptInit(s, &m_ecb, k_aes);
    case OP_Decrypt: return F->C_Decrypt(s, data16, 16, out, &l);
    case OP_DecryptUpdate: return F->C_DecryptUpdate(s, data16, 16, out, &l);
    case OP_DecryptFinal: return F->C_DecryptFinal(s, out, &l);
    case OP_DigestInit: return F->C_DigestInit(s, &m_sha);
    case OP_Digest: return F->C_Digest(s, data16, 16, out, &l);
    case OP_DigestUpdate: return F->C_DigestUpdate(s, data16, 16);
    case OP_DigestKey: return F->C_DigestKey(s, k_aes);
    case OP_DigestFinal: return F->C_DigestFinal(s, out, &l);
    case OP_SignInit: return F->C_SignInit(s, &m_hmac, k_hmac2);
    case OP_Sign: return F->C_Sign(s, data16, 16, out, &l);
    case OP_SignUpdate: return F->C_SignUpdate(s, data16, 16);
    case OP_SignFinal: return F->C_SignFinal(s, out, &l);
    case OP_VerifyInit: return F->C_VerifyInit(s, &m_hmac, k_hmac2);
    case OP_Verify: return F->C_Verify(s, data16, 16, out, 32);
    case OP_VerifyUpdate: return F->C_VerifyUpdate(s, data16, 16);
    case OP_VerifyFinal: return F->C_VerifyFinal(s, out, 32);
    case OP_GenerateKey: return F->C_GenerateKey(s, &m_gen, a_gen, 1, &h);
    case OP_GenerateKeyPair: return F->C_GenerateKeyPair(s, &m_rsa, a_pub, 1, a_priv, 1, &h, &h2);
    case OP_WrapKey: return F->C_WrapKey(s, &m_cbcpad, k_wrapper, k_aes, out, &l);
    case OP_UnwrapKey: return F->C_UnwrapKey(s, &m_cbcpad, k_wrapper, out, 32, a_unw, 2, &h);
    case OP_DeriveKey: return F->C_DeriveKey(s, &m_derive, k_aes, a_unw, 2, &h);
    case OP_SeedRandom: return F->C_SeedRandom(s, data16, 16);
    case OP_GenerateRandom: return F->C_GenerateRandom(s, out, 16);
    case OP_CloseSession: return F->C_CloseSession(s);
    case OP_GetOperationState: return F->C_GetOperationState(s, out, &l);
    case OP_SetOperationState: return F->C_SetOperationState(s, out, 16, 0, 0);
    case OP_SignRecoverInit: return F->C_SignRecoverInit(s, &m_hmac, k_hmac2);
    case OP_SignRecover: return F->C_SignRecover(s, data16, 16, out, &l);
    case OP_VerifyRecoverInit: return F->C_VerifyRecoverInit(s, &m_hmac, k_hmac2);
    case OP_VerifyRecover: return F->C_VerifyRecover(s, data16, 16, out, &l);
    case OP_DigestEncryptUpdate: return F->C_DigestEncryptUpdate(s, data16, 16, out, &l);
    case OP_DecryptDigestUpdate: return F->C_DecryptDigestUpdate(s, data16, 16, out, &l);
    case OP_SignEncryptUpdate: return F->C_SignEncryptUpdate(s, data16, 16, out, &l);
    case OP_DecryptVerifyUpdate: return F->C_DecryptVerifyUpdate(s, data16, 16, out, &l);
    case OP_GetFunctionStatus: return F->C_GetFunctionStatus(s);
    case OP_CancelFunction: return F->C_CancelFunction(s);
    }
    return CKR_GENERAL_ERROR;
}

/* ------------------------------------------------------------------ */
/* Table                                                               */

struct tcase;
typedef CK_RV (*case_fn)(const struct tcase *);
struct tcase {
    const char *name;
    CK_RV want[4];
    int nwant;
    case_fn fn;
    int op;     /* for t_op */
    int sel;    /* session selector for t_op */
    CK_MECHANISM_TYPE need; /* run only where slot 0 offers it (0: always) */
};

enum { H_ZERO = 1, H_DEAD, H_CLOSED, H_RW, H_RO };

static CK_SESSION_HANDLE sess(int sel)
{
    switch (sel) {
    case H_ZERO: return 0;
    case H_DEAD: return DEAD;
    case H_CLOSED: return s_closed;
    case H_RO: return s_ro;
    default: return s_rw;
    }
}

static CK_RV t_op(const struct tcase *c) { return op_call(c->op, sess(c->sel)); }

/* one-line case functions */
#define T(fname, ...) static CK_RV fname(const struct tcase *c) { (void)c; __VA_ARGS__ }

/* ---- C_Initialize ---- */
static CK_RV cm_create(CK_VOID_PTR_PTR m) { *m = malloc(1); return CKR_OK; }
static CK_RV cm_destroy(CK_VOID_PTR m) { free(m); return CKR_OK; }
static CK_RV cm_lock(CK_VOID_PTR m) { (void)m; return CKR_OK; }
static CK_RV cm_unlock(CK_VOID_PTR m) { (void)m; return CKR_OK; }

/* If a bad C_Initialize wrongly succeeds, undo it so later cases run. */
static CK_RV init_expect_fail(CK_C_INITIALIZE_ARGS *a)
{
    CK_RV rv = F->C_Initialize(a);
    if (rv == CKR_OK)
        F->C_Finalize(NULL);
    return rv;
}
T(t_init_reserved, CK_C_INITIALIZE_ARGS a = { 0 }; a.pReserved = &a; return init_expect_fail(&a);)
T(t_init_reserved_oslock, CK_C_INITIALIZE_ARGS a = { 0 }; a.flags = CKF_OS_LOCKING_OK;
  a.pReserved = (void *)1; return init_expect_fail(&a);)
T(t_init_partial1, CK_C_INITIALIZE_ARGS a = { 0 }; a.CreateMutex = cm_create; return init_expect_fail(&a);)
T(t_init_partial3, CK_C_INITIALIZE_ARGS a = { 0 }; a.CreateMutex = cm_create; a.DestroyMutex = cm_destroy;
  a.LockMutex = cm_lock; return init_expect_fail(&a);)
T(t_init_partial_os, CK_C_INITIALIZE_ARGS a = { 0 }; a.flags = CKF_OS_LOCKING_OK; a.UnlockMutex = cm_unlock;
  return init_expect_fail(&a);)
/* all four mutex functions, no CKF_OS_LOCKING_OK: the module must use the
 * application's functions; the softtoken cannot -> CKR_CANT_LOCK */
T(t_init_mutex_nolock, CK_C_INITIALIZE_ARGS a = { cm_create, cm_destroy, cm_lock, cm_unlock, 0, NULL };
  return init_expect_fail(&a);)
/* an application that forbids the library's own threads: the softtoken needs none, the
 * accelerator's scheduler and bulk engine do -> CKR_NEED_TO_CREATE_THREADS */
T(t_init_nothreads, CK_C_INITIALIZE_ARGS a = { 0 }; a.flags = CKF_OS_LOCKING_OK | CKF_LIBRARY_CANT_CREATE_OS_THREADS;
  return init_expect_fail(&a);)
T(t_init_ok, return F->C_Initialize(NULL);)
T(t_init_again_null, return F->C_Initialize(NULL);)
T(t_init_again_args, CK_C_INITIALIZE_ARGS a = { 0 }; a.flags = CKF_OS_LOCKING_OK; return F->C_Initialize(&a);)
T(t_getfl_null, CK_C_GetFunctionList g = F->C_GetFunctionList; return g(NULL);)
T(t_finalize_reserved, return F->C_Finalize((void *)1);)
T(t_finalize, return F->C_Finalize(NULL);)

/* ---- slots ---- */
T(t_slotinfo_bad, CK_SLOT_INFO i; return F->C_GetSlotInfo(BAD_SLOT, &i);)
T(t_tokinfo_bad, CK_TOKEN_INFO i; return F->C_GetTokenInfo(BAD_SLOT, &i);)
T(t_mechlist_bad, CK_ULONG n = 0; return F->C_GetMechanismList(BAD_SLOT, NULL, &n);)
T(t_mechinfo_bad, CK_MECHANISM_INFO i; return F->C_GetMechanismInfo(BAD_SLOT, CKM_AES_ECB, &i);)
T(t_open_bad, CK_SESSION_HANDLE h; return F->C_OpenSession(BAD_SLOT, CKF_SERIAL_SESSION, NULL, NULL, &h);)
T(t_closeall_bad, return F->C_CloseAllSessions(BAD_SLOT);)
T(t_inittoken_bad, CK_UTF8CHAR l[32]; memset(l, ' ', 32);
  return F->C_InitToken(BAD_SLOT, so_pin, PINLEN(so_pin), l);)
T(t_slotinfo_deadbeef, CK_SLOT_INFO i; return F->C_GetSlotInfo(DEAD, &i);)

/* ---- NULL out-pointers ---- */
T(t_getinfo_null, return F->C_GetInfo(NULL);)
T(t_slotlist_null, return F->C_GetSlotList(CK_FALSE, NULL, NULL);)
T(t_slotinfo_null, return F->C_GetSlotInfo(SLOT0, NULL);)
T(t_tokinfo_null, return F->C_GetTokenInfo(SLOT0, NULL);)
T(t_mechlist_null, return F->C_GetMechanismList(SLOT0, NULL, NULL);)
T(t_mechinfo_null, return F->C_GetMechanismInfo(SLOT0, CKM_AES_ECB, NULL);)
T(t_open_null, return F->C_OpenSession(SLOT0, CKF_SERIAL_SESSION, NULL, NULL, NULL);)
T(t_open_noserial, CK_SESSION_HANDLE h; return F->C_OpenSession(SLOT0, 0, NULL, NULL, &h);)
T(t_inittoken_nulllabel, return F->C_InitToken(SLOT1, so_pin, PINLEN(so_pin), NULL);)
/* waiting for slot events: unsupported (CKR_FUNCTION_NOT_SUPPORTED) or a
 * NULL pSlot rejected (CKR_ARGUMENTS_BAD) are both valid */
T(t_wait_null, return F->C_WaitForSlotEvent(CKF_DONT_BLOCK, NULL, NULL);)
T(t_mechinfo_unknown, CK_MECHANISM_INFO i; return F->C_GetMechanismInfo(SLOT0, UNKNOWN_MECH, &i);)

/* ---- two-call protocol: slot / mechanism lists ---- */
static CK_ULONG nslots, nmechs;
T(t_slotlist_size, nslots = 0; CK_RV rv = F->C_GetSlotList(CK_FALSE, NULL, &nslots);
  if (rv == CKR_OK && nslots < 2) return check_fail("%s %lu", "slot count", nslots); return rv;)
T(t_slotlist_small, CK_SLOT_ID l[8]; CK_ULONG n = 1; CK_RV rv = F->C_GetSlotList(CK_FALSE, l, &n);
  if (rv == CKR_BUFFER_TOO_SMALL && n != nslots) return check_fail("%s %lu", "needed count", n); return rv;)
T(t_slotlist_full, CK_SLOT_ID l[8]; CK_ULONG n = 8; CK_RV rv = F->C_GetSlotList(CK_FALSE, l, &n);
  if (rv == CKR_OK && (n != nslots || l[0] != SLOT0)) return check_fail("%s %lu", "count", n); return rv;)
T(t_mechlist_size, nmechs = 0; CK_RV rv = F->C_GetMechanismList(SLOT0, NULL, &nmechs);
  if (rv == CKR_OK && nmechs < 3) return check_fail("%s %lu", "mech count", nmechs); return rv;)
T(t_mechlist_small, CK_MECHANISM_TYPE l[1]; CK_ULONG n = 1; CK_RV rv = F->C_GetMechanismList(SLOT0, l, &n);
  if (rv == CKR_BUFFER_TOO_SMALL && n != nmechs) return check_fail("%s %lu", "needed count", n); return rv;)
T(t_mechlist_full, CK_MECHANISM_TYPE l[512]; CK_ULONG n = 512, i; CK_RV rv = F->C_GetMechanismList(SLOT0, l, &n);
  if (rv != CKR_OK) return rv; for (i = 0; i < n; i++) if (l[i] == CKM_AES_GCM) return CKR_OK;
  return check_fail("%s %lu", "CKM_AES_GCM missing; count", n);)

/* ---- sessions ---- */
T(t_open_ro, return F->C_OpenSession(SLOT0, CKF_SERIAL_SESSION, NULL, NULL, &s_ro);)
T(t_open_rw, return F->C_OpenSession(SLOT0, CKF_SERIAL_SESSION | CKF_RW_SESSION, NULL, NULL, &s_rw);)
T(t_open_closed, CK_RV rv = F->C_OpenSession(SLOT0, CKF_SERIAL_SESSION, NULL, NULL, &s_closed);
  if (rv != CKR_OK) return rv; return F->C_CloseSession(s_closed);)
T(t_sessinfo_null, return F->C_GetSessionInfo(s_rw, NULL);)
T(t_sessinfo_ro, CK_SESSION_INFO i; CK_RV rv = F->C_GetSessionInfo(s_ro, &i);
  if (rv == CKR_OK && (i.state != CKS_RO_PUBLIC_SESSION || i.slotID != SLOT0))
  return check_fail("%s %lu", "state", i.state); return rv;)

/* ---- login / PIN ---- */
T(t_logout_notin, return F->C_Logout(s_rw);)
T(t_login_badtype, return F->C_Login(s_rw, 5, user_pin, PINLEN(user_pin));)
T(t_login_badtype2, return F->C_Login(s_rw, 0x80000001UL, user_pin, PINLEN(user_pin));)
T(t_login_wrong, return F->C_Login(s_rw, CKU_USER, wrong_pin, PINLEN(wrong_pin));)
T(t_login_nullpin, return F->C_Login(s_rw, CKU_USER, NULL, 8);)
/* an SO login is refused while a read-only session exists */
T(t_login_so_roexists, return F->C_Login(s_rw, CKU_SO, so_pin, PINLEN(so_pin));)
T(t_tokinfo_countlow, CK_TOKEN_INFO ti; CK_RV rv = F->C_GetTokenInfo(SLOT0, &ti); if (rv) return rv;
  if (!(ti.flags & CKF_USER_PIN_COUNT_LOW)) return check_fail("%s 0x%lx", "COUNT_LOW not set, flags", ti.flags);
  if (!(ti.flags & CKF_USER_PIN_TO_BE_CHANGED)) return check_fail("%s 0x%lx", "TO_BE_CHANGED not set, flags", ti.flags);
  return CKR_OK;)
/* objects that need a login */
T(t_create_priv_nologin, CK_ATTRIBUTE a[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v16),
  A(CKA_PRIVATE, T) }; CK_OBJECT_HANDLE h; return F->C_CreateObject(s_rw, a, 4, &h);)
T(t_create_privtok_nologin, CK_ATTRIBUTE a[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v16),
  A(CKA_PRIVATE, T), A(CKA_TOKEN, T) }; CK_OBJECT_HANDLE h; return F->C_CreateObject(s_rw, a, 5, &h);)
T(t_gen_priv_nologin, CK_ATTRIBUTE a[] = { A(CKA_VALUE_LEN, len16), A(CKA_PRIVATE, T) }; CK_OBJECT_HANDLE h;
  return F->C_GenerateKey(s_rw, &m_gen, a, 2, &h);)
/* token objects from a read-only session */
T(t_create_tok_ro, CK_ATTRIBUTE a[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v16),
  A(CKA_PRIVATE, Fa), A(CKA_TOKEN, T) }; CK_OBJECT_HANDLE h; return F->C_CreateObject(s_ro, a, 5, &h);)
T(t_gen_tok_ro, CK_ATTRIBUTE a[] = { A(CKA_VALUE_LEN, len16), A(CKA_PRIVATE, Fa), A(CKA_TOKEN, T) };
  CK_OBJECT_HANDLE h; return F->C_GenerateKey(s_ro, &m_gen, a, 3, &h);)
T(t_login_user, return F->C_Login(s_rw, CKU_USER, user_pin, PINLEN(user_pin));)
T(t_login_user_again, return F->C_Login(s_ro, CKU_USER, user_pin, PINLEN(user_pin));)
/* SO while the user is logged in: the spec's code is
 * CKR_USER_ANOTHER_ALREADY_LOGGED_IN; a read-only session also exists, so
 * CKR_SESSION_READ_ONLY_EXISTS is an equally valid error */
T(t_login_so_while_user, return F->C_Login(s_rw, CKU_SO, so_pin, PINLEN(so_pin));)
T(t_expired_create, CK_ATTRIBUTE a[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v16) };
  CK_OBJECT_HANDLE h; return F->C_CreateObject(s_rw, a, 3, &h);)
T(t_expired_gen, CK_ATTRIBUTE a[] = { A(CKA_VALUE_LEN, len16) }; CK_OBJECT_HANDLE h;
  return F->C_GenerateKey(s_rw, &m_gen, a, 1, &h);)
T(t_expired_find, return F->C_FindObjectsInit(s_rw, NULL, 0);)
T(t_setpin_ro, return F->C_SetPIN(s_ro, user_pin, PINLEN(user_pin), new_pin, PINLEN(new_pin));)
T(t_setpin_nullold, return F->C_SetPIN(s_rw, NULL, 8, new_pin, PINLEN(new_pin));)
T(t_setpin_nullnew, return F->C_SetPIN(s_rw, user_pin, PINLEN(user_pin), NULL, 8);)
T(t_setpin_wrongold, return F->C_SetPIN(s_rw, wrong_pin, PINLEN(wrong_pin), new_pin, PINLEN(new_pin));)
T(t_setpin_ok, CK_RV rv = F->C_SetPIN(s_rw, user_pin, PINLEN(user_pin), new_pin, PINLEN(new_pin));
  if (rv == CKR_OK) user_pin = new_pin; return rv;)
T(t_tokinfo_changed, CK_TOKEN_INFO ti; CK_RV rv = F->C_GetTokenInfo(SLOT0, &ti); if (rv) return rv;
  if (ti.flags & CKF_USER_PIN_TO_BE_CHANGED) return check_fail("%s 0x%lx", "TO_BE_CHANGED still set", ti.flags);
  return CKR_OK;)
T(t_initpin_user, return F->C_InitPIN(s_rw, new_pin, PINLEN(new_pin));)

/* ---- objects / templates ---- */
static CK_RV create(CK_ATTRIBUTE *a, CK_ULONG n, CK_OBJECT_HANDLE *h)
{
    CK_OBJECT_HANDLE tmp;
    return F->C_CreateObject(s_rw, a, n, h ? h : &tmp);
}
static CK_RV gen(CK_ATTRIBUTE *a, CK_ULONG n, CK_OBJECT_HANDLE *h)
{
    CK_OBJECT_HANDLE tmp;
    return F->C_GenerateKey(s_rw, &m_gen, a, n, h ? h : &tmp);
}
#define AESBASE A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v16)
#define NA(a) (sizeof(a) / sizeof((a)[0]))
#define CR(fname, hp, ...) T(fname, CK_ATTRIBUTE a[] = { __VA_ARGS__ }; return create(a, NA(a), hp);)
#define GK(fname, hp, ...) T(fname, CK_ATTRIBUTE a[] = { __VA_ARGS__ }; return gen(a, NA(a), hp);)

static CK_ULONG ul_true = 1, ul_val = CKM_AES_KEY_GEN;
static CK_BYTE uid[] = "1234";
static CK_BYTE one_byte_cls = 4;
static CK_ULONG bogus_class = 0x12345UL;

CR(t_mk_aes, &k_aes, AESBASE, A(CKA_ENCRYPT, T), A(CKA_DECRYPT, T), A(CKA_SIGN, Fa), A(CKA_WRAP, Fa), A(CKA_UNWRAP, Fa),
   A(CKA_EXTRACTABLE, T), A(CKA_SENSITIVE, Fa))
CR(t_mk_noenc, &k_noenc, AESBASE, A(CKA_ENCRYPT, Fa), A(CKA_DECRYPT, T))
CR(t_mk_hmac, &k_hmac, A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_gen), A(CKA_VALUE, v32), A(CKA_SIGN, T),
   A(CKA_VERIFY, Fa))
CR(t_mk_hmac2, &k_hmac2, A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_gen), A(CKA_VALUE, v32), A(CKA_SIGN, T),
   A(CKA_VERIFY, T))
GK(t_mk_sens, &k_sens, A(CKA_VALUE_LEN, len16), A(CKA_SENSITIVE, T), A(CKA_EXTRACTABLE, Fa), A(CKA_ENCRYPT, T),
   A(CKA_DECRYPT, T))
GK(t_mk_wrapper, &k_wrapper, A(CKA_VALUE_LEN, len16), A(CKA_WRAP, T), A(CKA_UNWRAP, T), A(CKA_ENCRYPT, T))
GK(t_mk_wwt, &k_wwt, A(CKA_VALUE_LEN, len16), A(CKA_EXTRACTABLE, T), A(CKA_SENSITIVE, Fa),
   A(CKA_WRAP_WITH_TRUSTED, T))
CR(t_mk_tok, &k_tok, AESBASE, A(CKA_TOKEN, T), A(CKA_ENCRYPT, T))
T(t_mk_destroyed, CK_ATTRIBUTE a[] = { AESBASE }; CK_RV rv = create(a, 3, &k_destroyed); if (rv) return rv;
  return F->C_DestroyObject(s_rw, k_destroyed);)

/* token-set attributes */
CR(t_cr_local, NULL, AESBASE, A(CKA_LOCAL, T))
CR(t_cr_alwayssens, NULL, AESBASE, A(CKA_ALWAYS_SENSITIVE, T))
CR(t_cr_neverext, NULL, AESBASE, A(CKA_NEVER_EXTRACTABLE, T))
CR(t_cr_kgm, NULL, AESBASE, A(CKA_KEY_GEN_MECHANISM, ul_val))
CR(t_cr_uid, NULL, AESBASE, A(CKA_UNIQUE_ID, uid))
GK(t_gk_local, NULL, A(CKA_VALUE_LEN, len16), A(CKA_LOCAL, T))
GK(t_gk_alwayssens, NULL, A(CKA_VALUE_LEN, len16), A(CKA_ALWAYS_SENSITIVE, T))
GK(t_gk_neverext, NULL, A(CKA_VALUE_LEN, len16), A(CKA_NEVER_EXTRACTABLE, T))
GK(t_gk_kgm, NULL, A(CKA_VALUE_LEN, len16), A(CKA_KEY_GEN_MECHANISM, ul_val))
GK(t_gk_uid, NULL, A(CKA_VALUE_LEN, len16), A(CKA_UNIQUE_ID, uid))
/* attributes unknown for a secret key */
CR(t_cr_modulus, NULL, AESBASE, A(CKA_MODULUS, v16))
CR(t_cr_ecparams, NULL, AESBASE, A(CKA_EC_PARAMS, v16))
CR(t_cr_vendor_attr, NULL, AESBASE, { 0x7ffff123UL, v16, 4 })
GK(t_gk_modulus_bits, NULL, A(CKA_VALUE_LEN, len16), A(CKA_MODULUS_BITS, len16))
GK(t_gk_certtype, NULL, A(CKA_VALUE_LEN, len16), A(CKA_CERTIFICATE_TYPE, len16))
/* wrong-size CK_BBOOL / CK_ULONG */
CR(t_cr_bool_ulong, NULL, AESBASE, A(CKA_ENCRYPT, ul_true))
CR(t_cr_class_1byte, NULL, { CKA_CLASS, &one_byte_cls, 1 }, A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v16))
CR(t_cr_keytype_2byte, NULL, A(CKA_CLASS, cls_secret), { CKA_KEY_TYPE, &kt_aes, 2 }, A(CKA_VALUE, v16))
GK(t_gk_valuelen_1byte, NULL, { CKA_VALUE_LEN, &len16, 1 })
GK(t_gk_token_ulong, NULL, A(CKA_VALUE_LEN, len16), A(CKA_TOKEN, ul_true))
GK(t_gk_sens_0len, NULL, A(CKA_VALUE_LEN, len16), { CKA_SENSITIVE, &T, 0 })
/* same attribute twice, different values */
CR(t_cr_dup_encrypt, NULL, AESBASE, A(CKA_ENCRYPT, T), A(CKA_ENCRYPT, Fa))
CR(t_cr_dup_keytype, NULL, AESBASE, A(CKA_KEY_TYPE, kt_gen))
GK(t_gk_dup_len, NULL, A(CKA_VALUE_LEN, len16), A(CKA_VALUE_LEN, len32))
GK(t_gk_dup_sign, NULL, A(CKA_VALUE_LEN, len16), A(CKA_DECRYPT, Fa), A(CKA_DECRYPT, T))
/* other template errors */
CR(t_cr_novalue, NULL, A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes))
CR(t_cr_noclass, NULL, A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v16))
CR(t_cr_badclass, NULL, A(CKA_CLASS, bogus_class), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v16))
/* an AES key of 7 bytes: CKR_ATTRIBUTE_VALUE_INVALID (bad CKA_VALUE) and
 * CKR_KEY_SIZE_RANGE are both listed for this in the spec */
CR(t_cr_shortaes, NULL, A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), { CKA_VALUE, v16, 7 })
GK(t_gk_nolen, NULL, A(CKA_ENCRYPT, T))
GK(t_gk_len7, NULL, A(CKA_VALUE_LEN, len7))
GK(t_gk_des3_type, NULL, A(CKA_VALUE_LEN, len16), A(CKA_KEY_TYPE, kt_des3))
/* CKA_VALUE given to a generator is set by the token */
GK(t_gk_value, NULL, A(CKA_VALUE_LEN, len16), A(CKA_VALUE, v16))
T(t_cr_nulltmpl, CK_OBJECT_HANDLE h; return F->C_CreateObject(s_rw, NULL, 3, &h);)
T(t_cr_nullout, CK_ATTRIBUTE a[] = { AESBASE }; return F->C_CreateObject(s_rw, a, 3, NULL);)
T(t_gk_nullmech, CK_ATTRIBUTE a[] = { A(CKA_VALUE_LEN, len16) }; CK_OBJECT_HANDLE h;
  return F->C_GenerateKey(s_rw, NULL, a, 1, &h);)
T(t_gk_nullout, CK_ATTRIBUTE a[] = { A(CKA_VALUE_LEN, len16) }; return F->C_GenerateKey(s_rw, &m_gen, a, 1, NULL);)
T(t_gk_unknown, CK_ATTRIBUTE a[] = { A(CKA_VALUE_LEN, len16) }; CK_OBJECT_HANDLE h;
  return F->C_GenerateKey(s_rw, &m_unknown, a, 1, &h);)
T(t_gk_wrongmech, CK_ATTRIBUTE a[] = { A(CKA_VALUE_LEN, len16) }; CK_OBJECT_HANDLE h;
  return F->C_GenerateKey(s_rw, &m_ecb, a, 1, &h);)

/* ---- bad object / key handles ---- */
static CK_OBJECT_HANDLE badobj(int which)
{
    return which == 0 ? 0 : which == 1 ? DEAD : k_destroyed;
}
#define BADOBJ_FNS(sfx, w)                                                                      \
    T(t_getattr_bad##sfx, CK_ULONG kt; CK_ATTRIBUTE a[] = { A(CKA_KEY_TYPE, kt) };               \
      return F->C_GetAttributeValue(s_rw, badobj(w), a, 1);)                                     \
    T(t_setattr_bad##sfx, CK_ATTRIBUTE a[] = { { CKA_LABEL, (void *)"x", 1 } };                 \
      return F->C_SetAttributeValue(s_rw, badobj(w), a, 1);)                                     \
    T(t_destroy_bad##sfx, return F->C_DestroyObject(s_rw, badobj(w));)                          \
    T(t_size_bad##sfx, CK_ULONG n; return F->C_GetObjectSize(s_rw, badobj(w), &n);)             \
    T(t_copy_bad##sfx, CK_OBJECT_HANDLE h; return F->C_CopyObject(s_rw, badobj(w), NULL, 0, &h);) \
    T(t_encinit_bad##sfx, return F->C_EncryptInit(s_rw, &m_ecb, badobj(w));)                    \
    T(t_decinit_bad##sfx, return F->C_DecryptInit(s_rw, &m_ecb, badobj(w));)                    \
    T(t_signinit_bad##sfx, return F->C_SignInit(s_rw, &m_hmac, badobj(w));)                     \
    T(t_verinit_bad##sfx, return F->C_VerifyInit(s_rw, &m_hmac, badobj(w));)                    \
    T(t_wrap_badkey##sfx, CK_ULONG l = sizeof out;                                              \
      return F->C_WrapKey(s_rw, &m_cbcpad, k_wrapper, badobj(w), out, &l);)                     \
    T(t_wrap_badwrapper##sfx, CK_ULONG l = sizeof out;                                          \
      return F->C_WrapKey(s_rw, &m_cbcpad, badobj(w), k_aes, out, &l);)
BADOBJ_FNS(0, 0)
BADOBJ_FNS(D, 1)
BADOBJ_FNS(X, 2)
T(t_digestkey_bad, CK_RV rv = F->C_DigestInit(s_rw, &m_sha); if (rv) return rv;
  rv = F->C_DigestKey(s_rw, DEAD); { CK_ULONG l = sizeof out; F->C_DigestFinal(s_rw, out, &l); } return rv;)

/* ---- sensitive attributes ---- */
static CK_RV getattr1(CK_OBJECT_HANDLE h, CK_ATTRIBUTE_TYPE t, void *p, CK_ULONG *len)
{
    CK_ATTRIBUTE a = { t, p, *len };
    CK_RV rv = F->C_GetAttributeValue(s_rw, h, &a, 1);
    *len = a.ulValueLen;
    return rv;
}
T(t_sens_value, CK_ULONG l = sizeof out; CK_RV rv = getattr1(k_sens, CKA_VALUE, out, &l);
  if (rv == CKR_ATTRIBUTE_SENSITIVE && l != CK_UNAVAILABLE_INFORMATION)
  return check_fail("%s %lu", "ulValueLen", l); return rv;)
T(t_sens_value_null, CK_ULONG l = 0; CK_RV rv = getattr1(k_sens, CKA_VALUE, NULL, &l);
  if (rv == CKR_ATTRIBUTE_SENSITIVE && l != CK_UNAVAILABLE_INFORMATION)
  return check_fail("%s %lu", "ulValueLen", l); return rv;)
/* several attributes: the sensitive one flagged, the others still filled */
T(t_sens_multi, CK_ULONG kt = 0; CK_ATTRIBUTE a[] = { { CKA_VALUE, out, sizeof out }, A(CKA_KEY_TYPE, kt) };
  CK_RV rv = F->C_GetAttributeValue(s_rw, k_sens, a, 2); if (rv != CKR_ATTRIBUTE_SENSITIVE) return rv;
  if (a[0].ulValueLen != CK_UNAVAILABLE_INFORMATION) return check_fail("%s %lu", "value len", a[0].ulValueLen);
  if (kt != CKK_AES || a[1].ulValueLen != sizeof kt) return check_fail("%s %lu", "key type not filled", kt);
  return rv;)
T(t_sens_flags, CK_BBOOL as = 0, ne = 0, lo = 0; CK_ATTRIBUTE a[] = { A(CKA_ALWAYS_SENSITIVE, as),
  A(CKA_NEVER_EXTRACTABLE, ne), A(CKA_LOCAL, lo) }; CK_RV rv = F->C_GetAttributeValue(s_rw, k_sens, a, 3);
  if (rv) return rv; if (!as || !ne || !lo) return check_fail("%s %lu", "always_sens/never_ext/local", as * 100UL + ne * 10UL + lo);
  return CKR_OK;)
T(t_sens_clear, CK_ATTRIBUTE a[] = { A(CKA_SENSITIVE, Fa) }; return F->C_SetAttributeValue(s_rw, k_sens, a, 1);)
T(t_sens_extractable, CK_ATTRIBUTE a[] = { A(CKA_EXTRACTABLE, T) }; return F->C_SetAttributeValue(s_rw, k_sens, a, 1);)
T(t_sens_copy_extractable, CK_ATTRIBUTE a[] = { A(CKA_EXTRACTABLE, T) }; CK_OBJECT_HANDLE h;
  return F->C_CopyObject(s_rw, k_sens, a, 1, &h);)
T(t_sens_copy_clear, CK_ATTRIBUTE a[] = { A(CKA_SENSITIVE, Fa) }; CK_OBJECT_HANDLE h;
  return F->C_CopyObject(s_rw, k_sens, a, 1, &h);)
T(t_plain_value, CK_ULONG l = 0; CK_RV rv = getattr1(k_aes, CKA_VALUE, NULL, &l);
  if (rv == CKR_OK && l != 16) return check_fail("%s %lu", "len", l); return rv;)
T(t_plain_value_small, CK_ULONG l = 4; CK_RV rv = getattr1(k_aes, CKA_VALUE, out, &l);
  if (rv == CKR_BUFFER_TOO_SMALL && l != CK_UNAVAILABLE_INFORMATION) return check_fail("%s %lu", "len", l); return rv;)
T(t_getattr_invalid, CK_ULONG l = sizeof out; CK_RV rv = getattr1(k_aes, CKA_MODULUS, out, &l);
  if (rv == CKR_ATTRIBUTE_TYPE_INVALID && l != CK_UNAVAILABLE_INFORMATION) return check_fail("%s %lu", "len", l); return rv;)
T(t_getattr_nulltmpl, return F->C_GetAttributeValue(s_rw, k_aes, NULL, 1);)
T(t_set_sensitive_true, CK_ATTRIBUTE a[] = { A(CKA_SENSITIVE, T) }; CK_OBJECT_HANDLE h; CK_ATTRIBUTE cr[] = { AESBASE };
  CK_RV rv = create(cr, 3, &h); if (rv) return rv; return F->C_SetAttributeValue(s_rw, h, a, 1);)
T(t_set_extractable_false, CK_ATTRIBUTE a[] = { A(CKA_EXTRACTABLE, Fa) }; CK_OBJECT_HANDLE h; CK_ATTRIBUTE cr[] = { AESBASE };
  CK_RV rv = create(cr, 3, &h); if (rv) return rv; return F->C_SetAttributeValue(s_rw, h, a, 1);)
static CK_OBJECT_CLASS cls_data = CKO_DATA;
T(t_set_class, CK_ATTRIBUTE a[] = { A(CKA_CLASS, cls_data) }; return F->C_SetAttributeValue(s_rw, k_aes, a, 1);)
T(t_set_keytype, CK_ATTRIBUTE a[] = { A(CKA_KEY_TYPE, kt_gen) }; return F->C_SetAttributeValue(s_rw, k_aes, a, 1);)
T(t_set_local, CK_ATTRIBUTE a[] = { A(CKA_LOCAL, T) }; return F->C_SetAttributeValue(s_rw, k_aes, a, 1);)
T(t_set_valuelen, CK_ATTRIBUTE a[] = { A(CKA_VALUE_LEN, len32) }; return F->C_SetAttributeValue(s_rw, k_aes, a, 1);)
T(t_set_unknown, CK_ATTRIBUTE a[] = { A(CKA_MODULUS, v16) }; return F->C_SetAttributeValue(s_rw, k_aes, a, 1);)
T(t_set_bool_size, CK_ATTRIBUTE a[] = { A(CKA_ENCRYPT, ul_true) }; return F->C_SetAttributeValue(s_rw, k_aes, a, 1);)
T(t_set_wwt_clear, CK_ATTRIBUTE a[] = { A(CKA_WRAP_WITH_TRUSTED, Fa) }; return F->C_SetAttributeValue(s_rw, k_wwt, a, 1);)
T(t_set_label_ok, CK_ATTRIBUTE a[] = { { CKA_LABEL, (void *)"lbl", 3 } }; return F->C_SetAttributeValue(s_rw, k_aes, a, 1);)

/* ---- wrapping ---- */
T(t_wrap_size, outlen = 0; CK_RV rv = F->C_WrapKey(s_rw, &m_cbcpad, k_wrapper, k_aes, NULL, &outlen);
  if (rv == CKR_OK && outlen < 16) return check_fail("%s %lu", "len", outlen); return rv;)
T(t_wrap_small, CK_ULONG l = 4; CK_RV rv = F->C_WrapKey(s_rw, &m_cbcpad, k_wrapper, k_aes, out, &l);
  if (rv == CKR_BUFFER_TOO_SMALL && l != outlen) return check_fail("%s %lu", "len", l); return rv;)
T(t_wrap_ok, CK_ULONG l = sizeof out; return F->C_WrapKey(s_rw, &m_cbcpad, k_wrapper, k_aes, out, &l);)
T(t_wrap_unextractable, CK_ULONG l = sizeof out; return F->C_WrapKey(s_rw, &m_cbcpad, k_wrapper, k_sens, out, &l);)
T(t_wrap_wwt, CK_ULONG l = sizeof out; return F->C_WrapKey(s_rw, &m_cbcpad, k_wrapper, k_wwt, out, &l);)
T(t_wrap_nowrapattr, CK_ULONG l = sizeof out; return F->C_WrapKey(s_rw, &m_cbcpad, k_aes, k_hmac, out, &l);)
T(t_wrap_nullmech, CK_ULONG l = sizeof out; return F->C_WrapKey(s_rw, NULL, k_wrapper, k_aes, out, &l);)
T(t_wrap_nulllen, return F->C_WrapKey(s_rw, &m_cbcpad, k_wrapper, k_aes, out, NULL);)
/* The framework-only migration mechanism (CKM_VENDOR_DEFINED | 0x4f430001): a module that an
 * application initialized itself never serves it, so a non-extractable key stays inside. */
T(t_wrap_migrate_mech, CK_MECHANISM mm = { CKM_VENDOR_DEFINED | 0x4f430001UL, NULL, 0 };
  CK_ULONG l = sizeof out; return F->C_WrapKey(s_rw, &mm, k_wrapper, k_sens, out, &l);)
T(t_wrap_unknownmech, CK_ULONG l = sizeof out; return F->C_WrapKey(s_rw, &m_unknown, k_wrapper, k_aes, out, &l);)
/* the blob is a valid CBC_PAD encryption under k_aes, so the only error
 * is that k_aes lacks CKA_UNWRAP */
T(t_unwrap_nowrapattr, CK_ATTRIBUTE a[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes) }; CK_OBJECT_HANDLE h;
  CK_BYTE w[64]; CK_ULONG wl = sizeof w; CK_RV rv = F->C_EncryptInit(s_rw, &m_cbcpad, k_aes); if (rv) return rv;
  rv = F->C_Encrypt(s_rw, v16, 16, w, &wl); if (rv) return rv;
  return F->C_UnwrapKey(s_rw, &m_cbcpad, k_aes, w, wl, a, 2, &h);)
T(t_unwrap_badhandle, CK_ATTRIBUTE a[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes) }; CK_OBJECT_HANDLE h;
  return F->C_UnwrapKey(s_rw, &m_cbcpad, DEAD, out, 32, a, 2, &h);)

/* ---- operations out of order / two-call ---- */
static CK_RV finish_enc(void) { CK_ULONG l = sizeof out; return F->C_Encrypt(s_rw, data16, 16, out, &l); }
T(t_encinit_ok, return F->C_EncryptInit(s_rw, &m_ecb, k_aes);)
T(t_encinit_again, return F->C_EncryptInit(s_rw, &m_ecb, k_aes);)
T(t_enc_size, outlen = 0; CK_RV rv = F->C_Encrypt(s_rw, data16, 16, NULL, &outlen);
  if (rv == CKR_OK && outlen != 16) return check_fail("%s %lu", "len", outlen); return rv;)
T(t_enc_small, CK_ULONG l = 4; CK_RV rv = F->C_Encrypt(s_rw, data16, 16, out, &l);
  if (rv == CKR_BUFFER_TOO_SMALL && l != 16) return check_fail("%s %lu", "needed len", l); return rv;)
T(t_enc_full, outlen = sizeof out; CK_RV rv = F->C_Encrypt(s_rw, data16, 16, out, &outlen);
  if (rv == CKR_OK && outlen != 16) return check_fail("%s %lu", "len", outlen); return rv;)
T(t_enc_after_done, return finish_enc();)
T(t_enc_nulllen, CK_RV rv = F->C_EncryptInit(s_rw, &m_ecb, k_aes); if (rv) return rv;
  return F->C_Encrypt(s_rw, data16, 16, out, NULL);)
/* "A call to C_Encrypt always terminates the active encryption operation
 * unless it returns CKR_BUFFER_TOO_SMALL or is a successful call ... to
 * determine the length of the buffer needed" */
T(t_enc_after_fail, CK_RV rv = F->C_EncryptInit(s_rw, &m_ecb, k_aes); finish_enc(); return rv;)
/* PKCS#11 3.0+: C_EncryptInit with a NULL mechanism cancels the operation */
T(t_enc_cancel, CK_RV rv = F->C_EncryptInit(s_rw, &m_ecb, k_aes); if (rv) return rv;
  return F->C_EncryptInit(s_rw, NULL, 0);)
T(t_enc_after_cancel, CK_RV rv = F->C_EncryptInit(s_rw, &m_ecb, k_aes); finish_enc(); return rv;)
/* leave no operation behind whatever the module did */
T(t_enc_reset, CK_BYTE b[16]; CK_ULONG l = sizeof out; F->C_Encrypt(s_rw, data16, 16, out, &l);
  F->C_Encrypt(s_rw, data16, 16, out, &l); (void)b; CK_RV rv = F->C_EncryptInit(s_rw, &m_ecb, k_aes);
  finish_enc(); return rv;)
T(t_enc_badlen, CK_RV rv = F->C_EncryptInit(s_rw, &m_ecb, k_aes); if (rv) return rv;
  CK_ULONG l = sizeof out; return F->C_Encrypt(s_rw, data16, 15, out, &l);)
T(t_dec_badlen, CK_RV rv = F->C_DecryptInit(s_rw, &m_ecb, k_aes); if (rv) return rv;
  CK_ULONG l = sizeof out; return F->C_Decrypt(s_rw, data16, 15, out, &l);)
T(t_dec_roundtrip, CK_RV rv = F->C_DecryptInit(s_rw, &m_ecb, k_aes); if (rv) return rv;
  CK_ULONG l = sizeof out2; rv = F->C_Decrypt(s_rw, out, outlen, out2, &l); if (rv) return rv;
  if (l != 16 || memcmp(out2, data16, 16)) return check_fail("%s %lu", "roundtrip mismatch, len", l); return rv;)
T(t_decinit_again, CK_RV rv = F->C_DecryptInit(s_rw, &m_ecb, k_aes); if (rv) return rv;
  rv = F->C_DecryptInit(s_rw, &m_ecb, k_aes); { CK_ULONG l = sizeof out2; F->C_Decrypt(s_rw, out, 16, out2, &l); } return rv;)
/* The order of the checks of an init: session, active operation, then the mechanism's
 * parameter (as SoftHSMv2, and as the framework's slot 0, which passes the parameter on
 * unread). */
static CK_MECHANISM m_ctr_short = { CKM_AES_CTR, iv, 3 }; /* not a CK_AES_CTR_PARAMS */
static CK_MECHANISM m_hmac_short = { CKM_SHA256_HMAC_GENERAL, iv, 3 }; /* not a CK_ULONG */
T(t_init_order_bad_param, return F->C_EncryptInit(s_rw, &m_ctr_short, k_aes);)
T(t_init_order_session, return F->C_EncryptInit(s_closed, &m_ctr_short, k_aes);)
T(t_init_order_active, CK_RV rv = F->C_DecryptInit(s_rw, &m_ecb, k_aes); if (rv) return rv;
  rv = F->C_DecryptInit(s_rw, &m_ctr_short, k_aes); { CK_ULONG l = sizeof out2; F->C_Decrypt(s_rw, out, 16, out2, &l); } return rv;)
T(t_init_order_sign, CK_RV rv = F->C_SignInit(s_rw, &m_hmac, k_hmac2); if (rv) return rv;
  rv = F->C_SignInit(s_rw, &m_hmac_short, k_hmac2); { CK_ULONG l = sizeof out2; F->C_Sign(s_rw, data16, 16, out2, &l); } return rv;)
/* CBC_PAD multi-part with too small final buffer, then finishing */
T(t_cbc_update, CK_RV rv = F->C_EncryptInit(s_rw, &m_cbcpad, k_aes); if (rv) return rv;
  CK_ULONG l = sizeof out; return F->C_EncryptUpdate(s_rw, data16, 10, out, &l);)
T(t_cbc_final_small, CK_ULONG l = 1; CK_RV rv = F->C_EncryptFinal(s_rw, out, &l);
  if (rv == CKR_BUFFER_TOO_SMALL && l != 16) return check_fail("%s %lu", "needed len", l); return rv;)
T(t_cbc_final_ok, CK_ULONG l = sizeof out; CK_RV rv = F->C_EncryptFinal(s_rw, out, &l);
  if (rv == CKR_OK && l != 16) return check_fail("%s %lu", "len", l); return rv;)

T(t_digestinit_ok, return F->C_DigestInit(s_rw, &m_sha);)
T(t_digestinit_again, return F->C_DigestInit(s_rw, &m_sha);)
T(t_digest_size, outlen = 0; CK_RV rv = F->C_Digest(s_rw, data16, 16, NULL, &outlen);
  if (rv == CKR_OK && outlen != 32) return check_fail("%s %lu", "len", outlen); return rv;)
T(t_digest_small, CK_ULONG l = 31; CK_RV rv = F->C_Digest(s_rw, data16, 16, out, &l);
  if (rv == CKR_BUFFER_TOO_SMALL && l != 32) return check_fail("%s %lu", "needed len", l); return rv;)
T(t_digest_full, CK_ULONG l = sizeof out; CK_RV rv = F->C_Digest(s_rw, data16, 16, out, &l);
  if (rv == CKR_OK && l != 32) return check_fail("%s %lu", "len", l); return rv;)
T(t_digest_update_after_single, CK_RV rv = F->C_DigestInit(s_rw, &m_sha); if (rv) return rv;
  rv = F->C_DigestUpdate(s_rw, data16, 16); if (rv) return rv; CK_ULONG l = sizeof out;
  /* C_Digest after C_DigestUpdate is an operation-state error */
  rv = F->C_Digest(s_rw, data16, 16, out, &l); { CK_ULONG l2 = sizeof out; F->C_DigestFinal(s_rw, out, &l2); } return rv;)
T(t_digest_final_small, CK_RV rv = F->C_DigestInit(s_rw, &m_sha); if (rv) return rv;
  rv = F->C_DigestUpdate(s_rw, data16, 16); if (rv) return rv; CK_ULONG l = 8;
  rv = F->C_DigestFinal(s_rw, out, &l); if (rv != CKR_BUFFER_TOO_SMALL) return rv;
  if (l != 32) return check_fail("%s %lu", "needed len", l);
  l = sizeof out; rv = F->C_DigestFinal(s_rw, out, &l); return rv == CKR_OK ? CKR_BUFFER_TOO_SMALL : rv;)
T(t_digest_nullmech, return F->C_DigestInit(s_rw, NULL);)
T(t_digest_unknown, return F->C_DigestInit(s_rw, &m_unknown);)
T(t_digest_aesmech, return F->C_DigestInit(s_rw, &m_ecb);)

T(t_sign_ok_size, CK_RV rv = F->C_SignInit(s_rw, &m_hmac, k_hmac2); if (rv) return rv; outlen = 0;
  rv = F->C_Sign(s_rw, data16, 16, NULL, &outlen); if (rv == CKR_OK && outlen != 32)
  return check_fail("%s %lu", "len", outlen); return rv;)
T(t_sign_small, CK_ULONG l = 16; CK_RV rv = F->C_Sign(s_rw, data16, 16, out, &l);
  if (rv == CKR_BUFFER_TOO_SMALL && l != 32) return check_fail("%s %lu", "needed len", l); return rv;)
T(t_sign_full, outlen = sizeof out; return F->C_Sign(s_rw, data16, 16, out, &outlen);)
T(t_verify_ok, CK_RV rv = F->C_VerifyInit(s_rw, &m_hmac, k_hmac2); if (rv) return rv;
  return F->C_Verify(s_rw, data16, 16, out, outlen);)
T(t_verify_bad, CK_RV rv = F->C_VerifyInit(s_rw, &m_hmac, k_hmac2); if (rv) return rv;
  memcpy(out2, out, 32); out2[0] ^= 1; return F->C_Verify(s_rw, data16, 16, out2, 32);)
/* a truncated HMAC: CKR_SIGNATURE_LEN_RANGE is the precise code; some
 * modules only say CKR_SIGNATURE_INVALID, which the spec also permits */
T(t_verify_shortsig, CK_RV rv = F->C_VerifyInit(s_rw, &m_hmac, k_hmac2); if (rv) return rv;
  return F->C_Verify(s_rw, data16, 16, out, 5);)
T(t_signinit_again, CK_RV rv = F->C_SignInit(s_rw, &m_hmac, k_hmac2); if (rv) return rv;
  rv = F->C_SignInit(s_rw, &m_hmac, k_hmac2); { CK_ULONG l = sizeof out2; F->C_Sign(s_rw, data16, 16, out2, &l); } return rv;)

T(t_find_init, return F->C_FindObjectsInit(s_rw, NULL, 0);)
T(t_find_init_again, return F->C_FindObjectsInit(s_rw, NULL, 0);)
T(t_find_nullout, CK_ULONG n; return F->C_FindObjects(s_rw, NULL, 4, &n);)
T(t_find_nullcount, CK_OBJECT_HANDLE o[4]; return F->C_FindObjects(s_rw, o, 4, NULL);)
T(t_find_ok, CK_OBJECT_HANDLE o[64]; CK_ULONG n = 0; CK_RV rv = F->C_FindObjects(s_rw, o, 64, &n);
  if (rv == CKR_OK && n < 5) return check_fail("%s %lu", "found", n); return rv;)
T(t_find_final, return F->C_FindObjectsFinal(s_rw);)
T(t_find_final_again, return F->C_FindObjectsFinal(s_rw);)
T(t_find_badtmpl, return F->C_FindObjectsInit(s_rw, NULL, 2);)

/* ---- mechanism parameters ---- */
static CK_RV encinit(CK_MECHANISM *m, CK_OBJECT_HANDLE k)
{
    CK_RV rv = F->C_EncryptInit(s_rw, m, k);
    if (rv == CKR_OK) { CK_ULONG l = sizeof out; F->C_EncryptFinal(s_rw, out, &l); F->C_EncryptInit(s_rw, NULL, 0); }
    return rv;
}
static CK_BYTE gcm_iv[12];
T(t_gcm_short, CK_GCM_PARAMS g = { gcm_iv, 12, 96, NULL, 0, 128 }; CK_MECHANISM m = { CKM_AES_GCM, &g, sizeof g - 1 };
  return encinit(&m, k_aes);)
T(t_gcm_long, struct { CK_GCM_PARAMS g; CK_ULONG pad; } p = { { gcm_iv, 12, 96, NULL, 0, 128 }, 0 };
  CK_MECHANISM m = { CKM_AES_GCM, &p, sizeof p }; return encinit(&m, k_aes);)
T(t_gcm_null, CK_MECHANISM m = { CKM_AES_GCM, NULL, 0 }; return encinit(&m, k_aes);)
T(t_gcm_nullptr_len, CK_MECHANISM m = { CKM_AES_GCM, NULL, sizeof(CK_GCM_PARAMS) }; return encinit(&m, k_aes);)
T(t_gcm_tag129, CK_GCM_PARAMS g = { gcm_iv, 12, 96, NULL, 0, 129 }; CK_MECHANISM m = { CKM_AES_GCM, &g, sizeof g };
  return encinit(&m, k_aes);)
T(t_gcm_iv0, CK_GCM_PARAMS g = { gcm_iv, 0, 0, NULL, 0, 128 }; CK_MECHANISM m = { CKM_AES_GCM, &g, sizeof g };
  return encinit(&m, k_aes);)
T(t_gcm_ok, CK_GCM_PARAMS g = { gcm_iv, 12, 96, NULL, 0, 128 }; CK_MECHANISM m = { CKM_AES_GCM, &g, sizeof g };
  CK_RV rv = F->C_EncryptInit(s_rw, &m, k_aes); if (rv) return rv; outlen = sizeof out;
  rv = F->C_Encrypt(s_rw, data16, 16, out, &outlen); if (rv == CKR_OK && outlen != 32)
  return check_fail("%s %lu", "len", outlen); return rv;)
/* a corrupted tag: PKCS#11 3.0+ says CKR_AEAD_DECRYPT_FAILED; older
 * modules report CKR_ENCRYPTED_DATA_INVALID */
T(t_gcm_badtag, CK_GCM_PARAMS g = { gcm_iv, 12, 96, NULL, 0, 128 }; CK_MECHANISM m = { CKM_AES_GCM, &g, sizeof g };
  CK_RV rv = F->C_DecryptInit(s_rw, &m, k_aes); if (rv) return rv; out[outlen - 1] ^= 1;
  CK_ULONG l = sizeof out2; return F->C_Decrypt(s_rw, out, outlen, out2, &l);)
T(t_cbc_iv8, CK_MECHANISM m = { CKM_AES_CBC_PAD, iv, 8 }; return encinit(&m, k_aes);)
T(t_cbc_noiv, CK_MECHANISM m = { CKM_AES_CBC_PAD, NULL, 0 }; return encinit(&m, k_aes);)
T(t_cbc_iv17, CK_BYTE b[17] = { 0 }; CK_MECHANISM m = { CKM_AES_CBC, b, 17 }; return encinit(&m, k_aes);)
T(t_cbc_nullptr_len, CK_MECHANISM m = { CKM_AES_CBC, NULL, 16 }; return encinit(&m, k_aes);)
T(t_enc_unknown, return encinit(&m_unknown, k_aes);)
T(t_enc_nullmech, return encinit(NULL, k_aes);)
T(t_enc_sha_mech, return encinit(&m_sha, k_aes);)
T(t_sign_unknown, return F->C_SignInit(s_rw, &m_unknown, k_hmac2);)

/* ---- key usage ---- */
T(t_use_enc_noenc, return encinit(&m_ecb, k_noenc);)
T(t_use_sign_noverify, return F->C_VerifyInit(s_rw, &m_hmac, k_hmac);)
T(t_use_sign_aes_nosign, CK_MECHANISM m = { CKM_AES_CMAC, NULL, 0 }; return F->C_SignInit(s_rw, &m, k_aes);)
T(t_use_hmac_enc, return encinit(&m_ecb, k_hmac);)
T(t_use_aes_hmac, return F->C_SignInit(s_rw, &m_hmac, k_aes);)
T(t_use_dec_ok, CK_RV rv = F->C_DecryptInit(s_rw, &m_ecb, k_noenc); if (rv) return rv;
  CK_ULONG l = sizeof out2; return F->C_Decrypt(s_rw, data16, 16, out2, &l);)

/* ---- RO session writes while logged in ---- */
T(t_ro_create_tok, CK_ATTRIBUTE a[] = { AESBASE, A(CKA_TOKEN, T) }; CK_OBJECT_HANDLE h;
  return F->C_CreateObject(s_ro, a, 4, &h);)
T(t_ro_gen_tok, CK_ATTRIBUTE a[] = { A(CKA_VALUE_LEN, len16), A(CKA_TOKEN, T) }; CK_OBJECT_HANDLE h;
  return F->C_GenerateKey(s_ro, &m_gen, a, 2, &h);)
T(t_ro_copy_tok, CK_ATTRIBUTE a[] = { A(CKA_TOKEN, T) }; CK_OBJECT_HANDLE h; return F->C_CopyObject(s_ro, k_aes, a, 1, &h);)
T(t_ro_set_tok, CK_ATTRIBUTE a[] = { { CKA_LABEL, (void *)"x", 1 } }; return F->C_SetAttributeValue(s_ro, k_tok, a, 1);)
T(t_ro_destroy_tok, return F->C_DestroyObject(s_ro, k_tok);)
T(t_ro_unwrap_tok, CK_ATTRIBUTE a[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_TOKEN, T) };
  CK_OBJECT_HANDLE h; CK_BYTE w[64]; CK_ULONG wl = sizeof w;
  CK_RV rv = F->C_WrapKey(s_rw, &m_cbcpad, k_wrapper, k_aes, w, &wl); if (rv) return rv;
  return F->C_UnwrapKey(s_ro, &m_cbcpad, k_wrapper, w, wl, a, 3, &h);)
T(t_ro_create_session_ok, CK_ATTRIBUTE a[] = { AESBASE }; CK_OBJECT_HANDLE h; return F->C_CreateObject(s_ro, a, 3, &h);)

/* ---- misc ---- */
T(t_rand_null, return F->C_GenerateRandom(s_rw, NULL, 16);)
T(t_rand_ok, return F->C_GenerateRandom(s_rw, out, 64);)
/* seeding may be unsupported (CKR_RANDOM_SEED_NOT_SUPPORTED); a NULL seed
 * of non-zero length is CKR_ARGUMENTS_BAD either way if checked first */
T(t_seed_null, return F->C_SeedRandom(s_rw, NULL, 16);)
T(t_logout_ok, return F->C_Logout(s_rw);)
T(t_logout_again, return F->C_Logout(s_ro);)
T(t_priv_after_logout, CK_ULONG l = sizeof(CK_ULONG); return getattr1(k_aes, CKA_KEY_TYPE, out, &l);)
T(t_closeall0, return F->C_CloseAllSessions(SLOT0);)
T(t_closed_by_all, CK_SESSION_INFO i; return F->C_GetSessionInfo(s_rw, &i);)

/* ---- slot 1: C_InitToken, then PIN lockout ---- */
static CK_RV s1_flags(CK_FLAGS must, CK_FLAGS mustnot)
{
    CK_TOKEN_INFO ti;
    CK_RV rv = F->C_GetTokenInfo(SLOT1, &ti);
    if (rv) return rv;
    if ((ti.flags & must) != must || (ti.flags & mustnot))
        return check_fail("%s 0x%lx", "token flags", ti.flags);
    return CKR_OK;
}
T(t_s1_uninit, return s1_flags(0, CKF_TOKEN_INITIALIZED);)
T(t_s1_inittoken, CK_UTF8CHAR l[32]; memset(l, ' ', 32); memcpy(l, "lockout", 7);
  return F->C_InitToken(SLOT1, so_pin, PINLEN(so_pin), l);)
T(t_s1_inittoken_shortpin, CK_UTF8CHAR l[32]; memset(l, ' ', 32); memcpy(l, "lockout", 7);
  return F->C_InitToken(SLOT1, (CK_UTF8CHAR *)"abc", 3, l);)
/* after C_InitToken on the empty slot, a new empty slot follows it, even after a refused try */
T(t_s1_next_empty, CK_TOKEN_INFO ti; CK_RV rv = F->C_GetTokenInfo(SLOT1 + 1, &ti); if (rv) return rv;
  if (ti.flags & CKF_TOKEN_INITIALIZED) return check_fail("%s 0x%lx", "slot 2 flags", ti.flags);
  return CKR_OK;)
T(t_s1_initialized, return s1_flags(CKF_TOKEN_INITIALIZED, CKF_USER_PIN_INITIALIZED);)
T(t_s1_open, return F->C_OpenSession(SLOT1, CKF_SERIAL_SESSION | CKF_RW_SESSION, NULL, NULL, &s1);)
T(t_s1_inittoken_busy, CK_UTF8CHAR l[32]; memset(l, ' ', 32);
  return F->C_InitToken(SLOT1, so_pin, PINLEN(so_pin), l);)
T(t_s1_login_nouserpin, return F->C_Login(s1, CKU_USER, s1_user_pin, PINLEN(s1_user_pin));)
T(t_s1_initpin_nologin, return F->C_InitPIN(s1, s1_user_pin, PINLEN(s1_user_pin));)
T(t_s1_so_login, return F->C_Login(s1, CKU_SO, so_pin, PINLEN(so_pin));)
T(t_s1_initpin, return F->C_InitPIN(s1, s1_user_pin, PINLEN(s1_user_pin));)
T(t_s1_initpin_null, return F->C_InitPIN(s1, NULL, 8);)
T(t_s1_so_logout, return F->C_Logout(s1);)
T(t_s1_userpin_set, return s1_flags(CKF_USER_PIN_INITIALIZED, CKF_USER_PIN_LOCKED | CKF_USER_PIN_COUNT_LOW);)
T(t_s1_wrong, return F->C_Login(s1, CKU_USER, wrong_pin, PINLEN(wrong_pin));)
T(t_s1_countlow, return s1_flags(CKF_USER_PIN_COUNT_LOW, CKF_USER_PIN_FINAL_TRY | CKF_USER_PIN_LOCKED);)
T(t_s1_finaltry, return s1_flags(CKF_USER_PIN_FINAL_TRY, CKF_USER_PIN_LOCKED);)
T(t_s1_locked, return s1_flags(CKF_USER_PIN_LOCKED, 0);)
T(t_s1_right_refused, return F->C_Login(s1, CKU_USER, s1_user_pin, PINLEN(s1_user_pin));)
T(t_s1_so_still_ok, CK_RV rv = F->C_Login(s1, CKU_SO, so_pin, PINLEN(so_pin)); if (rv) return rv; return F->C_Logout(s1);)

/* ---- the accelerator provider (--accel) ---- */
static CK_MECHANISM m_kw = { CKM_AES_KEY_WRAP, NULL, 0 };
static CK_MECHANISM m_rsa_pkcs = { CKM_RSA_PKCS, NULL, 0 };
static CK_BYTE wrapped24[24] = "twenty-four wrapped byte";
/* the unwrapping mechanisms are always there (the framework moves keys in with them) */
T(t_acc_mechlist_full, CK_MECHANISM_TYPE l[512]; CK_ULONG n = 512, i; CK_RV rv = F->C_GetMechanismList(SLOT0, l, &n);
  if (rv != CKR_OK) return rv; for (i = 0; i < n; i++) if (l[i] == CKM_AES_KEY_WRAP_KWP) return CKR_OK;
  return check_fail("%s %lu", "CKM_AES_KEY_WRAP_KWP missing; count", n);)
T(t_acc_login_so, return F->C_Login(s_rw, CKU_SO, so_pin, PINLEN(so_pin));)
/* a secret value is never returned, whatever CKA_SENSITIVE says; the length is then
 * CK_UNAVAILABLE_INFORMATION */
T(t_acc_value_hidden, CK_ULONG l = sizeof out; CK_RV rv = getattr1(k_aes, CKA_VALUE, out, &l);
  if (rv == CKR_ATTRIBUTE_SENSITIVE && l != CK_UNAVAILABLE_INFORMATION) return check_fail("%s %lu", "len", l); return rv;)
T(t_acc_unwrap_nounwrap, CK_ATTRIBUTE a[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes) }; CK_OBJECT_HANDLE h;
  return F->C_UnwrapKey(s_rw, &m_kw, k_aes, wrapped24, sizeof wrapped24, a, 2, &h);)
T(t_acc_unwrap_badhandle, CK_ATTRIBUTE a[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes) }; CK_OBJECT_HANDLE h;
  return F->C_UnwrapKey(s_rw, &m_kw, DEAD, wrapped24, sizeof wrapped24, a, 2, &h);)
T(t_acc_unwrap_nullout, CK_ATTRIBUTE a[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes) };
  return F->C_UnwrapKey(s_rw, &m_kw, k_aes, wrapped24, sizeof wrapped24, a, 2, NULL);)
T(t_acc_signinit_bad, return F->C_SignInit(s_rw, &m_rsa_pkcs, DEAD);)
T(t_acc_signinit_aes, return F->C_SignInit(s_rw, &m_rsa_pkcs, k_aes);)
T(t_acc_sign_unknown, return F->C_SignInit(s_rw, &m_unknown, k_aes);)
T(t_acc_sign_hmac, return F->C_SignInit(s_rw, &m_hmac, k_aes);)
T(t_acc_dec_unknown, return F->C_DecryptInit(s_rw, &m_unknown, k_aes);)
/* an init of an operation the provider does not offer answers so whatever its arguments: a
 * NULL mechanism (which would end the operation) too */
T(t_acc_digest_nullmech, return F->C_DigestInit(s_rw, NULL);)
T(t_acc_verify_nullmech, return F->C_VerifyInit(s_rw, NULL, k_aes);)
/* the two keys made above; none of the refused templates left an object behind */
T(t_acc_find_ok, CK_OBJECT_HANDLE o[64]; CK_ULONG n = 0; CK_RV rv = F->C_FindObjects(s_rw, o, 64, &n);
  if (rv == CKR_OK && n != 2) return check_fail("%s %lu", "found", n); return rv;)

#define R(...) .want = { __VA_ARGS__ }, .nwant = (int)(sizeof((CK_RV[]){ __VA_ARGS__ }) / sizeof(CK_RV))
#define C(nm, f, ...) { .name = nm, .fn = f, R(__VA_ARGS__) }
/* a row that runs only where slot 0 offers mechanism `mech` */
#define CN(nm, mech, f, ...) { .name = nm, .fn = f, .need = mech, R(__VA_ARGS__) }
#define PRE(n) { .name = "before C_Initialize: C_" #n, .fn = t_op, .op = OP_##n, .sel = H_RW, \
                 R(CKR_CRYPTOKI_NOT_INITIALIZED) },
#define AFTER(n) { .name = "after C_Finalize: C_" #n, .fn = t_op, .op = OP_##n, .sel = H_RW, \
                   R(CKR_CRYPTOKI_NOT_INITIALIZED) },
#define BADS(n) \
    { .name = "session 0: C_" #n, .fn = t_op, .op = OP_##n, .sel = H_ZERO, R(CKR_SESSION_HANDLE_INVALID) }, \
    { .name = "session 0xdeadbeef: C_" #n, .fn = t_op, .op = OP_##n, .sel = H_DEAD, R(CKR_SESSION_HANDLE_INVALID) }, \
    { .name = "closed session: C_" #n, .fn = t_op, .op = OP_##n, .sel = H_CLOSED, R(CKR_SESSION_HANDLE_INVALID) },
#define BADS_OPT(n) \
    { .name = "session 0: C_" #n, .fn = t_op, .op = OP_##n, .sel = H_ZERO, \
      R(CKR_SESSION_HANDLE_INVALID, CKR_FUNCTION_NOT_SUPPORTED, CKR_FUNCTION_NOT_PARALLEL) }, \
    { .name = "session 0xdeadbeef: C_" #n, .fn = t_op, .op = OP_##n, .sel = H_DEAD, \
      R(CKR_SESSION_HANDLE_INVALID, CKR_FUNCTION_NOT_SUPPORTED, CKR_FUNCTION_NOT_PARALLEL) },
#define NOTINIT_OPS(X) X(Encrypt) X(EncryptUpdate) X(EncryptFinal) X(Decrypt) X(DecryptUpdate) \
    X(DecryptFinal) X(Digest) X(DigestUpdate) X(DigestFinal) X(DigestKey) X(Sign) X(SignUpdate) \
    X(SignFinal) X(Verify) X(VerifyUpdate) X(VerifyFinal) X(FindObjects) X(FindObjectsFinal)
#define NOTINIT(n) { .name = "no init: C_" #n, .fn = t_op, .op = OP_##n, .sel = H_RW, \
                     R(CKR_OPERATION_NOT_INITIALIZED) },
#define BADOBJ_ROWS(sfx, what) \
    C("bad object " what ": C_GetAttributeValue", t_getattr_bad##sfx, CKR_OBJECT_HANDLE_INVALID), \
    C("bad object " what ": C_SetAttributeValue", t_setattr_bad##sfx, CKR_OBJECT_HANDLE_INVALID), \
    C("bad object " what ": C_DestroyObject", t_destroy_bad##sfx, CKR_OBJECT_HANDLE_INVALID), \
    C("bad object " what ": C_GetObjectSize", t_size_bad##sfx, CKR_OBJECT_HANDLE_INVALID), \
    C("bad object " what ": C_CopyObject", t_copy_bad##sfx, CKR_OBJECT_HANDLE_INVALID), \
    C("bad key " what ": C_EncryptInit", t_encinit_bad##sfx, CKR_KEY_HANDLE_INVALID), \
    C("bad key " what ": C_DecryptInit", t_decinit_bad##sfx, CKR_KEY_HANDLE_INVALID), \
    C("bad key " what ": C_SignInit", t_signinit_bad##sfx, CKR_KEY_HANDLE_INVALID), \
    C("bad key " what ": C_VerifyInit", t_verinit_bad##sfx, CKR_KEY_HANDLE_INVALID), \
    C("bad key " what ": C_WrapKey hKey", t_wrap_badkey##sfx, CKR_KEY_HANDLE_INVALID), \
    C("bad key " what ": C_WrapKey hWrappingKey", t_wrap_badwrapper##sfx, CKR_WRAPPING_KEY_HANDLE_INVALID),

/* C_Initialize arguments, then initialisation */
#define ROWS_INIT_ARGS \
    C("C_Initialize pReserved non-NULL", t_init_reserved, CKR_ARGUMENTS_BAD), \
    C("C_Initialize pReserved non-NULL + OS_LOCKING_OK", t_init_reserved_oslock, CKR_ARGUMENTS_BAD), \
    C("C_Initialize only CreateMutex", t_init_partial1, CKR_ARGUMENTS_BAD), \
    C("C_Initialize 3 of 4 mutex fns", t_init_partial3, CKR_ARGUMENTS_BAD), \
    C("C_Initialize OS_LOCKING_OK + only UnlockMutex", t_init_partial_os, CKR_ARGUMENTS_BAD), \
    C("C_Initialize mutex fns without OS_LOCKING_OK", t_init_mutex_nolock, CKR_CANT_LOCK), \
    C("C_GetFunctionList(NULL)", t_getfl_null, CKR_ARGUMENTS_BAD), \
    C("C_Initialize(NULL)", t_init_ok, CKR_OK), \
    C("C_Initialize twice", t_init_again_null, CKR_CRYPTOKI_ALREADY_INITIALIZED), \
    C("C_Initialize twice with args", t_init_again_args, CKR_CRYPTOKI_ALREADY_INITIALIZED), \
    C("C_Finalize pReserved non-NULL", t_finalize_reserved, CKR_ARGUMENTS_BAD),

/* slot IDs that do not exist */
#define ROWS_BAD_SLOTS \
    C("C_GetSlotInfo bad slot", t_slotinfo_bad, CKR_SLOT_ID_INVALID), \
    C("C_GetSlotInfo slot 0xdeadbeef", t_slotinfo_deadbeef, CKR_SLOT_ID_INVALID), \
    C("C_GetTokenInfo bad slot", t_tokinfo_bad, CKR_SLOT_ID_INVALID), \
    C("C_GetMechanismList bad slot", t_mechlist_bad, CKR_SLOT_ID_INVALID), \
    C("C_GetMechanismInfo bad slot", t_mechinfo_bad, CKR_SLOT_ID_INVALID), \
    C("C_OpenSession bad slot", t_open_bad, CKR_SLOT_ID_INVALID), \
    C("C_CloseAllSessions bad slot", t_closeall_bad, CKR_SLOT_ID_INVALID),

/* NULL out-pointers */
#define ROWS_NULL_OUT \
    C("C_GetInfo(NULL)", t_getinfo_null, CKR_ARGUMENTS_BAD), \
    C("C_GetSlotList NULL count", t_slotlist_null, CKR_ARGUMENTS_BAD), \
    C("C_GetSlotInfo NULL info", t_slotinfo_null, CKR_ARGUMENTS_BAD), \
    C("C_GetTokenInfo NULL info", t_tokinfo_null, CKR_ARGUMENTS_BAD), \
    C("C_GetMechanismList NULL count", t_mechlist_null, CKR_ARGUMENTS_BAD), \
    C("C_GetMechanismInfo NULL info", t_mechinfo_null, CKR_ARGUMENTS_BAD), \
    C("C_OpenSession NULL phSession", t_open_null, CKR_ARGUMENTS_BAD), \
    C("C_OpenSession without CKF_SERIAL_SESSION", t_open_noserial, CKR_SESSION_PARALLEL_NOT_SUPPORTED),

/* sessions s_ro, s_rw and s_closed */
#define ROWS_SESSIONS \
    C("open RO session", t_open_ro, CKR_OK), \
    C("open RW session", t_open_rw, CKR_OK), \
    C("open + close a session", t_open_closed, CKR_OK), \
    C("C_GetSessionInfo NULL info", t_sessinfo_null, CKR_ARGUMENTS_BAD), \
    C("C_GetSessionInfo RO public", t_sessinfo_ro, CKR_OK),

/* templates C_CreateObject refuses (PKCS#11 3.2 §4) */
#define ROWS_CREATE_TEMPLATES \
    C("C_CreateObject CKA_LOCAL", t_cr_local, CKR_ATTRIBUTE_READ_ONLY), \
    C("C_CreateObject CKA_ALWAYS_SENSITIVE", t_cr_alwayssens, CKR_ATTRIBUTE_READ_ONLY), \
    C("C_CreateObject CKA_NEVER_EXTRACTABLE", t_cr_neverext, CKR_ATTRIBUTE_READ_ONLY), \
    C("C_CreateObject CKA_KEY_GEN_MECHANISM", t_cr_kgm, CKR_ATTRIBUTE_READ_ONLY), \
    C("C_CreateObject CKA_UNIQUE_ID", t_cr_uid, CKR_ATTRIBUTE_READ_ONLY), \
    C("C_CreateObject CKA_MODULUS on secret key", t_cr_modulus, CKR_ATTRIBUTE_TYPE_INVALID), \
    C("C_CreateObject CKA_EC_PARAMS on secret key", t_cr_ecparams, CKR_ATTRIBUTE_TYPE_INVALID), \
    C("C_CreateObject unassigned attribute type", t_cr_vendor_attr, CKR_ATTRIBUTE_TYPE_INVALID), \
    C("C_CreateObject CK_BBOOL given as CK_ULONG", t_cr_bool_ulong, CKR_ATTRIBUTE_VALUE_INVALID), \
    C("C_CreateObject CKA_CLASS of 1 byte", t_cr_class_1byte, CKR_ATTRIBUTE_VALUE_INVALID), \
    C("C_CreateObject CKA_KEY_TYPE of 2 bytes", t_cr_keytype_2byte, CKR_ATTRIBUTE_VALUE_INVALID), \
    C("C_CreateObject CKA_ENCRYPT true and false", t_cr_dup_encrypt, CKR_TEMPLATE_INCONSISTENT), \
    C("C_CreateObject CKA_KEY_TYPE AES and generic", t_cr_dup_keytype, CKR_TEMPLATE_INCONSISTENT), \
    C("C_CreateObject AES without CKA_VALUE", t_cr_novalue, CKR_TEMPLATE_INCOMPLETE), \
    C("C_CreateObject without CKA_CLASS", t_cr_noclass, CKR_TEMPLATE_INCOMPLETE), \
    C("C_CreateObject bogus CKA_CLASS", t_cr_badclass, CKR_ATTRIBUTE_VALUE_INVALID), \
    C("C_CreateObject 7-byte AES key", t_cr_shortaes, CKR_ATTRIBUTE_VALUE_INVALID, CKR_KEY_SIZE_RANGE), \
    C("C_CreateObject NULL template, count 3", t_cr_nulltmpl, CKR_ARGUMENTS_BAD), \
    C("C_CreateObject NULL phObject", t_cr_nullout, CKR_ARGUMENTS_BAD),

/* a search: init and its argument checks */
#define ROWS_FIND_INIT \
    C("C_FindObjectsInit", t_find_init, CKR_OK), \
    C("C_FindObjectsInit twice", t_find_init_again, CKR_OPERATION_ACTIVE), \
    C("C_FindObjects NULL handles", t_find_nullout, CKR_ARGUMENTS_BAD), \
    C("C_FindObjects NULL count", t_find_nullcount, CKR_ARGUMENTS_BAD),

/* a search: its end */
#define ROWS_FIND_END \
    C("C_FindObjectsFinal", t_find_final, CKR_OK), \
    C("C_FindObjectsFinal twice", t_find_final_again, CKR_OPERATION_NOT_INITIALIZED), \
    C("C_FindObjectsInit NULL template, count 2", t_find_badtmpl, CKR_ARGUMENTS_BAD),

/* AES-ECB: the two-call protocol, lengths, and the order of an init's checks */
#define ROWS_ECB \
    CN("C_EncryptInit", CKM_AES_ECB, t_encinit_ok, CKR_OK), \
    CN("C_EncryptInit twice", CKM_AES_ECB, t_encinit_again, CKR_OPERATION_ACTIVE), \
    CN("C_Encrypt size query", CKM_AES_ECB, t_enc_size, CKR_OK), \
    CN("C_Encrypt too small", CKM_AES_ECB, t_enc_small, CKR_BUFFER_TOO_SMALL), \
    CN("C_Encrypt after too small", CKM_AES_ECB, t_enc_full, CKR_OK), \
    CN("C_Encrypt after the operation ended", CKM_AES_ECB, t_enc_after_done, CKR_OPERATION_NOT_INITIALIZED), \
    CN("C_Encrypt NULL length", CKM_AES_ECB, t_enc_nulllen, CKR_ARGUMENTS_BAD), \
    CN("C_EncryptInit after a failed C_Encrypt", CKM_AES_ECB, t_enc_after_fail, CKR_OK), \
    CN("C_EncryptInit(NULL) cancels", CKM_AES_ECB, t_enc_cancel, CKR_OK), \
    CN("C_EncryptInit after cancel", CKM_AES_ECB, t_enc_after_cancel, CKR_OK), \
    CN("encrypt state reset (setup)", CKM_AES_ECB, t_enc_reset, CKR_OK), \
    CN("C_Encrypt ECB 15 bytes", CKM_AES_ECB, t_enc_badlen, CKR_DATA_LEN_RANGE), \
    CN("C_Decrypt ECB 15 bytes", CKM_AES_ECB, t_dec_badlen, CKR_ENCRYPTED_DATA_LEN_RANGE), \
    CN("C_Decrypt ECB round trip", CKM_AES_ECB, t_dec_roundtrip, CKR_OK), \
    CN("C_DecryptInit twice", CKM_AES_ECB, t_decinit_again, CKR_OPERATION_ACTIVE), \
    CN("init order: a bad parameter alone", CKM_AES_CTR, t_init_order_bad_param, CKR_MECHANISM_PARAM_INVALID), \
    C("init order: closed session before a bad parameter", t_init_order_session, CKR_SESSION_HANDLE_INVALID), \
    CN("init order: active operation before a bad parameter", CKM_AES_ECB, t_init_order_active, CKR_OPERATION_ACTIVE),

/* AES-GCM parameters */
#define ROWS_GCM \
    CN("AES-GCM params 1 byte short", CKM_AES_GCM, t_gcm_short, CKR_MECHANISM_PARAM_INVALID), \
    CN("AES-GCM params 8 bytes long", CKM_AES_GCM, t_gcm_long, CKR_MECHANISM_PARAM_INVALID), \
    CN("AES-GCM no params", CKM_AES_GCM, t_gcm_null, CKR_MECHANISM_PARAM_INVALID), \
    CN("AES-GCM NULL params with length", CKM_AES_GCM, t_gcm_nullptr_len, CKR_MECHANISM_PARAM_INVALID, CKR_ARGUMENTS_BAD), \
    CN("AES-GCM tag 129 bits", CKM_AES_GCM, t_gcm_tag129, CKR_MECHANISM_PARAM_INVALID), \
    CN("AES-GCM empty IV", CKM_AES_GCM, t_gcm_iv0, CKR_MECHANISM_PARAM_INVALID), \
    CN("AES-GCM encrypt", CKM_AES_GCM, t_gcm_ok, CKR_OK), \
    CN("AES-GCM decrypt with bad tag", CKM_AES_GCM, t_gcm_badtag, CKR_AEAD_DECRYPT_FAILED, CKR_ENCRYPTED_DATA_INVALID),

/* random numbers, then C_Logout */
#define ROWS_RANDOM_LOGOUT \
    C("C_GenerateRandom NULL buffer", t_rand_null, CKR_ARGUMENTS_BAD), \
    C("C_GenerateRandom", t_rand_ok, CKR_OK), \
    C("C_SeedRandom NULL seed", t_seed_null, CKR_ARGUMENTS_BAD, CKR_RANDOM_SEED_NOT_SUPPORTED), \
    C("C_Logout", t_logout_ok, CKR_OK), \
    C("C_Logout again", t_logout_again, CKR_USER_NOT_LOGGED_IN),

static const struct tcase cases[] = {
    /* every function before C_Initialize */
    OPS(PRE)
    C("C_Initialize CKF_LIBRARY_CANT_CREATE_OS_THREADS (none needed)", t_init_nothreads, CKR_OK),
    ROWS_INIT_ARGS
    /* slots */
    ROWS_BAD_SLOTS
    C("C_InitToken bad slot", t_inittoken_bad, CKR_SLOT_ID_INVALID),
    /* NULL out-pointers */
    ROWS_NULL_OUT
    C("C_InitToken NULL label", t_inittoken_nulllabel, CKR_ARGUMENTS_BAD),
    C("C_WaitForSlotEvent NULL pSlot", t_wait_null, CKR_ARGUMENTS_BAD, CKR_FUNCTION_NOT_SUPPORTED),
    C("C_GetMechanismInfo unknown mechanism", t_mechinfo_unknown, CKR_MECHANISM_INVALID),
    /* two-call protocol for lists */
    C("C_GetSlotList size query", t_slotlist_size, CKR_OK),
    C("C_GetSlotList too small", t_slotlist_small, CKR_BUFFER_TOO_SMALL),
    C("C_GetSlotList full", t_slotlist_full, CKR_OK),
    C("C_GetMechanismList size query", t_mechlist_size, CKR_OK),
    C("C_GetMechanismList too small", t_mechlist_small, CKR_BUFFER_TOO_SMALL),
    C("C_GetMechanismList full", t_mechlist_full, CKR_OK),
    /* sessions */
    ROWS_SESSIONS
    /* login and PIN */
    C("C_Logout not logged in", t_logout_notin, CKR_USER_NOT_LOGGED_IN),
    C("C_Login user type 5", t_login_badtype, CKR_USER_TYPE_INVALID),
    C("C_Login user type 0x80000001", t_login_badtype2, CKR_USER_TYPE_INVALID),
    C("C_Login wrong PIN", t_login_wrong, CKR_PIN_INCORRECT),
    C("token flags after a wrong PIN", t_tokinfo_countlow, CKR_OK),
    C("C_Login NULL PIN with length", t_login_nullpin, CKR_ARGUMENTS_BAD),
    C("C_Login SO with a RO session open", t_login_so_roexists, CKR_SESSION_READ_ONLY_EXISTS),
    C("private session object without login", t_create_priv_nologin, CKR_USER_NOT_LOGGED_IN),
    C("private token object without login", t_create_privtok_nologin, CKR_USER_NOT_LOGGED_IN),
    C("C_GenerateKey private without login", t_gen_priv_nologin, CKR_USER_NOT_LOGGED_IN),
    C("C_CreateObject token object in RO session", t_create_tok_ro, CKR_SESSION_READ_ONLY),
    C("C_GenerateKey token object in RO session", t_gen_tok_ro, CKR_SESSION_READ_ONLY),
    C("C_Login user (initial PIN)", t_login_user, CKR_OK),
    C("C_Login user again", t_login_user_again, CKR_USER_ALREADY_LOGGED_IN),
    C("C_Login SO while user logged in", t_login_so_while_user, CKR_USER_ANOTHER_ALREADY_LOGGED_IN,
      CKR_SESSION_READ_ONLY_EXISTS),
    C("C_CreateObject before PIN change", t_expired_create, CKR_PIN_EXPIRED),
    C("C_GenerateKey before PIN change", t_expired_gen, CKR_PIN_EXPIRED),
    C("C_FindObjectsInit before PIN change", t_expired_find, CKR_PIN_EXPIRED),
    C("C_SetPIN in RO session", t_setpin_ro, CKR_SESSION_READ_ONLY),
    C("C_SetPIN NULL old PIN", t_setpin_nullold, CKR_ARGUMENTS_BAD),
    C("C_SetPIN NULL new PIN", t_setpin_nullnew, CKR_ARGUMENTS_BAD),
    C("C_SetPIN wrong old PIN", t_setpin_wrongold, CKR_PIN_INCORRECT),
    C("C_SetPIN ok", t_setpin_ok, CKR_OK),
    C("token flags after PIN change", t_tokinfo_changed, CKR_OK),
    C("C_InitPIN as user", t_initpin_user, CKR_USER_NOT_LOGGED_IN),
    /* keys used by later cases */
    C("create AES key", t_mk_aes, CKR_OK),
    C("create AES key without CKA_ENCRYPT", t_mk_noenc, CKR_OK),
    C("create HMAC sign-only key", t_mk_hmac, CKR_OK),
    C("create HMAC key", t_mk_hmac2, CKR_OK),
    C("generate sensitive AES key", t_mk_sens, CKR_OK),
    C("generate wrapping key", t_mk_wrapper, CKR_OK),
    C("generate WRAP_WITH_TRUSTED key", t_mk_wwt, CKR_OK),
    C("create token AES key", t_mk_tok, CKR_OK),
    C("create + destroy a key", t_mk_destroyed, CKR_OK),
    /* templates */
    ROWS_CREATE_TEMPLATES
    C("C_GenerateKey CKA_LOCAL", t_gk_local, CKR_ATTRIBUTE_READ_ONLY),
    C("C_GenerateKey CKA_ALWAYS_SENSITIVE", t_gk_alwayssens, CKR_ATTRIBUTE_READ_ONLY),
    C("C_GenerateKey CKA_NEVER_EXTRACTABLE", t_gk_neverext, CKR_ATTRIBUTE_READ_ONLY),
    C("C_GenerateKey CKA_KEY_GEN_MECHANISM", t_gk_kgm, CKR_ATTRIBUTE_READ_ONLY),
    C("C_GenerateKey CKA_UNIQUE_ID", t_gk_uid, CKR_ATTRIBUTE_READ_ONLY),
    C("C_GenerateKey CKA_MODULUS_BITS", t_gk_modulus_bits, CKR_ATTRIBUTE_TYPE_INVALID),
    C("C_GenerateKey CKA_CERTIFICATE_TYPE", t_gk_certtype, CKR_ATTRIBUTE_TYPE_INVALID),
    C("C_GenerateKey CKA_VALUE_LEN of 1 byte", t_gk_valuelen_1byte, CKR_ATTRIBUTE_VALUE_INVALID),
    C("C_GenerateKey CKA_TOKEN as CK_ULONG", t_gk_token_ulong, CKR_ATTRIBUTE_VALUE_INVALID),
    C("C_GenerateKey CKA_SENSITIVE of 0 bytes", t_gk_sens_0len, CKR_ATTRIBUTE_VALUE_INVALID),
    C("C_GenerateKey CKA_VALUE_LEN 16 and 32", t_gk_dup_len, CKR_TEMPLATE_INCONSISTENT),
    C("C_GenerateKey CKA_DECRYPT false and true", t_gk_dup_sign, CKR_TEMPLATE_INCONSISTENT),
    C("C_GenerateKey AES without CKA_VALUE_LEN", t_gk_nolen, CKR_TEMPLATE_INCOMPLETE),
    /* 7 is not an AES key length: VALUE_INVALID or KEY_SIZE_RANGE (both in spec) */
    C("C_GenerateKey AES CKA_VALUE_LEN 7", t_gk_len7, CKR_ATTRIBUTE_VALUE_INVALID, CKR_KEY_SIZE_RANGE),
    C("C_GenerateKey AES mech with CKK_DES3", t_gk_des3_type, CKR_TEMPLATE_INCONSISTENT),
    C("C_GenerateKey with CKA_VALUE", t_gk_value, CKR_ATTRIBUTE_READ_ONLY, CKR_TEMPLATE_INCONSISTENT),
    C("C_GenerateKey NULL mechanism", t_gk_nullmech, CKR_ARGUMENTS_BAD),
    C("C_GenerateKey NULL phKey", t_gk_nullout, CKR_ARGUMENTS_BAD),
    C("C_GenerateKey unknown mechanism", t_gk_unknown, CKR_MECHANISM_INVALID),
    C("C_GenerateKey with CKM_AES_ECB", t_gk_wrongmech, CKR_MECHANISM_INVALID),
    /* bad session handles */
    SESSION_OPS(BADS)
    OPTIONAL_OPS(BADS_OPT)
    /* bad object / key handles */
    BADOBJ_ROWS(0, "0")
    BADOBJ_ROWS(D, "0xdeadbeef")
    BADOBJ_ROWS(X, "destroyed")
    C("bad key: C_DigestKey", t_digestkey_bad, CKR_KEY_HANDLE_INVALID),
    /* sensitive attributes */
    C("read CKA_VALUE of sensitive key", t_sens_value, CKR_ATTRIBUTE_SENSITIVE),
    C("size CKA_VALUE of sensitive key", t_sens_value_null, CKR_ATTRIBUTE_SENSITIVE),
    C("read CKA_VALUE + CKA_KEY_TYPE of sensitive key", t_sens_multi, CKR_ATTRIBUTE_SENSITIVE),
    C("ALWAYS_SENSITIVE/NEVER_EXTRACTABLE/LOCAL of generated key", t_sens_flags, CKR_OK),
    C("clear CKA_SENSITIVE", t_sens_clear, CKR_ATTRIBUTE_READ_ONLY),
    C("set CKA_EXTRACTABLE true", t_sens_extractable, CKR_ATTRIBUTE_READ_ONLY),
    C("C_CopyObject CKA_EXTRACTABLE true", t_sens_copy_extractable, CKR_ATTRIBUTE_READ_ONLY),
    C("C_CopyObject CKA_SENSITIVE false", t_sens_copy_clear, CKR_ATTRIBUTE_READ_ONLY),
    C("size CKA_VALUE of plain key", t_plain_value, CKR_OK),
    C("read CKA_VALUE into 4 bytes", t_plain_value_small, CKR_BUFFER_TOO_SMALL),
    C("read CKA_MODULUS of secret key", t_getattr_invalid, CKR_ATTRIBUTE_TYPE_INVALID),
    C("C_GetAttributeValue NULL template", t_getattr_nulltmpl, CKR_ARGUMENTS_BAD),
    C("set CKA_SENSITIVE true", t_set_sensitive_true, CKR_OK),
    C("set CKA_EXTRACTABLE false", t_set_extractable_false, CKR_OK),
    C("set CKA_CLASS", t_set_class, CKR_ATTRIBUTE_READ_ONLY),
    C("set CKA_KEY_TYPE", t_set_keytype, CKR_ATTRIBUTE_READ_ONLY),
    C("set CKA_LOCAL", t_set_local, CKR_ATTRIBUTE_READ_ONLY),
    /* CKA_VALUE_LEN is not an attribute of a created AES key's editable set */
    C("set CKA_VALUE_LEN", t_set_valuelen, CKR_ATTRIBUTE_READ_ONLY, CKR_ATTRIBUTE_TYPE_INVALID),
    C("set CKA_MODULUS on secret key", t_set_unknown, CKR_ATTRIBUTE_TYPE_INVALID),
    C("set CKA_ENCRYPT with CK_ULONG size", t_set_bool_size, CKR_ATTRIBUTE_VALUE_INVALID),
    C("set CKA_LABEL", t_set_label_ok, CKR_OK),
    /* wrapping */
    C("C_WrapKey size query", t_wrap_size, CKR_OK),
    C("C_WrapKey too small", t_wrap_small, CKR_BUFFER_TOO_SMALL),
    C("C_WrapKey extractable key", t_wrap_ok, CKR_OK),
    C("C_WrapKey unextractable key", t_wrap_unextractable, CKR_KEY_UNEXTRACTABLE),
    C("C_WrapKey framework migration mechanism", t_wrap_migrate_mech, CKR_MECHANISM_INVALID),
    C("C_WrapKey WRAP_WITH_TRUSTED key, untrusted wrapper", t_wrap_wwt, CKR_KEY_NOT_WRAPPABLE),
    C("clear CKA_WRAP_WITH_TRUSTED", t_set_wwt_clear, CKR_ATTRIBUTE_READ_ONLY),
    C("C_WrapKey wrapper without CKA_WRAP", t_wrap_nowrapattr, CKR_KEY_FUNCTION_NOT_PERMITTED),
    C("C_WrapKey NULL mechanism", t_wrap_nullmech, CKR_ARGUMENTS_BAD),
    C("C_WrapKey NULL length", t_wrap_nulllen, CKR_ARGUMENTS_BAD),
    C("C_WrapKey unknown mechanism", t_wrap_unknownmech, CKR_MECHANISM_INVALID),
    C("C_UnwrapKey unwrapper without CKA_UNWRAP", t_unwrap_nowrapattr, CKR_KEY_FUNCTION_NOT_PERMITTED),
    C("C_UnwrapKey bad unwrapping key", t_unwrap_badhandle, CKR_UNWRAPPING_KEY_HANDLE_INVALID),
    /* operations not initialised */
    NOTINIT_OPS(NOTINIT)
    C("C_FindObjectsFinal without init", t_find_final_again, CKR_OPERATION_NOT_INITIALIZED),
    /* encrypt two-call protocol */
    ROWS_ECB
    C("init order: active signature before a bad parameter", t_init_order_sign, CKR_OPERATION_ACTIVE),
    C("CBC_PAD C_EncryptUpdate 10 bytes", t_cbc_update, CKR_OK),
    C("CBC_PAD C_EncryptFinal too small", t_cbc_final_small, CKR_BUFFER_TOO_SMALL),
    C("CBC_PAD C_EncryptFinal after too small", t_cbc_final_ok, CKR_OK),
    /* digest two-call protocol */
    C("C_DigestInit", t_digestinit_ok, CKR_OK),
    C("C_DigestInit twice", t_digestinit_again, CKR_OPERATION_ACTIVE),
    C("C_Digest size query", t_digest_size, CKR_OK),
    C("C_Digest too small", t_digest_small, CKR_BUFFER_TOO_SMALL),
    C("C_Digest after too small", t_digest_full, CKR_OK),
    /* the spec forbids C_Digest after C_DigestUpdate without naming the
     * code; OPERATION_ACTIVE (SoftHSM) or OPERATION_NOT_INITIALIZED are
     * the sensible ones, CKR_OK (a wrong digest) is not */
    C("C_Digest after C_DigestUpdate", t_digest_update_after_single, CKR_OPERATION_ACTIVE,
      CKR_OPERATION_NOT_INITIALIZED),
    C("C_DigestFinal too small then ok", t_digest_final_small, CKR_BUFFER_TOO_SMALL),
    /* as for C_EncryptInit(NULL) with no active operation */
    C("C_DigestInit NULL mechanism, nothing active", t_digest_nullmech, CKR_ARGUMENTS_BAD, CKR_OK,
      CKR_OPERATION_NOT_INITIALIZED),
    C("C_DigestInit unknown mechanism", t_digest_unknown, CKR_MECHANISM_INVALID),
    C("C_DigestInit CKM_AES_ECB", t_digest_aesmech, CKR_MECHANISM_INVALID),
    /* HMAC */
    C("C_Sign size query", t_sign_ok_size, CKR_OK),
    C("C_Sign too small", t_sign_small, CKR_BUFFER_TOO_SMALL),
    C("C_Sign after too small", t_sign_full, CKR_OK),
    C("C_Verify good HMAC", t_verify_ok, CKR_OK),
    C("C_Verify corrupted HMAC", t_verify_bad, CKR_SIGNATURE_INVALID),
    C("C_Verify 5-byte HMAC", t_verify_shortsig, CKR_SIGNATURE_LEN_RANGE, CKR_SIGNATURE_INVALID),
    C("C_SignInit twice", t_signinit_again, CKR_OPERATION_ACTIVE),
    C("C_SignInit unknown mechanism", t_sign_unknown, CKR_MECHANISM_INVALID),
    /* find */
    ROWS_FIND_INIT
    C("C_FindObjects", t_find_ok, CKR_OK),
    ROWS_FIND_END
    /* mechanism parameters */
    ROWS_GCM
    C("AES-CBC-PAD 8-byte IV", t_cbc_iv8, CKR_MECHANISM_PARAM_INVALID),
    C("AES-CBC-PAD no IV", t_cbc_noiv, CKR_MECHANISM_PARAM_INVALID),
    C("AES-CBC 17-byte IV", t_cbc_iv17, CKR_MECHANISM_PARAM_INVALID),
    C("AES-CBC NULL IV with length", t_cbc_nullptr_len, CKR_MECHANISM_PARAM_INVALID, CKR_ARGUMENTS_BAD),
    C("C_EncryptInit unknown mechanism", t_enc_unknown, CKR_MECHANISM_INVALID),
    /* 3.x: a NULL mechanism cancels an active operation; with none active
     * the spec names no code, so OK, ARGUMENTS_BAD or NOT_INITIALIZED */
    C("C_EncryptInit NULL mechanism, nothing active", t_enc_nullmech, CKR_ARGUMENTS_BAD, CKR_OK,
      CKR_OPERATION_NOT_INITIALIZED),
    C("C_EncryptInit CKM_SHA256", t_enc_sha_mech, CKR_MECHANISM_INVALID),
    /* key usage */
    C("C_EncryptInit key without CKA_ENCRYPT", t_use_enc_noenc, CKR_KEY_FUNCTION_NOT_PERMITTED),
    C("C_VerifyInit key without CKA_VERIFY", t_use_sign_noverify, CKR_KEY_FUNCTION_NOT_PERMITTED),
    /* CMAC may be unimplemented; if it is, the usage flag is what must fail */
    C("C_SignInit CMAC key without CKA_SIGN", t_use_sign_aes_nosign, CKR_KEY_FUNCTION_NOT_PERMITTED,
      CKR_MECHANISM_INVALID),
    C("C_EncryptInit AES-ECB with generic secret", t_use_hmac_enc, CKR_KEY_TYPE_INCONSISTENT),
    /* both the type and the CKA_SIGN flag are wrong: either error is fine */
    C("C_SignInit HMAC with AES key", t_use_aes_hmac, CKR_KEY_TYPE_INCONSISTENT, CKR_KEY_FUNCTION_NOT_PERMITTED),
    C("C_Decrypt with decrypt-only key", t_use_dec_ok, CKR_OK),
    /* RO-session token writes while logged in */
    C("RO: C_CreateObject token key", t_ro_create_tok, CKR_SESSION_READ_ONLY),
    C("RO: C_GenerateKey token key", t_ro_gen_tok, CKR_SESSION_READ_ONLY),
    C("RO: C_CopyObject to token", t_ro_copy_tok, CKR_SESSION_READ_ONLY),
    C("RO: C_SetAttributeValue token key", t_ro_set_tok, CKR_SESSION_READ_ONLY),
    C("RO: C_DestroyObject token key", t_ro_destroy_tok, CKR_SESSION_READ_ONLY),
    C("RO: C_UnwrapKey to token", t_ro_unwrap_tok, CKR_SESSION_READ_ONLY),
    C("RO: C_CreateObject session key", t_ro_create_session_ok, CKR_OK),
    /* misc */
    ROWS_RANDOM_LOGOUT
    /* k_aes was created while logged in without CKA_PRIVATE; the default for
     * a secret key is module-specific, so either result is acceptable */
    C("read key type after logout", t_priv_after_logout, CKR_OK, CKR_OBJECT_HANDLE_INVALID),
    C("C_CloseAllSessions slot 0", t_closeall0, CKR_OK),
    C("session gone after C_CloseAllSessions", t_closed_by_all, CKR_SESSION_HANDLE_INVALID),
    /* slot 1: initialise and lock out */
    C("slot 1 starts uninitialised", t_s1_uninit, CKR_OK),
    C("C_InitToken slot 1, SO PIN too short", t_s1_inittoken_shortpin, CKR_PIN_LEN_RANGE),
    C("slot 1 still uninitialised", t_s1_uninit, CKR_OK),
    C("C_InitToken slot 1", t_s1_inittoken, CKR_OK),
    C("a new empty slot after slot 1", t_s1_next_empty, CKR_OK),
    C("slot 1 flags after C_InitToken", t_s1_initialized, CKR_OK),
    C("open RW session slot 1", t_s1_open, CKR_OK),
    C("C_InitToken with a session open", t_s1_inittoken_busy, CKR_SESSION_EXISTS),
    C("C_Login user before C_InitPIN", t_s1_login_nouserpin, CKR_USER_PIN_NOT_INITIALIZED),
    C("C_InitPIN not logged in", t_s1_initpin_nologin, CKR_USER_NOT_LOGGED_IN),
    C("C_Login SO slot 1", t_s1_so_login, CKR_OK),
    C("C_InitPIN NULL PIN", t_s1_initpin_null, CKR_ARGUMENTS_BAD),
    C("C_InitPIN slot 1", t_s1_initpin, CKR_OK),
    C("C_Logout SO slot 1", t_s1_so_logout, CKR_OK),
    C("slot 1 user PIN initialised", t_s1_userpin_set, CKR_OK),
    C("lockout: wrong PIN 1", t_s1_wrong, CKR_PIN_INCORRECT),
    C("lockout: COUNT_LOW after 1", t_s1_countlow, CKR_OK),
    C("lockout: wrong PIN 2", t_s1_wrong, CKR_PIN_INCORRECT),
    C("lockout: wrong PIN 3", t_s1_wrong, CKR_PIN_INCORRECT),
    C("lockout: wrong PIN 4", t_s1_wrong, CKR_PIN_INCORRECT),
    C("lockout: wrong PIN 5", t_s1_wrong, CKR_PIN_INCORRECT),
    C("lockout: wrong PIN 6", t_s1_wrong, CKR_PIN_INCORRECT),
    C("lockout: wrong PIN 7", t_s1_wrong, CKR_PIN_INCORRECT),
    C("lockout: wrong PIN 8", t_s1_wrong, CKR_PIN_INCORRECT),
    C("lockout: wrong PIN 9", t_s1_wrong, CKR_PIN_INCORRECT),
    C("lockout: FINAL_TRY after 9", t_s1_finaltry, CKR_OK),
    /* the attempt that exhausts the counter: a module may report the
     * failure (CKR_PIN_INCORRECT) or the resulting lock (CKR_PIN_LOCKED) */
    C("lockout: wrong PIN 10", t_s1_wrong, CKR_PIN_INCORRECT, CKR_PIN_LOCKED),
    C("lockout: LOCKED after 10", t_s1_locked, CKR_OK),
    C("lockout: wrong PIN 11", t_s1_wrong, CKR_PIN_LOCKED),
    C("lockout: right PIN refused", t_s1_right_refused, CKR_PIN_LOCKED),
    C("lockout: SO login still works", t_s1_so_still_ok, CKR_OK),
    C("C_Finalize", t_finalize, CKR_OK),
    OPS(AFTER)
};

/* The accelerator provider (libopencf_accel.so, docs/ACCEL.md) loaded on its own: one slot,
 * no login required (any PIN is accepted, the SO has no role), session objects only, no
 * secret value ever returned, and no digest, verification, key generation, wrapping or
 * object copying (those stay in the software token): each of those answers
 * CKR_FUNCTION_NOT_SUPPORTED. Templates are checked as the software token checks them.
 * Rows that need an engine's mechanism are skipped, with a line, where slot 0 does not
 * offer it (no AVX-512 IFMA, one core, or OPENCF_ACCEL_DISABLE). */
#define ACCEL_SESSION_OPS(X)                                                 \
    X(GetSessionInfo) X(Login) X(Logout) X(CreateObject) X(DestroyObject)    \
    X(GetAttributeValue) X(FindObjectsInit) X(FindObjects)                   \
    X(FindObjectsFinal) X(EncryptInit) X(Encrypt) X(EncryptUpdate)           \
    X(EncryptFinal) X(DecryptInit) X(Decrypt) X(DecryptUpdate)               \
    X(DecryptFinal) X(SignInit) X(Sign) X(SignUpdate) X(SignFinal)           \
    X(UnwrapKey) X(SeedRandom) X(GenerateRandom) X(CloseSession)
#define ACCEL_ABSENT_OPS(X)                                                  \
    X(InitPIN) X(SetPIN) X(CopyObject) X(GetObjectSize) X(SetAttributeValue) \
    X(DigestInit) X(Digest) X(DigestUpdate) X(DigestKey) X(DigestFinal)      \
    X(VerifyInit) X(Verify) X(VerifyUpdate) X(VerifyFinal) X(GenerateKey)    \
    X(GenerateKeyPair) X(WrapKey) X(DeriveKey)
#define ACCEL_NOTINIT_OPS(X) X(Encrypt) X(EncryptUpdate) X(EncryptFinal) X(Decrypt) \
    X(DecryptUpdate) X(DecryptFinal) X(Sign) X(SignUpdate) X(SignFinal) X(FindObjects) \
    X(FindObjectsFinal)
#define ABSENT(n) { .name = "not offered: C_" #n, .fn = t_op, .op = OP_##n, .sel = H_RW, \
                    R(CKR_FUNCTION_NOT_SUPPORTED) },
#define ACCEL_BADOBJ_ROWS(sfx, what) \
    C("bad object " what ": C_GetAttributeValue", t_getattr_bad##sfx, CKR_OBJECT_HANDLE_INVALID), \
    C("bad object " what ": C_DestroyObject", t_destroy_bad##sfx, CKR_OBJECT_HANDLE_INVALID), \
    CN("bad key " what ": C_EncryptInit", CKM_AES_ECB, t_encinit_bad##sfx, CKR_KEY_HANDLE_INVALID), \
    CN("bad key " what ": C_DecryptInit", CKM_AES_ECB, t_decinit_bad##sfx, CKR_KEY_HANDLE_INVALID),

static const struct tcase accel_cases[] = {
    OPS(PRE)
    C("C_Initialize CKF_LIBRARY_CANT_CREATE_OS_THREADS", t_init_nothreads, CKR_NEED_TO_CREATE_THREADS),
    ROWS_INIT_ARGS
    /* slots */
    ROWS_BAD_SLOTS
    C("C_InitToken (nothing to initialise)", t_inittoken_bad, CKR_FUNCTION_NOT_SUPPORTED),
    ROWS_NULL_OUT
    C("C_GetMechanismInfo unknown mechanism", t_mechinfo_unknown, CKR_MECHANISM_INVALID),
    C("C_GetMechanismList size query", t_mechlist_size, CKR_OK),
    C("C_GetMechanismList too small", t_mechlist_small, CKR_BUFFER_TOO_SMALL),
    C("C_GetMechanismList full", t_acc_mechlist_full, CKR_OK),
    /* sessions */
    ROWS_SESSIONS
    /* login: accepted with any PIN, for applications that always log in */
    C("C_Logout not logged in", t_logout_notin, CKR_USER_NOT_LOGGED_IN),
    C("C_Login user type 5", t_login_badtype, CKR_USER_TYPE_INVALID),
    C("C_Login NULL PIN with length", t_login_nullpin, CKR_ARGUMENTS_BAD),
    C("C_Login SO (no SO role)", t_acc_login_so, CKR_USER_TYPE_INVALID),
    C("C_Login user, any PIN", t_login_wrong, CKR_OK),
    C("C_Login user again", t_login_user_again, CKR_USER_ALREADY_LOGGED_IN),
    /* objects */
    C("create AES key", t_mk_aes, CKR_OK),
    C("create AES key without CKA_ENCRYPT", t_mk_noenc, CKR_OK),
    C("create + destroy a key", t_mk_destroyed, CKR_OK),
    C("create generic secret (no engine for it)", t_mk_hmac, CKR_ATTRIBUTE_VALUE_INVALID),
    C("create token object (no storage)", t_mk_tok, CKR_ATTRIBUTE_VALUE_INVALID),
    /* templates, as the software token checks them */
    ROWS_CREATE_TEMPLATES
    /* bad session handles; what the provider does not offer */
    ACCEL_SESSION_OPS(BADS)
    OPTIONAL_OPS(BADS_OPT)
    ACCEL_ABSENT_OPS(ABSENT)
    C("not offered: C_DigestInit NULL mechanism", t_acc_digest_nullmech, CKR_FUNCTION_NOT_SUPPORTED),
    C("not offered: C_VerifyInit NULL mechanism", t_acc_verify_nullmech, CKR_FUNCTION_NOT_SUPPORTED),
    /* bad object / key handles */
    ACCEL_BADOBJ_ROWS(0, "0")
    ACCEL_BADOBJ_ROWS(D, "0xdeadbeef")
    ACCEL_BADOBJ_ROWS(X, "destroyed")
    CN("bad key: C_SignInit", CKM_RSA_PKCS, t_acc_signinit_bad, CKR_KEY_HANDLE_INVALID),
    /* attributes */
    C("read CKA_VALUE of an AES key (never returned)", t_acc_value_hidden, CKR_ATTRIBUTE_SENSITIVE),
    C("read CKA_MODULUS of secret key", t_getattr_invalid, CKR_ATTRIBUTE_TYPE_INVALID),
    C("C_GetAttributeValue NULL template", t_getattr_nulltmpl, CKR_ARGUMENTS_BAD),
    /* unwrapping */
    C("C_UnwrapKey unwrapper without CKA_UNWRAP", t_acc_unwrap_nounwrap, CKR_KEY_FUNCTION_NOT_PERMITTED),
    C("C_UnwrapKey bad unwrapping key", t_acc_unwrap_badhandle, CKR_UNWRAPPING_KEY_HANDLE_INVALID),
    C("C_UnwrapKey NULL phKey", t_acc_unwrap_nullout, CKR_ARGUMENTS_BAD),
    /* operations not initialised */
    ACCEL_NOTINIT_OPS(NOTINIT)
    /* find */
    ROWS_FIND_INIT
    C("C_FindObjects: the two keys", t_acc_find_ok, CKR_OK),
    ROWS_FIND_END
    /* encryption on the bulk engine: the two-call protocol, lengths, the order of an init's checks */
    ROWS_ECB
    CN("C_EncryptInit key without CKA_ENCRYPT", CKM_AES_ECB, t_use_enc_noenc, CKR_KEY_FUNCTION_NOT_PERMITTED),
    C("C_EncryptInit unknown mechanism", t_enc_unknown, CKR_MECHANISM_INVALID),
    C("C_EncryptInit CKM_SHA256", t_enc_sha_mech, CKR_MECHANISM_INVALID),
    C("C_EncryptInit AES-CBC-PAD (not offered)", t_cbc_iv8, CKR_MECHANISM_INVALID),
    C("C_EncryptInit NULL mechanism, nothing active", t_enc_nullmech, CKR_ARGUMENTS_BAD, CKR_OK,
      CKR_OPERATION_NOT_INITIALIZED),
    C("C_DecryptInit unknown mechanism", t_acc_dec_unknown, CKR_MECHANISM_INVALID),
    /* AES-GCM parameters */
    ROWS_GCM
    /* signing: the mechanism is checked before the key */
    C("C_SignInit unknown mechanism", t_acc_sign_unknown, CKR_MECHANISM_INVALID),
    C("C_SignInit HMAC (not offered)", t_acc_sign_hmac, CKR_MECHANISM_INVALID),
    CN("C_SignInit RSA with an AES key", CKM_RSA_PKCS, t_acc_signinit_aes, CKR_KEY_TYPE_INCONSISTENT),
    /* misc */
    ROWS_RANDOM_LOGOUT
    C("C_CloseAllSessions slot 0", t_closeall0, CKR_OK),
    C("session gone after C_CloseAllSessions", t_closed_by_all, CKR_SESSION_HANDLE_INVALID),
    C("C_Finalize", t_finalize, CKR_OK),
    OPS(AFTER)
};

/* Whether slot 0 offers mechanism m (for the rows that need an engine). */
static int offered(CK_MECHANISM_TYPE m)
{
    CK_MECHANISM_INFO mi;
    return F->C_GetMechanismInfo(SLOT0, m, &mi) == CKR_OK;
}

int main(int argc, char **argv)
{
    int accel = argc > 1 && strcmp(argv[1], "--accel") == 0;
    const char *path = argc > 1 + accel ? argv[1 + accel] : "target/release/libopencf_softtoken.so";
    const struct tcase *table = accel ? accel_cases : cases;
    size_t rows = accel ? sizeof accel_cases / sizeof accel_cases[0] : sizeof cases / sizeof cases[0];
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CK_C_GetFunctionList gfl;
    size_t i, passed = 0, failed = 0, skipped = 0;

    if (!lib) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        return 2;
    }
    gfl = (CK_C_GetFunctionList)dlsym(lib, "C_GetFunctionList");
    if (!gfl || gfl(&F) != CKR_OK || !F) {
        fprintf(stderr, "C_GetFunctionList failed\n");
        return 2;
    }
    for (i = 0; i < rows; i++) {
        const struct tcase *c = &table[i];
        CK_RV rv;
        int j, ok = 0;
        check_msg[0] = 0;
        if (c->need && !offered(c->need)) {
            printf("SKIP %s: slot 0 does not offer mechanism 0x%lx here\n", c->name, c->need);
            skipped++;
            continue;
        }
        rv = c->fn(c);
        for (j = 0; j < c->nwant; j++)
            if (rv == c->want[j])
                ok = 1;
        if (ok) {
            passed++;
            continue;
        }
        failed++;
        printf("FAIL %s: got %s want ", c->name, rvname(rv));
        for (j = 0; j < c->nwant; j++)
            printf("%s%s", j ? "|" : "", rvname(c->want[j]));
        printf("\n");
    }
    if (skipped)
        printf("%zu passed, %zu failed, %zu skipped\n", passed, failed, skipped);
    else
        printf("%zu passed, %zu failed\n", passed, failed);
    fflush(stdout);
    return failed ? 1 : 0;
}
