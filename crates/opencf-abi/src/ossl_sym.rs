//! Safe wrappers over the few OpenSSL calls the software token needs and the `openssl` crate
//! does not offer:
//!
//! - [`Sha`]: SHA-1 and SHA-2 contexts whose running state can be exported and imported again
//!   (PKCS#11 `C_GetOperationState` / `C_SetOperationState` of a digest). OpenSSL 3.6 has no
//!   digest-state serialisation API, but its low-level `SHA*_CTX` structures are public C
//!   structures of the ABI; this module copies their fields out and back, validating every
//!   field on import.
//! - [`Mac`]: an `EVP_MAC` context (HMAC over any digest, CMAC over any block cipher), the
//!   algorithm fetched once per process.
//! - [`aes_gcm_any_iv`]: AES-GCM with IVs longer than the 128 bytes `EVP` accepts (PKCS#11
//!   allows any length), on OpenSSL's public `CRYPTO_gcm128_*` functions.
//!
//! Every function here is safe to call with any input; failures come back as
//! [`openssl::error::ErrorStack`] or `None`.

use openssl::error::ErrorStack;
use openssl_sys as ffi;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::ptr;
use std::sync::OnceLock;
use zeroize::Zeroize;

// ---------------------------------------------------------------------------------------------
// SHA-1 / SHA-2 with exportable state
// ---------------------------------------------------------------------------------------------

/// The hash functions [`Sha`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShaKind {
    /// SHA-1.
    Sha1,
    /// SHA-224.
    Sha224,
    /// SHA-256.
    Sha256,
    /// SHA-384.
    Sha384,
    /// SHA-512.
    Sha512,
}

impl ShaKind {
    /// Digest length in bytes.
    pub fn output_len(self) -> usize {
        match self {
            ShaKind::Sha1 => 20,
            ShaKind::Sha224 => 28,
            ShaKind::Sha256 => 32,
            ShaKind::Sha384 => 48,
            ShaKind::Sha512 => 64,
        }
    }

    /// Block length in bytes.
    pub fn block_len(self) -> usize {
        match self {
            ShaKind::Sha1 | ShaKind::Sha224 | ShaKind::Sha256 => 64,
            ShaKind::Sha384 | ShaKind::Sha512 => 128,
        }
    }

    /// Length of the exported state ([`Sha::export`]).
    pub fn state_len(self) -> usize {
        match self {
            // h0..h4, Nl, Nh, data[16], num (all 32-bit).
            ShaKind::Sha1 => 4 * (5 + 2 + 16 + 1),
            // h[8], Nl, Nh, data[16], num, md_len (all 32-bit).
            ShaKind::Sha224 | ShaKind::Sha256 => 4 * (8 + 2 + 16 + 2),
            // h[8], Nl, Nh, u[16] (64-bit), num, md_len (32-bit).
            ShaKind::Sha384 | ShaKind::Sha512 => 8 * (8 + 2 + 16) + 4 * 2,
        }
    }
}

// Mirrors of `SHA_CTX`, `SHA256_CTX` and `SHA512_CTX` from `<openssl/sha.h>` (OpenSSL 3.x,
// `SHA_LONG` = `unsigned int`, `SHA_LONG64` = 64-bit, `SHA_LBLOCK` = 16).
#[repr(C)]
#[derive(Clone)]
struct Sha1Ctx {
    h: [u32; 5],
    nl: u32,
    nh: u32,
    data: [u32; 16],
    num: c_uint,
}

#[repr(C)]
#[derive(Clone)]
struct Sha256Ctx {
    h: [u32; 8],
    nl: u32,
    nh: u32,
    data: [u32; 16],
    num: c_uint,
    md_len: c_uint,
}

#[repr(C)]
#[derive(Clone)]
struct Sha512Ctx {
    h: [u64; 8],
    nl: u64,
    nh: u64,
    data: [u64; 16],
    num: c_uint,
    md_len: c_uint,
}

// The mirrors must have the size of the C structures that `openssl-sys` declares.
const _: () = assert!(std::mem::size_of::<Sha1Ctx>() == std::mem::size_of::<ffi::SHA_CTX>());
const _: () = assert!(std::mem::size_of::<Sha256Ctx>() == std::mem::size_of::<ffi::SHA256_CTX>());
const _: () = assert!(std::mem::size_of::<Sha512Ctx>() == std::mem::size_of::<ffi::SHA512_CTX>());
const _: () = assert!(std::mem::size_of::<Sha512Ctx>() == 216);

#[derive(Clone)]
enum ShaCtx {
    S1(Sha1Ctx),
    S256(Sha256Ctx),
    S512(Sha512Ctx),
}

/// A running SHA-1 or SHA-2 computation (OpenSSL's `SHA*_Init/Update/Final`) whose state can
/// be exported and imported. The state is wiped when dropped.
#[derive(Clone)]
pub struct Sha {
    kind: ShaKind,
    ctx: ShaCtx,
}

impl std::fmt::Debug for Sha {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sha({:?})", self.kind)
    }
}

impl Drop for Sha {
    fn drop(&mut self) {
        match &mut self.ctx {
            ShaCtx::S1(c) => {
                c.h.zeroize();
                c.data.zeroize();
                c.nl = 0;
                c.nh = 0;
            }
            ShaCtx::S256(c) => {
                c.h.zeroize();
                c.data.zeroize();
                c.nl = 0;
                c.nh = 0;
            }
            ShaCtx::S512(c) => {
                c.h.zeroize();
                c.data.zeroize();
                c.nl = 0;
                c.nh = 0;
            }
        }
    }
}

/// Largest digest [`Sha`] produces.
pub const SHA_MAX_OUTPUT: usize = 64;

impl Sha {
    /// Starts a new computation.
    pub fn new(kind: ShaKind) -> Sha {
        ffi::init();
        let ctx = match kind {
            ShaKind::Sha1 => {
                let mut c = Sha1Ctx {
                    h: [0; 5],
                    nl: 0,
                    nh: 0,
                    data: [0; 16],
                    num: 0,
                };
                // SAFETY: `c` has the layout of `SHA_CTX`; SHA1_Init only writes into it.
                unsafe { ffi::SHA1_Init(&mut c as *mut Sha1Ctx as *mut ffi::SHA_CTX) };
                ShaCtx::S1(c)
            }
            ShaKind::Sha224 | ShaKind::Sha256 => {
                let mut c = Sha256Ctx {
                    h: [0; 8],
                    nl: 0,
                    nh: 0,
                    data: [0; 16],
                    num: 0,
                    md_len: 0,
                };
                let p = &mut c as *mut Sha256Ctx as *mut ffi::SHA256_CTX;
                // SAFETY: `c` has the layout of `SHA256_CTX`; the init functions only write it.
                unsafe {
                    if kind == ShaKind::Sha224 {
                        ffi::SHA224_Init(p);
                    } else {
                        ffi::SHA256_Init(p);
                    }
                }
                ShaCtx::S256(c)
            }
            ShaKind::Sha384 | ShaKind::Sha512 => {
                let mut c = Sha512Ctx {
                    h: [0; 8],
                    nl: 0,
                    nh: 0,
                    data: [0; 16],
                    num: 0,
                    md_len: 0,
                };
                let p = &mut c as *mut Sha512Ctx as *mut ffi::SHA512_CTX;
                // SAFETY: `c` has the layout of `SHA512_CTX`; the init functions only write it.
                unsafe {
                    if kind == ShaKind::Sha384 {
                        ffi::SHA384_Init(p);
                    } else {
                        ffi::SHA512_Init(p);
                    }
                }
                ShaCtx::S512(c)
            }
        };
        Sha { kind, ctx }
    }

    /// The hash function.
    pub fn kind(&self) -> ShaKind {
        self.kind
    }

    /// Absorbs `data`.
    pub fn update(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let d = data.as_ptr() as *const c_void;
        // SAFETY: each context is a valid, initialised structure of the matching C type (built
        // by `new` or validated by `import`); `data` is a live slice of `data.len()` bytes.
        unsafe {
            match &mut self.ctx {
                ShaCtx::S1(c) => {
                    ffi::SHA1_Update(c as *mut Sha1Ctx as *mut ffi::SHA_CTX, d, data.len());
                }
                ShaCtx::S256(c) => {
                    ffi::SHA256_Update(c as *mut Sha256Ctx as *mut ffi::SHA256_CTX, d, data.len());
                }
                ShaCtx::S512(c) => {
                    ffi::SHA512_Update(c as *mut Sha512Ctx as *mut ffi::SHA512_CTX, d, data.len());
                }
            }
        }
    }

    /// The digest of everything absorbed so far (the computation itself may continue):
    /// the first [`ShaKind::output_len`] bytes of the returned buffer.
    pub fn finish(&self) -> [u8; SHA_MAX_OUTPUT] {
        let mut out = [0u8; SHA_MAX_OUTPUT];
        let mut copy = self.clone();
        let o = out.as_mut_ptr();
        // SAFETY: `copy` holds a valid context; `out` has room for the largest digest (64
        // bytes); the `*_Final` of a SHA-224 context writes 28 bytes, SHA-384 48 (`md_len` is
        // fixed by `new`/`import`).
        unsafe {
            match (&mut copy.ctx, self.kind) {
                (ShaCtx::S1(c), _) => {
                    ffi::SHA1_Final(o, c as *mut Sha1Ctx as *mut ffi::SHA_CTX);
                }
                (ShaCtx::S256(c), ShaKind::Sha224) => {
                    ffi::SHA224_Final(o, c as *mut Sha256Ctx as *mut ffi::SHA256_CTX);
                }
                (ShaCtx::S256(c), _) => {
                    ffi::SHA256_Final(o, c as *mut Sha256Ctx as *mut ffi::SHA256_CTX);
                }
                (ShaCtx::S512(c), ShaKind::Sha384) => {
                    ffi::SHA384_Final(o, c as *mut Sha512Ctx as *mut ffi::SHA512_CTX);
                }
                (ShaCtx::S512(c), _) => {
                    ffi::SHA512_Final(o, c as *mut Sha512Ctx as *mut ffi::SHA512_CTX);
                }
            }
        }
        out
    }

    /// The running state as [`ShaKind::state_len`] bytes (counters little-endian, the partial
    /// block as it lies in memory). Only [`Sha::import`] on this machine reads it.
    pub fn export(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.kind.state_len());
        match &self.ctx {
            ShaCtx::S1(c) => {
                c.h.iter()
                    .for_each(|w| v.extend_from_slice(&w.to_le_bytes()));
                v.extend_from_slice(&c.nl.to_le_bytes());
                v.extend_from_slice(&c.nh.to_le_bytes());
                c.data
                    .iter()
                    .for_each(|w| v.extend_from_slice(&w.to_ne_bytes()));
                v.extend_from_slice(&c.num.to_le_bytes());
            }
            ShaCtx::S256(c) => {
                c.h.iter()
                    .for_each(|w| v.extend_from_slice(&w.to_le_bytes()));
                v.extend_from_slice(&c.nl.to_le_bytes());
                v.extend_from_slice(&c.nh.to_le_bytes());
                c.data
                    .iter()
                    .for_each(|w| v.extend_from_slice(&w.to_ne_bytes()));
                v.extend_from_slice(&c.num.to_le_bytes());
                v.extend_from_slice(&c.md_len.to_le_bytes());
            }
            ShaCtx::S512(c) => {
                c.h.iter()
                    .for_each(|w| v.extend_from_slice(&w.to_le_bytes()));
                v.extend_from_slice(&c.nl.to_le_bytes());
                v.extend_from_slice(&c.nh.to_le_bytes());
                c.data
                    .iter()
                    .for_each(|w| v.extend_from_slice(&w.to_ne_bytes()));
                v.extend_from_slice(&c.num.to_le_bytes());
                v.extend_from_slice(&c.md_len.to_le_bytes());
            }
        }
        v
    }

    /// Rebuilds a computation from [`Sha::export`]'s bytes. `None` when the bytes cannot be a
    /// state of `kind`: wrong length, a partial-block count out of range or inconsistent with
    /// the bit counter, a digest length that is not `kind`'s.
    pub fn import(kind: ShaKind, state: &[u8]) -> Option<Sha> {
        if state.len() != kind.state_len() {
            return None;
        }
        let mut r = Reader(state);
        let block = kind.block_len() as u64;
        let ctx = match kind {
            ShaKind::Sha1 => {
                let mut c = Sha1Ctx {
                    h: [0; 5],
                    nl: 0,
                    nh: 0,
                    data: [0; 16],
                    num: 0,
                };
                c.h.iter_mut().for_each(|w| *w = r.u32_le());
                c.nl = r.u32_le();
                c.nh = r.u32_le();
                c.data.iter_mut().for_each(|w| *w = r.u32_ne());
                c.num = r.u32_le();
                if u64::from(c.num) >= block || u64::from(c.nl >> 3) % block != u64::from(c.num) {
                    return None;
                }
                ShaCtx::S1(c)
            }
            ShaKind::Sha224 | ShaKind::Sha256 => {
                let mut c = Sha256Ctx {
                    h: [0; 8],
                    nl: 0,
                    nh: 0,
                    data: [0; 16],
                    num: 0,
                    md_len: 0,
                };
                c.h.iter_mut().for_each(|w| *w = r.u32_le());
                c.nl = r.u32_le();
                c.nh = r.u32_le();
                c.data.iter_mut().for_each(|w| *w = r.u32_ne());
                c.num = r.u32_le();
                c.md_len = r.u32_le();
                if u64::from(c.num) >= block
                    || u64::from(c.nl >> 3) % block != u64::from(c.num)
                    || c.md_len as usize != kind.output_len()
                {
                    return None;
                }
                ShaCtx::S256(c)
            }
            ShaKind::Sha384 | ShaKind::Sha512 => {
                let mut c = Sha512Ctx {
                    h: [0; 8],
                    nl: 0,
                    nh: 0,
                    data: [0; 16],
                    num: 0,
                    md_len: 0,
                };
                c.h.iter_mut().for_each(|w| *w = r.u64_le());
                c.nl = r.u64_le();
                c.nh = r.u64_le();
                c.data.iter_mut().for_each(|w| *w = r.u64_ne());
                c.num = r.u32_le();
                c.md_len = r.u32_le();
                if u64::from(c.num) >= block
                    || (c.nl >> 3) % block != u64::from(c.num)
                    || c.md_len as usize != kind.output_len()
                {
                    return None;
                }
                ShaCtx::S512(c)
            }
        };
        Some(Sha { kind, ctx })
    }
}

/// Reads fixed-size words from a slice whose length was checked beforehand.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        if self.0.len() >= N {
            out.copy_from_slice(&self.0[..N]);
            self.0 = &self.0[N..];
        }
        out
    }
    fn u32_le(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn u32_ne(&mut self) -> u32 {
        u32::from_ne_bytes(self.take())
    }
    fn u64_le(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
    fn u64_ne(&mut self) -> u64 {
        u64::from_ne_bytes(self.take())
    }
}

// ---------------------------------------------------------------------------------------------
// EVP_MAC: HMAC and CMAC
// ---------------------------------------------------------------------------------------------

extern "C" {
    fn OSSL_PARAM_construct_utf8_string(
        key: *const c_char,
        buf: *mut c_char,
        bsize: usize,
    ) -> ffi::OSSL_PARAM;
}

/// A fetched `EVP_MAC` (immutable and reference-counted inside OpenSSL: shareable).
struct MacMethod(*mut ffi::EVP_MAC);

// SAFETY: an `EVP_MAC` is an immutable, internally reference-counted method table; OpenSSL
// allows using it from any thread.
unsafe impl Send for MacMethod {}
// SAFETY: as above.
unsafe impl Sync for MacMethod {}

fn mac_method(
    cell: &'static OnceLock<Option<MacMethod>>,
    name: &CStr,
) -> Option<*mut ffi::EVP_MAC> {
    cell.get_or_init(|| {
        ffi::init();
        // SAFETY: `name` is NUL-terminated; a NULL library context and properties are allowed.
        let p = unsafe { ffi::EVP_MAC_fetch(ptr::null_mut(), name.as_ptr(), ptr::null()) };
        if p.is_null() {
            None
        } else {
            Some(MacMethod(p))
        }
    })
    .as_ref()
    .map(|m| m.0)
}

static HMAC: OnceLock<Option<MacMethod>> = OnceLock::new();
static CMAC: OnceLock<Option<MacMethod>> = OnceLock::new();

/// Largest MAC [`Mac`] produces.
pub const MAC_MAX_OUTPUT: usize = 64;

/// A keyed `EVP_MAC_CTX` (HMAC or CMAC). The key is wiped by OpenSSL when it is dropped.
pub struct Mac {
    ctx: *mut ffi::EVP_MAC_CTX,
    size: usize,
}

// SAFETY: an `EVP_MAC_CTX` is owned by exactly one `Mac` and has no thread affinity.
unsafe impl Send for Mac {}

impl Drop for Mac {
    fn drop(&mut self) {
        // SAFETY: `ctx` came from EVP_MAC_CTX_new/dup and is freed once.
        unsafe { ffi::EVP_MAC_CTX_free(self.ctx) }
    }
}

impl std::fmt::Debug for Mac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mac({} bytes)", self.size)
    }
}

impl Mac {
    /// HMAC with the digest named `digest` (an OpenSSL name such as `c"SHA256"`, `c"SHA3-256"`).
    pub fn hmac(digest: &CStr, key: &[u8]) -> Result<Mac, ErrorStack> {
        Self::new(&HMAC, c"HMAC", c"digest", digest, key)
    }

    /// CMAC with the CBC cipher named `cipher` (such as `c"AES-128-CBC"`).
    pub fn cmac(cipher: &CStr, key: &[u8]) -> Result<Mac, ErrorStack> {
        Self::new(&CMAC, c"CMAC", c"cipher", cipher, key)
    }

    fn new(
        cell: &'static OnceLock<Option<MacMethod>>,
        alg: &CStr,
        param: &CStr,
        value: &CStr,
        key: &[u8],
    ) -> Result<Mac, ErrorStack> {
        let method = mac_method(cell, alg).ok_or_else(ErrorStack::get)?;
        // SAFETY: `method` is a live fetched EVP_MAC (kept by the static cell).
        let ctx = unsafe { ffi::EVP_MAC_CTX_new(method) };
        if ctx.is_null() {
            return Err(ErrorStack::get());
        }
        let mut mac = Mac { ctx, size: 0 };
        // SAFETY: the parameter array points at NUL-terminated strings that outlive the call;
        // OpenSSL copies what it keeps. `key` is a live slice (a NULL pointer with length 0 is
        // avoided by passing the slice's dangling-but-valid pointer with length 0).
        let ok = unsafe {
            let params = [
                OSSL_PARAM_construct_utf8_string(param.as_ptr(), value.as_ptr() as *mut c_char, 0),
                ffi::OSSL_PARAM_construct_end(),
            ];
            ffi::EVP_MAC_init(mac.ctx, key.as_ptr(), key.len(), params.as_ptr())
        };
        if ok != 1 {
            return Err(ErrorStack::get());
        }
        // SAFETY: `mac.ctx` is a live, initialised context.
        let size = unsafe { ffi::EVP_MAC_CTX_get_mac_size(mac.ctx) };
        if size == 0 || size > MAC_MAX_OUTPUT {
            return Err(ErrorStack::get());
        }
        mac.size = size;
        Ok(mac)
    }

    /// Length of the full MAC in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Absorbs `data`.
    pub fn update(&mut self, data: &[u8]) -> Result<(), ErrorStack> {
        // SAFETY: `ctx` is live and initialised; `data` is a live slice.
        let ok = unsafe { ffi::EVP_MAC_update(self.ctx, data.as_ptr(), data.len()) };
        if ok == 1 {
            Ok(())
        } else {
            Err(ErrorStack::get())
        }
    }

    /// Ends the computation: the MAC is the first [`Mac::size`] bytes of the result. The
    /// context cannot be used afterwards (a further call fails).
    pub fn finish(&mut self) -> Result<[u8; MAC_MAX_OUTPUT], ErrorStack> {
        let mut out = [0u8; MAC_MAX_OUTPUT];
        let mut len: usize = 0;
        // SAFETY: `out` has room for MAC_MAX_OUTPUT ≥ size bytes, and we say so.
        let ok = unsafe { ffi::EVP_MAC_final(self.ctx, out.as_mut_ptr(), &mut len, out.len()) };
        if ok != 1 || len != self.size {
            return Err(ErrorStack::get());
        }
        Ok(out)
    }

    /// An independent copy of the context in its current state (`EVP_MAC_CTX_dup`).
    pub fn try_clone(&self) -> Result<Mac, ErrorStack> {
        // SAFETY: `ctx` is live.
        let ctx = unsafe { ffi::EVP_MAC_CTX_dup(self.ctx) };
        if ctx.is_null() {
            return Err(ErrorStack::get());
        }
        Ok(Mac {
            ctx,
            size: self.size,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// AES-GCM with IVs longer than EVP accepts
// ---------------------------------------------------------------------------------------------

/// Opaque `GCM128_CONTEXT` of `<openssl/modes.h>`.
#[repr(C)]
struct Gcm128Context {
    _private: [u8; 0],
}

type Block128 = unsafe extern "C" fn(input: *const u8, output: *mut u8, key: *const c_void);

extern "C" {
    fn CRYPTO_gcm128_new(key: *mut c_void, block: Block128) -> *mut Gcm128Context;
    fn CRYPTO_gcm128_setiv(ctx: *mut Gcm128Context, iv: *const u8, len: usize);
    fn CRYPTO_gcm128_aad(ctx: *mut Gcm128Context, aad: *const u8, len: usize) -> c_int;
    fn CRYPTO_gcm128_encrypt(
        ctx: *mut Gcm128Context,
        input: *const u8,
        output: *mut u8,
        len: usize,
    ) -> c_int;
    fn CRYPTO_gcm128_decrypt(
        ctx: *mut Gcm128Context,
        input: *const u8,
        output: *mut u8,
        len: usize,
    ) -> c_int;
    fn CRYPTO_gcm128_finish(ctx: *mut Gcm128Context, tag: *const u8, len: usize) -> c_int;
    fn CRYPTO_gcm128_tag(ctx: *mut Gcm128Context, tag: *mut u8, len: usize);
    fn CRYPTO_gcm128_release(ctx: *mut Gcm128Context);
}

/// The block function handed to `GCM128`: one AES block through a keyed AES-ECB `EVP`
/// context (AES-NI / constant-time code where the CPU has it).
unsafe extern "C" fn ecb_block(input: *const u8, output: *mut u8, key: *const c_void) {
    let mut outl: c_int = 0;
    // SAFETY: `key` is the live, keyed, padding-free ECB context that `aes_gcm_any_iv` passed
    // to CRYPTO_gcm128_new; GCM128 calls this with 16-byte input and output blocks.
    unsafe {
        ffi::EVP_EncryptUpdate(
            key as *mut ffi::EVP_CIPHER_CTX,
            output,
            &mut outl,
            input,
            16,
        );
    }
}

/// Owns an `EVP_CIPHER_CTX`.
struct EvpCtx(*mut ffi::EVP_CIPHER_CTX);

impl Drop for EvpCtx {
    fn drop(&mut self) {
        // SAFETY: allocated by EVP_CIPHER_CTX_new, freed once (NULL is allowed).
        unsafe { ffi::EVP_CIPHER_CTX_free(self.0) }
    }
}

/// Owns a `GCM128_CONTEXT`.
struct Gcm128(*mut Gcm128Context);

impl Drop for Gcm128 {
    fn drop(&mut self) {
        // SAFETY: allocated by CRYPTO_gcm128_new, released once; release wipes it.
        unsafe { CRYPTO_gcm128_release(self.0) }
    }
}

/// Why [`aes_gcm_any_iv`] did not succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcmError {
    /// Decryption: the tag does not verify.
    TagMismatch,
    /// Bad arguments (key, IV, tag or buffer lengths; data beyond GCM's limit) or an OpenSSL
    /// failure.
    Failed,
}

/// One whole AES-GCM encryption (`encrypt`: `output` = ciphertext of `input`, `tag` written)
/// or decryption (`output` = plaintext, `tag` checked), for any IV length from 1 byte (EVP's
/// GCM stops at 128 bytes). Runs OpenSSL's `CRYPTO_gcm128_*` over an AES-ECB `EVP` context.
/// `output` must be as long as `input`; the tag 1 to 16 bytes; the key 16, 24 or 32 bytes.
/// After a failed decryption `output` is zeroed.
pub fn aes_gcm_any_iv(
    key: &[u8],
    iv: &[u8],
    aad: &[u8],
    input: &[u8],
    output: &mut [u8],
    tag: &mut [u8],
    encrypt: bool,
) -> Result<(), GcmError> {
    let name = match key.len() {
        16 => c"AES-128-ECB",
        24 => c"AES-192-ECB",
        32 => c"AES-256-ECB",
        _ => return Err(GcmError::Failed),
    };
    if iv.is_empty() || output.len() != input.len() || tag.is_empty() || tag.len() > 16 {
        return Err(GcmError::Failed);
    }
    ffi::init();
    // SAFETY: every pointer handed to OpenSSL below is live for the call and of the length
    // given; the ECB context outlives the GCM128 context (dropped in reverse order of
    // declaration) and is used only through `ecb_block`.
    let r = unsafe {
        let ecb = EvpCtx(ffi::EVP_CIPHER_CTX_new());
        if ecb.0.is_null() {
            return Err(GcmError::Failed);
        }
        let cipher = ffi::EVP_CIPHER_fetch(ptr::null_mut(), name.as_ptr(), ptr::null());
        if cipher.is_null() {
            return Err(GcmError::Failed);
        }
        let ok = ffi::EVP_EncryptInit_ex(ecb.0, cipher, ptr::null_mut(), key.as_ptr(), ptr::null());
        // The context holds its own reference to the cipher.
        ffi::EVP_CIPHER_free(cipher);
        if ok != 1 || ffi::EVP_CIPHER_CTX_set_padding(ecb.0, 0) != 1 {
            return Err(GcmError::Failed);
        }
        let gcm = Gcm128(CRYPTO_gcm128_new(ecb.0 as *mut c_void, ecb_block));
        if gcm.0.is_null() {
            return Err(GcmError::Failed);
        }
        CRYPTO_gcm128_setiv(gcm.0, iv.as_ptr(), iv.len());
        if !aad.is_empty() && CRYPTO_gcm128_aad(gcm.0, aad.as_ptr(), aad.len()) != 0 {
            return Err(GcmError::Failed);
        }
        let done = if input.is_empty() {
            0
        } else if encrypt {
            CRYPTO_gcm128_encrypt(gcm.0, input.as_ptr(), output.as_mut_ptr(), input.len())
        } else {
            CRYPTO_gcm128_decrypt(gcm.0, input.as_ptr(), output.as_mut_ptr(), input.len())
        };
        if done != 0 {
            Err(GcmError::Failed)
        } else if encrypt {
            CRYPTO_gcm128_tag(gcm.0, tag.as_mut_ptr(), tag.len());
            Ok(())
        } else if CRYPTO_gcm128_finish(gcm.0, tag.as_ptr(), tag.len()) == 0 {
            Ok(())
        } else {
            Err(GcmError::TagMismatch)
        }
    };
    if r.is_err() && !encrypt {
        output.zeroize();
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn sha_matches_openssl_and_round_trips() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        for kind in [
            ShaKind::Sha1,
            ShaKind::Sha224,
            ShaKind::Sha256,
            ShaKind::Sha384,
            ShaKind::Sha512,
        ] {
            let md = match kind {
                ShaKind::Sha1 => openssl::hash::MessageDigest::sha1(),
                ShaKind::Sha224 => openssl::hash::MessageDigest::sha224(),
                ShaKind::Sha256 => openssl::hash::MessageDigest::sha256(),
                ShaKind::Sha384 => openssl::hash::MessageDigest::sha384(),
                ShaKind::Sha512 => openssl::hash::MessageDigest::sha512(),
            };
            let want = openssl::hash::hash(md, &data).unwrap();
            for split in [0, 1, 63, 64, 65, 127, 128, 129, 500, 1000] {
                let mut s = Sha::new(kind);
                s.update(&data[..split]);
                let st = s.export();
                assert_eq!(st.len(), kind.state_len());
                let mut r = Sha::import(kind, &st).unwrap();
                r.update(&data[split..]);
                let got = r.finish();
                assert_eq!(
                    hex(&got[..kind.output_len()]),
                    hex(&want),
                    "{kind:?} {split}"
                );
            }
            // Garbage is refused.
            let mut st = Sha::new(kind).export();
            assert!(Sha::import(kind, &st[1..]).is_none());
            let num_at = st.len() - if kind == ShaKind::Sha1 { 4 } else { 8 };
            st[num_at..num_at + 4].copy_from_slice(&(kind.block_len() as u32).to_le_bytes());
            assert!(Sha::import(kind, &st).is_none(), "num out of range");
            st[num_at..num_at + 4].copy_from_slice(&1u32.to_le_bytes());
            assert!(
                Sha::import(kind, &st).is_none(),
                "num disagrees with the bit count"
            );
        }
        let st = Sha::new(ShaKind::Sha256).export();
        assert!(
            Sha::import(ShaKind::Sha224, &st).is_none(),
            "md_len differs"
        );
    }

    #[test]
    fn hmac_and_cmac() {
        // RFC 4231 test case 2.
        let mut m = Mac::hmac(c"SHA256", b"Jefe").unwrap();
        m.update(b"what do ya want for nothing?").unwrap();
        let out = m.finish().unwrap();
        assert_eq!(
            hex(&out[..m.size()]),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // RFC 4493 example 1 (empty message).
        let key = [
            0x2b, 0x7e, 0x15, 0x16, 0x28, 0xae, 0xd2, 0xa6, 0xab, 0xf7, 0x15, 0x88, 0x09, 0xcf,
            0x4f, 0x3c,
        ];
        let mut c = Mac::cmac(c"AES-128-CBC", &key).unwrap();
        let c2 = c.try_clone().unwrap();
        let out = c.finish().unwrap();
        assert_eq!(hex(&out[..16]), "bb1d6929e95937287fa37d129b756746");
        drop(c2);
    }

    #[test]
    fn gcm_any_iv_matches_evp() {
        let key = [7u8; 16];
        let data = b"0123456789abcdef0123";
        for ivlen in [1usize, 12, 60, 128] {
            let iv: Vec<u8> = (0..ivlen).map(|i| (i * 3) as u8).collect();
            let mut tag = [0u8; 16];
            let want = openssl::symm::encrypt_aead(
                openssl::symm::Cipher::aes_128_gcm(),
                &key,
                Some(&iv),
                b"aad",
                data,
                &mut tag,
            )
            .unwrap();
            let mut ct = vec![0u8; data.len()];
            let mut t = [0u8; 16];
            aes_gcm_any_iv(&key, &iv, b"aad", data, &mut ct, &mut t, true).unwrap();
            assert_eq!(ct, want);
            assert_eq!(t, tag);
            let mut pt = vec![0u8; data.len()];
            aes_gcm_any_iv(&key, &iv, b"aad", &ct, &mut pt, &mut t, false).unwrap();
            assert_eq!(&pt, data);
            t[0] ^= 1;
            let r = aes_gcm_any_iv(&key, &iv, b"aad", &ct, &mut pt, &mut t, false);
            assert_eq!(r, Err(GcmError::TagMismatch));
            assert_eq!(pt, vec![0u8; data.len()]);
        }
        let mut t = [0u8; 16];
        let r = aes_gcm_any_iv(&[0; 15], &[0; 12], b"", b"", &mut [], &mut t, true);
        assert_eq!(r, Err(GcmError::Failed));
    }
}
