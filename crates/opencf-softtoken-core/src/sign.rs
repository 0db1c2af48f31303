//! Signing and verifying: `C_SignInit`, `C_Sign`, `C_SignUpdate`, `C_SignFinal`,
//! `C_SignRecoverInit`, `C_SignRecover`, `C_VerifyInit`, `C_Verify`, `C_VerifyUpdate`,
//! `C_VerifyFinal`, `C_VerifyRecoverInit`, `C_VerifyRecover`, and the 3.2
//! `C_VerifySignatureInit`, `C_VerifySignature`, `C_VerifySignatureUpdate`,
//! `C_VerifySignatureFinal`.

use crate::attrs::AttrMapExt;
use crate::crypt::{check_key, check_mechanism};
use crate::mech;
use crate::session::{RecoverOp, Session, SignState};
use crate::SoftToken;
use opencf_abi::sys::*;
use opencf_abi::{CkResult, MechRef, Mechanism, OutBuf};

impl SoftToken {
    /// `C_SignInit`.
    pub fn sign_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.sign_init_in(&*self.session(s)?, m.into(), key)
    }

    /// `C_SignInit` on a session already found (a pinned one, or by handle).
    pub fn sign_init_in(
        &self,
        sess: &Session,
        m: MechRef<'_>,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        sess.check_pin_ok()?;
        let mut st = sess.lock();
        if st.sign.is_some() {
            return Err(CKR_OPERATION_ACTIVE);
        }
        // Parsed after the session's checks (see `cipher_init`).
        check_mechanism(m.mechanism(), CKF_SIGN)?;
        m.with_parsed(|m| {
            let obj = self.op_key(sess, &mut st, key, CKR_KEY_HANDLE_INVALID)?;
            check_key(
                &obj,
                &[CKO_PRIVATE_KEY, CKO_SECRET_KEY],
                CKA_SIGN,
                m.mechanism,
            )?;
            let op = mech::sign_init(m, obj.key())?;
            let needs_auth = obj.attrs.is_true(CKA_ALWAYS_AUTHENTICATE);
            st.sign_context_auth = false;
            st.sign = Some(SignState { op, needs_auth });
            st.sign_multi = false;
            Ok(())
        })
    }

    /// `C_Sign` (`single`) or `C_SignFinal`: `f` ends the operation unless it only answers
    /// a size.
    fn sign_step(
        &self,
        sess: &Session,
        out: &mut OutBuf,
        single: bool,
        f: impl FnOnce(&mut SignState, &mut OutBuf) -> CkResult<()>,
    ) -> CkResult<()> {
        let mut st = sess.lock();
        let mut op = st.sign.take().ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        // `C_Sign` cannot end a multi-part operation; refused, it ends it, as `C_Digest` does.
        if single && st.sign_multi {
            return Err(CKR_OPERATION_ACTIVE);
        }
        // A key with `CKA_ALWAYS_AUTHENTICATE` signs only after `C_Login(CKU_CONTEXT_SPECIFIC)`;
        // a size query reveals nothing and may come first. Like every other error, this one
        // ends the operation.
        if op.needs_auth && !st.sign_context_auth && !out.is_query() {
            return Err(CKR_USER_NOT_LOGGED_IN);
        }
        let r = f(&mut op, out);
        if crate::session::op_survives(out, &r) {
            st.sign = Some(op);
        }
        r
    }

    /// `C_Sign`.
    pub fn sign(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        self.sign_in(&*self.session(s)?, data, out)
    }

    /// `C_Sign` on a session already found.
    pub fn sign_in(&self, sess: &Session, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        self.sign_step(sess, out, true, |op, out| op.op.one_shot(data, out))
    }

    /// `C_SignUpdate`.
    pub fn sign_update(&self, s: CK_SESSION_HANDLE, data: &[u8]) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = sess.lock();
        let op = st.sign.as_mut().ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        let r = op.op.update(data);
        if r.is_err() {
            st.sign = None;
        }
        st.sign_multi = true;
        r
    }

    /// `C_SignFinal`.
    pub fn sign_final(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        self.sign_step(&*self.session(s)?, out, false, |op, out| {
            op.op.finalize(out)
        })
    }

    fn recover_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        key: CK_OBJECT_HANDLE,
        sign: bool,
    ) -> CkResult<()> {
        let sess = self.session(s)?;
        sess.check_pin_ok()?;
        let mut st = sess.lock();
        let active = if sign {
            st.sign_recover.is_some()
        } else {
            st.verify_recover.is_some()
        };
        if active {
            return Err(CKR_OPERATION_ACTIVE);
        }
        let (flag, class, usage) = if sign {
            (CKF_SIGN_RECOVER, CKO_PRIVATE_KEY, CKA_SIGN_RECOVER)
        } else {
            (CKF_VERIFY_RECOVER, CKO_PUBLIC_KEY, CKA_VERIFY_RECOVER)
        };
        check_mechanism(m.mechanism, flag)?;
        let obj = self.op_key(&sess, &mut st, key, CKR_KEY_HANDLE_INVALID)?;
        check_key(&obj, &[class], usage, m.mechanism)?;
        if obj.attrs.ulong(CKA_KEY_TYPE)? != Some(CKK_RSA) {
            return Err(CKR_KEY_TYPE_INCONSISTENT);
        }
        let op = RecoverOp {
            mech: m.clone(),
            key: obj,
        };
        if sign {
            st.sign_recover = Some(op);
        } else {
            st.verify_recover = Some(op);
        }
        Ok(())
    }

    /// `C_SignRecoverInit`.
    pub fn sign_recover_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.recover_init(s, m, key, true)
    }

    /// `C_SignRecover`.
    pub fn sign_recover(
        &self,
        s: CK_SESSION_HANDLE,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = sess.lock();
        let op = st
            .sign_recover
            .take()
            .ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        let r = mech::sign_recover(&op.mech, op.key.key(), data, out);
        if crate::session::op_survives(out, &r) {
            st.sign_recover = Some(op);
        }
        r
    }

    /// `C_VerifyRecoverInit`.
    pub fn verify_recover_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.recover_init(s, m, key, false)
    }

    /// `C_VerifyRecover`.
    pub fn verify_recover(
        &self,
        s: CK_SESSION_HANDLE,
        sig: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = sess.lock();
        let op = st
            .verify_recover
            .take()
            .ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        let r = mech::verify_recover(&op.mech, op.key.key(), sig, out);
        if crate::session::op_survives(out, &r) {
            st.verify_recover = Some(op);
        }
        r
    }

    fn new_verify(
        &self,
        sess: &crate::session::Session,
        st: &mut crate::session::OpState,
        m: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<Box<dyn mech::VerifyOp>> {
        let obj = self.op_key(sess, st, key, CKR_KEY_HANDLE_INVALID)?;
        check_key(
            &obj,
            &[CKO_PUBLIC_KEY, CKO_SECRET_KEY],
            CKA_VERIFY,
            m.mechanism,
        )?;
        mech::verify_init(m, obj.key())
    }

    /// The checks and the operation of `C_VerifyInit` and `C_VerifySignatureInit`, the
    /// session's PIN checked and its state locked: one verification at a time, of either kind
    /// (`CKF_VERIFY` ends both), then the mechanism, parsed after the session's checks (see
    /// `cipher_init`), and the key.
    fn begin_verify(
        &self,
        sess: &Session,
        st: &mut crate::session::OpState,
        m: MechRef<'_>,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<Box<dyn mech::VerifyOp>> {
        if st.verify.is_some() || st.verify_signature.is_some() {
            return Err(CKR_OPERATION_ACTIVE);
        }
        check_mechanism(m.mechanism(), CKF_VERIFY)?;
        m.with_parsed(|m| self.new_verify(sess, st, m, key))
    }

    /// `C_VerifyInit`.
    pub fn verify_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.verify_init_in(&*self.session(s)?, m.into(), key)
    }

    /// `C_VerifyInit` on a session already found (a pinned one, or by handle).
    pub fn verify_init_in(
        &self,
        sess: &Session,
        m: MechRef<'_>,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        sess.check_pin_ok()?;
        let mut st = sess.lock();
        let op = self.begin_verify(sess, &mut st, m, key)?;
        st.verify = Some(op);
        st.verify_multi = false;
        Ok(())
    }

    /// `C_Verify`: ends the operation whatever the outcome.
    pub fn verify(&self, s: CK_SESSION_HANDLE, data: &[u8], sig: &[u8]) -> CkResult<()> {
        self.verify_in(&*self.session(s)?, data, sig)
    }

    /// `C_Verify` on a session already found.
    pub fn verify_in(&self, sess: &Session, data: &[u8], sig: &[u8]) -> CkResult<()> {
        let mut st = sess.lock();
        let mut op = st.verify.take().ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        if st.verify_multi {
            return Err(CKR_OPERATION_ACTIVE);
        }
        drop(st);
        op.one_shot(data, sig)
    }

    /// `C_VerifyUpdate`.
    pub fn verify_update(&self, s: CK_SESSION_HANDLE, data: &[u8]) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = sess.lock();
        let op = st.verify.as_mut().ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        let r = op.update(data);
        if r.is_err() {
            st.verify = None;
        }
        st.verify_multi = true;
        r
    }

    /// `C_VerifyFinal`.
    pub fn verify_final(&self, s: CK_SESSION_HANDLE, sig: &[u8]) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut op = sess
            .lock()
            .verify
            .take()
            .ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        op.finalize(sig)
    }

    /// `C_VerifySignatureInit`.
    pub fn verify_signature_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: MechRef<'_>,
        key: CK_OBJECT_HANDLE,
        sig: &[u8],
    ) -> CkResult<()> {
        let sess = self.session(s)?;
        sess.check_pin_ok()?;
        let mut st = sess.lock();
        let op = self.begin_verify(&sess, &mut st, m, key)?;
        st.verify_signature = Some((op, sig.to_vec()));
        st.verify_signature_multi = false;
        Ok(())
    }

    /// `C_VerifySignature`.
    pub fn verify_signature(&self, s: CK_SESSION_HANDLE, data: &[u8]) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = sess.lock();
        let (mut op, sig) = st
            .verify_signature
            .take()
            .ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        if st.verify_signature_multi {
            return Err(CKR_OPERATION_ACTIVE);
        }
        drop(st);
        op.one_shot(data, &sig)
    }

    /// `C_VerifySignatureUpdate`.
    pub fn verify_signature_update(&self, s: CK_SESSION_HANDLE, data: &[u8]) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = sess.lock();
        let (op, _) = st
            .verify_signature
            .as_mut()
            .ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        let r = op.update(data);
        if r.is_err() {
            st.verify_signature = None;
        }
        st.verify_signature_multi = true;
        r
    }

    /// `C_VerifySignatureFinal`.
    pub fn verify_signature_final(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        let sess = self.session(s)?;
        let (mut op, sig) = sess
            .lock()
            .verify_signature
            .take()
            .ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        op.finalize(&sig)
    }
}
