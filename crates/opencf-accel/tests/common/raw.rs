//! For the tests that load a module as the framework loads providers
//! (`opencf_abi::provider::Provider`): templates and checks.

#![allow(dead_code)]

use opencf_abi::provider::Provider;
use opencf_abi::sys::*;
use opencf_abi::Attribute;
use openssl::hash::MessageDigest;
use openssl::pkey::{PKey, Private};
use openssl::rsa::Rsa;
use openssl::sign::Verifier;

fn attr(kind: CK_ATTRIBUTE_TYPE, value: impl Into<Vec<u8>>) -> Attribute {
    Attribute {
        kind,
        value: value.into(),
    }
}

fn ulong(v: CK_ULONG) -> Vec<u8> {
    v.to_ne_bytes().to_vec()
}

/// A public, non-sensitive session RSA private key by value (no login needed anywhere), for
/// signing and decryption.
pub fn create_rsa_key(p: &Provider, s: CK_SESSION_HANDLE, key: &Rsa<Private>) -> CK_OBJECT_HANDLE {
    let t = [
        attr(CKA_CLASS, ulong(CKO_PRIVATE_KEY)),
        attr(CKA_KEY_TYPE, ulong(CKK_RSA)),
        attr(CKA_TOKEN, [0u8]),
        attr(CKA_PRIVATE, [0u8]),
        attr(CKA_SENSITIVE, [0u8]),
        attr(CKA_SIGN, [1u8]),
        attr(CKA_DECRYPT, [1u8]),
        attr(CKA_MODULUS, key.n().to_vec()),
        attr(CKA_PUBLIC_EXPONENT, key.e().to_vec()),
        attr(CKA_PRIVATE_EXPONENT, key.d().to_vec()),
        attr(CKA_PRIME_1, key.p().unwrap().to_vec()),
        attr(CKA_PRIME_2, key.q().unwrap().to_vec()),
        attr(CKA_EXPONENT_1, key.dmp1().unwrap().to_vec()),
        attr(CKA_EXPONENT_2, key.dmq1().unwrap().to_vec()),
        attr(CKA_COEFFICIENT, key.iqmp().unwrap().to_vec()),
    ];
    p.create_object(s, &t).expect("C_CreateObject")
}

/// Whether `sig` is `key`'s SHA256-RSA-PKCS signature of `msg`.
pub fn verifies(key: &Rsa<Private>, msg: &[u8], sig: &[u8]) -> bool {
    let pkey = PKey::from_rsa(key.clone()).unwrap();
    let mut v = Verifier::new(MessageDigest::sha256(), &pkey).unwrap();
    v.update(msg).unwrap();
    v.verify(sig).unwrap()
}
