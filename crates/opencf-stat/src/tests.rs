use super::*;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

const AES_GCM: u64 = 0x1087;
const SHA256: u64 = 0x250;
const CHILD_ENV: &str = "OPENCF_STAT_TEST_CHILD";

fn key(p: &str, m: u64) -> MechKey {
    MechKey {
        provider: p.into(),
        mechanism: m,
    }
}

fn named(c: &str, n: &str) -> NamedKey {
    NamedKey {
        component: c.into(),
        name: n.into(),
    }
}

/// Run by `child_counts_are_retained` in a child process (does nothing otherwise): writes
/// known counters through the process-wide registry and exits.
#[test]
fn child_writer() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let gcm = counters("softtoken", AES_GCM);
    for _ in 0..3 {
        gcm.record(100, 1000);
    }
    gcm.error();
    gcm.fallback();
    provider("softtoken").mech(SHA256).busy();
    counter("tlsproxy", "handshakes").fetch_add(7, Ordering::Relaxed);
    gauge("tlsproxy", "connections").store(2, Ordering::Relaxed);
    assert!(global().segment_path().is_some());
}

fn run_child(dir: &Path) {
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "tests::child_writer", "--test-threads=1"])
        .env(ENV_DIR, dir)
        .env(CHILD_ENV, "1")
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn child_counts_are_retained_and_reset() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("stat");
    run_child(&dir);
    assert_eq!(segments(&dir), 1, "the child's segment stays until read");

    let s = read(&dir).unwrap();
    assert_eq!(segments(&dir), 0, "the dead segment is folded and deleted");
    assert!(dir.join(RETAINED_FILE).exists());
    let gcm = &s.mechanisms[&key("softtoken", AES_GCM)];
    assert_eq!(
        (gcm.ops, gcm.bytes, gcm.errors, gcm.fallbacks),
        (3, 300, 1, 1)
    );
    assert_eq!(gcm.latency_sum_ns, 3000);
    assert_eq!(gcm.histogram[layout::bucket(1000)], 3);
    assert_eq!(s.mechanisms[&key("softtoken", SHA256)].busy, 1);
    assert_eq!(s.counters[&named("tlsproxy", "handshakes")], 7);
    assert!(
        s.gauges.is_empty(),
        "gauges of exited processes are dropped"
    );
    assert_eq!(s.processes, 0);
    // Reading again counts nothing twice.
    assert_eq!(read(&dir).unwrap(), s);

    // A live process (this one) adds to the retained totals.
    let reg = Registry::create_in(&dir).unwrap();
    reg.provider("softtoken").mech(AES_GCM).record(50, 200);
    reg.gauge("tlsproxy", "connections")
        .store(5, Ordering::Relaxed);
    let s = read(&dir).unwrap();
    assert_eq!(s.processes, 1);
    let gcm = &s.mechanisms[&key("softtoken", AES_GCM)];
    assert_eq!((gcm.ops, gcm.bytes), (4, 350));
    assert_eq!(s.gauges[&named("tlsproxy", "connections")], 5);

    // Reset: everything reads as zero, then only what follows counts.
    reset(&dir).unwrap();
    let s = read(&dir).unwrap();
    assert!(s.mechanisms.values().all(MechStats::is_zero));
    assert!(s.counters.values().all(|&v| v == 0));
    assert_eq!(s.gauges[&named("tlsproxy", "connections")], 5);
    reg.provider("softtoken").mech(AES_GCM).record(10, 200);
    run_child(&dir);
    let s = read(&dir).unwrap();
    let gcm = &s.mechanisms[&key("softtoken", AES_GCM)];
    assert_eq!((gcm.ops, gcm.bytes, gcm.errors), (4, 310, 1));
    assert_eq!(s.counters[&named("tlsproxy", "handshakes")], 7);
}

fn segments(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".seg")
        })
        .count()
}

#[test]
fn concurrent_writers_give_exact_totals() {
    let tmp = tempfile::tempdir().unwrap();
    let reg = Registry::create_in(tmp.path()).unwrap();
    const THREADS: u64 = 8;
    const N: u64 = 20_000;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || {
                let p = reg.provider(if t % 2 == 0 { "even" } else { "odd" });
                for i in 0..N {
                    let c = p.mech(i % 4);
                    c.record(i % 7, i);
                    if i % 10 == 0 {
                        c.error();
                    }
                }
                reg.counter("c", "n").fetch_add(N, Ordering::Relaxed);
            });
        }
    });
    let s = read(tmp.path()).unwrap();
    assert_eq!(s.mechanisms.len(), 8);
    let ops: u64 = s.mechanisms.values().map(|m| m.ops).sum();
    let errors: u64 = s.mechanisms.values().map(|m| m.errors).sum();
    let bytes: u64 = s.mechanisms.values().map(|m| m.bytes).sum();
    let hist: u64 = s.mechanisms.values().map(MechStats::histogram_count).sum();
    let per_thread_bytes: u64 = (0..N).map(|i| i % 7).sum();
    assert_eq!(ops, THREADS * N);
    assert_eq!(hist, THREADS * N);
    assert_eq!(errors, THREADS * N / 10);
    assert_eq!(bytes, THREADS * per_thread_bytes);
    assert_eq!(s.mechanisms[&key("even", 3)].ops, THREADS / 2 * N / 4);
    assert_eq!(s.counters[&named("c", "n")], THREADS * N);
}

#[test]
fn full_table_goes_to_other() {
    let tmp = tempfile::tempdir().unwrap();
    let reg = Registry::create_in(tmp.path()).unwrap();
    let p = reg.provider("many");
    for m in 0..300u64 {
        p.mech(m).record(1, 1);
        p.mech(m).record(1, 1);
    }
    for i in 0..200 {
        reg.counter("comp", &format!("c{i}"))
            .fetch_add(1, Ordering::Relaxed);
    }
    let s = read(tmp.path()).unwrap();
    assert_eq!(s.mechanisms.len(), layout::MECH_CAP);
    let other = &s.mechanisms[&key(layout::OTHER_NAME, OTHER_MECH)];
    assert_eq!(other.ops, 2 * (300 - (layout::MECH_CAP as u64 - 1)));
    assert_eq!(s.mechanisms.values().map(|m| m.ops).sum::<u64>(), 600);
    assert_eq!(s.counters.len(), layout::NAMED_CAP);
    assert_eq!(s.counters.values().sum::<u64>(), 200);
}

#[test]
fn long_names_are_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let reg = Registry::create_in(tmp.path()).unwrap();
    let long = "p".repeat(40);
    reg.provider(&long).mech(1).busy();
    assert_eq!(reg.provider(&long).name().len(), NAME_MAX);
    let s = read(tmp.path()).unwrap();
    assert_eq!(s.mechanisms[&key(&"p".repeat(NAME_MAX), 1)].busy, 1);
}

#[test]
fn percentile_estimation() {
    let mut m = MechStats::default();
    assert_eq!(m.percentile_ns(0.5), None);
    // 90 operations of 1 µs, 10 of 1 ms.
    m.histogram[layout::bucket(1_000)] = 90;
    m.histogram[layout::bucket(1_000_000)] = 10;
    let p50 = m.percentile_ns(0.5).unwrap();
    assert!((512..1024).contains(&p50), "{p50}");
    let p90 = m.percentile_ns(0.9).unwrap();
    assert!((512..=1024).contains(&p90), "{p90}");
    let p99 = m.percentile_ns(0.99).unwrap();
    assert!((524_288..1_048_576).contains(&p99), "{p99}");
    assert!(m.percentile_ns(1.0).unwrap() <= 1_048_576);
    // Interpolation inside a bucket: ranks spread evenly over [512, 1024).
    let mut one = MechStats::default();
    one.histogram[layout::bucket(700)] = 4;
    assert_eq!(one.percentile_ns(0.25), Some(640));
    assert_eq!(one.percentile_ns(0.5), Some(768));
    // The open last bucket.
    let mut slow = MechStats::default();
    slow.histogram[HIST_BUCKETS - 1] = 1;
    assert_eq!(
        slow.percentile_ns(0.5),
        Some(bucket_low_ns(HIST_BUCKETS - 1) * 2)
    );
}

#[test]
fn unusable_directory_disables_counting() {
    let tmp = tempfile::tempdir().unwrap();
    let open = tmp.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(Registry::create_in(&open).is_err());
    let file = tmp.path().join("file");
    std::fs::write(&file, b"").unwrap();
    assert!(Registry::create_in(&file).is_err());
    // A disabled registry accepts everything.
    let off = Registry::disabled();
    off.provider("x").mech(1).record(1, 1);
    off.counter("a", "b").fetch_add(1, Ordering::Relaxed);
    assert!(off.segment_path().is_none());
    // Reading a directory that does not exist is empty, not an error.
    assert_eq!(read(&tmp.path().join("none")).unwrap(), Snapshot::default());
    // Something else than a directory there is an error.
    for e in [read(&file).unwrap_err(), reset(&file).unwrap_err()] {
        assert_eq!(e.kind(), std::io::ErrorKind::NotADirectory, "{e}");
    }
}

#[test]
fn corrupt_totals_are_reported_and_reset_repairs_them() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("stat");
    run_child(&dir);
    for name in [RETAINED_FILE, BASELINE_FILE] {
        let path = dir.join(name);
        std::fs::write(&path, b"{bad").unwrap();
        let e = read(&dir).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        reset(&dir).unwrap();
        assert_eq!(segments(&dir), 0, "the dead segment is gone");
        let s = read(&dir).unwrap();
        assert!(s.mechanisms.values().all(MechStats::is_zero), "{s:?}");
        // Counting goes on from the reset.
        run_child(&dir);
        let s = read(&dir).unwrap();
        assert_eq!(s.mechanisms[&key("softtoken", AES_GCM)].ops, 3);
    }
}

#[test]
fn new_directory_is_private() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let reg = Registry::create_in(&dir).unwrap();
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    let seg = reg.segment_path().unwrap();
    let name = seg.file_name().unwrap().to_string_lossy().into_owned();
    let start = process_start("self").unwrap();
    assert_eq!(name, format!("{}-{start}.seg", std::process::id()));
    let mode = std::fs::metadata(seg).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

/// A process's segment is made while another holds the directory's lock (a `cryptoadm stat`
/// stopped with Ctrl-Z): the tidying at its creation waits for no one, where it used to wait
/// as long as the lock was held, inside every application's `C_Initialize`.
#[test]
fn a_held_directory_lock_does_not_hold_up_a_new_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let lock = std::fs::File::create(dir.join("lock")).unwrap();
    lock.lock().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let d = dir.clone();
    std::thread::spawn(move || {
        let _ = tx.send(Registry::create_in(&d).map(|r| r.segment_path().is_some()));
    });
    let made = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the segment waits on the held lock");
    assert!(made.unwrap(), "the segment is made");
}

#[test]
fn shard_writers_and_shared_writers_sum_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let reg = Registry::create_in(tmp.path()).unwrap();
    const THREADS: u64 = 6;
    const N: u64 = 30_000;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || {
                // Half the writers hold an exclusive shard, half count on the shared entries.
                let shard = if t % 2 == 0 {
                    Shard::claim()
                } else {
                    Shard::shared()
                };
                let c = reg.provider("p").mech_in(AES_GCM, &shard);
                assert_eq!(c.is_exclusive(), t % 2 == 0);
                for i in 0..N {
                    c.count(i % 5);
                    if i % 100 == 0 {
                        c.latency(i);
                    }
                }
            });
        }
    });
    let s = read(tmp.path()).unwrap();
    assert_eq!(
        s.mechanisms.len(),
        1,
        "shards fold into one provider × mechanism"
    );
    let m = &s.mechanisms[&key("p", AES_GCM)];
    assert_eq!(m.ops, THREADS * N);
    assert_eq!(m.bytes, THREADS * (0..N).map(|i| i % 5).sum::<u64>());
    assert_eq!(m.histogram_count(), THREADS * N / 100);
}

#[test]
fn shards_are_distinct_while_held_and_run_out() {
    let held: Vec<Shard> = (0..SHARDS + 3).map(|_| Shard::claim()).collect();
    let mut taken: Vec<u32> = held.iter().map(Shard::index).filter(|&k| k != 0).collect();
    let n = taken.len();
    taken.sort_unstable();
    taken.dedup();
    assert_eq!(taken.len(), n, "no exclusive shard handed out twice");
    assert!(n as u32 <= SHARDS);
    // Other tests may hold shards meanwhile; at least three claims found none free.
    assert!(held.iter().filter(|s| s.index() == 0).count() >= 3);
    drop(held);
}

/// Two copies of the library in one process (a program that links it and loads
/// `libopencf.so`, or two copies of `libopencf.so`): each has its own segment, and neither
/// erases nor takes over the other's entries.
#[test]
fn two_copies_in_one_process_keep_their_own_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let a = Registry::create_in(tmp.path()).unwrap();
    let handshakes = a.counter("tlsproxy", "handshakes");
    handshakes.fetch_add(5, Ordering::Relaxed);
    a.provider("softtoken").mech(0x1087).record(100, 1000);
    let b = Registry::create_in(tmp.path()).unwrap();
    assert_ne!(a.segment_path(), b.segment_path());
    let passes = b.counter("accel", "passes");
    passes.fetch_add(7, Ordering::Relaxed);
    b.provider("accel").mech(0x1087).record(50, 1000);
    handshakes.fetch_add(1, Ordering::Relaxed);
    assert_eq!(segments(tmp.path()), 2);
    let s = read(tmp.path()).unwrap();
    assert_eq!(s.counters.get(&named("tlsproxy", "handshakes")), Some(&6));
    assert_eq!(s.counters.get(&named("accel", "passes")), Some(&7));
    assert_eq!(s.mechanisms[&key("softtoken", 0x1087)].ops, 1);
    assert_eq!(s.mechanisms[&key("accel", 0x1087)].bytes, 50);
    assert_eq!(s.processes, 1, "one process, however many segments");
}
