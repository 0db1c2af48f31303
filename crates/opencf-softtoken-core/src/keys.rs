//! Key management: `C_GenerateKey`, `C_GenerateKeyPair`, `C_WrapKey`, `C_UnwrapKey`,
//! `C_DeriveKey`, and the 3.2 `C_EncapsulateKey`, `C_DecapsulateKey`.

use crate::attrs::{self, AttrMap, AttrMapExt};
use crate::crypt::{check_key, check_mechanism};
use crate::mech;
use crate::object::Object;
use crate::policy::Origin;
use crate::SoftToken;
use opencf_abi::sys::*;
use opencf_abi::{
    decode_template, Attribute, CkResult, MechParam, Mechanism, OutBuf, CKM_OPENCF_MIGRATE_KWP,
};

/// The value length a derived key's template implies: `CKA_VALUE_LEN`, or its key type's
/// fixed size.
fn value_len(t: &AttrMap) -> CkResult<Option<usize>> {
    if let Some(n) = t.ulong(CKA_VALUE_LEN)? {
        return Ok(Some(n as usize));
    }
    Ok(t.ulong(CKA_KEY_TYPE)?.and_then(mech::sym::implied_len))
}

/// Fits the unwrapped value of a secret key to its template. A length the template asks for
/// (`CKA_VALUE_LEN`, or the key type's fixed length) cuts the value only where the mechanism
/// zero-pads keys to whole blocks (PKCS#11: ECB and CBC unwrapping "truncates the result"
/// to it); for any other mechanism the value is the key, and another length is
/// `CKR_TEMPLATE_INCONSISTENT`. A value shorter than asked is `CKR_WRAPPED_KEY_LEN_RANGE`; one
/// of a length the key type cannot have, `CKR_WRAPPED_KEY_INVALID`.
fn fit_unwrapped_secret(
    m: CK_MECHANISM_TYPE,
    t: &AttrMap,
    key_type: CK_KEY_TYPE,
    bytes: &mut Vec<u8>,
) -> CkResult<()> {
    if let Some(n) = value_len(t)? {
        if n > bytes.len() {
            return Err(CKR_WRAPPED_KEY_LEN_RANGE);
        }
        if n < bytes.len() {
            if !mech::sym::zero_pads(m) {
                return Err(CKR_TEMPLATE_INCONSISTENT);
            }
            bytes.truncate(n);
        }
    }
    if mech::sym::secret_len_fits(key_type, bytes.len()) == Some(false) {
        return Err(CKR_WRAPPED_KEY_INVALID);
    }
    Ok(())
}

/// Sets `CKA_ALWAYS_SENSITIVE`/`CKA_NEVER_EXTRACTABLE` of a key made from `base` (derive,
/// decapsulate): they stay true only if they were true of the base and still hold.
fn inherit_sensitivity(attrs: &mut AttrMap, base: Option<&Object>) {
    let sensitive = attrs.is_true(CKA_SENSITIVE);
    let extractable = attrs.is_true(CKA_EXTRACTABLE);
    let (bs, bn) = base.map_or((false, false), |b| {
        (
            b.attrs.is_true(CKA_ALWAYS_SENSITIVE),
            b.attrs.is_true(CKA_NEVER_EXTRACTABLE),
        )
    });
    attrs.set_flag(CKA_ALWAYS_SENSITIVE, bs && sensitive);
    attrs.set_flag(CKA_NEVER_EXTRACTABLE, bn && !extractable);
}

/// A secret-key template with defaults for class and key type.
fn secret_template(template: &[Attribute]) -> CkResult<AttrMap> {
    let mut t = attrs::from_template(template)?;
    if t.ulong(CKA_CLASS)?.is_none() {
        t.set_ulong(CKA_CLASS, CKO_SECRET_KEY);
    }
    if t.ulong(CKA_CLASS)? != Some(CKO_SECRET_KEY) {
        return Err(CKR_TEMPLATE_INCONSISTENT);
    }
    if t.ulong(CKA_KEY_TYPE)?.is_none() {
        t.set_ulong(CKA_KEY_TYPE, CKK_GENERIC_SECRET);
    }
    Ok(t)
}

/// A caller's template for `C_UnwrapKey` or `C_DeriveKey` with the unwrapping or base key's
/// `CKA_UNWRAP_TEMPLATE` or `CKA_DERIVE_TEMPLATE` (`which`) applied: its attributes are added,
/// and one the caller gives another value is `CKR_TEMPLATE_INCONSISTENT` (PKCS#11 3.2 §4.10:
/// the key's template is applied to the new key, the caller's "after this template as if the
/// object has already been created"; *decision*: any other value is refused, not only one a
/// `C_SetAttributeValue` could not make).
fn with_key_template(
    template: &[Attribute],
    key: &Object,
    which: CK_ATTRIBUTE_TYPE,
) -> CkResult<Vec<Attribute>> {
    let mut out = template.to_vec();
    let Some(forced) = key.attrs.bytes(which).filter(|b| !b.is_empty()) else {
        return Ok(out);
    };
    for a in decode_template(forced)? {
        match template.iter().find(|u| u.kind == a.kind) {
            Some(u) if !attrs::same_value(a.kind, &u.value, &a.value) => {
                return Err(CKR_TEMPLATE_INCONSISTENT)
            }
            Some(_) => {}
            None => out.push(a),
        }
    }
    Ok(out)
}

impl SoftToken {
    /// `C_GenerateKey`.
    pub fn generate_key(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        let sess = self.session(s)?;
        sess.check_pin_ok()?;
        check_mechanism(m.mechanism, CKF_GENERATE)?;
        let t = attrs::from_template(template)?;
        if let Some(c) = t.ulong(CKA_CLASS)? {
            if c != CKO_SECRET_KEY {
                return Err(CKR_TEMPLATE_INCONSISTENT);
            }
        }
        crate::policy::check_generation_template(&t)?;
        let material = mech::generate_key(m, &t)?;
        let attrs = self.build_object(
            &sess,
            &t,
            material,
            Origin::Generated(m.mechanism),
            Some(CKO_SECRET_KEY),
        )?;
        self.store_object(&sess, attrs)
    }

    /// `C_GenerateKeyPair`.
    pub fn generate_key_pair(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        public: &[Attribute],
        private: &[Attribute],
    ) -> CkResult<(CK_OBJECT_HANDLE, CK_OBJECT_HANDLE)> {
        let sess = self.session(s)?;
        sess.check_pin_ok()?;
        check_mechanism(m.mechanism, CKF_GENERATE_KEY_PAIR)?;
        let pt = attrs::from_template(public)?;
        let qt = attrs::from_template(private)?;
        if pt.ulong(CKA_CLASS)?.is_some_and(|c| c != CKO_PUBLIC_KEY)
            || qt.ulong(CKA_CLASS)?.is_some_and(|c| c != CKO_PRIVATE_KEY)
        {
            return Err(CKR_TEMPLATE_INCONSISTENT);
        }
        crate::policy::check_generation_template(&pt)?;
        crate::policy::check_generation_template(&qt)?;
        let (pm, qm) = mech::generate_key_pair(m, &pt, &qt)?;
        let origin = Origin::Generated(m.mechanism);
        let pa = self.build_object(&sess, &pt, pm, origin, Some(CKO_PUBLIC_KEY))?;
        let qa = self.build_object(&sess, &qt, qm, origin, Some(CKO_PRIVATE_KEY))?;
        // Both keys or neither, in one keystore transaction: a process killed between two
        // writes left public keys without their private halves.
        let h = self.store_objects(&sess, vec![pa, qa])?;
        Ok((h[0], h[1]))
    }

    /// `C_WrapKey`.
    pub fn wrap_key(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        wrapping: CK_OBJECT_HANDLE,
        key: CK_OBJECT_HANDLE,
        out: &mut OutBuf,
    ) -> CkResult<()> {
        let sess = self.session(s)?;
        sess.check_pin_ok()?;
        // The framework's key migration: AES-KWP that also takes non-extractable keys.
        let migrate = m.mechanism == CKM_OPENCF_MIGRATE_KWP;
        let m = &if migrate {
            if !self.framework || !matches!(m.param, MechParam::None) {
                return Err(CKR_MECHANISM_INVALID);
            }
            Mechanism::new(CKM_AES_KEY_WRAP_KWP)
        } else {
            check_mechanism(m.mechanism, CKF_WRAP)?;
            m.clone()
        };
        let mut st = sess.lock();
        let wk = self.op_key(&sess, &mut st, wrapping, CKR_WRAPPING_KEY_HANDLE_INVALID)?;
        drop(st);
        if migrate && wk.attrs.is_true(CKA_TOKEN) {
            // Only a one-off session key may carry a migrated key.
            return Err(CKR_WRAPPING_KEY_HANDLE_INVALID);
        }
        check_key(
            &wk,
            &[CKO_SECRET_KEY, CKO_PUBLIC_KEY],
            CKA_WRAP,
            m.mechanism,
        )
        .map_err(|e| {
            if e == CKR_KEY_TYPE_INCONSISTENT {
                CKR_WRAPPING_KEY_TYPE_INCONSISTENT
            } else {
                e
            }
        })?;
        let k = self.visible_object(&sess, key, CKR_KEY_HANDLE_INVALID)?;
        if !matches!(k.class(), CKO_SECRET_KEY | CKO_PRIVATE_KEY) {
            return Err(CKR_KEY_NOT_WRAPPABLE);
        }
        if !k.attrs.is_true(CKA_EXTRACTABLE) && !migrate {
            return Err(CKR_KEY_UNEXTRACTABLE);
        }
        if k.attrs.is_true(CKA_WRAP_WITH_TRUSTED) && !wk.attrs.is_true(CKA_TRUSTED) && !migrate {
            return Err(CKR_KEY_NOT_WRAPPABLE);
        }
        // The wrapping key's CKA_WRAP_TEMPLATE: "keys that do not match cannot be wrapped"
        // (a secret attribute of the key never matches, as in C_FindObjects).
        if let Some(req) = wk.attrs.bytes(CKA_WRAP_TEMPLATE).filter(|b| !b.is_empty()) {
            let req: Vec<_> = decode_template(req)?
                .into_iter()
                .map(|a| (a.kind, a.value))
                .collect();
            if !crate::policy::matches(&k.attrs, &req) {
                return Err(CKR_KEY_NOT_WRAPPABLE);
            }
        }
        let bytes = mech::key_to_bytes(k.key())?;
        let wrapped = mech::wrap(m, wk.key(), &bytes)?;
        out.write(&wrapped)?;
        Ok(())
    }

    /// `C_UnwrapKey`.
    pub fn unwrap_key(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        unwrapping: CK_OBJECT_HANDLE,
        wrapped: &[u8],
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        let sess = self.session(s)?;
        sess.check_pin_ok()?;
        check_mechanism(m.mechanism, CKF_UNWRAP)?;
        let mut st = sess.lock();
        let uk = self.op_key(
            &sess,
            &mut st,
            unwrapping,
            CKR_UNWRAPPING_KEY_HANDLE_INVALID,
        )?;
        drop(st);
        check_key(
            &uk,
            &[CKO_SECRET_KEY, CKO_PRIVATE_KEY],
            CKA_UNWRAP,
            m.mechanism,
        )
        .map_err(|e| {
            if e == CKR_KEY_TYPE_INCONSISTENT {
                CKR_UNWRAPPING_KEY_TYPE_INCONSISTENT
            } else {
                e
            }
        })?;
        let template = with_key_template(template, &uk, CKA_UNWRAP_TEMPLATE)?;
        let t = attrs::from_template(&template)?;
        crate::policy::check_made_template(&t)?;
        let class = t.ulong(CKA_CLASS)?.unwrap_or(CKO_SECRET_KEY);
        let key_type = t.ulong(CKA_KEY_TYPE)?.ok_or(CKR_TEMPLATE_INCOMPLETE)?;
        let mut bytes = mech::unwrap(m, uk.key(), wrapped)?;
        if class == CKO_SECRET_KEY {
            fit_unwrapped_secret(m.mechanism, &t, key_type, &mut bytes)?;
        }
        let material = mech::key_from_bytes(class, key_type, &bytes)?;
        let mut attrs = self.build_object(&sess, &t, material, Origin::Derived, Some(class))?;
        inherit_sensitivity(&mut attrs, None);
        self.store_object(&sess, attrs)
    }

    /// `C_DeriveKey`.
    pub fn derive_key(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        base: CK_OBJECT_HANDLE,
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        let sess = self.session(s)?;
        sess.check_pin_ok()?;
        check_mechanism(m.mechanism, CKF_DERIVE)?;
        let mut st = sess.lock();
        let bk = self.op_key(&sess, &mut st, base, CKR_KEY_HANDLE_INVALID)?;
        drop(st);
        check_key(
            &bk,
            &[CKO_SECRET_KEY, CKO_PRIVATE_KEY],
            CKA_DERIVE,
            m.mechanism,
        )?;
        let t = secret_template(&with_key_template(template, &bk, CKA_DERIVE_TEMPLATE)?)?;
        crate::policy::check_made_template(&t)?;
        let salt = match &m.param {
            MechParam::Hkdf {
                salt_type,
                salt_key,
                ..
            } if *salt_type == CKF_HKDF_SALT_KEY => {
                // The salt key takes part in the derivation as the base key does: it needs
                // CKA_DERIVE and a mechanism restriction that allows this one.
                let salt = self.visible_object(&sess, *salt_key, CKR_KEY_HANDLE_INVALID)?;
                check_key(&salt, &[CKO_SECRET_KEY], CKA_DERIVE, m.mechanism)?;
                Some(salt)
            }
            _ => None,
        };
        let secret = mech::derive(m, bk.key(), salt.as_ref().map(|o| o.key()), value_len(&t)?)?;
        let mut material = AttrMap::new();
        material.insert(CKA_VALUE, secret.to_vec());
        let mut attrs =
            self.build_object(&sess, &t, material, Origin::Derived, Some(CKO_SECRET_KEY))?;
        inherit_sensitivity(&mut attrs, Some(&bk));
        self.store_object(&sess, attrs)
    }

    /// Stores a shared secret from a KEM as a new secret key.
    fn kem_key(
        &self,
        sess: &crate::session::Session,
        template: &[Attribute],
        secret: &[u8],
        base: Option<&Object>,
    ) -> CkResult<CK_OBJECT_HANDLE> {
        let t = secret_template(template)?;
        crate::policy::check_made_template(&t)?;
        let mut value = secret.to_vec();
        if let Some(n) = value_len(&t)? {
            if n == 0 || n > value.len() {
                return Err(CKR_TEMPLATE_INCONSISTENT);
            }
            value.truncate(n);
        }
        let mut material = AttrMap::new();
        material.insert(CKA_VALUE, value);
        let mut attrs =
            self.build_object(sess, &t, material, Origin::Derived, Some(CKO_SECRET_KEY))?;
        inherit_sensitivity(&mut attrs, base);
        self.store_object(sess, attrs)
    }

    /// `C_EncapsulateKey`.
    pub fn encapsulate_key(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        public: CK_OBJECT_HANDLE,
        template: &[Attribute],
        ct_out: &mut OutBuf,
    ) -> CkResult<Option<CK_OBJECT_HANDLE>> {
        let sess = self.session(s)?;
        sess.check_pin_ok()?;
        check_mechanism(m.mechanism, CKF_ENCAPSULATE)?;
        let mut st = sess.lock();
        let pk = self.op_key(&sess, &mut st, public, CKR_KEY_HANDLE_INVALID)?;
        drop(st);
        check_key(&pk, &[CKO_PUBLIC_KEY], CKA_ENCAPSULATE, m.mechanism)?;
        let n = mech::encapsulate_len(m, pk.key())?;
        if ct_out.is_query() || ct_out.capacity() < n {
            ct_out.reserve(n)?;
            return Ok(None);
        }
        let (ct, secret) = mech::encapsulate(m, pk.key())?;
        let h = self.kem_key(&sess, template, &secret, None)?;
        ct_out.write(&ct)?;
        Ok(Some(h))
    }

    /// `C_DecapsulateKey`.
    pub fn decapsulate_key(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        private: CK_OBJECT_HANDLE,
        template: &[Attribute],
        ct: &[u8],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        let sess = self.session(s)?;
        sess.check_pin_ok()?;
        check_mechanism(m.mechanism, CKF_DECAPSULATE)?;
        let mut st = sess.lock();
        let sk = self.op_key(&sess, &mut st, private, CKR_KEY_HANDLE_INVALID)?;
        drop(st);
        check_key(&sk, &[CKO_PRIVATE_KEY], CKA_DECAPSULATE, m.mechanism)?;
        let secret = mech::decapsulate(m, sk.key(), ct)?;
        self.kem_key(&sess, template, &secret, Some(&sk))
    }
}
