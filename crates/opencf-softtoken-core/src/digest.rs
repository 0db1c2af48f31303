//! Message digesting: `C_DigestInit`, `C_Digest`, `C_DigestUpdate`, `C_DigestKey`,
//! `C_DigestFinal`.

use crate::crypt::check_mechanism;
use crate::mech;
use crate::session::Session;
use crate::SoftToken;
use opencf_abi::sys::*;
use opencf_abi::{CkResult, MechRef, Mechanism, OutBuf};

impl SoftToken {
    /// `C_DigestInit`.
    pub fn digest_init(&self, s: CK_SESSION_HANDLE, m: &Mechanism) -> CkResult<()> {
        self.digest_init_in(&*self.session(s)?, m.into())
    }

    /// `C_DigestInit` on a session already found (a pinned one, or by handle).
    pub fn digest_init_in(&self, sess: &Session, m: MechRef<'_>) -> CkResult<()> {
        let mut st = sess.lock();
        if st.digest.is_some() {
            return Err(CKR_OPERATION_ACTIVE);
        }
        // Parsed after the session's check (see `cipher_init`).
        check_mechanism(m.mechanism(), CKF_DIGEST)?;
        let op = m.with_parsed(mech::digest_init)?;
        st.digest = Some(op);
        st.digest_multi = false;
        st.digest_keyed = false;
        Ok(())
    }

    /// `C_Digest`.
    pub fn digest(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        self.digest_in(&*self.session(s)?, data, out)
    }

    /// `C_Digest` on a session already found.
    pub fn digest_in(&self, sess: &Session, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        let mut st = sess.lock();
        if st.digest.is_some() && st.digest_multi {
            // Single-part after multi-part: refused, and the operation ends.
            st.digest = None;
            return Err(CKR_OPERATION_ACTIVE);
        }
        let mut op = st.digest.take().ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        let r = op.one_shot(data, out);
        if crate::session::op_survives(out, &r) {
            st.digest = Some(op);
        }
        r
    }

    /// `C_DigestUpdate`.
    pub fn digest_update(&self, s: CK_SESSION_HANDLE, data: &[u8]) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = sess.lock();
        let op = st.digest.as_mut().ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        let r = op.update(data);
        st.digest_multi = true;
        if r.is_err() {
            st.digest = None;
        }
        r
    }

    /// `C_DigestKey`: digests a secret key's value.
    pub fn digest_key(&self, s: CK_SESSION_HANDLE, key: CK_OBJECT_HANDLE) -> CkResult<()> {
        let sess = self.session(s)?;
        sess.check_pin_ok()?;
        let mut st = sess.lock();
        if st.digest.is_none() {
            return Err(CKR_OPERATION_NOT_INITIALIZED);
        }
        let obj = self.op_key(&sess, &mut st, key, CKR_KEY_HANDLE_INVALID)?;
        if obj.class() != CKO_SECRET_KEY {
            return Err(CKR_KEY_INDIGESTIBLE);
        }
        let value = obj.key().value().map_err(|_| CKR_KEY_INDIGESTIBLE)?;
        st.digest_multi = true;
        st.digest_keyed = true;
        let op = st.digest.as_mut().ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        op.update(value)
    }

    /// `C_DigestFinal`.
    pub fn digest_final(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = sess.lock();
        let mut op = st.digest.take().ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        let r = op.finalize(out);
        if crate::session::op_survives(out, &r) {
            st.digest = Some(op);
        }
        r
    }
}
