//! The software token linked into `libopencf.so`: when the configuration names the
//! `libopencf_softtoken.so` installed beside the framework, slot 0 runs the copy linked in and
//! the module file is never loaded; `OPENCF_SOFTTOKEN_LINKED=0` loads it like any other
//! provider. Both ways serve the same keystore with the same results.
//!
//! Each process is this test binary run again with `OPENCF_LINKED_CHILD` set, filtered to
//! [`linked_child`].
//!
//! Build first: `cargo build --release -p opencf-softtoken -p opencf`.

mod common;
use common::{child_test, framework_lib, fresh_dir, hex, provider, release};

use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::mechanism::aead::GcmParams;
use cryptoki::mechanism::Mechanism;
use cryptoki::object::Attribute;
use cryptoki::session::UserType;
use cryptoki::types::AuthPin;

/// Not a test on its own: in a child process it uses slot 0 (a token object made by an
/// earlier child, a new session key, AES-GCM both ways) and prints whether the software
/// token's module file is mapped into the process.
#[test]
fn linked_child() {
    if std::env::var_os("OPENCF_LINKED_CHILD").is_none() {
        return;
    }
    let p = Pkcs11::new(framework_lib()).expect("load libopencf.so");
    p.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
        .expect("C_Initialize");
    let slot = p.get_all_slots().unwrap()[0];
    let s = p.open_rw_session(slot).unwrap();
    let pin = AuthPin::new("linked-pin-2468".into());
    if s.login(UserType::User, Some(&pin)).is_err() {
        s.login(UserType::User, Some(&AuthPin::new("changeme".into())))
            .unwrap();
        s.set_pin(&AuthPin::new("changeme".into()), &pin).unwrap();
    }
    let label = "linked-test-key";
    let found = s
        .find_objects(&[Attribute::Label(label.as_bytes().to_vec())])
        .unwrap();
    let key = match found.first() {
        Some(k) => *k,
        None => s
            .generate_key(
                &Mechanism::AesKeyGen,
                &[
                    Attribute::Token(true),
                    Attribute::ValueLen(16.into()),
                    Attribute::Label(label.as_bytes().to_vec()),
                    Attribute::Encrypt(true),
                    Attribute::Decrypt(true),
                ],
            )
            .unwrap(),
    };
    let mut iv = [7u8; 12];
    let aad = b"linked";
    let data = b"sixteen byte msg";
    let ct = s
        .encrypt(
            &Mechanism::AesGcm(GcmParams::new(&mut iv, aad, 128.into()).unwrap()),
            key,
            data,
        )
        .unwrap();
    let back = s
        .decrypt(
            &Mechanism::AesGcm(GcmParams::new(&mut iv, aad, 128.into()).unwrap()),
            key,
            &ct,
        )
        .unwrap();
    assert_eq!(back, data);
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let mapped = maps.contains("libopencf_softtoken.so");
    println!("\nCIPHERTEXT {}", hex(&ct));
    println!("\nMODULE_MAPPED {mapped}");
    p.finalize().unwrap();
}

/// Runs [`linked_child`] over `conf` and `keystore` with `linked` as
/// `OPENCF_SOFTTOKEN_LINKED` (unset for `None`); returns (module mapped, ciphertext).
fn child(
    conf: &std::path::Path,
    keystore: &std::path::Path,
    linked: Option<&str>,
) -> (bool, String) {
    let mut cmd = child_test("linked_child", "OPENCF_LINKED_CHILD");
    cmd.env("OPENCF_CONF", conf)
        .env("OPENCF_SOFTTOKEN_DIR", keystore);
    match linked {
        Some(v) => cmd.env("OPENCF_SOFTTOKEN_LINKED", v),
        None => cmd.env_remove("OPENCF_SOFTTOKEN_LINKED"),
    };
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let field = |name: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in:\n{stdout}"))
            .trim()
            .to_string()
    };
    (field("MODULE_MAPPED ") == "true", field("CIPHERTEXT "))
}

#[test]
fn softtoken_beside_the_framework_runs_linked_and_the_module_file_otherwise() {
    let dir = fresh_dir("linked");
    let keystore = dir.join("ks");
    std::fs::create_dir_all(&keystore).unwrap();
    // The module named by its path beside libopencf.so (the framework's own directory).
    let lib_dir = framework_lib().parent().unwrap().to_path_buf();
    let beside = lib_dir.join("libopencf_softtoken.so");
    assert!(beside.exists(), "{} missing", beside.display());
    let conf = dir.join("opencf.toml");
    std::fs::write(&conf, provider("softtoken", &beside)).unwrap();

    // Linked: the module file is never mapped; the token key is made here.
    let (mapped, ct_linked) = child(&conf, &keystore, None);
    assert!(
        !mapped,
        "the software token module was loaded although it is linked in"
    );
    // Turned off: the same module file loaded with dlopen, the same keystore and key.
    let (mapped, ct_loaded) = child(&conf, &keystore, Some("0"));
    assert!(
        mapped,
        "OPENCF_SOFTTOKEN_LINKED=0 did not load the module file"
    );
    assert_eq!(
        ct_linked, ct_loaded,
        "the two ways disagree on the same key and IV"
    );

    // A copy of the module elsewhere is another module: loaded, not linked.
    let other = dir.join("lib");
    std::fs::create_dir_all(&other).unwrap();
    let copy = other.join("libopencf_softtoken.so");
    std::fs::copy(release("libopencf_softtoken.so"), &copy).unwrap();
    let conf2 = dir.join("opencf-copy.toml");
    std::fs::write(&conf2, provider("softtoken", &copy)).unwrap();
    let (mapped, ct_copy) = child(&conf2, &keystore, None);
    assert!(
        mapped,
        "a softtoken module elsewhere must be loaded from its file"
    );
    assert_eq!(ct_linked, ct_copy);
}
