//! Calls for the mechanisms that the cryptoki crate (0.12) cannot name.
//!
//! cryptoki builds a `CK_MECHANISM` only from its own `MechanismType`
//! constants (or vendor-defined values at or above `CKM_VENDOR_DEFINED`);
//! there is no safe way to pass a standard mechanism it does not list:
//! `CKM_CHACHA20_POLY1305`, `CKM_*_HMAC_GENERAL`, `CKM_SHA3_*_HMAC`,
//! `CKM_AES_CMAC_GENERAL`, `CKM_AES_KEY_WRAP_KWP` (its `AesKeyWrapPad` is
//! `CKM_AES_KEY_WRAP_PAD`, a different mechanism) and `CKM_PKCS5_PBKD2`.
//! The `pkcs11` crate has a safe API that takes a raw `CK_MECHANISM`, so these
//! few operations go through it, on the same loaded module, with the session
//! and object handles that cryptoki created.
//!
//! Both bindings load the same shared object (the dynamic loader returns the
//! one instance), so they share one PKCS#11 library state. The `pkcs11` crate
//! refuses calls unless its own `C_Initialize` succeeded, so it initializes
//! first; `TestToken::init` then finalizes and initializes again with
//! `CKF_OS_LOCKING_OK`, which leaves both bindings usable.

use cryptoki::error::Rv;
use pkcs11::errors::Error;
use pkcs11::types::{
    CK_ATTRIBUTE, CK_BBOOL, CK_FALSE, CK_MECHANISM, CK_OBJECT_CLASS, CK_TRUE, CK_ULONG, CK_VOID_PTR,
};
use pkcs11::Ctx;
use std::path::Path;

/// The second binding.
pub struct Raw {
    ctx: Ctx,
}

/// Short text for an error of the `pkcs11` crate.
fn describe(e: Error) -> String {
    match e {
        Error::Pkcs11(rv) => format!("{:?} (0x{rv:x})", Rv::from(rv)),
        other => format!("{other}"),
    }
}

/// A `CK_MECHANISM` whose parameter is `param` (a `#[repr(C)]` PKCS#11
/// parameter struct or a `CK_ULONG`). The pointer is only valid while
/// `param` is borrowed; callers use the value at once.
fn mechanism<T>(ty: CK_ULONG, param: Option<&T>) -> CK_MECHANISM {
    match param {
        Some(p) => CK_MECHANISM {
            mechanism: ty,
            pParameter: p as *const T as CK_VOID_PTR,
            ulParameterLen: std::mem::size_of::<T>() as CK_ULONG,
        },
        None => CK_MECHANISM {
            mechanism: ty,
            pParameter: std::ptr::null_mut(),
            ulParameterLen: 0,
        },
    }
}

impl Raw {
    /// Loads `module` and calls `C_Initialize(NULL)` through this binding.
    pub fn load(module: &Path) -> Result<Raw, String> {
        let mut ctx = Ctx::new(module)
            .map_err(|e| format!("pkcs11 crate: loading {}: {e}", module.display()))?;
        ctx.initialize(None)
            .map_err(|e| format!("pkcs11 crate: C_Initialize: {}", describe(e)))?;
        Ok(Raw { ctx })
    }

    /// Every mechanism the slot offers, as raw `CKM_*` numbers.
    pub fn mechanisms(&self, slot: CK_ULONG) -> Result<Vec<CK_ULONG>, String> {
        self.ctx.get_mechanism_list(slot).map_err(describe)
    }

    /// Single-part `C_EncryptInit` + `C_Encrypt`.
    pub fn encrypt<T>(
        &self,
        session: CK_ULONG,
        ty: CK_ULONG,
        param: Option<&T>,
        key: CK_ULONG,
        data: &[u8],
    ) -> Result<Vec<u8>, String> {
        let m = mechanism(ty, param);
        self.ctx.encrypt_init(session, &m, key).map_err(describe)?;
        self.ctx.encrypt(session, data).map_err(describe)
    }

    /// Single-part `C_DecryptInit` + `C_Decrypt`.
    pub fn decrypt<T>(
        &self,
        session: CK_ULONG,
        ty: CK_ULONG,
        param: Option<&T>,
        key: CK_ULONG,
        data: &[u8],
    ) -> Result<Vec<u8>, String> {
        let m = mechanism(ty, param);
        self.ctx.decrypt_init(session, &m, key).map_err(describe)?;
        self.ctx.decrypt(session, data).map_err(describe)
    }

    /// Single-part `C_SignInit` + `C_Sign`.
    pub fn sign<T>(
        &self,
        session: CK_ULONG,
        ty: CK_ULONG,
        param: Option<&T>,
        key: CK_ULONG,
        data: &[u8],
    ) -> Result<Vec<u8>, String> {
        let m = mechanism(ty, param);
        self.ctx.sign_init(session, &m, key).map_err(describe)?;
        self.ctx.sign(session, data).map_err(describe)
    }

    /// Single-part `C_VerifyInit` + `C_Verify`.
    pub fn verify<T>(
        &self,
        session: CK_ULONG,
        ty: CK_ULONG,
        param: Option<&T>,
        key: CK_ULONG,
        data: &[u8],
        signature: &[u8],
    ) -> Result<(), String> {
        let m = mechanism(ty, param);
        self.ctx.verify_init(session, &m, key).map_err(describe)?;
        self.ctx.verify(session, data, signature).map_err(describe)
    }

    /// `C_GenerateKey` of a readable generic secret session key of `len`
    /// bytes labelled `label` (find it with cryptoki by that label).
    pub fn generate_secret<T>(
        &self,
        session: CK_ULONG,
        ty: CK_ULONG,
        param: Option<&T>,
        label: &[u8],
        len: CK_ULONG,
    ) -> Result<(), String> {
        let m = mechanism(ty, param);
        let class: CK_OBJECT_CLASS = cryptoki_sys::CKO_SECRET_KEY;
        let key_type: CK_ULONG = cryptoki_sys::CKK_GENERIC_SECRET;
        let (t, f): (CK_BBOOL, CK_BBOOL) = (CK_TRUE, CK_FALSE);
        let template = [
            CK_ATTRIBUTE::new(cryptoki_sys::CKA_CLASS).with_ck_ulong(&class),
            CK_ATTRIBUTE::new(cryptoki_sys::CKA_KEY_TYPE).with_ck_ulong(&key_type),
            CK_ATTRIBUTE::new(cryptoki_sys::CKA_TOKEN).with_bool(&f),
            CK_ATTRIBUTE::new(cryptoki_sys::CKA_SENSITIVE).with_bool(&f),
            CK_ATTRIBUTE::new(cryptoki_sys::CKA_EXTRACTABLE).with_bool(&t),
            CK_ATTRIBUTE::new(cryptoki_sys::CKA_LABEL).with_bytes(label),
            CK_ATTRIBUTE::new(cryptoki_sys::CKA_VALUE_LEN).with_ck_ulong(&len),
        ];
        self.ctx
            .generate_key(session, &m, &template)
            .map(|_| ())
            .map_err(describe)
    }

    /// `C_WrapKey` of `key` under `wrapping_key`.
    pub fn wrap_key(
        &self,
        session: CK_ULONG,
        ty: CK_ULONG,
        wrapping_key: CK_ULONG,
        key: CK_ULONG,
    ) -> Result<Vec<u8>, String> {
        let m = mechanism::<()>(ty, None);
        self.ctx
            .wrap_key(session, &m, wrapping_key, key)
            .map_err(describe)
    }

    /// `C_UnwrapKey` of `wrapped` into a readable generic secret session key
    /// labelled `label` (find it with cryptoki by that label).
    pub fn unwrap_secret(
        &self,
        session: CK_ULONG,
        ty: CK_ULONG,
        unwrapping_key: CK_ULONG,
        wrapped: &[u8],
        label: &[u8],
    ) -> Result<(), String> {
        let m = mechanism::<()>(ty, None);
        let class: CK_OBJECT_CLASS = cryptoki_sys::CKO_SECRET_KEY;
        let key_type: CK_ULONG = cryptoki_sys::CKK_GENERIC_SECRET;
        let (t, f): (CK_BBOOL, CK_BBOOL) = (CK_TRUE, CK_FALSE);
        let template = [
            CK_ATTRIBUTE::new(cryptoki_sys::CKA_CLASS).with_ck_ulong(&class),
            CK_ATTRIBUTE::new(cryptoki_sys::CKA_KEY_TYPE).with_ck_ulong(&key_type),
            CK_ATTRIBUTE::new(cryptoki_sys::CKA_TOKEN).with_bool(&f),
            CK_ATTRIBUTE::new(cryptoki_sys::CKA_SENSITIVE).with_bool(&f),
            CK_ATTRIBUTE::new(cryptoki_sys::CKA_EXTRACTABLE).with_bool(&t),
            CK_ATTRIBUTE::new(cryptoki_sys::CKA_LABEL).with_bytes(label),
        ];
        self.ctx
            .unwrap_key(session, &m, unwrapping_key, wrapped, &template)
            .map(|_| ())
            .map_err(describe)
    }
}
