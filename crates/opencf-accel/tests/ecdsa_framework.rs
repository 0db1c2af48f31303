//! `CKM_ECDSA` through the framework, `libopencf.so` over [accel, softtoken] with the
//! software token as keystore: a sensitive P-256 key generated through slot 0 is moved into
//! the accelerator (AES-KWP of its PKCS#8 form) and signs there, in ordinary sessions
//! (OpenSSL inside the accelerator) and in asynchronous ones (the multi-buffer engine, many
//! in flight from one thread), and so does a non-sensitive key created by value (copied by
//! its attributes); a P-384 key is served by the software token. Every signature
//! is checked with OpenSSL against the public key read through slot 0; the counters show
//! which provider signed.
//!
//! Build first: `cargo build --release -p opencf-accel -p opencf -p opencf-softtoken`.

#[allow(dead_code)]
mod common;

use common::raw::{complete_all, create_ec_key, ec_verifies, framework, sign_now};
use opencf_abi::provider::{AsyncOut, Provider};
use opencf_abi::sys::*;
use opencf_abi::{AttrValue, Attribute, Mechanism};
use openssl::bn::BigNumContext;
use openssl::ec::{EcGroup, EcKey, EcPoint};
use openssl::nid::Nid;
use openssl::pkey::Public;
use std::path::Path;

/// `CKM_ECDSA` operations of `provider`.
fn ecdsa_ops(dir: &Path, provider: &str) -> u64 {
    common::raw::mechanism_ops(dir, provider, CKM_ECDSA)
}

fn flag(kind: CK_ATTRIBUTE_TYPE, v: bool) -> Attribute {
    Attribute::new(kind, vec![u8::from(v)])
}

/// A session key pair on `params`' curve, generated through slot 0 (sensitive, not
/// extractable): the private handle and the public key as OpenSSL sees it.
fn key_pair(
    p: &Provider,
    s: CK_SESSION_HANDLE,
    params: &[u8],
    nid: Nid,
) -> (CK_OBJECT_HANDLE, EcKey<Public>) {
    let (public, private) = p
        .generate_key_pair(
            s,
            &Mechanism::new(CKM_EC_KEY_PAIR_GEN),
            &[
                Attribute::new(CKA_EC_PARAMS, params.to_vec()),
                flag(CKA_TOKEN, false),
                flag(CKA_VERIFY, true),
            ],
            &[
                flag(CKA_TOKEN, false),
                flag(CKA_PRIVATE, false),
                flag(CKA_SIGN, true),
                flag(CKA_SENSITIVE, true),
                flag(CKA_EXTRACTABLE, false),
            ],
        )
        .expect("C_GenerateKeyPair through slot 0");
    let v = p.get_attribute_value(s, public, &[CKA_EC_POINT]).unwrap();
    let AttrValue::Value(der) = &v[0] else {
        panic!("CKA_EC_POINT");
    };
    // A DER OCTET STRING around the uncompressed point.
    let point = if der[0] == 0x04 && der.len() > 2 && der[1] as usize == der.len() - 2 {
        &der[2..]
    } else {
        &der[..]
    };
    let group = EcGroup::from_curve_name(nid).unwrap();
    let mut ctx = BigNumContext::new().unwrap();
    let q = EcPoint::from_bytes(&group, point, &mut ctx).unwrap();
    (private, EcKey::from_public_key(&group, &q).unwrap())
}

fn sign(p: &Provider, s: CK_SESSION_HANDLE, h: CK_OBJECT_HANDLE, data: &[u8]) -> Vec<u8> {
    p.sign_init(s, &Mechanism::new(CKM_ECDSA), h).unwrap();
    sign_now(p, s, data, 132).expect("C_Sign")
}

fn hash(i: usize) -> Vec<u8> {
    openssl::sha::sha256(format!("message {i}").as_bytes()).to_vec()
}

#[test]
fn ecdsa_through_the_framework() {
    std::env::remove_var("OPENCF_ACCEL_FAULT");
    let (p, stat) = framework("accel-ecdsa", "auto_key_migrate = true\n");
    let engine = opencf_accel::engine::provider_engine().is_some();
    let s = p
        .open_session(0, CKF_SERIAL_SESSION | CKF_RW_SESSION)
        .unwrap();
    let (h, public) = key_pair(&p, s, &opencf_accel::ecdsa::P256_OID, Nid::X9_62_PRIME256V1);
    // Ordinary session: the accelerator signs (OpenSSL inside it) once the key is moved in.
    for i in 0..5 {
        assert!(
            ec_verifies(&public, &hash(i), &sign(&p, s, h, &hash(i))),
            "signature {i}"
        );
    }
    let accel = ecdsa_ops(&stat, "accel");
    if engine {
        assert_eq!(accel, 5, "the accelerator served every signature");
    } else {
        eprintln!("SKIP: no engine on this CPU; the softtoken served ({accel} on accel)");
        assert_eq!(accel, 0);
    }
    // Asynchronous sessions of slot 0: many in flight from this thread.
    let n = 8 * 4 + 5;
    let sessions: Vec<_> = (0..n)
        .map(|_| {
            p.open_session(0, CKF_SERIAL_SESSION | CKF_ASYNC_SESSION)
                .unwrap()
        })
        .collect();
    let mut pending: Vec<(usize, AsyncOut)> = Vec::new();
    for (i, &a) in sessions.iter().enumerate() {
        p.sign_init(a, &Mechanism::new(CKM_ECDSA), h).unwrap();
        match p.sign_async(a, &hash(i), 64).expect("C_Sign") {
            Ok(sig) => assert!(ec_verifies(&public, &hash(i), &sig), "signature {i}"),
            Err(out) => pending.push((i, out)),
        }
    }
    let pended = pending.len();
    complete_all(&p, &mut pending, |i, sig| {
        ec_verifies(&public, &hash(i), sig)
    });
    let served = ecdsa_ops(&stat, "accel") - accel;
    eprintln!("slot 0, asynchronous: {pended} of {n} pended; accel signed {served}");
    if engine {
        assert_eq!(pended, n - n / 8, "all but each pass's last call pended");
        assert_eq!(served, n as u64, "the accelerator served every signature");
    }
    // A non-sensitive key created by value through slot 0: copied into the accelerator by
    // its attributes (CKA_EC_PARAMS, CKA_VALUE), and signed there.
    let by_value =
        openssl::ec::EcKey::generate(&EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap())
            .unwrap();
    let hv = create_ec_key(
        &p,
        s,
        &opencf_accel::ecdsa::P256_OID,
        &by_value.private_key().to_vec(),
    );
    let before = ecdsa_ops(&stat, "accel");
    let sig = sign(&p, s, hv, &hash(7));
    assert!(ec_verifies(&by_value, &hash(7), &sig), "by-value key");
    if engine {
        assert_eq!(
            ecdsa_ops(&stat, "accel"),
            before + 1,
            "the accelerator signed"
        );
    }
    // P-384: the accelerator declines the key, the softtoken signs.
    let oid384 = [0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22];
    let soft = ecdsa_ops(&stat, "softtoken");
    let (h384, public384) = key_pair(&p, s, &oid384, Nid::SECP384R1);
    let digest = openssl::sha::sha384(b"p-384");
    assert!(ec_verifies(
        &public384,
        &digest,
        &sign(&p, s, h384, &digest)
    ));
    assert_eq!(
        ecdsa_ops(&stat, "softtoken"),
        soft + 1,
        "the softtoken signed"
    );
    for a in sessions {
        p.close_session(a).unwrap();
    }
    p.close_session(s).unwrap();
    p.finalize().unwrap();
}
