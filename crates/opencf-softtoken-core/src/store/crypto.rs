//! Cryptographic primitives of the keystore: AES-256-GCM sealing with a reusable
//! context, scrypt key derivation and random bytes.
//!
//! Sealed blob layout (attributes, wrapped master keys, master-key check value):
//! `nonce (12 bytes) || ciphertext || tag (16 bytes)`.

use openssl::cipher::Cipher;
use openssl::cipher_ctx::CipherCtx;
use zeroize::Zeroizing;

use super::StoreError;

pub(super) const KEY_LEN: usize = 32;
pub(super) const NONCE_LEN: usize = 12;
pub(super) const TAG_LEN: usize = 16;
/// Bytes a sealed blob adds to its plaintext.
pub(super) const SEAL_OVERHEAD: usize = NONCE_LEN + TAG_LEN;
/// Length of the random scrypt salt of each PIN.
pub(super) const SALT_LEN: usize = 16;

/// Name of the only KDF implemented so far, as stored in the `pins.kdf` column.
pub(super) const KDF_SCRYPT: &str = "scrypt";
/// Name of the wrapping algorithm, as stored in the `pins.wrap_alg` column.
pub(super) const WRAP_AES_256_GCM: &str = "aes-256-gcm";
/// Upper bound on the memory scrypt may use (OpenSSL `maxmem`).
pub(super) const SCRYPT_MAXMEM: u64 = 64 * 1024 * 1024;

/// Largest plaintext the GCM helpers accept (OpenSSL takes `int` lengths; staying
/// far below that keeps the openssl crate from panicking).
const MAX_GCM_INPUT: usize = (i32::MAX as usize) - 1024;

fn ossl_err(what: &str, e: openssl::error::ErrorStack) -> StoreError {
    StoreError::Io(format!("{what}: OpenSSL error: {e}"))
}

/// Fills `buf` from the OpenSSL CSPRNG.
pub(super) fn random_bytes(buf: &mut [u8]) -> Result<(), StoreError> {
    openssl::rand::rand_bytes(buf).map_err(|e| ossl_err("random number generator", e))
}

/// scrypt parameters, stored next to every wrapped master key so they can change later.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ScryptParams {
    pub n: u64,
    pub r: u64,
    pub p: u64,
}

impl ScryptParams {
    /// Parameters used for new PIN records: N = 2^15, r = 8, p = 1 (about 32 MiB,
    /// ~0.1 s). Unit tests use N = 2^10 so that the suite stays fast; records carry
    /// their own parameters, so production records are still read correctly.
    pub fn current() -> Self {
        #[cfg(not(test))]
        let n = 1 << 15;
        #[cfg(test)]
        let n = 1 << 10;
        ScryptParams { n, r: 8, p: 1 }
    }

    /// The production parameters (also used in tests that check them).
    #[cfg(test)]
    pub fn production() -> Self {
        ScryptParams {
            n: 1 << 15,
            r: 8,
            p: 1,
        }
    }

    /// Rejects parameters that are malformed or would need more than
    /// [`SCRYPT_MAXMEM`] (a tampered database must not make us hang or allocate
    /// gigabytes).
    pub fn validate(&self) -> Result<(), StoreError> {
        let ScryptParams { n, r, p } = *self;
        let bad =
            || StoreError::Corrupt(format!("scrypt parameters out of range: N={n} r={r} p={p}"));
        if !n.is_power_of_two()
            || !(2..=(1 << 20)).contains(&n)
            || !(1..=32).contains(&r)
            || !(1..=16).contains(&p)
        {
            return Err(bad());
        }
        // OpenSSL needs 128*r*(N+2) bytes for V plus 128*r*p for B.
        let need = n
            .checked_add(2)
            .and_then(|v| v.checked_add(p))
            .and_then(|v| v.checked_mul(128))
            .and_then(|v| v.checked_mul(r))
            .ok_or_else(bad)?;
        if need > SCRYPT_MAXMEM {
            return Err(bad());
        }
        Ok(())
    }
}

/// Derives the 32-byte key-encryption key from a PIN with scrypt.
pub(super) fn scrypt_kek(
    pin: &[u8],
    salt: &[u8],
    params: &ScryptParams,
) -> Result<Zeroizing<[u8; KEY_LEN]>, StoreError> {
    params.validate()?;
    let mut kek = Zeroizing::new([0u8; KEY_LEN]);
    openssl::pkcs5::scrypt(
        pin,
        salt,
        params.n,
        params.r,
        params.p,
        SCRYPT_MAXMEM,
        &mut kek[..],
    )
    .map_err(|e| ossl_err("scrypt key derivation", e))?;
    Ok(kek)
}

/// An AES-256-GCM context keyed once and reused for many messages (keying once
/// keeps `load_all` over hundreds of thousands of values fast).
pub(super) struct Gcm {
    ctx: CipherCtx,
}

impl Gcm {
    pub fn encryptor(key: &[u8; KEY_LEN]) -> Result<Gcm, StoreError> {
        let mut ctx = CipherCtx::new().map_err(|e| ossl_err("cipher context", e))?;
        ctx.encrypt_init(Some(Cipher::aes_256_gcm()), Some(&key[..]), None)
            .map_err(|e| ossl_err("AES-GCM init", e))?;
        Ok(Gcm { ctx })
    }

    pub fn decryptor(key: &[u8; KEY_LEN]) -> Result<Gcm, StoreError> {
        let mut ctx = CipherCtx::new().map_err(|e| ossl_err("cipher context", e))?;
        ctx.decrypt_init(Some(Cipher::aes_256_gcm()), Some(&key[..]), None)
            .map_err(|e| ossl_err("AES-GCM init", e))?;
        Ok(Gcm { ctx })
    }

    /// Encrypts `pt` with a fresh random nonce; returns `nonce || ct || tag`.
    /// Only valid on a context made by [`Gcm::encryptor`].
    pub fn seal(&mut self, aad: &[u8], pt: &[u8]) -> Result<Vec<u8>, StoreError> {
        if pt.len() > MAX_GCM_INPUT || aad.len() > MAX_GCM_INPUT {
            return Err(StoreError::Io("value too large to encrypt".into()));
        }
        let e = |e| ossl_err("AES-GCM encryption", e);
        let mut nonce = [0u8; NONCE_LEN];
        random_bytes(&mut nonce)?;
        self.ctx.encrypt_init(None, None, Some(&nonce)).map_err(e)?;
        self.ctx.cipher_update(aad, None).map_err(e)?;
        let mut out = vec![0u8; NONCE_LEN + pt.len() + TAG_LEN];
        out[..NONCE_LEN].copy_from_slice(&nonce);
        let n = self
            .ctx
            .cipher_update(pt, Some(&mut out[NONCE_LEN..NONCE_LEN + pt.len()]))
            .map_err(e)?;
        let f = self.ctx.cipher_final(&mut []).map_err(e)?;
        if n + f != pt.len() {
            return Err(StoreError::Io(
                "AES-GCM produced an unexpected length".into(),
            ));
        }
        self.ctx.tag(&mut out[NONCE_LEN + pt.len()..]).map_err(e)?;
        Ok(out)
    }

    /// Decrypts and authenticates a blob made by [`Gcm::seal`] into `out`
    /// (which must be exactly `blob.len() - SEAL_OVERHEAD` long).
    /// `Ok(false)` means authentication failed (wrong key, tampered data or wrong
    /// AAD); `out` then holds garbage that the caller must wipe.
    /// Only valid on a context made by [`Gcm::decryptor`].
    pub fn open_into(
        &mut self,
        aad: &[u8],
        blob: &[u8],
        out: &mut [u8],
    ) -> Result<bool, StoreError> {
        if blob.len() < SEAL_OVERHEAD {
            return Ok(false);
        }
        if blob.len() > MAX_GCM_INPUT || aad.len() > MAX_GCM_INPUT {
            return Err(StoreError::Corrupt("encrypted value too large".into()));
        }
        let ct_len = blob.len() - SEAL_OVERHEAD;
        if out.len() != ct_len {
            return Err(StoreError::Io(
                "AES-GCM output buffer has the wrong length".into(),
            ));
        }
        let e = |e| ossl_err("AES-GCM decryption", e);
        let (nonce, rest) = blob.split_at(NONCE_LEN);
        let (ct, tag) = rest.split_at(ct_len);
        self.ctx.decrypt_init(None, None, Some(nonce)).map_err(e)?;
        self.ctx.cipher_update(aad, None).map_err(e)?;
        let n = self.ctx.cipher_update(ct, Some(out)).map_err(e)?;
        if n != ct_len {
            return Err(StoreError::Io(
                "AES-GCM produced an unexpected length".into(),
            ));
        }
        self.ctx.set_tag(tag).map_err(e)?;
        // A failing final step is the tag mismatch; the error queue is drained
        // by the openssl crate when it builds the ErrorStack.
        Ok(self.ctx.cipher_final(&mut []).is_ok())
    }

    /// Like [`Gcm::open_into`] but allocates; `Ok(None)` = authentication failed.
    pub fn open(
        &mut self,
        aad: &[u8],
        blob: &[u8],
    ) -> Result<Option<Zeroizing<Vec<u8>>>, StoreError> {
        if blob.len() < SEAL_OVERHEAD {
            return Ok(None);
        }
        let mut out = Zeroizing::new(vec![0u8; blob.len() - SEAL_OVERHEAD]);
        if self.open_into(aad, blob, &mut out)? {
            Ok(Some(out))
        } else {
            Ok(None)
        }
    }
}
