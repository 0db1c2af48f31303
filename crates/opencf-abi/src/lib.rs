//! The C ABI of every OpenCF PKCS#11 module, and the only crate of OpenCF with `unsafe` code.
//!
//! A module implements the safe [`Backend`] trait and exports it with [`pkcs11_module!`]:
//! the macro emits `C_GetFunctionList`, `C_GetInterfaceList`, `C_GetInterface` and every
//! `C_*` symbol, and the function tables for PKCS#11 2.40, 3.0 and 3.2. The functions in
//! [`export`] do all raw-pointer handling: NULL checks, copying templates and mechanism
//! parameters in, the two-call output-buffer protocol, `catch_unwind` around every call
//! (a panic becomes `CKR_GENERAL_ERROR`), and the fork rule (after `fork()` the child answers
//! `CKR_CRYPTOKI_NOT_INITIALIZED` until it calls `C_Initialize`).
//!
//! ```ignore
//! // In the module's cdylib crate:
//! opencf_abi::pkcs11_module!(crate::SoftToken);
//! ```
//!
//! The other direction, calling a PKCS#11 module that was loaded at run time, is
//! [`provider::Provider`]: the same safe types ([`Mechanism`], [`Attribute`], [`OutBuf`], …)
//! turned back into C structures, with methods named as the [`Backend`] methods so a
//! framework can forward calls one to one. [`os`] holds the few operating-system queries
//! other crates need (process CPU time), so they too can forbid `unsafe`. [`ossl_mem`] keeps each
//! module's copy of OpenSSL from placing a small block across a page boundary.

#![warn(missing_docs, unsafe_op_in_unsafe_fn)]

pub use cryptoki_sys as sys;

mod backend;
mod convert;
#[doc(hidden)]
pub mod export;
pub mod instance;
pub mod os;
pub mod ossl;
pub mod ossl_mem;
mod params;
mod params_out;
pub mod provider;
pub mod rv_names;
pub mod schema;
pub mod shm;
pub mod sync;
#[doc(hidden)]
pub mod tables;
pub mod types;

pub use backend::{Backend, Pinned};
pub use params::{MechRef, RawMechanism};
pub use types::*;

/// Exports a [`Backend`] implementation as a PKCS#11 module.
///
/// Invoke it once, at the root of the module's `cdylib` crate:
///
/// ```ignore
/// opencf_abi::pkcs11_module!(crate::SoftToken);
/// ```
///
/// It defines `#[no_mangle] extern "C"` functions for every PKCS#11 3.2 symbol (all
/// forwarding to [`export`]), the 2.40, 3.0 and 3.2 function tables, and the interface list
/// returned by `C_GetInterfaceList` (3.2, 3.0, 2.40 in that order). The generated items carry
/// `#[allow(unsafe_code)]` (the lint fires on `#[no_mangle]`), so the calling crate may keep
/// `#![deny(unsafe_code)]`.
#[macro_export]
macro_rules! pkcs11_module {
    ($ty:ty) => {
        const __OPENCF_ENTRY_POINTS: $crate::tables::EntryPoints = $crate::tables::EntryPoints {
            get_function_list: C_GetFunctionList,
            get_interface_list: C_GetInterfaceList,
            get_interface: C_GetInterface,
        };
        #[allow(unsafe_code)]
        static __OPENCF_FUNCTION_LIST_3_2: $crate::tables::FunctionList<
            $crate::sys::CK_FUNCTION_LIST_3_2,
        > = $crate::tables::function_list_3_2::<$ty>(__OPENCF_ENTRY_POINTS);
        #[allow(unsafe_code)]
        static __OPENCF_FUNCTION_LIST_3_0: $crate::tables::FunctionList<
            $crate::sys::CK_FUNCTION_LIST_3_0,
        > = $crate::tables::function_list_3_0::<$ty>(__OPENCF_ENTRY_POINTS);
        #[allow(unsafe_code)]
        static __OPENCF_FUNCTION_LIST_2_40: $crate::tables::FunctionList<
            $crate::sys::CK_FUNCTION_LIST,
        > = $crate::tables::function_list_2_40::<$ty>(__OPENCF_ENTRY_POINTS);
        #[allow(unsafe_code)]
        static __OPENCF_INTERFACES: $crate::tables::Interfaces = $crate::tables::Interfaces::new(
            &__OPENCF_FUNCTION_LIST_3_2,
            &__OPENCF_FUNCTION_LIST_3_0,
            &__OPENCF_FUNCTION_LIST_2_40,
        );

        /// PKCS#11 `C_GetFunctionList`: the 2.40 function table.
        #[no_mangle]
        #[allow(unsafe_code, non_snake_case)]
        pub extern "C" fn C_GetFunctionList(
            list: *mut *mut $crate::sys::CK_FUNCTION_LIST,
        ) -> $crate::sys::CK_RV {
            $crate::tables::get_function_list(&__OPENCF_FUNCTION_LIST_2_40, list)
        }

        /// PKCS#11 `C_GetInterfaceList`: the 3.2, 3.0 and 2.40 interfaces.
        #[no_mangle]
        #[allow(unsafe_code, non_snake_case)]
        pub extern "C" fn C_GetInterfaceList(
            list: *mut $crate::sys::CK_INTERFACE,
            count: *mut $crate::sys::CK_ULONG,
        ) -> $crate::sys::CK_RV {
            $crate::tables::get_interface_list(&__OPENCF_INTERFACES, list, count)
        }

        /// PKCS#11 `C_GetInterface`.
        #[no_mangle]
        #[allow(unsafe_code, non_snake_case)]
        pub extern "C" fn C_GetInterface(
            name: *mut $crate::sys::CK_UTF8CHAR,
            version: *mut $crate::sys::CK_VERSION,
            interface: *mut *mut $crate::sys::CK_INTERFACE,
            flags: $crate::sys::CK_FLAGS,
        ) -> $crate::sys::CK_RV {
            $crate::tables::get_interface(&__OPENCF_INTERFACES, name, version, interface, flags)
        }

        $crate::__opencf_symbols!($ty);
    };
}
pub mod ossl_pk;
pub mod ossl_sym;
