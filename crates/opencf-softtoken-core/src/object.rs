//! Object management: `C_CreateObject`, `C_CopyObject`, `C_DestroyObject`,
//! `C_GetObjectSize`, `C_GetAttributeValue`, `C_SetAttributeValue`, `C_FindObjects*`.

use crate::attrs::{self, AttrMap, AttrMapExt};
use crate::mech::{self, Key, KeyCache};
use crate::policy::{self, Origin};
use crate::session::Session;
use crate::token::{store_err, Token, LOGGED_SO};
use crate::SoftToken;
use opencf_abi::sys::*;
use opencf_abi::{AttrValue, Attribute, CkResult};
use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// An object in memory. Objects are immutable: a change builds a new `Object` (with a new
/// `uid` and an empty key cache) under the same handle.
pub struct Object {
    /// Its handle.
    pub handle: CK_OBJECT_HANDLE,
    /// The slot of its token.
    pub slot: CK_SLOT_ID,
    /// Unique per version of the object in this process.
    pub uid: u64,
    /// All attributes.
    pub attrs: AttrMap,
    /// Parsed key material, filled on first use.
    pub cache: KeyCache,
    /// Keystore id of a token object.
    pub store_id: Option<i64>,
    /// The keystore version of a token object these attributes are (0 for a session
    /// object): a change is written only over this version
    /// ([`crate::store::TokenStore::update_object`]).
    pub version: u64,
    /// The session that owns a session object.
    pub owner: Option<CK_SESSION_HANDLE>,
}

/// How often `C_SetAttributeValue` makes its change again when other processes change the
/// object between its read and its write.
const SET_ATTRIBUTE_TRIES: usize = 16;

impl Object {
    /// A new in-memory object.
    pub fn new(
        st: &SoftToken,
        handle: CK_OBJECT_HANDLE,
        slot: CK_SLOT_ID,
        attrs: AttrMap,
        store_id: Option<i64>,
        owner: Option<CK_SESSION_HANDLE>,
    ) -> Object {
        Object {
            handle,
            slot,
            uid: st.next_uid.fetch_add(1, Ordering::Relaxed),
            attrs,
            cache: KeyCache::default(),
            store_id,
            version: 0,
            owner,
        }
    }
    /// The object as keystore version `version` of it.
    pub fn at_version(mut self, version: u64) -> Object {
        self.version = version;
        self
    }
    /// A token (persistent) object.
    pub fn is_token(&self) -> bool {
        self.store_id.is_some()
    }
    /// A private object (visible only to the logged-in user).
    pub fn is_private(&self) -> bool {
        Token::attrs_private(&self.attrs)
    }
    /// `CKA_CLASS`.
    pub fn class(&self) -> CK_OBJECT_CLASS {
        self.attrs
            .ulong(CKA_CLASS)
            .ok()
            .flatten()
            .unwrap_or(CK_UNAVAILABLE_INFORMATION)
    }
    /// The crypto layer's view.
    pub fn key(&self) -> Key<'_> {
        Key {
            attrs: &self.attrs,
            cache: &self.cache,
        }
    }
    /// `CKA_PUBLIC_KEY_INFO` of a public or private key, derived from the key (see
    /// [`key_info_of`]); `None` for the other classes, whose stored value stands.
    fn derived_key_info(&self) -> Option<Vec<u8>> {
        key_info_of(&self.attrs, &self.cache)
    }
    /// The attributes with a public or private key's `CKA_PUBLIC_KEY_INFO` added, for a
    /// template that names it (`C_SetAttributeValue`, `C_CopyObject`).
    fn attrs_for(&self, template: &AttrMap) -> Cow<'_, AttrMap> {
        let info = template
            .contains_key(&CKA_PUBLIC_KEY_INFO)
            .then(|| self.derived_key_info())
            .flatten();
        match info {
            Some(info) => {
                let mut attrs = self.attrs.clone();
                attrs.insert(CKA_PUBLIC_KEY_INFO, info);
                Cow::Owned(attrs)
            }
            None => Cow::Borrowed(&self.attrs),
        }
    }
}

/// Whether objects of this class have their `CKA_PUBLIC_KEY_INFO` derived from the key.
fn derives_key_info(attrs: &AttrMap) -> bool {
    matches!(
        attrs.ulong(CKA_CLASS),
        Ok(Some(CKO_PUBLIC_KEY | CKO_PRIVATE_KEY))
    )
}

/// `CKA_PUBLIC_KEY_INFO` of a public or private key: computed from the key material whenever
/// it is read, never stored (docs/SOFTTOKEN.md), so that keys of older keystores have it too
/// and a stored value cannot disagree with the key. Empty where the key has none to give.
fn key_info_of(attrs: &AttrMap, cache: &KeyCache) -> Option<Vec<u8>> {
    derives_key_info(attrs).then(|| mech::public_key_info(Key { attrs, cache }).unwrap_or_default())
}

/// Leaves a public or private key's `CKA_PUBLIC_KEY_INFO` out of what is stored (a copy or a
/// change of a key read from an older keystore may carry one).
fn forget_key_info(attrs: &mut AttrMap) {
    if derives_key_info(attrs) {
        attrs.remove(&CKA_PUBLIC_KEY_INFO);
    }
}

/// Takes a public or private key's `CKA_PUBLIC_KEY_INFO` out of the attributes to be stored.
/// A value given when the key is made must be the key's own (an empty one says nothing):
/// another is `CKR_ATTRIBUTE_VALUE_INVALID` in `C_CreateObject`, and
/// `CKR_TEMPLATE_INCONSISTENT` for a key generated, unwrapped or derived, as any other
/// template attribute that disagrees with the key.
fn take_key_info(attrs: &mut AttrMap, origin: Origin) -> CkResult<()> {
    if !derives_key_info(attrs) {
        return Ok(());
    }
    let Some(given) = attrs.remove(&CKA_PUBLIC_KEY_INFO) else {
        return Ok(());
    };
    if given.is_empty() || key_info_of(attrs, &KeyCache::default()).as_ref() == Some(&given) {
        return Ok(());
    }
    Err(if origin == Origin::Created {
        CKR_ATTRIBUTE_VALUE_INVALID
    } else {
        CKR_TEMPLATE_INCONSISTENT
    })
}

/// Sets a new object's `CKA_CHECK_VALUE` where the token computes one
/// ([`mech::check_value`]). A value the template gives must be that one (an empty one says
/// nothing): another is `CKR_ATTRIBUTE_VALUE_INVALID`, as PKCS#11 3.2 has it for every
/// template. Where the token computes none, a given value is ignored, as the specification
/// asks, and not kept: the token could not stand behind it.
fn take_check_value(attrs: &mut AttrMap, class: CK_OBJECT_CLASS) -> CkResult<()> {
    let given = attrs.remove(&CKA_CHECK_VALUE);
    let made = attrs
        .bytes(CKA_VALUE)
        .and_then(|v| mech::check_value(class, attrs.ulong(CKA_KEY_TYPE).ok().flatten(), v));
    match (given, made) {
        (Some(g), Some(m)) if !g.is_empty() && g != m => Err(CKR_ATTRIBUTE_VALUE_INVALID),
        (_, Some(m)) => {
            attrs.insert(CKA_CHECK_VALUE, m);
            Ok(())
        }
        (_, None) => Ok(()),
    }
}

impl SoftToken {
    /// The object `h` as seen from session `sess` (its token, visible to its login state);
    /// absent → `missing`.
    pub fn visible_object(
        &self,
        sess: &Session,
        h: CK_OBJECT_HANDLE,
        missing: CK_RV,
    ) -> CkResult<Arc<Object>> {
        sess.token.sync_if_changed(self)?;
        let obj = match self.objects.get(h) {
            Some(o) => o,
            None => {
                // Perhaps another process created it: look again after a refresh.
                sess.token.refresh(self, false)?;
                self.objects.get(h).ok_or(missing)?
            }
        };
        if obj.slot != sess.slot || (obj.is_private() && !sess.token.user_logged_in()) {
            return Err(missing);
        }
        Ok(obj)
    }

    /// Checks that `sess` may create or change an object with these storage attributes.
    fn check_writable(&self, sess: &Session, token: bool, private: bool) -> CkResult<()> {
        if token && !sess.rw {
            return Err(CKR_SESSION_READ_ONLY);
        }
        if private && !sess.token.user_logged_in() {
            return Err(CKR_USER_NOT_LOGGED_IN);
        }
        Ok(())
    }

    /// Stores a complete attribute set as a new object (session or token) and returns its
    /// handle. Token objects are durable when this returns.
    pub fn store_object(&self, sess: &Session, attrs: AttrMap) -> CkResult<CK_OBJECT_HANDLE> {
        Ok(self.store_objects(sess, vec![attrs])?[0])
    }

    /// Stores several new objects (the two keys of a pair) and returns their handles, in
    /// order: the token objects among them in one keystore transaction, so that all of them
    /// are stored or none, also when the process is killed halfway.
    pub fn store_objects(
        &self,
        sess: &Session,
        objects: Vec<AttrMap>,
    ) -> CkResult<Vec<CK_OBJECT_HANDLE>> {
        // Read before the login is checked: a logout from here on is seen below.
        let logouts = sess.token.logouts.load(Ordering::SeqCst);
        let mut made = Vec::with_capacity(objects.len());
        for mut attrs in objects {
            let token = attrs.is_true(CKA_TOKEN);
            let private = Token::attrs_private(&attrs);
            self.check_writable(sess, token, private)?;
            forget_key_info(&mut attrs);
            attrs.insert(
                CKA_UNIQUE_ID,
                format!("{:016x}", self.new_unique_id()).into_bytes(),
            );
            made.push((token, private, attrs));
        }
        let stored: Vec<(bool, &AttrMap)> = made
            .iter()
            .filter(|(token, ..)| *token)
            .map(|(_, private, attrs)| (*private, attrs))
            .collect();
        let mut ids = if stored.is_empty() {
            Vec::new()
        } else {
            let mk = sess.token.master_key();
            sess.token
                .store()?
                .insert_objects(&stored, mk.as_ref())
                .map_err(store_err)?
        }
        .into_iter();
        let mut handles = Vec::with_capacity(made.len());
        let mut kept = Vec::with_capacity(made.len());
        for (token, private, attrs) in made {
            let handle = self.new_object_handle();
            if token {
                let id = ids.next().expect("one id per token object");
                self.objects.insert(
                    handle,
                    Arc::new(
                        Object::new(self, handle, sess.slot, attrs, Some(id), None).at_version(1),
                    ),
                );
                sess.token.note_written(id, 1, handle);
                kept.push((handle, private, Some(id)));
            } else {
                self.objects.insert(
                    handle,
                    Arc::new(Object::new(
                        self,
                        handle,
                        sess.slot,
                        attrs,
                        None,
                        Some(sess.handle),
                    )),
                );
                kept.push((handle, private, None));
            }
            handles.push(handle);
        }
        // Another thread may have logged the user out, or closed this session, while the
        // objects were being made, after the check above and before they were in: its sweep
        // missed them. A private object made across a logout, or a session object of a
        // session closed meanwhile, goes now; its handle is invalid, as the sweep would have
        // made it (PKCS#11 3.2 §5.6). A token object stays in the keystore, unknown to this
        // process, and is found again under a new handle at the next login.
        let logged_out = sess.token.logouts.load(Ordering::SeqCst) != logouts;
        let closed = sess.closed.load(Ordering::SeqCst);
        if logged_out || closed {
            let mut gone = false;
            for (handle, private, id) in kept {
                let token = id.is_some();
                if (private && logged_out) || (!token && closed) {
                    self.objects.remove(handle);
                    if let Some(id) = id {
                        sess.token.note_deleted(id);
                    }
                    gone = true;
                }
            }
            if gone {
                self.bump_epoch();
            }
        }
        Ok(handles)
    }

    /// Builds a new key or object from a template: policy checks, defaults, key material
    /// checks. `material` (from key generation, unwrap, derive) is merged over the template.
    pub fn build_object(
        &self,
        sess: &Session,
        template: &AttrMap,
        material: AttrMap,
        origin: Origin,
        default_class: Option<CK_OBJECT_CLASS>,
    ) -> CkResult<AttrMap> {
        // Only the SO makes a key trusted (PKCS#11 3.2 §4.8, §4.10: "can only be set to
        // CK_TRUE by the SO user"), whatever the call that makes the object; a trusted key of
        // the user's making would wrap any CKA_WRAP_WITH_TRUSTED key out under a value the
        // user knows.
        if template.is_true(CKA_TRUSTED) && sess.token.login() != LOGGED_SO {
            return Err(CKR_ATTRIBUTE_READ_ONLY);
        }
        let class = match (template.ulong(CKA_CLASS)?, material.ulong(CKA_CLASS)?) {
            (Some(a), Some(b)) if a != b => return Err(CKR_TEMPLATE_INCONSISTENT),
            (Some(a), _) | (None, Some(a)) => a,
            (None, None) => default_class.ok_or(CKR_TEMPLATE_INCOMPLETE)?,
        };
        if !matches!(
            class,
            CKO_DATA | CKO_CERTIFICATE | CKO_PUBLIC_KEY | CKO_PRIVATE_KEY | CKO_SECRET_KEY
        ) {
            return Err(CKR_ATTRIBUTE_VALUE_INVALID);
        }
        policy::check_template(template, class)?;
        if let (Some(a), Some(b)) = (template.ulong(CKA_KEY_TYPE)?, material.ulong(CKA_KEY_TYPE)?) {
            if a != b {
                return Err(CKR_TEMPLATE_INCONSISTENT);
            }
        }
        let mut attrs = template.clone();
        for (t, v) in material {
            // What a generated, unwrapped or derived key is comes from its content; a
            // template that says otherwise is refused, not overruled (its secret parts were
            // refused before): a private key template naming another curve or public exponent
            // than the key pair's is `CKR_TEMPLATE_INCONSISTENT`.
            if matches!(origin, Origin::Derived | Origin::Generated(_)) {
                if let Some(given) = template.get(&t) {
                    if !mech::same_attribute_value(t, given, &v) {
                        return Err(CKR_TEMPLATE_INCONSISTENT);
                    }
                }
            }
            if t == CKA_VALUE_LEN && class == CKO_SECRET_KEY {
                if let Some(want) = template.ulong(CKA_VALUE_LEN)? {
                    if want.to_ne_bytes().as_slice() != v.as_slice() {
                        return Err(CKR_TEMPLATE_INCONSISTENT);
                    }
                }
            }
            attrs.insert(t, v);
        }
        attrs.set_ulong(CKA_CLASS, class);
        if matches!(class, CKO_PUBLIC_KEY | CKO_PRIVATE_KEY | CKO_SECRET_KEY) {
            let key_type = attrs.ulong(CKA_KEY_TYPE)?.ok_or(CKR_TEMPLATE_INCOMPLETE)?;
            if origin == Origin::Created || origin == Origin::Derived {
                mech::complete_key(class, key_type, &mut attrs)?;
            }
        }
        take_key_info(&mut attrs, origin)?;
        take_check_value(&mut attrs, class)?;
        if class == CKO_CERTIFICATE {
            let ct = attrs.ulong(CKA_CERTIFICATE_TYPE)?.unwrap_or(CKC_X_509);
            if ct != CKC_X_509 {
                return Err(CKR_ATTRIBUTE_VALUE_INVALID);
            }
            if !attrs.contains_key(&CKA_VALUE) {
                return Err(CKR_TEMPLATE_INCOMPLETE);
            }
        }
        policy::apply_defaults(&mut attrs, class, origin);
        Ok(attrs)
    }

    /// `C_CreateObject`.
    pub fn create_object(
        &self,
        s: CK_SESSION_HANDLE,
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        let sess = self.session(s)?;
        sess.check_pin_ok()?;
        let t = attrs::from_template(template)?;
        let attrs = self.build_object(&sess, &t, AttrMap::new(), Origin::Created, None)?;
        self.store_object(&sess, attrs)
    }

    /// `C_CopyObject`.
    pub fn copy_object(
        &self,
        s: CK_SESSION_HANDLE,
        h: CK_OBJECT_HANDLE,
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        let sess = self.session(s)?;
        sess.check_pin_ok()?;
        let obj = self.visible_object(&sess, h, CKR_OBJECT_HANDLE_INVALID)?;
        if !obj.attrs.flag(CKA_COPYABLE)?.unwrap_or(true) {
            return Err(CKR_ACTION_PROHIBITED);
        }
        let t = attrs::from_template(template)?;
        let so = sess.token.login() == LOGGED_SO;
        let current = obj.attrs_for(&t);
        for (k, v) in &t {
            policy::check_change(&current, *k, v, so, true)?;
        }
        let mut attrs = obj.attrs.clone();
        for (k, v) in t {
            attrs.insert(k, v);
        }
        attrs.remove(&CKA_UNIQUE_ID);
        self.store_object(&sess, attrs)
    }

    /// `C_DestroyObject`.
    pub fn destroy_object(&self, s: CK_SESSION_HANDLE, h: CK_OBJECT_HANDLE) -> CkResult<()> {
        let sess = self.session(s)?;
        sess.check_pin_ok()?;
        let obj = self.visible_object(&sess, h, CKR_OBJECT_HANDLE_INVALID)?;
        if !obj.attrs.flag(CKA_DESTROYABLE)?.unwrap_or(true) {
            return Err(CKR_ACTION_PROHIBITED);
        }
        self.check_writable(&sess, obj.is_token(), false)?;
        if let Some(id) = obj.store_id {
            sess.token.store()?.delete_object(id).map_err(store_err)?;
            sess.token.note_deleted(id);
        }
        self.objects.remove(h);
        self.bump_epoch();
        Ok(())
    }

    /// `C_GetObjectSize`: the bytes its attributes take.
    pub fn get_object_size(&self, s: CK_SESSION_HANDLE, h: CK_OBJECT_HANDLE) -> CkResult<CK_ULONG> {
        let sess = self.session(s)?;
        sess.check_pin_ok()?;
        let obj = self.visible_object(&sess, h, CKR_OBJECT_HANDLE_INVALID)?;
        Ok(obj.attrs.values().map(|v| v.len() as CK_ULONG + 16).sum())
    }

    /// `C_GetAttributeValue`.
    pub fn get_attribute_value(
        &self,
        s: CK_SESSION_HANDLE,
        h: CK_OBJECT_HANDLE,
        types: &[CK_ATTRIBUTE_TYPE],
    ) -> CkResult<Vec<AttrValue>> {
        let sess = self.session(s)?;
        sess.check_pin_ok()?;
        let obj = self.visible_object(&sess, h, CKR_OBJECT_HANDLE_INVALID)?;
        Ok(types
            .iter()
            .map(|t| match obj.attrs.get(t) {
                _ if *t == CKA_PUBLIC_KEY_INFO && derives_key_info(&obj.attrs) => {
                    AttrValue::Value(obj.derived_key_info().unwrap_or_default())
                }
                None => AttrValue::Invalid,
                Some(_) if policy::is_hidden(&obj.attrs, *t) => AttrValue::Sensitive,
                Some(v) => AttrValue::Value(v.clone()),
            })
            .collect())
    }

    /// `C_SetAttributeValue`. A token object's change is written over the keystore version
    /// it was made from: when another process changed the object in between, nothing is
    /// written, and the change is made again from the object as it is now (its rules
    /// checked again), so no process's change is lost or undone.
    pub fn set_attribute_value(
        &self,
        s: CK_SESSION_HANDLE,
        h: CK_OBJECT_HANDLE,
        template: &[Attribute],
    ) -> CkResult<()> {
        let sess = self.session(s)?;
        sess.check_pin_ok()?;
        let t = attrs::from_template(template)?;
        for _ in 0..SET_ATTRIBUTE_TRIES {
            let obj = self.visible_object(&sess, h, CKR_OBJECT_HANDLE_INVALID)?;
            if !obj.attrs.flag(CKA_MODIFIABLE)?.unwrap_or(true) {
                return Err(CKR_ACTION_PROHIBITED);
            }
            self.check_writable(&sess, obj.is_token(), false)?;
            let so = sess.token.login() == LOGGED_SO;
            let current = obj.attrs_for(&t);
            for (k, v) in &t {
                policy::check_change(&current, *k, v, so, false)?;
            }
            let mut attrs = obj.attrs.clone();
            for (k, v) in &t {
                attrs.insert(*k, v.clone());
            }
            forget_key_info(&mut attrs);
            let mut version = 0;
            if let Some(id) = obj.store_id {
                let mk = sess.token.master_key();
                match sess.token.store()?.update_object(
                    id,
                    obj.version,
                    obj.is_private(),
                    &attrs,
                    mk.as_ref(),
                ) {
                    Ok(v) => version = v,
                    Err(crate::store::StoreError::Stale) => {
                        // Another process changed the object: read it again, start over.
                        sess.token.refresh(self, false)?;
                        continue;
                    }
                    Err(e) => return Err(store_err(e)),
                }
                sess.token.note_written(id, version, h);
            }
            self.objects.insert(
                h,
                Arc::new(
                    Object::new(self, h, obj.slot, attrs, obj.store_id, obj.owner)
                        .at_version(version),
                ),
            );
            self.bump_epoch();
            return Ok(());
        }
        // Another process changed the object at every try.
        Err(CKR_FUNCTION_FAILED)
    }

    /// `C_FindObjectsInit`.
    pub fn find_objects_init(&self, s: CK_SESSION_HANDLE, template: &[Attribute]) -> CkResult<()> {
        let sess = self.session(s)?;
        sess.check_pin_ok()?;
        let mut st = sess.lock();
        if st.find.is_some() {
            return Err(CKR_OPERATION_ACTIVE);
        }
        // A key's CKA_PUBLIC_KEY_INFO is not stored: it is compared as derived, and only
        // for the objects the rest of the template matches.
        let (info, t): (Vec<_>, Vec<_>) = template
            .iter()
            .map(|a| (a.kind, a.value.clone()))
            .partition(|(k, _)| *k == CKA_PUBLIC_KEY_INFO);
        sess.token.refresh(self, false)?;
        let logged_in = sess.token.user_logged_in();
        let mut found: Vec<CK_OBJECT_HANDLE> = self
            .objects
            .filter(|o| {
                o.slot == sess.slot
                    && (logged_in || !o.is_private())
                    && policy::matches(&o.attrs, &t)
                    && (info.is_empty()
                        || o.derived_key_info().map_or_else(
                            || policy::matches(&o.attrs, &info),
                            |have| info.iter().all(|(_, v)| *v == have),
                        ))
            })
            .iter()
            .map(|o| o.handle)
            .collect();
        found.sort_unstable();
        found.reverse();
        st.find = Some(found);
        Ok(())
    }

    /// `C_FindObjects`.
    pub fn find_objects(
        &self,
        s: CK_SESSION_HANDLE,
        max: usize,
    ) -> CkResult<Vec<CK_OBJECT_HANDLE>> {
        let sess = self.session(s)?;
        let mut st = sess.lock();
        let found = st.find.as_mut().ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        let mut out = Vec::with_capacity(max.min(found.len()));
        // An object destroyed since `C_FindObjectsInit` (or a private one dropped by
        // `C_Logout`, whose handles are invalid from then on) is no longer reported.
        while out.len() < max {
            let Some(h) = found.pop() else { break };
            if self.objects.contains(h) {
                out.push(h);
            }
        }
        Ok(out)
    }

    /// `C_FindObjectsFinal`.
    pub fn find_objects_final(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = sess.lock();
        st.find.take().ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        Ok(())
    }
}
