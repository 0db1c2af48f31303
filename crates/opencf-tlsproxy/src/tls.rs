//! rustls server configurations of an instance (one per certificate: the default site and each
//! SNI site), resumption state with the configured size and timeout (tickets: [`crate::tickets`]), and the decision between
//! serving a ClientHello and handing it to the fallback port.

use crate::clienthello::Hello;
use crate::config::{ClientAuth, Instance, UnknownSni};
use crate::files::{self, MAX_DATA_FILE};
use crate::tickets::{TicketSecret, Tickets};
use crate::token::{pin_for, KeyKind, Module, TokenKey};
use crate::uri::Pkcs11Uri;
use crate::Result;
use rustls::crypto::ring as provider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ClientHello, ResolvesServerCert, StoresServerSessions, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    ConfigBuilder, RootCertStore, ServerConfig, SignatureAlgorithm, SupportedCipherSuite,
    SupportedProtocolVersion, WantsVerifier,
};
use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Entries by session ID, with their insertion time, and the IDs in insertion order.
type Entries = (HashMap<Vec<u8>, (Instant, Vec<u8>)>, VecDeque<Vec<u8>>);

/// Session-ID cache (TLS 1.2; TLS 1.3 when tickets are off) bounded in entries and age.
#[derive(Debug)]
pub struct SessionCache {
    max: usize,
    ttl: Duration,
    inner: Mutex<Entries>,
}

impl SessionCache {
    pub fn new(max: usize, ttl: Duration) -> Self {
        SessionCache {
            max,
            ttl,
            inner: Mutex::new((HashMap::new(), VecDeque::new())),
        }
    }

    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lookup(&self, key: &[u8], remove: bool) -> Option<Vec<u8>> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = g.0.get(key).is_some_and(|(t, _)| t.elapsed() < self.ttl);
        if !fresh {
            g.0.remove(key);
            return None;
        }
        if remove {
            g.0.remove(key).map(|(_, v)| v)
        } else {
            g.0.get(key).map(|(_, v)| v.clone())
        }
    }
}

impl StoresServerSessions for SessionCache {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        if self.max == 0 {
            return false;
        }
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (map, order) = &mut *g;
        map.insert(key.clone(), (Instant::now(), value));
        order.push_back(key);
        // Oldest first: the order queue may hold keys already taken; skip those.
        while map.len() > self.max {
            match order.pop_front() {
                Some(k) => {
                    map.remove(&k);
                }
                None => break,
            }
        }
        if order.len() > self.max.saturating_mul(2).saturating_add(16) {
            order.retain(|k| map.contains_key(k));
        }
        true
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.lookup(key, false)
    }
    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.lookup(key, true)
    }
    fn can_cache(&self) -> bool {
        self.max > 0
    }
}

/// What resumption state depends on: the cache's size and timeout, and the client certificate
/// rules (a digest of `client_auth` and the contents of the CA and CRL files). A session made
/// under other rules must not resume: one made before client certificates were required has
/// none, and one made before a revocation list changed was checked against the old one.
pub type ResumptionKey = (usize, u64, Option<[u8; 32]>);

/// The resumption key of `inst` (reads its client CA and CRL files).
pub fn resumption_key(inst: &Instance) -> Result<ResumptionKey> {
    let rules = match &inst.client_ca_file {
        None => None,
        Some(ca) => {
            let read = |f: &Path| files::read(f, MAX_DATA_FILE);
            let mut h = openssl::sha::Sha256::new();
            h.update(&[inst.client_auth.unwrap_or_default() as u8]);
            for part in [
                Some(read(ca)?),
                inst.client_crl_file.as_deref().map(read).transpose()?,
            ] {
                let part = part.unwrap_or_default();
                h.update(&(part.len() as u64).to_be_bytes());
                h.update(&part);
            }
            Some(h.finish())
        }
    };
    Ok((inst.session_cache, inst.session_timeout, rules))
}

/// Resumption state of an instance, kept across configuration reloads while its
/// [`ResumptionKey`] stays the same.
#[derive(Debug, Clone)]
pub struct Resumption {
    pub cache: Arc<SessionCache>,
    pub ticketer: Arc<Tickets>,
    pub key: ResumptionKey,
}

impl Resumption {
    /// New state for `inst`; its ticket keys derive from `secret` (shared by the workers), the
    /// instance's name and its client certificate rules.
    pub fn new(inst: &Instance, secret: &TicketSecret) -> Result<Self> {
        Ok(Self::with_key(inst, secret, resumption_key(inst)?))
    }

    /// The same, with `inst`'s [`ResumptionKey`] already read.
    pub fn with_key(inst: &Instance, secret: &TicketSecret, key: ResumptionKey) -> Self {
        let mut context = inst.name();
        if let Some(rules) = &key.2 {
            context.push_str("\0client-auth\0");
            context.extend(rules.iter().map(|b| format!("{b:02x}")));
        }
        Resumption {
            cache: Arc::new(SessionCache::new(
                inst.session_cache,
                Duration::from_secs(inst.session_timeout),
            )),
            ticketer: Arc::new(Tickets::new(secret, &context, inst.session_timeout)),
            key,
        }
    }
}

/// The client certificate verifier of an instance with `client_ca_file` (mutual TLS): the
/// file's certificates are the trust anchors; with `client_crl_file` every certificate of the
/// client's chain below them must be covered by one of its lists and not revoked (as OpenSSL's
/// `X509_V_FLAG_CRL_CHECK_ALL`, which nginx's `ssl_crl` sets); `client_auth = "optional"` lets a
/// client present none.
pub fn client_verifier(inst: &Instance) -> Result<Option<Arc<dyn ClientCertVerifier>>> {
    let Some(ca) = &inst.client_ca_file else {
        return Ok(None);
    };
    let mut roots = RootCertStore::empty();
    for c in pem_certs(ca)? {
        roots
            .add(c)
            .map_err(|e| format!("{}: not a CA certificate: {e}", ca.display()))?;
    }
    let mut b = WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(provider::default_provider()),
    );
    if let Some(f) = &inst.client_crl_file {
        let crls: Vec<CertificateRevocationListDer> =
            pem_objects(f, "certificate revocation list")?;
        b = b.with_crls(crls);
    }
    if inst.client_auth == Some(ClientAuth::Optional) {
        b = b.allow_unauthenticated();
    }
    b.build()
        .map(Some)
        .map_err(|e| format!("client certificates: {e}"))
}

/// The subject common name of a certificate, where it has one.
pub fn subject_cn(der: &CertificateDer<'_>) -> Option<String> {
    let cert = openssl::x509::X509::from_der(der).ok()?;
    let cn = cert
        .subject_name()
        .entries_by_nid(openssl::nid::Nid::COMMONNAME)
        .next()?;
    Some(String::from_utf8_lossy(cn.data().as_slice()).into_owned())
}

#[derive(Debug)]
struct OneCert(Arc<CertifiedKey>);

impl ResolvesServerCert for OneCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// Canonical name of a suite as rustls spells it (`TLS13_AES_128_GCM_SHA256`,
/// `TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`).
pub fn suite_name(s: &SupportedCipherSuite) -> String {
    s.suite()
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| format!("{:?}", s.suite()))
}

/// Suites named in the configuration (IANA names; TLS 1.3 ones with `TLS_` or `TLS13_`;
/// case-insensitive), or every suite rustls offers.
pub fn select_suites(names: Option<&[String]>) -> Result<Vec<SupportedCipherSuite>> {
    let all = provider::ALL_CIPHER_SUITES;
    let Some(names) = names else {
        return Ok(all.to_vec());
    };
    let mut out = Vec::new();
    for n in names {
        let up = n.trim().to_ascii_uppercase();
        let alt = up.replacen("TLS_", "TLS13_", 1);
        let found = all.iter().find(|s| {
            let name = suite_name(s);
            name == up || (matches!(s, SupportedCipherSuite::Tls13(_)) && name == alt)
        });
        match found {
            Some(s) => out.push(*s),
            None => {
                let known: Vec<String> = all.iter().map(suite_name).collect();
                return Err(format!(
                    "unknown cipher suite {n:?}; known: {}",
                    known.join(", ")
                ));
            }
        }
    }
    if out.is_empty() {
        return Err("no cipher suite selected".into());
    }
    Ok(out)
}

/// The objects of one kind in a PEM file (`what` names the kind in the error when there is
/// none), in order; at least one.
fn pem_objects<T: PemObject>(f: &Path, what: &str) -> Result<Vec<T>> {
    let pem = files::read(f, MAX_DATA_FILE)?;
    let objects: Vec<T> = T::pem_slice_iter(&pem)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| format!("{}: {e}", f.display()))?;
    if objects.is_empty() {
        return Err(format!("{}: no {what}", f.display()));
    }
    Ok(objects)
}

/// The certificates of a PEM file, in order; at least one.
fn pem_certs(f: &Path) -> Result<Vec<CertificateDer<'static>>> {
    pem_objects(f, "certificate")
}

/// Where a site's certificate chain comes from: a PEM file (the chain, leaf first), or the
/// leaf in the token followed by the CA certificates of `chain` (`chain_file`); and the OCSP
/// response stapled with it (`ocsp_file`).
struct CertSource<'a> {
    file: Option<&'a Path>,
    uri: Option<&'a str>,
    chain: Option<&'a Path>,
    ocsp: Option<&'a Path>,
}

/// Reads an OCSP response (DER) to staple with `certs` (leaf first). It must be a successful
/// response; where the chain holds the leaf's issuer, it must answer for the leaf (a SHA-1 or
/// SHA-256 certificate ID), say `good` and be current (`thisUpdate` not ahead by more than
/// 5 minutes, `nextUpdate`, where given, not past). Its signature is the client's to check.
pub fn load_ocsp(f: &Path, certs: &[CertificateDer<'_>]) -> Result<Vec<u8>> {
    use openssl::hash::MessageDigest;
    use openssl::ocsp::{OcspCertId, OcspCertStatus, OcspResponse, OcspResponseStatus};
    use openssl::x509::X509;
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", f.display());
    let der = files::read(f, MAX_DATA_FILE)?;
    let resp = OcspResponse::from_der(&der).map_err(|_| at(&"not a DER OCSP response"))?;
    if resp.status() != OcspResponseStatus::SUCCESSFUL {
        return Err(at(&format!(
            "the OCSP response is not successful (status {})",
            resp.status().as_raw()
        )));
    }
    let basic = resp.basic().map_err(|e| at(&e))?;
    let (Some(leaf), Some(issuer)) = (certs.first(), certs.get(1)) else {
        return Ok(der);
    };
    let leaf = X509::from_der(leaf).map_err(|e| at(&e))?;
    let issuer = X509::from_der(issuer).map_err(|e| at(&e))?;
    let status = [MessageDigest::sha1(), MessageDigest::sha256()]
        .into_iter()
        .filter_map(|md| OcspCertId::from_cert(md, &leaf, &issuer).ok())
        .find_map(|id| {
            basic
                .find_status(&id)
                .map(|s| (s.status, s.check_validity(300, None).is_ok()))
        });
    match status {
        None => Err(at(
            &"the OCSP response does not answer for this certificate",
        )),
        Some((s, _)) if s != OcspCertStatus::GOOD => Err(at(&format!(
            "the OCSP response says the certificate is {}",
            if s == OcspCertStatus::REVOKED {
                "revoked"
            } else {
                "unknown"
            }
        ))),
        Some((_, false)) => Err(at(
            &"the OCSP response is out of date (nextUpdate has passed)",
        )),
        Some(_) => Ok(der),
    }
}

fn load_certs(
    module: &Module,
    src: &CertSource,
    pin_file: Option<&Path>,
) -> Result<Vec<CertificateDer<'static>>> {
    if let Some(f) = src.file {
        return pem_certs(f);
    }
    let text = src.uri.ok_or("no certificate configured")?;
    let u = Pkcs11Uri::parse(text)?;
    let token = module.token(u.token.as_deref(), pin_for(&u, pin_file)?)?;
    let mut certs = vec![token.certificate(&u)?];
    if let Some(c) = src.chain {
        certs.extend(pem_certs(c)?);
    }
    Ok(certs)
}

/// DNS names of a certificate: its subjectAltName DNS entries, else its subject CN; lower case.
pub fn cert_names(der: &CertificateDer<'_>) -> Vec<String> {
    let Ok(cert) = openssl::x509::X509::from_der(der) else {
        return Vec::new();
    };
    let mut names: Vec<String> = cert
        .subject_alt_names()
        .map(|sans| {
            sans.iter()
                .filter_map(|n| n.dnsname().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    if names.is_empty() {
        names = cert
            .subject_name()
            .entries_by_nid(openssl::nid::Nid::COMMONNAME)
            .map(|e| String::from_utf8_lossy(e.data().as_slice()).into_owned())
            .collect();
    }
    names
        .iter()
        .map(|n| n.trim_end_matches('.').to_ascii_lowercase())
        .collect()
}

/// The TLS versions an instance enables: (TLS 1.2, TLS 1.3, rustls's list, preferred first).
fn versions_of(inst: &Instance) -> (bool, bool, Vec<&'static SupportedProtocolVersion>) {
    let tls12 = inst.versions.iter().any(|v| v == "1.2");
    let tls13 = inst.versions.iter().any(|v| v == "1.3");
    let mut versions: Vec<&'static SupportedProtocolVersion> = Vec::new();
    if tls13 {
        versions.push(&rustls::version::TLS13);
    }
    if tls12 {
        versions.push(&rustls::version::TLS12);
    }
    (tls12, tls13, versions)
}

fn algorithm_name(alg: SignatureAlgorithm) -> &'static str {
    match alg {
        SignatureAlgorithm::RSA => "RSA",
        SignatureAlgorithm::ECDSA => "ECDSA",
        SignatureAlgorithm::ED25519 => "Ed25519",
        _ => "other",
    }
}

/// The rustls configuration of a certificate whose key signs with `alg`, as far as the
/// protocol goes: the instance's suites that fit the key (TLS 1.2 suites name the key's
/// algorithm), for its versions. Fails when none is left for any of the versions.
fn site_builder(
    inst: &Instance,
    suites: &[SupportedCipherSuite],
    alg: SignatureAlgorithm,
) -> Result<ConfigBuilder<ServerConfig, WantsVerifier>> {
    let (_, _, versions) = versions_of(inst);
    let mut p = provider::default_provider();
    p.cipher_suites = suites
        .iter()
        .filter(|s| s.usable_for_signature_algorithm(alg))
        .copied()
        .collect();
    ServerConfig::builder_with_provider(Arc::new(p))
        .with_protocol_versions(&versions)
        .map_err(|_| {
            format!(
                "no usable cipher suite: none of the cipher suites for TLS {} fits an {} key",
                inst.versions.join(" and "),
                algorithm_name(alg)
            )
        })
}

/// Checks that the instance's suites and versions can serve a key that signs with `alg`,
/// before such a key is imported into the token.
pub fn check_key_fits(inst: &Instance, alg: SignatureAlgorithm) -> Result<()> {
    let n = inst.name();
    let suites =
        select_suites(inst.cipher_suites.as_deref()).map_err(|e| format!("instance {n}: {e}"))?;
    site_builder(inst, &suites, alg)
        .map(|_| ())
        .map_err(|e| format!("instance {n}: {e}"))
}

/// One certificate and key with the names it serves.
pub struct Site {
    pub names: Vec<String>,
    pub config: Arc<ServerConfig>,
    pub kind: KeyKind,
}

impl Site {
    fn matches(&self, sni: &str) -> bool {
        self.names.iter().any(|n| {
            n == sni
                || n.strip_prefix("*.").is_some_and(|base| {
                    sni.split_once('.')
                        .is_some_and(|(label, rest)| !label.is_empty() && rest == base)
                })
        })
    }
}

/// Whether a handshake can agree on the application protocol: always when the instance names
/// none (the client's offer is ignored) or the client offers none (no protocol is chosen);
/// otherwise only when they share one. rustls answers the last case, without a fallback port,
/// with the `no_application_protocol` alert (RFC 7301, 3.2).
pub fn alpn_agrees(ours: &[Vec<u8>], offered: Option<&[Vec<u8>]>) -> bool {
    match offered {
        Some(theirs) if !ours.is_empty() => ours.iter().any(|p| theirs.contains(p)),
        _ => true,
    }
}

/// What to do with a connection, decided from its ClientHello.
pub enum Decision {
    Serve(Arc<ServerConfig>),
    Fallback(&'static str),
    Reject(&'static str),
}

/// The TLS side of an instance.
pub struct InstanceTls {
    pub sites: Vec<Site>,
    pub tls12: bool,
    pub tls13: bool,
    pub suites: Vec<SupportedCipherSuite>,
    pub unknown_sni: UnknownSni,
    pub fallback: bool,
    /// The application protocols of `alpn`, preferred first (empty: no ALPN).
    pub alpn: Vec<Vec<u8>>,
}

impl InstanceTls {
    pub fn build(module: &Module, inst: &Instance, res: &Resumption) -> Result<InstanceTls> {
        let n = inst.name();
        let suites = select_suites(inst.cipher_suites.as_deref())
            .map_err(|e| format!("instance {n}: {e}"))?;
        let (tls12, tls13, _) = versions_of(inst);
        let alpn: Vec<Vec<u8>> = inst.alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
        let verifier = client_verifier(inst).map_err(|e| format!("instance {n}: {e}"))?;
        let pin_file = inst.pin_file.as_deref();
        let mut specs = vec![(
            Vec::new(),
            CertSource {
                file: inst.cert_file.as_deref(),
                uri: inst.cert_uri.as_deref(),
                chain: inst.chain_file.as_deref(),
                ocsp: inst.ocsp_file.as_deref(),
            },
            inst.key_uri.as_str(),
        )];
        for s in &inst.sni {
            let names = s
                .names
                .iter()
                .map(|x| x.trim_end_matches('.').to_ascii_lowercase())
                .collect();
            specs.push((
                names,
                CertSource {
                    file: s.cert_file.as_deref(),
                    uri: s.cert_uri.as_deref(),
                    chain: s.chain_file.as_deref(),
                    ocsp: s.ocsp_file.as_deref(),
                },
                s.key_uri.as_str(),
            ));
        }
        let mut sites = Vec::new();
        for (names, source, key_uri) in specs {
            let ctx = |e: String| format!("instance {n}: {e}");
            let key = TokenKey::open(module, key_uri, pin_file).map_err(ctx)?;
            let certs = load_certs(module, &source, pin_file).map_err(ctx)?;
            let kind = key.kind();
            // The default certificate answers for the DNS names it carries.
            let names = if names.is_empty() {
                cert_names(&certs[0])
            } else {
                names
            };
            let ocsp = source
                .ocsp
                .map(|f| load_ocsp(f, &certs))
                .transpose()
                .map_err(ctx)?;
            let mut ck = CertifiedKey::new(certs, Arc::new(key));
            ck.ocsp = ocsp;
            let ck = Arc::new(ck);
            let builder = site_builder(inst, &suites, kind.algorithm()).map_err(ctx)?;
            let builder = match &verifier {
                Some(v) => builder.with_client_cert_verifier(v.clone()),
                None => builder.with_no_client_auth(),
            };
            let mut cfg = builder.with_cert_resolver(Arc::new(OneCert(ck)));
            cfg.ignore_client_order = true;
            cfg.alpn_protocols = alpn.clone();
            cfg.session_storage = res.cache.clone();
            if inst.tickets {
                cfg.ticketer = res.ticketer.clone();
            }
            sites.push(Site {
                names,
                config: Arc::new(cfg),
                kind,
            });
        }
        Ok(InstanceTls {
            sites,
            tls12,
            tls13,
            suites,
            unknown_sni: inst.unknown_sni,
            fallback: inst.fallback_port.is_some(),
            alpn,
        })
    }

    /// Whether rustls can complete a handshake for `hello` with `site`. rustls negotiates
    /// TLS 1.3 whenever both sides enable it, TLS 1.2 otherwise, and never falls back from
    /// one to the other: that version needs an offered cipher suite of the site, a signature
    /// scheme its key makes (TLS 1.3: PSS for RSA) and a key-exchange group in common (every
    /// suite is (EC)DHE; without `supported_groups` there is none).
    fn can_serve(&self, site: &Site, hello: &Hello) -> bool {
        let tls13 = if self.tls13 && hello.versions.contains(&0x0304) {
            true
        } else if self.tls12 && hello.versions.contains(&0x0303) {
            false
        } else {
            return false;
        };
        let schemes: &[u16] = match site.kind {
            KeyKind::Rsa { .. } => &[0x0804, 0x0805, 0x0401, 0x0501],
            KeyKind::EcP256 => &[0x0403],
            KeyKind::EcP384 => &[0x0503],
            KeyKind::Ed25519 => &[0x0807],
        };
        let sig_ok = hello
            .sig_schemes
            .iter()
            .any(|s| schemes.contains(s) && !(tls13 && (*s == 0x0401 || *s == 0x0501)));
        let provider = site.config.crypto_provider();
        let suite_ok = provider.cipher_suites.iter().any(|s| {
            matches!(s, SupportedCipherSuite::Tls13(_)) == tls13
                && hello.suites.contains(&u16::from(s.suite()))
        });
        let group_ok = provider
            .kx_groups
            .iter()
            .any(|g| hello.groups.contains(&u16::from(g.name())));
        sig_ok && suite_ok && group_ok
    }

    pub fn decide(&self, hello: &Hello) -> Decision {
        let site = match hello.sni.as_deref() {
            None => &self.sites[0],
            // SNI entries first, then the names of the default certificate.
            Some(name) => match self.sites[1..]
                .iter()
                .chain(&self.sites[..1])
                .find(|s| s.matches(name))
            {
                Some(s) => s,
                None => match self.unknown_sni {
                    UnknownSni::Default => &self.sites[0],
                    UnknownSni::Fallback => return Decision::Fallback("unknown server name"),
                    UnknownSni::Reject => return Decision::Reject("unknown server name"),
                },
            },
        };
        if self.fallback && !self.can_serve(site, hello) {
            return Decision::Fallback(
                "no common version, cipher suite, signature scheme or key-exchange group",
            );
        }
        if self.fallback && !alpn_agrees(&self.alpn, hello.alpn.as_deref()) {
            return Decision::Fallback("no common application protocol");
        }
        // Without a fallback port rustls answers what it cannot serve with an alert.
        Decision::Serve(site.config.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suite_names() {
        let s = select_suites(Some(&["tls_aes_128_gcm_sha256".into()])).unwrap();
        assert_eq!(suite_name(&s[0]), "TLS13_AES_128_GCM_SHA256");
        let s = select_suites(Some(&["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into()])).unwrap();
        assert_eq!(u16::from(s[0].suite()), 0xc02f);
        assert!(select_suites(Some(&["AES128-SHA".into()]))
            .unwrap_err()
            .contains("known"));
        assert!(select_suites(None).unwrap().len() >= 9);
    }

    #[test]
    fn resumption_key_follows_client_certificate_rules() {
        let dir = std::env::temp_dir().join(format!("opencf-tls-rk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (ca, crl) = (dir.join("ca.pem"), dir.join("c.crl"));
        std::fs::write(&ca, "one").unwrap();
        std::fs::write(&crl, "list").unwrap();
        let mut i = Instance::new(None, 1, 2, "pkcs11:object=k".into());
        assert_eq!(resumption_key(&i).unwrap(), (5000, 86400, None));
        i.client_ca_file = Some(ca.clone());
        let required = resumption_key(&i).unwrap();
        assert!(required.2.is_some());
        assert_eq!(resumption_key(&i).unwrap(), required);
        i.client_auth = Some(ClientAuth::Optional);
        let optional = resumption_key(&i).unwrap();
        assert_ne!(optional, required);
        i.client_crl_file = Some(crl.clone());
        let with_crl = resumption_key(&i).unwrap();
        assert_ne!(with_crl, optional);
        std::fs::write(&crl, "list 2").unwrap();
        assert_ne!(resumption_key(&i).unwrap(), with_crl);
        std::fs::write(&ca, "two").unwrap();
        let other_ca = resumption_key(&i).unwrap();
        assert_ne!(other_ca.2, with_crl.2);
        std::fs::remove_file(&crl).unwrap();
        assert!(resumption_key(&i).unwrap_err().contains("c.crl"));
        // Not a certificate: the verifier says so.
        i.client_crl_file = None;
        assert!(client_verifier(&i)
            .err()
            .unwrap()
            .contains("no certificate"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn alpn_agreement() {
        let h2 = b"h2".to_vec();
        let h1 = b"http/1.1".to_vec();
        let ours = [h2.clone(), h1.clone()];
        assert!(alpn_agrees(&ours, None));
        assert!(alpn_agrees(&[], Some(&[b"spdy/3".to_vec()])));
        assert!(alpn_agrees(&ours, Some(&[b"x".to_vec(), h1.clone()])));
        assert!(!alpn_agrees(&ours, Some(&[b"spdy/3".to_vec()])));
        assert!(!alpn_agrees(&[h1], Some(&[h2])));
    }

    #[test]
    fn cache_bounds_and_ttl() {
        let c = SessionCache::new(2, Duration::from_secs(60));
        for i in 0..5u8 {
            assert!(c.put(vec![i], vec![i]));
        }
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(&[4]), Some(vec![4]));
        assert_eq!(c.get(&[0]), None);
        assert_eq!(c.take(&[3]), Some(vec![3]));
        assert_eq!(c.get(&[3]), None);
        let z = SessionCache::new(5, Duration::from_secs(0));
        z.put(vec![1], vec![1]);
        assert_eq!(z.get(&[1]), None);
        assert!(!SessionCache::new(0, Duration::from_secs(1)).can_cache());
        // The largest bound does not overflow when the order queue is measured against it.
        let huge = SessionCache::new(usize::MAX, Duration::MAX);
        for i in 0..40u8 {
            assert!(huge.put(vec![i], vec![i]));
        }
        assert_eq!(huge.get(&[0]), Some(vec![0]));
    }

    #[derive(Debug)]
    struct NoCert;

    impl ResolvesServerCert for NoCert {
        fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
            None
        }
    }

    /// An instance serving a P-256 key, with a fallback port.
    fn ec_instance(inst: &Instance) -> InstanceTls {
        let suites = select_suites(inst.cipher_suites.as_deref()).unwrap();
        let config = site_builder(inst, &suites, SignatureAlgorithm::ECDSA)
            .unwrap()
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(NoCert));
        let (tls12, tls13, _) = versions_of(inst);
        InstanceTls {
            sites: vec![Site {
                names: vec!["localhost".into()],
                config: Arc::new(config),
                kind: KeyKind::EcP256,
            }],
            tls12,
            tls13,
            suites,
            unknown_sni: UnknownSni::Default,
            fallback: true,
            alpn: Vec::new(),
        }
    }

    fn hello(versions: &[u16], suites: &[u16], groups: &[u16]) -> Hello {
        Hello {
            versions: versions.to_vec(),
            suites: suites.to_vec(),
            sig_schemes: vec![0x0403],
            groups: groups.to_vec(),
            sni: None,
            alpn: None,
        }
    }

    #[test]
    fn fallback_follows_what_rustls_would_negotiate() {
        let inst = Instance::new(None, 1, 2, "pkcs11:object=k".into());
        let t = ec_instance(&inst);
        let serves = |h: &Hello| matches!(t.decide(h), Decision::Serve(_));
        const X25519: u16 = 0x001d;
        const P256: u16 = 0x0017;
        const P521: u16 = 0x0019;
        const FFDHE2048: u16 = 0x0100;
        const AES128_13: u16 = 0x1301;
        const ECDSA_AES128_12: u16 = 0xc02b;
        assert!(serves(&hello(&[0x0304], &[AES128_13], &[X25519])));
        assert!(serves(&hello(&[0x0304], &[AES128_13], &[P521, P256])));
        assert!(serves(&hello(&[0x0303], &[ECDSA_AES128_12], &[P256])));
        // No key-exchange group in common, or none offered: rustls would fail the handshake.
        assert!(!serves(&hello(&[0x0304], &[AES128_13], &[P521])));
        assert!(!serves(&hello(&[0x0304], &[AES128_13], &[])));
        assert!(!serves(&hello(&[0x0303], &[ECDSA_AES128_12], &[FFDHE2048])));
        assert!(!serves(&hello(&[0x0303], &[ECDSA_AES128_12], &[])));
        // TLS 1.3 offered and enabled is what rustls negotiates, even where only the TLS 1.2
        // suites would fit.
        assert!(!serves(&hello(
            &[0x0304, 0x0303],
            &[ECDSA_AES128_12],
            &[P256]
        )));
        let mut only12 = inst.clone();
        only12.versions = vec!["1.2".into()];
        let t12 = ec_instance(&only12);
        assert!(matches!(
            t12.decide(&hello(&[0x0304, 0x0303], &[ECDSA_AES128_12], &[P256])),
            Decision::Serve(_)
        ));
        // Without a fallback port, rustls answers with its alert.
        let mut no_fallback = ec_instance(&inst);
        no_fallback.fallback = false;
        assert!(matches!(
            no_fallback.decide(&hello(&[0x0304], &[AES128_13], &[P521])),
            Decision::Serve(_)
        ));
    }

    #[test]
    fn suites_must_fit_the_key() {
        let mut i = Instance::new(None, 1, 2, "pkcs11:object=k".into());
        i.versions = vec!["1.2".into()];
        i.cipher_suites = Some(vec!["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256".into()]);
        assert!(check_key_fits(&i, SignatureAlgorithm::ECDSA).is_ok());
        assert!(check_key_fits(&i, SignatureAlgorithm::ED25519).is_ok());
        let e = check_key_fits(&i, SignatureAlgorithm::RSA).unwrap_err();
        assert!(
            e.contains("no usable cipher suite") && e.contains("RSA key"),
            "{e}"
        );
        // TLS 1.3 suites fit every key.
        i.versions = vec!["1.2".into(), "1.3".into()];
        i.cipher_suites = Some(vec![
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256".into(),
            "TLS13_AES_128_GCM_SHA256".into(),
        ]);
        assert!(check_key_fits(&i, SignatureAlgorithm::RSA).is_ok());
    }
}
