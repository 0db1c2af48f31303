//! Fork: `pkcs11-tool --test-fork` (OpenSC) initializes libopencf.so, forks, and calls
//! `C_Initialize` in the child, which must re-initialize the framework and its providers.
//! Skipped, with a note, where `pkcs11-tool` is not installed.
//!
//! Build first: `cargo build --release -p opencf-softtoken -p opencf`.

mod common;
use common::{framework_lib, provider, root};

use std::path::Path;
use std::process::Command;

#[test]
fn pkcs11_tool_test_fork() {
    if Command::new("pkcs11-tool").arg("--help").output().is_err() {
        eprintln!("pkcs11-tool not installed: fork test skipped");
        return;
    }
    let softtoken = root().join("target/release/libopencf_softtoken.so");
    assert!(
        softtoken.exists(),
        "cargo build --release -p opencf-softtoken"
    );
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "fork-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let ks = dir.join("softtoken");
    std::fs::create_dir_all(&ks).unwrap();
    let conf = dir.join("opencf.toml");
    std::fs::write(
        &conf,
        "[metaslot]\nenabled = true\nkeystore = \"OpenCF Softtoken\"\n".to_string()
            + &provider("softtoken", &softtoken),
    )
    .unwrap();
    let out = Command::new("pkcs11-tool")
        .arg("--module")
        .arg(framework_lib())
        .arg("--test-fork")
        .env("OPENCF_CONF", &conf)
        .env("OPENCF_SOFTTOKEN_DIR", &ks)
        .env_remove("OPENCF_METASLOT_ENABLED")
        .env_remove("OPENCF_METASLOT_KEYSTORE")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "pkcs11-tool --test-fork:\n{text}");
    assert!(
        text.contains("Calling C_Initialize in forked child process"),
        "{text}"
    );
    assert!(!text.to_lowercase().contains("error"), "{text}");
}
