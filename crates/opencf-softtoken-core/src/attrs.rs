//! Attribute maps: how the token holds an object's attributes.

use opencf_abi::sys::*;
use opencf_abi::{bool_from_bytes, ulong_from_bytes, Attribute, CkResult};
use std::collections::BTreeMap;

/// An object's attributes: type → raw value (PKCS#11 layout: `CK_ULONG` native-endian,
/// `CK_BBOOL` one byte).
pub type AttrMap = BTreeMap<CK_ATTRIBUTE_TYPE, Vec<u8>>;

/// Typed access to an [`AttrMap`].
pub trait AttrMapExt {
    /// The raw bytes of `t`.
    fn bytes(&self, t: CK_ATTRIBUTE_TYPE) -> Option<&[u8]>;
    /// `t` read as `CK_ULONG`; absent → `Ok(None)`, wrong size → `CKR_ATTRIBUTE_VALUE_INVALID`.
    fn ulong(&self, t: CK_ATTRIBUTE_TYPE) -> CkResult<Option<CK_ULONG>>;
    /// `t` read as `CK_BBOOL`; absent → `Ok(None)`.
    fn flag(&self, t: CK_ATTRIBUTE_TYPE) -> CkResult<Option<bool>>;
    /// `t` as a boolean with a default when absent or malformed.
    fn is_true(&self, t: CK_ATTRIBUTE_TYPE) -> bool;
    /// Stores a `CK_ULONG`.
    fn set_ulong(&mut self, t: CK_ATTRIBUTE_TYPE, v: CK_ULONG);
    /// Stores a `CK_BBOOL`.
    fn set_flag(&mut self, t: CK_ATTRIBUTE_TYPE, v: bool);
    /// The required `CK_ULONG` attribute `t`; absent → `CKR_TEMPLATE_INCOMPLETE`.
    fn need_ulong(&self, t: CK_ATTRIBUTE_TYPE) -> CkResult<CK_ULONG>;
    /// The required byte attribute `t`; absent → `CKR_TEMPLATE_INCOMPLETE`.
    fn need_bytes(&self, t: CK_ATTRIBUTE_TYPE) -> CkResult<&[u8]>;
}

impl AttrMapExt for AttrMap {
    fn bytes(&self, t: CK_ATTRIBUTE_TYPE) -> Option<&[u8]> {
        self.get(&t).map(|v| v.as_slice())
    }
    fn ulong(&self, t: CK_ATTRIBUTE_TYPE) -> CkResult<Option<CK_ULONG>> {
        self.get(&t).map(|v| ulong_from_bytes(v)).transpose()
    }
    fn flag(&self, t: CK_ATTRIBUTE_TYPE) -> CkResult<Option<bool>> {
        self.get(&t).map(|v| bool_from_bytes(v)).transpose()
    }
    fn is_true(&self, t: CK_ATTRIBUTE_TYPE) -> bool {
        matches!(self.flag(t), Ok(Some(true)))
    }
    fn set_ulong(&mut self, t: CK_ATTRIBUTE_TYPE, v: CK_ULONG) {
        self.insert(t, v.to_ne_bytes().to_vec());
    }
    fn set_flag(&mut self, t: CK_ATTRIBUTE_TYPE, v: bool) {
        self.insert(t, vec![v as u8]);
    }
    fn need_ulong(&self, t: CK_ATTRIBUTE_TYPE) -> CkResult<CK_ULONG> {
        self.ulong(t)?.ok_or(CKR_TEMPLATE_INCOMPLETE)
    }
    fn need_bytes(&self, t: CK_ATTRIBUTE_TYPE) -> CkResult<&[u8]> {
        self.bytes(t).ok_or(CKR_TEMPLATE_INCOMPLETE)
    }
}

/// Builds a map from a caller's template; a type given twice with different values is
/// `CKR_TEMPLATE_INCONSISTENT`. A `CK_BBOOL` is kept as 0 or 1 ([`normalized`]).
pub fn from_template(template: &[Attribute]) -> CkResult<AttrMap> {
    let mut m = AttrMap::new();
    for a in template {
        if let Some(prev) = m.get(&a.kind) {
            if !same_value(a.kind, prev, &a.value) {
                return Err(CKR_TEMPLATE_INCONSISTENT);
            }
        }
        m.insert(a.kind, normalized(a.kind, &a.value));
    }
    Ok(m)
}

/// A caller's value of attribute `t` as the token keeps it: a one-byte `CK_BBOOL` other than
/// `CK_FALSE` becomes `CK_TRUE` (1), as every reader of a flag takes it
/// ([`opencf_abi::schema::same_value`]). Anything else is kept as given.
pub fn normalized(t: CK_ATTRIBUTE_TYPE, v: &[u8]) -> Vec<u8> {
    match v {
        [b] if opencf_abi::schema::is_bool_attr(t) => vec![u8::from(*b != 0)],
        _ => v.to_vec(),
    }
}

pub use opencf_abi::schema::same_value;
