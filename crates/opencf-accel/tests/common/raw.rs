//! For the tests that load a module as the framework loads providers
//! (`opencf_abi::provider::Provider`): templates and checks.

#![allow(dead_code)]

use opencf_abi::provider::{AsyncOut, Provider};
use opencf_abi::sys::*;
use opencf_abi::Attribute;
use openssl::hash::MessageDigest;
use openssl::pkey::{PKey, Private};
use openssl::rsa::Rsa;
use openssl::sign::Verifier;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

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

/// A public, non-sensitive session EC private key by value, for signing: `CKA_EC_PARAMS` as
/// given (the DER OID of P-256 for P-256 keys), `CKA_VALUE` the private value.
pub fn create_ec_key(
    p: &Provider,
    s: CK_SESSION_HANDLE,
    params: &[u8],
    d: &[u8],
) -> CK_OBJECT_HANDLE {
    let t = [
        attr(CKA_CLASS, ulong(CKO_PRIVATE_KEY)),
        attr(CKA_KEY_TYPE, ulong(CKK_EC)),
        attr(CKA_TOKEN, [0u8]),
        attr(CKA_PRIVATE, [0u8]),
        attr(CKA_SENSITIVE, [0u8]),
        attr(CKA_SIGN, [1u8]),
        attr(CKA_EC_PARAMS, params.to_vec()),
        attr(CKA_VALUE, d.to_vec()),
    ];
    p.create_object(s, &t).expect("C_CreateObject")
}

/// Whether `sig` (`r || s`, 64 bytes) is a P-256 ECDSA signature of `hash` by `key`.
pub fn ec_verifies(key: &openssl::ec::EcKey<Private>, hash: &[u8], sig: &[u8]) -> bool {
    if sig.len() != 64 {
        return false;
    }
    let r = openssl::bn::BigNum::from_slice(&sig[..32]).unwrap();
    let s = openssl::bn::BigNum::from_slice(&sig[32..]).unwrap();
    let sig = openssl::ecdsa::EcdsaSig::from_private_components(r, s).unwrap();
    sig.verify(hash, key).unwrap()
}

/// `libopencf_accel.so` loaded as the framework loads providers, initialized once per test
/// process.
pub fn provider() -> &'static Provider {
    static M: OnceLock<Provider> = OnceLock::new();
    M.get_or_init(|| {
        let p = Provider::load(&super::library()).expect("load libopencf_accel.so");
        p.initialize().expect("C_Initialize");
        p
    })
}

/// The provider's one slot.
pub fn provider_slot() -> CK_SLOT_ID {
    provider().get_slot_list(true).unwrap()[0]
}

/// The [`super::LOCK`] of the tests that change the provider's environment.
pub fn lock() -> std::sync::MutexGuard<'static, ()> {
    super::LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether the engine serves here; prints why not.
pub fn engine_here() -> bool {
    let yes = opencf_accel::engine::provider_engine().is_some();
    if !yes {
        eprintln!("SKIP: no engine on this CPU (or OPENCF_ACCEL_DISABLE=ifma)");
    }
    yes
}

/// Polls every pending call (by index) until all are done, 10 s at most; each output must
/// pass `check(index, output)`, and no call may fail.
pub fn complete_all(
    p: &Provider,
    pending: &mut Vec<(usize, AsyncOut)>,
    check: impl Fn(usize, &[u8]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pending.is_empty() {
        assert!(Instant::now() < deadline, "pending calls never completed");
        pending.retain_mut(|(i, out)| match p.async_complete_out(out) {
            Ok(None) => true,
            Ok(Some(v)) => {
                assert!(check(*i, &v), "output {i} checks");
                false
            }
            Err(rv) => panic!("C_AsyncComplete of call {i}: {rv:#x}"),
        });
        std::thread::sleep(Duration::from_micros(50));
    }
}
