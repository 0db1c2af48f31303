use super::*;
pub fn is_mac(_m: CK_MECHANISM_TYPE) -> bool { false }
pub fn sign_init(_m: &Mechanism, _k: Key) -> CkResult<Box<dyn SignOp>> { Err(CKR_FUNCTION_NOT_SUPPORTED) }
pub fn verify_init(_m: &Mechanism, _k: Key) -> CkResult<Box<dyn VerifyOp>> { Err(CKR_FUNCTION_NOT_SUPPORTED) }
