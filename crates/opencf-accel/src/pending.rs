//! Operations of asynchronous sessions (PKCS#11 3.2, `CKF_ASYNC_SESSION`): a `C_Sign` or
//! `C_Decrypt` admitted to the engine is blinded and queued, and the call answers
//! `CKR_PENDING` at once, so one thread can keep many requests in flight (one per session);
//! `C_AsyncComplete` polls, and once both halves are back finishes the operation in the
//! polling thread (recombination, the check with the public exponent, unblinding,
//! unpadding).
//!
//! A result that fails its check (an engine fault) is not an error here: the operation is
//! done again with OpenSSL's own private operation, as the framework would have done on
//! another provider had the call been synchronous (its input is gone by then).

use crate::engine::Kind;
use crate::mech::DecryptOp;
use crate::rsa::{Pending, RsaKey};
use crate::sched::{Scheduler, Submitted, Ticket};
use opencf_abi::sys::*;
use opencf_abi::CkResult;
use std::sync::Arc;
use zeroize::Zeroizing;

/// What the raw result becomes.
pub enum Then {
    /// `C_Sign`: the raw result is the signature.
    Sign,
    /// `C_Decrypt`: the raw result is unpadded.
    Decrypt(DecryptOp),
}

/// An operation that answered `CKR_PENDING`.
pub struct AsyncOp {
    /// The function that started it (`"C_Sign"`, `"C_Decrypt"`).
    pub function: &'static str,
    key: Arc<RsaKey>,
    pend: Pending,
    sub: Submitted,
    /// The value raised to `d` (an encoded message or a ciphertext), for OpenSSL's path if
    /// the engine's result fails its check.
    input: Zeroizing<Vec<u8>>,
    then: Then,
}

impl AsyncOp {
    /// Blinds `input` and queues its halves (`CKR_DEVICE_MEMORY` when the queues are full).
    pub fn start(
        function: &'static str,
        sched: &Scheduler,
        ticket: Ticket<'_>,
        key: Arc<RsaKey>,
        input: Zeroizing<Vec<u8>>,
        then: Then,
    ) -> CkResult<AsyncOp> {
        let pend = key.begin(&input)?;
        let sub = sched
            .submit(ticket, &key, &pend)
            .map_err(|_| CKR_DEVICE_MEMORY)?;
        Ok(AsyncOp {
            function,
            key,
            pend,
            sub,
            input,
            then,
        })
    }

    /// `None` while the engine still works on it; then the output (the signature, the
    /// plaintext) or the operation's error.
    pub fn poll(&self, kind: Kind) -> Option<CkResult<Zeroizing<Vec<u8>>>> {
        let halves = self.sub.poll()?;
        let raw = halves.and_then(|[m1, m2]| self.key.finish(kind, &self.pend, &m1, &m2).ok());
        Some(match (&self.then, raw) {
            (Then::Sign, Some(s)) => Ok(s),
            (Then::Sign, None) => self.key.private_openssl(&self.input),
            (Then::Decrypt(op), Some(m)) => op.unpad(false, &m),
            (Then::Decrypt(op), None) => op.unpad(true, &self.input),
        })
    }
}
