//! PKCS#11 functions that no consumer suite reaches (python-pkcs11 cannot
//! express them), driven through the module's C ABI.
//!
//! * `sign_recover_verify_recover`: `C_SignRecover`/`C_VerifyRecover` with
//!   `CKM_RSA_PKCS` and `CKM_RSA_X_509` (RSA-2048), checked with OpenSSL, and
//!   the refusals, which must end the operation.
//! * `operation_state_*`: `C_GetOperationState`/`C_SetOperationState` for
//!   SHA-256 and SHA-512, and the refusals (`CKR_SAVED_STATE_INVALID`,
//!   `CKR_STATE_UNSAVEABLE`).
//! * `dual_*`: `C_DigestEncryptUpdate`, `C_DecryptDigestUpdate`,
//!   `C_SignEncryptUpdate`, `C_DecryptVerifyUpdate` against the two operations
//!   done separately and against OpenSSL.
//! * `message_aes_gcm`: the 3.0 message-based AEAD calls with
//!   `CK_GCM_MESSAGE_PARAMS` (given IV and `CKG_GENERATE_RANDOM`), checked
//!   with OpenSSL. `message_chacha20_poly1305` is ignored, with the reason:
//!   it cannot be expressed without `unsafe`.
//! * `verify_signature_*`: the 3.2 `C_VerifySignature*` calls.
//! * `session_cancel`: ignored, with the reason: `C_SessionCancel` cannot be
//!   called without `unsafe`.
//! * `token_init_persists`: `C_InitToken`/`C_InitPIN` on the empty slot, a
//!   token object, `C_Finalize` + `C_Initialize`. It finalizes the
//!   process-global module, so it runs `token_init_child` (ignored by
//!   default) in a child process of this same test binary.
//! * `key_cache_*`: a logged-in session's key cache must follow object
//!   changes, destruction and logout.
//! * `copy_object`: `C_CopyObject`, `CKA_COPYABLE`, `C_GetObjectSize`.
//! * `public_key_info`: `CKA_PUBLIC_KEY_INFO` of generated and imported keys of every family
//!   against OpenSSL's encoding, and the values that are not the key's, refused.
//! * `mechanism_info_key_sizes_are_what_init_takes`: RSA and HMAC keys on both sides of the
//!   key size range `C_GetMechanismInfo` gives, and what `C_SignInit`/`C_VerifyInit` answer.
//!
//! `fork()` is not covered here: it cannot be done without `unsafe`, and
//! `pkcs11-tool --test-fork` covers it.
//!
//! Two bindings share the one loaded module (see `tests/wycheproof/raw.rs`):
//! cryptoki 0.12 for what it can name, including the 3.0/3.2 calls, and the
//! `pkcs11` crate 0.5 for the 2.40 calls cryptoki lacks (`C_SignRecover`,
//! `C_VerifyRecover`, `C_Get/SetOperationState`, the dual-function updates,
//! `C_GetObjectSize`, mechanisms without a cryptoki variant). The `pkcs11`
//! crate initializes first, then `TestToken::init` finalizes and initializes
//! again with `CKF_OS_LOCKING_OK`.
//!
//! Run:
//! ```text
//! cargo build --release -p opencf-softtoken
//! cargo test --release -p pkcs11-tests --test functions
//! ```
#![forbid(unsafe_code)]

use cryptoki::context::{CInitializeArgs, CInitializeFlags, Function, Pkcs11};
use cryptoki::error::{Rv, RvError};
use cryptoki::mechanism::aead::{GcmMessageParams, GeneratorFunction};
use cryptoki::mechanism::{Mechanism, MechanismType, MessageParam};
use cryptoki::object::{
    Attribute, AttributeType, MlDsaParameterSetType, MlKemParameterSetType, ObjectClass,
    ObjectHandle,
};
use cryptoki::session::{Session, UserType};
use cryptoki::slot::Slot;
use cryptoki::types::AuthPin;
use openssl::bn::{BigNum, BigNumContext};
use openssl::ec::{EcGroup, EcKey, EcPoint};
use openssl::ecdsa::EcdsaSig;
use openssl::hash::{hash, MessageDigest};
use openssl::nid::Nid;
use openssl::pkey::{KeyType, PKey};
use openssl::rsa::{Padding, Rsa};
use openssl::sign::{Signer, Verifier};
use openssl::symm::{encrypt, encrypt_aead, Cipher};
use pkcs11::types::{CK_MECHANISM, CK_RV, CK_ULONG};
use pkcs11_tests::keys::{self, Curve, Rfc8410};
use pkcs11_tests::{describe, rv_of, TestToken};
use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::sync::{OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{SystemTime, UNIX_EPOCH};

// ------------------------------------------------------------------ setup

/// The module, loaded once per test binary, with both bindings.
struct Env {
    token: TestToken,
    raw: pkcs11::Ctx,
}

fn env() -> &'static Env {
    static ENV: OnceLock<Result<Env, String>> = OnceLock::new();
    match ENV.get_or_init(setup) {
        Ok(env) => env,
        Err(e) => panic!("setting up the module: {e}"),
    }
}

fn setup() -> Result<Env, String> {
    let mut raw = None;
    let token = TestToken::init(Path::new(env!("CARGO_TARGET_TMPDIR")), |module| {
        raw = Some(load_raw(module));
    })?;
    let raw = raw.ok_or("TestToken::init did not run the hook")??;
    say(&format!(
        "module {} slot {}, keystore {}",
        token.module.display(),
        token.slot.id(),
        token.keystore_dir.display()
    ));
    Ok(Env { token, raw })
}

fn load_raw(module: &Path) -> Result<pkcs11::Ctx, String> {
    let mut ctx = pkcs11::Ctx::new(module)
        .map_err(|e| format!("pkcs11 crate: loading {}: {e}", module.display()))?;
    ctx.initialize(None)
        .map_err(|e| format!("pkcs11 crate: C_Initialize: {}", raw_describe(&e)))?;
    Ok(ctx)
}

/// Login state is per application, so a test that logs out takes this lock
/// exclusively; every other test that needs the login holds it shared.
static LOGIN: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    LOGIN.read().unwrap_or_else(|e| e.into_inner())
}

fn exclusive() -> RwLockWriteGuard<'static, ()> {
    LOGIN.write().unwrap_or_else(|e| e.into_inner())
}

/// Straight to stderr, so it shows even when test output is captured.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

// ------------------------------------------------------------------ errors

/// `CKR_*` name and number of a raw return value.
fn rv_name(rv: CK_RV) -> String {
    format!("{:?} (0x{rv:x})", Rv::from(rv))
}

fn raw_describe(e: &pkcs11::errors::Error) -> String {
    match e {
        pkcs11::errors::Error::Pkcs11(rv) => rv_name(*rv),
        other => format!("{other}"),
    }
}

/// Unwraps a `pkcs11` crate result, naming the call on failure.
#[track_caller]
fn raw_ok<T>(r: Result<T, pkcs11::errors::Error>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what}: {}", raw_describe(&e)),
    }
}

/// Asserts that a `pkcs11` crate call failed with exactly `want`.
#[track_caller]
fn raw_expect<T: std::fmt::Debug>(r: Result<T, pkcs11::errors::Error>, want: CK_RV, what: &str) {
    match r {
        Err(pkcs11::errors::Error::Pkcs11(rv)) => assert_eq!(
            rv,
            want,
            "{what}: got {} expected {}",
            rv_name(rv),
            rv_name(want)
        ),
        Err(e) => panic!("{what}: binding error {e}, expected {}", rv_name(want)),
        Ok(v) => panic!("{what}: succeeded ({v:?}), expected {}", rv_name(want)),
    }
}

/// Unwraps a cryptoki result, naming the call on failure.
#[track_caller]
fn ok<T>(r: cryptoki::error::Result<T>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what}: {}", describe(&e)),
    }
}

/// Asserts that a cryptoki call failed with exactly `want`.
#[track_caller]
fn expect<T: std::fmt::Debug>(r: cryptoki::error::Result<T>, want: RvError, what: &str) {
    match r {
        Err(e) => assert_eq!(
            rv_of(&e),
            Some(want),
            "{what}: got {} expected {want:?}",
            describe(&e)
        ),
        Ok(v) => panic!("{what}: succeeded ({v:?}), expected {want:?}"),
    }
}

// ------------------------------------------------------------------ helpers

/// A raw `CK_MECHANISM` without a parameter.
fn raw_mech(ty: CK_ULONG) -> CK_MECHANISM {
    CK_MECHANISM {
        mechanism: ty,
        pParameter: std::ptr::null_mut(),
        ulParameterLen: 0,
    }
}

/// Deterministic test bytes.
fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[track_caller]
fn value(s: &Session, h: ObjectHandle) -> Vec<u8> {
    match ok(
        s.get_attributes(h, &[AttributeType::Value]),
        "C_GetAttributeValue(CKA_VALUE)",
    )
    .pop()
    {
        Some(Attribute::Value(v)) => v,
        other => panic!("CKA_VALUE: got {other:?}"),
    }
}

#[track_caller]
fn label_of(s: &Session, h: ObjectHandle) -> Vec<u8> {
    match ok(
        s.get_attributes(h, &[AttributeType::Label]),
        "C_GetAttributeValue(CKA_LABEL)",
    )
    .pop()
    {
        Some(Attribute::Label(v)) => v,
        other => panic!("CKA_LABEL: got {other:?}"),
    }
}

/// A unique label for objects of one test.
fn unique(prefix: &str) -> Vec<u8> {
    let n = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{n}", std::process::id()).into_bytes()
}

/// A session AES-256 key (readable: secret keys default to non-sensitive,
/// extractable) with `extra` attributes.
fn aes_key(s: &Session, extra: &[Attribute]) -> ObjectHandle {
    let mut t = vec![
        Attribute::Token(false),
        Attribute::ValueLen(32.into()),
        Attribute::Encrypt(true),
        Attribute::Decrypt(true),
    ];
    t.extend_from_slice(extra);
    ok(
        s.generate_key(&Mechanism::AesKeyGen, &t),
        "C_GenerateKey(CKM_AES_KEY_GEN)",
    )
}

/// A session 32-byte generic secret for HMAC.
fn hmac_key(s: &Session) -> ObjectHandle {
    let t = [
        Attribute::Token(false),
        Attribute::ValueLen(32.into()),
        Attribute::Sign(true),
        Attribute::Verify(true),
    ];
    ok(
        s.generate_key(&Mechanism::GenericSecretKeyGen, &t),
        "C_GenerateKey(CKM_GENERIC_SECRET_KEY_GEN)",
    )
}

/// An RSA-2048 session key pair that may sign/verify with and without
/// recovery. Returns (public, private).
fn rsa_pair(s: &Session) -> (ObjectHandle, ObjectHandle) {
    let public = [
        Attribute::Token(false),
        Attribute::ModulusBits(2048.into()),
        Attribute::PublicExponent(vec![1, 0, 1]),
        Attribute::Verify(true),
        Attribute::VerifyRecover(true),
    ];
    let private = [
        Attribute::Token(false),
        Attribute::Private(true),
        Attribute::Sign(true),
        Attribute::SignRecover(true),
    ];
    ok(
        s.generate_key_pair(&Mechanism::RsaPkcsKeyPairGen, &public, &private),
        "C_GenerateKeyPair(CKM_RSA_PKCS_KEY_PAIR_GEN)",
    )
}

fn rsa_public(s: &Session, public: ObjectHandle) -> Rsa<openssl::pkey::Public> {
    let attrs = ok(
        s.get_attributes(
            public,
            &[AttributeType::Modulus, AttributeType::PublicExponent],
        ),
        "C_GetAttributeValue(CKA_MODULUS, CKA_PUBLIC_EXPONENT)",
    );
    let (mut n, mut e) = (None, None);
    for a in attrs {
        match a {
            Attribute::Modulus(v) => n = Some(v),
            Attribute::PublicExponent(v) => e = Some(v),
            _ => {}
        }
    }
    let n = BigNum::from_slice(&n.expect("CKA_MODULUS")).unwrap();
    let e = BigNum::from_slice(&e.expect("CKA_PUBLIC_EXPONENT")).unwrap();
    Rsa::from_public_components(n, e).unwrap()
}

/// DER OID of P-256 (prime256v1), the CKA_EC_PARAMS value.
const P256: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];

/// A P-256 key pair. Returns (public, private).
fn ec_pair(s: &Session, token: bool, label: &[u8]) -> (ObjectHandle, ObjectHandle) {
    let public = [
        Attribute::Token(token),
        Attribute::EcParams(P256.to_vec()),
        Attribute::Verify(true),
        Attribute::Label(label.to_vec()),
    ];
    let private = [
        Attribute::Token(token),
        Attribute::Private(true),
        Attribute::Sign(true),
        Attribute::Label(label.to_vec()),
    ];
    ok(
        s.generate_key_pair(&Mechanism::EccKeyPairGen, &public, &private),
        "C_GenerateKeyPair(CKM_EC_KEY_PAIR_GEN)",
    )
}

fn ec_public(s: &Session, public: ObjectHandle) -> EcKey<openssl::pkey::Public> {
    let point = match ok(
        s.get_attributes(public, &[AttributeType::EcPoint]),
        "C_GetAttributeValue(CKA_EC_POINT)",
    )
    .pop()
    {
        Some(Attribute::EcPoint(v)) => v,
        other => panic!("CKA_EC_POINT: got {other:?}"),
    };
    // DER OCTET STRING around the uncompressed point.
    let point = match point.as_slice() {
        [0x04, 0x41, rest @ ..] if rest.len() == 65 => rest.to_vec(),
        _ => point,
    };
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
    let mut ctx = BigNumContext::new().unwrap();
    let p = EcPoint::from_bytes(&group, &point, &mut ctx).expect("CKA_EC_POINT is a P-256 point");
    EcKey::from_public_key(&group, &p).unwrap()
}

/// OpenSSL's verdict on a PKCS#11 ECDSA signature (`r || s`) of SHA-256(data).
fn openssl_ecdsa_ok(key: &EcKey<openssl::pkey::Public>, data: &[u8], sig: &[u8]) -> bool {
    assert_eq!(sig.len(), 64, "P-256 signature length");
    let r = BigNum::from_slice(&sig[..32]).unwrap();
    let s = BigNum::from_slice(&sig[32..]).unwrap();
    let sig = EcdsaSig::from_private_components(r, s).unwrap();
    sig.verify(&openssl::sha::sha256(data), key)
        .unwrap_or(false)
}

fn flip(v: &[u8], i: usize) -> Vec<u8> {
    let mut v = v.to_vec();
    v[i] ^= 0x01;
    v
}

// ------------------------------------------------------------------ 1. recover

/// `C_SignRecover`/`C_VerifyRecover` with `CKM_RSA_PKCS` and `CKM_RSA_X_509`.
/// The `pkcs11` crate makes each output call twice: first with a NULL buffer
/// (the size query), then with a buffer of the size given.
#[test]
fn sign_recover_verify_recover() {
    let _g = shared();
    let env = env();
    let s = env.token.session();
    let sh = s.handle();
    let (public, private) = rsa_pair(&s);
    let ossl = rsa_public(&s, public);
    let k = 256;

    // CKM_RSA_PKCS.
    let data = bytes(100, 7);
    raw_ok(
        env.raw
            .sign_recover_init(sh, &raw_mech(cryptoki_sys::CKM_RSA_PKCS), private.handle()),
        "C_SignRecoverInit(CKM_RSA_PKCS)",
    );
    let pkcs_sig = raw_ok(
        env.raw.sign_recover(sh, &data),
        "C_SignRecover(CKM_RSA_PKCS)",
    );
    assert_eq!(
        pkcs_sig.len(),
        k,
        "C_SignRecover(CKM_RSA_PKCS) output length"
    );
    let mut out = vec![0u8; k];
    let n = ossl
        .public_decrypt(&pkcs_sig, &mut out, Padding::PKCS1)
        .unwrap();
    assert_eq!(
        &out[..n],
        &data[..],
        "OpenSSL recovers the data from C_SignRecover's output"
    );
    // PKCS #1 v1.5 signing is deterministic: C_Sign gives the same block.
    let signed = ok(
        s.sign(&Mechanism::RsaPkcs, private, &data),
        "C_Sign(CKM_RSA_PKCS)",
    );
    assert_eq!(
        signed, pkcs_sig,
        "C_SignRecover and C_Sign with CKM_RSA_PKCS agree"
    );

    raw_ok(
        env.raw
            .verify_recover_init(sh, &raw_mech(cryptoki_sys::CKM_RSA_PKCS), public.handle()),
        "C_VerifyRecoverInit(CKM_RSA_PKCS)",
    );
    let rec = raw_ok(
        env.raw.verify_recover(sh, &pkcs_sig),
        "C_VerifyRecover(CKM_RSA_PKCS)",
    );
    assert_eq!(
        rec, data,
        "C_VerifyRecover(CKM_RSA_PKCS) gives back the data"
    );

    // CKM_RSA_X_509, a full k-byte block below the modulus.
    let mut block = bytes(k, 3);
    block[0] = 0;
    raw_ok(
        env.raw
            .sign_recover_init(sh, &raw_mech(cryptoki_sys::CKM_RSA_X_509), private.handle()),
        "C_SignRecoverInit(CKM_RSA_X_509)",
    );
    let sig = raw_ok(
        env.raw.sign_recover(sh, &block),
        "C_SignRecover(CKM_RSA_X_509)",
    );
    assert_eq!(sig.len(), k, "C_SignRecover(CKM_RSA_X_509) output length");
    let mut out = vec![0u8; k];
    let n = ossl.public_decrypt(&sig, &mut out, Padding::NONE).unwrap();
    assert_eq!(&out[..n], &block[..], "OpenSSL raw RSA recovers the block");
    raw_ok(
        env.raw
            .verify_recover_init(sh, &raw_mech(cryptoki_sys::CKM_RSA_X_509), public.handle()),
        "C_VerifyRecoverInit(CKM_RSA_X_509)",
    );
    let rec = raw_ok(
        env.raw.verify_recover(sh, &sig),
        "C_VerifyRecover(CKM_RSA_X_509)",
    );
    assert_eq!(
        rec, block,
        "C_VerifyRecover(CKM_RSA_X_509) gives back the k-byte block"
    );

    // A short input is taken as zero-padded on the left; recovery gives the
    // k-byte block.
    let short = bytes(32, 9);
    raw_ok(
        env.raw
            .sign_recover_init(sh, &raw_mech(cryptoki_sys::CKM_RSA_X_509), private.handle()),
        "C_SignRecoverInit(CKM_RSA_X_509)",
    );
    let sig = raw_ok(
        env.raw.sign_recover(sh, &short),
        "C_SignRecover(CKM_RSA_X_509, 32 bytes)",
    );
    assert_eq!(sig.len(), k);
    let mut padded = vec![0u8; k - short.len()];
    padded.extend_from_slice(&short);
    let n = ossl.public_decrypt(&sig, &mut out, Padding::NONE).unwrap();
    assert_eq!(
        &out[..n],
        &padded[..],
        "raw RSA of a short input = of the zero-padded block"
    );
    raw_ok(
        env.raw
            .verify_recover_init(sh, &raw_mech(cryptoki_sys::CKM_RSA_X_509), public.handle()),
        "C_VerifyRecoverInit(CKM_RSA_X_509)",
    );
    let rec = raw_ok(
        env.raw.verify_recover(sh, &sig),
        "C_VerifyRecover(CKM_RSA_X_509)",
    );
    assert_eq!(
        rec, padded,
        "C_VerifyRecover(CKM_RSA_X_509) of a short input's signature"
    );

    // Refusals. Each failing call must also end its operation (PKCS#11:
    // C_SignRecover/C_VerifyRecover/C_Sign always terminate the operation
    // unless they return CKR_BUFFER_TOO_SMALL or answer a size query with
    // CKR_OK). The `pkcs11` crate's first call is the NULL-buffer size query.
    let mut not_ended = Vec::new();
    let mut check_ended = |what: &str, r: Result<Vec<u8>, pkcs11::errors::Error>| match r {
        Err(pkcs11::errors::Error::Pkcs11(rv))
            if rv == cryptoki_sys::CKR_OPERATION_NOT_INITIALIZED => {}
        other => not_ended.push(format!(
            "{what}: the operation is still active after the failure (repeating the call gave {})",
            match other {
                Ok(v) => format!("CKR_OK, {} bytes", v.len()),
                Err(e) => raw_describe(&e),
            }
        )),
    };
    let rsa_pkcs = raw_mech(cryptoki_sys::CKM_RSA_PKCS);

    // A damaged signature does not recover.
    let s1 = env.token.session();
    raw_ok(
        env.raw
            .verify_recover_init(s1.handle(), &rsa_pkcs, public.handle()),
        "C_VerifyRecoverInit(CKM_RSA_PKCS)",
    );
    raw_expect(
        env.raw.verify_recover(s1.handle(), &flip(&pkcs_sig, 100)),
        cryptoki_sys::CKR_SIGNATURE_INVALID,
        "C_VerifyRecover(CKM_RSA_PKCS) of a damaged signature",
    );
    check_ended(
        "C_VerifyRecover(CKM_RSA_PKCS) -> CKR_SIGNATURE_INVALID",
        env.raw.verify_recover(s1.handle(), &pkcs_sig),
    );

    // A signature of the wrong length.
    let s2 = env.token.session();
    raw_ok(
        env.raw
            .verify_recover_init(s2.handle(), &rsa_pkcs, public.handle()),
        "C_VerifyRecoverInit(CKM_RSA_PKCS)",
    );
    raw_expect(
        env.raw.verify_recover(s2.handle(), &pkcs_sig[1..]),
        cryptoki_sys::CKR_SIGNATURE_LEN_RANGE,
        "C_VerifyRecover(CKM_RSA_PKCS) of a 255-byte signature",
    );
    check_ended(
        "C_VerifyRecover(CKM_RSA_PKCS) -> CKR_SIGNATURE_LEN_RANGE",
        env.raw.verify_recover(s2.handle(), &pkcs_sig),
    );

    // More than k - 11 bytes cannot be PKCS #1 v1.5 padded.
    let s3 = env.token.session();
    raw_ok(
        env.raw
            .sign_recover_init(s3.handle(), &rsa_pkcs, private.handle()),
        "C_SignRecoverInit(CKM_RSA_PKCS)",
    );
    raw_expect(
        env.raw.sign_recover(s3.handle(), &bytes(k - 10, 1)),
        cryptoki_sys::CKR_DATA_LEN_RANGE,
        "C_SignRecover(CKM_RSA_PKCS) of k-10 bytes",
    );
    check_ended(
        "C_SignRecover(CKM_RSA_PKCS) -> CKR_DATA_LEN_RANGE",
        env.raw.sign_recover(s3.handle(), &data),
    );

    // The same through C_Sign, for comparison.
    let s4 = env.token.session();
    raw_ok(
        env.raw.sign_init(s4.handle(), &rsa_pkcs, private.handle()),
        "C_SignInit(CKM_RSA_PKCS)",
    );
    raw_expect(
        env.raw.sign(s4.handle(), &bytes(k - 10, 1)),
        cryptoki_sys::CKR_DATA_LEN_RANGE,
        "C_Sign(CKM_RSA_PKCS) of k-10 bytes",
    );
    check_ended(
        "C_Sign(CKM_RSA_PKCS) -> CKR_DATA_LEN_RANGE",
        env.raw.sign(s4.handle(), &data),
    );

    assert!(
        not_ended.is_empty(),
        "failed calls left their operation active:\n{}",
        not_ended.join("\n")
    );
}

// ------------------------------------------------------------------ 2. state

fn state_round_trip(mech: fn() -> Mechanism<'static>, name: &str, want: &[u8], data: &[u8]) {
    let env = env();
    let s1 = env.token.session();
    let half = data.len() / 2 + 3;
    ok(s1.digest_init(&mech()), "C_DigestInit");
    ok(s1.digest_update(&data[..half]), "C_DigestUpdate");
    let state = raw_ok(
        env.raw.get_operation_state(s1.handle()),
        "C_GetOperationState",
    );
    assert!(!state.is_empty(), "{name}: empty saved state");

    // Restored into a new session, the digest goes on where it was.
    let s2 = env.token.session();
    raw_ok(
        env.raw
            .set_operation_state(s2.handle(), state.clone(), None, None),
        "C_SetOperationState",
    );
    ok(
        s2.digest_update(&data[half..]),
        "C_DigestUpdate after C_SetOperationState",
    );
    let restored = ok(s2.digest_final(), "C_DigestFinal after C_SetOperationState");

    // Saving did not disturb the original.
    ok(s1.digest_update(&data[half..]), "C_DigestUpdate");
    let original = ok(s1.digest_final(), "C_DigestFinal");
    let one_shot = ok(s1.digest(&mech(), data), "C_Digest");

    assert_eq!(one_shot, want, "{name}: C_Digest vs OpenSSL");
    assert_eq!(original, want, "{name}: saved session's own digest");
    assert_eq!(
        restored, want,
        "{name}: digest finished in the restoring session"
    );

    // The same state restores again (into a session that just finished one).
    raw_ok(
        env.raw.set_operation_state(s2.handle(), state, None, None),
        "C_SetOperationState",
    );
    ok(s2.digest_update(&data[half..]), "C_DigestUpdate");
    assert_eq!(
        ok(s2.digest_final(), "C_DigestFinal"),
        want,
        "{name}: second restore"
    );

    // A restored digest is one under way: C_Digest may not follow it, as it may
    // not follow C_DigestUpdate (the refusal ends the operation). In a new session,
    // which has had no digest before.
    let s3 = env.token.session();
    raw_ok(
        env.raw
            .set_operation_state(s3.handle(), state_copy(&s1, env, mech, data), None, None),
        "C_SetOperationState",
    );
    raw_expect(
        env.raw.digest(s3.handle(), data),
        cryptoki_sys::CKR_OPERATION_ACTIVE,
        "C_Digest after C_SetOperationState",
    );
    assert!(s3.digest_final().is_err(), "{name}: the refusal ended it");
}

/// A fresh saved state of `mech` after half of `data`, from session `s`.
fn state_copy(
    s: &cryptoki::session::Session,
    env: &Env,
    mech: fn() -> Mechanism<'static>,
    data: &[u8],
) -> Vec<u8> {
    ok(s.digest_init(&mech()), "C_DigestInit");
    ok(s.digest_update(&data[..data.len() / 2]), "C_DigestUpdate");
    let state = raw_ok(
        env.raw.get_operation_state(s.handle()),
        "C_GetOperationState",
    );
    ok(s.digest_final(), "C_DigestFinal");
    state
}

#[test]
fn operation_state_sha256() {
    let _g = shared();
    let data = bytes(1000, 5);
    let want = openssl::sha::sha256(&data);
    state_round_trip(|| Mechanism::Sha256, "SHA-256", &want, &data);
}

#[test]
fn operation_state_sha512() {
    let _g = shared();
    let data = bytes(777, 11);
    let want = openssl::sha::sha512(&data);
    state_round_trip(|| Mechanism::Sha512, "SHA-512", &want, &data);
}

#[test]
fn operation_state_refusals() {
    let _g = shared();
    let env = env();
    let s = env.token.session();
    let sh = s.handle();

    // A state the module never produced.
    raw_expect(
        env.raw.set_operation_state(sh, vec![0x41; 64], None, None),
        cryptoki_sys::CKR_SAVED_STATE_INVALID,
        "C_SetOperationState(64 bytes of garbage)",
    );
    raw_expect(
        env.raw.set_operation_state(sh, vec![0x00; 3], None, None),
        cryptoki_sys::CKR_SAVED_STATE_INVALID,
        "C_SetOperationState(3 zero bytes)",
    );
    // A real state cut short.
    ok(s.digest_init(&Mechanism::Sha256), "C_DigestInit(SHA-256)");
    ok(s.digest_update(b"abc"), "C_DigestUpdate");
    let state = raw_ok(env.raw.get_operation_state(sh), "C_GetOperationState");
    ok(s.digest_final(), "C_DigestFinal");
    let s2 = env.token.session();
    raw_expect(
        env.raw
            .set_operation_state(s2.handle(), state[..state.len() / 2].to_vec(), None, None),
        cryptoki_sys::CKR_SAVED_STATE_INVALID,
        "C_SetOperationState(half of a SHA-256 state)",
    );

    // An encryption cannot be saved, alone or beside a digest.
    let key = aes_key(&s, &[]);
    ok(
        s.encrypt_init(&Mechanism::AesCbcPad([7; 16]), key),
        "C_EncryptInit(CKM_AES_CBC_PAD)",
    );
    raw_expect(
        env.raw.get_operation_state(sh),
        cryptoki_sys::CKR_STATE_UNSAVEABLE,
        "C_GetOperationState with an encryption active",
    );
    ok(
        s.digest_init(&Mechanism::Sha256),
        "C_DigestInit beside the encryption",
    );
    ok(s.digest_update(b"abc"), "C_DigestUpdate");
    raw_expect(
        env.raw.get_operation_state(sh),
        cryptoki_sys::CKR_STATE_UNSAVEABLE,
        "C_GetOperationState with an encryption and a digest active",
    );
    // Both operations are still usable after the refusal.
    ok(
        s.encrypt_update(b"0123456789"),
        "C_EncryptUpdate after the refusal",
    );
    ok(s.encrypt_final(), "C_EncryptFinal");
    assert_eq!(
        ok(s.digest_final(), "C_DigestFinal"),
        openssl::sha::sha256(b"abc"),
        "digest after the refusal"
    );

    // A message-based encryption beside a digest: saving the digest alone would
    // lose it.
    let mut iv = [0x11u8; 12];
    let mut tag = [0u8; 16];
    let init =
        GcmMessageParams::new(&mut iv, 0.into(), GeneratorFunction::NoGenerate, &mut tag).unwrap();
    ok(
        s.message_encrypt_init(&Mechanism::AesGcmMessage(init), key),
        "C_MessageEncryptInit",
    );
    ok(s.digest_init(&Mechanism::Sha256), "C_DigestInit");
    raw_expect(
        env.raw.get_operation_state(sh),
        cryptoki_sys::CKR_STATE_UNSAVEABLE,
        "C_GetOperationState with a message-based encryption and a digest active",
    );
    ok(s.message_encrypt_final(), "C_MessageEncryptFinal");
    assert!(
        raw_ok(env.raw.get_operation_state(sh), "C_GetOperationState").len() > 13,
        "the digest alone again"
    );
    ok(s.digest_final(), "C_DigestFinal");

    // SHA3 keeps its state inside OpenSSL: unsaveable, still usable.
    raw_ok(
        env.raw
            .digest_init(sh, &raw_mech(cryptoki_sys::CKM_SHA3_256)),
        "C_DigestInit(CKM_SHA3_256)",
    );
    raw_ok(
        env.raw.digest_update(sh, b"abc"),
        "C_DigestUpdate(SHA3-256)",
    );
    raw_expect(
        env.raw.get_operation_state(sh),
        cryptoki_sys::CKR_STATE_UNSAVEABLE,
        "C_GetOperationState with a SHA3-256 digest active",
    );
    let d = raw_ok(env.raw.digest_final(sh), "C_DigestFinal(SHA3-256)");
    assert_eq!(
        d,
        &*hash(MessageDigest::sha3_256(), b"abc").unwrap(),
        "SHA3-256 vs OpenSSL"
    );
}

// ------------------------------------------------------------------ 3. dual

/// Splits `data` into parts of uneven sizes (none a multiple of 16).
fn parts(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    for n in [5usize, 37, 1, 70] {
        let n = n.min(rest.len());
        let (a, b) = rest.split_at(n);
        out.push(a);
        rest = b;
    }
    out.push(rest);
    out
}

#[test]
fn dual_digest_encrypt_and_decrypt_digest() {
    let _g = shared();
    let env = env();
    let s = env.token.session();
    let sh = s.handle();
    let key = aes_key(&s, &[]);
    let kv = value(&s, key);
    let iv = [0x24u8; 16];
    let data = bytes(200, 1);
    let want_ct = encrypt(Cipher::aes_256_cbc(), &kv, Some(&iv), &data).unwrap();
    let want_md = openssl::sha::sha256(&data).to_vec();

    // The two operations separately.
    let sep_ct = ok(
        s.encrypt(&Mechanism::AesCbcPad(iv), key, &data),
        "C_Encrypt(AES-CBC-PAD)",
    );
    let sep_md = ok(s.digest(&Mechanism::Sha256, &data), "C_Digest(SHA-256)");
    assert_eq!(sep_ct, want_ct, "C_Encrypt vs OpenSSL AES-256-CBC");
    assert_eq!(sep_md, want_md, "C_Digest vs OpenSSL");

    // C_DigestEncryptUpdate.
    ok(s.digest_init(&Mechanism::Sha256), "C_DigestInit");
    ok(
        s.encrypt_init(&Mechanism::AesCbcPad(iv), key),
        "C_EncryptInit",
    );
    let mut ct = Vec::new();
    for p in parts(&data) {
        ct.extend(raw_ok(
            env.raw.digest_encrypt_update(sh, p),
            "C_DigestEncryptUpdate",
        ));
    }
    ct.extend(ok(s.encrypt_final(), "C_EncryptFinal"));
    let md = ok(s.digest_final(), "C_DigestFinal");
    assert_eq!(ct, sep_ct, "C_DigestEncryptUpdate ciphertext vs C_Encrypt");
    assert_eq!(md, sep_md, "C_DigestEncryptUpdate digest vs C_Digest");

    // The digest is under way after C_DigestEncryptUpdate: C_Digest may not follow.
    ok(s.digest_init(&Mechanism::Sha256), "C_DigestInit");
    ok(
        s.encrypt_init(&Mechanism::AesCbcPad(iv), key),
        "C_EncryptInit",
    );
    raw_ok(
        env.raw.digest_encrypt_update(sh, &data[..16]),
        "C_DigestEncryptUpdate",
    );
    raw_expect(
        env.raw.digest(sh, &data[16..]),
        cryptoki_sys::CKR_OPERATION_ACTIVE,
        "C_Digest after C_DigestEncryptUpdate",
    );
    ok(s.encrypt_final(), "C_EncryptFinal");

    // C_DecryptDigestUpdate. The digest covers what the updates output; the
    // part C_DecryptFinal returns is digested by the application.
    ok(
        s.decrypt_init(&Mechanism::AesCbcPad(iv), key),
        "C_DecryptInit",
    );
    ok(s.digest_init(&Mechanism::Sha256), "C_DigestInit");
    let mut pt = Vec::new();
    for p in parts(&ct) {
        pt.extend(raw_ok(
            env.raw.decrypt_digest_update(sh, p),
            "C_DecryptDigestUpdate",
        ));
    }
    let last = ok(s.decrypt_final(), "C_DecryptFinal");
    ok(s.digest_update(&last), "C_DigestUpdate(last part)");
    pt.extend(last);
    let md = ok(s.digest_final(), "C_DigestFinal");
    assert_eq!(pt, data, "C_DecryptDigestUpdate plaintext");
    assert_eq!(md, want_md, "C_DecryptDigestUpdate digest");
}

#[test]
fn dual_sign_encrypt_and_decrypt_verify() {
    let _g = shared();
    let env = env();
    let s = env.token.session();
    let sh = s.handle();
    let aes = aes_key(&s, &[]);
    let mac_key = hmac_key(&s);
    let (kv, mv) = (value(&s, aes), value(&s, mac_key));
    let iv = [0x5au8; 16];
    let data = bytes(150, 2);
    let want_ct = encrypt(Cipher::aes_256_cbc(), &kv, Some(&iv), &data).unwrap();
    let want_mac = Signer::new(MessageDigest::sha256(), &PKey::hmac(&mv).unwrap())
        .unwrap()
        .sign_oneshot_to_vec(&data)
        .unwrap();

    let sep_ct = ok(
        s.encrypt(&Mechanism::AesCbcPad(iv), aes, &data),
        "C_Encrypt",
    );
    let sep_mac = ok(
        s.sign(&Mechanism::Sha256Hmac, mac_key, &data),
        "C_Sign(SHA256-HMAC)",
    );
    assert_eq!(sep_ct, want_ct, "C_Encrypt vs OpenSSL");
    assert_eq!(sep_mac, want_mac, "C_Sign(SHA256-HMAC) vs OpenSSL");

    // C_SignEncryptUpdate.
    ok(s.sign_init(&Mechanism::Sha256Hmac, mac_key), "C_SignInit");
    ok(
        s.encrypt_init(&Mechanism::AesCbcPad(iv), aes),
        "C_EncryptInit",
    );
    let mut ct = Vec::new();
    for p in parts(&data) {
        ct.extend(raw_ok(
            env.raw.sign_encrypt_update(sh, p),
            "C_SignEncryptUpdate",
        ));
    }
    ct.extend(ok(s.encrypt_final(), "C_EncryptFinal"));
    let mac = ok(s.sign_final(), "C_SignFinal");
    assert_eq!(ct, sep_ct, "C_SignEncryptUpdate ciphertext vs C_Encrypt");
    assert_eq!(mac, sep_mac, "C_SignEncryptUpdate MAC vs C_Sign");

    // An error of the signing step ends the signature, as an error of
    // C_SignUpdate does (raw ECDSA signs in one part only); the encryption goes on.
    let (_, ec_private) = ec_pair(&s, false, b"dual-ecdsa");
    ok(
        s.sign_init(&Mechanism::Ecdsa, ec_private),
        "C_SignInit(CKM_ECDSA)",
    );
    ok(
        s.encrypt_init(&Mechanism::AesCbcPad(iv), aes),
        "C_EncryptInit",
    );
    assert!(
        env.raw.sign_encrypt_update(sh, &data[..16]).is_err(),
        "C_SignEncryptUpdate with CKM_ECDSA"
    );
    raw_expect(
        env.raw.sign_encrypt_update(sh, &data[16..32]),
        cryptoki_sys::CKR_OPERATION_NOT_INITIALIZED,
        "C_SignEncryptUpdate after the signature ended",
    );
    ok(s.encrypt_final(), "C_EncryptFinal");

    // C_DecryptVerifyUpdate, with the right MAC and with a wrong one.
    for (sig, good) in [(mac.clone(), true), (flip(&mac, 0), false)] {
        ok(
            s.decrypt_init(&Mechanism::AesCbcPad(iv), aes),
            "C_DecryptInit",
        );
        ok(
            s.verify_init(&Mechanism::Sha256Hmac, mac_key),
            "C_VerifyInit",
        );
        let mut pt = Vec::new();
        for p in parts(&ct) {
            pt.extend(raw_ok(
                env.raw.decrypt_verify_update(sh, p.to_vec()),
                "C_DecryptVerifyUpdate",
            ));
        }
        let last = ok(s.decrypt_final(), "C_DecryptFinal");
        ok(s.verify_update(&last), "C_VerifyUpdate(last part)");
        pt.extend(last);
        assert_eq!(pt, data, "C_DecryptVerifyUpdate plaintext");
        if good {
            ok(
                s.verify_final(&sig),
                "C_VerifyFinal after C_DecryptVerifyUpdate",
            );
        } else {
            expect(
                s.verify_final(&sig),
                RvError::SignatureInvalid,
                "C_VerifyFinal(wrong MAC)",
            );
        }
    }
}

// ------------------------------------------------------------------ 4. message AEAD

/// `C_MessageEncryptInit` (`encrypt`) or `C_MessageDecryptInit` with `CKM_AES_GCM`, given the
/// `CK_GCM_MESSAGE_PARAMS` of `iv` and `generator` as its parameter, as cryptoki passes it
/// (PKCS#11 defines none there, and cryptoki cannot pass a NULL one for `CKM_AES_GCM`).
fn gcm_message_init(
    s: &Session,
    key: ObjectHandle,
    mut iv: [u8; 12],
    generator: GeneratorFunction,
    encrypt: bool,
) -> cryptoki::error::Result<()> {
    let mut tag = [0u8; 16];
    let init = GcmMessageParams::new(&mut iv, 0.into(), generator, &mut tag).unwrap();
    let m = Mechanism::AesGcmMessage(init);
    if encrypt {
        s.message_encrypt_init(&m, key)
    } else {
        s.message_decrypt_init(&m, key)
    }
}

/// `C_MessageEncryptInit` + `C_EncryptMessage` + `C_MessageEncryptFinal` with
/// `CK_GCM_MESSAGE_PARAMS`, and the decrypting counterparts.
///
/// cryptoki passes the `CK_GCM_MESSAGE_PARAMS` of the first message to
/// `C_MessageEncryptInit`/`C_MessageDecryptInit` as the mechanism parameter
/// (PKCS#11 defines none there) and cannot pass a NULL one for `CKM_AES_GCM`.
#[test]
fn message_aes_gcm() {
    let _g = shared();
    let env = env();
    assert!(
        env.token
            .pkcs11
            .is_fn_supported(Function::MessageEncryptInit),
        "the module's 3.x function list has no C_MessageEncryptInit"
    );
    let s = env.token.session();
    let key = aes_key(&s, &[]);
    let kv = value(&s, key);
    let aad = b"header: opencf";
    let second = bytes(100, 4);
    let msgs: [&[u8]; 2] = [b"first message, 31 bytes long...", &second];

    // --- CKG_NO_GENERATE: the IV is given.
    let mut iv = [0x11u8; 12];
    let mut tag = [0u8; 16];
    ok(
        gcm_message_init(&s, key, iv, GeneratorFunction::NoGenerate, true),
        "C_MessageEncryptInit(CKM_AES_GCM with CK_GCM_MESSAGE_PARAMS, as cryptoki passes it)",
    );
    let mut sealed = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        iv[11] = i as u8;
        let p = GcmMessageParams::new(&mut iv, 0.into(), GeneratorFunction::NoGenerate, &mut tag)
            .unwrap();
        let ct = ok(
            s.encrypt_message(&MessageParam::AesGcmMessage(p), aad, m),
            "C_EncryptMessage(CKG_NO_GENERATE)",
        );
        let got_tag = p.tag().to_vec();
        assert_eq!(iv[11], i as u8, "CKG_NO_GENERATE must not change the IV");
        let mut want_tag = [0u8; 16];
        let want =
            encrypt_aead(Cipher::aes_256_gcm(), &kv, Some(&iv), aad, m, &mut want_tag).unwrap();
        assert_eq!(ct, want, "message {i}: ciphertext vs OpenSSL AES-256-GCM");
        assert_eq!(got_tag, want_tag, "message {i}: tag vs OpenSSL AES-256-GCM");
        sealed.push((iv, ct, got_tag));
    }
    ok(s.message_encrypt_final(), "C_MessageEncryptFinal");

    // --- CKG_GENERATE_RANDOM: the token writes the IV back.
    let mut riv = [0u8; 12];
    let mut rtag = [0u8; 16];
    ok(
        gcm_message_init(&s, key, [0; 12], GeneratorFunction::GenerateRandom, true),
        "C_MessageEncryptInit(CKM_AES_GCM with CK_GCM_MESSAGE_PARAMS, as cryptoki passes it)",
    );
    let m = msgs[1];
    let p = GcmMessageParams::new(
        &mut riv,
        0.into(),
        GeneratorFunction::GenerateRandom,
        &mut rtag,
    )
    .unwrap();
    let ct = ok(
        s.encrypt_message(&MessageParam::AesGcmMessage(p), aad, m),
        "C_EncryptMessage(CKG_GENERATE_RANDOM)",
    );
    ok(s.message_encrypt_final(), "C_MessageEncryptFinal");
    let got_tag = rtag;
    assert_ne!(riv, [0u8; 12], "CKG_GENERATE_RANDOM: no IV written back");
    let mut want_tag = [0u8; 16];
    let want = encrypt_aead(
        Cipher::aes_256_gcm(),
        &kv,
        Some(&riv),
        aad,
        m,
        &mut want_tag,
    )
    .unwrap();
    assert_eq!(
        ct, want,
        "generated IV: ciphertext vs OpenSSL with the IV written back"
    );
    assert_eq!(got_tag, want_tag, "generated IV: tag vs OpenSSL");
    sealed.push((riv, ct, got_tag.to_vec()));

    // --- Decryption, then a flipped tag.
    ok(
        gcm_message_init(&s, key, [0; 12], GeneratorFunction::NoGenerate, false),
        "C_MessageDecryptInit(CKM_AES_GCM with CK_GCM_MESSAGE_PARAMS, as cryptoki passes it)",
    );
    let plain = [msgs[0], msgs[1], msgs[1]];
    for (i, (iv, ct, tag)) in sealed.iter().enumerate() {
        let (mut iv, mut tag) = (*iv, tag.clone());
        let p = GcmMessageParams::new(&mut iv, 0.into(), GeneratorFunction::NoGenerate, &mut tag)
            .unwrap();
        let pt = ok(
            s.decrypt_message(&MessageParam::AesGcmMessage(p), aad, ct),
            "C_DecryptMessage",
        );
        assert_eq!(
            pt, plain[i],
            "message {i}: C_DecryptMessage gives the plaintext back"
        );
    }
    let (iv, ct, tag) = &sealed[0];
    let (mut iv, mut bad) = (*iv, flip(tag, 15));
    let p =
        GcmMessageParams::new(&mut iv, 0.into(), GeneratorFunction::NoGenerate, &mut bad).unwrap();
    expect(
        s.decrypt_message(&MessageParam::AesGcmMessage(p), aad, ct),
        RvError::UnknownErrorCode(cryptoki_sys::CKR_AEAD_DECRYPT_FAILED),
        "C_DecryptMessage with a flipped tag",
    );
    // Another AAD fails the same way; the operation stays usable.
    let (iv, ct, tag) = &sealed[0];
    let (mut iv, mut tag2) = (*iv, tag.clone());
    let p =
        GcmMessageParams::new(&mut iv, 0.into(), GeneratorFunction::NoGenerate, &mut tag2).unwrap();
    expect(
        s.decrypt_message(&MessageParam::AesGcmMessage(p), b"other aad", ct),
        RvError::UnknownErrorCode(cryptoki_sys::CKR_AEAD_DECRYPT_FAILED),
        "C_DecryptMessage with another AAD",
    );
    let (iv, ct, tag) = &sealed[1];
    let (mut iv, mut tag2) = (*iv, tag.clone());
    let p =
        GcmMessageParams::new(&mut iv, 0.into(), GeneratorFunction::NoGenerate, &mut tag2).unwrap();
    let pt = ok(
        s.decrypt_message(&MessageParam::AesGcmMessage(p), aad, ct),
        "C_DecryptMessage after a rejected message",
    );
    assert_eq!(pt, msgs[1]);
    ok(s.message_decrypt_final(), "C_MessageDecryptFinal");
    expect(
        s.decrypt_message(&MessageParam::AesGcmMessage(p), aad, ct),
        RvError::OperationNotInitialized,
        "C_DecryptMessage after C_MessageDecryptFinal",
    );
}

/// Message-based ChaCha20-Poly1305 cannot be expressed without `unsafe`:
/// cryptoki 0.12's `MessageParam` has only an AES-GCM variant and its
/// `Mechanism` has no `CKM_CHACHA20_POLY1305`; the `pkcs11` crate 0.5 has no
/// 3.0 functions; cryptoki-sys only has raw function pointers.
#[test]
#[ignore = "not expressible without unsafe: cryptoki 0.12 MessageParam has only AesGcmMessage, no CKM_CHACHA20_POLY1305; pkcs11 0.5 has no 3.0 functions"]
fn message_chacha20_poly1305() {
    say("SKIP message_chacha20_poly1305: C_EncryptMessage with \
         CK_SALSA20_CHACHA20_POLY1305_MSG_PARAMS is not expressible without unsafe \
         (cryptoki 0.12 MessageParam only has AesGcmMessage and Mechanism has no \
         CKM_CHACHA20_POLY1305; the pkcs11 crate 0.5 has no PKCS#11 3.0 functions)");
}

// ------------------------------------------------------------------ 5. verify signature

fn verify_signature_cases(
    s: &Session,
    mech: &Mechanism,
    key: ObjectHandle,
    data: &[u8],
    sig: &[u8],
) {
    let name = format!("{:?}", mech.mechanism_type());
    // Single part.
    ok(
        s.verify_signature_init(mech, key, sig),
        &format!("C_VerifySignatureInit({name})"),
    );
    ok(
        s.verify_signature(data),
        &format!("C_VerifySignature({name}) of a good signature"),
    );
    // Multi-part.
    ok(
        s.verify_signature_init(mech, key, sig),
        "C_VerifySignatureInit",
    );
    for p in parts(data) {
        ok(s.verify_signature_update(p), "C_VerifySignatureUpdate");
    }
    ok(
        s.verify_signature_final(),
        &format!("C_VerifySignatureFinal({name}) of a good signature"),
    );

    // A damaged signature, single and multi-part.
    let bad = flip(sig, sig.len() / 2);
    ok(
        s.verify_signature_init(mech, key, &bad),
        "C_VerifySignatureInit(damaged)",
    );
    expect(
        s.verify_signature(data),
        RvError::SignatureInvalid,
        &format!("C_VerifySignature({name}) of a damaged signature"),
    );
    // The failed verification ended the operation.
    expect(
        s.verify_signature(data),
        RvError::OperationNotInitialized,
        "C_VerifySignature after a failed one",
    );
    ok(
        s.verify_signature_init(mech, key, &bad),
        "C_VerifySignatureInit(damaged)",
    );
    for p in parts(data) {
        ok(s.verify_signature_update(p), "C_VerifySignatureUpdate");
    }
    expect(
        s.verify_signature_final(),
        RvError::SignatureInvalid,
        &format!("C_VerifySignatureFinal({name}) of a damaged signature"),
    );
    // The good signature over other data.
    ok(
        s.verify_signature_init(mech, key, sig),
        "C_VerifySignatureInit",
    );
    expect(
        s.verify_signature(&flip(data, 0)),
        RvError::SignatureInvalid,
        &format!("C_VerifySignature({name}) over other data"),
    );
}

#[test]
fn verify_signature_ecdsa_sha256() {
    let _g = shared();
    let env = env();
    assert!(
        env.token
            .pkcs11
            .is_fn_supported(Function::VerifySignatureInit),
        "the module's function list has no C_VerifySignatureInit (PKCS#11 3.2)"
    );
    let s = env.token.session();
    let (public, private) = ec_pair(&s, false, b"verify-signature-ec");
    let data = bytes(300, 8);
    let sig = ok(
        s.sign(&Mechanism::EcdsaSha256, private, &data),
        "C_Sign(CKM_ECDSA_SHA256)",
    );
    assert!(
        openssl_ecdsa_ok(&ec_public(&s, public), &data, &sig),
        "OpenSSL rejects the token's ECDSA signature"
    );
    verify_signature_cases(&s, &Mechanism::EcdsaSha256, public, &data, &sig);
}

#[test]
fn verify_signature_sha256_rsa_pkcs() {
    let _g = shared();
    let env = env();
    let s = env.token.session();
    let (public, private) = rsa_pair(&s);
    let data = bytes(300, 9);
    let sig = ok(
        s.sign(&Mechanism::Sha256RsaPkcs, private, &data),
        "C_Sign(CKM_SHA256_RSA_PKCS)",
    );
    let pkey = PKey::from_rsa(rsa_public(&s, public)).unwrap();
    let mut v = Verifier::new(MessageDigest::sha256(), &pkey).unwrap();
    assert!(
        v.verify_oneshot(&sig, &data).unwrap(),
        "OpenSSL rejects the token's RSA signature"
    );
    verify_signature_cases(&s, &Mechanism::Sha256RsaPkcs, public, &data, &sig);
}

// ------------------------------------------------------------------ 6. session cancel

/// `C_SessionCancel` cannot be called without `unsafe`: cryptoki 0.12 loads
/// it into its function list but has no method for it, the `pkcs11` crate
/// 0.5 is PKCS#11 2.40 only, and cryptoki-sys only has raw function pointers.
#[test]
#[ignore = "not expressible without unsafe: cryptoki 0.12 has no C_SessionCancel method; pkcs11 0.5 is 2.40 only"]
fn session_cancel() {
    let in_table = env().token.pkcs11.is_fn_supported(Function::SessionCancel);
    say(&format!(
        "SKIP session_cancel: C_SessionCancel (present in the module's function list: \
         {in_table}) is not expressible without unsafe (cryptoki 0.12 has no Session \
         method for it, the pkcs11 crate 0.5 is PKCS#11 2.40 only)"
    ));
}

// ------------------------------------------------------------------ 7. token init

/// Set in the child process that runs `token_init_child`.
const CHILD_ENV: &str = "OPENCF_FUNCTIONS_TOKEN_INIT_CHILD";

/// Runs `token_init_child` in a child process: it finalizes and initializes
/// the module, which must not happen under the other tests.
#[test]
fn token_init_persists() {
    let exe = std::env::current_exe().expect("current test binary");
    let out = Command::new(exe)
        .args([
            "--exact",
            "token_init_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .expect("running the child test process");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    say(&format!(
        "--- token_init_child stdout\n{stdout}--- token_init_child stderr\n{stderr}---"
    ));
    assert!(
        out.status.success(),
        "token_init_child failed ({})",
        out.status
    );
    assert!(
        stdout.contains("test result: ok. 1 passed"),
        "token_init_child did not run"
    );
}

fn slot_with_id(p: &Pkcs11, id: u64) -> Option<Slot> {
    ok(p.get_all_slots(), "C_GetSlotList")
        .into_iter()
        .find(|s| s.id() == id)
}

fn slot_ids(p: &Pkcs11) -> Vec<u64> {
    ok(p.get_all_slots(), "C_GetSlotList")
        .iter()
        .map(|s| s.id())
        .collect()
}

/// Logs the user in on `s` with `pin`; if the token wants the PIN changed,
/// changes it to `new_pin`. Returns the PIN in force.
fn user_login(p: &Pkcs11, slot: Slot, s: &Session, pin: &str, new_pin: &str) -> String {
    let expired = match s.login(UserType::User, Some(&AuthPin::from(pin.to_string()))) {
        Ok(()) => false,
        Err(e) if rv_of(&e) == Some(RvError::PinExpired) => true,
        Err(e) => panic!("C_Login(CKU_USER): {}", describe(&e)),
    };
    let info = ok(p.get_token_info(slot), "C_GetTokenInfo");
    if !expired && !info.user_pin_to_be_changed() {
        return pin.to_string();
    }
    ok(
        s.set_pin(
            &AuthPin::from(pin.to_string()),
            &AuthPin::from(new_pin.to_string()),
        ),
        "C_SetPIN",
    );
    if expired {
        ok(
            s.login(UserType::User, Some(&AuthPin::from(new_pin.to_string()))),
            "C_Login",
        );
    }
    new_pin.to_string()
}

/// The body of `token_init_persists`, in its own process. Ignored unless
/// run by `token_init_persists`.
#[test]
#[ignore = "run in a child process by token_init_persists"]
fn token_init_child() {
    assert!(
        std::env::var_os(CHILD_ENV).is_some(),
        "token_init_child finalizes the module: run it through token_init_persists"
    );
    const SO_PIN: &str = "so-pin-functions";
    const LABEL: &str = "functions token";
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "token-init-{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::env::set_var("OPENCF_SOFTTOKEN_DIR", &dir);
    let p = ok(
        Pkcs11::new(pkcs11_tests::module_path()),
        "loading the module",
    );
    let args = || CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK);
    ok(p.initialize(args()), "C_Initialize");

    println!("slots at start: {:?}", slot_ids(&p));
    assert_eq!(
        slot_ids(&p),
        vec![0, 1],
        "a fresh keystore: the token and one empty slot"
    );
    let slot0 = slot_with_id(&p, 0).unwrap();
    let slot1 = slot_with_id(&p, 1).unwrap();
    let info0 = ok(p.get_token_info(slot0), "C_GetTokenInfo(0)");
    assert_eq!(info0.label().trim_end(), "OpenCF Softtoken");
    let info1 = ok(p.get_token_info(slot1), "C_GetTokenInfo(1)");
    assert!(!info1.token_initialized(), "slot 1 starts uninitialized");

    ok(
        p.init_token(slot1, &AuthPin::from(SO_PIN.to_string()), LABEL),
        "C_InitToken(slot 1)",
    );
    let info1 = ok(p.get_token_info(slot1), "C_GetTokenInfo(1)");
    assert_eq!(info1.label().trim_end(), LABEL, "label after C_InitToken");
    assert!(
        info1.token_initialized(),
        "CKF_TOKEN_INITIALIZED after C_InitToken"
    );
    assert!(
        !info1.user_pin_initialized(),
        "no user PIN before C_InitPIN"
    );
    println!("slots after C_InitToken: {:?}", slot_ids(&p));
    assert_eq!(slot_ids(&p), vec![0, 1, 2], "slot 2 is the new empty slot");
    let slot2 = slot_with_id(&p, 2).unwrap();
    assert!(!ok(p.get_token_info(slot2), "C_GetTokenInfo(2)").token_initialized());

    // A session on the token blocks C_InitToken.
    let s = ok(p.open_rw_session(slot1), "C_OpenSession(slot 1)");
    expect(
        p.init_token(slot1, &AuthPin::from(SO_PIN.to_string()), LABEL),
        RvError::SessionExists,
        "C_InitToken with a session open",
    );

    ok(
        s.login(UserType::So, Some(&AuthPin::from(SO_PIN.to_string()))),
        "C_Login(CKU_SO)",
    );
    ok(
        s.init_pin(&AuthPin::from("user-pin-1".to_string())),
        "C_InitPIN",
    );
    ok(s.logout(), "C_Logout(SO)");
    assert!(ok(p.get_token_info(slot1), "C_GetTokenInfo").user_pin_initialized());
    let pin = user_login(&p, slot1, &s, "user-pin-1", "user-pin-2");

    let secret = b"kept across C_Finalize".to_vec();
    let data = ok(
        s.create_object(&[
            Attribute::Class(ObjectClass::DATA),
            Attribute::Token(true),
            Attribute::Private(true),
            Attribute::Label(b"persisted data".to_vec()),
            Attribute::Value(secret.clone()),
        ]),
        "C_CreateObject(token data object)",
    );
    let key = ok(
        s.generate_key(
            &Mechanism::AesKeyGen,
            &[
                Attribute::Token(true),
                Attribute::Private(true),
                Attribute::Sensitive(true),
                Attribute::ValueLen(32.into()),
                Attribute::Encrypt(true),
                Attribute::Label(b"persisted key".to_vec()),
            ],
        ),
        "C_GenerateKey(token AES key)",
    );
    let block = [0x3cu8; 16];
    let ct = ok(
        s.encrypt(&Mechanism::AesEcb, key, &block),
        "C_Encrypt(CKM_AES_ECB)",
    );
    println!("created data object {data} and key {key}");
    drop(s);

    ok(p.clone().finalize(), "C_Finalize");
    ok(p.initialize(args()), "C_Initialize again");

    println!("slots after C_Initialize: {:?}", slot_ids(&p));
    assert_eq!(
        slot_ids(&p),
        vec![0, 1, 2],
        "after re-initializing: both tokens and one empty slot"
    );
    let slot1 = slot_with_id(&p, 1).unwrap();
    let slot2 = slot_with_id(&p, 2).unwrap();
    let info1 = ok(p.get_token_info(slot1), "C_GetTokenInfo(1)");
    assert_eq!(
        info1.label().trim_end(),
        LABEL,
        "label after C_Finalize + C_Initialize"
    );
    assert!(info1.token_initialized() && info1.user_pin_initialized());
    assert!(!ok(p.get_token_info(slot2), "C_GetTokenInfo(2)").token_initialized());
    assert_eq!(
        ok(
            p.get_token_info(slot_with_id(&p, 0).unwrap()),
            "C_GetTokenInfo(0)"
        )
        .label()
        .trim_end(),
        "OpenCF Softtoken"
    );

    let s = ok(p.open_rw_session(slot1), "C_OpenSession(slot 1)");
    ok(
        s.login(UserType::User, Some(&AuthPin::from(pin.clone()))),
        "C_Login(CKU_USER) after re-init",
    );
    let found = ok(
        s.find_objects(&[Attribute::Label(b"persisted data".to_vec())]),
        "C_FindObjects",
    );
    assert_eq!(
        found.len(),
        1,
        "the token data object is there after re-init"
    );
    assert_eq!(value(&s, found[0]), secret, "its value");
    let found = ok(
        s.find_objects(&[Attribute::Label(b"persisted key".to_vec())]),
        "C_FindObjects",
    );
    assert_eq!(found.len(), 1, "the token key is there after re-init");
    assert_eq!(
        ok(s.encrypt(&Mechanism::AesEcb, found[0], &block), "C_Encrypt"),
        ct,
        "the key encrypts as before"
    );
    ok(s.logout(), "C_Logout");
    drop(s);

    // Re-initializing needs the SO PIN.
    expect(
        p.init_token(slot1, &AuthPin::from("wrong-so-pin".to_string()), LABEL),
        RvError::PinIncorrect,
        "C_InitToken(slot 1) with a wrong SO PIN",
    );
    // With it, the token starts over: no user PIN, no objects, no new slot.
    ok(
        p.init_token(
            slot1,
            &AuthPin::from(SO_PIN.to_string()),
            "functions token 2",
        ),
        "C_InitToken(slot 1) again",
    );
    let info1 = ok(p.get_token_info(slot1), "C_GetTokenInfo(1)");
    assert_eq!(info1.label().trim_end(), "functions token 2");
    assert!(
        !info1.user_pin_initialized(),
        "re-initializing clears the user PIN"
    );
    assert_eq!(slot_ids(&p), vec![0, 1, 2], "re-initializing adds no slot");
    let s = ok(p.open_rw_session(slot1), "C_OpenSession");
    ok(
        s.login(UserType::So, Some(&AuthPin::from(SO_PIN.to_string()))),
        "C_Login(CKU_SO)",
    );
    ok(
        s.init_pin(&AuthPin::from("user-pin-3".to_string())),
        "C_InitPIN",
    );
    ok(s.logout(), "C_Logout");
    user_login(&p, slot1, &s, "user-pin-3", "user-pin-4");
    let found = ok(s.find_objects(&[]), "C_FindObjects(all)");
    assert!(
        found.is_empty(),
        "re-initialized token still has objects: {found:?}"
    );
    drop(s);
    ok(p.finalize(), "C_Finalize");
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------------------------------ 8. key cache

/// The PIN the user has now: the changed one unless the token kept the first.
fn test_pin() -> String {
    let new_pin = std::env::var("OPENCF_TEST_NEW_PIN").unwrap_or_else(|_| "opencf-test-pin".into());
    let pin = std::env::var("OPENCF_TEST_PIN").unwrap_or_else(|_| "changeme".into());
    let unchanged = env()
        .token
        .pkcs11
        .get_token_info(env().token.slot)
        .map(|i| i.user_pin_to_be_changed())
        .unwrap_or(false);
    if unchanged {
        pin
    } else {
        new_pin
    }
}

#[track_caller]
fn sign_ok(s: &Session, public: &EcKey<openssl::pkey::Public>, key: ObjectHandle, what: &str) {
    let data = bytes(64, 12);
    let sig = ok(s.sign(&Mechanism::EcdsaSha256, key, &data), what);
    assert!(
        openssl_ecdsa_ok(public, &data, &sig),
        "{what}: OpenSSL rejects the signature"
    );
}

/// Changes to a key reach the next operation: relabel, `CKA_SIGN` off and on,
/// destroy.
#[test]
fn key_cache_follows_object_changes() {
    let _g = shared();
    let env = env();
    let s = env.token.session();
    let (public, private) = ec_pair(&s, false, &unique("cache"));
    let ossl = ec_public(&s, public);
    sign_ok(&s, &ossl, private, "C_Sign before any change");

    ok(
        s.update_attributes(private, &[Attribute::Label(b"relabelled".to_vec())]),
        "C_SetAttributeValue(CKA_LABEL)",
    );
    assert_eq!(label_of(&s, private), b"relabelled");
    sign_ok(&s, &ossl, private, "C_Sign after relabelling");

    ok(
        s.update_attributes(private, &[Attribute::Sign(false)]),
        "C_SetAttributeValue(CKA_SIGN=false)",
    );
    expect(
        s.sign_init(&Mechanism::EcdsaSha256, private),
        RvError::KeyFunctionNotPermitted,
        "C_SignInit after CKA_SIGN=false",
    );
    ok(
        s.update_attributes(private, &[Attribute::Sign(true)]),
        "C_SetAttributeValue(CKA_SIGN=true)",
    );
    sign_ok(&s, &ossl, private, "C_Sign after CKA_SIGN back to true");

    ok(s.destroy_object(private), "C_DestroyObject");
    expect(
        s.sign_init(&Mechanism::EcdsaSha256, private),
        RvError::KeyHandleInvalid,
        "C_SignInit with a destroyed key",
    );
    // Through another session too.
    let s2 = env.token.session();
    expect(
        s2.sign_init(&Mechanism::EcdsaSha256, private),
        RvError::KeyHandleInvalid,
        "C_SignInit with a destroyed key (other session)",
    );
}

/// Logout hides private keys from every session; logging in again makes the
/// token key usable (found again by label), while a private session key is
/// gone (PKCS#11 C_Logout: private session objects are destroyed).
#[test]
fn key_cache_follows_logout() {
    let _g = exclusive();
    let env = env();
    let pin = test_pin();
    let s = env.token.session();
    let label = unique("logout-token");
    let (pub_t, priv_t) = ec_pair(&s, true, &label);
    let session_label = unique("logout-session");
    let (pub_s, priv_s) = ec_pair(&s, false, &session_label);
    let (ossl_t, ossl_s) = (ec_public(&s, pub_t), ec_public(&s, pub_s));
    sign_ok(&s, &ossl_t, priv_t, "C_Sign with the token key");
    sign_ok(&s, &ossl_s, priv_s, "C_Sign with the session key");

    ok(s.logout(), "C_Logout");
    let login_again = LoginAgain {
        s: &s,
        pin: pin.clone(),
    };
    for (key, what) in [(priv_t, "token"), (priv_s, "session")] {
        expect(
            s.sign_init(&Mechanism::EcdsaSha256, key),
            RvError::KeyHandleInvalid,
            &format!("C_SignInit with the private {what} key while logged out"),
        );
    }
    let found = ok(
        s.find_objects(&[Attribute::Label(label.clone())]),
        "C_FindObjects while logged out",
    );
    assert_eq!(
        found,
        vec![pub_t],
        "logged out, the label finds only the public key"
    );

    drop(login_again);
    let found = ok(
        s.find_objects(&[
            Attribute::Label(label.clone()),
            Attribute::Class(ObjectClass::PRIVATE_KEY),
        ]),
        "C_FindObjects after logging in again",
    );
    assert_eq!(found.len(), 1, "the private token key is visible again");
    say(&format!(
        "key_cache_follows_logout: private token key handle {} before logout, {} found after login",
        priv_t.handle(),
        found[0].handle()
    ));
    sign_ok(
        &s,
        &ossl_t,
        found[0],
        "C_Sign with the token key found after logging in again",
    );

    // Clean up the token objects before the checks that may fail.
    ok(
        s.destroy_object(found[0]),
        "C_DestroyObject(token private key)",
    );
    ok(s.destroy_object(pub_t), "C_DestroyObject(token public key)");

    // PKCS#11 C_Logout: "all private session objects from sessions belonging
    // to the application are destroyed".
    let found = ok(
        s.find_objects(&[
            Attribute::Label(session_label),
            Attribute::Class(ObjectClass::PRIVATE_KEY),
        ]),
        "C_FindObjects(private session key) after logging in again",
    );
    expect(
        s.sign_init(&Mechanism::EcdsaSha256, priv_s),
        RvError::KeyHandleInvalid,
        "C_SignInit with the private session key after C_Logout + C_Login",
    );
    assert!(
        found.is_empty(),
        "the private session key survived C_Logout: C_FindObjects finds {found:?}"
    );
}

/// Logs the user in again when dropped, so a failing logout test leaves
/// the other tests logged in.
struct LoginAgain<'a> {
    s: &'a Session,
    pin: String,
}

impl Drop for LoginAgain<'_> {
    fn drop(&mut self) {
        match self
            .s
            .login(UserType::User, Some(&AuthPin::from(self.pin.clone())))
        {
            Ok(()) => {}
            Err(e) if rv_of(&e) == Some(RvError::UserAlreadyLoggedIn) => {}
            Err(e) if std::thread::panicking() => say(&format!("C_Login again: {}", describe(&e))),
            Err(e) => panic!("C_Login after C_Logout: {}", describe(&e)),
        }
    }
}

// ------------------------------------------------------------------ 9. copy

#[test]
fn copy_object() {
    let _g = shared();
    let env = env();
    let s = env.token.session();
    let sh = s.handle();
    let key = aes_key(&s, &[Attribute::Label(b"original".to_vec())]);
    let copy = ok(
        s.copy_object(key, &[Attribute::Label(b"the copy".to_vec())]),
        "C_CopyObject with a new label",
    );
    assert_ne!(copy, key, "C_CopyObject returned the original handle");
    assert_eq!(label_of(&s, copy), b"the copy");
    assert_eq!(
        label_of(&s, key),
        b"original",
        "copying changed the original"
    );
    assert_eq!(
        value(&s, copy),
        value(&s, key),
        "the copy has the same key value"
    );
    let iv = [1u8; 16];
    let data = bytes(40, 3);
    assert_eq!(
        ok(
            s.encrypt(&Mechanism::AesCbcPad(iv), copy, &data),
            "C_Encrypt with the copy"
        ),
        ok(
            s.encrypt(&Mechanism::AesCbcPad(iv), key, &data),
            "C_Encrypt with the original"
        ),
    );
    for (h, what) in [(key, "original"), (copy, "copy")] {
        let n = raw_ok(env.raw.get_object_size(sh, h.handle()), "C_GetObjectSize");
        say(&format!("C_GetObjectSize({what}) = {n}"));
        assert!(n > 0, "C_GetObjectSize({what}) = 0");
    }
    ok(s.destroy_object(copy), "C_DestroyObject(copy)");
    ok(
        s.encrypt(&Mechanism::AesCbcPad(iv), key, &data),
        "the original outlives its copy",
    );

    // CKA_COPYABLE=false.
    let fixed = aes_key(&s, &[Attribute::Copyable(false)]);
    expect(
        s.copy_object(fixed, &[Attribute::Label(b"nope".to_vec())]),
        RvError::ActionProhibited,
        "C_CopyObject of a CKA_COPYABLE=false key",
    );
    expect(
        s.copy_object(fixed, &[]),
        RvError::ActionProhibited,
        "C_CopyObject of a CKA_COPYABLE=false key, empty template",
    );
    let r = s.update_attributes(fixed, &[Attribute::Copyable(true)]);
    assert!(r.is_err(), "CKA_COPYABLE went from false to true");

    // A copy cannot clear CKA_SENSITIVE.
    let sensitive = aes_key(&s, &[Attribute::Sensitive(true)]);
    let r = s.copy_object(sensitive, &[Attribute::Sensitive(false)]);
    if let Ok(h) = r {
        let leaked = s.get_attributes(h, &[AttributeType::Value]);
        panic!("C_CopyObject cleared CKA_SENSITIVE (CKA_VALUE read: {leaked:?})");
    }
    say(&format!(
        "C_CopyObject(sensitive key, CKA_SENSITIVE=false): {}",
        describe(&r.unwrap_err())
    ));
}

// ------------------------------------------------------------------ 10. public key info

/// `CKA_PUBLIC_KEY_INFO` of `h`.
#[track_caller]
fn key_info(s: &Session, h: ObjectHandle, what: &str) -> Vec<u8> {
    match ok(
        s.get_attributes(h, &[AttributeType::PublicKeyInfo]),
        &format!("C_GetAttributeValue(CKA_PUBLIC_KEY_INFO) of {what}"),
    )
    .pop()
    {
        Some(Attribute::PublicKeyInfo(v)) => v,
        other => panic!("CKA_PUBLIC_KEY_INFO of {what}: got {other:?}"),
    }
}

/// One attribute of `h` as bytes.
#[track_caller]
fn raw_attr(s: &Session, h: ObjectHandle, t: AttributeType) -> Vec<u8> {
    let a = ok(
        s.get_attributes(h, &[t]),
        &format!("C_GetAttributeValue({t})"),
    );
    match a.as_slice() {
        [Attribute::EcPoint(v)] | [Attribute::Value(v)] => v.clone(),
        other => panic!("{t}: got {other:?}"),
    }
}

/// The SubjectPublicKeyInfo OpenSSL encodes for the public key object `h`, built from its
/// public attributes; `raw` names the OpenSSL key type of a key given by raw bytes (EdDSA,
/// XDH: `CKA_EC_POINT`; ML-DSA, ML-KEM: `CKA_VALUE`). RSA and P-256 keys have `None`.
fn openssl_spki(s: &Session, h: ObjectHandle, rsa: bool, raw: Option<KeyType>) -> Vec<u8> {
    let pkey = match raw {
        None if rsa => PKey::from_rsa(rsa_public(s, h)).unwrap(),
        None => PKey::from_ec_key(ec_public(s, h)).unwrap(),
        Some(kt) => {
            let bytes = if [KeyType::ML_DSA_44, KeyType::ML_KEM_768].contains(&kt) {
                raw_attr(s, h, AttributeType::Value)
            } else {
                // DER OCTET STRING around the RFC 8032 / RFC 7748 key (short form).
                raw_attr(s, h, AttributeType::EcPoint)[2..].to_vec()
            };
            PKey::public_key_from_raw_bytes_ex(None, kt, None, &bytes).unwrap()
        }
    };
    pkey.public_key_to_der().unwrap()
}

/// `CKA_PUBLIC_KEY_INFO` of generated public and private keys of every family is the DER
/// SubjectPublicKeyInfo of the key (an EC private key, which has no `CKA_EC_POINT`, derives it
/// from its value); a value given at creation, generation or unwrapping that is not the key's
/// is refused; a search by it finds both halves of the pair.
#[test]
fn public_key_info() {
    let _g = shared();
    let env = env();
    let s = env.token.session();
    let label = unique("spki");
    let ml_dsa = Attribute::ParameterSet(MlDsaParameterSetType::ML_DSA_44.into());
    let ml_kem = Attribute::ParameterSet(MlKemParameterSetType::ML_KEM_768.into());
    let (rsa_pub, rsa_priv) = rsa_pair(&s);
    let (ec_pub, ec_priv) = ec_pair(&s, false, &label);
    let mut pairs = vec![
        ("RSA-2048", rsa_pub, rsa_priv, true, None),
        ("P-256", ec_pub, ec_priv, false, None),
    ];
    let mut more: Vec<_> = [
        ("Ed25519", Rfc8410::Ed25519, KeyType::ED25519),
        ("Ed448", Rfc8410::Ed448, KeyType::ED448),
        ("X25519", Rfc8410::X25519, KeyType::X25519),
        ("X448", Rfc8410::X448, KeyType::X448),
    ]
    .into_iter()
    .map(|(what, c, kt)| {
        let m = match c {
            Rfc8410::Ed25519 | Rfc8410::Ed448 => Mechanism::EccEdwardsKeyPairGen,
            Rfc8410::X25519 | Rfc8410::X448 => Mechanism::EccMontgomeryKeyPairGen,
        };
        (what, m, Attribute::EcParams(c.ec_params()), kt)
    })
    .collect();
    more.push((
        "ML-DSA-44",
        Mechanism::MlDsaKeyPairGen,
        ml_dsa,
        KeyType::ML_DSA_44,
    ));
    more.push((
        "ML-KEM-768",
        Mechanism::MlKemKeyPairGen,
        ml_kem,
        KeyType::ML_KEM_768,
    ));
    for (what, m, param, kt) in more {
        let t = [Attribute::Token(false), param];
        let (p, q) = ok(
            s.generate_key_pair(&m, &t, &[Attribute::Token(false)]),
            &format!("C_GenerateKeyPair({what})"),
        );
        pairs.push((what, p, q, false, Some(kt)));
    }
    for (what, public, private, rsa, raw) in pairs {
        let want = openssl_spki(&s, public, rsa, raw);
        assert_eq!(
            key_info(&s, public, what),
            want,
            "{what} public key: CKA_PUBLIC_KEY_INFO is not the key's SubjectPublicKeyInfo"
        );
        assert_eq!(
            key_info(&s, private, what),
            want,
            "{what} private key: CKA_PUBLIC_KEY_INFO is not the key's SubjectPublicKeyInfo"
        );
    }

    // C_CreateObject: the key's own value, or an empty one, is taken; another is refused.
    let rsa_key = rsa_public(&s, rsa_pub);
    let rsa_spki = key_info(&s, rsa_pub, "RSA-2048");
    let ec_spki = key_info(&s, ec_pub, "P-256");
    let rsa_template = |info: &[u8]| {
        let mut t = keys::rsa_public(&rsa_key.n().to_vec(), &rsa_key.e().to_vec());
        t.push(Attribute::PublicKeyInfo(info.to_vec()));
        t
    };
    for (bad, what) in [
        (&[0x30, 0x03, 0x02, 0x01, 0x00][..], "a DER INTEGER 0"),
        (&ec_spki[..], "another key's SubjectPublicKeyInfo"),
    ] {
        expect(
            s.create_object(&rsa_template(bad)),
            RvError::AttributeValueInvalid,
            &format!("C_CreateObject of an RSA public key with CKA_PUBLIC_KEY_INFO {what}"),
        );
    }
    for given in [&rsa_spki[..], &[][..]] {
        let h = ok(
            s.create_object(&rsa_template(given)),
            "C_CreateObject of an RSA public key with its own or an empty CKA_PUBLIC_KEY_INFO",
        );
        assert_eq!(key_info(&s, h, "an imported RSA public key"), rsa_spki);
    }

    // An EC private key imported by its value alone.
    let ossl = EcKey::generate(&EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap()).unwrap();
    let scalar = ossl.private_key().to_vec_padded(32).unwrap();
    let want = PKey::from_ec_key(ossl)
        .unwrap()
        .public_key_to_der()
        .unwrap();
    let t = keys::ec_private(Curve::P256, &scalar).unwrap();
    let h = ok(s.create_object(&t), "C_CreateObject of a P-256 private key");
    assert_eq!(key_info(&s, h, "an imported P-256 private key"), want);

    // Generation and unwrapping: CKR_TEMPLATE_INCONSISTENT.
    let garbage = Attribute::PublicKeyInfo(vec![0x30, 0x03, 0x02, 0x01, 0x00]);
    let public = [Attribute::Token(false), Attribute::EcParams(P256.to_vec())];
    for (p, q, what) in [
        (vec![garbage.clone()], vec![], "public"),
        (vec![], vec![garbage.clone()], "private"),
    ] {
        expect(
            s.generate_key_pair(
                &Mechanism::EccKeyPairGen,
                &[&public[..], &p].concat(),
                &[&[Attribute::Token(false)][..], &q].concat(),
            ),
            RvError::TemplateInconsistent,
            &format!("C_GenerateKeyPair with a {what} CKA_PUBLIC_KEY_INFO that is not the key's"),
        );
    }
    let kek = aes_key(&s, &[Attribute::Wrap(true), Attribute::Unwrap(true)]);
    let iv = [7u8; 16];
    let wrapped = ok(
        s.wrap_key(&Mechanism::AesCbcPad(iv), kek, ec_priv),
        "C_WrapKey(P-256 private key)",
    );
    let unwrap_template = |info: &[u8]| {
        vec![
            Attribute::Class(ObjectClass::PRIVATE_KEY),
            Attribute::KeyType(cryptoki::object::KeyType::EC),
            Attribute::Token(false),
            Attribute::Private(true),
            Attribute::Sign(true),
            Attribute::PublicKeyInfo(info.to_vec()),
        ]
    };
    expect(
        s.unwrap_key(
            &Mechanism::AesCbcPad(iv),
            kek,
            &wrapped,
            &unwrap_template(&rsa_spki),
        ),
        RvError::TemplateInconsistent,
        "C_UnwrapKey with a CKA_PUBLIC_KEY_INFO that is not the key's",
    );
    let h = ok(
        s.unwrap_key(
            &Mechanism::AesCbcPad(iv),
            kek,
            &wrapped,
            &unwrap_template(&ec_spki),
        ),
        "C_UnwrapKey with the key's CKA_PUBLIC_KEY_INFO",
    );
    assert_eq!(key_info(&s, h, "the unwrapped P-256 key"), ec_spki);

    // A search by it; a change to another value.
    let mut found = ok(
        s.find_objects(&[
            Attribute::Label(label.clone()),
            Attribute::PublicKeyInfo(ec_spki.clone()),
        ]),
        "C_FindObjects by CKA_PUBLIC_KEY_INFO",
    );
    found.sort_by_key(|h| h.handle());
    let mut pair = vec![ec_pub, ec_priv];
    pair.sort_by_key(|h| h.handle());
    assert_eq!(
        found, pair,
        "C_FindObjects by CKA_PUBLIC_KEY_INFO and label"
    );
    ok(
        s.update_attributes(ec_pub, &[Attribute::PublicKeyInfo(ec_spki.clone())]),
        "C_SetAttributeValue(CKA_PUBLIC_KEY_INFO) to the value it has",
    );
    expect(
        s.update_attributes(ec_pub, &[Attribute::PublicKeyInfo(rsa_spki)]),
        RvError::AttributeReadOnly,
        "C_SetAttributeValue(CKA_PUBLIC_KEY_INFO) to another key's",
    );
}

// ------------------------------------------------------------------ 11. key sizes

/// `C_GetMechanismInfo`'s key size range of `m`.
fn key_size_range(m: MechanismType) -> std::ops::RangeInclusive<usize> {
    let env = env();
    let i = ok(
        env.token.pkcs11.get_mechanism_info(env.token.slot, m),
        &format!("C_GetMechanismInfo({m})"),
    );
    i.min_key_size()..=i.max_key_size()
}

/// A key the token took must be one the mechanism's advertised range holds: its init
/// answers `CKR_KEY_SIZE_RANGE` exactly for keys outside it (PKCS#11 3.0 §5.2). Returns
/// whether the operation started.
#[track_caller]
fn init_agrees(
    r: cryptoki::error::Result<()>,
    range: &std::ops::RangeInclusive<usize>,
    size: usize,
    what: &str,
) -> bool {
    match r {
        Ok(()) => {
            assert!(
                range.contains(&size),
                "{what}: the init takes a key of size {size}, outside the advertised {range:?}"
            );
            true
        }
        Err(e) if rv_of(&e) == Some(RvError::KeySizeRange) => {
            assert!(
                !range.contains(&size),
                "{what}: CKR_KEY_SIZE_RANGE for size {size}, inside the advertised {range:?}"
            );
            false
        }
        Err(e) => panic!("{what}: {}", describe(&e)),
    }
}

/// RSA keys from 512 bits (what OpenSSL makes at least) to past the advertised maximum, and
/// HMAC keys from one byte to past it: each key that can be made is used by the mechanism
/// exactly when `C_GetMechanismInfo` says its size is in range.
#[test]
fn mechanism_info_key_sizes_are_what_init_takes() {
    let _g = shared();
    let env = env();
    let s = env.token.session();

    let range = key_size_range(MechanismType::SHA256_RSA_PKCS);
    // A real 512-bit key signs (or is refused at init), and so does one of the minimum size.
    let mut sizes = vec![512, *range.start()];
    sizes.dedup();
    for bits in sizes {
        let rsa = Rsa::generate(bits as u32).unwrap();
        let der = PKey::from_rsa(rsa).unwrap().private_key_to_pkcs8().unwrap();
        let t = keys::rsa_private_pkcs8(&der).unwrap();
        let Ok(h) = s.create_object(&t) else { continue };
        let what = format!("C_SignInit(CKM_SHA256_RSA_PKCS) with RSA-{bits}");
        if init_agrees(
            s.sign_init(&Mechanism::Sha256RsaPkcs, h),
            &range,
            bits,
            &what,
        ) {
            ok(s.sign_final(), &format!("C_SignFinal after {what}"));
        }
    }
    // Public keys of any size are cheap: an odd modulus with its top bit set.
    let mut sizes = vec![512, *range.end(), *range.end() + 1, 16384, 16385];
    sizes.sort_unstable();
    sizes.dedup();
    for bits in sizes {
        let mut n = vec![0x5au8; bits.div_ceil(8)];
        n[0] = 1 << ((bits - 1) % 8);
        *n.last_mut().unwrap() |= 1;
        let Ok(h) = s.create_object(&keys::rsa_public(&n, &[1, 0, 1])) else {
            continue;
        };
        let what = format!("C_VerifyInit(CKM_SHA256_RSA_PKCS) with a {bits}-bit public key");
        if init_agrees(
            s.verify_init(&Mechanism::Sha256RsaPkcs, h),
            &range,
            bits,
            &what,
        ) {
            // A signature of the wrong length is refused, which ends the operation.
            expect(
                s.verify_final(&[0]),
                RvError::SignatureLenRange,
                &format!("C_VerifyFinal after {what}"),
            );
        }
    }

    for (m, ty) in [
        (Mechanism::Sha256Hmac, MechanismType::SHA256_HMAC),
        (Mechanism::Sha1Hmac, MechanismType::SHA1_HMAC),
    ] {
        let range = key_size_range(ty);
        let (min, max) = (*range.start(), *range.end());
        let mut sizes = vec![1, min.saturating_sub(1), min, 512, 513, 1000, max, max + 1];
        sizes.retain(|n| *n > 0);
        sizes.sort_unstable();
        sizes.dedup();
        for len in sizes {
            let t = keys::secret_key(cryptoki::object::KeyType::GENERIC_SECRET, &bytes(len, 9));
            let Ok(h) = s.create_object(&t) else { continue };
            let what = format!("C_SignInit({ty}) with a {len}-byte key");
            if init_agrees(s.sign_init(&m, h), &range, len, &what) {
                ok(s.sign_final(), &format!("C_SignFinal after {what}"));
            }
        }
    }

    // The generic secret key generator's range is in bits (the mechanisms document's unit for
    // it): every whole-byte length inside it is made, the first byte past it is refused.
    let range = key_size_range(MechanismType::GENERIC_SECRET_KEY_GEN);
    let (min, max) = (*range.start(), *range.end());
    assert!(
        min >= 8 && max.is_multiple_of(8),
        "CKM_GENERIC_SECRET_KEY_GEN range {range:?}: not a range of bits"
    );
    for len in [min.div_ceil(8), 64, max / 8, max / 8 + 1] {
        let r = s.generate_key(
            &Mechanism::GenericSecretKeyGen,
            &[
                Attribute::Token(false),
                Attribute::ValueLen((len as u64).into()),
                Attribute::Sign(true),
            ],
        );
        let what = format!("C_GenerateKey(CKM_GENERIC_SECRET_KEY_GEN, {len} bytes)");
        match r {
            Ok(h) => {
                assert!(
                    range.contains(&(8 * len)),
                    "{what}: made, outside {range:?} bits"
                );
                ok(s.destroy_object(h), "C_DestroyObject");
            }
            Err(e) => assert!(
                !range.contains(&(8 * len)),
                "{what}: {} inside {range:?} bits",
                describe(&e)
            ),
        }
    }
}

/// The message flags claim what the message functions do: single-call message AEAD
/// (`CKF_MESSAGE_ENCRYPT`, `CKF_MESSAGE_DECRYPT`), not `CKF_MULTI_MESSAGE`, whose
/// `C_EncryptMessageBegin` answers `CKR_FUNCTION_NOT_SUPPORTED` (docs/SOFTTOKEN.md).
#[test]
fn message_flags_are_what_the_functions_do() {
    let _g = shared();
    let env = env();
    // CKM_CHACHA20_POLY1305 shares the flags (one constant of the mechanism table); cryptoki
    // 0.12 has no MechanismType for it.
    let m = MechanismType::AES_GCM;
    let i = ok(
        env.token.pkcs11.get_mechanism_info(env.token.slot, m),
        &format!("C_GetMechanismInfo({m})"),
    );
    assert!(i.message_encrypt() && i.message_decrypt(), "{m}: {i:?}");
    assert!(!i.multi_message(), "{m}: CKF_MULTI_MESSAGE claimed: {i:?}");
    let s = env.token.session();
    let key = aes_key(&s, &[]);
    let mut iv = [0x22u8; 12];
    let mut tag = [0u8; 16];
    ok(
        gcm_message_init(&s, key, iv, GeneratorFunction::NoGenerate, true),
        "C_MessageEncryptInit(CKM_AES_GCM)",
    );
    let p =
        GcmMessageParams::new(&mut iv, 0.into(), GeneratorFunction::NoGenerate, &mut tag).unwrap();
    expect(
        s.encrypt_message_begin(MessageParam::AesGcmMessage(p), b"aad"),
        RvError::FunctionNotSupported,
        "C_EncryptMessageBegin",
    );
    ok(s.message_encrypt_final(), "C_MessageEncryptFinal");
}
