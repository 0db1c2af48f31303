//! A dudect-style constant-time check of the engine (ignored by default: it measures time).
//!
//! For one RSA-2048 half (1024-bit prime; `OPENCF_ACCEL_CT_BITS=1536` or `2048` for the halves
//! of RSA-3072 and -4096), eight-lane passes are timed with the secret data
//! of class A fixed and of class B random, the classes interleaved at random; Welch's t-test
//! on the timings (cropped at the 90th percentile) must stay below 4.5 in absolute value.
//! Two secrets are tested: the base (the blinded input) and the exponent.
//!
//! The P-256 ECDSA engine the same way: eight-lane passes with the nonce of class A fixed at
//! 1 (63 of its 64 digits select the identity) against random nonces, then the private key
//! fixed at 1 against random keys.
//!
//! `cargo test --release -p opencf-accel --test ct -- --ignored --nocapture`
//! (`OPENCF_ACCEL_CT_SAMPLES`, default 4000 per class; `OPENCF_ACCEL_CT_ENGINE=portable`).

use opencf_accel::engine::p256::{self, EcJob, EcScalarKey};
use opencf_accel::engine::{self, Job, Kind, Prime};
use openssl::bn::BigNum;
use openssl::rand::rand_bytes;
use std::time::Instant;

fn welch(a: &[f64], b: &[f64]) -> f64 {
    let stats = |x: &[f64]| {
        let n = x.len() as f64;
        let m = x.iter().sum::<f64>() / n;
        let v = x.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (n - 1.0);
        (m, v, n)
    };
    let (ma, va, na) = stats(a);
    let (mb, vb, nb) = stats(b);
    (ma - mb) / (va / na + vb / nb).sqrt()
}

fn crop(all: &mut [(bool, f64)]) -> (Vec<f64>, Vec<f64>) {
    let mut t: Vec<f64> = all.iter().map(|x| x.1).collect();
    t.sort_by(|x, y| x.partial_cmp(y).unwrap());
    let cut = t[t.len() * 9 / 10];
    let pick = |class| {
        all.iter()
            .filter(|x| x.0 == class && x.1 <= cut)
            .map(|x| x.1)
            .collect()
    };
    (pick(true), pick(false))
}

fn random_words(n: usize) -> Vec<u64> {
    let mut b = vec![0u8; n * 8];
    rand_bytes(&mut b).unwrap();
    b.chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn kind() -> Kind {
    match std::env::var("OPENCF_ACCEL_CT_ENGINE").as_deref() {
        Ok("portable") => Kind::Portable,
        _ if engine::ifma_present() => Kind::Ifma,
        _ => Kind::Portable,
    }
}

/// Times `samples` passes per class; `job(class_a)` builds the pass input.
fn measure(samples: usize, mut pass: impl FnMut(bool) -> f64) -> f64 {
    let mut all = Vec::with_capacity(2 * samples);
    let mut coin = [0u8; 1];
    for _ in 0..2 * samples {
        rand_bytes(&mut coin).unwrap();
        let a = coin[0] & 1 == 0;
        all.push((a, pass(a)));
    }
    let (a, b) = crop(&mut all);
    welch(&a, &b)
}

/// The prime's size: `OPENCF_ACCEL_CT_BITS`, 1024 (default), 1536 or 2048.
fn prime_bits() -> usize {
    let bits = std::env::var("OPENCF_ACCEL_CT_BITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    assert!(
        [1024, 1536, 2048].contains(&bits),
        "OPENCF_ACCEL_CT_BITS: 1024, 1536 or 2048, not {bits}"
    );
    bits
}

/// Samples per class: `OPENCF_ACCEL_CT_SAMPLES`, default 4000.
fn samples() -> usize {
    std::env::var("OPENCF_ACCEL_CT_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4000)
}

#[test]
#[ignore = "timing measurement; run by hand (docs/ACCEL.md)"]
fn engine_is_constant_time() {
    let samples = samples();
    let kind = kind();
    let bits = prime_bits();
    let mut p = BigNum::new().unwrap();
    p.generate_prime(bits as i32, false, None, None).unwrap();
    let mut d = BigNum::new().unwrap();
    p.rand_range(&mut d).unwrap();
    let prime = Prime::new(&p, &d).unwrap();
    // Bases are values of twice the prime's size (the blinded input).
    let words = bits / 32;
    let fixed_base = prime.base(&random_words(words));
    let t_base = measure(samples, |a| {
        let base = if a {
            fixed_base.clone()
        } else {
            prime.base(&random_words(words))
        };
        let jobs: Vec<Job> = (0..8)
            .map(|_| Job {
                prime: &prime,
                base: &base,
            })
            .collect();
        let t = Instant::now();
        std::hint::black_box(engine::half_exps(kind, &jobs));
        t.elapsed().as_nanos() as f64
    });
    // Exponents: one fixed, one fresh random per sample (same prime, same base).
    let base = prime.base(&random_words(words));
    let t_exp = measure(samples, |a| {
        let mut e = BigNum::new().unwrap();
        p.rand_range(&mut e).unwrap();
        let other = Prime::new(&p, if a { &d } else { &e }).unwrap();
        let jobs: Vec<Job> = (0..8)
            .map(|_| Job {
                prime: &other,
                base: &base,
            })
            .collect();
        let t = Instant::now();
        std::hint::black_box(engine::half_exps(kind, &jobs));
        t.elapsed().as_nanos() as f64
    });
    eprintln!(
        "{kind:?} engine, {bits}-bit prime, {samples} samples per class: t(base) = \
         {t_base:.2}, t(exponent) = {t_exp:.2}"
    );
    assert!(t_base.abs() < 4.5, "base-dependent timing: t = {t_base}");
    assert!(t_exp.abs() < 4.5, "exponent-dependent timing: t = {t_exp}");
}

#[test]
#[ignore = "timing measurement; run by hand (docs/ACCEL.md)"]
fn ecdsa_engine_is_constant_time() {
    let samples = samples() * 4;
    let kind = kind();
    let one = BigNum::from_u32(1).unwrap();
    // Both classes do the same work before each timed pass (a random nonce drawn, a random
    // private value drawn and its engine form built); class A then uses its fixed value.
    let random_d = || {
        let mut d = BigNum::new().unwrap();
        let n = BigNum::from_slice(&p256::Curve::get().order_be()).unwrap();
        n.rand_range(&mut d).unwrap();
        d
    };
    let run = |key: &EcScalarKey, k: [u64; 4]| {
        let jobs: Vec<EcJob> = (0..8)
            .map(|_| EcJob {
                key,
                e: p256::message_integer(&[0x42; 32]),
                k: zeroize::Zeroizing::new(k),
            })
            .collect();
        let t = Instant::now();
        std::hint::black_box(p256::ecdsa_sign(kind, &jobs, false));
        t.elapsed().as_nanos() as f64
    };
    let key = EcScalarKey::new(&random_d()).unwrap();
    let t_nonce = measure(samples, |a| {
        let drawn = *p256::random_nonce().unwrap();
        run(&key, if a { [1, 0, 0, 0] } else { drawn })
    });
    let t_key = measure(samples, |a| {
        let k = *p256::random_nonce().unwrap();
        let d = random_d();
        run(&EcScalarKey::new(if a { &one } else { &d }).unwrap(), k)
    });
    eprintln!(
        "{kind:?} ECDSA engine, {samples} samples per class: t(nonce) = {t_nonce:.2}, \
         t(key) = {t_key:.2}"
    );
    assert!(t_nonce.abs() < 4.5, "nonce-dependent timing: t = {t_nonce}");
    assert!(t_key.abs() < 4.5, "key-dependent timing: t = {t_key}");
}
