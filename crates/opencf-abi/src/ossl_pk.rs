//! Small safe wrappers over OpenSSL public-key calls that the `openssl` crate does not expose.
//!
//! - [`set_ctx_params`]: `EVP_PKEY_CTX_set_params` with typed parameters, for the settings the
//!   crate has no setter for (RSA PKCS#1 v1.5 `implicit-rejection`, ML-DSA `deterministic`,
//!   EdDSA `instance`, …).
//! - [`kem_encapsulate`] / [`kem_decapsulate`]: `EVP_PKEY_encapsulate` / `EVP_PKEY_decapsulate`
//!   (ML-KEM).
//!
//! Every function checks its OpenSSL return codes and turns failures into an
//! [`ErrorStack`]; none keeps a pointer past its own call.

use foreign_types_shared::ForeignTypeRef;
use openssl::error::ErrorStack;
use openssl::pkey::{HasPrivate, HasPublic, PKeyRef};
use openssl::pkey_ctx::{PkeyCtx, PkeyCtxRef};
use openssl_sys as ffi;
use std::ffi::CStr;
use zeroize::Zeroizing;

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

/// KEM encapsulation (`EVP_PKEY_encapsulate`) to `pkey`: (ciphertext, shared secret).
pub fn kem_encapsulate<T: HasPublic>(
    pkey: &PKeyRef<T>,
) -> Result<(Vec<u8>, Zeroizing<Vec<u8>>), ErrorStack> {
    let ctx = PkeyCtx::new(pkey)?;
    // SAFETY: `ctx` is a live context on a key; NULL params is allowed.
    check(unsafe { ffi::EVP_PKEY_encapsulate_init(ctx.as_ptr(), std::ptr::null()) })?;
    let (mut ct_len, mut ss_len) = (0usize, 0usize);
    // SAFETY: NULL output buffers ask for the two lengths, written to the two size_t.
    check(unsafe {
        ffi::EVP_PKEY_encapsulate(
            ctx.as_ptr(),
            std::ptr::null_mut(),
            &mut ct_len,
            std::ptr::null_mut(),
            &mut ss_len,
        )
    })?;
    let mut ct = vec![0u8; ct_len];
    let mut ss = Zeroizing::new(vec![0u8; ss_len]);
    // SAFETY: both buffers have the capacities just reported, passed in the length arguments.
    check(unsafe {
        ffi::EVP_PKEY_encapsulate(
            ctx.as_ptr(),
            ct.as_mut_ptr(),
            &mut ct_len,
            ss.as_mut_ptr(),
            &mut ss_len,
        )
    })?;
    ct.truncate(ct_len);
    ss.truncate(ss_len);
    Ok((ct, ss))
}

/// KEM decapsulation (`EVP_PKEY_decapsulate`) of `ct` with `pkey`: the shared secret.
pub fn kem_decapsulate<T: HasPrivate>(
    pkey: &PKeyRef<T>,
    ct: &[u8],
) -> Result<Zeroizing<Vec<u8>>, ErrorStack> {
    let ctx = PkeyCtx::new(pkey)?;
    // SAFETY: `ctx` is a live context on a key; NULL params is allowed.
    check(unsafe { ffi::EVP_PKEY_decapsulate_init(ctx.as_ptr(), std::ptr::null()) })?;
    let mut ss_len = 0usize;
    // SAFETY: a NULL output buffer asks for the secret's length; `ct` is read only.
    check(unsafe {
        ffi::EVP_PKEY_decapsulate(
            ctx.as_ptr(),
            std::ptr::null_mut(),
            &mut ss_len,
            ct.as_ptr(),
            ct.len(),
        )
    })?;
    let mut ss = Zeroizing::new(vec![0u8; ss_len]);
    // SAFETY: `ss` has the capacity just reported, passed in `ss_len`; `ct` is read only.
    check(unsafe {
        ffi::EVP_PKEY_decapsulate(ctx.as_ptr(), ss.as_mut_ptr(), &mut ss_len, ct.as_ptr(), ct.len())
    })?;
    ss.truncate(ss_len);
    Ok(ss)
}
