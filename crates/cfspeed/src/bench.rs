//! The timing loop: N threads, each with its own worker, for a fixed time.

use std::sync::Barrier;
use std::time::{Duration, Instant};

/// One thread's state for one benchmark: a session (or native context) and
/// its buffers. `op` performs exactly one operation.
pub trait Worker: Send {
    /// Performs one operation.
    fn op(&mut self) -> Result<(), String>;
}

/// One thread's count, elapsed time and latencies.
type ThreadOutcome = Result<(u64, Duration, Vec<f64>), String>;

/// What one timed run measured.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// Sum over threads of (operations / that thread's elapsed time).
    pub ops_per_s: f64,
    /// Per-operation latencies in microseconds, when recorded. With a batch
    /// of one these are single operations; otherwise batch averages.
    pub latencies_us: Vec<f64>,
    /// Process CPU time during the run over its wall time, in % of one CPU.
    pub cpu_percent: f64,
    /// User-mode CPU time over wall time, in % of all the machine's CPUs.
    pub user_percent_all: f64,
    /// Kernel CPU time over wall time, in % of all the machine's CPUs.
    pub sys_percent_all: f64,
    /// Voluntary context switches (blocking) per 1000 operations.
    pub voluntary_per_kop: f64,
    /// Involuntary context switches (preemption) per 1000 operations.
    pub involuntary_per_kop: f64,
}

/// Runs `workers` (one thread each) for `duration`. Each thread times
/// batches of `batch` operations and stops at the first batch boundary
/// after `duration`.
pub fn run(
    workers: &mut [Box<dyn Worker>],
    duration: Duration,
    batch: usize,
    record: bool,
) -> Result<RunResult, String> {
    let barrier = Barrier::new(workers.len());
    let (u0, w0) = (crate::cpu::usage(), Instant::now());
    let outs: Vec<ThreadOutcome> = std::thread::scope(|s| {
        let handles: Vec<_> = workers
            .iter_mut()
            .map(|w| {
                let barrier = &barrier;
                s.spawn(move || {
                    let mut lats = Vec::new();
                    barrier.wait();
                    let start = Instant::now();
                    let mut ops = 0u64;
                    loop {
                        let t0 = Instant::now();
                        for _ in 0..batch {
                            w.op()?;
                        }
                        let t1 = Instant::now();
                        ops += batch as u64;
                        if record {
                            lats.push((t1 - t0).as_secs_f64() * 1e6 / batch as f64);
                        }
                        if t1 - start >= duration {
                            return Ok((ops, t1 - start, lats));
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a benchmark thread panicked".into()))
            })
            .collect()
    });
    let (u1, wall) = (crate::cpu::usage(), w0.elapsed());
    let mut ops_per_s = 0.0;
    let mut total_ops = 0u64;
    let mut latencies_us = Vec::new();
    for out in outs {
        let (ops, elapsed, lats) = out?;
        ops_per_s += ops as f64 / elapsed.as_secs_f64();
        total_ops += ops;
        latencies_us.extend(lats);
    }
    let per_kop = |d: u64| d as f64 * 1000.0 / total_ops.max(1) as f64;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let all = |a: Duration, b: Duration| {
        a.saturating_sub(b).as_secs_f64() * 100.0 / (wall.as_secs_f64() * cpus)
    };
    Ok(RunResult {
        ops_per_s,
        latencies_us,
        cpu_percent: (u1.cpu.saturating_sub(u0.cpu)).as_secs_f64() * 100.0 / wall.as_secs_f64(),
        user_percent_all: all(u1.user, u0.user),
        sys_percent_all: all(u1.system, u0.system),
        voluntary_per_kop: per_kop(u1.voluntary.saturating_sub(u0.voluntary)),
        involuntary_per_kop: per_kop(u1.involuntary.saturating_sub(u0.involuntary)),
    })
}

/// Warms `workers` up for `duration` and returns a batch size that makes one
/// timed batch last about `target` (so reading the clock costs little), or 1
/// when `per_op` is set (every operation timed on its own).
pub fn calibrate(
    workers: &mut [Box<dyn Worker>],
    duration: Duration,
    target: Duration,
    per_op: bool,
) -> Result<usize, String> {
    let warm = run(workers, duration, 1, false)?;
    if per_op {
        return Ok(1);
    }
    let per_thread = warm.ops_per_s / workers.len() as f64;
    let op_s = 1.0 / per_thread.max(1e-9);
    Ok(((target.as_secs_f64() / op_s).ceil() as usize).clamp(1, 4096))
}

/// The median of `v` (mean of the middle two for an even count).
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// The `p`-th percentile of `v` (nearest rank), `p` in 0..=100.
pub fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_percentile() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
    }

    struct Count(u64);
    impl Worker for Count {
        fn op(&mut self) -> Result<(), String> {
            self.0 += 1;
            Ok(())
        }
    }

    #[test]
    fn run_counts_every_thread() {
        let mut ws: Vec<Box<dyn Worker>> = vec![Box::new(Count(0)), Box::new(Count(0))];
        let r = run(&mut ws, Duration::from_millis(20), 8, true).unwrap();
        assert!(r.ops_per_s > 0.0);
        assert!(!r.latencies_us.is_empty());
    }
}
