//! The reader side: sums live segments, folds dead ones into the retained totals, applies the
//! reset baseline.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use opencf_abi::shm::SharedCells;
use serde::{Deserialize, Serialize};

use crate::layout::*;

/// Totals of exited processes, in the statistics directory.
pub const RETAINED_FILE: &str = "retained.json";
/// Counters at the last reset, subtracted from what is read.
pub const BASELINE_FILE: &str = "baseline.json";
const LOCK_FILE: &str = "lock";

/// A provider × mechanism.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MechKey {
    pub provider: String,
    /// `CK_MECHANISM_TYPE`; [`crate::OTHER_MECH`] for the "other" entry.
    pub mechanism: u64,
}

/// A component's named counter or gauge.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NamedKey {
    pub component: String,
    pub name: String,
}

/// The counters of one provider × mechanism.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MechStats {
    pub ops: u64,
    pub bytes: u64,
    pub errors: u64,
    pub fallbacks: u64,
    pub busy: u64,
    /// Sum of the latencies of the `ops` operations, in nanoseconds.
    pub latency_sum_ns: u64,
    /// [`crate::HIST_BUCKETS`] buckets; see [`crate::bucket_low_ns`].
    pub histogram: Vec<u64>,
}

impl Default for MechStats {
    fn default() -> Self {
        MechStats {
            ops: 0,
            bytes: 0,
            errors: 0,
            fallbacks: 0,
            busy: 0,
            latency_sum_ns: 0,
            histogram: vec![0; HIST_BUCKETS],
        }
    }
}

impl MechStats {
    fn scalars_mut(&mut self) -> [&mut u64; 6] {
        [
            &mut self.ops,
            &mut self.bytes,
            &mut self.errors,
            &mut self.fallbacks,
            &mut self.busy,
            &mut self.latency_sum_ns,
        ]
    }

    fn zip_with(&mut self, other: &MechStats, f: impl Fn(u64, u64) -> u64) {
        let mut o = other.clone();
        o.histogram.resize(HIST_BUCKETS, 0);
        self.histogram.resize(HIST_BUCKETS, 0);
        for (a, b) in self.scalars_mut().into_iter().zip(o.scalars_mut()) {
            *a = f(*a, *b);
        }
        for (a, b) in self.histogram.iter_mut().zip(&o.histogram) {
            *a = f(*a, *b);
        }
    }

    /// Adds `other` (wrapping, as the counters themselves do).
    pub fn add(&mut self, other: &MechStats) {
        self.zip_with(other, u64::wrapping_add);
    }

    /// `self - base`, each counter at least 0: the change since `base` was taken.
    pub fn since(&self, base: &MechStats) -> MechStats {
        let mut d = self.clone();
        d.zip_with(base, u64::saturating_sub);
        d
    }

    /// No counter is set.
    pub fn is_zero(&self) -> bool {
        *self == MechStats::default()
    }

    /// Operations in the histogram (equal to `ops` unless read during an update).
    pub fn histogram_count(&self) -> u64 {
        self.histogram.iter().sum()
    }

    /// Estimated `q`-quantile (0 < q ≤ 1) of the latency in nanoseconds, interpolated
    /// linearly inside the histogram bucket holding it; `None` without operations. The open
    /// last bucket is taken to end at twice its start.
    pub fn percentile_ns(&self, q: f64) -> Option<u64> {
        let total = self.histogram_count();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut before = 0u64;
        for (i, &n) in self.histogram.iter().enumerate() {
            if n > 0 && before + n >= rank {
                let lo = bucket_low_ns(i);
                let hi = bucket_high_ns(i).unwrap_or(lo.saturating_mul(2));
                let frac = (rank - before) as f64 / n as f64;
                return Some(lo + ((hi - lo) as f64 * frac) as u64);
            }
            before += n;
        }
        None
    }
}

/// Counters summed over processes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub mechanisms: BTreeMap<MechKey, MechStats>,
    /// Monotonic named counters.
    pub counters: BTreeMap<NamedKey, u64>,
    /// Gauges of live processes.
    pub gauges: BTreeMap<NamedKey, u64>,
    /// Live processes whose segments were read.
    pub processes: u64,
}

impl Snapshot {
    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &Snapshot) {
        for (k, v) in &other.mechanisms {
            self.mechanisms.entry(k.clone()).or_default().add(v);
        }
        for (k, v) in &other.counters {
            let c = self.counters.entry(k.clone()).or_default();
            *c = c.wrapping_add(*v);
        }
        for (k, v) in &other.gauges {
            let c = self.gauges.entry(k.clone()).or_default();
            *c = c.wrapping_add(*v);
        }
        self.processes += other.processes;
    }

    /// The change since `base` (gauges are current values and are kept as they are).
    pub fn since(&self, base: &Snapshot) -> Snapshot {
        let zero = MechStats::default();
        Snapshot {
            mechanisms: self
                .mechanisms
                .iter()
                .map(|(k, v)| (k.clone(), v.since(base.mechanisms.get(k).unwrap_or(&zero))))
                .collect(),
            counters: self
                .counters
                .iter()
                .map(|(k, v)| {
                    let b = base.counters.get(k).copied().unwrap_or(0);
                    (k.clone(), v.saturating_sub(b))
                })
                .collect(),
            gauges: self.gauges.clone(),
            processes: self.processes,
        }
    }

    fn without_gauges(&self) -> Snapshot {
        Snapshot {
            mechanisms: self.mechanisms.clone(),
            counters: self.counters.clone(),
            gauges: BTreeMap::new(),
            processes: 0,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Files of the directory
// ---------------------------------------------------------------------------------------------

#[derive(Serialize, Deserialize, Default)]
struct FileForm {
    version: u64,
    mechanisms: Vec<MechRecord>,
    counters: Vec<NamedRecord>,
}

#[derive(Serialize, Deserialize)]
struct MechRecord {
    #[serde(flatten)]
    key: MechKey,
    #[serde(flatten)]
    stats: MechStats,
}

#[derive(Serialize, Deserialize)]
struct NamedRecord {
    #[serde(flatten)]
    key: NamedKey,
    value: u64,
}

fn load_totals(dir: &Path, name: &str) -> io::Result<Snapshot> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(dir.join(name))
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Snapshot::default()),
        Err(e) => return Err(e),
    };
    let form: FileForm = serde_json::from_reader(io::BufReader::new(file)).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {e}", dir.join(name).display()),
        )
    })?;
    let mut s = Snapshot::default();
    for r in form.mechanisms {
        s.mechanisms.entry(r.key).or_default().add(&r.stats);
    }
    for r in form.counters {
        *s.counters.entry(r.key).or_default() += r.value;
    }
    Ok(s)
}

/// Writes `snap` (gauges left out) to `dir/name` atomically, owned by the directory's owner.
fn store_totals(dir: &Path, name: &str, snap: &Snapshot) -> io::Result<()> {
    let form = FileForm {
        version: VERSION,
        mechanisms: snap
            .mechanisms
            .iter()
            .filter(|(_, v)| !v.is_zero())
            .map(|(k, v)| MechRecord {
                key: k.clone(),
                stats: v.clone(),
            })
            .collect(),
        counters: snap
            .counters
            .iter()
            .filter(|(_, &v)| v != 0)
            .map(|(k, &v)| NamedRecord {
                key: k.clone(),
                value: v,
            })
            .collect(),
    };
    let text = serde_json::to_vec(&form).map_err(io::Error::other)?;
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let result = (|| {
        let mut f = new_private_file(dir, &tmp, true)?;
        f.write_all(&text)?;
        drop(f);
        fs::rename(&tmp, dir.join(name))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Opens (creating with mode 0600) a file of the directory, giving it to the directory's owner
/// when root works in another user's directory.
fn new_private_file(dir: &Path, path: &Path, exclusive: bool) -> io::Result<File> {
    let mut o = OpenOptions::new();
    o.read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    if exclusive {
        o.create_new(true);
    } else {
        o.create(true).truncate(false);
    }
    let f = o.open(path)?;
    let owner = fs::metadata(dir)?;
    let me = f.metadata()?;
    if me.uid() != owner.uid() {
        std::os::unix::fs::fchown(&f, Some(owner.uid()), Some(owner.gid()))?;
    }
    Ok(f)
}

/// The exclusive lock of the directory, held while the retained totals are changed.
fn lock_dir(dir: &Path) -> io::Result<File> {
    let f = new_private_file(dir, &dir.join(LOCK_FILE), false)?;
    f.lock()?;
    Ok(f)
}

/// [`lock_dir`] without waiting: `None` while another process holds the lock.
fn try_lock_dir(dir: &Path) -> io::Result<Option<File>> {
    let f = new_private_file(dir, &dir.join(LOCK_FILE), false)?;
    match f.try_lock() {
        Ok(()) => Ok(Some(f)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

// ---------------------------------------------------------------------------------------------
// Segments
// ---------------------------------------------------------------------------------------------

struct Segment {
    path: PathBuf,
    pid: String,
    start: u64,
}

fn segments(dir: &Path) -> io::Result<Vec<Segment>> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name.strip_suffix(".seg") else {
            continue;
        };
        // `<pid>-<start>`, or `<pid>-<start>-<n>` for a further copy of the library in the
        // same process.
        let mut parts = stem.splitn(3, '-');
        let (Some(pid), Some(start), copy) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let (Ok(_), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
            continue;
        };
        if copy.is_some_and(|n| n.parse::<u32>().is_err()) {
            continue;
        }
        out.push(Segment {
            path: e.path(),
            pid: pid.to_string(),
            start,
        });
    }
    Ok(out)
}

fn alive(seg: &Segment) -> bool {
    process_start(&seg.pid) == Some(seg.start)
}

/// The counters of one segment; `None` if it is not a valid segment (yet).
fn read_segment(seg: &Segment) -> Option<Snapshot> {
    let map = SharedCells::open(&seg.path).ok()?;
    let c = map.cells();
    let get = |i: usize| c.get(i).map(|x| x.load(Ordering::Relaxed));
    if c.len() < HEADER_CELLS || c[H_MAGIC].load(Ordering::Acquire) != MAGIC {
        return None;
    }
    let header_ok = get(H_VERSION)? == VERSION
        && get(H_PID)?.to_string() == seg.pid
        && get(H_START)? == seg.start
        && get(H_BUCKETS)? == HIST_BUCKETS as u64;
    if !header_ok {
        return None;
    }
    let mech_cap = usize::try_from(get(H_MECH_CAP)?).ok()?;
    let mech_cells = usize::try_from(get(H_MECH_CELLS)?).ok()?;
    let named_cap = usize::try_from(get(H_NAMED_CAP)?).ok()?;
    let named_cells = usize::try_from(get(H_NAMED_CELLS)?).ok()?;
    let mech_end = HEADER_CELLS.checked_add(mech_cap.checked_mul(mech_cells)?)?;
    let named_end = mech_end.checked_add(named_cap.checked_mul(named_cells)?)?;
    if mech_cells < M_HIST + HIST_BUCKETS || named_cells <= N_VALUE || named_end > c.len() {
        return None;
    }
    let mech_used = (c[H_MECH_USED].load(Ordering::Acquire) as usize).min(mech_cap);
    let named_used = (c[H_NAMED_USED].load(Ordering::Acquire) as usize).min(named_cap);
    let mut s = Snapshot {
        processes: 1,
        ..Snapshot::default()
    };
    for i in 0..mech_used {
        let e = &c[HEADER_CELLS + i * mech_cells..][..mech_cells];
        let key = MechKey {
            provider: load_name(&e[M_NAME..]),
            mechanism: e[M_MECH].load(Ordering::Relaxed),
        };
        let ld = |x: &AtomicU64| x.load(Ordering::Relaxed);
        let stats = MechStats {
            ops: ld(&e[M_OPS]),
            bytes: ld(&e[M_BYTES]),
            errors: ld(&e[M_ERRORS]),
            fallbacks: ld(&e[M_FALLBACKS]),
            busy: ld(&e[M_BUSY]),
            latency_sum_ns: ld(&e[M_LAT_SUM]),
            histogram: e[M_HIST..M_HIST + HIST_BUCKETS].iter().map(ld).collect(),
        };
        s.mechanisms.entry(key).or_default().add(&stats);
    }
    for i in 0..named_used {
        let e = &c[mech_end + i * named_cells..][..named_cells];
        let key = NamedKey {
            component: load_name(&e[N_COMPONENT..]),
            name: load_name(&e[N_NAME..]),
        };
        let v = e[N_VALUE].load(Ordering::Relaxed);
        let map = match e[N_KIND].load(Ordering::Relaxed) {
            KIND_GAUGE => &mut s.gauges,
            _ => &mut s.counters,
        };
        let c = map.entry(key).or_default();
        *c = c.wrapping_add(v);
    }
    Some(s)
}

/// What [`sweep`] does with the segments of exited processes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dead {
    /// Folds them into the retained totals (read from the file).
    Fold,
    /// Deletes them uncounted; the retained totals file is not read (a reset empties it).
    Drop,
}

/// Reads the live segments of `dir` and folds the dead ones into the retained totals (then
/// deletes them). Call with the directory lock held. Returns (live sum, retained totals).
fn sweep(dir: &Path, dead_ones: Dead) -> io::Result<(Snapshot, Snapshot)> {
    let mut live = Snapshot::default();
    let mut retained = match dead_ones {
        Dead::Fold => load_totals(dir, RETAINED_FILE)?,
        Dead::Drop => Snapshot::default(),
    };
    let mut dead = Vec::new();
    // A process with several copies of the library has several segments: counted once.
    let mut seen = std::collections::HashSet::new();
    for seg in segments(dir)? {
        let is_alive = alive(&seg);
        match read_segment(&seg) {
            Some(mut s) if is_alive => {
                if !seen.insert((seg.pid.clone(), seg.start)) {
                    s.processes = 0;
                }
                live.merge(&s);
            }
            Some(s) => {
                retained.merge(&s.without_gauges());
                dead.push(seg.path);
            }
            // Not initialized yet by a live process; garbage of a dead one.
            None if is_alive => {}
            None => dead.push(seg.path),
        }
    }
    if !dead.is_empty() {
        retained.processes = 0;
        if dead_ones == Dead::Fold {
            store_totals(dir, RETAINED_FILE, &retained)?;
        }
        for p in dead {
            let _ = fs::remove_file(p);
        }
    }
    Ok((live, retained))
}

/// Whether `dir` is a statistics directory to work in: false when it does not exist, an
/// error when something else than a directory is there.
fn existing_dir(dir: &Path) -> io::Result<bool> {
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(true),
        Ok(_) => Err(io::ErrorKind::NotADirectory.into()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Folds the segments of exited processes in `dir` into the retained totals, unless another
/// process holds the directory's lock (then it does nothing and waits for no one). A missing
/// directory is not an error.
pub fn collect(dir: &Path) -> io::Result<()> {
    if !existing_dir(dir)? {
        return Ok(());
    }
    // Tidying is done at a segment's creation, inside every application's `C_Initialize`: it
    // waits for no one. While another process holds the directory (a `cryptoadm stat` that
    // was stopped with Ctrl-Z, or one of root's), it is left to that process or the next.
    let Some(_lock) = try_lock_dir(dir)? else {
        return Ok(());
    };
    sweep(dir, Dead::Fold).map(|_| ())
}

/// The counters of `dir` since the last [`reset`]: live processes plus the retained totals of
/// exited ones, minus the baseline. Exited processes' segments are folded into the retained
/// totals on the way. A missing directory reads as empty; a path that is not a directory is
/// an error, and so is a retained totals or baseline file that cannot be parsed
/// ([`io::ErrorKind::InvalidData`], naming the file; [`reset`] replaces both).
pub fn read(dir: &Path) -> io::Result<Snapshot> {
    if !existing_dir(dir)? {
        return Ok(Snapshot::default());
    }
    let _lock = lock_dir(dir)?;
    let (mut total, retained) = sweep(dir, Dead::Fold)?;
    total.merge(&retained);
    let baseline = load_totals(dir, BASELINE_FILE)?;
    Ok(total.since(&baseline))
}

/// Zeroes the counters of `dir`: the retained totals are emptied and the live counters become
/// the baseline that later reads subtract. Neither file is read, so a reset also repairs a
/// corrupt one; the segments of exited processes are deleted uncounted.
pub fn reset(dir: &Path) -> io::Result<()> {
    if !existing_dir(dir)? {
        return Ok(());
    }
    let _lock = lock_dir(dir)?;
    let (live, _) = sweep(dir, Dead::Drop)?;
    store_totals(dir, BASELINE_FILE, &live.without_gauges())?;
    store_totals(dir, RETAINED_FILE, &Snapshot::default())
}

/// All per-user directories `/dev/shm/opencf-stat-<uid>` whose owner is that uid (what root
/// reads).
pub fn user_dirs() -> Vec<PathBuf> {
    let prefix = Path::new(crate::SHM_PREFIX);
    let (Some(parent), Some(stem)) = (prefix.parent(), prefix.file_name()) else {
        return Vec::new();
    };
    let stem = stem.to_string_lossy().into_owned();
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(parent) else {
        return out;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(uid) = name.strip_prefix(&stem).and_then(|u| u.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(meta) = fs::symlink_metadata(e.path()) else {
            continue;
        };
        if meta.is_dir() && meta.uid() == uid && meta.mode() & 0o022 == 0 {
            out.push(e.path());
        }
    }
    out.sort();
    out
}
