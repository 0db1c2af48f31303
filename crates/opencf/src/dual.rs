//! Dual-function operations: `C_DigestEncryptUpdate`, `C_DecryptDigestUpdate`,
//! `C_SignEncryptUpdate`, `C_DecryptVerifyUpdate`.
//!
//! A pass-through session hands them to its provider. On the metaslot the two operations may
//! run in different providers, so each call is composed of the two single-function updates,
//! under the session's lock: the cipher step first, so that a size query or a buffer too small
//! leaves both operations as they were, then the digest, signature or verification step on the
//! plaintext (the input when encrypting, the output when decrypting). This is also the order
//! of the software token's own dual functions, and their answers agree.

use crate::metaslot::OpKind;
use crate::route::update_ends;
use crate::{dispatch, OpenCf};
use opencf_abi::sys::*;
use opencf_abi::*;

impl OpenCf {
    /// A metaslot dual-function update: the `cipher` step (`Encrypt` or `Decrypt`) and then
    /// the `second` one (`Digest`, `Sign` or `Verify`) on the plaintext.
    fn meta_dual(
        &self,
        m: &opencf_abi::sync::SessionLock<crate::metaslot::MetaSession>,
        cipher: OpKind,
        second: OpKind,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        let mut ms = self.lock(m);
        if ms.ops[second as usize].is_none() {
            return Err(CKR_OPERATION_NOT_INITIALIZED);
        }
        let query = out.is_query();
        self.step_in(&mut ms, cipher, data.len(), query, update_ends, |p, h| {
            if cipher == OpKind::Encrypt {
                p.encrypt_update(h, data, &mut *out)
            } else {
                p.decrypt_update(h, data, &mut *out)
            }
        })?;
        if query {
            return Ok(());
        }
        let plain = if cipher == OpKind::Encrypt {
            data
        } else {
            out.filled().unwrap_or(&[])
        };
        self.step_in(
            &mut ms,
            second,
            plain.len(),
            false,
            update_ends,
            |p, h| match second {
                OpKind::Digest => p.digest_update(h, plain),
                OpKind::Sign => p.sign_update(h, plain),
                _ => p.verify_update(h, plain),
            },
        )
    }

    /// `C_DigestEncryptUpdate`.
    pub fn digest_encrypt_update(
        &self,
        s: CK_SESSION_HANDLE,
        d: &[u8],
        o: &mut OutBuf,
    ) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.digest_encrypt_update(h, d, o), |m| {
            self.meta_dual(m, OpKind::Encrypt, OpKind::Digest, d, o)
        })
    }

    /// `C_DecryptDigestUpdate`.
    pub fn decrypt_digest_update(
        &self,
        s: CK_SESSION_HANDLE,
        d: &[u8],
        o: &mut OutBuf,
    ) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.decrypt_digest_update(h, d, o), |m| {
            self.meta_dual(m, OpKind::Decrypt, OpKind::Digest, d, o)
        })
    }

    /// `C_SignEncryptUpdate`.
    pub fn sign_encrypt_update(
        &self,
        s: CK_SESSION_HANDLE,
        d: &[u8],
        o: &mut OutBuf,
    ) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.sign_encrypt_update(h, d, o), |m| {
            self.meta_dual(m, OpKind::Encrypt, OpKind::Sign, d, o)
        })
    }

    /// `C_DecryptVerifyUpdate`.
    pub fn decrypt_verify_update(
        &self,
        s: CK_SESSION_HANDLE,
        d: &[u8],
        o: &mut OutBuf,
    ) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.decrypt_verify_update(h, d, o), |m| {
            self.meta_dual(m, OpKind::Decrypt, OpKind::Verify, d, o)
        })
    }
}
