//! Import of PEM and PKCS#12 keys into the token, for `tlsproxycfg create -f pem|pkcs12`.
//! The private key becomes a token object with CKA_SENSITIVE=TRUE and CKA_EXTRACTABLE=FALSE
//! (so it can never be read back); the certificate is stored beside it under the same label.

use crate::token::{Module, Token, ED25519_PARAMS, P256_PARAMS, P384_PARAMS};
use crate::Result;
use cryptoki::object::{Attribute, CertificateType, KeyType, ObjectClass, ObjectHandle};
use openssl::nid::Nid;
use openssl::pkey::{Id, PKey, Private};
use openssl::x509::X509;
use rustls::SignatureAlgorithm;
use std::path::Path;
use std::sync::Arc;

/// A key and its certificate chain, leaf first.
pub struct KeyAndChain {
    pub key: PKey<Private>,
    pub chain: Vec<X509>,
}

fn read(path: &Path) -> Result<Vec<u8>> {
    crate::files::read(path, crate::files::MAX_DATA_FILE)
}

fn ossl(path: &Path) -> impl Fn(openssl::error::ErrorStack) -> String + '_ {
    move |e| format!("{}: {e}", path.display())
}

/// Reads a PEM file holding the private key (optionally encrypted with `pass`) and the
/// certificate chain, leaf first.
pub fn load_pem(path: &Path, pass: Option<&str>) -> Result<KeyAndChain> {
    let data = read(path)?;
    let key = match pass {
        Some(p) => PKey::private_key_from_pem_passphrase(&data, p.as_bytes()),
        None => PKey::private_key_from_pem(&data),
    }
    .map_err(ossl(path))?;
    let chain = X509::stack_from_pem(&data).map_err(ossl(path))?;
    finish(path, key, chain)
}

/// Reads a PKCS#12 file (key, certificate and CA certificates).
pub fn load_pkcs12(path: &Path, pass: Option<&str>) -> Result<KeyAndChain> {
    let data = read(path)?;
    let p12 = openssl::pkcs12::Pkcs12::from_der(&data).map_err(ossl(path))?;
    let parsed = p12.parse2(pass.unwrap_or("")).map_err(ossl(path))?;
    let key = parsed
        .pkey
        .ok_or_else(|| format!("{}: no private key", path.display()))?;
    let mut chain: Vec<X509> = parsed.cert.into_iter().collect();
    if let Some(ca) = parsed.ca {
        chain.extend(ca);
    }
    finish(path, key, chain)
}

fn finish(path: &Path, key: PKey<Private>, chain: Vec<X509>) -> Result<KeyAndChain> {
    let leaf = chain
        .first()
        .ok_or_else(|| format!("{}: no certificate", path.display()))?;
    let public = leaf.public_key().map_err(ossl(path))?;
    if !public.public_eq(&key) {
        return Err(format!(
            "{}: the first certificate does not match the key",
            path.display()
        ));
    }
    Ok(KeyAndChain { key, chain })
}

/// The key and certificate objects an import created.
pub struct Imported {
    token: Arc<Token>,
    objects: [ObjectHandle; 2],
}

impl Imported {
    /// Destroys them again (a `create` that fails after the import leaves nothing behind).
    pub fn remove(self) -> Result<()> {
        for o in self.objects {
            self.token.with_session(|s| s.destroy_object(o))?;
        }
        Ok(())
    }
}

impl KeyAndChain {
    /// The TLS signature algorithm of the key: which TLS 1.2 suites it can serve.
    pub fn algorithm(&self) -> Result<SignatureAlgorithm> {
        match self.key.id() {
            Id::RSA => Ok(SignatureAlgorithm::RSA),
            Id::EC => Ok(SignatureAlgorithm::ECDSA),
            Id::ED25519 => Ok(SignatureAlgorithm::ED25519),
            _ => Err("only RSA, EC (P-256, P-384) and Ed25519 keys can be imported".into()),
        }
    }

    /// The chain as PEM text.
    pub fn chain_pem(&self) -> Result<String> {
        let mut out = String::new();
        for c in &self.chain {
            let pem = c.to_pem().map_err(|e| e.to_string())?;
            out.push_str(&String::from_utf8_lossy(&pem));
        }
        Ok(out)
    }

    /// CKA_ID: the first 20 bytes of SHA-256 over the public key (SubjectPublicKeyInfo).
    fn id(&self) -> Result<Vec<u8>> {
        let spki = self.key.public_key_to_der().map_err(|e| e.to_string())?;
        Ok(ring::digest::digest(&ring::digest::SHA256, &spki).as_ref()[..20].to_vec())
    }

    fn key_template(&self, label: &str, id: &[u8]) -> Result<Vec<Attribute>> {
        let mut t = vec![
            Attribute::Class(ObjectClass::PRIVATE_KEY),
            Attribute::Token(true),
            Attribute::Private(true),
            Attribute::Sensitive(true),
            Attribute::Extractable(false),
            Attribute::Sign(true),
            // The proxy only signs; no other use is granted.
            Attribute::Decrypt(false),
            Attribute::Unwrap(false),
            Attribute::Derive(false),
            Attribute::Label(label.as_bytes().to_vec()),
            Attribute::Id(id.to_vec()),
        ];
        let e = |e: openssl::error::ErrorStack| e.to_string();
        if let Ok(rsa) = self.key.rsa() {
            let part = |b: Option<&openssl::bn::BigNumRef>| {
                b.map(|b| b.to_vec())
                    .ok_or("RSA key without CRT parameters")
            };
            t.extend([
                Attribute::KeyType(KeyType::RSA),
                Attribute::Modulus(rsa.n().to_vec()),
                Attribute::PublicExponent(rsa.e().to_vec()),
                Attribute::PrivateExponent(rsa.d().to_vec()),
                Attribute::Prime1(part(rsa.p())?),
                Attribute::Prime2(part(rsa.q())?),
                Attribute::Exponent1(part(rsa.dmp1())?),
                Attribute::Exponent2(part(rsa.dmq1())?),
                Attribute::Coefficient(part(rsa.iqmp())?),
            ]);
        } else if let Ok(ec) = self.key.ec_key() {
            let (params, len) = match ec.group().curve_name() {
                Some(Nid::X9_62_PRIME256V1) => (P256_PARAMS, 32),
                Some(Nid::SECP384R1) => (P384_PARAMS, 48),
                other => return Err(format!("EC curve {other:?} is not served (P-256, P-384)")),
            };
            let d = ec.private_key().to_vec_padded(len).map_err(e)?;
            t.extend([
                Attribute::KeyType(KeyType::EC),
                Attribute::EcParams(params.to_vec()),
                Attribute::Value(d),
            ]);
        } else if self.key.id() == Id::ED25519 {
            let d = self.key.raw_private_key().map_err(e)?;
            t.extend([
                Attribute::KeyType(KeyType::EC_EDWARDS),
                Attribute::EcParams(ED25519_PARAMS.to_vec()),
                Attribute::Value(d),
            ]);
        } else {
            return Err("only RSA, EC (P-256, P-384) and Ed25519 keys can be imported".into());
        }
        Ok(t)
    }

    /// Creates the key and the leaf certificate in the token under `label`. Fails when the
    /// token already has a private key or certificate with that label.
    pub fn import(
        &self,
        module: &Module,
        token: Option<&str>,
        pin: Option<String>,
        label: &str,
    ) -> Result<Imported> {
        let t = module.token(token, pin)?;
        let id = self.id()?;
        for class in [ObjectClass::PRIVATE_KEY, ObjectClass::CERTIFICATE] {
            let tmpl = [
                Attribute::Class(class),
                Attribute::Label(label.as_bytes().to_vec()),
            ];
            if !t.with_session(|s| s.find_objects(&tmpl))?.is_empty() {
                return Err(format!(
                    "token {:?} already has a {class} labelled {label:?} (choose another with -C)",
                    t.label
                ));
            }
        }
        let key_t = self.key_template(label, &id)?;
        let leaf = &self.chain[0];
        let cert_t = vec![
            Attribute::Class(ObjectClass::CERTIFICATE),
            Attribute::CertificateType(CertificateType::X_509),
            Attribute::Token(true),
            Attribute::Private(false),
            Attribute::Label(label.as_bytes().to_vec()),
            Attribute::Id(id.clone()),
            Attribute::Subject(leaf.subject_name().to_der().map_err(|e| e.to_string())?),
            Attribute::Value(leaf.to_der().map_err(|e| e.to_string())?),
        ];
        let key = t.with_session(|s| s.create_object(&key_t))?;
        match t.with_session(|s| s.create_object(&cert_t)) {
            Ok(cert) => Ok(Imported {
                token: t,
                objects: [key, cert],
            }),
            Err(e) => {
                let _ = t.with_session(|s| s.destroy_object(key));
                Err(e)
            }
        }
    }
}
