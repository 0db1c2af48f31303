//! The PKCS#11 function tables (2.40, 3.0, 3.2), the interface list, and the three entry
//! points that work before `C_Initialize`: `C_GetFunctionList`, `C_GetInterfaceList` and
//! `C_GetInterface`.
//!
//! [`crate::pkcs11_module!`] places the tables in statics of the module's crate; they are
//! built here by generic `const fn`s so the expansion stays small. The tables live in
//! writable memory (an `UnsafeCell`): a few old applications patch the function list they
//! are given, and a write to read-only memory would crash them.

// The entry points below are FFI functions taking the caller's raw pointers, as
// `crate::export` does.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use std::cell::UnsafeCell;
use std::ffi::{c_char, c_void, CStr};

use crate::convert::{put, req, write_list};
use crate::export::{self, guard};
use crate::sys::*;
use crate::Backend;

/// `C_GetFunctionList` as a function pointer.
pub type GetFunctionListFn = unsafe extern "C" fn(*mut *mut CK_FUNCTION_LIST) -> CK_RV;
/// `C_GetInterfaceList` as a function pointer.
pub type GetInterfaceListFn = unsafe extern "C" fn(*mut CK_INTERFACE, *mut CK_ULONG) -> CK_RV;
/// `C_GetInterface` as a function pointer.
pub type GetInterfaceFn = unsafe extern "C" fn(
    *mut CK_UTF8CHAR,
    *mut CK_VERSION,
    *mut *mut CK_INTERFACE,
    CK_FLAGS,
) -> CK_RV;

/// The three entry points the macro defines in the module's crate (they refer to the module's
/// own statics, so they cannot be generic functions of this crate).
#[derive(Clone, Copy)]
pub struct EntryPoints {
    /// The module's `C_GetFunctionList`.
    pub get_function_list: GetFunctionListFn,
    /// The module's `C_GetInterfaceList`.
    pub get_interface_list: GetInterfaceListFn,
    /// The module's `C_GetInterface`.
    pub get_interface: GetInterfaceFn,
}

/// A function table in a static, handed to C callers by pointer.
#[repr(transparent)]
pub struct FunctionList<T>(UnsafeCell<T>);

// SAFETY: the tables hold only function pointers and a version. Rust never writes them after
// construction; C callers get a `*mut` pointer as the PKCS#11 API requires.
unsafe impl Sync for FunctionList<CK_FUNCTION_LIST> {}
// SAFETY: as above.
unsafe impl Sync for FunctionList<CK_FUNCTION_LIST_3_0> {}
// SAFETY: as above.
unsafe impl Sync for FunctionList<CK_FUNCTION_LIST_3_2> {}

impl<T> FunctionList<T> {
    /// The pointer handed to C callers.
    pub const fn as_ptr(&self) -> *mut T {
        self.0.get()
    }
}

/// Builds the three table constructors from the function names, grouped by the version
/// that introduced them (the three entry points excepted).
macro_rules! tables {
    ([$($v240:ident),* $(,)?] [$($v30:ident),* $(,)?] [$($v32:ident),* $(,)?]) => {
        /// The PKCS#11 3.2 table (`CK_FUNCTION_LIST_3_2`, version 3.2) for backend `B`.
        pub const fn function_list_3_2<B: Backend>(
            entry: EntryPoints,
        ) -> FunctionList<CK_FUNCTION_LIST_3_2> {
            FunctionList(UnsafeCell::new(CK_FUNCTION_LIST_3_2 {
                version: CK_VERSION { major: 3, minor: 2 },
                C_GetFunctionList: Some(entry.get_function_list),
                C_GetInterfaceList: Some(entry.get_interface_list),
                C_GetInterface: Some(entry.get_interface),
                $($v240: Some(export::$v240::<B>),)*
                $($v30: Some(export::$v30::<B>),)*
                $($v32: Some(export::$v32::<B>),)*
            }))
        }

        /// The PKCS#11 3.0 table (`CK_FUNCTION_LIST_3_0`, version 3.0) for backend `B`.
        pub const fn function_list_3_0<B: Backend>(
            entry: EntryPoints,
        ) -> FunctionList<CK_FUNCTION_LIST_3_0> {
            FunctionList(UnsafeCell::new(CK_FUNCTION_LIST_3_0 {
                version: CK_VERSION { major: 3, minor: 0 },
                C_GetFunctionList: Some(entry.get_function_list),
                C_GetInterfaceList: Some(entry.get_interface_list),
                C_GetInterface: Some(entry.get_interface),
                $($v240: Some(export::$v240::<B>),)*
                $($v30: Some(export::$v30::<B>),)*
            }))
        }

        /// The PKCS#11 2.40 table (`CK_FUNCTION_LIST`, version 2.40) for backend `B`.
        pub const fn function_list_2_40<B: Backend>(
            entry: EntryPoints,
        ) -> FunctionList<CK_FUNCTION_LIST> {
            FunctionList(UnsafeCell::new(CK_FUNCTION_LIST {
                version: CK_VERSION { major: 2, minor: 40 },
                C_GetFunctionList: Some(entry.get_function_list),
                $($v240: Some(export::$v240::<B>),)*
            }))
        }
    };
}

tables! {
    [
        C_Initialize, C_Finalize, C_GetInfo, C_GetSlotList, C_GetSlotInfo, C_GetTokenInfo,
        C_GetMechanismList, C_GetMechanismInfo, C_InitToken, C_InitPIN, C_SetPIN,
        C_OpenSession, C_CloseSession, C_CloseAllSessions, C_GetSessionInfo,
        C_GetOperationState, C_SetOperationState, C_Login, C_Logout, C_CreateObject,
        C_CopyObject, C_DestroyObject, C_GetObjectSize, C_GetAttributeValue,
        C_SetAttributeValue, C_FindObjectsInit, C_FindObjects, C_FindObjectsFinal,
        C_EncryptInit, C_Encrypt, C_EncryptUpdate, C_EncryptFinal, C_DecryptInit, C_Decrypt,
        C_DecryptUpdate, C_DecryptFinal, C_DigestInit, C_Digest, C_DigestUpdate, C_DigestKey,
        C_DigestFinal, C_SignInit, C_Sign, C_SignUpdate, C_SignFinal, C_SignRecoverInit,
        C_SignRecover, C_VerifyInit, C_Verify, C_VerifyUpdate, C_VerifyFinal,
        C_VerifyRecoverInit, C_VerifyRecover, C_DigestEncryptUpdate, C_DecryptDigestUpdate,
        C_SignEncryptUpdate, C_DecryptVerifyUpdate, C_GenerateKey, C_GenerateKeyPair,
        C_WrapKey, C_UnwrapKey, C_DeriveKey, C_SeedRandom, C_GenerateRandom,
        C_GetFunctionStatus, C_CancelFunction, C_WaitForSlotEvent,
    ]
    [
        C_LoginUser, C_SessionCancel, C_MessageEncryptInit, C_EncryptMessage,
        C_EncryptMessageBegin, C_EncryptMessageNext, C_MessageEncryptFinal,
        C_MessageDecryptInit, C_DecryptMessage, C_DecryptMessageBegin, C_DecryptMessageNext,
        C_MessageDecryptFinal, C_MessageSignInit, C_SignMessage, C_SignMessageBegin,
        C_SignMessageNext, C_MessageSignFinal, C_MessageVerifyInit, C_VerifyMessage,
        C_VerifyMessageBegin, C_VerifyMessageNext, C_MessageVerifyFinal,
    ]
    [
        C_EncapsulateKey, C_DecapsulateKey, C_VerifySignatureInit, C_VerifySignature,
        C_VerifySignatureUpdate, C_VerifySignatureFinal, C_GetSessionValidationFlags,
        C_AsyncComplete, C_AsyncGetID, C_AsyncJoin, C_WrapKeyAuthenticated,
        C_UnwrapKeyAuthenticated,
    ]
}

/// The name of every interface.
const INTERFACE_NAME: &[u8] = b"PKCS 11\0";

/// Flags of every interface (none: no fork-safe or thread-safe variants are offered).
const INTERFACE_FLAGS: CK_FLAGS = 0;

/// The interface list: "PKCS 11" 3.2, 3.0 and 2.40, in that order.
pub struct Interfaces {
    list: UnsafeCell<[CK_INTERFACE; 3]>,
    versions: [CK_VERSION; 3],
}

// SAFETY: built once; it holds pointers to static data only. Rust never writes it.
unsafe impl Sync for Interfaces {}

const fn interface(list: *mut c_void) -> CK_INTERFACE {
    CK_INTERFACE {
        pInterfaceName: INTERFACE_NAME.as_ptr() as *mut CK_UTF8CHAR,
        pFunctionList: list,
        flags: INTERFACE_FLAGS,
    }
}

impl Interfaces {
    /// The list over the module's three tables.
    pub const fn new(
        v3_2: &'static FunctionList<CK_FUNCTION_LIST_3_2>,
        v3_0: &'static FunctionList<CK_FUNCTION_LIST_3_0>,
        v2_40: &'static FunctionList<CK_FUNCTION_LIST>,
    ) -> Interfaces {
        Interfaces {
            list: UnsafeCell::new([
                interface(v3_2.as_ptr() as *mut c_void),
                interface(v3_0.as_ptr() as *mut c_void),
                interface(v2_40.as_ptr() as *mut c_void),
            ]),
            versions: [
                CK_VERSION { major: 3, minor: 2 },
                CK_VERSION { major: 3, minor: 0 },
                CK_VERSION {
                    major: 2,
                    minor: 40,
                },
            ],
        }
    }
}

/// `C_GetFunctionList`: the 2.40 table. Works before `C_Initialize`.
pub fn get_function_list(
    table: &'static FunctionList<CK_FUNCTION_LIST>,
    out: *mut *mut CK_FUNCTION_LIST,
) -> CK_RV {
    guard(|| {
        let out = req(out)?;
        // SAFETY: checked non-NULL; the caller provides a pointer slot.
        unsafe { put(out, table.as_ptr()) };
        Ok(())
    })
}

/// `C_GetInterfaceList`: NULL list → the count (3); too small → `CKR_BUFFER_TOO_SMALL`.
pub fn get_interface_list(
    interfaces: &'static Interfaces,
    list: *mut CK_INTERFACE,
    count: *mut CK_ULONG,
) -> CK_RV {
    guard(|| {
        let count = req(count)?;
        // SAFETY: our static list is only read; the caller provides `*count` entries.
        unsafe {
            let items = *interfaces.list.get();
            write_list(list, count, &items)
        }
    })
}

/// `C_GetInterface`: `name` NULL or "PKCS 11"; `version` NULL (the newest, 3.2) or an exact
/// match; `flags` must be a subset of the interface's. No match is `CKR_ARGUMENTS_BAD`.
pub fn get_interface(
    interfaces: &'static Interfaces,
    name: *mut CK_UTF8CHAR,
    version: *mut CK_VERSION,
    out: *mut *mut CK_INTERFACE,
    flags: CK_FLAGS,
) -> CK_RV {
    guard(|| {
        let out = req(out)?;
        if !name.is_null() {
            // SAFETY: the caller passes a NUL-terminated name.
            let name = unsafe { CStr::from_ptr(name as *const c_char) };
            if name.to_bytes_with_nul() != INTERFACE_NAME {
                return Err(CKR_ARGUMENTS_BAD);
            }
        }
        // SAFETY: the caller passes NULL or a CK_VERSION.
        let wanted = (!version.is_null()).then(|| unsafe { version.read_unaligned() });
        if flags & !INTERFACE_FLAGS != 0 {
            return Err(CKR_ARGUMENTS_BAD);
        }
        let index = interfaces
            .versions
            .iter()
            .position(|v| match wanted {
                None => true,
                Some(w) => w.major == v.major && w.minor == v.minor,
            })
            .ok_or(CKR_ARGUMENTS_BAD)?;
        // SAFETY: `index` < 3; the caller provides a pointer slot.
        unsafe { put(out, (interfaces.list.get() as *mut CK_INTERFACE).add(index)) };
        Ok(())
    })
}

/// Defines the `#[no_mangle]` forwarding function of every PKCS#11 symbol except the three
/// entry points (used by [`crate::pkcs11_module!`]).
#[doc(hidden)]
#[macro_export]
macro_rules! __opencf_symbols {
    ($ty:ty) => {
        $crate::__opencf_symbols! { @define $ty;
            C_Initialize(a: *mut ::core::ffi::c_void);
            C_Finalize(a: *mut ::core::ffi::c_void);
            C_GetInfo(a: *mut $crate::sys::CK_INFO);
            C_GetSlotList(a: $crate::sys::CK_BBOOL, b: *mut $crate::sys::CK_SLOT_ID,
                c: *mut $crate::sys::CK_ULONG);
            C_GetSlotInfo(a: $crate::sys::CK_SLOT_ID, b: *mut $crate::sys::CK_SLOT_INFO);
            C_GetTokenInfo(a: $crate::sys::CK_SLOT_ID, b: *mut $crate::sys::CK_TOKEN_INFO);
            C_GetMechanismList(a: $crate::sys::CK_SLOT_ID, b: *mut $crate::sys::CK_MECHANISM_TYPE,
                c: *mut $crate::sys::CK_ULONG);
            C_GetMechanismInfo(a: $crate::sys::CK_SLOT_ID, b: $crate::sys::CK_MECHANISM_TYPE,
                c: *mut $crate::sys::CK_MECHANISM_INFO);
            C_InitToken(a: $crate::sys::CK_SLOT_ID, b: *mut $crate::sys::CK_UTF8CHAR,
                c: $crate::sys::CK_ULONG, d: *mut $crate::sys::CK_UTF8CHAR);
            C_InitPIN(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_UTF8CHAR,
                c: $crate::sys::CK_ULONG);
            C_SetPIN(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_UTF8CHAR,
                c: $crate::sys::CK_ULONG, d: *mut $crate::sys::CK_UTF8CHAR, e: $crate::sys::CK_ULONG);
            C_OpenSession(a: $crate::sys::CK_SLOT_ID, b: $crate::sys::CK_FLAGS,
                c: *mut ::core::ffi::c_void, d: $crate::sys::CK_NOTIFY,
                e: *mut $crate::sys::CK_SESSION_HANDLE);
            C_CloseSession(a: $crate::sys::CK_SESSION_HANDLE);
            C_CloseAllSessions(a: $crate::sys::CK_SLOT_ID);
            C_GetSessionInfo(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut $crate::sys::CK_SESSION_INFO);
            C_GetOperationState(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_BYTE,
                c: *mut $crate::sys::CK_ULONG);
            C_SetOperationState(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_BYTE,
                c: $crate::sys::CK_ULONG, d: $crate::sys::CK_OBJECT_HANDLE,
                e: $crate::sys::CK_OBJECT_HANDLE);
            C_Login(a: $crate::sys::CK_SESSION_HANDLE, b: $crate::sys::CK_USER_TYPE,
                c: *mut $crate::sys::CK_UTF8CHAR, d: $crate::sys::CK_ULONG);
            C_Logout(a: $crate::sys::CK_SESSION_HANDLE);
            C_CreateObject(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_ATTRIBUTE,
                c: $crate::sys::CK_ULONG, d: *mut $crate::sys::CK_OBJECT_HANDLE);
            C_CopyObject(a: $crate::sys::CK_SESSION_HANDLE, b: $crate::sys::CK_OBJECT_HANDLE,
                c: *mut $crate::sys::CK_ATTRIBUTE, d: $crate::sys::CK_ULONG,
                e: *mut $crate::sys::CK_OBJECT_HANDLE);
            C_DestroyObject(a: $crate::sys::CK_SESSION_HANDLE, b: $crate::sys::CK_OBJECT_HANDLE);
            C_GetObjectSize(a: $crate::sys::CK_SESSION_HANDLE, b: $crate::sys::CK_OBJECT_HANDLE,
                c: *mut $crate::sys::CK_ULONG);
            C_GetAttributeValue(a: $crate::sys::CK_SESSION_HANDLE,
                b: $crate::sys::CK_OBJECT_HANDLE, c: *mut $crate::sys::CK_ATTRIBUTE,
                d: $crate::sys::CK_ULONG);
            C_SetAttributeValue(a: $crate::sys::CK_SESSION_HANDLE,
                b: $crate::sys::CK_OBJECT_HANDLE, c: *mut $crate::sys::CK_ATTRIBUTE,
                d: $crate::sys::CK_ULONG);
            C_FindObjectsInit(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut $crate::sys::CK_ATTRIBUTE, c: $crate::sys::CK_ULONG);
            C_FindObjects(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut $crate::sys::CK_OBJECT_HANDLE, c: $crate::sys::CK_ULONG,
                d: *mut $crate::sys::CK_ULONG);
            C_FindObjectsFinal(a: $crate::sys::CK_SESSION_HANDLE);
            C_EncryptInit(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_MECHANISM,
                c: $crate::sys::CK_OBJECT_HANDLE);
            C_Encrypt(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_BYTE,
                c: $crate::sys::CK_ULONG, d: *mut $crate::sys::CK_BYTE,
                e: *mut $crate::sys::CK_ULONG);
            C_EncryptUpdate(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_BYTE,
                c: $crate::sys::CK_ULONG, d: *mut $crate::sys::CK_BYTE,
                e: *mut $crate::sys::CK_ULONG);
            C_EncryptFinal(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_BYTE,
                c: *mut $crate::sys::CK_ULONG);
            C_DecryptInit(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_MECHANISM,
                c: $crate::sys::CK_OBJECT_HANDLE);
            C_Decrypt(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_BYTE,
                c: $crate::sys::CK_ULONG, d: *mut $crate::sys::CK_BYTE,
                e: *mut $crate::sys::CK_ULONG);
            C_DecryptUpdate(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_BYTE,
                c: $crate::sys::CK_ULONG, d: *mut $crate::sys::CK_BYTE,
                e: *mut $crate::sys::CK_ULONG);
            C_DecryptFinal(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_BYTE,
                c: *mut $crate::sys::CK_ULONG);
            C_DigestInit(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_MECHANISM);
            C_Digest(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_BYTE,
                c: $crate::sys::CK_ULONG, d: *mut $crate::sys::CK_BYTE,
                e: *mut $crate::sys::CK_ULONG);
            C_DigestUpdate(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_BYTE,
                c: $crate::sys::CK_ULONG);
            C_DigestKey(a: $crate::sys::CK_SESSION_HANDLE, b: $crate::sys::CK_OBJECT_HANDLE);
            C_DigestFinal(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_BYTE,
                c: *mut $crate::sys::CK_ULONG);
            C_SignInit(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_MECHANISM,
                c: $crate::sys::CK_OBJECT_HANDLE);
            C_Sign(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_BYTE,
                c: $crate::sys::CK_ULONG, d: *mut $crate::sys::CK_BYTE,
                e: *mut $crate::sys::CK_ULONG);
            C_SignUpdate(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_BYTE,
                c: $crate::sys::CK_ULONG);
            C_SignFinal(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_BYTE,
                c: *mut $crate::sys::CK_ULONG);
            C_SignRecoverInit(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut $crate::sys::CK_MECHANISM, c: $crate::sys::CK_OBJECT_HANDLE);
            C_SignRecover(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_BYTE,
                c: $crate::sys::CK_ULONG, d: *mut $crate::sys::CK_BYTE,
                e: *mut $crate::sys::CK_ULONG);
            C_VerifyInit(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_MECHANISM,
                c: $crate::sys::CK_OBJECT_HANDLE);
            C_Verify(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_BYTE,
                c: $crate::sys::CK_ULONG, d: *mut $crate::sys::CK_BYTE, e: $crate::sys::CK_ULONG);
            C_VerifyUpdate(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_BYTE,
                c: $crate::sys::CK_ULONG);
            C_VerifyFinal(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_BYTE,
                c: $crate::sys::CK_ULONG);
            C_VerifyRecoverInit(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut $crate::sys::CK_MECHANISM, c: $crate::sys::CK_OBJECT_HANDLE);
            C_VerifyRecover(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_BYTE,
                c: $crate::sys::CK_ULONG, d: *mut $crate::sys::CK_BYTE,
                e: *mut $crate::sys::CK_ULONG);
            C_DigestEncryptUpdate(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut $crate::sys::CK_BYTE, c: $crate::sys::CK_ULONG,
                d: *mut $crate::sys::CK_BYTE, e: *mut $crate::sys::CK_ULONG);
            C_DecryptDigestUpdate(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut $crate::sys::CK_BYTE, c: $crate::sys::CK_ULONG,
                d: *mut $crate::sys::CK_BYTE, e: *mut $crate::sys::CK_ULONG);
            C_SignEncryptUpdate(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut $crate::sys::CK_BYTE, c: $crate::sys::CK_ULONG,
                d: *mut $crate::sys::CK_BYTE, e: *mut $crate::sys::CK_ULONG);
            C_DecryptVerifyUpdate(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut $crate::sys::CK_BYTE, c: $crate::sys::CK_ULONG,
                d: *mut $crate::sys::CK_BYTE, e: *mut $crate::sys::CK_ULONG);
            C_GenerateKey(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_MECHANISM,
                c: *mut $crate::sys::CK_ATTRIBUTE, d: $crate::sys::CK_ULONG,
                e: *mut $crate::sys::CK_OBJECT_HANDLE);
            C_GenerateKeyPair(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut $crate::sys::CK_MECHANISM, c: *mut $crate::sys::CK_ATTRIBUTE,
                d: $crate::sys::CK_ULONG, e: *mut $crate::sys::CK_ATTRIBUTE,
                f: $crate::sys::CK_ULONG, g: *mut $crate::sys::CK_OBJECT_HANDLE,
                h: *mut $crate::sys::CK_OBJECT_HANDLE);
            C_WrapKey(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_MECHANISM,
                c: $crate::sys::CK_OBJECT_HANDLE, d: $crate::sys::CK_OBJECT_HANDLE,
                e: *mut $crate::sys::CK_BYTE, f: *mut $crate::sys::CK_ULONG);
            C_UnwrapKey(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_MECHANISM,
                c: $crate::sys::CK_OBJECT_HANDLE, d: *mut $crate::sys::CK_BYTE,
                e: $crate::sys::CK_ULONG, f: *mut $crate::sys::CK_ATTRIBUTE,
                g: $crate::sys::CK_ULONG, h: *mut $crate::sys::CK_OBJECT_HANDLE);
            C_DeriveKey(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_MECHANISM,
                c: $crate::sys::CK_OBJECT_HANDLE, d: *mut $crate::sys::CK_ATTRIBUTE,
                e: $crate::sys::CK_ULONG, f: *mut $crate::sys::CK_OBJECT_HANDLE);
            C_SeedRandom(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_BYTE,
                c: $crate::sys::CK_ULONG);
            C_GenerateRandom(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_BYTE,
                c: $crate::sys::CK_ULONG);
            C_GetFunctionStatus(a: $crate::sys::CK_SESSION_HANDLE);
            C_CancelFunction(a: $crate::sys::CK_SESSION_HANDLE);
            C_WaitForSlotEvent(a: $crate::sys::CK_FLAGS, b: *mut $crate::sys::CK_SLOT_ID,
                c: *mut ::core::ffi::c_void);
            C_LoginUser(a: $crate::sys::CK_SESSION_HANDLE, b: $crate::sys::CK_USER_TYPE,
                c: *mut $crate::sys::CK_UTF8CHAR, d: $crate::sys::CK_ULONG,
                e: *mut $crate::sys::CK_UTF8CHAR, f: $crate::sys::CK_ULONG);
            C_SessionCancel(a: $crate::sys::CK_SESSION_HANDLE, b: $crate::sys::CK_FLAGS);
            C_MessageEncryptInit(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut $crate::sys::CK_MECHANISM, c: $crate::sys::CK_OBJECT_HANDLE);
            C_EncryptMessage(a: $crate::sys::CK_SESSION_HANDLE, b: *mut ::core::ffi::c_void,
                c: $crate::sys::CK_ULONG, d: *mut $crate::sys::CK_BYTE, e: $crate::sys::CK_ULONG,
                f: *mut $crate::sys::CK_BYTE, g: $crate::sys::CK_ULONG,
                h: *mut $crate::sys::CK_BYTE, i: *mut $crate::sys::CK_ULONG);
            C_EncryptMessageBegin(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut ::core::ffi::c_void, c: $crate::sys::CK_ULONG,
                d: *mut $crate::sys::CK_BYTE, e: $crate::sys::CK_ULONG);
            C_EncryptMessageNext(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut ::core::ffi::c_void, c: $crate::sys::CK_ULONG,
                d: *mut $crate::sys::CK_BYTE, e: $crate::sys::CK_ULONG,
                f: *mut $crate::sys::CK_BYTE, g: *mut $crate::sys::CK_ULONG,
                h: $crate::sys::CK_FLAGS);
            C_MessageEncryptFinal(a: $crate::sys::CK_SESSION_HANDLE);
            C_MessageDecryptInit(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut $crate::sys::CK_MECHANISM, c: $crate::sys::CK_OBJECT_HANDLE);
            C_DecryptMessage(a: $crate::sys::CK_SESSION_HANDLE, b: *mut ::core::ffi::c_void,
                c: $crate::sys::CK_ULONG, d: *mut $crate::sys::CK_BYTE, e: $crate::sys::CK_ULONG,
                f: *mut $crate::sys::CK_BYTE, g: $crate::sys::CK_ULONG,
                h: *mut $crate::sys::CK_BYTE, i: *mut $crate::sys::CK_ULONG);
            C_DecryptMessageBegin(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut ::core::ffi::c_void, c: $crate::sys::CK_ULONG,
                d: *mut $crate::sys::CK_BYTE, e: $crate::sys::CK_ULONG);
            C_DecryptMessageNext(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut ::core::ffi::c_void, c: $crate::sys::CK_ULONG,
                d: *mut $crate::sys::CK_BYTE, e: $crate::sys::CK_ULONG,
                f: *mut $crate::sys::CK_BYTE, g: *mut $crate::sys::CK_ULONG,
                h: $crate::sys::CK_FLAGS);
            C_MessageDecryptFinal(a: $crate::sys::CK_SESSION_HANDLE);
            C_MessageSignInit(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut $crate::sys::CK_MECHANISM, c: $crate::sys::CK_OBJECT_HANDLE);
            C_SignMessage(a: $crate::sys::CK_SESSION_HANDLE, b: *mut ::core::ffi::c_void,
                c: $crate::sys::CK_ULONG, d: *mut $crate::sys::CK_BYTE, e: $crate::sys::CK_ULONG,
                f: *mut $crate::sys::CK_BYTE, g: *mut $crate::sys::CK_ULONG);
            C_SignMessageBegin(a: $crate::sys::CK_SESSION_HANDLE, b: *mut ::core::ffi::c_void,
                c: $crate::sys::CK_ULONG);
            C_SignMessageNext(a: $crate::sys::CK_SESSION_HANDLE, b: *mut ::core::ffi::c_void,
                c: $crate::sys::CK_ULONG, d: *mut $crate::sys::CK_BYTE, e: $crate::sys::CK_ULONG,
                f: *mut $crate::sys::CK_BYTE, g: *mut $crate::sys::CK_ULONG);
            C_MessageSignFinal(a: $crate::sys::CK_SESSION_HANDLE);
            C_MessageVerifyInit(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut $crate::sys::CK_MECHANISM, c: $crate::sys::CK_OBJECT_HANDLE);
            C_VerifyMessage(a: $crate::sys::CK_SESSION_HANDLE, b: *mut ::core::ffi::c_void,
                c: $crate::sys::CK_ULONG, d: *mut $crate::sys::CK_BYTE, e: $crate::sys::CK_ULONG,
                f: *mut $crate::sys::CK_BYTE, g: $crate::sys::CK_ULONG);
            C_VerifyMessageBegin(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut ::core::ffi::c_void, c: $crate::sys::CK_ULONG);
            C_VerifyMessageNext(a: $crate::sys::CK_SESSION_HANDLE, b: *mut ::core::ffi::c_void,
                c: $crate::sys::CK_ULONG, d: *mut $crate::sys::CK_BYTE, e: $crate::sys::CK_ULONG,
                f: *mut $crate::sys::CK_BYTE, g: $crate::sys::CK_ULONG);
            C_MessageVerifyFinal(a: $crate::sys::CK_SESSION_HANDLE);
            C_EncapsulateKey(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut $crate::sys::CK_MECHANISM, c: $crate::sys::CK_OBJECT_HANDLE,
                d: *mut $crate::sys::CK_ATTRIBUTE, e: $crate::sys::CK_ULONG,
                f: *mut $crate::sys::CK_BYTE, g: *mut $crate::sys::CK_ULONG,
                h: *mut $crate::sys::CK_OBJECT_HANDLE);
            C_DecapsulateKey(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut $crate::sys::CK_MECHANISM, c: $crate::sys::CK_OBJECT_HANDLE,
                d: *mut $crate::sys::CK_ATTRIBUTE, e: $crate::sys::CK_ULONG,
                f: *mut $crate::sys::CK_BYTE, g: $crate::sys::CK_ULONG,
                h: *mut $crate::sys::CK_OBJECT_HANDLE);
            C_VerifySignatureInit(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut $crate::sys::CK_MECHANISM, c: $crate::sys::CK_OBJECT_HANDLE,
                d: *mut $crate::sys::CK_BYTE, e: $crate::sys::CK_ULONG);
            C_VerifySignature(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_BYTE,
                c: $crate::sys::CK_ULONG);
            C_VerifySignatureUpdate(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut $crate::sys::CK_BYTE, c: $crate::sys::CK_ULONG);
            C_VerifySignatureFinal(a: $crate::sys::CK_SESSION_HANDLE);
            C_GetSessionValidationFlags(a: $crate::sys::CK_SESSION_HANDLE,
                b: $crate::sys::CK_SESSION_VALIDATION_FLAGS_TYPE, c: *mut $crate::sys::CK_FLAGS);
            C_AsyncComplete(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_UTF8CHAR,
                c: *mut $crate::sys::CK_ASYNC_DATA);
            C_AsyncGetID(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_UTF8CHAR,
                c: *mut $crate::sys::CK_ULONG);
            C_AsyncJoin(a: $crate::sys::CK_SESSION_HANDLE, b: *mut $crate::sys::CK_UTF8CHAR,
                c: $crate::sys::CK_ULONG, d: *mut $crate::sys::CK_BYTE, e: $crate::sys::CK_ULONG);
            C_WrapKeyAuthenticated(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut $crate::sys::CK_MECHANISM, c: $crate::sys::CK_OBJECT_HANDLE,
                d: $crate::sys::CK_OBJECT_HANDLE, e: *mut $crate::sys::CK_BYTE,
                f: $crate::sys::CK_ULONG, g: *mut $crate::sys::CK_BYTE,
                h: *mut $crate::sys::CK_ULONG);
            C_UnwrapKeyAuthenticated(a: $crate::sys::CK_SESSION_HANDLE,
                b: *mut $crate::sys::CK_MECHANISM, c: $crate::sys::CK_OBJECT_HANDLE,
                d: *mut $crate::sys::CK_BYTE, e: $crate::sys::CK_ULONG,
                f: *mut $crate::sys::CK_ATTRIBUTE, g: $crate::sys::CK_ULONG,
                h: *mut $crate::sys::CK_BYTE, i: $crate::sys::CK_ULONG,
                j: *mut $crate::sys::CK_OBJECT_HANDLE);
        }
    };
    (@define $ty:ty; $( $name:ident ( $( $arg:ident : $argty:ty ),* $(,)? ); )* ) => {
        $(
            #[doc = concat!("PKCS#11 `", stringify!($name), "`.")]
            #[no_mangle]
            #[allow(unsafe_code, non_snake_case, clippy::too_many_arguments)]
            pub extern "C" fn $name( $( $arg: $argty ),* ) -> $crate::sys::CK_RV {
                $crate::export::$name::<$ty>( $( $arg ),* )
            }
        )*
    };
}
