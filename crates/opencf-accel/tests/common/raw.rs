//! For the tests that load a module as the framework loads providers
//! (`opencf_abi::provider::Provider`): templates and checks.

#![allow(dead_code)]

use opencf_abi::provider::{AsyncOut, Provider};
use opencf_abi::sys::*;
use opencf_abi::Attribute;
use openssl::hash::MessageDigest;
use openssl::pkey::{PKey, Private};
use openssl::rsa::Rsa;
use openssl::sign::Verifier;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn attr(kind: CK_ATTRIBUTE_TYPE, value: impl Into<Vec<u8>>) -> Attribute {
    Attribute {
        kind,
        value: value.into(),
    }
}

fn ulong(v: CK_ULONG) -> Vec<u8> {
    v.to_ne_bytes().to_vec()
}

/// Creates a public, non-sensitive session private key of `key_type` that may sign (no
/// login needed anywhere), with the key's own attributes `values`.
fn create_private_key(
    p: &Provider,
    s: CK_SESSION_HANDLE,
    key_type: CK_KEY_TYPE,
    values: &[Attribute],
) -> CK_OBJECT_HANDLE {
    let mut t = vec![
        attr(CKA_CLASS, ulong(CKO_PRIVATE_KEY)),
        attr(CKA_KEY_TYPE, ulong(key_type)),
        attr(CKA_TOKEN, [0u8]),
        attr(CKA_PRIVATE, [0u8]),
        attr(CKA_SENSITIVE, [0u8]),
        attr(CKA_SIGN, [1u8]),
    ];
    t.extend_from_slice(values);
    p.create_object(s, &t).expect("C_CreateObject")
}

/// A public, non-sensitive session RSA private key by value (no login needed anywhere), for
/// signing and decryption.
pub fn create_rsa_key(p: &Provider, s: CK_SESSION_HANDLE, key: &Rsa<Private>) -> CK_OBJECT_HANDLE {
    let t = [
        attr(CKA_DECRYPT, [1u8]),
        attr(CKA_MODULUS, key.n().to_vec()),
        attr(CKA_PUBLIC_EXPONENT, key.e().to_vec()),
        attr(CKA_PRIVATE_EXPONENT, key.d().to_vec()),
        attr(CKA_PRIME_1, key.p().unwrap().to_vec()),
        attr(CKA_PRIME_2, key.q().unwrap().to_vec()),
        attr(CKA_EXPONENT_1, key.dmp1().unwrap().to_vec()),
        attr(CKA_EXPONENT_2, key.dmq1().unwrap().to_vec()),
        attr(CKA_COEFFICIENT, key.iqmp().unwrap().to_vec()),
    ];
    create_private_key(p, s, CKK_RSA, &t)
}

/// Whether `sig` is `key`'s SHA256-RSA-PKCS signature of `msg`.
pub fn verifies(key: &Rsa<Private>, msg: &[u8], sig: &[u8]) -> bool {
    let pkey = PKey::from_rsa(key.clone()).unwrap();
    let mut v = Verifier::new(MessageDigest::sha256(), &pkey).unwrap();
    v.update(msg).unwrap();
    v.verify(sig).unwrap()
}

/// A public, non-sensitive session EC private key by value, for signing: `CKA_EC_PARAMS` as
/// given (the DER OID of P-256 for P-256 keys), `CKA_VALUE` the private value.
pub fn create_ec_key(
    p: &Provider,
    s: CK_SESSION_HANDLE,
    params: &[u8],
    d: &[u8],
) -> CK_OBJECT_HANDLE {
    let t = [
        attr(CKA_EC_PARAMS, params.to_vec()),
        attr(CKA_VALUE, d.to_vec()),
    ];
    create_private_key(p, s, CKK_EC, &t)
}

/// Whether `sig` (`r || s`, each as long as the group order) is an ECDSA signature of `hash`
/// by `key` (private or public).
pub fn ec_verifies<T: openssl::pkey::HasPublic>(
    key: &openssl::ec::EcKeyRef<T>,
    hash: &[u8],
    sig: &[u8],
) -> bool {
    let n = (key.group().order_bits() as usize).div_ceil(8);
    if sig.len() != 2 * n {
        return false;
    }
    let r = openssl::bn::BigNum::from_slice(&sig[..n]).unwrap();
    let s = openssl::bn::BigNum::from_slice(&sig[n..]).unwrap();
    let sig = openssl::ecdsa::EcdsaSig::from_private_components(r, s).unwrap();
    sig.verify(hash, key).unwrap()
}

/// A blocking `C_Sign` of `data` into a buffer of `len` bytes (the operation initialized).
pub fn sign_now(
    p: &Provider,
    s: CK_SESSION_HANDLE,
    data: &[u8],
    len: usize,
) -> Result<Vec<u8>, CK_RV> {
    let mut buf = vec![0u8; len];
    let mut out = opencf_abi::OutBuf::new(Some(&mut buf));
    p.sign(s, data, &mut out)?;
    let n = out.len();
    buf.truncate(n);
    Ok(buf)
}

/// `libopencf.so` over [accel, softtoken] with the softtoken as keystore (`metaslot`: more
/// lines of its `[metaslot]` table), in a fresh directory of this test's named `tag`: loaded
/// and initialized; also the directory of its counters (`OPENCF_STAT_DIR`).
pub fn framework(tag: &str, metaslot: &str) -> (Provider, std::path::PathBuf) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("softtoken")).unwrap();
    let conf = format!(
        "[metaslot]\nenabled = true\nkeystore = \"OpenCF Softtoken\"\n{metaslot}\n\
         [[provider]]\nname = \"accel\"\nmodule = \"{}\"\n\n\
         [[provider]]\nname = \"softtoken\"\nmodule = \"{}\"\n",
        super::release("libopencf_accel.so").display(),
        super::release("libopencf_softtoken.so").display()
    );
    std::fs::write(dir.join("opencf.toml"), conf).unwrap();
    let stat = dir.join("stat");
    std::env::set_var("OPENCF_CONF", dir.join("opencf.toml"));
    std::env::set_var("OPENCF_SOFTTOKEN_DIR", dir.join("softtoken"));
    std::env::set_var("OPENCF_STAT_DIR", &stat);
    let p = Provider::load(&super::release("libopencf.so")).expect("load libopencf.so");
    p.initialize().unwrap();
    (p, stat)
}

/// Operations of `mechanism` on `provider` in the counters of `dir` (`cryptoadm stat`).
pub fn mechanism_ops(dir: &std::path::Path, provider: &str, mechanism: CK_MECHANISM_TYPE) -> u64 {
    let snap = opencf_stat::read(dir).expect("read the counters");
    snap.mechanisms
        .iter()
        .filter(|(k, _)| k.provider == provider && k.mechanism == mechanism)
        .map(|(_, v)| v.ops)
        .sum()
}

/// The accelerator's own counters `names` in the counters of `dir` (component `accel`, how its
/// requests were served: `rsa_passes`, `rsa_direct`, …), from one reading.
pub fn engine_counters<const N: usize>(dir: &std::path::Path, names: [&str; N]) -> [u64; N] {
    let snap = opencf_stat::read(dir).expect("read the counters");
    names.map(|name| {
        let key = opencf_stat::NamedKey {
            component: opencf_accel::counters::COMPONENT.into(),
            name: name.into(),
        };
        snap.counters.get(&key).copied().unwrap_or(0)
    })
}

/// `libopencf_accel.so` loaded as the framework loads providers, initialized once per test
/// process.
pub fn provider() -> &'static Provider {
    static M: OnceLock<Provider> = OnceLock::new();
    M.get_or_init(|| {
        let p = Provider::load(&super::library()).expect("load libopencf_accel.so");
        p.initialize().expect("C_Initialize");
        p
    })
}

/// The provider's one slot.
pub fn provider_slot() -> CK_SLOT_ID {
    provider().get_slot_list(true).unwrap()[0]
}

/// The [`super::LOCK`] of the tests that change the provider's environment.
pub fn lock() -> std::sync::MutexGuard<'static, ()> {
    super::LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether the engine serves here; prints why not.
pub fn engine_here() -> bool {
    let yes = opencf_accel::engine::provider_engine().is_some();
    if !yes {
        eprintln!("SKIP: no engine on this CPU (or OPENCF_ACCEL_DISABLE=ifma)");
    }
    yes
}

/// Polls every pending call (by index) until all are done, 10 s at most; each output must
/// pass `check(index, output)`, and no call may fail.
pub fn complete_all(
    p: &Provider,
    pending: &mut Vec<(usize, AsyncOut)>,
    check: impl Fn(usize, &[u8]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pending.is_empty() {
        assert!(Instant::now() < deadline, "pending calls never completed");
        pending.retain_mut(|(i, out)| match p.async_complete_out(out) {
            Ok(None) => true,
            Ok(Some(v)) => {
                assert!(check(*i, &v), "output {i} checks");
                false
            }
            Err(rv) => panic!("C_AsyncComplete of call {i}: {rv:#x}"),
        });
        std::thread::sleep(Duration::from_micros(50));
    }
}
