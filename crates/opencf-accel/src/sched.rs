//! The scheduler: one worker thread per core, each with a bounded queue of CRT
//! half-exponentiations, started at the first request.
//!
//! A request (one RSA private operation) is two halves, pushed together onto one queue,
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
}

impl Scheduler {
    /// A scheduler on engine `kind`; no thread starts before the first request.
    pub fn new(kind: Kind) -> Scheduler {
        Scheduler {
            kind,
            workers: OnceLock::new(),
            next: AtomicUsize::new(0),
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
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
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

    /// Runs the two halves of `pend` on a worker and waits for them: `Ok(None)` when the
    /// worker could not answer (the request is lost: treat as an engine error).
    pub fn run(
        &self,
        key: &Arc<RsaKey>,
        pend: &Pending,
    ) -> Result<Option<[Zeroizing<Vec<u64>>; 2]>, Busy> {
        if fault::current() == Fault::Busy {
            return Err(Busy);
        }
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
