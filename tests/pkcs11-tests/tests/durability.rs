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
//! * `a_damaged_object_leaves_the_others`: one private object whose stored
//!   value no longer authenticates, and one public object whose `CKA_CLASS`
//!   is two bytes long, written into the keystore behind the token's back: a
//!   fresh process still logs in and finds every other object intact.
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

/// The keystore file in `dir`.
fn keystore_file(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "sqlite"))
        .expect("a keystore file")
}

/// Damages the keystore in `dir` behind the token's back: one byte of one stored value of
/// the first private object flipped (it no longer authenticates), and a public object added
/// whose `CKA_CLASS` is two bytes long. Returns the first object's id.
fn damage(dir: &Path) -> i64 {
    let db = rusqlite::Connection::open(keystore_file(dir)).unwrap();
    let (id, ty, mut value): (i64, i64, Vec<u8>) = db
        .query_row(
            "SELECT a.object_id, a.type, a.value FROM attributes AS a
             JOIN objects AS o ON o.id = a.object_id
             WHERE o.private = 1 ORDER BY a.object_id, a.type LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    let middle = value.len() / 2;
    value[middle] ^= 0x40;
    db.execute(
        "UPDATE attributes SET value = ?1 WHERE object_id = ?2 AND type = ?3",
        rusqlite::params![value, id, ty],
    )
    .unwrap();
    db.execute("INSERT INTO objects (version, private) VALUES (1, 0)", [])
        .unwrap();
    let public = db.last_insert_rowid();
    db.execute(
        "INSERT INTO attributes (object_id, type, value) VALUES (?1, 0, x'0100'), (?1, 3, ?2)",
        rusqlite::params![public, b"damaged-public".to_vec()],
    )
    .unwrap();
    id
}

#[test]
fn a_damaged_object_leaves_the_others() {
    require_module();
    let dir = keystore("damaged");
    // More than 64 objects: a login loads them in one query, which the damage fails.
    let (status, out, err) = start(writer(&dir, "write", "d", 100)).finish();
    assert!(status.success(), "writer failed ({status}): {err}");
    let acked: BTreeMap<String, String> = acks(&out).into_iter().collect();
    assert_eq!(acked.len(), 100);
    let id = damage(&dir);
    let (status, out, err) = start(writer(&dir, "verify", "v", 0)).finish();
    assert!(
        status.success(),
        "a damaged object must not stop the login ({status}): {err}"
    );
    let found: BTreeMap<String, Vec<String>> = out
        .lines()
        .filter_map(|l| l.strip_prefix("OBJ "))
        .fold(BTreeMap::new(), |mut m, l| {
            let (label, hash) = l.split_once(' ').unwrap();
            m.entry(label.to_string())
                .or_default()
                .push(hash.to_string());
            m
        });
    let intact: BTreeMap<String, String> = acked
        .iter()
        .filter(|(l, _)| found.contains_key(*l))
        .map(|(l, h)| (l.clone(), h.clone()))
        .collect();
    assert_eq!(
        intact.len(),
        99,
        "every object but the damaged private one is found: {:?}",
        found.keys().collect::<Vec<_>>()
    );
    check_present(&found, &intact, "after the damage");
    assert!(
        !found.contains_key("damaged-public"),
        "the object without a well-formed class is left out"
    );
    assert_eq!(
        err.matches("the object is left out").count(),
        2,
        "each damaged object is told once: {err}"
    );
    assert!(
        err.contains(&format!("object {id}:")),
        "the message names the object: {err}"
    );
    println!("a_damaged_object_leaves_the_others: 99 of 100 objects found, two told: {err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A damaged PIN record (the user's salt changed behind the token's back) answers
/// `CKR_DEVICE_ERROR`, with a message naming the keystore and the record, instead of
/// `CKR_PIN_INCORRECT`; no try of the PIN is counted.
#[test]
fn a_damaged_pin_record_is_not_a_wrong_pin() {
    require_module();
    let dir = keystore("pinrecord");
    let (status, _, err) = start(writer(&dir, "write", "p", 1)).finish();
    assert!(status.success(), "writer failed ({status}): {err}");
    let file = keystore_file(&dir);
    let db = rusqlite::Connection::open(&file).unwrap();
    db.execute(
        "UPDATE pins SET salt = zeroblob(16) WHERE user_type = 1",
        [],
    )
    .unwrap();
    let (status, _, err) = start(writer(&dir, "verify", "v", 0)).finish();
    assert!(!status.success(), "the login must fail");
    assert!(err.contains("C_Login: DeviceError"), "{err}");
    assert!(
        err.contains("user PIN record is damaged") && err.contains(&*file.to_string_lossy()),
        "the message names the record and the file: {err}"
    );
    let failures: i64 = db
        .query_row("SELECT user_failures FROM token", [], |r| r.get(0))
        .unwrap();
    assert_eq!(failures, 0, "no try of the PIN is counted");
    println!("a_damaged_pin_record_is_not_a_wrong_pin: {err}");
    let _ = std::fs::remove_dir_all(&dir);
}
