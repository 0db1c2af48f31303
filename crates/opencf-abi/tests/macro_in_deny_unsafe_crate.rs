//! `pkcs11_module!` compiles in a crate that denies `unsafe_code`, and its entry points work.

#![deny(unsafe_code)]

mod common;

use std::ptr::null_mut;

use opencf_abi::sys::*;

opencf_abi::pkcs11_module!(common::Dummy);

#[test]
fn entry_points_in_a_deny_unsafe_crate() {
    let mut count: CK_ULONG = 0;
    assert_eq!(C_GetInterfaceList(null_mut(), &mut count), CKR_OK);
    assert_eq!(count, 3);
    let mut list: *mut CK_FUNCTION_LIST = null_mut();
    assert_eq!(C_GetFunctionList(&mut list), CKR_OK);
    assert!(!list.is_null());
    assert_eq!(C_Initialize(null_mut()), CKR_OK);
    let mut info = CK_INFO::default();
    assert_eq!(C_GetInfo(&mut info), CKR_OK);
    assert_eq!(&info.manufacturerID[..6], b"OpenCF");
    assert_eq!(C_Finalize(null_mut()), CKR_OK);
}
