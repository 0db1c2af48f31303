//! Small safe wrappers over OpenSSL public-key calls that the `openssl` crate does not expose.
//!
//! - [`set_ctx_params`]: `EVP_PKEY_CTX_set_params` with typed parameters, for the settings the
//!   crate has no setter for (RSA PKCS#1 v1.5 `implicit-rejection`, ML-DSA `deterministic`,
//!   EdDSA `instance`, …).
//! - [`sign_message_init`] / [`sign_message_update`] / [`sign_message_final`] and the
//!   `verify_message_*` counterparts: OpenSSL 3.4's streaming "message" signature API, with
//!   which ML-DSA signs a message given in parts (`EVP_PKEY_sign_message_*`).
//!
//! Every function checks its OpenSSL return codes and turns failures into an
//! [`ErrorStack`]; none keeps a pointer past its own call.

use foreign_types_shared::ForeignTypeRef;
use openssl::error::ErrorStack;
use openssl::pkey_ctx::PkeyCtxRef;
use openssl_sys as ffi;
use std::ffi::{c_int, c_uchar, CStr};

// Part of libcrypto (OpenSSL 3.4 and later) but not declared by `openssl-sys`.
extern "C" {
    fn EVP_PKEY_sign_message_update(
        ctx: *mut ffi::EVP_PKEY_CTX,
        data: *const c_uchar,
        len: usize,
    ) -> c_int;
    fn EVP_PKEY_sign_message_final(
        ctx: *mut ffi::EVP_PKEY_CTX,
        sig: *mut c_uchar,
        siglen: *mut usize,
    ) -> c_int;
    fn EVP_PKEY_verify_message_update(
        ctx: *mut ffi::EVP_PKEY_CTX,
        data: *const c_uchar,
        len: usize,
    ) -> c_int;
    fn EVP_PKEY_verify_message_final(ctx: *mut ffi::EVP_PKEY_CTX) -> c_int;
    fn EVP_PKEY_CTX_set_signature(
        ctx: *mut ffi::EVP_PKEY_CTX,
        sig: *const c_uchar,
        siglen: usize,
    ) -> c_int;
}

/// One typed `OSSL_PARAM` for [`set_ctx_params`].
#[derive(Clone, Copy, Debug)]
pub enum Param<'a> {
    /// A C `int` parameter.
    Int(&'a CStr, i32),
    /// A C `unsigned int` parameter.
    Uint(&'a CStr, u32),
    /// A UTF-8 string parameter.
    Utf8(&'a CStr, &'a CStr),
    /// An octet-string parameter.
    Octets(&'a CStr, &'a [u8]),
}

/// An owned `OSSL_PARAM` array built with `OSSL_PARAM_BLD` (freed on drop).
struct ParamArray(*mut ffi::OSSL_PARAM);

impl Drop for ParamArray {
    fn drop(&mut self) {
        // SAFETY: the pointer came from OSSL_PARAM_BLD_to_param and is freed exactly once.
        unsafe { ffi::OSSL_PARAM_free(self.0) }
    }
}

/// An `OSSL_PARAM_BLD` (freed on drop).
struct Builder(*mut ffi::OSSL_PARAM_BLD);

impl Drop for Builder {
    fn drop(&mut self) {
        // SAFETY: the pointer came from OSSL_PARAM_BLD_new and is freed exactly once.
        unsafe { ffi::OSSL_PARAM_BLD_free(self.0) }
    }
}

fn check(r: std::os::raw::c_int) -> Result<(), ErrorStack> {
    if r > 0 {
        Ok(())
    } else {
        Err(ErrorStack::get())
    }
}

fn build(params: &[Param]) -> Result<ParamArray, ErrorStack> {
    // SAFETY: plain constructor; NULL is checked.
    let bld = unsafe { ffi::OSSL_PARAM_BLD_new() };
    if bld.is_null() {
        return Err(ErrorStack::get());
    }
    let bld = Builder(bld);
    for p in params {
        // SAFETY: `bld.0` is a live builder; every name is a NUL-terminated C string that
        // outlives the call; the push functions copy string and octet values into the
        // builder, so no borrowed pointer is kept.
        let r = unsafe {
            match *p {
                Param::Int(k, v) => ffi::OSSL_PARAM_BLD_push_int(bld.0, k.as_ptr(), v),
                Param::Uint(k, v) => ffi::OSSL_PARAM_BLD_push_uint(bld.0, k.as_ptr(), v),
                Param::Utf8(k, v) => ffi::OSSL_PARAM_BLD_push_utf8_string(
                    bld.0,
                    k.as_ptr(),
                    v.as_ptr(),
                    v.to_bytes().len(),
                ),
                Param::Octets(k, v) => ffi::OSSL_PARAM_BLD_push_octet_string(
                    bld.0,
                    k.as_ptr(),
                    v.as_ptr().cast(),
                    v.len(),
                ),
            }
        };
        check(r)?;
    }
    // SAFETY: `bld.0` is a live builder; the result is owned by the returned ParamArray.
    let arr = unsafe { ffi::OSSL_PARAM_BLD_to_param(bld.0) };
    if arr.is_null() {
        return Err(ErrorStack::get());
    }
    Ok(ParamArray(arr))
}

/// `EVP_PKEY_CTX_set_params` on an initialised operation context.
///
/// OpenSSL ignores parameter names the operation does not know; callers that depend on a
/// setting must check its effect (the tests of the calling modules do).
pub fn set_ctx_params<T>(ctx: &mut PkeyCtxRef<T>, params: &[Param]) -> Result<(), ErrorStack> {
    let arr = build(params)?;
    // SAFETY: `ctx` is a live EVP_PKEY_CTX borrowed mutably for the call; `arr.0` is a valid,
    // END-terminated parameter array that OpenSSL only reads.
    check(unsafe { ffi::EVP_PKEY_CTX_set_params(ctx.as_ptr(), arr.0) })
}

/// `EVP_PKEY_sign_message_init`: starts a streaming signature on a context created on a
/// private key, with the key type's own signature algorithm, then applies `params`.
pub fn sign_message_init<T>(ctx: &mut PkeyCtxRef<T>, params: &[Param]) -> Result<(), ErrorStack> {
    let arr = build(params)?;
    // SAFETY: `ctx` is a live context; a NULL algorithm asks for the key type's default
    // (fetched and kept by the context); `arr.0` is a valid parameter array, only read.
    check(unsafe { ffi::EVP_PKEY_sign_message_init(ctx.as_ptr(), std::ptr::null_mut(), arr.0) })
}

/// `EVP_PKEY_sign_message_update`: feeds part of the message.
pub fn sign_message_update<T>(ctx: &mut PkeyCtxRef<T>, data: &[u8]) -> Result<(), ErrorStack> {
    // SAFETY: `ctx` is live and mutably borrowed; `data` is read for `data.len()` bytes.
    check(unsafe { EVP_PKEY_sign_message_update(ctx.as_ptr(), data.as_ptr(), data.len()) })
}

/// `EVP_PKEY_sign_message_final`: writes the signature into `sig` (which must be large
/// enough) and returns its length.
pub fn sign_message_final<T>(ctx: &mut PkeyCtxRef<T>, sig: &mut [u8]) -> Result<usize, ErrorStack> {
    let mut len = sig.len();
    // SAFETY: `ctx` is live; OpenSSL writes at most `len` (the buffer's size) bytes to `sig`
    // and stores the length written in `len`.
    check(unsafe { EVP_PKEY_sign_message_final(ctx.as_ptr(), sig.as_mut_ptr(), &mut len) })?;
    Ok(len)
}

/// `EVP_PKEY_verify_message_init`: starts a streaming verification on a context created on a
/// public key, with the key type's own signature algorithm, then applies `params`.
pub fn verify_message_init<T>(ctx: &mut PkeyCtxRef<T>, params: &[Param]) -> Result<(), ErrorStack> {
    let arr = build(params)?;
    // SAFETY: as in `sign_message_init`.
    check(unsafe { ffi::EVP_PKEY_verify_message_init(ctx.as_ptr(), std::ptr::null_mut(), arr.0) })
}

/// `EVP_PKEY_verify_message_update`: feeds part of the message.
pub fn verify_message_update<T>(ctx: &mut PkeyCtxRef<T>, data: &[u8]) -> Result<(), ErrorStack> {
    // SAFETY: `ctx` is live and mutably borrowed; `data` is read for `data.len()` bytes.
    check(unsafe { EVP_PKEY_verify_message_update(ctx.as_ptr(), data.as_ptr(), data.len()) })
}

/// `EVP_PKEY_CTX_set_signature` + `EVP_PKEY_verify_message_final`: `Ok(true)` when `sig` is a
/// valid signature of the message fed so far. A wrong signature is `Ok(false)` (the error
/// queue is cleared).
pub fn verify_message_final<T>(ctx: &mut PkeyCtxRef<T>, sig: &[u8]) -> Result<bool, ErrorStack> {
    // SAFETY: `ctx` is live; OpenSSL copies the `sig.len()` bytes of `sig`.
    check(unsafe { EVP_PKEY_CTX_set_signature(ctx.as_ptr(), sig.as_ptr(), sig.len()) })?;
    // SAFETY: `ctx` is live.
    let ok = unsafe { EVP_PKEY_verify_message_final(ctx.as_ptr()) } == 1;
    if !ok {
        // Drain the error queue: a bad signature is an answer, not a failure.
        drop(ErrorStack::get());
    }
    Ok(ok)
}
