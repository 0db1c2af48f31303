//! `cryptoadm stat` against counters written by a child process (this test binary, run again
//! as `writer_child`), and the fixes of `list` (closed pipe, configuration source).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_cryptoadm");
const CHILD_ENV: &str = "CRYPTOADM_STAT_TEST_CHILD";
const AES_GCM: u64 = 0x1087;
const SHA256: u64 = 0x250;

/// In the child: writes known counters through the process-wide registry
/// (`$OPENCF_STAT_DIR`), creates `ready`, and waits for `go` before exiting.
#[test]
fn writer_child() {
    let Some(sync) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let sync = PathBuf::from(sync);
    let gcm = opencf_stat::counters("softtoken", AES_GCM);
    for _ in 0..3 {
        gcm.record(100, 1000);
    }
    gcm.error();
    gcm.fallback();
    let sha = opencf_stat::provider("softtoken").mech(SHA256);
    sha.record(64, 500);
    sha.busy();
    sha.busy();
    let accel = opencf_stat::provider("accel").mech(AES_GCM);
    for _ in 0..5 {
        accel.record(4096, 3000);
    }
    opencf_stat::counter("tlsproxy", "handshakes")
        .fetch_add(7, std::sync::atomic::Ordering::Relaxed);
    opencf_stat::gauge("tlsproxy", "connections").store(2, std::sync::atomic::Ordering::Relaxed);
    std::fs::write(sync.join("ready"), b"").unwrap();
    wait_for(&sync.join("go"));
}

fn wait_for(p: &Path) {
    let t = Instant::now();
    while !p.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "timeout waiting for {p:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn spawn_writer(stat_dir: &Path, sync: &Path) -> Child {
    std::fs::create_dir_all(sync).unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "writer_child", "--test-threads=1"])
        .env("OPENCF_STAT_DIR", stat_dir)
        .env(CHILD_ENV, sync)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&sync.join("ready"));
    child
}

struct Env {
    tmp: tempfile::TempDir,
    stat: PathBuf,
}

impl Env {
    fn new() -> Env {
        let tmp = tempfile::tempdir().unwrap();
        let stat = tmp.path().join("stat");
        Env { tmp, stat }
    }
    fn run(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .arg("--config")
            .arg(self.tmp.path().join("opencf.toml"))
            .arg("stat")
            .arg("--dir")
            .arg(&self.stat)
            .args(args)
            .env_remove("OPENCF_STAT_DIR")
            .output()
            .unwrap()
    }
    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    }
    fn json(&self, args: &[&str]) -> Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        serde_json::from_str(&self.ok(&a)).unwrap()
    }
}

fn row<'a>(v: &'a Value, provider: &str, mech: &str) -> &'a Value {
    v["mechanisms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["provider"] == provider && r["mechanism"] == mech)
        .unwrap_or_else(|| panic!("no row {provider} {mech} in {v}"))
}

fn rows(v: &Value) -> usize {
    v["mechanisms"].as_array().unwrap().len()
}

fn check_known_counts(v: &Value) {
    assert_eq!(rows(v), 3, "{v}");
    let gcm = row(v, "softtoken", "CKM_AES_GCM");
    assert_eq!(gcm["ops"], 3);
    assert_eq!(gcm["bytes"], 300);
    assert_eq!(gcm["errors"], 1);
    assert_eq!(gcm["fallbacks"], 1);
    assert_eq!(gcm["busy"], 0);
    assert_eq!(gcm["latency_sum_ns"], 3000);
    assert_eq!(gcm["mechanism_value"], AES_GCM);
    let p50 = gcm["p50_ns"].as_u64().unwrap();
    assert!((512..1024).contains(&p50), "{p50}");
    let sha = row(v, "softtoken", "CKM_SHA256");
    assert_eq!(
        (sha["ops"].as_u64(), sha["busy"].as_u64()),
        (Some(1), Some(2))
    );
    let accel = row(v, "accel", "CKM_AES_GCM");
    assert_eq!(accel["ops"], 5);
    assert_eq!(accel["bytes"], 20480);
    assert_eq!(accel["histogram"][opencf_stat_bucket(3000)], 5);
    assert_eq!(v["counters"][0]["component"], "tlsproxy");
    assert_eq!(v["counters"][0]["name"], "handshakes");
    assert_eq!(v["counters"][0]["value"], 7);
}

/// The histogram bucket of a latency (as in docs/STAT.md: bucket 0 below 128 ns, then powers
/// of two).
fn opencf_stat_bucket(ns: u64) -> usize {
    (0..opencf_stat::HIST_BUCKETS)
        .find(|&i| opencf_stat::bucket_high_ns(i).is_none_or(|h| ns < h))
        .unwrap()
}

#[test]
fn stat_shows_live_and_retained_counters_and_resets() {
    let e = Env::new();
    let sync = e.tmp.path().join("sync");
    let mut child = spawn_writer(&e.stat, &sync);

    // Live.
    let v = e.json(&[]);
    check_known_counts(&v);
    assert_eq!(v["processes"], 1);
    assert_eq!(v["gauges"][0]["name"], "connections");
    assert_eq!(v["gauges"][0]["value"], 2);

    let text = e.ok(&["--prometheus"]);
    for line in [
        "# TYPE opencf_operations_total counter",
        "opencf_operations_total{provider=\"softtoken\",mechanism=\"CKM_AES_GCM\"} 3",
        "opencf_bytes_total{provider=\"accel\",mechanism=\"CKM_AES_GCM\"} 20480",
        "opencf_errors_total{provider=\"softtoken\",mechanism=\"CKM_AES_GCM\"} 1",
        "opencf_fallbacks_total{provider=\"softtoken\",mechanism=\"CKM_AES_GCM\"} 1",
        "opencf_busy_total{provider=\"softtoken\",mechanism=\"CKM_SHA256\"} 2",
        "# TYPE opencf_operation_latency_seconds histogram",
        "opencf_operation_latency_seconds_bucket{provider=\"accel\",mechanism=\"CKM_AES_GCM\",le=\"0.000002048\"} 0",
        "opencf_operation_latency_seconds_bucket{provider=\"accel\",mechanism=\"CKM_AES_GCM\",le=\"0.000004096\"} 5",
        "opencf_operation_latency_seconds_bucket{provider=\"accel\",mechanism=\"CKM_AES_GCM\",le=\"+Inf\"} 5",
        "opencf_operation_latency_seconds_sum{provider=\"accel\",mechanism=\"CKM_AES_GCM\"} 0.000015",
        "opencf_operation_latency_seconds_count{provider=\"accel\",mechanism=\"CKM_AES_GCM\"} 5",
        "opencf_counter_total{component=\"tlsproxy\",name=\"handshakes\"} 7",
        "opencf_gauge{component=\"tlsproxy\",name=\"connections\"} 2",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
    }

    let table = e.ok(&[]);
    let line = table
        .lines()
        .find(|l| l.starts_with("softtoken") && l.contains("CKM_AES_GCM"))
        .unwrap();
    let cols: Vec<_> = line.split_whitespace().collect();
    assert_eq!(
        &cols[..7],
        ["softtoken", "CKM_AES_GCM", "3", "300", "1", "1", "0"]
    );
    assert!(table.contains("connections (gauge)"));

    // Filters.
    let v = e.json(&["-p", "accel"]);
    assert_eq!(rows(&v), 1);
    assert_eq!(v["mechanisms"][0]["provider"], "accel");
    assert!(v["counters"].as_array().unwrap().is_empty());
    let v = e.json(&["-m", "CKM_SHA256"]);
    assert_eq!(rows(&v), 1);
    assert_eq!(v["mechanisms"][0]["mechanism"], "CKM_SHA256");
    assert!(v["counters"].as_array().unwrap().is_empty());
    let v = e.json(&["-p", "tlsproxy"]);
    assert_eq!(rows(&v), 0);
    assert_eq!(v["counters"][0]["value"], 7);
    let v = e.json(&["-p", "softtoken", "-m", "CKM_AES_GCM"]);
    assert_eq!(rows(&v), 1);
    assert_eq!(e.run(&["-m", "CKM_NOPE"]).status.code(), Some(64));
    assert_eq!(e.run(&["--json", "--prometheus"]).status.code(), Some(64));

    // The writer exits: its totals are retained, its gauge is gone.
    std::fs::write(sync.join("go"), b"").unwrap();
    assert!(child.wait().unwrap().success());
    let v = e.json(&[]);
    check_known_counts(&v);
    assert_eq!(v["processes"], 0);
    assert!(v["gauges"].as_array().unwrap().is_empty());
    let seg = std::fs::read_dir(&e.stat)
        .unwrap()
        .filter(|x| {
            x.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "seg")
        })
        .count();
    assert_eq!(seg, 0);
    assert!(e.stat.join(opencf_stat::RETAINED_FILE).exists());
    check_known_counts(&e.json(&[]));

    // Reset.
    assert!(e.run(&["--reset"]).status.success());
    let v = e.json(&[]);
    assert_eq!(rows(&v), 0, "{v}");
    assert!(v["counters"].as_array().unwrap().is_empty());
    let text = e.ok(&["--prometheus"]);
    assert!(!text.contains("opencf_operations_total{"));

    // Counting goes on after the reset.
    let sync2 = e.tmp.path().join("sync2");
    let mut child = spawn_writer(&e.stat, &sync2);
    check_known_counts(&e.json(&[]));
    std::fs::write(sync2.join("go"), b"").unwrap();
    assert!(child.wait().unwrap().success());
    check_known_counts(&e.json(&[]));
}

#[test]
fn damaged_totals_are_named_and_reset_repairs_them() {
    let e = Env::new();
    std::fs::create_dir_all(&e.stat).unwrap();
    let retained = e.stat.join("retained.json");
    std::fs::write(&retained, b"{bad").unwrap();
    let o = e.run(&[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&retained.display().to_string()) && err.contains("--reset"),
        "{err}"
    );
    assert!(e.run(&["--reset"]).status.success());
    assert_eq!(rows(&e.json(&[])), 0);
    // A path that is not a directory cannot be read: status 1.
    let file = e.tmp.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    for args in [&["stat"][..], &["stat", "--reset"]] {
        let o = Command::new(BIN)
            .arg("--config")
            .arg(e.tmp.path().join("opencf.toml"))
            .args(args)
            .arg("--dir")
            .arg(&file)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("not a directory"), "{err}");
    }
}

/// A statistics directory others may write is one the framework refuses to count in: the
/// (empty) report says why on stderr, and still succeeds.
#[test]
fn a_directory_open_to_others_is_named() {
    use std::os::unix::fs::PermissionsExt;
    let e = Env::new();
    std::fs::create_dir_all(&e.stat).unwrap();
    std::fs::set_permissions(&e.stat, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = e.run(&[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&e.stat.display().to_string())
            && err.contains("writable by group or others: the framework counts nothing there"),
        "{err}"
    );
    std::fs::set_permissions(&e.stat, std::fs::Permissions::from_mode(0o700)).unwrap();
    let o = e.run(&[]);
    assert!(o.status.success() && o.stderr.is_empty(), "{:?}", o);
}

#[test]
fn stat_interval_prints_deltas() {
    let e = Env::new();
    let sync = e.tmp.path().join("sync");
    let mut child = spawn_writer(&e.stat, &sync);
    let out = e.ok(&["--json", "--interval", "0.1", "--count", "3"]);
    std::fs::write(sync.join("go"), b"").unwrap();
    assert!(child.wait().unwrap().success());
    let reports: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(reports.len(), 3);
    check_known_counts(&reports[0]);
    assert!(reports[0]["interval"].is_null());
    for r in &reports[1..] {
        assert_eq!(rows(r), 0, "no activity during the interval: {r}");
        assert_eq!(r["interval"], 0.1);
    }
    let table = e.ok(&["--interval", "0.05", "--count", "2"]);
    assert_eq!(table.matches("PROVIDER").count(), 2);
    assert_eq!(e.run(&["--count", "2"]).status.code(), Some(64));
    assert_eq!(e.run(&["--interval", "0"]).status.code(), Some(64));
}

/// Runs cryptoadm with its standard output closed at once: it must end quietly, status 0.
fn assert_quiet_on_closed_pipe(args: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(BIN)
        .arg("--config")
        .arg(tmp.path().join("opencf.toml"))
        .args(args)
        .env("OPENCF_STAT_DIR", tmp.path().join("stat"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{args:?}");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn closed_pipe_ends_quietly() {
    // Writes for 5 s unless the closed pipe ends it.
    assert_quiet_on_closed_pipe(&["stat", "--interval", "0.01", "--count", "500"]);
    assert_quiet_on_closed_pipe(&["list"]);
    assert_quiet_on_closed_pipe(&["list", "metaslot"]);
}

#[test]
fn list_metaslot_names_the_configuration_source() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("opencf.toml");
    let run = |args: &[&str], env: Option<&Path>| {
        let mut c = Command::new(BIN);
        match env {
            Some(p) => c.env("OPENCF_CONF", p),
            None => c.env_remove("OPENCF_CONF").arg("--config").arg(&cfg),
        };
        let o = c.args(args).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let out = run(&["list", "metaslot"], None);
    assert!(!out.contains("System-wide"), "{out}");
    assert!(
        out.contains(&format!(
            "Source: built-in default (no file at {})",
            cfg.display()
        )),
        "{out}"
    );
    let v: Value = serde_json::from_str(&run(&["list", "metaslot", "--json"], None)).unwrap();
    assert_eq!(v["source"], "built-in");
    run(&["disable", "metaslot", "auto-key-migrate"], None);
    let out = run(&["list", "metaslot"], None);
    assert!(
        out.contains(&format!(
            "Source: file given with --config {}",
            cfg.display()
        )),
        "{out}"
    );
    let out = run(&["list", "metaslot"], Some(&cfg));
    assert!(
        out.contains(&format!(
            "Source: file named by OPENCF_CONF {}",
            cfg.display()
        )),
        "{out}"
    );
    let v: Value = serde_json::from_str(&run(&["list", "metaslot", "--json"], Some(&cfg))).unwrap();
    assert_eq!(v["source"], "environment");
}
