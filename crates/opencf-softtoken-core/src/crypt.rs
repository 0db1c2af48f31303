//! Encryption and decryption: `C_EncryptInit`, `C_Encrypt`, `C_EncryptUpdate`,
//! `C_EncryptFinal`, the `C_Decrypt*` twins, and the message-based AEAD calls
//! (`C_MessageEncryptInit`, `C_EncryptMessage`, `C_MessageEncryptFinal`, and decryption).

use crate::attrs::AttrMapExt;
use crate::mech::{self, CipherOp};
use crate::object::Object;
use crate::session::{OpState, Session, SpareCipher};
use crate::SoftToken;
use opencf_abi::sys::*;
use opencf_abi::{CkResult, MechRef, Mechanism, MessageParams, OutBuf};

/// Checks that `m` can do `flag` (`CKF_ENCRYPT`, `CKF_SIGN`, …) in this token.
pub fn check_mechanism(m: CK_MECHANISM_TYPE, flag: CK_FLAGS) -> CkResult<()> {
    match mech::mechanism_info(m) {
        Some(i) if i.flags & flag != 0 => Ok(()),
        _ => Err(CKR_MECHANISM_INVALID),
    }
}

/// Checks a key for an operation: its class, its usage attribute, and
/// `CKA_ALLOWED_MECHANISMS`.
pub fn check_key(
    obj: &Object,
    classes: &[CK_OBJECT_CLASS],
    usage: CK_ATTRIBUTE_TYPE,
    m: CK_MECHANISM_TYPE,
) -> CkResult<()> {
    if !classes.contains(&obj.class()) {
        return Err(CKR_KEY_TYPE_INCONSISTENT);
    }
    if !obj.attrs.is_true(usage) {
        return Err(CKR_KEY_FUNCTION_NOT_PERMITTED);
    }
    if let Some(allowed) = obj.attrs.bytes(CKA_ALLOWED_MECHANISMS) {
        if !allowed.is_empty() {
            let ok = allowed
                .chunks_exact(std::mem::size_of::<CK_MECHANISM_TYPE>())
                .any(|c| c.try_into().ok().map(CK_MECHANISM_TYPE::from_ne_bytes) == Some(m));
            if !ok {
                return Err(CKR_MECHANISM_INVALID);
            }
        }
    }
    Ok(())
}

type ActiveCipher = Option<(u64, CK_MECHANISM_TYPE, Box<dyn CipherOp>)>;

fn slot_of(st: &mut OpState, encrypt: bool) -> &mut ActiveCipher {
    if encrypt {
        &mut st.encrypt
    } else {
        &mut st.decrypt
    }
}

/// Runs one step of a cipher operation with the PKCS#11 termination rules: a size query or
/// `CKR_BUFFER_TOO_SMALL` keeps the operation, any other error ends it, and a finished
/// operation's context is kept as the session's spare for the next one with the same key.
fn step(
    st: &mut OpState,
    encrypt: bool,
    finishes: bool,
    out: &mut OutBuf,
    f: impl FnOnce(&mut dyn CipherOp, &mut OutBuf) -> CkResult<()>,
) -> CkResult<()> {
    let (uid, m, mut op) = slot_of(st, encrypt)
        .take()
        .ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
    // A key with `CKA_ALWAYS_AUTHENTICATE` decrypts only after
    // `C_Login(CKU_CONTEXT_SPECIFIC)` (a size query may come first); the error ends the
    // operation.
    if !encrypt && st.decrypt_needs_auth && !st.decrypt_context_auth && !out.is_query() {
        return Err(CKR_USER_NOT_LOGGED_IN);
    }
    let r = f(op.as_mut(), out);
    match r {
        Ok(()) if finishes && !out.is_query() => {
            st.spare = Some(SpareCipher {
                key_uid: uid,
                mechanism: m,
                encrypt,
                op,
            });
        }
        Ok(()) | Err(CKR_BUFFER_TOO_SMALL) => *slot_of(st, encrypt) = Some((uid, m, op)),
        Err(_) => {}
    }
    r
}

impl SoftToken {
    /// `C_EncryptInit` (`encrypt`) or `C_DecryptInit` on a session already found (by handle,
    /// or pinned by the framework). A mechanism that comes unparsed (`C_EncryptInit` through
    /// this module's C ABI) is parsed after the session's checks, so that a closed session or
    /// an active operation is reported before a malformed parameter, in the order slot 0 of the
    /// framework, which passes the parameter on unread, reports them (docs/METASLOT.md, "Slot 0
    /// answers as its token does"). The same holds for the other inits.
    pub fn cipher_init(
        &self,
        sess: &Session,
        mech: MechRef<'_>,
        key: CK_OBJECT_HANDLE,
        encrypt: bool,
    ) -> CkResult<()> {
        sess.check_pin_ok()?;
        let mut guard = sess.lock();
        let st: &mut OpState = &mut guard;
        if slot_of(st, encrypt).is_some() {
            return Err(CKR_OPERATION_ACTIVE);
        }
        // The mechanism's capability before its parameter: a mechanism that cannot do this at
        // all is `CKR_MECHANISM_INVALID`, whatever its parameter, as slot 0 answers it.
        check_mechanism(
            mech.mechanism(),
            if encrypt { CKF_ENCRYPT } else { CKF_DECRYPT },
        )?;
        mech.with_parsed(|mech| self.cipher_init_parsed(sess, st, mech, key, encrypt))
    }

    /// [`SoftToken::cipher_init`] once the session is checked and the mechanism parsed.
    fn cipher_init_parsed(
        &self,
        sess: &Session,
        st: &mut OpState,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
        encrypt: bool,
    ) -> CkResult<()> {
        let (classes, usage) = if encrypt {
            ([CKO_SECRET_KEY, CKO_PUBLIC_KEY], CKA_ENCRYPT)
        } else {
            ([CKO_SECRET_KEY, CKO_PRIVATE_KEY], CKA_DECRYPT)
        };
        let obj = self.cached_key(sess, &mut st.keys, key, CKR_KEY_HANDLE_INVALID)?;
        check_key(obj, &classes, usage, mech.mechanism)?;
        let uid = obj.uid;
        let reuse = match st.spare.take() {
            Some(mut sp)
                if sp.key_uid == uid && sp.mechanism == mech.mechanism && sp.encrypt == encrypt =>
            {
                sp.op.reinit(mech).ok().map(|_| sp.op)
            }
            other => {
                st.spare = other;
                None
            }
        };
        let op = match reuse {
            Some(op) => op,
            None if encrypt => mech::encrypt_init(mech, obj.key())?,
            None => mech::decrypt_init(mech, obj.key())?,
        };
        if !encrypt {
            st.decrypt_needs_auth = obj.attrs.is_true(CKA_ALWAYS_AUTHENTICATE);
            st.decrypt_context_auth = false;
        }
        *slot_of(st, encrypt) = Some((uid, mech.mechanism, op));
        Ok(())
    }

    /// `C_EncryptInit`.
    pub fn encrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.cipher_init(&*self.session(s)?, mech.into(), key, true)
    }

    /// `C_Encrypt`.
    pub fn encrypt(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        self.cipher_one_shot(&*self.session(s)?, true, data, out)
    }

    /// `C_Encrypt` (`encrypt`) or `C_Decrypt` on a session already found.
    pub fn cipher_one_shot(
        &self,
        sess: &Session,
        encrypt: bool,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        let mut st = sess.lock();
        step(&mut st, encrypt, true, out, |op, out| {
            op.one_shot(data, out)
        })
    }

    /// `C_EncryptUpdate`.
    pub fn encrypt_update(
        &self,
        s: CK_SESSION_HANDLE,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = sess.lock();
        step(&mut st, true, false, out, |op, out| op.update(data, out))
    }

    /// `C_EncryptFinal`.
    pub fn encrypt_final(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = sess.lock();
        step(&mut st, true, true, out, |op, out| op.finalize(out))
    }

    /// `C_DecryptInit`.
    pub fn decrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.cipher_init(&*self.session(s)?, mech.into(), key, false)
    }

    /// `C_Decrypt`.
    pub fn decrypt(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        self.cipher_one_shot(&*self.session(s)?, false, data, out)
    }

    /// `C_DecryptUpdate`.
    pub fn decrypt_update(
        &self,
        s: CK_SESSION_HANDLE,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = sess.lock();
        step(&mut st, false, false, out, |op, out| op.update(data, out))
    }

    /// `C_DecryptFinal`.
    pub fn decrypt_final(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = sess.lock();
        step(&mut st, false, true, out, |op, out| op.finalize(out))
    }

    /// Runs one cipher update inside a dual-function call (`C_DigestEncryptUpdate`, …).
    pub fn cipher_update_in(
        st: &mut OpState,
        encrypt: bool,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        step(st, encrypt, false, out, |op, out| op.update(data, out))
    }

    /// `C_MessageEncryptInit` / `C_MessageDecryptInit`.
    pub fn message_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
        encrypt: bool,
    ) -> CkResult<()> {
        let sess = self.session(s)?;
        sess.check_pin_ok()?;
        let mut st = sess.lock();
        let active = if encrypt {
            st.message_encrypt.is_some()
        } else {
            st.message_decrypt.is_some()
        };
        if active {
            return Err(CKR_OPERATION_ACTIVE);
        }
        let (flag, usage) = if encrypt {
            (CKF_MESSAGE_ENCRYPT, CKA_ENCRYPT)
        } else {
            (CKF_MESSAGE_DECRYPT, CKA_DECRYPT)
        };
        check_mechanism(mech.mechanism, flag)?;
        let obj = self.op_key(&sess, &mut st, key, CKR_KEY_HANDLE_INVALID)?;
        check_key(&obj, &[CKO_SECRET_KEY], usage, mech.mechanism)?;
        let op = mech::message_init(mech, obj.key(), encrypt)?;
        if encrypt {
            st.message_encrypt = Some(op);
        } else {
            st.message_decrypt = Some(op);
        }
        Ok(())
    }

    /// `C_EncryptMessage` / `C_DecryptMessage`.
    pub fn message(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        aad: &[u8],
        data: &[u8],
        out: &mut OutBuf,
        encrypt: bool,
    ) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = sess.lock();
        let op = if encrypt {
            st.message_encrypt.as_mut()
        } else {
            st.message_decrypt.as_mut()
        };
        let r = op
            .ok_or(CKR_OPERATION_NOT_INITIALIZED)?
            .message(params, aad, data, out);
        match r {
            // PKCS#11 3.0 gives message-based decryption its own code for a tag (or AAD) that
            // does not verify; single-part `C_Decrypt` keeps `CKR_ENCRYPTED_DATA_INVALID`.
            Err(CKR_ENCRYPTED_DATA_INVALID) if !encrypt => Err(CKR_AEAD_DECRYPT_FAILED),
            r => r,
        }
    }

    /// `C_MessageEncryptFinal` / `C_MessageDecryptFinal`.
    pub fn message_final(&self, s: CK_SESSION_HANDLE, encrypt: bool) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = sess.lock();
        let op = if encrypt {
            st.message_encrypt.take()
        } else {
            st.message_decrypt.take()
        };
        op.map(|_| ()).ok_or(CKR_OPERATION_NOT_INITIALIZED)
    }
}
