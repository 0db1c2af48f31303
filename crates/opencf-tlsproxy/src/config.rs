//! The instance file (`tlsproxy.toml`), read by the daemon and edited by `tlsproxycfg`.
//!
//! ```toml
//! module = "/usr/lib/opencf/libopencf.so"   # optional
//! workers = 2                  # optional: worker processes (default 1)
//! max_offloaded_signatures = 256  # optional: slow tokens' signatures at once, per process
//! drain_timeout = 60           # optional: seconds a graceful stop (SIGQUIT) waits for connections
//!
//! [[instance]]
//! address = "127.0.0.1"        # optional; all addresses when absent
//! port = 8443                  # TLS port
//! proxy_port = 8080            # clear-text service on 127.0.0.1
//! fallback_port = 8444         # optional: ClientHellos the proxy cannot serve go there
//! versions = ["1.2", "1.3"]
//! cipher_suites = ["TLS13_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]
//! session_cache = 5000         # entries; 0 disables session-ID resumption
//! session_timeout = 86400      # seconds, for session IDs and tickets
//! tickets = true
//! handshake_timeout = 10       # seconds
//! idle_timeout = 300           # optional: close a relay idle this long (seconds; 0: never)
//! proxy_protocol = "v2"        # optional: PROXY header ("v1" or "v2") to the clear-text service
//! unknown_sni = "default"      # or "fallback" / "reject"
//! alpn = ["h2", "http/1.1"]    # optional: application protocols offered (ALPN), preferred first
//! client_ca_file = "/etc/opencf/clients-ca.pem"  # optional: ask clients for certificates
//! client_auth = "required"     # or "optional" (with client_ca_file)
//! client_crl_file = "/etc/opencf/clients.crl"    # optional: their revocation lists (PEM)
//! pin_file = "/etc/opencf/tlsproxy.pin"
//! cert_file = "/etc/opencf/tlsproxy/8443.pem"      # or cert_uri = "pkcs11:…;type=cert"
//! # chain_file = "/etc/opencf/ca-chain.pem"       # with cert_uri: CA certificates sent after it
//! # ocsp_file = "/etc/opencf/8443.ocsp"            # optional: OCSP response stapled (DER)
//! key_uri = "pkcs11:token=OpenCF%20Metaslot;object=web;type=private"
//!
//! [[instance.sni]]
//! names = ["www.example.org"]
//! cert_uri = "pkcs11:token=OpenCF%20Metaslot;object=org;type=cert"
//! key_uri = "pkcs11:token=OpenCF%20Metaslot;object=org;type=private"
//! ```

use crate::files::{read_bounded, MAX_CONFIG_FILE};
use crate::Result;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

/// The mode of an instance file that `tlsproxycfg` creates: it may hold a PIN (a key URI's
/// `pin-value`), so only its owner reads it. An existing file keeps its mode.
pub const NEW_FILE_MODE: u32 = 0o600;

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The PKCS#11 module; default `libopencf.so` beside the executable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<PathBuf>,
    /// Worker processes (1..=[`MAX_WORKERS`]); default 1, a single process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<usize>,
    /// Signatures of slow tokens that may run at once off the runtime's threads, per process
    /// (1..=[`MAX_OFFLOADED_SIGNATURES`]); default [`crate::token::DEFAULT_MAX_OFFLOADED_SIGNATURES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_offloaded_signatures: Option<usize>,
    /// Seconds a graceful stop (`SIGQUIT`) waits for open connections to end (0..=[`MAX_DRAIN_TIMEOUT`]);
    /// default [`DEFAULT_DRAIN_TIMEOUT`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_timeout: Option<u64>,
    #[serde(default, rename = "instance")]
    pub instances: Vec<Instance>,
}

/// How long a graceful stop waits for open connections by default, in seconds.
pub const DEFAULT_DRAIN_TIMEOUT: u64 = 60;
/// The longest `drain_timeout` (a day).
pub const MAX_DRAIN_TIMEOUT: u64 = 86400;

/// The most worker processes a daemon may run.
pub const MAX_WORKERS: usize = 64;

/// The highest `max_offloaded_signatures`: each such signature holds a thread of tokio's
/// blocking pool (512 threads), which the runtime also needs for its own work.
pub const MAX_OFFLOADED_SIGNATURES: usize = 400;

/// Checks a worker count (the `workers` key or `--workers`).
pub fn check_workers(n: usize) -> Result<usize> {
    if (1..=MAX_WORKERS).contains(&n) {
        Ok(n)
    } else {
        Err(format!(
            "workers = {n}: must be between 1 and {MAX_WORKERS}"
        ))
    }
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum UnknownSni {
    /// Serve the instance's own certificate.
    #[default]
    Default,
    /// Hand the connection to the fallback port.
    Fallback,
    /// Close the connection.
    Reject,
}

/// The most entries of `session_cache` (each holds a few hundred bytes of session state).
pub const MAX_SESSION_CACHE: usize = 1_000_000;
/// The longest `session_timeout` (a year).
pub const MAX_SESSION_TIMEOUT: u64 = 365 * 86400;

/// Checks an instance's `address`: an IP address (an IPv6 one also in brackets) or a host
/// name (RFC 1123: dot-separated labels of letters, digits and hyphens, at most 253
/// characters), which is resolved when the listener is bound.
pub fn check_address(a: &str) -> Result<()> {
    let bracketed = a.strip_prefix('[').and_then(|x| x.strip_suffix(']'));
    let ok = match bracketed {
        Some(inner) => inner.parse::<std::net::Ipv6Addr>().is_ok(),
        None => a.parse::<IpAddr>().is_ok() || is_host_name(a),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "address {a:?} is neither an IP address nor a host name (as 127.0.0.1, ::1 or \
             localhost; leave it out for every IPv4 address)"
        ))
    }
}

fn is_host_name(a: &str) -> bool {
    let a = a.strip_suffix('.').unwrap_or(a);
    !a.is_empty()
        && a.len() <= 253
        && a.split('.').all(|l| {
            (1..=63).contains(&l.len())
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// The longest `handshake_timeout` (an hour).
pub const MAX_HANDSHAKE_TIMEOUT: u64 = 3600;
/// The longest `idle_timeout` (a year).
pub const MAX_IDLE_TIMEOUT: u64 = 365 * 86400;

/// Whether a client must present a certificate (with `client_ca_file`); also `tlsproxycfg
/// create --client-auth`'s values.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// A handshake without a certificate the CAs vouch for fails.
    #[default]
    Required,
    /// A client may present none; one it presents must verify.
    Optional,
}

/// The most application protocols an instance may name (`alpn`).
pub const MAX_ALPN: usize = 16;

/// Checks an `alpn` list: 1 to [`MAX_ALPN`] distinct names of 1 to 255 bytes (RFC 7301's
/// limits), printable ASCII as the IANA registry's names are.
pub fn check_alpn(names: &[String]) -> Result<()> {
    if names.len() > MAX_ALPN {
        return Err(format!(
            "alpn: {} protocols, at most {MAX_ALPN}",
            names.len()
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for p in names {
        if p.is_empty() || p.len() > 255 || !p.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "alpn: {p:?} is not a protocol name (1 to 255 printable ASCII characters, as \"h2\" or \"http/1.1\")"
            ));
        }
        if !seen.insert(p) {
            return Err(format!("alpn: {p:?} is named twice"));
        }
    }
    Ok(())
}

/// The PROXY protocol header sent to the clear-text service (see [`crate::proxy_header`]);
/// also `tlsproxycfg create --proxy-protocol`'s values.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ProxyProtocol {
    /// The text line of version 1.
    V1,
    /// The binary header of version 2.
    V2,
}

impl ProxyProtocol {
    /// `v1` or `v2`, as the file and the command line spell it.
    pub fn name(self) -> &'static str {
        match self {
            ProxyProtocol::V1 => "v1",
            ProxyProtocol::V2 => "v2",
        }
    }
}

fn default_versions() -> Vec<String> {
    vec!["1.2".into(), "1.3".into()]
}
fn default_cache() -> usize {
    5000
}
fn default_timeout() -> u64 {
    86400
}
fn default_handshake_timeout() -> u64 {
    10
}
fn is_zero(v: &u64) -> bool {
    *v == 0
}
fn yes() -> bool {
    true
}
fn is_default_versions(v: &[String]) -> bool {
    v == default_versions()
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Instance {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    pub port: u16,
    pub proxy_port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_port: Option<u16>,
    #[serde(
        default = "default_versions",
        skip_serializing_if = "is_default_versions"
    )]
    pub versions: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cipher_suites: Option<Vec<String>>,
    #[serde(default = "default_cache")]
    pub session_cache: usize,
    #[serde(default = "default_timeout")]
    pub session_timeout: u64,
    #[serde(default = "yes")]
    pub tickets: bool,
    #[serde(default = "default_handshake_timeout")]
    pub handshake_timeout: u64,
    /// Seconds without a byte either way after which a relayed connection is closed; 0 (the
    /// default) keeps it open as long as both sides do.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub idle_timeout: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_protocol: Option<ProxyProtocol>,
    #[serde(default)]
    pub unknown_sni: UnknownSni,
    /// Application protocols the instance negotiates (ALPN, RFC 7301), preferred first; empty
    /// (the default): no ALPN, a client's offer is ignored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alpn: Vec<String>,
    /// A PEM file of the CA certificates whose client certificates are accepted (mutual TLS);
    /// absent (the default): no certificate is asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ca_file: Option<PathBuf>,
    /// With `client_ca_file`: whether a certificate is required (the default) or optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_auth: Option<ClientAuth>,
    /// With `client_ca_file`: a PEM file of certificate revocation lists for the client
    /// certificates and their issuers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_crl_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_uri: Option<String>,
    /// With `cert_uri`: a PEM file of the CA certificates sent after the token's leaf.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain_file: Option<PathBuf>,
    /// An OCSP response for the certificate (DER), stapled for clients that ask for it; read
    /// again at each reload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ocsp_file: Option<PathBuf>,
    pub key_uri: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sni: Vec<SniSite>,
}

/// An instance's listening address: an IP address (IPv4-mapped IPv6 ones as IPv4), or a host
/// name, resolved only when the listener is bound.
#[derive(Debug, PartialEq, Eq)]
enum ListenHost {
    Ip(IpAddr),
    Name(String),
}

impl ListenHost {
    /// Whether a listener on this address takes the connections of `other` too.
    fn covers(&self, other: &ListenHost) -> bool {
        match self {
            ListenHost::Ip(IpAddr::V6(a)) if a.is_unspecified() => true,
            ListenHost::Ip(IpAddr::V4(a)) if a.is_unspecified() => {
                !matches!(other, ListenHost::Ip(IpAddr::V6(_)))
            }
            _ => false,
        }
    }

    fn describe(&self) -> String {
        match self {
            ListenHost::Ip(IpAddr::V6(a)) if a.is_unspecified() => {
                ":: (every IPv6 and IPv4 address)".into()
            }
            ListenHost::Ip(IpAddr::V4(a)) if a.is_unspecified() => {
                "0.0.0.0 (every IPv4 address)".into()
            }
            ListenHost::Ip(ip) => ip.to_string(),
            ListenHost::Name(n) => n.clone(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SniSite {
    pub names: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_uri: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ocsp_file: Option<PathBuf>,
    pub key_uri: String,
}

impl Instance {
    pub fn new(address: Option<String>, port: u16, proxy_port: u16, key_uri: String) -> Self {
        Instance {
            address,
            port,
            proxy_port,
            fallback_port: None,
            versions: default_versions(),
            cipher_suites: None,
            session_cache: default_cache(),
            session_timeout: default_timeout(),
            tickets: true,
            handshake_timeout: default_handshake_timeout(),
            idle_timeout: 0,
            proxy_protocol: None,
            unknown_sni: UnknownSni::Default,
            alpn: Vec::new(),
            client_ca_file: None,
            client_auth: None,
            client_crl_file: None,
            pin_file: None,
            cert_file: None,
            cert_uri: None,
            chain_file: None,
            ocsp_file: None,
            key_uri,
            sni: Vec::new(),
        }
    }

    /// `PORT` or `ADDRESS-PORT`: the name used by `tlsproxycfg`, the systemd unit
    /// (`opencf-tlsproxy@NAME`) and in messages.
    pub fn name(&self) -> String {
        match &self.address {
            Some(a) => format!("{a}-{}", self.port),
            None => self.port.to_string(),
        }
    }

    /// The socket address to listen on.
    pub fn listen_addr(&self) -> String {
        match self.address.as_deref() {
            None => format!("0.0.0.0:{}", self.port),
            Some(a) if a.contains(':') && !a.starts_with('[') => format!("[{a}]:{}", self.port),
            Some(a) => format!("{a}:{}", self.port),
        }
    }

    /// Whether a connection to `127.0.0.1:port`, where the proxy sends clear text and
    /// fallbacks, reaches this instance's listener: the port, and an address that is
    /// 127.0.0.1 (or `localhost`) or a wildcard that covers it.
    fn takes_local(&self, port: u16) -> bool {
        let local = ListenHost::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let host = self.listen_host();
        self.port == port
            && (host == local
                || host.covers(&local)
                || host == ListenHost::Name("localhost".into()))
    }

    /// Every file the instance names (certificates, chains, OCSP responses, client CAs and
    /// CRLs, the PIN file), its SNI entries' included.
    pub fn files(&self) -> impl Iterator<Item = &Path> {
        [
            &self.cert_file,
            &self.chain_file,
            &self.ocsp_file,
            &self.client_ca_file,
            &self.client_crl_file,
            &self.pin_file,
        ]
        .into_iter()
        .chain(
            self.sni
                .iter()
                .flat_map(|s| [&s.cert_file, &s.chain_file, &s.ocsp_file]),
        )
        .filter_map(|f| f.as_deref())
    }

    /// Whether this instance is the one named by `address` and `port`.
    pub fn is(&self, address: Option<&str>, port: u16) -> bool {
        self.port == port && self.address.as_deref() == address
    }

    /// The address the listener is bound to, as far as the file tells without resolving
    /// names.
    fn listen_host(&self) -> ListenHost {
        let Some(a) = self.address.as_deref() else {
            return ListenHost::Ip(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        };
        let a = a
            .strip_prefix('[')
            .and_then(|x| x.strip_suffix(']'))
            .unwrap_or(a);
        match a.parse::<IpAddr>() {
            // An IPv4-mapped IPv6 address takes the IPv4 address's connections.
            Ok(IpAddr::V6(v6)) => {
                ListenHost::Ip(v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4))
            }
            Ok(ip) => ListenHost::Ip(ip),
            Err(_) => ListenHost::Name(a.to_ascii_lowercase()),
        }
    }

    /// Why this instance's listening socket and `other`'s cannot both be bound, if they
    /// cannot: the same port, and the same address or one address a wildcard that covers the
    /// other. `0.0.0.0` (or no address) covers every IPv4 address; `::` is bound dual-stack
    /// (the Linux default), so it covers every IPv6 and every IPv4 address. A host name is
    /// compared as written, and is taken to be covered by either wildcard.
    pub fn overlap(&self, other: &Instance) -> Option<String> {
        if self.port != other.port {
            return None;
        }
        let (a, b) = (self.listen_host(), other.listen_host());
        if a == b {
            return Some("the same address".into());
        }
        let why = [(&a, &b), (&b, &a)]
            .into_iter()
            .find(|(w, x)| w.covers(x))
            .map(|(w, x)| format!("{} covers {}", w.describe(), x.describe()));
        why
    }

    fn check(&self) -> Result<()> {
        let n = self.name();
        if let Some(a) = &self.address {
            check_address(a).map_err(|e| format!("instance {n}: {e}"))?;
        }
        let cache = u64::try_from(self.session_cache).unwrap_or(u64::MAX);
        for (what, value, max, unit) in [
            ("session_cache", cache, MAX_SESSION_CACHE as u64, "entries"),
            (
                "session_timeout",
                self.session_timeout,
                MAX_SESSION_TIMEOUT,
                "seconds",
            ),
            (
                "idle_timeout",
                self.idle_timeout,
                MAX_IDLE_TIMEOUT,
                "seconds (0: never)",
            ),
        ] {
            if value > max {
                return Err(format!(
                    "instance {n}: {what} = {value}: at most {max} {unit}"
                ));
            }
        }
        for (what, port) in [
            ("port", Some(self.port)),
            ("proxy_port", Some(self.proxy_port)),
            ("fallback_port", self.fallback_port),
        ] {
            if port == Some(0) {
                return Err(format!(
                    "instance {n}: {what} = 0: a port is a number from 1 to 65535"
                ));
            }
        }
        for v in &self.versions {
            if v != "1.2" && v != "1.3" {
                return Err(format!(
                    "instance {n}: unknown TLS version {v:?} (1.2 or 1.3)"
                ));
            }
        }
        if !(1..=MAX_HANDSHAKE_TIMEOUT).contains(&self.handshake_timeout) {
            return Err(format!(
                "instance {n}: handshake_timeout = {}: must be between 1 and {MAX_HANDSHAKE_TIMEOUT} seconds",
                self.handshake_timeout
            ));
        }
        if self.versions.is_empty() {
            return Err(format!("instance {n}: no TLS version"));
        }
        if self.cert_file.is_some() == self.cert_uri.is_some() {
            return Err(format!(
                "instance {n}: exactly one of cert_file and cert_uri is needed"
            ));
        }
        if self.chain_file.is_some() && self.cert_uri.is_none() {
            return Err(format!(
                "instance {n}: chain_file goes with cert_uri (a cert_file holds its own chain)"
            ));
        }
        for s in &self.sni {
            if s.cert_file.is_some() == s.cert_uri.is_some() || s.names.is_empty() {
                return Err(format!(
                    "instance {n}: an sni entry needs names and exactly one of cert_file and cert_uri"
                ));
            }
            if s.chain_file.is_some() && s.cert_uri.is_none() {
                return Err(format!(
                    "instance {n}: an sni entry's chain_file goes with its cert_uri"
                ));
            }
        }
        check_alpn(&self.alpn).map_err(|e| format!("instance {n}: {e}"))?;
        if self.client_ca_file.is_none()
            && (self.client_auth.is_some() || self.client_crl_file.is_some())
        {
            return Err(format!(
                "instance {n}: client_auth and client_crl_file go with client_ca_file"
            ));
        }
        if self.unknown_sni == UnknownSni::Fallback && self.fallback_port.is_none() {
            return Err(format!(
                "instance {n}: unknown_sni = \"fallback\" needs fallback_port"
            ));
        }
        Ok(())
    }
}

impl Config {
    /// The instances a daemon started with `--instance ONLY` serves (all without it).
    pub fn served<'a>(&'a self, only: Option<&'a str>) -> impl Iterator<Item = &'a Instance> {
        self.instances
            .iter()
            .filter(move |i| only.is_none_or(|o| o == i.name()))
    }
    /// Reads a file; a missing file is an empty configuration (for `tlsproxycfg`, which
    /// creates the file, and for a daemon's start, which then waits for `SIGHUP`). The file
    /// must be a regular file of at most [`MAX_CONFIG_FILE`] bytes.
    pub fn load(path: &Path) -> Result<Config> {
        Self::read(path, true)
    }

    /// Reads a file that must exist: a running daemon's reload. A file that has gone (moved,
    /// deleted, a mount missing) is an error, so that the reload changes nothing, rather than
    /// an empty configuration that would stop every instance; `tlsproxycfg delete` of the
    /// last instance writes a file without instances, which such a reload applies.
    pub fn load_existing(path: &Path) -> Result<Config> {
        Self::read(path, false)
    }

    fn read(path: &Path, missing_is_empty: bool) -> Result<Config> {
        let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
        let bytes = match read_bounded(path, MAX_CONFIG_FILE) {
            Ok(b) => b,
            Err(e) if missing_is_empty && e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Config::default())
            }
            Err(e) => return Err(at(&e)),
        };
        let text = String::from_utf8(bytes).map_err(|_| at(&"not UTF-8 text"))?;
        Self::parse(&text).map_err(|e| at(&e))
    }

    pub fn parse(text: &str) -> Result<Config> {
        let c: Config = toml::from_str(text).map_err(|e| e.to_string())?;
        if let Some(n) = c.workers {
            check_workers(n)?;
        }
        if let Some(n) = c.max_offloaded_signatures {
            if !(1..=MAX_OFFLOADED_SIGNATURES).contains(&n) {
                return Err(format!(
                    "max_offloaded_signatures = {n}: must be between 1 and {MAX_OFFLOADED_SIGNATURES}"
                ));
            }
        }
        if let Some(t) = c.drain_timeout.filter(|t| *t > MAX_DRAIN_TIMEOUT) {
            return Err(format!(
                "drain_timeout = {t}: at most {MAX_DRAIN_TIMEOUT} seconds"
            ));
        }
        for (k, i) in c.instances.iter().enumerate() {
            i.check()?;
            // The proxy connects to 127.0.0.1 for the application and the fallback: a port
            // that is a listener of this file would send it back to the proxy. For the
            // fallback that is a loop without end (each hop hands the same ClientHello on
            // again), which used every descriptor of the process.
            for (what, port) in [
                ("proxy_port", Some(i.proxy_port)),
                ("fallback_port", i.fallback_port),
            ] {
                let Some(port) = port else { continue };
                if let Some(j) = c.instances.iter().find(|j| j.takes_local(port)) {
                    return Err(format!(
                        "instance {}: {what} = {port} is where instance {} listens: the \
                         proxy would connect to itself (the application and the fallback \
                         listen on 127.0.0.1, on ports of their own)",
                        i.name(),
                        j.name()
                    ));
                }
            }
            for earlier in &c.instances[..k] {
                if earlier.is(i.address.as_deref(), i.port) {
                    return Err(format!("instance {} is defined twice", i.name()));
                }
                if let Some(why) = earlier.overlap(i) {
                    return Err(format!(
                        "instance {} overlaps instance {}: both listen on port {} and {why}; \
                         a port takes one instance per address, and one listening on all \
                         addresses takes that port alone",
                        i.name(),
                        earlier.name(),
                        i.port
                    ));
                }
            }
        }
        Ok(c)
    }

    /// Writes the file atomically (temporary file in the same directory, then rename). An
    /// existing file keeps its mode, and its owner and group where this process may set them
    /// (else the group and others lose their access); a new file gets [`NEW_FILE_MODE`].
    pub fn save(&self, path: &Path) -> Result<()> {
        use std::io::Write;
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
        let text = toml::to_string_pretty(self).map_err(|e| e.to_string())?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let old = std::fs::metadata(path).ok();
        let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
        let body = format!("# opencf-tlsproxy instances (written by tlsproxycfg)\n{text}");
        let _ = std::fs::remove_file(&tmp);
        let write = || -> std::io::Result<()> {
            // Readable by the owner alone until the mode is set.
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            let mut mode = old.as_ref().map_or(NEW_FILE_MODE, |m| m.mode() & 0o777);
            if let Some(m) = &old {
                let now = f.metadata()?;
                if (now.uid(), now.gid()) != (m.uid(), m.gid())
                    && std::os::unix::fs::fchown(&f, Some(m.uid()), Some(m.gid())).is_err()
                    && std::os::unix::fs::fchown(&f, None, Some(m.gid())).is_err()
                {
                    mode &= 0o700;
                }
            }
            f.set_permissions(std::fs::Permissions::from_mode(mode))?;
            f.write_all(body.as_bytes())?;
            f.sync_all()
        };
        if let Err(e) = write() {
            let _ = std::fs::remove_file(&tmp);
            return Err(format!("{}: {e}", tmp.display()));
        }
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("{}: {e}", path.display())
        })
    }

    /// The default file: `/etc/opencf/tlsproxy.toml` for root, else
    /// `$XDG_CONFIG_HOME/opencf/tlsproxy.toml` (`~/.config` when unset).
    pub fn default_path() -> PathBuf {
        if rustix::process::geteuid().is_root() {
            return PathBuf::from("/etc/opencf/tlsproxy.toml");
        }
        let base = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/".into()))
                    .join(".config")
            });
        base.join("opencf").join("tlsproxy.toml")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_checks() {
        let mut c = Config::default();
        let mut i = Instance::new(None, 8443, 8080, "pkcs11:object=k".into());
        i.cert_file = Some("/c.pem".into());
        i.idle_timeout = 300;
        i.proxy_protocol = Some(ProxyProtocol::V2);
        i.alpn = vec!["h2".into(), "http/1.1".into()];
        i.client_ca_file = Some("/clients.pem".into());
        i.client_auth = Some(ClientAuth::Optional);
        i.client_crl_file = Some("/clients.crl".into());
        i.sni.push(SniSite {
            names: vec!["a.example".into()],
            cert_file: None,
            cert_uri: Some("pkcs11:object=a;type=cert".into()),
            chain_file: Some("/ca.pem".into()),
            ocsp_file: Some("/a.ocsp".into()),
            key_uri: "pkcs11:object=a".into(),
        });
        c.instances.push(i.clone());
        let text = toml::to_string_pretty(&c).unwrap();
        assert_eq!(Config::parse(&text).unwrap(), c);
        assert_eq!(i.name(), "8443");
        assert_eq!(i.listen_addr(), "0.0.0.0:8443");
        let mut j = i.clone();
        j.address = Some("::1".into());
        assert_eq!(j.listen_addr(), "[::1]:8443");
        c.instances.push(i.clone());
        let text = toml::to_string_pretty(&c).unwrap();
        assert!(Config::parse(&text).unwrap_err().contains("twice"));
        assert!(
            Config::parse("[[instance]]\nport = 1\nproxy_port = 2\nkey_uri = \"x\"\n")
                .unwrap_err()
                .contains("cert_file")
        );
        assert!(Config::parse("bogus = 1").is_err());
        let one = |extra: &str| {
            Config::parse(&format!(
                "[[instance]]\nport = 1\nproxy_port = 2\nkey_uri = \"x\"\ncert_file = \"/c\"\n{extra}"
            ))
        };
        let plain = &one("").unwrap().instances[0];
        assert_eq!((plain.idle_timeout, plain.proxy_protocol), (0, None));
        let v1 = &one("proxy_protocol = \"v1\"\nidle_timeout = 5")
            .unwrap()
            .instances[0];
        assert_eq!(
            (v1.idle_timeout, v1.proxy_protocol),
            (5, Some(ProxyProtocol::V1))
        );
        assert!(one("proxy_protocol = \"v3\"").unwrap_err().contains("v3"));
        assert!(one("idle_timeout = -1").is_err());
        assert!(one("chain_file = \"/ca.pem\"")
            .unwrap_err()
            .contains("chain_file goes with cert_uri"));
        assert!(one("idle_timeout = 31536001")
            .unwrap_err()
            .contains("at most"));
        for bad in [
            "handshake_timeout = 0",
            "handshake_timeout = 18446744073709551615",
        ] {
            assert!(one(bad).is_err(), "{bad}");
        }
        assert!(one("handshake_timeout = 0")
            .unwrap_err()
            .contains("between 1 and 3600"));
        let h2 = &one("alpn = [\"h2\", \"http/1.1\"]").unwrap().instances[0];
        assert_eq!(h2.alpn, ["h2", "http/1.1"]);
        assert!(plain.alpn.is_empty());
        for (bad, why) in [
            ("alpn = [\"\"]", "not a protocol name"),
            ("alpn = [\"h 2\"]", "not a protocol name"),
            ("alpn = [\"h2\", \"h2\"]", "named twice"),
        ] {
            assert!(one(bad).unwrap_err().contains(why), "{bad}");
        }
        let m = &one("client_ca_file = \"/ca.pem\"\nclient_auth = \"optional\"")
            .unwrap()
            .instances[0];
        assert_eq!(m.client_auth, Some(ClientAuth::Optional));
        for bad in ["client_auth = \"required\"", "client_crl_file = \"/c.crl\""] {
            assert!(one(bad).unwrap_err().contains("go with client_ca_file"));
        }
        assert!(one("client_ca_file = \"/ca.pem\"\nclient_auth = \"maybe\"").is_err());
        let long = format!("alpn = [\"{}\"]", "x".repeat(256));
        assert!(one(&long).unwrap_err().contains("not a protocol name"));
        let many: Vec<String> = (0..17).map(|i| format!("\"p{i}\"")).collect();
        assert!(one(&format!("alpn = [{}]", many.join(",")))
            .unwrap_err()
            .contains("at most 16"));
        assert_eq!(Config::parse("workers = 4").unwrap().workers, Some(4));
        let c = Config::parse("max_offloaded_signatures = 16").unwrap();
        assert_eq!(c.max_offloaded_signatures, Some(16));
        assert_eq!(Config::parse("").unwrap().max_offloaded_signatures, None);
        for bad in [
            "max_offloaded_signatures = 0",
            "max_offloaded_signatures = 401",
        ] {
            assert!(
                Config::parse(bad)
                    .unwrap_err()
                    .contains("between 1 and 400"),
                "{bad}"
            );
        }
        assert_eq!(Config::parse("").unwrap().workers, None);
        assert_eq!(
            Config::parse("drain_timeout = 0").unwrap().drain_timeout,
            Some(0)
        );
        assert!(Config::parse("drain_timeout = 86401")
            .unwrap_err()
            .contains("at most 86400"));
        assert!(Config::parse("drain_timeout = -1").is_err());
        for bad in ["workers = 0", "workers = 65"] {
            assert!(Config::parse(bad).unwrap_err().contains("between 1 and 64"));
        }
    }

    #[test]
    fn a_proxy_or_fallback_port_that_is_a_listener_is_refused() {
        let one = |address: &str, port: u16, proxy: u16, fallback: u16| {
            Config::parse(&format!(
                "[[instance]]\n{address}port = {port}\nproxy_port = {proxy}\n\
                 fallback_port = {fallback}\nkey_uri = \"x\"\ncert_file = \"/c\"\n"
            ))
        };
        // Its own port, on every address that takes 127.0.0.1's connections.
        for address in [
            "",
            "address = \"127.0.0.1\"\n",
            "address = \"::\"\n",
            "address = \"localhost\"\n",
        ] {
            let e = one(address, 8443, 8080, 8443).unwrap_err();
            assert!(
                e.contains("fallback_port = 8443 is where instance"),
                "{address}: {e}"
            );
            let e = one(address, 8443, 8443, 9443).unwrap_err();
            assert!(
                e.contains("proxy_port = 8443 is where instance"),
                "{address}: {e}"
            );
        }
        // Another instance's port.
        let e = Config::parse(
            "[[instance]]\nport = 8443\nproxy_port = 8080\nfallback_port = 9443\n\
             key_uri = \"x\"\ncert_file = \"/c\"\n\
             [[instance]]\naddress = \"127.0.0.1\"\nport = 9443\nproxy_port = 8081\n\
             key_uri = \"x\"\ncert_file = \"/c\"\n",
        )
        .unwrap_err();
        assert!(e.contains("where instance 127.0.0.1-9443 listens"), "{e}");
        // A listener 127.0.0.1 does not reach is no loop.
        one("address = \"192.0.2.1\"\n", 8443, 8080, 8443).unwrap();
        one("address = \"::1\"\n", 8443, 8443, 9443).unwrap();
    }

    fn with_addresses(list: &[(Option<&str>, u16)]) -> Result<Config> {
        let mut text = String::new();
        for (a, port) in list {
            text.push_str("[[instance]]\n");
            if let Some(a) = a {
                text.push_str(&format!("address = \"{a}\"\n"));
            }
            text.push_str(&format!(
                "port = {port}\nproxy_port = 2\nkey_uri = \"x\"\ncert_file = \"/c\"\n"
            ));
        }
        Config::parse(&text)
    }

    #[test]
    fn overlapping_listeners_refused() {
        let refused = [
            [(None, 443), (Some("127.0.0.1"), 443)],
            [(Some("127.0.0.1"), 443), (Some("0.0.0.0"), 443)],
            [(None, 443), (Some("0.0.0.0"), 443)],
            [(Some("::"), 443), (None, 443)],
            [(Some("::"), 443), (Some("127.0.0.1"), 443)],
            [(Some("::1"), 443), (Some("[::]"), 443)],
            [(Some("::1"), 443), (Some("[::1]"), 443)],
            [(Some("::ffff:127.0.0.1"), 443), (Some("127.0.0.1"), 443)],
            [(Some("localhost"), 443), (None, 443)],
            [(Some("localhost"), 443), (Some("LocalHost"), 443)],
        ];
        for pair in refused {
            let e = with_addresses(&pair).unwrap_err();
            assert!(e.contains("overlaps instance"), "{pair:?}: {e}");
        }
        let e = with_addresses(&[(Some("127.0.0.1"), 443), (None, 443)]).unwrap_err();
        assert!(
            e.contains("0.0.0.0 (every IPv4 address) covers 127.0.0.1"),
            "{e}"
        );
        let accepted = [
            [(None, 443), (None, 444)],
            [(Some("127.0.0.1"), 443), (Some("127.0.0.2"), 443)],
            [(None, 443), (Some("::1"), 443)],
            [(Some("127.0.0.1"), 443), (Some("::1"), 443)],
            [(Some("::1"), 443), (Some("::2"), 443)],
            [(Some("localhost"), 443), (Some("127.0.0.1"), 443)],
        ];
        for pair in accepted {
            assert!(with_addresses(&pair).is_ok(), "{pair:?}");
        }
        let e = with_addresses(&[(Some("127.0.0.1"), 443), (Some("127.0.0.1"), 443)]);
        assert!(e.unwrap_err().contains("defined twice"));
    }

    #[test]
    fn addresses_and_session_limits_checked() {
        let one = |extra: &str| {
            Config::parse(&format!(
                "[[instance]]\nport = 1\nproxy_port = 2\nkey_uri = \"x\"\ncert_file = \"/c\"\n{extra}"
            ))
        };
        for good in [
            "127.0.0.1",
            "::1",
            "[::1]",
            "::ffff:127.0.0.1",
            "localhost",
            "www.example.org",
            "www.example.org.",
            "xn--bcher-kva.example",
        ] {
            assert!(one(&format!("address = {good:?}")).is_ok(), "{good}");
        }
        for bad in [
            "",
            "not an address!",
            "127.0.0.1:443",
            "[127.0.0.1]",
            "-bad.example",
            "a..b",
            ".",
            &"a".repeat(64),
        ] {
            let e = one(&format!("address = {bad:?}")).unwrap_err();
            assert!(
                e.contains("is neither an IP address nor a host name"),
                "{bad}: {e}"
            );
        }
        assert!(one("session_cache = 1000000\nsession_timeout = 31536000").is_ok());
        for (bad, why) in [
            ("session_cache = 1000001", "at most 1000000 entries"),
            (
                "session_cache = 9223372036854775807",
                "at most 1000000 entries",
            ),
            ("session_timeout = 31536001", "at most 31536000 seconds"),
            (
                "session_timeout = 9223372036854775807",
                "at most 31536000 seconds",
            ),
        ] {
            let e = one(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn a_reload_needs_the_file_and_reads_it_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.toml");
        // tlsproxycfg and a first start: no file, no instance.
        assert_eq!(Config::load(&missing).unwrap(), Config::default());
        // A reload: the file is needed.
        let e = Config::load_existing(&missing).unwrap_err();
        assert!(e.contains("none.toml") && e.contains("No such file"), "{e}");
        let empty = dir.path().join("empty.toml");
        std::fs::write(&empty, "").unwrap();
        assert_eq!(Config::load_existing(&empty).unwrap(), Config::default());
        let zero = dir.path().join("zero.toml");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        for load in [Config::load, Config::load_existing] {
            let e = load(&zero).unwrap_err();
            assert!(e.contains("not a regular file"), "{e}");
        }
        let big = dir.path().join("big.toml");
        std::fs::write(&big, "#".repeat(MAX_CONFIG_FILE as usize + 1)).unwrap();
        let e = Config::load(&big).unwrap_err();
        assert!(e.contains("larger than 1048576 bytes"), "{e}");
    }

    #[test]
    fn port_zero_refused() {
        let one = |extra: &str, port: u16, proxy: u16| {
            Config::parse(&format!(
                "[[instance]]\nport = {port}\nproxy_port = {proxy}\nkey_uri = \"x\"\ncert_file = \"/c\"\n{extra}"
            ))
        };
        assert!(one("", 0, 2).unwrap_err().contains("port = 0"));
        assert!(one("", 1, 0).unwrap_err().contains("proxy_port = 0"));
        assert!(one("fallback_port = 0", 1, 2)
            .unwrap_err()
            .contains("fallback_port = 0"));
        assert!(one("fallback_port = 3", 1, 2).is_ok());
    }

    #[test]
    fn save_keeps_the_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let mut c = Config::default();
        let mut i = Instance::new(None, 8443, 8080, "pkcs11:object=k?pin-value=1234".into());
        i.cert_file = Some("/c.pem".into());
        c.instances.push(i);
        let new = dir.path().join("new.toml");
        c.save(&new).unwrap();
        assert_eq!(mode(&new), NEW_FILE_MODE);
        assert_eq!(Config::load(&new).unwrap(), c);
        for m in [0o600, 0o640, 0o644] {
            std::fs::set_permissions(&new, std::fs::Permissions::from_mode(m)).unwrap();
            c.save(&new).unwrap();
            assert_eq!(mode(&new), m);
        }
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file left");
    }
}
