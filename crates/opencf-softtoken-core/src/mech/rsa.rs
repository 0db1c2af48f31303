//! RSA: PKCS#1 v1.5 and OAEP encryption, PKCS#1 v1.5, PSS and raw (X.509) signatures,
//! signatures with recovery, key-pair generation, import checks, PKCS#8 and key wrapping.
//!
//! A key is parsed once: the private key is built from its attributes on first use and kept in
//! [`KeyCache::private`](super::KeyCache), the public key in
//! [`KeyCache::public`](super::KeyCache). Keys are loaded through their DER form so that they
//! are native to OpenSSL's default provider (no legacy-to-provider export on each operation);
//! an operation only creates an `EVP_PKEY_CTX` or `EVP_MD_CTX` on the cached key. Digests are
//! fetched once per process. OpenSSL's RSA blinding stays on.
//!
//! Decisions:
//! - **PKCS#1 v1.5 decryption rejects bad padding.** OpenSSL 3.2 and later answer a wrong
//!   padding with a deterministic pseudo-random message ("implicit rejection", the Marvin
//!   countermeasure) unless told otherwise. PKCS#11 has no way to express that, and callers
//!   (and the Wycheproof vectors) expect `CKR_ENCRYPTED_DATA_INVALID`, so every decryption
//!   context sets `implicit-rejection` to 0. The padding check remains OpenSSL's constant-time
//!   code; the return code is the padding oracle PKCS#11 defines. Use OAEP where that matters.
//! - **PSS parameters are checked at init** (`CKR_MECHANISM_PARAM_INVALID`): the structure must
//!   be present; for `CKM_SHA*_RSA_PKCS_PSS` its `hashAlg` must be the mechanism's hash; the
//!   MGF1 hash may be any supported hash; the salt must fit: `hLen + sLen + 2 <= emLen`.
//!   Verification requires exactly that salt length. `CKM_RSA_PKCS_PSS` takes the hash value,
//!   whose length must be the hash's (`CKR_DATA_LEN_RANGE`).
//! - `CKM_RSA_PKCS`/`CKM_RSA_X_509`/`CKM_RSA_PKCS_OAEP` encryption, decryption, signing with
//!   `CKM_RSA_PKCS`, `CKM_RSA_X_509`, `CKM_RSA_PKCS_PSS` are single-part:
//!   `C_*Update`/`C_*Final` answer `CKR_FUNCTION_NOT_SUPPORTED`.
//! - Raw RSA (`CKM_RSA_X_509`) input shorter than the modulus is padded with leading zeros;
//!   input whose value is not below the modulus is `CKR_DATA_INVALID`. Raw unwrapping returns
//!   the whole `k`-byte block; the specification takes the new key's `CKA_VALUE_LEN` bytes from
//!   its end, which is for the caller (it knows the template) to do.
//! - A private key needs `CKA_MODULUS` and `CKA_PRIVATE_EXPONENT`, and either
//!   `CKA_PUBLIC_EXPONENT` or both primes (the exponent is then computed): without `e` OpenSSL
//!   cannot blind. Missing CRT values are computed from the primes.

use super::{ossl_err, CipherOp, Key, SignOp, VerifyOp};
use crate::attrs::{AttrMap, AttrMapExt};
use opencf_abi::ossl_pk::{set_ctx_params, Param};
use opencf_abi::sys::*;
use opencf_abi::{CkResult, MechParam, Mechanism, OutBuf};
use openssl::bn::{BigNum, BigNumContext};
use openssl::error::ErrorStack;
use openssl::md::{Md, MdRef};
use openssl::md_ctx::MdCtx;
use openssl::pkey::{HasPublic, Id, PKey, Private, Public};
use openssl::pkey_ctx::PkeyCtx;
use openssl::rsa::{Padding, Rsa, RsaPrivateKeyBuilder};
use openssl::sign::RsaPssSaltlen;
use std::sync::OnceLock;
use zeroize::Zeroizing;

/// Smallest and largest modulus (bits) generated: `CKM_RSA_PKCS_KEY_PAIR_GEN`'s range in the
/// mechanism table.
pub(super) const GEN_BITS: std::ops::RangeInclusive<CK_ULONG> = 1024..=8192;
/// Smallest and largest modulus (bits) accepted on import, and so by every RSA operation: the
/// range the mechanism table gives them (SoftHSMv2's too), checked again at each init.
pub(super) const IMPORT_BITS: std::ops::RangeInclusive<u32> = 512..=16384;

// ----- Digests shared by the asymmetric mechanisms -----

/// Hash mechanisms and OpenSSL's name of each.
const HASHES: [(CK_MECHANISM_TYPE, &str); 9] = [
    (CKM_SHA_1, "SHA1"),
    (CKM_SHA224, "SHA2-224"),
    (CKM_SHA256, "SHA2-256"),
    (CKM_SHA384, "SHA2-384"),
    (CKM_SHA512, "SHA2-512"),
    (CKM_SHA3_224, "SHA3-224"),
    (CKM_SHA3_256, "SHA3-256"),
    (CKM_SHA3_384, "SHA3-384"),
    (CKM_SHA3_512, "SHA3-512"),
];

static FETCHED: [OnceLock<Option<Md>>; 9] = [const { OnceLock::new() }; 9];

/// The digest of a hash mechanism (`CKM_SHA256`, …), fetched from OpenSSL once per process
/// (an explicitly fetched digest saves a method-store lookup on every context).
pub(super) fn hash_md(hash: CK_MECHANISM_TYPE) -> Option<&'static MdRef> {
    let i = HASHES.iter().position(|(m, _)| *m == hash)?;
    FETCHED[i]
        .get_or_init(|| Md::fetch(None, HASHES[i].1, None).ok())
        .as_deref()
}

/// The hash of an MGF1 variant (`CKG_MGF1_SHA256`, …).
fn mgf_md(mgf: CK_RSA_PKCS_MGF_TYPE) -> Option<&'static MdRef> {
    hash_md(match mgf {
        CKG_MGF1_SHA1 => CKM_SHA_1,
        CKG_MGF1_SHA224 => CKM_SHA224,
        CKG_MGF1_SHA256 => CKM_SHA256,
        CKG_MGF1_SHA384 => CKM_SHA384,
        CKG_MGF1_SHA512 => CKM_SHA512,
        CKG_MGF1_SHA3_224 => CKM_SHA3_224,
        CKG_MGF1_SHA3_256 => CKM_SHA3_256,
        CKG_MGF1_SHA3_384 => CKM_SHA3_384,
        CKG_MGF1_SHA3_512 => CKM_SHA3_512,
        _ => return None,
    })
}

/// The hash of a hash-and-sign RSA mechanism, and whether it is a PSS one.
fn sig_hash(m: CK_MECHANISM_TYPE) -> Option<(CK_MECHANISM_TYPE, bool)> {
    Some(match m {
        CKM_SHA1_RSA_PKCS => (CKM_SHA_1, false),
        CKM_SHA224_RSA_PKCS => (CKM_SHA224, false),
        CKM_SHA256_RSA_PKCS => (CKM_SHA256, false),
        CKM_SHA384_RSA_PKCS => (CKM_SHA384, false),
        CKM_SHA512_RSA_PKCS => (CKM_SHA512, false),
        CKM_SHA3_224_RSA_PKCS => (CKM_SHA3_224, false),
        CKM_SHA3_256_RSA_PKCS => (CKM_SHA3_256, false),
        CKM_SHA3_384_RSA_PKCS => (CKM_SHA3_384, false),
        CKM_SHA3_512_RSA_PKCS => (CKM_SHA3_512, false),
        CKM_SHA1_RSA_PKCS_PSS => (CKM_SHA_1, true),
        CKM_SHA224_RSA_PKCS_PSS => (CKM_SHA224, true),
        CKM_SHA256_RSA_PKCS_PSS => (CKM_SHA256, true),
        CKM_SHA384_RSA_PKCS_PSS => (CKM_SHA384, true),
        CKM_SHA512_RSA_PKCS_PSS => (CKM_SHA512, true),
        CKM_SHA3_224_RSA_PKCS_PSS => (CKM_SHA3_224, true),
        CKM_SHA3_256_RSA_PKCS_PSS => (CKM_SHA3_256, true),
        CKM_SHA3_384_RSA_PKCS_PSS => (CKM_SHA3_384, true),
        CKM_SHA3_512_RSA_PKCS_PSS => (CKM_SHA3_512, true),
        _ => return None,
    })
}

// ----- Keys -----

fn bn(b: &[u8]) -> CkResult<BigNum> {
    BigNum::from_slice(b).map_err(|_| CKR_HOST_MEMORY)
}

fn opt_bn(attrs: &AttrMap, t: CK_ATTRIBUTE_TYPE) -> CkResult<Option<BigNum>> {
    attrs.bytes(t).map(bn).transpose()
}

/// The private key of `attrs`, with the values computed from it: `(key, computed attributes)`.
/// Missing material is `CKR_TEMPLATE_INCOMPLETE`, inconsistent material
/// `CKR_ATTRIBUTE_VALUE_INVALID`.
fn rsa_private_from_attrs(attrs: &AttrMap) -> CkResult<(Rsa<Private>, AttrMap)> {
    let n = bn(attrs.need_bytes(CKA_MODULUS)?)?;
    let d = bn(attrs.need_bytes(CKA_PRIVATE_EXPONENT)?)?;
    let e = opt_bn(attrs, CKA_PUBLIC_EXPONENT)?;
    let p = opt_bn(attrs, CKA_PRIME_1)?;
    let q = opt_bn(attrs, CKA_PRIME_2)?;
    if !IMPORT_BITS.contains(&n.num_bits().unsigned_abs()) || d.num_bits() == 0 {
        return Err(CKR_ATTRIBUTE_VALUE_INVALID);
    }
    let mut computed = AttrMap::new();
    let (p, q) = match (p, q) {
        (Some(p), Some(q)) => (p, q),
        (None, None) => {
            // No factors: a key without CRT. `e` is then required (blinding needs it).
            let e = e.ok_or(CKR_TEMPLATE_INCOMPLETE)?;
            let rsa = RsaPrivateKeyBuilder::new(n, e, d)
                .map_err(|_| CKR_ATTRIBUTE_VALUE_INVALID)?
                .build();
            return Ok((rsa, computed));
        }
        _ => return Err(CKR_TEMPLATE_INCOMPLETE),
    };
    let mut ctx = BigNumContext::new().map_err(|_| CKR_HOST_MEMORY)?;
    let one = BigNum::from_u32(1).map_err(|_| CKR_HOST_MEMORY)?;
    let sub1 = |x: &BigNum| -> CkResult<BigNum> {
        let mut r = BigNum::new().map_err(|_| CKR_HOST_MEMORY)?;
        r.checked_sub(x, &one)
            .map_err(|_| CKR_ATTRIBUTE_VALUE_INVALID)?;
        Ok(r)
    };
    let (p1, q1) = (sub1(&p)?, sub1(&q)?);
    let bad = |_| CKR_ATTRIBUTE_VALUE_INVALID;
    let e = match e {
        Some(e) => e,
        None => {
            // e = d^-1 mod lcm(p-1, q-1).
            let mut g = BigNum::new().map_err(|_| CKR_HOST_MEMORY)?;
            g.gcd(&p1, &q1, &mut ctx).map_err(bad)?;
            let mut prod = BigNum::new().map_err(|_| CKR_HOST_MEMORY)?;
            prod.checked_mul(&p1, &q1, &mut ctx).map_err(bad)?;
            let mut lambda = BigNum::new().map_err(|_| CKR_HOST_MEMORY)?;
            lambda.checked_div(&prod, &g, &mut ctx).map_err(bad)?;
            let mut e = BigNum::new().map_err(|_| CKR_HOST_MEMORY)?;
            e.mod_inverse(&d, &lambda, &mut ctx).map_err(bad)?;
            computed.insert(CKA_PUBLIC_EXPONENT, e.to_vec());
            e
        }
    };
    let mut crt = |t: CK_ATTRIBUTE_TYPE,
                   f: &dyn Fn(&mut BigNum, &mut BigNumContext) -> Result<(), ErrorStack>|
     -> CkResult<BigNum> {
        if let Some(v) = opt_bn(attrs, t)? {
            return Ok(v);
        }
        let mut r = BigNum::new().map_err(|_| CKR_HOST_MEMORY)?;
        f(&mut r, &mut ctx).map_err(bad)?;
        computed.insert(t, r.to_vec());
        Ok(r)
    };
    let dp = crt(CKA_EXPONENT_1, &|r, c| r.nnmod(&d, &p1, c))?;
    let dq = crt(CKA_EXPONENT_2, &|r, c| r.nnmod(&d, &q1, c))?;
    let qi = crt(CKA_COEFFICIENT, &|r, c| r.mod_inverse(&q, &p, c))?;
    let rsa = Rsa::from_private_components(n, e, d, p, q, dp, dq, qi).map_err(bad)?;
    Ok((rsa, computed))
}

/// A provider-native `PKey` for `rsa` (through its DER form; a key without CRT values, which
/// has no DER form, stays a legacy key).
fn native_private(rsa: Rsa<Private>) -> CkResult<PKey<Private>> {
    if rsa.p().is_some() {
        if let Ok(der) = rsa.private_key_to_der() {
            let der = Zeroizing::new(der);
            return PKey::private_key_from_der(&der).map_err(ossl_err);
        }
    }
    PKey::from_rsa(rsa).map_err(ossl_err)
}

fn native_public(rsa: Rsa<Public>) -> CkResult<PKey<Public>> {
    let der = rsa.public_key_to_der().map_err(ossl_err)?;
    PKey::public_key_from_der(&der).map_err(ossl_err)
}

fn check_rsa(key: &Key) -> CkResult<()> {
    if key.key_type()? != CKK_RSA {
        return Err(CKR_KEY_TYPE_INCONSISTENT);
    }
    Ok(())
}

/// `CKR_KEY_SIZE_RANGE` for a key outside the range the mechanism table gives every RSA
/// operation (only a key stored by another version could be).
fn check_bits<T: HasPublic>(pkey: &PKey<T>) -> CkResult<()> {
    if !IMPORT_BITS.contains(&pkey.bits()) {
        return Err(CKR_KEY_SIZE_RANGE);
    }
    Ok(())
}

/// The cached private key of a `CKK_RSA` private key object.
fn private_key<'a>(key: &Key<'a>) -> CkResult<&'a PKey<Private>> {
    check_rsa(key)?;
    if key.class()? != CKO_PRIVATE_KEY {
        return Err(CKR_KEY_TYPE_INCONSISTENT);
    }
    if let Some(p) = key.cache.private.get() {
        return Ok(p);
    }
    // The material was checked when the object was made; failing now means it is unusable.
    let (rsa, _) = rsa_private_from_attrs(key.attrs).map_err(|_| CKR_FUNCTION_FAILED)?;
    let pkey = native_private(rsa)?;
    Ok(key.cache.private.get_or_init(|| pkey))
}

/// The cached public key of a `CKK_RSA` public key object (or of a private one).
pub(super) fn public_key<'a>(key: &Key<'a>) -> CkResult<&'a PKey<Public>> {
    check_rsa(key)?;
    if let Some(p) = key.cache.public.get() {
        return Ok(p);
    }
    let pkey = match key.class()? {
        CKO_PUBLIC_KEY => {
            let n = bn(key.attrs.need_bytes(CKA_MODULUS)?)?;
            let e = bn(key.attrs.need_bytes(CKA_PUBLIC_EXPONENT)?)?;
            native_public(Rsa::from_public_components(n, e).map_err(ossl_err)?)?
        }
        CKO_PRIVATE_KEY => {
            let der = private_key(key)?.public_key_to_der().map_err(ossl_err)?;
            PKey::public_key_from_der(&der).map_err(ossl_err)?
        }
        _ => return Err(CKR_KEY_TYPE_INCONSISTENT),
    };
    Ok(key.cache.public.get_or_init(|| pkey))
}

/// The modulus as a `k`-byte big-endian string.
fn modulus_bytes(key: &Key, k: usize) -> CkResult<Vec<u8>> {
    let n = key.attrs.need_bytes(CKA_MODULUS)?;
    let n = &n[n.iter().position(|b| *b != 0).unwrap_or(n.len())..];
    left_pad(n, k).ok_or(CKR_FUNCTION_FAILED)
}

/// `data` with leading zeros to `k` bytes (`None` when longer).
fn left_pad(data: &[u8], k: usize) -> Option<Vec<u8>> {
    let pad = k.checked_sub(data.len())?;
    let mut v = vec![0u8; k];
    v[pad..].copy_from_slice(data);
    Some(v)
}

// ----- Mechanism parameters -----

fn no_param(mech: &Mechanism) -> CkResult<()> {
    match &mech.param {
        MechParam::None => Ok(()),
        MechParam::Bytes(b) if b.is_empty() => Ok(()),
        _ => Err(CKR_MECHANISM_PARAM_INVALID),
    }
}

/// Parsed `CK_RSA_PKCS_OAEP_PARAMS`.
struct Oaep {
    md: &'static MdRef,
    mgf: &'static MdRef,
    label: Vec<u8>,
}

fn oaep_params(mech: &Mechanism) -> CkResult<Oaep> {
    let MechParam::RsaOaep {
        hash_alg,
        mgf,
        source,
        source_data,
    } = &mech.param
    else {
        return Err(CKR_MECHANISM_PARAM_INVALID);
    };
    let md = hash_md(*hash_alg).ok_or(CKR_MECHANISM_PARAM_INVALID)?;
    let mgf = mgf_md(*mgf).ok_or(CKR_MECHANISM_PARAM_INVALID)?;
    match *source {
        CKZ_DATA_SPECIFIED => {}
        0 if source_data.is_empty() => {}
        _ => return Err(CKR_MECHANISM_PARAM_INVALID),
    }
    Ok(Oaep {
        md,
        mgf,
        label: source_data.clone(),
    })
}

/// Parsed `CK_RSA_PKCS_PSS_PARAMS`.
struct Pss {
    md: &'static MdRef,
    mgf: &'static MdRef,
    salt: i32,
}

/// PSS parameters, checked against the mechanism's hash (`expect`) and the key size.
fn pss_params(mech: &Mechanism, expect: Option<CK_MECHANISM_TYPE>, bits: u32) -> CkResult<Pss> {
    let MechParam::RsaPss {
        hash_alg,
        mgf,
        salt_len,
    } = &mech.param
    else {
        return Err(CKR_MECHANISM_PARAM_INVALID);
    };
    if expect.is_some_and(|h| h != *hash_alg) {
        return Err(CKR_MECHANISM_PARAM_INVALID);
    }
    let md = hash_md(*hash_alg).ok_or(CKR_MECHANISM_PARAM_INVALID)?;
    let mgf = mgf_md(*mgf).ok_or(CKR_MECHANISM_PARAM_INVALID)?;
    // EMSA-PSS: emLen = ceil((modBits - 1) / 8) >= hLen + sLen + 2.
    let em_len = (bits as usize).saturating_sub(1).div_ceil(8);
    let salt = usize::try_from(*salt_len).map_err(|_| CKR_MECHANISM_PARAM_INVALID)?;
    if md.size() + salt + 2 > em_len {
        return Err(CKR_MECHANISM_PARAM_INVALID);
    }
    let salt = i32::try_from(salt).map_err(|_| CKR_MECHANISM_PARAM_INVALID)?;
    Ok(Pss { md, mgf, salt })
}

fn set_pss<T>(ctx: &mut openssl::pkey_ctx::PkeyCtxRef<T>, pss: &Pss) -> Result<(), ErrorStack> {
    ctx.set_rsa_padding(Padding::PKCS1_PSS)?;
    ctx.set_rsa_mgf1_md(pss.mgf)?;
    ctx.set_rsa_pss_saltlen(RsaPssSaltlen::custom(pss.salt))
}

/// Padding of an encryption mechanism.
enum EncPad {
    Pkcs1,
    Raw,
    Oaep(Oaep),
}

impl EncPad {
    fn of(mech: &Mechanism) -> CkResult<EncPad> {
        match mech.mechanism {
            CKM_RSA_PKCS => no_param(mech).map(|_| EncPad::Pkcs1),
            CKM_RSA_X_509 => no_param(mech).map(|_| EncPad::Raw),
            CKM_RSA_PKCS_OAEP => oaep_params(mech).map(EncPad::Oaep),
            _ => Err(CKR_MECHANISM_INVALID),
        }
    }

    /// The largest plaintext for a `k`-byte modulus (`None`: the key is too small).
    fn max_input(&self, k: usize) -> Option<usize> {
        match self {
            EncPad::Pkcs1 => k.checked_sub(11),
            EncPad::Raw => Some(k),
            EncPad::Oaep(o) => k.checked_sub(2 * o.md.size() + 2),
        }
    }

    fn apply<T>(&self, ctx: &mut PkeyCtx<T>, decrypt: bool) -> Result<(), ErrorStack> {
        match self {
            EncPad::Pkcs1 => {
                ctx.set_rsa_padding(Padding::PKCS1)?;
                if decrypt {
                    // Explicit rejection of bad padding; see the module documentation.
                    set_ctx_params(ctx, &[Param::Uint(c"implicit-rejection", 0)])?;
                }
                Ok(())
            }
            EncPad::Raw => ctx.set_rsa_padding(Padding::NONE),
            EncPad::Oaep(o) => {
                ctx.set_rsa_padding(Padding::PKCS1_OAEP)?;
                ctx.set_rsa_oaep_md(o.md)?;
                ctx.set_rsa_mgf1_md(o.mgf)?;
                if !o.label.is_empty() {
                    ctx.set_rsa_oaep_label(&o.label)?;
                }
                Ok(())
            }
        }
    }
}

// ----- Encryption -----

struct Encrypt {
    ctx: PkeyCtx<Public>,
    k: usize,
    max_in: usize,
    /// The modulus, for raw RSA (the input must be below it).
    raw_n: Option<Vec<u8>>,
}

impl Encrypt {
    fn new(mech: &Mechanism, key: Key) -> CkResult<Encrypt> {
        let pad = EncPad::of(mech)?;
        let pkey = public_key(&key)?;
        check_bits(pkey)?;
        let k = pkey.size();
        let max_in = pad.max_input(k).ok_or(CKR_KEY_SIZE_RANGE)?;
        let raw_n = match pad {
            EncPad::Raw => Some(modulus_bytes(&key, k)?),
            _ => None,
        };
        let mut ctx = PkeyCtx::new(pkey).map_err(ossl_err)?;
        ctx.encrypt_init().map_err(ossl_err)?;
        pad.apply(&mut ctx, false).map_err(ossl_err)?;
        Ok(Encrypt {
            ctx,
            k,
            max_in,
            raw_n,
        })
    }

    /// Checks the input, then encrypts into `out` (unless it is a size query).
    fn run(&mut self, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        if input.len() > self.max_in {
            return Err(CKR_DATA_LEN_RANGE);
        }
        let padded = match &self.raw_n {
            Some(n) => {
                let v = Zeroizing::new(left_pad(input, self.k).ok_or(CKR_DATA_LEN_RANGE)?);
                if v.as_slice() >= n.as_slice() {
                    return Err(CKR_DATA_INVALID);
                }
                Some(v)
            }
            None => None,
        };
        let Some(buf) = out.reserve(self.k)? else {
            return Ok(());
        };
        let from = padded.as_deref().map_or(input, |v| v.as_slice());
        let n = self.ctx.encrypt(from, Some(buf)).map_err(ossl_err)?;
        out.set_len(n);
        Ok(())
    }
}

impl CipherOp for Encrypt {
    fn one_shot(&mut self, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        self.run(input, out)
    }
    fn update(&mut self, _input: &[u8], _out: &mut OutBuf) -> CkResult<()> {
        Err(CKR_FUNCTION_NOT_SUPPORTED)
    }
    fn finalize(&mut self, _out: &mut OutBuf) -> CkResult<()> {
        Err(CKR_FUNCTION_NOT_SUPPORTED)
    }
}

struct Decrypt {
    ctx: PkeyCtx<Private>,
    k: usize,
    raw: bool,
}

impl Decrypt {
    fn new(mech: &Mechanism, key: Key) -> CkResult<Decrypt> {
        let pad = EncPad::of(mech)?;
        let pkey = private_key(&key)?;
        check_bits(pkey)?;
        let k = pkey.size();
        pad.max_input(k).ok_or(CKR_KEY_SIZE_RANGE)?;
        let mut ctx = PkeyCtx::new(pkey).map_err(ossl_err)?;
        ctx.decrypt_init().map_err(ossl_err)?;
        pad.apply(&mut ctx, true).map_err(ossl_err)?;
        Ok(Decrypt {
            ctx,
            k,
            raw: matches!(pad, EncPad::Raw),
        })
    }

    /// Decrypts `input` (exactly `k` bytes); `Err(CKR_ENCRYPTED_DATA_INVALID)` on bad padding.
    fn decrypt(&mut self, input: &[u8]) -> CkResult<Zeroizing<Vec<u8>>> {
        let mut tmp = Zeroizing::new(vec![0u8; self.k]);
        let n = self
            .ctx
            .decrypt(input, Some(&mut tmp))
            .map_err(|_| CKR_ENCRYPTED_DATA_INVALID)?;
        tmp.truncate(n);
        Ok(tmp)
    }
}

impl CipherOp for Decrypt {
    fn one_shot(&mut self, input: &[u8], out: &mut OutBuf) -> CkResult<()> {
        if input.len() != self.k {
            return Err(CKR_ENCRYPTED_DATA_LEN_RANGE);
        }
        if out.is_query() || (self.raw && out.capacity() < self.k) {
            // The plaintext is at most k bytes (exactly k for raw RSA).
            out.reserve(self.k)?;
            return Ok(());
        }
        let plain = self.decrypt(input)?;
        out.write(&plain)?;
        Ok(())
    }
    fn update(&mut self, _input: &[u8], _out: &mut OutBuf) -> CkResult<()> {
        Err(CKR_FUNCTION_NOT_SUPPORTED)
    }
    fn finalize(&mut self, _out: &mut OutBuf) -> CkResult<()> {
        Err(CKR_FUNCTION_NOT_SUPPORTED)
    }
}

/// `C_EncryptInit` for `CKM_RSA_PKCS`, `CKM_RSA_X_509`, `CKM_RSA_PKCS_OAEP`.
pub fn encrypt_init(mech: &Mechanism, key: Key) -> CkResult<Box<dyn CipherOp>> {
    Ok(Box::new(Encrypt::new(mech, key)?))
}

/// `C_DecryptInit` for `CKM_RSA_PKCS`, `CKM_RSA_X_509`, `CKM_RSA_PKCS_OAEP`.
pub fn decrypt_init(mech: &Mechanism, key: Key) -> CkResult<Box<dyn CipherOp>> {
    Ok(Box::new(Decrypt::new(mech, key)?))
}

// ----- Signatures -----

/// What a single-part (raw) signature mechanism accepts as input.
enum RawInput {
    /// `CKM_RSA_PKCS`: at most `k - 11` bytes (a DigestInfo or anything else).
    Pkcs1,
    /// `CKM_RSA_X_509`: at most `k` bytes, below the modulus once left-padded.
    X509(Vec<u8>),
    /// `CKM_RSA_PKCS_PSS`: exactly the hash length.
    Pss(usize),
}

impl RawInput {
    /// Checks `data` and returns what to hand to OpenSSL (raw RSA: padded to `k`).
    fn prepare<'d>(&self, data: &'d [u8], k: usize) -> CkResult<std::borrow::Cow<'d, [u8]>> {
        match self {
            RawInput::Pkcs1 if data.len() + 11 > k => Err(CKR_DATA_LEN_RANGE),
            RawInput::Pss(h) if data.len() != *h => Err(CKR_DATA_LEN_RANGE),
            RawInput::X509(n) => {
                let v = left_pad(data, k).ok_or(CKR_DATA_LEN_RANGE)?;
                if v.as_slice() >= n.as_slice() {
                    return Err(CKR_DATA_INVALID);
                }
                Ok(v.into())
            }
            _ => Ok(data.into()),
        }
    }
}

/// Builds the context of a raw signature mechanism, initialised by `init`.
fn raw_ctx<T: HasPublic>(
    mech: &Mechanism,
    key: &Key,
    pkey: &PKey<T>,
    init: fn(&mut PkeyCtx<T>) -> Result<(), ErrorStack>,
) -> CkResult<(PkeyCtx<T>, RawInput)> {
    let mut ctx = PkeyCtx::new(pkey).map_err(ossl_err)?;
    init(&mut ctx).map_err(ossl_err)?;
    let input = match mech.mechanism {
        CKM_RSA_PKCS => {
            no_param(mech)?;
            ctx.set_rsa_padding(Padding::PKCS1).map_err(ossl_err)?;
            RawInput::Pkcs1
        }
        CKM_RSA_X_509 => {
            no_param(mech)?;
            ctx.set_rsa_padding(Padding::NONE).map_err(ossl_err)?;
            RawInput::X509(modulus_bytes(key, pkey.size())?)
        }
        CKM_RSA_PKCS_PSS => {
            let pss = pss_params(mech, None, pkey.bits())?;
            ctx.set_signature_md(pss.md).map_err(ossl_err)?;
            set_pss(&mut ctx, &pss).map_err(ossl_err)?;
            RawInput::Pss(pss.md.size())
        }
        _ => return Err(CKR_MECHANISM_INVALID),
    };
    Ok((ctx, input))
}

/// The digest (and PSS parameters) of a hash-and-sign mechanism for a key of `bits`.
fn hashed_params(mech: &Mechanism, bits: u32) -> CkResult<(&'static MdRef, Option<Pss>)> {
    let (hash, pss) = sig_hash(mech.mechanism).ok_or(CKR_MECHANISM_INVALID)?;
    let md = hash_md(hash).ok_or(CKR_MECHANISM_INVALID)?;
    if pss {
        Ok((md, Some(pss_params(mech, Some(hash), bits)?)))
    } else {
        no_param(mech)?;
        Ok((md, None))
    }
}

enum Signer {
    Raw(PkeyCtx<Private>, RawInput),
    Hashed(MdCtx),
}

struct Sign {
    signer: Signer,
    k: usize,
}

impl SignOp for Sign {
    fn update(&mut self, data: &[u8]) -> CkResult<()> {
        match &mut self.signer {
            Signer::Hashed(md) => md.digest_sign_update(data).map_err(ossl_err),
            Signer::Raw(..) => Err(CKR_FUNCTION_NOT_SUPPORTED),
        }
    }
    fn finalize(&mut self, out: &mut OutBuf) -> CkResult<()> {
        let Signer::Hashed(md) = &mut self.signer else {
            return Err(CKR_FUNCTION_NOT_SUPPORTED);
        };
        let Some(buf) = out.reserve(self.k)? else {
            return Ok(());
        };
        let n = md.digest_sign_final(Some(buf)).map_err(ossl_err)?;
        out.set_len(n);
        Ok(())
    }
    fn one_shot(&mut self, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        match &mut self.signer {
            Signer::Hashed(md) => {
                let Some(buf) = out.reserve(self.k)? else {
                    return Ok(());
                };
                md.digest_sign_update(data).map_err(ossl_err)?;
                let n = md.digest_sign_final(Some(buf)).map_err(ossl_err)?;
                out.set_len(n);
                Ok(())
            }
            Signer::Raw(ctx, input) => {
                let tbs = input.prepare(data, self.k)?;
                let Some(buf) = out.reserve(self.k)? else {
                    return Ok(());
                };
                let n = ctx.sign(&tbs, Some(buf)).map_err(ossl_err)?;
                out.set_len(n);
                Ok(())
            }
        }
    }
}

enum Verifier {
    Raw(PkeyCtx<Public>, RawInput),
    Hashed(MdCtx),
}

struct Verify {
    verifier: Verifier,
    k: usize,
}

fn verdict(r: Result<bool, ErrorStack>) -> CkResult<()> {
    match r {
        Ok(true) => Ok(()),
        _ => Err(CKR_SIGNATURE_INVALID),
    }
}

impl VerifyOp for Verify {
    fn update(&mut self, data: &[u8]) -> CkResult<()> {
        match &mut self.verifier {
            Verifier::Hashed(md) => md.digest_verify_update(data).map_err(ossl_err),
            Verifier::Raw(..) => Err(CKR_FUNCTION_NOT_SUPPORTED),
        }
    }
    fn finalize(&mut self, sig: &[u8]) -> CkResult<()> {
        let Verifier::Hashed(md) = &mut self.verifier else {
            return Err(CKR_FUNCTION_NOT_SUPPORTED);
        };
        if sig.len() != self.k {
            return Err(CKR_SIGNATURE_LEN_RANGE);
        }
        verdict(md.digest_verify_final(sig))
    }
    fn one_shot(&mut self, data: &[u8], sig: &[u8]) -> CkResult<()> {
        match &mut self.verifier {
            Verifier::Hashed(md) => {
                if sig.len() != self.k {
                    return Err(CKR_SIGNATURE_LEN_RANGE);
                }
                md.digest_verify_update(data).map_err(ossl_err)?;
                verdict(md.digest_verify_final(sig))
            }
            Verifier::Raw(ctx, input) => {
                let tbs = input.prepare(data, self.k)?;
                if sig.len() != self.k {
                    return Err(CKR_SIGNATURE_LEN_RANGE);
                }
                verdict(ctx.verify(&tbs, sig))
            }
        }
    }
}

/// `C_SignInit` for every RSA signature mechanism.
pub fn sign_init(mech: &Mechanism, key: Key) -> CkResult<Box<dyn SignOp>> {
    let pkey = private_key(&key)?;
    check_bits(pkey)?;
    let signer = match mech.mechanism {
        CKM_RSA_PKCS | CKM_RSA_X_509 | CKM_RSA_PKCS_PSS => {
            let (ctx, input) = raw_ctx(mech, &key, pkey, |c| c.sign_init())?;
            Signer::Raw(ctx, input)
        }
        _ => {
            let (md, pss) = hashed_params(mech, pkey.bits())?;
            let mut ctx = MdCtx::new().map_err(ossl_err)?;
            let pctx = ctx.digest_sign_init(Some(md), pkey).map_err(ossl_err)?;
            if let Some(pss) = &pss {
                set_pss(pctx, pss).map_err(ossl_err)?;
            }
            Signer::Hashed(ctx)
        }
    };
    Ok(Box::new(Sign {
        signer,
        k: pkey.size(),
    }))
}

/// `C_VerifyInit` for every RSA signature mechanism.
pub fn verify_init(mech: &Mechanism, key: Key) -> CkResult<Box<dyn VerifyOp>> {
    let pkey = public_key(&key)?;
    check_bits(pkey)?;
    let verifier = match mech.mechanism {
        CKM_RSA_PKCS | CKM_RSA_X_509 | CKM_RSA_PKCS_PSS => {
            let (ctx, input) = raw_ctx(mech, &key, pkey, |c| c.verify_init())?;
            Verifier::Raw(ctx, input)
        }
        _ => {
            let (md, pss) = hashed_params(mech, pkey.bits())?;
            let mut ctx = MdCtx::new().map_err(ossl_err)?;
            let pctx = ctx.digest_verify_init(Some(md), pkey).map_err(ossl_err)?;
            if let Some(pss) = &pss {
                set_pss(pctx, pss).map_err(ossl_err)?;
            }
            Verifier::Hashed(ctx)
        }
    };
    Ok(Box::new(Verify {
        verifier,
        k: pkey.size(),
    }))
}

/// `C_SignRecover` (`CKM_RSA_PKCS`, `CKM_RSA_X_509`).
pub fn sign_recover(mech: &Mechanism, key: Key, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
    if !matches!(mech.mechanism, CKM_RSA_PKCS | CKM_RSA_X_509) {
        return Err(CKR_MECHANISM_INVALID);
    }
    let pkey = private_key(&key)?;
    check_bits(pkey)?;
    let (mut ctx, input) = raw_ctx(mech, &key, pkey, |c| c.sign_init())?;
    let k = pkey.size();
    let tbs = input.prepare(data, k)?;
    let Some(buf) = out.reserve(k)? else {
        return Ok(());
    };
    let n = ctx.sign(&tbs, Some(buf)).map_err(ossl_err)?;
    out.set_len(n);
    Ok(())
}

/// `C_VerifyRecover` (`CKM_RSA_PKCS`, `CKM_RSA_X_509`): the recovered data.
pub fn verify_recover(mech: &Mechanism, key: Key, sig: &[u8], out: &mut OutBuf) -> CkResult<()> {
    let padding = match mech.mechanism {
        CKM_RSA_PKCS => Padding::PKCS1,
        CKM_RSA_X_509 => Padding::NONE,
        _ => return Err(CKR_MECHANISM_INVALID),
    };
    no_param(mech)?;
    let pkey = public_key(&key)?;
    check_bits(pkey)?;
    let k = pkey.size();
    if sig.len() != k {
        return Err(CKR_SIGNATURE_LEN_RANGE);
    }
    let mut ctx = PkeyCtx::new(pkey).map_err(ossl_err)?;
    ctx.verify_recover_init().map_err(ossl_err)?;
    ctx.set_rsa_padding(padding).map_err(ossl_err)?;
    let mut tmp = vec![0u8; k];
    let n = ctx
        .verify_recover(sig, Some(&mut tmp))
        .map_err(|_| CKR_SIGNATURE_INVALID)?;
    out.write(&tmp[..n])?;
    Ok(())
}

// ----- Keys: generation, import, PKCS#8 -----

fn base_attrs(class: CK_OBJECT_CLASS) -> AttrMap {
    let mut m = AttrMap::new();
    m.set_ulong(CKA_CLASS, class);
    m.set_ulong(CKA_KEY_TYPE, CKK_RSA);
    m
}

/// The key-material attributes of a private key.
fn private_attrs(rsa: &Rsa<Private>) -> CkResult<AttrMap> {
    let mut m = AttrMap::new();
    m.insert(CKA_MODULUS, rsa.n().to_vec());
    m.insert(CKA_PUBLIC_EXPONENT, rsa.e().to_vec());
    m.insert(CKA_PRIVATE_EXPONENT, rsa.d().to_vec());
    let parts = [
        (CKA_PRIME_1, rsa.p()),
        (CKA_PRIME_2, rsa.q()),
        (CKA_EXPONENT_1, rsa.dmp1()),
        (CKA_EXPONENT_2, rsa.dmq1()),
        (CKA_COEFFICIENT, rsa.iqmp()),
    ];
    for (t, v) in parts {
        m.insert(t, v.ok_or(CKR_FUNCTION_FAILED)?.to_vec());
    }
    Ok(m)
}

/// `C_GenerateKeyPair` with `CKM_RSA_PKCS_KEY_PAIR_GEN`: `CKA_MODULUS_BITS` (1024–8192) from
/// the public template, `CKA_PUBLIC_EXPONENT` optional (default 65537).
pub fn generate_key_pair(
    mech: &Mechanism,
    public: &AttrMap,
    _private: &AttrMap,
) -> CkResult<(AttrMap, AttrMap)> {
    no_param(mech)?;
    let bits = public.need_ulong(CKA_MODULUS_BITS)?;
    if !GEN_BITS.contains(&bits) {
        return Err(CKR_KEY_SIZE_RANGE);
    }
    let e = match public.bytes(CKA_PUBLIC_EXPONENT) {
        Some(b) => bn(b)?,
        None => BigNum::from_u32(65537).map_err(|_| CKR_HOST_MEMORY)?,
    };
    // An odd exponent of at least 3 and at most 256 bits (OpenSSL's own limit for keygen).
    if !e.is_bit_set(0) || e.num_bits() < 2 || e.num_bits() > 256 {
        return Err(CKR_ATTRIBUTE_VALUE_INVALID);
    }
    let mut ctx = PkeyCtx::new_id(Id::RSA).map_err(ossl_err)?;
    ctx.keygen_init().map_err(ossl_err)?;
    ctx.set_rsa_keygen_bits(bits as u32).map_err(ossl_err)?;
    ctx.set_rsa_keygen_pubexp(&e).map_err(ossl_err)?;
    let pkey = ctx.keygen().map_err(ossl_err)?;
    let rsa = pkey.rsa().map_err(ossl_err)?;

    let mut pubm = base_attrs(CKO_PUBLIC_KEY);
    pubm.insert(CKA_MODULUS, rsa.n().to_vec());
    pubm.insert(CKA_PUBLIC_EXPONENT, rsa.e().to_vec());
    pubm.set_ulong(CKA_MODULUS_BITS, rsa.n().num_bits() as CK_ULONG);
    let mut privm = base_attrs(CKO_PRIVATE_KEY);
    privm.extend(private_attrs(&rsa)?);
    Ok((pubm, privm))
}

/// Checks the material of an RSA key object being created or unwrapped and completes it:
/// a public key needs `CKA_MODULUS` and `CKA_PUBLIC_EXPONENT` and gets `CKA_MODULUS_BITS`; a
/// private key is checked (with its primes: `RSA_check_key`; without: a round trip through
/// the key) and gets the values computed from it (public exponent, CRT values).
pub fn complete_key(class: CK_OBJECT_CLASS, attrs: &mut AttrMap) -> CkResult<()> {
    match class {
        CKO_PUBLIC_KEY => {
            let n = bn(attrs.need_bytes(CKA_MODULUS)?)?;
            let e = bn(attrs.need_bytes(CKA_PUBLIC_EXPONENT)?)?;
            let bits = n.num_bits().unsigned_abs();
            if !IMPORT_BITS.contains(&bits)
                || !n.is_bit_set(0)
                || !e.is_bit_set(0)
                || e.num_bits() < 2
                || e >= n
            {
                return Err(CKR_ATTRIBUTE_VALUE_INVALID);
            }
            attrs.set_ulong(CKA_MODULUS_BITS, bits as CK_ULONG);
            Ok(())
        }
        CKO_PRIVATE_KEY => {
            let (rsa, computed) = rsa_private_from_attrs(attrs)?;
            if rsa.p().is_some() {
                if !rsa.check_key().unwrap_or(false) {
                    return Err(CKR_ATTRIBUTE_VALUE_INVALID);
                }
            } else {
                round_trip_check(&rsa)?;
            }
            attrs.extend(computed);
            Ok(())
        }
        _ => Err(CKR_ATTRIBUTE_VALUE_INVALID),
    }
}

/// For a key without primes: (2^e)^d mod n must give 2 back.
fn round_trip_check(rsa: &Rsa<Private>) -> CkResult<()> {
    let bad = |_| CKR_ATTRIBUTE_VALUE_INVALID;
    let mut ctx = BigNumContext::new().map_err(|_| CKR_HOST_MEMORY)?;
    let two = BigNum::from_u32(2).map_err(|_| CKR_HOST_MEMORY)?;
    let mut c = BigNum::new().map_err(|_| CKR_HOST_MEMORY)?;
    c.mod_exp(&two, rsa.e(), rsa.n(), &mut ctx).map_err(bad)?;
    let mut m = BigNum::new().map_err(|_| CKR_HOST_MEMORY)?;
    m.mod_exp(&c, rsa.d(), rsa.n(), &mut ctx).map_err(bad)?;
    if m != two {
        return Err(CKR_ATTRIBUTE_VALUE_INVALID);
    }
    Ok(())
}

/// A private key as PKCS#8 `PrivateKeyInfo` DER (for `C_WrapKey`). A key without primes has
/// no such encoding: `CKR_KEY_NOT_WRAPPABLE`.
pub fn to_pkcs8(key: Key) -> CkResult<Zeroizing<Vec<u8>>> {
    let pkey = private_key(&key)?;
    if pkey.rsa().map(|r| r.p().is_none()).unwrap_or(true) {
        return Err(CKR_KEY_NOT_WRAPPABLE);
    }
    pkey.private_key_to_pkcs8()
        .map(Zeroizing::new)
        .map_err(|_| CKR_KEY_NOT_WRAPPABLE)
}

/// The attributes of a PKCS#8 RSA private key (for `C_UnwrapKey`). Undecodable bytes are
/// `CKR_WRAPPED_KEY_INVALID`, a key of another type `CKR_TEMPLATE_INCONSISTENT`.
pub fn from_pkcs8(bytes: &[u8]) -> CkResult<AttrMap> {
    let pkey = PKey::private_key_from_pkcs8(bytes).map_err(|_| CKR_WRAPPED_KEY_INVALID)?;
    if pkey.id() != Id::RSA {
        return Err(CKR_TEMPLATE_INCONSISTENT);
    }
    let rsa = pkey.rsa().map_err(|_| CKR_WRAPPED_KEY_INVALID)?;
    private_attrs(&rsa).map_err(|_| CKR_WRAPPED_KEY_INVALID)
}

// ----- Key wrapping -----

/// `C_WrapKey` with `CKM_RSA_PKCS`, `CKM_RSA_PKCS_OAEP` or `CKM_RSA_X_509`: the key bytes
/// encrypted under the public `wrapping_key`. Key bytes too long for it: `CKR_KEY_SIZE_RANGE`.
pub fn wrap(mech: &Mechanism, wrapping_key: Key, data: &[u8]) -> CkResult<Vec<u8>> {
    let mut op = Encrypt::new(mech, wrapping_key).map_err(|e| match e {
        CKR_KEY_TYPE_INCONSISTENT => CKR_WRAPPING_KEY_TYPE_INCONSISTENT,
        CKR_KEY_SIZE_RANGE => CKR_WRAPPING_KEY_SIZE_RANGE,
        e => e,
    })?;
    let mut v = vec![0u8; op.k];
    let mut out = OutBuf::new(Some(&mut v));
    op.run(data, &mut out).map_err(|e| match e {
        CKR_DATA_LEN_RANGE | CKR_DATA_INVALID => CKR_KEY_SIZE_RANGE,
        e => e,
    })?;
    let n = out.len();
    v.truncate(n);
    Ok(v)
}

/// `C_UnwrapKey`'s decryption with the private `unwrapping_key`. A block of the wrong length
/// is `CKR_WRAPPED_KEY_LEN_RANGE`, a bad padding `CKR_WRAPPED_KEY_INVALID`.
pub fn unwrap(mech: &Mechanism, unwrapping_key: Key, data: &[u8]) -> CkResult<Zeroizing<Vec<u8>>> {
    let mut op = Decrypt::new(mech, unwrapping_key).map_err(|e| match e {
        CKR_KEY_TYPE_INCONSISTENT => CKR_UNWRAPPING_KEY_TYPE_INCONSISTENT,
        CKR_KEY_SIZE_RANGE => CKR_UNWRAPPING_KEY_SIZE_RANGE,
        e => e,
    })?;
    if data.len() != op.k {
        return Err(CKR_WRAPPED_KEY_LEN_RANGE);
    }
    op.decrypt(data).map_err(|_| CKR_WRAPPED_KEY_INVALID)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mech::KeyCache;
    use openssl::hash::{hash, MessageDigest};
    use openssl::sign::Verifier as OsslVerifier;

    /// One 2048-bit key pair per test run (generation is slow).
    fn pair() -> &'static (AttrMap, AttrMap) {
        static PAIR: OnceLock<(AttrMap, AttrMap)> = OnceLock::new();
        PAIR.get_or_init(|| {
            let mut t = AttrMap::new();
            t.set_ulong(CKA_MODULUS_BITS, 2048);
            generate_key_pair(
                &Mechanism::new(CKM_RSA_PKCS_KEY_PAIR_GEN),
                &t,
                &AttrMap::new(),
            )
            .unwrap()
        })
    }

    fn key<'a>(attrs: &'a AttrMap, cache: &'a KeyCache) -> Key<'a> {
        Key { attrs, cache }
    }

    /// The public key built directly with the openssl crate, for cross-checks.
    fn ossl_public() -> PKey<Public> {
        let (p, _) = pair();
        let n = BigNum::from_slice(p.bytes(CKA_MODULUS).unwrap()).unwrap();
        let e = BigNum::from_slice(p.bytes(CKA_PUBLIC_EXPONENT).unwrap()).unwrap();
        PKey::from_rsa(Rsa::from_public_components(n, e).unwrap()).unwrap()
    }

    fn ossl_private() -> PKey<Private> {
        let (_, s) = pair();
        let b = |t| BigNum::from_slice(s.bytes(t).unwrap()).unwrap();
        let rsa = Rsa::from_private_components(
            b(CKA_MODULUS),
            b(CKA_PUBLIC_EXPONENT),
            b(CKA_PRIVATE_EXPONENT),
            b(CKA_PRIME_1),
            b(CKA_PRIME_2),
            b(CKA_EXPONENT_1),
            b(CKA_EXPONENT_2),
            b(CKA_COEFFICIENT),
        )
        .unwrap();
        PKey::from_rsa(rsa).unwrap()
    }

    fn sign(mech: &Mechanism, data: &[u8]) -> CkResult<Vec<u8>> {
        let (_, s) = pair();
        let cache = KeyCache::default();
        let mut op = sign_init(mech, key(s, &cache))?;
        let mut out = vec![0u8; 512];
        let mut ob = OutBuf::new(Some(&mut out));
        op.one_shot(data, &mut ob)?;
        let n = ob.len();
        out.truncate(n);
        Ok(out)
    }

    fn verify(mech: &Mechanism, data: &[u8], sig: &[u8]) -> CkResult<()> {
        let (p, _) = pair();
        let cache = KeyCache::default();
        verify_init(mech, key(p, &cache))?.one_shot(data, sig)
    }

    fn pss(hash_alg: CK_MECHANISM_TYPE, mgf: CK_ULONG, salt_len: CK_ULONG) -> MechParam {
        MechParam::RsaPss {
            hash_alg,
            mgf,
            salt_len,
        }
    }

    fn mech(m: CK_MECHANISM_TYPE, param: MechParam) -> Mechanism {
        Mechanism {
            mechanism: m,
            param,
        }
    }

    #[test]
    fn keygen_attributes() {
        let (p, s) = pair();
        assert_eq!(p.ulong(CKA_MODULUS_BITS).unwrap(), Some(2048));
        assert_eq!(p.bytes(CKA_PUBLIC_EXPONENT).unwrap(), &[1, 0, 1]);
        assert_eq!(s.ulong(CKA_CLASS).unwrap(), Some(CKO_PRIVATE_KEY));
        assert_eq!(p.ulong(CKA_KEY_TYPE).unwrap(), Some(CKK_RSA));
        for t in [
            CKA_PRIME_1,
            CKA_PRIME_2,
            CKA_EXPONENT_1,
            CKA_EXPONENT_2,
            CKA_COEFFICIENT,
        ] {
            assert!(s.bytes(t).is_some());
        }
        let no_bits = AttrMap::new();
        let g = Mechanism::new(CKM_RSA_PKCS_KEY_PAIR_GEN);
        assert_eq!(
            generate_key_pair(&g, &no_bits, &no_bits).err(),
            Some(CKR_TEMPLATE_INCOMPLETE)
        );
        let mut small = AttrMap::new();
        small.set_ulong(CKA_MODULUS_BITS, 512);
        assert_eq!(
            generate_key_pair(&g, &small, &no_bits).err(),
            Some(CKR_KEY_SIZE_RANGE)
        );
        small.set_ulong(CKA_MODULUS_BITS, 2048);
        small.insert(CKA_PUBLIC_EXPONENT, vec![1, 0, 0]);
        assert_eq!(
            generate_key_pair(&g, &small, &no_bits).err(),
            Some(CKR_ATTRIBUTE_VALUE_INVALID)
        );
    }

    #[test]
    fn sha256_pkcs1_verifies_with_openssl() {
        let m = Mechanism::new(CKM_SHA256_RSA_PKCS);
        let sig = sign(&m, b"hello").unwrap();
        assert_eq!(sig.len(), 256);
        let pk = ossl_public();
        let mut v = OsslVerifier::new(MessageDigest::sha256(), &pk).unwrap();
        assert!(v.verify_oneshot(&sig, b"hello").unwrap());
        // Deterministic: OpenSSL's own signature is identical.
        let sk = ossl_private();
        let mut s = openssl::sign::Signer::new(MessageDigest::sha256(), &sk).unwrap();
        assert_eq!(s.sign_oneshot_to_vec(b"hello").unwrap(), sig);
    }

    #[test]
    fn every_hashed_mechanism_round_trips() {
        let pkcs = [
            CKM_SHA1_RSA_PKCS,
            CKM_SHA224_RSA_PKCS,
            CKM_SHA256_RSA_PKCS,
            CKM_SHA384_RSA_PKCS,
            CKM_SHA512_RSA_PKCS,
            CKM_SHA3_224_RSA_PKCS,
            CKM_SHA3_256_RSA_PKCS,
            CKM_SHA3_384_RSA_PKCS,
            CKM_SHA3_512_RSA_PKCS,
        ];
        let pss_mechs = [
            (CKM_SHA1_RSA_PKCS_PSS, CKM_SHA_1),
            (CKM_SHA224_RSA_PKCS_PSS, CKM_SHA224),
            (CKM_SHA256_RSA_PKCS_PSS, CKM_SHA256),
            (CKM_SHA384_RSA_PKCS_PSS, CKM_SHA384),
            (CKM_SHA512_RSA_PKCS_PSS, CKM_SHA512),
            (CKM_SHA3_224_RSA_PKCS_PSS, CKM_SHA3_224),
            (CKM_SHA3_256_RSA_PKCS_PSS, CKM_SHA3_256),
            (CKM_SHA3_384_RSA_PKCS_PSS, CKM_SHA3_384),
            (CKM_SHA3_512_RSA_PKCS_PSS, CKM_SHA3_512),
        ];
        let mut all: Vec<Mechanism> = pkcs.iter().map(|m| Mechanism::new(*m)).collect();
        for (m, h) in pss_mechs {
            all.push(mech(m, pss(h, CKG_MGF1_SHA256, 20)));
        }
        let (p, s) = pair();
        for m in &all {
            // Multi-part sign, single-part verify, and the reverse.
            let cache = KeyCache::default();
            let mut op = sign_init(m, key(s, &cache)).unwrap();
            op.update(b"abc").unwrap();
            op.update(b"def").unwrap();
            let mut out = vec![0u8; 256];
            let mut ob = OutBuf::new(Some(&mut out));
            op.finalize(&mut ob).unwrap();
            assert_eq!(ob.len(), 256);
            verify(m, b"abcdef", &out).unwrap();
            let sig = sign(m, b"xyz").unwrap();
            let cache = KeyCache::default();
            let mut v = verify_init(m, key(p, &cache)).unwrap();
            v.update(b"x").unwrap();
            v.update(b"yz").unwrap();
            v.finalize(&sig).unwrap();
            assert_eq!(verify(m, b"xyZ", &sig), Err(CKR_SIGNATURE_INVALID));
        }
    }

    #[test]
    fn pss_verifies_with_openssl_and_checks_params() {
        let m = mech(CKM_SHA384_RSA_PKCS_PSS, pss(CKM_SHA384, CKG_MGF1_SHA1, 48));
        let sig = sign(&m, b"message").unwrap();
        let pk = ossl_public();
        let mut v = OsslVerifier::new(MessageDigest::sha384(), &pk).unwrap();
        v.set_rsa_padding(Padding::PKCS1_PSS).unwrap();
        v.set_rsa_mgf1_md(MessageDigest::sha1()).unwrap();
        v.set_rsa_pss_saltlen(RsaPssSaltlen::custom(48)).unwrap();
        assert!(v.verify_oneshot(&sig, b"message").unwrap());
        // Another salt length does not verify.
        let other = mech(CKM_SHA384_RSA_PKCS_PSS, pss(CKM_SHA384, CKG_MGF1_SHA1, 32));
        assert_eq!(verify(&other, b"message", &sig), Err(CKR_SIGNATURE_INVALID));
        // hashAlg must match the mechanism; MGF must be known; salt must fit.
        let (_, s) = pair();
        let cache = KeyCache::default();
        let bad = [
            mech(CKM_SHA384_RSA_PKCS_PSS, pss(CKM_SHA256, CKG_MGF1_SHA1, 32)),
            mech(CKM_SHA384_RSA_PKCS_PSS, pss(CKM_SHA384, 0x77, 32)),
            mech(CKM_SHA384_RSA_PKCS_PSS, pss(CKM_SHA384, CKG_MGF1_SHA1, 256)),
            mech(CKM_RSA_PKCS_PSS, pss(CKM_MD5, CKG_MGF1_SHA1, 32)),
            Mechanism::new(CKM_SHA256_RSA_PKCS_PSS),
        ];
        for m in &bad {
            assert_eq!(
                sign_init(m, key(s, &cache)).err(),
                Some(CKR_MECHANISM_PARAM_INVALID)
            );
        }
    }

    #[test]
    fn raw_pss_takes_the_hash() {
        let m = mech(CKM_RSA_PKCS_PSS, pss(CKM_SHA256, CKG_MGF1_SHA256, 32));
        let h = hash(MessageDigest::sha256(), b"data").unwrap();
        let sig = sign(&m, &h).unwrap();
        assert_eq!(sign(&m, &h[..31]), Err(CKR_DATA_LEN_RANGE));
        let pk = ossl_public();
        let mut v = OsslVerifier::new(MessageDigest::sha256(), &pk).unwrap();
        v.set_rsa_padding(Padding::PKCS1_PSS).unwrap();
        v.set_rsa_pss_saltlen(RsaPssSaltlen::custom(32)).unwrap();
        assert!(v.verify_oneshot(&sig, b"data").unwrap());
        verify(&m, &h, &sig).unwrap();
        // The same signature verifies under the hash-and-sign mechanism.
        let full = mech(
            CKM_SHA256_RSA_PKCS_PSS,
            pss(CKM_SHA256, CKG_MGF1_SHA256, 32),
        );
        verify(&full, b"data", &sig).unwrap();
    }

    #[test]
    fn raw_pkcs1_signs_digest_info() {
        // DigestInfo of SHA-256 followed by the hash.
        let mut di = hex_prefix_sha256();
        di.extend_from_slice(&hash(MessageDigest::sha256(), b"hi").unwrap());
        let m = Mechanism::new(CKM_RSA_PKCS);
        let sig = sign(&m, &di).unwrap();
        let pk = ossl_public();
        let mut v = OsslVerifier::new(MessageDigest::sha256(), &pk).unwrap();
        assert!(v.verify_oneshot(&sig, b"hi").unwrap());
        verify(&m, &di, &sig).unwrap();
        assert_eq!(verify(&m, &di[1..], &sig), Err(CKR_SIGNATURE_INVALID));
        assert_eq!(sign(&m, &[7u8; 246]), Err(CKR_DATA_LEN_RANGE));
        sign(&m, &[7u8; 245]).unwrap();
        // Recovery gives the DigestInfo back.
        let (p, _) = pair();
        let cache = KeyCache::default();
        let mut out = vec![0u8; 256];
        let mut ob = OutBuf::new(Some(&mut out));
        verify_recover(&m, key(p, &cache), &sig, &mut ob).unwrap();
        let n = ob.len();
        assert_eq!(&out[..n], di.as_slice());
    }

    fn hex_prefix_sha256() -> Vec<u8> {
        vec![
            0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02,
            0x01, 0x05, 0x00, 0x04, 0x20,
        ]
    }

    #[test]
    fn raw_x509_sign_verify_recover() {
        let m = Mechanism::new(CKM_RSA_X_509);
        let sig = sign(&m, b"short").unwrap();
        assert_eq!(sig.len(), 256);
        verify(&m, b"short", &sig).unwrap();
        assert_eq!(verify(&m, b"shorT", &sig), Err(CKR_SIGNATURE_INVALID));
        let (p, s) = pair();
        // sign_recover / verify_recover round trip; the recovered block is k bytes.
        let cache = KeyCache::default();
        let mut out = vec![0u8; 256];
        let mut ob = OutBuf::new(Some(&mut out));
        sign_recover(&m, key(s, &cache), b"short", &mut ob).unwrap();
        assert_eq!(out, sig);
        let mut rec = vec![0u8; 256];
        let mut ob = OutBuf::new(Some(&mut rec));
        verify_recover(&m, key(p, &cache), &sig, &mut ob).unwrap();
        assert!(rec.ends_with(b"short") && rec[..251].iter().all(|b| *b == 0));
        // A value not below the modulus is invalid; longer than k is out of range.
        let n = p.bytes(CKA_MODULUS).unwrap().to_vec();
        assert_eq!(sign(&m, &n), Err(CKR_DATA_INVALID));
        assert_eq!(sign(&m, &[0u8; 257]), Err(CKR_DATA_LEN_RANGE));
    }

    #[test]
    fn tampered_and_short_signatures() {
        let m = Mechanism::new(CKM_SHA512_RSA_PKCS);
        let mut sig = sign(&m, b"data").unwrap();
        sig[100] ^= 1;
        assert_eq!(verify(&m, b"data", &sig), Err(CKR_SIGNATURE_INVALID));
        assert_eq!(verify(&m, b"data", &sig[1..]), Err(CKR_SIGNATURE_LEN_RANGE));
    }

    #[test]
    fn size_query_keeps_the_operation() {
        let (_, s) = pair();
        let cache = KeyCache::default();
        for m in [
            Mechanism::new(CKM_SHA256_RSA_PKCS),
            Mechanism::new(CKM_RSA_PKCS),
        ] {
            let mut op = sign_init(&m, key(s, &cache)).unwrap();
            let mut q = OutBuf::new(None);
            op.one_shot(b"data", &mut q).unwrap();
            assert_eq!(q.len(), 256);
            let mut small = [0u8; 10];
            let mut sb = OutBuf::new(Some(&mut small));
            assert_eq!(op.one_shot(b"data", &mut sb), Err(CKR_BUFFER_TOO_SMALL));
            let mut out = vec![0u8; 256];
            let mut ob = OutBuf::new(Some(&mut out));
            op.one_shot(b"data", &mut ob).unwrap();
            verify(&m, b"data", &out).unwrap();
        }
        // Multi-part: the query at C_SignFinal keeps the digest state.
        let m = Mechanism::new(CKM_SHA256_RSA_PKCS);
        let mut op = sign_init(&m, key(s, &cache)).unwrap();
        op.update(b"da").unwrap();
        let mut q = OutBuf::new(None);
        op.finalize(&mut q).unwrap();
        op.update(b"ta").unwrap();
        let mut out = vec![0u8; 256];
        let mut ob = OutBuf::new(Some(&mut out));
        op.finalize(&mut ob).unwrap();
        verify(&m, b"data", &out).unwrap();
    }

    fn encrypt(m: &Mechanism, data: &[u8]) -> CkResult<Vec<u8>> {
        let (p, _) = pair();
        let cache = KeyCache::default();
        let mut op = encrypt_init(m, key(p, &cache))?;
        let mut out = vec![0u8; 256];
        let mut ob = OutBuf::new(Some(&mut out));
        op.one_shot(data, &mut ob)?;
        let n = ob.len();
        out.truncate(n);
        Ok(out)
    }

    fn decrypt(m: &Mechanism, data: &[u8]) -> CkResult<Vec<u8>> {
        let (_, s) = pair();
        let cache = KeyCache::default();
        let mut op = decrypt_init(m, key(s, &cache))?;
        let mut out = vec![0u8; 256];
        let mut ob = OutBuf::new(Some(&mut out));
        op.one_shot(data, &mut ob)?;
        let n = ob.len();
        out.truncate(n);
        Ok(out)
    }

    fn oaep(hash_alg: CK_MECHANISM_TYPE, mgf: CK_ULONG, label: &[u8]) -> Mechanism {
        let source = if label.is_empty() {
            0
        } else {
            CKZ_DATA_SPECIFIED
        };
        mech(
            CKM_RSA_PKCS_OAEP,
            MechParam::RsaOaep {
                hash_alg,
                mgf,
                source,
                source_data: label.to_vec(),
            },
        )
    }

    #[test]
    fn encryption_round_trips_and_cross_checks() {
        let mechs = [
            Mechanism::new(CKM_RSA_PKCS),
            Mechanism::new(CKM_RSA_X_509),
            oaep(CKM_SHA_1, CKG_MGF1_SHA1, b""),
            oaep(CKM_SHA256, CKG_MGF1_SHA256, b"label"),
            oaep(CKM_SHA512, CKG_MGF1_SHA1, b""),
        ];
        for m in &mechs {
            let ct = encrypt(m, b"secret").unwrap();
            assert_eq!(ct.len(), 256);
            let pt = decrypt(m, &ct).unwrap();
            if m.mechanism == CKM_RSA_X_509 {
                assert!(pt.len() == 256 && pt.ends_with(b"secret"));
            } else {
                assert_eq!(pt, b"secret");
            }
            assert_eq!(decrypt(m, &ct[1..]), Err(CKR_ENCRYPTED_DATA_LEN_RANGE));
        }
        // OpenSSL encrypts, we decrypt.
        let pk = ossl_public();
        let mut ctx = PkeyCtx::new(&pk).unwrap();
        ctx.encrypt_init().unwrap();
        ctx.set_rsa_padding(Padding::PKCS1_OAEP).unwrap();
        ctx.set_rsa_oaep_md(Md::sha256()).unwrap();
        ctx.set_rsa_mgf1_md(Md::sha256()).unwrap();
        ctx.set_rsa_oaep_label(b"label").unwrap();
        let mut ct = vec![];
        ctx.encrypt_to_vec(b"from openssl", &mut ct).unwrap();
        assert_eq!(decrypt(&mechs[3], &ct).unwrap(), b"from openssl");
        // A wrong label fails as invalid data.
        assert_eq!(
            decrypt(&oaep(CKM_SHA256, CKG_MGF1_SHA256, b"other"), &ct),
            Err(CKR_ENCRYPTED_DATA_INVALID)
        );
        // Input limits.
        assert_eq!(encrypt(&mechs[0], &[1u8; 246]), Err(CKR_DATA_LEN_RANGE));
        encrypt(&mechs[0], &[1u8; 245]).unwrap();
        assert_eq!(encrypt(&mechs[3], &[1u8; 191]), Err(CKR_DATA_LEN_RANGE));
        // Single-part only.
        let (p, _) = pair();
        let cache = KeyCache::default();
        let mut op = encrypt_init(&mechs[0], key(p, &cache)).unwrap();
        let mut ob = OutBuf::new(None);
        assert_eq!(op.update(b"x", &mut ob), Err(CKR_FUNCTION_NOT_SUPPORTED));
        // Bad OAEP parameters.
        let bad = mech(
            CKM_RSA_PKCS_OAEP,
            MechParam::RsaOaep {
                hash_alg: CKM_SHA256,
                mgf: 0,
                source: 0,
                source_data: vec![],
            },
        );
        assert_eq!(
            encrypt_init(&bad, key(p, &cache)).err(),
            Some(CKR_MECHANISM_PARAM_INVALID)
        );
        let nolabel = mech(
            CKM_RSA_PKCS_OAEP,
            MechParam::RsaOaep {
                hash_alg: CKM_SHA256,
                mgf: CKG_MGF1_SHA256,
                source: 0,
                source_data: vec![1],
            },
        );
        assert_eq!(
            encrypt_init(&nolabel, key(p, &cache)).err(),
            Some(CKR_MECHANISM_PARAM_INVALID)
        );
    }

    #[test]
    fn pkcs1_bad_padding_is_rejected_not_randomised() {
        let m = Mechanism::new(CKM_RSA_PKCS);
        // Raw-encrypt a block whose padding is not PKCS#1 type 2.
        let mut block = vec![0u8; 256];
        block[1] = 1;
        block[255] = 9;
        let ct = encrypt(&Mechanism::new(CKM_RSA_X_509), &block).unwrap();
        assert_eq!(decrypt(&m, &ct), Err(CKR_ENCRYPTED_DATA_INVALID));
        let mut good = encrypt(&m, b"abc").unwrap();
        good[5] ^= 0x40;
        assert_eq!(decrypt(&m, &good), Err(CKR_ENCRYPTED_DATA_INVALID));
    }

    #[test]
    fn decrypt_size_query_and_exact_buffer() {
        let m = Mechanism::new(CKM_RSA_PKCS);
        let ct = encrypt(&m, b"twelve bytes").unwrap();
        let (_, s) = pair();
        let cache = KeyCache::default();
        let mut op = decrypt_init(&m, key(s, &cache)).unwrap();
        let mut q = OutBuf::new(None);
        op.one_shot(&ct, &mut q).unwrap();
        assert_eq!(q.len(), 256);
        let mut small = [0u8; 4];
        let mut sb = OutBuf::new(Some(&mut small));
        assert_eq!(op.one_shot(&ct, &mut sb), Err(CKR_BUFFER_TOO_SMALL));
        assert_eq!(sb.len(), 12);
        let mut exact = [0u8; 12];
        let mut eb = OutBuf::new(Some(&mut exact));
        op.one_shot(&ct, &mut eb).unwrap();
        assert_eq!(&exact, b"twelve bytes");
    }

    #[test]
    fn pkcs8_round_trip() {
        let (_, s) = pair();
        let cache = KeyCache::default();
        let der = to_pkcs8(key(s, &cache)).unwrap();
        let back = from_pkcs8(&der).unwrap();
        for (t, v) in &back {
            assert_eq!(s.bytes(*t), Some(v.as_slice()), "attribute {t:#x}");
        }
        assert_eq!(from_pkcs8(&der[1..]).err(), Some(CKR_WRAPPED_KEY_INVALID));
        let ec = PKey::ec_gen("prime256v1")
            .unwrap()
            .private_key_to_pkcs8()
            .unwrap();
        assert_eq!(from_pkcs8(&ec).err(), Some(CKR_TEMPLATE_INCONSISTENT));
    }

    #[test]
    fn wrap_unwrap() {
        let (p, s) = pair();
        let cache = KeyCache::default();
        let secret = [0x5au8; 32];
        for m in [
            Mechanism::new(CKM_RSA_PKCS),
            oaep(CKM_SHA256, CKG_MGF1_SHA256, b""),
        ] {
            let w = wrap(&m, key(p, &cache), &secret).unwrap();
            assert_eq!(unwrap(&m, key(s, &cache), &w).unwrap().as_slice(), &secret);
            let mut bad = w.clone();
            bad[0] ^= 0x80;
            bad[200] ^= 1;
            assert_eq!(
                unwrap(&m, key(s, &cache), &bad).err(),
                Some(CKR_WRAPPED_KEY_INVALID)
            );
            assert_eq!(
                unwrap(&m, key(s, &cache), &w[..255]).err(),
                Some(CKR_WRAPPED_KEY_LEN_RANGE)
            );
        }
        let m = Mechanism::new(CKM_RSA_PKCS);
        assert_eq!(
            wrap(&m, key(p, &cache), &[0u8; 300]).err(),
            Some(CKR_KEY_SIZE_RANGE)
        );
    }

    #[test]
    fn import_checks_and_completes() {
        let (p, s) = pair();
        // Public: CKA_MODULUS_BITS is added.
        let mut pubm = base_attrs(CKO_PUBLIC_KEY);
        pubm.insert(CKA_MODULUS, p.bytes(CKA_MODULUS).unwrap().to_vec());
        pubm.insert(CKA_PUBLIC_EXPONENT, vec![1, 0, 1]);
        complete_key(CKO_PUBLIC_KEY, &mut pubm).unwrap();
        assert_eq!(pubm.ulong(CKA_MODULUS_BITS).unwrap(), Some(2048));
        let mut even = pubm.clone();
        even.insert(CKA_PUBLIC_EXPONENT, vec![1, 0, 0]);
        assert_eq!(
            complete_key(CKO_PUBLIC_KEY, &mut even),
            Err(CKR_ATTRIBUTE_VALUE_INVALID)
        );
        let mut missing = pubm.clone();
        missing.remove(&CKA_MODULUS);
        assert_eq!(
            complete_key(CKO_PUBLIC_KEY, &mut missing),
            Err(CKR_TEMPLATE_INCOMPLETE)
        );

        // Private with primes only: e and the CRT values are computed.
        let mut priv_pq = base_attrs(CKO_PRIVATE_KEY);
        for t in [CKA_MODULUS, CKA_PRIVATE_EXPONENT, CKA_PRIME_1, CKA_PRIME_2] {
            priv_pq.insert(t, s.bytes(t).unwrap().to_vec());
        }
        complete_key(CKO_PRIVATE_KEY, &mut priv_pq).unwrap();
        for t in [
            CKA_PUBLIC_EXPONENT,
            CKA_EXPONENT_1,
            CKA_EXPONENT_2,
            CKA_COEFFICIENT,
        ] {
            assert_eq!(priv_pq.bytes(t), s.bytes(t), "attribute {t:#x}");
        }
        // A wrong prime is caught.
        let mut wrong = priv_pq.clone();
        let mut q = s.bytes(CKA_PRIME_2).unwrap().to_vec();
        *q.last_mut().unwrap() ^= 2;
        wrong.insert(CKA_PRIME_2, q);
        assert_eq!(
            complete_key(CKO_PRIVATE_KEY, &mut wrong),
            Err(CKR_ATTRIBUTE_VALUE_INVALID)
        );

        // Private with n, e, d only: usable for signing, not wrappable.
        let mut ned = base_attrs(CKO_PRIVATE_KEY);
        for t in [CKA_MODULUS, CKA_PUBLIC_EXPONENT, CKA_PRIVATE_EXPONENT] {
            ned.insert(t, s.bytes(t).unwrap().to_vec());
        }
        complete_key(CKO_PRIVATE_KEY, &mut ned).unwrap();
        let cache = KeyCache::default();
        let m = Mechanism::new(CKM_SHA256_RSA_PKCS);
        let mut op = sign_init(&m, key(&ned, &cache)).unwrap();
        let mut out = vec![0u8; 256];
        let mut ob = OutBuf::new(Some(&mut out));
        op.one_shot(b"n,e,d", &mut ob).unwrap();
        verify(&m, b"n,e,d", &out).unwrap();
        assert_eq!(
            to_pkcs8(key(&ned, &cache)).err(),
            Some(CKR_KEY_NOT_WRAPPABLE)
        );
        let mut bad_d = ned.clone();
        bad_d.insert(CKA_PRIVATE_EXPONENT, vec![3]);
        assert_eq!(
            complete_key(CKO_PRIVATE_KEY, &mut bad_d),
            Err(CKR_ATTRIBUTE_VALUE_INVALID)
        );
        let mut no_e = ned.clone();
        no_e.remove(&CKA_PUBLIC_EXPONENT);
        assert_eq!(
            complete_key(CKO_PRIVATE_KEY, &mut no_e),
            Err(CKR_TEMPLATE_INCOMPLETE)
        );
    }

    #[test]
    fn key_type_and_class_mismatch() {
        let (p, s) = pair();
        let cache = KeyCache::default();
        let mut ec = s.clone();
        ec.set_ulong(CKA_KEY_TYPE, CKK_EC);
        let m = Mechanism::new(CKM_SHA256_RSA_PKCS);
        assert_eq!(
            sign_init(&m, key(&ec, &cache)).err(),
            Some(CKR_KEY_TYPE_INCONSISTENT)
        );
        // Signing needs the private key.
        assert_eq!(
            sign_init(&m, key(p, &cache)).err(),
            Some(CKR_KEY_TYPE_INCONSISTENT)
        );
        // Verification also works with the private object.
        let sig = sign(&m, b"x").unwrap();
        let cache = KeyCache::default();
        verify_init(&m, key(s, &cache))
            .unwrap()
            .one_shot(b"x", &sig)
            .unwrap();
        assert_eq!(
            sign_init(&Mechanism::new(CKM_ECDSA), key(s, &cache)).err(),
            Some(CKR_MECHANISM_INVALID)
        );
    }

    #[test]
    fn key_is_parsed_once() {
        let (_, s) = pair();
        let cache = KeyCache::default();
        let m = Mechanism::new(CKM_SHA256_RSA_PKCS);
        let _ = sign_init(&m, key(s, &cache)).unwrap();
        let first = cache.private.get().unwrap() as *const _;
        let _ = sign_init(&m, key(s, &cache)).unwrap();
        assert_eq!(first, cache.private.get().unwrap() as *const _);
    }
}
