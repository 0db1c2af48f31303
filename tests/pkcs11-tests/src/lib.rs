//! Shared helpers for the integration tests that drive a built PKCS#11
//! module through its C ABI, with the `cryptoki` crate as the consumer.
//!
//! * [`module_path()`], [`vectors_dir()`]: where the module and the vectors are.
//! * [`TestToken`]: loads the module once, points the softtoken at a fresh
//!   keystore, logs the user in (changing the initial PIN when the token asks
//!   for it) and hands out sessions.
//! * [`keys`]: object templates built from vector key material.
//! * [`der`]: the DER pieces PKCS#11 attributes need.
//! * [`wycheproof`]: serde models of the vector files; [`report`]: counting.
//!
//! Environment:
//! * `OPENCF_MODULE`: module to load (default
//!   `<workspace>/target/release/libopencf_softtoken.so`).
//! * `OPENCF_VECTORS`: Wycheproof directory (default
//!   `<workspace>/../shared/vectors/wycheproof`).
//! * `OPENCF_TEST_SLOT`: slot to use, a slot id or an index into the list of
//!   slots with a token (default: the first slot with a token).
//! * `OPENCF_TEST_PIN`: user PIN (default `changeme`, the fresh softtoken's).
//! * `OPENCF_TEST_NEW_PIN`: PIN to set when the token flags
//!   `CKF_USER_PIN_TO_BE_CHANGED` (default `opencf-test-pin`).
//!
//! `OPENCF_SOFTTOKEN_DIR` is always set to a fresh directory before the
//! module is initialized, so each test process gets a new softtoken keystore.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod der;
pub mod keys;
pub mod report;
pub mod wycheproof;

use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::error::{Error, RvError};
use cryptoki::session::{Session, UserType};
use cryptoki::slot::Slot;
use cryptoki::types::AuthPin;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// The workspace root (two levels above this crate's manifest).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .nth(2)
        .expect("tests/pkcs11-tests sits two levels below the workspace root")
        .to_path_buf()
}

/// The module under test: `$OPENCF_MODULE`, else the release softtoken.
pub fn module_path() -> PathBuf {
    match std::env::var_os("OPENCF_MODULE") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => workspace_root().join("target/release/libopencf_softtoken.so"),
    }
}

/// The Wycheproof vector directory: `$OPENCF_VECTORS`, else
/// `<workspace>/../shared/vectors/wycheproof`.
pub fn vectors_dir() -> PathBuf {
    match std::env::var_os("OPENCF_VECTORS") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => workspace_root().join("../shared/vectors/wycheproof"),
    }
}

/// Short text for a cryptoki error: the `CKR_*` name and the function.
pub fn describe(e: &Error) -> String {
    match e {
        Error::Pkcs11(rv, f) => format!("{rv:?} from {f:?}"),
        other => format!("{other:?}"),
    }
}

/// The `CKR_*` code of an error, if it came from the module.
pub fn rv_of(e: &Error) -> Option<RvError> {
    match e {
        Error::Pkcs11(rv, _) => Some(*rv),
        _ => None,
    }
}

/// A loaded, initialized module with a logged-in user on one token.
///
/// Create it once per test binary (e.g. in a `OnceLock`): PKCS#11 allows one
/// `C_Initialize` per process. Sessions from [`TestToken::session`] share the
/// login; an anchor session is kept open for the life of the process so the
/// login does not end when the last test session closes.
pub struct TestToken {
    /// The cryptoki context.
    pub pkcs11: Pkcs11,
    /// The slot in use.
    pub slot: Slot,
    /// The module that was loaded.
    pub module: PathBuf,
    /// The keystore directory given to the softtoken.
    pub keystore_dir: PathBuf,
    _anchor: Mutex<Session>,
}

impl TestToken {
    /// Loads the module, gives it a fresh keystore directory under
    /// `tmp_base`, initializes it for OS locking, logs the user in and, if the
    /// token asks for it, changes the user PIN.
    ///
    /// `before_init` runs after the library is loaded and before cryptoki's
    /// `C_Initialize`; a test that also talks to the module through a second
    /// binding uses it to load that binding. If the module turns out to be
    /// initialized already at that point, it is finalized and initialized
    /// again with OS locking, so the cryptoki arguments are the ones in force.
    pub fn init(tmp_base: &Path, before_init: impl FnOnce(&Path)) -> Result<TestToken, String> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        remove_stale_keystores(tmp_base);
        let keystore_dir = tmp_base.join(format!("softtoken-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&keystore_dir)
            .map_err(|e| format!("creating {}: {e}", keystore_dir.display()))?;
        // Before the module is initialized: it reads the variable then.
        std::env::set_var("OPENCF_SOFTTOKEN_DIR", &keystore_dir);

        let module = module_path();
        if !module.exists() {
            return Err(format!(
                "module {} not found: build it with `cargo build --release -p opencf-softtoken` \
                 or set OPENCF_MODULE",
                module.display()
            ));
        }
        let pkcs11 =
            Pkcs11::new(&module).map_err(|e| format!("loading {}: {e}", module.display()))?;
        before_init(&module);
        let args = || CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK);
        match pkcs11.initialize(args()) {
            Ok(()) => {}
            Err(e) if rv_of(&e) == Some(RvError::CryptokiAlreadyInitialized) => {
                pkcs11
                    .clone()
                    .finalize()
                    .map_err(|e| format!("C_Finalize: {}", describe(&e)))?;
                pkcs11
                    .initialize(args())
                    .map_err(|e| format!("C_Initialize: {}", describe(&e)))?;
            }
            Err(e) => return Err(format!("C_Initialize: {}", describe(&e))),
        }

        let slot = choose_slot(&pkcs11)?;
        let anchor = pkcs11
            .open_rw_session(slot)
            .map_err(|e| format!("C_OpenSession: {}", describe(&e)))?;
        let pin = std::env::var("OPENCF_TEST_PIN").unwrap_or_else(|_| "changeme".into());
        // A token whose PIN has expired may accept the login and then answer
        // CKR_PIN_EXPIRED to object calls (flagging CKF_USER_PIN_TO_BE_CHANGED),
        // or refuse the login itself with CKR_PIN_EXPIRED; handle both.
        let mut logged_in = true;
        let mut expired = false;
        match anchor.login(UserType::User, Some(&AuthPin::from(pin.clone()))) {
            Ok(()) => {}
            Err(e) if rv_of(&e) == Some(RvError::UserAlreadyLoggedIn) => {}
            Err(e) if rv_of(&e) == Some(RvError::PinExpired) => {
                logged_in = false;
                expired = true;
            }
            Err(e) => return Err(format!("C_Login: {}", describe(&e))),
        }
        let info = pkcs11
            .get_token_info(slot)
            .map_err(|e| format!("C_GetTokenInfo: {}", describe(&e)))?;
        if expired || info.user_pin_to_be_changed() {
            let new_pin =
                std::env::var("OPENCF_TEST_NEW_PIN").unwrap_or_else(|_| "opencf-test-pin".into());
            anchor
                .set_pin(&AuthPin::from(pin), &AuthPin::from(new_pin.clone()))
                .map_err(|e| format!("C_SetPIN: {}", describe(&e)))?;
            if !logged_in {
                anchor
                    .login(UserType::User, Some(&AuthPin::from(new_pin)))
                    .map_err(|e| format!("C_Login with the new PIN: {}", describe(&e)))?;
            }
        }
        Ok(TestToken {
            pkcs11,
            slot,
            module,
            keystore_dir,
            _anchor: Mutex::new(anchor),
        })
    }

    /// Opens a read-write session on the test slot (the user is logged in).
    pub fn session(&self) -> Session {
        self.pkcs11
            .open_rw_session(self.slot)
            .unwrap_or_else(|e| panic!("C_OpenSession: {}", describe(&e)))
    }
}

/// Removes keystore directories (`softtoken-<pid>-<time>`) left in
/// `tmp_base` by test processes that are no longer running.
fn remove_stale_keystores(tmp_base: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp_base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("softtoken-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Picks the slot named by `OPENCF_TEST_SLOT` (an id, or an index into the
/// slots with a token), else the first slot with a token.
fn choose_slot(pkcs11: &Pkcs11) -> Result<Slot, String> {
    let slots = pkcs11
        .get_slots_with_token()
        .map_err(|e| format!("C_GetSlotList: {}", describe(&e)))?;
    if slots.is_empty() {
        return Err("the module reports no slot with a token".into());
    }
    let Ok(wanted) = std::env::var("OPENCF_TEST_SLOT") else {
        return Ok(slots[0]);
    };
    let n: u64 = wanted
        .trim()
        .parse()
        .map_err(|_| format!("OPENCF_TEST_SLOT={wanted} is not a number"))?;
    if let Some(s) = slots.iter().find(|s| s.id() == n) {
        return Ok(*s);
    }
    usize::try_from(n)
        .ok()
        .and_then(|i| slots.get(i))
        .copied()
        .ok_or_else(|| format!("OPENCF_TEST_SLOT={wanted}: no such slot id or index"))
}
