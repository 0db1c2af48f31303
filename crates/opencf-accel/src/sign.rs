//! Signing: `C_SignInit`, `C_Sign`, `C_SignUpdate`, `C_SignFinal`. RSA on the RSA engine
//! (OpenSSL in the caller's thread below the batching threshold, [`crate::sched`]), ECDSA
//! P-256 with OpenSSL, or on the P-256 engine in asynchronous sessions.

use crate::ecdsa;
use crate::mech::{self, SignOp};
use crate::pending::{AsyncOp, Then};
use crate::{lock, Accel, Session};
use opencf_abi::sys::*;
use opencf_abi::{CkResult, MechRef, OutBuf};
use std::sync::Mutex;

/// An active signature: RSA, or ECDSA with a P-256 key.
pub(crate) enum Sign {
    Rsa(SignOp),
    Ecdsa(ecdsa::EcdsaOp),
}

impl Sign {
    fn sig_len(&self) -> usize {
        match self {
            Sign::Rsa(op) => op.sig_len(),
            Sign::Ecdsa(op) => op.sig_len(),
        }
    }
}

impl Accel {
    /// `C_SignInit`: checks the session, an active operation, the mechanism, the layout of
    /// its parameter, the key, then the parameter's values.
    pub(crate) fn sign_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: MechRef<'_>,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.not_pending(s, "C_Sign")?;
        self.start(
            s,
            |st| &mut st.sign,
            || {
                if !mech::serves(m.mechanism(), CKF_SIGN) {
                    return Err(CKR_MECHANISM_INVALID);
                }
                m.with_parsed(|m| match m.mechanism {
                    CKM_ECDSA => {
                        let k = self.engine_key(key, CKK_EC, CKA_SIGN, m.mechanism)?;
                        ecdsa::EcdsaOp::new(m, k.ecdsa()?).map(Sign::Ecdsa)
                    }
                    _ => {
                        let k = self.engine_key(key, CKK_RSA, CKA_SIGN, m.mechanism)?;
                        SignOp::new(m, k.rsa()?).map(Sign::Rsa)
                    }
                })
            },
        )
    }

    /// `C_Sign`.
    pub(crate) fn sign(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        let sess = self.session(s)?;
        let op = lock(&sess)
            .sign
            .take()
            .ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        if let Sign::Rsa(op) = &op {
            op.check(data)?;
        }
        match out.reserve(op.sig_len()) {
            Ok(Some(_)) => {}
            r => {
                lock(&sess).sign = Some(op);
                return r.map(|_| ());
            }
        }
        let asynchronous = lock(&sess).flags & CKF_ASYNC_SESSION != 0;
        let mut op = match op {
            Sign::Rsa(op) => op,
            Sign::Ecdsa(op) => return self.ecdsa_sign(&sess, &op, asynchronous, data, out),
        };
        if asynchronous {
            let prepared = op.prepare(&self.sched, Some(data), true)?;
            let key = op.key().clone();
            return self.maybe_pending(&sess, "C_Sign", prepared, &key, Then::Sign, out);
        }
        let sig = op.sign(&self.sched, Some(data))?;
        out.write(&sig)?;
        Ok(())
    }

    /// `C_SignUpdate`.
    pub(crate) fn sign_update(&self, s: CK_SESSION_HANDLE, data: &[u8]) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = lock(&sess);
        let Some(Sign::Rsa(op)) = st.sign.as_mut() else {
            let r = match st.sign {
                Some(_) => CKR_FUNCTION_NOT_SUPPORTED,
                None => CKR_OPERATION_NOT_INITIALIZED,
            };
            st.sign = None;
            return Err(r);
        };
        if !op.multi_part() {
            st.sign = None;
            return Err(CKR_FUNCTION_NOT_SUPPORTED);
        }
        let r = op.update(data);
        if r.is_err() {
            st.sign = None;
        }
        r
    }

    /// `C_SignFinal`.
    pub(crate) fn sign_final(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        let sess = self.session(s)?;
        let op = match lock(&sess).sign.take() {
            Some(Sign::Rsa(op)) if !op.multi_part() => return Err(CKR_FUNCTION_NOT_SUPPORTED),
            Some(op) => op,
            None => return Err(CKR_OPERATION_NOT_INITIALIZED),
        };
        // A size query or a buffer too small is answered first, as the software token does
        // for CKM_ECDSA too (which then has no C_SignFinal).
        match out.reserve(op.sig_len()) {
            Ok(Some(_)) => {}
            r => {
                lock(&sess).sign = Some(op);
                return r.map(|_| ());
            }
        }
        let Sign::Rsa(mut op) = op else {
            return Err(CKR_FUNCTION_NOT_SUPPORTED);
        };
        let sig = op.sign(&self.sched, None)?;
        out.write(&sig)?;
        Ok(())
    }

    /// A `CKM_ECDSA` signature of `data`: OpenSSL's at once in an ordinary session; in an
    /// asynchronous one, a request gathered for the engine's next pass (`CKR_PENDING`, or
    /// the signature at once when this request completed a pass).
    pub(crate) fn ecdsa_sign(
        &self,
        sess: &Mutex<Session>,
        op: &ecdsa::EcdsaOp,
        asynchronous: bool,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        let kind = match self.engine {
            Some(kind) if asynchronous => kind,
            _ => return out.write(&op.key().sign_openssl(data)?).map(|_| ()),
        };
        let req = self.gather.submit(kind, op.key().clone(), data)?;
        match req.take() {
            Some(r) => out.write(&r?).map(|_| ()),
            None => {
                lock(sess).set_pending(AsyncOp::ecdsa(req));
                Err(CKR_PENDING)
            }
        }
    }
}
