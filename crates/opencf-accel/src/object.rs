//! Object management: `C_CreateObject`, `C_DestroyObject`, `C_GetAttributeValue`,
//! `C_FindObjectsInit`, `C_FindObjects`, `C_FindObjectsFinal`, and the checks of a key handed
//! to an operation. The objects themselves (session objects only) are in [`crate::objects`].

use crate::objects::{Material, Object};
use crate::{lock, read, write, Accel};
use opencf_abi::sys::*;
use opencf_abi::{AttrValue, Attribute, CkResult};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Accel {
    /// `C_CreateObject`.
    pub(crate) fn create_object(
        &self,
        s: CK_SESSION_HANDLE,
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        self.session(s)?;
        let o = Object::new(template, Material::Template, s)?;
        self.add_object(o)
    }

    /// `C_DestroyObject`.
    pub(crate) fn destroy_object(
        &self,
        s: CK_SESSION_HANDLE,
        obj: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.session(s)?;
        write(&self.objects)
            .remove(&obj)
            .map(|_| ())
            .ok_or(CKR_OBJECT_HANDLE_INVALID)
    }

    /// `C_GetAttributeValue`.
    pub(crate) fn get_attribute_value(
        &self,
        s: CK_SESSION_HANDLE,
        obj: CK_OBJECT_HANDLE,
        types: &[CK_ATTRIBUTE_TYPE],
    ) -> CkResult<Vec<AttrValue>> {
        self.session(s)?;
        let o = self.object(obj)?;
        Ok(types.iter().map(|t| o.attribute(*t)).collect())
    }

    /// `C_FindObjectsInit`.
    pub(crate) fn find_objects_init(
        &self,
        s: CK_SESSION_HANDLE,
        template: &[Attribute],
    ) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = lock(&sess);
        if st.find.is_some() {
            return Err(CKR_OPERATION_ACTIVE);
        }
        let mut found: Vec<CK_OBJECT_HANDLE> = read(&self.objects)
            .iter()
            .filter(|(_, o)| o.matches(template))
            .map(|(h, _)| *h)
            .collect();
        found.sort_unstable_by(|a, b| b.cmp(a));
        st.find = Some(found);
        Ok(())
    }

    /// `C_FindObjects`.
    pub(crate) fn find_objects(
        &self,
        s: CK_SESSION_HANDLE,
        max: usize,
    ) -> CkResult<Vec<CK_OBJECT_HANDLE>> {
        let sess = self.session(s)?;
        let mut st = lock(&sess);
        let list = st.find.as_mut().ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        let n = max.min(list.len());
        Ok((0..n).filter_map(|_| list.pop()).collect())
    }

    /// `C_FindObjectsFinal`.
    pub(crate) fn find_objects_final(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = lock(&sess);
        st.find.take().ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        Ok(())
    }

    pub(crate) fn object(&self, h: CK_OBJECT_HANDLE) -> CkResult<Arc<Object>> {
        read(&self.objects)
            .get(&h)
            .cloned()
            .ok_or(CKR_OBJECT_HANDLE_INVALID)
    }

    /// A key of class `class` and type `key_type` for an operation: `CKR_KEY_HANDLE_INVALID`
    /// when unknown, then its kind (`CKR_KEY_TYPE_INCONSISTENT`, after which the framework asks
    /// the next provider, whose answer the caller then gets), the usage attribute and the
    /// allowed mechanisms. The kind comes first, as in the software token: a key of the
    /// wrong kind that also lacks the usage flag is `CKR_KEY_TYPE_INCONSISTENT` in both.
    pub(crate) fn key(
        &self,
        h: CK_OBJECT_HANDLE,
        (class, key_type): (CK_OBJECT_CLASS, CK_KEY_TYPE),
        usage: CK_ATTRIBUTE_TYPE,
        mech: CK_MECHANISM_TYPE,
    ) -> CkResult<Arc<Object>> {
        let o = self.object(h).map_err(|_| CKR_KEY_HANDLE_INVALID)?;
        if o.class != class || o.key_type != key_type {
            return Err(CKR_KEY_TYPE_INCONSISTENT);
        }
        if !o.flag(usage) {
            return Err(CKR_KEY_FUNCTION_NOT_PERMITTED);
        }
        if !o.allows(mech) {
            return Err(CKR_MECHANISM_INVALID);
        }
        Ok(o)
    }

    /// Adds a new object (`C_CreateObject`, `C_UnwrapKey`). A private object
    /// (`CKA_PRIVATE = TRUE`) needs a user login (`CKR_USER_NOT_LOGGED_IN`), as PKCS#11 asks of
    /// every token; the check is made under the objects' lock, which `C_Logout` takes to
    /// destroy the private objects after it has ended the login, so none outlives the login
    /// it was made under.
    pub(crate) fn add_object(&self, o: Object) -> CkResult<CK_OBJECT_HANDLE> {
        let mut objects = write(&self.objects);
        if o.flag(CKA_PRIVATE) && !self.logged_in.load(Ordering::Acquire) {
            return Err(CKR_USER_NOT_LOGGED_IN);
        }
        let h = self.next_handle.fetch_add(1, Ordering::Relaxed);
        objects.insert(h, Arc::new(o));
        Ok(h)
    }

    /// A private key of type `key_type` for `mech` on an engine (`CKR_MECHANISM_INVALID`
    /// without one); the caller takes its engine form (`Object::rsa`, `Object::ecdsa`).
    pub(crate) fn engine_key(
        &self,
        h: CK_OBJECT_HANDLE,
        key_type: CK_KEY_TYPE,
        usage: CK_ATTRIBUTE_TYPE,
        mech: CK_MECHANISM_TYPE,
    ) -> CkResult<Arc<Object>> {
        if self.engine.is_none() {
            return Err(CKR_MECHANISM_INVALID);
        }
        self.key(h, (CKO_PRIVATE_KEY, key_type), usage, mech)
    }
}
