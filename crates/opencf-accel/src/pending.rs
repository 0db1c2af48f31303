//! Operations of asynchronous sessions (PKCS#11 3.2, `CKF_ASYNC_SESSION`): a `C_Sign` or
//! `C_Decrypt` admitted to the engine is blinded and queued, and the call answers
//! `CKR_PENDING` at once, so one thread can keep many requests in flight (one per session);
//! `C_AsyncComplete` polls, and once both halves are back finishes the operation in the
//! polling thread (recombination, the check with the public exponent, unblinding,
//! unpadding). An ECDSA `C_Sign` waits among the requests gathered for a pass
//! ([`crate::ecdsa`]), which a poll runs if it has not run yet.
//!
//! A result that fails its check (an engine fault) is not an error here: the operation is
//! done again with OpenSSL's own private operation, as the framework would have done on
//! another provider had the call been synchronous (its input is gone by then).

use crate::ecdsa::{Gather, Request};
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
    work: Work,
}

/// What a pending operation waits for.
enum Work {
    /// An RSA private operation's two halves on the scheduler.
    Rsa(RsaOp),
    /// An ECDSA signature among the gathered requests ([`crate::ecdsa`]).
    Ecdsa(Arc<Request>),
}

/// An RSA private operation in flight.
struct RsaOp {
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
            work: Work::Rsa(RsaOp {
                key,
                pend,
                sub,
                input,
                then,
            }),
        })
    }

    /// A `C_Sign` waiting among the gathered ECDSA requests.
    pub fn ecdsa(req: Arc<Request>) -> AsyncOp {
        AsyncOp {
            function: "C_Sign",
            work: Work::Ecdsa(req),
        }
    }

    /// `None` while the engine still works on it; then the output (the signature, the
    /// plaintext) or the operation's error. An ECDSA request still waiting is signed now,
    /// in a pass with the other waiting requests (`gather`).
    pub fn poll(&self, kind: Kind, gather: &Gather) -> Option<CkResult<Zeroizing<Vec<u8>>>> {
        let op = match &self.work {
            Work::Rsa(op) => op,
            Work::Ecdsa(req) => return gather.poll(kind, req).map(|r| r.map(Zeroizing::new)),
        };
        let halves = op.sub.poll()?;
        let raw = halves.and_then(|h| op.key.finish(&op.pend, h).ok());
        Some(match (&op.then, raw) {
            (Then::Sign, Some(s)) => Ok(s),
            (Then::Sign, None) => op.key.private_openssl(&op.input),
            (Then::Decrypt(d), Some(m)) => d.unpad(false, &m),
            (Then::Decrypt(d), None) => d.unpad(true, &op.input),
        })
    }
}
