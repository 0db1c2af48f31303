//! Errors and the exit codes they map to (documented in docs/PKTOOL.md).

use std::fmt;

/// Exit code of a token or PKCS#11 failure.
pub const EXIT_TOKEN: i32 = 3;
/// Exit code of a file, I/O or file-format failure.
pub const EXIT_FILE: i32 = 4;
/// Exit code when the named object is missing.
pub const EXIT_OBJECT: i32 = 5;
/// Exit code when the name matches several objects (or tokens).
pub const EXIT_AMBIGUOUS: i32 = 6;
/// Exit code of a wrong PIN (`CKR_PIN_INCORRECT`).
pub const EXIT_PIN_INCORRECT: i32 = 7;
/// Exit code of a locked PIN (`CKR_PIN_LOCKED`).
pub const EXIT_PIN_LOCKED: i32 = 8;
/// Exit code of a wrong password for an encrypted file (PKCS#12, encrypted PKCS#8).
pub const EXIT_PASSWORD: i32 = 9;
/// Exit code of a usage error found after argument parsing (clap's own is also 2).
pub const EXIT_USAGE: i32 = 2;
/// Exit code when a new object would take a label an object of its class already has.
pub const EXIT_LABEL_TAKEN: i32 = 10;

#[derive(Debug)]
pub enum Error {
    /// A PKCS#11 call failed: what pktool was doing, and cryptoki's error.
    Token(String, cryptoki::error::Error),
    /// A token-side problem that is not one call's return value.
    TokenState(String),
    /// Reading or writing a file, or its content.
    File(String),
    /// No object matches.
    NotFound(String),
    /// More than one object matches.
    Ambiguous(String),
    /// A new object's label is taken by an object of the same class.
    LabelTaken(String),
    /// Options that do not fit together.
    Usage(String),
    /// The password of an encrypted file is wrong.
    Password(String),
    /// A token-side failure whose details are already in the command's output (migrate).
    Reported(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn exit_code(&self) -> i32 {
        use cryptoki::error::{Error as Ck, RvError};
        match self {
            Error::Token(_, Ck::Pkcs11(RvError::PinIncorrect, _)) => EXIT_PIN_INCORRECT,
            Error::Token(_, Ck::Pkcs11(RvError::PinLocked, _)) => EXIT_PIN_LOCKED,
            Error::Token(..) | Error::TokenState(_) | Error::Reported(_) => EXIT_TOKEN,
            Error::File(_) => EXIT_FILE,
            Error::Password(_) => EXIT_PASSWORD,
            Error::NotFound(_) => EXIT_OBJECT,
            Error::Ambiguous(_) => EXIT_AMBIGUOUS,
            Error::LabelTaken(_) => EXIT_LABEL_TAKEN,
            Error::Usage(_) => EXIT_USAGE,
        }
    }

    /// The CKR_* name when this is a PKCS#11 error.
    pub fn ckr(&self) -> Option<String> {
        match self {
            Error::Token(_, cryptoki::error::Error::Pkcs11(rv, _)) => Some(rv_name(rv)),
            _ => None,
        }
    }

    pub fn io(what: impl fmt::Display, e: std::io::Error) -> Error {
        Error::File(format!("{what}: {e}"))
    }
}

/// `PinIncorrect` -> `CKR_PIN_INCORRECT`.
pub fn rv_name(rv: &cryptoki::error::RvError) -> String {
    let camel = format!("{rv:?}");
    let mut out = String::from("CKR_");
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// `Login` -> `C_Login`.
fn function_name(f: &cryptoki::context::Function) -> String {
    format!("C_{f:?}")
}

/// A short hint for the return values a user can act on.
fn hint(ckr: &str) -> Option<&'static str> {
    Some(match ckr {
        "CKR_PIN_INCORRECT" => "the PIN is wrong",
        "CKR_PIN_LOCKED" => "the PIN is locked after too many failures; the SO must reset it",
        "CKR_PIN_EXPIRED" => "the PIN must be changed first: pktool setpin",
        "CKR_USER_PIN_NOT_INITIALIZED" => "the token has no user PIN yet",
        "CKR_TOKEN_NOT_PRESENT" | "CKR_TOKEN_NOT_RECOGNIZED" => "no usable token in that slot",
        "CKR_KEY_UNEXTRACTABLE" => "the key is not extractable",
        "CKR_ATTRIBUTE_SENSITIVE" => "the attribute is sensitive",
        "CKR_MECHANISM_INVALID" => "the token does not offer that mechanism",
        _ => return None,
    })
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Token(what, e) => match e {
                cryptoki::error::Error::Pkcs11(rv, func) => {
                    let name = rv_name(rv);
                    write!(f, "{what}: {} returned {name}", function_name(func))?;
                    if let Some(h) = hint(&name) {
                        write!(f, " ({h})")?;
                    }
                    Ok(())
                }
                cryptoki::error::Error::LibraryLoading(le) => {
                    write!(f, "{what}: cannot load the PKCS#11 module: {le}")
                }
                other => write!(f, "{what}: {other}"),
            },
            Error::TokenState(m)
            | Error::File(m)
            | Error::NotFound(m)
            | Error::Ambiguous(m)
            | Error::LabelTaken(m)
            | Error::Usage(m)
            | Error::Password(m)
            | Error::Reported(m) => f.write_str(m),
        }
    }
}

/// Adds what pktool was doing to a cryptoki result.
pub trait Ctx<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Ctx<T> for std::result::Result<T, cryptoki::error::Error> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::Token(what(), e))
    }
}

impl From<openssl::error::ErrorStack> for Error {
    fn from(e: openssl::error::ErrorStack) -> Error {
        Error::File(format!("OpenSSL: {e}"))
    }
}
