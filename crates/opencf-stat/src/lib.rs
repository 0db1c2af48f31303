//! Live counters of OpenCF, kept in shared memory so that `cryptoadm stat` can read them (like
//! Solaris `kstat`).
//!
//! **Writer side** (the framework, the TLS proxy, …): each process writes into its own segment,
//! a file of 64-bit cells in `$OPENCF_STAT_DIR`, else `/dev/shm/opencf-stat-<uid>`, created on
//! first use. If it cannot be created, every counter silently becomes a no-op: counting never
//! makes an application fail.
//!
//! Obtain a handle once, then count with a few relaxed atomic additions (no lock, no system
//! call; two uncontended `lock xadd` per operation), or, for a writer that holds a [`Shard`]
//! (the framework's metaslot sessions), with plain loads and stores of its own entries:
//!
//! ```
//! use std::time::Instant;
//! # std::env::set_var("OPENCF_STAT_DIR", std::env::temp_dir().join("opencf-stat-doctest"));
//! const CKM_AES_GCM: u64 = 0x1087;
//!
//! // When the provider is loaded: once per provider (takes a lock).
//! let stats: &'static opencf_stat::ProviderStats = opencf_stat::provider("softtoken");
//!
//! // Per operation: `mech` is a lock-free lookup in a small per-provider table (a lock is taken
//! // only the first time a mechanism is seen); keep the handle if the operation has state.
//! let counters = stats.mech(CKM_AES_GCM);
//! let t = Instant::now();
//! let result: Result<usize, ()> = Ok(4096); // … the provider call, 4096 bytes of data …
//! match result {
//!     Ok(bytes) => counters.record(bytes as u64, t.elapsed().as_nanos() as u64),
//!     Err(_) => counters.error(),
//! }
//! // The metaslot moved an operation to another provider: counted on the one it left.
//! counters.fallback();
//! // The provider answered "busy" (e.g. CKR_DEVICE_MEMORY from a full accelerator queue).
//! counters.busy();
//!
//! // Generic counters of other components (cache the reference: the lookup takes a lock).
//! let handshakes = opencf_stat::counter("tlsproxy", "handshakes");
//! handshakes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
//! let connections = opencf_stat::gauge("tlsproxy", "connections");
//! connections.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
//! ```
//!
//! **Reader side** ([`read`], [`reset`], [`user_dirs`]): sums the segments of live processes,
//! folds those of exited processes into retained totals kept in the same directory, and
//! subtracts the baseline recorded by [`reset`]. See `docs/STAT.md`.
#![forbid(unsafe_code)]

mod layout;
mod reader;

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use opencf_abi::shm::SharedCells;

use layout::*;
pub use layout::{
    bucket_high_ns, bucket_low_ns, truncate_name, HIST_BUCKETS, NAME_MAX, OTHER_MECH,
};
pub use reader::{
    collect, read, reset, user_dirs, MechKey, MechStats, NamedKey, Snapshot, BASELINE_FILE,
    RETAINED_FILE,
};

/// Environment variable naming the statistics directory.
pub const ENV_DIR: &str = "OPENCF_STAT_DIR";

/// Prefix of the per-user directories in `/dev/shm`: `/dev/shm/opencf-stat-<uid>`.
pub const SHM_PREFIX: &str = "/dev/shm/opencf-stat-";

// ---------------------------------------------------------------------------------------------
// Handles
// ---------------------------------------------------------------------------------------------

/// The counters of one provider × mechanism in this process. All methods are a few relaxed
/// atomic additions.
pub struct MechCounters {
    c: &'static [AtomicU64; MECH_CELLS],
    /// The entry of a [`Shard`]: one writer at a time, so counting is a plain load and store
    /// of each cell instead of an atomic read-modify-write (see [`ProviderStats::mech_in`]).
    exclusive: bool,
}

impl std::fmt::Debug for MechCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MechCounters")
            .field("ops", &self.c[M_OPS].load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl MechCounters {
    /// One successful operation (or one part of a multi-part operation) on `bytes` bytes of
    /// input that took `latency_ns` nanoseconds.
    #[inline]
    pub fn record(&self, bytes: u64, latency_ns: u64) {
        self.count(bytes);
        self.latency(latency_ns);
    }

    /// Adds `v` to cell `i`: an atomic addition, or a load and a store on an exclusive entry
    /// (whose single writer makes that exact; readers see each cell whole).
    #[inline]
    fn add(&self, i: usize, v: u64) {
        let c = &self.c[i];
        if self.exclusive {
            c.store(c.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
        } else {
            c.fetch_add(v, Ordering::Relaxed);
        }
    }

    /// Whether this is the entry of a [`Shard`] (single writer).
    pub fn is_exclusive(&self) -> bool {
        self.exclusive
    }

    /// One successful operation on `bytes` bytes of input, without its latency (for callers
    /// that time only a sample of their operations; see [`MechCounters::latency`]).
    #[inline]
    pub fn count(&self, bytes: u64) {
        self.add(M_OPS, 1);
        self.add(M_BYTES, bytes);
    }

    /// The latency of one (sampled) operation: the histogram and the latency sum. Percentiles
    /// are computed over the histogram, so a sample gives them as well as every operation.
    #[inline]
    pub fn latency(&self, latency_ns: u64) {
        self.add(M_LAT_SUM, latency_ns);
        self.add(M_HIST + bucket(latency_ns), 1);
    }

    /// An operation that failed.
    #[inline]
    pub fn error(&self) {
        self.add(M_ERRORS, 1);
    }

    /// The metaslot moved an operation from this provider to another one.
    #[inline]
    pub fn fallback(&self) {
        self.add(M_FALLBACKS, 1);
    }

    /// The provider refused an operation because it was busy.
    #[inline]
    pub fn busy(&self) {
        self.add(M_BUSY, 1);
    }
}

static DUMMY_CELLS: [AtomicU64; MECH_CELLS] = [const { AtomicU64::new(0) }; MECH_CELLS];
static DUMMY_MECH: MechCounters = MechCounters {
    c: &DUMMY_CELLS,
    exclusive: false,
};
static DUMMY_NAMED: AtomicU64 = AtomicU64::new(0);

const PROVIDER_SLOTS: usize = 256;

/// Exclusive shards a process hands out (see [`Shard`]).
pub const SHARDS: u32 = 32;
/// Mechanism entries kept for shared counters: exclusive entries are not taken from these.
const SHARED_RESERVE: usize = 64;

/// Shards in use, bit `k` for shard `k` (bit 0, the shared shard, is never set).
static SHARDS_USED: AtomicU64 = AtomicU64::new(0);

/// A claim on a set of counter entries that only its holder writes, so that counting needs no
/// atomic read-modify-write. The framework gives one to each metaslot session, whose lock makes
/// it the single writer; `cryptoadm stat` sums the entries of every shard. When all
/// [`SHARDS`] are taken, [`Shard::claim`] returns the shared shard (atomic counting).
#[derive(Debug)]
pub struct Shard(u32);

impl Shard {
    /// Claims a free exclusive shard, or the shared one when none is free.
    pub fn claim() -> Shard {
        let mut used = SHARDS_USED.load(Ordering::Relaxed);
        loop {
            let free = !used & !1 & ((1u64 << (SHARDS + 1)) - 1);
            if free == 0 {
                return Shard(0);
            }
            let k = free.trailing_zeros();
            match SHARDS_USED.compare_exchange_weak(
                used,
                used | (1 << k),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Shard(k),
                Err(now) => used = now,
            }
        }
    }

    /// The shared shard: counted with atomic additions, usable from any thread.
    pub const fn shared() -> Shard {
        Shard(0)
    }

    /// Its number (0: shared).
    pub fn index(&self) -> u32 {
        self.0
    }
}

impl Drop for Shard {
    fn drop(&mut self) {
        if self.0 != 0 {
            // Release: the next holder's first count sees this holder's last one.
            SHARDS_USED.fetch_and(!(1u64 << self.0), Ordering::Release);
        }
    }
}

const REGISTRY_SLOTS: usize = 32;

/// The statistics of one provider: a lock-free table from mechanism to [`MechCounters`].
pub struct ProviderStats {
    name: String,
    registry: &'static Registry,
    slots: OnceTable<u64, MechCounters, PROVIDER_SLOTS>,
    /// Exclusive entries by (mechanism, shard).
    shard_slots: OnceTable<(u64, u32), MechCounters, PROVIDER_SLOTS>,
}

impl ProviderStats {
    /// The provider's name as stored (at most [`NAME_MAX`] bytes).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The counters of `mech`. After the first call for a mechanism this is an atomic load and
    /// a comparison or two; the first call takes the registry's lock.
    #[inline]
    pub fn mech(&self, mech: u64) -> &'static MechCounters {
        let h = hash_u64(mech) as usize;
        match self.slots.find(h, |&m| m == mech) {
            Some(c) => c,
            None => self.mech_slow(mech, h),
        }
    }

    /// The counters of `mech` for the holder of `shard`: its own exclusive entry (counted
    /// without atomic read-modify-writes; only the holder of the shard may use it, one thread
    /// at a time), or the shared entry for the shared shard or when the segment has no room.
    #[inline]
    pub fn mech_in(&self, mech: u64, shard: &Shard) -> &'static MechCounters {
        if shard.0 == 0 {
            return self.mech(mech);
        }
        let key = mech ^ (u64::from(shard.0) << 56);
        let h = hash_u64(key) as usize;
        match self
            .shard_slots
            .find(h, |&(m, k)| m == mech && k == shard.0)
        {
            Some(c) => c,
            None => self.mech_in_slow(mech, shard.0, h),
        }
    }

    #[cold]
    fn mech_in_slow(&self, mech: u64, shard: u32, h: usize) -> &'static MechCounters {
        match self.registry.mech_entry_exclusive(&self.name, mech, shard) {
            Some(c) => {
                self.shard_slots
                    .insert(h, (mech, shard), c, |&(m, k)| m == mech && k == shard);
                c
            }
            None => self.mech(mech),
        }
    }

    #[cold]
    fn mech_slow(&self, mech: u64, h: usize) -> &'static MechCounters {
        let c = self.registry.mech_entry(&self.name, mech);
        // A full table still works: `mech_entry` finds the entry under the lock.
        self.slots.insert(h, mech, c, |&m| m == mech);
        c
    }
}

/// A fixed open-addressing table filled once per key and read without a lock.
struct OnceTable<K, V: 'static, const N: usize> {
    slots: [OnceLock<(K, &'static V)>; N],
}

impl<K, V: 'static, const N: usize> OnceTable<K, V, N> {
    const fn new() -> Self {
        OnceTable {
            slots: [const { OnceLock::new() }; N],
        }
    }

    #[inline]
    fn find(&self, h: usize, eq: impl Fn(&K) -> bool) -> Option<&'static V> {
        for i in 0..N {
            match self.slots[(h + i) % N].get() {
                Some((k, v)) if eq(k) => return Some(*v),
                Some(_) => continue,
                None => return None,
            }
        }
        None
    }

    fn insert(&self, h: usize, k: K, v: &'static V, eq: impl Fn(&K) -> bool) {
        let mut item = Some((k, v));
        for i in 0..N {
            let slot = &self.slots[(h + i) % N];
            if let Some(it) = item.take() {
                if let Err(back) = slot.set(it) {
                    item = Some(back);
                }
            }
            if slot.get().is_some_and(|(k, _)| eq(k)) {
                return;
            }
        }
    }
}

fn hash_u64(v: u64) -> u64 {
    (v ^ (v >> 31)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32
}

fn hash_str(s: &str) -> u64 {
    // FNV-1a.
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

// ---------------------------------------------------------------------------------------------
// Registry
// ---------------------------------------------------------------------------------------------

/// The counters of this process: one segment file, or nothing (every handle then counts into
/// a private dummy).
pub struct Registry {
    cells: Option<&'static [AtomicU64]>,
    path: Option<PathBuf>,
    providers: OnceTable<&'static str, ProviderStats, REGISTRY_SLOTS>,
    alloc: Mutex<Alloc>,
}

#[derive(Default)]
struct Alloc {
    mechs: HashMap<(String, u64), &'static MechCounters>,
    exclusive: HashMap<(String, u64, u32), &'static MechCounters>,
    mech_used: usize,
    named: HashMap<(String, String), &'static AtomicU64>,
    named_used: usize,
    providers: HashMap<String, &'static ProviderStats>,
}

impl Registry {
    /// Creates this process's segment in `dir` (created with mode 0700 if missing; it must be
    /// owned by this user and not writable by others). Dead segments already there are folded
    /// into the retained totals first. The registry lives until the process ends.
    ///
    /// Normally the process-wide registry ([`global`]) is used; this is for tests and tools
    /// that choose the directory.
    pub fn create_in(dir: &Path) -> io::Result<&'static Registry> {
        let (seg, path) = create_segment(dir)?;
        let seg: &'static SharedCells = Box::leak(Box::new(seg));
        Ok(Box::leak(Box::new(Registry::with(
            Some(seg.cells()),
            Some(path),
        ))))
    }

    /// A registry that counts nothing.
    pub fn disabled() -> &'static Registry {
        static NONE: OnceLock<&'static Registry> = OnceLock::new();
        NONE.get_or_init(|| Box::leak(Box::new(Registry::with(None, None))))
    }

    fn with(cells: Option<&'static [AtomicU64]>, path: Option<PathBuf>) -> Registry {
        Registry {
            cells,
            path,
            providers: OnceTable::new(),
            alloc: Mutex::new(Alloc::default()),
        }
    }

    /// The segment file, or `None` when counting is disabled.
    pub fn segment_path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The statistics of `provider` (names are cut to [`NAME_MAX`] bytes). Lock-free after the
    /// first call for a name, but still a string hash and comparison: keep the reference.
    pub fn provider(&'static self, provider: &str) -> &'static ProviderStats {
        let name = truncate_name(provider);
        let h = hash_str(name) as usize;
        if let Some(p) = self.providers.find(h, |&n| n == name) {
            return p;
        }
        let p = {
            let mut a = self.lock();
            *a.providers.entry(name.to_string()).or_insert_with(|| {
                Box::leak(Box::new(ProviderStats {
                    name: name.to_string(),
                    registry: self,
                    slots: OnceTable::new(),
                    shard_slots: OnceTable::new(),
                }))
            })
        };
        self.providers.insert(h, p.name.as_str(), p, |&n| n == name);
        p
    }

    /// A monotonic counter of `component` (kept in the retained totals after the process
    /// exits). Takes a lock: keep the reference.
    pub fn counter(&self, component: &str, name: &str) -> &'static AtomicU64 {
        self.named_entry(component, name, KIND_COUNTER)
    }

    /// A gauge of `component`: a current value (connections open, queue depth) that is summed
    /// over live processes only, and not kept after a process exits. Takes a lock: keep the
    /// reference. A name is either a counter or a gauge: the first call decides.
    pub fn gauge(&self, component: &str, name: &str) -> &'static AtomicU64 {
        self.named_entry(component, name, KIND_GAUGE)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Alloc> {
        self.alloc.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new entry for `provider` × `mech` written only by the holder of shard `shard`;
    /// `None` when counting is off or the segment keeps its remaining entries for shared use.
    fn mech_entry_exclusive(
        &self,
        provider: &str,
        mech: u64,
        shard: u32,
    ) -> Option<&'static MechCounters> {
        let cells = self.cells?;
        let mut a = self.lock();
        let key = (provider.to_string(), mech, shard);
        if let Some(c) = a.exclusive.get(&key) {
            return Some(c);
        }
        if a.mech_used >= MECH_CAP - 1 - SHARED_RESERVE {
            return None;
        }
        let index = a.mech_used;
        let (entry, c) = entry_at(cells, index, true);
        a.mech_used = index + 1;
        // The reader sums the entries of one provider and mechanism, whatever their shard.
        store_name(&entry[M_NAME..], provider);
        entry[M_MECH].store(mech, Ordering::Relaxed);
        cells[H_MECH_USED].store(a.mech_used as u64, Ordering::Release);
        a.exclusive.insert(key, c);
        Some(c)
    }

    fn mech_entry(&self, provider: &str, mech: u64) -> &'static MechCounters {
        let Some(cells) = self.cells else {
            return &DUMMY_MECH;
        };
        let mut a = self.lock();
        let key = (provider.to_string(), mech);
        if let Some(c) = a.mechs.get(&key) {
            return c;
        }
        let full = a.mech_used >= MECH_CAP - 1;
        let other_key = (OTHER_NAME.to_string(), OTHER_MECH);
        if full {
            if let Some(&c) = a.mechs.get(&other_key) {
                a.mechs.insert(key, c);
                return c;
            }
        }
        let index = if full { MECH_CAP - 1 } else { a.mech_used };
        let (entry, c) = entry_at(cells, index, false);
        a.mech_used = index + 1;
        // Identity first, then the count (Release): a reader that loads the count with
        // Acquire sees a complete name.
        let (name, number) = if full {
            (OTHER_NAME, OTHER_MECH)
        } else {
            (provider, mech)
        };
        store_name(&entry[M_NAME..], name);
        entry[M_MECH].store(number, Ordering::Relaxed);
        cells[H_MECH_USED].store(a.mech_used as u64, Ordering::Release);
        if full {
            a.mechs.insert(other_key, c);
        }
        a.mechs.insert(key, c);
        c
    }

    fn named_entry(&self, component: &str, name: &str, kind: u64) -> &'static AtomicU64 {
        let Some(cells) = self.cells else {
            return &DUMMY_NAMED;
        };
        let key = (
            truncate_name(component).to_string(),
            truncate_name(name).to_string(),
        );
        let mut a = self.lock();
        if let Some(c) = a.named.get(&key) {
            return c;
        }
        let (index, component, name) = if a.named_used < NAMED_CAP - 1 {
            (a.named_used, key.0.as_str(), key.1.as_str())
        } else {
            (NAMED_CAP - 1, OTHER_NAME, OTHER_NAME)
        };
        let base = NAMED_BASE + index * NAMED_CELLS;
        let entry = &cells[base..base + NAMED_CELLS];
        let value = &entry[N_VALUE];
        if index == NAMED_CAP - 1 {
            if entry[N_KIND].load(Ordering::Relaxed) == 0 {
                store_name(&entry[N_COMPONENT..], OTHER_NAME);
                store_name(&entry[N_NAME..], OTHER_NAME);
                entry[N_KIND].store(kind, Ordering::Relaxed);
                cells[H_NAMED_USED].store(NAMED_CAP as u64, Ordering::Release);
            }
        } else {
            store_name(&entry[N_COMPONENT..], component);
            store_name(&entry[N_NAME..], name);
            entry[N_KIND].store(kind, Ordering::Relaxed);
            a.named_used += 1;
            cells[H_NAMED_USED].store(a.named_used as u64, Ordering::Release);
        }
        a.named.insert(key, value);
        value
    }
}

/// Mechanism entry `index` of a segment and a counter handle on it (made once per entry and
/// kept for the life of the process).
fn entry_at(
    cells: &'static [AtomicU64],
    index: usize,
    exclusive: bool,
) -> (&'static [AtomicU64; MECH_CELLS], &'static MechCounters) {
    let base = MECH_BASE + index * MECH_CELLS;
    let entry: &'static [AtomicU64; MECH_CELLS] = cells[base..base + MECH_CELLS]
        .try_into()
        .expect("entry size");
    let c: &'static MechCounters = Box::leak(Box::new(MechCounters {
        c: entry,
        exclusive,
    }));
    (entry, c)
}

/// The most registries (copies of this library) one process can count with; a further
/// one counts nothing.
const MAX_COPIES: usize = 16;

/// Creates and initializes this process's segment in `dir` (of this copy of the library).
fn create_segment(dir: &Path) -> io::Result<(SharedCells, PathBuf)> {
    prepare_dir(dir)?;
    let _ = reader::collect(dir);
    let start =
        process_start("self").ok_or_else(|| io::Error::other("cannot read /proc/self/stat"))?;
    let pid = std::process::id();
    // One segment per copy of this library in the process: a program that links it and loads
    // `libopencf.so` (opencf-tlsproxy), or two copies of `libopencf.so`, has one registry per
    // copy, each with its own allocation of entries. The first takes `<pid>-<start>.seg`, the
    // next ones `<pid>-<start>-<n>.seg`; an existing file is never created over.
    let (seg, path) = (0..MAX_COPIES)
        .map(|n| match n {
            0 => dir.join(format!("{pid}-{start}.seg")),
            n => dir.join(format!("{pid}-{start}-{n}.seg")),
        })
        .find_map(|path| match SharedCells::create(&path, TOTAL_CELLS) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => None,
            r => Some(r.map(|seg| (seg, path))),
        })
        .unwrap_or_else(|| {
            Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{MAX_COPIES} segments of this process already exist"),
            ))
        })?;
    let c = seg.cells();
    c[H_VERSION].store(VERSION, Ordering::Relaxed);
    c[H_PID].store(u64::from(pid), Ordering::Relaxed);
    c[H_START].store(start, Ordering::Relaxed);
    c[H_MECH_CAP].store(MECH_CAP as u64, Ordering::Relaxed);
    c[H_MECH_CELLS].store(MECH_CELLS as u64, Ordering::Relaxed);
    c[H_NAMED_CAP].store(NAMED_CAP as u64, Ordering::Relaxed);
    c[H_NAMED_CELLS].store(NAMED_CELLS as u64, Ordering::Relaxed);
    c[H_BUCKETS].store(HIST_BUCKETS as u64, Ordering::Relaxed);
    c[H_MAGIC].store(MAGIC, Ordering::Release);
    Ok((seg, path))
}

/// Creates `dir` (0700) if needed and checks that it is ours and not writable by others.
fn prepare_dir(dir: &Path) -> io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() || meta.uid() != current_uid()? || meta.mode() & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{}: not a directory of this user closed to others",
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// This process's real user ID (the owner of `/proc/self`).
pub fn current_uid() -> io::Result<u32> {
    Ok(std::fs::metadata("/proc/self")?.uid())
}

/// The statistics directory of this user: `$OPENCF_STAT_DIR` if set and not empty, else
/// `/dev/shm/opencf-stat-<uid>`.
pub fn default_dir() -> io::Result<PathBuf> {
    if let Some(d) = std::env::var_os(ENV_DIR).filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d));
    }
    Ok(PathBuf::from(format!("{SHM_PREFIX}{}", current_uid()?)))
}

// ---------------------------------------------------------------------------------------------
// Process-wide registry
// ---------------------------------------------------------------------------------------------

/// The process-wide registry, created on first use in [`default_dir`]; a disabled registry
/// (every counter a no-op) if the segment cannot be created.
///
/// One per process: a child made by `fork()` gets a segment of its own at its first call
/// (the framework's `C_Initialize` in the child makes one). Sharing the parent's, the two
/// processes would each hand out the same free entries and the same exclusive shards from
/// their own copies of the bookkeeping, and count over each other.
pub fn global() -> &'static Registry {
    static GLOBAL: Mutex<Option<(u32, &'static Registry)>> = Mutex::new(None);
    let pid = std::process::id();
    // A thread of the parent may have held the lock at the fork, in which case the child's
    // copy stays locked: after a while without it, the child counts nothing rather than
    // waiting for ever.
    for _ in 0..10_000 {
        let mut g = match GLOBAL.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                std::thread::yield_now();
                continue;
            }
        };
        if let Some((p, r)) = *g {
            if p == pid {
                return r;
            }
            // A forked child: the parent's shards are not this process's to hold.
            SHARDS_USED.store(0, Ordering::Relaxed);
        }
        let r = default_dir()
            .and_then(|d| Registry::create_in(&d))
            .unwrap_or_else(|_| Registry::disabled());
        *g = Some((pid, r));
        return r;
    }
    Registry::disabled()
}

/// [`global`]`().provider(name)`: obtain once per provider and keep.
pub fn provider(name: &str) -> &'static ProviderStats {
    global().provider(name)
}

/// [`global`]`().provider(provider).mech(mech)`.
pub fn counters(provider: &str, mech: u64) -> &'static MechCounters {
    global().provider(provider).mech(mech)
}

/// [`global`]`().counter(component, name)`: a monotonic counter; keep the reference.
pub fn counter(component: &str, name: &str) -> &'static AtomicU64 {
    global().counter(component, name)
}

/// [`global`]`().gauge(component, name)`: a current value; keep the reference.
pub fn gauge(component: &str, name: &str) -> &'static AtomicU64 {
    global().gauge(component, name)
}

#[cfg(test)]
mod tests;
