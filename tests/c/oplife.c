/*
 * Operation life cycle and login rules, through the C ABI of a module: the software token
 * loaded alone, or slot 0 of libopencf.so (the framework answers as its keystore does).
 *
 *   oplife MODULE SLOT
 *
 * Checked, with the PKCS#11 3.2 rule each case follows:
 * - an update, C_Verify or C_VerifyFinal refused for its arguments (CKR_ARGUMENTS_BAD) ends
 *   its operation ("a call ... which results in an error terminates the operation");
 * - C_Sign and C_Verify "cannot be used to terminate a multi-part operation": after an update
 *   they answer CKR_OPERATION_ACTIVE, which ends the operation; C_SessionCancel ends the
 *   message-based operations its flags name;
 * - one verification at a time, C_Verify* or C_VerifySignature* (CKF_VERIFY ends either), and
 *   an init checks the session, an active operation and the mechanism before its parameter;
 * - CKF_ASYNC_SESSION opens a session, which C_GetSessionInfo flags so, exactly where the
 *   token flags CKF_ASYNC_SESSION_SUPPORTED (else CKR_SESSION_ASYNC_NOT_SUPPORTED);
 * - a key with CKA_ALWAYS_AUTHENTICATE signs and decrypts only after
 *   C_Login(CKU_CONTEXT_SPECIFIC), once per operation; without it C_Sign and C_Decrypt answer
 *   CKR_USER_NOT_LOGGED_IN and end the operation (a size query may come first);
 * - a sensitive key's CKA_VALUE is read-only whatever value C_SetAttributeValue or
 *   C_CopyObject gives it: the answer must not confirm a guess;
 * - handles of private objects are invalid after C_Logout, "even if a user is later logged
 *   back into the token", and a search begun before the logout no longer returns them;
 * - CKF_LIBRARY_CANT_CREATE_OS_THREADS: refused (CKR_NEED_TO_CREATE_THREADS) or kept;
 * - fork() while other threads use the keystore: the child's C_Initialize returns;
 * - key-handling rules: only the SO makes a key CKA_TRUSTED (in every call that makes one);
 *   a wrapping key's CKA_WRAP_TEMPLATE limits the keys it wraps; an unwrapping or base key's
 *   CKA_UNWRAP_TEMPLATE or CKA_DERIVE_TEMPLATE is applied to the new key, a caller's
 *   conflicting value refused; an HKDF salt key needs CKA_DERIVE;
 * - a key made by C_UnwrapKey or C_DeriveKey is what its content is: a template giving a
 *   secret part, another curve or another length is CKR_TEMPLATE_INCONSISTENT (ECB and CBC
 *   unwrapping cut their zero padding, as the mechanisms say), and content of a length its
 *   key type cannot have CKR_WRAPPED_KEY_INVALID; the same holds for C_GenerateKeyPair's
 *   private template (another curve or public exponent than the pair's);
 * - a digest that took a key (C_DigestKey) holds key bytes: C_GetOperationState answers
 *   CKR_STATE_UNSAVEABLE;
 * - a CK_BBOOL given as another byte than 0 or 1 is CK_TRUE to every reader: kept as 1, found
 *   by a search for CK_TRUE, and CKA_ALWAYS_AUTHENTICATE of 2 asks for the PIN;
 * - CKA_CHECK_VALUE is computed where PKCS#11 defines it (AES, DES3, generic secret); a
 *   template's other value is CKR_ATTRIBUTE_VALUE_INVALID, and one the token cannot compute
 *   is ignored; CKA_ALLOWED_MECHANISMS must be whole CK_MECHANISM_TYPEs; a copy may not make
 *   a private object public;
 * - objects made by one thread while another logs the user out or closes their session go
 *   with the others (their handles invalid after the next C_Login);
 * - with $OPLIFE_CRYPTOADM (slot 0): a forked child's operations are counted, exactly, beside
 *   its parent's.
 *
 * The token must be fresh (OPENCF_SOFTTOKEN_DIR of its own): its expired default user PIN
 * "changeme" is changed on the first login.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pkcs11.h"
#include "ckr_names.h"
#include "expect.h"

static CK_FUNCTION_LIST_3_0 *F;
static CK_SLOT_ID SLOT;
static CK_UTF8CHAR PIN_DEFAULT[] = "changeme";
static CK_UTF8CHAR PIN[] = "oplife-user-pin";
#define PINLEN(p) ((CK_ULONG)(sizeof(p) - 1))
static CK_BBOOL T = CK_TRUE, Fa = CK_FALSE;
#define A(t, v) { (t), &(v), sizeof(v) }
#define NA(a) (sizeof(a) / sizeof((a)[0]))

static CK_SESSION_HANDLE open_rw(void)
{
    CK_SESSION_HANDLE s;
    must("C_OpenSession", F->C_OpenSession(SLOT, CKF_SERIAL_SESSION | CKF_RW_SESSION, NULL, NULL, &s));
    return s;
}

static void login(CK_SESSION_HANDLE s)
{
    CK_RV rv = F->C_Login(s, CKU_USER, PIN, PINLEN(PIN));
    if (rv == CKR_OK || rv == CKR_USER_ALREADY_LOGGED_IN)
        return;
    must("C_Login (default PIN)", F->C_Login(s, CKU_USER, PIN_DEFAULT, PINLEN(PIN_DEFAULT)));
    must("C_SetPIN", F->C_SetPIN(s, PIN_DEFAULT, PINLEN(PIN_DEFAULT), PIN, PINLEN(PIN)));
}

static CK_OBJECT_CLASS cls_secret = CKO_SECRET_KEY;
static CK_KEY_TYPE kt_aes = CKK_AES, kt_gen = CKK_GENERIC_SECRET;
static CK_BYTE v16[16] = "0123456789abcdef";
static CK_BYTE v32[32] = "0123456789abcdef0123456789abcdef";
static CK_BYTE data32[32] = "thirty-two bytes of plain text!!";
static CK_BYTE iv[16];
static CK_MECHANISM m_cbcpad = { CKM_AES_CBC_PAD, iv, sizeof iv };
static CK_MECHANISM m_sha = { CKM_SHA256, NULL, 0 };
static CK_MECHANISM m_hmac = { CKM_SHA256_HMAC, NULL, 0 };
static CK_MECHANISM m_rsa_sha = { CKM_SHA256_RSA_PKCS, NULL, 0 };
static CK_MECHANISM m_rsa = { CKM_RSA_PKCS, NULL, 0 };

static CK_OBJECT_HANDLE make(CK_SESSION_HANDLE s, CK_ATTRIBUTE *a, CK_ULONG n)
{
    CK_OBJECT_HANDLE h;
    must("C_CreateObject", F->C_CreateObject(s, a, n, &h));
    return h;
}

/* A session AES-128 key that encrypts and decrypts. */
static CK_OBJECT_HANDLE make_aes(CK_SESSION_HANDLE s)
{
    CK_ATTRIBUTE ka[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v16),
                          A(CKA_ENCRYPT, T), A(CKA_DECRYPT, T) };
    return make(s, ka, NA(ka));
}

/* A session generic secret that signs and verifies (HMAC). */
static CK_OBJECT_HANDLE make_hmac(CK_SESSION_HANDLE s)
{
    CK_ATTRIBUTE ha[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_gen), A(CKA_VALUE, v32),
                          A(CKA_SIGN, T), A(CKA_VERIFY, T) };
    return make(s, ha, NA(ha));
}

/* CKR_ARGUMENTS_BAD from an update, C_Verify or C_VerifyFinal ends the operation. */
static void argument_errors_end_operations(CK_SESSION_HANDLE s)
{
    CK_OBJECT_HANDLE aes = make_aes(s), hmac = make_hmac(s);
    CK_BYTE out[64], sig[32] = { 0 };
    CK_ULONG len;

    must("C_EncryptInit", F->C_EncryptInit(s, &m_cbcpad, aes));
    len = sizeof out;
    expect("C_EncryptUpdate(NULL data)", F->C_EncryptUpdate(s, NULL, 5, out, &len), CKR_ARGUMENTS_BAD);
    len = sizeof out;
    expect("  then C_EncryptUpdate", F->C_EncryptUpdate(s, data32, 16, out, &len),
           CKR_OPERATION_NOT_INITIALIZED);

    must("C_DecryptInit", F->C_DecryptInit(s, &m_cbcpad, aes));
    expect("C_DecryptUpdate(NULL length)", F->C_DecryptUpdate(s, data32, 16, out, NULL), CKR_ARGUMENTS_BAD);
    len = sizeof out;
    expect("  then C_DecryptUpdate", F->C_DecryptUpdate(s, data32, 16, out, &len),
           CKR_OPERATION_NOT_INITIALIZED);

    must("C_DigestInit", F->C_DigestInit(s, &m_sha));
    expect("C_DigestUpdate(NULL data)", F->C_DigestUpdate(s, NULL, 5), CKR_ARGUMENTS_BAD);
    expect("  then C_DigestUpdate", F->C_DigestUpdate(s, data32, 5), CKR_OPERATION_NOT_INITIALIZED);

    must("C_SignInit", F->C_SignInit(s, &m_hmac, hmac));
    expect("C_SignUpdate(NULL data)", F->C_SignUpdate(s, NULL, 5), CKR_ARGUMENTS_BAD);
    expect("  then C_SignUpdate", F->C_SignUpdate(s, data32, 5), CKR_OPERATION_NOT_INITIALIZED);

    must("C_VerifyInit", F->C_VerifyInit(s, &m_hmac, hmac));
    expect("C_VerifyUpdate(NULL data)", F->C_VerifyUpdate(s, NULL, 5), CKR_ARGUMENTS_BAD);
    expect("  then C_VerifyUpdate", F->C_VerifyUpdate(s, data32, 5), CKR_OPERATION_NOT_INITIALIZED);

    must("C_VerifyInit", F->C_VerifyInit(s, &m_hmac, hmac));
    expect("C_Verify(NULL data)", F->C_Verify(s, NULL, 32, sig, sizeof sig), CKR_ARGUMENTS_BAD);
    expect("  then C_Verify", F->C_Verify(s, data32, 32, sig, sizeof sig), CKR_OPERATION_NOT_INITIALIZED);

    must("C_VerifyInit", F->C_VerifyInit(s, &m_hmac, hmac));
    must("C_VerifyUpdate", F->C_VerifyUpdate(s, data32, 32));
    expect("C_VerifyFinal(NULL signature)", F->C_VerifyFinal(s, NULL, 32), CKR_ARGUMENTS_BAD);
    expect("  then C_VerifyFinal", F->C_VerifyFinal(s, sig, sizeof sig), CKR_OPERATION_NOT_INITIALIZED);
}

/* C_Sign and C_Verify cannot end a multi-part operation: after an update they answer
 * CKR_OPERATION_ACTIVE, and the error ends the operation. C_SessionCancel ends the
 * message-based operations its flags name. */
static void single_part_and_cancel_rules(CK_SESSION_HANDLE s)
{
    CK_OBJECT_HANDLE hmac = make_hmac(s), aes = make_aes(s);
    CK_MECHANISM gen = { CKM_RSA_PKCS_KEY_PAIR_GEN, NULL, 0 };
    CK_ULONG bits = 2048;
    CK_BYTE e[] = { 1, 0, 1 };
    CK_ATTRIBUTE pub_t[] = { A(CKA_MODULUS_BITS, bits), { CKA_PUBLIC_EXPONENT, e, 3 }, A(CKA_VERIFY, T) };
    CK_ATTRIBUTE priv_t[] = { A(CKA_SIGN, T) };
    CK_OBJECT_HANDLE pub, priv;
    CK_BYTE sig[256];
    CK_ULONG len;
    must("C_GenerateKeyPair", F->C_GenerateKeyPair(s, &gen, pub_t, NA(pub_t), priv_t, NA(priv_t), &pub, &priv));

    struct {
        const char *name;
        CK_MECHANISM *m;
        CK_OBJECT_HANDLE sign_key, verify_key;
    } keys[] = { { "HMAC", &m_hmac, hmac, hmac }, { "RSA", &m_rsa_sha, priv, pub } };
    for (size_t i = 0; i < NA(keys); i++) {
        char what[96];
        must("C_SignInit", F->C_SignInit(s, keys[i].m, keys[i].sign_key));
        must("C_SignUpdate", F->C_SignUpdate(s, data32, 16));
        len = sizeof sig;
        snprintf(what, sizeof what, "%s C_Sign after C_SignUpdate", keys[i].name);
        expect(what, F->C_Sign(s, data32 + 16, 16, sig, &len), CKR_OPERATION_ACTIVE);
        len = sizeof sig;
        expect("  then C_SignFinal (the error ended it)", F->C_SignFinal(s, sig, &len),
               CKR_OPERATION_NOT_INITIALIZED);
        must("C_SignInit", F->C_SignInit(s, keys[i].m, keys[i].sign_key));
        len = sizeof sig;
        must("C_Sign", F->C_Sign(s, data32, 32, sig, &len));
        must("C_VerifyInit", F->C_VerifyInit(s, keys[i].m, keys[i].verify_key));
        must("C_VerifyUpdate", F->C_VerifyUpdate(s, data32, 16));
        snprintf(what, sizeof what, "%s C_Verify after C_VerifyUpdate", keys[i].name);
        expect(what, F->C_Verify(s, data32, 32, sig, len), CKR_OPERATION_ACTIVE);
        expect("  then C_VerifyFinal (the error ended it)", F->C_VerifyFinal(s, sig, len),
               CKR_OPERATION_NOT_INITIALIZED);
    }

    /* C_Encrypt "must be called after C_EncryptInit without intervening C_EncryptUpdate
     * calls": in AES-CTR too, whose update could simply go on with the stream. */
    CK_AES_CTR_PARAMS cp = { 128, { 0 } };
    CK_MECHANISM ctr = { CKM_AES_CTR, &cp, sizeof cp };
    CK_BYTE ctr_out[32];
    CK_ULONG ctr_len = sizeof ctr_out;
    must("C_EncryptInit(CTR)", F->C_EncryptInit(s, &ctr, aes));
    must("C_EncryptUpdate(CTR)", F->C_EncryptUpdate(s, data32, 16, ctr_out, &ctr_len));
    ctr_len = sizeof ctr_out;
    expect("CTR C_Encrypt after C_EncryptUpdate", F->C_Encrypt(s, data32 + 16, 16, ctr_out, &ctr_len),
           CKR_OPERATION_ACTIVE);
    ctr_len = sizeof ctr_out;
    expect("  then C_EncryptUpdate (the error ended it)", F->C_EncryptUpdate(s, data32, 16, ctr_out, &ctr_len),
           CKR_OPERATION_NOT_INITIALIZED);
    must("C_DecryptInit(CTR)", F->C_DecryptInit(s, &ctr, aes));
    ctr_len = 0;
    must("C_DecryptUpdate(CTR) size query", F->C_DecryptUpdate(s, data32, 16, NULL, &ctr_len));
    ctr_len = sizeof ctr_out;
    expect("CTR C_Decrypt after a size query of C_DecryptUpdate", F->C_Decrypt(s, data32, 32, ctr_out, &ctr_len),
           CKR_OK);

    CK_BYTE gcm_iv[12] = { 0 }, tag[16], out[64];
    CK_GCM_MESSAGE_PARAMS gp = { gcm_iv, sizeof gcm_iv, 0, CKG_NO_GENERATE, tag, 128 };
    CK_MECHANISM gcm = { CKM_AES_GCM, NULL, 0 };
    must("C_MessageEncryptInit", F->C_MessageEncryptInit(s, &gcm, aes));
    expect("C_SessionCancel(CKF_MESSAGE_ENCRYPT)", F->C_SessionCancel(s, CKF_MESSAGE_ENCRYPT), CKR_OK);
    len = sizeof out;
    expect("  then C_EncryptMessage", F->C_EncryptMessage(s, &gp, sizeof gp, NULL, 0, data32, 32, out, &len),
           CKR_OPERATION_NOT_INITIALIZED);
    expect("  then C_MessageEncryptInit", F->C_MessageEncryptInit(s, &gcm, aes), CKR_OK);
    len = sizeof out;
    expect("  and C_EncryptMessage", F->C_EncryptMessage(s, &gp, sizeof gp, NULL, 0, data32, 32, out, &len),
           CKR_OK);
    must("C_MessageEncryptFinal", F->C_MessageEncryptFinal(s));
    must("C_MessageDecryptInit", F->C_MessageDecryptInit(s, &gcm, aes));
    expect("C_SessionCancel(CKF_MESSAGE_DECRYPT)", F->C_SessionCancel(s, CKF_MESSAGE_DECRYPT), CKR_OK);
    expect("  then C_MessageDecryptFinal", F->C_MessageDecryptFinal(s), CKR_OPERATION_NOT_INITIALIZED);
    expect("  then C_MessageDecryptInit", F->C_MessageDecryptInit(s, &gcm, aes), CKR_OK);
    must("C_MessageDecryptFinal", F->C_MessageDecryptFinal(s));
}

static CK_FUNCTION_LIST_3_2 *F32;

/* One verification at a time: C_Verify* and C_VerifySignature* (3.2) share CKF_VERIFY, the
 * only flag with which C_SessionCancel or an error can end either, so a session runs one of
 * the two at a time (CKR_OPERATION_ACTIVE for the other, "an active operation ... prevents
 * Cryptoki from activating the specified operation"). An error in one leaves no other. And an
 * init checks the session, an active operation and the mechanism before the mechanism's
 * parameter, as the other inits do. */
static void one_verification_at_a_time(CK_SESSION_HANDLE s)
{
    CK_OBJECT_HANDLE hmac = make_hmac(s);
    CK_BYTE sig[32], bad[32] = { 0 };
    CK_ULONG len = sizeof sig;
    must("C_SignInit", F->C_SignInit(s, &m_hmac, hmac));
    must("C_Sign", F->C_Sign(s, data32, 32, sig, &len));

    must("C_VerifySignatureInit", F32->C_VerifySignatureInit(s, &m_hmac, hmac, sig, sizeof sig));
    expect("C_VerifyInit while C_VerifySignature* is active", F->C_VerifyInit(s, &m_hmac, hmac),
           CKR_OPERATION_ACTIVE);
    expect("  the active one goes on: C_VerifySignature", F32->C_VerifySignature(s, data32, 32), CKR_OK);
    must("C_VerifyInit", F->C_VerifyInit(s, &m_hmac, hmac));
    expect("C_VerifySignatureInit while C_Verify* is active",
           F32->C_VerifySignatureInit(s, &m_hmac, hmac, sig, sizeof sig), CKR_OPERATION_ACTIVE);
    expect("  the active one goes on: C_Verify", F->C_Verify(s, data32, 32, sig, sizeof sig), CKR_OK);
    must("C_VerifySignatureInit", F32->C_VerifySignatureInit(s, &m_hmac, hmac, bad, sizeof bad));
    expect("C_VerifySignature of a wrong signature", F32->C_VerifySignature(s, data32, 32),
           CKR_SIGNATURE_INVALID);
    expect("  then C_VerifyInit", F->C_VerifyInit(s, &m_hmac, hmac), CKR_OK);
    expect("  and C_Verify", F->C_Verify(s, data32, 32, sig, sizeof sig), CKR_OK);

    CK_MECHANISM gcm_no_param = { CKM_AES_GCM, NULL, 0 };
    expect("C_VerifySignatureInit: a closed session before a bad parameter",
           F32->C_VerifySignatureInit(0xdead, &gcm_no_param, hmac, sig, sizeof sig),
           CKR_SESSION_HANDLE_INVALID);
    must("C_VerifySignatureInit", F32->C_VerifySignatureInit(s, &m_hmac, hmac, sig, sizeof sig));
    expect("C_VerifySignatureInit: an active operation before a bad parameter",
           F32->C_VerifySignatureInit(s, &gcm_no_param, hmac, sig, sizeof sig), CKR_OPERATION_ACTIVE);
    must("C_VerifySignature", F32->C_VerifySignature(s, data32, 32));
    expect("C_VerifySignatureInit: a mechanism that cannot verify, before its parameter",
           F32->C_VerifySignatureInit(s, &gcm_no_param, hmac, sig, sizeof sig), CKR_MECHANISM_INVALID);
    expect("C_VerifyInit: a mechanism that cannot verify, before its parameter",
           F->C_VerifyInit(s, &gcm_no_param, hmac), CKR_MECHANISM_INVALID);
    expect("C_SignInit: a mechanism that cannot sign, before its parameter",
           F->C_SignInit(s, &gcm_no_param, hmac), CKR_MECHANISM_INVALID);
}

/* CKF_ASYNC_SESSION (3.2): a token that flags CKF_ASYNC_SESSION_SUPPORTED opens such a session
 * and C_GetSessionInfo says so; one that does not answers CKR_SESSION_ASYNC_NOT_SUPPORTED. */
static void async_sessions_as_flagged(void)
{
    CK_TOKEN_INFO ti;
    CK_SESSION_HANDLE s;
    CK_SESSION_INFO si;
    must("C_GetTokenInfo", F->C_GetTokenInfo(SLOT, &ti));
    CK_RV rv = F->C_OpenSession(SLOT, CKF_SERIAL_SESSION | CKF_ASYNC_SESSION, NULL, NULL, &s);
    if (!(ti.flags & CKF_ASYNC_SESSION_SUPPORTED)) {
        expect("C_OpenSession(CKF_ASYNC_SESSION), not flagged as supported", rv,
               CKR_SESSION_ASYNC_NOT_SUPPORTED);
        return;
    }
    expect("C_OpenSession(CKF_ASYNC_SESSION), flagged as supported", rv, CKR_OK);
    if (rv != CKR_OK)
        return;
    must("C_GetSessionInfo", F->C_GetSessionInfo(s, &si));
    expect("  C_GetSessionInfo flags CKF_ASYNC_SESSION",
           (si.flags & CKF_ASYNC_SESSION) ? CKR_OK : CKR_GENERAL_ERROR, CKR_OK);
    must("C_CloseSession", F->C_CloseSession(s));
}

/* A sensitive key's value: read-only, whatever the guess. */
static void no_answer_confirms_a_guess(CK_SESSION_HANDLE s)
{
    CK_BYTE wrong[16] = "fedcba9876543210";
    CK_ATTRIBUTE ka[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v16),
                          A(CKA_ENCRYPT, T), A(CKA_SENSITIVE, T), A(CKA_EXTRACTABLE, Fa) };
    CK_OBJECT_HANDLE k = make(s, ka, NA(ka)), copy = 0;
    CK_ATTRIBUTE right[] = { A(CKA_VALUE, v16) }, guess[] = { A(CKA_VALUE, wrong) };
    expect("C_SetAttributeValue(CKA_VALUE = the key's value)", F->C_SetAttributeValue(s, k, right, 1),
           CKR_ATTRIBUTE_READ_ONLY);
    expect("C_SetAttributeValue(CKA_VALUE = another value)", F->C_SetAttributeValue(s, k, guess, 1),
           CKR_ATTRIBUTE_READ_ONLY);
    expect("C_CopyObject(CKA_VALUE = the key's value)", F->C_CopyObject(s, k, right, 1, &copy),
           CKR_ATTRIBUTE_READ_ONLY);
    expect("C_CopyObject(CKA_VALUE = another value)", F->C_CopyObject(s, k, guess, 1, &copy),
           CKR_ATTRIBUTE_READ_ONLY);
}

/* CKA_ALWAYS_AUTHENTICATE (given as the byte `flag`, CK_TRUE or another true byte): the PIN
 * again before each signature and each decryption. */
static void context_specific_login(CK_SESSION_HANDLE s, CK_BBOOL flag)
{
    CK_MECHANISM gen = { CKM_RSA_PKCS_KEY_PAIR_GEN, NULL, 0 };
    CK_ULONG bits = 2048;
    CK_BYTE e[] = { 1, 0, 1 };
    CK_ATTRIBUTE pub_t[] = { A(CKA_MODULUS_BITS, bits), { CKA_PUBLIC_EXPONENT, e, 3 },
                             A(CKA_VERIFY, T), A(CKA_ENCRYPT, T) };
    CK_ATTRIBUTE priv_t[] = { A(CKA_SIGN, T), A(CKA_DECRYPT, T), A(CKA_ALWAYS_AUTHENTICATE, flag) };
    CK_OBJECT_HANDLE pub, priv;
    CK_BYTE sig[256], ct[256], pt[256];
    CK_ULONG len, ct_len = sizeof ct;
    must("C_GenerateKeyPair", F->C_GenerateKeyPair(s, &gen, pub_t, NA(pub_t), priv_t, NA(priv_t), &pub, &priv));
    printf("#  CKA_ALWAYS_AUTHENTICATE given as %u\n", flag);

    expect("C_Login(CKU_CONTEXT_SPECIFIC) with no operation",
           F->C_Login(s, CKU_CONTEXT_SPECIFIC, PIN, PINLEN(PIN)), CKR_OPERATION_NOT_INITIALIZED);
    /* Signing. */
    must("C_SignInit", F->C_SignInit(s, &m_rsa_sha, priv));
    len = sizeof sig;
    expect("C_Sign without the context login", F->C_Sign(s, data32, 32, sig, &len), CKR_USER_NOT_LOGGED_IN);
    len = sizeof sig;
    expect("  then C_Sign (the error ended it)", F->C_Sign(s, data32, 32, sig, &len),
           CKR_OPERATION_NOT_INITIALIZED);
    must("C_SignInit", F->C_SignInit(s, &m_rsa_sha, priv));
    len = 0;
    expect("C_Sign size query before the context login", F->C_Sign(s, data32, 32, NULL, &len), CKR_OK);
    expect("C_Login(CKU_CONTEXT_SPECIFIC)", F->C_Login(s, CKU_CONTEXT_SPECIFIC, PIN, PINLEN(PIN)), CKR_OK);
    len = sizeof sig;
    expect("C_Sign after the context login", F->C_Sign(s, data32, 32, sig, &len), CKR_OK);
    must("C_VerifyInit", F->C_VerifyInit(s, &m_rsa_sha, pub));
    expect("  the signature verifies", F->C_Verify(s, data32, 32, sig, len), CKR_OK);
    must("C_SignInit", F->C_SignInit(s, &m_rsa_sha, priv));
    len = sizeof sig;
    expect("the next C_Sign needs the PIN again", F->C_Sign(s, data32, 32, sig, &len), CKR_USER_NOT_LOGGED_IN);
    /* A session whose signature was refused so can start another: nothing is left behind. */
    must("C_SignInit", F->C_SignInit(s, &m_rsa_sha, priv));
    expect("C_Login(CKU_CONTEXT_SPECIFIC)", F->C_Login(s, CKU_CONTEXT_SPECIFIC, PIN, PINLEN(PIN)), CKR_OK);
    len = sizeof sig;
    expect("C_Sign after the context login", F->C_Sign(s, data32, 32, sig, &len), CKR_OK);

    /* Decryption. */
    must("C_EncryptInit", F->C_EncryptInit(s, &m_rsa, pub));
    must("C_Encrypt", F->C_Encrypt(s, data32, 32, ct, &ct_len));
    must("C_DecryptInit", F->C_DecryptInit(s, &m_rsa, priv));
    len = sizeof pt;
    expect("C_Decrypt without the context login", F->C_Decrypt(s, ct, ct_len, pt, &len),
           CKR_USER_NOT_LOGGED_IN);
    len = sizeof pt;
    expect("  then C_Decrypt (the error ended it)", F->C_Decrypt(s, ct, ct_len, pt, &len),
           CKR_OPERATION_NOT_INITIALIZED);
    must("C_DecryptInit", F->C_DecryptInit(s, &m_rsa, priv));
    expect("C_Login(CKU_CONTEXT_SPECIFIC)", F->C_Login(s, CKU_CONTEXT_SPECIFIC, PIN, PINLEN(PIN)), CKR_OK);
    len = sizeof pt;
    expect("C_Decrypt after the context login", F->C_Decrypt(s, ct, ct_len, pt, &len), CKR_OK);
    if (len != 32 || memcmp(pt, data32, 32) != 0) {
        printf("FAIL the plaintext differs (%lu bytes)\n", len);
        failures++;
    }
    must("C_DecryptInit", F->C_DecryptInit(s, &m_rsa, priv));
    len = sizeof pt;
    expect("the next C_Decrypt needs the PIN again", F->C_Decrypt(s, ct, ct_len, pt, &len),
           CKR_USER_NOT_LOGGED_IN);
}

/* Handles of private objects after C_Logout and a new C_Login. */
static void private_handles_end_at_logout(CK_SESSION_HANDLE s)
{
    static CK_UTF8CHAR label[] = "oplife private";
    CK_ATTRIBUTE ka[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v16),
                          A(CKA_TOKEN, T), A(CKA_PRIVATE, T), A(CKA_ENCRYPT, T),
                          { CKA_LABEL, label, sizeof label - 1 } };
    CK_ATTRIBUTE by_class[] = { A(CKA_CLASS, cls_secret) };
    CK_ATTRIBUTE by_label[] = { { CKA_LABEL, label, sizeof label - 1 } };
    CK_OBJECT_HANDLE k = make(s, ka, NA(ka)), found[16];
    CK_ULONG n = 0;
    CK_KEY_TYPE kt;
    CK_ATTRIBUTE get[] = { A(CKA_KEY_TYPE, kt) };

    must("C_FindObjectsInit", F->C_FindObjectsInit(s, by_class, 1));
    must("C_Logout", F->C_Logout(s));
    /* The search may go on (PKCS#11 lets it), but without the objects the logout hid. */
    CK_RV rv = F->C_FindObjects(s, found, 16, &n);
    if (rv == CKR_OK) {
        for (CK_ULONG i = 0; i < n; i++) {
            if (found[i] == k) {
                printf("FAIL a search begun before C_Logout returned the private key after it\n");
                failures++;
            }
        }
        printf("ok   C_FindObjects after C_Logout: %lu handles, the private key not among them\n", n);
        F->C_FindObjectsFinal(s);
    } else {
        expect("C_FindObjects after C_Logout", rv, CKR_OPERATION_NOT_INITIALIZED);
    }
    expect("the private key's handle after C_Logout", F->C_GetAttributeValue(s, k, get, 1),
           CKR_OBJECT_HANDLE_INVALID);
    login(s);
    expect("the same handle after a new C_Login", F->C_GetAttributeValue(s, k, get, 1),
           CKR_OBJECT_HANDLE_INVALID);
    must("C_FindObjectsInit", F->C_FindObjectsInit(s, by_label, 1));
    must("C_FindObjects", F->C_FindObjects(s, found, 16, &n));
    must("C_FindObjectsFinal", F->C_FindObjectsFinal(s));
    if (n != 1 || found[0] == k) {
        printf("FAIL found again by label: %lu handles, want one new handle\n", n);
        failures++;
    } else {
        expect("the key found again, under a new handle", F->C_GetAttributeValue(s, found[0], get, 1), CKR_OK);
        must("C_DestroyObject", F->C_DestroyObject(s, found[0]));
    }
}

/* Only the SO makes a key trusted; a wrap template limits what is wrapped. */
static void trusted_and_wrap_template(CK_SESSION_HANDLE s)
{
    static CK_UTF8CHAR only[] = "only-this", other[] = "another";
    CK_MECHANISM gen = { CKM_AES_KEY_GEN, NULL, 0 }, kwp = { CKM_AES_KEY_WRAP_KWP, NULL, 0 };
    CK_ULONG len16 = 16;
    CK_OBJECT_HANDLE h, wrapping, fits, other_key;
    CK_ATTRIBUTE trusted[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v16),
                               A(CKA_WRAP, T), A(CKA_TRUSTED, T) };
    expect("C_CreateObject(CKA_TRUSTED) as the user", F->C_CreateObject(s, trusted, NA(trusted), &h),
           CKR_ATTRIBUTE_READ_ONLY);
    CK_ATTRIBUTE gen_trusted[] = { A(CKA_VALUE_LEN, len16), A(CKA_WRAP, T), A(CKA_TRUSTED, T) };
    expect("C_GenerateKey(CKA_TRUSTED) as the user", F->C_GenerateKey(s, &gen, gen_trusted, NA(gen_trusted), &h),
           CKR_ATTRIBUTE_READ_ONLY);

    CK_ATTRIBUTE want[] = { { CKA_LABEL, only, sizeof only - 1 } };
    CK_ATTRIBUTE wt[] = { A(CKA_VALUE_LEN, len16), A(CKA_WRAP, T), { CKA_WRAP_TEMPLATE, want, sizeof want } };
    must("C_GenerateKey (wrapping key)", F->C_GenerateKey(s, &gen, wt, NA(wt), &wrapping));
    CK_ATTRIBUTE ft[] = { A(CKA_VALUE_LEN, len16), A(CKA_EXTRACTABLE, T), { CKA_LABEL, only, sizeof only - 1 } };
    CK_ATTRIBUTE ot[] = { A(CKA_VALUE_LEN, len16), A(CKA_EXTRACTABLE, T), { CKA_LABEL, other, sizeof other - 1 } };
    must("C_GenerateKey", F->C_GenerateKey(s, &gen, ft, NA(ft), &fits));
    must("C_GenerateKey", F->C_GenerateKey(s, &gen, ot, NA(ot), &other_key));
    CK_BYTE wrapped[64];
    CK_ULONG wl = sizeof wrapped;
    expect("C_WrapKey of a key its CKA_WRAP_TEMPLATE matches", F->C_WrapKey(s, &kwp, wrapping, fits, wrapped, &wl),
           CKR_OK);
    wl = sizeof wrapped;
    expect("C_WrapKey of a key its CKA_WRAP_TEMPLATE does not match",
           F->C_WrapKey(s, &kwp, wrapping, other_key, wrapped, &wl), CKR_KEY_NOT_WRAPPABLE);
}

/* Unwrap and derive templates of the key, and the HKDF salt key's usage. */
static void unwrap_and_derive_templates(CK_SESSION_HANDLE s)
{
    CK_MECHANISM gen = { CKM_AES_KEY_GEN, NULL, 0 }, kwp = { CKM_AES_KEY_WRAP_KWP, NULL, 0 };
    CK_ULONG len16 = 16;
    CK_OBJECT_HANDLE unwrapping, loose, h, base, salt;
    CK_ATTRIBUTE forced[] = { A(CKA_SENSITIVE, T) };
    CK_ATTRIBUTE ut[] = { A(CKA_VALUE_LEN, len16), A(CKA_WRAP, T), A(CKA_UNWRAP, T),
                          { CKA_UNWRAP_TEMPLATE, forced, sizeof forced } };
    must("C_GenerateKey (unwrapping key)", F->C_GenerateKey(s, &gen, ut, NA(ut), &unwrapping));
    CK_ATTRIBUTE lt[] = { A(CKA_VALUE_LEN, len16), A(CKA_EXTRACTABLE, T), A(CKA_SENSITIVE, Fa) };
    must("C_GenerateKey", F->C_GenerateKey(s, &gen, lt, NA(lt), &loose));
    CK_BYTE wrapped[64], value[32];
    CK_ULONG wl = sizeof wrapped;
    must("C_WrapKey", F->C_WrapKey(s, &kwp, unwrapping, loose, wrapped, &wl));
    CK_ATTRIBUTE open_t[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_SENSITIVE, Fa) };
    expect("C_UnwrapKey asking CKA_SENSITIVE false against the CKA_UNWRAP_TEMPLATE",
           F->C_UnwrapKey(s, &kwp, unwrapping, wrapped, wl, open_t, NA(open_t), &h), CKR_TEMPLATE_INCONSISTENT);
    CK_ATTRIBUTE plain_t[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes) };
    must("C_UnwrapKey", F->C_UnwrapKey(s, &kwp, unwrapping, wrapped, wl, plain_t, NA(plain_t), &h));
    CK_ATTRIBUTE get[] = { { CKA_VALUE, value, sizeof value } };
    expect("  the unwrapped key is sensitive", F->C_GetAttributeValue(s, h, get, 1), CKR_ATTRIBUTE_SENSITIVE);

    CK_ATTRIBUTE bt[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_gen), A(CKA_VALUE, v32), A(CKA_DERIVE, T),
                          { CKA_DERIVE_TEMPLATE, forced, sizeof forced } };
    base = make(s, bt, NA(bt));
    CK_ATTRIBUTE st[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_gen), A(CKA_VALUE, v16), A(CKA_DERIVE, Fa),
                          A(CKA_SENSITIVE, T) };
    salt = make(s, st, NA(st));
    CK_HKDF_PARAMS hp = { CK_TRUE, CK_TRUE, CKM_SHA256, CKF_HKDF_SALT_DATA, v16, 16, 0, NULL, 0 };
    CK_MECHANISM hkdf = { CKM_HKDF_DERIVE, &hp, sizeof hp };
    CK_ATTRIBUTE dt[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_gen), A(CKA_VALUE_LEN, len16),
                          A(CKA_SENSITIVE, Fa) };
    expect("C_DeriveKey asking CKA_SENSITIVE false against the CKA_DERIVE_TEMPLATE",
           F->C_DeriveKey(s, &hkdf, base, dt, NA(dt), &h), CKR_TEMPLATE_INCONSISTENT);
    must("C_DeriveKey", F->C_DeriveKey(s, &hkdf, base, dt, NA(dt) - 1, &h));
    expect("  the derived key is sensitive", F->C_GetAttributeValue(s, h, get, 1), CKR_ATTRIBUTE_SENSITIVE);
    hp.ulSaltType = CKF_HKDF_SALT_KEY;
    hp.pSalt = NULL;
    hp.ulSaltLen = 0;
    hp.hSaltKey = salt;
    expect("C_DeriveKey with a salt key whose CKA_DERIVE is false", F->C_DeriveKey(s, &hkdf, base, dt, NA(dt) - 1, &h),
           CKR_KEY_FUNCTION_NOT_PERMITTED);
}

/* A key made by C_UnwrapKey or C_DeriveKey is what its content is: a template that gives a
 * secret part, another curve or another length is refused (CKR_TEMPLATE_INCONSISTENT), except
 * that ECB and CBC unwrapping cut their zero padding to the length asked for; content of a
 * length its key type cannot have is CKR_WRAPPED_KEY_INVALID. */
static void made_keys_follow_their_content(CK_SESSION_HANDLE s)
{
    static CK_BYTE p256[] = { 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07 };
    static CK_BYTE p384[] = { 0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22 };
    static CK_BYTE v20[20] = "twenty bytes of key.";
    static CK_BYTE v24[24] = "0123456789abcdefghijklmn";
    CK_MECHANISM kwp = { CKM_AES_KEY_WRAP_KWP, NULL, 0 }, ecb = { CKM_AES_ECB, NULL, 0 };
    CK_MECHANISM ecgen = { CKM_EC_KEY_PAIR_GEN, NULL, 0 };
    CK_OBJECT_CLASS cls_priv = CKO_PRIVATE_KEY;
    CK_KEY_TYPE kt_ec = CKK_EC, kt_des3 = CKK_DES3;
    CK_ULONG len16 = 16;
    CK_OBJECT_HANDLE w, k32, k20, kdes3, pub, priv, h;
    CK_ATTRIBUTE wt[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v32), A(CKA_WRAP, T),
                          A(CKA_UNWRAP, T), A(CKA_DERIVE, T) };
    w = make(s, wt, NA(wt));
    CK_ATTRIBUTE t32[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v32), A(CKA_EXTRACTABLE, T) };
    k32 = make(s, t32, NA(t32));
    CK_ATTRIBUTE t20[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_gen), A(CKA_VALUE, v20), A(CKA_EXTRACTABLE, T) };
    k20 = make(s, t20, NA(t20));
    CK_ATTRIBUTE t24[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_des3), A(CKA_VALUE, v24), A(CKA_EXTRACTABLE, T) };
    kdes3 = make(s, t24, NA(t24));
    CK_BYTE wrapped[512], got[32];
    CK_ULONG wl = sizeof wrapped;

    must("C_WrapKey", F->C_WrapKey(s, &kwp, w, k32, wrapped, &wl));
    CK_ATTRIBUTE with_value[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v32) };
    expect("C_UnwrapKey with the key's own CKA_VALUE in the template",
           F->C_UnwrapKey(s, &kwp, w, wrapped, wl, with_value, NA(with_value), &h), CKR_TEMPLATE_INCONSISTENT);
    with_value[2].pValue = v16;
    with_value[2].ulValueLen = sizeof v16;
    expect("C_UnwrapKey with another CKA_VALUE in the template",
           F->C_UnwrapKey(s, &kwp, w, wrapped, wl, with_value, NA(with_value), &h), CKR_TEMPLATE_INCONSISTENT);
    CK_ATTRIBUTE short_t[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE_LEN, len16),
                               A(CKA_SENSITIVE, Fa), A(CKA_EXTRACTABLE, T) };
    expect("C_UnwrapKey (AES-KWP) of a 32-byte key with CKA_VALUE_LEN 16",
           F->C_UnwrapKey(s, &kwp, w, wrapped, wl, short_t, NA(short_t), &h), CKR_TEMPLATE_INCONSISTENT);
    wl = sizeof wrapped;
    must("C_WrapKey (AES-ECB)", F->C_WrapKey(s, &ecb, w, k32, wrapped, &wl));
    expect("C_UnwrapKey (AES-ECB) of a 32-byte key with CKA_VALUE_LEN 16 cuts it",
           F->C_UnwrapKey(s, &ecb, w, wrapped, wl, short_t, NA(short_t), &h), CKR_OK);
    CK_ATTRIBUTE get[] = { { CKA_VALUE, got, sizeof got } };
    if (F->C_GetAttributeValue(s, h, get, 1) != CKR_OK || get[0].ulValueLen != 16 || memcmp(got, v32, 16) != 0) {
        printf("FAIL   the cut key is not the first 16 bytes\n");
        failures++;
    } else {
        printf("ok     the cut key is the first 16 bytes\n");
    }

    wl = sizeof wrapped;
    must("C_WrapKey", F->C_WrapKey(s, &kwp, w, k20, wrapped, &wl));
    CK_ATTRIBUTE as_aes[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes) };
    expect("C_UnwrapKey of 20 bytes as an AES key", F->C_UnwrapKey(s, &kwp, w, wrapped, wl, as_aes, NA(as_aes), &h),
           CKR_WRAPPED_KEY_INVALID);
    wl = sizeof wrapped;
    must("C_WrapKey (DES3 under AES-ECB)", F->C_WrapKey(s, &ecb, w, kdes3, wrapped, &wl));
    CK_ATTRIBUTE as_des3[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_des3), A(CKA_DECRYPT, T) };
    expect("C_UnwrapKey (AES-ECB) of a DES3 key without CKA_VALUE_LEN",
           F->C_UnwrapKey(s, &ecb, w, wrapped, wl, as_des3, NA(as_des3), &h), CKR_OK);

    CK_ATTRIBUTE pubt[] = { { CKA_EC_PARAMS, p256, sizeof p256 }, A(CKA_VERIFY, T) };
    CK_ATTRIBUTE privt[] = { A(CKA_SIGN, T), A(CKA_EXTRACTABLE, T) };
    must("C_GenerateKeyPair (P-256)", F->C_GenerateKeyPair(s, &ecgen, pubt, NA(pubt), privt, NA(privt), &pub, &priv));
    wl = sizeof wrapped;
    must("C_WrapKey (P-256)", F->C_WrapKey(s, &kwp, w, priv, wrapped, &wl));
    CK_ATTRIBUTE ect[] = { A(CKA_CLASS, cls_priv), A(CKA_KEY_TYPE, kt_ec), { CKA_EC_PARAMS, p384, sizeof p384 },
                           A(CKA_SIGN, T) };
    expect("C_UnwrapKey of a P-256 key with CKA_EC_PARAMS of P-384",
           F->C_UnwrapKey(s, &kwp, w, wrapped, wl, ect, NA(ect), &h), CKR_TEMPLATE_INCONSISTENT);
    ect[2].pValue = p256;
    ect[2].ulValueLen = sizeof p256;
    expect("C_UnwrapKey of a P-256 key with CKA_EC_PARAMS of P-256",
           F->C_UnwrapKey(s, &kwp, w, wrapped, wl, ect, NA(ect), &h), CKR_OK);

    CK_HKDF_PARAMS hp = { CK_TRUE, CK_TRUE, CKM_SHA256, CKF_HKDF_SALT_NULL, NULL, 0, 0, NULL, 0 };
    CK_MECHANISM hkdf = { CKM_HKDF_DERIVE, &hp, sizeof hp };
    CK_ATTRIBUTE bt[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_gen), A(CKA_VALUE, v32), A(CKA_DERIVE, T) };
    CK_OBJECT_HANDLE base = make(s, bt, NA(bt));
    CK_ATTRIBUTE dt[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE_LEN, len16),
                          A(CKA_VALUE, v16) };
    expect("C_DeriveKey with CKA_VALUE in the template", F->C_DeriveKey(s, &hkdf, base, dt, NA(dt), &h),
           CKR_TEMPLATE_INCONSISTENT);
    expect("C_DeriveKey without it", F->C_DeriveKey(s, &hkdf, base, dt, NA(dt) - 1, &h), CKR_OK);
}

/* C_GenerateKeyPair: a private key template that names another curve or another public
 * exponent than the key pair's is CKR_TEMPLATE_INCONSISTENT, not overruled; the same values
 * are accepted. */
static void generated_keys_follow_their_content(CK_SESSION_HANDLE s)
{
    static CK_BYTE p256[] = { 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07 };
    static CK_BYTE p384[] = { 0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22 };
    static CK_BYTE e65537[] = { 1, 0, 1 }, e17[] = { 17 };
    CK_MECHANISM ec_gen = { CKM_EC_KEY_PAIR_GEN, NULL, 0 }, rsa_gen = { CKM_RSA_PKCS_KEY_PAIR_GEN, NULL, 0 };
    CK_ULONG bits = 1024;
    CK_OBJECT_HANDLE pub, priv;
    CK_ATTRIBUTE ec_pub[] = { { CKA_EC_PARAMS, p256, sizeof p256 }, A(CKA_VERIFY, T) };
    CK_ATTRIBUTE ec_priv_other[] = { { CKA_EC_PARAMS, p384, sizeof p384 }, A(CKA_SIGN, T) };
    CK_ATTRIBUTE ec_priv_same[] = { { CKA_EC_PARAMS, p256, sizeof p256 }, A(CKA_SIGN, T) };
    expect("C_GenerateKeyPair (P-256) with a private template of P-384",
           F->C_GenerateKeyPair(s, &ec_gen, ec_pub, NA(ec_pub), ec_priv_other, NA(ec_priv_other), &pub, &priv),
           CKR_TEMPLATE_INCONSISTENT);
    expect("C_GenerateKeyPair (P-256) with a private template of P-256",
           F->C_GenerateKeyPair(s, &ec_gen, ec_pub, NA(ec_pub), ec_priv_same, NA(ec_priv_same), &pub, &priv),
           CKR_OK);
    CK_ATTRIBUTE rsa_pub[] = { A(CKA_MODULUS_BITS, bits), { CKA_PUBLIC_EXPONENT, e65537, 3 }, A(CKA_VERIFY, T) };
    CK_ATTRIBUTE rsa_priv_other[] = { { CKA_PUBLIC_EXPONENT, e17, 1 }, A(CKA_SIGN, T) };
    CK_ATTRIBUTE rsa_priv_same[] = { { CKA_PUBLIC_EXPONENT, e65537, 3 }, A(CKA_SIGN, T) };
    expect("C_GenerateKeyPair (RSA, e 65537) with a private template of e 17",
           F->C_GenerateKeyPair(s, &rsa_gen, rsa_pub, NA(rsa_pub), rsa_priv_other, NA(rsa_priv_other), &pub, &priv),
           CKR_TEMPLATE_INCONSISTENT);
    expect("C_GenerateKeyPair (RSA, e 65537) with a private template of e 65537",
           F->C_GenerateKeyPair(s, &rsa_gen, rsa_pub, NA(rsa_pub), rsa_priv_same, NA(rsa_priv_same), &pub, &priv),
           CKR_OK);
}

/* C_DigestKey puts the key's value into the digest's running state (a key shorter than the
 * hash's block, in clear): C_GetOperationState may not save it, or a sensitive, unextractable
 * key could be read out of the saved state. A digest of data alone saves. */
static void keyed_digest_unsaveable(CK_SESSION_HANDLE s)
{
    CK_ATTRIBUTE ka[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v16),
                          A(CKA_SENSITIVE, T), A(CKA_EXTRACTABLE, Fa), A(CKA_ENCRYPT, T) };
    CK_OBJECT_HANDLE k = make(s, ka, NA(ka));
    CK_BYTE state[1024], d[32];
    CK_ULONG n = sizeof state, dl = sizeof d;
    must("C_DigestInit", F->C_DigestInit(s, &m_sha));
    must("C_DigestUpdate", F->C_DigestUpdate(s, data32, 32));
    expect("C_GetOperationState of a digest of data", F->C_GetOperationState(s, state, &n), CKR_OK);
    must("C_DigestKey", F->C_DigestKey(s, k));
    n = sizeof state;
    memset(state, 0, sizeof state);
    expect("C_GetOperationState after C_DigestKey", F->C_GetOperationState(s, state, &n),
           CKR_STATE_UNSAVEABLE);
    int seen = 0;
    for (size_t i = 0; i + sizeof v16 <= sizeof state; i++)
        seen |= memcmp(state + i, v16, sizeof v16) == 0;
    check("  the key's value is nowhere in the buffer", !seen);
    n = 0;
    expect("  its size query too", F->C_GetOperationState(s, NULL, &n), CKR_STATE_UNSAVEABLE);
    expect("  the digest goes on", F->C_DigestFinal(s, d, &dl), CKR_OK);
}

/* A CK_BBOOL is CK_TRUE (1) or CK_FALSE (0). Another byte is taken as true, and kept as
 * CK_TRUE, so that every reader, one comparing with CK_TRUE included, reads it so. */
static void flag_bytes(CK_SESSION_HANDLE s)
{
    static CK_UTF8CHAR label[] = "oplife flag byte";
    CK_BBOOL two = 2, enc = 9, sens = 9;
    CK_ATTRIBUTE ka[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v16),
                          A(CKA_ENCRYPT, two), A(CKA_SENSITIVE, two), { CKA_LABEL, label, sizeof label - 1 } };
    CK_OBJECT_HANDLE k = make(s, ka, NA(ka)), found[4], h;
    CK_ATTRIBUTE get[] = { A(CKA_ENCRYPT, enc), A(CKA_SENSITIVE, sens) };
    expect("C_GetAttributeValue of flags given as 2", F->C_GetAttributeValue(s, k, get, NA(get)), CKR_OK);
    check("  both read back as CK_TRUE", enc == CK_TRUE && sens == CK_TRUE);
    CK_ATTRIBUTE find[] = { { CKA_LABEL, label, sizeof label - 1 }, A(CKA_ENCRYPT, T) };
    CK_ULONG n = 0;
    must("C_FindObjectsInit", F->C_FindObjectsInit(s, find, NA(find)));
    must("C_FindObjects", F->C_FindObjects(s, found, NA(found), &n));
    must("C_FindObjectsFinal", F->C_FindObjectsFinal(s));
    check("  the key is found by a search for CKA_ENCRYPT = CK_TRUE", n == 1 && found[0] == k);
    CK_ATTRIBUTE find2[] = { { CKA_LABEL, label, sizeof label - 1 }, A(CKA_ENCRYPT, two) };
    must("C_FindObjectsInit", F->C_FindObjectsInit(s, find2, NA(find2)));
    must("C_FindObjects", F->C_FindObjects(s, found, NA(found), &n));
    must("C_FindObjectsFinal", F->C_FindObjectsFinal(s));
    check("  and by a search for CKA_ENCRYPT = 2", n == 1 && found[0] == k);
    CK_ATTRIBUTE twice[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v16),
                             A(CKA_ENCRYPT, T), A(CKA_ENCRYPT, two) };
    expect("C_CreateObject with CKA_ENCRYPT given as 1 and as 2 (one value)",
           F->C_CreateObject(s, twice, NA(twice), &h), CKR_OK);
}

/* Reads CKA_CHECK_VALUE of `h` into kcv (3 bytes); the answer. */
static CK_RV read_kcv(CK_SESSION_HANDLE s, CK_OBJECT_HANDLE h, CK_BYTE kcv[3], CK_ULONG *len)
{
    CK_ATTRIBUTE a = { CKA_CHECK_VALUE, kcv, 3 };
    CK_RV rv = F->C_GetAttributeValue(s, h, &a, 1);
    *len = a.ulValueLen;
    return rv;
}

/* CKA_CHECK_VALUE, as PKCS#11 defines it for each key type: the first three bytes of the ECB
 * encryption of a zero block under an AES or DES3 key, of the SHA-1 of a generic secret's
 * value (the values here from OpenSSL's command line). Computed for a new key; a template's
 * other value is CKR_ATTRIBUTE_VALUE_INVALID ("it must match what the library calculates it
 * to be"), in C_UnwrapKey too; for a key type without a check value it is ignored. */
static void check_values(CK_SESSION_HANDLE s)
{
    static CK_BYTE aes_kcv[3] = { 0x0b, 0x9b, 0x15 }, gen_kcv[3] = { 0xb1, 0x77, 0x5a },
                   des3_kcv[3] = { 0x30, 0x6b, 0xbf }, wrong[3] = { 0xde, 0xad, 0x01 };
    static CK_BYTE des3[24] = "0123456789abcdefghijklmn";
    CK_KEY_TYPE kt_des3 = CKK_DES3, kt_chacha = CKK_CHACHA20;
    CK_BYTE kcv[3];
    CK_ULONG len;
    CK_OBJECT_HANDLE h;
    struct {
        const char *name;
        CK_KEY_TYPE *kt;
        CK_BYTE *value;
        CK_ULONG value_len;
        CK_BYTE *kcv;
    } keys[] = { { "AES-128", &kt_aes, v16, sizeof v16, aes_kcv },
                 { "generic secret", &kt_gen, v32, sizeof v32, gen_kcv },
                 { "DES3", &kt_des3, des3, sizeof des3, des3_kcv } };
    for (size_t i = 0; i < NA(keys); i++) {
        char what[128];
        CK_ATTRIBUTE ka[] = { A(CKA_CLASS, cls_secret), { CKA_KEY_TYPE, keys[i].kt, sizeof(CK_KEY_TYPE) },
                              { CKA_VALUE, keys[i].value, keys[i].value_len }, { CKA_CHECK_VALUE, NULL, 0 } };
        h = make(s, ka, 3);
        snprintf(what, sizeof what, "%s key: CKA_CHECK_VALUE computed", keys[i].name);
        expect(what, read_kcv(s, h, kcv, &len), CKR_OK);
        check("  the key type's check value", len == 3 && memcmp(kcv, keys[i].kcv, 3) == 0);
        ka[3].pValue = keys[i].kcv;
        ka[3].ulValueLen = 3;
        snprintf(what, sizeof what, "%s key made with its check value", keys[i].name);
        expect(what, F->C_CreateObject(s, ka, NA(ka), &h), CKR_OK);
        ka[3].pValue = wrong;
        snprintf(what, sizeof what, "%s key made with another check value", keys[i].name);
        expect(what, F->C_CreateObject(s, ka, NA(ka), &h), CKR_ATTRIBUTE_VALUE_INVALID);
    }

    /* Unwrapped: the same rule. */
    CK_MECHANISM kwp = { CKM_AES_KEY_WRAP_KWP, NULL, 0 };
    CK_ATTRIBUTE wt[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v32),
                          A(CKA_WRAP, T), A(CKA_UNWRAP, T) };
    CK_ATTRIBUTE et[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v16),
                          A(CKA_EXTRACTABLE, T) };
    CK_OBJECT_HANDLE wk = make(s, wt, NA(wt)), ek = make(s, et, NA(et));
    CK_BYTE wrapped[64];
    CK_ULONG wl = sizeof wrapped;
    must("C_WrapKey", F->C_WrapKey(s, &kwp, wk, ek, wrapped, &wl));
    CK_ATTRIBUTE ut[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), { CKA_CHECK_VALUE, wrong, 3 } };
    expect("C_UnwrapKey with another check value", F->C_UnwrapKey(s, &kwp, wk, wrapped, wl, ut, NA(ut), &h),
           CKR_ATTRIBUTE_VALUE_INVALID);
    ut[2].pValue = aes_kcv;
    expect("C_UnwrapKey with the key's check value", F->C_UnwrapKey(s, &kwp, wk, wrapped, wl, ut, NA(ut), &h),
           CKR_OK);

    /* A key type with no check value: a given one is ignored, not kept. */
    CK_ATTRIBUTE ct[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_chacha), A(CKA_VALUE, v32),
                          { CKA_CHECK_VALUE, wrong, 3 } };
    expect("ChaCha20 key made with a check value", F->C_CreateObject(s, ct, NA(ct), &h), CKR_OK);
    expect("  the value is not kept", read_kcv(s, h, kcv, &len), CKR_ATTRIBUTE_TYPE_INVALID);
}

/* CKA_ALLOWED_MECHANISMS is an array of CK_MECHANISM_TYPE: a length that is not a multiple of
 * one is CKR_ATTRIBUTE_VALUE_INVALID (a partial entry would be dropped, or refuse every
 * mechanism without a word). A copy may make a public object private, not a private one
 * public (it would be used without the PIN). */
static void allowed_mechanisms_and_copies(CK_SESSION_HANDLE s)
{
    CK_MECHANISM_TYPE allow[2] = { CKM_AES_CBC_PAD, CKM_AES_ECB };
    CK_ATTRIBUTE ka[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v16),
                          A(CKA_ENCRYPT, T), { CKA_ALLOWED_MECHANISMS, allow, sizeof allow - 1 } };
    CK_OBJECT_HANDLE h, copy;
    expect("CKA_ALLOWED_MECHANISMS of 15 bytes", F->C_CreateObject(s, ka, NA(ka), &h),
           CKR_ATTRIBUTE_VALUE_INVALID);
    ka[4].ulValueLen = sizeof allow;
    h = make(s, ka, NA(ka));
    CK_ATTRIBUTE set[] = { { CKA_ALLOWED_MECHANISMS, allow, 3 } };
    expect("C_SetAttributeValue(CKA_ALLOWED_MECHANISMS of 3 bytes)", F->C_SetAttributeValue(s, h, set, 1),
           CKR_ATTRIBUTE_VALUE_INVALID);
    set[0].ulValueLen = sizeof allow[0];
    expect("C_SetAttributeValue(CKA_ALLOWED_MECHANISMS of one)", F->C_SetAttributeValue(s, h, set, 1), CKR_OK);

    CK_ATTRIBUTE pk[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v16),
                          A(CKA_PRIVATE, T), A(CKA_ENCRYPT, T) };
    CK_OBJECT_HANDLE priv = make(s, pk, NA(pk));
    CK_ATTRIBUTE to_public[] = { A(CKA_PRIVATE, Fa) }, to_private[] = { A(CKA_PRIVATE, T) };
    expect("C_CopyObject of a private key with CKA_PRIVATE false", F->C_CopyObject(s, priv, to_public, 1, &copy),
           CKR_ATTRIBUTE_READ_ONLY);
    expect("C_CopyObject of a private key with CKA_PRIVATE true", F->C_CopyObject(s, priv, to_private, 1, &copy),
           CKR_OK);
    pk[3].pValue = &Fa;
    CK_OBJECT_HANDLE pub = make(s, pk, NA(pk));
    expect("C_CopyObject of a public key with CKA_PRIVATE true", F->C_CopyObject(s, pub, to_private, 1, &copy),
           CKR_OK);
}

/* Objects made by one thread while another logs the user out, or closes their session: the
 * logout's and the close's sweeps must not miss them. */
static CK_SESSION_HANDLE racing;
static volatile int race_phase; /* 0 make, 1 pause asked, 2 paused, 3 stop */
static CK_OBJECT_HANDLE race_made[4096];
static volatile int race_n;
static CK_BBOOL race_token;

static CK_RV make_data(CK_SESSION_HANDLE s, CK_BBOOL *token, CK_BBOOL *private, CK_OBJECT_HANDLE *h)
{
    static CK_OBJECT_CLASS cls_data = CKO_DATA;
    static CK_UTF8CHAR label[] = "oplife race";
    static CK_BYTE value[] = "v";
    CK_ATTRIBUTE t[] = { A(CKA_CLASS, cls_data), { CKA_TOKEN, token, 1 }, { CKA_PRIVATE, private, 1 },
                         { CKA_LABEL, label, sizeof label - 1 }, { CKA_VALUE, value, 1 } };
    return F->C_CreateObject(s, t, NA(t), h);
}

static void *race_maker(void *arg)
{
    (void)arg;
    for (;;) {
        int p = __atomic_load_n(&race_phase, __ATOMIC_SEQ_CST);
        if (p == 3)
            return NULL;
        if (p == 1)
            __atomic_store_n(&race_phase, 2, __ATOMIC_SEQ_CST);
        if (p != 0)
            continue;
        CK_OBJECT_HANDLE h;
        if (make_data(racing, &race_token, &T, &h) == CKR_OK && race_n < (int)NA(race_made))
            race_made[race_n++] = h;
    }
}

static void objects_made_across_logout(CK_SESSION_HANDLE s, CK_BBOOL token, int rounds)
{
    CK_SESSION_HANDLE sb = open_rw();
    racing = open_rw();
    race_token = token;
    race_phase = 0;
    pthread_t t;
    pthread_create(&t, NULL, race_maker, NULL);
    int survived = 0, checked = 0;
    for (int r = 0; r < rounds; r++) {
        race_n = 0;
        usleep(token ? 3000 : 200);
        must("C_Logout", F->C_Logout(sb));
        __atomic_store_n(&race_phase, 1, __ATOMIC_SEQ_CST);
        while (__atomic_load_n(&race_phase, __ATOMIC_SEQ_CST) != 2)
            ;
        login(sb);
        /* Every object the thread made was made before the logout returned (after it, a
         * private object cannot be made): its handle is invalid now. */
        for (int i = 0; i < race_n; i++) {
            CK_OBJECT_CLASS c;
            CK_ATTRIBUTE get[] = { A(CKA_CLASS, c) };
            checked++;
            if (F->C_GetAttributeValue(sb, race_made[i], get, 1) == CKR_OK) {
                survived++;
                F->C_DestroyObject(sb, race_made[i]);
            }
        }
        __atomic_store_n(&race_phase, 0, __ATOMIC_SEQ_CST);
    }
    __atomic_store_n(&race_phase, 3, __ATOMIC_SEQ_CST);
    pthread_join(t, NULL);
    F->C_CloseSession(racing);
    /* The token objects stay in the keystore, under new handles: they go now. */
    static CK_UTF8CHAR label[] = "oplife race";
    CK_ATTRIBUTE mine[] = { { CKA_LABEL, label, sizeof label - 1 } };
    CK_OBJECT_HANDLE found[64];
    CK_ULONG n = 0;
    do {
        must("C_FindObjectsInit", F->C_FindObjectsInit(sb, mine, NA(mine)));
        must("C_FindObjects", F->C_FindObjects(sb, found, NA(found), &n));
        must("C_FindObjectsFinal", F->C_FindObjectsFinal(sb));
        for (CK_ULONG i = 0; i < n; i++)
            must("C_DestroyObject", F->C_DestroyObject(sb, found[i]));
    } while (n > 0);
    F->C_CloseSession(sb);
    login(s);
    char what[160];
    snprintf(what, sizeof what, "private %s objects made while another thread logged out: %d of %d handles "
             "valid after the next C_Login", token ? "token" : "session", survived, checked);
    check(what, survived == 0 && checked > 0);
}

static void *close_maker(void *arg)
{
    (void)arg;
    CK_OBJECT_HANDLE h;
    while (make_data(racing, &Fa, &Fa, &h) == CKR_OK)
        ;
    return NULL;
}

static void objects_made_across_close(CK_SESSION_HANDLE s)
{
    static CK_UTF8CHAR label[] = "oplife race";
    for (int r = 0; r < 100; r++) {
        racing = open_rw();
        pthread_t t;
        pthread_create(&t, NULL, close_maker, NULL);
        usleep(100);
        F->C_CloseSession(racing);
        pthread_join(t, NULL);
    }
    CK_ATTRIBUTE find[] = { { CKA_LABEL, label, sizeof label - 1 }, A(CKA_TOKEN, Fa) };
    CK_OBJECT_HANDLE found[16];
    CK_ULONG n = 0;
    must("C_FindObjectsInit", F->C_FindObjectsInit(s, find, NA(find)));
    must("C_FindObjects", F->C_FindObjects(s, found, NA(found), &n));
    must("C_FindObjectsFinal", F->C_FindObjectsFinal(s));
    char what[128];
    snprintf(what, sizeof what, "session objects made while their session was closed: %lu left", n);
    check(what, n == 0);
}

/* fork() while other threads work in the keystore: the child's C_Initialize (PKCS#11 3.2
 * §5.4: a forked child initializes again) must return, whatever the parent's threads were
 * doing at the fork. A child that does not finish in 8 s (the keystore's busy timeout is 10 s)
 * is killed by its alarm and counted. */
static volatile int keystore_busy;

static void *keystore_churn(void *arg)
{
    (void)arg;
    CK_SESSION_HANDLE s = open_rw();
    CK_OBJECT_CLASS cls = CKO_SECRET_KEY;
    CK_ATTRIBUTE ta[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v16),
                          A(CKA_TOKEN, T), A(CKA_ENCRYPT, T) };
    CK_ATTRIBUTE find[] = { A(CKA_CLASS, cls) };
    while (keystore_busy) {
        CK_OBJECT_HANDLE h, found[8];
        CK_ULONG n;
        /* A pause between rounds: back to back, two threads of one process hold the keystore's
         * write lock all but a few microseconds at a time, and a child (as any other process)
         * waits out the busy timeout for it. */
        usleep(2000);
        if (F->C_CreateObject(s, ta, NA(ta), &h) == CKR_OK)
            F->C_DestroyObject(s, h);
        if (F->C_FindObjectsInit(s, find, NA(find)) == CKR_OK) {
            F->C_FindObjects(s, found, 8, &n);
            F->C_FindObjectsFinal(s);
        }
    }
    F->C_CloseSession(s);
    return NULL;
}

static void fork_while_the_keystore_is_busy(void)
{
    pthread_t t[2];
    keystore_busy = 1;
    for (size_t i = 0; i < NA(t); i++)
        pthread_create(&t[i], NULL, keystore_churn, NULL);
    int hung = 0, failed = 0;
    const int forks = 20;
    for (int i = 0; i < forks; i++) {
        usleep(20 * 1000);
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            alarm(8);
            CK_SESSION_HANDLE s;
            int ok = F->C_Initialize(NULL) == CKR_OK &&
                     F->C_OpenSession(SLOT, CKF_SERIAL_SESSION, NULL, NULL, &s) == CKR_OK &&
                     F->C_Finalize(NULL) == CKR_OK;
            _exit(ok ? 0 : 1);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        if (WIFSIGNALED(st))
            hung++;
        else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            failed++;
    }
    keystore_busy = 0;
    for (size_t i = 0; i < NA(t); i++)
        pthread_join(t[i], NULL);
    char what[128];
    snprintf(what, sizeof what, "fork while threads use the keystore: %d of %d children hung, %d failed",
             hung, forks, failed);
    check(what, !hung && !failed);
}

/* The live counters of a forked child (slot 0 only; $OPLIFE_CRYPTOADM names the cryptoadm
 * that reads them): the parent and its child, which initializes again, each run N SHA-256
 * digests at once, and `cryptoadm stat` counts 2N more. Sharing one segment, each process
 * would hand out the same entries and shards from its own copy of the bookkeeping, and count
 * over the other's. */
static long sha256_ops(const char *cryptoadm)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' stat --prometheus -p softtoken -m CKM_SHA256", cryptoadm);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    char line[512];
    long ops = 0;
    while (fgets(line, sizeof line, p)) {
        long v;
        if (strncmp(line, "opencf_operations_total{", 24) == 0 && sscanf(strrchr(line, '}') + 1, "%ld", &v) == 1)
            ops += v;
    }
    return pclose(p) == 0 ? ops : -1;
}

static long digests(long n)
{
    CK_SESSION_HANDLE s = open_rw();
    CK_BYTE out[32];
    long ok = 0;
    for (long i = 0; i < n; i++) {
        CK_ULONG len = sizeof out;
        if (F->C_DigestInit(s, &m_sha) == CKR_OK && F->C_Digest(s, data32, 4, out, &len) == CKR_OK)
            ok++;
    }
    F->C_CloseSession(s);
    return ok;
}

static void counts_of_a_forked_child(void)
{
    const char *cryptoadm = getenv("OPLIFE_CRYPTOADM");
    if (!cryptoadm)
        return;
    const long n = 100000;
    long before = sha256_ops(cryptoadm);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(60);
        int ok = F->C_Initialize(NULL) == CKR_OK && digests(n) == n && F->C_Finalize(NULL) == CKR_OK;
        _exit(ok ? 0 : 1);
    }
    long mine = digests(n);
    int st = 0;
    waitpid(pid, &st, 0);
    check("parent and forked child each ran their digests", mine == n && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    long after = sha256_ops(cryptoadm);
    char what[160];
    snprintf(what, sizeof what, "cryptoadm stat: %ld SHA-256 operations more, of the parent's and the child's %ld",
             after - before, 2 * n);
    check(what, before >= 0 && after - before == 2 * n);
}

/* CKF_LIBRARY_CANT_CREATE_OS_THREADS: C_Initialize either refuses with
 * CKR_NEED_TO_CREATE_THREADS or keeps its word, here through a large AES-GCM encryption that
 * the accelerator's bulk engine would split over threads. */
static void no_threads_when_forbidden(void)
{
    CK_C_INITIALIZE_ARGS a = { 0 };
    a.flags = CKF_OS_LOCKING_OK | CKF_LIBRARY_CANT_CREATE_OS_THREADS;
    CK_RV rv = F->C_Initialize(&a);
    if (rv == CKR_NEED_TO_CREATE_THREADS) {
        printf("ok   C_Initialize without threads: CKR_NEED_TO_CREATE_THREADS\n");
        return;
    }
    expect("C_Initialize without threads", rv, CKR_OK);
    if (rv != CKR_OK)
        return;
    CK_SESSION_HANDLE s;
    must("C_OpenSession", F->C_OpenSession(SLOT, CKF_SERIAL_SESSION, NULL, NULL, &s));
    CK_ATTRIBUTE ka[] = { A(CKA_CLASS, cls_secret), A(CKA_KEY_TYPE, kt_aes), A(CKA_VALUE, v16),
                          A(CKA_ENCRYPT, T), A(CKA_TOKEN, Fa), A(CKA_PRIVATE, Fa) };
    CK_OBJECT_HANDLE k = make(s, ka, NA(ka));
    static CK_BYTE data[1 << 20], out[(1 << 20) + 16];
    CK_BYTE gcm_iv[12] = { 0 };
    CK_GCM_PARAMS gp = { gcm_iv, sizeof gcm_iv, 96, NULL, 0, 128 };
    CK_MECHANISM gcm = { CKM_AES_GCM, &gp, sizeof gp };
    CK_ULONG len = sizeof out;
    must("C_EncryptInit", F->C_EncryptInit(s, &gcm, k));
    must("C_Encrypt", F->C_Encrypt(s, data, sizeof data, out, &len));
    int threads = 0;
    FILE *st = fopen("/proc/self/status", "r");
    char line[256];
    while (st && fgets(line, sizeof line, st))
        if (sscanf(line, "Threads: %d", &threads) == 1)
            break;
    if (st)
        fclose(st);
    if (threads != 1) {
        printf("FAIL C_Initialize without threads: %d threads after a 1 MiB AES-GCM encryption\n", threads);
        failures++;
    } else {
        printf("ok   C_Initialize without threads: one thread after a 1 MiB AES-GCM encryption\n");
    }
    F->C_CloseSession(s);
    must("C_Finalize", F->C_Finalize(NULL));
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODULE SLOT\n", argv[0]);
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    CK_C_GetInterface get_interface = (CK_C_GetInterface)dlsym(lib, "C_GetInterface");
    CK_INTERFACE *ifc = NULL;
    CK_VERSION v30 = { 3, 0 };
    if (!get_interface || get_interface((CK_UTF8CHAR *)"PKCS 11", &v30, &ifc, 0) != CKR_OK) {
        fprintf(stderr, "no PKCS #11 3.0 interface\n");
        return 2;
    }
    F = ifc->pFunctionList;
    CK_INTERFACE *ifc32 = NULL;
    CK_VERSION v32 = { 3, 2 };
    if (get_interface((CK_UTF8CHAR *)"PKCS 11", &v32, &ifc32, 0) != CKR_OK) {
        fprintf(stderr, "%s: no PKCS#11 3.2 interface\n", argv[1]);
        return 2;
    }
    F32 = ifc32->pFunctionList;
    SLOT = strtoul(argv[2], NULL, 10);
    no_threads_when_forbidden();
    must("C_Initialize", F->C_Initialize(NULL));
    CK_SESSION_HANDLE s = open_rw();
    login(s);
    printf("# %s, slot %lu\n", argv[1], SLOT);
    argument_errors_end_operations(s);
    single_part_and_cancel_rules(s);
    one_verification_at_a_time(s);
    async_sessions_as_flagged();
    no_answer_confirms_a_guess(s);
    context_specific_login(s, CK_TRUE);
    context_specific_login(s, 2);
    private_handles_end_at_logout(s);
    trusted_and_wrap_template(s);
    unwrap_and_derive_templates(s);
    made_keys_follow_their_content(s);
    generated_keys_follow_their_content(s);
    keyed_digest_unsaveable(s);
    flag_bytes(s);
    check_values(s);
    allowed_mechanisms_and_copies(s);
    objects_made_across_logout(s, CK_FALSE, 200);
    objects_made_across_logout(s, CK_TRUE, 20);
    objects_made_across_close(s);
    fork_while_the_keystore_is_busy();
    counts_of_a_forked_child();
    F->C_CloseSession(s);
    F->C_Finalize(NULL);
    printf("%s: %d failed\n", argv[1], failures);
    return failures != 0;
}
