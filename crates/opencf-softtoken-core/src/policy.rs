//! Attribute policy: defaults, what a template may set, what may change later, and what is
//! never revealed. The rules follow PKCS#11 3.2 §4 (storage, key, public/private/secret key
//! objects); where the specification leaves a default to the token, the choice is documented in
//! docs/SOFTTOKEN.md.

use crate::attrs::{AttrMap, AttrMapExt};
use opencf_abi::schema::{self, allowed, is_bool_attr, SENSITIVE_ATTRS};
use opencf_abi::sys::*;
use opencf_abi::CkResult;

/// Attributes `C_SetAttributeValue` may change (subject to the special rules below).
const CHANGEABLE: &[CK_ATTRIBUTE_TYPE] = &[
    CKA_LABEL,
    CKA_ID,
    CKA_START_DATE,
    CKA_END_DATE,
    CKA_SUBJECT,
    CKA_ENCRYPT,
    CKA_DECRYPT,
    CKA_SIGN,
    CKA_VERIFY,
    CKA_SIGN_RECOVER,
    CKA_VERIFY_RECOVER,
    CKA_WRAP,
    CKA_UNWRAP,
    CKA_DERIVE,
    CKA_ENCAPSULATE,
    CKA_DECAPSULATE,
    CKA_SENSITIVE,
    CKA_EXTRACTABLE,
    CKA_COPYABLE,
    CKA_DESTROYABLE,
    CKA_APPLICATION,
    CKA_OBJECT_ID,
    CKA_TRUSTED,
    CKA_WRAP_WITH_TRUSTED,
    CKA_ALLOWED_MECHANISMS,
    CKA_ISSUER,
    CKA_SERIAL_NUMBER,
    CKA_URL,
    CKA_CERTIFICATE_CATEGORY,
];

/// How an object comes to be, for the defaults it gets.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Origin {
    /// `C_CreateObject`.
    Created,
    /// `C_GenerateKey`/`C_GenerateKeyPair` with this mechanism.
    Generated(CK_MECHANISM_TYPE),
    /// `C_UnwrapKey`, `C_DeriveKey`, `C_DecapsulateKey`, `C_EncapsulateKey`.
    Derived,
}

/// Checks a caller template before an object is made: known class, attributes that belong to
/// the class, none of the token-set ones, well-formed booleans and CK_ULONGs
/// ([`schema::check_given`]).
pub fn check_template(attrs: &AttrMap, class: CK_OBJECT_CLASS) -> CkResult<()> {
    attrs
        .iter()
        .try_for_each(|(&t, v)| schema::check_given(class, t, v))
}

/// Whether a public or private key of type `kt` can do what usage attribute `t` allows: RSA
/// encrypts, decrypts, signs, verifies, wraps and unwraps (with recovery); EC, EdDSA and ML-DSA
/// keys sign and verify; ML-KEM keys encapsulate and decapsulate; Montgomery (X25519/X448)
/// keys only derive, which defaults to false for every key. An unknown type keeps every flag.
fn usage_applies(kt: Option<CK_KEY_TYPE>, t: CK_ATTRIBUTE_TYPE) -> bool {
    match kt {
        Some(CKK_RSA) => !matches!(t, CKA_ENCAPSULATE | CKA_DECAPSULATE),
        Some(CKK_EC | CKK_EC_EDWARDS | CKK_ML_DSA) => matches!(t, CKA_SIGN | CKA_VERIFY),
        Some(CKK_ML_KEM) => matches!(t, CKA_ENCAPSULATE | CKA_DECAPSULATE),
        Some(CKK_EC_MONTGOMERY) => false,
        _ => true,
    }
}

/// Fills the defaults of a new object (caller values win) and the token-set attributes.
pub fn apply_defaults(attrs: &mut AttrMap, class: CK_OBJECT_CLASS, origin: Origin) {
    let mut def = |t: CK_ATTRIBUTE_TYPE, v: Vec<u8>| {
        attrs.entry(t).or_insert(v);
    };
    let f = |b: bool| vec![b as u8];
    def(CKA_CLASS, class.to_ne_bytes().to_vec());
    def(CKA_TOKEN, f(false));
    def(
        CKA_PRIVATE,
        f(matches!(class, CKO_PRIVATE_KEY | CKO_SECRET_KEY)),
    );
    def(CKA_MODIFIABLE, f(true));
    def(CKA_COPYABLE, f(true));
    def(CKA_DESTROYABLE, f(true));
    def(CKA_LABEL, Vec::new());
    match class {
        CKO_DATA => {
            def(CKA_APPLICATION, Vec::new());
            def(CKA_OBJECT_ID, Vec::new());
            def(CKA_VALUE, Vec::new());
        }
        CKO_CERTIFICATE => {
            def(CKA_CERTIFICATE_TYPE, CKC_X_509.to_ne_bytes().to_vec());
            def(CKA_TRUSTED, f(false));
            def(CKA_CERTIFICATE_CATEGORY, 0u64.to_ne_bytes().to_vec());
            def(CKA_SUBJECT, Vec::new());
            def(CKA_ID, Vec::new());
            def(CKA_ISSUER, Vec::new());
            def(CKA_SERIAL_NUMBER, Vec::new());
            def(CKA_START_DATE, Vec::new());
            def(CKA_END_DATE, Vec::new());
        }
        CKO_PUBLIC_KEY | CKO_PRIVATE_KEY | CKO_SECRET_KEY => {
            def(CKA_ID, Vec::new());
            def(CKA_START_DATE, Vec::new());
            def(CKA_END_DATE, Vec::new());
            def(CKA_DERIVE, f(false));
            def(CKA_ALLOWED_MECHANISMS, Vec::new());
            let (local, gen) = match origin {
                Origin::Generated(m) => (true, m),
                _ => (false, CK_UNAVAILABLE_INFORMATION),
            };
            attrs.set_flag(CKA_LOCAL, local);
            attrs.set_ulong(CKA_KEY_GEN_MECHANISM, gen);
            let kt = attrs.ulong(CKA_KEY_TYPE).ok().flatten();
            // A usage flag defaults to true only where the key type can do it.
            let can = |t: CK_ATTRIBUTE_TYPE| f(usage_applies(kt, t));
            let mut def = |t: CK_ATTRIBUTE_TYPE, v: Vec<u8>| {
                attrs.entry(t).or_insert(v);
            };
            match class {
                CKO_PUBLIC_KEY => {
                    def(CKA_SUBJECT, Vec::new());
                    def(CKA_ENCRYPT, can(CKA_ENCRYPT));
                    def(CKA_VERIFY, can(CKA_VERIFY));
                    def(CKA_VERIFY_RECOVER, can(CKA_VERIFY_RECOVER));
                    def(CKA_WRAP, can(CKA_WRAP));
                    def(CKA_TRUSTED, f(false));
                    def(CKA_ENCAPSULATE, can(CKA_ENCAPSULATE));
                }
                CKO_PRIVATE_KEY => {
                    def(CKA_SUBJECT, Vec::new());
                    def(CKA_SENSITIVE, f(true));
                    def(CKA_DECRYPT, can(CKA_DECRYPT));
                    def(CKA_SIGN, can(CKA_SIGN));
                    def(CKA_SIGN_RECOVER, can(CKA_SIGN_RECOVER));
                    def(CKA_UNWRAP, can(CKA_UNWRAP));
                    def(CKA_EXTRACTABLE, f(true));
                    def(CKA_WRAP_WITH_TRUSTED, f(false));
                    def(CKA_ALWAYS_AUTHENTICATE, f(false));
                    def(CKA_DECAPSULATE, can(CKA_DECAPSULATE));
                }
                _ => {
                    def(CKA_SENSITIVE, f(false));
                    def(CKA_ENCRYPT, f(true));
                    def(CKA_DECRYPT, f(true));
                    def(CKA_SIGN, f(true));
                    def(CKA_VERIFY, f(true));
                    def(CKA_WRAP, f(true));
                    def(CKA_UNWRAP, f(true));
                    def(CKA_EXTRACTABLE, f(true));
                    def(CKA_WRAP_WITH_TRUSTED, f(false));
                    def(CKA_TRUSTED, f(false));
                }
            }
            if class != CKO_PUBLIC_KEY {
                let generated = matches!(origin, Origin::Generated(_));
                let sensitive = attrs.is_true(CKA_SENSITIVE);
                let extractable = attrs.is_true(CKA_EXTRACTABLE);
                attrs.set_flag(CKA_ALWAYS_SENSITIVE, generated && sensitive);
                attrs.set_flag(CKA_NEVER_EXTRACTABLE, generated && !extractable);
            }
        }
        _ => {}
    }
}

/// The public key material a mechanism makes; with every secret attribute
/// ([`SENSITIVE_ATTRS`]), what a generation template must not carry.
pub const GENERATED_PUBLIC: &[CK_ATTRIBUTE_TYPE] = &[CKA_MODULUS, CKA_EC_POINT];

/// `CKR_TEMPLATE_INCONSISTENT` when a key-generation template gives key material.
pub fn check_generation_template(t: &AttrMap) -> CkResult<()> {
    if (SENSITIVE_ATTRS.iter().chain(GENERATED_PUBLIC)).any(|a| t.contains_key(a)) {
        return Err(CKR_TEMPLATE_INCONSISTENT);
    }
    Ok(())
}

/// `CKR_TEMPLATE_INCONSISTENT` when the template of a key made by `C_UnwrapKey`,
/// `C_DeriveKey` or a KEM gives a secret part of it: PKCS#11 says they "must not be
/// specified" there, and an answer that depended on the value would confirm a guess of a key
/// the caller cannot read.
pub fn check_made_template(t: &AttrMap) -> CkResult<()> {
    if SENSITIVE_ATTRS.iter().any(|a| t.contains_key(a)) {
        return Err(CKR_TEMPLATE_INCONSISTENT);
    }
    Ok(())
}

/// Whether `t` of this object must not be revealed by `C_GetAttributeValue`.
pub fn is_hidden(attrs: &AttrMap, t: CK_ATTRIBUTE_TYPE) -> bool {
    let class = attrs.ulong(CKA_CLASS).ok().flatten();
    if !matches!(class, Some(CKO_PRIVATE_KEY) | Some(CKO_SECRET_KEY)) {
        return false;
    }
    if !SENSITIVE_ATTRS.contains(&t) {
        return false;
    }
    attrs.is_true(CKA_SENSITIVE) || !attrs.is_true(CKA_EXTRACTABLE)
}

/// Checks one change of `C_SetAttributeValue` (or of a `C_CopyObject` template) against the
/// current attributes; `so` tells whether the SO is logged in (only the SO may set
/// `CKA_TRUSTED`).
pub fn check_change(
    current: &AttrMap,
    t: CK_ATTRIBUTE_TYPE,
    new: &[u8],
    so: bool,
    copying: bool,
) -> CkResult<()> {
    let class = current.ulong(CKA_CLASS)?.unwrap_or(CKO_DATA);
    if !allowed(class, t) {
        return Err(CKR_ATTRIBUTE_TYPE_INVALID);
    }
    // Setting an attribute to the value it has is no change, except for a key's secret
    // parts: their answer must not depend on the value, or it would confirm a guess of a key
    // the caller cannot read (they are read-only either way).
    let key_secret =
        matches!(class, CKO_PRIVATE_KEY | CKO_SECRET_KEY) && SENSITIVE_ATTRS.contains(&t);
    if !key_secret && current.get(&t).map(|v| v.as_slice()) == Some(new) {
        return Ok(());
    }
    let copy_ok = copying && matches!(t, CKA_TOKEN | CKA_PRIVATE | CKA_MODIFIABLE);
    if !CHANGEABLE.contains(&t) && !copy_ok {
        return Err(CKR_ATTRIBUTE_READ_ONLY);
    }
    if is_bool_attr(t) && new.len() != 1 {
        return Err(CKR_ATTRIBUTE_VALUE_INVALID);
    }
    schema::check_value(t, new)?;
    let v = new.first().copied().unwrap_or(0) != 0;
    match t {
        // Once sensitive, always sensitive; once unextractable, always unextractable.
        CKA_SENSITIVE if !v => Err(CKR_ATTRIBUTE_READ_ONLY),
        CKA_EXTRACTABLE if v => Err(CKR_ATTRIBUTE_READ_ONLY),
        // COPYABLE and DESTROYABLE may only be turned off.
        CKA_COPYABLE | CKA_DESTROYABLE if v => Err(CKR_ATTRIBUTE_READ_ONLY),
        // WRAP_WITH_TRUSTED may only be turned on.
        CKA_WRAP_WITH_TRUSTED if !v => Err(CKR_ATTRIBUTE_READ_ONLY),
        CKA_MODIFIABLE if copying && v && !current.is_true(CKA_MODIFIABLE) => {
            Err(CKR_ATTRIBUTE_READ_ONLY)
        }
        // *Decision*: a copy may make a public object private, not a private one public: the
        // copy would be read and used without the PIN (PKCS#11 3.2 §5.7 lets the token refuse
        // a change of CKA_PRIVATE in a copy; SoftHSMv2 refuses it too).
        CKA_PRIVATE if copying && !v && current.is_true(CKA_PRIVATE) => {
            Err(CKR_ATTRIBUTE_READ_ONLY)
        }
        CKA_TRUSTED if v && !so => Err(CKR_ATTRIBUTE_READ_ONLY),
        CKA_VALUE if class != CKO_DATA => Err(CKR_ATTRIBUTE_READ_ONLY),
        _ => Ok(()),
    }
}

/// Whether `obj` matches every attribute of a search template.
pub fn matches(obj: &AttrMap, template: &[(CK_ATTRIBUTE_TYPE, Vec<u8>)]) -> bool {
    template.iter().all(|(t, v)| {
        // A hidden value matches nothing, and is not compared at all.
        !is_hidden(obj, *t)
            && obj
                .get(t)
                .is_some_and(|have| crate::attrs::same_value(*t, have, v))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_value_is_read_only_whatever_the_guess() {
        let mut a = AttrMap::new();
        apply_defaults(&mut a, CKO_SECRET_KEY, Origin::Created);
        a.set_flag(CKA_SENSITIVE, true);
        a.insert(CKA_VALUE, vec![7u8; 16]);
        for copying in [false, true] {
            for guess in [vec![7u8; 16], vec![8u8; 16]] {
                assert_eq!(
                    check_change(&a, CKA_VALUE, &guess, false, copying),
                    Err(CKR_ATTRIBUTE_READ_ONLY)
                );
            }
        }
        // An attribute anyone may read keeps its answers: the same value is no change, and a
        // read-only one still refuses another.
        a.insert(CKA_LABEL, b"k".to_vec());
        assert_eq!(check_change(&a, CKA_LABEL, b"k", false, false), Ok(()));
        assert_eq!(check_change(&a, CKA_LABEL, b"other", false, false), Ok(()));
        a.insert(CKA_KEY_TYPE, CKK_AES.to_ne_bytes().to_vec());
        let aes = CKK_AES.to_ne_bytes();
        let des3 = CKK_DES3.to_ne_bytes();
        assert_eq!(check_change(&a, CKA_KEY_TYPE, &aes, false, false), Ok(()));
        assert_eq!(
            check_change(&a, CKA_KEY_TYPE, &des3, false, false),
            Err(CKR_ATTRIBUTE_READ_ONLY)
        );
    }

    #[test]
    fn sensitive_cannot_be_cleared_nor_extractable_set() {
        let mut a = AttrMap::new();
        apply_defaults(&mut a, CKO_SECRET_KEY, Origin::Created);
        a.set_flag(CKA_SENSITIVE, true);
        a.set_flag(CKA_EXTRACTABLE, false);
        assert_eq!(
            check_change(&a, CKA_SENSITIVE, &[0], false, false),
            Err(CKR_ATTRIBUTE_READ_ONLY)
        );
        assert_eq!(
            check_change(&a, CKA_EXTRACTABLE, &[1], false, false),
            Err(CKR_ATTRIBUTE_READ_ONLY)
        );
        assert_eq!(check_change(&a, CKA_LABEL, b"x", false, false), Ok(()));
        assert!(is_hidden(&a, CKA_VALUE));
    }

    #[test]
    fn usage_defaults_follow_the_key_type() {
        let key = |class, kt| {
            let mut a = AttrMap::new();
            a.set_ulong(CKA_KEY_TYPE, kt);
            apply_defaults(&mut a, class, Origin::Generated(0));
            a
        };
        let ec = key(CKO_PRIVATE_KEY, CKK_EC);
        assert!(ec.is_true(CKA_SIGN));
        for t in [
            CKA_DECRYPT,
            CKA_UNWRAP,
            CKA_DECAPSULATE,
            CKA_SIGN_RECOVER,
            CKA_DERIVE,
        ] {
            assert!(!ec.is_true(t), "EC private key: {t:#x} off by default");
        }
        let ec_pub = key(CKO_PUBLIC_KEY, CKK_EC);
        assert!(ec_pub.is_true(CKA_VERIFY));
        for t in [CKA_ENCRYPT, CKA_WRAP, CKA_ENCAPSULATE, CKA_VERIFY_RECOVER] {
            assert!(!ec_pub.is_true(t), "EC public key: {t:#x} off by default");
        }
        let rsa = key(CKO_PRIVATE_KEY, CKK_RSA);
        for t in [CKA_SIGN, CKA_DECRYPT, CKA_UNWRAP, CKA_SIGN_RECOVER] {
            assert!(rsa.is_true(t), "RSA private key: {t:#x} on by default");
        }
        assert!(!rsa.is_true(CKA_DECAPSULATE));
        let kem = key(CKO_PRIVATE_KEY, CKK_ML_KEM);
        assert!(kem.is_true(CKA_DECAPSULATE) && !kem.is_true(CKA_SIGN));
        let x = key(CKO_PRIVATE_KEY, CKK_EC_MONTGOMERY);
        assert!(!x.is_true(CKA_SIGN) && !x.is_true(CKA_DECRYPT));
    }

    #[test]
    fn token_set_attributes_are_refused() {
        let mut a = AttrMap::new();
        a.set_flag(CKA_LOCAL, true);
        assert_eq!(
            check_template(&a, CKO_SECRET_KEY),
            Err(CKR_ATTRIBUTE_READ_ONLY)
        );
        let mut b = AttrMap::new();
        b.set_ulong(CKA_MODULUS_BITS, 2048);
        assert_eq!(
            check_template(&b, CKO_SECRET_KEY),
            Err(CKR_ATTRIBUTE_TYPE_INVALID)
        );
    }
}
