//! (being written)
use super::*;
pub fn sign_init(_m: &Mechanism, _k: Key) -> CkResult<Box<dyn SignOp>> { Err(CKR_MECHANISM_INVALID) }
pub fn verify_init(_m: &Mechanism, _k: Key) -> CkResult<Box<dyn VerifyOp>> { Err(CKR_MECHANISM_INVALID) }
pub fn generate_key_pair(_m: &Mechanism, _p: &AttrMap, _s: &AttrMap) -> CkResult<(AttrMap, AttrMap)> { Err(CKR_MECHANISM_INVALID) }
pub fn complete_key(_c: CK_OBJECT_CLASS, _t: CK_KEY_TYPE, _a: &mut AttrMap) -> CkResult<()> { Err(CKR_MECHANISM_INVALID) }
pub fn to_pkcs8(_k: Key) -> CkResult<Zeroizing<Vec<u8>>> { Err(CKR_MECHANISM_INVALID) }
pub fn from_pkcs8(_t: CK_KEY_TYPE, _b: &[u8]) -> CkResult<AttrMap> { Err(CKR_MECHANISM_INVALID) }
pub fn derive(_m: &Mechanism, _k: Key, _l: Option<usize>) -> CkResult<Zeroizing<Vec<u8>>> { Err(CKR_MECHANISM_INVALID) }
