//! The accelerator's own counters in `cryptoadm stat` (component `accel`), beside the
//! framework's per-mechanism rows of the provider: how its requests were served, which those
//! rows cannot tell. An RSA signature counted on the provider's row may have run on the engine
//! or with OpenSSL in the caller's thread (too few requests in flight for a pass to pay,
//! [`crate::sched`]); a large AES-GCM operation may have been cut into pieces that other cores
//! ran, or not.
//!
//! | counter | counts |
//! |---|---|
//! | `rsa_passes` | passes of the RSA engine |
//! | `rsa_halves` | CRT half-exponentiations in those passes (a request is two; a pass holds up to eight) |
//! | `rsa_direct` | RSA requests run with OpenSSL in the caller's thread: below the batching threshold, or of a size whose engine never wins on this CPU |
//! | `rsa_faults` | halves, and recombined results, that failed their check with the public exponent (never released: the request answered `CKR_DEVICE_ERROR`) |
//! | `rsa_break_even_2048`, `_3072`, `_4096` | the engine's break-even measured on this CPU, in hundredths of a request per pass (set once, when the size is measured, [`crate::calibrate`]; above 400 the engine is never used for that size) |
//! | `ecdsa_passes` | passes of the P-256 engine (asynchronous sessions) |
//! | `ecdsa_signatures` | signatures in those passes |
//! | `ecdsa_faults` | signatures of a pass that failed their check (then made with OpenSSL) |
//! | `bulk_operations` | AES operations cut into pieces for several cores |
//! | `bulk_pieces` | pieces of those operations |
//! | `bulk_pieces_helped` | pieces run by a helper thread rather than the caller's |
//!
//! `rsa_halves / rsa_passes` is the engine's average fill (8 at full passes); with
//! `$OPENCF_STAT=off` nothing is counted. Each count is one relaxed atomic addition, per pass
//! or per request, never per limb.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The counters ([module documentation](self)).
pub struct Counters {
    /// `rsa_passes`.
    pub rsa_passes: &'static AtomicU64,
    /// `rsa_halves`.
    pub rsa_halves: &'static AtomicU64,
    /// `rsa_direct`.
    pub rsa_direct: &'static AtomicU64,
    /// `rsa_faults`.
    pub rsa_faults: &'static AtomicU64,
    /// `rsa_break_even_2048`, `rsa_break_even_3072`, `rsa_break_even_4096`.
    pub rsa_break_even: [&'static AtomicU64; 3],
    /// `ecdsa_passes`.
    pub ecdsa_passes: &'static AtomicU64,
    /// `ecdsa_signatures`.
    pub ecdsa_signatures: &'static AtomicU64,
    /// `ecdsa_faults`.
    pub ecdsa_faults: &'static AtomicU64,
    /// `bulk_operations`.
    pub bulk_operations: &'static AtomicU64,
    /// `bulk_pieces`.
    pub bulk_pieces: &'static AtomicU64,
    /// `bulk_pieces_helped`.
    pub bulk_pieces_helped: &'static AtomicU64,
}

/// The component name in `cryptoadm stat`.
pub const COMPONENT: &str = "accel";

/// The process's counters, registered at the first call.
pub fn get() -> &'static Counters {
    static C: OnceLock<Counters> = OnceLock::new();
    C.get_or_init(|| {
        let c = |name| opencf_stat::counter(COMPONENT, name);
        Counters {
            rsa_passes: c("rsa_passes"),
            rsa_halves: c("rsa_halves"),
            rsa_direct: c("rsa_direct"),
            rsa_faults: c("rsa_faults"),
            rsa_break_even: [
                c("rsa_break_even_2048"),
                c("rsa_break_even_3072"),
                c("rsa_break_even_4096"),
            ],
            ecdsa_passes: c("ecdsa_passes"),
            ecdsa_signatures: c("ecdsa_signatures"),
            ecdsa_faults: c("ecdsa_faults"),
            bulk_operations: c("bulk_operations"),
            bulk_pieces: c("bulk_pieces"),
            bulk_pieces_helped: c("bulk_pieces_helped"),
        }
    })
}

/// Adds `n` to `counter`.
pub fn add(counter: &AtomicU64, n: usize) {
    if n > 0 {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
}
