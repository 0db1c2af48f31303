//! Random number generation: `C_SeedRandom`, `C_GenerateRandom` (OpenSSL's DRBG).

use crate::SoftToken;
use opencf_abi::sys::*;
use opencf_abi::CkResult;

impl SoftToken {
    /// `C_SeedRandom`: OpenSSL seeds itself from the operating system; outside seeds are
    /// refused.
    pub fn seed_random(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        self.session(s)?;
        Err(CKR_RANDOM_SEED_NOT_SUPPORTED)
    }

    /// `C_GenerateRandom`.
    pub fn generate_random(&self, s: CK_SESSION_HANDLE, out: &mut [u8]) -> CkResult<()> {
        self.session(s)?;
        openssl::rand::rand_bytes(out).map_err(|_| CKR_FUNCTION_FAILED)
    }
}
