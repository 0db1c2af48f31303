//! The accelerator behind the framework: `libopencf.so` over [accel, softtoken] with the
//! software token as keystore. An RSA key generated through slot 0 (held by the softtoken,
//! sensitive: the framework moves it into the accelerator by AES-KWP) signs through slot 0,
//! served by the accelerator; with `OPENCF_ACCEL_FAULT=engine-error` every call still
//! succeeds, served by the softtoken, and the counters show the fallbacks on "accel".
//!
//! Then 16 threads sign at once through slot 0 while the engine fails, and again while it
//! reports busy: every call answers `CKR_OK` with a valid signature, and the counters (read
//! directly and through `cryptoadm stat --json`) show one fallback per call on "accel".
//!
//! Build first: `cargo build --release -p opencf-accel -p opencf -p opencf-softtoken -p cryptoadm`.

use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::error::{Error, RvError};
use cryptoki::mechanism::aead::GcmParams;
use cryptoki::mechanism::rsa::{PkcsMgfType, PkcsPssParams};
use cryptoki::mechanism::{Mechanism, MechanismType};
use cryptoki::object::{Attribute, AttributeType, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::{Session, UserType};
use cryptoki::slot::Slot;
use cryptoki::types::AuthPin;
use openssl::bn::BigNum;
use openssl::hash::MessageDigest;
use openssl::pkey::{PKey, Public};
use openssl::rsa::{Padding, Rsa};
use openssl::sign::{RsaPssSaltlen, Verifier};
use openssl::symm::Cipher;
use std::path::Path;

// Of the shared helpers, `release()` and `engine_counters` serve here (the rest load the
// accelerator alone).
#[allow(dead_code)]
mod common;
use common::raw::engine_counters;
use common::release;

/// `CKM_AES_GCM`.
const CKM_AES_GCM: u64 = 0x1087;

/// (operations, fallbacks) of `provider`, summed over mechanisms.
fn counters(dir: &Path, provider: &str) -> (u64, u64) {
    let c = all_counters(dir, provider);
    (c.ops, c.fallbacks)
}

/// Every counter of `provider`, summed over mechanisms.
fn all_counters(dir: &Path, provider: &str) -> opencf_stat::MechStats {
    let snap = opencf_stat::read(dir).expect("read the counters");
    snap.mechanisms
        .iter()
        .filter(|(k, _)| k.provider == provider)
        .fold(opencf_stat::MechStats::default(), |mut a, (_, v)| {
            a.ops += v.ops;
            a.errors += v.errors;
            a.fallbacks += v.fallbacks;
            a.busy += v.busy;
            a
        })
}

/// The accelerator's RSA counters: (direct, passes, halves, faults).
fn rsa_counters(dir: &Path) -> [u64; 4] {
    engine_counters(
        dir,
        ["rsa_direct", "rsa_passes", "rsa_halves", "rsa_faults"],
    )
}

/// `after − before`, element by element.
fn grew(before: [u64; 4], after: [u64; 4]) -> [u64; 4] {
    std::array::from_fn(|i| after[i] - before[i])
}

/// (fallbacks, busy) of `provider` as `cryptoadm stat -p PROVIDER --json` shows them.
fn cryptoadm_stat(dir: &Path, provider: &str) -> (u64, u64) {
    let mut cmd = std::process::Command::new(release("cryptoadm"));
    cmd.args(["stat", "-p", provider, "--json", "--dir"])
        .arg(dir);
    let out = cmd.output().expect("run cryptoadm stat");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{cmd:?} failed: {text}");
    let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let sum = |field: &str| -> u64 {
        let rows = v["mechanisms"].as_array().expect("mechanisms array");
        rows.iter().filter_map(|r| r[field].as_u64()).sum()
    };
    (sum("fallbacks"), sum("busy"))
}

/// The `min_bytes` of `CKM_AES_GCM` on "accel" in this test's configuration.
const GCM_MIN: usize = 1 << 20;

/// `CKM_AES_GCM` operations of `provider`.
fn gcm_ops(dir: &Path, provider: &str) -> u64 {
    common::raw::mechanism_ops(dir, provider, CKM_AES_GCM)
}

/// AES-GCM through slot 0: `C_Encrypt` of `len` bytes with a session AES key created through
/// slot 0 (held by the softtoken, cloned where the operation runs) equals OpenSSL's, and decrypts back; returns how many of the two operations
/// "accel" and the softtoken ran.
fn gcm_through_slot0(s: &Session, stat: &Path, len: usize) -> (u64, u64) {
    let mut value = [0u8; 16];
    openssl::rand::rand_bytes(&mut value).unwrap();
    let key = s
        .create_object(&[
            Attribute::Class(ObjectClass::SECRET_KEY),
            Attribute::KeyType(KeyType::AES),
            Attribute::Value(value.to_vec()),
            Attribute::Token(false),
            Attribute::Encrypt(true),
            Attribute::Decrypt(true),
        ])
        .expect("C_CreateObject (AES) through slot 0");
    let mut data = vec![0u8; len];
    openssl::rand::rand_bytes(&mut data).unwrap();
    // IV and AAD differ with the length, so that a parameter kept from an earlier operation
    // of the session would show in the result.
    let (mut iv, aad) = ([len as u8; 12], format!("header of {len}").into_bytes());
    let mut tag = [0u8; 16];
    let mut want = openssl::symm::encrypt_aead(
        Cipher::aes_128_gcm(),
        &value,
        Some(&iv),
        &aad,
        &data,
        &mut tag,
    )
    .unwrap();
    want.extend_from_slice(&tag);
    let before = (gcm_ops(stat, "accel"), gcm_ops(stat, "softtoken"));
    let gcm = Mechanism::AesGcm(GcmParams::new(&mut iv, &aad, 128.into()).unwrap());
    let got = s.encrypt(&gcm, key, &data).unwrap();
    assert!(
        got == want,
        "AES-GCM of {len} bytes through slot 0 equals OpenSSL's"
    );
    let back = s.decrypt(&gcm, key, &got).unwrap();
    assert!(back == data, "and decrypts back");
    s.destroy_object(key).unwrap();
    (
        gcm_ops(stat, "accel") - before.0,
        gcm_ops(stat, "softtoken") - before.1,
    )
}

/// Threads and signatures per thread of the load phases.
const THREADS: usize = 16;
const PER_THREAD: usize = 6;

/// Signs `msg` through `s` (SHA256-RSA-PKCS or, with `pss`, SHA256-RSA-PKCS-PSS) and checks
/// the signature with OpenSSL: the call must answer `CKR_OK`.
fn sign_checked(s: &Session, key: ObjectHandle, pkey: &PKey<Public>, msg: &[u8], pss: bool) {
    let mech = if pss {
        Mechanism::Sha256RsaPkcsPss(PkcsPssParams {
            hash_alg: MechanismType::SHA256,
            mgf: PkcsMgfType::MGF1_SHA256,
            s_len: 32.into(),
        })
    } else {
        Mechanism::Sha256RsaPkcs
    };
    let sig = s.sign(&mech, key, msg).expect("C_Sign through slot 0");
    let mut v = Verifier::new(MessageDigest::sha256(), pkey).unwrap();
    if pss {
        v.set_rsa_padding(Padding::PKCS1_PSS).unwrap();
        v.set_rsa_pss_saltlen(RsaPssSaltlen::custom(32)).unwrap();
    }
    v.update(msg).unwrap();
    assert!(v.verify(&sig).unwrap(), "the signature verifies");
}

/// [`THREADS`] threads, each with its own session on slot 0, sign [`PER_THREAD`] messages
/// each at once (alternating PKCS#1 v1.5 and PSS); every call must succeed and verify.
fn load(p: &Pkcs11, slot: Slot, key: ObjectHandle, pkey: &PKey<Public>) {
    std::thread::scope(|sc| {
        for t in 0..THREADS {
            sc.spawn(move || {
                let s = p.open_ro_session(slot).expect("C_OpenSession");
                for i in 0..PER_THREAD {
                    let msg = format!("thread {t} message {i}");
                    sign_checked(&s, key, pkey, msg.as_bytes(), i % 2 == 1);
                }
            });
        }
    });
}

fn login(s: &Session) {
    let pin = |p: &str| AuthPin::from(p.to_string());
    match s.login(UserType::User, Some(&pin("changeme"))) {
        Ok(()) | Err(Error::Pkcs11(RvError::PinExpired, _)) => {}
        Err(e) => panic!("C_Login through slot 0: {e:?}"),
    }
    s.set_pin(&pin("changeme"), &pin("accel-test-pin")).unwrap();
    let _ = s.logout();
    s.login(UserType::User, Some(&pin("accel-test-pin")))
        .unwrap();
}

#[test]
fn slot0_with_accel_first_and_fallback() {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("accel-fw-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("softtoken")).unwrap();
    let conf = format!(
        "[metaslot]\nenabled = true\nkeystore = \"OpenCF Softtoken\"\nauto_key_migrate = true\n\n\
         [[provider]]\nname = \"accel\"\nmodule = \"{}\"\n\
         [provider.policy.CKM_AES_GCM]\nmin_bytes = {GCM_MIN}\n\n\
         [[provider]]\nname = \"softtoken\"\nmodule = \"{}\"\n",
        release("libopencf_accel.so").display(),
        release("libopencf_softtoken.so").display()
    );
    std::fs::write(dir.join("opencf.toml"), conf).unwrap();
    let stat = dir.join("stat");
    std::env::set_var("OPENCF_STAT_DIR", &stat);
    std::env::set_var("OPENCF_CONF", dir.join("opencf.toml"));
    std::env::set_var("OPENCF_SOFTTOKEN_DIR", dir.join("softtoken"));
    std::env::remove_var("OPENCF_ACCEL_FAULT");
    let p = Pkcs11::new(release("libopencf.so")).unwrap();
    p.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
        .unwrap();
    let slot = p
        .get_all_slots()
        .unwrap()
        .into_iter()
        .find(|s| s.id() == 0)
        .unwrap();
    let s = p.open_rw_session(slot).unwrap();
    login(&s);
    let (public, private) = s
        .generate_key_pair(
            &Mechanism::RsaPkcsKeyPairGen,
            &[
                Attribute::ModulusBits(2048.into()),
                Attribute::PublicExponent(vec![1, 0, 1]),
                Attribute::Token(false),
                Attribute::Verify(true),
            ],
            &[
                Attribute::Token(false),
                Attribute::Sign(true),
                Attribute::Sensitive(true),
            ],
        )
        .unwrap();
    let attrs = s
        .get_attributes(
            public,
            &[AttributeType::Modulus, AttributeType::PublicExponent],
        )
        .unwrap();
    let (Attribute::Modulus(n), Attribute::PublicExponent(e)) = (&attrs[0], &attrs[1]) else {
        panic!("public key values");
    };
    let rsa = Rsa::from_public_components(
        BigNum::from_slice(n).unwrap(),
        BigNum::from_slice(e).unwrap(),
    )
    .unwrap();
    let pkey = PKey::from_rsa(rsa).unwrap();
    let run = |rounds: usize| {
        for i in 0..rounds {
            let msg = format!("message {i}");
            for is_pss in [false, true] {
                sign_checked(&s, private, &pkey, msg.as_bytes(), is_pss);
            }
        }
    };
    let engine = opencf_accel::engine::provider_engine().is_some();
    let start = rsa_counters(&stat);
    run(5);
    let (ops, _) = counters(&stat, "accel");
    let lone = grew(start, rsa_counters(&stat));
    if engine {
        assert_eq!(ops, 10, "the accelerator served every signature");
        // One request at a time: each ran with OpenSSL in the caller's thread, no pass.
        assert_eq!(
            lone,
            [10, 0, 0, 0],
            "accel (direct, passes, halves, faults)"
        );
    } else {
        eprintln!("SKIP: no RSA engine on this CPU; the softtoken served (accel ops {ops})");
        assert_eq!(ops, 0);
    }
    std::env::set_var("OPENCF_ACCEL_FAULT", "engine-error");
    let before = rsa_counters(&stat);
    run(5);
    std::env::remove_var("OPENCF_ACCEL_FAULT");
    let faulty = grew(before, rsa_counters(&stat));
    let (_, fallbacks) = counters(&stat, "accel");
    let (soft, _) = counters(&stat, "softtoken");
    if engine {
        assert_eq!(fallbacks, 10, "every faulty call fell back");
        assert!(soft >= 10, "the softtoken served them ({soft})");
        // The fault switch sends every request to the engine and corrupts every result:
        // both halves of each of the 10 requests ran and failed their check.
        let [direct, passes, halves, faults] = faulty;
        assert_eq!(
            (direct, halves, faults),
            (0, 20, 20),
            "accel counters {faulty:?}"
        );
        assert!((3..=20).contains(&passes), "{passes} passes for 20 halves");
    }

    // High availability under load: 16 threads at once while the engine fails, then while
    // it reports busy. Every call answers CKR_OK with a valid signature (served by the
    // softtoken); the counters of "accel" show one fallback per call, and for `busy` one
    // busy answer per call.
    let calls = (THREADS * PER_THREAD) as u64;
    for fault in ["engine-error", "busy"] {
        let before = all_counters(&stat, "accel");
        let soft_before = all_counters(&stat, "softtoken").ops;
        std::env::set_var("OPENCF_ACCEL_FAULT", fault);
        load(&p, slot, private, &pkey);
        std::env::remove_var("OPENCF_ACCEL_FAULT");
        let after = all_counters(&stat, "accel");
        let soft = all_counters(&stat, "softtoken").ops - soft_before;
        eprintln!(
            "{fault} under {THREADS} threads: {calls} calls OK; accel fallbacks +{}, busy +{}, \
             errors +{}; softtoken ops +{soft}",
            after.fallbacks - before.fallbacks,
            after.busy - before.busy,
            after.errors - before.errors,
        );
        if !engine {
            continue;
        }
        assert_eq!(after.ops, before.ops, "{fault}: accel served nothing");
        assert_eq!(
            after.fallbacks - before.fallbacks,
            calls,
            "{fault}: every call fell back"
        );
        let busy = after.busy - before.busy;
        let errors = after.errors - before.errors;
        if fault == "busy" {
            assert_eq!((busy, errors), (calls, 0), "busy answers counted as busy");
        } else {
            assert_eq!(
                (busy, errors),
                (0, calls),
                "engine faults counted as errors"
            );
        }
        assert!(
            soft >= calls,
            "{fault}: the softtoken served every call ({soft})"
        );
    }
    // Under load without a fault, the requests fill passes: the accelerator's counters account
    // for every signature it served, on the engine (two halves each) or directly.
    let (before, ops_before) = (rsa_counters(&stat), all_counters(&stat, "accel").ops);
    load(&p, slot, private, &pkey);
    let [direct, passes, halves, faults] = grew(before, rsa_counters(&stat));
    let ops = all_counters(&stat, "accel").ops - ops_before;
    eprintln!(
        "{THREADS} threads: accel ops +{ops}: direct {direct}, {passes} passes of {halves} halves"
    );
    if engine {
        assert_eq!(ops, calls, "the accelerator served every call");
        assert_eq!(
            (direct + halves / 2, faults),
            (calls, 0),
            "each served once"
        );
        assert!(halves <= 8 * passes && halves.is_multiple_of(2));
        // The first request sent to the engine measured RSA-2048 on this CPU first; where the
        // engine can never win, none went to it.
        let [break_even] = engine_counters(&stat, ["rsa_break_even_2048"]);
        eprintln!("RSA-2048 break-even here: {break_even}/100 requests per pass");
        if passes > 0 {
            assert!(break_even > 0, "a pass ran before RSA-2048 was measured");
        }
        if break_even >= 400 {
            assert_eq!(passes, 0, "the engine loses here: no pass");
        }
    }
    // `cryptoadm stat`, run as another process, shows the same fallbacks and busy answers.
    let c = all_counters(&stat, "accel");
    let shown = cryptoadm_stat(&stat, "accel");
    eprintln!(
        "cryptoadm stat: accel fallbacks {}, busy {}",
        shown.0, shown.1
    );
    assert_eq!(shown, (c.fallbacks, c.busy), "cryptoadm stat agrees");
    if engine {
        assert_eq!(
            shown,
            (10 + 2 * calls, calls),
            "cryptoadm stat shows the fallbacks"
        );
    }

    // AES-GCM: at or above `min_bytes` the accelerator's bulk engine runs it, below it the
    // softtoken; with the fault switch on, the softtoken again.
    let bulk = opencf_accel::gcm::available();
    let big = gcm_through_slot0(&s, &stat, 3 * GCM_MIN + 5);
    // (The decryption's input is the ciphertext and its 16-byte tag.)
    let small = gcm_through_slot0(&s, &stat, GCM_MIN - 17);
    // The same session again: a large input after small ones moves to the accelerator (the
    // session's shortcut for repeated inits keeps the parameter for it), a small one stays.
    let big_again = gcm_through_slot0(&s, &stat, 2 * GCM_MIN + 1);
    let small_again = gcm_through_slot0(&s, &stat, 16);
    std::env::set_var("OPENCF_ACCEL_FAULT", "busy");
    let faulty = gcm_through_slot0(&s, &stat, 2 * GCM_MIN);
    std::env::remove_var("OPENCF_ACCEL_FAULT");
    eprintln!(
        "AES-GCM (accel, softtoken) ops: large {big:?}, small {small:?}, large {big_again:?}, \
         small {small_again:?}, busy {faulty:?}"
    );
    if bulk {
        assert_eq!(big, (2, 0), "large AES-GCM runs on the accelerator");
        if opencf_accel::sched::Scheduler::cores() > 1 {
            let [ops, pieces] = engine_counters(&stat, ["bulk_operations", "bulk_pieces"]);
            eprintln!("bulk engine: {ops} operations cut into {pieces} pieces");
            assert!(ops >= 4, "each large encryption and decryption was split");
            assert!(pieces >= 2 * ops);
        }
        assert_eq!(big_again, (2, 0), "and again after small ones");
    } else {
        eprintln!("SKIP: no bulk engine here; the softtoken served");
        assert_eq!(big, (0, 2));
        assert_eq!(big_again, (0, 2));
    }
    assert_eq!(small, (0, 2), "below min_bytes the softtoken runs AES-GCM");
    assert_eq!(small_again, (0, 2), "and again after a large one");
    assert_eq!(
        faulty,
        (0, 2),
        "with the accelerator busy the softtoken runs AES-GCM"
    );
    drop(s);
    let _ = p.finalize();
}
