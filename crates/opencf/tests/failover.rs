//! Failover through the metaslot: the test provider `libopencf_faulty.so` (the software token
//! behind a fault switch) sits first in the provider list, the software token second. With the
//! faulty provider failing on command, mixed operations from four threads through slot 0 must
//! all answer `CKR_OK` with correct results, served by the software token.
//!
//! Build first: `cargo build --release -p opencf-softtoken -p opencf-faulty -p opencf`.

mod common;
use common::{framework_lib, fresh_dir, hex, release, slot0};

use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::error::{Error, RvError};
use cryptoki::mechanism::aead::GcmParams;
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, AttributeType, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::{Session, UserType};
use cryptoki::slot::Slot;
use cryptoki::types::AuthPin;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

static LOCK: Mutex<()> = Mutex::new(());

/// DER OID of P-256.
const P256: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
/// SHA-256("abc").
const SHA256_ABC: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

const THREADS: usize = 4;
const ITERATIONS: usize = 200;

/// Loads libopencf.so over [faulty, softtoken] with the fault `mode` written to the switch file
/// (which the faulty provider reads at every call). Returns the module and the switch file.
fn load(tag: &str, mode: &str) -> (Pkcs11, PathBuf) {
    load_with(tag, mode, true)
}

/// [`load`] with `auto_key_migrate` set as given.
fn load_with(tag: &str, mode: &str, auto_key_migrate: bool) -> (Pkcs11, PathBuf) {
    load_conf(tag, mode, auto_key_migrate, "")
}

/// [`load_with`] with `faulty_extra` added to the faulty provider's section of the config.
fn load_conf(
    tag: &str,
    mode: &str,
    auto_key_migrate: bool,
    faulty_extra: &str,
) -> (Pkcs11, PathBuf) {
    let dir = fresh_dir(&format!("failover-{tag}"));
    let conf = format!(
        r#"
[metaslot]
enabled = true
keystore = "OpenCF Softtoken"
auto_key_migrate = {auto_key_migrate}

[[provider]]
name = "faulty"
module = "{}"
{faulty_extra}

[[provider]]
name = "softtoken"
module = "{}"
"#,
        release("libopencf_faulty.so").display(),
        release("libopencf_softtoken.so").display()
    );
    let path = dir.join("opencf.toml");
    std::fs::write(&path, conf).unwrap();
    let ks = dir.join("softtoken");
    std::fs::create_dir_all(&ks).unwrap();
    let switch = dir.join("fault");
    std::fs::write(&switch, mode).unwrap();
    // One statistics directory for the whole test binary (the counters are per process).
    std::env::set_var("OPENCF_STAT_DIR", stat_dir());
    std::env::set_var("OPENCF_CONF", &path);
    std::env::set_var("OPENCF_SOFTTOKEN_DIR", &ks);
    std::env::set_var("OPENCF_FAULTY_INNER", release("libopencf_softtoken.so"));
    std::env::set_var("OPENCF_FAULTY_SWITCH", &switch);
    std::env::remove_var("OPENCF_FAULTY_MODE");
    std::env::remove_var("OPENCF_METASLOT_ENABLED");
    std::env::remove_var("OPENCF_METASLOT_KEYSTORE");
    let p = Pkcs11::new(framework_lib()).expect("load libopencf.so");
    p.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
        .expect("C_Initialize");
    (p, switch)
}

fn stat_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("failover-stat-{}", std::process::id()))
}

/// (operations, errors, fallbacks, busy) of a provider, summed over mechanisms, as
/// `cryptoadm stat` would read them.
fn provider_stats(name: &str) -> [u64; 4] {
    let snap = opencf_stat::read(&stat_dir()).expect("read the statistics");
    let mut t = [0u64; 4];
    for (k, v) in &snap.mechanisms {
        if k.provider == name {
            t[0] += v.ops;
            t[1] += v.errors;
            t[2] += v.fallbacks;
            t[3] += v.busy;
        }
    }
    t
}

fn slot_labelled(p: &Pkcs11, label: &str) -> Slot {
    p.get_slots_with_token()
        .unwrap()
        .into_iter()
        .find(|s| p.get_token_info(*s).unwrap().label() == label)
        .unwrap_or_else(|| panic!("no slot with token {label:?}"))
}

/// The user PIN [`login`] sets.
const USER_PIN: &str = "failover-pin";

fn login(s: &Session) {
    match s.login(UserType::User, Some(&AuthPin::from("changeme".to_string()))) {
        Ok(()) | Err(Error::Pkcs11(RvError::PinExpired, _)) => {}
        Err(e) => panic!("C_Login through slot 0: {e:?}"),
    }
    s.set_pin(
        &AuthPin::from("changeme".to_string()),
        &AuthPin::from(USER_PIN.to_string()),
    )
    .expect("C_SetPIN");
    let _ = s.logout();
    s.login(UserType::User, Some(&AuthPin::from(USER_PIN.to_string())))
        .expect("C_Login");
}

struct Keys {
    aes: ObjectHandle,
    hmac: ObjectHandle,
    ec_pub: ObjectHandle,
    ec_priv: ObjectHandle,
}

/// Keys generated through slot 0 (so held by the keystore, the software token).
fn make_keys(s: &Session) -> Keys {
    let aes = s
        .generate_key(
            &Mechanism::AesKeyGen,
            &[
                Attribute::ValueLen(16.into()),
                Attribute::Token(false),
                Attribute::Encrypt(true),
                Attribute::Decrypt(true),
            ],
        )
        .expect("AES key through slot 0");
    let hmac = s
        .generate_key(
            &Mechanism::GenericSecretKeyGen,
            &[
                Attribute::Class(ObjectClass::SECRET_KEY),
                Attribute::KeyType(KeyType::GENERIC_SECRET),
                Attribute::ValueLen(32.into()),
                Attribute::Token(false),
                Attribute::Sign(true),
                Attribute::Verify(true),
            ],
        )
        .expect("HMAC key through slot 0");
    let (ec_pub, ec_priv) = s
        .generate_key_pair(
            &Mechanism::EccKeyPairGen,
            &[
                Attribute::Token(false),
                Attribute::EcParams(P256.to_vec()),
                Attribute::Verify(true),
            ],
            &[Attribute::Token(false), Attribute::Sign(true)],
        )
        .expect("EC key pair through slot 0");
    Keys {
        aes,
        hmac,
        ec_pub,
        ec_priv,
    }
}

/// One round of mixed operations; every call must succeed and give correct results.
fn round(s: &Session, k: &Keys, t: usize, i: usize) {
    let ctx = format!("thread {t} iteration {i}");
    let data = format!("failover data {t}/{i}").into_bytes();

    // AES-GCM encrypt and decrypt.
    let mut iv = [0u8; 12];
    iv[..8].copy_from_slice(&((t * 1_000_000 + i) as u64).to_be_bytes());
    let ct = s
        .encrypt(
            &Mechanism::AesGcm(GcmParams::new(&mut iv, b"aad", 128.into()).unwrap()),
            k.aes,
            &data,
        )
        .unwrap_or_else(|e| panic!("{ctx}: C_Encrypt AES-GCM: {e:?}"));
    assert_eq!(ct.len(), data.len() + 16, "{ctx}");
    let pt = s
        .decrypt(
            &Mechanism::AesGcm(GcmParams::new(&mut iv, b"aad", 128.into()).unwrap()),
            k.aes,
            &ct,
        )
        .unwrap_or_else(|e| panic!("{ctx}: C_Decrypt AES-GCM: {e:?}"));
    assert_eq!(pt, data, "{ctx}: decrypt gives the plaintext back");

    // SHA-256.
    let d = s
        .digest(&Mechanism::Sha256, b"abc")
        .unwrap_or_else(|e| panic!("{ctx}: C_Digest: {e:?}"));
    assert_eq!(hex(&d), SHA256_ABC, "{ctx}");

    // HMAC-SHA256.
    let mac = s
        .sign(&Mechanism::Sha256Hmac, k.hmac, &data)
        .unwrap_or_else(|e| panic!("{ctx}: C_Sign HMAC: {e:?}"));
    assert_eq!(mac.len(), 32, "{ctx}");
    s.verify(&Mechanism::Sha256Hmac, k.hmac, &data, &mac)
        .unwrap_or_else(|e| panic!("{ctx}: C_Verify HMAC: {e:?}"));

    // ECDSA P-256 with SHA-256.
    let sig = s
        .sign(&Mechanism::EcdsaSha256, k.ec_priv, &data)
        .unwrap_or_else(|e| panic!("{ctx}: C_Sign ECDSA: {e:?}"));
    s.verify(&Mechanism::EcdsaSha256, k.ec_pub, &data, &sig)
        .unwrap_or_else(|e| panic!("{ctx}: C_Verify ECDSA: {e:?}"));

    // Now and then a wrong signature: the answer is the real one, not the fault.
    if i.is_multiple_of(25) {
        let mut bad = sig.clone();
        let n = bad.len();
        bad[n / 2] ^= 1;
        assert!(
            matches!(
                s.verify(&Mechanism::EcdsaSha256, k.ec_pub, &data, &bad),
                Err(Error::Pkcs11(RvError::SignatureInvalid, _))
            ),
            "{ctx}: a bad ECDSA signature is refused"
        );
        let mut bad = mac.clone();
        bad[0] ^= 1;
        assert!(
            matches!(
                s.verify(&Mechanism::Sha256Hmac, k.hmac, &data, &bad),
                Err(Error::Pkcs11(RvError::SignatureInvalid, _))
            ),
            "{ctx}: a bad HMAC is refused"
        );
    }
}

/// Four threads, each with its own slot-0 session, `ITERATIONS` rounds each.
fn hammer(p: &Pkcs11, k: &Keys) {
    let meta = slot0(p);
    std::thread::scope(|sc| {
        for t in 0..THREADS {
            sc.spawn(move || {
                let s = p.open_rw_session(meta).expect("C_OpenSession on slot 0");
                for i in 0..ITERATIONS {
                    round(&s, k, t, i);
                }
            });
        }
    });
}

/// A session of the faulty module itself, behind the framework: the module the framework
/// loaded (the same file, so the same instance, already initialized), where the clones slot 0
/// made are visible as the session objects they are. The framework's own slot for the
/// provider does not show them.
fn faulty_module_session() -> Session {
    let m = Pkcs11::new(release("libopencf_faulty.so")).unwrap();
    let slot = *m.get_slots_with_token().unwrap().first().unwrap();
    m.open_rw_session(slot).unwrap()
}

/// Secret keys in the faulty provider: the clones the metaslot made there.
fn secret_keys_in_faulty(_p: &Pkcs11) -> usize {
    faulty_module_session()
        .find_objects(&[Attribute::Class(ObjectClass::SECRET_KEY)])
        .unwrap()
        .len()
}

fn failover_under(mode: &str) {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (p, _switch) = load(mode, mode);
    // The faulty provider is first and is not the keystore.
    let ids: Vec<u64> = p.get_all_slots().unwrap().iter().map(|s| s.id()).collect();
    let faulty = slot_labelled(&p, "OpenCF Faulty");
    let soft = slot_labelled(&p, "OpenCF Softtoken");
    assert!(
        faulty.id() < soft.id(),
        "faulty provider's slots come first: {ids:?}"
    );
    let s = p.open_rw_session(slot0(&p)).unwrap();
    login(&s);
    let k = make_keys(&s);
    let (f0, s0) = (provider_stats("faulty"), provider_stats("softtoken"));
    hammer(&p, &k);
    let (f1, s1) = (provider_stats("faulty"), provider_stats("softtoken"));
    // `cryptoadm stat` sees where the work went: every operation left the faulty provider.
    let n = (THREADS * ITERATIONS) as u64;
    assert!(
        s1[0] - s0[0] >= n,
        "softtoken ran the operations: {s0:?} -> {s1:?}"
    );
    assert_eq!(f1[0], f0[0], "the faulty provider completed nothing");
    assert!(
        f1[2] - f0[2] >= n,
        "fallbacks counted on the faulty provider: {f0:?} -> {f1:?}"
    );
    if mode == "busy" {
        assert!(f1[3] - f0[3] >= n, "busy answers counted: {f0:?} -> {f1:?}");
    } else {
        assert!(f1[1] - f0[1] >= n, "errors counted: {f0:?} -> {f1:?}");
    }
    drop(s);
    p.finalize().unwrap();
}

#[test]
fn failover_on_device_error() {
    failover_under("device-error");
}

#[test]
fn failover_on_busy() {
    failover_under("busy");
}

/// Inits succeed in the faulty provider, the single-part calls then fail: the framework must
/// re-run the whole operation in the next provider.
#[test]
fn failover_of_single_part_calls() {
    failover_under("op-error");
}

/// With no fault the faulty provider, first in the list, runs the operations: the keys it was
/// given (clones of the keystore's keys) are in it, and the results are correct.
#[test]
fn no_fault_runs_in_first_provider() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (p, switch) = load("nofault", "none");
    assert_eq!(secret_keys_in_faulty(&p), 0, "fresh faulty token");
    let s = p.open_rw_session(slot0(&p)).unwrap();
    login(&s);
    let k = make_keys(&s);
    assert_eq!(
        secret_keys_in_faulty(&p),
        0,
        "key generation runs in the keystore, not in the faulty provider"
    );
    round(&s, &k, 0, 0);
    // AES and HMAC keys were cloned into the faulty provider, which ran the operations.
    assert_eq!(
        secret_keys_in_faulty(&p),
        2,
        "clones of the AES and HMAC keys"
    );
    let fs = faulty_module_session();
    let clones = fs
        .find_objects(&[Attribute::Class(ObjectClass::SECRET_KEY)])
        .unwrap();
    let mut types: Vec<_> = clones
        .iter()
        .map(
            |h| match &fs.get_attributes(*h, &[AttributeType::KeyType]).unwrap()[0] {
                Attribute::KeyType(t) => *t,
                a => panic!("{a:?}"),
            },
        )
        .collect();
    types.sort_by_key(|t| u64::from(*t));
    assert_eq!(types, vec![KeyType::GENERIC_SECRET, KeyType::AES]);
    drop(fs);

    // The fault switch takes effect on the next call while the module stays loaded.
    std::fs::write(&switch, "device-error").unwrap();
    hammer(&p, &k);
    std::fs::write(&switch, "none").unwrap();
    round(&s, &k, 0, 1);
    drop(s);
    p.finalize().unwrap();
}

/// A sensitive, non-extractable RSA token key made through slot 0 (so held by the keystore),
/// signed with through slot 0 (the signature verified). Returns the public key's modulus and
/// the session, logged in (closing the last session logs the user out, which destroys the
/// clones of private keys).
fn sign_with_unextractable_rsa(p: &Pkcs11) -> (Vec<u8>, Session) {
    let s = p.open_rw_session(slot0(p)).unwrap();
    login(&s);
    let (public, private) = s
        .generate_key_pair(
            &Mechanism::RsaPkcsKeyPairGen,
            &[
                Attribute::ModulusBits(2048.into()),
                Attribute::Token(true),
                Attribute::Verify(true),
                Attribute::Label(b"unextractable".to_vec()),
            ],
            &[
                Attribute::Token(true),
                Attribute::Private(true),
                Attribute::Sensitive(true),
                Attribute::Extractable(false),
                Attribute::Sign(true),
                Attribute::Label(b"unextractable".to_vec()),
                Attribute::AllowedMechanisms(vec![
                    cryptoki::mechanism::MechanismType::SHA256_RSA_PKCS,
                ]),
            ],
        )
        .expect("RSA key pair through slot 0");
    // Applications cannot use the framework's migration mechanism.
    let wk = s
        .generate_key(
            &Mechanism::AesKeyGen,
            &[
                Attribute::ValueLen(32.into()),
                Attribute::Token(false),
                Attribute::Wrap(true),
            ],
        )
        .unwrap();
    let vendor = cryptoki::mechanism::MechanismType::new_vendor_defined(
        cryptoki::mechanism::vendor_defined::CKM_VENDOR_DEFINED | 0x4f43_0001,
    )
    .unwrap();
    let migrate = Mechanism::VendorDefined(
        cryptoki::mechanism::vendor_defined::VendorDefinedMechanism::new::<()>(vendor, None),
    );
    match s.wrap_key(&migrate, wk, private) {
        Err(Error::Pkcs11(RvError::MechanismInvalid, _)) => {}
        other => panic!("C_WrapKey with the migration mechanism on slot 0: {other:?}"),
    }
    match s.wrap_key(&Mechanism::AesKeyWrap, wk, private) {
        Err(Error::Pkcs11(RvError::KeyUnextractable, _)) => {}
        other => panic!("C_WrapKey of the non-extractable key: {other:?}"),
    }
    let data = b"a key that never leaves a token".to_vec();
    let sig = s
        .sign(&Mechanism::Sha256RsaPkcs, private, &data)
        .expect("C_Sign through slot 0");
    let modulus = match s
        .get_attributes(public, &[AttributeType::Modulus])
        .unwrap()
        .pop()
    {
        Some(Attribute::Modulus(m)) => m,
        other => panic!("modulus: {other:?}"),
    };
    // Verified in the software token's own slot (pass-through), which holds the public key.
    let soft = p
        .open_ro_session(slot_labelled(p, "OpenCF Softtoken"))
        .unwrap();
    let pubs = soft
        .find_objects(&[
            Attribute::Class(ObjectClass::PUBLIC_KEY),
            Attribute::Label(b"unextractable".to_vec()),
        ])
        .unwrap();
    assert_eq!(pubs.len(), 1, "the public key is in the keystore");
    soft.verify(&Mechanism::Sha256RsaPkcs, pubs[0], &data, &sig)
        .expect("the slot-0 signature verifies");
    (modulus, s)
}

/// The RSA private keys in the faulty provider, with their protection flags.
fn rsa_clones_in_faulty(_p: &Pkcs11, modulus: &[u8]) -> Vec<(bool, bool)> {
    let fs = faulty_module_session();
    let found = fs
        .find_objects(&[Attribute::Class(ObjectClass::PRIVATE_KEY)])
        .unwrap();
    found
        .into_iter()
        .map(|h| {
            let a = fs
                .get_attributes(
                    h,
                    &[
                        AttributeType::Modulus,
                        AttributeType::Sensitive,
                        AttributeType::Extractable,
                        AttributeType::AllowedMechanisms,
                    ],
                )
                .unwrap();
            let (mut m, mut sens, mut ext) = (Vec::new(), false, true);
            for x in a {
                match x {
                    Attribute::Modulus(v) => m = v,
                    Attribute::Sensitive(b) => sens = b,
                    Attribute::Extractable(b) => ext = b,
                    Attribute::AllowedMechanisms(v) => assert_eq!(
                        v,
                        vec![cryptoki::mechanism::MechanismType::SHA256_RSA_PKCS],
                        "the clone keeps CKA_ALLOWED_MECHANISMS"
                    ),
                    _ => {}
                }
            }
            assert_eq!(m, modulus, "the clone is the slot-0 key");
            (sens, ext)
        })
        .collect()
}

/// With `auto_key_migrate = true`, a sensitive, non-extractable key of the keystore is moved
/// into the first provider, which signs with it; the clone there stays sensitive and
/// non-extractable.
#[test]
fn unextractable_key_migrates_when_allowed() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (p, _switch) = load_with("migrate", "none", true);
    let (modulus, s) = sign_with_unextractable_rsa(&p);
    assert_eq!(
        rsa_clones_in_faulty(&p, &modulus),
        vec![(true, false)],
        "one sensitive, non-extractable clone in the provider that signed"
    );
    // Closing the last session logs the user out: the clone of the private key goes.
    drop(s);
    assert!(rsa_clones_in_faulty(&p, &modulus).is_empty());
    p.finalize().unwrap();
}

/// With `auto_key_migrate = false` the same key is refused to the first provider: the
/// signature is made in the keystore and no clone appears elsewhere.
#[test]
fn unextractable_key_stays_without_migration() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (p, _switch) = load_with("nomigrate", "none", false);
    let (modulus, s) = sign_with_unextractable_rsa(&p);
    assert!(
        rsa_clones_in_faulty(&p, &modulus).is_empty(),
        "no clone outside the keystore"
    );
    drop(s);
    p.finalize().unwrap();
}

/// Loads [faulty, softtoken] with a `min_bytes` threshold of 64 on the faulty provider for
/// AES-ECB (`tag` names the test); a logged-in slot-0 session and its keys.
fn ecb_threshold(tag: &str) -> (Pkcs11, Session, Keys) {
    let (p, _switch) = load_conf(
        tag,
        "none",
        true,
        "[provider.policy.CKM_AES_ECB]\nmin_bytes = 64",
    );
    let s = p.open_rw_session(slot0(&p)).unwrap();
    login(&s);
    let k = make_keys(&s);
    (p, s, k)
}

/// A `min_bytes` threshold on the faulty provider (first) for AES-ECB: the metaslot binds each
/// operation at init to the software token (the candidate for small inputs, which can cancel
/// an operation), runs small inputs there, and moves a single-part call whose input reaches
/// the threshold to the faulty provider. The counters show where each operation ran, and the
/// results are correct both ways.
#[test]
fn threshold_binds_at_init_and_moves_large_inputs() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (p, s, k) = ecb_threshold("eager");
    let ops = |name| provider_stats(name)[0];
    let (f0, s0) = (ops("faulty"), ops("softtoken"));
    let short = [7u8; 16];
    let c = s.encrypt(&Mechanism::AesEcb, k.aes, &short).unwrap();
    assert_eq!(s.decrypt(&Mechanism::AesEcb, k.aes, &c).unwrap(), short);
    assert_eq!(
        (ops("faulty") - f0, ops("softtoken") - s0),
        (0, 2),
        "16-byte operations ran in the software token"
    );
    let long = [9u8; 128];
    let c = s.encrypt(&Mechanism::AesEcb, k.aes, &long).unwrap();
    assert_eq!(s.decrypt(&Mechanism::AesEcb, k.aes, &c).unwrap(), long);
    assert_eq!(
        (ops("faulty") - f0, ops("softtoken") - s0),
        (2, 2),
        "128-byte operations moved to the faulty provider"
    );
    assert_eq!(secret_keys_in_faulty(&p), 1, "the AES key's clone");
    // A size query (NULL output) leaves the operation active where the input belongs; the
    // call with a buffer then completes it there.
    let c2 = s.encrypt(&Mechanism::AesEcb, k.aes, &long).unwrap();
    assert_eq!(c2, c, "AES-ECB is deterministic");
    assert_eq!(ops("faulty") - f0, 3);
    // Repeated inits of the mechanism take the session's remembered binding (the software
    // token, last candidate and the one for small inputs) and still keep the parameter, so
    // each input goes where it belongs, in any order.
    for round in 0..3 {
        let (f1, s1) = (ops("faulty"), ops("softtoken"));
        assert_eq!(s.encrypt(&Mechanism::AesEcb, k.aes, &long).unwrap(), c);
        assert_eq!(
            s.encrypt(&Mechanism::AesEcb, k.aes, &short).unwrap().len(),
            16
        );
        assert_eq!(s.encrypt(&Mechanism::AesEcb, k.aes, &long).unwrap(), c);
        assert_eq!(
            (ops("faulty") - f1, ops("softtoken") - s1),
            (2, 1),
            "round {round}: the long inputs moved, the short one stayed"
        );
    }
    // Binding at init: a key the operation may not use is refused by C_EncryptInit itself.
    let no_encrypt = s
        .generate_key(
            &Mechanism::AesKeyGen,
            &[
                Attribute::ValueLen(16.into()),
                Attribute::Token(false),
                Attribute::Encrypt(false),
            ],
        )
        .unwrap();
    match s.encrypt_init(&Mechanism::AesEcb, no_encrypt) {
        Err(Error::Pkcs11(RvError::KeyFunctionNotPermitted, _)) => {}
        r => panic!("C_EncryptInit with a key without CKA_ENCRYPT: {r:?}"),
    }
    // A multi-part operation whose first update reaches the threshold moves like a
    // single-part call (nothing has run yet); one whose first update is short stays where the
    // init bound it, whatever comes after.
    let (f1, s1) = (ops("faulty"), ops("softtoken"));
    s.encrypt_init(&Mechanism::AesEcb, k.aes).unwrap();
    let mut out = s.encrypt_update(&long).unwrap();
    out.extend(s.encrypt_update(&short).unwrap());
    out.extend(s.encrypt_final().unwrap());
    let mut both = long.to_vec();
    both.extend(short);
    let c_both = s.encrypt(&Mechanism::AesEcb, k.aes, &both).unwrap();
    assert_eq!(out, c_both, "multi-part equals single-part");
    assert_eq!(
        (ops("faulty") - f1, ops("softtoken") - s1),
        (2, 0),
        "a long first update moved the multi-part operation to the faulty provider"
    );
    let (f1, s1) = (ops("faulty"), ops("softtoken"));
    s.decrypt_init(&Mechanism::AesEcb, k.aes).unwrap();
    let mut back = s.decrypt_update(&out[..16]).unwrap();
    back.extend(s.decrypt_update(&out[16..]).unwrap());
    back.extend(s.decrypt_final().unwrap());
    assert_eq!(back, both, "decrypted in two steps");
    assert_eq!(
        (ops("faulty") - f1, ops("softtoken") - s1),
        (0, 1),
        "a short first update kept the multi-part operation in the software token"
    );
    // The key destroyed between the init and a long single-part call: the operation cannot
    // move (the faulty provider would need a clone of a key that is gone), so it runs where
    // the init bound it, with the key the init took, as in the software token alone. (It once
    // answered CKR_KEY_HANDLE_INVALID.)
    let aes_of = |value: &[u8]| {
        s.create_object(&[
            Attribute::Class(ObjectClass::SECRET_KEY),
            Attribute::KeyType(KeyType::AES),
            Attribute::Value(value.to_vec()),
            Attribute::Token(false),
            Attribute::Encrypt(true),
        ])
        .unwrap()
    };
    let want = s
        .encrypt(&Mechanism::AesEcb, aes_of(&[0x5a; 16]), &long)
        .unwrap();
    let gone = aes_of(&[0x5a; 16]);
    // cryptoki has no single-part call after an init: the module's own function list.
    let m = opencf_abi::provider::Provider::load(&framework_lib()).unwrap();
    let ecb = opencf_abi::Mechanism::new(opencf_abi::sys::CKM_AES_ECB);
    let (f1, s1) = (ops("faulty"), ops("softtoken"));
    m.encrypt_init(s.handle(), &ecb, gone.handle()).unwrap();
    s.destroy_object(gone).unwrap();
    let mut got = vec![0u8; long.len()];
    let mut o = opencf_abi::OutBuf::new(Some(&mut got));
    m.encrypt(s.handle(), &long, &mut o).unwrap();
    assert_eq!(o.len(), long.len());
    assert_eq!(got, want, "encrypted with the key of the init");
    assert_eq!(
        (ops("faulty") - f1, ops("softtoken") - s1),
        (0, 1),
        "it ran in the software token"
    );
    drop(s);
    p.finalize().unwrap();
}

/// A key's clone in another provider serves only while the key itself is within the session's
/// reach in the keystore. A session object destroyed with the session that made it, and a
/// private session object destroyed by `C_Logout`, are refused through slot 0 as by the
/// software token (`CKR_KEY_HANDLE_INVALID`), although their clones are still in the faulty
/// provider (first candidate here). (Before, the clone kept serving both.)
#[test]
fn a_clone_serves_only_while_its_key_is_reachable() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (p, _switch) = load_conf("reach", "none", true, "");
    let a = p.open_rw_session(slot0(&p)).unwrap();
    login(&a);
    let b = p.open_rw_session(slot0(&p)).unwrap();
    let aes_in = |s: &Session, private: bool| aes_128(s, false, private);
    let block = [3u8; 16];
    let refused = |s: &Session, k: ObjectHandle| match s.encrypt(&Mechanism::AesEcb, k, &block) {
        Err(Error::Pkcs11(rv, _)) => rv,
        Ok(_) => panic!("the key served"),
        Err(e) => panic!("{e:?}"),
    };
    let clones = secret_keys_in_faulty(&p);
    // A session object of session a, used from b (cloned into the faulty provider).
    let k = aes_in(&a, false);
    let first = b.encrypt(&Mechanism::AesEcb, k, &block).unwrap();
    assert_eq!(secret_keys_in_faulty(&p), clones + 1, "the clone");
    assert_eq!(b.encrypt(&Mechanism::AesEcb, k, &block).unwrap(), first);
    drop(a);
    assert_eq!(
        secret_keys_in_faulty(&p),
        clones,
        "the clone is destroyed with the session that owned the key"
    );
    assert_eq!(
        refused(&b, k),
        RvError::KeyHandleInvalid,
        "its session closed"
    );
    // A private session key: destroyed by C_Logout, and still refused after a new login.
    let k = aes_in(&b, true);
    let first = b.encrypt(&Mechanism::AesEcb, k, &block).unwrap();
    assert_eq!(secret_keys_in_faulty(&p), clones + 1, "the clone");
    b.logout().unwrap();
    assert_eq!(
        secret_keys_in_faulty(&p),
        clones,
        "the clone is destroyed at C_Logout"
    );
    assert_eq!(refused(&b, k), RvError::KeyHandleInvalid, "logged out");
    b.login(UserType::User, Some(&AuthPin::from(USER_PIN.to_string())))
        .unwrap();
    assert_eq!(
        refused(&b, k),
        RvError::KeyHandleInvalid,
        "a private session object is destroyed by C_Logout (PKCS#11 3.2, C_Logout)"
    );
    let k = aes_in(&b, true);
    assert_ne!(b.encrypt(&Mechanism::AesEcb, k, &block).unwrap(), first);
    drop(b);
    p.finalize().unwrap();
}

/// The clones slot 0 keeps in a provider are not the application's objects in that
/// provider's own slot: its searches do not return them, and reading, changing, copying or
/// destroying one by its handle there is `CKR_OBJECT_HANDLE_INVALID`. A clone lost all the
/// same (destroyed in the module behind the framework) is made again at the key's next use.
#[test]
fn clones_are_slot_0s_own() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (p, _switch) = load_conf("own", "none", true, "");
    let s = p.open_rw_session(slot0(&p)).unwrap();
    login(&s);
    let k = aes_128(&s, true, true);
    let block = [5u8; 16];
    let first = s.encrypt(&Mechanism::AesEcb, k, &block).unwrap();
    let module = faulty_module_session();
    let clones = module
        .find_objects(&[Attribute::Class(ObjectClass::SECRET_KEY)])
        .unwrap();
    assert_eq!(
        clones.len(),
        1,
        "the key was cloned into the faulty provider"
    );
    let clone = clones[0];

    let own = p
        .open_rw_session(slot_labelled(&p, "OpenCF Faulty"))
        .unwrap();
    assert_eq!(
        own.find_objects(&[]).unwrap(),
        vec![],
        "the provider's own slot lists no clone"
    );
    // With no search begun, C_FindObjects there answers as the provider does, whatever the
    // maximum asked for (through the framework's C ABI, which cryptoki does not reach).
    let raw = opencf_abi::provider::Provider::load(&framework_lib()).unwrap();
    for max in [0, 4] {
        assert_eq!(
            raw.find_objects(own.handle(), max),
            Err(opencf_abi::sys::CKR_OPERATION_NOT_INITIALIZED),
            "C_FindObjects({max}) without C_FindObjectsInit"
        );
    }
    let invalid = |r: Result<(), Error>, what: &str| match r {
        Err(Error::Pkcs11(RvError::ObjectHandleInvalid, _)) => {}
        other => panic!("{what} of a clone in the provider's own slot: {other:?}"),
    };
    invalid(
        own.get_attributes(clone, &[AttributeType::Class])
            .map(|_| ()),
        "C_GetAttributeValue",
    );
    invalid(
        own.update_attributes(clone, &[Attribute::Encrypt(false)]),
        "C_SetAttributeValue",
    );
    invalid(own.copy_object(clone, &[]).map(|_| ()), "C_CopyObject");
    invalid(own.destroy_object(clone), "C_DestroyObject");
    // Nor does an operation there take a clone's handle for its key.
    let refused = |r: Result<(), Error>, rv: RvError, what: &str| match r {
        Err(Error::Pkcs11(got, _)) if got == rv => {}
        other => panic!("{what} with a clone in the provider's own slot: {other:?}"),
    };
    let key_invalid = RvError::KeyHandleInvalid;
    refused(
        own.encrypt(&Mechanism::AesEcb, clone, &block).map(|_| ()),
        key_invalid,
        "C_EncryptInit",
    );
    refused(
        own.decrypt(&Mechanism::AesEcb, clone, &block).map(|_| ()),
        key_invalid,
        "C_DecryptInit",
    );
    refused(
        own.sign(&Mechanism::AesCMac, clone, &block).map(|_| ()),
        key_invalid,
        "C_SignInit",
    );
    let own_key = aes_128(&own, false, false);
    refused(
        own.wrap_key(&Mechanism::AesKeyWrap, clone, own_key)
            .map(|_| ()),
        RvError::WrappingKeyHandleInvalid,
        "C_WrapKey's wrapping key",
    );
    refused(
        own.wrap_key(&Mechanism::AesKeyWrap, own_key, clone)
            .map(|_| ()),
        key_invalid,
        "C_WrapKey's key",
    );
    refused(
        own.unwrap_key(&Mechanism::AesKeyWrap, clone, &[0; 24], &[])
            .map(|_| ()),
        RvError::UnwrappingKeyHandleInvalid,
        "C_UnwrapKey",
    );
    own.destroy_object(own_key).unwrap();
    assert_eq!(
        s.encrypt(&Mechanism::AesEcb, k, &block).unwrap(),
        first,
        "the clone still serves slot 0"
    );

    module.destroy_object(clone).unwrap();
    assert_eq!(
        s.encrypt(&Mechanism::AesEcb, k, &block).unwrap(),
        first,
        "a lost clone is made again"
    );
    assert_eq!(
        secret_keys_in_faulty(&p),
        1,
        "one clone again, in the faulty provider"
    );
    drop((own, module, s));
    p.finalize().unwrap();
}

/// A fallback is counted (`cryptoadm stat`) when another provider takes the operation over,
/// not when the caller gets an error all the same: with the faulty provider failing, a
/// signature refused by the keystore for its key's usage counts the faulty provider's error
/// and no fallback; one the keystore makes counts a fallback.
#[test]
fn a_fallback_is_counted_when_another_provider_takes_over() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (p, _switch) = load_conf("takeover", "device-error", true, "");
    let s = p.open_rw_session(slot0(&p)).unwrap();
    login(&s);
    let hmac_key = |sign: bool| {
        s.create_object(&[
            Attribute::Class(ObjectClass::SECRET_KEY),
            Attribute::KeyType(KeyType::GENERIC_SECRET),
            Attribute::Value(vec![7; 32]),
            Attribute::Token(false),
            Attribute::Sign(sign),
        ])
        .unwrap()
    };
    let f0 = provider_stats("faulty");
    match s.sign(&Mechanism::Sha256Hmac, hmac_key(false), b"data") {
        Err(Error::Pkcs11(RvError::KeyFunctionNotPermitted, _)) => {}
        other => panic!("a key that may not sign: {other:?}"),
    }
    let f1 = provider_stats("faulty");
    assert!(
        f1[1] > f0[1],
        "the faulty provider's error is counted: {f0:?} -> {f1:?}"
    );
    assert_eq!(
        f1[2], f0[2],
        "no fallback: no provider took the operation over"
    );
    s.sign(&Mechanism::Sha256Hmac, hmac_key(true), b"data")
        .unwrap();
    let f2 = provider_stats("faulty");
    assert_eq!(
        f2[2],
        f1[2] + 1,
        "one fallback: the keystore signed: {f1:?} -> {f2:?}"
    );
    drop(s);
    p.finalize().unwrap();
}

/// The same with the faulty provider failing the single-part call itself, after the init
/// bound the operation there, and the caller asking for the length first (as most callers
/// do): the keystore takes the operation over at the size query, and the fallback counts
/// then, once.
#[test]
fn a_fallback_on_a_size_query_is_counted() {
    use opencf_abi::sys::*;
    use opencf_abi::OutBuf;
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (p, _switch) = load_conf("takeover-query", "op-error", true, "");
    let s = p.open_rw_session(slot0(&p)).unwrap();
    let m = opencf_abi::provider::Provider::load(&framework_lib()).unwrap();
    let h = s.handle();
    let sha = opencf_abi::Mechanism::new(CKM_SHA512);
    let f0 = provider_stats("faulty");
    m.digest_init(h, &sha).unwrap();
    let mut q = OutBuf::new(None);
    m.digest(h, b"abc", &mut q).unwrap();
    assert_eq!(q.len(), 64, "the size query's answer");
    let f1 = provider_stats("faulty");
    assert_eq!(
        (f1[1] - f0[1], f1[2] - f0[2]),
        (1, 1),
        "after the size query: the faulty provider's error, and its fallback: {f0:?} -> {f1:?}"
    );
    let mut d = [0u8; 64];
    m.digest(h, b"abc", &mut OutBuf::new(Some(&mut d))).unwrap();
    assert_eq!(&hex(&d)[..16], "ddaf35a193617aba", "SHA-512(\"abc\")");
    let f2 = provider_stats("faulty");
    assert_eq!(
        f2, f1,
        "the call itself went straight to the keystore: {f1:?} -> {f2:?}"
    );
    drop((m, s));
    p.finalize().unwrap();
}

/// A `CK_BBOOL` given as another byte than 0 or 1 (here 2) is true to slot 0 as it is to the
/// software token: a private key whose `CKA_ALWAYS_AUTHENTICATE` is 2 asks for the PIN before
/// each signature (read as false, the key was cloned into the faulty provider, first for
/// ECDSA, which signed without the PIN), and one whose `CKA_SIGN` is 2 signs (read as false,
/// its clone was refused the signature).
#[test]
fn a_flag_byte_of_two_is_true_on_slot_0() {
    use opencf_abi::sys::*;
    use opencf_abi::{Attribute as A, MechParam, OutBuf};
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (p, _switch) = load("flag-byte", "none");
    let s = p.open_rw_session(slot0(&p)).unwrap();
    login(&s);
    let m = opencf_abi::provider::Provider::load(&framework_lib()).unwrap();
    let h = s.handle();
    let gen = opencf_abi::Mechanism {
        mechanism: CKM_EC_KEY_PAIR_GEN,
        param: MechParam::None,
    };
    // A P-256 session key pair with `private` in the private key's template.
    let pair = |private: &[A]| {
        let public = [
            A::new(CKA_EC_PARAMS, P256.to_vec()),
            A::bool(CKA_VERIFY, true),
            A::bool(CKA_TOKEN, false),
        ];
        let private = [private, &[A::bool(CKA_TOKEN, false)]].concat();
        m.generate_key_pair(h, &gen, &public, &private).unwrap()
    };
    let ecdsa = opencf_abi::Mechanism::new(CKM_ECDSA_SHA256);
    let mut sig = [0u8; 64];
    // Signs (after `C_SignInit` and whatever `login` does) and verifies the signature.
    let mut signs = |(public, private), login: &dyn Fn()| {
        m.sign_init(h, &ecdsa, private).unwrap();
        login();
        let mut o = OutBuf::new(Some(&mut sig));
        m.sign(h, b"data", &mut o).expect("C_Sign");
        let n = o.len();
        m.verify_init(h, &ecdsa, public).unwrap();
        m.verify(h, b"data", &sig[..n]).unwrap();
    };

    let asks = pair(&[
        A::bool(CKA_SIGN, true),
        A::new(CKA_ALWAYS_AUTHENTICATE, vec![2]),
    ]);
    m.sign_init(h, &ecdsa, asks.1).unwrap();
    assert_eq!(
        m.sign(h, b"data", &mut OutBuf::new(Some(&mut [0u8; 64]))),
        Err(CKR_USER_NOT_LOGGED_IN),
        "C_Sign without C_Login(CKU_CONTEXT_SPECIFIC)"
    );
    signs(asks, &|| {
        m.login(h, CKU_CONTEXT_SPECIFIC, USER_PIN.as_bytes())
            .unwrap()
    });
    signs(pair(&[A::new(CKA_SIGN, vec![2])]), &|| {});
    drop((m, s));
    p.finalize().unwrap();
}

/// A new AES-128 encryption key through `s`.
fn aes_128(s: &Session, token: bool, private: bool) -> ObjectHandle {
    s.generate_key(
        &Mechanism::AesKeyGen,
        &[
            Attribute::ValueLen(16.into()),
            Attribute::Token(token),
            Attribute::Private(private),
            Attribute::Encrypt(true),
        ],
    )
    .unwrap()
}

/// A clone of a private token key is destroyed at `C_Logout` (no copy of the key's material
/// stays in another provider while the user is logged out) and made again when the key is
/// used after the next login; a clone of a public token key stays.
#[test]
fn logout_destroys_the_clones_of_private_keys() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (p, _switch) = load_conf("logout", "none", true, "");
    let s = p.open_rw_session(slot0(&p)).unwrap();
    login(&s);
    let (private, public) = (aes_128(&s, true, true), aes_128(&s, true, false));
    let block = [5u8; 16];
    let clones = secret_keys_in_faulty(&p);
    let c1 = s.encrypt(&Mechanism::AesEcb, private, &block).unwrap();
    let c2 = s.encrypt(&Mechanism::AesEcb, public, &block).unwrap();
    assert_eq!(secret_keys_in_faulty(&p), clones + 2, "two clones");
    let unique_id = match s
        .get_attributes(private, &[AttributeType::UniqueId])
        .unwrap()[..]
    {
        [Attribute::UniqueId(ref id)] => id.clone(),
        ref other => panic!("CKA_UNIQUE_ID: {other:?}"),
    };
    s.logout().unwrap();
    assert_eq!(
        secret_keys_in_faulty(&p),
        clones + 1,
        "the private key's clone is gone"
    );
    assert_eq!(s.encrypt(&Mechanism::AesEcb, public, &block).unwrap(), c2);
    s.login(UserType::User, Some(&AuthPin::from(USER_PIN.to_string())))
        .unwrap();
    // The private key's old handle stays invalid after the new login (PKCS#11, `C_Logout`);
    // the key is found again under a new one.
    assert!(s.encrypt(&Mechanism::AesEcb, private, &block).is_err());
    let found = s.find_objects(&[Attribute::UniqueId(unique_id)]).unwrap();
    assert_eq!(found.len(), 1, "the private key found again");
    assert_ne!(found[0], private, "under a new handle");
    assert_eq!(s.encrypt(&Mechanism::AesEcb, found[0], &block).unwrap(), c1);
    assert_eq!(secret_keys_in_faulty(&p), clones + 2, "cloned again");
    // The sweeps leave no keystore session open: closing the application's last session
    // still logs it out.
    drop(s);
    let s = p.open_rw_session(slot0(&p)).unwrap();
    assert_eq!(
        s.get_session_info().unwrap().session_state(),
        cryptoki::session::SessionState::RwPublic,
        "logged out with the last session"
    );
    drop(s);
    p.finalize().unwrap();
}

/// A digest's saved state names the provider that ran it: restored in a session whose digest
/// runs in another provider (the faulty one failing inits, so the software token took it), the
/// state goes back to the faulty provider, the digest goes on there, and the one it replaced
/// ends in the software token (a new digest can start there).
#[test]
fn a_saved_digest_goes_back_to_the_provider_that_saved_it() {
    use opencf_abi::sys::*;
    use opencf_abi::OutBuf;
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (p, switch) = load("state", "none");
    let (a, b) = (
        p.open_rw_session(slot0(&p)).unwrap(),
        p.open_rw_session(slot0(&p)).unwrap(),
    );
    let m = opencf_abi::provider::Provider::load(&framework_lib()).unwrap();
    let (ha, hb) = (a.handle(), b.handle());
    let sha = opencf_abi::Mechanism::new(CKM_SHA256);
    let final_of = |h| {
        let mut d = [0u8; 32];
        m.digest_final(h, &mut OutBuf::new(Some(&mut d)))
            .map(|()| hex(&d))
    };
    let ops = |name| provider_stats(name)[0];

    // Saved in the faulty provider, the first candidate.
    m.digest_init(ha, &sha).unwrap();
    m.digest_update(ha, b"a").unwrap();
    let mut state = vec![0u8; 512];
    let mut o = OutBuf::new(Some(&mut state));
    m.get_operation_state(ha, &mut o).unwrap();
    let n = o.len();
    state.truncate(n);
    assert_eq!(&state[6..6 + state[5] as usize], b"faulty");
    // A message-based encryption runs in the keystore session, beside the digest in the
    // faulty provider: the session's state cannot be saved while it is active.
    let key = aes_128(&a, false, false);
    m.message_encrypt_init(ha, &opencf_abi::Mechanism::new(CKM_AES_GCM), key.handle())
        .unwrap();
    let mut q = OutBuf::new(None);
    assert_eq!(m.get_operation_state(ha, &mut q), Err(CKR_STATE_UNSAVEABLE));
    m.message_encrypt_final(ha).unwrap();
    m.get_operation_state(ha, &mut q).unwrap();

    // Session b digests in the software token while the faulty provider fails its inits.
    std::fs::write(&switch, "device-error").unwrap();
    m.digest_init(hb, &sha).unwrap();
    m.digest_update(hb, b"something else").unwrap();
    m.set_operation_state(hb, &state, 0, 0).unwrap();
    std::fs::write(&switch, "none").unwrap();
    let (f0, s0) = (ops("faulty"), ops("softtoken"));
    m.digest_update(hb, b"bc").unwrap();
    assert_eq!(final_of(hb).unwrap(), SHA256_ABC);
    assert_eq!(
        (ops("faulty") - f0, ops("softtoken") - s0),
        (1, 0),
        "the restored digest ran in the faulty provider"
    );
    // The replaced digest is over in the software token: a new one starts there.
    std::fs::write(&switch, "device-error").unwrap();
    m.digest_init(hb, &sha).unwrap();
    m.digest_update(hb, b"abc").unwrap();
    assert_eq!(final_of(hb).unwrap(), SHA256_ABC);
    std::fs::write(&switch, "none").unwrap();
    // Session a goes on as it was.
    m.digest_update(ha, b"bc").unwrap();
    assert_eq!(final_of(ha).unwrap(), SHA256_ABC);
    drop((m, a, b));
    p.finalize().unwrap();
}

/// An operation bound at init for small inputs stays where it is once a multi-part step has
/// run there: a large single-part call then gets that provider's answer (the software token
/// refuses `C_Encrypt` after `C_EncryptUpdate`), not a fresh operation in the candidate whose
/// threshold the input reaches.
#[test]
fn a_multi_part_step_keeps_the_operation_where_it_runs() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (p, s, k) = ecb_threshold("multipart");
    let ops = |name| provider_stats(name)[0];
    let f0 = ops("faulty");
    s.encrypt_init(&Mechanism::AesEcb, k.aes).unwrap();
    assert_eq!(s.encrypt_update(&[1u8; 16]).unwrap().len(), 16);
    // cryptoki's `encrypt` would init again: the single-part call through the raw table.
    let m = opencf_abi::provider::Provider::load(&framework_lib()).unwrap();
    let mut out = [0u8; 256];
    let r = m.encrypt(
        s.handle(),
        &[2u8; 128],
        &mut opencf_abi::OutBuf::new(Some(&mut out)),
    );
    assert_eq!(r, Err(opencf_abi::sys::CKR_OPERATION_ACTIVE));
    assert_eq!(ops("faulty"), f0, "nothing ran in the faulty provider");
    // The refusal ended the operation, as in the token.
    assert!(s.encrypt_final().is_err());
    // A new operation still moves for a large input.
    let c = s.encrypt(&Mechanism::AesEcb, k.aes, &[2u8; 128]).unwrap();
    assert_eq!(c.len(), 128);
    assert_eq!(
        ops("faulty"),
        f0 + 1,
        "the large input ran in the faulty provider"
    );
    drop((m, s));
    p.finalize().unwrap();
}

/// A clone serves only as the key is now: a usage flag turned off through the keystore's own
/// slot (not through slot 0, which drops clones itself) reaches slot 0 at its next init, which
/// answers as the keystore does; a logout through the keystore's own slot destroys the clones
/// of private keys as a logout through slot 0 does.
#[test]
fn a_clone_follows_its_key_changed_elsewhere() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (p, _switch) = load_conf("guards", "none", true, "");
    let s = p.open_rw_session(slot0(&p)).unwrap();
    login(&s);
    let ks = p
        .open_rw_session(slot_labelled(&p, "OpenCF Softtoken"))
        .unwrap();
    let block = [9u8; 16];
    let clones = secret_keys_in_faulty(&p);
    let k = aes_128(&s, false, false);
    s.encrypt(&Mechanism::AesEcb, k, &block).unwrap();
    assert_eq!(secret_keys_in_faulty(&p), clones + 1, "cloned");
    // Session objects are shared by an application's sessions: the keystore's own slot
    // turns CKA_ENCRYPT off.
    ks.update_attributes(k, &[Attribute::Encrypt(false)])
        .unwrap();
    match s.encrypt(&Mechanism::AesEcb, k, &block) {
        Err(Error::Pkcs11(RvError::KeyFunctionNotPermitted, _)) => {}
        other => panic!("slot 0 after CKA_ENCRYPT=FALSE elsewhere: {other:?}"),
    }
    assert_eq!(
        ks.encrypt(&Mechanism::AesEcb, k, &block)
            .err()
            .map(|e| match e {
                Error::Pkcs11(rv, _) => rv,
                e => panic!("{e:?}"),
            }),
        Some(RvError::KeyFunctionNotPermitted),
        "the keystore's own answer"
    );
    // Back on: slot 0 serves again.
    ks.update_attributes(k, &[Attribute::Encrypt(true)])
        .unwrap();
    s.encrypt(&Mechanism::AesEcb, k, &block).unwrap();
    // A private token key's clone, then C_Logout through the keystore's own slot.
    let private = aes_128(&s, true, true);
    s.encrypt(&Mechanism::AesEcb, private, &block).unwrap();
    let before = secret_keys_in_faulty(&p);
    ks.logout().unwrap();
    assert_eq!(
        secret_keys_in_faulty(&p),
        before - 1,
        "the private key's clone is destroyed at a logout through the keystore's slot"
    );
    drop((s, ks));
    p.finalize().unwrap();
}

/// Not a test on its own: in a child process (`OPENCF_CHANGE_CHILD` set to a label) it opens
/// the software token alone on the same keystore, as another application would, and sets
/// `CKA_ENCRYPT` of the token key with that label to `OPENCF_CHANGE_VALUE`.
#[test]
fn change_child() {
    let Ok(label) = std::env::var("OPENCF_CHANGE_CHILD") else {
        return;
    };
    let value = std::env::var("OPENCF_CHANGE_VALUE").as_deref() == Ok("true");
    let p = Pkcs11::new(release("libopencf_softtoken.so")).expect("load the software token");
    p.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
        .unwrap();
    let slot = slot_labelled(&p, "OpenCF Softtoken");
    let s = p.open_rw_session(slot).unwrap();
    s.login(UserType::User, Some(&AuthPin::from(USER_PIN.to_string())))
        .expect("C_Login in the other process");
    let found = s
        .find_objects(&[Attribute::Token(true), Attribute::Label(label.into_bytes())])
        .unwrap();
    assert_eq!(found.len(), 1, "the key, found by its label");
    s.update_attributes(found[0], &[Attribute::Encrypt(value)])
        .expect("C_SetAttributeValue in the other process");
    // A line of its own: libtest has already printed "test change_child ... ".
    println!("\nCHANGED");
}

/// Runs [`change_child`] in a new process and waits for it.
fn change_in_another_process(label: &str, value: bool) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "change_child", "--nocapture", "--test-threads=1"])
        .env("OPENCF_CHANGE_CHILD", label)
        .env("OPENCF_CHANGE_VALUE", value.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("CHANGED"),
        "the other process failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A key's usage changed by another process reaches slot 0 at the key's next use, in a
/// session that has already used it and whose clone serves it in another provider: slot 0
/// answers as the keystore does, then serves again when the usage is back.
#[test]
fn a_clone_follows_its_key_changed_by_another_process() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (p, _switch) = load_conf("xproc", "none", true, "");
    let s = p.open_rw_session(slot0(&p)).unwrap();
    login(&s);
    let label = "changed-by-another-process";
    let k = s
        .generate_key(
            &Mechanism::AesKeyGen,
            &[
                Attribute::ValueLen(16.into()),
                Attribute::Token(true),
                Attribute::Private(true),
                Attribute::Encrypt(true),
                Attribute::Label(label.as_bytes().to_vec()),
            ],
        )
        .unwrap();
    let block = [3u8; 16];
    let clones = secret_keys_in_faulty(&p);
    let first = s.encrypt(&Mechanism::AesEcb, k, &block).unwrap();
    assert_eq!(secret_keys_in_faulty(&p), clones + 1, "cloned");
    change_in_another_process(label, false);
    match s.encrypt(&Mechanism::AesEcb, k, &block) {
        Err(Error::Pkcs11(RvError::KeyFunctionNotPermitted, _)) => {}
        other => panic!("slot 0 after CKA_ENCRYPT=FALSE in another process: {other:?}"),
    }
    change_in_another_process(label, true);
    assert_eq!(s.encrypt(&Mechanism::AesEcb, k, &block).unwrap(), first);
    drop(s);
    p.finalize().unwrap();
}

/// The keystore's policy holds for what slot 0 runs in the keystore: a mechanism the keystore
/// may not use is refused for key generation and message-based encryption on slot 0, as on
/// the keystore's own slot, even where another provider offers it.
#[test]
fn the_keystore_policy_holds_on_slot_0() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // The faulty provider (over another software token) offers both mechanisms; the
    // keystore may not use them.
    let (p, _switch) = load_conf("kspolicy", "none", true, "");
    p.finalize().unwrap();
    let conf = std::env::var("OPENCF_CONF").unwrap();
    let text = std::fs::read_to_string(&conf).unwrap();
    std::fs::write(
        &conf,
        text.replace(
            "name = \"softtoken\"",
            "name = \"softtoken\"\ndisabled = [\"CKM_AES_KEY_GEN\", \"CKM_AES_GCM\"]",
        ),
    )
    .unwrap();
    let p = Pkcs11::new(framework_lib()).unwrap();
    p.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
        .unwrap();
    let s = p.open_rw_session(slot0(&p)).unwrap();
    login(&s);
    let gen = s.generate_key(
        &Mechanism::AesKeyGen,
        &[Attribute::ValueLen(16.into()), Attribute::Token(false)],
    );
    assert!(
        matches!(gen, Err(Error::Pkcs11(RvError::MechanismInvalid, _))),
        "C_GenerateKey: {gen:?}"
    );
    let key = s
        .create_object(&[
            Attribute::Class(ObjectClass::SECRET_KEY),
            Attribute::KeyType(KeyType::AES),
            Attribute::Value(vec![3; 16]),
            Attribute::Token(false),
            Attribute::Encrypt(true),
        ])
        .unwrap();
    let mut iv = [0u8; 12];
    let gcm = GcmParams::new(&mut iv, &[], 128.into()).unwrap();
    let msg = s.message_encrypt_init(&Mechanism::AesGcm(gcm), key);
    assert!(
        matches!(msg, Err(Error::Pkcs11(RvError::MechanismInvalid, _))),
        "C_MessageEncryptInit: {msg:?}"
    );
    drop(s);
    p.finalize().unwrap();
}
