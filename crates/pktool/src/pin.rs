//! Where PINs and passwords come from: a file, an environment variable, the command line
//! (unsafe: visible in `ps`), or a prompt on /dev/tty with echo off.

use crate::error::{Error, Result};
use std::io::{BufRead, Write};
use zeroize::Zeroizing;

#[derive(Debug, Clone, Default)]
pub struct SecretSource {
    pub file: Option<std::path::PathBuf>,
    pub env: Option<String>,
    pub value: Option<String>,
    /// The options that supply this secret, named when there is no terminal to ask on.
    pub options: &'static str,
}

/// The options of the token PIN (global options).
pub const PIN_OPTIONS: &str = "--pin-file, --pin-env or --pin";
/// The options of a PKCS#12 or encrypted private key file's password.
pub const FILE_PASS_OPTIONS: &str = "--p12-pass-file or --p12-pass-env";
/// The options of setpin's new PIN.
pub const NEW_PIN_OPTIONS: &str = "--new-pin-file, --new-pin-env or --new-pin";

impl SecretSource {
    pub fn is_given(&self) -> bool {
        self.file.is_some() || self.env.is_some() || self.value.is_some()
    }

    /// The secret from the first source given, else from a prompt.
    pub fn get(&self, what: &str) -> Result<Zeroizing<String>> {
        match self.given(what)? {
            Some(s) => Ok(s),
            None => prompt(&format!("{what}: "), self.options),
        }
    }

    /// The secret from the source given, or None. Two sources at once are a usage error
    /// (which one was meant is not known, and the wrong one would cost a try of the PIN), and
    /// so is an empty PIN from the command line or the environment (an unset shell variable),
    /// as an empty PIN file is; a file's password may be empty.
    pub fn given(&self, what: &str) -> Result<Option<Zeroizing<String>>> {
        let sources = [
            self.value.is_some(),
            self.env.is_some(),
            self.file.is_some(),
        ];
        if sources.iter().filter(|s| **s).count() > 1 {
            return Err(Error::Usage(format!(
                "the {what} is given more than one way; give one of {}",
                self.options
            )));
        }
        let may_be_empty = self.options == FILE_PASS_OPTIONS;
        let empty = |how: String| {
            Err(Error::Usage(format!(
                "the {what} {how} is empty, and an empty one is not tried"
            )))
        };
        if let Some(v) = &self.value {
            if v.is_empty() && !may_be_empty {
                return empty("given on the command line".into());
            }
            return Ok(Some(Zeroizing::new(v.clone())));
        }
        if let Some(var) = &self.env {
            let v = std::env::var(var).map_err(|_| {
                Error::Usage(format!("{what}: environment variable {var} is not set"))
            })?;
            if v.is_empty() && !may_be_empty {
                return empty(format!("in environment variable {var}"));
            }
            return Ok(Some(Zeroizing::new(v)));
        }
        if let Some(path) = &self.file {
            let cannot = |e| {
                Error::io(
                    format!("cannot read the file {} holding the {what}", path.display()),
                    e,
                )
            };
            // The file may be a pipe (`--pin-file <(...)`).
            let mut data = Zeroizing::new(Vec::new());
            if !crate::util::read_within(path, MAX_SECRET_FILE, &mut data).map_err(cannot)? {
                return Err(Error::File(format!(
                    "the file {} holding the {what} is longer than {MAX_SECRET_FILE} bytes",
                    path.display()
                )));
            }
            let text = std::str::from_utf8(&data)
                .map_err(|_| Error::File(format!("{what} file {} is not UTF-8", path.display())))?;
            // The first line, without its line end.
            let line = text.lines().next().unwrap_or("");
            if line.is_empty() && self.options != FILE_PASS_OPTIONS {
                // An empty file's PIN is a mistake (a file truncated, the wrong path); a
                // token's failed login would count against the PIN. A file's password may
                // be empty.
                let how = if text.is_empty() {
                    "is empty"
                } else {
                    "has an empty first line"
                };
                return Err(Error::Usage(format!(
                    "the file {} holding the {what} {how} (its first line is the {what})",
                    path.display()
                )));
            }
            return Ok(Some(Zeroizing::new(line.to_string())));
        }
        Ok(None)
    }
}

/// The most a PIN or password file may hold (its first line is the secret).
const MAX_SECRET_FILE: u64 = 64 * 1024;

/// The error when a secret is needed and there is no terminal: it names `options`, the
/// options that supply that secret.
pub fn no_terminal(text: &str, options: &str) -> Error {
    Error::Usage(format!(
        "{} needed but there is no terminal to ask on; use {options}",
        text.trim_end_matches([':', ' '])
    ))
}

/// Prompts on /dev/tty with echo off; without a terminal the error names `options`.
pub fn prompt(text: &str, options: &str) -> Result<Zeroizing<String>> {
    use rustix::termios::{tcgetattr, tcsetattr, LocalModes, OptionalActions};
    let no_tty = |_| no_terminal(text, options);
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .map_err(no_tty)?;
    let saved = tcgetattr(&tty).map_err(|e| no_tty(std::io::Error::from(e)))?;
    let mut quiet = saved.clone();
    quiet.local_modes.remove(LocalModes::ECHO);
    quiet.local_modes.insert(LocalModes::ECHONL);
    (&tty)
        .write_all(text.as_bytes())
        .map_err(|e| Error::io("cannot write to /dev/tty", e))?;
    tcsetattr(&tty, OptionalActions::Flush, &quiet).map_err(|e| no_tty(std::io::Error::from(e)))?;
    let mut line = Zeroizing::new(String::new());
    let read = std::io::BufReader::new(&tty).read_line(&mut line);
    let _ = tcsetattr(&tty, OptionalActions::Flush, &saved);
    read.map_err(|e| Error::io("cannot read from /dev/tty", e))?;
    while line.ends_with(['\n', '\r']) {
        line.pop();
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_terminal_names_the_options_of_that_secret() {
        let e = no_terminal("new user PIN: ", NEW_PIN_OPTIONS).to_string();
        assert_eq!(
            e,
            "new user PIN needed but there is no terminal to ask on; \
             use --new-pin-file, --new-pin-env or --new-pin"
        );
        let e = no_terminal("password of x.p12: ", FILE_PASS_OPTIONS).to_string();
        assert!(e.ends_with("use --p12-pass-file or --p12-pass-env"), "{e}");
    }
}
