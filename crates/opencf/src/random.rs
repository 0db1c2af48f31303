//! Random numbers: `C_SeedRandom`, `C_GenerateRandom`.
//!
//! On the metaslot, both go to the first provider (config order) whose `random` setting is on
//! and that has a token; a recoverable error moves to the next. So `C_SeedRandom` answers as
//! the provider whose generator it would seed: `CKR_RANDOM_SEED_NOT_SUPPORTED` from the
//! software token, whose OpenSSL generator seeds itself.

use crate::providers::Provider;
use crate::route::recoverable;
use crate::{dispatch, MetaSession, OpenCf};
use opencf_abi::sync::SessionLock;
use opencf_abi::sys::*;
use opencf_abi::*;

impl OpenCf {
    /// `C_SeedRandom`.
    pub fn seed_random(&self, s: CK_SESSION_HANDLE, seed: &[u8]) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.seed_random(h, seed), |m| {
            self.in_random_provider(m, |p, h| p.seed_random(h, seed))
        })
    }
    /// `C_GenerateRandom`.
    pub fn generate_random(&self, s: CK_SESSION_HANDLE, out: &mut [u8]) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.generate_random(h, out), |m| {
            self.in_random_provider(m, |p, h| p.generate_random(h, &mut *out))
        })
    }

    /// Runs `f` in the metaslot session's session of the first provider with `random` on
    /// that takes it; a recoverable error (or `CKR_RANDOM_NO_RNG`) tries the next.
    fn in_random_provider(
        &self,
        m: &SessionLock<MetaSession>,
        mut f: impl FnMut(&Provider, CK_SESSION_HANDLE) -> CkResult<()>,
    ) -> CkResult<()> {
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
            match f(&pr.p, h) {
                Ok(()) => return Ok(()),
                Err(e) if recoverable(e) || e == CKR_RANDOM_NO_RNG => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }
}
