//! Stable slot IDs: two processes with the same config see the same slot ID → token map, and
//! appending a provider to the config leaves the IDs of the providers before it unchanged.
//!
//! Each process is this test binary run again with `OPENCF_SLOTS_CHILD` set, filtered to
//! [`slots_child`], which prints one `SLOT <id> <token label>` line per slot.
//!
//! Build first: `cargo build --release -p opencf-softtoken -p opencf-faulty -p opencf`.

mod common;
use common::{child_test, framework_lib, fresh_dir, provider, release};

use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Not a test on its own: in a child process (`OPENCF_SLOTS_CHILD` set) it loads the framework
/// with the environment it was given and prints its slots.
#[test]
fn slots_child() {
    if std::env::var_os("OPENCF_SLOTS_CHILD").is_none() {
        return;
    }
    let p = Pkcs11::new(framework_lib()).expect("load libopencf.so");
    p.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
        .expect("C_Initialize");
    for s in p.get_all_slots().unwrap() {
        let label = match p.get_token_info(s) {
            Ok(t) => t.label().to_string(),
            Err(_) => "<no token>".to_string(),
        };
        let desc = p.get_slot_info(s).unwrap().slot_description().to_string();
        // A line of its own: libtest has already printed "test slots_child ... ".
        println!("\nSLOT {} {label} | {desc}", s.id());
    }
    p.finalize().unwrap();
}

/// Runs [`slots_child`] in a new process over `conf` and returns slot ID → "label | slot".
fn slots_in_child(conf: &Path, keystore: &Path) -> BTreeMap<u64, String> {
    let mut cmd = child_test("slots_child", "OPENCF_SLOTS_CHILD");
    cmd.env("OPENCF_CONF", conf);
    slots_in_child_with(cmd, keystore)
}

/// A fresh directory named after `tag` and a configuration there with the software token
/// alone.
fn softtoken_alone(tag: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = fresh_dir(tag);
    let conf = dir.join("opencf.toml");
    std::fs::write(
        &conf,
        provider("softtoken", &release("libopencf_softtoken.so")),
    )
    .unwrap();
    (dir, conf)
}

/// Runs [`slots_child`] over `conf` and `keystore` where its `C_Initialize` must fail; its
/// standard error.
fn failed_child(conf: &Path, keystore: &Path) -> String {
    let out = child_test("slots_child", "OPENCF_SLOTS_CHILD")
        .env("OPENCF_CONF", conf)
        .env("OPENCF_SOFTTOKEN_DIR", keystore)
        .output()
        .unwrap();
    assert!(!out.status.success(), "C_Initialize must fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// [`slots_in_child`] with the configuration environment already set on `cmd`.
fn slots_in_child_with(mut cmd: Command, keystore: &Path) -> BTreeMap<u64, String> {
    let out = cmd
        .env("OPENCF_SOFTTOKEN_DIR", keystore)
        .env("OPENCF_FAULTY_INNER", release("libopencf_softtoken.so"))
        .env_remove("OPENCF_FAULTY_MODE")
        .env_remove("OPENCF_FAULTY_SWITCH")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let map: BTreeMap<u64, String> = stdout
        .lines()
        .filter_map(|l| l.find("SLOT ").map(|at| &l[at + 5..]))
        .map(|l| {
            let (id, rest) = l.split_once(' ').unwrap();
            (id.parse().unwrap(), rest.to_string())
        })
        .collect();
    assert!(!map.is_empty(), "child listed no slots:\n{stdout}");
    map
}

#[test]
fn slot_ids_are_stable_across_processes_and_appends() {
    let dir = fresh_dir("slots-stable");
    let ks = dir.join("softtoken");
    std::fs::create_dir_all(&ks).unwrap();
    let head = "[metaslot]\nenabled = true\nkeystore = \"OpenCF Softtoken\"\n".to_string();
    let two = head.clone()
        + &provider("softtoken", &release("libopencf_softtoken.so"))
        + &provider("faulty", &release("libopencf_faulty.so"));
    let conf = dir.join("opencf.toml");
    std::fs::write(&conf, &two).unwrap();

    let first = slots_in_child(&conf, &ks);
    let second = slots_in_child(&conf, &ks);
    assert_eq!(first, second, "same config, same slot map in two processes");
    assert!(
        first
            .get(&0)
            .is_some_and(|v| v.starts_with("OpenCF Metaslot")),
        "{first:?}"
    );
    assert!(
        first.values().any(|v| v.starts_with("OpenCF Softtoken"))
            && first.values().any(|v| v.starts_with("OpenCF Faulty")),
        "{first:?}"
    );

    // A provider appended at the end (cryptoadm install without before=): the existing IDs
    // keep their tokens; the new provider's slots come after them.
    let faulty2 = dir.join("libopencf_faulty2.so");
    std::fs::copy(release("libopencf_faulty.so"), &faulty2).unwrap();
    std::fs::write(&conf, two + &provider("faulty2", &faulty2)).unwrap();
    let third = slots_in_child(&conf, &ks);
    for (id, tok) in &first {
        assert_eq!(
            third.get(id),
            Some(tok),
            "slot {id} kept its token after the append: before {first:?}, after {third:?}"
        );
    }
    let max_before = *first.keys().max().unwrap();
    let added: Vec<_> = third.keys().filter(|id| **id > max_before).collect();
    assert!(!added.is_empty(), "the new provider's slots: {third:?}");
    assert_eq!(
        third.len(),
        first.len() + added.len(),
        "{first:?} → {third:?}"
    );
}

/// With no configuration file, an accelerator module beside libopencf.so that is not a usable
/// PKCS#11 module is skipped with a warning (the built-in default names it only because it
/// was found); the software token serves alone. A configuration that names the same module
/// fails `C_Initialize` instead.
#[test]
fn broken_accelerator_of_the_default_is_skipped() {
    if Path::new("/etc/opencf/opencf.toml").exists() {
        eprintln!("skipped: /etc/opencf/opencf.toml exists (this test needs the built-in default)");
        return;
    }
    let dir = fresh_dir("slots-broken-accel");
    let ks = dir.join("softtoken");
    let lib = dir.join("lib");
    std::fs::create_dir_all(&ks).unwrap();
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::copy(
        release("libopencf_softtoken.so"),
        lib.join("libopencf_softtoken.so"),
    )
    .unwrap();
    std::fs::write(lib.join("libopencf_accel.so"), b"not a shared object\n").unwrap();
    let mut cmd = child_test("slots_child", "OPENCF_SLOTS_CHILD");
    cmd.env("OPENCF_LIB_DIR", &lib)
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .env_remove("OPENCF_CONF");
    let slots = slots_in_child_with(cmd, &ks);
    assert!(slots[&0].starts_with("OpenCF Metaslot"), "{slots:?}");
    assert!(slots[&1].starts_with("OpenCF Softtoken"), "{slots:?}");
    assert_eq!(slots.len(), 3, "metaslot, softtoken, spare slot: {slots:?}");

    // Named in a file, the same module is an error.
    let conf = dir.join("opencf.toml");
    std::fs::write(
        &conf,
        provider("accel", &lib.join("libopencf_accel.so"))
            + &provider("softtoken", &lib.join("libopencf_softtoken.so")),
    )
    .unwrap();
    let err = failed_child(&conf, &ks);
    assert!(
        err.contains("provider \"accel\""),
        "message names the provider: {err}"
    );
}

/// A provider that fails `C_Initialize` fails the framework's, with a message on standard
/// error that names the provider and its answer by its `CKR_*` name (here the software token,
/// whose keystore directory is a regular file).
#[test]
fn a_failed_provider_is_named_with_its_answer() {
    let (dir, conf) = softtoken_alone("slots-failed-provider");
    let not_a_dir = dir.join("keystore-file");
    std::fs::write(&not_a_dir, b"x").unwrap();
    let err = failed_child(&conf, &not_a_dir);
    assert!(
        err.contains("provider \"softtoken\"")
            && err.contains("C_Initialize failed: CKR_DEVICE_ERROR")
            && err.contains("Not a directory"),
        "{err}"
    );
}

/// `OPENCF_SOFTTOKEN_DIR` set but empty (a script's variable that was never set) fails the
/// software token with a message, instead of using the user's own keystore without a word.
#[test]
fn an_empty_keystore_variable_is_refused() {
    let (dir, conf) = softtoken_alone("slots-empty-keystore-var");
    let data = dir.join("xdg-data");
    let out = child_test("slots_child", "OPENCF_SLOTS_CHILD")
        .env("OPENCF_CONF", &conf)
        .env("OPENCF_SOFTTOKEN_DIR", "")
        .env("XDG_DATA_HOME", &data)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "C_Initialize must fail");
    assert!(
        err.contains("OPENCF_SOFTTOKEN_DIR is set but empty")
            && err.contains("C_Initialize failed: CKR_GENERAL_ERROR"),
        "{err}"
    );
    assert!(!data.exists(), "no keystore made in the default place");
}

/// A keystore file that is a symbolic link (planted in a keystore directory others can write
/// to) fails the software token, and the file it names is not touched: its mode stays, and
/// it is not made into a keystore.
#[test]
fn a_keystore_file_that_is_a_link_is_not_followed() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, conf) = softtoken_alone("slots-keystore-link");
    let keystore = dir.join("keystore");
    std::fs::create_dir(&keystore).unwrap();
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, b"").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::symlink(&victim, keystore.join("token0.sqlite")).unwrap();
    let err = failed_child(&conf, &keystore);
    assert!(
        err.contains("C_Initialize failed: CKR_DEVICE_ERROR") && err.contains("is a symbolic link"),
        "{err}"
    );
    let meta = std::fs::metadata(&victim).unwrap();
    assert_eq!(
        meta.permissions().mode() & 0o777,
        0o644,
        "the file keeps its mode"
    );
    assert_eq!(meta.len(), 0, "the empty file was not made into a keystore");
}
