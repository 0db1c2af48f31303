//! Slot and token management: `C_GetSlotList`, `C_GetSlotInfo`, `C_GetTokenInfo`,
//! `C_GetMechanismList`, `C_GetMechanismInfo`, `C_InitToken`, `C_InitPIN`, `C_SetPIN`.

use crate::general::token_path;
use crate::mech;
use crate::store::{MAX_PIN_LEN, MIN_PIN_LEN};
use crate::token::{store_err, Token, LOGGED_SO};
use crate::SoftToken;
use opencf_abi::sys::*;
use opencf_abi::{pad_field, unpad_field, CkResult};
use std::sync::Arc;

impl SoftToken {
    /// The token in `slot`.
    pub fn token(&self, slot: CK_SLOT_ID) -> CkResult<Arc<Token>> {
        let slots = self.slots.read().unwrap_or_else(|e| e.into_inner());
        slots.get(slot as usize).cloned().ok_or(CKR_SLOT_ID_INVALID)
    }

    /// `C_GetSlotList`: every slot has a token present (the last one uninitialised).
    pub fn slot_list(&self) -> Vec<CK_SLOT_ID> {
        let slots = self.slots.read().unwrap_or_else(|e| e.into_inner());
        slots.iter().map(|t| t.slot).collect()
    }

    /// `C_GetSlotInfo`.
    pub fn slot_info(&self, slot: CK_SLOT_ID) -> CkResult<CK_SLOT_INFO> {
        self.token(slot)?;
        Ok(CK_SLOT_INFO {
            slotDescription: pad_field(&format!("OpenCF Softtoken slot {slot}")),
            manufacturerID: pad_field("OpenCF"),
            flags: CKF_TOKEN_PRESENT,
            hardwareVersion: CK_VERSION { major: 0, minor: 1 },
            firmwareVersion: CK_VERSION { major: 0, minor: 1 },
        })
    }

    /// `C_GetTokenInfo`.
    pub fn token_info(&self, slot: CK_SLOT_ID) -> CkResult<CK_TOKEN_INFO> {
        let token = self.token(slot)?;
        let (label, serial, flags) = match token.store.get() {
            Some(store) => {
                let meta = store.meta().map_err(store_err)?;
                (meta.label.clone(), meta.serial.clone(), token.flags(&meta))
            }
            None => (String::new(), String::new(), CKF_RNG | CKF_LOGIN_REQUIRED),
        };
        let sessions = self.sessions.filter(|s| s.slot == slot);
        let rw = sessions.iter().filter(|s| s.rw).count();
        Ok(CK_TOKEN_INFO {
            label: pad_field(&label),
            manufacturerID: pad_field("OpenCF"),
            model: pad_field("Softtoken"),
            serialNumber: pad_field(&serial),
            flags,
            ulMaxSessionCount: CK_EFFECTIVELY_INFINITE,
            ulSessionCount: sessions.len() as CK_ULONG,
            ulMaxRwSessionCount: CK_EFFECTIVELY_INFINITE,
            ulRwSessionCount: rw as CK_ULONG,
            ulMaxPinLen: MAX_PIN_LEN as CK_ULONG,
            ulMinPinLen: MIN_PIN_LEN as CK_ULONG,
            ulTotalPublicMemory: CK_UNAVAILABLE_INFORMATION,
            ulFreePublicMemory: CK_UNAVAILABLE_INFORMATION,
            ulTotalPrivateMemory: CK_UNAVAILABLE_INFORMATION,
            ulFreePrivateMemory: CK_UNAVAILABLE_INFORMATION,
            hardwareVersion: CK_VERSION { major: 0, minor: 1 },
            firmwareVersion: CK_VERSION { major: 0, minor: 1 },
            utcTime: [b' '; 16],
        })
    }

    /// `C_GetMechanismList`.
    pub fn mechanisms(&self, slot: CK_SLOT_ID) -> CkResult<Vec<CK_MECHANISM_TYPE>> {
        self.token(slot)?;
        Ok(mech::mechanism_list())
    }

    /// `C_GetMechanismInfo`.
    pub fn mechanism(&self, slot: CK_SLOT_ID, m: CK_MECHANISM_TYPE) -> CkResult<CK_MECHANISM_INFO> {
        self.token(slot)?;
        mech::mechanism_info(m).ok_or(CKR_MECHANISM_INVALID)
    }

    /// `C_InitToken`: (re)initialises the token in `slot`; initialising the empty slot adds a
    /// new empty slot after it.
    pub fn init_token(&self, slot: CK_SLOT_ID, so_pin: &[u8], label: &[u8; 32]) -> CkResult<()> {
        let token = self.token(slot)?;
        if !self.sessions.filter(|s| s.slot == slot).is_empty() {
            return Err(CKR_SESSION_EXISTS);
        }
        let label = unpad_field(label);
        // For the empty slot, the new SO PIN's length is checked before its file is made: a
        // refused PIN leaves no file behind.
        let bad_len = so_pin.len() < MIN_PIN_LEN || so_pin.len() > MAX_PIN_LEN;
        if bad_len && !token.initialized() {
            return Err(CKR_PIN_LEN_RANGE);
        }
        if token.store.get().is_none() {
            let store = crate::store::TokenStore::open(&token.path).map_err(store_err)?;
            let _ = token.store.set(store);
        }
        // The empty slot (its file new, or left by a C_InitToken that failed): once its token
        // is initialized, a new empty slot follows it.
        let was_empty = !token.initialized();
        token
            .store()?
            .init_token(&label, so_pin)
            .map_err(|e| token.pin_store_err(e))?;
        self.logout_token(&token);
        self.objects.remove_where(|o| o.slot == slot);
        *token.sync.lock().unwrap_or_else(|e| e.into_inner()) = Default::default();
        self.bump_epoch();
        if was_empty {
            let mut slots = self.slots.write().unwrap_or_else(|e| e.into_inner());
            if slots.len() as CK_SLOT_ID == slot + 1 {
                let next = slot + 1;
                slots.push(Arc::new(Token::open(
                    next,
                    token_path(&self.dir, next),
                    false,
                )?));
            }
        }
        Ok(())
    }

    /// `C_InitPIN`: the SO sets the user PIN.
    pub fn init_pin(&self, s: crate::CK_SESSION_HANDLE, pin: &[u8]) -> CkResult<()> {
        let sess = self.session(s)?;
        if sess.token.login() != LOGGED_SO {
            return Err(CKR_USER_NOT_LOGGED_IN);
        }
        if !sess.rw {
            return Err(CKR_SESSION_READ_ONLY);
        }
        if pin.len() < MIN_PIN_LEN || pin.len() > MAX_PIN_LEN {
            return Err(CKR_PIN_LEN_RANGE);
        }
        let mk = sess.token.master_key().ok_or(CKR_USER_NOT_LOGGED_IN)?;
        sess.token
            .store()?
            .init_user_pin(&mk, pin)
            .map_err(store_err)
    }

    /// `C_SetPIN`: the SO's PIN when the SO is logged in, else the user's.
    pub fn set_pin(&self, s: crate::CK_SESSION_HANDLE, old: &[u8], new: &[u8]) -> CkResult<()> {
        let sess = self.session(s)?;
        if !sess.rw {
            return Err(CKR_SESSION_READ_ONLY);
        }
        let user = if sess.token.login() == LOGGED_SO {
            CKU_SO
        } else {
            CKU_USER
        };
        sess.token
            .store()?
            .set_pin(user, old, new)
            .map_err(|e| sess.token.pin_store_err(e))?;
        sess.token.update_pin_expired();
        Ok(())
    }
}
