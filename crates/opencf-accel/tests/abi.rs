//! `libopencf_accel.so` through its C ABI (the `cryptoki` crate as the consumer): keys by
//! value and by AES-KWP unwrap, signatures (PKCS#1 v1.5, PSS) and OAEP decryption checked
//! with OpenSSL, eight threads at once, the fault switch, and the rules on sensitive values
//! and token objects.
//!
//! Build first: `cargo build --release -p opencf-accel` (cargo test builds the library too).

use cryptoki::error::{Error, RvError};
use cryptoki::mechanism::rsa::{PkcsMgfType, PkcsOaepParams, PkcsOaepSource, PkcsPssParams};
use cryptoki::mechanism::{Mechanism, MechanismType};
use cryptoki::object::{
    Attribute, AttributeInfo, AttributeType, KeyType, ObjectClass, ObjectHandle,
};
use cryptoki::session::Session;
use openssl::hash::MessageDigest;
use openssl::pkey::{PKey, Private};
use openssl::rsa::{Padding, Rsa};
use openssl::sign::{RsaPssSaltlen, Verifier};

mod common;
use common::{module, session, start, LOCK};

/// Whether the provider serves RSA here; prints why not.
fn engine_here() -> bool {
    let p = module();
    let slot = p.get_slots_with_token().unwrap()[0];
    let mechs = p.get_mechanism_list(slot).unwrap();
    let rsa = mechs.contains(&MechanismType::RSA_PKCS);
    let ifma = opencf_accel::engine::provider_engine().is_some();
    assert_eq!(
        rsa, ifma,
        "RSA mechanisms are listed exactly when the IFMA engine serves"
    );
    if !rsa {
        eprintln!(
            "SKIP: no RSA engine on this CPU (or OPENCF_ACCEL_DISABLE=ifma); engine cases skipped"
        );
    }
    rsa
}

fn private_template(key: &Rsa<Private>) -> Vec<Attribute> {
    vec![
        Attribute::Class(ObjectClass::PRIVATE_KEY),
        Attribute::KeyType(KeyType::RSA),
        Attribute::Token(false),
        Attribute::Sign(true),
        Attribute::Decrypt(true),
        Attribute::Modulus(key.n().to_vec()),
        Attribute::PublicExponent(key.e().to_vec()),
        Attribute::PrivateExponent(key.d().to_vec()),
        Attribute::Prime1(key.p().unwrap().to_vec()),
        Attribute::Prime2(key.q().unwrap().to_vec()),
        Attribute::Exponent1(key.dmp1().unwrap().to_vec()),
        Attribute::Exponent2(key.dmq1().unwrap().to_vec()),
        Attribute::Coefficient(key.iqmp().unwrap().to_vec()),
    ]
}

fn pss256() -> Mechanism<'static> {
    Mechanism::Sha256RsaPkcsPss(PkcsPssParams {
        hash_alg: MechanismType::SHA256,
        mgf: PkcsMgfType::MGF1_SHA256,
        s_len: 32.into(),
    })
}

fn verify(key: &Rsa<Private>, pss: bool, msg: &[u8], sig: &[u8]) -> bool {
    let pkey = PKey::from_rsa(key.clone()).unwrap();
    let mut v = Verifier::new(MessageDigest::sha256(), &pkey).unwrap();
    if pss {
        v.set_rsa_padding(Padding::PKCS1_PSS).unwrap();
        v.set_rsa_pss_saltlen(RsaPssSaltlen::custom(32)).unwrap();
    }
    v.update(msg).unwrap();
    v.verify(sig).unwrap()
}

/// Signs PKCS#1 v1.5 and PSS, decrypts OAEP with `h`; every result checked with OpenSSL.
fn exercise(s: &Session, key: &Rsa<Private>, h: ObjectHandle, msg: &[u8]) {
    let sig = s.sign(&Mechanism::Sha256RsaPkcs, h, msg).unwrap();
    assert!(
        verify(key, false, msg, &sig),
        "PKCS#1 v1.5 signature verifies"
    );
    let sig = s.sign(&pss256(), h, msg).unwrap();
    assert!(verify(key, true, msg, &sig), "PSS signature verifies");
    let pkey = PKey::from_rsa(key.clone()).unwrap();
    let mut ctx = openssl::pkey_ctx::PkeyCtx::new(&pkey).unwrap();
    ctx.encrypt_init().unwrap();
    ctx.set_rsa_padding(Padding::PKCS1_OAEP).unwrap();
    ctx.set_rsa_oaep_md(openssl::md::Md::sha256()).unwrap();
    ctx.set_rsa_mgf1_md(openssl::md::Md::sha256()).unwrap();
    let mut ct = vec![];
    ctx.encrypt_to_vec(&msg[..32], &mut ct).unwrap();
    let oaep = Mechanism::RsaPkcsOaep(PkcsOaepParams::new(
        MechanismType::SHA256,
        PkcsMgfType::MGF1_SHA256,
        PkcsOaepSource::empty(),
    ));
    assert_eq!(
        s.decrypt(&oaep, h, &ct).unwrap(),
        &msg[..32],
        "OAEP round trip"
    );
}

/// A size query (NULL output) of `C_Decrypt` with a ciphertext of the wrong length is
/// `CKR_ENCRYPTED_DATA_LEN_RANGE` and ends the operation, as in the software token; with the
/// right length it answers the modulus length. Through the module's function list: `cryptoki`
/// makes the size query itself.
fn size_query_checks_the_length(s: &Session, h: ObjectHandle, k: usize) {
    use opencf_abi::sys::*;
    use opencf_abi::OutBuf;
    let raw = opencf_abi::provider::Provider::load(&common::library()).unwrap();
    let pkcs1 = opencf_abi::Mechanism::new(CKM_RSA_PKCS);
    let (sh, kh) = (s.handle(), h.handle());
    raw.decrypt_init(sh, &pkcs1, kh).unwrap();
    let mut q = OutBuf::new(None);
    assert_eq!(
        raw.decrypt(sh, &vec![1u8; k - 1], &mut q),
        Err(CKR_ENCRYPTED_DATA_LEN_RANGE)
    );
    assert_eq!(
        raw.decrypt(sh, &vec![1u8; k], &mut q),
        Err(CKR_OPERATION_NOT_INITIALIZED),
        "the error ended the operation"
    );
    raw.decrypt_init(sh, &pkcs1, kh).unwrap();
    let mut q = OutBuf::new(None);
    raw.decrypt(sh, &vec![1u8; k], &mut q).unwrap();
    assert_eq!(q.len(), k, "a size query answers the modulus length");
    raw.session_cancel(sh, CKF_DECRYPT).unwrap();
}

/// `C_Sign` "cannot be used to terminate a multi-part operation": after `C_SignUpdate` it
/// answers `CKR_OPERATION_ACTIVE`, and the error ends the operation.
fn sign_after_update_is_refused(s: &Session, h: ObjectHandle, k: usize) {
    use opencf_abi::sys::*;
    use opencf_abi::OutBuf;
    let raw = opencf_abi::provider::Provider::load(&common::library()).unwrap();
    let m = opencf_abi::Mechanism::new(CKM_SHA256_RSA_PKCS);
    let (sh, kh) = (s.handle(), h.handle());
    raw.sign_init(sh, &m, kh).unwrap();
    raw.sign_update(sh, b"first part").unwrap();
    let mut sig = vec![0u8; k];
    assert_eq!(
        raw.sign(sh, b"second part", &mut OutBuf::new(Some(&mut sig))),
        Err(CKR_OPERATION_ACTIVE)
    );
    assert_eq!(
        raw.sign_final(sh, &mut OutBuf::new(Some(&mut sig))),
        Err(CKR_OPERATION_NOT_INITIALIZED),
        "the error ended the operation"
    );
}

/// PSS salt lengths at init: the largest that fits (`emLen - hLen - 2`) is accepted, one more
/// is `CKR_MECHANISM_PARAM_INVALID`, and so is every length near `CK_ULONG`'s maximum, where
/// `hLen + sLen + 2` would wrap (RFC 8017, 9.1.1). Checked at `C_SignInit`, before any data.
fn pss_salt_bounds(s: &Session, h: ObjectHandle, k: usize) {
    use opencf_abi::sys::*;
    let raw = opencf_abi::provider::Provider::load(&common::library()).unwrap();
    let sh = s.handle();
    let init = |salt: CK_ULONG| {
        let m = opencf_abi::Mechanism {
            mechanism: CKM_SHA256_RSA_PKCS_PSS,
            param: opencf_abi::MechParam::RsaPss {
                hash_alg: CKM_SHA256,
                mgf: CKG_MGF1_SHA256,
                salt_len: salt,
            },
        };
        let r = raw.sign_init(sh, &m, h.handle());
        if r.is_ok() {
            raw.session_cancel(sh, CKF_SIGN).unwrap();
        }
        r
    };
    let max = (k - 32 - 2) as CK_ULONG;
    assert_eq!(init(max), Ok(()), "the largest salt that fits");
    assert_eq!(init(max + 1), Err(CKR_MECHANISM_PARAM_INVALID));
    for salt in (0..40).map(|i| CK_ULONG::MAX - i).chain([1 << 31, 1 << 32]) {
        assert_eq!(
            init(salt),
            Err(CKR_MECHANISM_PARAM_INVALID),
            "salt length {salt:#x}"
        );
    }
}

/// `data` wrapped under `kek` by OpenSSL with `cipher` (AES key wrap, RFC 3394 or 5649).
fn aes_wrap(cipher: &openssl::cipher::CipherRef, kek: &[u8], data: &[u8]) -> Vec<u8> {
    let mut wrapped = vec![0u8; data.len() + 16];
    let mut c = openssl::cipher_ctx::CipherCtx::new().unwrap();
    c.set_flags(openssl::cipher_ctx::CipherCtxFlags::FLAG_WRAP_ALLOW);
    c.encrypt_init(Some(cipher), Some(kek), None).unwrap();
    let n = c.cipher_update(data, Some(&mut wrapped)).unwrap();
    wrapped.truncate(n);
    wrapped
}

fn rv(e: Error) -> RvError {
    match e {
        Error::Pkcs11(rv, _) => rv,
        other => panic!("not a PKCS#11 error: {other:?}"),
    }
}

#[test]
fn token_and_object_rules() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let p = module();
    let slot = p.get_slots_with_token().unwrap()[0];
    let info = p.get_token_info(slot).unwrap();
    assert_eq!(info.label(), "OpenCF Accelerator");
    assert!(!info.login_required());
    let s = session();
    // Random bytes from OpenSSL, whose generator takes no seed through PKCS#11.
    assert_eq!(s.generate_random_vec(24).unwrap().len(), 24);
    assert_eq!(
        rv(s.seed_random(b"ignored").unwrap_err()),
        RvError::RandomSeedNotSupported
    );
    let key = Rsa::generate(2048).unwrap();
    let mut t = private_template(&key);
    t[2] = Attribute::Token(true);
    assert_eq!(
        rv(s.create_object(&t).unwrap_err()),
        RvError::AttributeValueInvalid
    );
    t[2] = Attribute::Token(false);
    t.push(Attribute::Label(b"rsa-a".to_vec()));
    t.push(Attribute::Id(vec![7]));
    let h = s.create_object(&t).unwrap();
    // No secret value is ever returned.
    for a in [
        AttributeType::PrivateExponent,
        AttributeType::Prime1,
        AttributeType::Coefficient,
    ] {
        let info = s.get_attribute_info(h, &[a]).unwrap();
        assert!(
            matches!(info[..], [AttributeInfo::Sensitive]),
            "{a:?}: {info:?}"
        );
    }
    let got = s.get_attributes(h, &[AttributeType::Modulus]).unwrap();
    assert_eq!(got, vec![Attribute::Modulus(key.n().to_vec())]);
    // CKA_PUBLIC_KEY_INFO, derived when read: the SubjectPublicKeyInfo OpenSSL writes for
    // the key, for the private key and for a public key object alike.
    let spki = PKey::from_rsa(key.clone())
        .unwrap()
        .public_key_to_der()
        .unwrap();
    let public = s
        .create_object(&[
            Attribute::Class(ObjectClass::PUBLIC_KEY),
            Attribute::KeyType(KeyType::RSA),
            Attribute::Token(false),
            Attribute::Modulus(key.n().to_vec()),
            Attribute::PublicExponent(key.e().to_vec()),
        ])
        .unwrap();
    for o in [h, public] {
        assert_eq!(
            s.get_attributes(o, &[AttributeType::PublicKeyInfo])
                .unwrap(),
            vec![Attribute::PublicKeyInfo(spki.clone())]
        );
    }
    s.destroy_object(public).unwrap();
    let found = s
        .find_objects(&[Attribute::Label(b"rsa-a".to_vec())])
        .unwrap();
    assert_eq!(found, vec![h]);
    let found = s
        .find_objects(&[
            Attribute::Class(ObjectClass::PRIVATE_KEY),
            Attribute::Id(vec![8]),
        ])
        .unwrap();
    assert!(found.is_empty());
    s.destroy_object(h).unwrap();
    assert!(s
        .find_objects(&[Attribute::Label(b"rsa-a".to_vec())])
        .unwrap()
        .is_empty());
}

/// Private objects (`CKA_PRIVATE = TRUE`) as PKCS#11 asks of any token: made only after a user
/// login (`CKR_USER_NOT_LOGGED_IN` before it, by value and by unwrap alike), destroyed by
/// `C_Logout`, their handles invalid after a new login. Public objects stay.
#[test]
fn private_objects_need_a_login() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let s = session();
    let aes = |private: bool, value: Vec<u8>| {
        vec![
            Attribute::Class(ObjectClass::SECRET_KEY),
            Attribute::KeyType(KeyType::AES),
            Attribute::Token(false),
            Attribute::Private(private),
            Attribute::Unwrap(true),
            Attribute::Value(value),
        ]
    };
    let kek = vec![0x42u8; 32];
    let public = s.create_object(&aes(false, kek.clone())).unwrap();
    assert_eq!(
        rv(s.create_object(&aes(true, vec![1; 16])).unwrap_err()),
        RvError::UserNotLoggedIn
    );
    // The same refusal for a key that arrives wrapped.
    let wrapped = aes_wrap(openssl::cipher::Cipher::aes_256_wrap(), &kek, &[7u8; 16]);
    let unwrap_template = [
        Attribute::Class(ObjectClass::SECRET_KEY),
        Attribute::KeyType(KeyType::AES),
        Attribute::Token(false),
        Attribute::Private(true),
    ];
    assert_eq!(
        rv(
            s.unwrap_key(&Mechanism::AesKeyWrap, public, &wrapped, &unwrap_template)
                .unwrap_err()
        ),
        RvError::UserNotLoggedIn
    );
    // After a login (any PIN: the token has none), both are made and found.
    s.login(cryptoki::session::UserType::User, None).unwrap();
    let by_value = s.create_object(&aes(true, vec![1; 16])).unwrap();
    let unwrapped = s
        .unwrap_key(&Mechanism::AesKeyWrap, public, &wrapped, &unwrap_template)
        .unwrap();
    let private_ones = [Attribute::Private(true)];
    let mut found = s.find_objects(&private_ones).unwrap();
    found.sort_by_key(|h| h.handle());
    let mut made = vec![by_value, unwrapped];
    made.sort_by_key(|h| h.handle());
    assert_eq!(found, made);
    // C_Logout destroys them; the public key stays, and a new login does not bring them back.
    s.logout().unwrap();
    for h in [by_value, unwrapped] {
        assert_eq!(
            rv(s.get_attributes(h, &[AttributeType::Class]).unwrap_err()),
            RvError::ObjectHandleInvalid
        );
    }
    s.login(cryptoki::session::UserType::User, None).unwrap();
    assert!(s.find_objects(&private_ones).unwrap().is_empty());
    assert_eq!(
        rv(s.destroy_object(by_value).unwrap_err()),
        RvError::ObjectHandleInvalid
    );
    s.logout().unwrap();
    assert_eq!(
        s.get_attributes(public, &[AttributeType::Private]).unwrap(),
        vec![Attribute::Private(false)]
    );
    s.destroy_object(public).unwrap();
}

/// `CKA_ALWAYS_AUTHENTICATE = TRUE` is refused (the provider has no PIN to ask for each use),
/// and a context-specific login follows the software token's rules: a decryption or
/// signature under way (`CKR_OPERATION_NOT_INITIALIZED`), the user logged in
/// (`CKR_USER_NOT_LOGGED_IN`).
#[test]
fn context_specific_login() {
    use cryptoki::session::UserType;
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let s = session();
    let mut t = private_template(&Rsa::generate(2048).unwrap());
    t.push(Attribute::AlwaysAuthenticate(true));
    assert_eq!(
        rv(s.create_object(&t).unwrap_err()),
        RvError::AttributeValueInvalid
    );
    assert_eq!(
        rv(s.login(UserType::ContextSpecific, None).unwrap_err()),
        RvError::OperationNotInitialized
    );
    let slot = module().get_slots_with_token().unwrap()[0];
    if !module()
        .get_mechanism_list(slot)
        .unwrap()
        .contains(&MechanismType::AES_ECB)
    {
        eprintln!("SKIP: no AES engine here; the context-specific login with an operation");
        return;
    }
    let k = s
        .create_object(&[
            Attribute::Class(ObjectClass::SECRET_KEY),
            Attribute::KeyType(KeyType::AES),
            Attribute::Token(false),
            Attribute::Decrypt(true),
            Attribute::Value(vec![5; 16]),
        ])
        .unwrap();
    s.decrypt_init(&Mechanism::AesEcb, k).unwrap();
    assert_eq!(
        rv(s.login(UserType::ContextSpecific, None).unwrap_err()),
        RvError::UserNotLoggedIn
    );
    s.login(UserType::User, None).unwrap();
    s.login(UserType::ContextSpecific, None).unwrap();
    s.logout().unwrap();
    s.destroy_object(k).unwrap();
}

#[test]
fn by_value_and_by_unwrap() {
    let Some((_g, s)) = start(engine_here) else {
        return;
    };
    let msg: Vec<u8> = (0..100u8).collect();
    for bits in [2048, 3072, 4096] {
        let key = Rsa::generate(bits).unwrap();
        let h = s.create_object(&private_template(&key)).unwrap();
        both_paths(|| exercise(&s, &key, h, &msg));
        size_query_checks_the_length(&s, h, bits as usize / 8);
        sign_after_update_is_refused(&s, h, bits as usize / 8);
        pss_salt_bounds(&s, h, bits as usize / 8);
    }
    // As the framework moves a sensitive key in: a one-off AES-256 key by value, then KWP.
    let key = Rsa::generate(2048).unwrap();
    let kek: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(37)).collect();
    let der = PKey::from_rsa(key.clone())
        .unwrap()
        .private_key_to_pkcs8()
        .unwrap();
    let wrapped = aes_wrap(openssl::cipher::Cipher::aes_256_wrap_pad(), &kek, &der);
    let wk = s
        .create_object(&[
            Attribute::Class(ObjectClass::SECRET_KEY),
            Attribute::KeyType(KeyType::AES),
            Attribute::Token(false),
            Attribute::Private(false),
            Attribute::Wrap(true),
            Attribute::Unwrap(true),
            Attribute::Sensitive(false),
            Attribute::Extractable(true),
            Attribute::Value(kek.clone()),
        ])
        .unwrap();
    let h = s
        .unwrap_key(
            &Mechanism::AesKeyWrapPad,
            wk,
            &wrapped,
            &[
                Attribute::Class(ObjectClass::PRIVATE_KEY),
                Attribute::KeyType(KeyType::RSA),
                Attribute::Token(false),
                Attribute::Private(false),
                Attribute::Sign(true),
                Attribute::Decrypt(true),
                Attribute::Sensitive(true),
                Attribute::Extractable(false),
            ],
        )
        .unwrap();
    // A template that says something else of the unwrapped key is refused, not overruled.
    let rsa_t = |extra: Attribute| {
        vec![
            Attribute::Class(ObjectClass::PRIVATE_KEY),
            Attribute::KeyType(KeyType::RSA),
            Attribute::Token(false),
            Attribute::Sign(true),
            extra,
        ]
    };
    let unwrap_with = |m: &Mechanism, w: &[u8], t: &[Attribute]| s.unwrap_key(m, wk, w, t);
    let mut n = vec![0u8];
    n.extend(key.n().to_vec());
    unwrap_with(
        &Mechanism::AesKeyWrapPad,
        &wrapped,
        &rsa_t(Attribute::Modulus(n)),
    )
    .expect("the key's own modulus, with a leading zero");
    assert_eq!(
        rv(unwrap_with(
            &Mechanism::AesKeyWrapPad,
            &wrapped,
            &rsa_t(Attribute::PublicExponent(vec![3]))
        )
        .unwrap_err()),
        RvError::TemplateInconsistent
    );
    assert_eq!(
        rv(unwrap_with(
            &Mechanism::AesKeyWrapPad,
            &wrapped,
            &rsa_t(Attribute::Value(vec![1; 32]))
        )
        .unwrap_err()),
        RvError::TemplateInconsistent
    );
    // A P-384 key claimed to be P-256, which the engine would then serve.
    let p384 = openssl::ec::EcKey::generate(
        &openssl::ec::EcGroup::from_curve_name(openssl::nid::Nid::SECP384R1).unwrap(),
    )
    .unwrap();
    let der = PKey::from_ec_key(p384)
        .unwrap()
        .private_key_to_pkcs8()
        .unwrap();
    let wrapped384 = aes_wrap(openssl::cipher::Cipher::aes_256_wrap_pad(), &kek, &der);
    let p256_oid = vec![0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
    assert_eq!(
        rv(unwrap_with(
            &Mechanism::AesKeyWrapPad,
            &wrapped384,
            &[
                Attribute::Class(ObjectClass::PRIVATE_KEY),
                Attribute::KeyType(KeyType::EC),
                Attribute::Token(false),
                Attribute::Sign(true),
                Attribute::EcParams(p256_oid),
            ]
        )
        .unwrap_err()),
        RvError::TemplateInconsistent
    );
    s.destroy_object(wk).unwrap();
    exercise(&s, &key, h, &msg);
    // A key without CKA_SIGN may not sign.
    let mut t = private_template(&key);
    t[3] = Attribute::Sign(false);
    let h = s.create_object(&t).unwrap();
    assert_eq!(
        rv(s.sign(&Mechanism::Sha256RsaPkcs, h, &msg).unwrap_err()),
        RvError::KeyFunctionNotPermitted
    );
    // A size the engine does not serve: a recoverable error at init.
    let small = Rsa::generate(1024).unwrap();
    let h = s.create_object(&private_template(&small)).unwrap();
    assert_eq!(
        rv(s.sign(&Mechanism::Sha256RsaPkcs, h, &msg).unwrap_err()),
        RvError::KeySizeRange
    );
}

/// Runs `f` with the scheduler's default choice (OpenSSL for requests that would not fill a
/// pass), then with every request on the engine (`OPENCF_ACCEL_BATCH=1`).
fn both_paths(f: impl Fn()) {
    std::env::remove_var("OPENCF_ACCEL_BATCH");
    f();
    std::env::set_var("OPENCF_ACCEL_BATCH", "1");
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&f));
    std::env::remove_var("OPENCF_ACCEL_BATCH");
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
}

#[test]
fn eight_threads_form_batches() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !engine_here() {
        return;
    }
    both_paths(eight_threads);
}

fn eight_threads() {
    let keys: Vec<Rsa<Private>> = [2048, 2048, 3072]
        .iter()
        .map(|b| Rsa::generate(*b).unwrap())
        .collect();
    std::thread::scope(|sc| {
        for t in 0..8usize {
            let keys = &keys;
            sc.spawn(move || {
                let s = session();
                let hs: Vec<ObjectHandle> = keys
                    .iter()
                    .map(|k| s.create_object(&private_template(k)).unwrap())
                    .collect();
                for i in 0..12usize {
                    let k = (t + i) % keys.len();
                    let msg = format!("thread {t} message {i}");
                    let pss = i % 2 == 0;
                    let m = if pss {
                        pss256()
                    } else {
                        Mechanism::Sha256RsaPkcs
                    };
                    let sig = s.sign(&m, hs[k], msg.as_bytes()).unwrap();
                    assert!(
                        verify(&keys[k], pss, msg.as_bytes(), &sig),
                        "thread {t} op {i}"
                    );
                }
            });
        }
    });
}

#[test]
fn fault_switch() {
    let Some((_g, s)) = start(engine_here) else {
        return;
    };
    let key = Rsa::generate(2048).unwrap();
    let h = s.create_object(&private_template(&key)).unwrap();
    std::env::set_var("OPENCF_ACCEL_FAULT", "engine-error");
    let r = s.sign(&Mechanism::Sha256RsaPkcs, h, b"x");
    std::env::set_var("OPENCF_ACCEL_FAULT", "busy");
    let b = s.sign(&Mechanism::Sha256RsaPkcs, h, b"x");
    std::env::remove_var("OPENCF_ACCEL_FAULT");
    assert_eq!(
        rv(r.unwrap_err()),
        RvError::DeviceError,
        "a corrupted result is never released"
    );
    assert_eq!(rv(b.unwrap_err()), RvError::DeviceMemory);
    let sig = s.sign(&Mechanism::Sha256RsaPkcs, h, b"x").unwrap();
    assert!(verify(&key, false, b"x", &sig));
}
