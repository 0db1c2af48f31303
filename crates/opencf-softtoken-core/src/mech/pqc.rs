//! Post-quantum mechanisms of PKCS#11 3.2: ML-DSA signatures (FIPS 204) and ML-KEM key
//! encapsulation (FIPS 203), with key-pair generation, import checks and PKCS#8.
//!
//! Keys carry `CKA_PARAMETER_SET` (`CKP_ML_DSA_44/65/87`, `CKP_ML_KEM_512/768/1024`). A public
//! key's `CKA_VALUE` is the encoded public key; a private key has `CKA_SEED` (32 bytes for
//! ML-DSA, `d || z` = 64 bytes for ML-KEM) and/or `CKA_VALUE`, the expanded private key. Keys
//! are parsed once into the object's cache (from the seed when there is one, so that PKCS#8
//! export keeps it).
//!
//! Decisions:
//! - `CKM_ML_DSA` signs the message itself ("pure" ML-DSA), single- or multi-part (PKCS#11 3.2
//!   allows both; the parts stream through OpenSSL's message API, nothing is buffered).
//!   `CK_SIGN_ADDITIONAL_CONTEXT` gives the context (at most 255 bytes) and the hedging:
//!   `CKH_HEDGE_PREFERRED` and `CKH_HEDGE_REQUIRED` sign hedged (randomised),
//!   `CKH_DETERMINISTIC_REQUIRED` deterministically; anything else is
//!   `CKR_MECHANISM_PARAM_INVALID`. Verification accepts the parts the same way (PKCS#11 allows
//!   it through `C_VerifySignatureInit`; the token layer decides which entry points reach it).
//! - An unknown parameter set is `CKR_PARAMETER_SET_NOT_SUPPORTED`; a value of the wrong length
//!   for its set, or a seed and expanded key that disagree, `CKR_ATTRIBUTE_VALUE_INVALID`. A
//!   private key imported by seed only gets its `CKA_VALUE` computed.
//! - `C_DecapsulateKey` with a ciphertext of the wrong length answers
//!   `CKR_WRAPPED_KEY_LEN_RANGE` (in the function's list of return values in PKCS#11 3.2, and
//!   what `C_UnwrapKey` answers for a wrapped key of the wrong length). A well-formed but wrong ciphertext is not an
//!   error: ML-KEM's implicit rejection yields an unrelated secret, as FIPS 203 requires.

use super::{ossl_err, Key, SignOp, VerifyOp};
use crate::attrs::{AttrMap, AttrMapExt};
use opencf_abi::ossl::{decapsulate as kem_decapsulate, encapsulate as kem_encapsulate};
use opencf_abi::ossl_pk::{
    sign_message_final, sign_message_init, sign_message_update, verify_message_final,
    verify_message_init, verify_message_update, Param,
};
use opencf_abi::sys::*;
use opencf_abi::{CkResult, MechParam, Mechanism, OutBuf};
use openssl::pkey::{KeyType, PKey, Private, Public};
use openssl::pkey_ctx::PkeyCtx;
use zeroize::Zeroizing;

/// One parameter set.
#[derive(Debug)]
struct Set {
    key_type: CK_KEY_TYPE,
    param: CK_ULONG,
    ossl: KeyType,
    pub_len: usize,
    priv_len: usize,
    seed_len: usize,
    /// Signature (ML-DSA) or ciphertext (ML-KEM) length.
    out_len: usize,
}

static SETS: [Set; 6] = [
    Set {
        key_type: CKK_ML_DSA,
        param: CKP_ML_DSA_44,
        ossl: KeyType::ML_DSA_44,
        pub_len: 1312,
        priv_len: 2560,
        seed_len: 32,
        out_len: 2420,
    },
    Set {
        key_type: CKK_ML_DSA,
        param: CKP_ML_DSA_65,
        ossl: KeyType::ML_DSA_65,
        pub_len: 1952,
        priv_len: 4032,
        seed_len: 32,
        out_len: 3309,
    },
    Set {
        key_type: CKK_ML_DSA,
        param: CKP_ML_DSA_87,
        ossl: KeyType::ML_DSA_87,
        pub_len: 2592,
        priv_len: 4896,
        seed_len: 32,
        out_len: 4627,
    },
    Set {
        key_type: CKK_ML_KEM,
        param: CKP_ML_KEM_512,
        ossl: KeyType::ML_KEM_512,
        pub_len: 800,
        priv_len: 1632,
        seed_len: 64,
        out_len: 768,
    },
    Set {
        key_type: CKK_ML_KEM,
        param: CKP_ML_KEM_768,
        ossl: KeyType::ML_KEM_768,
        pub_len: 1184,
        priv_len: 2400,
        seed_len: 64,
        out_len: 1088,
    },
    Set {
        key_type: CKK_ML_KEM,
        param: CKP_ML_KEM_1024,
        ossl: KeyType::ML_KEM_1024,
        pub_len: 1568,
        priv_len: 3168,
        seed_len: 64,
        out_len: 1568,
    },
];

/// The parameter set `param` of `key_type` (`CKR_PARAMETER_SET_NOT_SUPPORTED` if unknown).
fn set_of(key_type: CK_KEY_TYPE, param: CK_ULONG) -> CkResult<&'static Set> {
    SETS.iter()
        .find(|s| s.key_type == key_type && s.param == param)
        .ok_or(CKR_PARAMETER_SET_NOT_SUPPORTED)
}

/// The parameter set of a key's attributes.
fn set_of_attrs(attrs: &AttrMap, key_type: CK_KEY_TYPE) -> CkResult<&'static Set> {
    set_of(key_type, attrs.need_ulong(CKA_PARAMETER_SET)?)
}

/// A private key from its seed and/or expanded form; both given must agree.
fn private_from(set: &Set, seed: Option<&[u8]>, value: Option<&[u8]>) -> CkResult<PKey<Private>> {
    let bad = |_| CKR_ATTRIBUTE_VALUE_INVALID;
    if seed.is_some_and(|s| s.len() != set.seed_len)
        || value.is_some_and(|v| v.len() != set.priv_len)
    {
        return Err(CKR_ATTRIBUTE_VALUE_INVALID);
    }
    match (seed, value) {
        (Some(seed), value) => {
            let pkey = PKey::private_key_from_seed(None, set.ossl, None, seed).map_err(bad)?;
            if let Some(v) = value {
                let expanded = Zeroizing::new(pkey.raw_private_key().map_err(ossl_err)?);
                if expanded.as_slice() != v {
                    return Err(CKR_ATTRIBUTE_VALUE_INVALID);
                }
            }
            Ok(pkey)
        }
        (None, Some(v)) => {
            PKey::private_key_from_raw_bytes_ex(None, set.ossl, None, v).map_err(bad)
        }
        (None, None) => Err(CKR_TEMPLATE_INCOMPLETE),
    }
}

fn public_from(set: &Set, value: &[u8]) -> CkResult<PKey<Public>> {
    if value.len() != set.pub_len {
        return Err(CKR_ATTRIBUTE_VALUE_INVALID);
    }
    PKey::public_key_from_raw_bytes_ex(None, set.ossl, None, value)
        .map_err(|_| CKR_ATTRIBUTE_VALUE_INVALID)
}

fn check_type(key: &Key, want: CK_KEY_TYPE) -> CkResult<&'static Set> {
    if key.key_type()? != want {
        return Err(CKR_KEY_TYPE_INCONSISTENT);
    }
    set_of_attrs(key.attrs, want).map_err(|_| CKR_KEY_TYPE_INCONSISTENT)
}

/// The cached private key of an ML-DSA or ML-KEM private key object.
fn private_key<'a>(
    key: &Key<'a>,
    want: CK_KEY_TYPE,
) -> CkResult<(&'a PKey<Private>, &'static Set)> {
    let set = check_type(key, want)?;
    if key.class()? != CKO_PRIVATE_KEY {
        return Err(CKR_KEY_TYPE_INCONSISTENT);
    }
    if let Some(p) = key.cache.private.get() {
        return Ok((p, set));
    }
    // The material was checked when the object was made; failing now means it is unusable.
    let seed = key.attrs.bytes(CKA_SEED);
    let pkey = private_from(
        set,
        seed,
        if seed.is_some() {
            None
        } else {
            key.attrs.bytes(CKA_VALUE)
        },
    )
    .map_err(|_| CKR_FUNCTION_FAILED)?;
    Ok((key.cache.private.get_or_init(|| pkey), set))
}

/// The cached public key of an ML-DSA or ML-KEM public key object (or of a private one).
fn public_key<'a>(key: &Key<'a>, want: CK_KEY_TYPE) -> CkResult<(&'a PKey<Public>, &'static Set)> {
    let set = check_type(key, want)?;
    if let Some(p) = key.cache.public.get() {
        return Ok((p, set));
    }
    let raw = match key.class()? {
        CKO_PUBLIC_KEY => key
            .attrs
            .need_bytes(CKA_VALUE)
            .map_err(|_| CKR_FUNCTION_FAILED)?
            .to_vec(),
        CKO_PRIVATE_KEY => private_key(key, want)?
            .0
            .raw_public_key()
            .map_err(ossl_err)?,
        _ => return Err(CKR_KEY_TYPE_INCONSISTENT),
    };
    let pkey = public_from(set, &raw).map_err(|_| CKR_FUNCTION_FAILED)?;
    Ok((key.cache.public.get_or_init(|| pkey), set))
}

/// The public key of an ML-DSA or ML-KEM key object, public or private, for its
/// `CKA_PUBLIC_KEY_INFO`.
pub(super) fn public_pkey<'a>(key: &Key<'a>) -> CkResult<&'a PKey<Public>> {
    public_key(key, key.key_type()?).map(|(p, _)| p)
}

fn no_param(mech: &Mechanism) -> CkResult<()> {
    match &mech.param {
        MechParam::None => Ok(()),
        MechParam::Bytes(b) if b.is_empty() => Ok(()),
        _ => Err(CKR_MECHANISM_PARAM_INVALID),
    }
}

// ----- ML-DSA -----

/// `(context, deterministic)` of a `CKM_ML_DSA` parameter.
fn sign_context(mech: &Mechanism) -> CkResult<(&[u8], bool)> {
    if mech.mechanism != CKM_ML_DSA {
        return Err(CKR_MECHANISM_INVALID);
    }
    let (hedge, context) = match &mech.param {
        MechParam::None => return Ok((&[], false)),
        MechParam::Bytes(b) if b.is_empty() => return Ok((&[], false)),
        MechParam::SignContext { hedge, context } => (*hedge, context.as_slice()),
        _ => return Err(CKR_MECHANISM_PARAM_INVALID),
    };
    if context.len() > 255 {
        return Err(CKR_MECHANISM_PARAM_INVALID);
    }
    let deterministic = match hedge {
        CKH_HEDGE_PREFERRED | CKH_HEDGE_REQUIRED => false,
        CKH_DETERMINISTIC_REQUIRED => true,
        _ => return Err(CKR_MECHANISM_PARAM_INVALID),
    };
    Ok((context, deterministic))
}

/// The OpenSSL parameters of a context string and the deterministic flag.
fn sign_params(context: &[u8], deterministic: bool) -> Vec<Param<'_>> {
    let mut params = Vec::with_capacity(2);
    if !context.is_empty() {
        params.push(Param::Octets(c"context-string", context));
    }
    if deterministic {
        params.push(Param::Int(c"deterministic", 1));
    }
    params
}

/// A running ML-DSA signature on OpenSSL's streaming message API (the message
/// representative mu is hashed as the parts arrive).
struct Sign {
    ctx: PkeyCtx<Private>,
    sig_len: usize,
}

impl SignOp for Sign {
    fn update(&mut self, data: &[u8]) -> CkResult<()> {
        sign_message_update(&mut self.ctx, data).map_err(ossl_err)
    }
    fn finalize(&mut self, out: &mut OutBuf) -> CkResult<()> {
        let Some(buf) = out.reserve(self.sig_len)? else {
            return Ok(());
        };
        let n = sign_message_final(&mut self.ctx, buf).map_err(ossl_err)?;
        out.set_len(n);
        Ok(())
    }
    fn one_shot(&mut self, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        let Some(buf) = out.reserve(self.sig_len)? else {
            return Ok(());
        };
        sign_message_update(&mut self.ctx, data).map_err(ossl_err)?;
        let n = sign_message_final(&mut self.ctx, buf).map_err(ossl_err)?;
        out.set_len(n);
        Ok(())
    }
}

struct Verify {
    ctx: PkeyCtx<Public>,
    sig_len: usize,
}

impl Verify {
    fn finish(&mut self, sig: &[u8]) -> CkResult<()> {
        if sig.len() != self.sig_len {
            return Err(CKR_SIGNATURE_LEN_RANGE);
        }
        match verify_message_final(&mut self.ctx, sig) {
            Ok(true) => Ok(()),
            _ => Err(CKR_SIGNATURE_INVALID),
        }
    }
}

impl VerifyOp for Verify {
    fn update(&mut self, data: &[u8]) -> CkResult<()> {
        verify_message_update(&mut self.ctx, data).map_err(ossl_err)
    }
    fn finalize(&mut self, sig: &[u8]) -> CkResult<()> {
        self.finish(sig)
    }
    fn one_shot(&mut self, data: &[u8], sig: &[u8]) -> CkResult<()> {
        if sig.len() != self.sig_len {
            return Err(CKR_SIGNATURE_LEN_RANGE);
        }
        verify_message_update(&mut self.ctx, data).map_err(ossl_err)?;
        self.finish(sig)
    }
}

/// `C_SignInit` for `CKM_ML_DSA` (single- and multi-part).
pub fn sign_init(mech: &Mechanism, key: Key) -> CkResult<Box<dyn SignOp>> {
    let (context, deterministic) = sign_context(mech)?;
    let (pkey, set) = private_key(&key, CKK_ML_DSA)?;
    let mut ctx = PkeyCtx::new(pkey).map_err(ossl_err)?;
    sign_message_init(&mut ctx, &sign_params(context, deterministic)).map_err(ossl_err)?;
    Ok(Box::new(Sign {
        ctx,
        sig_len: set.out_len,
    }))
}

/// `C_VerifyInit` for `CKM_ML_DSA` (single- and multi-part).
pub fn verify_init(mech: &Mechanism, key: Key) -> CkResult<Box<dyn VerifyOp>> {
    let (context, _) = sign_context(mech)?;
    let (pkey, set) = public_key(&key, CKK_ML_DSA)?;
    let mut ctx = PkeyCtx::new(pkey).map_err(ossl_err)?;
    verify_message_init(&mut ctx, &sign_params(context, false)).map_err(ossl_err)?;
    Ok(Box::new(Verify {
        ctx,
        sig_len: set.out_len,
    }))
}

// ----- ML-KEM -----

fn kem_mech(mech: &Mechanism) -> CkResult<()> {
    if mech.mechanism != CKM_ML_KEM {
        return Err(CKR_MECHANISM_INVALID);
    }
    no_param(mech)
}

/// `C_EncapsulateKey` with `CKM_ML_KEM` to a public key: (ciphertext, 32-byte secret).
pub fn encapsulate(mech: &Mechanism, public: Key) -> CkResult<(Vec<u8>, Zeroizing<Vec<u8>>)> {
    kem_mech(mech)?;
    let (pkey, _) = public_key(&public, CKK_ML_KEM)?;
    kem_encapsulate(pkey).map_err(ossl_err)
}

/// The ciphertext length of `C_EncapsulateKey` with this public key.
pub fn encapsulate_len(mech: &Mechanism, public: Key) -> CkResult<usize> {
    kem_mech(mech)?;
    Ok(check_type(&public, CKK_ML_KEM)?.out_len)
}

/// `C_DecapsulateKey` with `CKM_ML_KEM`: the shared secret.
pub fn decapsulate(mech: &Mechanism, private: Key, ct: &[u8]) -> CkResult<Zeroizing<Vec<u8>>> {
    kem_mech(mech)?;
    let (pkey, set) = private_key(&private, CKK_ML_KEM)?;
    if ct.len() != set.out_len {
        return Err(CKR_WRAPPED_KEY_LEN_RANGE);
    }
    kem_decapsulate(pkey, ct).map_err(ossl_err)
}

// ----- Keys: generation, import, PKCS#8 -----

fn base_attrs(class: CK_OBJECT_CLASS, set: &Set) -> AttrMap {
    let mut m = AttrMap::new();
    m.set_ulong(CKA_CLASS, class);
    m.set_ulong(CKA_KEY_TYPE, set.key_type);
    m.set_ulong(CKA_PARAMETER_SET, set.param);
    m
}

/// The seed of a private key, when OpenSSL kept it.
fn seed_of(set: &Set, pkey: &PKey<Private>) -> Option<Zeroizing<Vec<u8>>> {
    let mut seed = Zeroizing::new(vec![0u8; set.seed_len]);
    let n = pkey.seed_into(&mut seed).ok()?;
    seed.truncate(n);
    Some(seed)
}

/// `C_GenerateKeyPair` with `CKM_ML_DSA_KEY_PAIR_GEN` or `CKM_ML_KEM_KEY_PAIR_GEN`:
/// `CKA_PARAMETER_SET` from the public template (or the private one; both must agree).
pub fn generate_key_pair(
    mech: &Mechanism,
    public: &AttrMap,
    private: &AttrMap,
) -> CkResult<(AttrMap, AttrMap)> {
    no_param(mech)?;
    let key_type = match mech.mechanism {
        CKM_ML_DSA_KEY_PAIR_GEN => CKK_ML_DSA,
        CKM_ML_KEM_KEY_PAIR_GEN => CKK_ML_KEM,
        _ => return Err(CKR_MECHANISM_INVALID),
    };
    let param = match (
        public.ulong(CKA_PARAMETER_SET)?,
        private.ulong(CKA_PARAMETER_SET)?,
    ) {
        (Some(a), Some(b)) if a != b => return Err(CKR_TEMPLATE_INCONSISTENT),
        (Some(a), _) | (None, Some(a)) => a,
        (None, None) => return Err(CKR_TEMPLATE_INCOMPLETE),
    };
    let set = set_of(key_type, param)?;
    let mut seed = Zeroizing::new(vec![0u8; set.seed_len]);
    openssl::rand::rand_priv_bytes(&mut seed).map_err(ossl_err)?;
    let pkey = PKey::private_key_from_seed(None, set.ossl, None, &seed).map_err(ossl_err)?;
    let mut pubm = base_attrs(CKO_PUBLIC_KEY, set);
    pubm.insert(CKA_VALUE, pkey.raw_public_key().map_err(ossl_err)?);
    let mut privm = base_attrs(CKO_PRIVATE_KEY, set);
    privm.insert(CKA_SEED, seed.to_vec());
    privm.insert(CKA_VALUE, pkey.raw_private_key().map_err(ossl_err)?);
    Ok((pubm, privm))
}

/// Checks the material of an ML-DSA or ML-KEM key object being created or unwrapped; a
/// private key given by its seed only gets its expanded `CKA_VALUE`.
pub fn complete_key(
    class: CK_OBJECT_CLASS,
    key_type: CK_KEY_TYPE,
    attrs: &mut AttrMap,
) -> CkResult<()> {
    let set = set_of_attrs(attrs, key_type)?;
    match class {
        CKO_PUBLIC_KEY => {
            public_from(set, attrs.need_bytes(CKA_VALUE)?)?;
            Ok(())
        }
        CKO_PRIVATE_KEY => {
            let pkey = private_from(set, attrs.bytes(CKA_SEED), attrs.bytes(CKA_VALUE))?;
            if attrs.bytes(CKA_VALUE).is_none() {
                attrs.insert(CKA_VALUE, pkey.raw_private_key().map_err(ossl_err)?);
            }
            Ok(())
        }
        _ => Err(CKR_ATTRIBUTE_VALUE_INVALID),
    }
}

/// A private key as PKCS#8 `PrivateKeyInfo` DER (OpenSSL's default encoding: seed and
/// expanded key when the seed is known, the expanded key otherwise).
pub fn to_pkcs8(key: Key) -> CkResult<Zeroizing<Vec<u8>>> {
    let want = key.key_type()?;
    if want != CKK_ML_DSA && want != CKK_ML_KEM {
        return Err(CKR_KEY_TYPE_INCONSISTENT);
    }
    let (pkey, _) = private_key(&key, want)?;
    pkey.private_key_to_pkcs8()
        .map(Zeroizing::new)
        .map_err(|_| CKR_KEY_NOT_WRAPPABLE)
}

/// The attributes (`CKA_PARAMETER_SET`, `CKA_VALUE`, `CKA_SEED` when present) of a PKCS#8
/// ML-DSA or ML-KEM private key of `key_type`. Undecodable: `CKR_WRAPPED_KEY_INVALID`; another
/// key type: `CKR_TEMPLATE_INCONSISTENT`.
pub fn from_pkcs8(key_type: CK_KEY_TYPE, bytes: &[u8]) -> CkResult<AttrMap> {
    let pkey = PKey::private_key_from_pkcs8(bytes).map_err(|_| CKR_WRAPPED_KEY_INVALID)?;
    let set = SETS
        .iter()
        .find(|s| pkey.is_a(s.ossl))
        .ok_or(CKR_TEMPLATE_INCONSISTENT)?;
    if set.key_type != key_type {
        return Err(CKR_TEMPLATE_INCONSISTENT);
    }
    let mut m = AttrMap::new();
    m.set_ulong(CKA_PARAMETER_SET, set.param);
    m.insert(
        CKA_VALUE,
        pkey.raw_private_key()
            .map_err(|_| CKR_WRAPPED_KEY_INVALID)?,
    );
    if let Some(seed) = seed_of(set, &pkey) {
        m.insert(CKA_SEED, seed.to_vec());
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mech::KeyCache;
    use opencf_abi::ossl_pk::set_ctx_params;
    use openssl::md_ctx::MdCtx;

    fn key<'a>(attrs: &'a AttrMap, cache: &'a KeyCache) -> Key<'a> {
        Key { attrs, cache }
    }

    fn gen(set: &Set) -> (AttrMap, AttrMap) {
        let m = if set.key_type == CKK_ML_DSA {
            CKM_ML_DSA_KEY_PAIR_GEN
        } else {
            CKM_ML_KEM_KEY_PAIR_GEN
        };
        let mut t = AttrMap::new();
        t.set_ulong(CKA_PARAMETER_SET, set.param);
        generate_key_pair(&Mechanism::new(m), &t, &AttrMap::new()).unwrap()
    }

    fn ctx_mech(hedge: CK_ULONG, context: &[u8]) -> Mechanism {
        Mechanism {
            mechanism: CKM_ML_DSA,
            param: MechParam::SignContext {
                hedge,
                context: context.to_vec(),
            },
        }
    }

    fn sign(m: &Mechanism, sk: &AttrMap, data: &[u8]) -> CkResult<Vec<u8>> {
        let cache = KeyCache::default();
        let mut op = sign_init(m, key(sk, &cache))?;
        let mut out = vec![0u8; 5000];
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

    fn ossl_private(set: &Set, sk: &AttrMap) -> PKey<Private> {
        PKey::private_key_from_seed(None, set.ossl, None, sk.bytes(CKA_SEED).unwrap()).unwrap()
    }

    #[test]
    fn keygen_and_import() {
        for set in &SETS {
            let (p, s) = gen(set);
            assert_eq!(p.bytes(CKA_VALUE).unwrap().len(), set.pub_len);
            assert_eq!(s.bytes(CKA_VALUE).unwrap().len(), set.priv_len);
            assert_eq!(s.bytes(CKA_SEED).unwrap().len(), set.seed_len);
            assert_eq!(p.ulong(CKA_PARAMETER_SET).unwrap(), Some(set.param));
            assert_eq!(s.ulong(CKA_KEY_TYPE).unwrap(), Some(set.key_type));
            let (mut p2, mut s2) = (p.clone(), s.clone());
            complete_key(CKO_PUBLIC_KEY, set.key_type, &mut p2).unwrap();
            complete_key(CKO_PRIVATE_KEY, set.key_type, &mut s2).unwrap();
            // Seed only: the expanded key is computed.
            let mut seed_only = s.clone();
            seed_only.remove(&CKA_VALUE);
            complete_key(CKO_PRIVATE_KEY, set.key_type, &mut seed_only).unwrap();
            assert_eq!(seed_only.bytes(CKA_VALUE), s.bytes(CKA_VALUE));
            // Seed and value that disagree; wrong lengths.
            let mut mismatch = s.clone();
            let mut seed = s.bytes(CKA_SEED).unwrap().to_vec();
            seed[0] ^= 1;
            mismatch.insert(CKA_SEED, seed);
            assert_eq!(
                complete_key(CKO_PRIVATE_KEY, set.key_type, &mut mismatch),
                Err(CKR_ATTRIBUTE_VALUE_INVALID)
            );
            let mut short = p.clone();
            short.insert(CKA_VALUE, vec![0u8; set.pub_len - 1]);
            assert_eq!(
                complete_key(CKO_PUBLIC_KEY, set.key_type, &mut short),
                Err(CKR_ATTRIBUTE_VALUE_INVALID)
            );
            let mut none = s.clone();
            none.remove(&CKA_VALUE);
            none.remove(&CKA_SEED);
            assert_eq!(
                complete_key(CKO_PRIVATE_KEY, set.key_type, &mut none),
                Err(CKR_TEMPLATE_INCOMPLETE)
            );
        }
        // Parameter-set errors.
        let g = Mechanism::new(CKM_ML_DSA_KEY_PAIR_GEN);
        let empty = AttrMap::new();
        assert_eq!(
            generate_key_pair(&g, &empty, &empty).err(),
            Some(CKR_TEMPLATE_INCOMPLETE)
        );
        let mut t = AttrMap::new();
        t.set_ulong(CKA_PARAMETER_SET, 9);
        assert_eq!(
            generate_key_pair(&g, &t, &empty).err(),
            Some(CKR_PARAMETER_SET_NOT_SUPPORTED)
        );
        t.set_ulong(CKA_PARAMETER_SET, CKP_ML_DSA_44);
        let mut t2 = AttrMap::new();
        t2.set_ulong(CKA_PARAMETER_SET, CKP_ML_DSA_87);
        assert_eq!(
            generate_key_pair(&g, &t, &t2).err(),
            Some(CKR_TEMPLATE_INCONSISTENT)
        );
        // The private template alone is enough.
        let (p, _) = generate_key_pair(&g, &empty, &t2).unwrap();
        assert_eq!(p.ulong(CKA_PARAMETER_SET).unwrap(), Some(CKP_ML_DSA_87));
    }

    #[test]
    fn ml_dsa_sign_verify_cross_checked() {
        for set in SETS.iter().filter(|s| s.key_type == CKK_ML_DSA) {
            let (p, s) = gen(set);
            let plain = Mechanism::new(CKM_ML_DSA);
            let sig = sign(&plain, &s, b"post-quantum").unwrap();
            assert_eq!(sig.len(), set.out_len);
            verify(&plain, &p, b"post-quantum", &sig).unwrap();
            // OpenSSL verifies ours and we verify OpenSSL's.
            let sk = ossl_private(set, &s);
            let mut md = MdCtx::new().unwrap();
            md.digest_verify_init(None, &sk).unwrap();
            assert!(md.digest_verify(b"post-quantum", &sig).unwrap());
            let mut md = MdCtx::new().unwrap();
            md.digest_sign_init(None, &sk)
                .unwrap()
                .set_context_string(b"ctx")
                .unwrap();
            let mut osig = vec![];
            md.digest_sign_to_vec(b"from openssl", &mut osig).unwrap();
            let with_ctx = ctx_mech(CKH_HEDGE_PREFERRED, b"ctx");
            verify(&with_ctx, &p, b"from openssl", &osig).unwrap();
            assert_eq!(
                verify(&plain, &p, b"from openssl", &osig),
                Err(CKR_SIGNATURE_INVALID)
            );
            // Tampering and length.
            let mut bad = sig.clone();
            bad[7] ^= 1;
            assert_eq!(
                verify(&plain, &p, b"post-quantum", &bad),
                Err(CKR_SIGNATURE_INVALID)
            );
            assert_eq!(
                verify(&plain, &p, b"post-quantum", &sig[1..]),
                Err(CKR_SIGNATURE_LEN_RANGE)
            );
        }
    }

    #[test]
    fn ml_dsa_hedging_and_context() {
        let set = &SETS[1];
        let (p, s) = gen(set);
        let det = ctx_mech(CKH_DETERMINISTIC_REQUIRED, b"app");
        let a = sign(&det, &s, b"msg").unwrap();
        let b = sign(&det, &s, b"msg").unwrap();
        assert_eq!(a, b);
        verify(&det, &p, b"msg", &a).unwrap();
        // OpenSSL's deterministic signature is the same.
        let sk = ossl_private(set, &s);
        let mut md = MdCtx::new().unwrap();
        let pctx = md.digest_sign_init(None, &sk).unwrap();
        pctx.set_context_string(b"app").unwrap();
        set_ctx_params(pctx, &[Param::Int(c"deterministic", 1)]).unwrap();
        let mut osig = vec![];
        md.digest_sign_to_vec(b"msg", &mut osig).unwrap();
        assert_eq!(osig, a);
        // Hedged signatures differ from one another.
        let hedged = ctx_mech(CKH_HEDGE_REQUIRED, b"app");
        let c = sign(&hedged, &s, b"msg").unwrap();
        let d = sign(&hedged, &s, b"msg").unwrap();
        assert_ne!(c, d);
        verify(&hedged, &p, b"msg", &c).unwrap();
        // Bad parameters.
        let cache = KeyCache::default();
        for m in [
            ctx_mech(CKH_HEDGE_PREFERRED, &[0u8; 256]),
            ctx_mech(7, b""),
            Mechanism {
                mechanism: CKM_ML_DSA,
                param: MechParam::Ulong(1),
            },
        ] {
            assert_eq!(
                sign_init(&m, key(&s, &cache)).err(),
                Some(CKR_MECHANISM_PARAM_INVALID)
            );
        }
        // Multi-part signing gives the one-shot (deterministic) signature; a size query at
        // C_SignFinal keeps the operation.
        let mut op = sign_init(&det, key(&s, &cache)).unwrap();
        op.update(b"m").unwrap();
        let mut q = OutBuf::new(None);
        op.finalize(&mut q).unwrap();
        assert_eq!(q.len(), set.out_len);
        op.update(b"sg").unwrap();
        let mut out = vec![0u8; set.out_len];
        let mut ob = OutBuf::new(Some(&mut out));
        op.finalize(&mut ob).unwrap();
        assert_eq!(out, a);
        let cache = KeyCache::default();
        let mut v = verify_init(&det, key(&p, &cache)).unwrap();
        v.update(b"ms").unwrap();
        v.update(b"g").unwrap();
        v.finalize(&out).unwrap();
        let mut v = verify_init(&det, key(&p, &cache)).unwrap();
        v.update(b"msG").unwrap();
        assert_eq!(v.finalize(&out), Err(CKR_SIGNATURE_INVALID));
        // One-shot: a size query and a short buffer keep the operation.
        let mut op = sign_init(&Mechanism::new(CKM_ML_DSA), key(&s, &cache)).unwrap();
        let mut q = OutBuf::new(None);
        op.one_shot(b"m", &mut q).unwrap();
        let mut small = vec![0u8; 10];
        let mut sb = OutBuf::new(Some(&mut small));
        assert_eq!(op.one_shot(b"m", &mut sb), Err(CKR_BUFFER_TOO_SMALL));
        let mut out = vec![0u8; set.out_len];
        let mut ob = OutBuf::new(Some(&mut out));
        op.one_shot(b"m", &mut ob).unwrap();
        verify(&Mechanism::new(CKM_ML_DSA), &p, b"m", &out).unwrap();
    }

    #[test]
    fn ml_dsa_key_by_value_only() {
        let set = &SETS[0];
        let (p, s) = gen(set);
        let mut v = s.clone();
        v.remove(&CKA_SEED);
        complete_key(CKO_PRIVATE_KEY, CKK_ML_DSA, &mut v).unwrap();
        let sig = sign(&Mechanism::new(CKM_ML_DSA), &v, b"expanded").unwrap();
        verify(&Mechanism::new(CKM_ML_DSA), &p, b"expanded", &sig).unwrap();
        // Its PKCS#8 form has no seed; the round trip gives the value back.
        let cache = KeyCache::default();
        let der = to_pkcs8(key(&v, &cache)).unwrap();
        let back = from_pkcs8(CKK_ML_DSA, &der).unwrap();
        assert_eq!(back.bytes(CKA_VALUE), s.bytes(CKA_VALUE));
        assert!(back.bytes(CKA_SEED).is_none());
    }

    #[test]
    fn ml_kem_round_trips() {
        for set in SETS.iter().filter(|s| s.key_type == CKK_ML_KEM) {
            let (p, s) = gen(set);
            let m = Mechanism::new(CKM_ML_KEM);
            let (cp, cs) = (KeyCache::default(), KeyCache::default());
            assert_eq!(encapsulate_len(&m, key(&p, &cp)).unwrap(), set.out_len);
            let (ct, ss) = encapsulate(&m, key(&p, &cp)).unwrap();
            assert_eq!(ct.len(), set.out_len);
            assert_eq!(ss.len(), 32);
            assert_eq!(decapsulate(&m, key(&s, &cs), &ct).unwrap(), ss);
            // OpenSSL encapsulates to the key directly; we decapsulate.
            let sk = ossl_private(set, &s);
            let (oct, oss) = kem_encapsulate(&sk).unwrap();
            assert_eq!(decapsulate(&m, key(&s, &cs), &oct).unwrap(), oss);
            // A corrupted ciphertext gives another secret; a short one is an error.
            let mut bad = ct.clone();
            bad[0] ^= 1;
            assert_ne!(decapsulate(&m, key(&s, &cs), &bad).unwrap(), ss);
            assert_eq!(
                decapsulate(&m, key(&s, &cs), &ct[1..]).err(),
                Some(CKR_WRAPPED_KEY_LEN_RANGE)
            );
            // Key-type checks.
            assert_eq!(encapsulate(&m, key(&s, &cs)).map(|_| ()), Ok(()));
            let mut dsa = p.clone();
            dsa.set_ulong(CKA_KEY_TYPE, CKK_ML_DSA);
            let c = KeyCache::default();
            assert_eq!(
                encapsulate(&m, key(&dsa, &c)).err(),
                Some(CKR_KEY_TYPE_INCONSISTENT)
            );
            assert_eq!(
                decapsulate(&m, key(&p, &c), &ct).err(),
                Some(CKR_KEY_TYPE_INCONSISTENT)
            );
        }
    }

    #[test]
    fn pkcs8_round_trips() {
        for set in &SETS {
            let (_, s) = gen(set);
            let cache = KeyCache::default();
            let der = to_pkcs8(key(&s, &cache)).unwrap();
            let back = from_pkcs8(set.key_type, &der).unwrap();
            assert_eq!(back.bytes(CKA_VALUE), s.bytes(CKA_VALUE));
            assert_eq!(back.bytes(CKA_SEED), s.bytes(CKA_SEED));
            assert_eq!(back.ulong(CKA_PARAMETER_SET).unwrap(), Some(set.param));
            let other = if set.key_type == CKK_ML_DSA {
                CKK_ML_KEM
            } else {
                CKK_ML_DSA
            };
            assert_eq!(
                from_pkcs8(other, &der).err(),
                Some(CKR_TEMPLATE_INCONSISTENT)
            );
            assert_eq!(
                from_pkcs8(set.key_type, &der[3..]).err(),
                Some(CKR_WRAPPED_KEY_INVALID)
            );
        }
    }
}
