//! Every Wycheproof vector file in `../shared/vectors/wycheproof/` driven
//! through the module's C ABI, one `#[test]` per file.
//!
//! For each case: `valid` must succeed and give the vector's output (or
//! verify), `invalid` must be rejected (a `CKR_*` error or a failed
//! verification; a decryption, unwrap or derivation that returns data counts
//! as accepted), `acceptable` may go either way but must not give a wrong
//! output. Cases PKCS#11 cannot express are skipped and counted with the
//! reason. Each test prints
//! `file: N valid passed/N, N invalid rejected/N, N acceptable (ok/err), N skipped (reasons)`
//! and fails if any valid case failed or any invalid case was accepted.
//!
//! Deliberate choices beyond "skip what PKCS#11 cannot express":
//! * AES-GCM with a 0-byte IV and ChaCha20-Poly1305 with a nonce that is
//!   neither 8 nor 12 bytes are run, not skipped: `CK_GCM_PARAMS` and
//!   `CK_SALSA20_CHACHA20_POLY1305_PARAMS` can carry them, the specification
//!   forbids them, so the token must refuse (`C_EncryptInit`/`C_Encrypt` and
//!   `C_Decrypt` must all fail).
//! * An 8-byte ChaCha20 nonce is skipped: RFC 8439 (Wycheproof) calls it
//!   invalid, PKCS#11 allows it (the original ChaCha20 nonce).
//! * DER ECDSA signatures are turned into `r || s` here; one that is not
//!   strict DER is refused here and counted as "rejected by encoding".
//! * ML-DSA cases given only as external mu, and hedged signing with a given
//!   `rnd`, have no PKCS#11 3.2 form and are skipped (the hedged signature
//!   is still verified with the public key).
//!
//! The counts are written straight to stderr, so they show without
//! `--nocapture`. Run:
//! ```text
//! cargo build --release -p opencf-softtoken
//! cargo test --release -p pkcs11-tests --test wycheproof
//! ```
//! Module, vectors, slot and PIN come from the environment (see the crate
//! docs in `src/lib.rs`). `OPENCF_WYCHEPROOF_SKIP_UNSUPPORTED=1` turns
//! mechanisms the token does not list into skips; it is for trying
//! third-party modules, never for the project's own. Against SoftHSMv2:
//! ```text
//! mkdir -p target/softhsm/tokens
//! echo "directories.tokendir = $PWD/target/softhsm/tokens" > target/softhsm/softhsm2.conf
//! export SOFTHSM2_CONF=$PWD/target/softhsm/softhsm2.conf
//! softhsm2-util --init-token --free --label wycheproof --so-pin 1234 --pin 1234
//! OPENCF_MODULE=/usr/lib/softhsm/libsofthsm2.so OPENCF_TEST_PIN=1234 \
//!   OPENCF_WYCHEPROOF_SKIP_UNSUPPORTED=1 cargo test --release -p pkcs11-tests --test wycheproof
//! ```
#![forbid(unsafe_code)]

#[path = "wycheproof/raw.rs"]
mod raw;

use cryptoki::mechanism::aead::GcmParams;
use cryptoki::mechanism::dsa::{HedgeType, SignAdditionalContext};
use cryptoki::mechanism::eddsa::{EddsaParams, EddsaSignatureScheme};
use cryptoki::mechanism::elliptic_curve::{EcKdf, Ecdh1DeriveParams};
use cryptoki::mechanism::hkdf::{HkdfParams, HkdfSalt};
use cryptoki::mechanism::rsa::{PkcsMgfType, PkcsOaepParams, PkcsOaepSource, PkcsPssParams};
use cryptoki::mechanism::{Mechanism, MechanismType};
use cryptoki::object::{Attribute, AttributeType, KeyType, ObjectHandle};
use cryptoki::session::Session;
use openssl::hash::MessageDigest;
use pkcs11_tests::keys::{self, Curve, Rfc8410};
use pkcs11_tests::report::{Outcome, Tally};
use pkcs11_tests::wycheproof::{self as wp, Case, Expect, TestFile};
use pkcs11_tests::{der, describe, vectors_dir, TestToken};
use serde::Deserialize;
use std::cell::Cell;
use std::ffi::c_void;
use std::io::Write as _;
use std::path::Path;
use std::sync::OnceLock;

// ------------------------------------------------------------------ setup

/// The module, loaded once per test binary.
struct Env {
    token: TestToken,
    raw: raw::Raw,
    /// Mechanisms the slot lists (raw `CKM_*` numbers).
    offered: Vec<u64>,
    /// `OPENCF_WYCHEPROOF_SKIP_UNSUPPORTED`: skip what the token does not list.
    skip_unsupported: bool,
}

fn env() -> &'static Env {
    // The outcome of the setup, error included, is kept: a module that does
    // not load fails every test with the same message, loaded once.
    static ENV: OnceLock<Result<Env, String>> = OnceLock::new();
    match ENV.get_or_init(setup) {
        Ok(env) => env,
        Err(e) => panic!("setting up the module: {e}"),
    }
}

fn setup() -> Result<Env, String> {
    let mut raw = None;
    let token = TestToken::init(Path::new(env!("CARGO_TARGET_TMPDIR")), |module| {
        raw = Some(raw::Raw::load(module));
    })?;
    let raw = raw.ok_or("TestToken::init did not run the hook")??;
    let offered = raw
        .mechanisms(token.slot.id())
        .map_err(|e| format!("C_GetMechanismList: {e}"))?;
    let skip_unsupported = matches!(
        std::env::var("OPENCF_WYCHEPROOF_SKIP_UNSUPPORTED").as_deref(),
        Ok("1") | Ok("true") | Ok("yes")
    );
    // Straight to stderr, so it shows even when test output is captured.
    let _ = writeln!(
        std::io::stderr().lock(),
        "module {} slot {} ({} mechanisms), keystore {}",
        token.module.display(),
        token.slot.id(),
        offered.len(),
        token.keystore_dir.display()
    );
    Ok(Env {
        token,
        raw,
        offered,
        skip_unsupported,
    })
}

// ------------------------------------------------------------------ helpers

/// The result of one step of a case; `Err` ends the case with that outcome.
type Step<T> = Result<T, Outcome>;

/// A cryptoki result as a step: a module error ends the case as rejected.
fn ck<T>(r: cryptoki::error::Result<T>) -> Step<T> {
    r.map_err(|e| Outcome::Err(describe(&e)))
}

/// A raw-binding result as a step.
fn rw<T>(r: Result<T, String>) -> Step<T> {
    r.map_err(Outcome::Err)
}

fn settle(r: Step<Outcome>) -> Outcome {
    r.unwrap_or_else(|o| o)
}

fn short_hex(b: &[u8]) -> String {
    let h = hex::encode(b);
    if h.len() > 48 {
        format!("{}..({} bytes)", &h[..48], b.len())
    } else {
        h
    }
}

/// Ends the case as `Wrong` unless `got == want`.
fn same(what: &str, got: &[u8], want: &[u8]) -> Step<()> {
    if got == want {
        Ok(())
    } else {
        Err(Outcome::Wrong(format!(
            "{what}: got {} expected {}",
            short_hex(got),
            short_hex(want)
        )))
    }
}

/// For a case that must be rejected: a success that returned `data` is an
/// acceptance.
fn accepted_with(what: &str, data: &[u8]) -> Outcome {
    Outcome::Wrong(format!("{what} returned {}", short_hex(data)))
}

/// One vector file being run on one session.
struct Run {
    env: &'static Env,
    session: Session,
    tally: Tally,
    file: &'static str,
    labels: Cell<u64>,
}

impl Run {
    fn new(file: &'static str) -> Run {
        let env = env();
        Run {
            env,
            session: env.token.session(),
            tally: Tally::new(file),
            file,
            labels: Cell::new(0),
        }
    }

    fn load<G: for<'de> Deserialize<'de>>(&self) -> TestFile<G> {
        wp::load(&vectors_dir().join(self.file)).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Raw session handle, for the second binding.
    fn sh(&self) -> u64 {
        self.session.handle()
    }

    /// Whether `mech` is missing and missing mechanisms are to be skipped.
    fn skip_mechanism(&self, mech: u64) -> bool {
        self.env.skip_unsupported && !self.env.offered.contains(&mech)
    }

    /// Counts every case of a group as skipped because the token does not
    /// list its mechanism.
    fn skip_cases<'a>(&mut self, cases: impl Iterator<Item = &'a Case>) {
        for c in cases {
            self.tally
                .record(c, Outcome::Skip("mechanism not offered by the token"));
        }
    }

    fn create(&self, template: &[Attribute]) -> Result<ObjectHandle, String> {
        self.session
            .create_object(template)
            .map_err(|e| format!("C_CreateObject: {}", describe(&e)))
    }

    fn destroy(&self, h: ObjectHandle) {
        let _ = self.session.destroy_object(h);
    }

    /// Creates `template`, runs `f` on it, destroys it. A refused template
    /// ends the case as rejected.
    fn with_object(
        &self,
        template: &[Attribute],
        f: impl FnOnce(ObjectHandle) -> Step<Outcome>,
    ) -> Outcome {
        let h = match self.create(template) {
            Ok(h) => h,
            Err(e) => return Outcome::Err(e),
        };
        let out = settle(f(h));
        self.destroy(h);
        out
    }

    /// `CKA_VALUE` of `h`, then destroys `h`.
    fn take_value(&self, h: ObjectHandle) -> Step<Vec<u8>> {
        let attrs = self.session.get_attributes(h, &[AttributeType::Value]);
        self.destroy(h);
        let attrs = attrs.map_err(|e| {
            Outcome::Wrong(format!(
                "created key but C_GetAttributeValue(CKA_VALUE) failed: {}",
                describe(&e)
            ))
        })?;
        attrs
            .into_iter()
            .find_map(|a| match a {
                Attribute::Value(v) => Some(v),
                _ => None,
            })
            .ok_or_else(|| Outcome::Wrong("created key has no readable CKA_VALUE".into()))
    }

    /// A label no other object of this process carries.
    fn fresh_label(&self, tc_id: u64) -> Vec<u8> {
        let n = self.labels.get() + 1;
        self.labels.set(n);
        format!("wycheproof {} tc {tc_id} #{n}", self.file).into_bytes()
    }

    /// Finds the object the second binding created with `label` and takes
    /// its value.
    fn take_labelled(&self, label: &[u8]) -> Step<Vec<u8>> {
        let found = ck(self
            .session
            .find_objects(&[Attribute::Label(label.to_vec())]))?;
        match found.as_slice() {
            [h] => self.take_value(*h),
            other => {
                for h in other {
                    self.destroy(*h);
                }
                Err(Outcome::Wrong(format!(
                    "{} objects carry the label of the created key",
                    other.len()
                )))
            }
        }
    }

    /// Prints the counts and fails the test on any failure, or if a case of
    /// the file was not counted.
    fn finish(self, declared: usize) {
        self.tally.print(20);
        let failures = self.tally.failures().len();
        assert_eq!(
            self.tally.cases(),
            declared,
            "{}: counted {} cases, the file declares {declared}",
            self.file,
            self.tally.cases()
        );
        assert!(
            failures == 0,
            "{}: {failures} failures (valid cases that failed or invalid cases that were accepted)",
            self.file
        );
    }
}

fn mech_number(m: &Mechanism) -> u64 {
    *m.mechanism_type()
}

fn hash_mechanism(sha: &str) -> MechanismType {
    match sha {
        "SHA-1" => MechanismType::SHA1,
        "SHA-224" => MechanismType::SHA224,
        "SHA-256" => MechanismType::SHA256,
        "SHA-384" => MechanismType::SHA384,
        "SHA-512" => MechanismType::SHA512,
        other => panic!("unexpected hash {other}"),
    }
}

fn mgf1(sha: &str) -> PkcsMgfType {
    match sha {
        "SHA-1" => PkcsMgfType::MGF1_SHA1,
        "SHA-224" => PkcsMgfType::MGF1_SHA224,
        "SHA-256" => PkcsMgfType::MGF1_SHA256,
        "SHA-384" => PkcsMgfType::MGF1_SHA384,
        "SHA-512" => PkcsMgfType::MGF1_SHA512,
        other => panic!("unexpected MGF1 hash {other}"),
    }
}

// ------------------------------------------------------------------ AES-CBC-PAD

fn aes_cbc_pad(file: &'static str) {
    let mut run = Run::new(file);
    let f: TestFile<wp::IndCpaGroup> = run.load();
    for g in &f.test_groups {
        if run.skip_mechanism(cryptoki_sys::CKM_AES_CBC_PAD) {
            run.skip_cases(g.tests.iter().map(|t| &t.case));
            continue;
        }
        for t in &g.tests {
            let Ok(iv) = <[u8; 16]>::try_from(t.iv.bytes()) else {
                run.tally
                    .record(&t.case, Outcome::Skip("IV is not 16 bytes"));
                continue;
            };
            let s = &run.session;
            let out = run.with_object(&keys::secret_key(KeyType::AES, t.key.bytes()), |key| {
                let m = Mechanism::AesCbcPad(iv);
                if t.case.result == Expect::Invalid {
                    return Ok(match s.decrypt(&m, key, t.ct.bytes()) {
                        Ok(pt) => accepted_with("C_Decrypt", &pt),
                        Err(e) => Outcome::Err(describe(&e)),
                    });
                }
                let ct = ck(s.encrypt(&m, key, t.msg.bytes()))?;
                same("ciphertext", &ct, t.ct.bytes())?;
                let pt = ck(s.decrypt(&m, key, t.ct.bytes()))?;
                same("plaintext", &pt, t.msg.bytes())?;
                Ok(Outcome::Ok)
            });
            run.tally.record(&t.case, out);
        }
    }
    run.finish(f.number_of_tests);
}

// ------------------------------------------------------------------ AEAD

#[derive(Clone, Copy, PartialEq, Eq)]
enum Aead {
    /// `CKM_AES_GCM` with `CK_GCM_PARAMS` (cryptoki).
    Gcm,
    /// `CKM_CHACHA20_POLY1305` with `CK_SALSA20_CHACHA20_POLY1305_PARAMS`
    /// (raw binding: cryptoki 0.12 has no such mechanism).
    ChaCha,
}

impl Aead {
    fn mechanism(self) -> u64 {
        match self {
            Aead::Gcm => cryptoki_sys::CKM_AES_GCM,
            Aead::ChaCha => cryptoki_sys::CKM_CHACHA20_POLY1305,
        }
    }

    fn key(self, value: &[u8]) -> Vec<Attribute> {
        match self {
            Aead::Gcm => keys::secret_key(KeyType::AES, value),
            Aead::ChaCha => keys::secret_key_raw_type(keys::CKK_CHACHA20, value),
        }
    }

    /// Whether PKCS#11 forbids this IV / nonce length, so that init must
    /// fail for it.
    fn iv_invalid(self, iv_len: usize) -> bool {
        match self {
            Aead::Gcm => iv_len == 0,
            Aead::ChaCha => iv_len != 12 && iv_len != 8,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn crypt(
        self,
        run: &Run,
        encrypt: bool,
        key: ObjectHandle,
        iv: &[u8],
        aad: &[u8],
        tag_bits: usize,
        data: &[u8],
    ) -> Result<Vec<u8>, String> {
        match self {
            Aead::Gcm => {
                let mut iv = iv.to_vec();
                let params = GcmParams::new(&mut iv, aad, (tag_bits as u64).into())
                    .map_err(|e| describe(&e))?;
                let m = Mechanism::AesGcm(params);
                let r = if encrypt {
                    run.session.encrypt(&m, key, data)
                } else {
                    run.session.decrypt(&m, key, data)
                };
                r.map_err(|e| describe(&e))
            }
            Aead::ChaCha => {
                let params = cryptoki_sys::CK_SALSA20_CHACHA20_POLY1305_PARAMS {
                    pNonce: iv.as_ptr() as *mut u8,
                    ulNonceLen: iv.len() as u64,
                    pAAD: aad.as_ptr() as *mut u8,
                    ulAADLen: aad.len() as u64,
                };
                let ty = cryptoki_sys::CKM_CHACHA20_POLY1305;
                if encrypt {
                    run.env
                        .raw
                        .encrypt(run.sh(), ty, Some(&params), key.handle(), data)
                } else {
                    run.env
                        .raw
                        .decrypt(run.sh(), ty, Some(&params), key.handle(), data)
                }
            }
        }
    }
}

fn aead(file: &'static str, kind: Aead) {
    let mut run = Run::new(file);
    let f: TestFile<wp::AeadGroup> = run.load();
    for g in &f.test_groups {
        if run.skip_mechanism(kind.mechanism()) {
            run.skip_cases(g.tests.iter().map(|t| &t.case));
            continue;
        }
        for t in &g.tests {
            let iv = t.iv.bytes();
            if kind == Aead::ChaCha && iv.len() == 8 {
                // Wycheproof (RFC 8439) calls a 64-bit nonce invalid; PKCS#11
                // allows it for CKM_CHACHA20_POLY1305 (the original ChaCha20
                // nonce), so a conforming token computes something else.
                run.tally.record(
                    &t.case,
                    Outcome::Skip("64-bit ChaCha20 nonce is valid in PKCS#11"),
                );
                continue;
            }
            let ct_tag = [t.ct.bytes(), t.tag.bytes()].concat();
            let out = run.with_object(&kind.key(t.key.bytes()), |key| {
                let crypt = |enc: bool, data: &[u8]| {
                    kind.crypt(&run, enc, key, iv, t.aad.bytes(), g.tag_size, data)
                };
                if t.case.result == Expect::Invalid {
                    if kind.iv_invalid(iv.len()) {
                        if let Ok(ct) = crypt(true, t.msg.bytes()) {
                            return Ok(accepted_with("C_Encrypt with an invalid IV", &ct));
                        }
                    }
                    return Ok(match crypt(false, &ct_tag) {
                        Ok(pt) => accepted_with("C_Decrypt", &pt),
                        Err(e) => Outcome::Err(e),
                    });
                }
                let ct = rw(crypt(true, t.msg.bytes()))?;
                same("ciphertext||tag", &ct, &ct_tag)?;
                let pt = rw(crypt(false, &ct_tag))?;
                same("plaintext", &pt, t.msg.bytes())?;
                Ok(Outcome::Ok)
            });
            run.tally.record(&t.case, out);
        }
    }
    run.finish(f.number_of_tests);
}

// ------------------------------------------------------------------ MACs

/// How a MAC file names its mechanisms.
struct MacKind {
    key_type: KeyType,
    /// Full-length mechanism, if cryptoki has it.
    full: Option<fn() -> Mechanism<'static>>,
    /// Full-length mechanism number (for the raw binding when `full` is None).
    full_raw: u64,
    /// The `*_GENERAL` mechanism for truncated tags (raw binding).
    general: u64,
    /// Full MAC length in bytes.
    full_len: usize,
}

/// A MAC mechanism ready to use.
enum Mac {
    Ck(Mechanism<'static>),
    Raw { ty: u64, len: Option<u64> },
}

impl Mac {
    fn number(&self) -> u64 {
        match self {
            Mac::Ck(m) => mech_number(m),
            Mac::Raw { ty, .. } => *ty,
        }
    }

    fn sign(&self, run: &Run, key: ObjectHandle, msg: &[u8]) -> Result<Vec<u8>, String> {
        match self {
            Mac::Ck(m) => run.session.sign(m, key, msg).map_err(|e| describe(&e)),
            Mac::Raw { ty, len } => {
                run.env
                    .raw
                    .sign(run.sh(), *ty, len.as_ref(), key.handle(), msg)
            }
        }
    }

    fn verify(&self, run: &Run, key: ObjectHandle, msg: &[u8], tag: &[u8]) -> Result<(), String> {
        match self {
            Mac::Ck(m) => run
                .session
                .verify(m, key, msg, tag)
                .map_err(|e| describe(&e)),
            Mac::Raw { ty, len } => {
                run.env
                    .raw
                    .verify(run.sh(), *ty, len.as_ref(), key.handle(), msg, tag)
            }
        }
    }
}

fn mac(file: &'static str, kind: MacKind) {
    let mut run = Run::new(file);
    let f: TestFile<wp::MacGroup> = run.load();
    for g in &f.test_groups {
        let tag_len = g.tag_size / 8;
        let m = if tag_len == kind.full_len {
            match kind.full {
                Some(m) => Mac::Ck(m()),
                None => Mac::Raw {
                    ty: kind.full_raw,
                    len: None,
                },
            }
        } else if tag_len < kind.full_len && g.tag_size % 8 == 0 {
            Mac::Raw {
                ty: kind.general,
                len: Some(tag_len as u64),
            }
        } else {
            for t in &g.tests {
                run.tally
                    .record(&t.case, Outcome::Skip("tag size not expressible"));
            }
            continue;
        };
        if run.skip_mechanism(m.number()) {
            run.skip_cases(g.tests.iter().map(|t| &t.case));
            continue;
        }
        for t in &g.tests {
            let out = run.with_object(&keys::secret_key(kind.key_type, t.key.bytes()), |key| {
                if t.case.result == Expect::Invalid {
                    return Ok(match m.verify(&run, key, t.msg.bytes(), t.tag.bytes()) {
                        Ok(()) => Outcome::Ok,
                        Err(e) => Outcome::Err(e),
                    });
                }
                let tag = rw(m.sign(&run, key, t.msg.bytes()))?;
                same("tag", &tag, t.tag.bytes())?;
                rw(m.verify(&run, key, t.msg.bytes(), t.tag.bytes()))?;
                Ok(Outcome::Ok)
            });
            run.tally.record(&t.case, out);
        }
    }
    run.finish(f.number_of_tests);
}

fn hmac(
    file: &'static str,
    full: Option<fn() -> Mechanism<'static>>,
    full_raw: u64,
    general: u64,
    full_len: usize,
) {
    mac(
        file,
        MacKind {
            key_type: KeyType::GENERIC_SECRET,
            full,
            full_raw,
            general,
            full_len,
        },
    )
}

// ------------------------------------------------------------------ key wrap

#[derive(Clone, Copy, PartialEq, Eq)]
enum Wrap {
    /// `CKM_AES_KEY_WRAP`, RFC 3394 (cryptoki).
    Kw,
    /// `CKM_AES_KEY_WRAP_KWP`, RFC 5649 (raw binding: cryptoki's
    /// `AesKeyWrapPad` is `CKM_AES_KEY_WRAP_PAD`, another mechanism).
    Kwp,
}

impl Wrap {
    fn mechanism(self) -> u64 {
        match self {
            Wrap::Kw => cryptoki_sys::CKM_AES_KEY_WRAP,
            Wrap::Kwp => cryptoki_sys::CKM_AES_KEY_WRAP_KWP,
        }
    }

    fn wrap(self, run: &Run, kek: ObjectHandle, key: ObjectHandle) -> Result<Vec<u8>, String> {
        match self {
            Wrap::Kw => run
                .session
                .wrap_key(&Mechanism::AesKeyWrap, kek, key)
                .map_err(|e| describe(&e)),
            Wrap::Kwp => {
                run.env
                    .raw
                    .wrap_key(run.sh(), self.mechanism(), kek.handle(), key.handle())
            }
        }
    }

    /// Unwraps into a generic secret and returns its value; `Err(Outcome::Err)`
    /// when the module refuses.
    fn unwrap(self, run: &Run, tc_id: u64, kek: ObjectHandle, wrapped: &[u8]) -> Step<Vec<u8>> {
        match self {
            Wrap::Kw => {
                let h = ck(run.session.unwrap_key(
                    &Mechanism::AesKeyWrap,
                    kek,
                    wrapped,
                    &keys::derived_secret(None),
                ))?;
                run.take_value(h)
            }
            Wrap::Kwp => {
                let label = run.fresh_label(tc_id);
                rw(run.env.raw.unwrap_secret(
                    run.sh(),
                    self.mechanism(),
                    kek.handle(),
                    wrapped,
                    &label,
                ))?;
                run.take_labelled(&label)
            }
        }
    }
}

fn keywrap(file: &'static str, kind: Wrap) {
    let mut run = Run::new(file);
    let f: TestFile<wp::KeywrapGroup> = run.load();
    for g in &f.test_groups {
        if run.skip_mechanism(kind.mechanism()) {
            run.skip_cases(g.tests.iter().map(|t| &t.case));
            continue;
        }
        for t in &g.tests {
            let id = t.case.tc_id;
            let out = run.with_object(&keys::secret_key(KeyType::AES, t.key.bytes()), |kek| {
                if t.case.result == Expect::Invalid {
                    if !t.ct.is_empty() {
                        return Ok(match kind.unwrap(&run, id, kek, t.ct.bytes()) {
                            Ok(v) => accepted_with("C_UnwrapKey", &v),
                            Err(o) => o,
                        });
                    }
                    // Nothing to unwrap: the key itself cannot be wrapped.
                    let target = keys::secret_key(KeyType::GENERIC_SECRET, t.msg.bytes());
                    return Ok(run.with_object(&target, |key| {
                        Ok(match kind.wrap(&run, kek, key) {
                            Ok(w) => accepted_with("C_WrapKey", &w),
                            Err(e) => Outcome::Err(e),
                        })
                    }));
                }
                let target = keys::secret_key(KeyType::GENERIC_SECRET, t.msg.bytes());
                let wrapped = run.with_object(&target, |key| {
                    let w = rw(kind.wrap(&run, kek, key))?;
                    same("wrapped key", &w, t.ct.bytes())?;
                    Ok(Outcome::Ok)
                });
                if !matches!(wrapped, Outcome::Ok) {
                    return Ok(wrapped);
                }
                let v = kind.unwrap(&run, id, kek, t.ct.bytes())?;
                same("unwrapped key", &v, t.msg.bytes())?;
                Ok(Outcome::Ok)
            });
            run.tally.record(&t.case, out);
        }
    }
    run.finish(f.number_of_tests);
}

// ------------------------------------------------------------------ KDFs

fn hkdf(file: &'static str, prf: MechanismType) {
    let mut run = Run::new(file);
    let f: TestFile<wp::HkdfGroup> = run.load();
    for g in &f.test_groups {
        if run.skip_mechanism(cryptoki_sys::CKM_HKDF_DERIVE) {
            run.skip_cases(g.tests.iter().map(|t| &t.case));
            continue;
        }
        for t in &g.tests {
            let s = &run.session;
            let base = keys::secret_key(KeyType::GENERIC_SECRET, t.ikm.bytes());
            let out = run.with_object(&base, |key| {
                // An empty salt is, by RFC 5869, HashLen zero bytes: the
                // CKF_HKDF_SALT_NULL case of CK_HKDF_PARAMS.
                let salt = if t.salt.is_empty() {
                    HkdfSalt::Null
                } else {
                    HkdfSalt::Data(t.salt.bytes())
                };
                let params = HkdfParams::new(prf, Some(salt), Some(t.info.bytes()));
                let derived = s.derive_key(
                    &Mechanism::HkdfDerive(params),
                    key,
                    &keys::derived_secret(Some(t.size)),
                );
                if t.case.result == Expect::Invalid {
                    return Ok(match derived {
                        Ok(h) => match run.take_value(h) {
                            Ok(v) => accepted_with("C_DeriveKey", &v),
                            Err(o) => o,
                        },
                        Err(e) => Outcome::Err(describe(&e)),
                    });
                }
                let okm = run.take_value(ck(derived)?)?;
                same("okm", &okm, t.okm.bytes())?;
                Ok(Outcome::Ok)
            });
            run.tally.record(&t.case, out);
        }
    }
    run.finish(f.number_of_tests);
}

/// `CKM_PKCS5_PBKD2` (raw binding: cryptoki 0.12 has no such mechanism),
/// with the PKCS#11 3.0 `CK_PKCS5_PBKD2_PARAMS2` (password length by value).
fn pbkdf2(file: &'static str, prf: u64) {
    let mut run = Run::new(file);
    let f: TestFile<wp::PbkdfGroup> = run.load();
    for g in &f.test_groups {
        if run.skip_mechanism(cryptoki_sys::CKM_PKCS5_PBKD2) {
            run.skip_cases(g.tests.iter().map(|t| &t.case));
            continue;
        }
        for t in &g.tests {
            let out = settle((|| -> Step<Outcome> {
                let params = cryptoki_sys::CK_PKCS5_PBKD2_PARAMS2 {
                    saltSource: cryptoki_sys::CKZ_SALT_SPECIFIED,
                    pSaltSourceData: t.salt.bytes().as_ptr() as *mut c_void,
                    ulSaltSourceDataLen: t.salt.len() as u64,
                    iterations: t.iteration_count,
                    prf,
                    pPrfData: std::ptr::null_mut(),
                    ulPrfDataLen: 0,
                    pPassword: t.password.bytes().as_ptr() as *mut u8,
                    ulPasswordLen: t.password.len() as u64,
                };
                let label = run.fresh_label(t.case.tc_id);
                let generated = run.env.raw.generate_secret(
                    run.sh(),
                    cryptoki_sys::CKM_PKCS5_PBKD2,
                    Some(&params),
                    &label,
                    t.dk_len as u64,
                );
                if t.case.result == Expect::Invalid {
                    return Ok(match generated {
                        Ok(()) => match run.take_labelled(&label) {
                            Ok(v) => accepted_with("C_GenerateKey", &v),
                            Err(o) => o,
                        },
                        Err(e) => Outcome::Err(e),
                    });
                }
                rw(generated)?;
                let dk = run.take_labelled(&label)?;
                same("derived key", &dk, t.dk.bytes())?;
                Ok(Outcome::Ok)
            })());
            run.tally.record(&t.case, out);
        }
    }
    run.finish(f.number_of_tests);
}

// ------------------------------------------------------------------ key agreement

/// Runs a derive that must give `expected` (valid/acceptable) or fail
/// (invalid), and reads the derived value.
fn derive_case(
    run: &Run,
    case: &Case,
    m: &Mechanism,
    key: ObjectHandle,
    len: usize,
    expected: &[u8],
) -> Step<Outcome> {
    let derived = run
        .session
        .derive_key(m, key, &keys::derived_secret(Some(len)));
    if case.result == Expect::Invalid {
        return Ok(match derived {
            Ok(h) => match run.take_value(h) {
                Ok(v) => accepted_with("C_DeriveKey", &v),
                Err(o) => o,
            },
            Err(e) => Outcome::Err(describe(&e)),
        });
    }
    let v = run.take_value(ck(derived)?)?;
    same("shared secret", &v, expected)?;
    Ok(Outcome::Ok)
}

/// `CKM_ECDH1_DERIVE` (CKD_NULL) on P-256/384/521 with the peer's point as
/// given (uncompressed, compressed or malformed).
fn ecdh(file: &'static str) {
    let mut run = Run::new(file);
    let f: TestFile<wp::EcdhGroup> = run.load();
    for g in &f.test_groups {
        let curve = Curve::from_name(&g.curve).unwrap_or_else(|| panic!("curve {}", g.curve));
        if run.skip_mechanism(cryptoki_sys::CKM_ECDH1_DERIVE) {
            run.skip_cases(g.tests.iter().map(|t| &t.case));
            continue;
        }
        for t in &g.tests {
            let Some(template) = keys::ec_private(curve, t.private.bytes()) else {
                run.tally.record(
                    &t.case,
                    Outcome::Encoding("private scalar longer than the curve order".into()),
                );
                continue;
            };
            let out = run.with_object(&template, |key| {
                let params = Ecdh1DeriveParams::new(EcKdf::null(), t.public.bytes());
                derive_case(
                    &run,
                    &t.case,
                    &Mechanism::Ecdh1Derive(params),
                    key,
                    curve.scalar_len(),
                    t.shared.bytes(),
                )
            });
            run.tally.record(&t.case, out);
        }
    }
    run.finish(f.number_of_tests);
}

/// X25519 / X448: `CKM_ECDH1_DERIVE` on a `CKK_EC_MONTGOMERY` key, the peer's
/// u-coordinate as public data.
fn xdh(file: &'static str) {
    let mut run = Run::new(file);
    let f: TestFile<wp::EcdhGroup> = run.load();
    for g in &f.test_groups {
        let curve = Rfc8410::from_name(&g.curve).unwrap_or_else(|| panic!("curve {}", g.curve));
        // A token that cannot generate Montgomery keys is taken not to have
        // them at all (only when missing mechanisms are skipped).
        if run.skip_mechanism(cryptoki_sys::CKM_ECDH1_DERIVE)
            || run.skip_mechanism(cryptoki_sys::CKM_EC_MONTGOMERY_KEY_PAIR_GEN)
        {
            run.skip_cases(g.tests.iter().map(|t| &t.case));
            continue;
        }
        for t in &g.tests {
            let template = keys::rfc8410_private(curve, t.private.bytes());
            let out = run.with_object(&template, |key| {
                let params = Ecdh1DeriveParams::new(EcKdf::null(), t.public.bytes());
                derive_case(
                    &run,
                    &t.case,
                    &Mechanism::Ecdh1Derive(params),
                    key,
                    curve.key_len(),
                    t.shared.bytes(),
                )
            });
            run.tally.record(&t.case, out);
        }
    }
    run.finish(f.number_of_tests);
}

// ------------------------------------------------------------------ signatures

/// Verifies `sig` over `msg`; a failed verification or any error is a
/// rejection.
fn verify_case(run: &Run, m: &Mechanism, key: ObjectHandle, msg: &[u8], sig: &[u8]) -> Outcome {
    match run.session.verify(m, key, msg, sig) {
        Ok(()) => Outcome::Ok,
        Err(e) => Outcome::Err(describe(&e)),
    }
}

/// Creates a key shared by a group; a refusal is recorded for every case.
fn group_key(run: &Run, template: &[Attribute]) -> Result<ObjectHandle, String> {
    run.create(template)
}

fn ecdsa(file: &'static str, p1363: bool) {
    let mut run = Run::new(file);
    let f: TestFile<wp::EcdsaGroup> = run.load();
    for g in &f.test_groups {
        let curve = Curve::from_name(&g.public_key.curve)
            .unwrap_or_else(|| panic!("curve {}", g.public_key.curve));
        let (m, digest) = match g.sha.as_str() {
            "SHA-224" => (Mechanism::EcdsaSha224, MessageDigest::sha224()),
            "SHA-256" => (Mechanism::EcdsaSha256, MessageDigest::sha256()),
            "SHA-384" => (Mechanism::EcdsaSha384, MessageDigest::sha384()),
            "SHA-512" => (Mechanism::EcdsaSha512, MessageDigest::sha512()),
            other => panic!("unexpected hash {other}"),
        };
        // Only when missing mechanisms are skipped (third-party modules):
        // a token without CKM_ECDSA_SHA* is driven with CKM_ECDSA over a
        // digest computed here, so the signature handling is still checked.
        let prehash = run.skip_mechanism(mech_number(&m));
        if prehash && run.skip_mechanism(cryptoki_sys::CKM_ECDSA) {
            run.skip_cases(g.tests.iter().map(|t| &t.case));
            continue;
        }
        let m = if prehash { Mechanism::Ecdsa } else { m };
        let key = group_key(
            &run,
            &keys::ec_public(curve, g.public_key.uncompressed.bytes()),
        );
        for t in &g.tests {
            let out = match &key {
                Err(e) => Outcome::Err(e.clone()),
                Ok(key) => {
                    let sig = if p1363 {
                        Ok(t.sig.0.clone())
                    } else {
                        der::ecdsa_der_to_raw(t.sig.bytes(), curve.scalar_len())
                    };
                    let data = if prehash {
                        openssl::hash::hash(digest, t.msg.bytes())
                            .expect("digest")
                            .to_vec()
                    } else {
                        t.msg.0.clone()
                    };
                    match sig {
                        Ok(sig) => verify_case(&run, &m, *key, &data, &sig),
                        Err(why) => Outcome::Encoding(why.into()),
                    }
                }
            };
            run.tally.record(&t.case, out);
        }
        if let Ok(k) = key {
            run.destroy(k);
        }
    }
    run.finish(f.number_of_tests);
}

fn eddsa(file: &'static str) {
    let mut run = Run::new(file);
    let f: TestFile<wp::EddsaGroup> = run.load();
    for g in &f.test_groups {
        let curve = Rfc8410::from_name(&g.public_key.curve)
            .unwrap_or_else(|| panic!("curve {}", g.public_key.curve));
        // Ed25519 (pure) takes no parameter; Ed448 requires CK_EDDSA_PARAMS
        // (phFlag FALSE, empty context) by the PKCS#11 3.0 table.
        let scheme = match curve {
            Rfc8410::Ed448 => EddsaSignatureScheme::Ed448(&[]),
            _ => EddsaSignatureScheme::Pure,
        };
        let m = Mechanism::Eddsa(EddsaParams::new(scheme));
        if run.skip_mechanism(cryptoki_sys::CKM_EDDSA) {
            run.skip_cases(g.tests.iter().map(|t| &t.case));
            continue;
        }
        let key = group_key(&run, &keys::rfc8410_public(curve, g.public_key.pk.bytes()));
        for t in &g.tests {
            let out = match &key {
                Err(e) => Outcome::Err(e.clone()),
                Ok(key) => verify_case(&run, &m, *key, t.msg.bytes(), t.sig.bytes()),
            };
            run.tally.record(&t.case, out);
        }
        if let Ok(k) = key {
            run.destroy(k);
        }
    }
    run.finish(f.number_of_tests);
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum RsaSig {
    Pkcs1,
    Pss,
}

fn rsa_verify(file: &'static str, kind: RsaSig) {
    let mut run = Run::new(file);
    let f: TestFile<wp::RsaVerifyGroup> = run.load();
    for g in &f.test_groups {
        let m = match kind {
            RsaSig::Pkcs1 => match g.sha.as_str() {
                "SHA-1" => Mechanism::Sha1RsaPkcs,
                "SHA-224" => Mechanism::Sha224RsaPkcs,
                "SHA-256" => Mechanism::Sha256RsaPkcs,
                "SHA-384" => Mechanism::Sha384RsaPkcs,
                "SHA-512" => Mechanism::Sha512RsaPkcs,
                other => panic!("unexpected hash {other}"),
            },
            RsaSig::Pss => {
                let params = PkcsPssParams {
                    hash_alg: hash_mechanism(&g.sha),
                    mgf: mgf1(g.mgf_sha.as_deref().unwrap_or(&g.sha)),
                    s_len: g.s_len.unwrap_or(0).into(),
                };
                match g.sha.as_str() {
                    "SHA-1" => Mechanism::Sha1RsaPkcsPss(params),
                    "SHA-256" => Mechanism::Sha256RsaPkcsPss(params),
                    "SHA-384" => Mechanism::Sha384RsaPkcsPss(params),
                    "SHA-512" => Mechanism::Sha512RsaPkcsPss(params),
                    other => panic!("unexpected hash {other}"),
                }
            }
        };
        if run.skip_mechanism(mech_number(&m)) {
            run.skip_cases(g.tests.iter().map(|t| &t.case));
            continue;
        }
        let key = group_key(
            &run,
            &keys::rsa_public(
                g.public_key.modulus.bytes(),
                g.public_key.public_exponent.bytes(),
            ),
        );
        for t in &g.tests {
            let out = match &key {
                Err(e) => Outcome::Err(e.clone()),
                Ok(key) => verify_case(&run, &m, *key, t.msg.bytes(), t.sig.bytes()),
            };
            run.tally.record(&t.case, out);
        }
        if let Ok(k) = key {
            run.destroy(k);
        }
    }
    run.finish(f.number_of_tests);
}

/// PKCS#1 v1.5 signing is deterministic: the signature must be the vector's.
fn rsa_sign(file: &'static str) {
    let mut run = Run::new(file);
    let f: TestFile<wp::RsaSignGroup> = run.load();
    for g in &f.test_groups {
        let m = match g.sha.as_str() {
            "SHA-1" => Mechanism::Sha1RsaPkcs,
            "SHA-224" => Mechanism::Sha224RsaPkcs,
            "SHA-256" => Mechanism::Sha256RsaPkcs,
            "SHA-384" => Mechanism::Sha384RsaPkcs,
            "SHA-512" => Mechanism::Sha512RsaPkcs,
            other => panic!("unexpected hash {other}"),
        };
        if run.skip_mechanism(mech_number(&m)) {
            run.skip_cases(g.tests.iter().map(|t| &t.case));
            continue;
        }
        let key = keys::rsa_private_pkcs8(g.private_key_pkcs8.bytes())
            .and_then(|tpl| group_key(&run, &tpl));
        for t in &g.tests {
            let out = match &key {
                Err(e) => Outcome::Err(e.clone()),
                Ok(key) => settle((|| -> Step<Outcome> {
                    let sig = ck(run.session.sign(&m, *key, t.msg.bytes()))?;
                    same("signature", &sig, t.sig.bytes())?;
                    Ok(Outcome::Ok)
                })()),
            };
            run.tally.record(&t.case, out);
        }
        if let Ok(k) = key {
            run.destroy(k);
        }
    }
    run.finish(f.number_of_tests);
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum RsaEnc {
    Pkcs1,
    Oaep,
}

fn rsa_decrypt(file: &'static str, kind: RsaEnc) {
    let mut run = Run::new(file);
    let f: TestFile<wp::RsaDecryptGroup> = run.load();
    for g in &f.test_groups {
        let number = match kind {
            RsaEnc::Pkcs1 => cryptoki_sys::CKM_RSA_PKCS,
            RsaEnc::Oaep => cryptoki_sys::CKM_RSA_PKCS_OAEP,
        };
        if run.skip_mechanism(number) {
            run.skip_cases(g.tests.iter().map(|t| &t.case));
            continue;
        }
        let key = keys::rsa_private_pkcs8(g.private_key_pkcs8.bytes())
            .and_then(|tpl| group_key(&run, &tpl));
        for t in &g.tests {
            let out = match &key {
                Err(e) => Outcome::Err(e.clone()),
                Ok(key) => {
                    let m = match kind {
                        RsaEnc::Pkcs1 => Mechanism::RsaPkcs,
                        RsaEnc::Oaep => {
                            let sha = g.sha.as_deref().expect("OAEP group without sha");
                            let source = if t.label.is_empty() {
                                PkcsOaepSource::empty()
                            } else {
                                PkcsOaepSource::data_specified(t.label.bytes())
                            };
                            Mechanism::RsaPkcsOaep(PkcsOaepParams::new(
                                hash_mechanism(sha),
                                mgf1(g.mgf_sha.as_deref().unwrap_or(sha)),
                                source,
                            ))
                        }
                    };
                    let pt = run.session.decrypt(&m, *key, t.ct.bytes());
                    if t.case.result == Expect::Invalid {
                        match pt {
                            Ok(pt) => accepted_with("C_Decrypt", &pt),
                            Err(e) => Outcome::Err(describe(&e)),
                        }
                    } else {
                        settle((|| -> Step<Outcome> {
                            let pt = ck(pt)?;
                            same("plaintext", &pt, t.msg.bytes())?;
                            Ok(Outcome::Ok)
                        })())
                    }
                }
            };
            run.tally.record(&t.case, out);
        }
        if let Ok(k) = key {
            run.destroy(k);
        }
    }
    run.finish(f.number_of_tests);
}

// ------------------------------------------------------------------ ML-DSA

fn mldsa_set(run: &Run, algorithm: &str) -> cryptoki::object::MlDsaParameterSetType {
    keys::mldsa_parameter_set(algorithm)
        .unwrap_or_else(|| panic!("{}: unexpected algorithm {algorithm}", run.file))
}

fn mldsa_verify(file: &'static str) {
    let mut run = Run::new(file);
    let f: TestFile<wp::MlDsaVerifyGroup> = run.load();
    let set = mldsa_set(&run, &f.algorithm);
    for g in &f.test_groups {
        if run.skip_mechanism(cryptoki_sys::CKM_ML_DSA) {
            run.skip_cases(g.tests.iter().map(|t| &t.case));
            continue;
        }
        let key = group_key(&run, &keys::mldsa_public(set, g.public_key.bytes()));
        for t in &g.tests {
            let Some(msg) = &t.msg else {
                run.tally.record(
                    &t.case,
                    Outcome::Skip("external mu has no PKCS#11 3.2 mechanism"),
                );
                continue;
            };
            let out = match &key {
                Err(e) => Outcome::Err(e.clone()),
                Ok(key) => {
                    let ctx = SignAdditionalContext::new(
                        HedgeType::Preferred,
                        t.ctx.as_ref().map(|c| c.bytes()),
                    );
                    verify_case(
                        &run,
                        &Mechanism::MlDsa(ctx),
                        *key,
                        msg.bytes(),
                        t.sig.bytes(),
                    )
                }
            };
            run.tally.record(&t.case, out);
        }
        if let Ok(k) = key {
            run.destroy(k);
        }
    }
    run.finish(f.number_of_tests);
}

/// Deterministic ML-DSA signing (`CKH_DETERMINISTIC_REQUIRED`) from the
/// 32-byte seed: the signature must be the vector's.
fn mldsa_sign(file: &'static str) {
    let mut run = Run::new(file);
    let f: TestFile<wp::MlDsaSignGroup> = run.load();
    let set = mldsa_set(&run, &f.algorithm);
    for g in &f.test_groups {
        if run.skip_mechanism(cryptoki_sys::CKM_ML_DSA) {
            run.skip_cases(g.tests.iter().map(|t| &t.case));
            continue;
        }
        let key = group_key(&run, &keys::mldsa_private_seed(set, g.private_seed.bytes()));
        let public = g
            .public_key
            .as_ref()
            .map(|pk| group_key(&run, &keys::mldsa_public(set, pk.bytes())));
        for t in &g.tests {
            let Some(msg) = &t.msg else {
                run.tally.record(
                    &t.case,
                    Outcome::Skip("external mu has no PKCS#11 3.2 mechanism"),
                );
                continue;
            };
            let ctx = t.ctx.as_ref().map(|c| c.bytes());
            if t.rnd.is_some() {
                // Hedged signing with the vector's rnd cannot be asked for:
                // PKCS#11 has no input for it. Still check that the vector's
                // signature verifies under the group's public key.
                match &public {
                    Some(Ok(pk)) => {
                        let m =
                            Mechanism::MlDsa(SignAdditionalContext::new(HedgeType::Preferred, ctx));
                        if let Outcome::Err(e) =
                            verify_case(&run, &m, *pk, msg.bytes(), t.sig.bytes())
                        {
                            run.tally.fail(format!(
                                "tcId {}: the hedged signature does not verify: {e}",
                                t.case.tc_id
                            ));
                        }
                    }
                    Some(Err(e)) => run.tally.fail(format!(
                        "tcId {}: the group's public key was refused: {e}",
                        t.case.tc_id
                    )),
                    None => {}
                }
                run.tally.record(
                    &t.case,
                    Outcome::Skip("hedged signing with a given rnd is not expressible"),
                );
                continue;
            }
            let out = match &key {
                Err(e) => Outcome::Err(e.clone()),
                Ok(key) => {
                    let m = Mechanism::MlDsa(SignAdditionalContext::new(
                        HedgeType::DeterministicRequired,
                        ctx,
                    ));
                    let sig = run.session.sign(&m, *key, msg.bytes());
                    if t.case.result == Expect::Invalid {
                        match sig {
                            Ok(s) => accepted_with("C_Sign", &s),
                            Err(e) => Outcome::Err(describe(&e)),
                        }
                    } else {
                        settle((|| -> Step<Outcome> {
                            let sig = ck(sig)?;
                            same("signature", &sig, t.sig.bytes())?;
                            Ok(Outcome::Ok)
                        })())
                    }
                }
            };
            run.tally.record(&t.case, out);
        }
        for k in [key.ok(), public.and_then(|p| p.ok())]
            .into_iter()
            .flatten()
        {
            run.destroy(k);
        }
    }
    run.finish(f.number_of_tests);
}

// ------------------------------------------------------------------ ML-KEM

/// `C_DecapsulateKey` with the private key from the 64-byte seed must give
/// K; for valid cases with an encapsulation key, `C_EncapsulateKey` to it and
/// decapsulation of the result must agree.
fn mlkem(file: &'static str) {
    let mut run = Run::new(file);
    let f: TestFile<wp::MlKemGroup> = run.load();
    for g in &f.test_groups {
        let set = keys::mlkem_parameter_set(&g.parameter_set)
            .unwrap_or_else(|| panic!("parameter set {}", g.parameter_set));
        if run.skip_mechanism(cryptoki_sys::CKM_ML_KEM) {
            run.skip_cases(g.tests.iter().map(|t| &t.case));
            continue;
        }
        for t in &g.tests {
            let s = &run.session;
            let out = run.with_object(&keys::mlkem_private_seed(set, t.seed.bytes()), |dk| {
                let secret = s.decapsulate_key(
                    &Mechanism::MlKem,
                    dk,
                    &keys::derived_secret(None),
                    t.c.bytes(),
                );
                if t.case.result == Expect::Invalid {
                    return Ok(match secret {
                        Ok(h) => match run.take_value(h) {
                            Ok(v) => accepted_with("C_DecapsulateKey", &v),
                            Err(o) => o,
                        },
                        Err(e) => Outcome::Err(describe(&e)),
                    });
                }
                let k = run.take_value(ck(secret)?)?;
                same("shared secret", &k, t.k.bytes())?;
                if let Some(ek) = &t.ek {
                    let pk = rw(run.create(&keys::mlkem_public(set, ek.bytes())))?;
                    let enc = s.encapsulate_key(&Mechanism::MlKem, pk, &keys::derived_secret(None));
                    run.destroy(pk);
                    let (c2, h2) = ck(enc)?;
                    let k2 = run.take_value(h2)?;
                    if c2.len() != t.c.len() {
                        return Err(Outcome::Wrong(format!(
                            "C_EncapsulateKey gave a {}-byte ciphertext, expected {}",
                            c2.len(),
                            t.c.len()
                        )));
                    }
                    let back = ck(s.decapsulate_key(
                        &Mechanism::MlKem,
                        dk,
                        &keys::derived_secret(None),
                        &c2,
                    ))?;
                    let k3 = run.take_value(back)?;
                    same("round trip through the encapsulation key", &k3, &k2)?;
                }
                Ok(Outcome::Ok)
            });
            run.tally.record(&t.case, out);
        }
    }
    run.finish(f.number_of_tests);
}

// ------------------------------------------------------------------ the tests

/// One `#[test]` per vector file.
macro_rules! vector_tests {
    ($($name:ident: $file:literal => $body:expr;)*) => {
        $(
            #[test]
            fn $name() {
                $body
            }
        )*

        /// Every file in the vector directory has a test above.
        #[test]
        fn every_vector_file_has_a_test() {
            let known = [$($file),*];
            let dir = vectors_dir();
            let mut missing = Vec::new();
            for entry in std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            {
                let name = entry.expect("directory entry").file_name();
                let name = name.to_string_lossy().into_owned();
                if name.ends_with(".json") && !known.contains(&name.as_str()) {
                    missing.push(name);
                }
            }
            assert!(missing.is_empty(), "vector files without a test: {missing:?}");
        }
    };
}

vector_tests! {
    aes_cbc_pkcs5: "aes_cbc_pkcs5_test.json" => aes_cbc_pad("aes_cbc_pkcs5_test.json");
    aes_gcm: "aes_gcm_test.json" => aead("aes_gcm_test.json", Aead::Gcm);
    chacha20_poly1305: "chacha20_poly1305_test.json" =>
        aead("chacha20_poly1305_test.json", Aead::ChaCha);
    aes_wrap: "aes_wrap_test.json" => keywrap("aes_wrap_test.json", Wrap::Kw);
    aes_kwp: "aes_kwp_test.json" => keywrap("aes_kwp_test.json", Wrap::Kwp);
    aes_cmac: "aes_cmac_test.json" => mac("aes_cmac_test.json", MacKind {
        key_type: KeyType::AES,
        full: Some(|| Mechanism::AesCMac),
        full_raw: cryptoki_sys::CKM_AES_CMAC,
        general: cryptoki_sys::CKM_AES_CMAC_GENERAL,
        full_len: 16,
    });
    hmac_sha1: "hmac_sha1_test.json" => hmac("hmac_sha1_test.json",
        Some(|| Mechanism::Sha1Hmac), cryptoki_sys::CKM_SHA_1_HMAC,
        cryptoki_sys::CKM_SHA_1_HMAC_GENERAL, 20);
    hmac_sha224: "hmac_sha224_test.json" => hmac("hmac_sha224_test.json",
        Some(|| Mechanism::Sha224Hmac), cryptoki_sys::CKM_SHA224_HMAC,
        cryptoki_sys::CKM_SHA224_HMAC_GENERAL, 28);
    hmac_sha256: "hmac_sha256_test.json" => hmac("hmac_sha256_test.json",
        Some(|| Mechanism::Sha256Hmac), cryptoki_sys::CKM_SHA256_HMAC,
        cryptoki_sys::CKM_SHA256_HMAC_GENERAL, 32);
    hmac_sha384: "hmac_sha384_test.json" => hmac("hmac_sha384_test.json",
        Some(|| Mechanism::Sha384Hmac), cryptoki_sys::CKM_SHA384_HMAC,
        cryptoki_sys::CKM_SHA384_HMAC_GENERAL, 48);
    hmac_sha512: "hmac_sha512_test.json" => hmac("hmac_sha512_test.json",
        Some(|| Mechanism::Sha512Hmac), cryptoki_sys::CKM_SHA512_HMAC,
        cryptoki_sys::CKM_SHA512_HMAC_GENERAL, 64);
    hmac_sha3_256: "hmac_sha3_256_test.json" => hmac("hmac_sha3_256_test.json",
        None, cryptoki_sys::CKM_SHA3_256_HMAC,
        cryptoki_sys::CKM_SHA3_256_HMAC_GENERAL, 32);
    hkdf_sha256: "hkdf_sha256_test.json" => hkdf("hkdf_sha256_test.json", MechanismType::SHA256);
    hkdf_sha384: "hkdf_sha384_test.json" => hkdf("hkdf_sha384_test.json", MechanismType::SHA384);
    hkdf_sha512: "hkdf_sha512_test.json" => hkdf("hkdf_sha512_test.json", MechanismType::SHA512);
    pbkdf2_hmacsha1: "pbkdf2_hmacsha1_test.json" =>
        pbkdf2("pbkdf2_hmacsha1_test.json", cryptoki_sys::CKP_PKCS5_PBKD2_HMAC_SHA1);
    pbkdf2_hmacsha256: "pbkdf2_hmacsha256_test.json" =>
        pbkdf2("pbkdf2_hmacsha256_test.json", cryptoki_sys::CKP_PKCS5_PBKD2_HMAC_SHA256);
    ecdh_secp256r1: "ecdh_secp256r1_ecpoint_test.json" => ecdh("ecdh_secp256r1_ecpoint_test.json");
    ecdh_secp384r1: "ecdh_secp384r1_ecpoint_test.json" => ecdh("ecdh_secp384r1_ecpoint_test.json");
    ecdh_secp521r1: "ecdh_secp521r1_ecpoint_test.json" => ecdh("ecdh_secp521r1_ecpoint_test.json");
    ecdsa_secp256r1_sha256: "ecdsa_secp256r1_sha256_test.json" =>
        ecdsa("ecdsa_secp256r1_sha256_test.json", false);
    ecdsa_secp384r1_sha384: "ecdsa_secp384r1_sha384_test.json" =>
        ecdsa("ecdsa_secp384r1_sha384_test.json", false);
    ecdsa_secp521r1_sha512: "ecdsa_secp521r1_sha512_test.json" =>
        ecdsa("ecdsa_secp521r1_sha512_test.json", false);
    ecdsa_secp256r1_sha256_p1363: "ecdsa_secp256r1_sha256_p1363_test.json" =>
        ecdsa("ecdsa_secp256r1_sha256_p1363_test.json", true);
    ecdsa_secp384r1_sha384_p1363: "ecdsa_secp384r1_sha384_p1363_test.json" =>
        ecdsa("ecdsa_secp384r1_sha384_p1363_test.json", true);
    ecdsa_secp521r1_sha512_p1363: "ecdsa_secp521r1_sha512_p1363_test.json" =>
        ecdsa("ecdsa_secp521r1_sha512_p1363_test.json", true);
    ed25519: "ed25519_test.json" => eddsa("ed25519_test.json");
    ed448: "ed448_test.json" => eddsa("ed448_test.json");
    x25519: "x25519_test.json" => xdh("x25519_test.json");
    x448: "x448_test.json" => xdh("x448_test.json");
    rsa_pkcs1_2048_decrypt: "rsa_pkcs1_2048_test.json" =>
        rsa_decrypt("rsa_pkcs1_2048_test.json", RsaEnc::Pkcs1);
    rsa_oaep_2048_sha1: "rsa_oaep_2048_sha1_mgf1sha1_test.json" =>
        rsa_decrypt("rsa_oaep_2048_sha1_mgf1sha1_test.json", RsaEnc::Oaep);
    rsa_oaep_2048_sha256: "rsa_oaep_2048_sha256_mgf1sha256_test.json" =>
        rsa_decrypt("rsa_oaep_2048_sha256_mgf1sha256_test.json", RsaEnc::Oaep);
    rsa_pkcs1_2048_sig_gen: "rsa_pkcs1_2048_sig_gen_test.json" =>
        rsa_sign("rsa_pkcs1_2048_sig_gen_test.json");
    rsa_signature_2048_sha256: "rsa_signature_2048_sha256_test.json" =>
        rsa_verify("rsa_signature_2048_sha256_test.json", RsaSig::Pkcs1);
    rsa_signature_3072_sha256: "rsa_signature_3072_sha256_test.json" =>
        rsa_verify("rsa_signature_3072_sha256_test.json", RsaSig::Pkcs1);
    rsa_pss_2048_sha256_mgf1_32: "rsa_pss_2048_sha256_mgf1_32_test.json" =>
        rsa_verify("rsa_pss_2048_sha256_mgf1_32_test.json", RsaSig::Pss);
    mldsa_44_verify: "mldsa_44_verify_test.json" => mldsa_verify("mldsa_44_verify_test.json");
    mldsa_65_verify: "mldsa_65_verify_test.json" => mldsa_verify("mldsa_65_verify_test.json");
    mldsa_87_verify: "mldsa_87_verify_test.json" => mldsa_verify("mldsa_87_verify_test.json");
    mldsa_44_sign_seed: "mldsa_44_sign_seed_test.json" => mldsa_sign("mldsa_44_sign_seed_test.json");
    mldsa_65_sign_seed: "mldsa_65_sign_seed_test.json" => mldsa_sign("mldsa_65_sign_seed_test.json");
    mldsa_87_sign_seed: "mldsa_87_sign_seed_test.json" => mldsa_sign("mldsa_87_sign_seed_test.json");
    mlkem_512: "mlkem_512_test.json" => mlkem("mlkem_512_test.json");
    mlkem_768: "mlkem_768_test.json" => mlkem("mlkem_768_test.json");
    mlkem_1024: "mlkem_1024_test.json" => mlkem("mlkem_1024_test.json");
}
