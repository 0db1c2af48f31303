//! The accelerator behind the framework: `libopencf.so` over [accel, softtoken] with the
//! software token as keystore. An RSA key generated through slot 0 (held by the softtoken,
//! sensitive: the framework moves it into the accelerator by AES-KWP) signs through slot 0,
//! served by the accelerator; with `OPENCF_ACCEL_FAULT=engine-error` every call still
//! succeeds, served by the softtoken, and the counters show the fallbacks on "accel".
//!
//! Build first: `cargo build --release -p opencf-accel -p opencf -p opencf-softtoken`.

use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::error::{Error, RvError};
use cryptoki::mechanism::rsa::{PkcsMgfType, PkcsPssParams};
use cryptoki::mechanism::{Mechanism, MechanismType};
use cryptoki::object::{Attribute, AttributeType};
use cryptoki::session::{Session, UserType};
use cryptoki::types::AuthPin;
use openssl::bn::BigNum;
use openssl::hash::MessageDigest;
use openssl::pkey::PKey;
use openssl::rsa::{Padding, Rsa};
use openssl::sign::{RsaPssSaltlen, Verifier};
use std::path::{Path, PathBuf};

fn release(name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap();
    let p = root.join("target/release").join(name);
    assert!(
        p.exists(),
        "{} missing: cargo build --release -p opencf-accel -p opencf -p opencf-softtoken",
        p.display()
    );
    p
}

/// (operations, fallbacks) of `provider`, summed over mechanisms.
fn counters(dir: &Path, provider: &str) -> (u64, u64) {
    let snap = opencf_stat::read(dir).expect("read the counters");
    snap.mechanisms
        .iter()
        .filter(|(k, _)| k.provider == provider)
        .fold((0, 0), |(o, f), (_, v)| (o + v.ops, f + v.fallbacks))
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
         [[provider]]\nname = \"accel\"\nmodule = \"{}\"\n\n\
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
    let pss = Mechanism::Sha256RsaPkcsPss(PkcsPssParams {
        hash_alg: MechanismType::SHA256,
        mgf: PkcsMgfType::MGF1_SHA256,
        s_len: 32.into(),
    });
    let run = |rounds: usize| {
        for i in 0..rounds {
            let msg = format!("message {i}");
            for (m, is_pss) in [(&Mechanism::Sha256RsaPkcs, false), (&pss, true)] {
                let sig = s
                    .sign(m, private, msg.as_bytes())
                    .expect("C_Sign through slot 0");
                let mut v = Verifier::new(MessageDigest::sha256(), &pkey).unwrap();
                if is_pss {
                    v.set_rsa_padding(Padding::PKCS1_PSS).unwrap();
                    v.set_rsa_pss_saltlen(RsaPssSaltlen::custom(32)).unwrap();
                }
                v.update(msg.as_bytes()).unwrap();
                assert!(v.verify(&sig).unwrap(), "signature {i} verifies");
            }
        }
    };
    let engine = opencf_accel::engine::provider_engine().is_some();
    run(5);
    let (ops, _) = counters(&stat, "accel");
    if engine {
        assert_eq!(ops, 10, "the accelerator served every signature");
    } else {
        eprintln!("SKIP: no RSA engine on this CPU; the softtoken served (accel ops {ops})");
        assert_eq!(ops, 0);
    }
    std::env::set_var("OPENCF_ACCEL_FAULT", "engine-error");
    run(5);
    std::env::remove_var("OPENCF_ACCEL_FAULT");
    let (_, fallbacks) = counters(&stat, "accel");
    let (soft, _) = counters(&stat, "softtoken");
    if engine {
        assert_eq!(fallbacks, 10, "every faulty call fell back");
        assert!(soft >= 10, "the softtoken served them ({soft})");
    }
    drop(s);
    let _ = p.finalize();
}
