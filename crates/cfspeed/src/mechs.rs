//! The benchmarks: what one operation is, for a PKCS#11 module and for
//! native OpenSSL, and the one-off setup (keys, objects) each needs.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, AttributeType, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::Session;
use opencf_abi as abi;
use opencf_abi::sys::{CKM_ECDSA, CKM_SHA256_RSA_PKCS, CK_OBJECT_HANDLE, CK_SESSION_HANDLE};
use openssl::bn::BigNum;
use openssl::cipher::{Cipher, CipherRef};
use openssl::cipher_ctx::CipherCtx;
use openssl::ec::{EcGroup, EcKey, EcPoint};
use openssl::ecdsa::EcdsaSig;
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::pkey_ctx::PkeyCtx;
use openssl::rsa::Rsa;
use openssl::sign::{Signer, Verifier};

use crate::bench::Worker;
use crate::p11::{describe, Module};
use crate::raw::{gcm_iv, gcm_mechanism, label_template, RawModule};

/// DER of the prime256v1 OID, the value of `CKA_EC_PARAMS` for P-256.
const P256_PARAMS: [u8; 10] = [0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
/// The fixed AES-128 key every implementation encrypts with.
const AES_KEY: [u8; 16] = *b"cfspeed-aes-key!";
/// The message signed by the RSA benchmark (its SHA-256 is part of the work).
const SIGN_MESSAGE: [u8; 32] = *b"cfspeed signs this 32-byte text.";
/// Application tag and label prefix of the `find` benchmark's objects.
const FIND_APP: &[u8] = b"cfspeed-find";

/// A benchmark the user can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bench {
    /// CKM_AES_GCM, AES-128, single-part encrypt, fresh 96-bit IV per op.
    AesGcm,
    /// CKM_SHA256_RSA_PKCS, RSA-2048 signature of a 32-byte message.
    RsaSha256,
    /// CKM_ECDSA, P-256 signature of a 32-byte hash.
    Ecdsa,
    /// C_FindObjects by CKA_LABEL among many token objects.
    Find,
}

impl Bench {
    /// Parses a mechanism name (`CKM_AES_GCM`, `aes-gcm`, `find`, ...).
    pub fn parse(s: &str) -> Result<Bench, String> {
        let n = s.trim().to_ascii_uppercase().replace('-', "_");
        let n = n.strip_prefix("CKM_").unwrap_or(&n);
        match n {
            "AES_GCM" => Ok(Bench::AesGcm),
            "SHA256_RSA_PKCS" => Ok(Bench::RsaSha256),
            "ECDSA" => Ok(Bench::Ecdsa),
            "FIND" | "FIND_OBJECTS" | "FINDOBJECTS" => Ok(Bench::Find),
            _ => Err(format!(
                "unknown mechanism {s:?}; this version knows CKM_AES_GCM, \
                 CKM_SHA256_RSA_PKCS, CKM_ECDSA and find"
            )),
        }
    }

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Bench::AesGcm => "CKM_AES_GCM",
            Bench::RsaSha256 => "CKM_SHA256_RSA_PKCS",
            Bench::Ecdsa => "CKM_ECDSA",
            Bench::Find => "find",
        }
    }

    /// What one operation is, for the report header.
    pub fn describe(self, size: usize, find_objects: usize) -> String {
        match self {
            Bench::AesGcm => format!(
                "AES-128-GCM encrypt {size} bytes: C_EncryptInit + C_Encrypt, new 12-byte IV \
                 per op, 16-byte tag; key is a session object"
            ),
            Bench::RsaSha256 => "RSA-2048 PKCS#1 v1.5 SHA-256 sign of 32 bytes: C_SignInit + \
                 C_Sign; key generated in the token (private token object)"
                .into(),
            Bench::Ecdsa => "ECDSA P-256 sign of a 32-byte hash: C_SignInit + C_Sign; key \
                 generated in the token (private token object)"
                .into(),
            Bench::Find => format!(
                "C_FindObjectsInit(CKA_LABEL) + C_FindObjects + C_FindObjectsFinal, label in \
                 the middle of {find_objects} CKO_DATA token objects"
            ),
        }
    }

    /// Whether the input size is a parameter (bulk mechanisms).
    pub fn sized(self) -> bool {
        self == Bench::AesGcm
    }

    /// Whether every operation is timed on its own (latency percentiles).
    pub fn per_op_latency(self) -> bool {
        self != Bench::AesGcm
    }
}

/// Something that can run a benchmark: makes one worker per thread.
pub trait Target {
    /// The implementation's name in the report.
    fn name(&self) -> String;
    /// `n` workers for input size `size`, each with its own session or context.
    fn workers(&self, n: usize, size: usize) -> Result<Vec<Box<dyn Worker>>, String>;
}

fn ck(what: &str, e: cryptoki::error::Error) -> String {
    format!("{what}: {}", describe(&e))
}

fn ossl(what: &str, e: openssl::error::ErrorStack) -> String {
    format!("OpenSSL {what}: {e}")
}

/// Writes a counter into the last 8 bytes of a 12-byte IV.
fn next_iv(iv: &mut [u8], counter: &mut u64) {
    *counter = counter.wrapping_add(1);
    iv[4..12].copy_from_slice(&counter.to_be_bytes());
}

/// Native AES-128-GCM of `data` with `iv` (the reference for cross-checks).
fn native_gcm(iv: &[u8; 12], data: &[u8]) -> Result<Vec<u8>, String> {
    let mut tag = [0u8; 16];
    let mut out = openssl::symm::encrypt_aead(
        openssl::symm::Cipher::aes_128_gcm(),
        &AES_KEY,
        Some(iv),
        &[],
        data,
        &mut tag,
    )
    .map_err(|e| ossl("AES-GCM", e))?;
    out.extend_from_slice(&tag);
    Ok(out)
}

// ---------------------------------------------------------------------------
// PKCS#11 side
// ---------------------------------------------------------------------------

/// The key (or objects) one benchmark uses in one module, made once.
pub struct P11Target {
    bench: Bench,
    module: Rc<Module>,
    /// AES key or private key.
    key: CK_OBJECT_HANDLE,
    /// Token objects to destroy at the end (keys made for this run).
    cleanup: Vec<ObjectHandle>,
    /// The label searched for by `find`.
    label: Vec<u8>,
    /// AES-GCM: give every thread after the first its own key object.
    pub key_per_thread: bool,
}

/// Creates the AES-128 session key object every module encrypts with.
fn create_aes_key(s: &Session) -> Result<CK_OBJECT_HANDLE, String> {
    s.create_object(&[
        Attribute::Class(ObjectClass::SECRET_KEY),
        Attribute::KeyType(KeyType::AES),
        Attribute::Token(false),
        Attribute::Private(true),
        Attribute::Sensitive(true),
        Attribute::Encrypt(true),
        Attribute::Decrypt(true),
        Attribute::Label(b"cfspeed-aes".to_vec()),
        Attribute::Value(AES_KEY.to_vec()),
    ])
    .map(|k| k.handle())
    .map_err(|e| ck("C_CreateObject (AES key)", e))
}

impl P11Target {
    /// Creates what `bench` needs in `module` and checks one operation's
    /// result against OpenSSL. `find_objects` is the object count for `find`.
    pub fn setup(
        bench: Bench,
        module: Rc<Module>,
        find_objects: usize,
    ) -> Result<P11Target, String> {
        let s = &module.anchor;
        let mut t = P11Target {
            bench,
            module: module.clone(),
            key: 0,
            cleanup: Vec::new(),
            label: Vec::new(),
            key_per_thread: false,
        };
        match bench {
            Bench::AesGcm => {
                t.key = create_aes_key(s)?;
                // Cross-check one operation against OpenSSL.
                let mech = gcm_mechanism([7u8; 12]);
                let data: Vec<u8> = (0..100u8).collect();
                let mut out = vec![0u8; data.len() + 16];
                let n = module
                    .raw
                    .aes_gcm_encrypt(s.handle(), t.key, &mech, &data, &mut out)
                    .map_err(|e| e.to_string())?;
                if out[..n] != native_gcm(&[7u8; 12], &data)?[..] {
                    return Err(format!(
                        "{}: AES-GCM output differs from OpenSSL's",
                        module.name
                    ));
                }
            }
            Bench::RsaSha256 => {
                let (public, private) = s
                    .generate_key_pair(
                        &Mechanism::RsaPkcsKeyPairGen,
                        &[
                            Attribute::Token(false),
                            Attribute::Verify(true),
                            Attribute::ModulusBits(2048.into()),
                            Attribute::PublicExponent(vec![1, 0, 1]),
                        ],
                        &[
                            Attribute::Token(true),
                            Attribute::Private(true),
                            Attribute::Sensitive(true),
                            Attribute::Sign(true),
                            Attribute::Label(b"cfspeed-rsa".to_vec()),
                        ],
                    )
                    .map_err(|e| ck("C_GenerateKeyPair (RSA-2048)", e))?;
                t.key = private.handle();
                t.cleanup.push(private);
                let mut sig = vec![0u8; 256];
                let n = module
                    .raw
                    .sign(
                        s.handle(),
                        &abi::Mechanism::new(CKM_SHA256_RSA_PKCS),
                        t.key,
                        &SIGN_MESSAGE,
                        &mut sig,
                    )
                    .map_err(|e| e.to_string())?;
                verify_rsa(s, public, &sig[..n]).map_err(|e| format!("{}: {e}", module.name))?;
            }
            Bench::Ecdsa => {
                let (public, private) = s
                    .generate_key_pair(
                        &Mechanism::EccKeyPairGen,
                        &[
                            Attribute::Token(false),
                            Attribute::Verify(true),
                            Attribute::EcParams(P256_PARAMS.to_vec()),
                        ],
                        &[
                            Attribute::Token(true),
                            Attribute::Private(true),
                            Attribute::Sensitive(true),
                            Attribute::Sign(true),
                            Attribute::Label(b"cfspeed-ecdsa".to_vec()),
                        ],
                    )
                    .map_err(|e| ck("C_GenerateKeyPair (P-256)", e))?;
                t.key = private.handle();
                t.cleanup.push(private);
                let hash = openssl::sha::sha256(&SIGN_MESSAGE);
                let mut sig = vec![0u8; 64];
                let n = module
                    .raw
                    .sign(
                        s.handle(),
                        &abi::Mechanism::new(CKM_ECDSA),
                        t.key,
                        &hash,
                        &mut sig,
                    )
                    .map_err(|e| e.to_string())?;
                verify_ecdsa(s, public, &hash, &sig[..n])
                    .map_err(|e| format!("{}: {e}", module.name))?;
            }
            Bench::Find => {
                t.label = ensure_find_objects(&module, find_objects)?;
                let mut found = [0 as CK_OBJECT_HANDLE; 4];
                let n = module
                    .raw
                    .find_by_label(s.handle(), &label_template(&t.label), &mut found)
                    .map_err(|e| e.to_string())?;
                if n != 1 {
                    return Err(format!(
                        "{}: searching label {:?} found {n} objects, expected 1",
                        module.name,
                        String::from_utf8_lossy(&t.label)
                    ));
                }
            }
        }
        Ok(t)
    }

    /// Destroys the token objects made by `setup` (keys; the `find` objects
    /// are kept for the next run on the same keystore).
    pub fn cleanup(&mut self) {
        for h in self.cleanup.drain(..) {
            if let Err(e) = self.module.anchor.destroy_object(h) {
                eprintln!(
                    "cfspeed: {}: could not destroy a benchmark key: {}",
                    self.module.name,
                    describe(&e)
                );
            }
        }
    }
}

impl Drop for P11Target {
    fn drop(&mut self) {
        self.cleanup();
    }
}

/// Creates the `find` benchmark's token objects unless they exist already
/// (objects of an earlier run on the same keystore are reused) and returns
/// the label of the object in the middle.
fn ensure_find_objects(module: &Module, count: usize) -> Result<Vec<u8>, String> {
    let s = &module.anchor;
    let label = |i: usize| format!("cfspeed-find-{i:06}").into_bytes();
    let existing = s
        .find_objects(&[
            Attribute::Class(ObjectClass::DATA),
            Attribute::Application(FIND_APP.to_vec()),
        ])
        .map_err(|e| ck("C_FindObjects (existing find objects)", e))?
        .len();
    if existing < count {
        let start = Instant::now();
        let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
        for i in existing..count {
            s.create_object(&[
                Attribute::Class(ObjectClass::DATA),
                Attribute::Token(true),
                Attribute::Private(false),
                Attribute::Application(FIND_APP.to_vec()),
                Attribute::Label(label(i)),
                Attribute::Value(format!("cfspeed object {i}").into_bytes()),
            ])
            .map_err(|e| ck("C_CreateObject (find objects)", e))?;
            if tty && (i % 100 == 0 || i + 1 == count) {
                eprint!(
                    "\r{}: creating token objects {}/{count}",
                    module.name,
                    i + 1
                );
            }
        }
        let secs = start.elapsed().as_secs_f64();
        let made = count - existing;
        if tty {
            eprintln!();
        }
        eprintln!(
            "{}: created {made} token objects in {secs:.1} s ({:.2} ms per C_CreateObject)",
            module.name,
            secs * 1e3 / made as f64
        );
        crate::report::note(format!(
            "{}: created {made} CKO_DATA token objects in {secs:.1} s ({:.2} ms per C_CreateObject)",
            module.name,
            secs * 1e3 / made as f64
        ));
    }
    Ok(label(count / 2))
}

fn verify_rsa(s: &Session, public: ObjectHandle, sig: &[u8]) -> Result<(), String> {
    let attrs = s
        .get_attributes(
            public,
            &[AttributeType::Modulus, AttributeType::PublicExponent],
        )
        .map_err(|e| ck("C_GetAttributeValue (RSA public key)", e))?;
    let (mut n, mut e) = (None, None);
    for a in attrs {
        match a {
            Attribute::Modulus(v) => n = Some(v),
            Attribute::PublicExponent(v) => e = Some(v),
            _ => {}
        }
    }
    let (Some(n), Some(e)) = (n, e) else {
        return Err("the RSA public key lacks CKA_MODULUS or CKA_PUBLIC_EXPONENT".into());
    };
    let rsa = Rsa::from_public_components(
        BigNum::from_slice(&n).map_err(|e| ossl("BN", e))?,
        BigNum::from_slice(&e).map_err(|e| ossl("BN", e))?,
    )
    .map_err(|e| ossl("RSA", e))?;
    let pkey = PKey::from_rsa(rsa).map_err(|e| ossl("PKey", e))?;
    let mut v = Verifier::new(MessageDigest::sha256(), &pkey).map_err(|e| ossl("verify", e))?;
    if v.verify_oneshot(sig, &SIGN_MESSAGE)
        .map_err(|e| ossl("verify", e))?
    {
        Ok(())
    } else {
        Err("the RSA signature does not verify with OpenSSL".into())
    }
}

fn verify_ecdsa(s: &Session, public: ObjectHandle, hash: &[u8], sig: &[u8]) -> Result<(), String> {
    let attrs = s
        .get_attributes(public, &[AttributeType::EcPoint])
        .map_err(|e| ck("C_GetAttributeValue (EC public key)", e))?;
    let Some(Attribute::EcPoint(point)) = attrs.into_iter().next() else {
        return Err("the EC public key lacks CKA_EC_POINT".into());
    };
    // CKA_EC_POINT is a DER OCTET STRING holding the point; accept a bare
    // point too.
    let raw: &[u8] = if point.len() == 67 && point[0] == 0x04 && point[1] == 65 {
        &point[2..]
    } else {
        &point
    };
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).map_err(|e| ossl("EC", e))?;
    let mut bn = openssl::bn::BigNumContext::new().map_err(|e| ossl("BN", e))?;
    let p = EcPoint::from_bytes(&group, raw, &mut bn).map_err(|e| ossl("EC point", e))?;
    let key = EcKey::from_public_key(&group, &p).map_err(|e| ossl("EC key", e))?;
    if sig.len() != 64 {
        return Err(format!(
            "ECDSA signature is {} bytes, expected 64",
            sig.len()
        ));
    }
    let es = EcdsaSig::from_private_components(
        BigNum::from_slice(&sig[..32]).map_err(|e| ossl("BN", e))?,
        BigNum::from_slice(&sig[32..]).map_err(|e| ossl("BN", e))?,
    )
    .map_err(|e| ossl("ECDSA", e))?;
    if es.verify(hash, &key).map_err(|e| ossl("ECDSA verify", e))? {
        Ok(())
    } else {
        Err("the ECDSA signature does not verify with OpenSSL".into())
    }
}

impl Target for P11Target {
    fn name(&self) -> String {
        self.module.name.clone()
    }

    fn workers(&self, n: usize, size: usize) -> Result<Vec<Box<dyn Worker>>, String> {
        (0..n)
            .map(|i| {
                let session = self.module.session()?;
                let key = if self.key_per_thread && self.bench == Bench::AesGcm && i > 0 {
                    create_aes_key(&self.module.anchor)?
                } else {
                    self.key
                };
                let w = P11Worker {
                    bench: self.bench,
                    raw: self.module.raw.clone(),
                    handle: session.handle(),
                    _session: session,
                    key,
                    mech: match self.bench {
                        Bench::AesGcm => gcm_mechanism([i as u8; 12]),
                        Bench::RsaSha256 => abi::Mechanism::new(CKM_SHA256_RSA_PKCS),
                        Bench::Ecdsa => abi::Mechanism::new(CKM_ECDSA),
                        // Not used: a search has no mechanism.
                        Bench::Find => abi::Mechanism::new(0),
                    },
                    counter: 0,
                    data: match self.bench {
                        Bench::AesGcm => vec![0x5a; size],
                        Bench::RsaSha256 => SIGN_MESSAGE.to_vec(),
                        Bench::Ecdsa => openssl::sha::sha256(&SIGN_MESSAGE).to_vec(),
                        Bench::Find => Vec::new(),
                    },
                    template: match self.bench {
                        Bench::Find => label_template(&self.label),
                        _ => Vec::new(),
                    },
                    out: vec![0; size + 512],
                    found: [0; 16],
                };
                Ok(Box::new(w) as Box<dyn Worker>)
            })
            .collect()
    }
}

struct P11Worker {
    bench: Bench,
    raw: Arc<RawModule>,
    handle: CK_SESSION_HANDLE,
    /// Keeps the session open; closed when the worker is dropped.
    _session: Session,
    key: CK_OBJECT_HANDLE,
    /// The mechanism, made once; AES-GCM rewrites its IV in place per op.
    mech: abi::Mechanism,
    counter: u64,
    data: Vec<u8>,
    /// `find`: the `CKA_LABEL` template, made once.
    template: Vec<abi::Attribute>,
    out: Vec<u8>,
    found: [CK_OBJECT_HANDLE; 16],
}

impl Worker for P11Worker {
    fn op(&mut self) -> Result<(), String> {
        let r = match self.bench {
            Bench::AesGcm => {
                next_iv(gcm_iv(&mut self.mech), &mut self.counter);
                self.raw.aes_gcm_encrypt(
                    self.handle,
                    self.key,
                    &self.mech,
                    &self.data,
                    &mut self.out,
                )
            }
            Bench::RsaSha256 | Bench::Ecdsa => {
                self.raw
                    .sign(self.handle, &self.mech, self.key, &self.data, &mut self.out)
            }
            Bench::Find => self
                .raw
                .find_by_label(self.handle, &self.template, &mut self.found),
        };
        r.map(|_| ()).map_err(|e| e.to_string())
    }
}

// ---------------------------------------------------------------------------
// Native OpenSSL side
// ---------------------------------------------------------------------------

/// Which native variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativeKind {
    /// The same work a PKCS#11 single-part call must do: a new EVP context
    /// keyed per operation (AES-GCM), or a new signing context per operation
    /// on a key parsed once (RSA, ECDSA).
    PerOp,
    /// AES-GCM only: one keyed EVP context kept; each op only sets the IV.
    Reuse,
}

/// Native OpenSSL EVP, in this process, as a baseline.
pub struct NativeTarget {
    bench: Bench,
    kind: NativeKind,
    cipher: Option<Arc<Cipher>>,
    pkey: Option<PKey<Private>>,
}

impl NativeTarget {
    /// Prepares the key (parsed once) for `bench`; `None` when there is no
    /// native counterpart (`find`, or the reuse variant of a signature).
    pub fn setup(bench: Bench, kind: NativeKind) -> Result<Option<NativeTarget>, String> {
        let mut t = NativeTarget {
            bench,
            kind,
            cipher: None,
            pkey: None,
        };
        match (bench, kind) {
            (Bench::AesGcm, _) => {
                t.cipher = Some(Arc::new(
                    Cipher::fetch(None, "AES-128-GCM", None).map_err(|e| ossl("fetch", e))?,
                ));
            }
            (Bench::RsaSha256, NativeKind::PerOp) => {
                let rsa = Rsa::generate(2048).map_err(|e| ossl("RSA keygen", e))?;
                t.pkey = Some(PKey::from_rsa(rsa).map_err(|e| ossl("PKey", e))?);
            }
            (Bench::Ecdsa, NativeKind::PerOp) => {
                let group =
                    EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).map_err(|e| ossl("EC", e))?;
                let ec = EcKey::generate(&group).map_err(|e| ossl("EC keygen", e))?;
                t.pkey = Some(PKey::from_ec_key(ec).map_err(|e| ossl("PKey", e))?);
            }
            _ => return Ok(None),
        }
        // Cross-check AES-GCM against the one-shot API.
        if bench == Bench::AesGcm {
            let mut w = t.make_worker(100, 7)?;
            w.step().map_err(|e| ossl("AES-GCM", e))?;
            let mut got = w.out[..100].to_vec();
            got.extend_from_slice(&w.tag);
            // The worker's first IV: its seed bytes with counter 1.
            let (mut iv, mut counter) = ([7u8; 12], 0u64);
            next_iv(&mut iv, &mut counter);
            if got != native_gcm(&iv, &w.data)? {
                return Err("native AES-GCM worker disagrees with the one-shot API".into());
            }
        }
        Ok(Some(t))
    }

    fn make_worker(&self, size: usize, i: usize) -> Result<NativeWorker, String> {
        let mut w = NativeWorker {
            bench: self.bench,
            kind: self.kind,
            cipher: self.cipher.clone(),
            pkey: self.pkey.clone(),
            ctx: None,
            iv: [i as u8; 12],
            counter: 0,
            data: match self.bench {
                Bench::AesGcm => vec![0x5a; size],
                Bench::RsaSha256 => SIGN_MESSAGE.to_vec(),
                _ => openssl::sha::sha256(&SIGN_MESSAGE).to_vec(),
            },
            out: vec![0; size + 512],
            tag: [0; 16],
        };
        if self.kind == NativeKind::Reuse {
            let mut ctx = CipherCtx::new().map_err(|e| ossl("ctx", e))?;
            ctx.encrypt_init(
                w.cipher.as_deref().map(|c| &**c),
                Some(&AES_KEY),
                Some(&w.iv),
            )
            .map_err(|e| ossl("EncryptInit", e))?;
            w.ctx = Some(ctx);
        }
        Ok(w)
    }
}

impl Target for NativeTarget {
    fn name(&self) -> String {
        match self.kind {
            NativeKind::PerOp => "native".into(),
            NativeKind::Reuse => "native-reuse".into(),
        }
    }

    fn workers(&self, n: usize, size: usize) -> Result<Vec<Box<dyn Worker>>, String> {
        (0..n)
            .map(|i| Ok(Box::new(self.make_worker(size, i)?) as Box<dyn Worker>))
            .collect()
    }
}

struct NativeWorker {
    bench: Bench,
    kind: NativeKind,
    cipher: Option<Arc<Cipher>>,
    pkey: Option<PKey<Private>>,
    ctx: Option<CipherCtx>,
    iv: [u8; 12],
    counter: u64,
    data: Vec<u8>,
    out: Vec<u8>,
    tag: [u8; 16],
}

impl NativeWorker {
    fn step(&mut self) -> Result<(), openssl::error::ErrorStack> {
        match self.bench {
            Bench::AesGcm => {
                next_iv(&mut self.iv, &mut self.counter);
                let mut fresh;
                let ctx = match (self.kind, self.ctx.as_mut()) {
                    (NativeKind::Reuse, Some(ctx)) => {
                        ctx.encrypt_init(None, None, Some(&self.iv))?;
                        ctx
                    }
                    _ => {
                        fresh = CipherCtx::new()?;
                        let cipher: Option<&CipherRef> = self.cipher.as_deref().map(|c| &**c);
                        fresh.encrypt_init(cipher, Some(&AES_KEY), Some(&self.iv))?;
                        &mut fresh
                    }
                };
                let n = ctx.cipher_update(&self.data, Some(&mut self.out))?;
                ctx.cipher_final(&mut self.out[n..])?;
                ctx.tag(&mut self.tag)?;
            }
            Bench::RsaSha256 => {
                let pkey = self.pkey.as_ref().expect("RSA key");
                let mut signer = Signer::new(MessageDigest::sha256(), pkey)?;
                signer.sign_oneshot(&mut self.out, &self.data)?;
            }
            Bench::Ecdsa => {
                let pkey = self.pkey.as_ref().expect("EC key");
                let mut ctx = PkeyCtx::new(pkey)?;
                ctx.sign_init()?;
                ctx.sign(&self.data, Some(&mut self.out))?;
            }
            Bench::Find => {}
        }
        Ok(())
    }
}

impl Worker for NativeWorker {
    fn op(&mut self) -> Result<(), String> {
        self.step().map_err(|e| ossl("operation", e))
    }
}
