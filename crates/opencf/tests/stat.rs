//! `cryptoadm stat` sees the metaslot's work: a child process runs a known number of
//! operations through slot 0 of libopencf.so, and `cryptoadm stat --json`, run from this
//! process, reports exactly that many for the provider and mechanism that ran them — while the
//! child is alive and after it has exited. A multi-part operation's input counts once, also
//! when each step was asked for its length first.
//!
//! Build first: `cargo build --release -p opencf-softtoken -p opencf -p cryptoadm`.

mod common;
use common::{framework_lib, fresh_dir, provider, release, slot0};

use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::mechanism::aead::GcmParams;
use cryptoki::mechanism::Mechanism;
use cryptoki::object::Attribute;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Operations the child runs.
const GCM_OPS: usize = 1234;
const SHA_OPS: usize = 321;

/// Multi-part AES-CBC-PAD encryptions the child runs, each of two updates of `MP_PART` bytes,
/// each update asked for its length first.
const MP_OPS: usize = 10;
const MP_PART: usize = 1000;

const CKM_AES_GCM: u64 = 0x1087;
const CKM_SHA256: u64 = 0x250;
const CKM_AES_CBC_PAD: u64 = 0x1085;

/// Not a test on its own: in the child (`OPENCF_STAT_CHILD` = a directory) it runs the
/// operations, writes `ready` there, and waits for `go` before it exits.
#[test]
fn stat_child() {
    let Some(dir) = std::env::var_os("OPENCF_STAT_CHILD").map(PathBuf::from) else {
        return;
    };
    let p = Pkcs11::new(framework_lib()).expect("load libopencf.so");
    p.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
        .expect("C_Initialize");
    let s = p.open_rw_session(slot0(&p)).unwrap();
    // A public session object: no login needed.
    let key = s
        .generate_key(
            &Mechanism::AesKeyGen,
            &[
                Attribute::ValueLen(16.into()),
                Attribute::Token(false),
                Attribute::Private(false),
                Attribute::Encrypt(true),
            ],
        )
        .expect("AES key through slot 0");
    let mut iv = [0u8; 12];
    for i in 0..GCM_OPS {
        iv[..8].copy_from_slice(&(i as u64).to_be_bytes());
        let params = GcmParams::new(&mut iv, &[], 128.into()).unwrap();
        s.encrypt(&Mechanism::AesGcm(params), key, &[7u8; 16])
            .expect("C_Encrypt");
    }
    for _ in 0..SHA_OPS {
        s.digest(&Mechanism::Sha256, &[1u8; 100]).expect("C_Digest");
    }
    // Multi-part, with the two-call protocol: a size query takes no input, nor counts it.
    let raw = opencf_abi::provider::Provider::load(&framework_lib()).unwrap();
    let cbc = opencf_abi::Mechanism {
        mechanism: CKM_AES_CBC_PAD,
        param: opencf_abi::MechParam::Bytes(vec![0; 16]),
    };
    for _ in 0..MP_OPS {
        raw.encrypt_init(s.handle(), &cbc, key.handle()).unwrap();
        for _ in 0..2 {
            let mut q = opencf_abi::OutBuf::new(None);
            raw.encrypt_update(s.handle(), &[3u8; MP_PART], &mut q)
                .unwrap();
            let mut out = vec![0u8; q.len()];
            raw.encrypt_update(
                s.handle(),
                &[3u8; MP_PART],
                &mut opencf_abi::OutBuf::new(Some(&mut out)),
            )
            .unwrap();
        }
        let mut out = [0u8; 32];
        raw.encrypt_final(s.handle(), &mut opencf_abi::OutBuf::new(Some(&mut out)))
            .unwrap();
    }
    drop(raw);
    std::fs::write(dir.join("ready"), b"").unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    while !dir.join("go").exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(s);
    p.finalize().unwrap();
}

/// (ops, bytes) of `provider` × `mech` in `cryptoadm stat --json`.
fn stat(dir: &Path, provider: &str, mech: u64) -> (u64, u64) {
    let out = Command::new(release("cryptoadm"))
        .args(["stat", "--json", "--dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cryptoadm stat: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let rows = v["mechanisms"].as_array().expect("mechanisms array");
    rows.iter()
        .filter(|r| r["provider"] == provider && r["mechanism_value"] == mech)
        .map(|r| (r["ops"].as_u64().unwrap(), r["bytes"].as_u64().unwrap()))
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
}

#[test]
fn cryptoadm_stat_counts_the_operations_of_another_process() {
    let dir = fresh_dir("stat");
    let (ks, stats, sync) = (dir.join("ks"), dir.join("stat"), dir.join("sync"));
    for d in [&ks, &sync] {
        std::fs::create_dir_all(d).unwrap();
    }
    // Only the software token, whatever else lies in target/release.
    let conf = dir.join("opencf.toml");
    std::fs::write(
        &conf,
        provider("softtoken", &release("libopencf_softtoken.so")),
    )
    .unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "stat_child", "--nocapture", "--test-threads=1"])
        .env("OPENCF_STAT_CHILD", &sync)
        .env("OPENCF_STAT_DIR", &stats)
        .env("OPENCF_CONF", &conf)
        .env("OPENCF_SOFTTOKEN_DIR", &ks)
        .env_remove("OPENCF_STAT")
        .env_remove("OPENCF_METASLOT_ENABLED")
        .env_remove("OPENCF_METASLOT_KEYSTORE")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(120);
    while !sync.join("ready").exists() {
        assert!(Instant::now() < until, "the child did not get ready");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the child exited early"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The child is alive: its live segment is read.
    assert_eq!(
        stat(&stats, "softtoken", CKM_AES_GCM),
        (GCM_OPS as u64, 16 * GCM_OPS as u64),
        "AES-GCM while the process runs"
    );
    assert_eq!(
        stat(&stats, "softtoken", CKM_SHA256),
        (SHA_OPS as u64, 100 * SHA_OPS as u64),
        "SHA-256 while the process runs"
    );
    assert_eq!(
        stat(&stats, "softtoken", CKM_AES_CBC_PAD),
        (MP_OPS as u64, (2 * MP_PART * MP_OPS) as u64),
        "multi-part AES-CBC-PAD: each input counted once, not again for its size query"
    );
    std::fs::write(sync.join("go"), b"").unwrap();
    assert!(child.wait().unwrap().success(), "child failed");
    // After it exited: the totals are kept.
    assert_eq!(
        stat(&stats, "softtoken", CKM_AES_GCM),
        (GCM_OPS as u64, 16 * GCM_OPS as u64),
        "AES-GCM after the process exited"
    );
    assert_eq!(
        stat(&stats, "softtoken", CKM_SHA256).0,
        SHA_OPS as u64,
        "SHA-256 after the process exited"
    );
}
