//! PKCS#10 requests and X.509 certificates signed by a token key.
//!
//! OpenSSL builds the structure (names, extensions, validity) and signs it with a throw-away
//! key of the same algorithm, so that the AlgorithmIdentifier inside the to-be-signed part is
//! right; the throw-away signature is then replaced by the token's signature over the
//! to-be-signed bytes, and the result is checked with the public key.

use crate::error::{Ctx, Error, Result};
use crate::objects;
use crate::util::{der_next, der_tlv, shorten};
use cryptoki::mechanism::eddsa::{EddsaParams, EddsaSignatureScheme};
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, CertificateType, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::Session;
use openssl::asn1::Asn1Time;
use openssl::bn::{BigNum, MsbOption};
use openssl::ecdsa::EcdsaSig;
use openssl::hash::MessageDigest;
use openssl::pkey::{Id, PKey, PKeyRef, Private, Public};
use openssl::stack::Stack;
use openssl::x509::extension::{
    AuthorityKeyIdentifier, BasicConstraints, KeyUsage, SubjectAlternativeName,
    SubjectKeyIdentifier,
};
use openssl::x509::{X509Extension, X509Name, X509NameRef, X509Req, X509ReqBuilder, X509};

/// "CN=a, O=b" (commas inside a value escaped as "\,"); an empty subject is refused.
pub fn parse_subject(subject: &str) -> Result<X509Name> {
    let mut b = X509Name::builder()?;
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut esc = false;
    for c in subject.chars() {
        match (esc, c) {
            (false, '\\') => esc = true,
            (false, ',') => parts.push(std::mem::take(&mut cur)),
            _ => {
                cur.push(c);
                esc = false;
            }
        }
    }
    parts.push(cur);
    let parts: Vec<&str> = parts
        .iter()
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
        .collect();
    if parts.is_empty() {
        // RFC 5280 4.1.2.4: a certificate's issuer (a self-signed one's subject) is non-empty.
        return Err(Error::Usage(
            "the subject is empty; give at least one part, e.g. CN=name".into(),
        ));
    }
    for p in parts {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| Error::Usage(format!("subject part '{p}' has no '=' (CN=…,O=…)")))?;
        let (k, v) = (k.trim(), v.trim());
        b.append_entry_by_text(k, v).map_err(|e| {
            let why = if openssl::asn1::Asn1Object::from_str(k).is_err() {
                format!(
                    "unknown attribute name '{k}' (CN, O, OU, C, ST, L, emailAddress, … or an OID)"
                )
            } else {
                // OpenSSL's reason: "string too short", "string too long" (CN holds at most
                // 64 characters, C two), "invalid characters" …
                let reason = e.errors().first().and_then(|r| r.reason()).unwrap_or("");
                format!(
                    "bad value for {k} ({} characters){}",
                    v.chars().count(),
                    match reason {
                        "" => String::new(),
                        r => format!(": {r}"),
                    }
                )
            };
            Error::Usage(format!("subject part '{}': {why}", shorten(p)))
        })?;
    }
    Ok(b.build())
}

/// "CN=a, O=b" for output.
pub fn name_string(n: &X509NameRef) -> String {
    n.entries()
        .map(|e| {
            let key = e.object().nid().short_name().unwrap_or("?").to_string();
            let val = e.data().to_string().unwrap_or_default();
            format!("{key}={val}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The usage errors of a subject and SAN list, found before the token is asked for anything
/// (a wrong PIN would otherwise be reported first, and cost a try).
pub fn check_names(subject: &str, san: Option<&str>) -> Result<()> {
    parse_subject(subject)?;
    if let Some(san) = san {
        let b = openssl::x509::X509Builder::new()?;
        san_extension(san, &b.x509v3_context(None, None))?;
    }
    Ok(())
}

/// "DNS:x,IP:y,email:z,URI:u" as an extension.
fn san_extension(
    sans: &str,
    ctx: &openssl::x509::X509v3Context<'_>,
) -> Result<Option<X509Extension>> {
    let mut b = SubjectAlternativeName::new();
    let mut any = false;
    for item in sans.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (k, v) = item.split_once(':').ok_or_else(|| {
            Error::Usage(format!(
                "SAN '{item}' needs a kind: DNS:, IP:, email:, URI:"
            ))
        })?;
        if v.trim().is_empty() {
            return Err(Error::Usage(format!(
                "SAN '{item}' has no name after its kind"
            )));
        }
        match k.to_ascii_lowercase().as_str() {
            "dns" => b.dns(v),
            "ip" => {
                v.parse::<std::net::IpAddr>()
                    .map_err(|_| Error::Usage(format!("SAN '{item}': not an IP address")))?;
                b.ip(v)
            }
            "email" => b.email(v),
            "uri" => b.uri(v),
            _ => {
                return Err(Error::Usage(format!(
                    "SAN kind '{k}' is not DNS, IP, email or URI"
                )))
            }
        };
        any = true;
    }
    if !any {
        return Ok(None);
    }
    Ok(Some(
        b.build(ctx)
            .map_err(|e| Error::Usage(format!("SAN '{sans}': {e}")))?,
    ))
}

/// How the token signs for a given key type.
#[derive(Clone, Copy, Debug)]
enum SigAlg {
    RsaSha256,
    EcdsaSha256,
    EdDsa,
}

fn sig_alg(s: &Session, key: ObjectHandle) -> Result<SigAlg> {
    let kt = objects::key_type_raw(s, key).map(KeyType::try_from);
    match kt {
        Some(Ok(KeyType::RSA)) => Ok(SigAlg::RsaSha256),
        Some(Ok(KeyType::EC)) => Ok(SigAlg::EcdsaSha256),
        Some(Ok(KeyType::EC_EDWARDS)) => Ok(SigAlg::EdDsa),
        _ => Err(Error::Usage(
            "certificates and requests can be signed by RSA, EC and EdDSA keys only".into(),
        )),
    }
}

/// A throw-away key whose signature algorithm matches the token key's.
fn stand_in(alg: SigAlg, public: &PKeyRef<Public>) -> Result<(PKey<Private>, MessageDigest)> {
    Ok(match alg {
        SigAlg::RsaSha256 => (
            PKey::from_rsa(openssl::rsa::Rsa::generate(1024)?)?,
            MessageDigest::sha256(),
        ),
        SigAlg::EcdsaSha256 => {
            let g = openssl::ec::EcGroup::from_curve_name(openssl::nid::Nid::X9_62_PRIME256V1)?;
            (
                PKey::from_ec_key(openssl::ec::EcKey::generate(&g)?)?,
                MessageDigest::sha256(),
            )
        }
        SigAlg::EdDsa if public.id() == Id::ED448 => {
            (PKey::generate_ed448()?, MessageDigest::null())
        }
        SigAlg::EdDsa => (PKey::generate_ed25519()?, MessageDigest::null()),
    })
}

/// Replaces the signature of a DER SEQUENCE { tbs, algorithm, BIT STRING } with the token's.
fn token_sign(
    s: &Session,
    key: ObjectHandle,
    alg: SigAlg,
    der: &[u8],
    what: &str,
) -> Result<Vec<u8>> {
    let (_, outer, _) = der_next(der)?;
    let (tbs, _, rest) = der_next(outer)?;
    let (algid, _, _) = der_next(rest)?;
    let sig = match alg {
        SigAlg::RsaSha256 => s.sign(&Mechanism::Sha256RsaPkcs, key, tbs),
        SigAlg::EcdsaSha256 => s.sign(&Mechanism::Ecdsa, key, &openssl::sha::sha256(tbs)),
        SigAlg::EdDsa => s.sign(
            &Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Pure)),
            key,
            tbs,
        ),
    }
    .ctx(|| format!("signing the {what} with the token key"))?;
    let sig = match alg {
        SigAlg::EcdsaSha256 => {
            let half = sig.len() / 2;
            let r = BigNum::from_slice(&sig[..half])?;
            let s = BigNum::from_slice(&sig[half..])?;
            EcdsaSig::from_private_components(r, s)?.to_der()?
        }
        _ => sig,
    };
    let mut bits = vec![0u8];
    bits.extend(sig);
    let mut body = tbs.to_vec();
    body.extend_from_slice(algid);
    body.extend(der_tlv(0x03, &bits));
    Ok(der_tlv(0x30, &body))
}

fn random_serial() -> Result<openssl::asn1::Asn1Integer> {
    let mut bn = BigNum::new()?;
    bn.rand(127, MsbOption::MAYBE_ZERO, false)?;
    Ok(bn.to_asn1_integer()?)
}

/// `--days` and `--serial` of a certificate, checked before the login: a serial that is not
/// hex, or a validity that ends past what a certificate's time can say, is a usage error.
pub fn check_validity(days: u32, serial: Option<&str>) -> Result<()> {
    if serial.is_some() {
        serial_from(serial)?;
    }
    Asn1Time::days_from_now(days).map(|_| ()).map_err(|_| {
        Error::Usage(format!(
            "--days {days}: the certificate would end too far ahead"
        ))
    })
}

fn serial_from(hex: Option<&str>) -> Result<openssl::asn1::Asn1Integer> {
    match hex {
        Some(h) => Ok(BigNum::from_hex_str(h)
            .map_err(|_| Error::Usage(format!("--serial '{h}' is not hex")))?
            .to_asn1_integer()?),
        None => random_serial(),
    }
}

pub struct CsrOpts<'a> {
    pub subject: &'a str,
    pub san: Option<&'a str>,
}

pub fn gencsr(s: &Session, key: ObjectHandle, o: &CsrOpts) -> Result<X509Req> {
    let alg = sig_alg(s, key)?;
    let public = crate::keys::public_of(s, key)?;
    let mut b = X509ReqBuilder::new()?;
    b.set_version(0)?;
    let subject = parse_subject(o.subject)?;
    b.set_subject_name(&subject)?;
    b.set_pubkey(&public)?;
    if let Some(san) = o.san {
        let ctx = b.x509v3_context(None);
        if let Some(ext) = san_extension(san, &ctx)? {
            let mut st = Stack::new()?;
            st.push(ext)?;
            b.add_extensions(&st)?;
        }
    }
    let (dummy, md) = stand_in(alg, &public)?;
    b.sign(&dummy, md)?;
    let der = token_sign(s, key, alg, &b.build().to_der()?, "request")?;
    let req = X509Req::from_der(&der)?;
    if !req.verify(&public)? {
        return Err(Error::TokenState(
            "the token's signature does not verify with the public key (wrong key pair?)".into(),
        ));
    }
    Ok(req)
}

pub struct CertOpts<'a> {
    pub subject: &'a str,
    pub san: Option<&'a str>,
    pub days: u32,
    pub serial: Option<&'a str>,
    pub ca: bool,
}

fn validity(b: &mut openssl::x509::X509Builder, days: u32) -> Result<()> {
    let from = Asn1Time::days_from_now(0)?;
    let to = Asn1Time::days_from_now(days)?;
    b.set_not_before(&from)?;
    b.set_not_after(&to)?;
    Ok(())
}

fn finish(
    s: &Session,
    key: ObjectHandle,
    alg: SigAlg,
    mut b: openssl::x509::X509Builder,
    signer: &PKeyRef<Public>,
) -> Result<X509> {
    let (dummy, md) = stand_in(alg, signer)?;
    b.sign(&dummy, md)?;
    let der = token_sign(s, key, alg, &b.build().to_der()?, "certificate")?;
    let cert = X509::from_der(&der)?;
    if !cert.verify(signer)? {
        return Err(Error::TokenState(
            "the token's signature does not verify with the public key (wrong key pair?)".into(),
        ));
    }
    Ok(cert)
}

pub fn gencert(s: &Session, key: ObjectHandle, o: &CertOpts) -> Result<X509> {
    let alg = sig_alg(s, key)?;
    let public = crate::keys::public_of(s, key)?;
    let name = parse_subject(o.subject)?;
    let mut b = X509::builder()?;
    b.set_version(2)?;
    let serial = serial_from(o.serial)?;
    b.set_serial_number(&serial)?;
    b.set_subject_name(&name)?;
    b.set_issuer_name(&name)?;
    b.set_pubkey(&public)?;
    validity(&mut b, o.days)?;
    let mut bc = BasicConstraints::new();
    let mut ku = KeyUsage::new();
    ku.critical().digital_signature();
    if o.ca {
        bc.critical().ca();
        ku.key_cert_sign().crl_sign();
    } else if alg_is_rsa(alg) {
        ku.key_encipherment();
    }
    b.append_extension(bc.build()?)?;
    b.append_extension(ku.build()?)?;
    let ski = SubjectKeyIdentifier::new().build(&b.x509v3_context(None, None))?;
    b.append_extension(ski)?;
    if let Some(san) = o.san {
        if let Some(ext) = san_extension(san, &b.x509v3_context(None, None))? {
            b.append_extension(ext)?;
        }
    }
    finish(s, key, alg, b, &public)
}

fn alg_is_rsa(alg: SigAlg) -> bool {
    matches!(alg, SigAlg::RsaSha256)
}

pub struct SignOpts<'a> {
    pub days: u32,
    pub serial: Option<&'a str>,
    pub ca: bool,
}

/// Issues a certificate for a request that [`check_request`] took; the request's subject
/// alternative names are kept, its other requested extensions are not (pktool sets basic
/// constraints and key usage).
pub fn signcsr(
    s: &Session,
    key: ObjectHandle,
    ca_cert: &X509,
    req: &X509Req,
    o: &SignOpts,
) -> Result<X509> {
    let alg = sig_alg(s, key)?;
    let req_key = req.public_key()?;
    let ca_key = ca_cert.public_key()?;
    // The CA certificate must be the token key's: else the signature would not verify with
    // it, which is the file's fault, not the token's.
    if !crate::keys::public_of(s, key)?.public_eq(&ca_key) {
        return Err(Error::File(
            "the CA certificate's public key is not the one of the token key that signs \
             (--ca-cert names another key's certificate)"
                .into(),
        ));
    }
    let mut b = X509::builder()?;
    b.set_version(2)?;
    let serial = serial_from(o.serial)?;
    b.set_serial_number(&serial)?;
    b.set_subject_name(req.subject_name())?;
    b.set_issuer_name(ca_cert.subject_name())?;
    b.set_pubkey(&req_key)?;
    validity(&mut b, o.days)?;
    let mut bc = BasicConstraints::new();
    bc.critical();
    let mut ku = KeyUsage::new();
    ku.critical().digital_signature();
    if o.ca {
        bc.ca();
        ku.key_cert_sign().crl_sign();
    } else {
        ku.key_encipherment();
    }
    b.append_extension(bc.build()?)?;
    b.append_extension(ku.build()?)?;
    let ski = SubjectKeyIdentifier::new().build(&b.x509v3_context(Some(ca_cert), None))?;
    b.append_extension(ski)?;
    let aki = AuthorityKeyIdentifier::new()
        .keyid(false)
        .build(&b.x509v3_context(Some(ca_cert), None))?;
    b.append_extension(aki)?;
    if let Some(san) = request_sans(req)? {
        b.append_extension(san)?;
    }
    finish(s, key, alg, b, &ca_key)
}

/// A PKCS#10 request `signcsr` takes: its own signature verifies, and it names a subject
/// (RFC 5280 4.1.2.6: an empty subject needs a subjectAltName). Checked before the login.
pub fn check_request(req: &X509Req) -> Result<()> {
    let req_key = req.public_key()?;
    if !req.verify(&req_key)? {
        return Err(Error::File(
            "the request's own signature does not verify".into(),
        ));
    }
    if req.subject_name().entries().next().is_none() && request_sans(req)?.is_none() {
        return Err(Error::File(
            "the request names no subject: its subject is empty and it asks for no \
             subjectAltName (RFC 5280 4.1.2.6)"
                .into(),
        ));
    }
    Ok(())
}

/// The subject alternative names a request asks for, as an extension.
fn request_sans(req: &X509Req) -> Result<Option<X509Extension>> {
    let Ok(exts) = req.extensions() else {
        return Ok(None);
    };
    // OpenSSL exposes names through a certificate: put the requested extensions on a scratch
    // certificate and read them back.
    let mut scratch = X509::builder()?;
    for e in &exts {
        scratch.append_extension2(e)?;
    }
    let scratch = scratch.build();
    let Some(names) = scratch.subject_alt_names() else {
        return Ok(None);
    };
    let mut b = SubjectAlternativeName::new();
    for n in &names {
        if let Some(d) = n.dnsname() {
            b.dns(d);
        } else if let Some(e) = n.email() {
            b.email(e);
        } else if let Some(u) = n.uri() {
            b.uri(u);
        } else if let Some(ip) = n.ipaddress() {
            let text =
                match ip.len() {
                    4 => std::net::IpAddr::from(<[u8; 4]>::try_from(ip).unwrap_or_default())
                        .to_string(),
                    16 => std::net::IpAddr::from(<[u8; 16]>::try_from(ip).unwrap_or_default())
                        .to_string(),
                    _ => continue,
                };
            b.ip(&text);
        }
    }
    let ctx_holder = X509::builder()?;
    Ok(Some(b.build(&ctx_holder.x509v3_context(None, None))?))
}

/// Stores a certificate in the token.
pub fn store_cert(
    s: &Session,
    cert: &X509,
    label: Option<&[u8]>,
    id: &[u8],
) -> Result<ObjectHandle> {
    s.create_object(&cert_template(cert, label, id)?)
        .ctx(|| "storing the certificate".into())
}

/// The template of a certificate object.
pub fn cert_template(cert: &X509, label: Option<&[u8]>, id: &[u8]) -> Result<Vec<Attribute>> {
    let serial = cert.serial_number().to_bn()?.to_vec();
    let mut serial_content = serial.clone();
    if serial.first().is_some_and(|b| b & 0x80 != 0) || serial.is_empty() {
        serial_content.insert(0, 0);
    }
    let mut t = vec![
        Attribute::Class(ObjectClass::CERTIFICATE),
        Attribute::CertificateType(CertificateType::X_509),
        Attribute::Token(true),
        Attribute::Private(false),
        Attribute::Id(id.to_vec()),
        Attribute::Subject(cert.subject_name().to_der()?),
        Attribute::Issuer(cert.issuer_name().to_der()?),
        Attribute::SerialNumber(der_tlv(0x02, &serial_content)),
        Attribute::Value(cert.to_der()?),
    ];
    if let Some(l) = label {
        t.push(Attribute::Label(l.to_vec()));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_subject_is_a_usage_error() {
        for subject in ["", " ", ",", " , "] {
            let e = parse_subject(subject).err().unwrap();
            assert_eq!(e.exit_code(), crate::error::EXIT_USAGE, "{subject:?}");
            assert!(e.to_string().contains("subject is empty"), "{e}");
        }
        let n = parse_subject("CN=a, O=b").unwrap();
        assert_eq!(name_string(&n), "CN=a, O=b");
    }
}
