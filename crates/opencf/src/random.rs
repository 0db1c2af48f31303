//! Random numbers: `C_SeedRandom`, `C_GenerateRandom`.
//!
//! On the metaslot, random bytes come from the first provider (config order) whose `random`
//! setting is on and that has a token; a recoverable error moves to the next.

use crate::route::recoverable;
use crate::{dispatch, OpenCf};
use opencf_abi::sys::*;
use opencf_abi::*;

impl OpenCf {
    /// `C_SeedRandom`: accepted and ignored on the metaslot (providers seed themselves).
    pub fn seed_random(&self, s: CK_SESSION_HANDLE, seed: &[u8]) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.seed_random(h, seed), |_m| Ok(()))
    }
    /// `C_GenerateRandom`.
    pub fn generate_random(&self, s: CK_SESSION_HANDLE, out: &mut [u8]) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.generate_random(h, out), |m| {
            let mut ms = self.lock(m);
            let mut last = CKR_RANDOM_NO_RNG;
            for (i, pr) in self.providers.iter().enumerate() {
                if !pr.cfg.random || pr.meta_slot.is_none() {
                    continue;
                }
                let h = match self.session_in(&mut ms, i) {
                    Ok(h) => h,
                    Err(e) => {
                        last = e;
                        continue;
                    }
                };
                match pr.p.generate_random(h, out) {
                    Ok(()) => return Ok(()),
                    Err(e) if recoverable(e) || e == CKR_RANDOM_NO_RNG => last = e,
                    Err(e) => return Err(e),
                }
            }
            Err(last)
        })
    }
}
