//! The mechanism list of the software token and each mechanism's `CK_MECHANISM_INFO`.
//!
//! Key sizes follow the specification's units: bytes for AES, DES3, ChaCha20, HMAC and HKDF;
//! bits for RSA, elliptic curves and the generic secret key generator (the mechanisms
//! document says so of `CKM_GENERIC_SECRET_KEY_GEN`); ML-DSA and ML-KEM give the parameter-set
//! range. A range is what the mechanism takes: the RSA operations every modulus the token
//! accepts (512 to 16384 bits, as SoftHSMv2), key-pair generation 1024 to 8192 bits; HMAC and
//! HKDF every generic secret, HMAC or HKDF key (1 byte to 64 KiB), the generators up to 512
//! bytes (4096 bits).

use super::{rsa, sym};
use opencf_abi::sys::*;

const ENC: CK_FLAGS = CKF_ENCRYPT | CKF_DECRYPT;
const WRAP: CK_FLAGS = CKF_WRAP | CKF_UNWRAP;
const SV: CK_FLAGS = CKF_SIGN | CKF_VERIFY;
const EC_FLAGS: CK_FLAGS = CKF_EC_F_P | CKF_EC_NAMEDCURVE | CKF_EC_UNCOMPRESS | CKF_EC_OID;
/// Message-based AEAD, single call only: `CKF_MULTI_MESSAGE` (`C_*MessageBegin`/`Next`) is not
/// claimed, since those answer `CKR_FUNCTION_NOT_SUPPORTED`.
const MSG: CK_FLAGS = CKF_MESSAGE_ENCRYPT | CKF_MESSAGE_DECRYPT;

const fn info(min: CK_ULONG, max: CK_ULONG, flags: CK_FLAGS) -> CK_MECHANISM_INFO {
    CK_MECHANISM_INFO {
        ulMinKeySize: min,
        ulMaxKeySize: max,
        flags,
    }
}

/// An RSA operation: every modulus an RSA key object can have.
const fn rsa_op(flags: CK_FLAGS) -> CK_MECHANISM_INFO {
    info(
        *rsa::IMPORT_BITS.start() as CK_ULONG,
        *rsa::IMPORT_BITS.end() as CK_ULONG,
        flags,
    )
}

/// HMAC and HKDF: every length a generic secret, HMAC or HKDF key can have.
const fn secret(flags: CK_FLAGS) -> CK_MECHANISM_INFO {
    info(1, sym::MAX_SECRET as CK_ULONG, flags)
}

/// The HKDF key generator, in bytes.
const fn hkdf_gen() -> CK_MECHANISM_INFO {
    info(1, sym::MAX_GENERATED as CK_ULONG, CKF_GENERATE)
}

/// The generic secret key generator: the same lengths in bits, the unit the mechanisms
/// document gives this mechanism ("the supported range of key sizes, in bits").
const fn generic_secret_gen() -> CK_MECHANISM_INFO {
    info(8, 8 * sym::MAX_GENERATED as CK_ULONG, CKF_GENERATE)
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
    (CKM_SHA_1_HMAC, secret(SV)),
    (CKM_SHA_1_HMAC_GENERAL, secret(SV)),
    (CKM_SHA224_HMAC, secret(SV)),
    (CKM_SHA224_HMAC_GENERAL, secret(SV)),
    (CKM_SHA256_HMAC, secret(SV)),
    (CKM_SHA256_HMAC_GENERAL, secret(SV)),
    (CKM_SHA384_HMAC, secret(SV)),
    (CKM_SHA384_HMAC_GENERAL, secret(SV)),
    (CKM_SHA512_HMAC, secret(SV)),
    (CKM_SHA512_HMAC_GENERAL, secret(SV)),
    (CKM_SHA3_224_HMAC, secret(SV)),
    (CKM_SHA3_224_HMAC_GENERAL, secret(SV)),
    (CKM_SHA3_256_HMAC, secret(SV)),
    (CKM_SHA3_256_HMAC_GENERAL, secret(SV)),
    (CKM_SHA3_384_HMAC, secret(SV)),
    (CKM_SHA3_384_HMAC_GENERAL, secret(SV)),
    (CKM_SHA3_512_HMAC, secret(SV)),
    (CKM_SHA3_512_HMAC_GENERAL, secret(SV)),
    (CKM_GENERIC_SECRET_KEY_GEN, generic_secret_gen()),
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
        info(
            *rsa::GEN_BITS.start(),
            *rsa::GEN_BITS.end(),
            CKF_GENERATE_KEY_PAIR,
        ),
    ),
    (
        CKM_RSA_PKCS,
        rsa_op(ENC | SV | CKF_SIGN_RECOVER | CKF_VERIFY_RECOVER | WRAP),
    ),
    (
        CKM_RSA_X_509,
        rsa_op(ENC | SV | CKF_SIGN_RECOVER | CKF_VERIFY_RECOVER | WRAP),
    ),
    (CKM_RSA_PKCS_OAEP, rsa_op(ENC | WRAP)),
    (CKM_RSA_PKCS_PSS, rsa_op(SV)),
    (CKM_SHA1_RSA_PKCS, rsa_op(SV)),
    (CKM_SHA224_RSA_PKCS, rsa_op(SV)),
    (CKM_SHA256_RSA_PKCS, rsa_op(SV)),
    (CKM_SHA384_RSA_PKCS, rsa_op(SV)),
    (CKM_SHA512_RSA_PKCS, rsa_op(SV)),
    (CKM_SHA3_224_RSA_PKCS, rsa_op(SV)),
    (CKM_SHA3_256_RSA_PKCS, rsa_op(SV)),
    (CKM_SHA3_384_RSA_PKCS, rsa_op(SV)),
    (CKM_SHA3_512_RSA_PKCS, rsa_op(SV)),
    (CKM_SHA1_RSA_PKCS_PSS, rsa_op(SV)),
    (CKM_SHA224_RSA_PKCS_PSS, rsa_op(SV)),
    (CKM_SHA256_RSA_PKCS_PSS, rsa_op(SV)),
    (CKM_SHA384_RSA_PKCS_PSS, rsa_op(SV)),
    (CKM_SHA512_RSA_PKCS_PSS, rsa_op(SV)),
    (CKM_SHA3_224_RSA_PKCS_PSS, rsa_op(SV)),
    (CKM_SHA3_256_RSA_PKCS_PSS, rsa_op(SV)),
    (CKM_SHA3_384_RSA_PKCS_PSS, rsa_op(SV)),
    (CKM_SHA3_512_RSA_PKCS_PSS, rsa_op(SV)),
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
    (CKM_HKDF_DERIVE, secret(CKF_DERIVE)),
    (CKM_HKDF_KEY_GEN, hkdf_gen()),
];

/// `C_GetMechanismList` of the software token.
pub fn mechanism_list() -> Vec<CK_MECHANISM_TYPE> {
    TABLE.iter().map(|(m, _)| *m).collect()
}

/// `C_GetMechanismInfo`; `None` → `CKR_MECHANISM_INVALID`.
pub fn mechanism_info(m: CK_MECHANISM_TYPE) -> Option<CK_MECHANISM_INFO> {
    TABLE.iter().find(|(t, _)| *t == m).map(|(_, i)| *i)
}
