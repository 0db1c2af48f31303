//! Asynchronous functions (PKCS#11 3.2): `C_AsyncComplete`, `C_AsyncGetID`, `C_AsyncJoin`.
//! In a session opened with `CKF_ASYNC_SESSION`, `C_Sign` and `C_Decrypt` queue their request
//! for the engine and answer `CKR_PENDING`; `C_AsyncComplete` polls for the result.

use crate::mech::Prepared;
use crate::pending::{AsyncOp, Then};
use crate::{lock, rsa, Accel, Session};
use opencf_abi::sys::*;
use opencf_abi::{AsyncDone, CkResult, OutBuf};
use std::sync::{Arc, Mutex};

impl Accel {
    /// `C_AsyncComplete`.
    pub(crate) fn async_complete(
        &self,
        s: CK_SESSION_HANDLE,
        function: &str,
    ) -> CkResult<AsyncDone> {
        let sess = self.session(s)?;
        let mut st = lock(&sess);
        let p = st
            .pending_of(function)
            .ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        let Some(r) = p.poll(self.sched.kind(), &self.gather) else {
            return Ok(AsyncDone::Pending);
        };
        if let Some(slot) = st.pending_slot(function) {
            *slot = None;
        }
        r.map(AsyncDone::Output)
    }

    /// `C_AsyncGetID`: pending operations do not outlive `C_Finalize` here, so none has an
    /// identifier to resume it by (`CKR_STATE_UNSAVEABLE`).
    pub(crate) fn async_get_id(&self, s: CK_SESSION_HANDLE, function: &str) -> CkResult<CK_ULONG> {
        let sess = self.session(s)?;
        let pending = lock(&sess).pending_of(function).is_some();
        Err(if pending {
            CKR_STATE_UNSAVEABLE
        } else {
            CKR_OPERATION_NOT_INITIALIZED
        })
    }

    /// `C_AsyncJoin`: no identifier is ever handed out ([`Accel::async_get_id`]).
    pub(crate) fn async_join(
        &self,
        s: CK_SESSION_HANDLE,
        _function: &str,
        _id: CK_ULONG,
    ) -> CkResult<()> {
        self.session(s)?;
        Err(CKR_SAVED_STATE_INVALID)
    }

    /// `CKR_OPERATION_ACTIVE` while `function` is pending in session `s`: its operation has
    /// not ended until `C_AsyncComplete` reports it.
    pub(crate) fn not_pending(&self, s: CK_SESSION_HANDLE, function: &str) -> CkResult<()> {
        let sess = self.session(s)?;
        if lock(&sess).pending_of(function).is_some() {
            return Err(CKR_OPERATION_ACTIVE);
        }
        Ok(())
    }

    /// In an asynchronous session, an operation `prepare`d for the engine is queued and the
    /// call answers `CKR_PENDING`; one done at once (OpenSSL's path) is written to `out`.
    pub(crate) fn maybe_pending(
        &self,
        sess: &Mutex<Session>,
        function: &'static str,
        prepared: Prepared<'_>,
        key: &Arc<rsa::RsaKey>,
        then: Then,
        out: &mut OutBuf,
    ) -> CkResult<()> {
        match prepared {
            Prepared::Done(v) => out.write(&v).map(|_| ()),
            Prepared::Engine(ticket, input) => {
                let op = AsyncOp::start(function, &self.sched, ticket, key.clone(), input, then)?;
                lock(sess).set_pending(op);
                Err(CKR_PENDING)
            }
        }
    }
}
