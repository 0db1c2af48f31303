//! One token of the software token: its keystore, its login state, and the in-memory copy of
//! its token objects, kept in step with other processes using the same keystore.

use crate::attrs::{AttrMap, AttrMapExt};
use crate::object::Object;
use crate::store::{MasterKey, StoreError, TokenMeta, TokenStore};
use crate::SoftToken;
use opencf_abi::sys::*;
use opencf_abi::CkResult;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Nobody is logged in.
pub const LOGGED_OUT: u8 = 0;
/// The normal user is logged in.
pub const LOGGED_USER: u8 = 1;
/// The security officer is logged in.
pub const LOGGED_SO: u8 = 2;

/// Label of the default token (slot 0).
pub const DEFAULT_LABEL: &str = "OpenCF Softtoken";
/// PIN of a fresh default token, to be changed before use (as in Solaris).
pub const DEFAULT_PIN: &[u8] = b"changeme";

/// What the token layer knows of the objects of one keystore.
#[derive(Default)]
pub struct SyncState {
    /// `PRAGMA data_version` when last synchronised.
    pub data_version: i64,
    /// Keystore id → (version loaded, handle). Handles stay stable for the process's life.
    pub known: HashMap<i64, (u64, CK_OBJECT_HANDLE)>,
    /// Keystore id → version of the objects found damaged and left out (each told once).
    pub damaged: HashMap<i64, u64>,
}

/// A token in one slot.
pub struct Token {
    /// Slot ID.
    pub slot: CK_SLOT_ID,
    /// Keystore file.
    pub path: PathBuf,
    /// The keystore, once the token exists (an empty slot has none until `C_InitToken`).
    pub store: OnceLock<TokenStore>,
    /// `LOGGED_OUT`, `LOGGED_USER` or `LOGGED_SO`: read on hot paths.
    pub login_state: AtomicU8,
    /// Counts the user's logouts: an object made while one ran checks it after it is
    /// in, and goes if it changed (`SoftToken::store_objects`).
    pub logouts: AtomicU64,
    /// The user is logged in with a PIN that must be changed first: object calls answer
    /// `CKR_PIN_EXPIRED`.
    pub pin_expired: AtomicBool,
    /// Master key while someone is logged in.
    pub master_key: Mutex<Option<MasterKey>>,
    /// Object synchronisation with the keystore.
    pub sync: Mutex<SyncState>,
    /// The keystore's change counter when this process last brought its objects in step.
    pub changes_seen: AtomicU64,
}

/// Maps keystore errors to PKCS#11 codes.
pub fn store_err(e: StoreError) -> CK_RV {
    // A full disk is the administrator's to fix, and `CKR_DEVICE_MEMORY` alone does not say
    // where: the first one is told on standard error, as a keystore that cannot be opened is.
    if matches!(e, StoreError::Full(_)) {
        static TOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !TOLD.swap(true, Ordering::Relaxed) {
            eprintln!("opencf-softtoken: {e}");
        }
    }
    e.rv()
}

impl Token {
    /// [`store_err`] for the PIN functions (`C_Login`, `C_SetPIN`, `C_InitToken`), which also
    /// name a damaged keystore on standard error: `CKR_DEVICE_ERROR` alone does not tell a
    /// damaged PIN record from a disk error, nor say which file.
    pub fn pin_store_err(&self, e: StoreError) -> CK_RV {
        if matches!(e, StoreError::Corrupt(_)) {
            eprintln!("opencf-softtoken: keystore {}: {e}", self.path.display());
        }
        store_err(e)
    }

    /// A token whose keystore is `path`; opened (and created as the default token when
    /// `default` is set) if the file exists or `default` is set.
    pub fn open(slot: CK_SLOT_ID, path: PathBuf, default: bool) -> CkResult<Token> {
        let t = Token {
            slot,
            path,
            store: OnceLock::new(),
            login_state: AtomicU8::new(LOGGED_OUT),
            logouts: AtomicU64::new(0),
            pin_expired: AtomicBool::new(false),
            master_key: Mutex::new(None),
            sync: Mutex::new(SyncState::default()),
            changes_seen: AtomicU64::new(0),
        };
        if default || t.path.exists() {
            let store = TokenStore::open(&t.path).map_err(|e| {
                eprintln!("opencf-softtoken: keystore {}: {e}", t.path.display());
                store_err(e)
            })?;
            if default && !store.meta().map_err(store_err)?.initialized {
                store
                    .create_default(DEFAULT_LABEL, DEFAULT_PIN)
                    .map_err(store_err)?;
            }
            let _ = t.store.set(store);
        }
        Ok(t)
    }

    /// The keystore; an empty slot answers `CKR_TOKEN_NOT_RECOGNIZED`.
    pub fn store(&self) -> CkResult<&TokenStore> {
        self.store.get().ok_or(CKR_TOKEN_NOT_RECOGNIZED)
    }

    /// Token metadata from the keystore.
    pub fn meta(&self) -> CkResult<TokenMeta> {
        self.store()?.meta().map_err(store_err)
    }

    /// Whether the token has been initialised.
    pub fn initialized(&self) -> bool {
        self.store
            .get()
            .and_then(|s| s.meta().ok())
            .is_some_and(|m| m.initialized)
    }

    /// Current login state.
    pub fn login(&self) -> u8 {
        self.login_state.load(Ordering::Acquire)
    }

    /// Whether private objects are visible.
    pub fn user_logged_in(&self) -> bool {
        self.login() == LOGGED_USER
    }

    /// The master key while logged in.
    pub fn master_key(&self) -> Option<MasterKey> {
        self.master_key
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Brings the in-memory token objects in step with the keystore: objects other processes
    /// created, changed or deleted. `force` re-reads even if nothing changed on disk (after
    /// login, when private objects become readable).
    pub fn refresh(&self, st: &SoftToken, force: bool) -> CkResult<()> {
        match self.refresh_once(st, force) {
            // The master key of this process's login is no longer the token's: another
            // process initialized the token again, which ends the login to the token it
            // replaced (its private objects and their handles go with it), and the objects
            // of the new token are read as a public session sees them.
            Err(CKR_USER_NOT_LOGGED_IN) if self.user_logged_in() => {
                st.logout_token(self);
                self.refresh_once(st, true)
            }
            r => r,
        }
    }

    /// [`Token::refresh`] with the login as it is.
    fn refresh_once(&self, st: &SoftToken, force: bool) -> CkResult<()> {
        let Some(store) = self.store.get() else {
            return Ok(());
        };
        let mut sync = self.sync.lock().unwrap_or_else(|e| e.into_inner());
        let dv = store.data_version().map_err(store_err)?;
        if !force && dv == sync.data_version {
            return Ok(());
        }
        let mk = if self.user_logged_in() {
            self.master_key()
        } else {
            None
        };
        let versions = store.object_versions().map_err(store_err)?;
        let mut seen = std::collections::HashSet::with_capacity(versions.len());
        let mut changed = false;
        // Load everything at once when many objects are new (first load, login).
        let missing = versions
            .iter()
            .filter(|(id, v, p)| {
                (!*p || mk.is_some()) && sync.known.get(id).is_none_or(|k| k.0 != *v)
            })
            .count();
        // A damaged object fails the whole bulk load: the objects are then loaded one by one,
        // and only the damaged ones are left out.
        let bulk: Option<HashMap<i64, (u64, AttrMap)>> = if missing > 64 {
            match store.load_all(mk.as_ref()) {
                Ok(all) => Some(all.into_iter().map(|(id, v, _, a)| (id, (v, a))).collect()),
                Err(StoreError::Corrupt(_)) => None,
                Err(e) => return Err(store_err(e)),
            }
        } else {
            None
        };
        for (id, version, private) in versions {
            seen.insert(id);
            if private && mk.is_none() {
                continue;
            }
            let known = sync.known.get(&id).copied();
            if let Some((v, h)) = known {
                if v == version && st.objects.get(h).is_some() {
                    continue;
                }
            }
            let loaded = match &bulk {
                Some(b) => b.get(&id).map(|(v, a)| (*v, a.clone())),
                None => match store.load_object(id, mk.as_ref()) {
                    Ok(a) => a.map(|a| (version, a)),
                    // One damaged object does not take the others with it: it is left out,
                    // the rest are served.
                    Err(StoreError::Corrupt(why)) => {
                        self.left_out(&mut sync, id, version, &why);
                        continue;
                    }
                    Err(e) => return Err(store_err(e)),
                },
            };
            let Some((version, attrs)) = loaded else {
                continue;
            };
            // Every object the token makes has a class; one without a well-formed one was
            // damaged outside it.
            if !matches!(attrs.ulong(CKA_CLASS), Ok(Some(_))) {
                let why = format!("object {id}: no well-formed CKA_CLASS");
                self.left_out(&mut sync, id, version, &why);
                continue;
            }
            let handle = known.map(|k| k.1).unwrap_or_else(|| st.new_object_handle());
            st.objects.insert(
                handle,
                Arc::new(
                    Object::new(st, handle, self.slot, attrs, Some(id), None).at_version(version),
                ),
            );
            sync.known.insert(id, (version, handle));
            changed = true;
        }
        sync.damaged.retain(|id, _| seen.contains(id));
        let gone: Vec<i64> = sync
            .known
            .keys()
            .filter(|id| !seen.contains(id))
            .copied()
            .collect();
        for id in gone {
            if let Some((_, h)) = sync.known.remove(&id) {
                st.objects.remove(h);
                changed = true;
            }
        }
        if changed {
            st.bump_epoch();
        }
        // Only now: a refresh that failed halfway (a keystore error, a master key that is no
        // longer the token's) is made again at the next sync point, not taken as done.
        sync.data_version = dv;
        Ok(())
    }

    /// A damaged object left out of the token's view: told on standard error once per
    /// version, as a keystore that cannot be opened is (no PKCS#11 return value names one
    /// object of many).
    fn left_out(&self, sync: &mut SyncState, id: i64, version: u64, why: &str) {
        if sync.damaged.insert(id, version) != Some(version) {
            eprintln!(
                "opencf-softtoken: keystore {}: {why}; the object is left out",
                self.path.display()
            );
        }
    }

    /// Brings the objects in step when the keystore's change counter moved since this
    /// process last looked: a key another process changed or destroyed is seen at its next
    /// use, not only at the next session or search. One atomic load when nothing changed.
    pub fn sync_if_changed(&self, st: &SoftToken) -> CkResult<()> {
        let Some(now) = self.store.get().and_then(|s| s.changes()) else {
            return Ok(());
        };
        if self.changes_seen.load(Ordering::Acquire) != now {
            self.refresh(st, false)?;
            self.changes_seen.store(now, Ordering::Release);
        }
        Ok(())
    }

    /// At logout: drops private token objects from memory and destroys private session
    /// objects, as PKCS#11 says. Their handles become invalid for good, "even if a user is
    /// later logged back into the token" (PKCS#11 3.2, `C_Logout`): the next login loads the
    /// token objects again under new handles.
    pub fn forget_private(&self, st: &SoftToken) {
        let mut sync = self.sync.lock().unwrap_or_else(|e| e.into_inner());
        let removed = st
            .objects
            .remove_where(|o| o.slot == self.slot && o.is_private());
        for o in removed {
            if let Some(id) = o.store_id {
                sync.known.remove(&id);
            }
        }
        st.bump_epoch();
    }

    /// Records that this process wrote object `id` at `version` under `handle`: the version
    /// its write made, not one read after it, which another process's later write could
    /// have made (this process would then never load that write).
    pub fn note_written(&self, id: i64, version: u64, handle: CK_OBJECT_HANDLE) {
        let mut sync = self.sync.lock().unwrap_or_else(|e| e.into_inner());
        sync.known.insert(id, (version, handle));
    }

    /// Forgets object `id` after this process deleted it.
    pub fn note_deleted(&self, id: i64) {
        self.sync
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .known
            .remove(&id);
    }

    /// Updates the PIN-expired flag from the keystore for the current login.
    pub fn update_pin_expired(&self) {
        let expired = self.login() == LOGGED_USER
            && self
                .meta()
                .map(|m| m.user_pin_to_be_changed)
                .unwrap_or(false);
        self.pin_expired.store(expired, Ordering::Release);
    }

    /// Token flags for `C_GetTokenInfo`.
    pub fn flags(&self, meta: &TokenMeta) -> CK_FLAGS {
        let mut f = CKF_RNG | CKF_LOGIN_REQUIRED | CKF_DUAL_CRYPTO_OPERATIONS;
        if meta.initialized {
            f |= CKF_TOKEN_INITIALIZED;
        }
        if meta.user_pin_initialized {
            f |= CKF_USER_PIN_INITIALIZED;
        }
        if meta.user_pin_to_be_changed {
            f |= CKF_USER_PIN_TO_BE_CHANGED;
        }
        if meta.so_pin_to_be_changed {
            f |= CKF_SO_PIN_TO_BE_CHANGED;
        }
        f |= pin_count_flags(
            meta.user_failures,
            CKF_USER_PIN_COUNT_LOW,
            CKF_USER_PIN_FINAL_TRY,
            CKF_USER_PIN_LOCKED,
        );
        f |= pin_count_flags(
            meta.so_failures,
            CKF_SO_PIN_COUNT_LOW,
            CKF_SO_PIN_FINAL_TRY,
            CKF_SO_PIN_LOCKED,
        );
        f
    }

    /// Whether an object's attributes say it is private (a missing flag means private).
    pub fn attrs_private(attrs: &AttrMap) -> bool {
        attrs.flag(CKA_PRIVATE).ok().flatten().unwrap_or(true)
    }
}

fn pin_count_flags(
    failures: u32,
    low: CK_FLAGS,
    final_try: CK_FLAGS,
    locked: CK_FLAGS,
) -> CK_FLAGS {
    let max = crate::store::MAX_PIN_FAILURES;
    if failures >= max {
        locked
    } else if failures + 1 == max {
        final_try | low
    } else if failures > 0 {
        low
    } else {
        0
    }
}
