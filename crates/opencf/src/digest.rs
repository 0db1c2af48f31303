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
            self.meta_step(m, OpKind::Digest, d.len(), false, update_ends, |p, h| {
                p.digest_update(h, d)
            })
        })
    }
    /// `C_DigestKey`: the key is cloned into the provider running the digest if needed.
    ///
    /// An error leaves the operation active, as the software token (and SoftHSMv2) leave it
    /// for a key they cannot digest: the metaslot must not end its half of an operation whose
    /// other half stays active in the provider, or the session would refuse a new
    /// `C_DigestInit` (`CKR_OPERATION_ACTIVE`) while answering every other digest call with
    /// `CKR_OPERATION_NOT_INITIALIZED`. A provider that ended its operation on the error
    /// answers the next step so, and that step ends the metaslot's too.
    pub fn digest_key(&self, s: CK_SESSION_HANDLE, k: CK_OBJECT_HANDLE) -> CkResult<()> {
        dispatch!(self, s, |p, h, @prov| {
            self.not_a_clone_or(prov, k, CKR_KEY_HANDLE_INVALID)?;
            p.digest_key(h, k)
        }, |m| {
            let mut ms = self.lock(m);
            let b = self.meta_bound(&mut ms, OpKind::Digest)?;
            let r = self
                .with_key_in(&mut ms, b.prov, k, |_, pk| {
                    self.p(b.prov).digest_key(b.h, pk)
                })?
                .unwrap_or(Err(CKR_KEY_INDIGESTIBLE));
            if r.is_ok() {
                if let Some(op) = ms.ops[OpKind::Digest as usize].as_mut() {
                    op.keyed = true;
                }
            }
            r
        })
    }
    /// `C_DigestFinal`.
    pub fn digest_final(&self, s: CK_SESSION_HANDLE, o: &mut OutBuf) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.digest_final(h, o), |m| {
            let q = o.is_query();
            self.meta_step(m, OpKind::Digest, 0, q, final_ends(q), |p, h| {
                p.digest_final(h, o)
            })
        })
    }
}
