//! Encryption and decryption: `C_EncryptInit`, `C_Encrypt`, `C_EncryptUpdate`,
//! `C_EncryptFinal` and the same for decryption. AES-GCM, AES-CTR and AES-ECB run on the bulk
//! engine ([`crate::gcm`], [`crate::blocks`]); RSA decryption on the RSA engine.

use crate::blocks::{BulkOp, CtrOp, EcbOp};
use crate::fault::{self, Fault};
use crate::gcm::{Bulk, GcmOp};
use crate::mech::{self, DecryptOp};
use crate::pending::Then;
use crate::{lock, Accel, Session};
use opencf_abi::sys::*;
use opencf_abi::{CkResult, MechRef, Mechanism, OutBuf};
use std::sync::{Arc, Mutex};

/// An active decryption: RSA, or one on the bulk engine.
pub(crate) enum Decrypt {
    Rsa(DecryptOp),
    Bulk(BulkOp),
}

/// An operation of the bulk engine taken out of its session for one step.
pub(crate) type Taken = (Arc<Mutex<Session>>, BulkOp);

impl Accel {
    /// `C_EncryptInit`: checks the session, an active operation, the mechanism, the
    /// layout of its parameter, the key, then the parameter's values.
    pub(crate) fn encrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: MechRef<'_>,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.start(
            s,
            |st| &mut st.encrypt,
            || {
                self.check_bulk_mech(m.mechanism())?;
                m.with_parsed(|m| self.bulk_op(m, key, true))
            },
        )
    }

    /// `C_Encrypt`.
    pub(crate) fn encrypt(
        &self,
        s: CK_SESSION_HANDLE,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        let (sess, op) = self.take_encrypt(s)?;
        self.bulk_step(&sess, op, true, true, out, |op, bulk, out| {
            op.one_shot(bulk, data, out)
        })
    }

    /// `C_EncryptUpdate`.
    pub(crate) fn encrypt_update(
        &self,
        s: CK_SESSION_HANDLE,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        self.bulk_update(self.take_encrypt(s), data, out)
    }

    /// `C_EncryptFinal`.
    pub(crate) fn encrypt_final(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        self.bulk_final(self.take_encrypt(s), out)
    }

    /// `C_DecryptInit`: checks the session, an active operation, the mechanism, the
    /// layout of its parameter, the key, then the parameter's values.
    pub(crate) fn decrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: MechRef<'_>,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.not_pending(s, "C_Decrypt")?;
        self.start(
            s,
            |st| &mut st.decrypt,
            || {
                let bulk = mech::BULK_MECHS.contains(&m.mechanism());
                if bulk {
                    self.check_bulk_mech(m.mechanism())?;
                } else if !mech::serves(m.mechanism(), CKF_DECRYPT) {
                    return Err(CKR_MECHANISM_INVALID);
                }
                m.with_parsed(|m| {
                    if bulk {
                        return self.bulk_op(m, key, false).map(Decrypt::Bulk);
                    }
                    let k = self.engine_key(key, CKK_RSA, CKA_DECRYPT, m.mechanism)?;
                    DecryptOp::new(m, k.rsa()?).map(Decrypt::Rsa)
                })
            },
        )
    }

    /// `C_Decrypt`.
    pub(crate) fn decrypt(
        &self,
        s: CK_SESSION_HANDLE,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        let (sess, op) = self.take(s, |st| &mut st.decrypt)?;
        let op = match op {
            Decrypt::Bulk(op) => {
                return self.bulk_step(&sess, op, true, true, out, |op, bulk, out| {
                    op.one_shot(bulk, data, out)
                })
            }
            Decrypt::Rsa(op) => op,
        };
        let keep = |op| lock(&sess).decrypt = Some(Decrypt::Rsa(op));
        // A ciphertext of the wrong length ends the operation, size query or not.
        op.check_len(data)?;
        if out.is_query() {
            out.reserve(op.max_len())?;
            keep(op);
            return Ok(());
        }
        // Asynchronous only with room for any plaintext: a buffer too small must be answered
        // at once, never after `CKR_PENDING`.
        if lock(&sess).flags & CKF_ASYNC_SESSION != 0 && out.capacity() >= op.max_len() {
            let prepared = op.prepare(&self.sched, data, true)?;
            let key = op.key().clone();
            return self.maybe_pending(&sess, "C_Decrypt", prepared, &key, Then::Decrypt(op), out);
        }
        let plain = op.decrypt(&self.sched, data)?;
        match out.write(&plain) {
            Err(CKR_BUFFER_TOO_SMALL) => {
                keep(op);
                Err(CKR_BUFFER_TOO_SMALL)
            }
            r => r.map(|_| ()),
        }
    }

    /// `C_DecryptUpdate`.
    pub(crate) fn decrypt_update(
        &self,
        s: CK_SESSION_HANDLE,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        self.bulk_update(self.take_bulk_decrypt(s), data, out)
    }

    /// `C_DecryptFinal`.
    pub(crate) fn decrypt_final(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        self.bulk_final(self.take_bulk_decrypt(s), out)
    }

    /// `CKR_MECHANISM_INVALID` unless `t` is a mechanism of the bulk engine and the engine
    /// is offered here.
    fn check_bulk_mech(&self, t: CK_MECHANISM_TYPE) -> CkResult<()> {
        if self.bulk.is_none() || !mech::BULK_MECHS.contains(&t) {
            return Err(CKR_MECHANISM_INVALID);
        }
        Ok(())
    }

    /// A `CKM_AES_GCM`, `CKM_AES_CTR` or `CKM_AES_ECB` operation with AES key `h`; the
    /// caller has checked the mechanism ([`Accel::check_bulk_mech`]) before parsing it.
    pub(crate) fn bulk_op(
        &self,
        m: &Mechanism,
        h: CK_OBJECT_HANDLE,
        encrypt: bool,
    ) -> CkResult<BulkOp> {
        let usage = if encrypt { CKA_ENCRYPT } else { CKA_DECRYPT };
        let o = self.key(h, (CKO_SECRET_KEY, CKK_AES), usage, m.mechanism)?;
        match m.mechanism {
            CKM_AES_GCM => GcmOp::new(m, o.gcm()?, encrypt).map(BulkOp::Gcm),
            CKM_AES_CTR => CtrOp::new(m, o.aes()?, encrypt).map(BulkOp::Ctr),
            _ => EcbOp::new(m, o.aes()?, encrypt).map(BulkOp::Ecb),
        }
    }

    /// Runs one step `f` of the bulk operation `op` taken from session `sess`, with the
    /// PKCS#11 rules: a size query or `CKR_BUFFER_TOO_SMALL` keeps the operation, as does a
    /// successful step that does not `finish` it; anything else ends it. A single-part step
    /// (`one_shot`) obeys the fault switch first (`busy`: `CKR_DEVICE_MEMORY`,
    /// `engine-error`: `CKR_DEVICE_ERROR`, both recoverable for the framework).
    pub(crate) fn bulk_step(
        &self,
        sess: &Mutex<Session>,
        mut op: BulkOp,
        finishes: bool,
        one_shot: bool,
        out: &mut OutBuf,
        f: impl FnOnce(&mut BulkOp, &Bulk, &mut OutBuf) -> CkResult<()>,
    ) -> CkResult<()> {
        let bulk = self.bulk.as_ref().ok_or(CKR_FUNCTION_FAILED)?;
        let r = match fault::current() {
            Fault::Busy if one_shot => Err(CKR_DEVICE_MEMORY),
            Fault::EngineError if one_shot => Err(CKR_DEVICE_ERROR),
            _ => f(&mut op, bulk, out),
        };
        let keep = match r {
            Ok(()) => out.is_query() || !finishes,
            Err(e) => e == CKR_BUFFER_TOO_SMALL,
        };
        if keep {
            let mut st = lock(sess);
            if op.encrypts() {
                st.encrypt = Some(op);
            } else {
                st.decrypt = Some(Decrypt::Bulk(op));
            }
        }
        r
    }

    /// `C_EncryptUpdate` / `C_DecryptUpdate` on a bulk operation taken out of its session.
    pub(crate) fn bulk_update(
        &self,
        taken: CkResult<Taken>,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        let (sess, op) = taken?;
        self.bulk_step(&sess, op, false, false, out, |op, bulk, out| {
            op.update(bulk, data, out)
        })
    }

    /// `C_EncryptFinal` / `C_DecryptFinal` on a bulk operation taken out of its session.
    pub(crate) fn bulk_final(&self, taken: CkResult<Taken>, out: &mut OutBuf) -> CkResult<()> {
        let (sess, op) = taken?;
        self.bulk_step(&sess, op, true, false, out, |op, bulk, out| {
            op.finalize(bulk, out)
        })
    }

    /// The active encryption of session `s`, taken out of it.
    pub(crate) fn take_encrypt(&self, s: CK_SESSION_HANDLE) -> CkResult<Taken> {
        self.take(s, |st| &mut st.encrypt)
    }

    /// The active bulk decryption of session `s`, taken out of it; an RSA decryption
    /// ends with `CKR_FUNCTION_NOT_SUPPORTED` (it has no multi-part form).
    pub(crate) fn take_bulk_decrypt(&self, s: CK_SESSION_HANDLE) -> CkResult<Taken> {
        match self.take(s, |st| &mut st.decrypt)? {
            (sess, Decrypt::Bulk(op)) => Ok((sess, op)),
            (_, Decrypt::Rsa(_)) => Err(CKR_FUNCTION_NOT_SUPPORTED),
        }
    }
}
