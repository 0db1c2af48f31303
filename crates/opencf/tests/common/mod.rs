//! Helpers shared by the framework's integration tests: where the built modules are, and fresh
//! directories for keystores and configurations.

#![allow(dead_code)] // each test binary uses its own subset

use std::path::{Path, PathBuf};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf()
}

/// A module or program in `target/release`, which must have been built.
pub fn release(name: &str) -> PathBuf {
    let p = root().join("target/release").join(name);
    assert!(
        p.exists(),
        "{} missing: cargo build --release -p opencf-softtoken -p opencf-faulty -p opencf -p cryptoadm",
        p.display()
    );
    p
}

/// libopencf.so: `cargo test` rebuilds `target/release/deps/libopencf.so` but only
/// `cargo build` refreshes `target/release/libopencf.so`, so take the newer of the two.
pub fn framework_lib() -> PathBuf {
    let top = root().join("target/release/libopencf.so");
    let deps = root().join("target/release/deps/libopencf.so");
    let age = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match (age(&top), age(&deps)) {
        (Some(a), Some(b)) if b > a => deps,
        (None, Some(_)) => deps,
        _ => release("libopencf.so"),
    }
}

/// A new directory under the test target's temporary directory, named after `tag`, the
/// process and the time.
pub fn fresh_dir(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{tag}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A `[[provider]]` entry of a configuration file.
pub fn provider(name: &str, module: &Path) -> String {
    format!(
        "\n[[provider]]\nname = \"{name}\"\nmodule = \"{}\"\n",
        module.display()
    )
}

/// This test binary run again as a child process, filtered to the test `name`, with `var` set
/// to 1 (the child test does its work only where it is) and without the environment's
/// metaslot overrides.
pub fn child_test(name: &str, var: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(var, "1")
        .env_remove("OPENCF_METASLOT_ENABLED")
        .env_remove("OPENCF_METASLOT_KEYSTORE");
    cmd
}

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The slot with framework slot ID `id` of an initialized `libopencf.so`.
pub fn slot(p: &cryptoki::context::Pkcs11, id: u64) -> cryptoki::slot::Slot {
    p.get_all_slots()
        .unwrap()
        .into_iter()
        .find(|s| s.id() == id)
        .unwrap_or_else(|| panic!("no slot {id}"))
}

/// Slot 0, the metaslot.
pub fn slot0(p: &cryptoki::context::Pkcs11) -> cryptoki::slot::Slot {
    slot(p, 0)
}
