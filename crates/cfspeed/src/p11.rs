//! Opening a PKCS#11 module, choosing its slot and logging in.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::error::{Error, RvError};
use cryptoki::session::{Session, UserType};
use cryptoki::slot::Slot;
use cryptoki::types::AuthPin;

use crate::raw::RawModule;

/// How to reach one token of one module.
#[derive(Debug, Clone)]
pub struct ModuleSpec {
    /// Path of the PKCS#11 library.
    pub path: PathBuf,
    /// Slot id; default: the first slot with an initialized token.
    pub slot: Option<u64>,
    /// Token label, used when no slot id is given.
    pub token: Option<String>,
    /// User PIN; without one the benchmarks run unauthenticated.
    pub pin: Option<String>,
    /// New user PIN to set when the token says the PIN must be changed.
    pub new_pin: Option<String>,
}

/// A loaded, initialized module with a logged-in anchor session.
pub struct Module {
    /// Short name used in the report ("ours", or the library's file stem).
    pub name: String,
    /// The library path.
    pub path: PathBuf,
    /// The `cryptoki` context (setup calls).
    pub pkcs11: Pkcs11,
    /// The function table (timed calls).
    pub raw: Arc<RawModule>,
    /// The slot in use.
    pub slot: Slot,
    /// `C_GetInfo` description and version.
    pub library: String,
    /// The token label.
    pub token_label: String,
    /// Holds the login and owns the session objects the benchmarks create.
    pub anchor: Session,
    /// Whether the user is logged in: keys are then private session
    /// objects, otherwise public ones (CKA_PRIVATE = FALSE).
    pub logged_in: bool,
    /// The slot's mechanism list.
    pub mechanisms: Vec<opencf_abi::sys::CK_MECHANISM_TYPE>,
}

/// A readable form of a `cryptoki` error.
pub fn describe(e: &Error) -> String {
    match e {
        Error::Pkcs11(rv, f) => format!("{f:?}: {rv}"),
        other => other.to_string(),
    }
}

fn rv_of(e: &Error) -> Option<RvError> {
    match e {
        Error::Pkcs11(rv, _) => Some(*rv),
        _ => None,
    }
}

impl Module {
    /// Loads `spec.path`, initializes it with `CKF_OS_LOCKING_OK`, picks the
    /// slot, opens a read-write session and logs the user in (changing an
    /// expired PIN when `spec.new_pin` is given).
    pub fn open(name: &str, spec: &ModuleSpec) -> Result<Module, String> {
        let path = &spec.path;
        let ctx = |what: &str, e: &Error| format!("{}: {what}: {}", path.display(), describe(e));
        let pkcs11 = Pkcs11::new(path).map_err(|e| ctx("loading", &e))?;
        match pkcs11.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK)) {
            Ok(()) => {}
            Err(e) if rv_of(&e) == Some(RvError::CryptokiAlreadyInitialized) => {}
            Err(e) => return Err(ctx("C_Initialize", &e)),
        }
        let raw = Arc::new(RawModule::open(path)?);
        let slot = choose_slot(&pkcs11, spec).map_err(|e| format!("{}: {e}", path.display()))?;
        let info = pkcs11
            .get_library_info()
            .map_err(|e| ctx("C_GetInfo", &e))?;
        let v = info.library_version();
        let library = format!(
            "{} {}.{}",
            info.library_description().trim(),
            v.major(),
            v.minor()
        );
        let token_info = pkcs11
            .get_token_info(slot)
            .map_err(|e| ctx("C_GetTokenInfo", &e))?;
        let anchor = pkcs11
            .open_rw_session(slot)
            .map_err(|e| ctx("C_OpenSession", &e))?;
        let logged_in = match &spec.pin {
            Some(pin) => {
                login(&pkcs11, slot, &anchor, pin, spec.new_pin.as_deref())
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                true
            }
            None => {
                let why = if token_info.user_pin_to_be_changed() {
                    "its user PIN must be changed first; "
                } else {
                    ""
                };
                let opts = if name == "ours" {
                    "--pin/--new-pin"
                } else {
                    "--vs-pin"
                };
                crate::report::note(format!(
                    "{name}: no PIN given ({why}see {opts}): not logged in, keys are public \
                     session objects"
                ));
                false
            }
        };
        let mechanisms = raw
            .provider()
            .get_mechanism_list(slot.id() as opencf_abi::sys::CK_SLOT_ID)
            .map_err(|rv| {
                format!(
                    "{}: C_GetMechanismList returned {}",
                    path.display(),
                    crate::raw::rv_name(rv)
                )
            })?;
        Ok(Module {
            name: name.to_string(),
            path: path.clone(),
            pkcs11,
            raw,
            slot,
            library,
            token_label: token_info.label().trim().to_string(),
            anchor,
            logged_in,
            mechanisms,
        })
    }

    /// Opens another read-write session on the module's slot (the login is
    /// shared by every session of the process).
    pub fn session(&self) -> Result<Session, String> {
        self.pkcs11
            .open_rw_session(self.slot)
            .map_err(|e| format!("{}: C_OpenSession: {}", self.name, describe(&e)))
    }
}

fn login(
    pkcs11: &Pkcs11,
    slot: Slot,
    session: &Session,
    pin: &str,
    new_pin: Option<&str>,
) -> Result<(), String> {
    let mut logged_in = true;
    let mut expired = false;
    match session.login(UserType::User, Some(&AuthPin::from(pin.to_string()))) {
        Ok(()) => {}
        Err(e) if rv_of(&e) == Some(RvError::UserAlreadyLoggedIn) => {}
        Err(e) if rv_of(&e) == Some(RvError::PinExpired) => {
            logged_in = false;
            expired = true;
        }
        Err(e) => return Err(format!("C_Login: {}", describe(&e))),
    }
    let to_change = expired
        || pkcs11
            .get_token_info(slot)
            .map(|i| i.user_pin_to_be_changed())
            .unwrap_or(false);
    if to_change {
        let Some(new_pin) = new_pin else {
            return Err("the user PIN has expired and must be changed first \
                 (pktool setpin, pkcs11-tool --change-pin, or cfspeed --new-pin NEW)"
                .into());
        };
        session
            .set_pin(
                &AuthPin::from(pin.to_string()),
                &AuthPin::from(new_pin.to_string()),
            )
            .map_err(|e| format!("C_SetPIN: {}", describe(&e)))?;
        if !logged_in {
            session
                .login(UserType::User, Some(&AuthPin::from(new_pin.to_string())))
                .map_err(|e| format!("C_Login with the new PIN: {}", describe(&e)))?;
        }
        eprintln!("cfspeed: the user PIN was expired; it has been changed as --new-pin asked");
    }
    Ok(())
}

fn choose_slot(pkcs11: &Pkcs11, spec: &ModuleSpec) -> Result<Slot, String> {
    let slots = pkcs11
        .get_slots_with_initialized_token()
        .map_err(|e| format!("C_GetSlotList: {}", describe(&e)))?;
    if let Some(id) = spec.slot {
        let all = pkcs11
            .get_slots_with_token()
            .map_err(|e| format!("C_GetSlotList: {}", describe(&e)))?;
        return all
            .into_iter()
            .find(|s| s.id() == id)
            .ok_or_else(|| format!("no slot with id {id} holds a token"));
    }
    if let Some(label) = &spec.token {
        for s in &slots {
            let info = pkcs11
                .get_token_info(*s)
                .map_err(|e| format!("C_GetTokenInfo: {}", describe(&e)))?;
            if info.label().trim() == label.trim() {
                return Ok(*s);
            }
        }
        return Err(format!("no token labelled {label:?}"));
    }
    slots
        .first()
        .copied()
        .ok_or_else(|| "no slot holds an initialized token".into())
}

/// The report name of a module: its file stem without `lib`
/// (`/usr/lib/softhsm/libsofthsm2.so` → `softhsm2`).
pub fn short_name(path: &Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "module".into());
    stem.strip_prefix("lib").unwrap_or(&stem).to_string()
}
