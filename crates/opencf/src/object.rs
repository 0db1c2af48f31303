//! Object management: `C_CreateObject`, `C_CopyObject`, `C_DestroyObject`,
//! `C_GetObjectSize`, `C_Get/SetAttributeValue`, `C_FindObjects*`.
//!
//! On the metaslot every object call goes to the keystore token through the session's
//! keystore session; a metaslot object handle is the keystore's handle. Changing or destroying
//! a key drops its clones in other providers.
//!
//! In a provider's own slot (a pass-through session) the clones slot 0 keeps there are not
//! the application's objects: searches do not return them, and the object calls answer
//! `CKR_OBJECT_HANDLE_INVALID` for them, so that nothing done there can change or destroy what
//! slot 0 relies on.

use crate::{dispatch, OpenCf};
use opencf_abi::sync::SessionLock;
use opencf_abi::sys::*;
use opencf_abi::*;

impl OpenCf {
    /// `CKR_OBJECT_HANDLE_INVALID` for a clone slot 0 keeps in provider `prov`, asked for in
    /// a pass-through session.
    fn not_a_clone(&self, prov: usize, o: CK_OBJECT_HANDLE) -> CkResult<()> {
        self.not_a_clone_or(prov, o, CKR_OBJECT_HANDLE_INVALID)
    }

    /// `Err(rv)` when `o` is one of slot 0's clones in provider `prov`: a call in the
    /// provider's own slot treats it as a handle it does not know (`CKR_KEY_HANDLE_INVALID`
    /// for an init's key, the wrapping calls' own codes for theirs).
    pub(crate) fn not_a_clone_or(
        &self,
        prov: usize,
        o: CK_OBJECT_HANDLE,
        rv: CK_RV,
    ) -> CkResult<()> {
        if self.clones.holds(prov, o) {
            Err(rv)
        } else {
            Ok(())
        }
    }

    /// The keystore provider and the metaslot session's keystore session.
    pub fn ks_of(
        &self,
        m: &SessionLock<crate::metaslot::MetaSession>,
    ) -> CkResult<(&crate::providers::Provider, CK_SESSION_HANDLE)> {
        let ks = self.lock(m).ks;
        Ok((self.p(self.meta()?.keystore), ks))
    }

    /// Destroys the clones of a keystore object in other providers.
    pub fn drop_clones(&self, obj: CK_OBJECT_HANDLE) {
        self.destroy_clones(self.clones.forget(obj));
    }

    /// Destroys clones the cache has given up: (provider, handle there) pairs.
    pub(crate) fn destroy_clones(&self, clones: Vec<(usize, CK_OBJECT_HANDLE)>) {
        for (prov, h) in clones {
            if let Ok(s) = self.providers[prov].internal_session() {
                let _ = self.p(prov).destroy_object(s, h);
            }
        }
    }

    /// Destroys the clones whose original the keystore no longer has, as a new keystore
    /// session sees it: a session object gone with the session that owned it, a private
    /// object after `C_Logout`. Called when a metaslot session closes or logs out, so that no
    /// copy of such a key stays in another provider (a clone is used only while its original
    /// is within reach, `route::check_key`, but it kept the key's material).
    ///
    /// The keystore session is opened for the sweep and closed after it: one kept open would
    /// stop the application's last `C_CloseSession` from logging it out of the token.
    pub fn sweep_clones(&self) {
        if self.clones.is_empty() {
            return;
        }
        let Ok(meta) = self.meta() else {
            return;
        };
        let ks = self.p(meta.keystore);
        let Ok(h) = ks.open_session(meta.ks_slot, CKF_SERIAL_SESSION | CKF_RW_SESSION) else {
            return;
        };
        let gone = self.clones.sweep(|k| {
            ks.get_attribute_value(h, k, &[CKA_CLASS]) == Err(CKR_OBJECT_HANDLE_INVALID)
        });
        let _ = ks.close_session(h);
        self.destroy_clones(gone);
    }

    /// `C_CreateObject`.
    pub fn create_object(
        &self,
        s: CK_SESSION_HANDLE,
        t: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        dispatch!(self, s, |p, h| p.create_object(h, t), |m| {
            let (p, h) = self.ks_of(m)?;
            p.create_object(h, t)
        })
    }

    /// `C_CopyObject`.
    pub fn copy_object(
        &self,
        s: CK_SESSION_HANDLE,
        o: CK_OBJECT_HANDLE,
        t: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        dispatch!(self, s, |p, h, @prov| {
            self.not_a_clone(prov, o)?;
            p.copy_object(h, o, t)
        }, |m| {
            let (p, h) = self.ks_of(m)?;
            p.copy_object(h, o, t)
        })
    }

    /// `C_DestroyObject`.
    pub fn destroy_object(&self, s: CK_SESSION_HANDLE, o: CK_OBJECT_HANDLE) -> CkResult<()> {
        dispatch!(self, s, |p, h, @prov| {
            self.not_a_clone(prov, o)?;
            p.destroy_object(h, o)
        }, |m| {
            let (p, h) = self.ks_of(m)?;
            p.destroy_object(h, o)?;
            self.drop_clones(o);
            Ok(())
        })
    }

    /// `C_GetObjectSize`.
    pub fn get_object_size(&self, s: CK_SESSION_HANDLE, o: CK_OBJECT_HANDLE) -> CkResult<CK_ULONG> {
        dispatch!(self, s, |p, h, @prov| {
            self.not_a_clone(prov, o)?;
            p.get_object_size(h, o)
        }, |m| {
            let (p, h) = self.ks_of(m)?;
            p.get_object_size(h, o)
        })
    }

    /// `C_GetAttributeValue`.
    pub fn get_attribute_value(
        &self,
        s: CK_SESSION_HANDLE,
        o: CK_OBJECT_HANDLE,
        types: &[CK_ATTRIBUTE_TYPE],
    ) -> CkResult<Vec<AttrValue>> {
        dispatch!(self, s, |p, h, @prov| {
            self.not_a_clone(prov, o)?;
            p.get_attribute_value(h, o, types)
        }, |m| {
            let (p, h) = self.ks_of(m)?;
            p.get_attribute_value(h, o, types)
        })
    }

    /// `C_SetAttributeValue`.
    pub fn set_attribute_value(
        &self,
        s: CK_SESSION_HANDLE,
        o: CK_OBJECT_HANDLE,
        t: &[Attribute],
    ) -> CkResult<()> {
        dispatch!(self, s, |p, h, @prov| {
            self.not_a_clone(prov, o)?;
            p.set_attribute_value(h, o, t)
        }, |m| {
            let (p, h) = self.ks_of(m)?;
            p.set_attribute_value(h, o, t)?;
            self.drop_clones(o);
            Ok(())
        })
    }

    /// `C_FindObjectsInit`: the metaslot searches the keystore.
    pub fn find_objects_init(&self, s: CK_SESSION_HANDLE, t: &[Attribute]) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.find_objects_init(h, t), |m| {
            let mut ms = self.lock(m);
            self.p(self.meta()?.keystore).find_objects_init(ms.ks, t)?;
            ms.finding = true;
            Ok(())
        })
    }

    /// `C_FindObjects`.
    pub fn find_objects(
        &self,
        s: CK_SESSION_HANDLE,
        max: usize,
    ) -> CkResult<Vec<CK_OBJECT_HANDLE>> {
        dispatch!(self, s, |p, h, @prov| {
            if self.clones.is_empty() {
                return p.find_objects(h, max);
            }
            // Up to `max` handles that are not clones: an answer shorter than asked would
            // not say that the search is over. The provider is asked at least once, so that
            // it answers for the search's state (`CKR_OPERATION_NOT_INITIALIZED`) as before.
            let mut found = p.find_objects(h, max)?;
            let asked = found.len();
            found.retain(|&o| !self.clones.holds(prov, o));
            while asked > 0 && found.len() < max {
                let more = p.find_objects(h, max - found.len())?;
                if more.is_empty() {
                    break;
                }
                found.extend(more.into_iter().filter(|&o| !self.clones.holds(prov, o)));
            }
            Ok(found)
        }, |m| {
            let (p, h) = self.ks_of(m)?;
            p.find_objects(h, max)
        })
    }

    /// `C_FindObjectsFinal`.
    pub fn find_objects_final(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.find_objects_final(h), |m| {
            let mut ms = self.lock(m);
            ms.finding = false;
            self.p(self.meta()?.keystore).find_objects_final(ms.ks)
        })
    }
}
