//! The test-only fault switch, `$OPENCF_ACCEL_FAULT`, read at each request:
//!
//! * `engine-error`: every engine result comes back with a flipped bit; the check with the
//!   public exponent catches it and the operation answers `CKR_DEVICE_ERROR`;
//! * `busy`: every request is refused as if the queues were full: `CKR_DEVICE_MEMORY`.
//!
//! Anything else, or nothing: no fault.

/// The fault in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// No fault.
    None,
    /// Corrupted engine results.
    EngineError,
    /// Refused requests.
    Busy,
}

/// The fault named by `$OPENCF_ACCEL_FAULT` now.
pub fn current() -> Fault {
    match std::env::var("OPENCF_ACCEL_FAULT").as_deref() {
        Ok("engine-error") => Fault::EngineError,
        Ok("busy") => Fault::Busy,
        _ => Fault::None,
    }
}
