//! An application that unloads `libopencf.so` (`dlclose`) without `C_Finalize`, from a thread
//! that then ends: the process goes on. The modules stay mapped (`-z nodelete`,
//! `crates/opencf/build.rs`): OpenSSL, linked into each, leaves a destructor to run when a
//! thread that used it ends, and the accelerator's workers run until `C_Finalize`. Loaded
//! again, the library is still initialized, as PKCS#11 has it without `C_Finalize`.
//!
//! Each process is this test binary run again with `OPENCF_UNLOAD_CHILD` set, filtered to
//! [`unload_child`]: a crash there fails the test instead of ending the test binary.
//!
//! Build first: `cargo build --release --workspace`.

mod common;
use common::{child_test, framework_lib, fresh_dir, provider, release, slot0};

use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::error::{Error, RvError};
use cryptoki::mechanism::Mechanism;

fn initialize(p: &Pkcs11) -> Result<(), Error> {
    p.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
}

/// Uses slot 0: a digest and random bytes, through OpenSSL in the calling thread.
fn use_slot_0(p: &Pkcs11) {
    let s = p.open_rw_session(slot0(p)).unwrap();
    assert_eq!(s.digest(&Mechanism::Sha256, b"abc").unwrap().len(), 32);
    assert_eq!(s.generate_random_vec(16).unwrap().len(), 16);
}

/// Not a test on its own: in a child process, a thread loads and initializes the library
/// (which opens the keystore, through OpenSSL) and unloads it without `C_Finalize`, then
/// ends; the library is loaded again and answers.
#[test]
fn unload_child() {
    if std::env::var_os("OPENCF_UNLOAD_CHILD").is_none() {
        return;
    }
    std::thread::spawn(|| {
        let p = Pkcs11::new(framework_lib()).expect("load libopencf.so");
        initialize(&p).expect("C_Initialize");
        drop(p);
    })
    .join()
    .expect("the thread that unloaded the library");
    println!("\nTHREAD_ENDED");
    let p = Pkcs11::new(framework_lib()).expect("load libopencf.so again");
    match initialize(&p) {
        Err(Error::Pkcs11(RvError::CryptokiAlreadyInitialized, _)) => {}
        other => panic!("C_Initialize without C_Finalize before: {other:?}"),
    }
    use_slot_0(&p);
    p.finalize().expect("C_Finalize");
    let p = Pkcs11::new(framework_lib()).unwrap();
    initialize(&p).expect("C_Initialize after C_Finalize");
    use_slot_0(&p);
    p.finalize().unwrap();
    println!("\nRELOADED");
}

#[test]
fn unloading_without_c_finalize_leaves_the_process_running() {
    let dir = fresh_dir("unload");
    let conf = dir.join("opencf.toml");
    // The accelerator first, the software token (the default keystore) after it.
    std::fs::write(
        &conf,
        provider("accel", &release("libopencf_accel.so"))
            + &provider("softtoken", &release("libopencf_softtoken.so")),
    )
    .unwrap();
    // The software token linked in, then loaded from its own module file.
    for linked in ["1", "0"] {
        let out = child_test("unload_child", "OPENCF_UNLOAD_CHILD")
            .env("OPENCF_CONF", &conf)
            .env("OPENCF_SOFTTOKEN_DIR", dir.join(format!("ks-{linked}")))
            .env("OPENCF_SOFTTOKEN_LINKED", linked)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("THREAD_ENDED") && stdout.contains("RELOADED"),
            "OPENCF_SOFTTOKEN_LINKED={linked}: the child ended with {}:\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
