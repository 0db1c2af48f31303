//! The mechanism list of the software token and each mechanism's `CK_MECHANISM_INFO`.
//!
//! Key sizes follow the specification's units: bytes for AES, DES3, ChaCha20, HMAC and generic
//! secrets; bits for RSA and elliptic curves; ML-DSA and ML-KEM give the parameter-set range.

use opencf_abi::sys::*;

const ENC: CK_FLAGS = CKF_ENCRYPT | CKF_DECRYPT;
const WRAP: CK_FLAGS = CKF_WRAP | CKF_UNWRAP;
const SV: CK_FLAGS = CKF_SIGN | CKF_VERIFY;
const EC_FLAGS: CK_FLAGS = CKF_EC_F_P | CKF_EC_NAMEDCURVE | CKF_EC_UNCOMPRESS | CKF_EC_OID;
const MSG: CK_FLAGS = CKF_MESSAGE_ENCRYPT | CKF_MESSAGE_DECRYPT | CKF_MULTI_MESSAGE;

const fn info(min: CK_ULONG, max: CK_ULONG, flags: CK_FLAGS) -> CK_MECHANISM_INFO {
    CK_MECHANISM_INFO {
        ulMinKeySize: min,
        ulMaxKeySize: max,
        flags,
    }
}

/// Every mechanism of the software token, in the order `C_GetMechanismList` lists them.
static TABLE: &[(CK_MECHANISM_TYPE, CK_MECHANISM_INFO)] = &[
    // Digests.
    (CKM_SHA_1, info(0, 0, CKF_DIGEST)),
    (CKM_SHA224, info(0, 0, CKF_DIGEST)),
    (CKM_SHA256, info(0, 0, CKF_DIGEST)),
    (CKM_SHA384, info(0, 0, CKF_DIGEST)),
    (CKM_SHA512, info(0, 0, CKF_DIGEST)),
    (CKM_SHA3_224, info(0, 0, CKF_DIGEST)),
    (CKM_SHA3_256, info(0, 0, CKF_DIGEST)),
    (CKM_SHA3_384, info(0, 0, CKF_DIGEST)),
    (CKM_SHA3_512, info(0, 0, CKF_DIGEST)),
    // HMAC.
    (CKM_SHA_1_HMAC, info(1, 512, SV)),
    (CKM_SHA_1_HMAC_GENERAL, info(1, 512, SV)),
    (CKM_SHA224_HMAC, info(1, 512, SV)),
    (CKM_SHA224_HMAC_GENERAL, info(1, 512, SV)),
    (CKM_SHA256_HMAC, info(1, 512, SV)),
    (CKM_SHA256_HMAC_GENERAL, info(1, 512, SV)),
    (CKM_SHA384_HMAC, info(1, 512, SV)),
    (CKM_SHA384_HMAC_GENERAL, info(1, 512, SV)),
    (CKM_SHA512_HMAC, info(1, 512, SV)),
    (CKM_SHA512_HMAC_GENERAL, info(1, 512, SV)),
    (CKM_SHA3_224_HMAC, info(1, 512, SV)),
    (CKM_SHA3_224_HMAC_GENERAL, info(1, 512, SV)),
    (CKM_SHA3_256_HMAC, info(1, 512, SV)),
    (CKM_SHA3_256_HMAC_GENERAL, info(1, 512, SV)),
    (CKM_SHA3_384_HMAC, info(1, 512, SV)),
    (CKM_SHA3_384_HMAC_GENERAL, info(1, 512, SV)),
    (CKM_SHA3_512_HMAC, info(1, 512, SV)),
    (CKM_SHA3_512_HMAC_GENERAL, info(1, 512, SV)),
    (CKM_GENERIC_SECRET_KEY_GEN, info(1, 512, CKF_GENERATE)),
    // AES.
    (CKM_AES_KEY_GEN, info(16, 32, CKF_GENERATE)),
    (CKM_AES_ECB, info(16, 32, ENC | WRAP)),
    (CKM_AES_CBC, info(16, 32, ENC | WRAP)),
    (CKM_AES_CBC_PAD, info(16, 32, ENC | WRAP)),
    (CKM_AES_CTR, info(16, 32, ENC)),
    (CKM_AES_GCM, info(16, 32, ENC | MSG)),
    (CKM_AES_CMAC, info(16, 32, SV)),
    (CKM_AES_CMAC_GENERAL, info(16, 32, SV)),
    (CKM_AES_KEY_WRAP, info(16, 32, WRAP | ENC)),
    (CKM_AES_KEY_WRAP_KWP, info(16, 32, WRAP | ENC)),
    // ChaCha20-Poly1305.
    (CKM_CHACHA20_KEY_GEN, info(32, 32, CKF_GENERATE)),
    (CKM_CHACHA20_POLY1305, info(32, 32, ENC | MSG)),
    // Triple DES (legacy interoperability).
    (CKM_DES3_KEY_GEN, info(24, 24, CKF_GENERATE)),
    (CKM_DES3_ECB, info(24, 24, ENC | WRAP)),
    (CKM_DES3_CBC, info(24, 24, ENC | WRAP)),
    (CKM_DES3_CBC_PAD, info(24, 24, ENC | WRAP)),
    // RSA.
    (
        CKM_RSA_PKCS_KEY_PAIR_GEN,
        info(1024, 8192, CKF_GENERATE_KEY_PAIR),
    ),
    (
        CKM_RSA_PKCS,
        info(
            1024,
            8192,
            ENC | SV | CKF_SIGN_RECOVER | CKF_VERIFY_RECOVER | WRAP,
        ),
    ),
    (
        CKM_RSA_X_509,
        info(
            1024,
            8192,
            ENC | SV | CKF_SIGN_RECOVER | CKF_VERIFY_RECOVER | WRAP,
        ),
    ),
    (CKM_RSA_PKCS_OAEP, info(1024, 8192, ENC | WRAP)),
    (CKM_RSA_PKCS_PSS, info(1024, 8192, SV)),
    (CKM_SHA1_RSA_PKCS, info(1024, 8192, SV)),
    (CKM_SHA224_RSA_PKCS, info(1024, 8192, SV)),
    (CKM_SHA256_RSA_PKCS, info(1024, 8192, SV)),
    (CKM_SHA384_RSA_PKCS, info(1024, 8192, SV)),
    (CKM_SHA512_RSA_PKCS, info(1024, 8192, SV)),
    (CKM_SHA3_224_RSA_PKCS, info(1024, 8192, SV)),
    (CKM_SHA3_256_RSA_PKCS, info(1024, 8192, SV)),
    (CKM_SHA3_384_RSA_PKCS, info(1024, 8192, SV)),
    (CKM_SHA3_512_RSA_PKCS, info(1024, 8192, SV)),
    (CKM_SHA1_RSA_PKCS_PSS, info(1024, 8192, SV)),
    (CKM_SHA224_RSA_PKCS_PSS, info(1024, 8192, SV)),
    (CKM_SHA256_RSA_PKCS_PSS, info(1024, 8192, SV)),
    (CKM_SHA384_RSA_PKCS_PSS, info(1024, 8192, SV)),
    (CKM_SHA512_RSA_PKCS_PSS, info(1024, 8192, SV)),
    (CKM_SHA3_224_RSA_PKCS_PSS, info(1024, 8192, SV)),
    (CKM_SHA3_256_RSA_PKCS_PSS, info(1024, 8192, SV)),
    (CKM_SHA3_384_RSA_PKCS_PSS, info(1024, 8192, SV)),
    (CKM_SHA3_512_RSA_PKCS_PSS, info(1024, 8192, SV)),
    // Elliptic curves (P-256, P-384, P-521, secp256k1).
    (
        CKM_EC_KEY_PAIR_GEN,
        info(256, 521, CKF_GENERATE_KEY_PAIR | EC_FLAGS),
    ),
    (CKM_ECDSA, info(256, 521, SV | EC_FLAGS)),
    (CKM_ECDSA_SHA1, info(256, 521, SV | EC_FLAGS)),
    (CKM_ECDSA_SHA224, info(256, 521, SV | EC_FLAGS)),
    (CKM_ECDSA_SHA256, info(256, 521, SV | EC_FLAGS)),
    (CKM_ECDSA_SHA384, info(256, 521, SV | EC_FLAGS)),
    (CKM_ECDSA_SHA512, info(256, 521, SV | EC_FLAGS)),
    (CKM_ECDSA_SHA3_224, info(256, 521, SV | EC_FLAGS)),
    (CKM_ECDSA_SHA3_256, info(256, 521, SV | EC_FLAGS)),
    (CKM_ECDSA_SHA3_384, info(256, 521, SV | EC_FLAGS)),
    (CKM_ECDSA_SHA3_512, info(256, 521, SV | EC_FLAGS)),
    (CKM_ECDH1_DERIVE, info(255, 521, CKF_DERIVE | EC_FLAGS)),
    (
        CKM_ECDH1_COFACTOR_DERIVE,
        info(256, 521, CKF_DERIVE | EC_FLAGS),
    ),
    // Edwards and Montgomery curves.
    (
        CKM_EC_EDWARDS_KEY_PAIR_GEN,
        info(255, 448, CKF_GENERATE_KEY_PAIR),
    ),
    (CKM_EDDSA, info(255, 448, SV)),
    (
        CKM_EC_MONTGOMERY_KEY_PAIR_GEN,
        info(255, 448, CKF_GENERATE_KEY_PAIR),
    ),
    // Post-quantum (PKCS#11 3.2).
    (
        CKM_ML_DSA_KEY_PAIR_GEN,
        info(CKP_ML_DSA_44, CKP_ML_DSA_87, CKF_GENERATE_KEY_PAIR),
    ),
    (CKM_ML_DSA, info(CKP_ML_DSA_44, CKP_ML_DSA_87, SV)),
    (
        CKM_ML_KEM_KEY_PAIR_GEN,
        info(CKP_ML_KEM_512, CKP_ML_KEM_1024, CKF_GENERATE_KEY_PAIR),
    ),
    (
        CKM_ML_KEM,
        info(
            CKP_ML_KEM_512,
            CKP_ML_KEM_1024,
            CKF_ENCAPSULATE | CKF_DECAPSULATE,
        ),
    ),
    // Key derivation.
    (CKM_PKCS5_PBKD2, info(0, 0, CKF_GENERATE)),
    (CKM_HKDF_DERIVE, info(1, 512, CKF_DERIVE)),
    (CKM_HKDF_KEY_GEN, info(1, 512, CKF_GENERATE)),
];

/// `C_GetMechanismList` of the software token.
pub fn mechanism_list() -> Vec<CK_MECHANISM_TYPE> {
    TABLE.iter().map(|(m, _)| *m).collect()
}

/// `C_GetMechanismInfo`; `None` → `CKR_MECHANISM_INVALID`.
pub fn mechanism_info(m: CK_MECHANISM_TYPE) -> Option<CK_MECHANISM_INFO> {
    TABLE.iter().find(|(t, _)| *t == m).map(|(_, i)| *i)
}
