//! Key generation, and converting keys between token attributes and OpenSSL keys.

use crate::error::{Ctx, Error, Result};
use crate::objects::{self, bytes_attr, CKA_KEY_TYPE, CKK_CHACHA20};
use crate::util::{der_tlv, unwrap_octet_string};
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{
    Attribute, AttributeType, KeyType, MlDsaParameterSetType, MlKemParameterSetType, ObjectClass,
    ObjectHandle, ParameterSetType,
};
use cryptoki::session::Session;
use openssl::bn::{BigNum, BigNumContext};
use openssl::ec::{EcGroup, EcKey, EcPoint, PointConversionForm};
use openssl::nid::Nid;
use openssl::pkey::{Id, PKey, Private, Public};
use openssl::rsa::Rsa;

/// Attributes every generated or imported key gets.
#[derive(Debug, Clone)]
pub struct KeyOpts {
    pub label: Option<String>,
    pub id: Option<Vec<u8>>,
    pub sensitive: bool,
    pub extractable: bool,
}

impl KeyOpts {
    fn common(&self, class: ObjectClass, private: bool) -> Vec<Attribute> {
        let mut t = vec![
            Attribute::Class(class),
            Attribute::Token(true),
            Attribute::Private(private),
        ];
        if let Some(l) = &self.label {
            t.push(Attribute::Label(l.as_bytes().to_vec()));
        }
        if let Some(id) = &self.id {
            t.push(Attribute::Id(id.clone()));
        }
        t
    }

    fn secret_flags(&self) -> [Attribute; 2] {
        [
            Attribute::Sensitive(self.sensitive),
            Attribute::Extractable(self.extractable),
        ]
    }
}

/// What `genkey` makes, checked before the token is touched ([`secret_key_plan`]).
pub struct SecretKeyPlan {
    alg: String,
    /// The mechanism, or `None` for ChaCha20 (made with `C_CreateObject`, see
    /// [`genkey`]).
    mech: Option<Mechanism<'static>>,
    template: Vec<Attribute>,
}

/// What `genkeypair` makes, checked before the token is touched ([`key_pair_plan`]).
pub struct KeyPairPlan {
    alg: String,
    mech: Mechanism<'static>,
    public: Vec<Attribute>,
    private: Vec<Attribute>,
    /// Whether the pair's CKA_ID is set from its public value afterwards.
    default_id: bool,
}

/// genkey: makes the secret key of `plan` ([`secret_key_plan`]).
pub fn genkey(s: &Session, plan: SecretKeyPlan) -> Result<ObjectHandle> {
    let SecretKeyPlan {
        alg,
        mech,
        mut template,
    } = plan;
    match mech {
        Some(mech) => s
            .generate_key(&mech, &template)
            .ctx(|| format!("generating a {alg} key")),
        None => {
            // cryptoki 0.12 has no CKM_CHACHA20_KEY_GEN: the value comes from the token's
            // random generator and the key is created with C_CreateObject.
            let value = s
                .generate_random_vec(32)
                .ctx(|| "drawing random bytes for a ChaCha20 key".into())?;
            template.push(Attribute::Value(value));
            s.create_object(&template)
                .ctx(|| "creating the ChaCha20 key".into())
        }
    }
}

/// The secret key `genkey` makes: its type, size (`bits`, for AES and generic secrets) and
/// template, all checked here (usage errors before any login).
pub fn secret_key_plan(alg: &str, bits: Option<u64>, o: &KeyOpts) -> Result<SecretKeyPlan> {
    let mut t = o.common(ObjectClass::SECRET_KEY, true);
    t.extend(o.secret_flags());
    let cipher = [
        Attribute::Encrypt(true),
        Attribute::Decrypt(true),
        Attribute::Wrap(true),
        Attribute::Unwrap(true),
    ];
    let bytes = |default: u64, ok: &dyn Fn(u64) -> bool| -> Result<u64> {
        let b = bits.unwrap_or(default);
        if !b.is_multiple_of(8) || !ok(b) {
            return Err(Error::Usage(format!("--size {b} is not valid for {alg}")));
        }
        Ok(b / 8)
    };
    let mech = match alg.to_ascii_lowercase().as_str() {
        "aes" => {
            let n = bytes(256, &|b| [128, 192, 256].contains(&b))?;
            t.extend([
                Attribute::KeyType(KeyType::AES),
                Attribute::ValueLen(n.into()),
            ]);
            t.extend(cipher);
            Mechanism::AesKeyGen
        }
        "generic" | "generic-secret" | "hmac" => {
            let n = bytes(256, &|b| (8..=4096).contains(&b))?;
            t.extend([
                Attribute::KeyType(KeyType::GENERIC_SECRET),
                Attribute::ValueLen(n.into()),
                Attribute::Sign(true),
                Attribute::Verify(true),
                Attribute::Derive(true),
            ]);
            Mechanism::GenericSecretKeyGen
        }
        "des3" | "3des" => {
            if bits.is_some_and(|b| b != 192 && b != 168) {
                return Err(Error::Usage("DES3 keys have a fixed size".into()));
            }
            t.push(Attribute::KeyType(KeyType::DES3));
            t.extend(cipher);
            Mechanism::Des3KeyGen
        }
        "chacha20" => {
            if bits.is_some_and(|b| b != 256) {
                return Err(Error::Usage("ChaCha20 keys are 256 bits".into()));
            }
            t.push(Attribute::VendorDefined((
                AttributeType::VendorDefined(CKA_KEY_TYPE),
                CKK_CHACHA20.to_ne_bytes().to_vec(),
            )));
            t.extend([Attribute::Encrypt(true), Attribute::Decrypt(true)]);
            fill_usage(&mut t, SECRET_USAGE);
            return Ok(SecretKeyPlan {
                alg: alg.to_string(),
                mech: None,
                template: t,
            });
        }
        other => {
            return Err(Error::Usage(format!(
                "unknown secret key type '{other}' (aes, generic, des3, chacha20)"
            )))
        }
    };
    fill_usage(&mut t, SECRET_USAGE);
    Ok(SecretKeyPlan {
        alg: alg.to_string(),
        mech: Some(mech),
        template: t,
    })
}

const PUBLIC_USAGE: &[AttributeType] = &[
    AttributeType::Encrypt,
    AttributeType::Verify,
    AttributeType::Wrap,
    AttributeType::Derive,
];
const PRIVATE_USAGE: &[AttributeType] = &[
    AttributeType::Decrypt,
    AttributeType::Sign,
    AttributeType::Unwrap,
    AttributeType::Derive,
];
const SECRET_USAGE: &[AttributeType] = &[
    AttributeType::Encrypt,
    AttributeType::Decrypt,
    AttributeType::Sign,
    AttributeType::Verify,
    AttributeType::Wrap,
    AttributeType::Unwrap,
    AttributeType::Derive,
];

/// Sets the usage flags a template does not set to false, so that a key can do what its
/// type is for and nothing else, whatever the token's defaults.
fn fill_usage(t: &mut Vec<Attribute>, usage: &[AttributeType]) {
    for u in usage {
        if !t.iter().any(|a| a.attribute_type() == *u) {
            t.push(match u {
                AttributeType::Encrypt => Attribute::Encrypt(false),
                AttributeType::Decrypt => Attribute::Decrypt(false),
                AttributeType::Sign => Attribute::Sign(false),
                AttributeType::Verify => Attribute::Verify(false),
                AttributeType::Wrap => Attribute::Wrap(false),
                AttributeType::Unwrap => Attribute::Unwrap(false),
                _ => Attribute::Derive(false),
            });
        }
    }
}

/// DER OID of a named curve, for CKA_EC_PARAMS.
pub fn curve_oid(name: &str) -> Result<(Vec<u8>, KeyType)> {
    let oid: &[u8] = match name.to_ascii_lowercase().replace('_', "-").as_str() {
        "p-256" | "p256" | "prime256v1" | "secp256r1" => {
            &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07]
        }
        "p-384" | "p384" | "secp384r1" => &[0x2b, 0x81, 0x04, 0x00, 0x22],
        "p-521" | "p521" | "secp521r1" => &[0x2b, 0x81, 0x04, 0x00, 0x23],
        "ed25519" => return Ok((der_tlv(6, &[0x2b, 0x65, 0x70]), KeyType::EC_EDWARDS)),
        "ed448" => return Ok((der_tlv(6, &[0x2b, 0x65, 0x71]), KeyType::EC_EDWARDS)),
        "x25519" => return Ok((der_tlv(6, &[0x2b, 0x65, 0x6e]), KeyType::EC_MONTGOMERY)),
        "x448" => return Ok((der_tlv(6, &[0x2b, 0x65, 0x6f]), KeyType::EC_MONTGOMERY)),
        other => {
            return Err(Error::Usage(format!(
                "unknown curve '{other}' (P-256, P-384, P-521, Ed25519, Ed448, X25519, X448)"
            )))
        }
    };
    Ok((der_tlv(6, oid), KeyType::EC))
}

/// genkeypair: makes the key pair of `plan` ([`key_pair_plan`]); returns (public, private).
pub fn genkeypair(s: &Session, plan: KeyPairPlan) -> Result<(ObjectHandle, ObjectHandle)> {
    let (pubh, privh) = s
        .generate_key_pair(&plan.mech, &plan.public, &plan.private)
        .ctx(|| format!("generating a {} key pair", plan.alg))?;
    if plan.default_id {
        let id = public_value_id(s, pubh)?;
        for h in [pubh, privh] {
            s.update_attributes(h, &[Attribute::Id(id.clone())])
                .ctx(|| "setting CKA_ID on the new key pair".into())?;
        }
    }
    Ok((pubh, privh))
}

/// The key pair `genkeypair` makes: its type, size or curve and templates, all checked here
/// (usage errors before any login).
pub fn key_pair_plan(
    alg: &str,
    bits: Option<u64>,
    curve: Option<&str>,
    o: &KeyOpts,
) -> Result<KeyPairPlan> {
    let mut pubt = o.common(ObjectClass::PUBLIC_KEY, false);
    let mut privt = o.common(ObjectClass::PRIVATE_KEY, true);
    privt.extend(o.secret_flags());
    let alg_l = alg.to_ascii_lowercase();
    let ec_like = |name: &str, pubt: &mut Vec<Attribute>, privt: &mut Vec<Attribute>| {
        let (params, kt) = curve_oid(name)?;
        pubt.extend([Attribute::KeyType(kt), Attribute::EcParams(params)]);
        // CKA_EC_PARAMS goes in the public template only: the private key takes it from
        // there, and some modules (SoftHSMv2) refuse it in the private template.
        privt.push(Attribute::KeyType(kt));
        let mech = if kt == KeyType::EC_MONTGOMERY {
            pubt.push(Attribute::Derive(true));
            privt.push(Attribute::Derive(true));
            Mechanism::EccMontgomeryKeyPairGen
        } else {
            pubt.push(Attribute::Verify(true));
            privt.push(Attribute::Sign(true));
            if kt == KeyType::EC {
                privt.push(Attribute::Derive(true));
                Mechanism::EccKeyPairGen
            } else {
                Mechanism::EccEdwardsKeyPairGen
            }
        };
        Ok::<_, Error>(mech)
    };
    let ml = |kt: KeyType, set: ParameterSetType| {
        (
            vec![Attribute::KeyType(kt), Attribute::ParameterSet(set)],
            vec![Attribute::KeyType(kt)],
        )
    };
    let mech = match alg_l.as_str() {
        "rsa" => {
            let b = bits.unwrap_or(2048);
            if !(1024..=8192).contains(&b) {
                return Err(Error::Usage(format!(
                    "RSA --size {b} is outside 1024..8192"
                )));
            }
            pubt.extend([
                Attribute::KeyType(KeyType::RSA),
                Attribute::ModulusBits(b.into()),
                Attribute::PublicExponent(vec![1, 0, 1]),
                Attribute::Verify(true),
                Attribute::Encrypt(true),
                Attribute::Wrap(true),
            ]);
            privt.extend([
                Attribute::KeyType(KeyType::RSA),
                Attribute::Sign(true),
                Attribute::Decrypt(true),
                Attribute::Unwrap(true),
            ]);
            Mechanism::RsaPkcsKeyPairGen
        }
        "ec" | "ecdsa" => ec_like(curve.unwrap_or("P-256"), &mut pubt, &mut privt)?,
        "ed25519" | "ed448" | "x25519" | "x448" => ec_like(&alg_l, &mut pubt, &mut privt)?,
        "p-256" | "p-384" | "p-521" | "p256" | "p384" | "p521" => {
            ec_like(&alg_l, &mut pubt, &mut privt)?
        }
        "ml-dsa-44" | "ml-dsa-65" | "ml-dsa-87" => {
            let set = match &alg_l[7..] {
                "44" => MlDsaParameterSetType::ML_DSA_44,
                "65" => MlDsaParameterSetType::ML_DSA_65,
                _ => MlDsaParameterSetType::ML_DSA_87,
            };
            let (p, q) = ml(KeyType::ML_DSA, set.into());
            pubt.extend(p);
            pubt.push(Attribute::Verify(true));
            privt.extend(q);
            privt.push(Attribute::Sign(true));
            Mechanism::MlDsaKeyPairGen
        }
        "ml-kem-512" | "ml-kem-768" | "ml-kem-1024" => {
            let set = match &alg_l[7..] {
                "512" => MlKemParameterSetType::ML_KEM_512,
                "768" => MlKemParameterSetType::ML_KEM_768,
                _ => MlKemParameterSetType::ML_KEM_1024,
            };
            let (p, q) = ml(KeyType::ML_KEM, set.into());
            pubt.extend(p);
            pubt.push(Attribute::Encapsulate(true));
            privt.extend(q);
            privt.push(Attribute::Decapsulate(true));
            Mechanism::MlKemKeyPairGen
        }
        other => {
            return Err(Error::Usage(format!(
                "unknown key pair type '{other}' (rsa, ec, ed25519, ed448, x25519, x448, \
                 ml-dsa-44/65/87, ml-kem-512/768/1024)"
            )))
        }
    };
    fill_usage(&mut pubt, PUBLIC_USAGE);
    fill_usage(&mut privt, PRIVATE_USAGE);
    Ok(KeyPairPlan {
        alg: alg.to_string(),
        mech,
        public: pubt,
        private: privt,
        default_id: o.id.is_none(),
    })
}

/// The default CKA_ID of a key pair: SHA-1 of the public value (modulus, EC point or
/// CKA_VALUE), as OpenSC does for the modulus.
pub fn public_value_id(s: &Session, pubh: ObjectHandle) -> Result<Vec<u8>> {
    let a = objects::read(
        s,
        pubh,
        &[
            AttributeType::Modulus,
            AttributeType::EcPoint,
            AttributeType::Value,
        ],
    )?;
    let v = bytes_attr(&a, AttributeType::Modulus)
        .or_else(|| bytes_attr(&a, AttributeType::EcPoint).map(|p| unwrap_octet_string(&p)))
        .or_else(|| bytes_attr(&a, AttributeType::Value))
        .ok_or_else(|| Error::TokenState("the public key has no public value".into()))?;
    Ok(openssl::sha::sha1(&v).to_vec())
}

/// The same ID computed from an OpenSSL key (for imports).
pub fn pkey_id(pkey: &PKey<Public>) -> Result<Vec<u8>> {
    let v = match pkey.id() {
        Id::RSA => pkey.rsa()?.n().to_vec(),
        Id::EC => {
            let ec = pkey.ec_key()?;
            let mut ctx = BigNumContext::new()?;
            ec.public_key()
                .to_bytes(ec.group(), PointConversionForm::UNCOMPRESSED, &mut ctx)?
        }
        _ => pkey.raw_public_key()?,
    };
    Ok(openssl::sha::sha1(&v).to_vec())
}

fn ec_group(params: &[u8]) -> Result<EcGroup> {
    let nid = match crate::objects::curve_name(params).as_str() {
        "P-256" => Nid::X9_62_PRIME256V1,
        "P-384" => Nid::SECP384R1,
        "P-521" => Nid::SECP521R1,
        other => return Err(Error::TokenState(format!("unsupported EC curve {other}"))),
    };
    Ok(EcGroup::from_curve_name(nid)?)
}

fn raw_id(params: &[u8]) -> Result<Id> {
    Ok(match crate::objects::curve_name(params).as_str() {
        "Ed25519" => Id::ED25519,
        "Ed448" => Id::ED448,
        "X25519" => Id::X25519,
        "X448" => Id::X448,
        other => return Err(Error::TokenState(format!("unsupported curve {other}"))),
    })
}

/// The OpenSSL form of a token public key (or of a private key's CKA_PUBLIC_KEY_INFO).
pub fn public_pkey(s: &Session, h: ObjectHandle) -> Result<PKey<Public>> {
    let a = objects::read(
        s,
        h,
        &[
            AttributeType::PublicKeyInfo,
            AttributeType::Modulus,
            AttributeType::PublicExponent,
            AttributeType::EcParams,
            AttributeType::EcPoint,
        ],
    )?;
    if let Some(spki) = bytes_attr(&a, AttributeType::PublicKeyInfo).filter(|v| !v.is_empty()) {
        if let Ok(k) = PKey::public_key_from_der(&spki) {
            return Ok(k);
        }
    }
    let kt = objects::key_type_raw(s, h);
    match kt.map(KeyType::try_from) {
        Some(Ok(KeyType::RSA)) => {
            let n = bytes_attr(&a, AttributeType::Modulus);
            let e = bytes_attr(&a, AttributeType::PublicExponent);
            if let (Some(n), Some(e)) = (n, e) {
                let rsa =
                    Rsa::from_public_components(BigNum::from_slice(&n)?, BigNum::from_slice(&e)?)?;
                return Ok(PKey::from_rsa(rsa)?);
            }
        }
        Some(Ok(KeyType::EC)) => {
            let p = bytes_attr(&a, AttributeType::EcParams);
            let q = bytes_attr(&a, AttributeType::EcPoint);
            if let (Some(p), Some(q)) = (p, q) {
                let group = ec_group(&p)?;
                let mut ctx = BigNumContext::new()?;
                let point = EcPoint::from_bytes(&group, &unwrap_octet_string(&q), &mut ctx)?;
                return Ok(PKey::from_ec_key(EcKey::from_public_key(&group, &point)?)?);
            }
        }
        Some(Ok(KeyType::EC_EDWARDS)) | Some(Ok(KeyType::EC_MONTGOMERY)) => {
            let p = bytes_attr(&a, AttributeType::EcParams);
            let q = bytes_attr(&a, AttributeType::EcPoint);
            if let (Some(p), Some(q)) = (p, q) {
                return Ok(PKey::public_key_from_raw_bytes(
                    &unwrap_octet_string(&q),
                    raw_id(&p)?,
                )?);
            }
        }
        _ => {}
    }
    Err(Error::TokenState(format!(
        "cannot build the public key of this {} object",
        kt.map(objects::key_type_name)
            .unwrap_or_else(|| "unknown".into())
    )))
}

/// The public key object of a key pair: the public key with the private key's CKA_ID, else
/// the private key itself when it carries CKA_PUBLIC_KEY_INFO.
pub fn public_of(s: &Session, privh: ObjectHandle) -> Result<PKey<Public>> {
    let a = objects::read(s, privh, &[AttributeType::Id])?;
    let id = bytes_attr(&a, AttributeType::Id).unwrap_or_default();
    if !id.is_empty() {
        let found = s
            .find_objects(&[Attribute::Class(ObjectClass::PUBLIC_KEY), Attribute::Id(id)])
            .ctx(|| "searching for the public key".into())?;
        if let Some(h) = found.first() {
            return public_pkey(s, *h);
        }
    }
    public_pkey(s, privh)
}

/// Key material attributes (secret values of private and secret keys).
pub const KEY_MATERIAL: &[AttributeType] = &[
    AttributeType::Modulus,
    AttributeType::PublicExponent,
    AttributeType::PrivateExponent,
    AttributeType::Prime1,
    AttributeType::Prime2,
    AttributeType::Exponent1,
    AttributeType::Exponent2,
    AttributeType::Coefficient,
    AttributeType::EcParams,
    AttributeType::ParameterSet,
    AttributeType::Value,
];

/// Reads a private key's secret values into an OpenSSL key (export, migrate).
pub fn private_pkey(s: &Session, h: ObjectHandle) -> Result<PKey<Private>> {
    use AttributeType as T;
    let a = objects::read(s, h, KEY_MATERIAL)?;
    let get = |t: T| {
        a.iter().find_map(|x| match (x, t) {
            (Attribute::PrivateExponent(v), T::PrivateExponent)
            | (Attribute::Prime1(v), T::Prime1)
            | (Attribute::Prime2(v), T::Prime2)
            | (Attribute::Exponent1(v), T::Exponent1)
            | (Attribute::Exponent2(v), T::Exponent2)
            | (Attribute::Coefficient(v), T::Coefficient) => Some(v.clone()),
            _ => bytes_attr(std::slice::from_ref(x), t),
        })
    };
    let missing = || Error::TokenState("the token did not reveal the private key's values".into());
    let bn = |t: T| -> Result<BigNum> { Ok(BigNum::from_slice(&get(t).ok_or_else(missing)?)?) };
    let kt = objects::key_type_raw(s, h).map(KeyType::try_from);
    match kt {
        Some(Ok(KeyType::RSA)) => {
            let rsa = Rsa::from_private_components(
                bn(T::Modulus)?,
                bn(T::PublicExponent)?,
                bn(T::PrivateExponent)?,
                bn(T::Prime1)?,
                bn(T::Prime2)?,
                bn(T::Exponent1)?,
                bn(T::Exponent2)?,
                bn(T::Coefficient)?,
            )?;
            Ok(PKey::from_rsa(rsa)?)
        }
        Some(Ok(KeyType::EC)) => {
            let group = ec_group(&get(T::EcParams).ok_or_else(missing)?)?;
            let d = bn(T::Value)?;
            let mut ctx = BigNumContext::new()?;
            let mut q = EcPoint::new(&group)?;
            q.mul_generator2(&group, &d, &mut ctx)?;
            Ok(PKey::from_ec_key(EcKey::from_private_components(
                &group, &d, &q,
            )?)?)
        }
        Some(Ok(KeyType::EC_EDWARDS)) | Some(Ok(KeyType::EC_MONTGOMERY)) => {
            let id = raw_id(&get(T::EcParams).ok_or_else(missing)?)?;
            Ok(PKey::private_key_from_raw_bytes(
                &get(T::Value).ok_or_else(missing)?,
                id,
            )?)
        }
        _ => Err(Error::TokenState(
            "only RSA, EC, Ed25519/Ed448 and X25519/X448 private keys can be exported".into(),
        )),
    }
}

fn ec_params_of(group: &openssl::ec::EcGroupRef) -> Result<Vec<u8>> {
    let name = match group.curve_name() {
        Some(Nid::X9_62_PRIME256V1) => "P-256",
        Some(Nid::SECP384R1) => "P-384",
        Some(Nid::SECP521R1) => "P-521",
        _ => {
            return Err(Error::File(
                "EC keys on curves other than P-256/384/521 are not supported".into(),
            ))
        }
    };
    Ok(curve_oid(name)?.0)
}

fn raw_params(id: Id) -> Result<(Vec<u8>, KeyType)> {
    curve_oid(match id {
        Id::ED25519 => "ed25519",
        Id::ED448 => "ed448",
        Id::X25519 => "x25519",
        Id::X448 => "x448",
        _ => return Err(Error::File("unsupported key algorithm".into())),
    })
}

/// Token attributes holding an OpenSSL public key (key material, type and usage).
pub fn public_attrs(pkey: &PKey<Public>) -> Result<Vec<Attribute>> {
    Ok(match pkey.id() {
        Id::RSA => {
            let r = pkey.rsa()?;
            vec![
                Attribute::KeyType(KeyType::RSA),
                Attribute::Modulus(r.n().to_vec()),
                Attribute::PublicExponent(r.e().to_vec()),
                Attribute::Verify(true),
                Attribute::Encrypt(true),
                Attribute::Wrap(true),
            ]
        }
        Id::EC => {
            let ec = pkey.ec_key()?;
            let mut ctx = BigNumContext::new()?;
            let q = ec.public_key().to_bytes(
                ec.group(),
                PointConversionForm::UNCOMPRESSED,
                &mut ctx,
            )?;
            vec![
                Attribute::KeyType(KeyType::EC),
                Attribute::EcParams(ec_params_of(ec.group())?),
                Attribute::EcPoint(der_tlv(4, &q)),
                Attribute::Verify(true),
            ]
        }
        id => {
            let (params, kt) = raw_params(id)?;
            let usage = if kt == KeyType::EC_MONTGOMERY {
                Attribute::Derive(true)
            } else {
                Attribute::Verify(true)
            };
            vec![
                Attribute::KeyType(kt),
                Attribute::EcParams(params),
                Attribute::EcPoint(der_tlv(4, &pkey.raw_public_key()?)),
                usage,
            ]
        }
    })
}

/// Token attributes holding an OpenSSL private key (key material, type and usage).
pub fn private_attrs(pkey: &PKey<Private>) -> Result<Vec<Attribute>> {
    Ok(match pkey.id() {
        Id::RSA => {
            let r = pkey.rsa()?;
            let opt = |b: Option<&openssl::bn::BigNumRef>| -> Result<Vec<u8>> {
                b.map(|b| b.to_vec())
                    .ok_or_else(|| Error::File("the RSA key lacks its CRT values".into()))
            };
            vec![
                Attribute::KeyType(KeyType::RSA),
                Attribute::Modulus(r.n().to_vec()),
                Attribute::PublicExponent(r.e().to_vec()),
                Attribute::PrivateExponent(r.d().to_vec()),
                Attribute::Prime1(opt(r.p())?),
                Attribute::Prime2(opt(r.q())?),
                Attribute::Exponent1(opt(r.dmp1())?),
                Attribute::Exponent2(opt(r.dmq1())?),
                Attribute::Coefficient(opt(r.iqmp())?),
                Attribute::Sign(true),
                Attribute::Decrypt(true),
                Attribute::Unwrap(true),
            ]
        }
        Id::EC => {
            let ec = pkey.ec_key()?;
            let len = (ec.group().degree() as usize).div_ceil(8);
            vec![
                Attribute::KeyType(KeyType::EC),
                Attribute::EcParams(ec_params_of(ec.group())?),
                Attribute::Value(ec.private_key().to_vec_padded(len as i32)?),
                Attribute::Sign(true),
                Attribute::Derive(true),
            ]
        }
        id => {
            let (params, kt) = raw_params(id)?;
            let usage = if kt == KeyType::EC_MONTGOMERY {
                Attribute::Derive(true)
            } else {
                Attribute::Sign(true)
            };
            vec![
                Attribute::KeyType(kt),
                Attribute::EcParams(params),
                Attribute::Value(pkey.raw_private_key()?),
                usage,
            ]
        }
    })
}

/// The public half of an OpenSSL private key.
pub fn public_half(pkey: &PKey<Private>) -> Result<PKey<Public>> {
    Ok(PKey::public_key_from_der(&pkey.public_key_to_der()?)?)
}

/// The templates of a private key and its public key from an OpenSSL key: (private, public).
/// Without `o.id` the ID is the SHA-1 of the public value.
pub fn keypair_templates(
    pkey: &PKey<Private>,
    o: &KeyOpts,
) -> Result<(Vec<Attribute>, Vec<Attribute>)> {
    let public = public_half(pkey)?;
    let mut o = o.clone();
    if o.id.is_none() {
        o.id = Some(pkey_id(&public)?);
    }
    let mut privt = o.common(ObjectClass::PRIVATE_KEY, true);
    privt.extend(o.secret_flags());
    privt.extend(private_attrs(pkey)?);
    fill_usage(&mut privt, PRIVATE_USAGE);
    let mut pubt = o.common(ObjectClass::PUBLIC_KEY, false);
    pubt.extend(public_attrs(&public)?);
    fill_usage(&mut pubt, PUBLIC_USAGE);
    Ok((privt, pubt))
}

/// The template of a public key alone; without `o.id` the ID is the SHA-1 of the public value.
pub fn public_template(pkey: &PKey<Public>, o: &KeyOpts) -> Result<Vec<Attribute>> {
    let mut o = o.clone();
    if o.id.is_none() {
        o.id = Some(pkey_id(pkey)?);
    }
    let mut t = o.common(ObjectClass::PUBLIC_KEY, false);
    t.extend(public_attrs(pkey)?);
    fill_usage(&mut t, PUBLIC_USAGE);
    Ok(t)
}
