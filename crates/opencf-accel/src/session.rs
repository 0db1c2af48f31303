//! Session management: `C_OpenSession`, `C_CloseSession`, `C_CloseAllSessions`,
//! `C_GetSessionInfo`, `C_SessionCancel`, `C_Login`, `C_Logout`. The token needs no login:
//! a user login changes the state the sessions report and lets private session objects be
//! made, which `C_Logout` destroys.

use crate::{lock, read, write, Accel, Session, SLOT};
use opencf_abi::sys::*;
use opencf_abi::CkResult;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

impl Accel {
    /// `C_OpenSession`.
    pub(crate) fn open_session(
        &self,
        slot: CK_SLOT_ID,
        flags: CK_FLAGS,
    ) -> CkResult<CK_SESSION_HANDLE> {
        self.check_slot(slot)?;
        if flags & CKF_SERIAL_SESSION == 0 {
            return Err(CKR_SESSION_PARALLEL_NOT_SUPPORTED);
        }
        let h = self.next_handle.fetch_add(1, Ordering::Relaxed);
        let s = Session {
            flags,
            ..Session::default()
        };
        write(&self.sessions).insert(h, Arc::new(Mutex::new(s)));
        Ok(h)
    }

    /// `C_CloseSession`.
    pub(crate) fn close_session(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        write(&self.sessions)
            .remove(&s)
            .ok_or(CKR_SESSION_HANDLE_INVALID)?;
        write(&self.objects).retain(|_, o| o.session != s);
        // The last session's end ends the login, as a `C_Logout` would.
        if read(&self.sessions).is_empty() {
            self.end_login();
        }
        Ok(())
    }

    /// `C_CloseAllSessions`.
    pub(crate) fn close_all_sessions(&self, slot: CK_SLOT_ID) -> CkResult<()> {
        self.check_slot(slot)?;
        write(&self.sessions).clear();
        write(&self.objects).clear();
        self.logged_in.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// `C_GetSessionInfo`.
    pub(crate) fn get_session_info(&self, s: CK_SESSION_HANDLE) -> CkResult<CK_SESSION_INFO> {
        let sess = self.session(s)?;
        let flags = lock(&sess).flags;
        let rw = flags & CKF_RW_SESSION != 0;
        let state = match (self.logged_in.load(Ordering::Relaxed), rw) {
            (true, true) => CKS_RW_USER_FUNCTIONS,
            (true, false) => CKS_RO_USER_FUNCTIONS,
            (false, true) => CKS_RW_PUBLIC_SESSION,
            (false, false) => CKS_RO_PUBLIC_SESSION,
        };
        Ok(CK_SESSION_INFO {
            slotID: SLOT,
            state,
            flags: flags & (CKF_RW_SESSION | CKF_SERIAL_SESSION | CKF_ASYNC_SESSION),
            ulDeviceError: 0,
        })
    }

    /// `C_SessionCancel`.
    pub(crate) fn session_cancel(&self, s: CK_SESSION_HANDLE, flags: CK_FLAGS) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = lock(&sess);
        if flags & CKF_SIGN != 0 {
            st.sign = None;
        }
        // A pending operation of a cancelled kind is dropped (its halves still run; the
        // results are thrown away).
        if flags & CKF_SIGN != 0 {
            st.pending_sign = None;
        }
        if flags & CKF_DECRYPT != 0 {
            st.pending_decrypt = None;
        }
        if flags & CKF_ENCRYPT != 0 {
            st.encrypt = None;
        }
        if flags & CKF_DECRYPT != 0 {
            st.decrypt = None;
        }
        if flags & CKF_FIND_OBJECTS != 0 {
            st.find = None;
        }
        Ok(())
    }

    /// `C_Login`: the token needs no login; a user login is accepted with any PIN. A second
    /// login answers `CKR_USER_ALREADY_LOGGED_IN`; the SO cannot log in
    /// (`CKR_USER_TYPE_INVALID`); a context-specific login needs a signature or decryption
    /// under way (`CKR_OPERATION_NOT_INITIALIZED`) and the user's login
    /// (`CKR_USER_NOT_LOGGED_IN`).
    pub(crate) fn login(
        &self,
        s: CK_SESSION_HANDLE,
        user: CK_USER_TYPE,
        _pin: &[u8],
    ) -> CkResult<()> {
        let sess = self.session(s)?;
        match user {
            CKU_USER => {}
            CKU_CONTEXT_SPECIFIC => {
                // As in the software token: for the signature or decryption under way, and
                // after the user's own login.
                let st = lock(&sess);
                let active = st.sign.is_some()
                    || st.decrypt.is_some()
                    || st.pending_sign.is_some()
                    || st.pending_decrypt.is_some();
                if !active {
                    return Err(CKR_OPERATION_NOT_INITIALIZED);
                }
                if !self.logged_in.load(Ordering::Acquire) {
                    return Err(CKR_USER_NOT_LOGGED_IN);
                }
                return Ok(());
            }
            _ => return Err(CKR_USER_TYPE_INVALID),
        }
        if self.logged_in.swap(true, Ordering::AcqRel) {
            return Err(CKR_USER_ALREADY_LOGGED_IN);
        }
        Ok(())
    }

    /// `C_Logout`: the private session objects are destroyed, as PKCS#11 asks (their
    /// handles stay invalid after a new login).
    pub(crate) fn logout(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        self.session(s)?;
        if !self.end_login() {
            return Err(CKR_USER_NOT_LOGGED_IN);
        }
        Ok(())
    }

    /// Ends the user's login, if there is one, and destroys the private objects (after the
    /// login has ended: `add_object` checks it under the same lock). Whether there was one.
    fn end_login(&self) -> bool {
        let was = self.logged_in.swap(false, Ordering::AcqRel);
        if was {
            write(&self.objects).retain(|_, o| !o.flag(CKA_PRIVATE));
        }
        was
    }

    /// Checks a session handle (`C_GetFunctionStatus`, `C_CancelFunction`).
    pub(crate) fn check_session(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        self.session(s).map(|_| ())
    }
}
