//! The token's cryptography: every mechanism, computed by OpenSSL (the `openssl` crate).
//!
//! The token layer (sessions, objects, attribute policy) calls the functions of this module
//! with a parsed [`Mechanism`] and a [`Key`] (the object's attributes plus its parsed-key
//! cache); it has already checked the key's class and usage flags (`CKA_ENCRYPT`, `CKA_SIGN`, …).
//! This module checks the key type against the mechanism (`CKR_KEY_TYPE_INCONSISTENT`), the
//! parameters (`CKR_MECHANISM_PARAM_INVALID`), sizes (`CKR_KEY_SIZE_RANGE`,
//! `CKR_DATA_LEN_RANGE`, …) and implements the two-call output protocol through
//! [`OutBuf`]: an operation asked for its output size (NULL buffer) or given a buffer that is
//! too small must leave its state untouched, so that the caller can call again.
//!
//! Files by family: [`digest`] (SHA-1/2/3), [`sym`] (AES modes, ChaCha20-Poly1305, DES3,
//! AES key wrap, secret key generation), [`mac`] (HMAC, CMAC), [`kdf`] (PBKDF2, HKDF),
//! [`rsa`], [`ec`] (ECDSA, ECDH, EdDSA, X25519/X448), [`pqc`] (ML-DSA, ML-KEM).

use crate::attrs::{AttrMap, AttrMapExt};
use opencf_abi::sys::*;
use opencf_abi::{CkResult, Mechanism, MessageParams, OutBuf};
use openssl::pkey::{PKey, Private, Public};
use std::sync::OnceLock;
use zeroize::Zeroizing;

pub mod digest;
pub mod ec;
pub mod kdf;
pub mod mac;
pub mod pqc;
pub mod rsa;
pub mod sym;
mod table;

pub use table::{mechanism_info, mechanism_list};

/// Parsed forms of a key, computed on first use and kept with the object until it changes
/// (objects are immutable: a change makes a new object with an empty cache) or the user logs
/// out (private objects are then dropped from memory).
#[derive(Default)]
pub struct KeyCache {
    /// The private key in OpenSSL form (RSA with its CRT values, EC, EdDSA, ML-DSA, ML-KEM…).
    pub private: OnceLock<PKey<Private>>,
    /// The public key in OpenSSL form.
    pub public: OnceLock<PKey<Public>>,
}

impl std::fmt::Debug for KeyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyCache")
    }
}

/// A key object as the crypto layer sees it.
#[derive(Clone, Copy)]
pub struct Key<'a> {
    /// All attributes of the object (secret values included).
    pub attrs: &'a AttrMap,
    /// Its parsed-key cache.
    pub cache: &'a KeyCache,
}

impl<'a> Key<'a> {
    /// `CKA_KEY_TYPE` (absent → `CKR_KEY_TYPE_INCONSISTENT`).
    pub fn key_type(&self) -> CkResult<CK_KEY_TYPE> {
        self.attrs
            .ulong(CKA_KEY_TYPE)?
            .ok_or(CKR_KEY_TYPE_INCONSISTENT)
    }
    /// `CKA_CLASS`.
    pub fn class(&self) -> CkResult<CK_OBJECT_CLASS> {
        self.attrs.ulong(CKA_CLASS)?.ok_or(CKR_KEY_HANDLE_INVALID)
    }
    /// `CKA_VALUE` of a secret key.
    pub fn value(&self) -> CkResult<&'a [u8]> {
        self.attrs.bytes(CKA_VALUE).ok_or(CKR_KEY_HANDLE_INVALID)
    }
}

/// A running encryption or decryption.
pub trait CipherOp: Send {
    /// `C_Encrypt`/`C_Decrypt`: the whole input at once; ends the operation on success.
    fn one_shot(&mut self, input: &[u8], out: &mut OutBuf) -> CkResult<()>;
    /// `C_EncryptUpdate`/`C_DecryptUpdate`.
    fn update(&mut self, input: &[u8], out: &mut OutBuf) -> CkResult<()>;
    /// `C_EncryptFinal`/`C_DecryptFinal`.
    fn finalize(&mut self, out: &mut OutBuf) -> CkResult<()>;
    /// Restarts this operation on the same key with new parameters (a new IV), reusing the
    /// key schedule: the fast path for many small operations with one key. The default says
    /// it cannot, and the caller builds a new operation.
    fn reinit(&mut self, _mech: &Mechanism) -> CkResult<()> {
        Err(CKR_FUNCTION_NOT_SUPPORTED)
    }
}

/// A running digest.
pub trait DigestOp: Send {
    /// `C_DigestUpdate` (and `C_DigestKey` with the key's value).
    fn update(&mut self, data: &[u8]) -> CkResult<()>;
    /// `C_DigestFinal`.
    fn finalize(&mut self, out: &mut OutBuf) -> CkResult<()>;
    /// `C_Digest`.
    fn one_shot(&mut self, data: &[u8], out: &mut OutBuf) -> CkResult<()>;
    /// `C_GetOperationState`: a self-describing serialisation, or `CKR_STATE_UNSAVEABLE`.
    fn state(&self) -> CkResult<Vec<u8>> {
        Err(CKR_STATE_UNSAVEABLE)
    }
}

/// A running signature or MAC computation.
pub trait SignOp: Send {
    /// `C_SignUpdate`; mechanisms that cannot be multi-part answer `CKR_FUNCTION_NOT_SUPPORTED`.
    fn update(&mut self, data: &[u8]) -> CkResult<()>;
    /// `C_SignFinal`.
    fn finalize(&mut self, out: &mut OutBuf) -> CkResult<()>;
    /// `C_Sign`.
    fn one_shot(&mut self, data: &[u8], out: &mut OutBuf) -> CkResult<()>;
}

/// A running signature or MAC verification. A bad signature is `CKR_SIGNATURE_INVALID`,
/// one of the wrong length `CKR_SIGNATURE_LEN_RANGE`.
pub trait VerifyOp: Send {
    /// `C_VerifyUpdate`.
    fn update(&mut self, data: &[u8]) -> CkResult<()>;
    /// `C_VerifyFinal`.
    fn finalize(&mut self, sig: &[u8]) -> CkResult<()>;
    /// `C_Verify`.
    fn one_shot(&mut self, data: &[u8], sig: &[u8]) -> CkResult<()>;
}

/// A message-based AEAD context (`C_MessageEncryptInit` … `C_MessageEncryptFinal`).
pub trait MessageOp: Send {
    /// `C_EncryptMessage` / `C_DecryptMessage` (which one was fixed at init).
    fn message(
        &mut self,
        params: &mut MessageParams,
        aad: &[u8],
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()>;
}

fn is_digest(m: CK_MECHANISM_TYPE) -> bool {
    digest::md_for(m).is_some()
}

/// `C_EncryptInit`.
pub fn encrypt_init(mech: &Mechanism, key: Key) -> CkResult<Box<dyn CipherOp>> {
    match mech.mechanism {
        CKM_RSA_PKCS | CKM_RSA_X_509 | CKM_RSA_PKCS_OAEP => rsa::encrypt_init(mech, key),
        _ => sym::cipher_init(mech, key, true),
    }
}

/// `C_DecryptInit`.
pub fn decrypt_init(mech: &Mechanism, key: Key) -> CkResult<Box<dyn CipherOp>> {
    match mech.mechanism {
        CKM_RSA_PKCS | CKM_RSA_X_509 | CKM_RSA_PKCS_OAEP => rsa::decrypt_init(mech, key),
        _ => sym::cipher_init(mech, key, false),
    }
}

/// `C_MessageEncryptInit` / `C_MessageDecryptInit` (AES-GCM, ChaCha20-Poly1305).
pub fn message_init(mech: &Mechanism, key: Key, encrypt: bool) -> CkResult<Box<dyn MessageOp>> {
    sym::message_init(mech, key, encrypt)
}

/// `C_DigestInit`.
pub fn digest_init(mech: &Mechanism) -> CkResult<Box<dyn DigestOp>> {
    if !is_digest(mech.mechanism) {
        return Err(CKR_MECHANISM_INVALID);
    }
    digest::init(mech)
}

pub use digest::saved_state_mechanism;

/// `C_SetOperationState` for a digest: rebuilds it from [`DigestOp::state`].
pub fn digest_restore(state: &[u8]) -> CkResult<Box<dyn DigestOp>> {
    digest::restore(state)
}

/// The family a signature/MAC mechanism belongs to.
enum SignFamily {
    Mac,
    Rsa,
    Ec,
    Pqc,
}

fn sign_family(m: CK_MECHANISM_TYPE) -> CkResult<SignFamily> {
    Ok(match m {
        CKM_RSA_PKCS
        | CKM_RSA_X_509
        | CKM_RSA_PKCS_PSS
        | CKM_SHA1_RSA_PKCS
        | CKM_SHA224_RSA_PKCS
        | CKM_SHA256_RSA_PKCS
        | CKM_SHA384_RSA_PKCS
        | CKM_SHA512_RSA_PKCS
        | CKM_SHA3_224_RSA_PKCS
        | CKM_SHA3_256_RSA_PKCS
        | CKM_SHA3_384_RSA_PKCS
        | CKM_SHA3_512_RSA_PKCS
        | CKM_SHA1_RSA_PKCS_PSS
        | CKM_SHA224_RSA_PKCS_PSS
        | CKM_SHA256_RSA_PKCS_PSS
        | CKM_SHA384_RSA_PKCS_PSS
        | CKM_SHA512_RSA_PKCS_PSS
        | CKM_SHA3_224_RSA_PKCS_PSS
        | CKM_SHA3_256_RSA_PKCS_PSS
        | CKM_SHA3_384_RSA_PKCS_PSS
        | CKM_SHA3_512_RSA_PKCS_PSS => SignFamily::Rsa,
        CKM_ECDSA | CKM_ECDSA_SHA1 | CKM_ECDSA_SHA224 | CKM_ECDSA_SHA256 | CKM_ECDSA_SHA384
        | CKM_ECDSA_SHA512 | CKM_ECDSA_SHA3_224 | CKM_ECDSA_SHA3_256 | CKM_ECDSA_SHA3_384
        | CKM_ECDSA_SHA3_512 | CKM_EDDSA => SignFamily::Ec,
        CKM_ML_DSA => SignFamily::Pqc,
        m if mac::is_mac(m) => SignFamily::Mac,
        _ => return Err(CKR_MECHANISM_INVALID),
    })
}

/// `C_SignInit`.
pub fn sign_init(mech: &Mechanism, key: Key) -> CkResult<Box<dyn SignOp>> {
    match sign_family(mech.mechanism)? {
        SignFamily::Mac => mac::sign_init(mech, key),
        SignFamily::Rsa => rsa::sign_init(mech, key),
        SignFamily::Ec => ec::sign_init(mech, key),
        SignFamily::Pqc => pqc::sign_init(mech, key),
    }
}

/// `C_VerifyInit` (and `C_VerifySignatureInit`).
pub fn verify_init(mech: &Mechanism, key: Key) -> CkResult<Box<dyn VerifyOp>> {
    match sign_family(mech.mechanism)? {
        SignFamily::Mac => mac::verify_init(mech, key),
        SignFamily::Rsa => rsa::verify_init(mech, key),
        SignFamily::Ec => ec::verify_init(mech, key),
        SignFamily::Pqc => pqc::verify_init(mech, key),
    }
}

/// `C_SignRecover` (raw RSA: `CKM_RSA_PKCS`, `CKM_RSA_X_509`), single-part.
pub fn sign_recover(mech: &Mechanism, key: Key, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
    rsa::sign_recover(mech, key, data, out)
}

/// `C_VerifyRecover` (raw RSA), single-part.
pub fn verify_recover(mech: &Mechanism, key: Key, sig: &[u8], out: &mut OutBuf) -> CkResult<()> {
    rsa::verify_recover(mech, key, sig, out)
}

/// `C_GenerateKey`: the attributes the mechanism produces (`CKA_CLASS`, `CKA_KEY_TYPE`,
/// `CKA_VALUE`, `CKA_VALUE_LEN`), given the caller's template (for `CKA_VALUE_LEN`,
/// `CKA_KEY_TYPE` of PBKDF2 output, …).
pub fn generate_key(mech: &Mechanism, template: &AttrMap) -> CkResult<AttrMap> {
    match mech.mechanism {
        CKM_PKCS5_PBKD2 => kdf::pbkdf2_generate(mech, template),
        _ => sym::generate_key(mech, template),
    }
}

/// `C_GenerateKeyPair`: key material of (public, private), given the two templates
/// (`CKA_MODULUS_BITS`, `CKA_PUBLIC_EXPONENT`, `CKA_EC_PARAMS`, `CKA_PARAMETER_SET`, …).
/// The returned maps hold `CKA_CLASS`, `CKA_KEY_TYPE` and the key's value attributes.
pub fn generate_key_pair(
    mech: &Mechanism,
    public: &AttrMap,
    private: &AttrMap,
) -> CkResult<(AttrMap, AttrMap)> {
    match mech.mechanism {
        CKM_RSA_PKCS_KEY_PAIR_GEN => rsa::generate_key_pair(mech, public, private),
        CKM_EC_KEY_PAIR_GEN | CKM_EC_EDWARDS_KEY_PAIR_GEN | CKM_EC_MONTGOMERY_KEY_PAIR_GEN => {
            ec::generate_key_pair(mech, public, private)
        }
        CKM_ML_DSA_KEY_PAIR_GEN | CKM_ML_KEM_KEY_PAIR_GEN => {
            pqc::generate_key_pair(mech, public, private)
        }
        _ => Err(CKR_MECHANISM_INVALID),
    }
}

/// Checks the key material of an object being created or unwrapped (required attributes
/// present, sizes right, the key parses) and adds what follows from it (`CKA_VALUE_LEN`,
/// `CKA_MODULUS_BITS`, an EC private key's public point, an ML-DSA key expanded from its
/// seed, …). Missing material is `CKR_TEMPLATE_INCOMPLETE`, bad material
/// `CKR_ATTRIBUTE_VALUE_INVALID`.
pub fn complete_key(
    class: CK_OBJECT_CLASS,
    key_type: CK_KEY_TYPE,
    attrs: &mut AttrMap,
) -> CkResult<()> {
    match key_type {
        CKK_RSA => rsa::complete_key(class, attrs),
        CKK_EC | CKK_EC_EDWARDS | CKK_EC_MONTGOMERY => ec::complete_key(class, key_type, attrs),
        CKK_ML_DSA | CKK_ML_KEM => pqc::complete_key(class, key_type, attrs),
        _ if class == CKO_SECRET_KEY => sym::complete_key(key_type, attrs),
        _ => Err(CKR_ATTRIBUTE_VALUE_INVALID),
    }
}

/// Whether a template's value `given` of attribute `t` says the same as the value `made` that
/// unwrapping or derivation produced: big integers compare without leading zeros, curves by
/// the curve they name, everything else byte for byte.
pub fn same_attribute_value(t: CK_ATTRIBUTE_TYPE, given: &[u8], made: &[u8]) -> bool {
    fn unpadded(v: &[u8]) -> &[u8] {
        let zeros = v.iter().take_while(|b| **b == 0).count();
        &v[zeros..]
    }
    match t {
        CKA_EC_PARAMS => given == made || ec::same_curve(given, made),
        CKA_MODULUS | CKA_PUBLIC_EXPONENT => unpadded(given) == unpadded(made),
        _ => given == made,
    }
}

/// `CKA_CHECK_VALUE` of a new object, where PKCS#11 3.2 defines one (§6 for each key type,
/// §4.6 for certificates): for an AES or DES3 key, the first three bytes of the ECB encryption
/// of one block of zero bytes under the key; for a generic secret key and an X.509
/// certificate, the first three bytes of the SHA-1 of `CKA_VALUE`. `None` for the others,
/// which have no check value the token computes.
pub fn check_value(
    class: CK_OBJECT_CLASS,
    key_type: Option<CK_KEY_TYPE>,
    value: &[u8],
) -> Option<Vec<u8>> {
    use openssl::symm::{encrypt, Cipher};
    let full = match (class, key_type) {
        (CKO_SECRET_KEY, Some(CKK_AES)) => {
            let c = match value.len() {
                16 => Cipher::aes_128_ecb(),
                24 => Cipher::aes_192_ecb(),
                32 => Cipher::aes_256_ecb(),
                _ => return None,
            };
            encrypt(c, value, None, &[0u8; 16]).ok()?
        }
        (CKO_SECRET_KEY, Some(CKK_DES3)) if value.len() == 24 => {
            encrypt(Cipher::des_ede3_ecb(), value, None, &[0u8; 8]).ok()?
        }
        (CKO_SECRET_KEY, Some(CKK_GENERIC_SECRET)) | (CKO_CERTIFICATE, _) => {
            openssl::sha::sha1(value).to_vec()
        }
        _ => return None,
    };
    full.get(..3).map(<[u8]>::to_vec)
}

/// `CKA_PUBLIC_KEY_INFO` of a public or private key: the DER `SubjectPublicKeyInfo` of its
/// public key, which a private key without its public part (an EC private key has no
/// `CKA_EC_POINT`) computes from its private value. Empty for a key type OpenSSL has no
/// encoding for (PKCS#11: the attribute "MAY be empty").
pub fn public_key_info(key: Key) -> CkResult<Vec<u8>> {
    let pkey = match key.key_type()? {
        CKK_RSA => rsa::public_key(&key)?,
        CKK_EC | CKK_EC_EDWARDS | CKK_EC_MONTGOMERY => ec::public_pkey(&key)?,
        CKK_ML_DSA | CKK_ML_KEM => pqc::public_pkey(&key)?,
        _ => return Ok(Vec::new()),
    };
    Ok(pkey.public_key_to_der().unwrap_or_default())
}

/// The bytes `C_WrapKey` encrypts: a secret key's `CKA_VALUE`, a private key's PKCS#8
/// `PrivateKeyInfo` DER.
pub fn key_to_bytes(key: Key) -> CkResult<Zeroizing<Vec<u8>>> {
    match key.class()? {
        CKO_SECRET_KEY => Ok(Zeroizing::new(key.value()?.to_vec())),
        CKO_PRIVATE_KEY => match key.key_type()? {
            CKK_RSA => rsa::to_pkcs8(key),
            CKK_EC | CKK_EC_EDWARDS | CKK_EC_MONTGOMERY => ec::to_pkcs8(key),
            CKK_ML_DSA | CKK_ML_KEM => pqc::to_pkcs8(key),
            _ => Err(CKR_KEY_NOT_WRAPPABLE),
        },
        _ => Err(CKR_KEY_NOT_WRAPPABLE),
    }
}

/// The inverse of [`key_to_bytes`] for `C_UnwrapKey`: attributes of the key material
/// (for private keys parsed from PKCS#8; the key type must match the template's).
pub fn key_from_bytes(
    class: CK_OBJECT_CLASS,
    key_type: CK_KEY_TYPE,
    bytes: &[u8],
) -> CkResult<AttrMap> {
    match class {
        CKO_SECRET_KEY => {
            let mut m = AttrMap::new();
            m.insert(CKA_VALUE, bytes.to_vec());
            Ok(m)
        }
        CKO_PRIVATE_KEY => match key_type {
            CKK_RSA => rsa::from_pkcs8(bytes),
            CKK_EC | CKK_EC_EDWARDS | CKK_EC_MONTGOMERY => ec::from_pkcs8(key_type, bytes),
            CKK_ML_DSA | CKK_ML_KEM => pqc::from_pkcs8(key_type, bytes),
            _ => Err(CKR_WRAPPED_KEY_INVALID),
        },
        _ => Err(CKR_TEMPLATE_INCONSISTENT),
    }
}

/// `C_WrapKey`'s encryption of [`key_to_bytes`] under `wrapping_key`.
pub fn wrap(mech: &Mechanism, wrapping_key: Key, data: &[u8]) -> CkResult<Vec<u8>> {
    match mech.mechanism {
        CKM_RSA_PKCS | CKM_RSA_PKCS_OAEP | CKM_RSA_X_509 => rsa::wrap(mech, wrapping_key, data),
        _ => sym::wrap(mech, wrapping_key, data),
    }
}

/// `C_UnwrapKey`'s decryption.
pub fn unwrap(mech: &Mechanism, unwrapping_key: Key, data: &[u8]) -> CkResult<Zeroizing<Vec<u8>>> {
    match mech.mechanism {
        CKM_RSA_PKCS | CKM_RSA_PKCS_OAEP | CKM_RSA_X_509 => rsa::unwrap(mech, unwrapping_key, data),
        _ => sym::unwrap(mech, unwrapping_key, data),
    }
}

/// `C_DeriveKey`: the derived secret value. `value_len` is the length the new key's template
/// asks for (`CKA_VALUE_LEN`, or implied by its key type), `None` when it asks for none.
/// `salt_key` is the resolved `hSaltKey` of HKDF with `CKF_HKDF_SALT_KEY`.
pub fn derive(
    mech: &Mechanism,
    base: Key,
    salt_key: Option<Key>,
    value_len: Option<usize>,
) -> CkResult<Zeroizing<Vec<u8>>> {
    match mech.mechanism {
        CKM_ECDH1_DERIVE | CKM_ECDH1_COFACTOR_DERIVE => ec::derive(mech, base, value_len),
        CKM_HKDF_DERIVE | CKM_HKDF_DATA => kdf::hkdf_derive(mech, base, salt_key, value_len),
        _ => Err(CKR_MECHANISM_INVALID),
    }
}

/// `C_EncapsulateKey`: (ciphertext, shared secret).
pub fn encapsulate(mech: &Mechanism, public_key: Key) -> CkResult<(Vec<u8>, Zeroizing<Vec<u8>>)> {
    pqc::encapsulate(mech, public_key)
}

/// The ciphertext length `C_EncapsulateKey` will produce (for the size query).
pub fn encapsulate_len(mech: &Mechanism, public_key: Key) -> CkResult<usize> {
    pqc::encapsulate_len(mech, public_key)
}

/// `C_DecapsulateKey`: the shared secret.
pub fn decapsulate(mech: &Mechanism, private_key: Key, ct: &[u8]) -> CkResult<Zeroizing<Vec<u8>>> {
    pqc::decapsulate(mech, private_key, ct)
}

/// Maps an OpenSSL failure inside an operation to a PKCS#11 code.
pub(crate) fn ossl_err(_e: openssl::error::ErrorStack) -> CK_RV {
    CKR_FUNCTION_FAILED
}
