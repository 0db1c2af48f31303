//! Which attributes belong to an object of each class, which ones only a token sets, and
//! which are `CK_BBOOL` or `CK_ULONG` (PKCS#11 3.2 §4: storage, data, certificate, key, public,
//! private and secret key objects). Every OpenCF module checks a caller's template with these
//! tables, so the software token and the accelerator give the same answers to the same bad
//! template.

use crate::sys::*;
use crate::{Attribute, CkResult};
use std::collections::BTreeMap;

/// Attributes only the token sets.
pub const TOKEN_SET: &[CK_ATTRIBUTE_TYPE] = &[
    CKA_LOCAL,
    CKA_ALWAYS_SENSITIVE,
    CKA_NEVER_EXTRACTABLE,
    CKA_KEY_GEN_MECHANISM,
    CKA_UNIQUE_ID,
];

/// Attributes of every storage object.
const STORAGE: &[CK_ATTRIBUTE_TYPE] = &[
    CKA_CLASS,
    CKA_TOKEN,
    CKA_PRIVATE,
    CKA_MODIFIABLE,
    CKA_COPYABLE,
    CKA_DESTROYABLE,
    CKA_LABEL,
    CKA_UNIQUE_ID,
];

/// Attributes common to all keys.
const KEY: &[CK_ATTRIBUTE_TYPE] = &[
    CKA_KEY_TYPE,
    CKA_ID,
    CKA_START_DATE,
    CKA_END_DATE,
    CKA_DERIVE,
    CKA_LOCAL,
    CKA_KEY_GEN_MECHANISM,
    CKA_ALLOWED_MECHANISMS,
];

const PUBLIC: &[CK_ATTRIBUTE_TYPE] = &[
    CKA_SUBJECT,
    CKA_ENCRYPT,
    CKA_VERIFY,
    CKA_VERIFY_RECOVER,
    CKA_WRAP,
    CKA_TRUSTED,
    CKA_WRAP_TEMPLATE,
    CKA_PUBLIC_KEY_INFO,
    CKA_ENCAPSULATE,
    CKA_ENCAPSULATE_TEMPLATE,
];

const PRIVATE: &[CK_ATTRIBUTE_TYPE] = &[
    CKA_SUBJECT,
    CKA_SENSITIVE,
    CKA_DECRYPT,
    CKA_SIGN,
    CKA_SIGN_RECOVER,
    CKA_UNWRAP,
    CKA_EXTRACTABLE,
    CKA_ALWAYS_SENSITIVE,
    CKA_NEVER_EXTRACTABLE,
    CKA_WRAP_WITH_TRUSTED,
    CKA_UNWRAP_TEMPLATE,
    CKA_ALWAYS_AUTHENTICATE,
    CKA_PUBLIC_KEY_INFO,
    CKA_DECAPSULATE,
    CKA_DECAPSULATE_TEMPLATE,
];

const SECRET: &[CK_ATTRIBUTE_TYPE] = &[
    CKA_SENSITIVE,
    CKA_ENCRYPT,
    CKA_DECRYPT,
    CKA_SIGN,
    CKA_VERIFY,
    CKA_WRAP,
    CKA_UNWRAP,
    CKA_EXTRACTABLE,
    CKA_ALWAYS_SENSITIVE,
    CKA_NEVER_EXTRACTABLE,
    CKA_CHECK_VALUE,
    CKA_WRAP_WITH_TRUSTED,
    CKA_TRUSTED,
    CKA_WRAP_TEMPLATE,
    CKA_UNWRAP_TEMPLATE,
    CKA_DERIVE_TEMPLATE,
    CKA_VALUE,
    CKA_VALUE_LEN,
];

/// The public parts of key material, of every key type; the secret parts are
/// [`SENSITIVE_ATTRS`]. A public or private key may carry either ([`is_material`]).
const PUBLIC_MATERIAL: &[CK_ATTRIBUTE_TYPE] = &[
    CKA_MODULUS,
    CKA_MODULUS_BITS,
    CKA_PUBLIC_EXPONENT,
    CKA_EC_PARAMS,
    CKA_EC_POINT,
    CKA_PARAMETER_SET,
];

/// Whether `t` is key material, public or secret.
fn is_material(t: CK_ATTRIBUTE_TYPE) -> bool {
    PUBLIC_MATERIAL.contains(&t) || SENSITIVE_ATTRS.contains(&t)
}

const DATA: &[CK_ATTRIBUTE_TYPE] = &[CKA_APPLICATION, CKA_OBJECT_ID, CKA_VALUE];

const CERT: &[CK_ATTRIBUTE_TYPE] = &[
    CKA_CERTIFICATE_TYPE,
    CKA_TRUSTED,
    CKA_CERTIFICATE_CATEGORY,
    CKA_CHECK_VALUE,
    CKA_START_DATE,
    CKA_END_DATE,
    CKA_PUBLIC_KEY_INFO,
    CKA_SUBJECT,
    CKA_ID,
    CKA_ISSUER,
    CKA_SERIAL_NUMBER,
    CKA_VALUE,
    CKA_URL,
    CKA_HASH_OF_SUBJECT_PUBLIC_KEY,
    CKA_HASH_OF_ISSUER_PUBLIC_KEY,
    CKA_JAVA_MIDP_SECURITY_DOMAIN,
    CKA_NAME_HASH_ALGORITHM,
];

/// Attributes that are secret in a private or secret key: a token never reveals them where
/// the key is sensitive or unextractable (the accelerator never at all).
pub const SENSITIVE_ATTRS: &[CK_ATTRIBUTE_TYPE] = &[
    CKA_PRIVATE_EXPONENT,
    CKA_PRIME_1,
    CKA_PRIME_2,
    CKA_EXPONENT_1,
    CKA_EXPONENT_2,
    CKA_COEFFICIENT,
    CKA_VALUE,
    CKA_SEED,
];

/// Whether attribute `t` can belong to an object of class `class`.
pub fn allowed(class: CK_OBJECT_CLASS, t: CK_ATTRIBUTE_TYPE) -> bool {
    if STORAGE.contains(&t) || (t & CKA_VENDOR_DEFINED) != 0 {
        return true;
    }
    match class {
        CKO_DATA => DATA.contains(&t),
        CKO_CERTIFICATE => CERT.contains(&t),
        CKO_PUBLIC_KEY => KEY.contains(&t) || PUBLIC.contains(&t) || is_material(t),
        CKO_PRIVATE_KEY => KEY.contains(&t) || PRIVATE.contains(&t) || is_material(t),
        CKO_SECRET_KEY => KEY.contains(&t) || SECRET.contains(&t),
        _ => false,
    }
}

/// `CK_BBOOL` attributes.
pub fn is_bool_attr(t: CK_ATTRIBUTE_TYPE) -> bool {
    matches!(
        t,
        CKA_TOKEN
            | CKA_PRIVATE
            | CKA_MODIFIABLE
            | CKA_COPYABLE
            | CKA_DESTROYABLE
            | CKA_DERIVE
            | CKA_LOCAL
            | CKA_ENCRYPT
            | CKA_DECRYPT
            | CKA_SIGN
            | CKA_VERIFY
            | CKA_SIGN_RECOVER
            | CKA_VERIFY_RECOVER
            | CKA_WRAP
            | CKA_UNWRAP
            | CKA_TRUSTED
            | CKA_SENSITIVE
            | CKA_EXTRACTABLE
            | CKA_ALWAYS_SENSITIVE
            | CKA_NEVER_EXTRACTABLE
            | CKA_WRAP_WITH_TRUSTED
            | CKA_ALWAYS_AUTHENTICATE
            | CKA_ENCAPSULATE
            | CKA_DECAPSULATE
    )
}

/// `CK_ULONG` attributes.
pub fn is_ulong_attr(t: CK_ATTRIBUTE_TYPE) -> bool {
    matches!(
        t,
        CKA_CLASS
            | CKA_KEY_TYPE
            | CKA_CERTIFICATE_TYPE
            | CKA_CERTIFICATE_CATEGORY
            | CKA_MODULUS_BITS
            | CKA_VALUE_LEN
            | CKA_KEY_GEN_MECHANISM
            | CKA_PARAMETER_SET
            | CKA_JAVA_MIDP_SECURITY_DOMAIN
            | CKA_NAME_HASH_ALGORITHM
    )
}

/// Checks one attribute a caller gives for a new object of class `class`: one that only the
/// token sets is `CKR_ATTRIBUTE_READ_ONLY`, one that does not belong to the class
/// `CKR_ATTRIBUTE_TYPE_INVALID`, a `CK_BBOOL` or `CK_ULONG` of another size
/// `CKR_ATTRIBUTE_VALUE_INVALID`.
pub fn check_given(class: CK_OBJECT_CLASS, t: CK_ATTRIBUTE_TYPE, v: &[u8]) -> CkResult<()> {
    if TOKEN_SET.contains(&t) {
        return Err(CKR_ATTRIBUTE_READ_ONLY);
    }
    if !allowed(class, t) {
        return Err(CKR_ATTRIBUTE_TYPE_INVALID);
    }
    if is_bool_attr(t) && v.len() != 1 {
        return Err(CKR_ATTRIBUTE_VALUE_INVALID);
    }
    if is_ulong_attr(t) && v.len() != std::mem::size_of::<CK_ULONG>() {
        return Err(CKR_ATTRIBUTE_VALUE_INVALID);
    }
    check_value(t, v)
}

/// Checks the layout of a value whose type says more than its length class:
/// `CKA_ALLOWED_MECHANISMS` is an array of `CK_MECHANISM_TYPE`s, so a length that is not a
/// multiple of one is `CKR_ATTRIBUTE_VALUE_INVALID` (a partial entry would be dropped, or a
/// shorter value would refuse every mechanism without a word).
pub fn check_value(t: CK_ATTRIBUTE_TYPE, v: &[u8]) -> CkResult<()> {
    if t == CKA_ALLOWED_MECHANISMS
        && !v
            .len()
            .is_multiple_of(std::mem::size_of::<CK_MECHANISM_TYPE>())
    {
        return Err(CKR_ATTRIBUTE_VALUE_INVALID);
    }
    Ok(())
}

/// Whether two values of attribute `t` are the same: two one-byte `CK_BBOOL`s compare as
/// flags (any byte but `CK_FALSE` is true: PKCS#11 defines only 0 and 1, and a byte such as 2
/// read as true by one layer and as false by another would let one grant what the other
/// denies), anything else byte for byte.
pub fn same_value(t: CK_ATTRIBUTE_TYPE, a: &[u8], b: &[u8]) -> bool {
    match (a, b) {
        ([x], [y]) if is_bool_attr(t) => (*x != 0) == (*y != 0),
        _ => a == b,
    }
}

/// Checks a caller's template for a new object of class `class`: a type given twice with
/// different values is `CKR_TEMPLATE_INCONSISTENT`; then each attribute, in the order of
/// their types, as [`check_given`] does.
pub fn check_template(template: &[Attribute], class: CK_OBJECT_CLASS) -> CkResult<()> {
    let mut given: BTreeMap<CK_ATTRIBUTE_TYPE, &[u8]> = BTreeMap::new();
    for a in template {
        if let Some(prev) = given.insert(a.kind, &a.value) {
            if !same_value(a.kind, prev, &a.value) {
                return Err(CKR_TEMPLATE_INCONSISTENT);
            }
        }
    }
    given
        .into_iter()
        .try_for_each(|(t, v)| check_given(class, t, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_set_foreign_and_malformed_attributes_are_refused() {
        let ck = |t: &[Attribute]| check_template(t, CKO_SECRET_KEY);
        let aes = [
            Attribute::ulong(CKA_CLASS, CKO_SECRET_KEY),
            Attribute::ulong(CKA_KEY_TYPE, CKK_AES),
            Attribute::new(CKA_VALUE, vec![7; 16]),
            Attribute::bool(CKA_ENCRYPT, true),
        ];
        assert_eq!(ck(&aes), Ok(()));
        let with = |extra: Attribute| {
            let mut t = aes.to_vec();
            t.push(extra);
            ck(&t)
        };
        assert_eq!(
            with(Attribute::bool(CKA_LOCAL, true)),
            Err(CKR_ATTRIBUTE_READ_ONLY)
        );
        assert_eq!(
            with(Attribute::ulong(CKA_MODULUS_BITS, 2048)),
            Err(CKR_ATTRIBUTE_TYPE_INVALID)
        );
        assert_eq!(
            with(Attribute::new(0x7fff_0000, vec![1])),
            Err(CKR_ATTRIBUTE_TYPE_INVALID)
        );
        // Vendor-defined types belong to every class.
        assert_eq!(
            with(Attribute::new(CKA_VENDOR_DEFINED | 5, vec![1])),
            Ok(())
        );
        assert_eq!(
            with(Attribute::new(CKA_SENSITIVE, Vec::new())),
            Err(CKR_ATTRIBUTE_VALUE_INVALID)
        );
        assert_eq!(
            with(Attribute::new(CKA_VALUE_LEN, vec![16])),
            Err(CKR_ATTRIBUTE_VALUE_INVALID)
        );
        assert_eq!(
            with(Attribute::bool(CKA_ENCRYPT, false)),
            Err(CKR_TEMPLATE_INCONSISTENT)
        );
        // The same value twice is no contradiction.
        assert_eq!(with(Attribute::bool(CKA_ENCRYPT, true)), Ok(()));
        // A private key's attributes are not a secret key's, and the other way round.
        assert_eq!(
            check_template(&[Attribute::new(CKA_MODULUS, vec![1])], CKO_PRIVATE_KEY),
            Ok(())
        );
        assert_eq!(
            check_template(&[Attribute::bool(CKA_WRAP, true)], CKO_PRIVATE_KEY),
            Err(CKR_ATTRIBUTE_TYPE_INVALID)
        );
    }
}
