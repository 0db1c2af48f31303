//! General-purpose functions: `C_Initialize`, `C_Finalize`, `C_GetInfo`, and where the
//! keystore lives.

use crate::table::HandleTable;
use crate::token::Token;
use crate::SoftToken;
use opencf_abi::sys::*;
use opencf_abi::{pad_field, CkResult, InitArgs};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};

/// The keystore directory: `$OPENCF_SOFTTOKEN_DIR`, else `$XDG_DATA_HOME/opencf/softtoken`,
/// else `$HOME/.local/share/opencf/softtoken`. `OPENCF_SOFTTOKEN_DIR` set but empty is refused
/// (`CKR_GENERAL_ERROR`, with a message): a script whose variable was never set
/// (`OPENCF_SOFTTOKEN_DIR="$DIR"`) would otherwise work on the user's own keystore without a
/// word, as the metaslot's variables refuse an empty value too.
pub fn keystore_dir() -> CkResult<PathBuf> {
    if let Some(d) = std::env::var_os("OPENCF_SOFTTOKEN_DIR") {
        if d.is_empty() {
            eprintln!(
                "opencf-softtoken: OPENCF_SOFTTOKEN_DIR is set but empty; unset it to use the \
                 default keystore directory, or name one"
            );
            return Err(CKR_GENERAL_ERROR);
        }
        return Ok(PathBuf::from(d));
    }
    let data = match std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => {
            let home = std::env::var_os("HOME").filter(|d| !d.is_empty()).ok_or_else(|| {
                eprintln!("opencf-softtoken: neither OPENCF_SOFTTOKEN_DIR, XDG_DATA_HOME nor HOME is set");
                CKR_GENERAL_ERROR
            })?;
            PathBuf::from(home).join(".local/share")
        }
    };
    Ok(data.join("opencf/softtoken"))
}

/// Keystore file of the token in `slot`.
pub fn token_path(dir: &std::path::Path, slot: CK_SLOT_ID) -> PathBuf {
    dir.join(format!("token{slot}.sqlite"))
}

impl SoftToken {
    /// `C_Initialize`: opens (or creates) the default token in slot 0, every further token
    /// made by `C_InitToken`, and one empty slot for the next.
    pub fn init(args: &InitArgs) -> CkResult<SoftToken> {
        let dir = keystore_dir()?;
        let mut slots = vec![Arc::new(Token::open(0, token_path(&dir, 0), true)?)];
        loop {
            let id = slots.len() as CK_SLOT_ID;
            let path = token_path(&dir, id);
            let exists = path.exists();
            let token = Arc::new(Token::open(id, path, false)?);
            // A file whose token was never initialized (a C_InitToken that failed after
            // creating it) is the empty slot itself, not a token before it.
            let last = !exists || !token.initialized();
            slots.push(token);
            if last {
                break;
            }
        }
        Ok(SoftToken {
            dir,
            slots: RwLock::new(slots),
            sessions: HandleTable::default(),
            objects: HandleTable::default(),
            next_session: AtomicU64::new(1),
            next_object: AtomicU64::new(1),
            next_uid: AtomicU64::new(1),
            next_unique: AtomicU64::new(1),
            epoch: AtomicU64::new(1),
            framework: args.framework,
        })
    }

    /// `C_GetInfo`.
    pub fn info(&self) -> CK_INFO {
        CK_INFO {
            cryptokiVersion: CK_VERSION { major: 3, minor: 2 },
            manufacturerID: pad_field("OpenCF"),
            flags: 0,
            libraryDescription: pad_field("OpenCF software token"),
            libraryVersion: CK_VERSION { major: 0, minor: 1 },
        }
    }
}
