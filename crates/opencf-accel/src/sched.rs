//! The scheduler: one worker thread per core, each with a bounded queue of CRT
//! half-exponentiations, started at the first request.
//!
//! Each request is first admitted ([`Scheduler::admit_for`]): unless enough requests were in
//! flight recently for a pass to beat OpenSSL ([`batch_threshold`]), it runs at once with
//! OpenSSL's own RSA code in the caller's thread (no hand-over to a worker, no wait). A size
//! whose engine cannot beat OpenSSL on this CPU even with full passes (measured once,
//! [`crate::calibrate`]) always runs with OpenSSL.
//!
//! A request sent to the engine (one RSA private operation) is two halves, pushed together onto
//! one queue: the one that holds a partial batch (the fullest such), else the shortest, so that
//! requests fill one batch before they start another. A worker takes the oldest half and up to
//! seven more of the same prime size (eight lanes), from its own queue first and then from the
//! others, and runs them at once. A partial batch waits only while more requests are on their
//! way (admitted to the engine and being blinded by their callers, or fewer halves queued and
//! in passes than the recent number of requests in flight accounts for), and never longer than
//! [`HOLD`]: a lone request costs no added latency, and requests that arrive together share a
//! pass. A full queue answers [`Busy`]; the provider turns that into `CKR_DEVICE_MEMORY`,
//! which the framework treats as "try the next provider".

use crate::calibrate;
use crate::counters;
use crate::engine::{self, Job, Kind, LANES};
use crate::fault::{self, Fault};
use crate::rsa::{self, CheckedHalf, HalfResult, Pending, RsaKey};
use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

/// Halves a queue holds at most.
pub const QUEUE_CAPACITY: usize = 64;

/// The longest a worker holds a partial batch for requests still being prepared: a fraction
/// of one RSA-2048 pass (about 250 µs on the reference machines, docs/ACCEL.md).
pub const HOLD: Duration = Duration::from_micros(100);

/// The queue was full.
#[derive(Debug, PartialEq, Eq)]
pub struct Busy;

/// One half of a request.
struct Half {
    key: Arc<RsaKey>,
    /// 0: the `p` half, 1: the `q` half.
    which: usize,
    base: Zeroizing<Vec<u64>>,
    /// What the result raised to `e` must be ([`rsa::check_halves`]).
    expect: Zeroizing<Vec<u64>>,
    reply: Replier,
}

/// Where the two halves of one request meet: the caller waits until both are settled and is
/// woken once, by the worker that settles the second (not once per half).
#[derive(Default)]
struct Reply {
    state: Mutex<Settled>,
    done: Condvar,
}

#[derive(Default)]
struct Settled {
    halves: [Option<CheckedHalf>; 2],
    /// Halves answered or lost.
    count: usize,
    /// A half was dropped unanswered (its pass panicked, or the scheduler stopped).
    lost: bool,
}

impl Settled {
    /// Both halves, once settled; `None` when one was lost.
    fn take(&mut self) -> Option<[CheckedHalf; 2]> {
        if self.lost {
            return None;
        }
        let [Some(a), Some(b)] = std::mem::take(&mut self.halves) else {
            return None;
        };
        Some([a, b])
    }
}

/// A request queued without waiting ([`Scheduler::submit`]).
pub struct Submitted {
    reply: Arc<Reply>,
}

impl Submitted {
    /// `None` while a pass still runs a half; then the two halves, or `Some(None)` when one
    /// was lost (its pass panicked). Never blocks.
    pub fn poll(&self) -> Option<Option<[CheckedHalf; 2]>> {
        let mut s = self.reply.state.lock().unwrap_or_else(|e| e.into_inner());
        (s.count == 2).then(|| s.take())
    }
}

/// A half's handle on its request's [`Reply`]: answers once ([`Replier::send`]); dropped
/// unanswered, it settles the half as lost, so the caller never waits for it forever.
struct Replier {
    reply: Arc<Reply>,
    which: usize,
    settled: bool,
}

impl Replier {
    fn send(mut self, result: CheckedHalf) {
        self.settle(Some(result));
    }

    fn settle(&mut self, result: Option<CheckedHalf>) {
        self.settled = true;
        let mut s = self.reply.state.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Some(r) => s.halves[self.which] = Some(r),
            None => s.lost = true,
        }
        s.count += 1;
        if s.count == 2 {
            drop(s);
            self.reply.done.notify_one();
        }
    }
}

impl Drop for Replier {
    fn drop(&mut self) {
        if !self.settled {
            self.settle(None);
        }
    }
}

#[derive(Default)]
struct Queue {
    items: Mutex<VecDeque<Half>>,
    ready: Condvar,
    /// `items.len()`, written under the lock, read without it to choose a queue.
    len: AtomicUsize,
    /// What the queue's worker waits for on `ready`: [`RUNNING`] (it does not wait),
    /// [`IDLE`] or [`HOLDING`]. Written under the lock, just before and after each wait, so
    /// that whoever changes what the worker waits for, under the lock or after taking it,
    /// sees whether a wakeup is needed: a wakeup is a system call even when nobody waits.
    waiting: AtomicU8,
}

/// [`Queue::waiting`]: the worker is not waiting.
const RUNNING: u8 = 0;
/// [`Queue::waiting`]: the worker waits for its queue to be non-empty.
const IDLE: u8 = 1;
/// [`Queue::waiting`]: the worker holds a partial batch, waiting for it to fill or for no more
/// requests to be coming.
const HOLDING: u8 = 2;

impl Queue {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Half>> {
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`Queue::waiting`], read under the lock (`_items`).
    fn waiting_for(&self, _items: &MutexGuard<'_, VecDeque<Half>>) -> u8 {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Waits on `ready` (for at most `timeout`, if given) with [`Queue::waiting`] set to
    /// `why`.
    fn wait<'a>(
        &self,
        items: MutexGuard<'a, VecDeque<Half>>,
        why: u8,
        timeout: Option<Duration>,
    ) -> MutexGuard<'a, VecDeque<Half>> {
        self.waiting.store(why, Ordering::Relaxed);
        let items = match timeout {
            None => self.ready.wait(items).unwrap_or_else(|e| e.into_inner()),
            Some(t) => {
                (self.ready)
                    .wait_timeout(items, t)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
        };
        self.waiting.store(RUNNING, Ordering::Relaxed);
        items
    }
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
    /// What workers read to decide whether to hold a partial batch.
    demand: Arc<Demand>,
    stop: Arc<AtomicBool>,
    /// Requests this scheduler sent to OpenSSL's own RSA code (also counted for the whole
    /// process in `cryptoadm stat`, [`counters`]`::rsa_direct`, with the engine's passes).
    direct: AtomicUsize,
    /// Per modulus size of [`rsa::SIZES`], what this CPU gives ([`calibrate`]):
    /// [`UNMEASURED`], [`MEASURING`], [`WINS`] or [`NEVER`].
    measured: [AtomicU8; 3],
}

/// Not measured yet.
const UNMEASURED: u8 = 0;
/// Being measured by a request; meanwhile the others of that size go to the engine.
const MEASURING: u8 = 1;
/// Full passes beat OpenSSL for that size on this CPU.
const WINS: u8 = 2;
/// The engine never beats OpenSSL for that size on this CPU.
const NEVER: u8 = 3;

/// A request counted in flight until dropped ([`Scheduler::admit`]).
pub struct Ticket<'a> {
    sched: &'a Scheduler,
    batch: bool,
    /// Its halves are queued ([`Scheduler::run`]): no longer counted as coming.
    queued: Cell<bool>,
    /// Counted in [`Scheduler::in_flight`] (not a request of an asynchronous session).
    counted: bool,
}

impl Ticket<'_> {
    /// Whether the request goes to the engine (else: OpenSSL, in the caller's thread).
    pub fn batch(&self) -> bool {
        self.batch
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if self.batch && !self.queued.get() {
            // Admitted to the engine but never queued (an error before the pass).
            self.sched.arrived();
        }
        if self.counted {
            self.sched.in_flight.fetch_sub(1, Ordering::Relaxed);
        }
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
            demand: Arc::new(Demand::new()),
            stop: Arc::new(AtomicBool::new(false)),
            direct: AtomicUsize::new(0),
            measured: Default::default(),
        }
    }

    fn workers(&self) -> &Workers {
        self.workers.get_or_init(|| {
            let n = Self::cores();
            let queues: Vec<Arc<Queue>> = (0..n).map(|_| Arc::default()).collect();
            let threads = queues
                .iter()
                .enumerate()
                .map(|(i, _)| {
                    let w = Worker {
                        kind: self.kind,
                        me: i,
                        queues: queues.clone(),
                        demand: self.demand.clone(),
                        stop: self.stop.clone(),
                    };
                    std::thread::Builder::new()
                        .name(format!("opencf-accel-{i}"))
                        .spawn(move || w.work())
                        .expect("start an accelerator worker")
                })
                .collect();
            Workers {
                queues,
                threads: Mutex::new(threads),
            }
        })
    }

    /// The engine the workers run.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Workers (one per core).
    /// Read once: `available_parallelism` reads the cgroup files at each call.
    pub fn cores() -> usize {
        static CORES: OnceLock<usize> = OnceLock::new();
        *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// Admits a request for a `bits`-bit key and chooses its path, with the default
    /// thresholds ([`batch_threshold`]) and without measuring this CPU (the scheduler's own
    /// tests); requests of the provider go through [`Scheduler::admit_for`].
    pub fn admit(&self, bits: usize) -> Result<Ticket<'_>, Busy> {
        self.admit_with(bits, None, false)
    }

    /// Admits a request on `key` and chooses its path. It goes to the engine when at least
    /// [`batch_threshold`]`(bits)` requests were in flight at once recently (counting itself;
    /// the last 2 to 4 ms), so that passes fill enough to beat OpenSSL, unless full passes
    /// lose to OpenSSL for its size on this CPU (measured by the first request that gets this
    /// far, [`calibrate`]). Otherwise the request runs at once with OpenSSL in the caller's
    /// thread, so a lone request never waits for a worker. `always`: to the engine whatever
    /// the number in flight (where the engine can win), for a caller that does not wait (an
    /// asynchronous session), whose requests stay in flight while it queues more. Such
    /// requests are not counted in flight: that count tells workers how many blocked callers
    /// will come back with their next request (and a partial batch waits for them), while an
    /// asynchronous caller comes back only when it polls. The fault switch `engine-error` sends every
    /// request to the engine (it tests the engine's check); `busy` refuses every request.
    pub fn admit_for(&self, key: &RsaKey, always: bool) -> Result<Ticket<'_>, Busy> {
        self.admit_with(key.bits, Some(key), always)
    }

    fn admit_with(
        &self,
        bits: usize,
        key: Option<&RsaKey>,
        always: bool,
    ) -> Result<Ticket<'_>, Busy> {
        let fault = fault::current();
        if fault == Fault::Busy {
            return Err(Busy);
        }
        let peak = (!always).then(|| {
            let n = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
            self.demand.observe(n)
        });
        // `$OPENCF_ACCEL_BATCH` read once per request.
        let forced = batch_override();
        let threshold = forced.unwrap_or_else(|| default_threshold(bits));
        let batch = fault == Fault::EngineError
            || (peak.is_none_or(|p| p >= threshold)
                && (forced.is_some() || self.engine_may_win(bits, key)));
        if batch {
            self.demand.coming.fetch_add(1, Ordering::Relaxed);
        } else {
            self.direct.fetch_add(1, Ordering::Relaxed);
            counters::add(counters::get().rsa_direct, 1);
        }
        Ok(Ticket {
            sched: self,
            batch,
            queued: Cell::new(false),
            counted: !always,
        })
    }

    /// Whether a request on `key` that has enough requests in flight may go to the engine:
    /// not when its size was measured on this CPU and full passes lose to OpenSSL there. The
    /// first request that asks measures it ([`calibrate`]); until that is done the others go
    /// to the engine as before. `key` is `None` in the scheduler's own tests. (With
    /// `$OPENCF_ACCEL_BATCH` set, the caller does not ask: nothing is measured.)
    fn engine_may_win(&self, bits: usize, key: Option<&RsaKey>) -> bool {
        let Some(key) = key else {
            return true;
        };
        let Some(size) = rsa::SIZES.iter().position(|&b| b == bits) else {
            return true;
        };
        let cell = &self.measured[size];
        let mut state = cell.load(Ordering::Acquire);
        if state == UNMEASURED
            && cell
                .compare_exchange(UNMEASURED, MEASURING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            state = self.measure(key, size);
            cell.store(state, Ordering::Release);
        }
        // While another request measures, the default holds.
        state != NEVER
    }

    /// Measures the engine against OpenSSL on `key`, of size `rsa::SIZES[size]`
    /// ([`calibrate`]): [`WINS`] or [`NEVER`]. The break-even goes to `cryptoadm stat`.
    fn measure(&self, key: &RsaKey, size: usize) -> u8 {
        let Some((pass, openssl)) = calibrate::measure(self.kind, key) else {
            return NEVER;
        };
        if let Some(ratio) = calibrate::break_even(pass, openssl) {
            counters::add(
                counters::get().rsa_break_even[size],
                (ratio * 100.0).round() as usize,
            );
        }
        if calibrate::engine_wins(pass, openssl) {
            WINS
        } else {
            NEVER
        }
    }

    /// One request admitted to the engine has been queued (or given up): when none is left
    /// coming, workers holding a partial batch stop waiting for one.
    fn arrived(&self) {
        if self.demand.coming.fetch_sub(1, Ordering::AcqRel) == 1 {
            if let Some(w) = self.workers.get() {
                for q in &w.queues {
                    // Under the lock: a worker between its check and its wait gets the wakeup.
                    // Only a worker holding a partial batch waits for this; an idle one
                    // waits for its queue.
                    let holding = q.waiting_for(&q.lock()) == HOLDING;
                    if holding {
                        q.ready.notify_all();
                    }
                }
            }
        }
    }

    /// The queue for the next request: the one holding the fullest partial batch, so that
    /// batches fill before new ones start; when none holds one, the shortest (round-robin
    /// among equals).
    fn pick(&self, queues: &[Arc<Queue>]) -> usize {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let score = |i: usize| {
            let len = queues[i].len.load(Ordering::Relaxed);
            match len % LANES {
                0 => (false, usize::MAX - len),
                part => (true, part),
            }
        };
        (0..queues.len())
            .map(|k| (start + k) % queues.len())
            .max_by_key(|&i| score(i))
            .unwrap_or(0)
    }

    /// Runs the two halves of `pend` (admitted to the engine with `ticket`) on a worker and
    /// waits for them: `Ok(None)` when the worker could not answer (the request is lost:
    /// treat as an engine error).
    pub fn run(
        &self,
        ticket: &Ticket<'_>,
        key: &Arc<RsaKey>,
        pend: &Pending,
    ) -> Result<Option<[CheckedHalf; 2]>, Busy> {
        let reply = self.queue(ticket, key, pend)?;
        let mut s = reply.state.lock().unwrap_or_else(|e| e.into_inner());
        while s.count < 2 {
            s = reply.done.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        Ok(s.take())
    }

    /// Queues the two halves of `pend` like [`Scheduler::run`] and returns at once, for
    /// asynchronous sessions: the caller polls. The ticket ends here: a request of an
    /// asynchronous session is not counted in flight ([`Scheduler::admit_for`]).
    pub fn submit(
        &self,
        ticket: Ticket<'_>,
        key: &Arc<RsaKey>,
        pend: &Pending,
    ) -> Result<Submitted, Busy> {
        Ok(Submitted {
            reply: self.queue(&ticket, key, pend)?,
        })
    }

    /// Pushes the two halves of `pend` onto a queue and wakes its worker where needed.
    fn queue(
        &self,
        ticket: &Ticket<'_>,
        key: &Arc<RsaKey>,
        pend: &Pending,
    ) -> Result<Arc<Reply>, Busy> {
        let w = self.workers();
        let q = &w.queues[self.pick(&w.queues)];
        let reply = Arc::new(Reply::default());
        let waiting = {
            let mut items = q.lock();
            if items.len() + 2 > QUEUE_CAPACITY {
                return Err(Busy);
            }
            for (which, base) in [&pend.base_p, &pend.base_q].into_iter().enumerate() {
                items.push_back(Half {
                    key: key.clone(),
                    which,
                    base: base.clone(),
                    expect: pend.expect[which].clone(),
                    reply: Replier {
                        reply: reply.clone(),
                        which,
                        settled: false,
                    },
                });
            }
            q.len.store(items.len(), Ordering::Relaxed);
            q.waiting_for(&items)
        };
        if ticket.batch && !ticket.queued.replace(true) {
            self.arrived();
        }
        // Wake the worker when it waits for work, or holds a batch that these halves may
        // complete (counted over all queues, which can only wake it more often than it
        // needs); not when it is running: it takes the queue as it is once its pass ends.
        let wake = match waiting {
            IDLE => true,
            HOLDING => {
                let queued: usize = w.queues.iter().map(|o| o.len.load(Ordering::Relaxed)).sum();
                queued >= LANES || !self.demand.more_coming(queued)
            }
            _ => false,
        };
        if wake {
            q.ready.notify_one();
        }
        Ok(reply)
    }

    /// Stops and joins the workers (`C_Finalize`).
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(w) = self.workers.get() {
            for q in &w.queues {
                let _g = q.lock();
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
/// a `bits`-bit key goes to the engine (where full passes beat OpenSSL on this CPU at all,
/// [`crate::calibrate`]; the first request that reaches it measures). A pass costs the same
/// whatever number of its eight lanes is used and a request takes two, so the engine wins
/// from `t_pass / t_openssl` requests per pass, per worker; `tests/threshold.rs` measures both
/// (docs/ACCEL.md). On the reference machine (2-core Xeon VM, OpenSSL 3.6, which itself runs
/// the two CRT halves of one request together with AVX-512 IFMA) that ratio measured 1.6 and
/// 1.5 for RSA-2048, 2.2 and 1.8 for 3072, 3.0 and 2.9 for 4096; these defaults are the next
/// whole number above the larger: 2, 3 and 4 requests per worker. `$OPENCF_ACCEL_BATCH=N`
/// (read at each request) sets the threshold to `N` requests in flight for every size,
/// measured or not (`1`: every request goes to the engine), for tests.
pub fn batch_threshold(bits: usize) -> usize {
    batch_override().unwrap_or_else(|| default_threshold(bits))
}

/// [`batch_threshold`] without `$OPENCF_ACCEL_BATCH`.
fn default_threshold(bits: usize) -> usize {
    let per_worker = match bits {
        2048 => THRESHOLD_2048,
        3072 => THRESHOLD_3072,
        _ => THRESHOLD_4096,
    };
    per_worker.saturating_mul(Scheduler::cores())
}

/// `$OPENCF_ACCEL_BATCH`, when set to a number: the threshold for every size, measured or
/// not.
fn batch_override() -> Option<usize> {
    std::env::var("OPENCF_ACCEL_BATCH")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
}

/// Requests per pass from which the engine beats OpenSSL, by modulus size (see
/// [`batch_threshold`]).
const THRESHOLD_2048: usize = 2;
const THRESHOLD_3072: usize = 3;
const THRESHOLD_4096: usize = 4;

/// Moves halves of `bits`-bit primes from `items` into `batch`, oldest first, until it holds
/// `LANES`.
fn take_into(items: &mut VecDeque<Half>, bits: usize, batch: &mut Vec<Half>) {
    let mut i = 0;
    while i < items.len() && batch.len() < LANES {
        if items[i].key.p.bits == bits {
            batch.extend(items.remove(i));
        } else {
            i += 1;
        }
    }
}

/// Halves of `bits`-bit primes in `items`.
fn count_of(items: &VecDeque<Half>, bits: usize) -> usize {
    items.iter().filter(|h| h.key.p.bits == bits).count()
}

/// How many requests the engine serves, as workers see it.
struct Demand {
    /// Requests admitted to the engine whose halves are not queued yet (being blinded).
    coming: AtomicUsize,
    /// Halves in the passes running now.
    in_pass: AtomicUsize,
    /// The most requests in flight at once seen in the current window of [`PEAK_WINDOW`] and
    /// in the one before it (`epoch`: the current window's number since `start`).
    peak: AtomicUsize,
    prev_peak: AtomicUsize,
    epoch: AtomicU64,
    start: Instant,
}

/// The window over which [`Demand`] remembers how many requests were in flight at once.
const PEAK_WINDOW: Duration = Duration::from_millis(2);

impl Demand {
    fn new() -> Demand {
        Demand {
            coming: AtomicUsize::new(0),
            in_pass: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            prev_peak: AtomicUsize::new(0),
            epoch: AtomicU64::new(0),
            start: Instant::now(),
        }
    }

    /// Moves to the current window if it changed.
    fn tick(&self) {
        let now = (self.start.elapsed().as_micros() / PEAK_WINDOW.as_micros()) as u64;
        let e = self.epoch.load(Ordering::Relaxed);
        if now != e
            && (self.epoch)
                .compare_exchange(e, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let last = self.peak.swap(0, Ordering::Relaxed);
            let prev = if now == e + 1 { last } else { 0 };
            self.prev_peak.store(prev, Ordering::Relaxed);
        }
    }

    /// Records `n` requests in flight; returns the most in flight at once recently (this
    /// window and the one before), at least `n`. One thread never sees more than one: its
    /// requests keep OpenSSL's path, while many threads, whose requests come and go, are
    /// judged by how many they keep in flight rather than by the instant of each arrival.
    fn observe(&self, n: usize) -> usize {
        self.tick();
        self.peak.fetch_max(n, Ordering::Relaxed);
        self.recent().max(n)
    }

    /// The most requests in flight at once in this window and the one before.
    fn recent(&self) -> usize {
        (self.peak.load(Ordering::Relaxed)).max(self.prev_peak.load(Ordering::Relaxed))
    }

    /// Whether more halves are on their way to the queues than the `queued` ones: a request
    /// admitted is being blinded, or fewer halves are queued or in a pass than the recent
    /// number of requests in flight accounts for (callers finishing their previous request
    /// come back with the next).
    fn more_coming(&self, queued: usize) -> bool {
        if self.coming.load(Ordering::Acquire) > 0 {
            return true;
        }
        self.tick();
        2 * self.recent() > queued + self.in_pass.load(Ordering::Relaxed)
    }
}

/// One worker thread: its queue among all of them, and what it shares with the scheduler.
struct Worker {
    kind: Kind,
    me: usize,
    queues: Vec<Arc<Queue>>,
    demand: Arc<Demand>,
    stop: Arc<AtomicBool>,
}

impl Worker {
    /// The next batch: the oldest half of this worker's queue and up to `LANES − 1` more of
    /// its prime size, held up to [`HOLD`] while requests admitted to the engine are still
    /// coming, then topped up from the other queues. `None`: stop.
    fn next_batch(&self) -> Option<Vec<Half>> {
        let q = &self.queues[self.me];
        let mut items = q.lock();
        while items.is_empty() {
            if self.stop.load(Ordering::SeqCst) {
                return None;
            }
            items = q.wait(items, IDLE, None);
        }
        let bits = items[0].key.p.bits;
        let deadline = Instant::now() + HOLD;
        loop {
            let queued: usize = count_of(&items, bits)
                + (self.queues.iter().enumerate())
                    .filter(|&(i, _)| i != self.me)
                    .map(|(_, o)| o.len.load(Ordering::Relaxed))
                    .sum::<usize>();
            let now = Instant::now();
            if queued >= LANES
                || !self.demand.more_coming(queued)
                || now >= deadline
                || self.stop.load(Ordering::SeqCst)
            {
                break;
            }
            items = q.wait(items, HOLDING, Some(deadline - now));
        }
        let mut batch = Vec::with_capacity(LANES);
        take_into(&mut items, bits, &mut batch);
        q.len.store(items.len(), Ordering::Relaxed);
        drop(items);
        for (i, other) in self.queues.iter().enumerate() {
            if batch.len() == LANES {
                break;
            }
            if i == self.me || other.len.load(Ordering::Relaxed) == 0 {
                continue;
            }
            if let Ok(mut items) = other.items.try_lock() {
                take_into(&mut items, bits, &mut batch);
                other.len.store(items.len(), Ordering::Relaxed);
            }
        }
        Some(batch)
    }

    fn work(&self) {
        while let Some(batch) = self.next_batch() {
            let n = batch.len();
            self.demand.in_pass.fetch_add(n, Ordering::Relaxed);
            self.run_pass(batch);
            self.demand.in_pass.fetch_sub(n, Ordering::Relaxed);
        }
    }

    fn run_pass(&self, batch: Vec<Half>) {
        let kind = self.kind;
        let results = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let jobs: Vec<Job> = batch
                .iter()
                .map(|h| Job {
                    prime: if h.which == 0 { &h.key.p } else { &h.key.q },
                    base: &h.base,
                })
                .collect();
            let mut results = engine::half_exps(kind, &jobs);
            if fault::current() == Fault::EngineError {
                // The fault switch: a flipped bit in every result, which the check must catch.
                for r in &mut results {
                    r[0] ^= 1;
                }
            }
            // Every half of the pass checked with the public exponent in one more pass.
            let halves = batch
                .iter()
                .zip(results)
                .map(|(h, result)| HalfResult {
                    key: &h.key,
                    which: h.which,
                    expect: &h.expect,
                    result,
                })
                .collect();
            rsa::check_halves(kind, halves)
        }));
        // Counted before any caller is answered, so that a caller that reads the counters
        // after its answer finds its pass in them.
        let counted = counters::get();
        counters::add(counted.rsa_passes, 1);
        counters::add(counted.rsa_halves, batch.len());
        let faults = results
            .as_ref()
            .map_or(batch.len(), |c| c.iter().filter(|c| c.is_none()).count());
        counters::add(counted.rsa_faults, faults);
        // A panic drops the repliers unanswered, and so does a half that failed its check:
        // the callers see an engine error, and the result is never released.
        if let Ok(checked) = results {
            for (h, c) in batch.into_iter().zip(checked) {
                if let Some(c) = c {
                    h.reply.send(c);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tests that read or set `OPENCF_ACCEL_BATCH` take turns.
    static ENV: Mutex<()> = Mutex::new(());

    #[test]
    fn a_burst_keeps_the_engine_and_a_lone_request_returns_to_openssl() {
        let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
        let s = Scheduler::new(Kind::Portable);
        let threshold = batch_threshold(2048);
        let t0 = Instant::now();
        let burst: Vec<Ticket> = (0..threshold).map(|_| s.admit(2048).unwrap()).collect();
        assert!(
            burst.last().unwrap().batch(),
            "the threshold's request goes to the engine"
        );
        assert_eq!(s.demand.coming.load(Ordering::Relaxed), 1);
        drop(burst);
        assert_eq!(
            s.demand.coming.load(Ordering::Relaxed),
            0,
            "dropped before queueing"
        );
        let next = s.admit(2048).unwrap();
        if t0.elapsed() < PEAK_WINDOW {
            assert!(
                next.batch(),
                "alone now, but many were in flight a moment ago"
            );
        }
        drop(next);
        std::thread::sleep(3 * PEAK_WINDOW);
        let lone = s.admit(2048).unwrap();
        assert!(
            !lone.batch(),
            "a lone request after a quiet spell: OpenSSL's path"
        );
    }

    #[test]
    fn a_reply_wakes_its_caller_once_both_halves_are_settled() {
        let reply = Arc::new(Reply::default());
        let half = |which| Replier {
            reply: reply.clone(),
            which,
            settled: false,
        };
        let (p, q) = (half(0), half(1));
        let worker = std::thread::spawn(move || {
            p.send(CheckedHalf::unchecked(vec![7]));
            // The `q` half never answered (as when its pass panics).
            drop(q);
        });
        let mut s = reply.state.lock().unwrap();
        while s.count < 2 {
            s = reply.done.wait(s).unwrap();
        }
        assert!(s.lost, "the dropped half is lost");
        assert_eq!(s.halves[0].as_ref().map(|v| v.limbs()), Some(&[7u64][..]));
        assert!(s.halves[1].is_none());
        drop(s);
        worker.join().unwrap();
    }

    #[test]
    fn requests_fill_a_partial_batch_before_starting_another() {
        let s = Scheduler::new(Kind::Portable);
        let queues: Vec<Arc<Queue>> = (0..3).map(|_| Arc::default()).collect();
        let set = |lens: [usize; 3]| {
            for (q, l) in queues.iter().zip(lens) {
                q.len.store(l, Ordering::Relaxed);
            }
        };
        set([0, 2, 4]);
        assert_eq!(s.pick(&queues), 2, "the fullest partial batch");
        set([LANES, 0, 2 * LANES]);
        assert_eq!(s.pick(&queues), 1, "no partial batch: the shortest queue");
        set([LANES + 6, 2, 0]);
        assert_eq!(s.pick(&queues), 0);
    }

    #[test]
    fn admission_counts_requests_in_flight() {
        let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
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
        std::env::remove_var("OPENCF_ACCEL_BATCH");
        let c = s.admit(3072).unwrap();
        assert!(
            !c.batch(),
            "two in flight a moment ago: below the threshold of 3072 bits"
        );
        drop(c);
        assert_eq!(s.in_flight.load(Ordering::Relaxed), 0);
        assert_eq!(s.direct.load(Ordering::Relaxed), 2);
    }
}
