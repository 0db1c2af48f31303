//! The framework through its C ABI: `target/release/libopencf.so` loaded with the `cryptoki`
//! crate, configured by a temporary `OPENCF_CONF` that lists the release softtoken (and, when
//! installed, SoftHSMv2 as a second provider).
//!
//! Build first: `cargo build --release -p opencf-softtoken -p opencf`.
//!
//! The module, its configuration and the environment are process-wide, so the tests take one
//! lock and each loads and finalizes the module itself.

mod common;
use common::{framework_lib, fresh_dir, release, slot};

use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::error::{Error, RvError};
use cryptoki::mechanism::aead::GcmParams;
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, AttributeType, ObjectClass};
use cryptoki::session::{Session, UserType};
use cryptoki::slot::Slot;
use cryptoki::types::AuthPin;
use std::path::Path;
use std::sync::Mutex;

static LOCK: Mutex<()> = Mutex::new(());

const NEW_PIN: &str = "metaslot-pin";
/// DER OID of P-256.
const P256: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];

/// Writes `conf` (with `@SOFTTOKEN@` replaced), points the environment at it and a fresh
/// softtoken keystore, and loads libopencf.so. Returns the module and `C_Initialize`'s result.
fn load(tag: &str, conf: &str) -> (Pkcs11, Result<(), Error>) {
    let dir = fresh_dir(&format!("metaslot-{tag}"));
    let conf = conf.replace(
        "@SOFTTOKEN@",
        &release("libopencf_softtoken.so").display().to_string(),
    );
    let path = dir.join("opencf.toml");
    std::fs::write(&path, conf).unwrap();
    let ks = dir.join("softtoken");
    std::fs::create_dir_all(&ks).unwrap();
    std::env::set_var("OPENCF_CONF", &path);
    std::env::set_var("OPENCF_SOFTTOKEN_DIR", &ks);
    std::env::remove_var("OPENCF_METASLOT_ENABLED");
    std::env::remove_var("OPENCF_METASLOT_KEYSTORE");
    let p = Pkcs11::new(framework_lib()).expect("load libopencf.so");
    let r = p.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK));
    (p, r)
}

const SOFTTOKEN_ONLY: &str = r#"
[metaslot]
enabled = true
keystore = "OpenCF Softtoken"

[[provider]]
name = "softtoken"
module = "@SOFTTOKEN@"
"#;

/// Logs the user in on `slot`, changing the fresh token's PIN first.
fn login_changing_pin(p: &Pkcs11, slot: Slot, s: &Session) {
    match s.login(UserType::User, Some(&AuthPin::from("changeme".to_string()))) {
        Ok(()) | Err(Error::Pkcs11(RvError::PinExpired, _)) => {}
        Err(e) => panic!("C_Login: {e:?}"),
    }
    assert!(p.get_token_info(slot).unwrap().user_pin_to_be_changed());
    s.set_pin(
        &AuthPin::from("changeme".to_string()),
        &AuthPin::from(NEW_PIN.to_string()),
    )
    .expect("C_SetPIN through the metaslot");
    let _ = s.logout();
    s.login(UserType::User, Some(&AuthPin::from(NEW_PIN.to_string())))
        .expect("C_Login with the new PIN");
    assert!(!p.get_token_info(slot).unwrap().user_pin_to_be_changed());
}

fn find_by_label(s: &Session, label: &[u8]) -> usize {
    s.find_objects(&[Attribute::Label(label.to_vec())])
        .unwrap()
        .len()
}

#[test]
fn metaslot_over_softtoken() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (p, r) = load("basic", SOFTTOKEN_ONLY);
    r.expect("C_Initialize");

    // Slot list: the metaslot first, then the softtoken's slots.
    let ids: Vec<u64> = p.get_all_slots().unwrap().iter().map(|s| s.id()).collect();
    assert_eq!(ids[0], 0);
    assert!(ids.len() >= 2, "softtoken slots follow: {ids:?}");
    let meta = slot(&p, 0);
    assert_eq!(p.get_token_info(meta).unwrap().label(), "OpenCF Metaslot");
    assert_eq!(
        p.get_slot_info(meta).unwrap().slot_description(),
        "OpenCF Metaslot"
    );
    let st = slot(&p, 1);
    assert_eq!(p.get_token_info(st).unwrap().label(), "OpenCF Softtoken");
    let mechs = p.get_mechanism_list(meta).unwrap();
    assert!(mechs.contains(&cryptoki::mechanism::MechanismType::AES_GCM));

    let s = p.open_rw_session(meta).unwrap();
    login_changing_pin(&p, meta, &s);

    // AES-GCM.
    let key = s
        .generate_key(
            &Mechanism::AesKeyGen,
            &[
                Attribute::ValueLen(32.into()),
                Attribute::Token(false),
                Attribute::Encrypt(true),
                Attribute::Decrypt(true),
            ],
        )
        .expect("C_GenerateKey");
    let mut iv = [7u8; 12];
    let data = b"through the metaslot";
    let ct = s
        .encrypt(
            &Mechanism::AesGcm(GcmParams::new(&mut iv, b"aad", 128.into()).unwrap()),
            key,
            data,
        )
        .expect("C_Encrypt AES-GCM");
    assert_eq!(ct.len(), data.len() + 16);
    let pt = s
        .decrypt(
            &Mechanism::AesGcm(GcmParams::new(&mut iv, b"aad", 128.into()).unwrap()),
            key,
            &ct,
        )
        .expect("C_Decrypt AES-GCM");
    assert_eq!(pt, data);

    // RSA sign/verify.
    let (rpub, rpriv) = s
        .generate_key_pair(
            &Mechanism::RsaPkcsKeyPairGen,
            &[
                Attribute::Token(false),
                Attribute::ModulusBits(2048.into()),
                Attribute::PublicExponent(vec![1, 0, 1]),
                Attribute::Verify(true),
            ],
            &[Attribute::Token(false), Attribute::Sign(true)],
        )
        .expect("RSA key pair");
    let sig = s
        .sign(&Mechanism::Sha256RsaPkcs, rpriv, data)
        .expect("RSA sign");
    s.verify(&Mechanism::Sha256RsaPkcs, rpub, data, &sig)
        .expect("RSA verify");
    let mut bad = sig.clone();
    bad[5] ^= 1;
    assert!(matches!(
        s.verify(&Mechanism::Sha256RsaPkcs, rpub, data, &bad),
        Err(Error::Pkcs11(RvError::SignatureInvalid, _))
    ));

    // Repeated inits of one mechanism on one session take the metaslot's shortcut to the
    // keystore after the first: other keys, a destroyed key and a key of the wrong type must
    // get the same answers as a first init would.
    fn gcm(iv: &mut [u8; 12]) -> Mechanism<'_> {
        Mechanism::AesGcm(GcmParams::new(&mut iv[..], b"aad", 128.into()).unwrap())
    }
    let key2 = aes_key(&s, b"second");
    let ct2 = s.encrypt(&gcm(&mut iv), key2, data).expect("second key");
    assert_ne!(ct2, ct, "another key, another ciphertext");
    assert_eq!(s.decrypt(&gcm(&mut iv), key2, &ct2).unwrap(), data);
    assert!(matches!(
        s.decrypt(&gcm(&mut iv), key2, &ct),
        Err(Error::Pkcs11(RvError::EncryptedDataInvalid, _))
    ));
    let key3 = aes_key(&s, b"third");
    s.encrypt(&gcm(&mut iv), key3, data).expect("third key");
    s.destroy_object(key3).expect("C_DestroyObject");
    assert!(matches!(
        s.encrypt(&gcm(&mut iv), key3, data),
        Err(Error::Pkcs11(RvError::KeyHandleInvalid, _))
    ));
    assert!(matches!(
        s.encrypt(&gcm(&mut iv), rpriv, data),
        Err(Error::Pkcs11(RvError::KeyTypeInconsistent, _))
    ));
    assert!(matches!(
        s.sign(&Mechanism::Sha256RsaPkcs, key2, data),
        Err(Error::Pkcs11(RvError::KeyTypeInconsistent, _))
    ));
    // After the errors no operation is left active, and the first key still works.
    assert_eq!(s.encrypt(&gcm(&mut iv), key, data).unwrap(), ct);
    let sig2 = s.sign(&Mechanism::Sha256RsaPkcs, rpriv, data).unwrap();
    s.verify(&Mechanism::Sha256RsaPkcs, rpub, data, &sig2)
        .expect("RSA verify after the errors");

    // ECDSA sign/verify.
    let (epub, epriv) = s
        .generate_key_pair(
            &Mechanism::EccKeyPairGen,
            &[
                Attribute::Token(false),
                Attribute::EcParams(P256.to_vec()),
                Attribute::Verify(true),
            ],
            &[Attribute::Token(false), Attribute::Sign(true)],
        )
        .expect("EC key pair");
    let sig = s
        .sign(&Mechanism::EcdsaSha256, epriv, data)
        .expect("ECDSA sign");
    s.verify(&Mechanism::EcdsaSha256, epub, data, &sig)
        .expect("ECDSA verify");

    // Multi-part digest through the metaslot.
    let m = Mechanism::Sha256;
    let one = s.digest(&m, data).unwrap();
    assert_eq!(one.len(), 32);

    // A token object made through slot 0 lives in the keystore: visible in the softtoken's slot.
    s.create_object(&[
        Attribute::Class(ObjectClass::DATA),
        Attribute::Token(true),
        Attribute::Private(false),
        Attribute::Label(b"made-through-metaslot".to_vec()),
        Attribute::Value(b"hello".to_vec()),
    ])
    .expect("C_CreateObject through slot 0");
    assert_eq!(find_by_label(&s, b"made-through-metaslot"), 1);
    let s1 = p.open_ro_session(st).unwrap();
    assert_eq!(find_by_label(&s1, b"made-through-metaslot"), 1);
    let info = s.get_session_info().unwrap();
    assert_eq!(info.slot_id(), meta);
    drop(s1);
    drop(s);
    p.finalize().unwrap();
}

/// `C_GetTokenInfo` counts the application's sessions on the slot asked about: slot 0's
/// sessions on slot 0 only, and on the keystore's own slot only the sessions opened there, not
/// the keystore sessions slot 0 opens behind its own.
#[test]
fn session_counts_are_the_applications_own() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (p, r) = load("counts", SOFTTOKEN_ONLY);
    r.expect("C_Initialize");
    let (meta, st) = (slot(&p, 0), slot(&p, 1));
    let counts = |s: Slot| {
        let t = p.get_token_info(s).unwrap();
        (t.session_count(), t.rw_session_count())
    };
    assert_eq!(counts(meta), (Some(0), Some(0)));
    assert_eq!(counts(st), (Some(0), Some(0)));

    let m_rw = p.open_rw_session(meta).unwrap();
    let m_ro = p.open_ro_session(meta).unwrap();
    assert_eq!(
        counts(meta),
        (Some(2), Some(1)),
        "slot 0: its own two sessions"
    );
    assert_eq!(
        counts(st),
        (Some(0), Some(0)),
        "the keystore's slot: slot 0's sessions in it are not the application's"
    );

    let s_ro = p.open_ro_session(st).unwrap();
    let s_rw = p.open_rw_session(st).unwrap();
    let s_rw2 = p.open_rw_session(st).unwrap();
    assert_eq!(counts(st), (Some(3), Some(2)));
    assert_eq!(counts(meta), (Some(2), Some(1)), "slot 0 unchanged");

    drop(s_rw2);
    drop(m_rw);
    assert_eq!(counts(st), (Some(2), Some(1)));
    assert_eq!(counts(meta), (Some(1), Some(0)));
    drop(s_ro);
    drop(s_rw);
    assert_eq!(counts(st), (Some(0), Some(0)));
    assert_eq!(counts(meta), (Some(1), Some(0)));
    drop(m_ro);
    assert_eq!(counts(meta), (Some(0), Some(0)));
    p.finalize().unwrap();
}

#[test]
fn bad_config_fails_initialize() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (p, r) = load("bad", "[metaslot\nenabled = true\n");
    assert!(
        matches!(r, Err(Error::Pkcs11(RvError::FunctionFailed, _))),
        "C_Initialize with a syntax error: {r:?}"
    );
    drop(p);
}

/// A configuration path that leads to a device that never ends (or to a file of over 1 MiB)
/// fails `C_Initialize` at once, having read 1 MiB, rather than reading without end.
#[test]
fn endless_config_fails_initialize() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = fresh_dir("metaslot-endless");
    std::env::set_var("OPENCF_SOFTTOKEN_DIR", &dir);
    // A configuration that works, then one byte past the bound.
    let good = SOFTTOKEN_ONLY.replace(
        "@SOFTTOKEN@",
        &release("libopencf_softtoken.so").display().to_string(),
    ) + "#";
    let big = dir.join("big.toml");
    std::fs::write(&big, good.clone() + &"#".repeat((1 << 20) + 1 - good.len())).unwrap();
    // A FIFO, whose open waited for a writer without end: C_Initialize must answer at once.
    let fifo = dir.join("fifo.toml");
    let st = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(st.success(), "mkfifo");
    for conf in [Path::new("/dev/zero"), &big, &fifo] {
        std::env::set_var("OPENCF_CONF", conf);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let p = Pkcs11::new(framework_lib()).unwrap();
            let r = p.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK));
            let _ = tx.send(format!("{r:?}"));
        });
        let r = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .unwrap_or_else(|_| {
                panic!(
                    "C_Initialize with OPENCF_CONF={} still waits after 20 s",
                    conf.display()
                )
            });
        assert!(
            r.starts_with("Err(Pkcs11(FunctionFailed"),
            "C_Initialize with OPENCF_CONF={}: {r}",
            conf.display()
        );
    }
}

#[test]
fn metaslot_disabled_by_env() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = fresh_dir("metaslot-noenv");
    let conf = SOFTTOKEN_ONLY.replace(
        "@SOFTTOKEN@",
        &release("libopencf_softtoken.so").display().to_string(),
    );
    std::fs::write(dir.join("c.toml"), conf).unwrap();
    std::env::set_var("OPENCF_CONF", dir.join("c.toml"));
    std::env::set_var("OPENCF_SOFTTOKEN_DIR", &dir);
    std::env::set_var("OPENCF_METASLOT_ENABLED", "false");
    let p = Pkcs11::new(framework_lib()).unwrap();
    let r = p.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK));
    std::env::remove_var("OPENCF_METASLOT_ENABLED");
    r.unwrap();
    let first = p.get_all_slots().unwrap()[0];
    assert_eq!(first.id(), 1, "no slot 0 when the metaslot is off");
    assert_eq!(p.get_token_info(first).unwrap().label(), "OpenCF Softtoken");
    p.finalize().unwrap();
}

const SOFTHSM: &str = "/usr/lib/softhsm/libsofthsm2.so";

/// An ECDSA signature on slot 0 with a key generated through slot 0 (so stored in the
/// softtoken keystore) runs in SoftHSMv2 when the softtoken's CKM_ECDSA is disabled: the key's
/// clone shows up in SoftHSM's own slot.
#[test]
fn ecdsa_routed_to_softhsm() {
    if !Path::new(SOFTHSM).exists() {
        eprintln!("skipped: {SOFTHSM} not installed");
        return;
    }
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    init_softhsm("softhsm");
    let conf = format!(
        "{SOFTTOKEN_ONLY}disabled = [\"CKM_ECDSA\"]\n\n[[provider]]\nname = \"softhsm\"\nmodule = \"{SOFTHSM}\"\n"
    );
    let (p, r) = load("softhsm", &conf);
    r.expect("C_Initialize with SoftHSM");
    let meta = slot(&p, 0);
    let s = p.open_rw_session(meta).unwrap();
    login_changing_pin(&p, meta, &s);
    let (epub, epriv) = s
        .generate_key_pair(
            &Mechanism::EccKeyPairGen,
            &[
                Attribute::Token(false),
                Attribute::EcParams(P256.to_vec()),
                Attribute::Verify(true),
            ],
            &[
                Attribute::Token(false),
                Attribute::Sign(true),
                Attribute::Sensitive(false),
                Attribute::Extractable(true),
                Attribute::Label(b"routed".to_vec()),
            ],
        )
        .expect("EC key pair in the keystore");
    let digest = [0x5au8; 32];
    let sig = s
        .sign(&Mechanism::Ecdsa, epriv, &digest)
        .expect("ECDSA through slot 0");
    assert_eq!(sig.len(), 64);
    s.verify(&Mechanism::Ecdsa, epub, &digest, &sig)
        .expect("ECDSA verify through slot 0");

    // The softtoken's own slot no longer offers CKM_ECDSA ...
    let st_slot = slot(&p, 1);
    assert!(!p
        .get_mechanism_list(st_slot)
        .unwrap()
        .contains(&cryptoki::mechanism::MechanismType::ECDSA));
    // ... and SoftHSM's token holds the clone of the private key.
    let clones = hsm_objects(&p, ObjectClass::PRIVATE_KEY, b"routed");
    assert_eq!(clones, 1, "the ECDSA key was cloned into SoftHSM");
    drop(s);
    p.finalize().unwrap();
}

/// `C_GenerateRandom` and `C_SeedRandom` on slot 0 go to the first provider with `random` on,
/// and slot 0 answers as that provider does: the software token's generator takes no seed;
/// SoftHSMv2 (when installed), listed first with the software token's `random` off, takes it.
#[test]
fn random_numbers_come_from_the_first_random_provider() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (p, r) = load("random", SOFTTOKEN_ONLY);
    r.expect("C_Initialize");
    let s = p.open_ro_session(slot(&p, 0)).unwrap();
    let (a, b) = (
        s.generate_random_vec(32).unwrap(),
        s.generate_random_vec(32).unwrap(),
    );
    assert_eq!(a.len(), 32);
    assert_ne!(a, b, "two draws of 32 random bytes differ");
    assert!(
        matches!(
            s.seed_random(b"not mixed in").unwrap_err(),
            Error::Pkcs11(RvError::RandomSeedNotSupported, _)
        ),
        "the software token's generator takes no seed, and slot 0 says so"
    );
    assert!(p.get_token_info(slot(&p, 0)).unwrap().rng(), "CKF_RNG");
    drop(s);
    p.finalize().unwrap();

    // No provider gives random numbers: slot 0 does not flag CKF_RNG, and has none to give.
    let (p, r) = load("no-random", &format!("{SOFTTOKEN_ONLY}random = false\n"));
    r.expect("C_Initialize");
    assert!(
        !p.get_token_info(slot(&p, 0)).unwrap().rng(),
        "no CKF_RNG without a random provider"
    );
    let s = p.open_ro_session(slot(&p, 0)).unwrap();
    assert!(matches!(
        s.generate_random_vec(16).unwrap_err(),
        Error::Pkcs11(RvError::RandomNoRng, _)
    ));
    drop(s);
    p.finalize().unwrap();

    if !Path::new(SOFTHSM).exists() {
        eprintln!("SoftHSMv2 part skipped: {SOFTHSM} not installed");
        return;
    }
    init_softhsm("random");
    let conf = format!(
        "{SOFTTOKEN_ONLY}random = false\n\n[[provider]]\nname = \"softhsm\"\nmodule = \"{SOFTHSM}\"\n"
    );
    let (p, r) = load("random-hsm", &conf);
    r.expect("C_Initialize with SoftHSM");
    let s = p.open_ro_session(slot(&p, 0)).unwrap();
    s.seed_random(b"mixed in by SoftHSMv2")
        .expect("C_SeedRandom goes to SoftHSMv2, which takes seeds");
    assert_eq!(s.generate_random_vec(16).unwrap().len(), 16);
    drop(s);
    p.finalize().unwrap();
}

/// Initializes a fresh SoftHSMv2 token "hsm" (PIN 1234) under a temporary `SOFTHSM2_CONF`.
fn init_softhsm(tag: &str) {
    let dir = fresh_dir(&format!("metaslot-{tag}"));
    let tokens = dir.join("tokens");
    std::fs::create_dir_all(&tokens).unwrap();
    let hsm_conf = dir.join("softhsm2.conf");
    std::fs::write(
        &hsm_conf,
        format!(
            "directories.tokendir = {}\nobjectstore.backend = file\n",
            tokens.display()
        ),
    )
    .unwrap();
    std::env::set_var("SOFTHSM2_CONF", &hsm_conf);
    let st = std::process::Command::new("softhsm2-util")
        .args([
            "--init-token",
            "--free",
            "--label",
            "hsm",
            "--pin",
            "1234",
            "--so-pin",
            "5678",
        ])
        .output()
        .expect("softhsm2-util");
    assert!(
        st.status.success(),
        "softhsm2-util: {}",
        String::from_utf8_lossy(&st.stderr)
    );
}

/// Slot 0 makes, wraps and derives keys in the keystore only, so another provider's flags for
/// those functions do not make slot 0 offer them: with the softtoken's AES and EC key
/// generation disabled, slot 0 lists neither (SoftHSMv2 has both) and refuses both, while
/// SoftHSMv2's routed mechanisms stay listed.
#[test]
fn slot_0_offers_key_management_as_the_keystore_does() {
    if !Path::new(SOFTHSM).exists() {
        eprintln!("skipped: {SOFTHSM} not installed");
        return;
    }
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    init_softhsm("keymgmt");
    let conf = format!(
        "{SOFTTOKEN_ONLY}disabled = [\"CKM_AES_KEY_GEN\", \"CKM_EC_KEY_PAIR_GEN\", \"CKM_ECDSA\"]\n\n\
         [[provider]]\nname = \"softhsm\"\nmodule = \"{SOFTHSM}\"\n"
    );
    let (p, r) = load("keymgmt", &conf);
    r.expect("C_Initialize with SoftHSM");
    let meta = slot(&p, 0);
    let list = p.get_mechanism_list(meta).unwrap();
    use cryptoki::mechanism::MechanismType;
    assert!(
        !list.contains(&MechanismType::AES_KEY_GEN)
            && !list.contains(&MechanismType::ECC_KEY_PAIR_GEN),
        "slot 0 does not offer key generation its keystore may not do: {list:?}"
    );
    assert!(
        list.contains(&MechanismType::ECDSA),
        "SoftHSMv2's ECDSA is routed"
    );
    let s = p.open_rw_session(meta).unwrap();
    login_changing_pin(&p, meta, &s);
    match s.generate_key(&Mechanism::AesKeyGen, &[Attribute::ValueLen(16.into())]) {
        Err(Error::Pkcs11(RvError::MechanismInvalid, _)) => {}
        other => panic!("C_GenerateKey(CKM_AES_KEY_GEN) on slot 0: {other:?}"),
    }
    drop(s);
    p.finalize().unwrap();
}

/// How many objects of `class` labelled `label` SoftHSM holds (clones are public session
/// objects, visible without login). Asked of the SoftHSM module itself, behind the framework
/// (the file the framework loaded, so the same instance): the framework's own slot for
/// SoftHSM does not show slot 0's clones.
fn hsm_objects(_p: &Pkcs11, class: ObjectClass, label: &[u8]) -> usize {
    let m = Pkcs11::new(SOFTHSM).unwrap();
    let hsm = m
        .get_slots_with_token()
        .unwrap()
        .into_iter()
        .find(|sl| {
            m.get_token_info(*sl)
                .map(|t| t.label() == "hsm")
                .unwrap_or(false)
        })
        .expect("SoftHSM's token");
    let hs = m.open_ro_session(hsm).unwrap();
    let found = hs
        .find_objects(&[Attribute::Class(class), Attribute::Label(label.to_vec())])
        .unwrap();
    for o in &found {
        let attrs = hs.get_attributes(*o, &[AttributeType::Token]).unwrap();
        assert!(
            matches!(attrs[0], Attribute::Token(false)),
            "clones are session objects"
        );
    }
    found.len()
}

fn aes_key(s: &Session, label: &[u8]) -> cryptoki::object::ObjectHandle {
    s.generate_key(
        &Mechanism::AesKeyGen,
        &[
            Attribute::ValueLen(16.into()),
            Attribute::Token(false),
            Attribute::Encrypt(true),
            Attribute::Decrypt(true),
            Attribute::Sensitive(false),
            Attribute::Extractable(true),
            Attribute::Label(label.to_vec()),
        ],
    )
    .expect("AES key in the keystore")
}

/// A `min_bytes` threshold on the first provider sends smaller single-part operations to the
/// next one (the key's clone appears in SoftHSM) and larger ones stay (no clone).
#[test]
fn min_bytes_threshold() {
    if !Path::new(SOFTHSM).exists() {
        eprintln!("skipped: {SOFTHSM} not installed");
        return;
    }
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    init_softhsm("minbytes");
    let conf = format!(
        "{SOFTTOKEN_ONLY}[provider.policy.CKM_AES_ECB]\nmin_bytes = 64\n\n[[provider]]\nname = \"softhsm\"\nmodule = \"{SOFTHSM}\"\n"
    );
    let (p, r) = load("minbytes", &conf);
    r.expect("C_Initialize");
    let meta = slot(&p, 0);
    let s = p.open_rw_session(meta).unwrap();
    login_changing_pin(&p, meta, &s);
    let small = aes_key(&s, b"small");
    let large = aes_key(&s, b"large");
    let short = [1u8; 16];
    let long = [2u8; 128];
    let c1 = s
        .encrypt(&Mechanism::AesEcb, small, &short)
        .expect("16-byte AES-ECB");
    assert_eq!(s.decrypt(&Mechanism::AesEcb, small, &c1).unwrap(), short);
    let c2 = s
        .encrypt(&Mechanism::AesEcb, large, &long)
        .expect("128-byte AES-ECB");
    assert_eq!(s.decrypt(&Mechanism::AesEcb, large, &c2).unwrap(), long);
    // Where a key ran: SoftHSM holds its clone (1) or not (0).
    let clones = |label: &[u8]| hsm_objects(&p, ObjectClass::SECRET_KEY, label);
    assert_eq!(
        (clones(b"small"), clones(b"large")),
        (1, 0),
        "16 bytes ran in SoftHSM, 128 bytes in the softtoken"
    );
    // SoftHSMv2 (PKCS#11 2.40) cannot cancel an operation, so binding waits for the data:
    // a multi-part operation binds at its first update by that update's length, and stays.
    let mut both = short.to_vec();
    both.extend(long);
    let multi = |k, first: usize| {
        s.encrypt_init(&Mechanism::AesEcb, k).unwrap();
        let mut out = s.encrypt_update(&both[..first]).unwrap();
        out.extend(s.encrypt_update(&both[first..]).unwrap());
        out.extend(s.encrypt_final().unwrap());
        out
    };
    let short_first = aes_key(&s, b"short-first");
    let long_first = aes_key(&s, b"long-first");
    let a = multi(short_first, 16);
    let b = multi(long_first, 144);
    assert_eq!(
        (clones(b"short-first"), clones(b"long-first")),
        (1, 0),
        "a 16-byte first update bound the operation to SoftHSM, a 144-byte one to the softtoken"
    );
    assert_eq!(
        s.encrypt(&Mechanism::AesEcb, short_first, &both).unwrap(),
        a,
        "multi-part in SoftHSM equals single-part"
    );
    assert_eq!(
        s.encrypt(&Mechanism::AesEcb, long_first, &both).unwrap(),
        b,
        "multi-part in the softtoken equals single-part"
    );
    drop(s);
    p.finalize().unwrap();
}

/// With SoftHSM first, a sensitive (extractable) keystore key is migrated there by wrap/unwrap
/// under a one-off key when `auto_key_migrate = true`; with `false` it stays in the keystore
/// and the operation runs there.
#[test]
fn sensitive_key_migration() {
    if !Path::new(SOFTHSM).exists() {
        eprintln!("skipped: {SOFTHSM} not installed");
        return;
    }
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    for migrate in [true, false] {
        init_softhsm("migrate");
        let conf = format!(
            "[metaslot]\nkeystore = \"OpenCF Softtoken\"\nauto_key_migrate = {migrate}\n\n\
             [[provider]]\nname = \"softhsm\"\nmodule = \"{SOFTHSM}\"\n\n\
             [[provider]]\nname = \"softtoken\"\nmodule = \"@SOFTTOKEN@\"\n"
        );
        let (p, r) = load("migrate", &conf);
        r.expect("C_Initialize");
        let meta = slot(&p, 0);
        let s = p.open_rw_session(meta).unwrap();
        login_changing_pin(&p, meta, &s);
        let (epub, epriv) = s
            .generate_key_pair(
                &Mechanism::EccKeyPairGen,
                &[
                    Attribute::Token(false),
                    Attribute::EcParams(P256.to_vec()),
                    Attribute::Verify(true),
                ],
                &[
                    Attribute::Token(false),
                    Attribute::Sign(true),
                    Attribute::Sensitive(true),
                    Attribute::Extractable(true),
                    Attribute::Label(b"secret-ec".to_vec()),
                ],
            )
            .expect("EC key pair in the keystore");
        let digest = [0x33u8; 32];
        let sig = s
            .sign(&Mechanism::Ecdsa, epriv, &digest)
            .expect("ECDSA through slot 0");
        s.verify(&Mechanism::Ecdsa, epub, &digest, &sig)
            .expect("verify");
        let n = hsm_objects(&p, ObjectClass::PRIVATE_KEY, b"secret-ec");
        assert_eq!(
            n, migrate as usize,
            "auto_key_migrate = {migrate}: clones in SoftHSM"
        );
        drop(s);
        p.finalize().unwrap();
    }
}
