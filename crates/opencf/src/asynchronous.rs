//! Asynchronous function management (PKCS#11 3.2): `C_AsyncComplete`, `C_AsyncGetID`,
//! `C_AsyncJoin`.
//!
//! A session opened with `CKF_ASYNC_SESSION` on a provider's own slot is that provider's
//! asynchronous session: these calls go straight to it. On the metaslot, an asynchronous
//! session opens its sessions in providers that offer them (`CKF_ASYNC_SESSION_SUPPORTED`)
//! as asynchronous too; a single-part `C_Sign` or `C_Decrypt` that such a provider answers
//! with `CKR_PENDING` is remembered with the provider session that holds it, and
//! `C_AsyncComplete` asks that session. In both cases the provider writes the output into
//! the buffer of the application's original call, which it was handed directly.
//!
//! An operation answered `CKR_PENDING` has left the metaslot: it cannot fail over to another
//! provider, as its input is gone. The accelerator provider therefore finishes a result that
//! fails its check with OpenSSL itself rather than report the fault (docs/ACCEL.md).

use crate::{dispatch, OpenCf};
use opencf_abi::sys::*;
use opencf_abi::{AsyncDone, CkResult};

fn done(r: Option<usize>) -> AsyncDone {
    r.map_or(AsyncDone::Pending, AsyncDone::Written)
}

impl OpenCf {
    /// `C_AsyncComplete`.
    pub fn async_complete(&self, s: CK_SESSION_HANDLE, function: &str) -> CkResult<AsyncDone> {
        dispatch!(
            self,
            s,
            |p, h| p.async_complete(h, function).map(done),
            |m| {
                let mut ms = self.lock(m);
                let i = (ms.pending.iter())
                    .position(|(f, ..)| *f == function)
                    .ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
                let (_, prov, h) = ms.pending[i];
                let r = self.p(prov).async_complete(h, function);
                if r != Ok(None) {
                    ms.pending.swap_remove(i);
                }
                r.map(done)
            }
        )
    }

    /// `C_AsyncGetID`: nothing pending here outlives `C_Finalize`.
    pub fn async_get_id(&self, s: CK_SESSION_HANDLE, function: &str) -> CkResult<CK_ULONG> {
        dispatch!(self, s, |p, h| p.async_get_id(h, function), |m| {
            let pending = self.lock(m).pending.iter().any(|(f, ..)| *f == function);
            Err(if pending {
                CKR_STATE_UNSAVEABLE
            } else {
                CKR_OPERATION_NOT_INITIALIZED
            })
        })
    }

    /// `C_AsyncJoin`.
    pub fn async_join(&self, s: CK_SESSION_HANDLE, function: &str, id: CK_ULONG) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.async_join(h, function, id), |_m| Err(
            CKR_SAVED_STATE_INVALID
        ))
    }
}
