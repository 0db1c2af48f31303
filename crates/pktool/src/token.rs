//! Loading a module, choosing a token, sessions and login.

use crate::error::{Ctx, Error, Result};
use crate::pin::SecretSource;
use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::error::RvError;
use cryptoki::session::{Session, UserType};
use cryptoki::slot::Slot;
use cryptoki::types::AuthPin;
use std::path::{Path, PathBuf};

/// How the token is chosen: by label, by slot ID, else slot 0 (the metaslot).
#[derive(Debug, Clone, Default)]
pub struct TokenChoice {
    pub label: Option<String>,
    pub slot: Option<u64>,
}

pub struct Token {
    pub p11: Pkcs11,
    pub slot: Slot,
    pub label: String,
}

/// libopencf.so beside the executable (the build tree), else in `../lib` (an installed
/// `PREFIX/bin`, `PREFIX/lib` layout), else in $OPENCF_LIB_DIR.
pub fn default_module() -> Result<PathBuf> {
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf));
    module_in(exe_dir.as_deref(), std::env::var_os("OPENCF_LIB_DIR")).ok_or_else(|| {
        Error::Usage(
            "no libopencf.so beside pktool, in ../lib or in $OPENCF_LIB_DIR; give --module PATH"
                .into(),
        )
    })
}

/// [`default_module`] for a given executable directory and `$OPENCF_LIB_DIR`.
fn module_in(exe_dir: Option<&Path>, lib_dir_env: Option<std::ffi::OsString>) -> Option<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = exe_dir {
        dirs.push(d.to_path_buf());
        dirs.extend(d.parent().map(|p| p.join("lib")));
    }
    dirs.extend(lib_dir_env.filter(|d| !d.is_empty()).map(PathBuf::from));
    dirs.into_iter()
        .map(|d| d.join("libopencf.so"))
        .find(|p| p.exists())
}

pub fn load(module: &Path) -> Result<Pkcs11> {
    if !module.exists() {
        return Err(Error::File(format!(
            "module {} does not exist",
            module.display()
        )));
    }
    let p11 = Pkcs11::new(module).ctx(|| format!("loading {}", module.display()))?;
    p11.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
        .ctx(|| format!("initializing {}", module.display()))?;
    Ok(p11)
}

pub fn token_label(p11: &Pkcs11, slot: Slot) -> Result<String> {
    Ok(p11
        .get_token_info(slot)
        .ctx(|| format!("reading the token info of slot {}", slot.id()))?
        .label()
        .trim_end()
        .to_string())
}

pub fn find_slot(p11: &Pkcs11, choice: &TokenChoice) -> Result<Slot> {
    let slots = p11.get_all_slots().ctx(|| "listing slots".into())?;
    if let Some(id) = choice.slot {
        return slots
            .into_iter()
            .find(|s| s.id() == id)
            .ok_or_else(|| Error::NotFound(format!("no slot with ID {id}")));
    }
    if let Some(label) = &choice.label {
        let with_token = p11.get_slots_with_token().ctx(|| "listing slots".into())?;
        let matching: Vec<Slot> = with_token
            .into_iter()
            .filter(|s| token_label(p11, *s).map(|l| &l == label).unwrap_or(false))
            .collect();
        return match matching.len() {
            0 => Err(Error::NotFound(format!(
                "no token labelled '{}'",
                crate::util::shown_label(label.as_bytes())
            ))),
            1 => Ok(matching[0]),
            n => Err(Error::Ambiguous(format!(
                "{n} tokens are labelled '{}'; choose one with --slot",
                crate::util::shown_label(label.as_bytes())
            ))),
        };
    }
    slots
        .into_iter()
        .next()
        .ok_or_else(|| Error::NotFound("the module offers no slot".into()))
}

impl Token {
    pub fn open(module: &Path, choice: &TokenChoice) -> Result<Token> {
        let p11 = load(module)?;
        let slot = find_slot(&p11, choice)?;
        let label = token_label(&p11, slot)?;
        Ok(Token { p11, slot, label })
    }

    pub fn session(&self) -> Result<Session> {
        self.p11
            .open_rw_session(self.slot)
            .ctx(|| format!("opening a session on token '{}'", self.label))
    }

    /// A read-write session logged in as the user.
    pub fn login(&self, pin: &SecretSource) -> Result<Session> {
        let s = self.session()?;
        let info = self
            .p11
            .get_token_info(self.slot)
            .ctx(|| "reading the token info".into())?;
        if !info.login_required() {
            return Ok(s);
        }
        let pin = pin.get(&format!("PIN of token '{}'", self.label))?;
        login_user(&s, &pin, &self.label)?;
        Ok(s)
    }
}

pub fn login_user(s: &Session, pin: &str, label: &str) -> Result<()> {
    match s.login(UserType::User, Some(&AuthPin::from(pin.to_string()))) {
        Err(cryptoki::error::Error::Pkcs11(RvError::UserAlreadyLoggedIn, _)) => Ok(()),
        r => r.ctx(|| format!("logging in to token '{label}'")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Beside the executable, then ../lib, then $OPENCF_LIB_DIR.
    #[test]
    fn default_module_lookup_order() {
        let root = std::env::temp_dir().join(format!("pktool-module-in-{}", std::process::id()));
        let (bin, lib, env) = (root.join("bin"), root.join("lib"), root.join("env"));
        for d in [&bin, &lib, &env] {
            std::fs::create_dir_all(d).unwrap();
        }
        let found = |e: Option<&Path>| module_in(Some(&bin), e.map(|e| e.as_os_str().into()));
        assert_eq!(found(Some(&env)), None);
        std::fs::write(env.join("libopencf.so"), b"").unwrap();
        assert_eq!(found(Some(&env)), Some(env.join("libopencf.so")));
        assert_eq!(found(None), None);
        std::fs::write(lib.join("libopencf.so"), b"").unwrap();
        assert_eq!(found(Some(&env)), Some(lib.join("libopencf.so")));
        std::fs::write(bin.join("libopencf.so"), b"").unwrap();
        assert_eq!(found(Some(&env)), Some(bin.join("libopencf.so")));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
