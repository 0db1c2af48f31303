//! The PKCS#11 side: one module per process, tokens found by label with a pool of sessions
//! (a PKCS#11 session runs one operation at a time; `C_Login` is per token and application, so
//! the pool logs in once and every later session shares that state), and the rustls signing
//! keys whose private half never leaves the token. A slow token's signatures run with
//! [`tokio::task::block_in_place`], so that they do not hold up the other connections, and a
//! watchdog keeps the runtime moving while a signature holds a runtime thread for long.

use crate::stats;
use crate::uri::Pkcs11Uri;
use crate::Result;
use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::error::{Error as CkError, RvError};
use cryptoki::mechanism::eddsa::{EddsaParams, EddsaSignatureScheme};
use cryptoki::mechanism::rsa::{PkcsMgfType, PkcsPssParams};
use cryptoki::mechanism::{Mechanism, MechanismType};
use cryptoki::object::{Attribute, AttributeType, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::{Session, UserType};
use cryptoki::slot::Slot;
use cryptoki::types::AuthPin;
use rustls::pki_types::CertificateDer;
use rustls::sign::{Signer, SigningKey};
use rustls::{SignatureAlgorithm, SignatureScheme};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Idle sessions kept per token; more are opened when more signatures run at once.
const POOL_MAX: usize = 64;

/// A token whose signatures take this long on average is slow (see [`Signatures`]): its
/// signatures run off the runtime's threads. A software or accelerated RSA-2048 signature takes
/// a tenth of it, and on a loaded machine the wall-clock time of such a signature now and then
/// exceeds a millisecond (its thread waits for the CPU), which the mean absorbs.
const SLOW_SIGNATURE: Duration = Duration::from_millis(3);

/// A token one of whose signatures has been running this long is slow at once, before its
/// mean knows: a token that stops answering. A fast signature rarely waits this long for the
/// CPU, and one that does only sends the next signature off the runtime's threads.
const STUCK_SIGNATURE: Duration = Duration::from_millis(10);

/// How often the watchdog looks at the signatures running on runtime threads ([`watchdog`]).
const WATCHDOG_TICK: Duration = Duration::from_millis(100);

/// Signatures of slow tokens that may run at once off the runtime's threads, per process, by
/// default (`max_offloaded_signatures`).
pub const DEFAULT_MAX_OFFLOADED_SIGNATURES: usize = 256;

/// The limit in force (set from the instance file at start and at each reload).
static MAX_OFFLOADED: AtomicUsize = AtomicUsize::new(DEFAULT_MAX_OFFLOADED_SIGNATURES);

/// Signatures running off the runtime's threads now, in this process.
static OFFLOADED: AtomicUsize = AtomicUsize::new(0);

/// Sets how many signatures of slow tokens may run at once off the runtime's threads in this
/// process; beyond it a slow token's signature is refused at once.
pub fn set_max_offloaded_signatures(n: usize) {
    MAX_OFFLOADED.store(n, Relaxed);
}

/// DER of the named-curve OIDs (CKA_EC_PARAMS).
pub const P256_PARAMS: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
pub const P384_PARAMS: &[u8] = &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22];
/// CKA_EC_PARAMS of an Ed25519 key: the OID 1.3.101.112 (RFC 8410).
pub const ED25519_PARAMS: &[u8] = &[0x06, 0x03, 0x2b, 0x65, 0x70];
/// The same curve named by PKCS#11 3.0's printable string `edwards25519`.
const ED25519_NAME: &[u8] = b"\x13\x0cedwards25519";

fn ck(what: &str, e: CkError) -> String {
    format!("{what}: {e}")
}

/// The PKCS#11 module of the process (initialized once, never finalized while running).
pub struct Module {
    ctx: Pkcs11,
    pub path: PathBuf,
    tokens: Mutex<HashMap<String, Arc<Token>>>,
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Module({})", self.path.display())
    }
}

/// `libopencf.so` beside the executable (the build tree), else in `../lib` (an installed
/// `PREFIX/bin`, `PREFIX/lib` layout), else `/usr/lib/opencf/libopencf.so`.
pub fn default_module() -> PathBuf {
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
    {
        for p in [dir.join("libopencf.so"), dir.join("../lib/libopencf.so")] {
            if p.exists() {
                return p;
            }
        }
    }
    PathBuf::from("/usr/lib/opencf/libopencf.so")
}

/// Reads a PIN file: its first line.
pub fn read_pin_file(path: &Path) -> Result<String> {
    let bytes = crate::files::read(path, crate::files::MAX_CONFIG_FILE)?;
    let text =
        String::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8 text", path.display()))?;
    Ok(text.lines().next().unwrap_or("").to_string())
}

/// The PIN for a URI: its `pin-value`, its `pin-source=file:…`, else the given file.
pub fn pin_for(uri: &Pkcs11Uri, pin_file: Option<&Path>) -> Result<Option<String>> {
    if let Some(v) = &uri.pin_value {
        return Ok(Some(v.clone()));
    }
    if let Some(src) = &uri.pin_source {
        let path = src.strip_prefix("file:").unwrap_or(src);
        return read_pin_file(Path::new(path)).map(Some);
    }
    pin_file.map(read_pin_file).transpose()
}

impl Module {
    pub fn open(path: &Path) -> Result<Arc<Module>> {
        let ctx = Pkcs11::new(path).map_err(|e| ck(&path.display().to_string(), e))?;
        ctx.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
            .map_err(|e| ck("C_Initialize", e))?;
        Ok(Arc::new(Module {
            ctx,
            path: path.to_path_buf(),
            tokens: Mutex::new(HashMap::new()),
        }))
    }

    /// The slot whose token has this label (the first slot with a token when `None`).
    pub fn find_slot(&self, label: Option<&str>) -> Result<Slot> {
        let slots = self
            .ctx
            .get_slots_with_token()
            .map_err(|e| ck("C_GetSlotList", e))?;
        for s in &slots {
            let info = self
                .ctx
                .get_token_info(*s)
                .map_err(|e| ck("C_GetTokenInfo", e))?;
            if label.is_none_or(|l| info.label().trim_end() == l) {
                return Ok(*s);
            }
        }
        Err(format!("no token labelled {:?}", label.unwrap_or("(any)")))
    }

    /// The token with this label, logged in with `pin` on first use.
    pub fn token(&self, label: Option<&str>, pin: Option<String>) -> Result<Arc<Token>> {
        let key = label.unwrap_or("").to_string();
        let mut tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = tokens.get(&key) {
            if let Some(p) = pin {
                t.set_pin(p);
            }
            return Ok(t.clone());
        }
        let slot = self.find_slot(label)?;
        let mechs = self
            .ctx
            .get_mechanism_list(slot)
            .map_err(|e| ck("C_GetMechanismList", e))?;
        let t = Arc::new(Token {
            ctx: self.ctx.clone(),
            slot,
            label: key.clone(),
            pin: Mutex::new(pin.map(AuthPin::from)),
            pool: Mutex::new(Vec::new()),
            mechs,
            signatures: Signatures::default(),
        });
        // Log in now, so that a wrong or expired PIN shows at start-up.
        t.with_session(|_| Ok(()))?;
        tokens.insert(key, t.clone());
        Ok(t)
    }
}

/// One token and its session pool.
pub struct Token {
    ctx: Pkcs11,
    slot: Slot,
    pub label: String,
    pin: Mutex<Option<AuthPin>>,
    pool: Mutex<Vec<Session>>,
    mechs: Vec<MechanismType>,
    signatures: Signatures,
}

/// What the proxy knows of a token's signatures: the running mean of their times (wall clock,
/// in nanoseconds; each new time weighs an eighth) and when each of those running now began.
/// A token kept across reloads keeps it.
#[derive(Default)]
struct Signatures {
    mean_ns: AtomicU64,
    running: Mutex<Vec<(u64, Instant)>>,
    next: AtomicU64,
}

impl Signatures {
    /// A signature begins: its number, and whether the token is slow now (a mean of
    /// [`SLOW_SIGNATURE`] or more, or a signature running for [`STUCK_SIGNATURE`]).
    fn begin(&self) -> (u64, bool) {
        let id = self.next.fetch_add(1, Relaxed);
        let now = Instant::now();
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let slow = self.mean_ns.load(Relaxed) >= SLOW_SIGNATURE.as_nanos() as u64
            || running
                .iter()
                .any(|(_, t)| now.duration_since(*t) >= STUCK_SIGNATURE);
        running.push((id, now));
        (id, slow)
    }

    /// Signature `id` has ended, after `took` (`None`: it never reached the token, and its
    /// time says nothing of it).
    fn end(&self, id: u64, took: Option<Duration>) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = running.iter().position(|(n, _)| *n == id) {
            running.swap_remove(i);
        }
        drop(running);
        let Some(took) = took else { return };
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let _ = self.mean_ns.fetch_update(Relaxed, Relaxed, |mean| {
            Some((mean - mean / 8).saturating_add(ns / 8))
        });
    }
}

/// Signatures running on runtime threads now, and how many have ended, in this process.
static INLINE_RUNNING: AtomicUsize = AtomicUsize::new(0);
static INLINE_ENDED: AtomicU64 = AtomicU64::new(0);

/// A signature running on a runtime thread, counted for the [`watchdog`] while it runs.
struct Inline;

impl Inline {
    /// `rt`: the runtime whose thread the signature holds (the watchdog's, from the first).
    fn begin(rt: tokio::runtime::Handle) -> Inline {
        static WATCHDOG: std::sync::OnceLock<()> = std::sync::OnceLock::new();
        WATCHDOG.get_or_init(|| {
            let spawned = std::thread::Builder::new()
                .name("tlsproxy-watchdog".into())
                .spawn(move || watchdog(rt));
            if let Err(e) = spawned {
                crate::log_line!("cannot start the signature watchdog: {e}");
            }
        });
        INLINE_RUNNING.fetch_add(1, Relaxed);
        Inline
    }
}

impl Drop for Inline {
    fn drop(&mut self) {
        INLINE_ENDED.fetch_add(1, Relaxed);
        INLINE_RUNNING.fetch_sub(1, Relaxed);
    }
}

/// Keeps the runtime moving while a signature holds a runtime thread for long (a token that
/// stops answering, before the proxy knows it is slow). tokio wakes a parked worker only when
/// work is scheduled, and the I/O that would schedule it waits for a worker to poll it: with
/// one worker held, the others may sleep on while connections wait (measured: a two-thread
/// runtime with one thread held 3 s did not serve an established connection for the rest of
/// that time). So each tick in which a signature is running on a runtime thread and none has
/// ended, the watchdog spawns an empty task from outside; that wakes a parked worker, which
/// then polls the I/O.
fn watchdog(rt: tokio::runtime::Handle) {
    let mut ended = INLINE_ENDED.load(Relaxed);
    loop {
        std::thread::sleep(WATCHDOG_TICK);
        let now = INLINE_ENDED.load(Relaxed);
        if INLINE_RUNNING.load(Relaxed) > 0 && now == ended {
            stats::inc(stats::get().watchdog_wakeups);
            drop(rt.spawn(async {}));
        }
        ended = now;
    }
}

/// One of the places for a signature off the runtime's threads, given back on drop.
struct Offloaded;

impl Offloaded {
    fn take() -> Option<Offloaded> {
        let max = MAX_OFFLOADED.load(Relaxed);
        OFFLOADED
            .fetch_update(Relaxed, Relaxed, |n| (n < max).then_some(n + 1))
            .ok()
            .map(|_| Offloaded)
    }
}

impl Drop for Offloaded {
    fn drop(&mut self) {
        OFFLOADED.fetch_sub(1, Relaxed);
    }
}

/// The multi-thread runtime whose worker this thread is, if any: only there does a long
/// signature hold up other work, and only there may [`tokio::task::block_in_place`] run (it
/// panics on a current-thread runtime; outside a runtime nothing else waits).
fn multi_thread_runtime() -> Option<tokio::runtime::Handle> {
    tokio::runtime::Handle::try_current()
        .ok()
        .filter(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token({:?}, slot {})", self.label, self.slot.id())
    }
}

fn session_lost(e: &CkError) -> bool {
    matches!(
        e,
        CkError::Pkcs11(
            RvError::SessionHandleInvalid
                | RvError::SessionClosed
                | RvError::DeviceRemoved
                | RvError::TokenNotPresent,
            _
        )
    )
}

impl Token {
    fn set_pin(&self, pin: String) {
        *self.pin.lock().unwrap_or_else(|p| p.into_inner()) = Some(AuthPin::from(pin));
    }

    pub fn has_mechanism(&self, m: MechanismType) -> bool {
        self.mechs.contains(&m)
    }

    fn login(&self, s: &Session) -> Result<()> {
        let pin = self.pin.lock().unwrap_or_else(|p| p.into_inner());
        let Some(pin) = pin.as_ref() else {
            return Ok(());
        };
        match s.login(UserType::User, Some(pin)) {
            Ok(()) | Err(CkError::Pkcs11(RvError::UserAlreadyLoggedIn, _)) => Ok(()),
            Err(e) => Err(ck(&format!("C_Login on token {:?}", self.label), e)),
        }
    }

    fn open_session(&self) -> Result<Session> {
        let s = self
            .ctx
            .open_rw_session(self.slot)
            .map_err(|e| ck("C_OpenSession", e))?;
        self.login(&s)?;
        Ok(s)
    }

    /// Runs `f` on a pooled session (opening one if none is idle). A session the token
    /// reports as gone is dropped; `CKR_USER_NOT_LOGGED_IN` triggers one new login and a retry.
    pub fn with_session<R>(
        &self,
        f: impl Fn(&Session) -> std::result::Result<R, CkError>,
    ) -> Result<R> {
        let idle = self.pool.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let s = match idle {
            Some(s) => s,
            None => self.open_session()?,
        };
        let mut r = f(&s);
        if let Err(CkError::Pkcs11(RvError::UserNotLoggedIn, _)) = &r {
            self.login(&s)?;
            r = f(&s);
        }
        match &r {
            Err(e) if session_lost(e) => drop(s),
            _ => {
                let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
                if pool.len() < POOL_MAX {
                    pool.push(s);
                }
            }
        }
        r.map_err(|e| ck(&format!("token {:?}", self.label), e))
    }

    /// Finds exactly one object of `class` named by the URI.
    pub fn find(&self, uri: &Pkcs11Uri, class: ObjectClass) -> Result<ObjectHandle> {
        let mut t = vec![Attribute::Class(class)];
        if let Some(o) = &uri.object {
            t.push(Attribute::Label(o.as_bytes().to_vec()));
        }
        if let Some(id) = &uri.id {
            t.push(Attribute::Id(id.clone()));
        }
        let found = self.with_session(|s| s.find_objects(&t))?;
        match found.as_slice() {
            [h] => Ok(*h),
            [] => Err(format!(
                "no {class} object matches {uri} in token {:?}",
                self.label
            )),
            _ => {
                let ids = self.with_session(|s| {
                    found
                        .iter()
                        .map(|h| s.get_attributes(*h, &[AttributeType::Id]))
                        .collect::<std::result::Result<Vec<_>, _>>()
                });
                let ids: Vec<Vec<u8>> = ids
                    .unwrap_or_default()
                    .into_iter()
                    .map(|a| match a.first() {
                        Some(Attribute::Id(id)) => id.clone(),
                        _ => Vec::new(),
                    })
                    .collect();
                Err(ambiguous(uri, class, found.len(), &ids, &self.label))
            }
        }
    }

    /// The DER value of a certificate object.
    pub fn certificate(&self, uri: &Pkcs11Uri) -> Result<CertificateDer<'static>> {
        let h = self.find(uri, ObjectClass::CERTIFICATE)?;
        let attrs = self.with_session(|s| s.get_attributes(h, &[AttributeType::Value]))?;
        match attrs.into_iter().next() {
            Some(Attribute::Value(v)) => Ok(CertificateDer::from(v)),
            _ => Err("certificate object has no CKA_VALUE".into()),
        }
    }
}

/// Kind of a private key in the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// RSA; `pss_combined` when the token has CKM_SHA256_RSA_PKCS_PSS (hashing in the token).
    Rsa {
        bits: usize,
        pss_combined: bool,
    },
    EcP256,
    EcP384,
    /// EdDSA on edwards25519 (`CKK_EC_EDWARDS`), signed with `CKM_EDDSA`.
    Ed25519,
}

impl KeyKind {
    /// The TLS signature algorithm of such a key (which TLS 1.2 suites fit it).
    pub fn algorithm(self) -> SignatureAlgorithm {
        match self {
            KeyKind::Rsa { .. } => SignatureAlgorithm::RSA,
            KeyKind::EcP256 | KeyKind::EcP384 => SignatureAlgorithm::ECDSA,
            KeyKind::Ed25519 => SignatureAlgorithm::ED25519,
        }
    }
}

struct KeyInner {
    token: Arc<Token>,
    handle: ObjectHandle,
    kind: KeyKind,
    name: String,
}

/// A private key in a token, usable by rustls as a [`SigningKey`].
#[derive(Clone)]
pub struct TokenKey(Arc<KeyInner>);

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenKey({}, {:?})", self.0.name, self.0.kind)
    }
}

impl TokenKey {
    /// Resolves `pkcs11:…;type=private` in the module.
    pub fn open(module: &Module, uri_text: &str, pin_file: Option<&Path>) -> Result<TokenKey> {
        let uri = Pkcs11Uri::parse(uri_text)?;
        if uri.kind.as_deref().is_some_and(|k| k != "private") {
            return Err(format!("{uri_text}: type must be private"));
        }
        let token = module.token(uri.token.as_deref(), pin_for(&uri, pin_file)?)?;
        let handle = token.find(&uri, ObjectClass::PRIVATE_KEY)?;
        let attrs = token.with_session(|s| {
            s.get_attributes(handle, &[AttributeType::KeyType, AttributeType::Sign])
        })?;
        let mut key_type = None;
        for a in attrs {
            match a {
                Attribute::KeyType(k) => key_type = Some(k),
                Attribute::Sign(false) => return Err(format!("{uri_text}: CKA_SIGN is false")),
                _ => {}
            }
        }
        let kind = match key_type {
            Some(KeyType::RSA) => {
                // The modulus is public; its length gives the key size.
                let m = token.with_session(|s| s.get_attributes(handle, &[AttributeType::Modulus]));
                let bits = match m?.into_iter().next() {
                    Some(Attribute::Modulus(n)) => n.iter().skip_while(|b| **b == 0).count() * 8,
                    _ => 0,
                };
                KeyKind::Rsa {
                    bits,
                    pss_combined: token.has_mechanism(MechanismType::SHA256_RSA_PKCS_PSS),
                }
            }
            Some(t @ (KeyType::EC | KeyType::EC_EDWARDS)) => {
                // The curve, from CKA_EC_PARAMS (public), for both kinds of EC key.
                let p =
                    token.with_session(|s| s.get_attributes(handle, &[AttributeType::EcParams]));
                let params = match p?.into_iter().next() {
                    Some(Attribute::EcParams(p)) => p,
                    _ => Vec::new(),
                };
                match (t == KeyType::EC, params.as_slice()) {
                    (true, P256_PARAMS) => KeyKind::EcP256,
                    (true, P384_PARAMS) => KeyKind::EcP384,
                    (true, _) => {
                        return Err(format!(
                            "{uri_text}: only P-256 and P-384 EC keys are served"
                        ))
                    }
                    (false, ED25519_PARAMS | ED25519_NAME) => KeyKind::Ed25519,
                    (false, _) => {
                        return Err(format!(
                            "{uri_text}: only Ed25519 EdDSA keys are served (not Ed448)"
                        ))
                    }
                }
            }
            other => return Err(format!("{uri_text}: unsupported key type {other:?}")),
        };
        Ok(TokenKey(Arc::new(KeyInner {
            token,
            handle,
            kind,
            name: uri_text.to_string(),
        })))
    }

    pub fn kind(&self) -> KeyKind {
        self.0.kind
    }

    /// Schemes this key can sign with, in order of preference.
    pub fn schemes(&self) -> &'static [SignatureScheme] {
        use SignatureScheme as S;
        match self.0.kind {
            KeyKind::Rsa { .. } => &[
                S::RSA_PSS_SHA256,
                S::RSA_PSS_SHA384,
                S::RSA_PKCS1_SHA256,
                S::RSA_PKCS1_SHA384,
            ],
            KeyKind::EcP256 => &[S::ECDSA_NISTP256_SHA256],
            KeyKind::EcP384 => &[S::ECDSA_NISTP384_SHA384],
            KeyKind::Ed25519 => &[S::ED25519],
        }
    }

    /// Signs `message` with `scheme` in the token.
    pub fn sign_with(&self, scheme: SignatureScheme, message: &[u8]) -> Result<Vec<u8>> {
        use ring::digest::{digest, SHA256, SHA384};
        let pss = |hash_alg, mgf, len: u64| PkcsPssParams {
            hash_alg,
            mgf,
            s_len: len.into(),
        };
        let p256 = pss(MechanismType::SHA256, PkcsMgfType::MGF1_SHA256, 32);
        let p384 = pss(MechanismType::SHA384, PkcsMgfType::MGF1_SHA384, 48);
        let combined = matches!(
            self.0.kind,
            KeyKind::Rsa {
                pss_combined: true,
                ..
            }
        );
        let (mech, data): (Mechanism, Vec<u8>) = match scheme {
            SignatureScheme::RSA_PSS_SHA256 if combined => {
                (Mechanism::Sha256RsaPkcsPss(p256), message.to_vec())
            }
            SignatureScheme::RSA_PSS_SHA384 if combined => {
                (Mechanism::Sha384RsaPkcsPss(p384), message.to_vec())
            }
            SignatureScheme::RSA_PSS_SHA256 => (
                Mechanism::RsaPkcsPss(p256),
                digest(&SHA256, message).as_ref().to_vec(),
            ),
            SignatureScheme::RSA_PSS_SHA384 => (
                Mechanism::RsaPkcsPss(p384),
                digest(&SHA384, message).as_ref().to_vec(),
            ),
            SignatureScheme::RSA_PKCS1_SHA256 => (Mechanism::Sha256RsaPkcs, message.to_vec()),
            SignatureScheme::RSA_PKCS1_SHA384 => (Mechanism::Sha384RsaPkcs, message.to_vec()),
            SignatureScheme::ECDSA_NISTP256_SHA256 => {
                (Mechanism::Ecdsa, digest(&SHA256, message).as_ref().to_vec())
            }
            SignatureScheme::ECDSA_NISTP384_SHA384 => {
                (Mechanism::Ecdsa, digest(&SHA384, message).as_ref().to_vec())
            }
            // Pure EdDSA over the whole message; the signature is R ‖ S as TLS carries it.
            SignatureScheme::ED25519 => (
                Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Pure)),
                message.to_vec(),
            ),
            other => return Err(format!("signature scheme {other:?} is not supported")),
        };
        let sig = self
            .0
            .token
            .with_session(|s| s.sign(&mech, self.0.handle, &data))?;
        if matches!(self.0.kind, KeyKind::EcP256 | KeyKind::EcP384) {
            ecdsa_der(&sig)
        } else {
            Ok(sig)
        }
    }
}

/// Converts a PKCS#11 ECDSA signature (r || s, each the size of the order) into the DER
/// `SEQUENCE { INTEGER r, INTEGER s }` that TLS carries.
pub fn ecdsa_der(raw: &[u8]) -> Result<Vec<u8>> {
    if raw.is_empty() || !raw.len().is_multiple_of(2) {
        return Err(format!("ECDSA signature of odd length {}", raw.len()));
    }
    let (r, s) = raw.split_at(raw.len() / 2);
    let mut body = Vec::with_capacity(raw.len() + 8);
    for x in [r, s] {
        let x = match x.iter().position(|b| *b != 0) {
            Some(i) => &x[i..],
            None => &x[x.len() - 1..],
        };
        body.push(0x02);
        let pad = x[0] & 0x80 != 0;
        der_len(&mut body, x.len() + pad as usize);
        if pad {
            body.push(0);
        }
        body.extend_from_slice(x);
    }
    let mut out = vec![0x30];
    der_len(&mut out, body.len());
    out.extend_from_slice(&body);
    Ok(out)
}

fn der_len(out: &mut Vec<u8>, n: usize) {
    if n < 0x80 {
        out.push(n as u8);
    } else if n < 0x100 {
        out.extend_from_slice(&[0x81, n as u8]);
    } else {
        out.extend_from_slice(&[0x82, (n >> 8) as u8, n as u8]);
    }
}

impl SigningKey for TokenKey {
    fn choose_scheme(&self, offered: &[SignatureScheme]) -> Option<Box<dyn Signer>> {
        let scheme = self.schemes().iter().find(|s| offered.contains(s))?;
        Some(Box::new(TokenSigner {
            key: self.clone(),
            scheme: *scheme,
        }))
    }

    fn algorithm(&self) -> SignatureAlgorithm {
        self.0.kind.algorithm()
    }
}

#[derive(Debug)]
struct TokenSigner {
    key: TokenKey,
    scheme: SignatureScheme,
}

impl Signer for TokenSigner {
    /// Signs in the token. A fast token signs inline, on the runtime thread: that costs least
    /// (handing the thread's tasks on costs about 10 µs and, measured with `make bench-tls`,
    /// a tenth to a third more server CPU per handshake). A slow token (a network or busy
    /// hardware module, or one with a signature running for [`STUCK_SIGNATURE`]) signs in
    /// [`tokio::task::block_in_place`]: the runtime hands this thread's other tasks (relays,
    /// handshakes, its own I/O polling) to another thread while the token works, so that
    /// several slow signatures run at once and the other connections keep moving. At most
    /// [`set_max_offloaded_signatures`] run so at once; beyond that a slow token's signature is
    /// refused at once rather than hold a runtime thread. An inline signature that turns out
    /// long (the first of a token that stops answering) is covered by the [`watchdog`].
    fn sign(&self, message: &[u8]) -> std::result::Result<Vec<u8>, rustls::Error> {
        let sigs = &self.key.0.token.signatures;
        let s = stats::get();
        let (id, slow) = sigs.begin();
        let start = Instant::now();
        let rt = multi_thread_runtime();
        let signed = if slow && rt.is_some() {
            let Some(_place) = Offloaded::take() else {
                sigs.end(id, None);
                // Counted, and logged once in a thousand: a token that stopped answering would
                // otherwise write a line per handshake.
                let n = s.signatures_refused.fetch_add(1, Relaxed) + 1;
                if n == 1 || n.is_multiple_of(1000) {
                    crate::log_line!(
                        "signing with {}: the token is slow and {} signatures are running \
                         (max_offloaded_signatures); {n} refused so far",
                        self.key.0.name,
                        MAX_OFFLOADED.load(Relaxed)
                    );
                }
                return Err(rustls::Error::General(
                    "token signature refused: the token is slow and max_offloaded_signatures \
                     signatures are running"
                        .into(),
                ));
            };
            stats::inc(s.signatures_offloaded);
            tokio::task::block_in_place(|| self.key.sign_with(self.scheme, message))
        } else {
            let _inline = rt.map(Inline::begin);
            self.key.sign_with(self.scheme, message)
        };
        sigs.end(id, Some(start.elapsed()));
        signed.map_err(|e| {
            stats::inc(s.sign_errors);
            crate::log_line!("signing with {}: {e}", self.key.0.name);
            rustls::Error::General(format!("token signature failed: {e}"))
        })
    }

    fn scheme(&self) -> SignatureScheme {
        self.scheme
    }
}

/// The error of a URI that matches `n` objects of `class` (`ids`: their CKA_IDs, where they
/// could be read), with how to name one of them.
fn ambiguous(
    uri: &Pkcs11Uri,
    class: ObjectClass,
    n: usize,
    ids: &[Vec<u8>],
    token: &str,
) -> String {
    let mut distinct: Vec<String> = ids
        .iter()
        .filter(|id| !id.is_empty())
        .map(|id| crate::uri::encode_all(id))
        .collect();
    distinct.sort();
    distinct.dedup();
    let how = if uri.id.is_none() && distinct.len() == n {
        format!(
            "add the id of the one meant to the URI (id={})",
            distinct.join(" or id=")
        )
    } else {
        "give the one meant a label of its own (or delete the others) and name it by that label"
            .to_string()
    };
    format!(
        "{n} {class} objects match {uri} in token {token:?}; a key or certificate URI must name \
         one object: {how}; `pktool list` shows each object's label and id"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ambiguous_uri_is_shown_as_written_with_the_way_out() {
        let uri = Pkcs11Uri::parse(
            "pkcs11:token=OpenCF%20Metaslot;object=web;type=private?pin-value=1234",
        )
        .unwrap();
        let e = ambiguous(
            &uri,
            ObjectClass::PRIVATE_KEY,
            2,
            &[vec![1], vec![0xab, 2]],
            "T",
        );
        assert_eq!(
            e,
            "2 CKO_PRIVATE_KEY objects match pkcs11:token=OpenCF%20Metaslot;object=web;\
             type=private in token \"T\"; a key or certificate URI must name one object: add the \
             id of the one meant to the URI (id=%01 or id=%AB%02); `pktool list` shows each \
             object's label and id"
        );
        // The same id twice, or an id already given: only a label of its own helps.
        let e = ambiguous(&uri, ObjectClass::PRIVATE_KEY, 2, &[vec![1], vec![1]], "T");
        assert!(e.contains("give the one meant a label of its own"), "{e}");
        assert!(!e.contains("1234") && !e.contains("Pkcs11Uri"), "{e}");
    }

    #[test]
    fn der_of_raw_signatures() {
        let mut raw = vec![0u8; 64];
        raw[0] = 0x80;
        raw[63] = 1;
        let d = ecdsa_der(&raw).unwrap();
        assert_eq!(&d[..5], &[0x30, 0x26, 0x02, 0x21, 0x00]);
        assert_eq!(&d[d.len() - 3..], &[0x02, 0x01, 0x01]);
        let zero = ecdsa_der(&[0u8; 64]).unwrap();
        assert_eq!(zero, vec![0x30, 6, 2, 1, 0, 2, 1, 0]);
        assert!(ecdsa_der(&[1, 2, 3]).is_err());
        // P-521-sized values take the long length form.
        let big = ecdsa_der(&[0xffu8; 132]).unwrap();
        assert_eq!(&big[..3], &[0x30, 0x81, 0x8a]);
    }

    /// One signature of `took`, begun and ended at once; whether the token was slow at its start.
    fn one(sigs: &Signatures, took: Duration) -> bool {
        let (id, slow) = sigs.begin();
        sigs.end(id, Some(took));
        slow
    }

    #[test]
    fn slow_tokens_are_told_from_fast_ones() {
        let t = Signatures::default();
        let fast = Duration::from_micros(250);
        assert!(!one(&t, fast));
        // A fast token whose thread now and then waits for the CPU: still fast.
        for i in 0..200 {
            let took = if i % 20 == 19 {
                Duration::from_millis(10)
            } else {
                fast
            };
            assert!(!one(&t, took), "signature {i}");
        }
        // One signature of a token behind a network is enough to call it slow...
        one(&t, Duration::from_millis(200));
        assert!(one(&t, Duration::from_millis(150)));
        // ...and it stays slow while it is.
        for _ in 0..20 {
            assert!(one(&t, Duration::from_millis(150)));
        }
        // A token that became fast again is fast again after some signatures.
        for _ in 0..40 {
            one(&t, fast);
        }
        assert!(!one(&t, fast));
        // No overflow on absurd times.
        one(&t, Duration::MAX);
        one(&t, Duration::MAX);
        assert!(one(&t, Duration::ZERO));
    }

    #[test]
    fn a_token_that_stops_answering_is_slow_at_once() {
        let t = Signatures::default();
        let fast = Duration::from_micros(250);
        for _ in 0..10 {
            one(&t, fast);
        }
        // A signature that has not ended: the next one, begun at once, does not know yet...
        let (stuck, slow) = t.begin();
        assert!(!slow);
        assert!(!one(&t, fast));
        // ...but once the first has been running for STUCK_SIGNATURE, every new one is slow.
        std::thread::sleep(STUCK_SIGNATURE + Duration::from_millis(1));
        assert!(one(&t, fast));
        assert!(one(&t, fast));
        // It ends (a long signature, but no longer a running one): fast again after some.
        t.end(stuck, Some(Duration::from_millis(20)));
        for _ in 0..20 {
            one(&t, fast);
        }
        assert!(!one(&t, fast));
        assert!(t.running.lock().unwrap().is_empty());
        // A refused signature leaves the mean as it was.
        let before = t.mean_ns.load(Relaxed);
        let (id, _) = t.begin();
        t.end(id, None);
        assert_eq!(t.mean_ns.load(Relaxed), before);
    }

    #[test]
    fn offloaded_signatures_are_bounded() {
        // The only test that touches the process-wide limit.
        set_max_offloaded_signatures(2);
        let a = Offloaded::take().expect("first place");
        let b = Offloaded::take().expect("second place");
        assert!(Offloaded::take().is_none());
        drop(a);
        let c = Offloaded::take().expect("a place given back");
        assert!(Offloaded::take().is_none());
        drop((b, c));
        assert_eq!(OFFLOADED.load(Relaxed), 0);
        set_max_offloaded_signatures(DEFAULT_MAX_OFFLOADED_SIGNATURES);
    }

    #[test]
    fn long_signatures_are_handled_only_on_a_multi_thread_runtime() {
        assert!(multi_thread_runtime().is_none(), "outside a runtime");
        let current = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert!(current.block_on(async { multi_thread_runtime() }).is_none());
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        assert!(multi.block_on(async {
            tokio::spawn(async { multi_thread_runtime().is_some() })
                .await
                .unwrap()
        }));
    }
}
