//! Shared by the C-ABI tests: the built `libopencf_accel.so`, loaded and initialized once per
//! test process, and sessions on its slot.

pub mod data;
pub mod raw;

use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::session::Session;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// Serializes the tests of one process that change the environment the provider reads
/// (`OPENCF_ACCEL_*`).
pub static LOCK: Mutex<()> = Mutex::new(());

/// The newer of `target/release/libopencf_accel.so` and its copy in `deps/`.
pub fn library() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap();
    let age = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let top = root.join("target/release/libopencf_accel.so");
    let deps = root.join("target/release/deps/libopencf_accel.so");
    match (age(&top), age(&deps)) {
        (Some(a), Some(b)) if b > a => deps,
        (None, Some(_)) => deps,
        _ => top,
    }
}

/// The module, loaded and initialized on first use.
pub fn module() -> &'static Pkcs11 {
    static M: OnceLock<Pkcs11> = OnceLock::new();
    M.get_or_init(|| {
        let p = Pkcs11::new(library()).expect("load libopencf_accel.so");
        p.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
            .unwrap();
        p
    })
}

/// A new read-write session on the accelerator's slot.
pub fn session() -> Session {
    let p = module();
    let slot = p.get_slots_with_token().unwrap()[0];
    p.open_rw_session(slot).unwrap()
}

/// The start of a test that changes the provider's environment: the [`LOCK`], then `None` when
/// `here` says the feature under test is absent (it prints why), else a new session.
pub fn start(here: fn() -> bool) -> Option<(MutexGuard<'static, ()>, Session)> {
    let g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    here().then(|| (g, session()))
}

/// `target/release/NAME`, which must exist (the tests that load the framework).
#[allow(dead_code)]
pub fn release(name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap();
    let p = root.join("target/release").join(name);
    assert!(
        p.exists(),
        "{} missing: cargo build --release -p opencf-accel -p opencf -p opencf-softtoken -p cryptoadm",
        p.display()
    );
    p
}
