//! Helper process for `tests/durability.rs`: creates token objects until it is
//! killed (or has made `WRITER_COUNT`), or lists the objects on the token.
//!
//! Environment:
//! * `OPENCF_SOFTTOKEN_DIR`: the keystore (read by the module).
//! * `OPENCF_MODULE`: the module to load (default: the release softtoken).
//! * `WRITER_PIN`: the user PIN to use (default `durability-pin`). A token
//!   that still flags `CKF_USER_PIN_TO_BE_CHANGED` is logged in with the
//!   initial PIN `changeme` (or `WRITER_DEFAULT_PIN`) and given this PIN.
//! * `WRITER_PREFIX`: label prefix (default `w`); labels are `<prefix>-N`.
//! * `WRITER_COUNT`: objects to create, 0 = until killed (default 0).
//! * `WRITER_MODE`: `write` (default) or `verify`.
//!
//! Output (stdout, one line each, flushed):
//! * write: `ACK <label> <sha256 of CKA_VALUE, hex>` after each `C_CreateObject`
//!   that returned `CKR_OK`; objects alternate between `CKO_DATA` (private,
//!   1–300 random bytes) and AES-256 secret keys (extractable, not sensitive).
//! * verify: `OBJ <label> <sha256 hex>` for every object found (`-` for a
//!   value that cannot be read), then `DONE <count>`.
//!
//! Any failure is reported on stderr with exit status 1.
#![forbid(unsafe_code)]

use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::error::RvError;
use cryptoki::object::{Attribute, AttributeType, KeyType, ObjectClass};
use cryptoki::session::{Session, UserType};
use cryptoki::slot::Slot;
use cryptoki::types::AuthPin;
use pkcs11_tests::{describe, module_path, rv_of};
use std::io::Write;
use std::time::Duration;

fn main() {
    if let Err(e) = run() {
        eprintln!("writer: {e}");
        std::process::exit(1);
    }
}

fn env_or(name: &str, default: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => default.to_string(),
    }
}

fn run() -> Result<(), String> {
    let mode = env_or("WRITER_MODE", "write");
    let pin = env_or("WRITER_PIN", "durability-pin");
    let default_pin = env_or("WRITER_DEFAULT_PIN", "changeme");
    let prefix = env_or("WRITER_PREFIX", "w");
    let count: u64 = env_or("WRITER_COUNT", "0")
        .parse()
        .map_err(|_| "WRITER_COUNT is not a number".to_string())?;
    if std::env::var_os("OPENCF_SOFTTOKEN_DIR").is_none() {
        return Err("OPENCF_SOFTTOKEN_DIR is not set".into());
    }

    let module = module_path();
    let pkcs11 = Pkcs11::new(&module).map_err(|e| format!("loading {}: {e}", module.display()))?;
    pkcs11
        .initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
        .map_err(|e| format!("C_Initialize: {}", describe(&e)))?;
    let slot = *pkcs11
        .get_slots_with_token()
        .map_err(|e| format!("C_GetSlotList: {}", describe(&e)))?
        .first()
        .ok_or("no slot with a token")?;
    let session = pkcs11
        .open_rw_session(slot)
        .map_err(|e| format!("C_OpenSession: {}", describe(&e)))?;
    login(&pkcs11, slot, &session, &pin, &default_pin)?;

    let mut out = std::io::stdout().lock();
    match mode.as_str() {
        "write" => write(&session, &prefix, count, &mut out),
        "verify" => verify(&session, &mut out),
        other => Err(format!("WRITER_MODE={other}: expected write or verify")),
    }
}

/// Logs the user in with `pin`; if the token still has its initial PIN
/// (it flags CKF_USER_PIN_TO_BE_CHANGED), logs in with `default_pin` and
/// changes it to `pin` first. Several writers may race to do that on a fresh
/// keystore, so a lost race is retried.
fn login(
    pkcs11: &Pkcs11,
    slot: Slot,
    session: &Session,
    pin: &str,
    default_pin: &str,
) -> Result<(), String> {
    let user = |p: &str| session.login(UserType::User, Some(&AuthPin::from(p.to_string())));
    let to_be_changed = || -> Result<bool, String> {
        Ok(pkcs11
            .get_token_info(slot)
            .map_err(|e| format!("C_GetTokenInfo: {}", describe(&e)))?
            .user_pin_to_be_changed())
    };
    let mut last = String::new();
    for attempt in 0..20 {
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
        if to_be_changed()? {
            // Initial PIN: log in with it (an expired PIN may be refused with
            // CKR_PIN_EXPIRED; C_SetPIN works without a login then) and set ours.
            let logged_in = match user(default_pin) {
                Ok(()) => true,
                Err(e) if rv_of(&e) == Some(RvError::UserAlreadyLoggedIn) => true,
                Err(e) if rv_of(&e) == Some(RvError::PinExpired) => false,
                Err(e) if rv_of(&e) == Some(RvError::PinIncorrect) => {
                    // Another process changed it in the meantime.
                    last = format!("C_Login with the initial PIN: {}", describe(&e));
                    continue;
                }
                Err(e) => return Err(format!("C_Login with the initial PIN: {}", describe(&e))),
            };
            match session.set_pin(
                &AuthPin::from(default_pin.to_string()),
                &AuthPin::from(pin.to_string()),
            ) {
                Ok(()) => {}
                Err(e) if rv_of(&e) == Some(RvError::PinIncorrect) => {
                    last = format!("C_SetPIN: {}", describe(&e));
                    if logged_in {
                        let _ = session.logout();
                    }
                    continue;
                }
                Err(e) => return Err(format!("C_SetPIN: {}", describe(&e))),
            }
            if !logged_in {
                user(pin).map_err(|e| format!("C_Login after C_SetPIN: {}", describe(&e)))?;
            }
            return Ok(());
        }
        match user(pin) {
            Ok(()) => return Ok(()),
            Err(e) if rv_of(&e) == Some(RvError::UserAlreadyLoggedIn) => return Ok(()),
            // The flag may be set only once a login happened; try the initial PIN.
            Err(e) if rv_of(&e) == Some(RvError::PinIncorrect) && attempt == 0 => {
                match user(default_pin) {
                    Ok(()) => {
                        session
                            .set_pin(
                                &AuthPin::from(default_pin.to_string()),
                                &AuthPin::from(pin.to_string()),
                            )
                            .map_err(|e| format!("C_SetPIN: {}", describe(&e)))?;
                        return Ok(());
                    }
                    Err(e) => last = format!("C_Login with the initial PIN: {}", describe(&e)),
                }
            }
            Err(e) => return Err(format!("C_Login: {}", describe(&e))),
        }
    }
    Err(format!("could not log in: {last}"))
}

fn random(n: usize) -> Result<Vec<u8>, String> {
    let mut v = vec![0u8; n];
    openssl::rand::rand_bytes(&mut v).map_err(|e| format!("RAND_bytes: {e}"))?;
    Ok(v)
}

fn sha256_hex(v: &[u8]) -> String {
    hex::encode(openssl::sha::sha256(v))
}

fn write(session: &Session, prefix: &str, count: u64, out: &mut impl Write) -> Result<(), String> {
    let mut i: u64 = 0;
    while count == 0 || i < count {
        let label = format!("{prefix}-{i}");
        let (value, template) = if i.is_multiple_of(2) {
            let len = 1 + usize::from(u16::from_le_bytes(random(2)?.try_into().unwrap()) % 300);
            let value = random(len)?;
            let t = vec![
                Attribute::Class(ObjectClass::DATA),
                Attribute::Token(true),
                Attribute::Private(true),
                Attribute::Label(label.clone().into_bytes()),
                Attribute::Value(value.clone()),
            ];
            (value, t)
        } else {
            let value = random(32)?;
            let t = vec![
                Attribute::Class(ObjectClass::SECRET_KEY),
                Attribute::KeyType(KeyType::AES),
                Attribute::Token(true),
                Attribute::Value(value.clone()),
                Attribute::Sensitive(false),
                Attribute::Extractable(true),
                Attribute::Label(label.clone().into_bytes()),
            ];
            (value, t)
        };
        session
            .create_object(&template)
            .map_err(|e| format!("C_CreateObject {label}: {}", describe(&e)))?;
        writeln!(out, "ACK {label} {}", sha256_hex(&value))
            .and_then(|()| out.flush())
            .map_err(|e| format!("stdout: {e}"))?;
        i += 1;
    }
    Ok(())
}

fn verify(session: &Session, out: &mut impl Write) -> Result<(), String> {
    let handles = session
        .find_objects(&[])
        .map_err(|e| format!("C_FindObjects: {}", describe(&e)))?;
    let mut lines = String::new();
    for h in &handles {
        let attrs = session
            .get_attributes(*h, &[AttributeType::Label, AttributeType::Value])
            .map_err(|e| format!("C_GetAttributeValue: {}", describe(&e)))?;
        let mut label = String::from("-");
        let mut hash = String::from("-");
        for a in attrs {
            match a {
                Attribute::Label(l) => label = String::from_utf8_lossy(&l).replace(' ', "_"),
                Attribute::Value(v) => hash = sha256_hex(&v),
                _ => {}
            }
        }
        lines.push_str(&format!("OBJ {label} {hash}\n"));
    }
    lines.push_str(&format!("DONE {}\n", handles.len()));
    out.write_all(lines.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| format!("stdout: {e}"))
}
