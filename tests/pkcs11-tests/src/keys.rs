//! Object templates for importing vector key material with `C_CreateObject`.
//!
//! Every key is a session object (`CKA_TOKEN = FALSE`). Secret keys are
//! created non-sensitive and extractable with all usage flags set, so one
//! template serves every mechanism that takes the key.

use crate::der;
use cryptoki::object::{
    Attribute, AttributeType, KeyType, MlDsaParameterSetType, MlKemParameterSetType, ObjectClass,
};
use openssl::pkey::PKey;

/// `CKK_CHACHA20` (PKCS#11 3.0), which cryptoki 0.12 has no `KeyType` for.
pub const CKK_CHACHA20: u64 = 0x33;

/// A secret key of type `key_type` with `CKA_VALUE = value`.
pub fn secret_key(key_type: KeyType, value: &[u8]) -> Vec<Attribute> {
    secret_key_with(Attribute::KeyType(key_type), value)
}

/// A secret key whose `CKA_KEY_TYPE` is given as a raw `CKK_*` number, for
/// key types the cryptoki crate does not name (e.g. [`CKK_CHACHA20`]).
pub fn secret_key_raw_type(key_type: u64, value: &[u8]) -> Vec<Attribute> {
    secret_key_with(
        Attribute::VendorDefined((AttributeType::KeyType, key_type.to_ne_bytes().to_vec())),
        value,
    )
}

fn secret_key_with(key_type: Attribute, value: &[u8]) -> Vec<Attribute> {
    vec![
        Attribute::Class(ObjectClass::SECRET_KEY),
        key_type,
        Attribute::Token(false),
        Attribute::Sensitive(false),
        Attribute::Extractable(true),
        Attribute::Encrypt(true),
        Attribute::Decrypt(true),
        Attribute::Sign(true),
        Attribute::Verify(true),
        Attribute::Wrap(true),
        Attribute::Unwrap(true),
        Attribute::Derive(true),
        Attribute::Value(value.to_vec()),
    ]
}

/// Template for a key that a derive, unwrap, decapsulate or key-generation
/// call creates: a readable generic secret, of `len` bytes when given.
pub fn derived_secret(len: Option<usize>) -> Vec<Attribute> {
    let mut t = vec![
        Attribute::Class(ObjectClass::SECRET_KEY),
        Attribute::KeyType(KeyType::GENERIC_SECRET),
        Attribute::Token(false),
        Attribute::Sensitive(false),
        Attribute::Extractable(true),
    ];
    if let Some(len) = len {
        t.push(Attribute::ValueLen((len as u64).into()));
    }
    t
}

/// A named Weierstrass curve of the vector files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Curve {
    /// NIST P-256.
    P256,
    /// NIST P-384.
    P384,
    /// NIST P-521.
    P521,
}

impl Curve {
    /// From a Wycheproof curve name.
    pub fn from_name(name: &str) -> Option<Curve> {
        match name {
            "secp256r1" | "P-256" => Some(Curve::P256),
            "secp384r1" | "P-384" => Some(Curve::P384),
            "secp521r1" | "P-521" => Some(Curve::P521),
            _ => None,
        }
    }

    /// `CKA_EC_PARAMS`: DER OID of the named curve.
    pub fn ec_params(self) -> Vec<u8> {
        match self {
            Curve::P256 => der::oid(&[1, 2, 840, 10045, 3, 1, 7]),
            Curve::P384 => der::oid(&[1, 3, 132, 0, 34]),
            Curve::P521 => der::oid(&[1, 3, 132, 0, 35]),
        }
    }

    /// Bytes in a scalar / field element (and in an ECDH shared secret).
    pub fn scalar_len(self) -> usize {
        match self {
            Curve::P256 => 32,
            Curve::P384 => 48,
            Curve::P521 => 66,
        }
    }
}

/// An RFC 8410 curve (EdDSA or XDH).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rfc8410 {
    /// Ed25519, `CKK_EC_EDWARDS`.
    Ed25519,
    /// Ed448, `CKK_EC_EDWARDS`.
    Ed448,
    /// X25519, `CKK_EC_MONTGOMERY`.
    X25519,
    /// X448, `CKK_EC_MONTGOMERY`.
    X448,
}

impl Rfc8410 {
    /// From a Wycheproof curve name.
    pub fn from_name(name: &str) -> Option<Rfc8410> {
        match name {
            "edwards25519" => Some(Rfc8410::Ed25519),
            "edwards448" => Some(Rfc8410::Ed448),
            "curve25519" => Some(Rfc8410::X25519),
            "curve448" => Some(Rfc8410::X448),
            _ => None,
        }
    }

    /// `CKA_EC_PARAMS`: the RFC 8410 OID (id-Ed25519 1.3.101.112, ...).
    pub fn ec_params(self) -> Vec<u8> {
        let last = match self {
            Rfc8410::X25519 => 110,
            Rfc8410::X448 => 111,
            Rfc8410::Ed25519 => 112,
            Rfc8410::Ed448 => 113,
        };
        der::oid(&[1, 3, 101, last])
    }

    /// The PKCS#11 key type.
    pub fn key_type(self) -> KeyType {
        match self {
            Rfc8410::Ed25519 | Rfc8410::Ed448 => KeyType::EC_EDWARDS,
            Rfc8410::X25519 | Rfc8410::X448 => KeyType::EC_MONTGOMERY,
        }
    }

    /// Bytes in a raw key: public key, private key, and (XDH) shared secret.
    pub fn key_len(self) -> usize {
        match self {
            Rfc8410::Ed25519 | Rfc8410::X25519 => 32,
            Rfc8410::Ed448 => 57,
            Rfc8410::X448 => 56,
        }
    }
}

/// Left-pads or strips leading zero bytes so a big-endian integer has exactly
/// `len` bytes; `None` if it does not fit.
pub fn fixed_len(be: &[u8], len: usize) -> Option<Vec<u8>> {
    let start = be.iter().take_while(|b| **b == 0).count();
    let digits = &be[start..];
    if digits.len() > len {
        return None;
    }
    let mut out = vec![0u8; len - digits.len()];
    out.extend_from_slice(digits);
    Some(out)
}

/// Strips leading zero bytes from a big-endian integer (PKCS#11 big
/// integers are unsigned).
pub fn unsigned(be: &[u8]) -> Vec<u8> {
    let start = be.iter().take_while(|b| **b == 0).count();
    if start == be.len() {
        vec![0]
    } else {
        be[start..].to_vec()
    }
}

/// EC public key for verification: `CKA_EC_POINT` is the DER OCTET STRING
/// around the X9.62 point.
pub fn ec_public(curve: Curve, point: &[u8]) -> Vec<Attribute> {
    vec![
        Attribute::Class(ObjectClass::PUBLIC_KEY),
        Attribute::KeyType(KeyType::EC),
        Attribute::Token(false),
        Attribute::Verify(true),
        Attribute::EcParams(curve.ec_params()),
        Attribute::EcPoint(der::octet_string(point)),
    ]
}

/// EC private key for ECDH: `CKA_VALUE` is the scalar, padded to the order
/// length. `None` if the scalar does not fit.
pub fn ec_private(curve: Curve, scalar: &[u8]) -> Option<Vec<Attribute>> {
    let value = fixed_len(scalar, curve.scalar_len())?;
    Some(vec![
        Attribute::Class(ObjectClass::PRIVATE_KEY),
        Attribute::KeyType(KeyType::EC),
        Attribute::Token(false),
        Attribute::Private(true),
        Attribute::Sensitive(true),
        Attribute::Derive(true),
        Attribute::Sign(true),
        Attribute::EcParams(curve.ec_params()),
        Attribute::Value(value),
    ])
}

/// EdDSA / XDH public key: `CKA_EC_POINT` is the DER OCTET STRING around the
/// raw RFC 8032 / RFC 7748 public key.
pub fn rfc8410_public(curve: Rfc8410, raw: &[u8]) -> Vec<Attribute> {
    vec![
        Attribute::Class(ObjectClass::PUBLIC_KEY),
        Attribute::KeyType(curve.key_type()),
        Attribute::Token(false),
        Attribute::Verify(true),
        Attribute::Derive(true),
        Attribute::EcParams(curve.ec_params()),
        Attribute::EcPoint(der::octet_string(raw)),
    ]
}

/// EdDSA / XDH private key: `CKA_VALUE` is the raw RFC 8032 / RFC 7748
/// private key.
pub fn rfc8410_private(curve: Rfc8410, raw: &[u8]) -> Vec<Attribute> {
    let usage = match curve {
        Rfc8410::Ed25519 | Rfc8410::Ed448 => Attribute::Sign(true),
        Rfc8410::X25519 | Rfc8410::X448 => Attribute::Derive(true),
    };
    vec![
        Attribute::Class(ObjectClass::PRIVATE_KEY),
        Attribute::KeyType(curve.key_type()),
        Attribute::Token(false),
        Attribute::Private(true),
        Attribute::Sensitive(true),
        usage,
        Attribute::EcParams(curve.ec_params()),
        Attribute::Value(raw.to_vec()),
    ]
}

/// RSA public key from modulus and exponent.
pub fn rsa_public(modulus: &[u8], exponent: &[u8]) -> Vec<Attribute> {
    vec![
        Attribute::Class(ObjectClass::PUBLIC_KEY),
        Attribute::KeyType(KeyType::RSA),
        Attribute::Token(false),
        Attribute::Verify(true),
        Attribute::Encrypt(true),
        Attribute::Modulus(unsigned(modulus)),
        Attribute::PublicExponent(unsigned(exponent)),
    ]
}

/// RSA private key with all CRT components, parsed from PKCS#8 DER.
pub fn rsa_private_pkcs8(pkcs8: &[u8]) -> Result<Vec<Attribute>, String> {
    let pkey = PKey::private_key_from_pkcs8(pkcs8).map_err(|e| format!("PKCS#8: {e}"))?;
    let rsa = pkey.rsa().map_err(|e| format!("not RSA: {e}"))?;
    let crt = |v: Option<&openssl::bn::BigNumRef>, name: &str| {
        v.map(|b| b.to_vec())
            .ok_or_else(|| format!("PKCS#8 key without {name}"))
    };
    Ok(vec![
        Attribute::Class(ObjectClass::PRIVATE_KEY),
        Attribute::KeyType(KeyType::RSA),
        Attribute::Token(false),
        Attribute::Private(true),
        Attribute::Sensitive(true),
        Attribute::Sign(true),
        Attribute::Decrypt(true),
        Attribute::Modulus(rsa.n().to_vec()),
        Attribute::PublicExponent(rsa.e().to_vec()),
        Attribute::PrivateExponent(rsa.d().to_vec()),
        Attribute::Prime1(crt(rsa.p(), "p")?),
        Attribute::Prime2(crt(rsa.q(), "q")?),
        Attribute::Exponent1(crt(rsa.dmp1(), "dP")?),
        Attribute::Exponent2(crt(rsa.dmq1(), "dQ")?),
        Attribute::Coefficient(crt(rsa.iqmp(), "qInv")?),
    ])
}

/// ML-DSA parameter set from a Wycheproof algorithm name (`ML-DSA-44`, ...).
pub fn mldsa_parameter_set(name: &str) -> Option<MlDsaParameterSetType> {
    match name {
        "ML-DSA-44" => Some(MlDsaParameterSetType::ML_DSA_44),
        "ML-DSA-65" => Some(MlDsaParameterSetType::ML_DSA_65),
        "ML-DSA-87" => Some(MlDsaParameterSetType::ML_DSA_87),
        _ => None,
    }
}

/// ML-DSA public key: `CKA_VALUE` is the raw encoded public key.
pub fn mldsa_public(set: MlDsaParameterSetType, pk: &[u8]) -> Vec<Attribute> {
    vec![
        Attribute::Class(ObjectClass::PUBLIC_KEY),
        Attribute::KeyType(KeyType::ML_DSA),
        Attribute::Token(false),
        Attribute::Verify(true),
        Attribute::ParameterSet(set.into()),
        Attribute::Value(pk.to_vec()),
    ]
}

/// ML-DSA private key given by its 32-byte seed ξ (`CKA_SEED`); the token
/// expands it.
pub fn mldsa_private_seed(set: MlDsaParameterSetType, seed: &[u8]) -> Vec<Attribute> {
    vec![
        Attribute::Class(ObjectClass::PRIVATE_KEY),
        Attribute::KeyType(KeyType::ML_DSA),
        Attribute::Token(false),
        Attribute::Private(true),
        Attribute::Sensitive(true),
        Attribute::Sign(true),
        Attribute::ParameterSet(set.into()),
        Attribute::Seed(seed.to_vec()),
    ]
}

/// ML-KEM parameter set from a Wycheproof name (`ML-KEM-512`, ...).
pub fn mlkem_parameter_set(name: &str) -> Option<MlKemParameterSetType> {
    match name {
        "ML-KEM-512" => Some(MlKemParameterSetType::ML_KEM_512),
        "ML-KEM-768" => Some(MlKemParameterSetType::ML_KEM_768),
        "ML-KEM-1024" => Some(MlKemParameterSetType::ML_KEM_1024),
        _ => None,
    }
}

/// ML-KEM public (encapsulation) key: `CKA_VALUE` is the encoded key.
pub fn mlkem_public(set: MlKemParameterSetType, ek: &[u8]) -> Vec<Attribute> {
    vec![
        Attribute::Class(ObjectClass::PUBLIC_KEY),
        Attribute::KeyType(KeyType::ML_KEM),
        Attribute::Token(false),
        Attribute::Encapsulate(true),
        Attribute::ParameterSet(set.into()),
        Attribute::Value(ek.to_vec()),
    ]
}

/// ML-KEM private (decapsulation) key given by its 64-byte seed d || z
/// (`CKA_SEED`); the token expands it.
pub fn mlkem_private_seed(set: MlKemParameterSetType, seed: &[u8]) -> Vec<Attribute> {
    vec![
        Attribute::Class(ObjectClass::PRIVATE_KEY),
        Attribute::KeyType(KeyType::ML_KEM),
        Attribute::Token(false),
        Attribute::Private(true),
        Attribute::Sensitive(true),
        Attribute::Decapsulate(true),
        Attribute::ParameterSet(set.into()),
        Attribute::Seed(seed.to_vec()),
    ]
}
