//! Signing and verification: `C_Sign*`, `C_SignRecover*`, `C_Verify*`, `C_VerifyRecover*`,
//! `C_VerifySignature*` (3.2). Routed on the metaslot.

use crate::metaslot::OpKind;
use crate::route::{always_ends, final_ends, update_ends};
use crate::{dispatch, OpenCf};
use opencf_abi::sys::*;
use opencf_abi::*;

macro_rules! init_fn {
    ($(#[$d:meta])* $name:ident, $kind:expr) => {
        $(#[$d])*
        pub fn $name(&self, s: CK_SESSION_HANDLE, mech: MechRef<'_>, k: CK_OBJECT_HANDLE) -> CkResult<()> {
            dispatch!(
                self,
                s,
                |p, h, c, @prov| {
                    crate::crypt::allowed(c, mech)?;
                    self.not_a_clone_or(prov, k, CKR_KEY_HANDLE_INVALID)?;
                    p.$name(h, mech, k)
                },
                |m| self.meta_init(m, $kind, mech, Some(k), &[])
            )
        }
    };
}

impl OpenCf {
    init_fn!(
        /// `C_SignInit`.
        sign_init,
        OpKind::Sign
    );
    init_fn!(
        /// `C_VerifyInit`.
        verify_init,
        OpKind::Verify
    );
    init_fn!(
        /// `C_SignRecoverInit`.
        sign_recover_init,
        OpKind::SignRecover
    );
    init_fn!(
        /// `C_VerifyRecoverInit`.
        verify_recover_init,
        OpKind::VerifyRecover
    );

    /// `C_Sign`.
    pub fn sign(&self, s: CK_SESSION_HANDLE, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.sign(h, d, o), |m| {
            let q = o.is_query();
            self.meta_single(m, OpKind::Sign, d.len(), q, |at| at.sign(d, &mut *o))
        })
    }
    /// `C_SignUpdate`.
    pub fn sign_update(&self, s: CK_SESSION_HANDLE, d: &[u8]) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.sign_update(h, d), |m| {
            self.meta_step(m, OpKind::Sign, d.len(), false, update_ends, |p, h| {
                p.sign_update(h, d)
            })
        })
    }
    /// `C_SignFinal`.
    pub fn sign_final(&self, s: CK_SESSION_HANDLE, o: &mut OutBuf) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.sign_final(h, o), |m| {
            let q = o.is_query();
            self.meta_step(m, OpKind::Sign, 0, q, final_ends(q), |p, h| {
                p.sign_final(h, o)
            })
        })
    }
    /// `C_SignRecover`.
    pub fn sign_recover(&self, s: CK_SESSION_HANDLE, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.sign_recover(h, d, o), |m| {
            let q = o.is_query();
            self.meta_single(m, OpKind::SignRecover, d.len(), q, |at| {
                at.p.sign_recover(at.h, d, &mut *o)
            })
        })
    }
    /// `C_Verify`.
    pub fn verify(&self, s: CK_SESSION_HANDLE, d: &[u8], sig: &[u8]) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.verify(h, d, sig), |m| {
            self.meta_single(m, OpKind::Verify, d.len(), false, |at| at.verify(d, sig))
        })
    }
    /// `C_VerifyUpdate`.
    pub fn verify_update(&self, s: CK_SESSION_HANDLE, d: &[u8]) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.verify_update(h, d), |m| {
            self.meta_step(m, OpKind::Verify, d.len(), false, update_ends, |p, h| {
                p.verify_update(h, d)
            })
        })
    }
    /// `C_VerifyFinal`.
    pub fn verify_final(&self, s: CK_SESSION_HANDLE, sig: &[u8]) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.verify_final(h, sig), |m| {
            self.meta_step(m, OpKind::Verify, 0, false, always_ends, |p, h| {
                p.verify_final(h, sig)
            })
        })
    }
    /// `C_VerifyRecover`.
    pub fn verify_recover(&self, s: CK_SESSION_HANDLE, sig: &[u8], o: &mut OutBuf) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.verify_recover(h, sig, o), |m| {
            let q = o.is_query();
            self.meta_single(m, OpKind::VerifyRecover, sig.len(), q, |at| {
                at.p.verify_recover(at.h, sig, &mut *o)
            })
        })
    }
    /// `C_VerifySignatureInit`.
    pub fn verify_signature_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: MechRef<'_>,
        k: CK_OBJECT_HANDLE,
        sig: &[u8],
    ) -> CkResult<()> {
        dispatch!(
            self,
            s,
            |p, h, c, @prov| {
                crate::crypt::allowed(c, mech)?;
                self.not_a_clone_or(prov, k, CKR_KEY_HANDLE_INVALID)?;
                p.verify_signature_init(h, mech, k, sig)
            },
            |m| self.meta_init(m, OpKind::VerifySignature, mech, Some(k), sig)
        )
    }
    /// `C_VerifySignature`.
    pub fn verify_signature(&self, s: CK_SESSION_HANDLE, d: &[u8]) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.verify_signature(h, d), |m| {
            self.meta_single(m, OpKind::VerifySignature, d.len(), false, |at| {
                at.p.verify_signature(at.h, d)
            })
        })
    }
    /// `C_VerifySignatureUpdate`.
    pub fn verify_signature_update(&self, s: CK_SESSION_HANDLE, d: &[u8]) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.verify_signature_update(h, d), |m| {
            self.meta_step(
                m,
                OpKind::VerifySignature,
                d.len(),
                false,
                update_ends,
                |p, h| p.verify_signature_update(h, d),
            )
        })
    }
    /// `C_VerifySignatureFinal`.
    pub fn verify_signature_final(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.verify_signature_final(h), |m| {
            self.meta_step(m, OpKind::VerifySignature, 0, false, always_ends, |p, h| {
                p.verify_signature_final(h)
            })
        })
    }
}
