//! Session objects: RSA private and public keys, EC private keys and AES secret keys,
//! created by value
//! (`C_CreateObject`) or unwrapped (`C_UnwrapKey`).
//!
//! Rules (docs/ACCEL.md): token objects are refused (`CKA_TOKEN = TRUE` is
//! `CKR_ATTRIBUTE_VALUE_INVALID`); secret values (`CKA_VALUE` of a secret key, the private
//! exponent, primes, CRT values, `CKA_SEED`: [`schema::SENSITIVE_ATTRS`]) are never returned
//! (`CKR_ATTRIBUTE_SENSITIVE`, whatever `CKA_SENSITIVE` says); usage attributes (`CKA_SIGN`, `CKA_DECRYPT`, `CKA_UNWRAP`, …) are
//! false unless the template sets them. A template is checked as the software token checks it
//! ([`opencf_abi::schema`]): an attribute only a token sets is `CKR_ATTRIBUTE_READ_ONLY`, one
//! of another class `CKR_ATTRIBUTE_TYPE_INVALID`, a type given twice with different values
//! `CKR_TEMPLATE_INCONSISTENT`; the other attributes of the class are kept as given. The engine
//! form of an RSA key and the GCM, CTR and ECB forms of an AES key are built on first use and
//! kept with the object. An EC private key of another curve than P-256 is kept but served by
//! no engine (`CKR_KEY_SIZE_RANGE` at `C_SignInit`).

use crate::blocks::AesKey;
use crate::ecdsa::{self, EcdsaKey};
use crate::gcm::GcmKey;
use crate::rsa::{RsaKey, RsaParts};
use opencf_abi::schema::{self, SENSITIVE_ATTRS};
use opencf_abi::sys::*;
use opencf_abi::{AttrValue, Attribute, CkResult};
use openssl::bn::BigNum;
use openssl::pkey::PKey;
use std::sync::{Arc, OnceLock};
use zeroize::Zeroizing;

/// Boolean attributes stored as given, false by default.
const FLAGS: [CK_ATTRIBUTE_TYPE; 14] = [
    CKA_PRIVATE,
    CKA_MODIFIABLE,
    CKA_ENCRYPT,
    CKA_DECRYPT,
    CKA_SIGN,
    CKA_SIGN_RECOVER,
    CKA_VERIFY,
    CKA_VERIFY_RECOVER,
    CKA_WRAP,
    CKA_UNWRAP,
    CKA_DERIVE,
    CKA_SENSITIVE,
    CKA_EXTRACTABLE,
    CKA_ALWAYS_AUTHENTICATE,
];

/// Attributes taken over from a template as bytes.
const PLAIN: [CK_ATTRIBUTE_TYPE; 5] = [
    CKA_LABEL,
    CKA_ID,
    CKA_ALLOWED_MECHANISMS,
    CKA_START_DATE,
    CKA_END_DATE,
];

/// A session object.
pub struct Object {
    /// `CKA_CLASS`.
    pub class: CK_OBJECT_CLASS,
    /// `CKA_KEY_TYPE`.
    pub key_type: CK_KEY_TYPE,
    /// The session that created it (destroyed with it).
    pub session: CK_SESSION_HANDLE,
    /// Every readable attribute.
    attrs: Vec<Attribute>,
    secret: Secret,
    rsa: OnceLock<CkResult<Arc<RsaKey>>>,
    ec: OnceLock<CkResult<Arc<EcdsaKey>>>,
    gcm: OnceLock<CkResult<Arc<GcmKey>>>,
    aes: OnceLock<CkResult<Arc<AesKey>>>,
}

/// The secret material of an object.
enum Secret {
    None,
    /// `n, e, p, q, dP, dQ, qInv` (a key without primes has no engine form).
    Rsa(Option<[Zeroizing<Vec<u8>>; 7]>),
    Aes(Zeroizing<Vec<u8>>),
    /// The private value `d`, when the key is on P-256 (`None`: another curve).
    Ec(Option<Zeroizing<Vec<u8>>>),
}

fn find(t: &[Attribute], kind: CK_ATTRIBUTE_TYPE) -> Option<&Attribute> {
    t.iter().find(|a| a.kind == kind)
}

fn ulong(t: &[Attribute], kind: CK_ATTRIBUTE_TYPE) -> CkResult<Option<CK_ULONG>> {
    find(t, kind).map(|a| a.as_ulong()).transpose()
}

fn bytes(t: &[Attribute], kind: CK_ATTRIBUTE_TYPE) -> Option<Zeroizing<Vec<u8>>> {
    find(t, kind).map(|a| Zeroizing::new(a.value.clone()))
}

/// Secret values of a new object, from the template or from an unwrapped key.
pub enum Material {
    /// Taken from the template (`C_CreateObject`).
    Template,
    /// A private key from `C_UnwrapKey` (PKCS#8 DER).
    Pkcs8(Zeroizing<Vec<u8>>),
    /// A secret key value from `C_UnwrapKey`.
    Value(Zeroizing<Vec<u8>>),
}

/// Strips leading zero bytes (values given with a sign byte or padding).
fn trim(b: &[u8]) -> Zeroizing<Vec<u8>> {
    let i = b.iter().position(|x| *x != 0).unwrap_or(b.len());
    Zeroizing::new(b[i..].to_vec())
}

/// `n, e, p, q, dP, dQ, qInv` from a template; missing CRT values are computed from the
/// primes, a key without primes gets `None` (kept, but served by no engine).
fn rsa_from_template(t: &[Attribute]) -> CkResult<Option<[Zeroizing<Vec<u8>>; 7]>> {
    let get = |k| bytes(t, k).map(|b| trim(&b));
    let n = get(CKA_MODULUS).ok_or(CKR_TEMPLATE_INCOMPLETE)?;
    let d = get(CKA_PRIVATE_EXPONENT).ok_or(CKR_TEMPLATE_INCOMPLETE)?;
    let e = get(CKA_PUBLIC_EXPONENT).ok_or(CKR_TEMPLATE_INCOMPLETE)?;
    if n.is_empty() || d.is_empty() || e.is_empty() {
        return Err(CKR_ATTRIBUTE_VALUE_INVALID);
    }
    let (Some(p), Some(q)) = (get(CKA_PRIME_1), get(CKA_PRIME_2)) else {
        return Ok(None);
    };
    let bad = |_| CKR_ATTRIBUTE_VALUE_INVALID;
    let bn = |b: &[u8]| BigNum::from_slice(b).map_err(bad);
    let mut ctx = openssl::bn::BigNumContext::new().map_err(|_| CKR_HOST_MEMORY)?;
    let mut crt = |given: Option<Zeroizing<Vec<u8>>>, prime: &[u8]| -> CkResult<_> {
        if let Some(v) = given {
            return Ok(v);
        }
        let mut pm1 = bn(prime)?;
        pm1.sub_word(1).map_err(bad)?;
        let mut r = BigNum::new().map_err(bad)?;
        r.nnmod(&*bn(&d)?, &pm1, &mut ctx).map_err(bad)?;
        Ok(Zeroizing::new(r.to_vec()))
    };
    let dp = crt(get(CKA_EXPONENT_1), &p)?;
    let dq = crt(get(CKA_EXPONENT_2), &q)?;
    let qinv = match get(CKA_COEFFICIENT) {
        Some(v) => v,
        None => {
            let mut r = BigNum::new().map_err(bad)?;
            r.mod_inverse(&*bn(&q)?, &*bn(&p)?, &mut ctx).map_err(bad)?;
            Zeroizing::new(r.to_vec())
        }
    };
    Ok(Some([n, e, p, q, dp, dq, qinv]))
}

fn rsa_from_pkcs8(der: &[u8]) -> CkResult<[Zeroizing<Vec<u8>>; 7]> {
    let pkey = PKey::private_key_from_der(der).map_err(|_| CKR_WRAPPED_KEY_INVALID)?;
    let rsa = pkey.rsa().map_err(|_| CKR_WRAPPED_KEY_INVALID)?;
    let parts = crate::rsa::parts_of(&rsa).ok_or(CKR_WRAPPED_KEY_INVALID)?;
    Ok(parts.map(Zeroizing::new))
}

/// An EC private key's `CKA_EC_PARAMS` and, on P-256, its private value.
type EcParts = (Vec<u8>, Option<Zeroizing<Vec<u8>>>);

/// `CKA_EC_PARAMS` and, on P-256, `d` of a PKCS#8 EC private key.
fn ec_from_pkcs8(der: &[u8]) -> CkResult<EcParts> {
    let pkey = PKey::private_key_from_der(der).map_err(|_| CKR_WRAPPED_KEY_INVALID)?;
    let ec = pkey.ec_key().map_err(|_| CKR_WRAPPED_KEY_INVALID)?;
    if ec.group().curve_name() != Some(openssl::nid::Nid::X9_62_PRIME256V1) {
        return Ok((Vec::new(), None));
    }
    let d = ec.private_key().to_vec_padded(ecdsa::N_LEN as i32);
    let d = d.map_err(|_| CKR_WRAPPED_KEY_INVALID)?;
    Ok((ecdsa::P256_OID.to_vec(), Some(Zeroizing::new(d))))
}

impl Object {
    /// A new object from `template` and its secret `material`.
    pub fn new(
        template: &[Attribute],
        material: Material,
        session: CK_SESSION_HANDLE,
    ) -> CkResult<Object> {
        let class = ulong(template, CKA_CLASS)?.ok_or(CKR_TEMPLATE_INCOMPLETE)?;
        if !matches!(class, CKO_PRIVATE_KEY | CKO_PUBLIC_KEY | CKO_SECRET_KEY) {
            return Err(CKR_ATTRIBUTE_VALUE_INVALID);
        }
        schema::check_template(template, class)?;
        if find(template, CKA_TOKEN).map(|a| a.as_bool()).transpose()? == Some(true) {
            return Err(CKR_ATTRIBUTE_VALUE_INVALID);
        }
        // A key that wants the PIN before each use: the provider has no PIN to ask for (the
        // framework keeps such keys in the software token, which asks).
        if find(template, CKA_ALWAYS_AUTHENTICATE)
            .map(|a| a.as_bool())
            .transpose()?
            == Some(true)
        {
            return Err(CKR_ATTRIBUTE_VALUE_INVALID);
        }
        let key_type = ulong(template, CKA_KEY_TYPE)?.ok_or(CKR_TEMPLATE_INCOMPLETE)?;
        let from_template = matches!(material, Material::Template);
        if !from_template && SENSITIVE_ATTRS.iter().any(|k| find(template, *k).is_some()) {
            return Err(CKR_TEMPLATE_INCONSISTENT);
        }
        let mut attrs = vec![
            Attribute::ulong(CKA_CLASS, class),
            Attribute::ulong(CKA_KEY_TYPE, key_type),
            Attribute::bool(CKA_TOKEN, false),
            Attribute::bool(CKA_LOCAL, false),
        ];
        let secret = match (class, key_type, material) {
            (CKO_PRIVATE_KEY, CKK_RSA, m) => {
                let parts = match m {
                    Material::Template => rsa_from_template(template)?,
                    Material::Pkcs8(der) => Some(rsa_from_pkcs8(&der)?),
                    Material::Value(_) => return Err(CKR_TEMPLATE_INCONSISTENT),
                };
                if let (false, Some(p)) = (from_template, &parts) {
                    // A template's public parts must be the unwrapped key's.
                    for (k, v) in [(CKA_MODULUS, &p[0]), (CKA_PUBLIC_EXPONENT, &p[1])] {
                        if bytes(template, k).is_some_and(|g| trim(&g) != *v) {
                            return Err(CKR_TEMPLATE_INCONSISTENT);
                        }
                    }
                }
                let (n, e) = match &parts {
                    Some(p) => (p[0].clone(), p[1].clone()),
                    None => (
                        trim(&bytes(template, CKA_MODULUS).unwrap_or_default()),
                        trim(&bytes(template, CKA_PUBLIC_EXPONENT).unwrap_or_default()),
                    ),
                };
                attrs.push(Attribute::new(CKA_MODULUS, n.to_vec()));
                attrs.push(Attribute::new(CKA_PUBLIC_EXPONENT, e.to_vec()));
                Secret::Rsa(parts)
            }
            (CKO_PRIVATE_KEY, CKK_EC, m) => {
                // The template's CKA_EC_PARAMS is kept as given (OID or curve name).
                let given = bytes(template, CKA_EC_PARAMS).map(|g| g.to_vec());
                let (params, d) = match m {
                    Material::Template => {
                        let params = given.ok_or(CKR_TEMPLATE_INCOMPLETE)?;
                        let d = bytes(template, CKA_VALUE).ok_or(CKR_TEMPLATE_INCOMPLETE)?;
                        let p256 = ecdsa::is_p256(&params);
                        (params, p256.then_some(d))
                    }
                    Material::Pkcs8(der) => {
                        let (derived, d) = ec_from_pkcs8(&der)?;
                        // A template's curve must be the unwrapped key's: P-256 (which the
                        // engine serves) on both sides or on neither.
                        if given
                            .as_ref()
                            .is_some_and(|g| ecdsa::is_p256(g) != d.is_some())
                        {
                            return Err(CKR_TEMPLATE_INCONSISTENT);
                        }
                        (given.unwrap_or(derived), d)
                    }
                    Material::Value(_) => return Err(CKR_TEMPLATE_INCONSISTENT),
                };
                attrs.push(Attribute::new(CKA_EC_PARAMS, params));
                Secret::Ec(d)
            }
            (CKO_PUBLIC_KEY, CKK_RSA, Material::Template) => {
                let n = bytes(template, CKA_MODULUS).ok_or(CKR_TEMPLATE_INCOMPLETE)?;
                let e = bytes(template, CKA_PUBLIC_EXPONENT).ok_or(CKR_TEMPLATE_INCOMPLETE)?;
                let bits = BigNum::from_slice(&n).map_or(0, |b| b.num_bits());
                attrs.push(Attribute::new(CKA_MODULUS, trim(&n).to_vec()));
                attrs.push(Attribute::new(CKA_PUBLIC_EXPONENT, trim(&e).to_vec()));
                attrs.push(Attribute::ulong(CKA_MODULUS_BITS, bits as CK_ULONG));
                Secret::None
            }
            (CKO_SECRET_KEY, CKK_AES, m) => {
                let v = match m {
                    Material::Template => {
                        bytes(template, CKA_VALUE).ok_or(CKR_TEMPLATE_INCOMPLETE)?
                    }
                    Material::Value(v) => v,
                    Material::Pkcs8(_) => return Err(CKR_TEMPLATE_INCONSISTENT),
                };
                if ![16, 24, 32].contains(&v.len()) {
                    return Err(if from_template {
                        CKR_ATTRIBUTE_VALUE_INVALID
                    } else {
                        CKR_WRAPPED_KEY_INVALID
                    });
                }
                if let Some(l) = ulong(template, CKA_VALUE_LEN)? {
                    if l as usize != v.len() {
                        return Err(CKR_TEMPLATE_INCONSISTENT);
                    }
                }
                attrs.push(Attribute::ulong(CKA_VALUE_LEN, v.len() as CK_ULONG));
                Secret::Aes(v)
            }
            _ => return Err(CKR_ATTRIBUTE_VALUE_INVALID),
        };
        for k in FLAGS {
            let v = find(template, k).map(|a| a.as_bool()).transpose()?;
            attrs.push(Attribute::bool(k, v.unwrap_or(false)));
        }
        for k in PLAIN {
            attrs.push(Attribute::new(
                k,
                find(template, k)
                    .map(|a| a.value.clone())
                    .unwrap_or_default(),
            ));
        }
        let sensitive = matches!(secret, Secret::Rsa(_) | Secret::Aes(_));
        attrs.push(Attribute::bool(CKA_ALWAYS_SENSITIVE, false));
        attrs.push(Attribute::bool(CKA_NEVER_EXTRACTABLE, false));
        if sensitive && class == CKO_PRIVATE_KEY {
            let bits = attrs
                .iter()
                .find(|a| a.kind == CKA_MODULUS)
                .and_then(|a| BigNum::from_slice(&a.value).ok())
                .map_or(0, |b| b.num_bits());
            attrs.push(Attribute::ulong(CKA_MODULUS_BITS, bits as CK_ULONG));
        }
        // Any other attribute of the class (CKA_SUBJECT, templates, …) is kept as given, but
        // CKA_CHECK_VALUE: the provider does not compute one, and PKCS#11 has a library that
        // does not ignore a given one rather than keep a value it never checked.
        for a in template {
            if !SENSITIVE_ATTRS.contains(&a.kind)
                && a.kind != CKA_CHECK_VALUE
                && !attrs.iter().any(|b| b.kind == a.kind)
            {
                attrs.push(a.clone());
            }
        }
        Ok(Object {
            class,
            key_type,
            session,
            attrs,
            secret,
            rsa: OnceLock::new(),
            ec: OnceLock::new(),
            gcm: OnceLock::new(),
            aes: OnceLock::new(),
        })
    }

    /// A boolean attribute (false when absent): any one byte but `CK_FALSE` is true, as the
    /// software token reads it (a `CKA_PRIVATE` of 2 is private in both).
    pub fn flag(&self, kind: CK_ATTRIBUTE_TYPE) -> bool {
        self.attrs
            .iter()
            .any(|a| a.kind == kind && a.as_bool() == Ok(true))
    }

    /// Whether `CKA_ALLOWED_MECHANISMS` (empty: all) lets `mech` run.
    pub fn allows(&self, mech: CK_MECHANISM_TYPE) -> bool {
        let Some(a) = self.attrs.iter().find(|a| a.kind == CKA_ALLOWED_MECHANISMS) else {
            return true;
        };
        let w = std::mem::size_of::<CK_ULONG>();
        a.value.is_empty()
            || a.value
                .chunks_exact(w)
                .any(|c| CK_ULONG::from_ne_bytes(c.try_into().expect("chunk size")) == mech)
    }

    /// `C_GetAttributeValue` for one type.
    pub fn attribute(&self, kind: CK_ATTRIBUTE_TYPE) -> AttrValue {
        if SENSITIVE_ATTRS.contains(&kind) && !matches!(self.secret, Secret::None) {
            return AttrValue::Sensitive;
        }
        match self.attrs.iter().find(|a| a.kind == kind) {
            Some(a) => AttrValue::Value(a.value.clone()),
            None if kind == CKA_PUBLIC_KEY_INFO && self.class != CKO_SECRET_KEY => {
                AttrValue::Value(self.public_key_info().unwrap_or_default())
            }
            None => AttrValue::Invalid,
        }
    }

    /// `CKA_PUBLIC_KEY_INFO` of a public or private key, derived when read: the DER
    /// SubjectPublicKeyInfo of an RSA key's modulus and exponent or of a P-256 private key's
    /// point. `None` where it cannot be derived (an EC key of another curve), which reads as
    /// the attribute's default, empty.
    fn public_key_info(&self) -> Option<Vec<u8>> {
        match self.key_type {
            CKK_RSA => {
                let part = |k| {
                    let a = self.attrs.iter().find(|a| a.kind == k)?;
                    BigNum::from_slice(&a.value).ok()
                };
                let rsa = openssl::rsa::Rsa::from_public_components(
                    part(CKA_MODULUS)?,
                    part(CKA_PUBLIC_EXPONENT)?,
                )
                .ok()?;
                PKey::from_rsa(rsa).ok()?.public_key_to_der().ok()
            }
            CKK_EC => self.ecdsa().ok()?.public_key_info().ok(),
            _ => None,
        }
    }

    /// Whether every attribute of `template` has this object's value.
    pub fn matches(&self, template: &[Attribute]) -> bool {
        template
            .iter()
            .all(|t| matches!(self.attribute(t.kind), AttrValue::Value(v) if v == t.value))
    }

    /// The AES key value of a secret key.
    pub fn aes_value(&self) -> Option<&[u8]> {
        match &self.secret {
            Secret::Aes(v) => Some(v),
            _ => None,
        }
    }

    /// The GCM form of an AES key ([`GcmKey`]: `H` and `H⁻²`), built on first use.
    pub fn gcm(&self) -> CkResult<Arc<GcmKey>> {
        let Secret::Aes(v) = &self.secret else {
            return Err(CKR_KEY_TYPE_INCONSISTENT);
        };
        self.gcm
            .get_or_init(|| GcmKey::new(v).map(Arc::new))
            .clone()
    }

    /// The CTR and ECB form of an AES key ([`AesKey`]), built on first use.
    pub fn aes(&self) -> CkResult<Arc<AesKey>> {
        let Secret::Aes(v) = &self.secret else {
            return Err(CKR_KEY_TYPE_INCONSISTENT);
        };
        self.aes
            .get_or_init(|| AesKey::new(v).map(Arc::new))
            .clone()
    }

    /// The P-256 form of an EC private key, built on first use. A key on another curve
    /// answers `CKR_KEY_SIZE_RANGE` (the framework then uses the next provider).
    pub fn ecdsa(&self) -> CkResult<Arc<EcdsaKey>> {
        let Secret::Ec(d) = &self.secret else {
            return Err(CKR_KEY_TYPE_INCONSISTENT);
        };
        self.ec
            .get_or_init(|| {
                let d = d.as_ref().ok_or(CKR_KEY_SIZE_RANGE)?;
                EcdsaKey::new(d).map(Arc::new)
            })
            .clone()
    }

    /// The engine form of an RSA private key, built on first use. A key the engine cannot
    /// serve answers `CKR_KEY_SIZE_RANGE` (the framework then uses the next provider).
    pub fn rsa(&self) -> CkResult<Arc<RsaKey>> {
        let Secret::Rsa(parts) = &self.secret else {
            return Err(CKR_KEY_TYPE_INCONSISTENT);
        };
        self.rsa
            .get_or_init(|| {
                let p = parts.as_ref().ok_or(CKR_KEY_SIZE_RANGE)?;
                RsaKey::new(&RsaParts::from_array(p)).map(Arc::new)
            })
            .clone()
    }
}
