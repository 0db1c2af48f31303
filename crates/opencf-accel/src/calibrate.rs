//! The RSA engine's break-even, measured on this CPU.
//!
//! A pass of the engine costs the same whatever number of its eight lanes is used, and a
//! request takes two, so the engine beats OpenSSL's own private operation from
//! `t_pass / t_openssl` requests per pass. That ratio depends on the CPU far more than on
//! anything else: on a core that runs 512-bit IFMA instructions at full width (the AMD EPYC of
//! docs/PERFORMANCE.md) a full RSA-2048 pass cost 0.29 of OpenSSL's operation per request, on
//! one that splits them in two halves (AMD Zen 4) 0.53, and RSA-4096 there never wins (4.4
//! requests per pass, more than a pass holds). OpenSSL, whose own two-lane code uses 256-bit
//! vectors, runs at the same speed on both. A fixed threshold cannot be right everywhere.
//!
//! So the scheduler measures it once per modulus size, the first time a request of that size
//! would go to the engine (enough requests in flight by the thresholds of
//! [`crate::sched::batch_threshold`]): one 8-lane pass and one OpenSSL private operation on
//! the request's own key, each timed by the CPU time of the calling thread (not the wall
//! clock, which grows while the thread waits for a core), the smaller of two runs. A size
//! whose break-even is not below what a pass holds (four requests) is never sent to the
//! engine: even full passes would cost more than OpenSSL. The others keep those thresholds
//! (a threshold raised to the next whole number above the measured break-even sent more
//! requests to OpenSSL at 16 threads and signed fewer per second, docs/PERFORMANCE.md). The
//! measured break-even is in `cryptoadm stat -p accel` (`rsa_break_even_2048`, … in
//! hundredths).
//! Measuring costs the calling request two passes and three OpenSSL operations (about 2.5 ms
//! for RSA-2048, 17 ms for RSA-4096 on Zen 4), once per size and process; a process that never
//! has enough requests in flight never measures. A measurement is not repeated: where noise
//! made a size look slower on the engine than it is, that size runs with OpenSSL for the rest
//! of the process, as fast as the software token.

use crate::engine::{self, Job, Kind, LANES};
use crate::rsa::RsaKey;
use std::time::{Duration, Instant};

/// Whether full passes beat OpenSSL for a pass that costs `pass` and an OpenSSL operation
/// that costs `openssl`: the break-even is below what a pass holds (`LANES / 2` requests).
pub fn engine_wins(pass: Duration, openssl: Duration) -> bool {
    break_even(pass, openssl).is_some_and(|r| r < (LANES / 2) as f64)
}

/// `pass / openssl`: the requests per pass from which a pass costs less than that many
/// OpenSSL operations (`None` if `openssl` measured zero).
pub fn break_even(pass: Duration, openssl: Duration) -> Option<f64> {
    (!openssl.is_zero()).then(|| pass.as_secs_f64() / openssl.as_secs_f64())
}

/// The CPU time of the calling thread for one call of `f` (the wall clock where the thread's
/// CPU time cannot be read).
fn cpu_time(f: impl FnOnce()) -> Duration {
    let (cpu, wall) = (opencf_abi::os::thread_cpu_time(), Instant::now());
    f();
    match (cpu, opencf_abi::os::thread_cpu_time()) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => wall.elapsed(),
    }
}

/// Rounds of [`measure`]: each times one pass and one OpenSSL operation, one after the
/// other, so that a disturbance hits both alike; the smallest of each is kept.
const ROUNDS: usize = 2;

/// Times one full pass of engine `kind` (four requests on `key`, eight lanes) and one private
/// operation of OpenSSL on the same key: `(pass, openssl)`, or `None` if either fails.
pub fn measure(kind: Kind, key: &RsaKey) -> Option<(Duration, Duration)> {
    // Any input below the modulus will do: both paths take the same time whatever it is.
    let mut c = vec![0u8; key.k];
    *c.last_mut()? = 2;
    // The first operation also sets up OpenSSL's Montgomery contexts of the key.
    key.private_openssl(&c).ok()?;
    let pend = key.begin(&c).ok()?;
    let jobs: Vec<Job> = (0..LANES / 2).flat_map(|_| key.jobs(&pend)).collect();
    let (mut pass, mut openssl) = (Duration::MAX, Duration::MAX);
    for _ in 0..ROUNDS {
        let mut ok = false;
        openssl = openssl.min(cpu_time(|| ok = key.private_openssl(&c).is_ok()));
        pass = pass.min(cpu_time(|| {
            std::hint::black_box(engine::half_exps(kind, &jobs));
        }));
        if !ok {
            return None;
        }
    }
    Some((pass, openssl))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_wins_below_four_requests_per_pass() {
        let us = Duration::from_micros;
        // The figures of docs/ACCEL.md.
        assert!(engine_wins(us(440), us(327))); // 1.3: Xeon, RSA-2048
        assert!(engine_wins(us(701), us(329))); // 2.1: Zen 4, RSA-2048
        assert!(engine_wins(us(1857), us(698))); // 2.7: Zen 4, RSA-3072
        assert!(engine_wins(us(3990), us(1000)));
        // A full pass that costs as much as four operations never pays.
        assert!(!engine_wins(us(4000), us(1000)));
        assert!(!engine_wins(us(6533), us(1486))); // 4.4: Zen 4, RSA-4096
        assert!(!engine_wins(us(1), Duration::ZERO));
        assert_eq!(
            break_even(us(701), us(329)).map(|r| (r * 100.0).round()),
            Some(213.0)
        );
    }
}
