//! Stable driver for the template fuzz harness (`fuzz/src/template.rs`, the
//! same code the cargo-fuzz target runs): the seed corpus, the fuzzer's
//! corpus if one exists, and a seeded pseudo-random stream of inputs (random
//! bytes and mutations of the seeds). Property: no panic.
//!
//! Environment: `FUZZ_SEED` (printed), `FUZZ_ITERS` (default 200000 in an
//! optimized build, 20000 in a debug build).

#[path = "../../../fuzz/src/template.rs"]
#[allow(dead_code)]
mod harness;

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn corpus_files() -> Vec<PathBuf> {
    let root = pkcs11_tests::workspace_root().join("fuzz");
    let mut files = Vec::new();
    for dir in ["seeds/template", "corpus/template"] {
        if let Ok(rd) = std::fs::read_dir(root.join(dir)) {
            files.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_file()));
        }
    }
    files.sort();
    files
}

/// Runs one input; on a panic, saves the input and fails with its path.
fn run_one(input: &[u8], what: &str) {
    let r = std::panic::catch_unwind(|| harness::run(input));
    if r.is_err() {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-template-crashes");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("crash-{}", hex::encode(openssl::sha::sha1(input))));
        std::fs::write(&path, input).unwrap();
        panic!(
            "template harness panicked on {what}: input saved to {} ({} bytes: {})",
            path.display(),
            input.len(),
            hex::encode(&input[..input.len().min(256)])
        );
    }
}

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..1 + rng.below(8) {
        match rng.below(6) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = rng.next() as u8;
            }
            2 => {
                let i = rng.below(v.len() + 1);
                v.insert(i, rng.next() as u8);
            }
            3 if !v.is_empty() => {
                let i = rng.below(v.len());
                v.truncate(i);
            }
            4 if !v.is_empty() => {
                // Duplicate a slice (repeats attributes).
                let a = rng.below(v.len());
                let b = a + rng.below(v.len() - a + 1);
                let piece = v[a..b].to_vec();
                let i = rng.below(v.len() + 1);
                v.splice(i..i, piece);
            }
            _ => {
                let n = rng.below(16);
                v.extend((0..n).map(|_| rng.next() as u8));
            }
        }
    }
    v.truncate(4096);
    v
}

#[test]
fn template_harness_does_not_panic() {
    let seed = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    let iters: usize = std::env::var("FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if cfg!(debug_assertions) {
            20_000
        } else {
            200_000
        });
    println!("template fuzz driver: FUZZ_SEED={seed} FUZZ_ITERS={iters}");
    // Quiet the default hook: a panic is reported once, by run_one.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let started = Instant::now();

    let files = corpus_files();
    let mut seeds = Vec::new();
    for f in &files {
        let data = std::fs::read(f).unwrap();
        let r = std::panic::catch_unwind(|| harness::run(&data));
        if r.is_err() {
            std::panic::set_hook(hook);
            run_one(&data, &format!("corpus file {}", f.display()));
            unreachable!();
        }
        seeds.push(data);
    }

    let mut rng = Rng(seed);
    for i in 0..iters {
        let input = if seeds.is_empty() || rng.below(3) == 0 {
            let max = if rng.below(8) == 0 { 1024 } else { 96 };
            let n = rng.below(max);
            (0..n).map(|_| rng.next() as u8).collect::<Vec<u8>>()
        } else {
            let s = &seeds[rng.below(seeds.len())];
            mutate(&mut rng, s)
        };
        if std::panic::catch_unwind(|| harness::run(&input)).is_err() {
            std::panic::set_hook(hook);
            run_one(&input, &format!("generated input #{i} (FUZZ_SEED={seed})"));
            unreachable!();
        }
    }
    std::panic::set_hook(hook);
    println!(
        "template fuzz driver: {} corpus files + {iters} generated inputs, no panic, {:.1} s",
        files.len(),
        started.elapsed().as_secs_f64()
    );
}
