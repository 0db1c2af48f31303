//! Message digesting: `C_DigestInit`, `C_Digest`, `C_DigestUpdate`, `C_DigestKey`,
//! `C_DigestFinal`. Routed on the metaslot like the other operations.

use crate::metaslot::OpKind;
use crate::route::{final_ends, update_ends};
use crate::{dispatch, OpenCf};
use opencf_abi::sys::*;
use opencf_abi::*;

impl OpenCf {
    /// `C_DigestInit`.
    pub fn digest_init(&self, s: CK_SESSION_HANDLE, mech: MechRef<'_>) -> CkResult<()> {
        dispatch!(
            self,
            s,
            |p, h, c| {
                crate::crypt::allowed(c, mech)?;
                p.digest_init(h, mech)
            },
            |m| self.meta_init(m, OpKind::Digest, mech, None, &[])
        )
    }
    /// `C_Digest`.
    pub fn digest(&self, s: CK_SESSION_HANDLE, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.digest(h, d, o), |m| {
            let q = o.is_query();
            self.meta_single(m, OpKind::Digest, d.len(), q, |at| at.digest(d, &mut *o))
        })
    }
    /// `C_DigestUpdate`.
    pub fn digest_update(&self, s: CK_SESSION_HANDLE, d: &[u8]) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.digest_update(h, d), |m| {
            self.meta_step(m, OpKind::Digest, d.len(), update_ends, |p, h| {
                p.digest_update(h, d)
            })
        })
    }
    /// `C_DigestKey`: the key is cloned into the provider running the digest if needed.
    pub fn digest_key(&self, s: CK_SESSION_HANDLE, k: CK_OBJECT_HANDLE) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.digest_key(h, k), |m| {
            let mut ms = self.lock(m);
            let b = self.meta_bound(&mut ms, OpKind::Digest)?;
            let r = match self.key_in(&mut ms, b.prov, k) {
                Ok(Some(pk)) => self.p(b.prov).digest_key(b.h, pk),
                Ok(None) => Err(CKR_KEY_INDIGESTIBLE),
                Err(e) => Err(e),
            };
            if r.is_err() {
                ms.ops[OpKind::Digest as usize] = None;
            }
            r
        })
    }
    /// `C_DigestFinal`.
    pub fn digest_final(&self, s: CK_SESSION_HANDLE, o: &mut OutBuf) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.digest_final(h, o), |m| {
            let q = o.is_query();
            self.meta_step(m, OpKind::Digest, 0, final_ends(q), |p, h| {
                p.digest_final(h, o)
            })
        })
    }
}
