/*
 * Differential sequence test: the metaslot must answer as the token it routes to.
 *
 * One seeded pseudo-random sequence of PKCS#11 calls (sessions, login, key objects, every
 * operation family in every call order, size queries, short buffers, bad handles, hostile
 * parameters, dual-function updates, saved operation state, recovery, C_VerifySignature*, ECDH
 * derivation, ML-KEM encapsulation, ML-DSA, ChaCha20-Poly1305, Ed25519, the security officer's
 * PIN calls, C_LoginUser, C_GetObjectSize, random numbers and seeds, cancellation) runs twice,
 * each time in a child process with a fresh keystore: once against the reference module's
 * first token, once against the module under test's slot.  The children write one line per
 * call (function, CK_RV and the lengths it wrote back); the parent compares the two traces
 * line by line and reports the first line where they differ, with the calls before it.  A
 * child that crashes, or a CKR_GENERAL_ERROR (what the module returns for a caught panic),
 * fails the seed too.
 *
 * Both children see the same calls: handles are kept in tables and chosen by index, so the
 * sequence does not depend on the handle values a module hands out.
 *
 * Usage: seqdiff REF.so TEST.so TEST_SLOT FIRST_SEED SEEDS STEPS
 *   e.g. seqdiff libopencf_softtoken.so libopencf.so 0 1 200 400
 * TEST_SLOT is a slot ID, or label=LABEL for the first slot whose token has that label (a
 * provider's own slot through the framework: "label=OpenCF Softtoken").
 * Prints the calls before the first difference of each failing seed and a final
 * "N seeds passed, N failed" line; SEQDIFF_SHOW=1 also prints every trace of the module under
 * test on stderr.  Each child runs with the built-in default configuration (an empty
 * XDG_CONFIG_HOME, no OPENCF_CONF), so the metaslot routes to the softtoken and, for large
 * inputs (256 KiB and more; AES-CTR from 32 KiB), to the accelerator provider.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pkcs11.h"
#include "ckr_names.h"

static CK_FUNCTION_LIST *F;
static CK_FUNCTION_LIST_3_0 *F3; /* NULL: no 3.0 interface */
static CK_FUNCTION_LIST_3_2 *F32; /* NULL: no 3.2 interface */
static CK_SLOT_ID the_slot;
static FILE *trace;

/* ---- a seeded generator (splitmix64), the same in both children ---- */
static unsigned long long rng_state;
static unsigned long long rnd(void)
{
    unsigned long long z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static unsigned below(unsigned n) { return (unsigned)(rnd() % n); }
static int chance(unsigned pct) { return below(100) < pct; }

static CK_SESSION_HANDLE cur;  /* the session of the last call that returned CKR_OK */
static CK_SESSION_HANDLE last; /* the session of the current call */
static int general_errors;
static void trace_rv(CK_RV rv, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(trace, fmt, ap);
    va_end(ap);
    fprintf(trace, " -> %s\n", ckr_name(rv));
    if (rv == CKR_GENERAL_ERROR)
        general_errors++;
    if (rv == CKR_OK && last)
        cur = last;
    last = 0;
}

/* out(CALL, FORMAT, ...): one trace line, the call's description and its CK_RV. A macro, so
 * that CALL has returned before the description's arguments are read: they include the
 * lengths the call wrote back, and C evaluates a function's arguments in no fixed order (as
 * a function, out() printed the lengths as they were before the call). */
#define out(call, ...)                  \
    do {                                \
        CK_RV out_rv_ = (call);         \
        trace_rv(out_rv_, __VA_ARGS__); \
    } while (0)

/* ---- state: handles by index ---- */
#define NSESS 4
#define NOBJ 10
static CK_SESSION_HANDLE sess[NSESS];
static CK_OBJECT_HANDLE obj[NOBJ];
static CK_UTF8CHAR pin[] = "seqdiff-pin-1";
static CK_UTF8CHAR wrong_pin[] = "not-the-pin";

/* One of the filled entries of `t` (n entries), chosen uniformly; 0 when none is. */
static CK_ULONG pick_filled(const CK_ULONG *t, unsigned n)
{
    unsigned i, filled = 0, k;
    for (i = 0; i < n; i++)
        filled += t[i] != 0;
    if (filled == 0)
        return 0;
    k = below(filled);
    for (i = 0; i < n; i++)
        if (t[i] && k-- == 0)
            return t[i];
    return 0;
}

/* A session: mostly the current one or one of the table (possibly closed since), sometimes
 * garbage. */
static CK_SESSION_HANDLE pick_sess_(void)
{
    if (chance(3))
        return 0xdead0000UL + below(16);
    /* mostly the session of the last call that worked, so operations run their course */
    if (cur && chance(65))
        return cur;
    /* else a handle that was valid once (it may have been closed since) */
    return pick_filled(sess, NSESS);
}
static CK_SESSION_HANDLE pick_sess(void)
{
    return last = pick_sess_();
}
static CK_OBJECT_HANDLE pick_obj(void)
{
    if (chance(4))
        return chance(50) ? 0 : 0xbeef0000UL + below(16);
    return pick_filled(obj, NOBJ);
}
/* Keeps `h` in the first empty entry of `t` (n entries), else in a random one. */
static void keep(CK_ULONG *t, unsigned n, CK_ULONG h)
{
    unsigned i;
    for (i = 0; i < n && t[i]; i++)
        ;
    t[i < n ? i : below(n)] = h;
}
static void keep_obj(CK_OBJECT_HANDLE h) { keep(obj, NOBJ, h); }

/* ---- buffers ---- */
/* BIG: past the accelerator's bulk thresholds (256 KiB, AES-CTR 32 KiB, in the built-in default), so
 * that with the default configuration the metaslot moves some operations there. */
#define BIG (256 * 1024)
static CK_BYTE data[BIG + 4096], buf[BIG + 8192], buf2[1024];

static void fill(CK_BYTE *p, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        p[i] = (CK_BYTE)rnd();
}

/* Input of `n` bytes; a 256-byte one starts with a zero byte, so that it is below any
 * RSA-2048 modulus (the two runs generate different keys). */
static void fill_input(size_t n)
{
    fill(data, n);
    if (n == 256)
        data[0] = 0;
}

static CK_ULONG pick_len(void)
{
    switch (below(25)) {
    case 0: case 1: case 2: case 3: case 4: case 5: return 0;
    case 6: case 7: case 8: case 9: case 10: case 11: return 16 * below(5);
    case 12: case 13: case 14: case 15: case 16: case 17: return below(100);
    case 18: return BIG + (chance(50) ? 16 * below(256) : below(4096));
    case 19: return 256; /* an RSA-2048 block */
    default: return below(512);
    }
}

/* A new input in `data`; its length. */
static CK_ULONG next_input(void)
{
    CK_ULONG n = pick_len();
    fill_input(n);
    return n;
}

/* A signature to check in `buf2` (noise, sometimes of an RSA-2048 signature's length and
 * below any modulus); its length. */
static CK_ULONG next_signature(void)
{
    CK_ULONG n = chance(20) ? 256 : below(70);
    fill(buf2, n);
    buf2[0] = 0;
    return n;
}

/* An output: NULL (size query), a short buffer, or a large one. *len is set accordingly. */
static CK_BYTE *pick_out(CK_ULONG *len)
{
    switch (below(4)) {
    case 0:
        *len = 0;
        return NULL;
    case 1:
        *len = below(24);
        return buf;
    default:
        *len = sizeof buf;
        return buf;
    }
}

/* ---- mechanisms ---- */
static CK_BYTE iv[32], aad[32];
static CK_GCM_PARAMS gcm;
static CK_MECHANISM mech;

/* mech's parameter: `p`, with its whole length `len` `whole_pct` percent of the time and a
 * length cut short otherwise. */
static void param(void *p, CK_ULONG len, unsigned whole_pct)
{
    mech.pParameter = p;
    mech.ulParameterLen = chance(whole_pct) ? len : below(len);
}

/* kind: 0 encrypt/decrypt, 1 digest, 2 sign/verify */
static CK_MECHANISM *pick_mech(int kind)
{
    memset(&mech, 0, sizeof mech);
    fill(iv, sizeof iv);
    if (chance(3))
        return NULL;
    if (chance(3)) {
        mech.mechanism = 0x7ffffff0UL; /* unassigned */
        return &mech;
    }
    if (kind == 1) {
        static const CK_MECHANISM_TYPE d[] = { CKM_SHA256, CKM_SHA512, CKM_SHA_1, CKM_SHA3_256 };
        mech.mechanism = d[below(4)];
        if (chance(5)) { /* a parameter where none belongs */
            mech.pParameter = iv;
            mech.ulParameterLen = 16;
        }
        return &mech;
    }
    if (kind == 2) {
        static const CK_MECHANISM_TYPE s[] = { CKM_SHA256_HMAC, CKM_SHA512_HMAC, CKM_AES_CMAC,
                                               CKM_AES_ECB,     CKM_ECDSA,       CKM_ECDSA_SHA256,
                                               CKM_RSA_PKCS,    CKM_SHA256_RSA_PKCS,
                                               CKM_RSA_X_509,   CKM_RSA_PKCS_PSS,
                                               CKM_SHA256_RSA_PKCS_PSS };
        static CK_RSA_PKCS_PSS_PARAMS pss;
        static CK_EDDSA_PARAMS ed;
        static CK_BYTE ctx[8] = "context";
        if (chance(8)) {
            /* ML-DSA: no parameter, or CK_SIGN_ADDITIONAL_CONTEXT (hedging, a context of up
             * to 255 bytes, or one too long, or an unknown hedge variant) */
            static CK_SIGN_ADDITIONAL_CONTEXT sc;
            static CK_BYTE mctx[300];
            mech.mechanism = CKM_ML_DSA;
            if (chance(50)) {
                sc.hedgeVariant = chance(90) ? below(3) : 7;
                sc.ulContextLen = chance(80) ? below(9) : 250 + below(10);
                sc.pContext = sc.ulContextLen ? mctx : NULL;
                param(&sc, sizeof sc, 92);
            }
            return &mech;
        }
        if (chance(10)) {
            /* Ed25519: no parameter (pure), or CK_EDDSA_PARAMS (prehash, context) */
            mech.mechanism = CKM_EDDSA;
            if (chance(40)) {
                ed.phFlag = chance(30);
                ed.ulContextDataLen = chance(50) ? 0 : 1 + below(sizeof ctx);
                ed.pContextData = ed.ulContextDataLen ? ctx : NULL;
                param(&ed, sizeof ed, 92);
            }
            return &mech;
        }
        mech.mechanism = s[below(11)];
        if (mech.mechanism == CKM_RSA_PKCS_PSS || mech.mechanism == CKM_SHA256_RSA_PKCS_PSS) {
            pss.hashAlg = chance(90) ? CKM_SHA256 : CKM_SHA_1;
            pss.mgf = chance(90) ? CKG_MGF1_SHA256 : 0x77;
            pss.sLen = chance(80) ? 32 : below(300);
            param(&pss, sizeof pss, 92);
        }
        return &mech;
    }
    switch (below(8)) {
    case 7: {
        static CK_SALSA20_CHACHA20_POLY1305_PARAMS cp;
        fill(aad, sizeof aad);
        cp.pNonce = chance(95) ? iv : NULL;
        cp.ulNonceLen = chance(85) ? 12 : below(33);
        cp.pAAD = chance(50) ? aad : NULL;
        cp.ulAADLen = cp.pAAD ? below(33) : 0;
        mech.mechanism = CKM_CHACHA20_POLY1305;
        param(&cp, sizeof cp, 92);
        break;
    }
    case 5:
        mech.mechanism = chance(50) ? CKM_RSA_PKCS : CKM_RSA_X_509;
        break;
    case 6: {
        static CK_RSA_PKCS_OAEP_PARAMS oaep;
        oaep.hashAlg = chance(90) ? CKM_SHA256 : CKM_SHA_1;
        oaep.mgf = chance(90) ? CKG_MGF1_SHA256 : 0x77;
        oaep.source = CKZ_DATA_SPECIFIED;
        oaep.pSourceData = chance(70) ? NULL : aad;
        oaep.ulSourceDataLen = oaep.pSourceData ? below(33) : 0;
        mech.mechanism = CKM_RSA_PKCS_OAEP;
        param(&oaep, sizeof oaep, 92);
        break;
    }
    case 0:
        mech.mechanism = CKM_AES_ECB;
        break;
    case 1:
        mech.mechanism = CKM_AES_CBC_PAD;
        mech.pParameter = iv;
        mech.ulParameterLen = chance(85) ? 16 : below(20);
        break;
    case 2:
        mech.mechanism = CKM_AES_CBC;
        mech.pParameter = chance(90) ? iv : NULL;
        mech.ulParameterLen = 16;
        break;
    case 3:
        mech.mechanism = CKM_AES_CTR;
        {
            static CK_AES_CTR_PARAMS ctr;
            ctr.ulCounterBits = chance(85) ? 128 : below(200);
            memcpy(ctr.cb, iv, 16);
            param(&ctr, sizeof ctr, 90);
        }
        break;
    default:
        mech.mechanism = CKM_AES_GCM;
        fill(aad, sizeof aad);
        gcm.pIv = chance(95) ? iv : NULL;
        gcm.ulIvLen = chance(85) ? 12 : below(33);
        gcm.ulIvBits = gcm.ulIvLen * 8;
        gcm.pAAD = chance(50) ? aad : NULL;
        gcm.ulAADLen = gcm.pAAD ? below(33) : 0;
        gcm.ulTagBits = chance(80) ? 128 : 8 * below(20);
        param(&gcm, sizeof gcm, 92);
        break;
    }
    return &mech;
}

/* ---- the calls ---- */
static CK_BBOOL T = CK_TRUE, Fa = CK_FALSE;
static CK_BBOOL *tf(void) { return chance(50) ? &T : &Fa; }
#define BOOL(t, p) ((CK_ATTRIBUTE){ (t), (p), sizeof(CK_BBOOL) })

static void do_open(void)
{
    CK_SESSION_HANDLE h = 0;
    CK_FLAGS fl = CKF_SERIAL_SESSION | (chance(70) ? CKF_RW_SESSION : 0);
    CK_RV rv = F->C_OpenSession(chance(3) ? 4242 : the_slot, fl, NULL, NULL, &h);
    out(rv, "C_OpenSession(rw=%d)", (fl & CKF_RW_SESSION) != 0);
    if (rv == CKR_OK) {
        keep(sess, NSESS, h);
        cur = h;
    }
}

static void do_close(void)
{
    unsigned i = below(NSESS);
    CK_RV rv;
    if (chance(8)) {
        /* every session: the application is logged out of the token */
        rv = F->C_CloseAllSessions(chance(95) ? the_slot : 4242);
        out(rv, "C_CloseAllSessions");
        return;
    }
    rv = F->C_CloseSession(sess[i]);
    out(rv, "C_CloseSession(#%u)", i);
}

static void do_login(void)
{
    CK_SESSION_HANDLE s = pick_sess();
    if (chance(15)) {
        out(F->C_Logout(s), "C_Logout");
        return;
    }
    int right = chance(85);
    CK_UTF8CHAR *p = right ? pin : wrong_pin;
    if (F3 && chance(10)) {
        /* C_LoginUser: a user name (which this token does not know users by), or none */
        static CK_UTF8CHAR user[] = "seqdiff";
        CK_ULONG ulen = chance(50) ? sizeof user - 1 : 0;
        out(F3->C_LoginUser(s, CKU_USER, p, (CK_ULONG)strlen((char *)p), ulen ? user : NULL, ulen),
            "C_LoginUser(right=%d,user=%lu)", right, ulen);
        return;
    }
    out(F->C_Login(s, CKU_USER, p, (CK_ULONG)strlen((char *)p)), "C_Login(right=%d)", right);
}

/* The security officer: login (the fresh token's SO PIN, or a wrong one), C_InitPIN of the
 * user PIN (to the same value, so that user logins keep working), and C_SetPIN of the user's
 * PIN (to the same value, from the right or a wrong old PIN). */
static void do_pin(void)
{
    static CK_UTF8CHAR so_pin[] = "changeme";
    CK_SESSION_HANDLE s = pick_sess();
    CK_ULONG n = (CK_ULONG)strlen((char *)pin);
    switch (below(4)) {
    case 0: {
        int right = chance(85);
        CK_UTF8CHAR *p = right ? so_pin : wrong_pin;
        out(F->C_Login(s, CKU_SO, p, (CK_ULONG)strlen((char *)p)), "C_Login(SO,right=%d)", right);
        break;
    }
    case 1:
        out(F->C_InitPIN(s, pin, chance(95) ? n : 2), "C_InitPIN");
        break;
    case 2: {
        int right = chance(85);
        CK_UTF8CHAR *old = right ? pin : wrong_pin;
        out(F->C_SetPIN(s, old, (CK_ULONG)strlen((char *)old), pin, n), "C_SetPIN(right=%d)",
            right);
        break;
    }
    default:
        out(F->C_Logout(s), "C_Logout");
        break;
    }
}

static void do_create(void)
{
    CK_OBJECT_CLASS cls = CKO_SECRET_KEY;
    CK_KEY_TYPE kt = chance(70) ? CKK_AES : CKK_GENERIC_SECRET;
    CK_BYTE value[32];
    CK_ULONG vlen = kt == CKK_AES ? (chance(90) ? 16 + 8 * below(3) : below(33)) : 32;
    CK_UTF8CHAR label[] = "seqdiff";
    CK_ULONG bogus = 7;
    CK_ATTRIBUTE t[18];
    int n = 0;
    fill(value, sizeof value);
    t[n++] = (CK_ATTRIBUTE){ CKA_CLASS, &cls, sizeof cls };
    t[n++] = (CK_ATTRIBUTE){ CKA_KEY_TYPE, &kt, sizeof kt };
    t[n++] = (CK_ATTRIBUTE){ CKA_VALUE, value, vlen };
    t[n++] = BOOL(CKA_TOKEN, chance(20) ? &T : &Fa);
    if (chance(50)) t[n++] = BOOL(CKA_PRIVATE, tf());
    if (chance(50)) t[n++] = BOOL(CKA_SENSITIVE, tf());
    if (chance(50)) t[n++] = BOOL(CKA_EXTRACTABLE, tf());
    if (chance(70)) t[n++] = BOOL(CKA_ENCRYPT, tf());
    if (chance(70)) t[n++] = BOOL(CKA_DECRYPT, tf());
    if (chance(70)) t[n++] = BOOL(CKA_SIGN, tf());
    if (chance(70)) t[n++] = BOOL(CKA_VERIFY, tf());
    if (chance(40)) t[n++] = BOOL(CKA_WRAP, tf());
    if (chance(40)) t[n++] = BOOL(CKA_UNWRAP, tf());
    if (chance(40)) t[n++] = (CK_ATTRIBUTE){ CKA_LABEL, label, sizeof label - 1 };
    if (chance(5)) t[n++] = (CK_ATTRIBUTE){ CKA_VALUE_LEN, &bogus, sizeof bogus };
    if (chance(4)) t[n++] = (CK_ATTRIBUTE){ 0x7ffff123UL, &bogus, sizeof bogus };
    if (chance(4)) t[n++] = (CK_ATTRIBUTE){ CKA_ENCRYPT, &bogus, 1 + below(8) };
    CK_OBJECT_HANDLE h = 0;
    CK_RV rv = F->C_CreateObject(pick_sess(), t, n, &h);
    out(rv, "C_CreateObject(n=%d,vlen=%lu)", n, vlen);
    if (rv == CKR_OK)
        keep_obj(h);
}

static void do_generate(void)
{
    int chacha = chance(15);
    CK_MECHANISM m = { chacha ? CKM_CHACHA20_KEY_GEN : CKM_AES_KEY_GEN, NULL, 0 };
    CK_ULONG len = chance(90) ? (chacha ? 32 : 16 + 8 * below(3)) : below(40);
    CK_ATTRIBUTE t[6];
    int n = 0;
    t[n++] = (CK_ATTRIBUTE){ CKA_VALUE_LEN, &len, sizeof len };
    t[n++] = BOOL(CKA_TOKEN, chance(20) ? &T : &Fa);
    t[n++] = BOOL(CKA_ENCRYPT, tf());
    t[n++] = BOOL(CKA_DECRYPT, tf());
    t[n++] = BOOL(CKA_SENSITIVE, tf());
    t[n++] = BOOL(CKA_EXTRACTABLE, tf());
    CK_OBJECT_HANDLE h = 0;
    CK_RV rv = F->C_GenerateKey(pick_sess(), &m, t, n, &h);
    out(rv, "C_GenerateKey(%s,len=%lu)", chacha ? "ChaCha20" : "AES", len);
    if (rv == CKR_OK)
        keep_obj(h);
}

/* A key pair of mechanism `mt`: `spec` holds the public template's key-specific attributes
 * (`n` of them); the usage and storage attributes are drawn at random. */
static void gen_pair(CK_MECHANISM_TYPE mt, const CK_ATTRIBUTE *spec, int n, const char *what)
{
    CK_MECHANISM m = { mt, NULL, 0 };
    CK_ATTRIBUTE pub[8], priv[5];
    int np = 0, nv = 0, i;
    CK_OBJECT_HANDLE hp = 0, hv = 0;
    for (i = 0; i < n; i++)
        pub[np++] = spec[i];
    pub[np++] = BOOL(CKA_VERIFY, tf());
    pub[np++] = BOOL(CKA_ENCRYPT, tf());
    pub[np++] = BOOL(CKA_TOKEN, chance(20) ? &T : &Fa);
    priv[nv++] = BOOL(CKA_SIGN, tf());
    priv[nv++] = BOOL(CKA_DECRYPT, tf());
    priv[nv++] = BOOL(CKA_TOKEN, chance(20) ? &T : &Fa);
    priv[nv++] = BOOL(CKA_SENSITIVE, tf());
    priv[nv++] = BOOL(CKA_EXTRACTABLE, tf());
    CK_RV rv = F->C_GenerateKeyPair(pick_sess(), &m, pub, np, priv, nv, &hp, &hv);
    out(rv, "C_GenerateKeyPair(%s)", what);
    if (rv == CKR_OK) {
        keep_obj(hp);
        keep_obj(hv);
    }
}

/* A P-256 key pair, or (rarer: generating one takes a while) an RSA-2048 one, the size the
 * accelerator serves. */
static void do_keypair(void)
{
    static const CK_BYTE p256[] = { 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07 };
    static CK_ULONG bits = 2048;
    static CK_BYTE e[] = { 1, 0, 1 };
    static const CK_BYTE ed25519[] = { 0x06, 0x03, 0x2b, 0x65, 0x70 };
    if (chance(12)) {
        CK_ATTRIBUTE rsa[2] = { { CKA_MODULUS_BITS, &bits, sizeof bits },
                                { CKA_PUBLIC_EXPONENT, e, sizeof e } };
        gen_pair(CKM_RSA_PKCS_KEY_PAIR_GEN, rsa, 2, "RSA-2048");
        return;
    }
    if (chance(10)) {
        static CK_ULONG ps = CKP_ML_DSA_65;
        CK_ATTRIBUTE ml[1] = { { CKA_PARAMETER_SET, &ps, chance(95) ? sizeof ps : below(8) } };
        gen_pair(CKM_ML_DSA_KEY_PAIR_GEN, ml, 1, "ML-DSA-65");
        return;
    }
    if (chance(20)) {
        CK_ATTRIBUTE ed[1] = { { CKA_EC_PARAMS, (void *)ed25519,
                                 chance(95) ? sizeof ed25519 : below(5) } };
        gen_pair(CKM_EC_EDWARDS_KEY_PAIR_GEN, ed, 1, "Ed25519");
        return;
    }
    CK_ATTRIBUTE ec[1] = { { CKA_EC_PARAMS, (void *)p256, chance(95) ? sizeof p256 : below(10) } };
    gen_pair(CKM_EC_KEY_PAIR_GEN, ec, 1, "P-256");
}

/* C_WrapKey of a key with a key, or C_UnwrapKey of bytes (a wrapped key of this run, or noise). */
static CK_BYTE wrapped[512];
static CK_ULONG wrapped_len;
static void do_wrap(void)
{
    CK_MECHANISM m = { chance(50) ? CKM_AES_KEY_WRAP_PAD : CKM_AES_KEY_WRAP, NULL, 0 };
    CK_SESSION_HANDLE s = pick_sess();
    CK_OBJECT_HANDLE wk = pick_obj();
    if (chance(3))
        m.mechanism = CKM_AES_ECB;
    if (chance(55)) {
        CK_ULONG olen;
        CK_BYTE *o = pick_out(&olen);
        if (o)
            o = wrapped, olen = olen > sizeof wrapped ? sizeof wrapped : olen;
        CK_OBJECT_HANDLE k = pick_obj();
        CK_KEY_TYPE kt = 0;
        CK_ATTRIBUTE a = { CKA_KEY_TYPE, &kt, sizeof kt };
        /* The length of an RSA key's encoding differs from one key to the next, and the two
         * runs generate different keys: such a key is not wrapped (a read, not traced). */
        if (F->C_GetAttributeValue(s, k, &a, 1) == CKR_OK && kt == CKK_RSA) {
            fprintf(trace, "C_WrapKey of an RSA key: skipped\n");
            return;
        }
        CK_RV rv = F->C_WrapKey(s, &m, wk, k, o, &olen);
        out(rv, "C_WrapKey(%lx,out=%d) len=%lu", (unsigned long)m.mechanism, o != NULL, olen);
        if (rv == CKR_OK && o)
            wrapped_len = olen;
        return;
    }
    CK_OBJECT_CLASS cls = CKO_SECRET_KEY;
    CK_KEY_TYPE kt = CKK_AES;
    CK_ATTRIBUTE t[4];
    int n = 0;
    t[n++] = (CK_ATTRIBUTE){ CKA_CLASS, &cls, sizeof cls };
    if (chance(80)) t[n++] = (CK_ATTRIBUTE){ CKA_KEY_TYPE, &kt, sizeof kt };
    t[n++] = BOOL(CKA_ENCRYPT, tf());
    t[n++] = BOOL(CKA_DECRYPT, tf());
    CK_ULONG len = wrapped_len;
    if (chance(30)) {
        len = below(64);
        fill(wrapped, len);
    } else if (chance(20) && len) {
        wrapped[below(len)] ^= 1;
    }
    CK_OBJECT_HANDLE h = 0;
    CK_RV rv = F->C_UnwrapKey(s, &m, wk, wrapped, len, t, n, &h);
    out(rv, "C_UnwrapKey(%lx,%lu)", (unsigned long)m.mechanism, len);
    if (rv == CKR_OK)
        keep_obj(h);
}

typedef CK_RV (*single_fn)(CK_SESSION_HANDLE, CK_BYTE *, CK_ULONG, CK_BYTE *, CK_ULONG *);
typedef CK_RV (*update_fn)(CK_SESSION_HANDLE, CK_BYTE *, CK_ULONG, CK_BYTE *, CK_ULONG *);
typedef CK_RV (*final_fn)(CK_SESSION_HANDLE, CK_BYTE *, CK_ULONG *);

/* The inits of the operation families, as every caller traces them. */
static void init_crypt(CK_SESSION_HANDLE s, int decrypt)
{
    CK_MECHANISM *m = pick_mech(0);
    out((decrypt ? F->C_DecryptInit : F->C_EncryptInit)(s, m, pick_obj()), "C_%sInit(%lx)",
        decrypt ? "Decrypt" : "Encrypt", m ? (unsigned long)m->mechanism : 0UL);
}
static void init_digest(CK_SESSION_HANDLE s)
{
    CK_MECHANISM *m = pick_mech(1);
    out(F->C_DigestInit(s, m), "C_DigestInit(%lx)", m ? (unsigned long)m->mechanism : 0UL);
}
static void init_sign(CK_SESSION_HANDLE s, int verify)
{
    CK_MECHANISM *m = pick_mech(2);
    out((verify ? F->C_VerifyInit : F->C_SignInit)(s, m, pick_obj()), "C_%sInit(%lx)",
        verify ? "Verify" : "Sign", m ? (unsigned long)m->mechanism : 0UL);
}

static void do_crypt(int decrypt)
{
    const char *nm = decrypt ? "Decrypt" : "Encrypt";
    single_fn single = decrypt ? F->C_Decrypt : F->C_Encrypt;
    update_fn update = decrypt ? F->C_DecryptUpdate : F->C_EncryptUpdate;
    final_fn fin = decrypt ? F->C_DecryptFinal : F->C_EncryptFinal;
    CK_SESSION_HANDLE s = pick_sess();
    CK_ULONG olen, dlen;
    CK_BYTE *o;
    switch (chance(40) ? 0 : 1 + below(3)) {
    case 0:
        init_crypt(s, decrypt);
        break;
    case 1:
        dlen = next_input();
        o = pick_out(&olen);
        out(single(s, data, dlen, o, &olen), "C_%s(%lu,out=%d) len=%lu", nm, dlen, o != NULL, olen);
        break;
    case 2:
        dlen = next_input();
        o = pick_out(&olen);
        out(update(s, data, dlen, o, &olen), "C_%sUpdate(%lu,out=%d) len=%lu", nm, dlen, o != NULL,
            olen);
        break;
    default:
        o = pick_out(&olen);
        out(fin(s, o, &olen), "C_%sFinal(out=%d) len=%lu", nm, o != NULL, olen);
        break;
    }
}

static void do_digest(void)
{
    CK_SESSION_HANDLE s = pick_sess();
    CK_ULONG olen, dlen;
    CK_BYTE *o;
    switch (chance(35) ? 0 : 1 + below(4)) {
    case 0:
        init_digest(s);
        break;
    case 1:
        dlen = next_input();
        o = pick_out(&olen);
        out(F->C_Digest(s, data, dlen, o, &olen), "C_Digest(%lu,out=%d) len=%lu", dlen, o != NULL,
            olen);
        break;
    case 2:
        dlen = next_input();
        out(F->C_DigestUpdate(s, data, dlen), "C_DigestUpdate(%lu)", dlen);
        break;
    case 3:
        out(F->C_DigestKey(s, pick_obj()), "C_DigestKey");
        break;
    default:
        o = pick_out(&olen);
        out(F->C_DigestFinal(s, o, &olen), "C_DigestFinal(out=%d) len=%lu", o != NULL, olen);
        break;
    }
}

static void do_sign(int verify)
{
    CK_SESSION_HANDLE s = pick_sess();
    CK_ULONG olen, dlen;
    CK_BYTE *o;
    switch (chance(40) ? 0 : 1 + below(3)) {
    case 0:
        init_sign(s, verify);
        break;
    case 1:
        dlen = next_input();
        if (verify) {
            olen = next_signature();
            out(F->C_Verify(s, data, dlen, buf2, olen), "C_Verify(%lu,%lu)", dlen, olen);
        } else {
            o = pick_out(&olen);
            out(F->C_Sign(s, data, dlen, o, &olen), "C_Sign(%lu,out=%d) len=%lu", dlen, o != NULL,
                olen);
        }
        break;
    case 2:
        dlen = next_input();
        if (verify)
            out(F->C_VerifyUpdate(s, data, dlen), "C_VerifyUpdate(%lu)", dlen);
        else
            out(F->C_SignUpdate(s, data, dlen), "C_SignUpdate(%lu)", dlen);
        break;
    default:
        if (verify) {
            olen = next_signature();
            out(F->C_VerifyFinal(s, buf2, olen), "C_VerifyFinal(%lu)", olen);
        } else {
            o = pick_out(&olen);
            out(F->C_SignFinal(s, o, &olen), "C_SignFinal(out=%d) len=%lu", o != NULL, olen);
        }
        break;
    }
}

/* Signing with recovery and verifying with recovery (RSA-2048 keys, raw and PKCS #1 v1.5). */
static void do_recover(void)
{
    CK_SESSION_HANDLE s = pick_sess();
    int verify = chance(50);
    CK_ULONG olen, dlen;
    CK_BYTE *o;
    if (chance(6)) {
        /* a key pair made for it, then a signature with recovery and its recovery */
        static CK_ULONG bits = 2048;
        static CK_BYTE e[] = { 1, 0, 1 };
        CK_MECHANISM gen = { CKM_RSA_PKCS_KEY_PAIR_GEN, NULL, 0 };
        CK_MECHANISM m = { chance(50) ? CKM_RSA_PKCS : CKM_RSA_X_509, NULL, 0 };
        CK_ATTRIBUTE pub[] = { { CKA_MODULUS_BITS, &bits, sizeof bits },
                               { CKA_PUBLIC_EXPONENT, e, sizeof e },
                               BOOL(CKA_VERIFY_RECOVER, &T) };
        CK_ATTRIBUTE priv[] = { BOOL(CKA_SIGN_RECOVER, &T), BOOL(CKA_PRIVATE, &Fa) };
        CK_OBJECT_HANDLE hp = 0, hv = 0;
        CK_BYTE sig[512];
        CK_ULONG slen = sizeof sig;
        CK_RV rv = F->C_GenerateKeyPair(s, &gen, pub, 3, priv, 2, &hp, &hv);
        out(rv, "C_GenerateKeyPair(recover)");
        if (rv != CKR_OK)
            return;
        keep_obj(hp);
        keep_obj(hv);
        CK_RV srv = F->C_SignRecoverInit(s, &m, hv);
        out(srv, "C_SignRecoverInit(recover,%lx)", (unsigned long)m.mechanism);
        dlen = m.mechanism == CKM_RSA_X_509 || chance(20) ? 256 : below(250);
        fill_input(dlen);
        data[0] = 0;
        rv = F->C_SignRecover(s, data, dlen, sig, &slen);
        out(rv, "C_SignRecover(recover,%lu) len=%lu", dlen, slen);
        CK_RV vrv = F->C_VerifyRecoverInit(s, &m, hp);
        out(vrv, "C_VerifyRecoverInit(recover,%lx)", (unsigned long)m.mechanism);
        /* The two runs have different keys: what is recovered must not depend on the
         * modulus, so a changed signature stays below any modulus (its last bit changed), and
         * without one, or when the signature or the verification runs with a key of an
         * earlier init (this one refused: the signature of another key may be above this
         * key's modulus in one run and below it in the other), the input is noise below any
         * modulus. */
        if (srv != CKR_OK || rv != CKR_OK || vrv != CKR_OK) {
            slen = 256;
            fill(sig, slen);
            sig[0] = 0;
        } else if (chance(20)) {
            sig[slen - 1] ^= 1;
        }
        o = pick_out(&olen);
        out(F->C_VerifyRecover(s, sig, slen, o, &olen), "C_VerifyRecover(recover,out=%d) len=%lu",
            o != NULL, olen);
        return;
    }
    if (chance(40)) {
        CK_MECHANISM m = { chance(50) ? CKM_RSA_PKCS : CKM_RSA_X_509, NULL, 0 };
        if (chance(5))
            m.mechanism = CKM_SHA256_RSA_PKCS; /* not a recovery mechanism */
        CK_RV rv = verify ? F->C_VerifyRecoverInit(s, &m, pick_obj())
                          : F->C_SignRecoverInit(s, &m, pick_obj());
        out(rv, "C_%sRecoverInit(%lx)", verify ? "Verify" : "Sign", (unsigned long)m.mechanism);
        return;
    }
    o = pick_out(&olen);
    if (verify) {
        dlen = next_signature();
        out(F->C_VerifyRecover(s, buf2, dlen, o, &olen), "C_VerifyRecover(%lu,out=%d) len=%lu",
            dlen, o != NULL, olen);
    } else {
        dlen = chance(30) ? 256 : below(300);
        fill_input(dlen);
        if (dlen == 256)
            data[0] = 0;
        out(F->C_SignRecover(s, data, dlen, o, &olen), "C_SignRecover(%lu,out=%d) len=%lu", dlen,
            o != NULL, olen);
    }
}

/* C_VerifySignature* (PKCS#11 3.2): the signature given at init (noise, or of a length that
 * fits), then single-part or multi-part data. */
static void do_verify_signature(void)
{
    CK_SESSION_HANDLE s = pick_sess();
    CK_ULONG dlen;
    if (!F32)
        return;
    switch (chance(40) ? 0 : 1 + below(3)) {
    case 0: {
        CK_MECHANISM *m = pick_mech(2);
        CK_ULONG slen = next_signature();
        out(F32->C_VerifySignatureInit(s, m, pick_obj(), buf2, slen),
            "C_VerifySignatureInit(%lx,%lu)", m ? (unsigned long)m->mechanism : 0UL, slen);
        break;
    }
    case 1:
        dlen = next_input();
        out(F32->C_VerifySignature(s, data, dlen), "C_VerifySignature(%lu)", dlen);
        break;
    case 2:
        dlen = next_input();
        out(F32->C_VerifySignatureUpdate(s, data, dlen), "C_VerifySignatureUpdate(%lu)", dlen);
        break;
    default:
        out(F32->C_VerifySignatureFinal(s), "C_VerifySignatureFinal");
        break;
    }
}

/* C_DeriveKey with ECDH on P-256: the peer's point is a public key's CKA_EC_POINT of this run
 * (read, not traced: its value differs between the runs, its length does not) or noise. */
static void do_derive(void)
{
    static CK_OBJECT_CLASS cls = CKO_SECRET_KEY;
    static CK_KEY_TYPE kt = CKK_AES;
    CK_SESSION_HANDLE s = pick_sess();
    CK_BYTE point[80];
    CK_ATTRIBUTE a = { CKA_EC_POINT, point, sizeof point };
    CK_ECDH1_DERIVE_PARAMS p;
    CK_MECHANISM m = { CKM_ECDH1_DERIVE, &p, sizeof p };
    CK_ULONG len = chance(85) ? 16 + 16 * below(2) : below(40);
    CK_ATTRIBUTE t[5];
    int n = 0, from_key = 0;
    CK_OBJECT_HANDLE peer = pick_obj(), base = pick_obj(), h = 0;
    CK_RV rv;
    if (chance(30)) {
        /* a P-256 pair that may derive, its public key the peer */
        static const CK_BYTE p256[] = { 0x06, 0x08, 0x2a, 0x86, 0x48,
                                        0xce, 0x3d, 0x03, 0x01, 0x07 };
        CK_MECHANISM gen = { CKM_EC_KEY_PAIR_GEN, NULL, 0 };
        CK_ATTRIBUTE pub[] = { { CKA_EC_PARAMS, (void *)p256, sizeof p256 } };
        CK_ATTRIBUTE priv[] = { BOOL(CKA_DERIVE, &T), BOOL(CKA_PRIVATE, &Fa) };
        rv = F->C_GenerateKeyPair(s, &gen, pub, 1, priv, 2, &peer, &base);
        out(rv, "C_GenerateKeyPair(derive)");
        if (rv != CKR_OK)
            return;
        keep_obj(peer);
        keep_obj(base);
    }
    if (chance(70) && F->C_GetAttributeValue(s, peer, &a, 1) == CKR_OK && a.ulValueLen >= 65) {
        /* DER OCTET STRING around the uncompressed point, or the point itself */
        from_key = 1;
    } else {
        a.ulValueLen = 65;
        fill(point, 65);
        point[0] = 4;
    }
    if (from_key && point[0] == 0x04 && point[1] == 65) {
        memmove(point, point + 2, 65);
        a.ulValueLen = 65;
    }
    p.kdf = chance(90) ? CKD_NULL : CKD_SHA256_KDF;
    p.ulSharedDataLen = 0;
    p.pSharedData = NULL;
    p.ulPublicDataLen = chance(95) ? a.ulValueLen : below(65);
    p.pPublicData = point;
    if (chance(5))
        m.ulParameterLen = below(sizeof p);
    t[n++] = (CK_ATTRIBUTE){ CKA_CLASS, &cls, sizeof cls };
    t[n++] = (CK_ATTRIBUTE){ CKA_KEY_TYPE, &kt, sizeof kt };
    t[n++] = (CK_ATTRIBUTE){ CKA_VALUE_LEN, &len, sizeof len };
    t[n++] = BOOL(CKA_ENCRYPT, tf());
    t[n++] = BOOL(CKA_TOKEN, chance(15) ? &T : &Fa);
    rv = F->C_DeriveKey(s, &m, base, t, n, &h);
    out(rv, "C_DeriveKey(ECDH,len=%lu,kdf=%lx,peer=%d)", len, (unsigned long)p.kdf, from_key);
    if (rv == CKR_OK)
        keep_obj(h);
}

/* ML-KEM-768 (PKCS#11 3.2): a key pair, C_EncapsulateKey with a key of this run, and
 * C_DecapsulateKey of the last ciphertext, whole, damaged or cut short. */
static CK_BYTE kem_ct[1600];
static CK_ULONG kem_ct_len;
static CK_OBJECT_HANDLE kem_pub, kem_priv; /* the last pair generated here */
static void do_kem(void)
{
    static CK_OBJECT_CLASS cls = CKO_SECRET_KEY;
    static CK_KEY_TYPE kt;
    static CK_ML_KEM_PARAMETER_SET_TYPE ps = CKP_ML_KEM_768;
    CK_SESSION_HANDLE s = pick_sess();
    CK_MECHANISM m = { chance(95) ? CKM_ML_KEM : CKM_ECDH1_DERIVE, NULL, 0 };
    CK_ULONG len = chance(85) ? 32 : below(40);
    CK_ATTRIBUTE t[5];
    int n = 0, kind = below(5);
    CK_OBJECT_HANDLE h = 0;
    CK_RV rv;
    if (!F32)
        return;
    if (kind == 0 || kem_pub == 0) {
        CK_MECHANISM gen = { CKM_ML_KEM_KEY_PAIR_GEN, NULL, 0 };
        CK_ATTRIBUTE pub[] = { { CKA_PARAMETER_SET, &ps, chance(95) ? sizeof ps : below(8) },
                               BOOL(CKA_ENCAPSULATE, chance(80) ? &T : &Fa),
                               BOOL(CKA_TOKEN, chance(15) ? &T : &Fa) };
        CK_ATTRIBUTE priv[] = { BOOL(CKA_DECAPSULATE, chance(80) ? &T : &Fa),
                                BOOL(CKA_SENSITIVE, tf()),
                                BOOL(CKA_TOKEN, chance(15) ? &T : &Fa) };
        CK_OBJECT_HANDLE hp = 0, hv = 0;
        rv = F->C_GenerateKeyPair(s, &gen, pub, 3, priv, 3, &hp, &hv);
        out(rv, "C_GenerateKeyPair(ML-KEM-768)");
        if (rv == CKR_OK) {
            keep_obj(hp);
            keep_obj(hv);
            kem_pub = hp;
            kem_priv = hv;
        }
        return;
    }
    kt = chance(80) ? CKK_AES : CKK_GENERIC_SECRET;
    if (chance(90)) t[n++] = (CK_ATTRIBUTE){ CKA_CLASS, &cls, sizeof cls };
    t[n++] = (CK_ATTRIBUTE){ CKA_KEY_TYPE, &kt, sizeof kt };
    if (chance(60)) t[n++] = (CK_ATTRIBUTE){ CKA_VALUE_LEN, &len, sizeof len };
    t[n++] = BOOL(CKA_ENCRYPT, tf());
    t[n++] = BOOL(CKA_TOKEN, chance(15) ? &T : &Fa);
    if (kind <= 2) {
        CK_ULONG clen;
        CK_BYTE *c;
        switch (below(6)) {
        case 0: clen = 0; c = NULL; break;
        case 1: clen = below(1100); c = kem_ct; break;
        default: clen = sizeof kem_ct; c = kem_ct; break; /* half the calls */
        }
        rv = F32->C_EncapsulateKey(s, &m, chance(70) ? kem_pub : pick_obj(), t, n, c, &clen, &h);
        out(rv, "C_EncapsulateKey(%lx,n=%d,out=%d) len=%lu", (unsigned long)m.mechanism, n,
            c != NULL, (unsigned long)clen);
        if (rv == CKR_OK && c != NULL) {
            kem_ct_len = clen;
            keep_obj(h);
        }
        return;
    }
    CK_ULONG clen = kem_ct_len;
    if (chance(15) && clen > 0)
        kem_ct[below(clen)] ^= (CK_BYTE)(1 + below(255));
    else if (chance(10))
        clen = below(clen + 1);
    rv = F32->C_DecapsulateKey(s, &m, chance(70) ? kem_priv : pick_obj(), t, n, kem_ct, clen, &h);
    out(rv, "C_DecapsulateKey(%lx,n=%d,len=%lu)", (unsigned long)m.mechanism, n,
        (unsigned long)clen);
    if (rv == CKR_OK)
        keep_obj(h);
}

/* The dual-function updates: the cipher step and the digest, signature or verification of the
 * plaintext, with whatever operations the session has active. */
static void do_dual(void)
{
    static const char *nm[] = { "DigestEncryptUpdate", "DecryptDigestUpdate", "SignEncryptUpdate",
                                "DecryptVerifyUpdate" };
    update_fn fns[4] = { F->C_DigestEncryptUpdate, F->C_DecryptDigestUpdate,
                         F->C_SignEncryptUpdate, F->C_DecryptVerifyUpdate };
    unsigned i = below(4);
    CK_SESSION_HANDLE s = pick_sess();
    CK_ULONG olen, dlen;
    CK_BYTE *o;
    if (chance(20)) {
        /* both inits the function needs, with a new AES key that allows them */
        static CK_OBJECT_CLASS cls = CKO_SECRET_KEY;
        static CK_KEY_TYPE kt = CKK_AES;
        static CK_BYTE value[16];
        CK_ATTRIBUTE t[] = { { CKA_CLASS, &cls, sizeof cls }, { CKA_KEY_TYPE, &kt, sizeof kt },
                             { CKA_VALUE, value, sizeof value },  BOOL(CKA_ENCRYPT, &T),
                             BOOL(CKA_DECRYPT, &T), BOOL(CKA_SIGN, &T), BOOL(CKA_VERIFY, &T) };
        CK_MECHANISM m = { CKM_AES_CTR, NULL, 0 }, m2 = { CKM_AES_CMAC, NULL, 0 };
        static CK_AES_CTR_PARAMS ctr;
        CK_OBJECT_HANDLE k = 0;
        CK_RV rv;
        fill(value, sizeof value);
        rv = F->C_CreateObject(s, t, sizeof t / sizeof t[0], &k);
        out(rv, "C_CreateObject(dual)");
        if (rv != CKR_OK)
            return;
        keep_obj(k);
        switch (below(3)) {
        case 0: m.mechanism = CKM_AES_ECB; break;
        case 1: m.mechanism = CKM_AES_CBC_PAD; m.pParameter = iv; m.ulParameterLen = 16; break;
        default:
            ctr.ulCounterBits = 128;
            memcpy(ctr.cb, iv, 16);
            m.pParameter = &ctr;
            m.ulParameterLen = sizeof ctr;
            break;
        }
        rv = (i == 1 || i == 3 ? F->C_DecryptInit : F->C_EncryptInit)(s, &m, k);
        out(rv, "C_%sInit(dual,%lx)", i == 1 || i == 3 ? "Decrypt" : "Encrypt",
            (unsigned long)m.mechanism);
        if (i < 2) {
            m2.mechanism = chance(50) ? CKM_SHA256 : CKM_SHA_1;
            rv = F->C_DigestInit(s, &m2);
        } else {
            m2.mechanism = chance(70) ? CKM_AES_CMAC : CKM_AES_ECB;
            rv = (i == 2 ? F->C_SignInit : F->C_VerifyInit)(s, &m2, k);
        }
        out(rv, "second init(dual,%lx)", (unsigned long)m2.mechanism);
        for (rv = below(4); rv > 0; rv--) {
            dlen = next_input();
            o = pick_out(&olen);
            out(fns[i](s, data, dlen, o, &olen), "   + C_%s(%lu,out=%d) len=%lu", nm[i], dlen,
                o != NULL, olen);
        }
        return;
    }
    if (chance(40)) {
        /* one of the two inits the function needs */
        if (chance(50))
            init_crypt(s, i == 1 || i == 3);
        else if (i < 2)
            init_digest(s);
        else
            init_sign(s, i == 3);
        return;
    }
    dlen = next_input();
    o = pick_out(&olen);
    out(fns[i](s, data, dlen, o, &olen), "C_%s(%lu,out=%d) len=%lu", nm[i], dlen, o != NULL, olen);
}

/* C_GetOperationState, and C_SetOperationState of the last state saved (as saved, truncated,
 * with its first byte changed) or of noise.  The length of a saved state is not traced: slot 0
 * puts the name of the provider running the digest in front of the token's state. */
static CK_BYTE saved[4096];
static CK_ULONG saved_len;
static void do_state(void)
{
    static CK_BYTE st[sizeof saved];
    CK_SESSION_HANDLE s = pick_sess();
    CK_ULONG n = saved_len;
    const char *what = "as saved";
    CK_RV rv;
    if (chance(50)) {
        CK_BYTE *o = chance(30) ? NULL : saved;
        int small = o && chance(20);
        n = o ? (small ? below(8) : sizeof saved) : 0;
        rv = F->C_GetOperationState(s, o, &n);
        out(rv, "C_GetOperationState(out=%d,small=%d)", o != NULL, small);
        if (rv == CKR_OK && o)
            saved_len = n;
        return;
    }
    memcpy(st, saved, n);
    switch (below(5)) {
    case 0:
        n = n > 4 ? n - 1 - below(4) : 0;
        what = "truncated";
        break;
    case 1:
        st[0] ^= 1;
        what = "first byte changed";
        break;
    case 2:
        n = below(64);
        fill(st, n);
        what = "noise";
        break;
    default:
        break;
    }
    rv = F->C_SetOperationState(s, st, n, chance(10) ? pick_obj() : 0, 0);
    out(rv, "C_SetOperationState(%s)", what);
}

/* Message-based encryption (PKCS#11 3.0): C_MessageEncryptInit/C_MessageDecryptInit with
 * AES-GCM, single-part messages with per-message parameters, and the finals. (The software
 * token has no multi-part messages, C_*MessageBegin/Next: it answers CKR_FUNCTION_NOT_SUPPORTED
 * whatever the session, where slot 0 checks the session first and then asks the token.) */
static void do_message(void)
{
    static CK_GCM_MESSAGE_PARAMS mp;
    static CK_BYTE tag[16];
    CK_SESSION_HANDLE s = pick_sess();
    int dec = chance(40);
    CK_ULONG olen, dlen, alen = below(33);
    CK_BYTE *o;
    const char *nm = dec ? "Decrypt" : "Encrypt";
    if (!F3)
        return;
    fill(iv, sizeof iv);
    fill(aad, sizeof aad);
    mp.pIv = iv;
    mp.ulIvLen = chance(85) ? 12 : below(20);
    mp.ulIvFixedBits = 0;
    /* decryption takes the IV as given; encryption has the token make it (random), or not */
    mp.ivGenerator = dec || chance(30) ? CKG_NO_GENERATE : CKG_GENERATE_RANDOM;
    mp.pTag = tag;
    mp.ulTagBits = chance(85) ? 128 : 8 * below(20);
    CK_ULONG plen = chance(92) ? sizeof mp : below(sizeof mp);
    switch (below(6)) {
    case 0: case 1: {
        CK_MECHANISM m = { chance(90) ? CKM_AES_GCM : CKM_AES_CBC, NULL, 0 };
        CK_OBJECT_HANDLE k = pick_obj();
        CK_RV rv = dec ? F3->C_MessageDecryptInit(s, &m, k) : F3->C_MessageEncryptInit(s, &m, k);
        out(rv, "C_Message%sInit(%lx)", nm, (unsigned long)m.mechanism);
        break;
    }
    case 2: case 3: case 4:
        dlen = next_input();
        o = pick_out(&olen);
        if (dec)
            out(F3->C_DecryptMessage(s, &mp, plen, aad, alen, data, dlen, o, &olen),
                "C_DecryptMessage(%lu,%lu,out=%d) len=%lu", plen, dlen, o != NULL, olen);
        else
            out(F3->C_EncryptMessage(s, &mp, plen, aad, alen, data, dlen, o, &olen),
                "C_EncryptMessage(%lu,%lu,out=%d) len=%lu", plen, dlen, o != NULL, olen);
        break;
    default:
        out(dec ? F3->C_MessageDecryptFinal(s) : F3->C_MessageEncryptFinal(s),
            "C_Message%sFinal", nm);
        break;
    }
}

static void do_find(void)
{
    CK_SESSION_HANDLE s = pick_sess();
    switch (below(3)) {
    case 0: {
        CK_OBJECT_CLASS cls = CKO_SECRET_KEY;
        CK_UTF8CHAR label[] = "seqdiff";
        CK_ATTRIBUTE t[2];
        int n = 0;
        if (chance(50)) t[n++] = (CK_ATTRIBUTE){ CKA_CLASS, &cls, sizeof cls };
        if (chance(30)) t[n++] = (CK_ATTRIBUTE){ CKA_LABEL, label, sizeof label - 1 };
        out(F->C_FindObjectsInit(s, n ? t : NULL, n), "C_FindObjectsInit(%d)", n);
        break;
    }
    case 1: {
        CK_OBJECT_HANDLE found[8];
        CK_ULONG max = below(9), got = 99;
        CK_RV rv = F->C_FindObjects(s, found, max, &got);
        out(rv, "C_FindObjects(%lu) got=%lu", max, rv == CKR_OK ? got : 0);
        if (rv == CKR_OK && got > 0 && chance(50))
            keep_obj(found[below(got)]);
        break;
    }
    default:
        out(F->C_FindObjectsFinal(s), "C_FindObjectsFinal");
        break;
    }
}

static void do_attrs(void)
{
    static const CK_ATTRIBUTE_TYPE types[] = { CKA_CLASS, CKA_KEY_TYPE, CKA_VALUE, CKA_VALUE_LEN,
                                               CKA_LABEL, CKA_SENSITIVE, CKA_ENCRYPT, CKA_TOKEN,
                                               CKA_LOCAL, 0x7ffff123UL };
    CK_SESSION_HANDLE s = pick_sess();
    CK_OBJECT_HANDLE h = pick_obj();
    CK_ATTRIBUTE_TYPE ty = types[below(sizeof types / sizeof types[0])];
    if (chance(70)) {
        CK_ATTRIBUTE a = { ty, NULL, 0 };
        switch (below(3)) {
        case 0: break;
        case 1: a.pValue = buf; a.ulValueLen = below(4); break;
        default: a.pValue = buf; a.ulValueLen = sizeof buf; break;
        }
        CK_RV rv = F->C_GetAttributeValue(s, h, &a, 1);
        out(rv, "C_GetAttributeValue(%lx,buf=%d) len=%ld", (unsigned long)ty, a.pValue != NULL,
            (long)a.ulValueLen);
        return;
    }
    CK_UTF8CHAR label[] = "renamed";
    CK_ATTRIBUTE a;
    switch (below(4)) {
    case 0: a = (CK_ATTRIBUTE){ CKA_LABEL, label, sizeof label - 1 }; break;
    case 1: a = BOOL(CKA_ENCRYPT, tf()); break;
    case 2: a = BOOL(CKA_SENSITIVE, tf()); break;
    default: a = (CK_ATTRIBUTE){ CKA_VALUE, buf2, 16 }; break;
    }
    out(F->C_SetAttributeValue(s, h, &a, 1), "C_SetAttributeValue(%lx)", (unsigned long)a.type);
}

static void do_objects(void)
{
    CK_SESSION_HANDLE s = pick_sess();
    if (chance(40)) {
        CK_OBJECT_HANDLE h = pick_obj();
        CK_RV rv = F->C_DestroyObject(s, h);
        unsigned i;
        out(rv, "C_DestroyObject");
        for (i = 0; rv == CKR_OK && i < NOBJ; i++)
            if (obj[i] == h)
                obj[i] = 0;
        return;
    }
    if (chance(25)) {
        CK_ULONG size = 0;
        CK_RV rv = F->C_GetObjectSize(s, pick_obj(), chance(95) ? &size : NULL);
        /* the size only as zero or not: an RSA key's encoding varies by a byte or two
         * with its values, which differ between the two runs */
        out(rv, "C_GetObjectSize size>0=%d", rv == CKR_OK && size > 0);
        return;
    }
    CK_ATTRIBUTE t[1] = { { CKA_TOKEN, tf(), sizeof(CK_BBOOL) } };
    CK_OBJECT_HANDLE h = 0;
    CK_RV rv = F->C_CopyObject(s, pick_obj(), t, chance(50), &h);
    out(rv, "C_CopyObject");
    if (rv == CKR_OK)
        keep_obj(h);
}

static void do_session_misc(void)
{
    CK_SESSION_HANDLE s = pick_sess();
    switch (below(3)) {
    case 0: {
        CK_SESSION_INFO si;
        CK_RV rv = F->C_GetSessionInfo(s, &si);
        out(rv, "C_GetSessionInfo state=%lu flags=%lx", rv ? 0UL : (unsigned long)si.state,
            rv ? 0UL : (unsigned long)si.flags);
        break;
    }
    case 1:
        if (F3) {
            static const CK_FLAGS fl[] = { CKF_ENCRYPT, CKF_DECRYPT, CKF_DIGEST, CKF_SIGN,
                                           CKF_VERIFY, CKF_FIND_OBJECTS, CKF_MESSAGE_ENCRYPT,
                                           CKF_MESSAGE_DECRYPT };
            CK_FLAGS f = fl[below(8)] | (chance(30) ? fl[below(8)] : 0);
            out(F3->C_SessionCancel(s, f), "C_SessionCancel(%lx)", (unsigned long)f);
        }
        break;
    default: {
        CK_BYTE r[16];
        switch (below(8)) {
        case 0:
            out(F->C_SeedRandom(s, r, below(17)), "C_SeedRandom");
            break;
        case 1:
            out(chance(50) ? F->C_GetFunctionStatus(s) : F->C_CancelFunction(s),
                "C_GetFunctionStatus/C_CancelFunction");
            break;
        case 2:
            if (F32) {
                CK_FLAGS fl = 0;
                CK_RV rv = F32->C_GetSessionValidationFlags(s, CKS_LAST_VALIDATION_OK,
                                                            chance(95) ? &fl : NULL);
                out(rv, "C_GetSessionValidationFlags flags=%lx", (unsigned long)fl);
                break;
            }
            /* fall through */
        default:
            out(F->C_GenerateRandom(s, chance(95) ? r : NULL, below(17)), "C_GenerateRandom");
            break;
        }
        break;
    }
    }
}

/* TEST_SLOT given as label=LABEL: the first slot whose token has that label. */
static const char *slot_label;

/* Slot `want`; for -1 the first slot with a token (the reference module); for -2 the first
 * whose token is labelled `slot_label`. */
static CK_RV find_slot(long want)
{
    CK_SLOT_ID slots[16];
    CK_ULONG n = 16, i;
    CK_RV rv;
    if (want >= 0) {
        the_slot = (CK_SLOT_ID)want;
        return CKR_OK;
    }
    rv = F->C_GetSlotList(CK_TRUE, slots, &n);
    if (rv != CKR_OK)
        return rv;
    for (i = 0; i < n; i++) {
        CK_TOKEN_INFO ti;
        size_t len = slot_label ? strlen(slot_label) : 0;
        if (want == -1 ||
            (F->C_GetTokenInfo(slots[i], &ti) == CKR_OK && len <= sizeof ti.label &&
             memcmp(ti.label, slot_label, len) == 0 &&
             (len == sizeof ti.label || ti.label[len] == ' '))) {
            the_slot = slots[i];
            return CKR_OK;
        }
    }
    return CKR_TOKEN_NOT_PRESENT;
}

/* Runs seed `seed` against `path`, one line per call on `fd`; exit 0 when the run could start. */
static int child(const char *path, long slot, unsigned long long seed, int steps, int fd)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CK_C_GetFunctionList gfl;
    CK_C_GetInterface gi;
    CK_INTERFACE *itf = NULL;
    CK_VERSION v30 = { 3, 0 }, v32 = { 3, 2 };
    CK_SESSION_HANDLE s0;
    CK_UTF8CHAR first[] = "changeme";
    int i;
    trace = fdopen(fd, "w");
    if (!h || !trace) {
        fprintf(stderr, "seqdiff: cannot load %s: %s\n", path, dlerror());
        return 3;
    }
    gfl = (CK_C_GetFunctionList)dlsym(h, "C_GetFunctionList");
    if (!gfl || gfl(&F) != CKR_OK)
        return 3;
    gi = (CK_C_GetInterface)dlsym(h, "C_GetInterface");
    if (gi && gi((CK_UTF8CHAR *)"PKCS 11", &v30, &itf, 0) == CKR_OK && itf)
        F3 = itf->pFunctionList;
    itf = NULL;
    if (gi && gi((CK_UTF8CHAR *)"PKCS 11", &v32, &itf, 0) == CKR_OK && itf)
        F32 = itf->pFunctionList;
    if (F->C_Initialize(NULL) != CKR_OK || find_slot(slot) != CKR_OK)
        return 3;
    /* Setup (not compared): the user PIN changed from the fresh token's. */
    if (F->C_OpenSession(the_slot, CKF_SERIAL_SESSION | CKF_RW_SESSION, NULL, NULL, &s0) != CKR_OK ||
        F->C_Login(s0, CKU_USER, first, 8) != CKR_OK ||
        F->C_SetPIN(s0, first, 8, pin, (CK_ULONG)strlen((char *)pin)) != CKR_OK ||
        F->C_Logout(s0) != CKR_OK || F->C_CloseSession(s0) != CKR_OK) {
        fprintf(stderr, "seqdiff: setup failed on %s\n", path);
        return 3;
    }
    rng_state = seed;
    for (i = 0; i < steps; i++) {
        fprintf(trace, "%4d ", i);
        switch (below(30)) {
        case 0: do_open(); break;
        case 1: if (chance(15)) do_close(); else do_open(); break;
        case 2: do_login(); break;
        case 3: do_create(); break;
        case 4: do_generate(); break;
        case 5: case 6: case 7: do_crypt(0); break;
        case 8: case 9: do_crypt(1); break;
        case 10: case 11: do_digest(); break;
        case 12: case 13: do_sign(0); break;
        case 14: do_sign(1); break;
        case 15: do_find(); break;
        case 16: case 17: do_attrs(); break;
        case 18: do_objects(); break;
        case 19: do_session_misc(); break;
        case 20: do_keypair(); break;
        case 21: do_message(); break;
        case 22: case 24: do_dual(); break;
        case 23: do_state(); break;
        case 25: do_recover(); break;
        case 26: do_verify_signature(); break;
        case 27: do_derive(); break;
        case 28: if (chance(30)) do_pin(); else do_session_misc(); break; /* PIN calls cost an scrypt each */
        default: if (chance(40)) do_kem(); else do_wrap(); break;
        }
        fflush(trace);
    }
    fprintf(trace, "end %s\n", general_errors ? "with CKR_GENERAL_ERROR" : "");
    fflush(trace);
    F->C_Finalize(NULL);
    return 0;
}

/* Runs one child in a fresh keystore; returns its trace (malloc'd) and its wait status. */
static char *run(const char *path, long slot, unsigned long long seed, int steps, int *status)
{
    int p[2];
    char dir[] = "/tmp/seqdiff.XXXXXX";
    char *text = NULL;
    size_t len = 0, cap = 0;
    pid_t pid;
    if (pipe(p) != 0 || !mkdtemp(dir))
        exit(2);
    pid = fork();
    if (pid == 0) {
        close(p[0]);
        /* the built-in default configuration (no /etc/opencf assumed) and a fresh keystore */
        setenv("OPENCF_SOFTTOKEN_DIR", dir, 1);
        setenv("XDG_CONFIG_HOME", dir, 1);
        unsetenv("OPENCF_CONF");
        _exit(child(path, slot, seed, steps, p[1]));
    }
    close(p[1]);
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 65536;
            text = realloc(text, cap);
        }
        ssize_t n = read(p[0], text + len, cap - len - 1);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    text[len] = 0;
    close(p[0]);
    waitpid(pid, status, 0);
    {
        char cmd[64];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "seqdiff: could not remove %s\n", dir);
    }
    return text;
}

static void show_context(const char *a, const char *where)
{
    /* the five lines before `where` in a */
    const char *start = where;
    int lines = 0;
    while (start > a && lines < 6) {
        start--;
        if (*start == '\n')
            lines++;
    }
    if (*start == '\n')
        start++;
    fprintf(stdout, "%.*s", (int)(where - start), start);
}

int main(int argc, char **argv)
{
    unsigned long long first;
    int seeds, steps, s, failed = 0;
    long slot;
    if (argc != 7) {
        fprintf(stderr, "usage: %s REF.so TEST.so TEST_SLOT FIRST_SEED SEEDS STEPS\n", argv[0]);
        return 2;
    }
    if (strncmp(argv[3], "label=", 6) == 0) {
        slot_label = argv[3] + 6;
        slot = -2;
    } else {
        slot = strtol(argv[3], NULL, 0);
    }
    first = strtoull(argv[4], NULL, 0);
    seeds = atoi(argv[5]);
    steps = atoi(argv[6]);
    for (s = 0; s < seeds; s++) {
        unsigned long long seed = first + (unsigned long long)s;
        int st_a, st_b;
        char *a = run(argv[1], -1, seed, steps, &st_a);
        char *b = run(argv[2], slot, seed, steps, &st_b);
        const char *pa = a, *pb = b;
        int bad = 0;
        if (!WIFEXITED(st_a) || WEXITSTATUS(st_a) != 0 || !WIFEXITED(st_b) ||
            WEXITSTATUS(st_b) != 0) {
            printf("FAIL seed %llu: a child did not finish (reference status %d, test status %d)\n",
                   seed, st_a, st_b);
            bad = 1;
        }
        while (!bad && *pa && *pb) {
            const char *ea = strchr(pa, '\n'), *eb = strchr(pb, '\n');
            size_t la = ea ? (size_t)(ea - pa) : strlen(pa), lb = eb ? (size_t)(eb - pb) : strlen(pb);
            if (la != lb || memcmp(pa, pb, la) != 0) {
                printf("FAIL seed %llu: the traces differ\n", seed);
                show_context(a, pa);
                printf("  reference: %.*s\n  test:      %.*s\n", (int)la, pa, (int)lb, pb);
                bad = 1;
                break;
            }
            if (!ea || !eb)
                break;
            pa = ea + 1;
            pb = eb + 1;
        }
        if (!bad && (strstr(a, "with CKR_GENERAL_ERROR") || strstr(b, "with CKR_GENERAL_ERROR"))) {
            printf("FAIL seed %llu: CKR_GENERAL_ERROR (a caught panic or an internal error)\n", seed);
            bad = 1;
        }
        if (!bad && (!strstr(a, "\nend ") || !strstr(b, "\nend "))) {
            printf("FAIL seed %llu: a trace is incomplete\n", seed);
            bad = 1;
        }
        failed += bad;
        if (getenv("SEQDIFF_SHOW"))
            fputs(b, stderr);
        free(a);
        free(b);
    }
    printf("seqdiff: %d seeds passed, %d failed (%d steps each, seeds %llu..%llu)\n", seeds - failed,
           failed, steps, first, first + (unsigned long long)seeds - 1);
    return failed ? 1 : 0;
}
