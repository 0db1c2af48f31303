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
use std::sync::Barrier;
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

/// A public, non-sensitive session private key of `key_type` that may sign, with the key's
/// own attributes `values`.
fn private_key_template(key_type: CK_KEY_TYPE, values: Vec<Attribute>) -> Vec<Attribute> {
    let ul = |v: CK_ULONG| v.to_ne_bytes().to_vec();
    let mut t = vec![
        attr(CKA_CLASS, ul(CKO_PRIVATE_KEY)),
        attr(CKA_KEY_TYPE, ul(key_type)),
        attr(CKA_TOKEN, [0u8]),
        attr(CKA_PRIVATE, [0u8]),
        attr(CKA_SENSITIVE, [0u8]),
        attr(CKA_SIGN, [1u8]),
    ];
    t.extend(values);
    t
}

fn rsa_key(bench: Bench, mech: RsaMech, bits: u32) -> Result<Key, String> {
    let rsa = Rsa::generate(bits).map_err(|e| e.to_string())?;
    let big = |b: Option<&openssl::bn::BigNumRef>| b.map(|b| b.to_vec()).unwrap_or_default();
    let values = vec![
        attr(CKA_MODULUS, rsa.n().to_vec()),
        attr(CKA_PUBLIC_EXPONENT, rsa.e().to_vec()),
        attr(CKA_PRIVATE_EXPONENT, rsa.d().to_vec()),
        attr(CKA_PRIME_1, big(rsa.p())),
        attr(CKA_PRIME_2, big(rsa.q())),
        attr(CKA_EXPONENT_1, big(rsa.dmp1())),
        attr(CKA_EXPONENT_2, big(rsa.dmq1())),
        attr(CKA_COEFFICIENT, big(rsa.iqmp())),
    ];
    let template = private_key_template(CKK_RSA, values);
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
    let values = vec![
        attr(CKA_EC_PARAMS, curve.params()),
        attr(CKA_VALUE, ec.private_key().to_vec()),
    ];
    let template = private_key_template(CKK_EC, values);
    let pkey = PKey::from_ec_key(ec).map_err(|e| e.to_string())?;
    let hash = openssl::sha::sha256(MESSAGE).to_vec();
    let m = Mechanism::new(CKM_ECDSA);
    Ok((pkey, template, m, hash, 2 * curve.field_bytes()))
}

/// One timed run of one thread: signatures completed within it, its span, and the
/// process's CPU time over that span.
type Run = (u64, Duration, Duration);

/// One polling thread's key, sessions and signature.
struct Poller<'p> {
    p: &'p Provider,
    bench: Bench,
    public: PKey<Private>,
    m: Mechanism,
    data: Vec<u8>,
    k: usize,
    sessions: Vec<CK_SESSION_HANDLE>,
    key: CK_OBJECT_HANDLE,
}

/// Runs `runs` timed runs of `seconds` of benchmark `bench` (an RSA or ECDSA signature) on
/// slot `slot` of the module at `path` (already initialized by the caller's other handle):
/// `threads` threads, each with its own key and `depth` sessions, start each run together;
/// a run's rate is the sum of theirs, its CPU the process's.
pub fn sign_rates(
    path: &Path,
    slot: CK_SLOT_ID,
    bench: Bench,
    (depth, threads): (usize, usize),
    runs: usize,
    seconds: f64,
) -> Result<AsyncRates, String> {
    let p = Provider::load(path).map_err(|e| e.to_string())?;
    match p.initialize() {
        Ok(()) | Err(CKR_CRYPTOKI_ALREADY_INITIALIZED) => {}
        Err(rv) => return Err(err("C_Initialize")(rv)),
    }
    let info = p.get_token_info(slot).map_err(err("C_GetTokenInfo"))?;
    if info.flags & CKF_ASYNC_SESSION_SUPPORTED == 0 {
        return Err("the token does not offer asynchronous sessions".into());
    }
    let pollers = (0..threads.max(1))
        .map(|_| Poller::new(&p, slot, bench, depth))
        .collect::<Result<Vec<_>, _>>()?;
    let barrier = Barrier::new(pollers.len());
    let per: Vec<Result<Vec<Run>, String>> = std::thread::scope(|sc| {
        let handles: Vec<_> = (pollers.iter())
            .map(|w| sc.spawn(|| w.runs(&barrier, runs, seconds)))
            .collect();
        (handles.into_iter())
            .map(|h| (h.join()).unwrap_or_else(|_| Err("a polling thread panicked".into())))
            .collect()
    });
    for w in pollers {
        w.close();
    }
    let per = per.into_iter().collect::<Result<Vec<_>, _>>()?;
    let mut out = AsyncRates {
        rates: Vec::new(),
        cpu: Vec::new(),
    };
    for r in 0..runs {
        let rate = per.iter().map(|t| t[r].0 as f64 / t[r].1.as_secs_f64());
        out.rates.push(rate.sum());
        let (_, span, spent) = per[0][r];
        out.cpu
            .push(100.0 * spent.as_secs_f64() / span.as_secs_f64());
    }
    Ok(out)
}

impl<'p> Poller<'p> {
    fn new(p: &'p Provider, slot: CK_SLOT_ID, bench: Bench, depth: usize) -> Result<Self, String> {
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
        let sessions = (0..depth)
            .map(|_| p.open_session(slot, CKF_SERIAL_SESSION | CKF_ASYNC_SESSION))
            .collect::<Result<Vec<_>, _>>()
            .map_err(err("C_OpenSession"))?;
        let key = (p.create_object(sessions[0], &template)).map_err(err("C_CreateObject"))?;
        Ok(Poller {
            p,
            bench,
            public,
            m,
            data,
            k,
            sessions,
            key,
        })
    }

    fn close(self) {
        for s in self.sessions {
            let _ = self.p.close_session(s);
        }
    }

    /// A warm-up, then `runs` timed runs, each started with the other threads (`barrier`);
    /// after an error the thread still meets the others at each start.
    fn runs(&self, barrier: &Barrier, runs: usize, seconds: f64) -> Result<Vec<Run>, String> {
        let mut out = Vec::with_capacity(runs);
        let mut failed = None;
        let warm = Duration::from_secs_f64((seconds * 0.2).clamp(0.05, 0.3));
        for timed in
            std::iter::once(warm).chain((0..runs).map(|_| Duration::from_secs_f64(seconds)))
        {
            barrier.wait();
            if failed.is_none() {
                match self.run(timed) {
                    Ok(r) => out.push(r),
                    Err(e) => failed = Some(e),
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(out.split_off(1)),
        }
    }

    /// One timed run.
    fn run(&self, timed: Duration) -> Result<Run, String> {
        let Poller {
            p,
            bench,
            public,
            m,
            data,
            k,
            sessions,
            key,
        } = self;
        let (bench, k, key, depth) = (*bench, *k, *key, sessions.len());
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
            if !checked.replace(true) && !ossl_verify(bench, public, data, sig).unwrap_or(false) {
                return Err("an asynchronous signature does not verify".into());
            }
            Ok(())
        };
        // Starts a signature in session `i`: `Some` when it pends, else it was counted.
        let start = |i: usize, done: &mut u64| -> Result<Option<AsyncOut>, String> {
            p.sign_init(sessions[i], m, key)
                .map_err(err("C_SignInit"))?;
            match (p.sign_async(sessions[i], data, k)).map_err(err("C_Sign"))? {
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
    }
}

/// Prints the figures of [`sign_rates`] under the tables.
pub fn print(name: &str, (depth, threads): (usize, usize), r: &AsyncRates) {
    let (who, each) = match threads {
        1 => ("one thread".to_string(), ""),
        t => (format!("{t} threads"), " each"),
    };
    outln!();
    outln!(
        "{name}, {who}, {depth} asynchronous sessions{each} (C_Sign answered CKR_PENDING, \
         collected with C_AsyncComplete)"
    );
    outln!(
        "  ours async       {threads} thr, {depth} in flight{each}: {:>8.0} ops/s   cpu% {:.0}   (median of {} runs)",
        median(&r.rates),
        median(&r.cpu),
        r.rates.len()
    );
}
