//! The scheduler: one worker thread per core, each with a bounded queue of CRT
//! half-exponentiations, started at the first request.
//!
//! Each request is first admitted ([`Scheduler::admit`]): unless enough requests are in
//! flight for a pass to beat OpenSSL ([`batch_threshold`]), it runs at once with OpenSSL's
//! own RSA code in the caller's thread (no hand-over to a worker, no wait).
//!
//! A request sent to the engine (one RSA private operation) is two halves, pushed together onto one queue,
//! chosen round-robin. A worker takes the oldest half and up to seven more of the same prime
//! size from its queue (eight lanes) and runs them at once. It never waits for a batch to fill:
//! a partial batch runs as soon as the queue holds nothing more of its size, so a lone request
//! costs no added latency and batches form exactly when requests arrive faster than the
//! engine serves them. A full queue answers [`Busy`]; the provider turns that into
//! `CKR_DEVICE_MEMORY`, which the framework treats as "try the next provider".

use crate::engine::{self, Job, Kind, LANES};
use crate::fault::{self, Fault};
use crate::rsa::{Pending, RsaKey};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use zeroize::Zeroizing;

/// Halves a queue holds at most.
pub const QUEUE_CAPACITY: usize = 64;

/// The queue was full.
#[derive(Debug, PartialEq, Eq)]
pub struct Busy;

/// One half of a request.
struct Half {
    key: Arc<RsaKey>,
    /// 0: the `p` half, 1: the `q` half.
    which: usize,
    base: Zeroizing<Vec<u64>>,
    reply: SyncSender<(usize, Zeroizing<Vec<u64>>)>,
}

#[derive(Default)]
struct Queue {
    items: Mutex<VecDeque<Half>>,
    ready: Condvar,
}

struct Workers {
    queues: Vec<Arc<Queue>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// The scheduler of one provider instance.
pub struct Scheduler {
    kind: Kind,
    workers: OnceLock<Workers>,
    next: AtomicUsize,
    /// Requests admitted and not yet answered, on either path.
    in_flight: AtomicUsize,
    stop: Arc<AtomicBool>,
    /// Batches run and halves served (for tests and `docs/ACCEL.md` figures).
    stats: Arc<Stats>,
}

/// Counters of the scheduler.
#[derive(Default, Debug)]
pub struct Stats {
    /// Engine passes run.
    pub passes: AtomicUsize,
    /// Halves served.
    pub halves: AtomicUsize,
    /// Requests served directly by OpenSSL's own RSA code.
    pub direct: AtomicUsize,
}

/// A request counted in flight until dropped ([`Scheduler::admit`]).
pub struct Ticket<'a> {
    sched: &'a Scheduler,
    batch: bool,
}

impl Ticket<'_> {
    /// Whether the request goes to the engine (else: OpenSSL, in the caller's thread).
    pub fn batch(&self) -> bool {
        self.batch
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.sched.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Scheduler {
    /// A scheduler on engine `kind`; no thread starts before the first request.
    pub fn new(kind: Kind) -> Scheduler {
        Scheduler {
            kind,
            workers: OnceLock::new(),
            next: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            stop: Arc::new(AtomicBool::new(false)),
            stats: Arc::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    fn workers(&self) -> &Workers {
        self.workers.get_or_init(|| {
            let n = Self::cores();
            let queues: Vec<Arc<Queue>> = (0..n).map(|_| Arc::default()).collect();
            let threads = queues
                .iter()
                .enumerate()
                .map(|(i, q)| {
                    let (q, stop, stats, kind) =
                        (q.clone(), self.stop.clone(), self.stats.clone(), self.kind);
                    std::thread::Builder::new()
                        .name(format!("opencf-accel-{i}"))
                        .spawn(move || work(kind, &q, &stop, &stats))
                        .expect("start an accelerator worker")
                })
                .collect();
            Workers {
                queues,
                threads: Mutex::new(threads),
            }
        })
    }

    /// Workers (one per core).
    /// Read once: `available_parallelism` reads the cgroup files at each call.
    pub fn cores() -> usize {
        static CORES: OnceLock<usize> = OnceLock::new();
        *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// Admits a request for a `bits`-bit key and chooses its path. It goes to the engine
    /// when, counting itself, at least [`batch_threshold`]`(bits)` requests are in flight
    /// (then passes fill enough to beat OpenSSL); otherwise it runs at once with
    /// OpenSSL in the caller's thread, so a lone request never waits for a worker. The fault
    /// switch `engine-error` sends every request to the engine (it tests the engine's
    /// check); `busy` refuses every request.
    pub fn admit(&self, bits: usize) -> Result<Ticket<'_>, Busy> {
        let fault = fault::current();
        if fault == Fault::Busy {
            return Err(Busy);
        }
        let n = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        let batch = fault == Fault::EngineError || n >= batch_threshold(bits);
        if !batch {
            self.stats.direct.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Ticket { sched: self, batch })
    }

    /// Runs the two halves of `pend` on a worker and waits for them: `Ok(None)` when the
    /// worker could not answer (the request is lost: treat as an engine error).
    pub fn run(
        &self,
        key: &Arc<RsaKey>,
        pend: &Pending,
    ) -> Result<Option<[Zeroizing<Vec<u64>>; 2]>, Busy> {
        let w = self.workers();
        let q = &w.queues[self.next.fetch_add(1, Ordering::Relaxed) % w.queues.len()];
        let (tx, rx) = sync_channel(2);
        {
            let mut items = q.items.lock().unwrap_or_else(|e| e.into_inner());
            if items.len() + 2 > QUEUE_CAPACITY {
                return Err(Busy);
            }
            for (which, base) in [&pend.base_p, &pend.base_q].into_iter().enumerate() {
                items.push_back(Half {
                    key: key.clone(),
                    which,
                    base: base.clone(),
                    reply: tx.clone(),
                });
            }
        }
        q.ready.notify_one();
        drop(tx);
        let mut out: [Option<Zeroizing<Vec<u64>>>; 2] = [None, None];
        for _ in 0..2 {
            match rx.recv() {
                Ok((which, r)) => out[which] = Some(r),
                Err(_) => return Ok(None),
            }
        }
        let [Some(a), Some(b)] = out else {
            return Ok(None);
        };
        Ok(Some([a, b]))
    }

    /// Stops and joins the workers (`C_Finalize`).
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(w) = self.workers.get() {
            for q in &w.queues {
                let _g = q.items.lock().unwrap_or_else(|e| e.into_inner());
                q.ready.notify_all();
            }
            let threads = std::mem::take(&mut *w.threads.lock().unwrap_or_else(|e| e.into_inner()));
            for t in threads {
                let _ = t.join();
            }
        }
    }
}

/// Requests in flight (all workers together, counting the new one) from which a request for
/// a `bits`-bit key goes to the engine. A pass costs the same whatever number of its eight
/// lanes is used and a request takes two, so the engine wins from `t_pass / t_openssl`
/// requests per pass, per worker; `tests/threshold.rs` measures both (docs/ACCEL.md). On the
/// reference machine (2-core Xeon VM, OpenSSL 3.6, which itself runs the two CRT halves of one
/// request together with AVX-512 IFMA) that ratio measured 1.6 and 1.5 for RSA-2048, 2.2 and
/// 1.8 for 3072, 3.0 and 2.9 for 4096; the thresholds are the next whole number above the
/// larger: 2, 3 and 4 requests per worker. `$OPENCF_ACCEL_BATCH=N` (read at
/// each request) sets the threshold to `N` requests in flight for every size (`1`: every
/// request goes to the engine), for tests and for other CPUs.
pub fn batch_threshold(bits: usize) -> usize {
    if let Some(n) = std::env::var("OPENCF_ACCEL_BATCH")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        return n;
    }
    let per_worker = match bits {
        2048 => THRESHOLD_2048,
        3072 => THRESHOLD_3072,
        _ => THRESHOLD_4096,
    };
    per_worker.saturating_mul(Scheduler::cores())
}

/// Requests per pass from which the engine beats OpenSSL, by modulus size (see
/// [`batch_threshold`]).
const THRESHOLD_2048: usize = 2;
const THRESHOLD_3072: usize = 3;
const THRESHOLD_4096: usize = 4;

/// Takes the next batch: the oldest half and up to `LANES − 1` more of its prime size.
fn take_batch(items: &mut VecDeque<Half>) -> Vec<Half> {
    let bits = items[0].key.p.bits;
    let mut batch = Vec::with_capacity(LANES);
    let mut i = 0;
    while i < items.len() && batch.len() < LANES {
        if items[i].key.p.bits == bits {
            batch.extend(items.remove(i));
        } else {
            i += 1;
        }
    }
    batch
}

fn work(kind: Kind, q: &Queue, stop: &AtomicBool, stats: &Stats) {
    loop {
        let batch = {
            let mut items = q.items.lock().unwrap_or_else(|e| e.into_inner());
            while items.is_empty() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                items = q.ready.wait(items).unwrap_or_else(|e| e.into_inner());
            }
            take_batch(&mut items)
        };
        let results = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let jobs: Vec<Job> = batch
                .iter()
                .map(|h| Job {
                    prime: if h.which == 0 { &h.key.p } else { &h.key.q },
                    base: &h.base,
                })
                .collect();
            engine::half_exps(kind, &jobs)
        }));
        stats.passes.fetch_add(1, Ordering::Relaxed);
        stats.halves.fetch_add(batch.len(), Ordering::Relaxed);
        // A panic drops the reply senders: the callers see an engine error.
        if let Ok(results) = results {
            let corrupt = fault::current() == Fault::EngineError;
            for (h, mut r) in batch.into_iter().zip(results) {
                if corrupt {
                    // The fault switch: a flipped bit, which the public-key check must catch.
                    r[0] ^= 1;
                }
                let _ = h.reply.send((h.which, r));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_counts_requests_in_flight() {
        let s = Scheduler::new(Kind::Portable);
        std::env::remove_var("OPENCF_ACCEL_BATCH");
        let a = s.admit(2048).unwrap();
        assert!(
            !a.batch(),
            "a lone request is below the threshold: it runs at once"
        );
        std::env::set_var("OPENCF_ACCEL_BATCH", "2");
        let b = s.admit(2048).unwrap();
        assert!(b.batch(), "two in flight reach a threshold of two");
        assert_eq!(s.in_flight.load(Ordering::Relaxed), 2);
        drop(b);
        drop(a);
        let c = s.admit(3072).unwrap();
        std::env::remove_var("OPENCF_ACCEL_BATCH");
        assert!(!c.batch(), "alone again: below the threshold");
        drop(c);
        assert_eq!(s.in_flight.load(Ordering::Relaxed), 0);
        assert_eq!(s.stats().direct.load(Ordering::Relaxed), 2);
    }
}
