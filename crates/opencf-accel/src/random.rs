//! Random number generation: `C_SeedRandom`, `C_GenerateRandom` (OpenSSL's generator).

use crate::Accel;
use opencf_abi::sys::*;
use opencf_abi::CkResult;

impl Accel {
    /// `C_SeedRandom`: OpenSSL's generator seeds itself from the operating system and takes
    /// no seed from here, so the call says so rather than accept bytes it would ignore.
    pub(crate) fn seed_random(&self, s: CK_SESSION_HANDLE, _seed: &[u8]) -> CkResult<()> {
        self.session(s)?;
        Err(CKR_RANDOM_SEED_NOT_SUPPORTED)
    }

    /// `C_GenerateRandom`.
    pub(crate) fn generate_random(&self, s: CK_SESSION_HANDLE, out: &mut [u8]) -> CkResult<()> {
        self.session(s)?;
        openssl::rand::rand_bytes(out).map_err(|_| CKR_FUNCTION_FAILED)
    }
}
