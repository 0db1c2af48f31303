//! `CKM_ECDSA` with P-256 keys in `libopencf_accel.so`, through its C ABI (loaded as the
//! framework loads providers): OpenSSL's signatures in ordinary sessions, the multi-buffer
//! engine's in asynchronous ones (a pass runs when eight requests wait, or when
//! `C_AsyncComplete` finds its request still waiting). Every signature is checked with
//! OpenSSL. Also the fault switch (a faulty pass is redone with OpenSSL; a busy provider
//! refuses), and the answers to bad keys and calls.
//!
//! Build first: `cargo build --release -p opencf-accel` (cargo test builds the library too).

#[allow(dead_code)]
mod common;

use common::raw::{
    complete_all, create_ec_key, create_rsa_key, ec_verifies, engine_here, sign_now,
};
use opencf_abi::provider::AsyncOut;
use opencf_abi::sys::*;
use opencf_abi::{AttrValue, MechParam, Mechanism, OutBuf};
use openssl::ec::{EcGroup, EcKey};
use openssl::nid::Nid;
use openssl::pkey::Private;
use openssl::rsa::Rsa;

use common::raw::{lock, provider as module, provider_slot as slot};

fn open(flags: CK_FLAGS) -> CK_SESSION_HANDLE {
    module()
        .open_session(slot(), CKF_SERIAL_SESSION | flags)
        .expect("C_OpenSession")
}

const P256: [u8; 10] = opencf_accel::ecdsa::P256_OID;

/// A blocking `C_Sign` into a buffer of `len` bytes.
fn sign(s: CK_SESSION_HANDLE, data: &[u8], len: usize) -> Result<Vec<u8>, CK_RV> {
    sign_now(module(), s, data, len)
}

fn p256_key() -> EcKey<Private> {
    EcKey::generate(&EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap()).unwrap()
}

fn hash(i: usize) -> Vec<u8> {
    openssl::sha::sha256(format!("message {i}").as_bytes()).to_vec()
}

/// Signs `hash(i)` on each asynchronous session; returns the pending calls and how many
/// answered at once (each checked).
fn sign_each(
    sessions: &[CK_SESSION_HANDLE],
    key: &EcKey<Private>,
    h: CK_OBJECT_HANDLE,
) -> (Vec<(usize, AsyncOut)>, usize) {
    let p = module();
    let mut pending = Vec::new();
    let mut at_once = 0;
    for (i, &s) in sessions.iter().enumerate() {
        p.sign_init(s, &Mechanism::new(CKM_ECDSA), h).unwrap();
        match p.sign_async(s, &hash(i), 64).expect("C_Sign") {
            Ok(sig) => {
                assert!(ec_verifies(key, &hash(i), &sig), "signature {i} verifies");
                at_once += 1;
            }
            Err(out) => pending.push((i, out)),
        }
    }
    (pending, at_once)
}

/// Collects the pending signatures and checks each.
fn collect(pending: &mut Vec<(usize, AsyncOut)>, key: &EcKey<Private>) {
    complete_all(module(), pending, |i, sig| ec_verifies(key, &hash(i), sig));
}

#[test]
fn ecdsa_in_ordinary_and_asynchronous_sessions() {
    let _g = lock();
    let p = module();
    let listed = p.get_mechanism_list(slot()).unwrap().contains(&CKM_ECDSA);
    if !engine_here() {
        assert!(!listed, "CKM_ECDSA is listed only with the engine");
        return;
    }
    assert!(listed, "CKM_ECDSA listed");
    let info = p.get_mechanism_info(slot(), CKM_ECDSA).unwrap();
    assert_eq!((info.ulMinKeySize, info.ulMaxKeySize), (256, 256));
    assert_ne!(info.flags & CKF_SIGN, 0);
    let key = p256_key();
    let owner = open(0);
    let h = create_ec_key(p, owner, &P256, &key.private_key().to_vec());
    assert!(matches!(
        p.get_attribute_value(owner, h, &[CKA_VALUE]).unwrap()[0],
        AttrValue::Sensitive
    ));
    // An ordinary session: OpenSSL's signature, at once; hashes of any length.
    p.sign_init(owner, &Mechanism::new(CKM_ECDSA), h).unwrap();
    let sig = sign(owner, &hash(0), 64).unwrap();
    assert!(ec_verifies(&key, &hash(0), &sig));
    for data in [vec![], vec![1u8; 20], vec![7u8; 64]] {
        p.sign_init(owner, &Mechanism::new(CKM_ECDSA), h).unwrap();
        let sig = sign(owner, &data, 64).unwrap();
        assert!(ec_verifies(&key, &data, &sig), "{}-byte hash", data.len());
    }
    // Asynchronous sessions: every eighth call runs a pass and answers at once; the rest
    // pend until a pass has run or C_AsyncComplete runs one.
    let n = 8 * 5 + 3;
    let sessions: Vec<_> = (0..n).map(|_| open(CKF_ASYNC_SESSION)).collect();
    let (mut pending, at_once) = sign_each(&sessions, &key, h);
    assert_eq!(at_once, 5, "the call completing each pass answers at once");
    assert_eq!(pending.len(), n - 5);
    let s0 = sessions[pending[0].0];
    assert_eq!(
        p.sign_init(s0, &Mechanism::new(CKM_ECDSA), h),
        Err(CKR_OPERATION_ACTIVE),
        "C_SignInit while a signature is pending"
    );
    assert_eq!(p.async_get_id(s0, "C_Sign"), Err(CKR_STATE_UNSAVEABLE));
    collect(&mut pending, &key);
    // Fewer than eight: the first poll runs a partial pass.
    let (mut pending, at_once) = sign_each(&sessions[..3], &key, h);
    assert_eq!((pending.len(), at_once), (3, 0));
    collect(&mut pending, &key);
    // A session closed with a call pending leaves the others intact.
    let (mut pending, _) = sign_each(&sessions[..5], &key, h);
    p.close_session(sessions[0]).unwrap();
    pending.retain(|(i, _)| *i != 0);
    collect(&mut pending, &key);
    for s in &sessions[1..] {
        p.close_session(*s).unwrap();
    }
    p.close_session(owner).unwrap();
}

#[test]
fn the_fault_switch_with_ecdsa() {
    let _g = lock();
    if !engine_here() {
        return;
    }
    let p = module();
    let key = p256_key();
    let owner = open(0);
    let h = create_ec_key(p, owner, &P256, &key.private_key().to_vec());
    let sessions: Vec<_> = (0..19).map(|_| open(CKF_ASYNC_SESSION)).collect();
    // Every pass fails its check: each signature is made again with OpenSSL, and correct.
    std::env::set_var("OPENCF_ACCEL_FAULT", "engine-error");
    let (mut pending, at_once) = sign_each(&sessions, &key, h);
    assert_eq!(pending.len() + at_once, sessions.len());
    collect(&mut pending, &key);
    // Busy: an asynchronous C_Sign is refused (the framework then signs elsewhere); an
    // ordinary session still signs with OpenSSL.
    std::env::set_var("OPENCF_ACCEL_FAULT", "busy");
    p.sign_init(sessions[0], &Mechanism::new(CKM_ECDSA), h)
        .unwrap();
    assert_eq!(
        p.sign_async(sessions[0], &hash(1), 64).map(|_| ()),
        Err(CKR_DEVICE_MEMORY)
    );
    p.sign_init(owner, &Mechanism::new(CKM_ECDSA), h).unwrap();
    assert!(ec_verifies(
        &key,
        &hash(1),
        &sign(owner, &hash(1), 64).unwrap()
    ));
    std::env::remove_var("OPENCF_ACCEL_FAULT");
    for s in sessions {
        p.close_session(s).unwrap();
    }
    p.close_session(owner).unwrap();
}

#[test]
fn bad_ecdsa_keys_and_calls() {
    let _g = lock();
    if !engine_here() {
        return;
    }
    let p = module();
    let s = open(0);
    let m = Mechanism::new(CKM_ECDSA);
    // Another curve, a private value of zero or not below n: the next provider's turn.
    let p384 = EcKey::generate(&EcGroup::from_curve_name(Nid::SECP384R1).unwrap()).unwrap();
    let oid384 = [0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22];
    let h = create_ec_key(p, s, &oid384, &p384.private_key().to_vec());
    assert_eq!(p.sign_init(s, &m, h), Err(CKR_KEY_SIZE_RANGE));
    let h = create_ec_key(p, s, &P256, &[0u8; 32]);
    assert_eq!(p.sign_init(s, &m, h), Err(CKR_KEY_SIZE_RANGE));
    let h = create_ec_key(p, s, &P256, &[0xffu8; 32]);
    assert_eq!(p.sign_init(s, &m, h), Err(CKR_KEY_SIZE_RANGE));
    // An RSA key, or a mechanism parameter.
    let rsa = create_rsa_key(p, s, &Rsa::generate(2048).unwrap());
    assert_eq!(p.sign_init(s, &m, rsa), Err(CKR_KEY_TYPE_INCONSISTENT));
    let key = p256_key();
    let h = create_ec_key(p, s, &P256, &key.private_key().to_vec());
    // CKA_PUBLIC_KEY_INFO, derived when read: the key's SubjectPublicKeyInfo as OpenSSL
    // writes it on P-256, empty (the attribute's default) on a curve the engine does not hold.
    let spki = openssl::pkey::PKey::from_ec_key(
        EcKey::from_public_key(key.group(), key.public_key()).unwrap(),
    )
    .unwrap()
    .public_key_to_der()
    .unwrap();
    let info = |h| p.get_attribute_value(s, h, &[CKA_PUBLIC_KEY_INFO]).unwrap();
    assert_eq!(info(h), vec![AttrValue::Value(spki)]);
    let other = create_ec_key(p, s, &oid384, &p384.private_key().to_vec());
    assert_eq!(info(other), vec![AttrValue::Value(vec![])]);
    let with_param = Mechanism {
        mechanism: CKM_ECDSA,
        param: MechParam::Bytes(vec![1, 2, 3]),
    };
    assert_eq!(
        p.sign_init(s, &with_param, h),
        Err(CKR_MECHANISM_PARAM_INVALID)
    );
    // CKM_ECDSA is single-part; a buffer too small keeps the operation.
    p.sign_init(s, &m, h).unwrap();
    assert_eq!(p.sign_update(s, b"x"), Err(CKR_FUNCTION_NOT_SUPPORTED));
    assert_eq!(
        sign(s, &hash(2), 64).map(|_| ()),
        Err(CKR_OPERATION_NOT_INITIALIZED)
    );
    // C_SignFinal answers as the software token's: the buffer first, then "not supported".
    p.sign_init(s, &m, h).unwrap();
    let mut small = [0u8; 10];
    assert_eq!(
        p.sign_final(s, &mut OutBuf::new(Some(&mut small))),
        Err(CKR_BUFFER_TOO_SMALL)
    );
    let mut room = [0u8; 64];
    assert_eq!(
        p.sign_final(s, &mut OutBuf::new(Some(&mut room))),
        Err(CKR_FUNCTION_NOT_SUPPORTED)
    );
    p.sign_init(s, &m, h).unwrap();
    assert_eq!(sign(s, &hash(2), 10).map(|_| ()), Err(CKR_BUFFER_TOO_SMALL));
    assert!(ec_verifies(&key, &hash(2), &sign(s, &hash(2), 64).unwrap()));
    // A key without the template's essentials.
    p.close_session(s).unwrap();
}
