//! The timed path: direct calls into a module's PKCS#11 function table.
//!
//! Setup (sessions, login, objects, key generation) goes through the
//! `cryptoki` crate. The operations that are timed call the module's
//! functions directly with caller-sized buffers, so each operation is exactly
//! the calls a careful application makes (`C_EncryptInit` + one `C_Encrypt`,
//! `C_SignInit` + one `C_Sign`, `C_FindObjectsInit` + `C_FindObjects` +
//! `C_FindObjectsFinal`) and nothing of the binding (its extra length-query
//! call and `Vec` per output) is measured.
//!
//! With `cpu.rs` (one `getrusage` call), the only module of the crate with
//! `unsafe` code.

use std::os::raw::c_void;
use std::path::Path;

use cryptoki_sys::{
    CKA_LABEL, CKM_AES_GCM, CKR_OK, CK_ATTRIBUTE, CK_BYTE, CK_FUNCTION_LIST, CK_GCM_PARAMS,
    CK_MECHANISM, CK_MECHANISM_TYPE, CK_OBJECT_HANDLE, CK_RV, CK_SESSION_HANDLE, CK_ULONG,
};

type EncryptInitFn =
    unsafe extern "C" fn(CK_SESSION_HANDLE, *mut CK_MECHANISM, CK_OBJECT_HANDLE) -> CK_RV;
type OneShotFn = unsafe extern "C" fn(
    CK_SESSION_HANDLE,
    *mut CK_BYTE,
    CK_ULONG,
    *mut CK_BYTE,
    *mut CK_ULONG,
) -> CK_RV;
type FindInitFn = unsafe extern "C" fn(CK_SESSION_HANDLE, *mut CK_ATTRIBUTE, CK_ULONG) -> CK_RV;
type FindFn = unsafe extern "C" fn(
    CK_SESSION_HANDLE,
    *mut CK_OBJECT_HANDLE,
    CK_ULONG,
    *mut CK_ULONG,
) -> CK_RV;
type FindFinalFn = unsafe extern "C" fn(CK_SESSION_HANDLE) -> CK_RV;

/// A PKCS#11 return value other than `CKR_OK`, with the function that gave it.
#[derive(Debug, Clone, Copy)]
pub struct CallError {
    /// The PKCS#11 function name.
    pub function: &'static str,
    /// Its return value.
    pub rv: CK_RV,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} returned {}", self.function, rv_name(self.rv))
    }
}

fn check(function: &'static str, rv: CK_RV) -> Result<(), CallError> {
    if rv == CKR_OK {
        Ok(())
    } else {
        Err(CallError { function, rv })
    }
}

/// The functions of one module that the timed operations call.
pub struct RawModule {
    encrypt_init: EncryptInitFn,
    encrypt: OneShotFn,
    sign_init: EncryptInitFn,
    sign: OneShotFn,
    find_init: FindInitFn,
    find: FindFn,
    find_final: FindFinalFn,
    /// Keeps the library mapped while the pointers above are in use.
    _lib: cryptoki_sys::Pkcs11,
}

// SAFETY: the fields are plain function pointers into a loaded library (kept
// loaded by `_lib`); PKCS#11 modules initialized with CKF_OS_LOCKING_OK may be
// called from any thread.
unsafe impl Send for RawModule {}
unsafe impl Sync for RawModule {}

impl RawModule {
    /// Opens `path` (the same mapping the `cryptoki` context already holds:
    /// the dynamic loader returns the loaded library) and reads its 2.40
    /// function table. The module must already be initialized through
    /// `cryptoki`.
    pub fn open(path: &Path) -> Result<RawModule, String> {
        // SAFETY: loading a PKCS#11 module that `cryptoki` has loaded already;
        // its initializers have run.
        let lib = unsafe { cryptoki_sys::Pkcs11::new(path) }
            .map_err(|e| format!("loading {}: {e}", path.display()))?;
        let mut list: *mut CK_FUNCTION_LIST = std::ptr::null_mut();
        // SAFETY: C_GetFunctionList writes one pointer to the out argument.
        let rv = unsafe { lib.C_GetFunctionList(&mut list) };
        if rv != CKR_OK || list.is_null() {
            return Err(format!(
                "{}: C_GetFunctionList returned {}",
                path.display(),
                rv_name(rv)
            ));
        }
        // SAFETY: the module returned a valid, static function table.
        let l = unsafe { &*list };
        let missing = |name: &str| format!("{}: the function table has no {name}", path.display());
        Ok(RawModule {
            encrypt_init: l.C_EncryptInit.ok_or_else(|| missing("C_EncryptInit"))?,
            encrypt: l.C_Encrypt.ok_or_else(|| missing("C_Encrypt"))?,
            sign_init: l.C_SignInit.ok_or_else(|| missing("C_SignInit"))?,
            sign: l.C_Sign.ok_or_else(|| missing("C_Sign"))?,
            find_init: l
                .C_FindObjectsInit
                .ok_or_else(|| missing("C_FindObjectsInit"))?,
            find: l.C_FindObjects.ok_or_else(|| missing("C_FindObjects"))?,
            find_final: l
                .C_FindObjectsFinal
                .ok_or_else(|| missing("C_FindObjectsFinal"))?,
            _lib: lib,
        })
    }

    /// One single-part AES-GCM encryption: `C_EncryptInit` with a 96-bit IV,
    /// no AAD and a 128-bit tag, then one `C_Encrypt` into `out` (which must
    /// hold the data and the tag). Returns the output length.
    pub fn aes_gcm_encrypt(
        &self,
        session: CK_SESSION_HANDLE,
        key: CK_OBJECT_HANDLE,
        iv: &mut [u8; 12],
        data: &[u8],
        out: &mut [u8],
    ) -> Result<usize, CallError> {
        let mut params = CK_GCM_PARAMS {
            pIv: iv.as_mut_ptr(),
            ulIvLen: 12,
            ulIvBits: 96,
            pAAD: std::ptr::null_mut(),
            ulAADLen: 0,
            ulTagBits: 128,
        };
        let mut mech = CK_MECHANISM {
            mechanism: CKM_AES_GCM,
            pParameter: (&mut params as *mut CK_GCM_PARAMS).cast::<c_void>(),
            ulParameterLen: std::mem::size_of::<CK_GCM_PARAMS>() as CK_ULONG,
        };
        let mut out_len = out.len() as CK_ULONG;
        // SAFETY: every pointer refers to a live local or slice for the
        // duration of the calls; the module only reads `data` and the IV.
        unsafe {
            check(
                "C_EncryptInit",
                (self.encrypt_init)(session, &mut mech, key),
            )?;
            check(
                "C_Encrypt",
                (self.encrypt)(
                    session,
                    data.as_ptr() as *mut u8,
                    data.len() as CK_ULONG,
                    out.as_mut_ptr(),
                    &mut out_len,
                ),
            )?;
        }
        Ok(out_len as usize)
    }

    /// One single-part signature with a parameterless mechanism:
    /// `C_SignInit` then one `C_Sign` into `sig`. Returns the signature length.
    pub fn sign(
        &self,
        session: CK_SESSION_HANDLE,
        mechanism: CK_MECHANISM_TYPE,
        key: CK_OBJECT_HANDLE,
        data: &[u8],
        sig: &mut [u8],
    ) -> Result<usize, CallError> {
        let mut mech = CK_MECHANISM {
            mechanism,
            pParameter: std::ptr::null_mut(),
            ulParameterLen: 0,
        };
        let mut sig_len = sig.len() as CK_ULONG;
        // SAFETY: as in `aes_gcm_encrypt`.
        unsafe {
            check("C_SignInit", (self.sign_init)(session, &mut mech, key))?;
            check(
                "C_Sign",
                (self.sign)(
                    session,
                    data.as_ptr() as *mut u8,
                    data.len() as CK_ULONG,
                    sig.as_mut_ptr(),
                    &mut sig_len,
                ),
            )?;
        }
        Ok(sig_len as usize)
    }

    /// One search by `CKA_LABEL`: `C_FindObjectsInit`, one `C_FindObjects`
    /// for up to `found.len()` handles, `C_FindObjectsFinal`. Returns how many
    /// handles were written.
    pub fn find_by_label(
        &self,
        session: CK_SESSION_HANDLE,
        label: &[u8],
        found: &mut [CK_OBJECT_HANDLE],
    ) -> Result<usize, CallError> {
        let mut template = [CK_ATTRIBUTE {
            type_: CKA_LABEL,
            pValue: label.as_ptr() as *mut c_void,
            ulValueLen: label.len() as CK_ULONG,
        }];
        let mut count: CK_ULONG = 0;
        // SAFETY: as in `aes_gcm_encrypt`; the template is only read.
        unsafe {
            check(
                "C_FindObjectsInit",
                (self.find_init)(session, template.as_mut_ptr(), 1),
            )?;
            let rv = (self.find)(
                session,
                found.as_mut_ptr(),
                found.len() as CK_ULONG,
                &mut count,
            );
            let rv_final = (self.find_final)(session);
            check("C_FindObjects", rv)?;
            check("C_FindObjectsFinal", rv_final)?;
        }
        Ok(count as usize)
    }
}

/// The `CKR_*` name of a return value, or its number in hex.
pub fn rv_name(rv: CK_RV) -> String {
    let name = match rv {
        0x000 => "CKR_OK",
        0x005 => "CKR_GENERAL_ERROR",
        0x006 => "CKR_FUNCTION_FAILED",
        0x007 => "CKR_ARGUMENTS_BAD",
        0x054 => "CKR_FUNCTION_NOT_SUPPORTED",
        0x060 => "CKR_KEY_HANDLE_INVALID",
        0x063 => "CKR_KEY_TYPE_INCONSISTENT",
        0x068 => "CKR_KEY_FUNCTION_NOT_PERMITTED",
        0x070 => "CKR_MECHANISM_INVALID",
        0x071 => "CKR_MECHANISM_PARAM_INVALID",
        0x082 => "CKR_OBJECT_HANDLE_INVALID",
        0x090 => "CKR_OPERATION_ACTIVE",
        0x091 => "CKR_OPERATION_NOT_INITIALIZED",
        0x0A0 => "CKR_PIN_INCORRECT",
        0x0A3 => "CKR_PIN_EXPIRED",
        0x0B3 => "CKR_SESSION_HANDLE_INVALID",
        0x0D1 => "CKR_TEMPLATE_INCONSISTENT",
        0x101 => "CKR_USER_NOT_LOGGED_IN",
        0x150 => "CKR_BUFFER_TOO_SMALL",
        0x190 => "CKR_CRYPTOKI_NOT_INITIALIZED",
        _ => return format!("CKR 0x{rv:X}"),
    };
    name.to_string()
}
