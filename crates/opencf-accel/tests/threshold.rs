//! The break-even lane count (ignored by default: it measures time): one engine pass costs
//! the same whatever number of its eight lanes is used, a request uses two lanes, so the
//! engine beats OpenSSL's own RSA private operation (blinding on, both CRT halves run together
//! with AVX-512 IFMA by OpenSSL 3) once `requests × t_openssl > t_pass`. The scheduler batches
//! from [`opencf_accel::sched::batch_threshold`] requests in flight until it has measured the
//! same on the CPU it runs on ([`opencf_accel::calibrate`]); this prints the figures (medians
//! of interleaved rounds, wall clock) beside that default and the verdict they give.
//!
//! ```text
//! cargo test --release -p opencf-accel --test threshold -- --ignored --nocapture
//! ```

use opencf_accel::calibrate;
use opencf_accel::engine::{self, Job, Kind};
use opencf_accel::rsa;
use opencf_accel::sched;
use openssl::bn::BigNum;
use openssl::rsa::{Padding, Rsa};
use std::time::Instant;

/// Median of `runs` timings of `f` (each `reps` calls), in µs per call.
fn median_us(runs: usize, reps: usize, mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..runs)
        .map(|_| {
            let s = Instant::now();
            for _ in 0..reps {
                f();
            }
            s.elapsed().as_secs_f64() * 1e6 / reps as f64
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[runs / 2]
}

#[test]
#[ignore = "measures time"]
fn break_even() {
    let Some(kind) = engine::provider_engine() else {
        println!("SKIP: no IFMA engine on this CPU");
        return;
    };
    assert_eq!(kind, Kind::Ifma);
    for bits in rsa::SIZES {
        let key = Rsa::generate(bits as u32).unwrap();
        let ek = rsa::from_openssl(&key).unwrap();
        let k = key.size() as usize;
        let mut c = BigNum::new().unwrap();
        key.n().rand_range(&mut c).unwrap();
        let c = c.to_vec_padded(k as i32).unwrap();
        let pend = ek.begin(&c).unwrap();
        let jobs: Vec<Job> = (0..engine::LANES / 2)
            .flat_map(|_| ek.jobs(&pend))
            .collect();
        let reps = if bits == 2048 { 50 } else { 10 };
        let mut out = vec![0u8; k];
        let (mut pass, mut ossl, mut ours) = (vec![], vec![], vec![]);
        // Interleaved rounds, so that a noisy neighbour hits all three alike.
        for _ in 0..5 {
            pass.push(median_us(3, reps, || {
                std::hint::black_box(engine::half_exps(kind, &jobs));
            }));
            ossl.push(median_us(3, reps, || {
                key.private_decrypt(&c, &mut out, Padding::NONE).unwrap();
            }));
            ours.push(median_us(3, reps, || {
                std::hint::black_box(ek.private_raw(kind, &c).unwrap());
            }));
        }
        for v in [&mut pass, &mut ossl, &mut ours] {
            v.sort_by(f64::total_cmp);
        }
        let (pass, ossl, ours) = (pass[2], ossl[2], ours[2]);
        let us = |v: f64| std::time::Duration::from_secs_f64(v / 1e6);
        let verdict = if calibrate::engine_wins(us(pass), us(ossl)) {
            "the engine serves this size from that threshold on"
        } else {
            "OpenSSL serves this size, never the engine"
        };
        let window = engine::window_bits(engine::limbs_for(bits / 2));
        println!(
            "RSA-{bits}: engine pass (8 lanes, {window}-bit windows) {pass:.0} µs, i.e. {:.0} µs \
             per request when full; OpenSSL private op {ossl:.0} µs; lone request on the engine \
             {ours:.0} µs; break-even at {:.1} requests per pass (default threshold: {} requests \
             in flight; with these figures {verdict})",
            pass / 4.0,
            pass / ossl,
            sched::batch_threshold(bits),
        );
    }
}
