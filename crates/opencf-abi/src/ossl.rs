//! OpenSSL operations that the safe `openssl` crate does not wrap, as small safe functions.
//!
//! * [`encapsulate`] / [`decapsulate`]: KEM operations (`EVP_PKEY_encapsulate`,
//!   `EVP_PKEY_decapsulate`), e.g. for ML-KEM keys.

use std::ptr;

use foreign_types_shared::ForeignType;
use openssl::error::ErrorStack;
use openssl::pkey::{HasPublic, PKeyRef, Private};
use openssl::pkey_ctx::PkeyCtx;
use openssl_sys as ffi;
use zeroize::Zeroizing;

/// OpenSSL's convention: 1 is success, anything else failure (with the error queue set).
fn cvt(r: std::ffi::c_int) -> Result<(), ErrorStack> {
    if r == 1 {
        Ok(())
    } else {
        Err(ErrorStack::get())
    }
}

/// KEM encapsulation to `pkey` (e.g. an ML-KEM public key): returns `(ciphertext, secret)`.
pub fn encapsulate(
    pkey: &PKeyRef<impl HasPublic>,
) -> Result<(Vec<u8>, Zeroizing<Vec<u8>>), ErrorStack> {
    let ctx = PkeyCtx::new(pkey)?;
    // SAFETY: `ctx` is a valid context for the call's duration; the lengths passed with the
    // output buffers are their sizes, and OpenSSL writes at most that many bytes.
    unsafe {
        cvt(ffi::EVP_PKEY_encapsulate_init(ctx.as_ptr(), ptr::null()))?;
        let (mut ct_len, mut secret_len) = (0usize, 0usize);
        cvt(ffi::EVP_PKEY_encapsulate(
            ctx.as_ptr(),
            ptr::null_mut(),
            &mut ct_len,
            ptr::null_mut(),
            &mut secret_len,
        ))?;
        let mut ct = vec![0u8; ct_len];
        let mut secret = Zeroizing::new(vec![0u8; secret_len]);
        cvt(ffi::EVP_PKEY_encapsulate(
            ctx.as_ptr(),
            ct.as_mut_ptr(),
            &mut ct_len,
            secret.as_mut_ptr(),
            &mut secret_len,
        ))?;
        ct.truncate(ct_len);
        secret.truncate(secret_len);
        Ok((ct, secret))
    }
}

/// KEM decapsulation of `ct` with the private key `pkey`: returns the shared secret.
pub fn decapsulate(pkey: &PKeyRef<Private>, ct: &[u8]) -> Result<Zeroizing<Vec<u8>>, ErrorStack> {
    let ctx = PkeyCtx::new(pkey)?;
    // SAFETY: as in `encapsulate`; `ct` is read for `ct.len()` bytes.
    unsafe {
        cvt(ffi::EVP_PKEY_decapsulate_init(ctx.as_ptr(), ptr::null()))?;
        let mut secret_len = 0usize;
        cvt(ffi::EVP_PKEY_decapsulate(
            ctx.as_ptr(),
            ptr::null_mut(),
            &mut secret_len,
            ct.as_ptr(),
            ct.len(),
        ))?;
        let mut secret = Zeroizing::new(vec![0u8; secret_len]);
        cvt(ffi::EVP_PKEY_decapsulate(
            ctx.as_ptr(),
            secret.as_mut_ptr(),
            &mut secret_len,
            ct.as_ptr(),
            ct.len(),
        ))?;
        secret.truncate(secret_len);
        Ok(secret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openssl::pkey::{KeyType, PKey, Public};

    #[test]
    fn ml_kem_768_round_trip() {
        let private = PKey::private_key_from_seed(None, KeyType::ML_KEM_768, None, &[7u8; 64])
            .expect("ML-KEM-768 key from seed");
        let raw = private.raw_public_key().unwrap();
        assert_eq!(raw.len(), 1184);
        let public: PKey<Public> =
            PKey::public_key_from_raw_bytes_ex(None, KeyType::ML_KEM_768, None, &raw).unwrap();
        let (ct, secret) = encapsulate(&public).unwrap();
        assert_eq!(ct.len(), 1088);
        assert_eq!(secret.len(), 32);
        let (ct2, secret2) = encapsulate(&private).unwrap();
        assert_ne!(ct, ct2);
        assert_eq!(*decapsulate(&private, &ct).unwrap(), *secret);
        assert_eq!(*decapsulate(&private, &ct2).unwrap(), *secret2);
        // ML-KEM decapsulation of a corrupted ciphertext gives an unrelated secret
        // (implicit rejection), and a ciphertext of the wrong size is an error.
        let mut bad = ct.clone();
        bad[0] ^= 1;
        assert_ne!(*decapsulate(&private, &bad).unwrap(), *secret);
        assert!(decapsulate(&private, &ct[..100]).is_err());
    }
}
