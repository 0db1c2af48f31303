//! Session management: `C_OpenSession`, `C_CloseSession`, `C_CloseAllSessions`,
//! `C_GetSessionInfo`, `C_SessionCancel`, `C_GetOperationState`, `C_SetOperationState`,
//! `C_Login`, `C_LoginUser`, `C_Logout`.

use crate::mech::{self, CipherOp, DigestOp, MessageOp, SignOp, VerifyOp};
use crate::object::Object;
use crate::token::{Token, LOGGED_OUT, LOGGED_SO, LOGGED_USER};
use crate::SoftToken;
use opencf_abi::sys::*;
use opencf_abi::{CkResult, Mechanism, OutBuf};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// A cipher context kept after its operation ended, for reuse by the next operation with the
/// same key and mechanism (its key schedule stays valid).
pub struct SpareCipher {
    /// `Object::uid` of the key.
    pub key_uid: u64,
    /// Mechanism type.
    pub mechanism: CK_MECHANISM_TYPE,
    /// Encrypting (true) or decrypting.
    pub encrypt: bool,
    /// The context.
    pub op: Box<dyn CipherOp>,
}

/// A sign-or-verify-recover operation (single-part only).
pub struct RecoverOp {
    /// Mechanism.
    pub mech: Mechanism,
    /// Key.
    pub key: Arc<Object>,
}

/// A signature operation, with the context-specific login it may need.
pub struct SignState {
    /// The running operation.
    pub op: Box<dyn SignOp>,
    /// The key has `CKA_ALWAYS_AUTHENTICATE`: `C_Login(CKU_CONTEXT_SPECIFIC)` is needed first.
    pub needs_auth: bool,
}

/// The objects a session has looked up, valid for one object epoch. Operations borrow keys
/// from here, so the hot path writes no reference count shared with other threads.
#[derive(Default)]
pub struct SessionKeys {
    map: HashMap<CK_OBJECT_HANDLE, Arc<Object>>,
    epoch: u64,
}

/// The active operations of a session.
#[derive(Default)]
pub struct OpState {
    /// Remaining results of `C_FindObjects*`, last first.
    pub find: Option<Vec<CK_OBJECT_HANDLE>>,
    /// Encryption.
    pub encrypt: Option<(u64, CK_MECHANISM_TYPE, Box<dyn CipherOp>)>,
    /// Decryption.
    pub decrypt: Option<(u64, CK_MECHANISM_TYPE, Box<dyn CipherOp>)>,
    /// Digest.
    pub digest: Option<Box<dyn DigestOp>>,
    /// The digest has had `C_DigestUpdate`/`C_DigestKey`: `C_Digest` is no longer allowed.
    pub digest_multi: bool,
    /// The digest has taken a key's value (`C_DigestKey`): its running state holds key bytes
    /// (a key shorter than the hash's block in clear), so `C_GetOperationState` may not save
    /// it.
    pub digest_keyed: bool,
    /// Signature or MAC.
    pub sign: Option<SignState>,
    /// The signature has had `C_SignUpdate`: `C_Sign` is no longer allowed.
    pub sign_multi: bool,
    /// Verification.
    pub verify: Option<Box<dyn VerifyOp>>,
    /// The verification has had `C_VerifyUpdate`: `C_Verify` is no longer allowed.
    pub verify_multi: bool,
    /// `C_VerifySignature*` (3.2): the operation and the signature given at init.
    pub verify_signature: Option<(Box<dyn VerifyOp>, Vec<u8>)>,
    /// The operation has had `C_VerifySignatureUpdate`: `C_VerifySignature` is no longer
    /// allowed.
    pub verify_signature_multi: bool,
    /// Sign with recovery.
    pub sign_recover: Option<RecoverOp>,
    /// Verify with recovery.
    pub verify_recover: Option<RecoverOp>,
    /// Message-based encryption.
    pub message_encrypt: Option<Box<dyn MessageOp>>,
    /// Message-based decryption.
    pub message_decrypt: Option<Box<dyn MessageOp>>,
    /// Reusable cipher context.
    pub spare: Option<SpareCipher>,
    /// Objects this session used.
    pub keys: SessionKeys,
    /// A context-specific login was done for the current signature.
    pub sign_context_auth: bool,
    /// The decryption's key has `CKA_ALWAYS_AUTHENTICATE`.
    pub decrypt_needs_auth: bool,
    /// A context-specific login was done for the current decryption.
    pub decrypt_context_auth: bool,
}

/// An open session. Aligned to its own cache lines: each session is written by the thread
/// using it, and two sessions side by side in memory must not share a line.
#[repr(align(128))]
pub struct Session {
    /// Its handle.
    pub handle: CK_SESSION_HANDLE,
    /// Its slot.
    pub slot: CK_SLOT_ID,
    /// Its token.
    pub token: Arc<Token>,
    /// Read/write session.
    pub rw: bool,
    /// `CKF_*` flags given at open.
    pub flags: CK_FLAGS,
    /// Closed: a caller that pinned the session ([`SoftToken::pinned`]) gets
    /// `CKR_SESSION_HANDLE_INVALID`, as the handle does.
    pub(crate) closed: AtomicBool,
    state: Mutex<OpState>,
}

/// Whether an operation stays active after a call that produced output: PKCS#11 keeps it only
/// after a successful size query or `CKR_BUFFER_TOO_SMALL`; any other error, and a completed
/// call, end it.
pub fn op_survives(out: &OutBuf, r: &CkResult<()>) -> bool {
    *r == Err(CKR_BUFFER_TOO_SMALL) || (r.is_ok() && out.is_query())
}

impl Session {
    /// Locks the session's operation state (uncontended unless two threads share a session).
    pub fn lock(&self) -> MutexGuard<'_, OpState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `CKR_PIN_EXPIRED` while the user is logged in with a PIN that must be changed.
    pub fn check_pin_ok(&self) -> CkResult<()> {
        if self.token.pin_expired.load(Ordering::Relaxed) {
            // Another process may have changed the PIN since this login: the keystore says
            // (read only here, off the common path).
            self.token.update_pin_expired();
            if self.token.pin_expired.load(Ordering::Relaxed) {
                return Err(CKR_PIN_EXPIRED);
            }
        }
        Ok(())
    }

    /// `CKS_*` state.
    pub fn state(&self) -> CK_STATE {
        match (self.token.login(), self.rw) {
            (LOGGED_USER, true) => CKS_RW_USER_FUNCTIONS,
            (LOGGED_USER, false) => CKS_RO_USER_FUNCTIONS,
            (LOGGED_SO, _) => CKS_RW_SO_FUNCTIONS,
            (_, true) => CKS_RW_PUBLIC_SESSION,
            (_, false) => CKS_RO_PUBLIC_SESSION,
        }
    }
}

impl SoftToken {
    /// The session `h`.
    pub fn session(&self, h: CK_SESSION_HANDLE) -> CkResult<Arc<Session>> {
        self.sessions.get(h).ok_or(CKR_SESSION_HANDLE_INVALID)
    }

    /// The session behind `h`, lent to a framework that links the token in
    /// ([`opencf_abi::Backend::pin_session`]).
    pub fn pin_session(&self, h: CK_SESSION_HANDLE) -> Option<opencf_abi::Pinned> {
        let s: Arc<Session> = self.sessions.get(h)?;
        Some(s)
    }

    /// The session a caller pinned, while it is open.
    pub fn pinned<'a>(&self, p: &'a opencf_abi::Pinned) -> CkResult<&'a Session> {
        match p.downcast_ref::<Session>() {
            Some(s) if !s.closed.load(Ordering::Acquire) => Ok(s),
            _ => Err(CKR_SESSION_HANDLE_INVALID),
        }
    }

    /// A key object for an operation, lent from the session's cache of looked-up objects
    /// (no shared table access and no shared reference count on the hot path while nothing
    /// changes).
    pub fn cached_key<'a>(
        &self,
        sess: &Session,
        keys: &'a mut SessionKeys,
        h: CK_OBJECT_HANDLE,
        missing: CK_RV,
    ) -> CkResult<&'a Arc<Object>> {
        sess.token.sync_if_changed(self)?;
        let epoch = self.epoch.load(Ordering::Acquire);
        if keys.epoch != epoch {
            keys.map.clear();
            keys.epoch = epoch;
        }
        if !keys.map.contains_key(&h) {
            let o = self.visible_object(sess, h, missing)?;
            if keys.map.len() > 256 {
                keys.map.clear();
            }
            keys.map.insert(h, o);
        }
        let o = keys.map.get(&h).ok_or(missing)?;
        if o.is_private() && !sess.token.user_logged_in() {
            return Err(missing);
        }
        Ok(o)
    }

    /// Like [`SoftToken::cached_key`], returning a shared reference to keep.
    pub fn op_key(
        &self,
        sess: &Session,
        st: &mut OpState,
        h: CK_OBJECT_HANDLE,
        missing: CK_RV,
    ) -> CkResult<Arc<Object>> {
        self.cached_key(sess, &mut st.keys, h, missing).cloned()
    }

    /// `C_OpenSession`.
    pub fn open_session(&self, slot: CK_SLOT_ID, flags: CK_FLAGS) -> CkResult<CK_SESSION_HANDLE> {
        if flags & CKF_SERIAL_SESSION == 0 {
            return Err(CKR_SESSION_PARALLEL_NOT_SUPPORTED);
        }
        let token = self.token(slot)?;
        // Every call answers at once: the token has no asynchronous sessions (it does not
        // flag `CKF_ASYNC_SESSION_SUPPORTED`).
        if flags & CKF_ASYNC_SESSION != 0 {
            return Err(CKR_SESSION_ASYNC_NOT_SUPPORTED);
        }
        if !token.initialized() {
            return Err(CKR_TOKEN_NOT_RECOGNIZED);
        }
        let rw = flags & CKF_RW_SESSION != 0;
        if !rw && token.login() == LOGGED_SO {
            return Err(CKR_SESSION_READ_WRITE_SO_EXISTS);
        }
        token.refresh(self, false)?;
        let handle = self.next_session.fetch_add(1, Ordering::Relaxed);
        let sess = Session {
            handle,
            slot,
            token,
            rw,
            flags,
            closed: AtomicBool::new(false),
            state: Mutex::new(OpState::default()),
        };
        self.sessions.insert(handle, Arc::new(sess));
        Ok(handle)
    }

    /// Ends a session: its session objects go, and the last session of a token logs out.
    fn end_session(&self, sess: &Session) {
        // Before its objects go: one that another thread makes in it meanwhile sees the
        // flag once it is in, and takes itself out (`store_objects`).
        sess.closed.store(true, Ordering::SeqCst);
        self.sessions.remove(sess.handle);
        let removed = self.objects.remove_where(|o| o.owner == Some(sess.handle));
        if !removed.is_empty() {
            self.bump_epoch();
        }
        let others = self.sessions.filter(|s| s.slot == sess.slot);
        if others.is_empty() {
            self.logout_token(&sess.token);
        }
    }

    /// `C_CloseSession`.
    pub fn close_session(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        let sess = self.session(s)?;
        self.end_session(&sess);
        Ok(())
    }

    /// `C_CloseAllSessions`.
    pub fn close_all_sessions(&self, slot: CK_SLOT_ID) -> CkResult<()> {
        self.token(slot)?;
        for sess in self.sessions.filter(|s| s.slot == slot) {
            self.end_session(&sess);
        }
        Ok(())
    }

    /// `C_GetSessionInfo`.
    pub fn get_session_info(&self, s: CK_SESSION_HANDLE) -> CkResult<CK_SESSION_INFO> {
        let sess = self.session(s)?;
        Ok(CK_SESSION_INFO {
            slotID: sess.slot,
            state: sess.state(),
            flags: sess.flags & (CKF_RW_SESSION | CKF_SERIAL_SESSION),
            ulDeviceError: 0,
        })
    }

    /// `C_SessionCancel`: ends the operations named by `flags`.
    pub fn session_cancel(&self, s: CK_SESSION_HANDLE, flags: CK_FLAGS) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = sess.lock();
        if flags & CKF_ENCRYPT != 0 {
            st.encrypt = None;
        }
        if flags & CKF_DECRYPT != 0 {
            st.decrypt = None;
        }
        if flags & CKF_DIGEST != 0 {
            st.digest = None;
        }
        if flags & CKF_SIGN != 0 {
            st.sign = None;
        }
        if flags & CKF_VERIFY != 0 {
            st.verify = None;
            st.verify_signature = None;
        }
        if flags & CKF_SIGN_RECOVER != 0 {
            st.sign_recover = None;
        }
        if flags & CKF_VERIFY_RECOVER != 0 {
            st.verify_recover = None;
        }
        if flags & CKF_FIND_OBJECTS != 0 {
            st.find = None;
        }
        if flags & CKF_MESSAGE_ENCRYPT != 0 {
            st.message_encrypt = None;
        }
        if flags & CKF_MESSAGE_DECRYPT != 0 {
            st.message_decrypt = None;
        }
        Ok(())
    }

    /// `C_GetOperationState`: only a lone digest can be saved.
    pub fn get_operation_state(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        let sess = self.session(s)?;
        let st = sess.lock();
        let others = st.encrypt.is_some()
            || st.decrypt.is_some()
            || st.sign.is_some()
            || st.verify.is_some()
            || st.sign_recover.is_some()
            || st.verify_recover.is_some()
            || st.verify_signature.is_some()
            || st.message_encrypt.is_some()
            || st.message_decrypt.is_some();
        match &st.digest {
            Some(_) if others || st.digest_keyed => Err(CKR_STATE_UNSAVEABLE),
            Some(d) => {
                let state = d.state()?;
                out.write(&state)?;
                Ok(())
            }
            None if others => Err(CKR_STATE_UNSAVEABLE),
            None => Err(CKR_OPERATION_NOT_INITIALIZED),
        }
    }

    /// `C_SetOperationState`.
    pub fn set_operation_state(&self, s: CK_SESSION_HANDLE, state: &[u8]) -> CkResult<()> {
        let sess = self.session(s)?;
        let d = mech::digest_restore(state)?;
        let mut st = sess.lock();
        st.digest = Some(d);
        // The state of a digest under way: `C_Digest` may not follow, as after
        // `C_DigestUpdate`.
        st.digest_multi = true;
        st.digest_keyed = false;
        Ok(())
    }

    /// `C_Login`.
    pub fn login(&self, s: CK_SESSION_HANDLE, user: CK_USER_TYPE, pin: &[u8]) -> CkResult<()> {
        let sess = self.session(s)?;
        let token = sess.token.clone();
        let store = token.store()?;
        match user {
            CKU_CONTEXT_SPECIFIC => {
                // For the signature or decryption under way (PKCS#11 3.2 §5.6.4): the PIN
                // authorizes the next use of its key.
                let mut st = sess.lock();
                if st.sign.is_none() && st.decrypt.is_none() {
                    return Err(CKR_OPERATION_NOT_INITIALIZED);
                }
                if token.login() != LOGGED_USER {
                    return Err(CKR_USER_NOT_LOGGED_IN);
                }
                store
                    .login(CKU_USER, pin)
                    .map_err(|e| token.pin_store_err(e))?;
                st.sign_context_auth = st.sign.is_some();
                st.decrypt_context_auth = st.decrypt.is_some();
                Ok(())
            }
            CKU_USER | CKU_SO => {
                let current = token.login();
                let wanted = if user == CKU_USER {
                    LOGGED_USER
                } else {
                    LOGGED_SO
                };
                if current == wanted {
                    return Err(CKR_USER_ALREADY_LOGGED_IN);
                }
                if current != LOGGED_OUT {
                    return Err(CKR_USER_ANOTHER_ALREADY_LOGGED_IN);
                }
                if user == CKU_SO
                    && !self
                        .sessions
                        .filter(|x| x.slot == sess.slot && !x.rw)
                        .is_empty()
                {
                    return Err(CKR_SESSION_READ_ONLY_EXISTS);
                }
                let mk = store.login(user, pin).map_err(|e| token.pin_store_err(e))?;
                *token.master_key.lock().unwrap_or_else(|e| e.into_inner()) = Some(mk);
                token.login_state.store(wanted, Ordering::Release);
                token.update_pin_expired();
                if user == CKU_USER {
                    // A login whose objects cannot be read fails whole: the token is left
                    // logged out, not logged in with no private objects to show.
                    if let Err(rv) = token.refresh(self, true) {
                        self.logout_token(&token);
                        return Err(rv);
                    }
                }
                Ok(())
            }
            _ => Err(CKR_USER_TYPE_INVALID),
        }
    }

    /// Logs a token out: forgets the master key and drops private objects from memory.
    pub fn logout_token(&self, token: &Token) {
        let was = token.login_state.swap(LOGGED_OUT, Ordering::AcqRel);
        *token.master_key.lock().unwrap_or_else(|e| e.into_inner()) = None;
        token.pin_expired.store(false, Ordering::Release);
        if was == LOGGED_USER {
            // Counted before the private objects go: one made meanwhile by another thread
            // either is in before they go, and goes with them, or sees the count move and
            // takes itself out (`store_objects`).
            token.logouts.fetch_add(1, Ordering::SeqCst);
            token.forget_private(self);
        }
    }

    /// `C_Logout`.
    pub fn logout(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        let sess = self.session(s)?;
        if sess.token.login() == LOGGED_OUT {
            return Err(CKR_USER_NOT_LOGGED_IN);
        }
        self.logout_token(&sess.token);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opencf_abi::{Attribute, Backend, InitArgs, MechParam};

    /// A session pinned by a framework runs the same operations as its handle, and answers
    /// `CKR_SESSION_HANDLE_INVALID` once closed, as the handle does.
    #[test]
    fn pinned_session_works_until_closed() {
        let dir = std::env::temp_dir().join(format!("opencf-pinned-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::env::set_var("OPENCF_SOFTTOKEN_DIR", &dir);
        let args = InitArgs {
            os_locking_ok: true,
            no_os_threads: false,
            framework: true,
        };
        let t = <SoftToken as Backend>::initialize(&args).unwrap();
        let slot = t.get_slot_list(true).unwrap()[0];
        let h = Backend::open_session(&t, slot, CKF_SERIAL_SESSION).unwrap();
        let pin = Backend::pin_session(&t, h).expect("the software token lends its sessions");
        assert!(
            Backend::pin_session(&t, h + 1000).is_none(),
            "no session behind it"
        );
        let key = Backend::create_object(
            &t,
            h,
            &[
                Attribute::ulong(CKA_CLASS, CKO_SECRET_KEY),
                Attribute::ulong(CKA_KEY_TYPE, CKK_AES),
                Attribute::new(CKA_VALUE, vec![0x42; 16]),
                Attribute::bool(CKA_TOKEN, false),
                Attribute::bool(CKA_PRIVATE, false),
                Attribute::bool(CKA_ENCRYPT, true),
                Attribute::bool(CKA_DECRYPT, true),
            ],
        )
        .unwrap();
        let gcm = Mechanism {
            mechanism: CKM_AES_GCM,
            param: MechParam::Gcm {
                iv: vec![1; 12],
                iv_bits: 96,
                aad: b"aad".to_vec(),
                tag_bits: 128,
            },
        };
        let run = |enc: &dyn Fn(&mut OutBuf) -> CkResult<()>| {
            let mut buf = vec![0u8; 64];
            let n = {
                let mut o = OutBuf::new(Some(&mut buf));
                enc(&mut o)?;
                o.len()
            };
            buf.truncate(n);
            Ok::<_, CK_RV>(buf)
        };
        // The same ciphertext through the pin and through the handle.
        Backend::pinned_encrypt_init(&t, &pin, &gcm, key).unwrap();
        let by_pin = run(&|o| Backend::pinned_encrypt(&t, &pin, b"sixteen byte msg", o)).unwrap();
        Backend::encrypt_init(&t, h, &gcm, key).unwrap();
        let by_handle = run(&|o| Backend::encrypt(&t, h, b"sixteen byte msg", o)).unwrap();
        assert_eq!(by_pin, by_handle);
        assert_eq!(by_pin.len(), 32, "ciphertext and tag");
        // An operation begun through the pin is the session's: the handle sees it active.
        Backend::pinned_decrypt_init(&t, &pin, &gcm, key).unwrap();
        assert_eq!(
            Backend::decrypt_init(&t, h, &gcm, key),
            Err(CKR_OPERATION_ACTIVE)
        );
        let plain = run(&|o| Backend::decrypt(&t, h, &by_pin, o)).unwrap();
        assert_eq!(plain, b"sixteen byte msg");
        // Digest through the pin.
        Backend::pinned_digest_init(&t, &pin, &Mechanism::new(CKM_SHA256)).unwrap();
        let d = run(&|o| Backend::pinned_digest(&t, &pin, b"abc", o)).unwrap();
        assert_eq!(d[0..4], [0xba, 0x78, 0x16, 0xbf]);
        // Closed: the pin answers as the handle does.
        Backend::close_session(&t, h).unwrap();
        assert_eq!(
            Backend::pinned_encrypt_init(&t, &pin, &gcm, key),
            Err(CKR_SESSION_HANDLE_INVALID)
        );
        assert_eq!(
            run(&|o| Backend::pinned_encrypt(&t, &pin, b"x", o)),
            Err(CKR_SESSION_HANDLE_INVALID)
        );
        assert_eq!(
            Backend::encrypt_init(&t, h, &gcm, key),
            Err(CKR_SESSION_HANDLE_INVALID)
        );
        // A pin of another module's type is refused, not misread.
        let other: opencf_abi::Pinned = Arc::new(7u32);
        assert_eq!(
            Backend::pinned_sign_init(&t, &other, &gcm, key),
            Err(CKR_SESSION_HANDLE_INVALID)
        );
        Backend::finalize(&t);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
