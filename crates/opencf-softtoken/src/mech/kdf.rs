use super::*;
pub fn pbkdf2_generate(_m: &Mechanism, _t: &AttrMap) -> CkResult<AttrMap> { Err(CKR_FUNCTION_NOT_SUPPORTED) }
pub fn hkdf_derive(_m: &Mechanism, _b: Key, _s: Option<Key>, _v: Option<usize>) -> CkResult<Zeroizing<Vec<u8>>> { Err(CKR_FUNCTION_NOT_SUPPORTED) }
