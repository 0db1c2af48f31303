//! Key management: `C_GenerateKey`, `C_GenerateKeyPair`, `C_WrapKey`, `C_UnwrapKey`,
//! `C_DeriveKey`, `C_EncapsulateKey`, `C_DecapsulateKey`.
//!
//! On the metaslot these run in the keystore token, where every metaslot object lives (this
//! first version does not route them: their results must be stored in the keystore).

use crate::{dispatch, OpenCf};
use opencf_abi::sys::*;
use opencf_abi::*;

impl OpenCf {
    /// `C_GenerateKey`.
    pub fn generate_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        t: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        let (p, h) = self.routed_keystore(s, mech, &[])?;
        p.generate_key(h, mech, t)
    }
    /// `C_GenerateKeyPair`.
    pub fn generate_key_pair(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        pt: &[Attribute],
        qt: &[Attribute],
    ) -> CkResult<(CK_OBJECT_HANDLE, CK_OBJECT_HANDLE)> {
        let (p, h) = self.routed_keystore(s, mech, &[])?;
        p.generate_key_pair(h, mech, pt, qt)
    }
    /// `C_WrapKey`.
    pub fn wrap_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        w: CK_OBJECT_HANDLE,
        k: CK_OBJECT_HANDLE,
        o: &mut OutBuf,
    ) -> CkResult<()> {
        if mech.mechanism == CKM_OPENCF_MIGRATE_KWP {
            // The framework's own key migration mechanism is never an application's.
            return Err(CKR_MECHANISM_INVALID);
        }
        let (p, h) = self.routed_keystore(
            s,
            mech,
            &[
                (w, CKR_WRAPPING_KEY_HANDLE_INVALID),
                (k, CKR_KEY_HANDLE_INVALID),
            ],
        )?;
        p.wrap_key(h, mech, w, k, o)
    }
    /// `C_UnwrapKey`.
    pub fn unwrap_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        u: CK_OBJECT_HANDLE,
        wrapped: &[u8],
        t: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        let (p, h) = self.routed_keystore(s, mech, &[(u, CKR_UNWRAPPING_KEY_HANDLE_INVALID)])?;
        p.unwrap_key(h, mech, u, wrapped, t)
    }
    /// `C_DeriveKey`.
    pub fn derive_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        b: CK_OBJECT_HANDLE,
        t: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        let (p, h) = self.routed_keystore(s, mech, &[(b, CKR_KEY_HANDLE_INVALID)])?;
        p.derive_key(h, mech, b, t)
    }
    /// `C_EncapsulateKey`.
    pub fn encapsulate_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        k: CK_OBJECT_HANDLE,
        t: &[Attribute],
        ct: &mut OutBuf,
    ) -> CkResult<Option<CK_OBJECT_HANDLE>> {
        let (p, h) = self.routed_keystore(s, mech, &[(k, CKR_KEY_HANDLE_INVALID)])?;
        p.encapsulate_key(h, mech, k, t, ct)
    }
    /// `C_DecapsulateKey`.
    pub fn decapsulate_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        k: CK_OBJECT_HANDLE,
        t: &[Attribute],
        ct: &[u8],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        let (p, h) = self.routed_keystore(s, mech, &[(k, CKR_KEY_HANDLE_INVALID)])?;
        p.decapsulate_key(h, mech, k, t, ct)
    }

    /// The provider session for a key-management call: the pass-through session (after the
    /// policy check, and with `keys`, each with the code that refuses it, checked not to be
    /// slot 0's clones), or the metaslot session's keystore session.
    fn routed_keystore(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        keys: &[(CK_OBJECT_HANDLE, CK_RV)],
    ) -> CkResult<(&crate::providers::Provider, CK_SESSION_HANDLE)> {
        dispatch!(
            self,
            s,
            |p, h, c, @prov| {
                crate::crypt::allowed(c, mech)?;
                for &(k, rv) in keys {
                    self.not_a_clone_or(prov, k, rv)?;
                }
                Ok((p, h))
            },
            |m| {
                self.keystore_allows(mech.mechanism)?;
                self.ks_of(m)
            }
        )
    }
}
