//! Elliptic curves: ECDSA (P-256, P-384, P-521, secp256k1), EdDSA (Ed25519, Ed448), ECDH on
//! the Weierstrass curves and X25519/X448, key-pair generation, import checks and PKCS#8.
//!
//! Curves are named in `CKA_EC_PARAMS` by their DER OID or by a DER PrintableString curve name
//! (`"edwards25519"`, `"curve25519"`, `"prime256v1"`, …). An unknown curve is
//! `CKR_CURVE_NOT_SUPPORTED`; explicit `ecParameters`, `implicitlyCA` or a malformed value
//! `CKR_DOMAIN_PARAMS_INVALID`, as the specification asks. Points (`CKA_EC_POINT`, the peer's
//! value in `CK_ECDH1_DERIVE_PARAMS`) are accepted both raw and wrapped in a DER OCTET STRING,
//! compressed or not. Generated public keys carry the DER OCTET STRING form — the
//! uncompressed point, or for Edwards and Montgomery keys the RFC 8032/7748 bytes (PKCS#11 3.0
//! wording, which SoftHSM, OpenSC and p11-kit consumers expect; 3.2 also allows the bare
//! bytes). Keys are parsed once into the object's cache, as provider-native OpenSSL keys.
//!
//! Decisions:
//! - **ECDSA signatures** are `r || s`, each left-padded to the length of the group order
//!   (`nLen`). Verification takes exactly `2 nLen` bytes; other lengths are
//!   `CKR_SIGNATURE_LEN_RANGE` (see `ecdsa_der`: PKCS#11 lets a token take shorter forms, and
//!   this one does not). `CKM_ECDSA` signs its input as the hash, of any
//!   length (the leftmost bits of a longer one are used).
//! - **EdDSA** (`CKM_EDDSA`, single- and multi-part; pure EdDSA reads the message twice, so the
//!   parts are kept, up to 64 MiB, beyond which `CKR_TOKEN_RESOURCE_EXCEEDED`): no parameter is
//!   pure Ed25519 / Ed448. With `CK_EDDSA_PARAMS`: `phFlag` selects Ed25519ph / Ed448ph (the
//!   token hashes the message), otherwise Ed25519ctx / Ed448 with the context. OpenSSL, like
//!   RFC 8032's advice, refuses Ed25519ctx with an empty context, so that combination is pure
//!   Ed25519 (what SoftHSM does with any parameter). Parameters are honoured for curves named
//!   by OID as well. Contexts are at most 255 bytes (`CKR_MECHANISM_PARAM_INVALID`).
//! - **ECDH** (`CKM_ECDH1_DERIVE`, `CKM_ECDH1_COFACTOR_DERIVE`; the supported curves have
//!   cofactor 1, and X25519/X448 clamp, so both compute the same value). A peer point that is
//!   malformed, off the curve, or (X25519/X448) gives an all-zero secret is
//!   `CKR_MECHANISM_PARAM_INVALID`. With `CKD_NULL` the secret is the x-coordinate (or u); a
//!   shorter key keeps its rightmost bytes — "the truncation removes bytes from the leading end
//!   of the secret value", in the mechanism's definition (SoftHSM and NSS agree) — and a longer
//!   one is `CKR_TEMPLATE_INCONSISTENT`. `CKD_SHA*_KDF` and `CKD_SHA3_*_KDF` apply the ANSI
//!   X9.63 KDF with the shared data as SharedInfo; with no length asked for, they produce one
//!   hash length. The SP 800-56A and BLAKE2b KDFs are `CKR_MECHANISM_PARAM_INVALID`.

use super::rsa::hash_md;
use super::{ossl_err, Key, SignOp, VerifyOp};
use crate::attrs::{AttrMap, AttrMapExt};
use opencf_abi::ossl_pk::{set_ctx_params, Param};
use opencf_abi::sys::*;
use opencf_abi::{CkResult, MechParam, Mechanism, OutBuf};
use openssl::bn::{BigNum, BigNumContext};
use openssl::ec::{EcGroup, EcKey, EcPoint, PointConversionForm};
use openssl::ecdsa::EcdsaSig;
use openssl::error::ErrorStack;
use openssl::md_ctx::MdCtx;
use openssl::nid::Nid;
use openssl::pkey::{Id, PKey, Private, Public};
use openssl::pkey_ctx::{PkeyCtx, PkeyCtxRef};
use std::ffi::CStr;
use zeroize::Zeroizing;

// ----- Curves -----

/// How a curve computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    /// Short Weierstrass (ECDSA, ECDH): `CKK_EC`.
    Weierstrass(Nid),
    /// Twisted Edwards (EdDSA): `CKK_EC_EDWARDS`.
    Edwards(Id),
    /// Montgomery (X25519, X448): `CKK_EC_MONTGOMERY`.
    Montgomery(Id),
}

/// A supported curve.
#[derive(Debug)]
struct Curve {
    family: Family,
    /// `CKA_EC_PARAMS` as a DER OBJECT IDENTIFIER.
    oid: &'static [u8],
    /// Names accepted in a DER PrintableString `CKA_EC_PARAMS` (case-insensitive).
    names: &'static [&'static str],
    /// Weierstrass: bytes of a coordinate / of the group order. Others: bytes of a public key.
    len: usize,
    /// Edwards and Montgomery: bytes of a private key.
    priv_len: usize,
}

impl Curve {
    fn key_type(&self) -> CK_KEY_TYPE {
        match self.family {
            Family::Weierstrass(_) => CKK_EC,
            Family::Edwards(_) => CKK_EC_EDWARDS,
            Family::Montgomery(_) => CKK_EC_MONTGOMERY,
        }
    }
    fn group(&self) -> CkResult<EcGroup> {
        match self.family {
            Family::Weierstrass(nid) => EcGroup::from_curve_name(nid).map_err(ossl_err),
            _ => Err(CKR_KEY_TYPE_INCONSISTENT),
        }
    }
}

static CURVES: [Curve; 8] = [
    Curve {
        family: Family::Weierstrass(Nid::X9_62_PRIME256V1),
        oid: &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07],
        names: &["prime256v1", "secp256r1", "P-256", "nistp256"],
        len: 32,
        priv_len: 32,
    },
    Curve {
        family: Family::Weierstrass(Nid::SECP384R1),
        oid: &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22],
        names: &["secp384r1", "P-384", "nistp384"],
        len: 48,
        priv_len: 48,
    },
    Curve {
        family: Family::Weierstrass(Nid::SECP521R1),
        oid: &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x23],
        names: &["secp521r1", "P-521", "nistp521"],
        len: 66,
        priv_len: 66,
    },
    Curve {
        family: Family::Weierstrass(Nid::SECP256K1),
        oid: &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x0a],
        names: &["secp256k1"],
        len: 32,
        priv_len: 32,
    },
    Curve {
        family: Family::Edwards(Id::ED25519),
        oid: &[0x06, 0x03, 0x2b, 0x65, 0x70],
        names: &["edwards25519", "Ed25519"],
        len: 32,
        priv_len: 32,
    },
    Curve {
        family: Family::Edwards(Id::ED448),
        oid: &[0x06, 0x03, 0x2b, 0x65, 0x71],
        names: &["edwards448", "Ed448"],
        len: 57,
        priv_len: 57,
    },
    Curve {
        family: Family::Montgomery(Id::X25519),
        oid: &[0x06, 0x03, 0x2b, 0x65, 0x6e],
        names: &["curve25519", "X25519"],
        len: 32,
        priv_len: 32,
    },
    Curve {
        family: Family::Montgomery(Id::X448),
        oid: &[0x06, 0x03, 0x2b, 0x65, 0x6f],
        names: &["curve448", "X448"],
        len: 56,
        priv_len: 56,
    },
];

/// Splits one DER TLV that spans all of `b`: `(tag, content)`.
fn der_tlv(b: &[u8]) -> Option<(u8, &[u8])> {
    let (&tag, rest) = b.split_first()?;
    let (&l0, rest) = rest.split_first()?;
    let (len, rest) = match l0 {
        0..=0x7f => (l0 as usize, rest),
        0x81 => {
            let (&l, rest) = rest.split_first()?;
            (l as usize, rest)
        }
        0x82 => {
            let l = u16::from_be_bytes(rest.get(..2)?.try_into().ok()?) as usize;
            (l, &rest[2..])
        }
        _ => return None,
    };
    (rest.len() == len).then_some((tag, rest))
}

/// A DER OCTET STRING holding `v`.
fn der_octet_string(v: &[u8]) -> Vec<u8> {
    let mut out = vec![0x04];
    match v.len() {
        n @ 0..=0x7f => out.push(n as u8),
        n @ 0x80..=0xff => out.extend_from_slice(&[0x81, n as u8]),
        n => out.extend_from_slice(&[0x82, (n >> 8) as u8, n as u8]),
    }
    out.extend_from_slice(v);
    out
}

/// The curve named by a `CKA_EC_PARAMS` value. As PKCS#11 says: an unknown curve (OID or name)
/// is `CKR_CURVE_NOT_SUPPORTED`; a malformed value or an unsupported representation (explicit
/// `ecParameters`, `implicitlyCA`) is `CKR_DOMAIN_PARAMS_INVALID`.
fn curve_from_params(params: &[u8]) -> CkResult<&'static Curve> {
    let (tag, content) = der_tlv(params).ok_or(CKR_DOMAIN_PARAMS_INVALID)?;
    let found = match tag {
        0x06 => CURVES.iter().find(|c| c.oid == params),
        0x13 => {
            let name = std::str::from_utf8(content).map_err(|_| CKR_DOMAIN_PARAMS_INVALID)?;
            CURVES
                .iter()
                .find(|c| c.names.iter().any(|n| n.eq_ignore_ascii_case(name)))
        }
        // ecParameters (0x30), implicitlyCA (0x05) and anything else.
        _ => return Err(CKR_DOMAIN_PARAMS_INVALID),
    };
    found.ok_or(CKR_CURVE_NOT_SUPPORTED)
}

/// Whether two `CKA_EC_PARAMS` values name the same supported curve (an OID and the curve's
/// printable name count as the same).
pub fn same_curve(a: &[u8], b: &[u8]) -> bool {
    match (curve_from_params(a), curve_from_params(b)) {
        (Ok(x), Ok(y)) => std::ptr::eq(x, y),
        _ => false,
    }
}

/// The curve of a key's attributes, which must be of `key_type`.
fn curve_of(attrs: &AttrMap, key_type: CK_KEY_TYPE) -> CkResult<&'static Curve> {
    let c = curve_from_params(attrs.need_bytes(CKA_EC_PARAMS)?)?;
    if c.key_type() != key_type {
        return Err(CKR_ATTRIBUTE_VALUE_INVALID);
    }
    Ok(c)
}

/// The raw encoding of a point given raw or DER-wrapped (`None` when neither fits the curve).
fn raw_point<'p>(curve: &Curve, b: &'p [u8]) -> Option<&'p [u8]> {
    let fits = |v: &[u8]| match curve.family {
        Family::Weierstrass(_) => match v.first() {
            Some(4) => v.len() == 1 + 2 * curve.len,
            Some(2 | 3) => v.len() == 1 + curve.len,
            _ => false,
        },
        _ => v.len() == curve.len,
    };
    if fits(b) {
        return Some(b);
    }
    match der_tlv(b) {
        Some((0x04, inner)) if fits(inner) => Some(inner),
        _ => None,
    }
}

/// A public key from a point (raw or DER-wrapped), checked to be on the curve.
fn public_from_point(curve: &Curve, point: &[u8]) -> Option<PKey<Public>> {
    let raw = raw_point(curve, point)?;
    match curve.family {
        Family::Weierstrass(_) => {
            let group = curve.group().ok()?;
            let mut ctx = BigNumContext::new().ok()?;
            let p = EcPoint::from_bytes(&group, raw, &mut ctx).ok()?;
            if p.is_infinity(&group) {
                return None;
            }
            let k = EcKey::from_public_key(&group, &p).ok()?;
            k.check_key().ok()?;
            let der = PKey::from_ec_key(k).ok()?.public_key_to_der().ok()?;
            PKey::public_key_from_der(&der).ok()
        }
        Family::Edwards(id) | Family::Montgomery(id) => {
            PKey::public_key_from_raw_bytes(raw, id).ok()
        }
    }
}

/// A Weierstrass private key from its scalar, checked to be in `[1, n-1]`.
fn ec_private(curve: &Curve, value: &[u8]) -> CkResult<EcKey<Private>> {
    let group = curve.group()?;
    let d = BigNum::from_slice(value).map_err(ossl_err)?;
    let mut ctx = BigNumContext::new().map_err(ossl_err)?;
    let mut order = BigNum::new().map_err(ossl_err)?;
    group.order(&mut order, &mut ctx).map_err(ossl_err)?;
    if d.num_bits() == 0 || d >= order {
        return Err(CKR_ATTRIBUTE_VALUE_INVALID);
    }
    let mut q = EcPoint::new(&group).map_err(ossl_err)?;
    q.mul_generator2(&group, &d, &mut ctx).map_err(ossl_err)?;
    EcKey::from_private_components(&group, &d, &q).map_err(|_| CKR_ATTRIBUTE_VALUE_INVALID)
}

/// A private key of `curve` from `CKA_VALUE` (`CKR_ATTRIBUTE_VALUE_INVALID` when bad).
fn private_from_value(curve: &Curve, value: &[u8]) -> CkResult<PKey<Private>> {
    match curve.family {
        Family::Weierstrass(_) => {
            let legacy = PKey::from_ec_key(ec_private(curve, value)?).map_err(ossl_err)?;
            let der = Zeroizing::new(legacy.private_key_to_pkcs8().map_err(ossl_err)?);
            PKey::private_key_from_pkcs8(&der).map_err(ossl_err)
        }
        Family::Edwards(id) | Family::Montgomery(id) => {
            if value.len() != curve.priv_len {
                return Err(CKR_ATTRIBUTE_VALUE_INVALID);
            }
            PKey::private_key_from_raw_bytes(value, id).map_err(|_| CKR_ATTRIBUTE_VALUE_INVALID)
        }
    }
}

fn check_type(key: &Key, allowed: &[CK_KEY_TYPE]) -> CkResult<CK_KEY_TYPE> {
    let t = key.key_type()?;
    if !allowed.contains(&t) {
        return Err(CKR_KEY_TYPE_INCONSISTENT);
    }
    Ok(t)
}

/// The cached private key of an EC private key object of one of the `allowed` types.
fn private_key<'a>(
    key: &Key<'a>,
    allowed: &[CK_KEY_TYPE],
) -> CkResult<(&'a PKey<Private>, &'static Curve)> {
    let t = check_type(key, allowed)?;
    if key.class()? != CKO_PRIVATE_KEY {
        return Err(CKR_KEY_TYPE_INCONSISTENT);
    }
    let curve = curve_of(key.attrs, t).map_err(|_| CKR_KEY_TYPE_INCONSISTENT)?;
    if let Some(p) = key.cache.private.get() {
        return Ok((p, curve));
    }
    // The material was checked when the object was made; failing now means it is unusable.
    let value = key
        .attrs
        .need_bytes(CKA_VALUE)
        .map_err(|_| CKR_FUNCTION_FAILED)?;
    let pkey = private_from_value(curve, value).map_err(|_| CKR_FUNCTION_FAILED)?;
    Ok((key.cache.private.get_or_init(|| pkey), curve))
}

/// The cached public key of an EC public key object (or of a private one).
fn public_key<'a>(
    key: &Key<'a>,
    allowed: &[CK_KEY_TYPE],
) -> CkResult<(&'a PKey<Public>, &'static Curve)> {
    let t = check_type(key, allowed)?;
    let curve = curve_of(key.attrs, t).map_err(|_| CKR_KEY_TYPE_INCONSISTENT)?;
    if let Some(p) = key.cache.public.get() {
        return Ok((p, curve));
    }
    let pkey = match key.class()? {
        CKO_PUBLIC_KEY => {
            let point = key
                .attrs
                .need_bytes(CKA_EC_POINT)
                .map_err(|_| CKR_FUNCTION_FAILED)?;
            public_from_point(curve, point).ok_or(CKR_FUNCTION_FAILED)?
        }
        CKO_PRIVATE_KEY => {
            let (sk, _) = private_key(key, allowed)?;
            let der = sk.public_key_to_der().map_err(ossl_err)?;
            PKey::public_key_from_der(&der).map_err(ossl_err)?
        }
        _ => return Err(CKR_KEY_TYPE_INCONSISTENT),
    };
    Ok((key.cache.public.get_or_init(|| pkey), curve))
}

/// The public key of an EC, Edwards or Montgomery key object, public or private (a private
/// key's is computed from `CKA_VALUE`), for its `CKA_PUBLIC_KEY_INFO`.
pub(super) fn public_pkey<'a>(key: &Key<'a>) -> CkResult<&'a PKey<Public>> {
    public_key(key, &[CKK_EC, CKK_EC_EDWARDS, CKK_EC_MONTGOMERY]).map(|(p, _)| p)
}

// ----- Signatures -----

fn ecdsa_hash(m: CK_MECHANISM_TYPE) -> Option<Option<CK_MECHANISM_TYPE>> {
    Some(Some(match m {
        CKM_ECDSA => return Some(None),
        CKM_ECDSA_SHA1 => CKM_SHA_1,
        CKM_ECDSA_SHA224 => CKM_SHA224,
        CKM_ECDSA_SHA256 => CKM_SHA256,
        CKM_ECDSA_SHA384 => CKM_SHA384,
        CKM_ECDSA_SHA512 => CKM_SHA512,
        CKM_ECDSA_SHA3_224 => CKM_SHA3_224,
        CKM_ECDSA_SHA3_256 => CKM_SHA3_256,
        CKM_ECDSA_SHA3_384 => CKM_SHA3_384,
        CKM_ECDSA_SHA3_512 => CKM_SHA3_512,
        _ => return None,
    }))
}

fn no_param(mech: &Mechanism) -> CkResult<()> {
    match &mech.param {
        MechParam::None => Ok(()),
        MechParam::Bytes(b) if b.is_empty() => Ok(()),
        _ => Err(CKR_MECHANISM_PARAM_INVALID),
    }
}

/// DER ECDSA signature → `r || s`, each `n` bytes.
fn der_to_raw(der: &[u8], n: usize, out: &mut [u8]) -> CkResult<()> {
    let sig = EcdsaSig::from_der(der).map_err(ossl_err)?;
    let width = i32::try_from(n).map_err(|_| CKR_FUNCTION_FAILED)?;
    out[..n].copy_from_slice(&sig.r().to_vec_padded(width).map_err(ossl_err)?);
    out[n..2 * n].copy_from_slice(&sig.s().to_vec_padded(width).map_err(ossl_err)?);
    Ok(())
}

/// `r || s` → DER (`None` when the halves do not parse).
fn raw_to_der(sig: &[u8]) -> Option<Vec<u8>> {
    let (r, s) = sig.split_at(sig.len() / 2);
    let r = BigNum::from_slice(r).ok()?;
    let s = BigNum::from_slice(s).ok()?;
    EcdsaSig::from_private_components(r, s).ok()?.to_der().ok()
}

/// The OpenSSL EdDSA instance and context of a `CKM_EDDSA` parameter (`None`: the default,
/// pure Ed25519 or Ed448 without context).
fn eddsa_instance(mech: &Mechanism, id: Id) -> CkResult<Option<(&'static CStr, &[u8])>> {
    let (ph, context) = match &mech.param {
        MechParam::None => return Ok(None),
        MechParam::Bytes(b) if b.is_empty() => return Ok(None),
        MechParam::Eddsa { ph, context } => (*ph, context.as_slice()),
        _ => return Err(CKR_MECHANISM_PARAM_INVALID),
    };
    if context.len() > 255 {
        return Err(CKR_MECHANISM_PARAM_INVALID);
    }
    let instance = match (id == Id::ED25519, ph, context.is_empty()) {
        (true, false, true) => return Ok(None),
        (true, false, false) => c"Ed25519ctx",
        (true, true, _) => c"Ed25519ph",
        (false, false, _) => c"Ed448",
        (false, true, _) => c"Ed448ph",
    };
    Ok(Some((instance, context)))
}

/// Applies the EdDSA instance and context of `mech` to an initialised context.
fn set_eddsa<T>(pctx: &mut PkeyCtxRef<T>, mech: &Mechanism, id: Id) -> CkResult<()> {
    let Some((instance, context)) = eddsa_instance(mech, id)? else {
        return Ok(());
    };
    let params = [
        Param::Utf8(c"instance", instance),
        Param::Octets(c"context-string", context),
    ];
    set_ctx_params(pctx, &params).map_err(|_| CKR_MECHANISM_PARAM_INVALID)
}

/// Most message bytes a multi-part EdDSA operation holds (pure EdDSA reads the message twice,
/// so the parts are kept until the end); more is `CKR_TOKEN_RESOURCE_EXCEEDED`.
const EDDSA_MAX_BUFFER: usize = 64 << 20;

/// Appends a part of an EdDSA message to its buffer.
fn buffer_part(buf: &mut Vec<u8>, data: &[u8]) -> CkResult<()> {
    if buf.len() + data.len() > EDDSA_MAX_BUFFER {
        return Err(CKR_TOKEN_RESOURCE_EXCEEDED);
    }
    buf.extend_from_slice(data);
    Ok(())
}

enum Signer {
    /// `CKM_ECDSA`: the input is the hash (single-part).
    Ecdsa(PkeyCtx<Private>),
    /// `CKM_ECDSA_SHA*`.
    EcdsaHashed(MdCtx),
    /// `CKM_EDDSA`, with the parts of a multi-part message.
    Eddsa(MdCtx, Vec<u8>),
}

struct Sign {
    signer: Signer,
    /// ECDSA: length of r and of s. EdDSA: 0.
    n: usize,
    /// Signature length.
    sig_len: usize,
}

impl SignOp for Sign {
    fn update(&mut self, data: &[u8]) -> CkResult<()> {
        match &mut self.signer {
            Signer::EcdsaHashed(md) => md.digest_sign_update(data).map_err(ossl_err),
            Signer::Eddsa(_, buf) => buffer_part(buf, data),
            Signer::Ecdsa(_) => Err(CKR_FUNCTION_NOT_SUPPORTED),
        }
    }
    fn finalize(&mut self, out: &mut OutBuf) -> CkResult<()> {
        let Some(buf) = out.reserve(self.sig_len)? else {
            return Ok(());
        };
        match &mut self.signer {
            Signer::EcdsaHashed(md) => {
                let mut der = Vec::with_capacity(self.sig_len + 16);
                md.digest_sign_final_to_vec(&mut der).map_err(ossl_err)?;
                der_to_raw(&der, self.n, buf)
            }
            Signer::Eddsa(md, msg) => {
                let n = md.digest_sign(msg, Some(buf)).map_err(ossl_err)?;
                out.set_len(n);
                Ok(())
            }
            Signer::Ecdsa(_) => Err(CKR_FUNCTION_NOT_SUPPORTED),
        }
    }
    fn one_shot(&mut self, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        let Some(buf) = out.reserve(self.sig_len)? else {
            return Ok(());
        };
        let mut der = Vec::with_capacity(self.sig_len + 16);
        match &mut self.signer {
            Signer::Ecdsa(ctx) => {
                ctx.sign_to_vec(data, &mut der).map_err(ossl_err)?;
            }
            Signer::EcdsaHashed(md) => {
                md.digest_sign_update(data).map_err(ossl_err)?;
                md.digest_sign_final_to_vec(&mut der).map_err(ossl_err)?;
            }
            Signer::Eddsa(md, _) => {
                let n = md.digest_sign(data, Some(buf)).map_err(ossl_err)?;
                out.set_len(n);
                return Ok(());
            }
        }
        der_to_raw(&der, self.n, buf)
    }
}

enum Verifier {
    Ecdsa(PkeyCtx<Public>),
    EcdsaHashed(MdCtx),
    Eddsa(MdCtx, Vec<u8>),
}

struct Verify {
    verifier: Verifier,
    /// ECDSA: the longest signature (`2 nLen`); EdDSA: the signature length.
    sig_len: usize,
}

fn verdict(r: Result<bool, ErrorStack>) -> CkResult<()> {
    match r {
        Ok(true) => Ok(()),
        _ => Err(CKR_SIGNATURE_INVALID),
    }
}

/// The DER form of an ECDSA `r || s` signature. The token produces exactly `2 nLen` bytes and
/// accepts only that length: a shorter encoding is a malleable second form of the same
/// signature (Wycheproof counts it invalid), so any other length is `CKR_SIGNATURE_LEN_RANGE`.
fn ecdsa_der(sig: &[u8], max: usize) -> CkResult<Vec<u8>> {
    if sig.len() != max {
        return Err(CKR_SIGNATURE_LEN_RANGE);
    }
    raw_to_der(sig).ok_or(CKR_SIGNATURE_INVALID)
}

/// EdDSA signatures have one length.
fn eddsa_len(sig: &[u8], len: usize) -> CkResult<()> {
    if sig.len() != len {
        return Err(CKR_SIGNATURE_LEN_RANGE);
    }
    Ok(())
}

impl VerifyOp for Verify {
    fn update(&mut self, data: &[u8]) -> CkResult<()> {
        match &mut self.verifier {
            Verifier::EcdsaHashed(md) => md.digest_verify_update(data).map_err(ossl_err),
            Verifier::Eddsa(_, buf) => buffer_part(buf, data),
            Verifier::Ecdsa(_) => Err(CKR_FUNCTION_NOT_SUPPORTED),
        }
    }
    fn finalize(&mut self, sig: &[u8]) -> CkResult<()> {
        let len = self.sig_len;
        match &mut self.verifier {
            Verifier::EcdsaHashed(md) => {
                let der = ecdsa_der(sig, len)?;
                verdict(md.digest_verify_final(&der))
            }
            Verifier::Eddsa(md, msg) => {
                eddsa_len(sig, len)?;
                verdict(md.digest_verify(msg, sig))
            }
            Verifier::Ecdsa(_) => Err(CKR_FUNCTION_NOT_SUPPORTED),
        }
    }
    fn one_shot(&mut self, data: &[u8], sig: &[u8]) -> CkResult<()> {
        let len = self.sig_len;
        match &mut self.verifier {
            Verifier::Ecdsa(ctx) => {
                let der = ecdsa_der(sig, len)?;
                verdict(ctx.verify(data, &der))
            }
            Verifier::EcdsaHashed(md) => {
                let der = ecdsa_der(sig, len)?;
                md.digest_verify_update(data).map_err(ossl_err)?;
                verdict(md.digest_verify_final(&der))
            }
            Verifier::Eddsa(md, _) => {
                eddsa_len(sig, len)?;
                verdict(md.digest_verify(data, sig))
            }
        }
    }
}

fn eddsa_sig_len(id: Id) -> usize {
    if id == Id::ED25519 {
        64
    } else {
        114
    }
}

/// `C_SignInit` for `CKM_ECDSA`, `CKM_ECDSA_SHA*` and `CKM_EDDSA`.
pub fn sign_init(mech: &Mechanism, key: Key) -> CkResult<Box<dyn SignOp>> {
    if mech.mechanism == CKM_EDDSA {
        let (pkey, curve) = private_key(&key, &[CKK_EC_EDWARDS])?;
        let Family::Edwards(id) = curve.family else {
            return Err(CKR_KEY_TYPE_INCONSISTENT);
        };
        let mut md = MdCtx::new().map_err(ossl_err)?;
        let pctx = md.digest_sign_init(None, pkey).map_err(ossl_err)?;
        set_eddsa(pctx, mech, id)?;
        let sig_len = eddsa_sig_len(id);
        return Ok(Box::new(Sign {
            signer: Signer::Eddsa(md, Vec::new()),
            n: 0,
            sig_len,
        }));
    }
    let hash = ecdsa_hash(mech.mechanism).ok_or(CKR_MECHANISM_INVALID)?;
    no_param(mech)?;
    let (pkey, curve) = private_key(&key, &[CKK_EC])?;
    let n = curve.len;
    let signer = match hash {
        None => {
            let mut ctx = PkeyCtx::new(pkey).map_err(ossl_err)?;
            ctx.sign_init().map_err(ossl_err)?;
            Signer::Ecdsa(ctx)
        }
        Some(h) => {
            let md = hash_md(h).ok_or(CKR_MECHANISM_INVALID)?;
            let mut ctx = MdCtx::new().map_err(ossl_err)?;
            ctx.digest_sign_init(Some(md), pkey).map_err(ossl_err)?;
            Signer::EcdsaHashed(ctx)
        }
    };
    Ok(Box::new(Sign {
        signer,
        n,
        sig_len: 2 * n,
    }))
}

/// `C_VerifyInit` for `CKM_ECDSA`, `CKM_ECDSA_SHA*` and `CKM_EDDSA`.
pub fn verify_init(mech: &Mechanism, key: Key) -> CkResult<Box<dyn VerifyOp>> {
    if mech.mechanism == CKM_EDDSA {
        let (pkey, curve) = public_key(&key, &[CKK_EC_EDWARDS])?;
        let Family::Edwards(id) = curve.family else {
            return Err(CKR_KEY_TYPE_INCONSISTENT);
        };
        let mut md = MdCtx::new().map_err(ossl_err)?;
        let pctx = md.digest_verify_init(None, pkey).map_err(ossl_err)?;
        set_eddsa(pctx, mech, id)?;
        let sig_len = eddsa_sig_len(id);
        return Ok(Box::new(Verify {
            verifier: Verifier::Eddsa(md, Vec::new()),
            sig_len,
        }));
    }
    let hash = ecdsa_hash(mech.mechanism).ok_or(CKR_MECHANISM_INVALID)?;
    no_param(mech)?;
    let (pkey, curve) = public_key(&key, &[CKK_EC])?;
    let verifier = match hash {
        None => {
            let mut ctx = PkeyCtx::new(pkey).map_err(ossl_err)?;
            ctx.verify_init().map_err(ossl_err)?;
            Verifier::Ecdsa(ctx)
        }
        Some(h) => {
            let md = hash_md(h).ok_or(CKR_MECHANISM_INVALID)?;
            let mut ctx = MdCtx::new().map_err(ossl_err)?;
            ctx.digest_verify_init(Some(md), pkey).map_err(ossl_err)?;
            Verifier::EcdsaHashed(ctx)
        }
    };
    Ok(Box::new(Verify {
        verifier,
        sig_len: 2 * curve.len,
    }))
}

// ----- Keys: generation, import, PKCS#8 -----

fn base_attrs(class: CK_OBJECT_CLASS, key_type: CK_KEY_TYPE, params: &[u8]) -> AttrMap {
    let mut m = AttrMap::new();
    m.set_ulong(CKA_CLASS, class);
    m.set_ulong(CKA_KEY_TYPE, key_type);
    m.insert(CKA_EC_PARAMS, params.to_vec());
    m
}

/// `(CKA_VALUE, raw public point)` of a generated or decoded private key.
fn key_material(curve: &Curve, pkey: &PKey<Private>) -> CkResult<(Vec<u8>, Vec<u8>)> {
    match curve.family {
        Family::Weierstrass(_) => {
            let ec = pkey.ec_key().map_err(ossl_err)?;
            let width = i32::try_from(curve.priv_len).map_err(|_| CKR_FUNCTION_FAILED)?;
            let d = ec.private_key().to_vec_padded(width).map_err(ossl_err)?;
            let mut ctx = BigNumContext::new().map_err(ossl_err)?;
            let q = ec
                .public_key()
                .to_bytes(ec.group(), PointConversionForm::UNCOMPRESSED, &mut ctx)
                .map_err(ossl_err)?;
            Ok((d, q))
        }
        _ => Ok((
            pkey.raw_private_key().map_err(ossl_err)?,
            pkey.raw_public_key().map_err(ossl_err)?,
        )),
    }
}

/// `C_GenerateKeyPair` with `CKM_EC_KEY_PAIR_GEN`, `CKM_EC_EDWARDS_KEY_PAIR_GEN` or
/// `CKM_EC_MONTGOMERY_KEY_PAIR_GEN`; the curve is the public template's `CKA_EC_PARAMS`
/// (or the private template's), kept as given.
pub fn generate_key_pair(
    mech: &Mechanism,
    public: &AttrMap,
    private: &AttrMap,
) -> CkResult<(AttrMap, AttrMap)> {
    no_param(mech)?;
    let params = public
        .bytes(CKA_EC_PARAMS)
        .or_else(|| private.bytes(CKA_EC_PARAMS))
        .ok_or(CKR_TEMPLATE_INCOMPLETE)?;
    let curve = curve_from_params(params)?;
    let pkey = match (mech.mechanism, curve.family) {
        (CKM_EC_KEY_PAIR_GEN, Family::Weierstrass(nid)) => {
            let name = nid.short_name().map_err(ossl_err)?;
            PKey::ec_gen(name).map_err(ossl_err)?
        }
        (CKM_EC_EDWARDS_KEY_PAIR_GEN, Family::Edwards(Id::ED25519)) => {
            PKey::generate_ed25519().map_err(ossl_err)?
        }
        (CKM_EC_EDWARDS_KEY_PAIR_GEN, Family::Edwards(_)) => {
            PKey::generate_ed448().map_err(ossl_err)?
        }
        (CKM_EC_MONTGOMERY_KEY_PAIR_GEN, Family::Montgomery(Id::X25519)) => {
            PKey::generate_x25519().map_err(ossl_err)?
        }
        (CKM_EC_MONTGOMERY_KEY_PAIR_GEN, Family::Montgomery(_)) => {
            PKey::generate_x448().map_err(ossl_err)?
        }
        (CKM_EC_KEY_PAIR_GEN | CKM_EC_EDWARDS_KEY_PAIR_GEN | CKM_EC_MONTGOMERY_KEY_PAIR_GEN, _) => {
            return Err(CKR_CURVE_NOT_SUPPORTED)
        }
        _ => return Err(CKR_MECHANISM_INVALID),
    };
    let (d, q) = key_material(curve, &pkey)?;
    let kt = curve.key_type();
    let mut pubm = base_attrs(CKO_PUBLIC_KEY, kt, params);
    pubm.insert(CKA_EC_POINT, der_octet_string(&q));
    let mut privm = base_attrs(CKO_PRIVATE_KEY, kt, params);
    privm.insert(CKA_VALUE, d);
    Ok((pubm, privm))
}

/// Checks the material of an EC key object being created or unwrapped: `CKA_EC_PARAMS` names a
/// supported curve of the key type; a public key's `CKA_EC_POINT` (raw or DER) is on it; a
/// private key's `CKA_VALUE` is a valid scalar (`[1, n-1]`) or raw key of the right length.
pub fn complete_key(
    class: CK_OBJECT_CLASS,
    key_type: CK_KEY_TYPE,
    attrs: &mut AttrMap,
) -> CkResult<()> {
    let curve = curve_of(attrs, key_type)?;
    match class {
        CKO_PUBLIC_KEY => {
            let point = attrs.need_bytes(CKA_EC_POINT)?;
            public_from_point(curve, point).ok_or(CKR_ATTRIBUTE_VALUE_INVALID)?;
            Ok(())
        }
        CKO_PRIVATE_KEY => {
            private_from_value(curve, attrs.need_bytes(CKA_VALUE)?)?;
            Ok(())
        }
        _ => Err(CKR_ATTRIBUTE_VALUE_INVALID),
    }
}

/// A private key as PKCS#8 `PrivateKeyInfo` DER (for `C_WrapKey`).
pub fn to_pkcs8(key: Key) -> CkResult<Zeroizing<Vec<u8>>> {
    let (pkey, _) = private_key(&key, &[CKK_EC, CKK_EC_EDWARDS, CKK_EC_MONTGOMERY])?;
    pkey.private_key_to_pkcs8()
        .map(Zeroizing::new)
        .map_err(|_| CKR_KEY_NOT_WRAPPABLE)
}

/// The attributes (`CKA_EC_PARAMS` as an OID, `CKA_VALUE`) of a PKCS#8 private key of
/// `key_type` (for `C_UnwrapKey`). Undecodable: `CKR_WRAPPED_KEY_INVALID`; a key of another
/// type: `CKR_TEMPLATE_INCONSISTENT`; an unsupported curve: `CKR_CURVE_NOT_SUPPORTED`.
pub fn from_pkcs8(key_type: CK_KEY_TYPE, bytes: &[u8]) -> CkResult<AttrMap> {
    let pkey = PKey::private_key_from_pkcs8(bytes).map_err(|_| CKR_WRAPPED_KEY_INVALID)?;
    let id = pkey.id();
    let curve = if id == Id::EC {
        let nid = pkey.ec_key().ok().and_then(|k| k.group().curve_name());
        CURVES
            .iter()
            .find(|c| nid.is_some_and(|n| c.family == Family::Weierstrass(n)))
            .ok_or(CKR_CURVE_NOT_SUPPORTED)?
    } else {
        CURVES
            .iter()
            .find(|c| matches!(c.family, Family::Edwards(i) | Family::Montgomery(i) if i == id))
            .ok_or(CKR_TEMPLATE_INCONSISTENT)?
    };
    if curve.key_type() != key_type {
        return Err(CKR_TEMPLATE_INCONSISTENT);
    }
    let (d, _) = key_material(curve, &pkey).map_err(|_| CKR_WRAPPED_KEY_INVALID)?;
    let mut m = AttrMap::new();
    m.insert(CKA_EC_PARAMS, curve.oid.to_vec());
    m.insert(CKA_VALUE, d);
    Ok(m)
}

// ----- Key derivation -----

fn kdf_hash(kdf: CK_ULONG) -> Option<CK_MECHANISM_TYPE> {
    Some(match kdf {
        CKD_SHA1_KDF => CKM_SHA_1,
        CKD_SHA224_KDF => CKM_SHA224,
        CKD_SHA256_KDF => CKM_SHA256,
        CKD_SHA384_KDF => CKM_SHA384,
        CKD_SHA512_KDF => CKM_SHA512,
        CKD_SHA3_224_KDF => CKM_SHA3_224,
        CKD_SHA3_256_KDF => CKM_SHA3_256,
        CKD_SHA3_384_KDF => CKM_SHA3_384,
        CKD_SHA3_512_KDF => CKM_SHA3_512,
        _ => return None,
    })
}

/// Longest key the X9.63 KDF produces here (far above any key type's size).
const X963_MAX_LEN: usize = 64 * 1024;

/// ANSI X9.63 KDF: `Hash(Z || counter || SharedInfo)` for counter = 1, 2, … (32-bit BE).
fn x963_kdf(
    hash: CK_MECHANISM_TYPE,
    z: &[u8],
    info: &[u8],
    len: usize,
) -> CkResult<Zeroizing<Vec<u8>>> {
    let md = hash_md(hash).ok_or(CKR_MECHANISM_PARAM_INVALID)?;
    if len > X963_MAX_LEN {
        return Err(CKR_TEMPLATE_INCONSISTENT);
    }
    let mut out = Zeroizing::new(Vec::with_capacity(len + md.size()));
    let mut block = Zeroizing::new(vec![0u8; md.size()]);
    let mut counter: u32 = 1;
    while out.len() < len {
        let mut ctx = MdCtx::new().map_err(ossl_err)?;
        ctx.digest_init(md).map_err(ossl_err)?;
        ctx.digest_update(z).map_err(ossl_err)?;
        ctx.digest_update(&counter.to_be_bytes())
            .map_err(ossl_err)?;
        ctx.digest_update(info).map_err(ossl_err)?;
        ctx.digest_final(&mut block).map_err(ossl_err)?;
        out.extend_from_slice(&block);
        counter = counter.checked_add(1).ok_or(CKR_TEMPLATE_INCONSISTENT)?;
    }
    out.truncate(len);
    Ok(out)
}

/// `C_DeriveKey` with `CKM_ECDH1_DERIVE` / `CKM_ECDH1_COFACTOR_DERIVE` on a `CKK_EC` or
/// `CKK_EC_MONTGOMERY` private key; see the module documentation for lengths and errors.
pub fn derive(
    mech: &Mechanism,
    base: Key,
    value_len: Option<usize>,
) -> CkResult<Zeroizing<Vec<u8>>> {
    let MechParam::Ecdh1 {
        kdf,
        shared_data,
        public_data,
    } = &mech.param
    else {
        return Err(CKR_MECHANISM_PARAM_INVALID);
    };
    let hash = match *kdf {
        CKD_NULL if shared_data.is_empty() => None,
        k => Some(kdf_hash(k).ok_or(CKR_MECHANISM_PARAM_INVALID)?),
    };
    let (pkey, curve) = private_key(&base, &[CKK_EC, CKK_EC_MONTGOMERY])?;
    let peer = public_from_point(curve, public_data).ok_or(CKR_MECHANISM_PARAM_INVALID)?;
    let mut ctx = PkeyCtx::new(pkey).map_err(ossl_err)?;
    ctx.derive_init().map_err(ossl_err)?;
    ctx.derive_set_peer(&peer)
        .map_err(|_| CKR_MECHANISM_PARAM_INVALID)?;
    let mut z = Zeroizing::new(Vec::with_capacity(2 * curve.len));
    // X25519/X448 fail here on an all-zero result (a small-order peer point).
    ctx.derive_to_vec(&mut z).map_err(|e| match curve.family {
        Family::Montgomery(_) => CKR_MECHANISM_PARAM_INVALID,
        _ => ossl_err(e),
    })?;
    match hash {
        None => {
            let len = value_len.unwrap_or(z.len());
            if len == 0 || len > z.len() {
                return Err(CKR_TEMPLATE_INCONSISTENT);
            }
            Ok(Zeroizing::new(z[z.len() - len..].to_vec()))
        }
        Some(h) => {
            let len = match value_len {
                Some(0) => return Err(CKR_TEMPLATE_INCONSISTENT),
                Some(l) => l,
                None => hash_md(h).map_or(0, |m| m.size()),
            };
            x963_kdf(h, &z, shared_data, len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mech::KeyCache;
    use openssl::derive::Deriver;
    use openssl::hash::{hash, MessageDigest};
    use openssl::sign::{Signer as OsslSigner, Verifier as OsslVerifier};

    fn key<'a>(attrs: &'a AttrMap, cache: &'a KeyCache) -> Key<'a> {
        Key { attrs, cache }
    }

    fn printable(s: &str) -> Vec<u8> {
        let mut v = vec![0x13, s.len() as u8];
        v.extend_from_slice(s.as_bytes());
        v
    }

    fn gen_mech(c: &Curve) -> CK_MECHANISM_TYPE {
        match c.family {
            Family::Weierstrass(_) => CKM_EC_KEY_PAIR_GEN,
            Family::Edwards(_) => CKM_EC_EDWARDS_KEY_PAIR_GEN,
            Family::Montgomery(_) => CKM_EC_MONTGOMERY_KEY_PAIR_GEN,
        }
    }

    fn gen(c: &Curve, params: &[u8]) -> (AttrMap, AttrMap) {
        let mut t = AttrMap::new();
        t.insert(CKA_EC_PARAMS, params.to_vec());
        generate_key_pair(&Mechanism::new(gen_mech(c)), &t, &AttrMap::new()).unwrap()
    }

    fn sign(m: &Mechanism, sk: &AttrMap, data: &[u8]) -> CkResult<Vec<u8>> {
        let cache = KeyCache::default();
        let mut op = sign_init(m, key(sk, &cache))?;
        let mut out = vec![0u8; 256];
        let mut ob = OutBuf::new(Some(&mut out));
        op.one_shot(data, &mut ob)?;
        let n = ob.len();
        out.truncate(n);
        Ok(out)
    }

    fn verify(m: &Mechanism, pk: &AttrMap, data: &[u8], sig: &[u8]) -> CkResult<()> {
        let cache = KeyCache::default();
        verify_init(m, key(pk, &cache))?.one_shot(data, sig)
    }

    /// The public key as the openssl crate sees it, from CKA_EC_POINT.
    fn ossl_public(c: &Curve, pk: &AttrMap) -> PKey<Public> {
        public_from_point(c, pk.bytes(CKA_EC_POINT).unwrap()).unwrap()
    }

    fn ecdsa_mechs() -> Vec<Mechanism> {
        [
            CKM_ECDSA_SHA1,
            CKM_ECDSA_SHA224,
            CKM_ECDSA_SHA256,
            CKM_ECDSA_SHA384,
            CKM_ECDSA_SHA512,
            CKM_ECDSA_SHA3_224,
            CKM_ECDSA_SHA3_256,
            CKM_ECDSA_SHA3_384,
            CKM_ECDSA_SHA3_512,
        ]
        .into_iter()
        .map(Mechanism::new)
        .collect()
    }

    #[test]
    fn keygen_every_curve_both_param_forms() {
        for c in &CURVES {
            for params in [c.oid.to_vec(), printable(c.names[0])] {
                let (p, s) = gen(c, &params);
                assert_eq!(p.bytes(CKA_EC_PARAMS), Some(params.as_slice()));
                assert_eq!(s.bytes(CKA_EC_PARAMS), Some(params.as_slice()));
                assert_eq!(p.ulong(CKA_KEY_TYPE).unwrap(), Some(c.key_type()));
                assert_eq!(s.ulong(CKA_CLASS).unwrap(), Some(CKO_PRIVATE_KEY));
                let point = p.bytes(CKA_EC_POINT).unwrap();
                let (tag, raw) = der_tlv(point).unwrap();
                assert_eq!(tag, 0x04);
                match c.family {
                    Family::Weierstrass(_) => assert_eq!(raw.len(), 1 + 2 * c.len),
                    _ => assert_eq!(raw.len(), c.len),
                }
                assert_eq!(s.bytes(CKA_VALUE).unwrap().len(), c.priv_len);
                // The generated material passes the import checks.
                let (mut p2, mut s2) = (p.clone(), s.clone());
                complete_key(CKO_PUBLIC_KEY, c.key_type(), &mut p2).unwrap();
                complete_key(CKO_PRIVATE_KEY, c.key_type(), &mut s2).unwrap();
            }
        }
        // Wrong family for the mechanism, unknown curve, explicit parameters, garbage.
        let mut t = AttrMap::new();
        t.insert(CKA_EC_PARAMS, CURVES[4].oid.to_vec());
        let g = Mechanism::new(CKM_EC_KEY_PAIR_GEN);
        assert_eq!(
            generate_key_pair(&g, &t, &AttrMap::new()).err(),
            Some(CKR_CURVE_NOT_SUPPORTED)
        );
        t.insert(CKA_EC_PARAMS, vec![0x06, 0x03, 0x2b, 0x65, 0x99]);
        assert_eq!(
            generate_key_pair(&g, &t, &AttrMap::new()).err(),
            Some(CKR_CURVE_NOT_SUPPORTED)
        );
        t.insert(CKA_EC_PARAMS, printable("brainpoolP256r1"));
        assert_eq!(
            generate_key_pair(&g, &t, &AttrMap::new()).err(),
            Some(CKR_CURVE_NOT_SUPPORTED)
        );
        for bad in [
            vec![0x30, 0x00],
            vec![0x05, 0x00],
            vec![0x06, 0x09, 0x2a],
            vec![],
        ] {
            t.insert(CKA_EC_PARAMS, bad);
            assert_eq!(
                generate_key_pair(&g, &t, &AttrMap::new()).err(),
                Some(CKR_DOMAIN_PARAMS_INVALID)
            );
        }
        assert_eq!(
            generate_key_pair(&g, &AttrMap::new(), &AttrMap::new()).err(),
            Some(CKR_TEMPLATE_INCOMPLETE)
        );
    }

    #[test]
    fn ecdsa_every_curve_and_hash_cross_checked() {
        for c in CURVES
            .iter()
            .filter(|c| matches!(c.family, Family::Weierstrass(_)))
        {
            let (p, s) = gen(c, c.oid);
            let opk = ossl_public(c, &p);
            for m in ecdsa_mechs() {
                let sig = sign(&m, &s, b"message").unwrap();
                assert_eq!(sig.len(), 2 * c.len);
                verify(&m, &p, b"message", &sig).unwrap();
                assert_eq!(verify(&m, &p, b"messagE", &sig), Err(CKR_SIGNATURE_INVALID));
            }
            // r||s converts to a DER signature OpenSSL verifies.
            let sig = sign(&Mechanism::new(CKM_ECDSA_SHA256), &s, b"cross").unwrap();
            let der = raw_to_der(&sig).unwrap();
            let mut v = OsslVerifier::new(MessageDigest::sha256(), &opk).unwrap();
            assert!(v.verify_oneshot(&der, b"cross").unwrap());
            // And an OpenSSL signature verifies here, under CKM_ECDSA on the hash too.
            let sk = private_from_value(c, s.bytes(CKA_VALUE).unwrap()).unwrap();
            let der = OsslSigner::new(MessageDigest::sha384(), &sk)
                .unwrap()
                .sign_oneshot_to_vec(b"from openssl")
                .unwrap();
            let mut raw = vec![0u8; 2 * c.len];
            der_to_raw(&der, c.len, &mut raw).unwrap();
            verify(&Mechanism::new(CKM_ECDSA_SHA384), &p, b"from openssl", &raw).unwrap();
            let h = hash(MessageDigest::sha384(), b"from openssl").unwrap();
            verify(&Mechanism::new(CKM_ECDSA), &p, &h, &raw).unwrap();
            let sig = sign(&Mechanism::new(CKM_ECDSA), &s, &h).unwrap();
            verify(&Mechanism::new(CKM_ECDSA_SHA384), &p, b"from openssl", &sig).unwrap();
        }
    }

    #[test]
    fn ecdsa_multipart_tamper_and_length() {
        let c = &CURVES[0];
        let (p, s) = gen(c, c.oid);
        let m = Mechanism::new(CKM_ECDSA_SHA256);
        let cache = KeyCache::default();
        let mut op = sign_init(&m, key(&s, &cache)).unwrap();
        op.update(b"multi").unwrap();
        let mut q = OutBuf::new(None);
        op.finalize(&mut q).unwrap();
        assert_eq!(q.len(), 64);
        op.update(b"part").unwrap();
        let mut sig = vec![0u8; 64];
        let mut ob = OutBuf::new(Some(&mut sig));
        op.finalize(&mut ob).unwrap();
        let mut v = verify_init(&m, key(&p, &cache)).unwrap();
        v.update(b"multi").unwrap();
        v.update(b"part").unwrap();
        v.finalize(&sig).unwrap();
        let mut bad = sig.clone();
        bad[10] ^= 1;
        assert_eq!(
            verify(&m, &p, b"multipart", &bad),
            Err(CKR_SIGNATURE_INVALID)
        );
        // Every length but 2 nLen is out of range.
        for len in [63, 62, 0] {
            assert_eq!(
                verify(&m, &p, b"multipart", &sig[..len]),
                Err(CKR_SIGNATURE_LEN_RANGE)
            );
        }
        let mut long = sig.clone();
        long.extend_from_slice(&[0, 0]);
        assert_eq!(
            verify(&m, &p, b"multipart", &long),
            Err(CKR_SIGNATURE_LEN_RANGE)
        );
        // r and s written with a leading zero byte removed (when both have one) are refused.
        let (r, s_) = sig.split_at(32);
        if r[0] == 0 && s_[0] == 0 {
            let short = [&r[1..], &s_[1..]].concat();
            assert_eq!(
                verify(&m, &p, b"multipart", &short),
                Err(CKR_SIGNATURE_LEN_RANGE)
            );
        }
        assert_eq!(
            verify(&m, &p, b"multipart", &[0u8; 64]),
            Err(CKR_SIGNATURE_INVALID)
        );
        // Raw ECDSA is single-part.
        let mut raw = sign_init(&Mechanism::new(CKM_ECDSA), key(&s, &cache)).unwrap();
        assert_eq!(raw.update(b"x"), Err(CKR_FUNCTION_NOT_SUPPORTED));
    }

    #[test]
    fn size_query_keeps_the_operation() {
        for c in [&CURVES[0], &CURVES[4], &CURVES[5]] {
            let (p, s) = gen(c, c.oid);
            let m = match c.family {
                Family::Edwards(_) => Mechanism::new(CKM_EDDSA),
                _ => Mechanism::new(CKM_ECDSA),
            };
            let cache = KeyCache::default();
            let mut op = sign_init(&m, key(&s, &cache)).unwrap();
            let mut q = OutBuf::new(None);
            op.one_shot(b"0123456789abcdef0123456789abcdef", &mut q)
                .unwrap();
            let n = q.len();
            let mut small = vec![0u8; n - 1];
            let mut sb = OutBuf::new(Some(&mut small));
            let data = b"0123456789abcdef0123456789abcdef";
            assert_eq!(op.one_shot(data, &mut sb), Err(CKR_BUFFER_TOO_SMALL));
            let mut out = vec![0u8; n];
            let mut ob = OutBuf::new(Some(&mut out));
            op.one_shot(data, &mut ob).unwrap();
            verify(&m, &p, data, &out).unwrap();
        }
    }

    fn eddsa(ph: bool, context: &[u8]) -> Mechanism {
        Mechanism {
            mechanism: CKM_EDDSA,
            param: MechParam::Eddsa {
                ph,
                context: context.to_vec(),
            },
        }
    }

    #[test]
    fn eddsa_variants() {
        for c in [&CURVES[4], &CURVES[5]] {
            let Family::Edwards(id) = c.family else {
                unreachable!()
            };
            let (p, s) = gen(c, c.oid);
            let opk = ossl_public(c, &p);
            let plain = Mechanism::new(CKM_EDDSA);
            let sig = sign(&plain, &s, b"edwards").unwrap();
            assert_eq!(sig.len(), eddsa_sig_len(id));
            let mut v = OsslVerifier::new_without_digest(&opk).unwrap();
            assert!(v.verify_oneshot(&sig, b"edwards").unwrap());
            // OpenSSL's own (deterministic) signature is the same.
            let sk = PKey::private_key_from_raw_bytes(s.bytes(CKA_VALUE).unwrap(), id).unwrap();
            let mut os = OsslSigner::new_without_digest(&sk).unwrap();
            assert_eq!(os.sign_oneshot_to_vec(b"edwards").unwrap(), sig);

            let variants = [eddsa(false, b"ctx"), eddsa(true, b""), eddsa(true, b"ctx")];
            let mut sigs = vec![sig.clone()];
            for m in &variants {
                let s2 = sign(m, &s, b"edwards").unwrap();
                verify(m, &p, b"edwards", &s2).unwrap();
                assert_eq!(
                    verify(&plain, &p, b"edwards", &s2),
                    Err(CKR_SIGNATURE_INVALID)
                );
                assert!(!sigs.contains(&s2));
                sigs.push(s2);
            }
            // Ph variant cross-checked: OpenSSL's prehash-by-caller path gives the same bytes.
            let (inst, prehash) = if id == Id::ED25519 {
                (
                    c"Ed25519ph",
                    hash(MessageDigest::sha512(), b"edwards").unwrap().to_vec(),
                )
            } else {
                let mut h = vec![0u8; 64];
                openssl::hash::hash_xof(MessageDigest::shake_256(), b"edwards", &mut h).unwrap();
                (c"Ed448ph", h)
            };
            let mut ctx = PkeyCtx::new(&sk).unwrap();
            ctx.sign_init().unwrap();
            set_ctx_params(&mut ctx, &[Param::Utf8(c"instance", inst)]).unwrap();
            let mut ph_sig = vec![];
            ctx.sign_to_vec(&prehash, &mut ph_sig).unwrap();
            assert_eq!(ph_sig, sigs[2]);
            // Errors.
            assert_eq!(
                verify(&plain, &p, b"edwards", &sig[1..]),
                Err(CKR_SIGNATURE_LEN_RANGE)
            );
            let mut bad = sig.clone();
            bad[3] ^= 4;
            assert_eq!(
                verify(&plain, &p, b"edwards", &bad),
                Err(CKR_SIGNATURE_INVALID)
            );
            let cache = KeyCache::default();
            assert_eq!(
                sign_init(&eddsa(false, &[0u8; 256]), key(&s, &cache)).err(),
                Some(CKR_MECHANISM_PARAM_INVALID)
            );
            // Multi-part: the parts are the message.
            for m in [&plain, &variants[0], &variants[1]] {
                let mut op = sign_init(m, key(&s, &cache)).unwrap();
                op.update(b"edw").unwrap();
                let mut q = OutBuf::new(None);
                op.finalize(&mut q).unwrap();
                op.update(b"ards").unwrap();
                let mut out = vec![0u8; q.len()];
                let mut ob = OutBuf::new(Some(&mut out));
                op.finalize(&mut ob).unwrap();
                verify(m, &p, b"edwards", &out).unwrap();
                let cache = KeyCache::default();
                let mut v = verify_init(m, key(&p, &cache)).unwrap();
                v.update(b"e").unwrap();
                v.update(b"dwards").unwrap();
                v.finalize(&out).unwrap();
            }
        }
        // Ed25519 with an empty context and no prehash is pure Ed25519.
        let c = &CURVES[4];
        let (p, s) = gen(c, c.oid);
        let a = sign(&eddsa(false, b""), &s, b"m").unwrap();
        verify(&Mechanism::new(CKM_EDDSA), &p, b"m", &a).unwrap();
    }

    #[test]
    fn key_type_mismatch() {
        let (_, s) = gen(&CURVES[0], CURVES[0].oid);
        let (_, e) = gen(&CURVES[4], CURVES[4].oid);
        let cache = KeyCache::default();
        assert_eq!(
            sign_init(&Mechanism::new(CKM_EDDSA), key(&s, &cache)).err(),
            Some(CKR_KEY_TYPE_INCONSISTENT)
        );
        let cache = KeyCache::default();
        assert_eq!(
            sign_init(&Mechanism::new(CKM_ECDSA), key(&e, &cache)).err(),
            Some(CKR_KEY_TYPE_INCONSISTENT)
        );
        let mut rsa = s.clone();
        rsa.set_ulong(CKA_KEY_TYPE, CKK_RSA);
        assert_eq!(
            sign_init(&Mechanism::new(CKM_ECDSA), key(&rsa, &cache)).err(),
            Some(CKR_KEY_TYPE_INCONSISTENT)
        );
    }

    fn ecdh(kdf: CK_ULONG, shared: &[u8], public: &[u8]) -> Mechanism {
        Mechanism {
            mechanism: CKM_ECDH1_DERIVE,
            param: MechParam::Ecdh1 {
                kdf,
                shared_data: shared.to_vec(),
                public_data: public.to_vec(),
            },
        }
    }

    #[test]
    fn ecdh_both_sides_agree_and_match_openssl() {
        for c in CURVES
            .iter()
            .filter(|c| !matches!(c.family, Family::Edwards(_)))
        {
            let (pa, sa) = gen(c, c.oid);
            let (pb, sb) = gen(c, c.oid);
            let point_a = pa.bytes(CKA_EC_POINT).unwrap();
            let point_b = pb.bytes(CKA_EC_POINT).unwrap();
            let raw_b = raw_point(c, point_b).unwrap();
            let (ca, cb) = (KeyCache::default(), KeyCache::default());
            let ab = derive(&ecdh(CKD_NULL, b"", point_b), key(&sa, &ca), None).unwrap();
            let ab_raw = derive(&ecdh(CKD_NULL, b"", raw_b), key(&sa, &ca), None).unwrap();
            let ba = derive(&ecdh(CKD_NULL, b"", point_a), key(&sb, &cb), None).unwrap();
            assert_eq!(ab, ba);
            assert_eq!(ab, ab_raw);
            let field = match c.family {
                Family::Weierstrass(_) => c.len,
                _ => c.priv_len,
            };
            assert_eq!(ab.len(), field);
            // OpenSSL directly.
            let ska = private_from_value(c, sa.bytes(CKA_VALUE).unwrap()).unwrap();
            let pkb = ossl_public(c, &pb);
            let mut d = Deriver::new(&ska).unwrap();
            d.set_peer(&pkb).unwrap();
            assert_eq!(d.derive_to_vec().unwrap(), ab.to_vec());
            // Truncation keeps the rightmost bytes; longer than the secret is refused.
            let t = derive(&ecdh(CKD_NULL, b"", point_b), key(&sa, &ca), Some(16)).unwrap();
            assert_eq!(t.as_slice(), &ab[ab.len() - 16..]);
            assert_eq!(
                derive(
                    &ecdh(CKD_NULL, b"", point_b),
                    key(&sa, &ca),
                    Some(field + 1)
                )
                .err(),
                Some(CKR_TEMPLATE_INCONSISTENT)
            );
            // X9.63 KDF with SHA-256: block 1 = SHA256(Z || 00000001 || info).
            let k = derive(
                &ecdh(CKD_SHA256_KDF, b"info", point_b),
                key(&sa, &ca),
                Some(40),
            )
            .unwrap();
            let mut block1 = ab.to_vec();
            block1.extend_from_slice(&[0, 0, 0, 1]);
            block1.extend_from_slice(b"info");
            let mut block2 = ab.to_vec();
            block2.extend_from_slice(&[0, 0, 0, 2]);
            block2.extend_from_slice(b"info");
            let mut want = hash(MessageDigest::sha256(), &block1).unwrap().to_vec();
            want.extend_from_slice(&hash(MessageDigest::sha256(), &block2).unwrap()[..8]);
            assert_eq!(k.as_slice(), want.as_slice());
            let k2 = derive(
                &ecdh(CKD_SHA256_KDF, b"info", point_a),
                key(&sb, &cb),
                Some(40),
            )
            .unwrap();
            assert_eq!(k, k2);
        }
    }

    #[test]
    fn ecdh_rejects_bad_peers_and_params() {
        let c = &CURVES[0];
        let (pb, _) = gen(c, c.oid);
        let (_, sa) = gen(c, c.oid);
        let cache = KeyCache::default();
        let point = raw_point(c, pb.bytes(CKA_EC_POINT).unwrap())
            .unwrap()
            .to_vec();
        // Off the curve.
        let mut off = point.clone();
        off[64] ^= 1;
        assert_eq!(
            derive(&ecdh(CKD_NULL, b"", &off), key(&sa, &cache), None).err(),
            Some(CKR_MECHANISM_PARAM_INVALID)
        );
        // Wrong length, infinity.
        for bad in [&point[..64], &[0u8][..], &[]] {
            assert_eq!(
                derive(&ecdh(CKD_NULL, b"", bad), key(&sa, &cache), None).err(),
                Some(CKR_MECHANISM_PARAM_INVALID)
            );
        }
        // Compressed points are accepted.
        let mut comp = vec![2 + (point[64] & 1)];
        comp.extend_from_slice(&point[1..33]);
        let a = derive(&ecdh(CKD_NULL, b"", &comp), key(&sa, &cache), None).unwrap();
        let b = derive(&ecdh(CKD_NULL, b"", &point), key(&sa, &cache), None).unwrap();
        assert_eq!(a, b);
        // CKD_NULL with shared data, unknown KDF, missing parameter.
        for m in [
            ecdh(CKD_NULL, b"x", &point),
            ecdh(0x99, b"", &point),
            Mechanism::new(CKM_ECDH1_DERIVE),
        ] {
            assert_eq!(
                derive(&m, key(&sa, &cache), None).err(),
                Some(CKR_MECHANISM_PARAM_INVALID)
            );
        }
        // X25519: a small-order peer (all-zero shared secret) is refused.
        let x = &CURVES[6];
        let (_, sx) = gen(x, x.oid);
        let cache = KeyCache::default();
        assert_eq!(
            derive(&ecdh(CKD_NULL, b"", &[0u8; 32]), key(&sx, &cache), None).err(),
            Some(CKR_MECHANISM_PARAM_INVALID)
        );
        // EdDSA keys do not derive.
        let (_, se) = gen(&CURVES[4], CURVES[4].oid);
        assert_eq!(
            derive(&ecdh(CKD_NULL, b"", &[9u8; 32]), key(&se, &cache), None).err(),
            Some(CKR_KEY_TYPE_INCONSISTENT)
        );
    }

    #[test]
    fn import_checks() {
        let c = &CURVES[0];
        let (p, s) = gen(c, c.oid);
        // Raw point accepted as well as DER.
        let mut raw = p.clone();
        raw.insert(
            CKA_EC_POINT,
            raw_point(c, p.bytes(CKA_EC_POINT).unwrap())
                .unwrap()
                .to_vec(),
        );
        complete_key(CKO_PUBLIC_KEY, CKK_EC, &mut raw).unwrap();
        // Signatures verify against the raw-point object.
        let sig = sign(&Mechanism::new(CKM_ECDSA_SHA256), &s, b"m").unwrap();
        verify(&Mechanism::new(CKM_ECDSA_SHA256), &raw, b"m", &sig).unwrap();
        // Off-curve point.
        let mut bad = raw.clone();
        let mut pt = bad[&CKA_EC_POINT].clone();
        pt[40] ^= 1;
        bad.insert(CKA_EC_POINT, pt);
        assert_eq!(
            complete_key(CKO_PUBLIC_KEY, CKK_EC, &mut bad),
            Err(CKR_ATTRIBUTE_VALUE_INVALID)
        );
        // Scalars 0 and n are out of range.
        let n = hex_to_vec("ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551");
        for v in [vec![0u8; 32], n] {
            let mut k = s.clone();
            k.insert(CKA_VALUE, v);
            assert_eq!(
                complete_key(CKO_PRIVATE_KEY, CKK_EC, &mut k),
                Err(CKR_ATTRIBUTE_VALUE_INVALID)
            );
        }
        // Curve of the wrong family for the key type; missing value.
        let mut k = s.clone();
        assert_eq!(
            complete_key(CKO_PRIVATE_KEY, CKK_EC_EDWARDS, &mut k),
            Err(CKR_ATTRIBUTE_VALUE_INVALID)
        );
        k.remove(&CKA_VALUE);
        assert_eq!(
            complete_key(CKO_PRIVATE_KEY, CKK_EC, &mut k),
            Err(CKR_TEMPLATE_INCOMPLETE)
        );
        // Edwards: raw and wrapped public keys; wrong private length.
        let e = &CURVES[4];
        let (ep, es) = gen(e, e.oid);
        let mut r = ep.clone();
        r.insert(
            CKA_EC_POINT,
            raw_point(e, ep.bytes(CKA_EC_POINT).unwrap())
                .unwrap()
                .to_vec(),
        );
        complete_key(CKO_PUBLIC_KEY, CKK_EC_EDWARDS, &mut r).unwrap();
        let sig = sign(&Mechanism::new(CKM_EDDSA), &es, b"m").unwrap();
        verify(&Mechanism::new(CKM_EDDSA), &r, b"m", &sig).unwrap();
        let mut short = es.clone();
        short.insert(CKA_VALUE, vec![1u8; 31]);
        assert_eq!(
            complete_key(CKO_PRIVATE_KEY, CKK_EC_EDWARDS, &mut short),
            Err(CKR_ATTRIBUTE_VALUE_INVALID)
        );
    }

    fn hex_to_vec(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn pkcs8_round_trips() {
        for c in &CURVES {
            let (p, s) = gen(c, c.oid);
            let cache = KeyCache::default();
            let der = to_pkcs8(key(&s, &cache)).unwrap();
            let back = from_pkcs8(c.key_type(), &der).unwrap();
            assert_eq!(back.bytes(CKA_VALUE), s.bytes(CKA_VALUE));
            assert_eq!(back.bytes(CKA_EC_PARAMS), Some(c.oid));
            // The unwrapped key still signs or derives like the original.
            let mut full = base_attrs(CKO_PRIVATE_KEY, c.key_type(), c.oid);
            full.extend(back);
            complete_key(CKO_PRIVATE_KEY, c.key_type(), &mut full).unwrap();
            match c.family {
                Family::Weierstrass(_) => {
                    let m = Mechanism::new(CKM_ECDSA_SHA256);
                    verify(&m, &p, b"p8", &sign(&m, &full, b"p8").unwrap()).unwrap();
                }
                Family::Edwards(_) => {
                    let m = Mechanism::new(CKM_EDDSA);
                    verify(&m, &p, b"p8", &sign(&m, &full, b"p8").unwrap()).unwrap();
                }
                Family::Montgomery(_) => {}
            }
            let other = if c.key_type() == CKK_EC {
                CKK_EC_EDWARDS
            } else {
                CKK_EC
            };
            assert_eq!(
                from_pkcs8(other, &der).err(),
                Some(CKR_TEMPLATE_INCONSISTENT)
            );
            assert_eq!(
                from_pkcs8(c.key_type(), &der[2..]).err(),
                Some(CKR_WRAPPED_KEY_INVALID)
            );
        }
    }

    #[test]
    fn key_is_parsed_once() {
        let (_, s) = gen(&CURVES[1], CURVES[1].oid);
        let cache = KeyCache::default();
        let m = Mechanism::new(CKM_ECDSA_SHA384);
        let _ = sign_init(&m, key(&s, &cache)).unwrap();
        let first = cache.private.get().unwrap() as *const _;
        let _ = sign_init(&m, key(&s, &cache)).unwrap();
        assert_eq!(first, cache.private.get().unwrap() as *const _);
    }
}
