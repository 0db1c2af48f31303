//! Encryption and decryption: `C_Encrypt*`, `C_Decrypt*`, and the message-based
//! `C_MessageEncrypt*` / `C_MessageDecrypt*` (3.0).
//!
//! On the metaslot, single-part and multi-part calls are routed ([`crate::route`]);
//! message-based calls run in the keystore token.

use crate::metaslot::OpKind;
use crate::route::{final_ends, update_ends};
use crate::{dispatch, OpenCf};
use opencf_abi::sys::*;
use opencf_abi::*;

/// Policy check of a pass-through init.
pub fn allowed<'m>(c: &opencf_config::ProviderConfig, m: impl Into<MechRef<'m>>) -> CkResult<()> {
    if c.allows(m.into().mechanism()) {
        Ok(())
    } else {
        Err(CKR_MECHANISM_INVALID)
    }
}

impl OpenCf {
    /// For a call that slot 0 runs in the keystore (key management, message-based
    /// encryption): `CKR_MECHANISM_INVALID` unless slot 0 offers the mechanism and the
    /// keystore's own policy allows it there.
    pub fn keystore_allows(&self, m: CK_MECHANISM_TYPE) -> CkResult<()> {
        let meta = self.meta()?;
        if !meta.mechs.contains_key(&m) {
            return Err(CKR_MECHANISM_INVALID);
        }
        if self.providers[meta.keystore].cfg.allows(m) {
            Ok(())
        } else {
            Err(CKR_MECHANISM_INVALID)
        }
    }

    /// `C_EncryptInit`.
    pub fn encrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: MechRef<'_>,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        dispatch!(
            self,
            s,
            |p, h, c, @prov| {
                allowed(c, mech)?;
                self.not_a_clone_or(prov, k, CKR_KEY_HANDLE_INVALID)?;
                p.encrypt_init(h, mech, k)
            },
            |m| self.meta_init(m, OpKind::Encrypt, mech, Some(k), &[])
        )
    }
    /// `C_Encrypt`.
    pub fn encrypt(&self, s: CK_SESSION_HANDLE, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.encrypt(h, d, o), |m| {
            let q = o.is_query();
            self.meta_single(m, OpKind::Encrypt, d.len(), q, |at| at.encrypt(d, &mut *o))
        })
    }
    /// `C_EncryptUpdate`.
    pub fn encrypt_update(&self, s: CK_SESSION_HANDLE, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.encrypt_update(h, d, o), |m| {
            let q = o.is_query();
            self.meta_step(m, OpKind::Encrypt, d.len(), q, update_ends, |p, h| {
                p.encrypt_update(h, d, o)
            })
        })
    }
    /// `C_EncryptFinal`.
    pub fn encrypt_final(&self, s: CK_SESSION_HANDLE, o: &mut OutBuf) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.encrypt_final(h, o), |m| {
            let q = o.is_query();
            self.meta_step(m, OpKind::Encrypt, 0, q, final_ends(q), |p, h| {
                p.encrypt_final(h, o)
            })
        })
    }
    /// `C_DecryptInit`.
    pub fn decrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: MechRef<'_>,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        dispatch!(
            self,
            s,
            |p, h, c, @prov| {
                allowed(c, mech)?;
                self.not_a_clone_or(prov, k, CKR_KEY_HANDLE_INVALID)?;
                p.decrypt_init(h, mech, k)
            },
            |m| self.meta_init(m, OpKind::Decrypt, mech, Some(k), &[])
        )
    }
    /// `C_Decrypt`.
    pub fn decrypt(&self, s: CK_SESSION_HANDLE, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.decrypt(h, d, o), |m| {
            let q = o.is_query();
            self.meta_single(m, OpKind::Decrypt, d.len(), q, |at| at.decrypt(d, &mut *o))
        })
    }
    /// `C_DecryptUpdate`.
    pub fn decrypt_update(&self, s: CK_SESSION_HANDLE, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.decrypt_update(h, d, o), |m| {
            let q = o.is_query();
            self.meta_step(m, OpKind::Decrypt, d.len(), q, update_ends, |p, h| {
                p.decrypt_update(h, d, o)
            })
        })
    }
    /// `C_DecryptFinal`.
    pub fn decrypt_final(&self, s: CK_SESSION_HANDLE, o: &mut OutBuf) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.decrypt_final(h, o), |m| {
            let q = o.is_query();
            self.meta_step(m, OpKind::Decrypt, 0, q, final_ends(q), |p, h| {
                p.decrypt_final(h, o)
            })
        })
    }

    /// `C_MessageEncryptInit` / `C_MessageDecryptInit`.
    pub fn message_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        k: CK_OBJECT_HANDLE,
        enc: bool,
    ) -> CkResult<()> {
        dispatch!(
            self,
            s,
            |p, h, c, @prov| {
                allowed(c, mech)?;
                self.not_a_clone_or(prov, k, CKR_KEY_HANDLE_INVALID)?;
                if enc {
                    p.message_encrypt_init(h, mech, k)
                } else {
                    p.message_decrypt_init(h, mech, k)
                }
            },
            |m| {
                self.keystore_allows(mech.mechanism)?;
                let (p, h) = self.ks_of(m)?;
                if enc {
                    p.message_encrypt_init(h, mech, k)
                } else {
                    p.message_decrypt_init(h, mech, k)
                }
            }
        )
    }
    /// `C_EncryptMessage` / `C_DecryptMessage`.
    pub fn message(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        aad: &[u8],
        d: &[u8],
        o: &mut OutBuf,
        enc: bool,
    ) -> CkResult<()> {
        let (p, h) = self.message_session(s)?;
        if enc {
            p.encrypt_message(h, params, aad, d, o)
        } else {
            p.decrypt_message(h, params, aad, d, o)
        }
    }
    /// `C_EncryptMessageBegin` / `C_DecryptMessageBegin`.
    pub fn message_begin(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        aad: &[u8],
        enc: bool,
    ) -> CkResult<()> {
        let (p, h) = self.message_session(s)?;
        if enc {
            p.encrypt_message_begin(h, params, aad)
        } else {
            p.decrypt_message_begin(h, params, aad)
        }
    }
    /// `C_EncryptMessageNext` / `C_DecryptMessageNext`.
    pub fn message_next(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        d: &[u8],
        o: &mut OutBuf,
        last: bool,
        enc: bool,
    ) -> CkResult<()> {
        let (p, h) = self.message_session(s)?;
        if enc {
            p.encrypt_message_next(h, params, d, o, last)
        } else {
            p.decrypt_message_next(h, params, d, o, last)
        }
    }
    /// `C_MessageEncryptFinal` / `C_MessageDecryptFinal`.
    pub fn message_final(&self, s: CK_SESSION_HANDLE, enc: bool) -> CkResult<()> {
        let (p, h) = self.message_session(s)?;
        if enc {
            p.message_encrypt_final(h)
        } else {
            p.message_decrypt_final(h)
        }
    }

    /// The provider session behind a session for calls that are not routed: the pass-through
    /// session, or the metaslot session's keystore session.
    pub fn message_session(
        &self,
        s: CK_SESSION_HANDLE,
    ) -> CkResult<(&crate::providers::Provider, CK_SESSION_HANDLE)> {
        dispatch!(self, s, |p, h| Ok((p, h)), |m| self.ks_of(m))
    }
}
