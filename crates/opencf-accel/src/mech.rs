//! Mechanisms: the list, and the RSA sign and decrypt operations around the engine
//! (`CKM_AES_GCM` is in [`crate::gcm`], `CKM_AES_CTR` and `CKM_AES_ECB` in [`crate::blocks`]).
//!
//! A signature the engine computes is encoded by [`crate::pad`] (EMSA-PKCS1-v1_5 or
//! EMSA-PSS, checked against OpenSSL's in the tests). Decryption padding is OpenSSL's own
//! code, run on the key's *identity* form ([`RsaKey::identity`]: the same modulus with
//! exponents 1 and no primes, so that OpenSSL's "private operation" returns its input):
//! decrypting with it checks and strips the padding of the engine's raw result (PKCS#1 v1.5
//! type 2 with explicit rejection, or OAEP) in OpenSSL's constant-time code. The engine does
//! the exponentiation with the real exponent in between. Parameter rules are the software token's
//! (docs/SOFTTOKEN.md), so that an application sees the same answers from either provider.

use crate::pad;
use crate::rsa::RsaKey;
use crate::sched::{Scheduler, Ticket};
use opencf_abi::ossl_pk::{set_ctx_params, Param};
use opencf_abi::sys::*;
use opencf_abi::{CkResult, MechParam, Mechanism};
use openssl::md::{Md, MdRef};
use openssl::md_ctx::MdCtx;
use openssl::pkey::{PKeyRef, Private};
use openssl::pkey_ctx::{PkeyCtx, PkeyCtxRef};
use openssl::rsa::Padding;
use openssl::sign::RsaPssSaltlen;
use std::sync::Arc;
use zeroize::Zeroizing;

/// RSA mechanisms of the engine and their flags.
const RSA_MECHS: [(CK_MECHANISM_TYPE, CK_FLAGS); 11] = [
    (CKM_RSA_PKCS, CKF_SIGN | CKF_DECRYPT),
    (CKM_RSA_X_509, CKF_SIGN | CKF_DECRYPT),
    (CKM_RSA_PKCS_OAEP, CKF_DECRYPT),
    (CKM_RSA_PKCS_PSS, CKF_SIGN),
    (CKM_SHA224_RSA_PKCS, CKF_SIGN),
    (CKM_SHA256_RSA_PKCS, CKF_SIGN),
    (CKM_SHA384_RSA_PKCS, CKF_SIGN),
    (CKM_SHA512_RSA_PKCS, CKF_SIGN),
    (CKM_SHA256_RSA_PKCS_PSS, CKF_SIGN),
    (CKM_SHA384_RSA_PKCS_PSS, CKF_SIGN),
    (CKM_SHA512_RSA_PKCS_PSS, CKF_SIGN),
];

/// Key-unwrapping mechanisms (how the framework moves sensitive keys in).
const UNWRAP_MECHS: [CK_MECHANISM_TYPE; 3] =
    [CKM_AES_KEY_WRAP, CKM_AES_KEY_WRAP_KWP, CKM_AES_KEY_WRAP_PAD];

/// Mechanisms of the bulk engine (encryption and decryption with AES keys).
pub const BULK_MECHS: [CK_MECHANISM_TYPE; 3] = [CKM_AES_GCM, CKM_AES_CTR, CKM_AES_ECB];

/// The mechanism list: the RSA mechanisms and `CKM_ECDSA` only when an engine serves them,
/// `CKM_AES_GCM`, `CKM_AES_CTR` and `CKM_AES_ECB` only with the bulk engine.
pub fn list(engine: bool, bulk: bool) -> Vec<CK_MECHANISM_TYPE> {
    let rsa = RSA_MECHS.iter().map(|m| m.0);
    let engines = rsa.chain([CKM_ECDSA]).filter(|_| engine);
    let aes = BULK_MECHS.into_iter().filter(|_| bulk);
    engines.chain(aes).chain(UNWRAP_MECHS).collect()
}

/// Whether the engines serve `m` for the operation `flag` (`CKF_SIGN` or `CKF_DECRYPT`) with
/// a private key, by the flags [`info`] gives it where an engine exists: another mechanism is
/// `CKR_MECHANISM_INVALID` at init, before the key is looked at.
pub fn serves(m: CK_MECHANISM_TYPE, flag: CK_FLAGS) -> bool {
    info(true, false, m).is_ok_and(|i| i.flags & flag != 0)
}

/// `C_GetMechanismInfo`.
pub fn info(engine: bool, bulk: bool, m: CK_MECHANISM_TYPE) -> CkResult<CK_MECHANISM_INFO> {
    let aes = |flags| {
        Ok(CK_MECHANISM_INFO {
            ulMinKeySize: 16,
            ulMaxKeySize: 32,
            flags,
        })
    };
    if UNWRAP_MECHS.contains(&m) {
        return aes(CKF_UNWRAP);
    }
    if BULK_MECHS.contains(&m) && bulk {
        return aes(CKF_ENCRYPT | CKF_DECRYPT);
    }
    if m == CKM_ECDSA && engine {
        return Ok(CK_MECHANISM_INFO {
            ulMinKeySize: 256,
            ulMaxKeySize: 256,
            flags: CKF_SIGN | CKF_EC_F_P | CKF_EC_OID | CKF_EC_UNCOMPRESS,
        });
    }
    match RSA_MECHS.iter().find(|x| x.0 == m) {
        Some((_, flags)) if engine => Ok(CK_MECHANISM_INFO {
            ulMinKeySize: 2048,
            ulMaxKeySize: 4096,
            flags: *flags,
        }),
        _ => Err(CKR_MECHANISM_INVALID),
    }
}

fn md_of(hash: CK_MECHANISM_TYPE) -> Option<&'static MdRef> {
    Some(match hash {
        CKM_SHA_1 => Md::sha1(),
        CKM_SHA224 => Md::sha224(),
        CKM_SHA256 => Md::sha256(),
        CKM_SHA384 => Md::sha384(),
        CKM_SHA512 => Md::sha512(),
        CKM_SHA3_224 => Md::sha3_224(),
        CKM_SHA3_256 => Md::sha3_256(),
        CKM_SHA3_384 => Md::sha3_384(),
        CKM_SHA3_512 => Md::sha3_512(),
        _ => return None,
    })
}

/// MGF1 variants by the hash they use (`CKG_MGF1_SHA1` is 1, SHA-256 2, SHA-384 3,
/// SHA-512 4, SHA-224 5, then SHA3-224 … SHA3-512 6 … 9).
const MGF1: [CK_MECHANISM_TYPE; 9] = [
    CKM_SHA_1,
    CKM_SHA256,
    CKM_SHA384,
    CKM_SHA512,
    CKM_SHA224,
    CKM_SHA3_224,
    CKM_SHA3_256,
    CKM_SHA3_384,
    CKM_SHA3_512,
];

fn mgf_md(mgf: CK_RSA_PKCS_MGF_TYPE) -> Option<&'static MdRef> {
    let i = usize::try_from(mgf).ok()?.checked_sub(1)?;
    md_of(*MGF1.get(i)?)
}

/// No parameter, or an empty one (`CKR_MECHANISM_PARAM_INVALID` otherwise).
pub(crate) fn no_param(m: &Mechanism) -> CkResult<()> {
    match &m.param {
        MechParam::None => Ok(()),
        MechParam::Bytes(b) if b.is_empty() => Ok(()),
        _ => Err(CKR_MECHANISM_PARAM_INVALID),
    }
}

fn ossl(_: openssl::error::ErrorStack) -> CK_RV {
    CKR_FUNCTION_FAILED
}

/// PSS parameters `(hash, mgf1 hash, salt)`, checked against the mechanism's own hash and
/// the key size (`hLen + sLen + 2 ≤ emLen`).
fn pss(
    m: &Mechanism,
    want: Option<CK_MECHANISM_TYPE>,
    bits: usize,
) -> CkResult<(&'static MdRef, &'static MdRef, i32)> {
    let MechParam::RsaPss {
        hash_alg: h,
        mgf,
        salt_len,
    } = &m.param
    else {
        return Err(CKR_MECHANISM_PARAM_INVALID);
    };
    // The mechanism's own hash must be the parameter's; the salt must fit:
    // hLen + sLen + 2 <= emLen = ceil((modBits - 1) / 8).
    // Checked arithmetic: a salt length near `CK_ULONG`'s maximum must not wrap into a fit.
    let fit = |md: &MdRef, s: usize| {
        md.size()
            .checked_add(s)
            .and_then(|n| n.checked_add(2))
            .is_some_and(|n| n <= bits.saturating_sub(1).div_ceil(8))
    };
    match (md_of(*h), mgf_md(*mgf), i32::try_from(*salt_len)) {
        (Some(md), Some(mgf), Ok(salt))
            if want.is_none_or(|w| w == *h) && fit(md, salt as usize) =>
        {
            Ok((md, mgf, salt))
        }
        _ => Err(CKR_MECHANISM_PARAM_INVALID),
    }
}

fn set_pss<T>(c: &mut PkeyCtxRef<T>, mgf: &MdRef, salt: i32) -> CkResult<()> {
    c.set_rsa_padding(Padding::PKCS1_PSS).map_err(ossl)?;
    c.set_rsa_mgf1_md(mgf).map_err(ossl)?;
    c.set_rsa_pss_saltlen(RsaPssSaltlen::custom(salt))
        .map_err(ossl)
}

/// Runs `c^d mod n` on the engine. Busy queues: `CKR_DEVICE_MEMORY`; an engine fault (a
/// result that fails the public-key check): `CKR_DEVICE_ERROR`.
fn engine_op(
    sched: &Scheduler,
    ticket: &Ticket<'_>,
    key: &Arc<RsaKey>,
    c: &[u8],
) -> CkResult<Zeroizing<Vec<u8>>> {
    let pend = key.begin(c)?;
    match sched.run(ticket, key, &pend) {
        Err(_) => Err(CKR_DEVICE_MEMORY),
        Ok(None) => Err(CKR_DEVICE_ERROR),
        Ok(Some(halves)) => key.finish(&pend, halves),
    }
}

/// A private-key operation up to the engine ([`SignOp::prepare`], [`DecryptOp::prepare`]).
pub enum Prepared<'s> {
    /// Done on OpenSSL's path (too few requests in flight for the engine): the output.
    Done(Zeroizing<Vec<u8>>),
    /// Admitted to the engine: the value to raise to `d` (an encoded message, a ciphertext).
    Engine(Ticket<'s>, Zeroizing<Vec<u8>>),
}

/// What a signature turns its input into before the exponentiation.
enum Encoder {
    /// `CKM_RSA_PKCS`: EMSA-PKCS1-v1_5 of the given bytes (at most `k − 11`).
    Pkcs1,
    /// `CKM_RSA_X_509`: the input itself, left-padded, below `n`.
    Raw,
    /// `CKM_RSA_PKCS_PSS`: EMSA-PSS of the given hash.
    Pss(&'static MdRef, &'static MdRef, i32),
    /// Hash-and-sign: the digest context, the hash, and the PSS parameters (MGF1 hash, salt)
    /// or none for PKCS#1 v1.5.
    Hashed(MdCtx, &'static MdRef, Option<(&'static MdRef, i32)>),
}

/// An active `C_Sign*` operation.
pub struct SignOp {
    key: Arc<RsaKey>,
    enc: Encoder,
    /// `C_SignUpdate` has been called: `C_Sign` may no longer end the operation.
    updated: bool,
}

// `MdCtx` wraps an `EVP_MD_CTX`, which OpenSSL lets one thread at a time use: the session's
// mutex guarantees that.
impl SignOp {
    /// `C_SignInit`.
    pub fn new(m: &Mechanism, key: Arc<RsaKey>) -> CkResult<SignOp> {
        let enc = match m.mechanism {
            CKM_RSA_PKCS => no_param(m).map(|_| Encoder::Pkcs1)?,
            CKM_RSA_X_509 => no_param(m).map(|_| Encoder::Raw)?,
            CKM_RSA_PKCS_PSS => {
                let (md, mgf, salt) = pss(m, None, key.bits)?;
                Encoder::Pss(md, mgf, salt)
            }
            mech => {
                let (hash, is_pss) = match mech {
                    CKM_SHA224_RSA_PKCS => (CKM_SHA224, false),
                    CKM_SHA256_RSA_PKCS => (CKM_SHA256, false),
                    CKM_SHA384_RSA_PKCS => (CKM_SHA384, false),
                    CKM_SHA512_RSA_PKCS => (CKM_SHA512, false),
                    CKM_SHA256_RSA_PKCS_PSS => (CKM_SHA256, true),
                    CKM_SHA384_RSA_PKCS_PSS => (CKM_SHA384, true),
                    CKM_SHA512_RSA_PKCS_PSS => (CKM_SHA512, true),
                    _ => return Err(CKR_MECHANISM_INVALID),
                };
                let md = md_of(hash).ok_or(CKR_MECHANISM_INVALID)?;
                let p = if is_pss {
                    let (_, mgf, salt) = pss(m, Some(hash), key.bits)?;
                    Some((mgf, salt))
                } else {
                    no_param(m)?;
                    None
                };
                let mut ctx = MdCtx::new().map_err(ossl)?;
                ctx.digest_init(md).map_err(ossl)?;
                Encoder::Hashed(ctx, md, p)
            }
        };
        Ok(SignOp {
            key,
            enc,
            updated: false,
        })
    }

    /// Signature length.
    pub fn sig_len(&self) -> usize {
        self.key.k
    }

    /// Whether the mechanism takes `C_SignUpdate`.
    pub fn multi_part(&self) -> bool {
        matches!(self.enc, Encoder::Hashed(..))
    }

    /// `C_SignUpdate`.
    pub fn update(&mut self, data: &[u8]) -> CkResult<()> {
        self.updated = true;
        match &mut self.enc {
            Encoder::Hashed(ctx, ..) => ctx.digest_update(data).map_err(ossl),
            _ => Err(CKR_FUNCTION_NOT_SUPPORTED),
        }
    }

    /// Checks a single-part call before any work: `C_Sign` cannot end a multi-part
    /// operation (`CKR_OPERATION_ACTIVE`), and its input must fit (`CKR_DATA_LEN_RANGE`, …).
    pub fn check(&self, data: &[u8]) -> CkResult<()> {
        if self.updated {
            return Err(CKR_OPERATION_ACTIVE);
        }
        let k = self.key.k;
        match &self.enc {
            Encoder::Pkcs1 if data.len() + 11 > k => Err(CKR_DATA_LEN_RANGE),
            Encoder::Raw if data.len() > k => Err(CKR_DATA_LEN_RANGE),
            Encoder::Pss(md, ..) if data.len() != md.size() => Err(CKR_DATA_LEN_RANGE),
            _ => Ok(()),
        }
    }

    /// OpenSSL's signature of `input` (the data, or the digest of a hash-and-sign
    /// mechanism) on `pkey`: the real key gives the signature, the identity key the encoded
    /// message.
    fn openssl_sign(&self, pkey: &PKeyRef<Private>, input: &[u8]) -> CkResult<Vec<u8>> {
        let mut c = PkeyCtx::new(pkey).map_err(ossl)?;
        c.sign_init().map_err(ossl)?;
        match &self.enc {
            Encoder::Pkcs1 => c.set_rsa_padding(Padding::PKCS1).map_err(ossl)?,
            Encoder::Hashed(_, md, None) => {
                c.set_signature_md(md).map_err(ossl)?;
                c.set_rsa_padding(Padding::PKCS1).map_err(ossl)?;
            }
            Encoder::Pss(md, mgf, salt) | Encoder::Hashed(_, md, Some((mgf, salt))) => {
                c.set_signature_md(md).map_err(ossl)?;
                set_pss(&mut c, mgf, *salt)?;
            }
            Encoder::Raw => return Err(CKR_FUNCTION_FAILED),
        }
        let mut out = vec![0u8; self.key.k];
        if c.sign(input, Some(&mut out)).map_err(ossl)? != self.key.k {
            return Err(CKR_FUNCTION_FAILED);
        }
        Ok(out)
    }

    /// The signature of `data` (single-part) or of what was hashed (`None`). A request that
    /// the scheduler does not batch is signed by OpenSSL with the key itself; a batched one
    /// is encoded here ([`crate::pad`]) and exponentiated by the engine.
    pub fn sign(&mut self, sched: &Scheduler, data: Option<&[u8]>) -> CkResult<Vec<u8>> {
        match self.prepare(sched, data, false)? {
            Prepared::Done(sig) => Ok(sig.to_vec()),
            Prepared::Engine(ticket, em) => Ok(engine_op(sched, &ticket, &self.key, &em)?.to_vec()),
        }
    }

    /// Everything of [`SignOp::sign`] before the engine: the signature itself when the
    /// scheduler does not batch the request, else its admission and the encoded message
    /// to exponentiate. `asynchronous`: the engine whatever the number in flight
    /// ([`Scheduler::admit_for`]).
    pub fn prepare<'s>(
        &mut self,
        sched: &'s Scheduler,
        data: Option<&[u8]>,
        asynchronous: bool,
    ) -> CkResult<Prepared<'s>> {
        let k = self.key.k;
        let input = match (&mut self.enc, data) {
            (Encoder::Hashed(ctx, md, _), d) => {
                if let Some(d) = d {
                    ctx.digest_update(d).map_err(ossl)?;
                }
                let mut h = vec![0u8; md.size()];
                ctx.digest_final(&mut h).map_err(ossl)?;
                h
            }
            (_, None) => return Err(CKR_FUNCTION_NOT_SUPPORTED),
            (Encoder::Raw, Some(d)) => {
                let mut em = Zeroizing::new(vec![0u8; k]);
                em[k - d.len()..].copy_from_slice(d);
                if !self.key.below_modulus(&em) {
                    return Err(CKR_DATA_INVALID);
                }
                let ticket =
                    (sched.admit_for(&self.key, asynchronous)).map_err(|_| CKR_DEVICE_MEMORY)?;
                if !ticket.batch() {
                    return Ok(Prepared::Done(self.key.private_openssl(&em)?));
                }
                return Ok(Prepared::Engine(ticket, em));
            }
            (_, Some(d)) => d.to_vec(),
        };
        let ticket = (sched.admit_for(&self.key, asynchronous)).map_err(|_| CKR_DEVICE_MEMORY)?;
        if !ticket.batch() {
            let sig = self.openssl_sign(self.key.openssl(), &input)?;
            return Ok(Prepared::Done(Zeroizing::new(sig)));
        }
        Ok(Prepared::Engine(ticket, self.encode(&input)?))
    }

    /// The key.
    pub fn key(&self) -> &Arc<RsaKey> {
        &self.key
    }

    /// The encoded message of `input` (the data, or the digest of a hash-and-sign
    /// mechanism) that the engine exponentiates ([`crate::pad`]).
    fn encode(&self, input: &[u8]) -> CkResult<Zeroizing<Vec<u8>>> {
        let (k, bits) = (self.key.k, self.key.bits);
        let salt = |s: i32| usize::try_from(s).map_err(|_| CKR_MECHANISM_PARAM_INVALID);
        match &self.enc {
            Encoder::Pkcs1 => pad::pkcs1_v15(input, k),
            Encoder::Hashed(_, md, None) => pad::pkcs1_v15(&pad::digest_info(md, input)?, k),
            Encoder::Pss(md, mgf, s) | Encoder::Hashed(_, md, Some((mgf, s))) => {
                pad::pss(md, mgf, salt(*s)?, input, bits, k)
            }
            Encoder::Raw => Err(CKR_FUNCTION_FAILED),
        }
    }
}

/// Padding of a decryption.
enum Unpad {
    Pkcs1,
    Raw,
    Oaep(&'static MdRef, &'static MdRef, Vec<u8>),
}

/// An active `C_Decrypt` operation.
pub struct DecryptOp {
    key: Arc<RsaKey>,
    pad: Unpad,
}

impl DecryptOp {
    /// `C_DecryptInit`.
    pub fn new(m: &Mechanism, key: Arc<RsaKey>) -> CkResult<DecryptOp> {
        let pad = match (m.mechanism, &m.param) {
            (CKM_RSA_PKCS, _) => no_param(m).map(|_| Unpad::Pkcs1)?,
            (CKM_RSA_X_509, _) => no_param(m).map(|_| Unpad::Raw)?,
            (
                CKM_RSA_PKCS_OAEP,
                MechParam::RsaOaep {
                    hash_alg,
                    mgf,
                    source,
                    source_data,
                },
            ) => {
                let md = md_of(*hash_alg).ok_or(CKR_MECHANISM_PARAM_INVALID)?;
                let mgf = mgf_md(*mgf).ok_or(CKR_MECHANISM_PARAM_INVALID)?;
                if !(*source == CKZ_DATA_SPECIFIED || (*source == 0 && source_data.is_empty())) {
                    return Err(CKR_MECHANISM_PARAM_INVALID);
                }
                if 2 * md.size() + 2 > key.k {
                    return Err(CKR_KEY_SIZE_RANGE);
                }
                Unpad::Oaep(md, mgf, source_data.clone())
            }
            (CKM_RSA_PKCS_OAEP, _) => return Err(CKR_MECHANISM_PARAM_INVALID),
            _ => return Err(CKR_MECHANISM_INVALID),
        };
        Ok(DecryptOp { key, pad })
    }

    /// Largest plaintext.
    pub fn max_len(&self) -> usize {
        self.key.k
    }

    /// `input` is a ciphertext's length (`k` bytes): checked before a size query is answered
    /// too, as the software token does.
    pub fn check_len(&self, input: &[u8]) -> CkResult<()> {
        if input.len() != self.key.k {
            return Err(CKR_ENCRYPTED_DATA_LEN_RANGE);
        }
        Ok(())
    }

    /// Decrypts `input` (exactly `k` bytes, below `n`): with OpenSSL and the key itself when
    /// the scheduler does not batch the request, else on the engine and then unpadded by
    /// OpenSSL (identity key).
    pub fn decrypt(&self, sched: &Scheduler, input: &[u8]) -> CkResult<Zeroizing<Vec<u8>>> {
        match self.prepare(sched, input, false)? {
            Prepared::Done(plain) => Ok(plain),
            Prepared::Engine(ticket, c) => {
                let m = engine_op(sched, &ticket, &self.key, &c)?;
                self.unpad(false, &m)
            }
        }
    }

    /// Everything of [`DecryptOp::decrypt`] before the engine: the plaintext itself when the
    /// scheduler does not batch the request, else its admission and the ciphertext
    /// (`asynchronous`: as for [`SignOp::prepare`]).
    pub fn prepare<'s>(
        &self,
        sched: &'s Scheduler,
        input: &[u8],
        asynchronous: bool,
    ) -> CkResult<Prepared<'s>> {
        self.check_len(input)?;
        if !self.key.below_modulus(input) {
            return Err(CKR_ENCRYPTED_DATA_INVALID);
        }
        let ticket = (sched.admit_for(&self.key, asynchronous)).map_err(|_| CKR_DEVICE_MEMORY)?;
        if !ticket.batch() {
            return Ok(Prepared::Done(self.unpad(true, input)?));
        }
        Ok(Prepared::Engine(ticket, Zeroizing::new(input.to_vec())))
    }

    /// The plaintext: of `c` decrypted by OpenSSL with the key itself (`private`), or of the
    /// raw result `c = input^d mod n` of the engine (unpadded with the identity key).
    pub fn unpad(&self, private: bool, c: &[u8]) -> CkResult<Zeroizing<Vec<u8>>> {
        if matches!(self.pad, Unpad::Raw) {
            return if private {
                self.key.private_openssl(c)
            } else {
                Ok(Zeroizing::new(c.to_vec()))
            };
        }
        let pkey = if private {
            self.key.openssl()
        } else {
            &self.key.identity
        };
        let mut ctx = PkeyCtx::new(pkey).map_err(ossl)?;
        ctx.decrypt_init().map_err(ossl)?;
        match &self.pad {
            Unpad::Raw => return Err(CKR_FUNCTION_FAILED),
            Unpad::Pkcs1 => {
                ctx.set_rsa_padding(Padding::PKCS1).map_err(ossl)?;
                set_ctx_params(&mut ctx, &[Param::Uint(c"implicit-rejection", 0)]).map_err(ossl)?;
            }
            Unpad::Oaep(md, mgf, label) => {
                ctx.set_rsa_padding(Padding::PKCS1_OAEP).map_err(ossl)?;
                ctx.set_rsa_oaep_md(md).map_err(ossl)?;
                ctx.set_rsa_mgf1_md(mgf).map_err(ossl)?;
                if !label.is_empty() {
                    ctx.set_rsa_oaep_label(label).map_err(ossl)?;
                }
            }
        }
        let mut out = Zeroizing::new(vec![0u8; self.key.k]);
        let n = ctx
            .decrypt(c, Some(&mut out))
            .map_err(|_| CKR_ENCRYPTED_DATA_INVALID)?;
        out.truncate(n);
        Ok(out)
    }

    /// The key.
    pub fn key(&self) -> &Arc<RsaKey> {
        &self.key
    }
}
