//! `--async-depth N`: RSA or ECDSA signatures from one thread that keeps `N` of them in flight, one per
//! asynchronous session (PKCS#11 3.2: `CKF_ASYNC_SESSION`, `CKR_PENDING`,
//! `C_AsyncComplete`). The thread starts a signature in every idle session, then polls the
//! oldest pending one (they finish about in the order they were made): done, it starts that
//! session's next signature and polls the next oldest; still pending, it sleeps 50 µs (a pass
//! of the accelerator's engine takes a few hundred). A signature answered at once counts like
//! one completed later.
//!
//! The key is made in OpenSSL and created by value in the module as a public session object
//! (no login); the first signature of each run is checked with OpenSSL. ECDSA signs the
//! message's SHA-256 (`CKM_ECDSA`), as the ordinary benchmark does.

use crate::bench::median;
use crate::cpu;
use crate::mechs::{ecdsa_raw_to_der, ossl_verify, rsa_param};
use crate::spec::{Bench, Curve, PkOp, RsaMech};
use opencf_abi::provider::{AsyncOut, Provider};
use opencf_abi::sys::*;
use opencf_abi::{Attribute, Mechanism};
use openssl::ec::{EcGroup, EcKey};
use openssl::pkey::{PKey, Private};
use openssl::rsa::Rsa;
use std::collections::VecDeque;
use std::path::Path;
use std::time::{Duration, Instant};

/// The message signed.
const MESSAGE: &[u8] = b"cfspeed signs this asynchronously";

/// What the runs measured.
pub struct AsyncRates {
    /// Signatures per second, per run.
    pub rates: Vec<f64>,
    /// CPU of the process over each run, in % of one CPU.
    pub cpu: Vec<f64>,
}

fn err(what: &str) -> impl Fn(CK_RV) -> String + '_ {
    move |rv| format!("{what} returned {}", crate::raw::rv_name(rv))
}

fn attr(kind: CK_ATTRIBUTE_TYPE, value: impl Into<Vec<u8>>) -> Attribute {
    Attribute::new(kind, value.into())
}

/// The key of a benchmark: OpenSSL's, the module's template, the mechanism, the data
/// signed and the signature's length.
type Key = (PKey<Private>, Vec<Attribute>, Mechanism, Vec<u8>, usize);

fn rsa_key(bench: Bench, mech: RsaMech, bits: u32) -> Result<Key, String> {
    let rsa = Rsa::generate(bits).map_err(|e| e.to_string())?;
    let ul = |v: CK_ULONG| v.to_ne_bytes().to_vec();
    let big = |b: Option<&openssl::bn::BigNumRef>| b.map(|b| b.to_vec()).unwrap_or_default();
    let template = vec![
        attr(CKA_CLASS, ul(CKO_PRIVATE_KEY)),
        attr(CKA_KEY_TYPE, ul(CKK_RSA)),
        attr(CKA_TOKEN, [0u8]),
        attr(CKA_PRIVATE, [0u8]),
        attr(CKA_SENSITIVE, [0u8]),
        attr(CKA_SIGN, [1u8]),
        attr(CKA_MODULUS, rsa.n().to_vec()),
        attr(CKA_PUBLIC_EXPONENT, rsa.e().to_vec()),
        attr(CKA_PRIVATE_EXPONENT, rsa.d().to_vec()),
        attr(CKA_PRIME_1, big(rsa.p())),
        attr(CKA_PRIME_2, big(rsa.q())),
        attr(CKA_EXPONENT_1, big(rsa.dmp1())),
        attr(CKA_EXPONENT_2, big(rsa.dmq1())),
        attr(CKA_COEFFICIENT, big(rsa.iqmp())),
    ];
    let m = Mechanism {
        mechanism: bench.mechanism().ok_or("no mechanism")?,
        param: rsa_param(mech),
    };
    let k = bits as usize / 8;
    let pkey = PKey::from_rsa(rsa).map_err(|e| e.to_string())?;
    Ok((pkey, template, m, MESSAGE.to_vec(), k))
}

fn ec_key(curve: Curve) -> Result<Key, String> {
    let group = EcGroup::from_curve_name(curve.nid()).map_err(|e| e.to_string())?;
    let ec = EcKey::generate(&group).map_err(|e| e.to_string())?;
    let ul = |v: CK_ULONG| v.to_ne_bytes().to_vec();
    let template = vec![
        attr(CKA_CLASS, ul(CKO_PRIVATE_KEY)),
        attr(CKA_KEY_TYPE, ul(CKK_EC)),
        attr(CKA_TOKEN, [0u8]),
        attr(CKA_PRIVATE, [0u8]),
        attr(CKA_SENSITIVE, [0u8]),
        attr(CKA_SIGN, [1u8]),
        attr(CKA_EC_PARAMS, curve.params()),
        attr(CKA_VALUE, ec.private_key().to_vec()),
    ];
    let pkey = PKey::from_ec_key(ec).map_err(|e| e.to_string())?;
    let hash = openssl::sha::sha256(MESSAGE).to_vec();
    let m = Mechanism::new(CKM_ECDSA);
    Ok((pkey, template, m, hash, 2 * curve.field_bytes()))
}

/// Runs `runs` timed runs of `seconds` of benchmark `bench` (an RSA or ECDSA signature) on
/// slot `slot` of the module at `path` (already initialized by the caller's other handle).
pub fn sign_rates(
    path: &Path,
    slot: CK_SLOT_ID,
    bench: Bench,
    depth: usize,
    runs: usize,
    seconds: f64,
) -> Result<AsyncRates, String> {
    let (public, template, m, data, k) = match bench {
        Bench::Rsa { mech, bits, op } if mech != RsaMech::Oaep && op == PkOp::Sign => {
            rsa_key(bench, mech, bits)?
        }
        Bench::Ecdsa {
            curve,
            op: PkOp::Sign,
        } => ec_key(curve)?,
        _ => return Err("--async-depth measures RSA and ECDSA signatures only".into()),
    };
    let p = Provider::load(path).map_err(|e| e.to_string())?;
    match p.initialize() {
        Ok(()) | Err(CKR_CRYPTOKI_ALREADY_INITIALIZED) => {}
        Err(rv) => return Err(err("C_Initialize")(rv)),
    }
    let info = p.get_token_info(slot).map_err(err("C_GetTokenInfo"))?;
    if info.flags & CKF_ASYNC_SESSION_SUPPORTED == 0 {
        return Err("the token does not offer asynchronous sessions".into());
    }
    let sessions = (0..depth)
        .map(|_| p.open_session(slot, CKF_SERIAL_SESSION | CKF_ASYNC_SESSION))
        .collect::<Result<Vec<_>, _>>()
        .map_err(err("C_OpenSession"))?;
    let key = (p.create_object(sessions[0], &template)).map_err(err("C_CreateObject"))?;
    let mut out = AsyncRates {
        rates: Vec::new(),
        cpu: Vec::new(),
    };
    let run = |timed: Duration| -> Result<(u64, Duration, Duration), String> {
        // Pending calls in the order they were made, which is about the order they finish:
        // the oldest is polled first, and a sweep stops at the first still pending.
        let mut pending: VecDeque<(usize, AsyncOut)> = VecDeque::with_capacity(depth);
        let (mut done, checked) = (0u64, std::cell::Cell::new(false));
        let check = |sig: &[u8]| -> Result<(), String> {
            let der;
            let sig = match bench {
                Bench::Ecdsa { .. } => {
                    der = ecdsa_raw_to_der(sig)?;
                    &der[..]
                }
                _ => sig,
            };
            if !checked.replace(true) && !ossl_verify(bench, &public, &data, sig).unwrap_or(false) {
                return Err("an asynchronous signature does not verify".into());
            }
            Ok(())
        };
        // Starts a signature in session `i`: `Some` when it pends, else it was counted.
        let start = |i: usize, done: &mut u64| -> Result<Option<AsyncOut>, String> {
            p.sign_init(sessions[i], &m, key)
                .map_err(err("C_SignInit"))?;
            match (p.sign_async(sessions[i], &data, k)).map_err(err("C_Sign"))? {
                Ok(sig) => {
                    check(&sig)?;
                    *done += 1;
                    Ok(None)
                }
                Err(out) => Ok(Some(out)),
            }
        };
        let (t0, c0) = (Instant::now(), cpu::usage().cpu);
        let (mut span, mut spent) = (timed, Duration::ZERO);
        let mut idle: Vec<usize> = (0..depth).collect();
        let mut draining = false;
        loop {
            if !draining && t0.elapsed() >= timed {
                draining = true;
                (span, spent) = (t0.elapsed(), cpu::usage().cpu - c0);
            }
            if !draining {
                while let Some(i) = idle.pop() {
                    match start(i, &mut done)? {
                        Some(out) => pending.push_back((i, out)),
                        None => {
                            idle.push(i);
                            if t0.elapsed() >= timed {
                                break;
                            }
                        }
                    }
                }
            }
            let Some((i, out)) = pending.front_mut() else {
                if draining {
                    break;
                }
                continue;
            };
            match (p.async_complete_out(out)).map_err(err("C_AsyncComplete"))? {
                Some(sig) => {
                    check(&sig)?;
                    if !draining {
                        done += 1;
                    }
                    idle.push(*i);
                    pending.pop_front();
                }
                None => std::thread::sleep(Duration::from_micros(50)),
            }
        }
        // Counted: the signatures completed within the timed span; the drain after it is
        // neither counted nor timed.
        Ok((done, span, spent))
    };
    run(Duration::from_secs_f64((seconds * 0.2).clamp(0.05, 0.3)))?;
    for _ in 0..runs {
        let (n, t, c) = run(Duration::from_secs_f64(seconds))?;
        out.rates.push(n as f64 / t.as_secs_f64());
        out.cpu.push(100.0 * c.as_secs_f64() / t.as_secs_f64());
    }
    for s in sessions {
        let _ = p.close_session(s);
    }
    Ok(out)
}

/// Prints the figures of [`sign_rates`] under the tables.
pub fn print(name: &str, depth: usize, r: &AsyncRates) {
    println!();
    println!(
        "{name}, one thread, {depth} asynchronous sessions (C_Sign answered CKR_PENDING, \
         collected with C_AsyncComplete)"
    );
    println!(
        "  ours async       1 thr, {depth} in flight: {:>8.0} ops/s   cpu% {:.0}   (median of {} runs)",
        median(&r.rates),
        median(&r.cpu),
        r.rates.len()
    );
}
