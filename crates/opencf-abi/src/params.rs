//! Mechanism parameters (`CK_MECHANISM.pParameter`) and message parameters (the `pParameter`
//! of `C_EncryptMessage` and friends), parsed into [`MechParam`] and [`MessageParams`].
//!
//! A structure is recognised by the mechanism type and must have exactly its C size; inner
//! pointers that are NULL with a nonzero length, or inner lengths above 256 MiB, are
//! `CKR_MECHANISM_PARAM_INVALID`.
//!
//! `CKM_PKCS5_PBKD2` accepts both `CK_PKCS5_PBKD2_PARAMS2` (3.0: `ulPasswordLen` is the length)
//! and the older `CK_PKCS5_PBKD2_PARAMS` (2.x: `ulPasswordLen` is a *pointer* to the length).
//! Both have the same size, so the field is read as a length when it is ≤ 65536 (Linux never
//! maps user memory below 64 KiB, `vm.mmap_min_addr`). A larger value is a pointer only if it
//! points at readable memory holding a plausible length (≤ 256 MiB); the memory is probed
//! through a pipe, where an unmapped address is an `EFAULT` answer, not a crash. Anything else
//! is a 3.0 length, so a password longer than 64 KiB works too.

use std::ffi::c_void;
use std::mem::size_of;

use crate::convert::{copy_inner, inner_slice};
use crate::sys::*;
use crate::types::*;

const INVALID: CK_RV = CKR_MECHANISM_PARAM_INVALID;

/// Largest value of `CK_PKCS5_PBKD2_PARAMS*.ulPasswordLen` read as a length (see module docs).
const PBKDF2_MAX_PASSWORD_LEN: CK_ULONG = 65536;

/// The `CK_ULONG` at address `addr`, if that memory is readable: written into a pipe by the
/// kernel, which answers `EFAULT` for an address the process cannot read instead of faulting.
fn readable_ulong(addr: usize) -> Option<CK_ULONG> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors `pipe2` writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return None;
    }
    let n = size_of::<CK_ULONG>();
    let mut v: CK_ULONG = 0;
    // SAFETY: `write` only reads `n` bytes at `addr` in the kernel, which checks the address
    // (EFAULT); `read` writes at most `n` bytes into `v`; both descriptors are ours and closed.
    let ok = unsafe {
        let ok = libc::write(fds[1], addr as *const c_void, n) == n as isize
            && libc::read(fds[0], (&mut v as *mut CK_ULONG).cast(), n) == n as isize;
        libc::close(fds[0]);
        libc::close(fds[1]);
        ok
    };
    ok.then_some(v)
}

/// Mechanisms whose parameter is `CK_MAC_GENERAL_PARAMS` (the MAC length).
const MAC_GENERAL: &[CK_MECHANISM_TYPE] = &[
    CKM_MD2_HMAC_GENERAL,
    CKM_MD5_HMAC_GENERAL,
    CKM_SHA_1_HMAC_GENERAL,
    CKM_RIPEMD128_HMAC_GENERAL,
    CKM_RIPEMD160_HMAC_GENERAL,
    CKM_SHA224_HMAC_GENERAL,
    CKM_SHA256_HMAC_GENERAL,
    CKM_SHA384_HMAC_GENERAL,
    CKM_SHA512_HMAC_GENERAL,
    CKM_SHA512_224_HMAC_GENERAL,
    CKM_SHA512_256_HMAC_GENERAL,
    CKM_SHA512_T_HMAC_GENERAL,
    CKM_SHA3_224_HMAC_GENERAL,
    CKM_SHA3_256_HMAC_GENERAL,
    CKM_SHA3_384_HMAC_GENERAL,
    CKM_SHA3_512_HMAC_GENERAL,
    CKM_BLAKE2B_160_HMAC_GENERAL,
    CKM_BLAKE2B_256_HMAC_GENERAL,
    CKM_BLAKE2B_384_HMAC_GENERAL,
    CKM_BLAKE2B_512_HMAC_GENERAL,
    CKM_AES_MAC_GENERAL,
    CKM_AES_CMAC_GENERAL,
    CKM_DES3_MAC_GENERAL,
    CKM_DES3_CMAC_GENERAL,
];

/// Mechanisms whose parameter is `CK_RSA_PKCS_PSS_PARAMS`.
const RSA_PSS: &[CK_MECHANISM_TYPE] = &[
    CKM_RSA_PKCS_PSS,
    CKM_SHA1_RSA_PKCS_PSS,
    CKM_SHA224_RSA_PKCS_PSS,
    CKM_SHA256_RSA_PKCS_PSS,
    CKM_SHA384_RSA_PKCS_PSS,
    CKM_SHA512_RSA_PKCS_PSS,
    CKM_SHA3_224_RSA_PKCS_PSS,
    CKM_SHA3_256_RSA_PKCS_PSS,
    CKM_SHA3_384_RSA_PKCS_PSS,
    CKM_SHA3_512_RSA_PKCS_PSS,
];

/// Mechanisms with an optional `CK_SIGN_ADDITIONAL_CONTEXT` (ML-DSA, SLH-DSA).
const SIGN_CONTEXT: &[CK_MECHANISM_TYPE] = &[
    CKM_ML_DSA,
    CKM_HASH_ML_DSA_SHA224,
    CKM_HASH_ML_DSA_SHA256,
    CKM_HASH_ML_DSA_SHA384,
    CKM_HASH_ML_DSA_SHA512,
    CKM_HASH_ML_DSA_SHA3_224,
    CKM_HASH_ML_DSA_SHA3_256,
    CKM_HASH_ML_DSA_SHA3_384,
    CKM_HASH_ML_DSA_SHA3_512,
    CKM_HASH_ML_DSA_SHAKE128,
    CKM_HASH_ML_DSA_SHAKE256,
    CKM_SLH_DSA,
    CKM_HASH_SLH_DSA_SHA224,
    CKM_HASH_SLH_DSA_SHA256,
    CKM_HASH_SLH_DSA_SHA384,
    CKM_HASH_SLH_DSA_SHA512,
    CKM_HASH_SLH_DSA_SHA3_224,
    CKM_HASH_SLH_DSA_SHA3_256,
    CKM_HASH_SLH_DSA_SHA3_384,
    CKM_HASH_SLH_DSA_SHA3_512,
    CKM_HASH_SLH_DSA_SHAKE128,
    CKM_HASH_SLH_DSA_SHAKE256,
];

/// Reads a structure of exactly `size_of::<T>()` bytes.
///
/// # Safety
/// A non-NULL `p` must be valid for reading `len` bytes.
unsafe fn read_struct<T>(p: *const c_void, len: CK_ULONG) -> CkResult<T> {
    if p.is_null() || len != size_of::<T>() as CK_ULONG {
        return Err(INVALID);
    }
    // SAFETY: `p` is valid for `size_of::<T>()` bytes; every `T` used here is plain data
    // (integers, byte arrays and raw pointers), valid for any bit pattern.
    Ok(unsafe { (p as *const T).read_unaligned() })
}

/// Copies an inner byte string of a parameter structure.
///
/// # Safety
/// A non-NULL `p` must be valid for reading `len` bytes.
unsafe fn inner<T>(p: *const T, len: CK_ULONG) -> CkResult<Vec<u8>> {
    // SAFETY: per the function's contract.
    unsafe { copy_inner(p as *const c_void, len, INVALID) }
}

/// Reads the caller's `CK_MECHANISM` (NULL is `CKR_ARGUMENTS_BAD`) and parses its parameter.
///
/// # Safety
/// A non-NULL `p` must be valid for reading a `CK_MECHANISM` whose parameter is valid for its
/// length, with inner pointers valid for theirs.
pub(crate) unsafe fn mechanism(p: *const CK_MECHANISM) -> CkResult<Mechanism> {
    if p.is_null() {
        return Err(CKR_ARGUMENTS_BAD);
    }
    // SAFETY: per the function's contract.
    unsafe {
        let m = p.read_unaligned();
        let param = parse(m.mechanism, m.pParameter, m.ulParameterLen)?;
        Ok(Mechanism {
            mechanism: m.mechanism,
            param,
        })
    }
}

/// A `CK_GCM_PARAMS`, checked, its IV and AAD still the caller's bytes.
struct GcmRef<'a> {
    iv: &'a [u8],
    iv_bits: CK_ULONG,
    aad: &'a [u8],
    tag_bits: CK_ULONG,
}

/// Reads a `CK_GCM_PARAMS` parameter for [`parse`] and [`parse_into`].
///
/// # Safety
/// As for [`mechanism`], for the returned lifetime.
unsafe fn gcm<'a>(p: *const c_void, len: CK_ULONG) -> CkResult<GcmRef<'a>> {
    // SAFETY (whole body): per the function's contract.
    unsafe {
        let s: CK_GCM_PARAMS = read_struct(p, len)?;
        Ok(GcmRef {
            iv: inner_slice(s.pIv as *const c_void, s.ulIvLen, INVALID)?,
            iv_bits: s.ulIvBits,
            aad: inner_slice(s.pAAD as *const c_void, s.ulAADLen, INVALID)?,
            tag_bits: s.ulTagBits,
        })
    }
}

/// As [`parse`], into `dst`: a GCM parameter that replaces a GCM parameter reuses its IV and
/// AAD buffers (a framework keeping a copy of each init's parameter allocates nothing then);
/// any other parameter replaces `dst`. On error `dst` is unspecified but valid.
///
/// # Safety
/// As for [`mechanism`].
pub(crate) unsafe fn parse_into(
    mech: CK_MECHANISM_TYPE,
    p: *const c_void,
    len: CK_ULONG,
    dst: &mut MechParam,
) -> CkResult<()> {
    if let (
        CKM_AES_GCM,
        MechParam::Gcm {
            iv,
            iv_bits,
            aad,
            tag_bits,
        },
    ) = (mech, &mut *dst)
    {
        // SAFETY: per the function's contract.
        let g = unsafe { gcm(p, len) }?;
        iv.clear();
        iv.extend_from_slice(g.iv);
        aad.clear();
        aad.extend_from_slice(g.aad);
        *iv_bits = g.iv_bits;
        *tag_bits = g.tag_bits;
        return Ok(());
    }
    // SAFETY: per the function's contract.
    *dst = unsafe { parse(mech, p, len) }?;
    Ok(())
}

/// Reads only the mechanism type of a `CK_MECHANISM` (for calls whose mechanism takes no
/// parameter here, such as `C_MessageEncryptInit`).
///
/// # Safety
/// `p` is NULL or points to a readable `CK_MECHANISM`.
pub(crate) unsafe fn mechanism_type(p: *const CK_MECHANISM) -> CkResult<CK_MECHANISM_TYPE> {
    if p.is_null() {
        return Err(CKR_ARGUMENTS_BAD);
    }
    // SAFETY: per the function's contract.
    Ok(unsafe { p.read_unaligned() }.mechanism)
}

/// Parses a mechanism parameter by mechanism type.
///
/// # Safety
/// As for [`mechanism`].
pub(crate) unsafe fn parse(
    mech: CK_MECHANISM_TYPE,
    p: *const c_void,
    len: CK_ULONG,
) -> CkResult<MechParam> {
    if p.is_null() && len > 0 {
        return Err(INVALID);
    }
    // SAFETY (whole body): per the function's contract.
    unsafe {
        Ok(match mech {
            CKM_AES_CTR => {
                let s: CK_AES_CTR_PARAMS = read_struct(p, len)?;
                MechParam::AesCtr {
                    counter_bits: s.ulCounterBits,
                    cb: s.cb,
                }
            }
            CKM_AES_GCM => {
                let g = gcm(p, len)?;
                MechParam::Gcm {
                    iv: g.iv.to_vec(),
                    iv_bits: g.iv_bits,
                    aad: g.aad.to_vec(),
                    tag_bits: g.tag_bits,
                }
            }
            CKM_CHACHA20_POLY1305 => {
                let s: CK_SALSA20_CHACHA20_POLY1305_PARAMS = read_struct(p, len)?;
                MechParam::ChaCha20Poly1305 {
                    nonce: inner(s.pNonce, s.ulNonceLen)?,
                    aad: inner(s.pAAD, s.ulAADLen)?,
                }
            }
            m if MAC_GENERAL.contains(&m) => MechParam::Ulong(read_struct::<CK_ULONG>(p, len)?),
            m if RSA_PSS.contains(&m) => {
                let s: CK_RSA_PKCS_PSS_PARAMS = read_struct(p, len)?;
                MechParam::RsaPss {
                    hash_alg: s.hashAlg,
                    mgf: s.mgf,
                    salt_len: s.sLen,
                }
            }
            CKM_RSA_PKCS_OAEP => {
                let s: CK_RSA_PKCS_OAEP_PARAMS = read_struct(p, len)?;
                MechParam::RsaOaep {
                    hash_alg: s.hashAlg,
                    mgf: s.mgf,
                    source: s.source,
                    source_data: inner(s.pSourceData, s.ulSourceDataLen)?,
                }
            }
            CKM_ECDH1_DERIVE | CKM_ECDH1_COFACTOR_DERIVE => {
                let s: CK_ECDH1_DERIVE_PARAMS = read_struct(p, len)?;
                MechParam::Ecdh1 {
                    kdf: s.kdf,
                    shared_data: inner(s.pSharedData, s.ulSharedDataLen)?,
                    public_data: inner(s.pPublicData, s.ulPublicDataLen)?,
                }
            }
            CKM_PKCS5_PBKD2 => {
                let s: CK_PKCS5_PBKD2_PARAMS2 = read_struct(p, len)?;
                let password_len = if s.ulPasswordLen <= PBKDF2_MAX_PASSWORD_LEN {
                    s.ulPasswordLen
                } else {
                    // The 2.x structure: a pointer to the length (see the module docs).
                    match readable_ulong(s.ulPasswordLen as usize) {
                        Some(n) if n <= crate::convert::MAX_LEN => n,
                        _ => s.ulPasswordLen,
                    }
                };
                MechParam::Pbkdf2 {
                    salt_source: s.saltSource,
                    salt: inner(s.pSaltSourceData, s.ulSaltSourceDataLen)?,
                    iterations: s.iterations,
                    prf: s.prf,
                    password: inner(s.pPassword, password_len)?,
                }
            }
            CKM_HKDF_DERIVE | CKM_HKDF_DATA => {
                let s: CK_HKDF_PARAMS = read_struct(p, len)?;
                MechParam::Hkdf {
                    extract: s.bExtract != CK_FALSE,
                    expand: s.bExpand != CK_FALSE,
                    prf_hash: s.prfHashMechanism,
                    salt_type: s.ulSaltType,
                    salt: inner(s.pSalt, s.ulSaltLen)?,
                    salt_key: s.hSaltKey,
                    info: inner(s.pInfo, s.ulInfoLen)?,
                }
            }
            CKM_EDDSA if len == 0 => MechParam::None,
            CKM_EDDSA => {
                let s: CK_EDDSA_PARAMS = read_struct(p, len)?;
                MechParam::Eddsa {
                    ph: s.phFlag != CK_FALSE,
                    context: inner(s.pContextData, s.ulContextDataLen)?,
                }
            }
            CKM_HASH_ML_DSA | CKM_HASH_SLH_DSA if len == 0 => MechParam::None,
            CKM_HASH_ML_DSA | CKM_HASH_SLH_DSA => {
                let s: CK_HASH_SIGN_ADDITIONAL_CONTEXT = read_struct(p, len)?;
                MechParam::HashSignContext {
                    hedge: s.hedgeVariant,
                    context: inner(s.pContext, s.ulContextLen)?,
                    hash: s.hash,
                }
            }
            m if SIGN_CONTEXT.contains(&m) && len == 0 => MechParam::None,
            m if SIGN_CONTEXT.contains(&m) => {
                let s: CK_SIGN_ADDITIONAL_CONTEXT = read_struct(p, len)?;
                MechParam::SignContext {
                    hedge: s.hedgeVariant,
                    context: inner(s.pContext, s.ulContextLen)?,
                }
            }
            // IVs (CBC, CBC_PAD, OFB, CFB, CTS, key wrap) and structures this layer does not
            // know: raw bytes.
            _ if len == 0 => MechParam::None,
            _ => MechParam::Bytes(inner(p, len)?),
        })
    }
}

/// The message parameters of one `C_EncryptMessage*`/`C_DecryptMessage*` call, copied in,
/// with what is needed to copy the outputs back.
pub(crate) struct MessageIo {
    /// What the backend sees.
    pub(crate) params: MessageParams,
    /// The caller's IV (GCM) buffer and its length.
    iv_out: (*mut u8, usize),
    /// The caller's tag buffer and its length.
    tag_out: (*mut u8, usize),
    /// An IV generator is in use (GCM with `ivGenerator != CKG_NO_GENERATE`).
    generated_iv: bool,
}

impl MessageIo {
    /// Reads `CK_GCM_MESSAGE_PARAMS` or `CK_SALSA20_CHACHA20_POLY1305_MSG_PARAMS` (told
    /// apart by size). NULL is `CKR_ARGUMENTS_BAD`; any other size or a bad inner pointer is
    /// `CKR_MECHANISM_PARAM_INVALID`. The tag is read when decrypting (it is input there).
    ///
    /// # Safety
    /// A non-NULL `p` must be valid for reading `len` bytes, with inner pointers valid for
    /// their lengths (readable, and writable for the outputs) until the call returns.
    pub(crate) unsafe fn read(p: *mut c_void, len: CK_ULONG, encrypt: bool) -> CkResult<MessageIo> {
        if p.is_null() {
            return Err(CKR_ARGUMENTS_BAD);
        }
        // SAFETY (whole body): per the function's contract.
        unsafe {
            if len == size_of::<CK_GCM_MESSAGE_PARAMS>() as CK_ULONG {
                let s: CK_GCM_MESSAGE_PARAMS = read_struct(p, len)?;
                if s.ulTagBits > 128 {
                    return Err(INVALID);
                }
                let tag_len = (s.ulTagBits / 8) as usize;
                let iv = inner(s.pIv, s.ulIvLen)?;
                let tag = tag_in(s.pTag, tag_len, encrypt)?;
                Ok(MessageIo {
                    iv_out: (s.pIv, iv.len()),
                    tag_out: (s.pTag, tag_len),
                    generated_iv: s.ivGenerator != CKG_NO_GENERATE,
                    params: MessageParams::Gcm {
                        iv,
                        iv_fixed_bits: s.ulIvFixedBits,
                        iv_generator: s.ivGenerator,
                        tag,
                        tag_bits: s.ulTagBits,
                    },
                })
            } else if len == size_of::<CK_SALSA20_CHACHA20_POLY1305_MSG_PARAMS>() as CK_ULONG {
                let s: CK_SALSA20_CHACHA20_POLY1305_MSG_PARAMS = read_struct(p, len)?;
                let nonce = inner(s.pNonce, s.ulNonceLen)?;
                let tag = tag_in(s.pTag, 16, encrypt)?;
                Ok(MessageIo {
                    iv_out: (s.pNonce, nonce.len()),
                    tag_out: (s.pTag, 16),
                    generated_iv: false,
                    params: MessageParams::ChaCha20Poly1305 { nonce, tag },
                })
            } else {
                Err(INVALID)
            }
        }
    }

    /// Copies the outputs back to the caller's structure: the IV when generated (`iv`), and
    /// the tag (`tag`), each truncated to the caller's buffer.
    ///
    /// # Safety
    /// As for [`MessageIo::read`].
    pub(crate) unsafe fn write_back(&self, iv: bool, tag: bool) {
        let (iv_src, tag_src) = match &self.params {
            MessageParams::Gcm { iv, tag, .. } => (iv, tag),
            MessageParams::ChaCha20Poly1305 { nonce, tag } => (nonce, tag),
        };
        // SAFETY: per the function's contract.
        unsafe {
            if iv && self.generated_iv {
                copy_out(iv_src, self.iv_out);
            }
            if tag {
                copy_out(tag_src, self.tag_out);
            }
        }
    }
}

/// The tag buffer: read when decrypting, zeroes when encrypting (it is output then).
///
/// # Safety
/// A non-NULL `p` must be valid for reading `len` bytes.
unsafe fn tag_in(p: *const u8, len: usize, encrypt: bool) -> CkResult<Vec<u8>> {
    if len > 0 && p.is_null() {
        return Err(INVALID);
    }
    if encrypt {
        Ok(vec![0; len])
    } else {
        // SAFETY: per the function's contract.
        unsafe { inner(p, len as CK_ULONG) }
    }
}

/// # Safety
/// `dst.0` must be valid for writing `dst.1` bytes (or `dst.1` is 0).
unsafe fn copy_out(src: &[u8], dst: (*mut u8, usize)) {
    let n = src.len().min(dst.1);
    if n > 0 {
        // SAFETY: per the function's contract; `src` is our own buffer.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.0, n) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr;

    fn parse_struct<T>(mech: CK_MECHANISM_TYPE, s: &T) -> CkResult<MechParam> {
        let m = CK_MECHANISM {
            mechanism: mech,
            pParameter: s as *const T as *mut c_void,
            ulParameterLen: size_of::<T>() as CK_ULONG,
        };
        unsafe { mechanism(&m) }.map(|m| m.param)
    }

    #[test]
    fn null_mechanism() {
        assert_eq!(
            unsafe { mechanism(ptr::null()) }.unwrap_err(),
            CKR_ARGUMENTS_BAD
        );
    }

    /// `parse_into` gives what `parse` gives, whatever `dst` held before, and reuses a GCM
    /// parameter's buffers.
    #[test]
    fn parse_into_equals_parse_and_reuses_gcm_buffers() {
        let mut iv = [7u8; 16];
        let mut aad = *b"additional data";
        let gcm = |iv_len: usize, aad_len: usize, iv: &mut [u8], aad: &mut [u8]| CK_GCM_PARAMS {
            pIv: iv.as_mut_ptr(),
            ulIvLen: iv_len as CK_ULONG,
            ulIvBits: 8 * iv_len as CK_ULONG,
            pAAD: aad.as_mut_ptr(),
            ulAADLen: aad_len as CK_ULONG,
            ulTagBits: 96,
        };
        let into = |mech: CK_MECHANISM_TYPE, s: &CK_GCM_PARAMS, dst: &mut MechParam| unsafe {
            parse_into(
                mech,
                s as *const _ as *const c_void,
                size_of::<CK_GCM_PARAMS>() as _,
                dst,
            )
        };
        let mut dst = MechParam::Bytes(vec![1, 2, 3]);
        let big = gcm(16, 15, &mut iv, &mut aad);
        into(CKM_AES_GCM, &big, &mut dst).unwrap();
        assert_eq!(dst, parse_struct(CKM_AES_GCM, &big).unwrap());
        let MechParam::Gcm { iv: ref v, .. } = dst else {
            panic!("GCM")
        };
        let buffer = v.as_ptr();
        // A shorter IV and AAD into the same buffers.
        let small = gcm(12, 3, &mut iv, &mut aad);
        into(CKM_AES_GCM, &small, &mut dst).unwrap();
        assert_eq!(dst, parse_struct(CKM_AES_GCM, &small).unwrap());
        let MechParam::Gcm { iv: ref v, .. } = dst else {
            panic!("GCM")
        };
        assert_eq!(v.as_ptr(), buffer, "the IV buffer was reused");
        // A bad parameter is refused as by parse.
        let bad = CK_GCM_PARAMS {
            pAAD: ptr::null_mut(),
            ..small
        };
        assert_eq!(into(CKM_AES_GCM, &bad, &mut dst).unwrap_err(), INVALID);
        // Another mechanism replaces the GCM parameter.
        let mac: CK_ULONG = 10;
        let raw = CK_MECHANISM {
            mechanism: CKM_SHA256_HMAC_GENERAL,
            pParameter: &mac as *const CK_ULONG as *mut c_void,
            ulParameterLen: size_of::<CK_ULONG>() as CK_ULONG,
        };
        let mut m = Mechanism::new(CKM_AES_GCM);
        m.param = dst;
        unsafe { RawMechanism::new(&raw) }
            .unwrap()
            .parse_into(&mut m)
            .unwrap();
        assert_eq!(m.mechanism, CKM_SHA256_HMAC_GENERAL);
        assert_eq!(m.param, MechParam::Ulong(10));
    }

    #[test]
    fn gcm() {
        let mut iv = [1u8; 12];
        let mut aad = *b"header";
        let s = CK_GCM_PARAMS {
            pIv: iv.as_mut_ptr(),
            ulIvLen: 12,
            ulIvBits: 96,
            pAAD: aad.as_mut_ptr(),
            ulAADLen: 6,
            ulTagBits: 128,
        };
        assert_eq!(
            parse_struct(CKM_AES_GCM, &s).unwrap(),
            MechParam::Gcm {
                iv: vec![1; 12],
                iv_bits: 96,
                aad: b"header".to_vec(),
                tag_bits: 128
            }
        );
        // Inner NULL with a length.
        let bad = CK_GCM_PARAMS {
            pAAD: ptr::null_mut(),
            ..s
        };
        assert_eq!(parse_struct(CKM_AES_GCM, &bad).unwrap_err(), INVALID);
        // Empty AAD with NULL is fine.
        let empty = CK_GCM_PARAMS {
            pAAD: ptr::null_mut(),
            ulAADLen: 0,
            ..s
        };
        assert!(
            matches!(parse_struct(CKM_AES_GCM, &empty), Ok(MechParam::Gcm { aad, .. }) if aad.is_empty())
        );
        // Wrong length (the pre-2.40 structure without ulIvBits).
        let m = CK_MECHANISM {
            mechanism: CKM_AES_GCM,
            pParameter: &s as *const _ as *mut c_void,
            ulParameterLen: 40,
        };
        assert_eq!(unsafe { mechanism(&m) }.unwrap_err(), INVALID);
        // Missing parameter.
        let m = CK_MECHANISM {
            mechanism: CKM_AES_GCM,
            pParameter: ptr::null_mut(),
            ulParameterLen: 0,
        };
        assert_eq!(unsafe { mechanism(&m) }.unwrap_err(), INVALID);
    }

    #[test]
    fn pss_and_oaep() {
        let pss = CK_RSA_PKCS_PSS_PARAMS {
            hashAlg: CKM_SHA256,
            mgf: CKG_MGF1_SHA256,
            sLen: 32,
        };
        for m in [
            CKM_RSA_PKCS_PSS,
            CKM_SHA256_RSA_PKCS_PSS,
            CKM_SHA3_512_RSA_PKCS_PSS,
        ] {
            assert_eq!(
                parse_struct(m, &pss).unwrap(),
                MechParam::RsaPss {
                    hash_alg: CKM_SHA256,
                    mgf: CKG_MGF1_SHA256,
                    salt_len: 32
                }
            );
        }
        let mut label = *b"label";
        let oaep = CK_RSA_PKCS_OAEP_PARAMS {
            hashAlg: CKM_SHA_1,
            mgf: CKG_MGF1_SHA1,
            source: CKZ_DATA_SPECIFIED,
            pSourceData: label.as_mut_ptr() as *mut c_void,
            ulSourceDataLen: 5,
        };
        assert_eq!(
            parse_struct(CKM_RSA_PKCS_OAEP, &oaep).unwrap(),
            MechParam::RsaOaep {
                hash_alg: CKM_SHA_1,
                mgf: CKG_MGF1_SHA1,
                source: CKZ_DATA_SPECIFIED,
                source_data: b"label".to_vec()
            }
        );
        // A PSS structure given to OAEP has the wrong size.
        assert_eq!(parse_struct(CKM_RSA_PKCS_OAEP, &pss).unwrap_err(), INVALID);
        let bad = CK_RSA_PKCS_OAEP_PARAMS {
            pSourceData: ptr::null_mut(),
            ..oaep
        };
        assert_eq!(parse_struct(CKM_RSA_PKCS_OAEP, &bad).unwrap_err(), INVALID);
    }

    #[test]
    fn simple_params() {
        let ctr = CK_AES_CTR_PARAMS {
            ulCounterBits: 32,
            cb: [9; 16],
        };
        assert_eq!(
            parse_struct(CKM_AES_CTR, &ctr).unwrap(),
            MechParam::AesCtr {
                counter_bits: 32,
                cb: [9; 16]
            }
        );
        let len: CK_ULONG = 16;
        assert_eq!(
            parse_struct(CKM_SHA256_HMAC_GENERAL, &len).unwrap(),
            MechParam::Ulong(16)
        );
        assert_eq!(
            parse_struct(CKM_AES_CMAC_GENERAL, &len).unwrap(),
            MechParam::Ulong(16)
        );
        let iv = [5u8; 16];
        assert_eq!(
            parse_struct(CKM_AES_CBC_PAD, &iv).unwrap(),
            MechParam::Bytes(vec![5; 16])
        );
        let m = CK_MECHANISM {
            mechanism: CKM_SHA256,
            pParameter: ptr::null_mut(),
            ulParameterLen: 0,
        };
        assert_eq!(unsafe { mechanism(&m) }.unwrap().param, MechParam::None);
        let m = CK_MECHANISM {
            mechanism: CKM_AES_CBC,
            pParameter: ptr::null_mut(),
            ulParameterLen: 16,
        };
        assert_eq!(unsafe { mechanism(&m) }.unwrap_err(), INVALID);
        let m = CK_MECHANISM {
            mechanism: CKM_EDDSA,
            pParameter: ptr::null_mut(),
            ulParameterLen: 0,
        };
        assert_eq!(unsafe { mechanism(&m) }.unwrap().param, MechParam::None);
        let mut ctx = *b"ctx";
        let ed = CK_EDDSA_PARAMS {
            phFlag: CK_TRUE,
            ulContextDataLen: 3,
            pContextData: ctx.as_mut_ptr(),
        };
        assert_eq!(
            parse_struct(CKM_EDDSA, &ed).unwrap(),
            MechParam::Eddsa {
                ph: true,
                context: b"ctx".to_vec()
            }
        );
        let sc = CK_SIGN_ADDITIONAL_CONTEXT {
            hedgeVariant: CKH_DETERMINISTIC_REQUIRED,
            pContext: ctx.as_mut_ptr(),
            ulContextLen: 3,
        };
        assert_eq!(
            parse_struct(CKM_ML_DSA, &sc).unwrap(),
            MechParam::SignContext {
                hedge: CKH_DETERMINISTIC_REQUIRED,
                context: b"ctx".to_vec()
            }
        );
        let hsc = CK_HASH_SIGN_ADDITIONAL_CONTEXT {
            hedgeVariant: CKH_HEDGE_PREFERRED,
            pContext: ptr::null_mut(),
            ulContextLen: 0,
            hash: CKM_SHA256,
        };
        assert_eq!(
            parse_struct(CKM_HASH_ML_DSA, &hsc).unwrap(),
            MechParam::HashSignContext {
                hedge: CKH_HEDGE_PREFERRED,
                context: vec![],
                hash: CKM_SHA256
            }
        );
    }

    #[test]
    fn derive_params() {
        let mut public = [4u8; 65];
        let ecdh = CK_ECDH1_DERIVE_PARAMS {
            kdf: CKD_NULL,
            ulSharedDataLen: 0,
            pSharedData: ptr::null_mut(),
            ulPublicDataLen: 65,
            pPublicData: public.as_mut_ptr(),
        };
        assert_eq!(
            parse_struct(CKM_ECDH1_DERIVE, &ecdh).unwrap(),
            MechParam::Ecdh1 {
                kdf: CKD_NULL,
                shared_data: vec![],
                public_data: vec![4; 65]
            }
        );
        let mut salt = *b"salt";
        let mut info = *b"info";
        let hkdf = CK_HKDF_PARAMS {
            bExtract: CK_TRUE,
            bExpand: CK_TRUE,
            prfHashMechanism: CKM_SHA256,
            ulSaltType: CKF_HKDF_SALT_DATA,
            pSalt: salt.as_mut_ptr(),
            ulSaltLen: 4,
            hSaltKey: 0,
            pInfo: info.as_mut_ptr(),
            ulInfoLen: 4,
        };
        assert!(matches!(
            parse_struct(CKM_HKDF_DERIVE, &hkdf).unwrap(),
            MechParam::Hkdf { extract: true, expand: true, ref salt, ref info, .. }
                if salt == b"salt" && info == b"info"
        ));
    }

    #[test]
    fn pbkdf2_both_layouts() {
        let mut salt = *b"NaCl";
        let mut password = *b"password";
        let v2 = CK_PKCS5_PBKD2_PARAMS2 {
            saltSource: CKZ_SALT_SPECIFIED,
            pSaltSourceData: salt.as_mut_ptr() as *mut c_void,
            ulSaltSourceDataLen: 4,
            iterations: 1000,
            prf: CKP_PKCS5_PBKD2_HMAC_SHA256,
            pPrfData: ptr::null_mut(),
            ulPrfDataLen: 0,
            pPassword: password.as_mut_ptr(),
            ulPasswordLen: 8,
        };
        let expect = MechParam::Pbkdf2 {
            salt_source: CKZ_SALT_SPECIFIED,
            salt: b"NaCl".to_vec(),
            iterations: 1000,
            prf: CKP_PKCS5_PBKD2_HMAC_SHA256,
            password: b"password".to_vec(),
        };
        assert_eq!(parse_struct(CKM_PKCS5_PBKD2, &v2).unwrap(), expect);
        let mut len: CK_ULONG = 8;
        let v1 = CK_PKCS5_PBKD2_PARAMS {
            saltSource: CKZ_SALT_SPECIFIED,
            pSaltSourceData: salt.as_mut_ptr() as *mut c_void,
            ulSaltSourceDataLen: 4,
            iterations: 1000,
            prf: CKP_PKCS5_PBKD2_HMAC_SHA256,
            pPrfData: ptr::null_mut(),
            ulPrfDataLen: 0,
            pPassword: password.as_mut_ptr(),
            ulPasswordLen: &mut len,
        };
        assert_eq!(parse_struct(CKM_PKCS5_PBKD2, &v1).unwrap(), expect);
        // A 3.0 length above 64 KiB is a length, not an address to read.
        let long = vec![7u8; 70_000];
        let v2_long = CK_PKCS5_PBKD2_PARAMS2 {
            pPassword: long.as_ptr() as *mut u8,
            ulPasswordLen: 65_537,
            ..v2
        };
        match parse_struct(CKM_PKCS5_PBKD2, &v2_long).unwrap() {
            MechParam::Pbkdf2 { password, .. } => assert_eq!(password, &long[..65_537]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn message_params() {
        let mut iv = [0u8; 12];
        let mut tag = [0u8; 16];
        let mut gcm = CK_GCM_MESSAGE_PARAMS {
            pIv: iv.as_mut_ptr(),
            ulIvLen: 12,
            ulIvFixedBits: 0,
            ivGenerator: CKG_GENERATE_RANDOM,
            pTag: tag.as_mut_ptr(),
            ulTagBits: 128,
        };
        let p = &mut gcm as *mut _ as *mut c_void;
        let len = size_of::<CK_GCM_MESSAGE_PARAMS>() as CK_ULONG;
        let mut io = unsafe { MessageIo::read(p, len, true) }.unwrap();
        if let MessageParams::Gcm { iv, tag, .. } = &mut io.params {
            iv.fill(7);
            tag.fill(8);
        }
        unsafe { io.write_back(true, true) };
        assert_eq!(iv, [7; 12]);
        assert_eq!(tag, [8; 16]);
        assert_eq!(
            unsafe { MessageIo::read(p, len - 8, true) }.err(),
            Some(INVALID)
        );
        assert_eq!(
            unsafe { MessageIo::read(ptr::null_mut(), len, true) }.err(),
            Some(CKR_ARGUMENTS_BAD)
        );
        gcm.ulTagBits = 4096;
        let p = &mut gcm as *mut _ as *mut c_void;
        assert_eq!(
            unsafe { MessageIo::read(p, len, true) }.err(),
            Some(INVALID)
        );
    }
}

/// The caller's `CK_MECHANISM` as it came in, its parameter not parsed yet. A framework routes
/// on [`RawMechanism::mechanism`] and hands the structure on unchanged to the provider that
/// runs the operation ([`crate::provider::Provider`]), parsing it only when it must keep a
/// copy ([`RawMechanism::parse`]). It cannot outlive the call that received it.
#[derive(Clone, Copy)]
pub struct RawMechanism<'a> {
    ptr: *const CK_MECHANISM,
    mechanism: CK_MECHANISM_TYPE,
    _caller: std::marker::PhantomData<&'a CK_MECHANISM>,
}

impl std::fmt::Debug for RawMechanism<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RawMechanism({:#x})", self.mechanism)
    }
}

impl RawMechanism<'_> {
    /// Wraps the caller's mechanism (NULL is `CKR_ARGUMENTS_BAD`).
    ///
    /// # Safety
    /// As for [`mechanism`], for as long as the value lives.
    pub(crate) unsafe fn new(p: *const CK_MECHANISM) -> CkResult<Self> {
        // SAFETY: per the function's contract.
        let mechanism = unsafe { mechanism_type(p)? };
        Ok(RawMechanism {
            ptr: p,
            mechanism,
            _caller: std::marker::PhantomData,
        })
    }
    /// The `CKM_*` type.
    #[inline]
    pub fn mechanism(&self) -> CK_MECHANISM_TYPE {
        self.mechanism
    }
    /// The mechanism with its parameter parsed, as the ABI layer parses it for a backend.
    pub fn parse(&self) -> CkResult<Mechanism> {
        // SAFETY: the pointer is the caller's, valid while `self` lives (see `new`).
        unsafe { mechanism(self.ptr) }
    }
    /// As [`RawMechanism::parse`], into `dst`, reusing its buffers where it can (see
    /// [`MechRef::copy_into`]).
    pub fn parse_into(&self, dst: &mut Mechanism) -> CkResult<()> {
        // SAFETY: the pointer is the caller's, valid while `self` lives (see `new`); the
        // parameter is valid for its length, as for `parse`.
        unsafe {
            let m = self.ptr.read_unaligned();
            parse_into(m.mechanism, m.pParameter, m.ulParameterLen, &mut dst.param)?;
            dst.mechanism = m.mechanism;
        }
        Ok(())
    }
    /// The pointer, to pass on to a provider.
    pub(crate) fn as_ptr(&self) -> *mut CK_MECHANISM {
        self.ptr as *mut CK_MECHANISM
    }
}

/// A mechanism as an init call received it: parsed, or still the caller's structure.
#[derive(Clone, Copy, Debug)]
pub enum MechRef<'a> {
    /// Parsed by the ABI layer or built by the caller of a provider.
    Parsed(&'a Mechanism),
    /// The caller's structure, unparsed.
    Raw(RawMechanism<'a>),
}

impl MechRef<'_> {
    /// The `CKM_*` type.
    #[inline]
    pub fn mechanism(&self) -> CK_MECHANISM_TYPE {
        match self {
            MechRef::Parsed(m) => m.mechanism,
            MechRef::Raw(r) => r.mechanism(),
        }
    }
    /// Runs `f` with the mechanism parsed: as it came, or parsed from the caller's structure.
    ///
    /// The parsed mechanism is lent from inside the parse result, not moved out of it: the move
    /// read it back in wider pieces than the parse had just written, a store-forwarding stall on
    /// every init.
    pub fn with_parsed<R>(self, f: impl FnOnce(&Mechanism) -> CkResult<R>) -> CkResult<R> {
        match self {
            MechRef::Parsed(m) => f(m),
            MechRef::Raw(r) => match &r.parse() {
                Ok(m) => f(m),
                Err(e) => Err(*e),
            },
        }
    }
    /// An owned, parsed copy.
    pub fn to_mechanism(&self) -> CkResult<Mechanism> {
        match self {
            MechRef::Parsed(m) => Ok((*m).clone()),
            MechRef::Raw(r) => r.parse(),
        }
    }
    /// An owned, parsed copy written over `dst`, whose buffers are reused when both are GCM
    /// parameters (the IV and AAD): what [`MechRef::to_mechanism`] gives, without an
    /// allocation per init for a caller that keeps one `Mechanism` for the purpose.
    pub fn copy_into(&self, dst: &mut Mechanism) -> CkResult<()> {
        match self {
            MechRef::Parsed(m) => {
                dst.clone_from(m);
                Ok(())
            }
            MechRef::Raw(r) => r.parse_into(dst),
        }
    }
}

impl<'a> From<&'a Mechanism> for MechRef<'a> {
    fn from(m: &'a Mechanism) -> Self {
        MechRef::Parsed(m)
    }
}

impl<'a> From<RawMechanism<'a>> for MechRef<'a> {
    fn from(m: RawMechanism<'a>) -> Self {
        MechRef::Raw(m)
    }
}
