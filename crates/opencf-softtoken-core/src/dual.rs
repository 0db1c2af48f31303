//! Dual-function operations: `C_DigestEncryptUpdate`, `C_DecryptDigestUpdate`,
//! `C_SignEncryptUpdate`, `C_DecryptVerifyUpdate`. The cipher step runs first, so a size query
//! or a too-small buffer leaves both operations untouched.

use crate::SoftToken;
use opencf_abi::sys::*;
use opencf_abi::{CkResult, OutBuf};

/// Which second operation consumes the plaintext.
#[derive(Clone, Copy)]
enum Second {
    Digest,
    Sign,
    Verify,
}

impl SoftToken {
    fn dual(
        &self,
        s: CK_SESSION_HANDLE,
        data: &[u8],
        out: &mut OutBuf,
        encrypt: bool,
        second: Second,
    ) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = sess.lock();
        let ready = match second {
            Second::Digest => st.digest.is_some(),
            Second::Sign => st.sign.is_some(),
            Second::Verify => st.verify.is_some(),
        };
        if !ready {
            return Err(CKR_OPERATION_NOT_INITIALIZED);
        }
        SoftToken::cipher_update_in(&mut st, encrypt, data, out)?;
        if out.is_query() {
            return Ok(());
        }
        // The plaintext: the input when encrypting, the output when decrypting.
        let plain: Vec<u8> = if encrypt {
            data.to_vec()
        } else {
            out.filled().unwrap_or(&[]).to_vec()
        };
        // As after `C_DigestUpdate`, `C_SignUpdate` or `C_VerifyUpdate`: the single-part
        // call may no longer follow.
        match second {
            Second::Digest => st.digest_multi = true,
            Second::Sign => st.sign_multi = true,
            Second::Verify => st.verify_multi = true,
        }
        let r = match second {
            Second::Digest => st.digest.as_mut().map(|d| d.update(&plain)),
            Second::Sign => st.sign.as_mut().map(|d| d.op.update(&plain)),
            Second::Verify => st.verify.as_mut().map(|d| d.update(&plain)),
        }
        .unwrap_or(Err(CKR_OPERATION_NOT_INITIALIZED));
        if r.is_err() {
            // An error ends the operation, as it ends it in `C_DigestUpdate`,
            // `C_SignUpdate` and `C_VerifyUpdate`.
            match second {
                Second::Digest => st.digest = None,
                Second::Sign => st.sign = None,
                Second::Verify => st.verify = None,
            }
        }
        r
    }

    /// `C_DigestEncryptUpdate`.
    pub fn digest_encrypt_update(
        &self,
        s: CK_SESSION_HANDLE,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        self.dual(s, data, out, true, Second::Digest)
    }

    /// `C_DecryptDigestUpdate`.
    pub fn decrypt_digest_update(
        &self,
        s: CK_SESSION_HANDLE,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        self.dual(s, data, out, false, Second::Digest)
    }

    /// `C_SignEncryptUpdate`.
    pub fn sign_encrypt_update(
        &self,
        s: CK_SESSION_HANDLE,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        self.dual(s, data, out, true, Second::Sign)
    }

    /// `C_DecryptVerifyUpdate`.
    pub fn decrypt_verify_update(
        &self,
        s: CK_SESSION_HANDLE,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        self.dual(s, data, out, false, Second::Verify)
    }
}
