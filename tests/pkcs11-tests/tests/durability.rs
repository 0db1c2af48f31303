//! Durability of token objects across process kills, and concurrent writers
//! on one keystore. Drives the `writer` helper binary (src/bin/writer.rs).
//!
//! * `kill_during_writes`: 50 rounds of starting a writer, SIGKILLing it after
//!   a random 30–400 ms, then listing the token with a fresh process: it must
//!   initialize and log in every time, and every object whose
//!   `C_CreateObject` returned `CKR_OK` (every `ACK` line, from all rounds so
//!   far) must be there with the same value.
//! * `two_concurrent_writers`: two writers on one keystore, 200 objects each:
//!   both succeed and a listing finds all 400.
//!
//! Environment: `DURABILITY_SEED` fixes the PRNG seed (printed otherwise),
//! `DURABILITY_ROUNDS` the number of rounds (default 50). The module is
//! `$OPENCF_MODULE` or the release softtoken (build it first).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const PIN: &str = "durability-pin";

/// splitmix64: small, seedable, good enough for sleep times.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

fn nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn keystore(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "durability-{name}-{}-{}",
        std::process::id(),
        nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn require_module() {
    let m = pkcs11_tests::module_path();
    assert!(
        m.exists(),
        "module {} not found: build it with `cargo build --release -p opencf-softtoken` \
         or set OPENCF_MODULE",
        m.display()
    );
}

fn writer(dir: &Path, mode: &str, prefix: &str, count: u64) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_writer"));
    c.env("OPENCF_SOFTTOKEN_DIR", dir)
        .env("OPENCF_MODULE", pkcs11_tests::module_path())
        .env("WRITER_PIN", PIN)
        .env("WRITER_PREFIX", prefix)
        .env("WRITER_COUNT", count.to_string())
        .env("WRITER_MODE", mode)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Reads a child's stdout and stderr on threads (so a full pipe never blocks it).
struct Running {
    child: Child,
    stdout: JoinHandle<String>,
    stderr: JoinHandle<String>,
}

fn drain(mut r: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

fn start(mut cmd: Command) -> Running {
    let mut child = cmd.spawn().expect("spawning the writer");
    let stdout = drain(child.stdout.take().unwrap());
    let stderr = drain(child.stderr.take().unwrap());
    Running {
        child,
        stdout,
        stderr,
    }
}

impl Running {
    fn finish(mut self) -> (std::process::ExitStatus, String, String) {
        let status = self.child.wait().expect("waiting for the writer");
        (
            status,
            self.stdout.join().unwrap(),
            self.stderr.join().unwrap(),
        )
    }
}

/// `ACK label hash` lines (complete lines only) as label → hash.
fn acks(out: &str) -> Vec<(String, String)> {
    let mut v = Vec::new();
    for line in out.split_inclusive('\n') {
        let Some(line) = line.strip_suffix('\n') else {
            continue; // cut off by the kill
        };
        let mut it = line.split(' ');
        if let (Some("ACK"), Some(l), Some(h), None) = (it.next(), it.next(), it.next(), it.next())
        {
            v.push((l.to_string(), h.to_string()));
        }
    }
    v
}

/// Runs the writer in verify mode; label → hashes found (a label may repeat).
fn verify(dir: &Path, context: &str) -> BTreeMap<String, Vec<String>> {
    let (status, out, err) = start(writer(dir, "verify", "v", 0)).finish();
    assert!(
        status.success(),
        "{context}: verify process failed ({status}): {err}"
    );
    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut done = None;
    for line in out.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        match parts.as_slice() {
            ["OBJ", l, h] => found.entry(l.to_string()).or_default().push(h.to_string()),
            ["DONE", n] => done = n.parse::<usize>().ok(),
            _ => panic!("{context}: unexpected verify output line {line:?}"),
        }
    }
    let n: usize = found.values().map(Vec::len).sum();
    assert_eq!(done, Some(n), "{context}: verify output incomplete");
    found
}

fn check_present(
    found: &BTreeMap<String, Vec<String>>,
    acked: &BTreeMap<String, String>,
    context: &str,
) {
    let mut missing = Vec::new();
    let mut changed = Vec::new();
    for (label, hash) in acked {
        match found.get(label) {
            None => missing.push(label.clone()),
            Some(hs) if !hs.contains(hash) => changed.push(format!("{label}: {hs:?} != {hash}")),
            Some(_) => {}
        }
    }
    assert!(
        missing.is_empty() && changed.is_empty(),
        "{context}: {} acknowledged objects missing {:?}, {} with a different value {:?}",
        missing.len(),
        missing.iter().take(20).collect::<Vec<_>>(),
        changed.len(),
        changed.iter().take(20).collect::<Vec<_>>()
    );
}

#[test]
fn kill_during_writes() {
    require_module();
    let seed = std::env::var("DURABILITY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(nanos() as u64);
    let rounds: usize = std::env::var("DURABILITY_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    println!("kill_during_writes: DURABILITY_SEED={seed}, {rounds} rounds");
    let mut rng = Rng(seed);
    let dir = keystore("kill");
    let started = Instant::now();
    let mut acked: BTreeMap<String, String> = BTreeMap::new();
    let mut empty_rounds = 0;
    for round in 0..rounds {
        let delay = rng.range(30, 400);
        let mut w = start(writer(&dir, "write", &format!("r{round}"), 0));
        std::thread::sleep(Duration::from_millis(delay));
        let exited_early = w.child.try_wait().ok().flatten();
        let _ = w.child.kill(); // SIGKILL
        let (status, out, err) = w.finish();
        if let Some(st) = exited_early {
            panic!("round {round} (seed {seed}): the writer exited by itself ({st}): {err}");
        }
        let new = acks(&out);
        if new.is_empty() {
            empty_rounds += 1;
        }
        for (l, h) in &new {
            assert!(
                acked.insert(l.clone(), h.clone()).is_none(),
                "round {round}: label {l} acknowledged twice"
            );
        }
        let context = format!(
            "round {round} (seed {seed}, killed after {delay} ms, {status}, {} new ACKs)",
            new.len()
        );
        let found = verify(&dir, &context);
        check_present(&found, &acked, &context);
    }
    println!(
        "kill_during_writes: {rounds} rounds, {} acknowledged objects all present, \
         {empty_rounds} rounds killed before the first ACK, {:.1} s",
        acked.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        !acked.is_empty(),
        "no writer acknowledged any object: the test proved nothing"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn two_concurrent_writers() {
    require_module();
    let dir = keystore("pair");
    let started = Instant::now();
    let a = start(writer(&dir, "write", "alpha", 200));
    let b = start(writer(&dir, "write", "beta", 200));
    let mut acked = BTreeMap::new();
    for (name, w) in [("alpha", a), ("beta", b)] {
        let (status, out, err) = w.finish();
        assert!(status.success(), "writer {name} failed ({status}): {err}");
        let new = acks(&out);
        assert_eq!(new.len(), 200, "writer {name}: ACK lines");
        acked.extend(new);
    }
    assert_eq!(acked.len(), 400);
    let found = verify(&dir, "two writers");
    check_present(&found, &acked, "two writers");
    let ours = found
        .keys()
        .filter(|l| l.starts_with("alpha-") || l.starts_with("beta-"))
        .count();
    assert_eq!(ours, 400, "distinct labels found");
    println!(
        "two_concurrent_writers: 400 objects from two processes, all present, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
