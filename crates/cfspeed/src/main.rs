//! `cfspeed`: measures a PKCS#11 module through its C ABI, side by side with
//! native OpenSSL and with another PKCS#11 module, in the same run.
//!
//! ```text
//! cfspeed [BENCH…] [--module PATH] [--slot N | --token LABEL] [--pin PIN [--new-pin NEW]]
//!         [--native] [--vs-module PATH [--vs-slot N] [--vs-pin PIN]]
//!         [--threads N] [--multi N] [--seconds S] [--runs R] [--sizes 16,64,…]
//!         [--rsa-bits 2048,3072] [--break-even] [--json] [--json-out FILE] [--chart FILE.svg]
//! ```
//!
//! Every figure is the median of `--runs` timed runs of `--seconds` each;
//! the implementations are interleaved run by run so that a noisy machine
//! disturbs them alike. With no benchmark named, a short representative set
//! runs with `--native` in well under a minute.

#![forbid(unsafe_code)]

/// `println!` that ends the program quietly when standard output is a closed pipe
/// (`cfspeed … | head`), where `println!` would panic.
macro_rules! outln {
    () => {
        $crate::out_str("\n")
    };
    ($($arg:tt)*) => {
        $crate::out_str(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!`, as [`outln`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out_str(&format!($($arg)*))
    };
}

mod asynchronous;
mod bench;
mod breakeven;
mod chart;
mod cpu;
mod mechs;
mod multi;
mod p11;
mod raw;
mod report;
mod spec;

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use clap::Parser;

/// Writes to standard output: a closed pipe ends the program with status 0 (the reader has
/// what it wanted); another write error ends it with status 1 and a message.
fn out_str(s: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    if let Err(e) = o.write_all(s.as_bytes()).and_then(|()| o.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("cfspeed: cannot write to standard output: {e}");
        std::process::exit(1);
    }
}

use crate::bench::{calibrate, median, percentile, RunResult};
use crate::mechs::{NativeKind, NativeTarget, P11Target, Target};
use crate::p11::{short_name, Module, ModuleSpec};
use crate::report::{Machine, ModuleInfo, Ratio, Report, Row};
use crate::spec::{parse_size, parse_sizes, Bench, Cipher, Curve, Digest, PkOp, RsaMech};

/// Measure PKCS#11 mechanisms through the C ABI, beside native OpenSSL and
/// another PKCS#11 module.
#[derive(Parser, Debug)]
#[command(name = "cfspeed", version, after_help = AFTER_HELP)]
struct Args {
    /// Benchmarks, `MECHANISM[:PARAMETER][:OPERATION]` (see below). Default:
    /// a short set (AES-GCM 16 and 8192 bytes, SHA-256 1024 bytes, RSA-2048
    /// sign, ECDSA P-256 sign) with --native, 3 runs of 0.5 s.
    mechanisms: Vec<String>,

    /// The PKCS#11 module to measure. Default: libopencf.so (its slot 0 is the
    /// metaslot), else libopencf_softtoken.so, next to the cfspeed executable, else in
    /// its ../lib, else in $OPENCF_LIB_DIR.
    #[arg(long, env = "CFSPEED_MODULE")]
    module: Option<PathBuf>,
    /// Slot id. Default: the first slot with an initialized token.
    #[arg(long)]
    slot: Option<u64>,
    /// Token label (instead of --slot).
    #[arg(long)]
    token: Option<String>,
    /// User PIN. Without one cfspeed does not log in and its keys are public
    /// session objects (enough for every benchmark but `find`).
    #[arg(long, env = "CFSPEED_PIN")]
    pin: Option<String>,
    /// If the token says the user PIN must be changed, change it to this
    /// (a fresh OpenCF softtoken has PIN `changeme`, expired). Never done
    /// without this option.
    #[arg(long)]
    new_pin: Option<String>,

    /// Also run each operation through native OpenSSL EVP in this process.
    #[arg(long)]
    native: bool,

    /// Also run each operation through this PKCS#11 module (e.g. SoftHSMv2).
    #[arg(long)]
    vs_module: Option<PathBuf>,
    /// Slot id in --vs-module. Default: its first slot with an initialized token.
    #[arg(long)]
    vs_slot: Option<u64>,
    /// Token label in --vs-module (instead of --vs-slot).
    #[arg(long)]
    vs_token: Option<String>,
    /// User PIN of --vs-module's token (without one: public session objects).
    #[arg(long, env = "CFSPEED_VS_PIN")]
    vs_pin: Option<String>,
    /// Set VAR=VALUE in the environment while --vs-module is initialized, and
    /// restore it afterwards (repeatable). With a copy of libopencf.so as
    /// --vs-module, `--vs-env OPENCF_STAT=off` compares the framework with and
    /// without counting in one run.
    #[arg(long, value_name = "VAR=VALUE")]
    vs_env: Vec<String>,

    /// Threads, each with its own session; with N > 1, 1 thread is measured
    /// too and the scaling printed (at most 1024).
    #[arg(long, default_value_t = 1, value_parser = count(MAX_THREADS))]
    threads: usize,
    /// Measure only --threads N, not also 1 thread (for profiling).
    #[arg(long, hide = true)]
    only_threads: bool,
    /// Run N cfspeed processes side by side and add up their figures (like
    /// `openssl speed -multi`; at most 256).
    #[arg(long, default_value_t = 1, value_parser = count(MAX_PROCESSES))]
    multi: usize,
    /// Internal: a process started by --multi (JSON on stdout, no progress).
    #[arg(long, hide = true)]
    child: bool,
    /// Ciphers with several threads: one key object per thread instead of
    /// one key shared by all (shows what sharing a key object costs).
    #[arg(long)]
    key_per_thread: bool,
    /// Ciphers: run each encryption of the PKCS#11 modules as a multi-part operation
    /// (`C_EncryptInit`, `C_EncryptUpdate` of this many bytes at a time, `C_EncryptFinal`)
    /// instead of one `C_Encrypt`; native OpenSSL stays one call (`16k` = 16384).
    #[arg(long, value_parser = parse_size)]
    update_size: Option<usize>,
    /// Seconds per timed run. Default 1, or 0.5 for the default set.
    #[arg(long)]
    seconds: Option<f64>,
    /// Timed runs per figure; the median is reported. Default 5, or 3 for
    /// the default set.
    #[arg(long)]
    runs: Option<usize>,
    /// Input sizes in bytes for bulk mechanisms (`16k` = 16384). Default
    /// 16,64,256,1024,8192,16384; with --break-even powers of two 16..64k.
    #[arg(long, value_parser = parse_sizes)]
    sizes: Option<std::vec::Vec<usize>>,
    /// RSA key sizes for RSA benchmarks named without one.
    #[arg(long, value_delimiter = ',', default_value = "2048")]
    rsa_bits: Vec<u32>,
    /// Token objects the `find` benchmark searches among (created once,
    /// reused by later runs on the same keystore; 1 to 1,000,000).
    #[arg(long, default_value_t = 10_000, value_parser = count(MAX_FIND_OBJECTS))]
    find_objects: usize,
    /// Find the input size from which the module is faster than --vs-module
    /// (or, without it, native OpenSSL) and print the `min_bytes` policy
    /// line for the configuration.
    #[arg(long)]
    break_even: bool,
    /// RSA and ECDSA signatures (CKM_SHA256_RSA_PKCS[_PSS], CKM_ECDSA): also measure one
    /// thread that keeps N of them in flight on N asynchronous sessions of --module (PKCS#11 3.2
    /// CKF_ASYNC_SESSION, C_AsyncComplete), printed under the tables.
    #[arg(long, value_name = "N", value_parser = count(MAX_ASYNC_DEPTH))]
    async_depth: Option<usize>,
    /// With --async-depth: this many polling threads, each with its own N sessions and key,
    /// started together; their rates are summed (at most 1024).
    #[arg(long, value_name = "T", default_value_t = 1, value_parser = count(MAX_THREADS))]
    async_threads: usize,
    /// Print the results as JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write the JSON report to FILE (the tables still print).
    #[arg(long, value_name = "FILE")]
    json_out: Option<PathBuf>,
    /// Draw the results into an SVG file: MB/s over size per bulk mechanism,
    /// ops/s bars for the others.
    #[arg(long, value_name = "FILE.svg")]
    chart: Option<PathBuf>,
}

const AFTER_HELP: &str = "\
Benchmarks:
  bulk (per --sizes): CKM_AES_GCM CKM_AES_CBC_PAD CKM_AES_CBC CKM_AES_CTR CKM_AES_ECB
    CKM_CHACHA20_POLY1305 CKM_SHA256 CKM_SHA384 CKM_SHA512 CKM_SHA3_256 CKM_SHA256_HMAC
  RSA (size from the name or --rsa-bits): CKM_SHA256_RSA_PKCS[:BITS][:verify]
    CKM_SHA256_RSA_PKCS_PSS[:BITS][:verify] CKM_RSA_PKCS_OAEP[:BITS] (decrypt)
  CKM_ECDSA[:P-256|P-384|P-521][:verify] CKM_EDDSA[:verify] (Ed25519)
  CKM_ECDH1_DERIVE (P-256) CKM_ML_DSA[:verify] (ML-DSA-65)
  CKM_ML_KEM[:encapsulate|:decapsulate] (ML-KEM-768; both without an operation)
  find (C_FindObjects among --find-objects token objects; needs --pin)
A benchmark whose mechanism a module does not list is skipped for it with a note.
Examples:
  cfspeed
  cfspeed CKM_SHA256_RSA_PKCS:3072 CKM_ECDSA:P-384:verify --native
  cfspeed CKM_AES_CTR --sizes 64,1k,16k --vs-module /usr/lib/softhsm/libsofthsm2.so
  cfspeed CKM_AES_GCM --break-even --native
  cfspeed CKM_AES_GCM --native --chart gcm.svg";

/// libopencf.so, else libopencf_softtoken.so, beside the executable (the build tree), else in
/// `../lib` (an installed `PREFIX/bin`, `PREFIX/lib` layout), else in $OPENCF_LIB_DIR.
fn default_module() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("locating cfspeed: {e}"))?;
    let dir = exe.parent().ok_or("cfspeed has no directory")?;
    module_in(dir, std::env::var_os("OPENCF_LIB_DIR")).ok_or_else(|| {
        format!(
            "no module given and neither libopencf.so nor libopencf_softtoken.so is in {}, \
             its ../lib or $OPENCF_LIB_DIR; use --module",
            dir.display()
        )
    })
}

/// [`default_module`] for a given executable directory and `$OPENCF_LIB_DIR`.
fn module_in(exe_dir: &Path, lib_dir_env: Option<std::ffi::OsString>) -> Option<PathBuf> {
    let mut dirs = vec![exe_dir.to_path_buf()];
    dirs.extend(exe_dir.parent().map(|p| p.join("lib")));
    dirs.extend(lib_dir_env.filter(|d| !d.is_empty()).map(PathBuf::from));
    dirs.iter()
        .flat_map(|d| ["libopencf.so", "libopencf_softtoken.so"].map(|n| d.join(n)))
        .find(|p| p.exists())
}

fn command_line() -> String {
    std::env::args()
        .map(|a| {
            if a.is_empty() || a.contains(|c: char| c.is_whitespace() || "'\"$\\".contains(c)) {
                format!("'{}'", a.replace('\'', r"'\''"))
            } else {
                a
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn main() {
    let args = Args::parse();
    match run(args) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("cfspeed: {e}");
            std::process::exit(2);
        }
    }
}

/// Measurements of one target across runs, per thread count.
struct Samples {
    batch: usize,
    runs: Vec<Vec<RunResult>>,
}

/// A benchmark and the sizes it runs at (one `None` when unsized).
struct Job {
    bench: Bench,
    sizes: Vec<Option<usize>>,
}

/// The default sweep of `--break-even`: powers of two, 16 bytes to 64 KiB.
fn break_even_sizes() -> Vec<usize> {
    (4..=16).map(|e| 1usize << e).collect()
}

/// The benchmarks to run. No name: the default set.
fn plan(args: &Args) -> Result<Vec<Job>, String> {
    let sizes: Vec<usize> = match &args.sizes {
        Some(s) if !s.is_empty() => s.clone(),
        _ if args.break_even => break_even_sizes(),
        _ => vec![16, 64, 256, 1024, 8192, 16384],
    };
    let job = |bench: Bench, own: &[usize]| Job {
        bench,
        sizes: if !bench.sized() {
            vec![None]
        } else if args.sizes.is_some() || own.is_empty() {
            sizes.iter().map(|&s| Some(s)).collect()
        } else {
            own.iter().map(|&s| Some(s)).collect()
        },
    };
    if args.mechanisms.is_empty() {
        if args.break_even {
            return Ok(vec![job(Bench::Cipher(Cipher::AesGcm), &[])]);
        }
        return Ok(vec![
            job(Bench::Cipher(Cipher::AesGcm), &[16, 8192]),
            job(Bench::Digest(Digest::Sha256), &[1024]),
            job(
                Bench::Rsa {
                    mech: RsaMech::Pkcs,
                    bits: 2048,
                    op: PkOp::Sign,
                },
                &[],
            ),
            job(
                Bench::Ecdsa {
                    curve: Curve::P256,
                    op: PkOp::Sign,
                },
                &[],
            ),
        ]);
    }
    let mut jobs = Vec::new();
    for m in &args.mechanisms {
        for b in Bench::parse(m, &args.rsa_bits)? {
            jobs.push(job(b, &[]));
        }
    }
    Ok(jobs)
}

/// The progress line on stderr: rewritten in place on a terminal, one line
/// per finished table otherwise; only when the whole run is expected to
/// take more than a few seconds.
struct Progress {
    enabled: bool,
    tty: bool,
    start: Instant,
    total: usize,
    done: usize,
}

impl Progress {
    fn run(&self, title: &str, run: usize, runs: usize) {
        if self.enabled && self.tty {
            eprint!(
                "\r\x1b[K[{}/{}] {title}: run {run}/{runs}, {:.0} s",
                self.done + 1,
                self.total,
                self.start.elapsed().as_secs_f64()
            );
        }
    }

    fn finished(&mut self, title: &str) {
        self.done += 1;
        if !self.enabled {
            return;
        }
        if self.tty {
            eprint!("\r\x1b[K");
        } else {
            eprintln!(
                "cfspeed: [{}/{}] {title} done, {:.1} s",
                self.done,
                self.total,
                self.start.elapsed().as_secs_f64()
            );
        }
    }
}

/// The most threads of `--threads` and `--async-threads`: each is started at once and holds a
/// session; beyond this a machine's thread limit answers before the module does.
const MAX_THREADS: u64 = 1024;
/// The most processes of `--multi`.
const MAX_PROCESSES: u64 = 256;
/// The most token objects `--find-objects` makes.
const MAX_FIND_OBJECTS: u64 = 1_000_000;

/// The most signatures `--async-depth` keeps in flight per thread (each holds a session and
/// its buffers).
const MAX_ASYNC_DEPTH: u64 = 256;

/// The longest `--seconds` (a day): longer would be a mistake, and a value past what a
/// `Duration` holds (`inf`, `1e300`) must be refused, not a panic.
const MAX_SECONDS: f64 = 86_400.0;

/// A count option's parser: 1 to `max`, refused by clap's usage error otherwise.
fn count(max: u64) -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::new().range(1..=max)
}

/// What `measure` needs besides the targets.
struct Ctx {
    runs: usize,
    thread_counts: Vec<usize>,
    max_threads: usize,
    duration: Duration,
    warm: Duration,
}

fn run(args: Args) -> Result<bool, String> {
    let default_set = args.mechanisms.is_empty() && !args.break_even;
    let seconds = args.seconds.unwrap_or(if default_set { 0.5 } else { 1.0 });
    let runs = args.runs.unwrap_or(if default_set { 3 } else { 5 });
    if runs == 0 || seconds.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
        return Err("--runs and --seconds must be positive".into());
    }
    if seconds > MAX_SECONDS {
        return Err(format!("--seconds: at most {MAX_SECONDS} (a day)"));
    }
    if let Some(c) = &args.chart {
        let ext = c
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase());
        if ext.as_deref() != Some("svg") {
            return Err(format!(
                "--chart {}: only SVG is written (name the file .svg); convert it with e.g. \
                 `rsvg-convert -o chart.png chart.svg` where librsvg is installed",
                c.display()
            ));
        }
    }
    let jobs = plan(&args)?;
    // `find` writes token objects into the keystore once and keeps them for later runs: as
    // its help says, it does so only for a user who logged in, not as a side effect of a
    // benchmark run without a PIN.
    if args.pin.is_none() && jobs.iter().any(|j| j.bench == Bench::Find) {
        return Err(
            "find needs --pin (or CFSPEED_PIN): it writes --find-objects token \
                    objects into the keystore, kept for later runs"
                .into(),
        );
    }
    if args.break_even {
        if args.vs_module.is_none() && !args.native {
            return Err("--break-even compares with --vs-module PATH or --native".into());
        }
        if args.multi > 1 {
            return Err("--break-even runs in one process; leave out --multi".into());
        }
        if let Some(j) = jobs.iter().find(|j| !j.bench.sized()) {
            return Err(format!(
                "--break-even needs bulk mechanisms; {} has no input size",
                j.bench.name()
            ));
        }
    }
    let native = args.native || default_set;

    if args.multi > 1 && !args.child {
        return run_multi(&args);
    }

    let module_path = match &args.module {
        Some(p) => p.clone(),
        None => default_module()?,
    };
    let ours = Rc::new(Module::open(
        "ours",
        &ModuleSpec {
            path: module_path,
            slot: args.slot,
            token: args.token.clone(),
            pin: args.pin.clone(),
            new_pin: args.new_pin.clone(),
        },
    )?);
    let vs = match &args.vs_module {
        Some(p) => {
            let mut name = short_name(p);
            if name == "ours" || name == "native" || name == "native-reuse" {
                name = format!("vs-{name}");
            }
            let saved = set_env(&args.vs_env)?;
            let opened = Module::open(
                &name,
                &ModuleSpec {
                    path: p.clone(),
                    slot: args.vs_slot,
                    token: args.vs_token.clone(),
                    pin: args.vs_pin.clone(),
                    new_pin: None,
                },
            );
            restore_env(saved);
            Some(Rc::new(opened?))
        }
        None => None,
    };

    let mut report = Report {
        command: command_line(),
        machine: Machine::detect(),
        openssl: openssl::version::version().to_string(),
        modules: [Some(&ours), vs.as_ref()]
            .into_iter()
            .flatten()
            .map(|m| ModuleInfo {
                name: m.name.clone(),
                path: m.path.display().to_string(),
                library: m.library.clone(),
                slot: m.slot.id(),
                token: m.token_label.clone(),
            })
            .collect(),
        seconds,
        runs,
        processes: 1,
        results: Vec::new(),
        ratios: Vec::new(),
        break_even: Vec::new(),
        asynchronous: Vec::new(),
        notes: Vec::new(),
    };
    let tables = !args.json && !args.child;
    if tables {
        report::print_header(&report);
    }

    let mut thread_counts = vec![1];
    if args.threads > 1 {
        thread_counts.push(args.threads);
        if args.only_threads {
            thread_counts.remove(0);
        }
    }
    let ctx = Ctx {
        runs,
        max_threads: args.threads,
        duration: Duration::from_secs_f64(seconds),
        warm: Duration::from_secs_f64((seconds * 0.2).clamp(0.05, 0.3)),
        thread_counts,
    };
    let groups: usize = jobs.iter().map(|j| j.sizes.len()).sum();
    let per_group = (1 + usize::from(native) + usize::from(vs.is_some())) as f64
        * (runs as f64 * seconds * ctx.thread_counts.len() as f64 + 2.0 * ctx.warm.as_secs_f64());
    let mut progress = Progress {
        enabled: !args.child && groups as f64 * per_group > 3.0,
        tty: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        start: Instant::now(),
        total: groups,
        done: 0,
    };
    let mut all_ok = true;
    // Benchmarks skipped because the module does not list their mechanism.
    let mut unlisted = 0;

    for job in &jobs {
        let bench = job.bench;
        let name = bench.name();
        // One-off setup: keys and objects in each module, native keys.
        let mut targets: Vec<Box<dyn Target>> = Vec::new();
        let skip = |progress: &mut Progress| {
            for _ in &job.sizes {
                progress.finished(&name);
            }
        };
        match P11Target::setup(bench, ours.clone(), args.find_objects) {
            Ok(Some(mut t)) => {
                t.key_per_thread = args.key_per_thread;
                t.update_size = args.update_size;
                targets.push(Box::new(t))
            }
            Ok(None) => {
                report::note(format!(
                    "{name}: ours does not list the mechanism (not supported, or disabled by \
                     the configuration: `cryptoadm list -p`); skipped"
                ));
                unlisted += 1;
                skip(&mut progress);
                continue;
            }
            Err(e) => {
                eprintln!("cfspeed: {name}: {e}");
                report::note(format!("{name}: failed: {e}"));
                all_ok = false;
                skip(&mut progress);
                continue;
            }
        }
        if native {
            let kinds: &[NativeKind] = if args.break_even {
                &[NativeKind::PerOp]
            } else {
                &[NativeKind::PerOp, NativeKind::Reuse]
            };
            for &kind in kinds {
                match NativeTarget::setup(bench, kind)? {
                    Some(t) => targets.push(Box::new(t)),
                    None if kind == NativeKind::PerOp && bench != Bench::Find => {
                        report::note(format!(
                            "{name}: no native counterpart (the openssl crate API cfspeed uses \
                             has none); native skipped"
                        ))
                    }
                    None => {}
                }
            }
        }
        if let Some(vs) = &vs {
            match P11Target::setup(bench, vs.clone(), args.find_objects) {
                Ok(Some(mut t)) => {
                    t.key_per_thread = args.key_per_thread;
                    t.update_size = args.update_size;
                    if args.break_even {
                        // Compare with the module only.
                        targets.truncate(1);
                    }
                    targets.push(Box::new(t))
                }
                Ok(None) => report::note(format!(
                    "{name}: {} does not list the mechanism; skipped there",
                    vs.name
                )),
                Err(e) => {
                    eprintln!("cfspeed: {name}: {e}");
                    report::note(format!("{name}: {e}"));
                }
            }
        }

        let mut points = Vec::new();
        for &size in &job.sizes {
            let title = match size {
                Some(s) => format!("{name} — {s} bytes"),
                None => name.clone(),
            };
            if let Some(s) = size.filter(|&s| !bench.size_ok(s)) {
                report::note(format!(
                    "{name}: {s} bytes is not a whole number of blocks; skipped"
                ));
                progress.finished(&title);
                continue;
            }
            let out = measure(bench, size, &targets, &ctx, &mut progress, &title);
            progress.finished(&title);
            match out {
                Ok((rows, ratios)) => {
                    if tables {
                        let mut what = bench.describe(size.unwrap_or(0), args.find_objects);
                        if let (Some(n), Bench::Cipher(_)) = (args.update_size, bench) {
                            what.push_str(&format!(
                                "; PKCS#11 modules multi-part: C_EncryptUpdate of {n} bytes \
                                 at a time + C_EncryptFinal, native one call"
                            ));
                        }
                        report::print_group(&title, &what, &rows, &ratios);
                    }
                    if let (Some(s), Some(r)) = (size, ratios.first()) {
                        points.push(breakeven::Point {
                            size: s,
                            ratio: r.value,
                        });
                    }
                    report.results.extend(rows);
                    report.ratios.extend(ratios);
                }
                Err(e) => {
                    eprintln!("cfspeed: {title}: {e}");
                    report::note(format!("{title}: failed: {e}"));
                    all_ok = false;
                }
            }
        }
        if args.break_even {
            let versus = targets.get(1).map(|t| t.name());
            match versus {
                Some(v) => {
                    let b = breakeven::find(&name, "ours", &v, &points);
                    if tables {
                        out!("{}", breakeven::render(&b));
                    }
                    report.break_even.push(b);
                }
                None => report::note(format!("{name}: break-even: nothing to compare with")),
            }
        }
    }

    // The asynchronous runs come before the report is printed, so that --json holds them.
    if let Some(depth) = args.async_depth {
        for bench in jobs.iter().map(|j| j.bench) {
            let signs = matches!(
                bench,
                Bench::Rsa { op: PkOp::Sign, .. } | Bench::Ecdsa { op: PkOp::Sign, .. }
            );
            if !signs {
                continue;
            }
            let shape = (depth, args.async_threads.max(1));
            let r =
                asynchronous::sign_rates(&ours.path, ours.slot.id(), bench, shape, runs, seconds);
            match r {
                Ok(r) => {
                    if tables {
                        asynchronous::print(&bench.name(), shape, &r);
                    }
                    report.asynchronous.push(report::AsyncRow {
                        mechanism: bench.name(),
                        depth,
                        threads: shape.1,
                        ops_per_sec: median(&r.rates),
                        cpu_percent: median(&r.cpu),
                        runs: r.rates,
                    });
                }
                Err(e) => {
                    eprintln!("cfspeed: {}: asynchronous sessions: {e}", bench.name());
                    all_ok = false;
                }
            }
        }
    }
    report.notes = report::notes();
    finish(&args, &report)?;
    if unlisted == jobs.len() {
        // Nothing was measured: a run that only skips is not a result.
        eprintln!(
            "cfspeed: nothing measured: the module lists none of the mechanisms asked for (not \
             supported, or disabled by the configuration: `cryptoadm list -p`)"
        );
        all_ok = false;
    }
    Ok(all_ok)
}

/// Prints the JSON or the notes, writes --json-out and --chart.
fn finish(args: &Args, report: &Report) -> Result<(), String> {
    let json = || serde_json::to_string_pretty(report).map_err(|e| format!("JSON: {e}"));
    if args.json || args.child {
        outln!("{}", json()?);
    } else if !report.notes.is_empty() {
        outln!();
        for n in &report.notes {
            outln!("# note: {n}");
        }
    }
    if args.child {
        return Ok(());
    }
    if let Some(p) = &args.json_out {
        std::fs::write(p, json()? + "\n").map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if let Some(p) = &args.chart {
        let title = format!("cfspeed — {}", report.command);
        std::fs::write(p, chart::svg(&title, &report.results))
            .map_err(|e| format!("{}: {e}", p.display()))?;
        if !args.json {
            outln!("# chart written to {}", p.display());
        }
    }
    Ok(())
}

/// `--multi N`: runs the children, adds up and prints.
fn run_multi(args: &Args) -> Result<bool, String> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    eprintln!("cfspeed: running {} processes side by side…", args.multi);
    let mut report = multi::merge(multi::run_children(args.multi, &argv)?)?;
    report.command = command_line();
    if !args.json {
        report::print_header(&report);
        let mut i = 0;
        while i < report.results.len() {
            let first = &report.results[i];
            let n = report.results[i..]
                .iter()
                .take_while(|r| r.mechanism == first.mechanism && r.size == first.size)
                .count();
            let rows = &report.results[i..i + n];
            let ratios: Vec<Ratio> = report
                .ratios
                .iter()
                .filter(|q| q.mechanism == first.mechanism && q.size == first.size)
                .cloned()
                .collect();
            let title = match first.size {
                Some(s) => format!("{} — {s} bytes", first.mechanism),
                None => first.mechanism.clone(),
            };
            let what = Bench::parse(&first.mechanism, &args.rsa_bits)
                .ok()
                .and_then(|b| b.first().copied())
                .map(|b| b.describe(first.size.unwrap_or(0), args.find_objects))
                .unwrap_or_default();
            report::print_group(
                &title,
                &format!("{what}; summed over {} processes", report.processes),
                rows,
                &ratios,
            );
            let per: Vec<String> = rows
                .iter()
                .map(|r| {
                    let v: Vec<String> = r
                        .per_process_ops_per_s
                        .iter()
                        .map(|x| report::thousands(*x))
                        .collect();
                    format!("{} {}", r.implementation, v.join(" + "))
                })
                .collect();
            outln!("  per process ops/s: {}", per.join("   "));
            i += n;
        }
    }
    finish(args, &report)?;
    Ok(true)
}

fn measure(
    bench: Bench,
    size: Option<usize>,
    targets: &[Box<dyn Target>],
    ctx: &Ctx,
    progress: &mut Progress,
    title: &str,
) -> Result<(Vec<Row>, Vec<Ratio>), String> {
    let bytes = size.unwrap_or(0);
    let per_op = bench.per_op_latency();
    let thread_counts = &ctx.thread_counts[..];
    let mut workers = Vec::new();
    let mut samples = Vec::new();
    for t in targets {
        let mut ws = t.workers(ctx.max_threads, bytes)?;
        // Warm every session, then size the timed batches on one thread.
        bench::run(&mut ws, ctx.warm, 1, false).map_err(|e| format!("{}: {e}", t.name()))?;
        let batch = calibrate(&mut ws[..1], ctx.warm, Duration::from_micros(20), per_op)
            .map_err(|e| format!("{}: {e}", t.name()))?;
        workers.push(ws);
        samples.push(Samples {
            batch,
            runs: vec![Vec::new(); thread_counts.len()],
        });
    }
    for r in 0..ctx.runs {
        progress.run(title, r + 1, ctx.runs);
        for (ti, t) in targets.iter().enumerate() {
            for (k, &n) in thread_counts.iter().enumerate() {
                let out = bench::run(
                    &mut workers[ti][..n],
                    ctx.duration,
                    samples[ti].batch,
                    per_op,
                )
                .map_err(|e| format!("{}: {e}", t.name()))?;
                samples[ti].runs[k].push(out);
            }
        }
    }
    drop(workers);

    // Ratios are medians of per-round ratios: the runs of one round are
    // back to back, so a machine that slows down for a while affects both
    // sides of each ratio alike.
    let paired = |a: &[RunResult], b: &[RunResult], f: &dyn Fn(&RunResult) -> f64| {
        let v: Vec<f64> = a.iter().zip(b).map(|(x, y)| f(x) / f(y)).collect();
        median(&v)
    };
    let ops_of = |r: &RunResult| r.ops_per_s;
    let per_cpu_of = |r: &RunResult| r.ops_per_s / (r.cpu_percent / 100.0).max(1e-9);
    let one_k = thread_counts.iter().position(|&n| n == 1);

    let mut rows = Vec::new();
    for (ti, t) in targets.iter().enumerate() {
        for (k, &n) in thread_counts.iter().enumerate() {
            let runs = &samples[ti].runs[k];
            let per_run: Vec<f64> = runs.iter().map(|r| r.ops_per_s).collect();
            let ops = median(&per_run);
            let lats: Vec<f64> = runs
                .iter()
                .flat_map(|r| r.latencies_us.iter().copied())
                .collect();
            let cpu_percent = median(&runs.iter().map(|r| r.cpu_percent).collect::<Vec<_>>());
            let base = one_k.filter(|_| n > 1).map(|k1| &samples[ti].runs[k1]);
            let med = |f: fn(&RunResult) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
            rows.push(Row {
                mechanism: bench.name(),
                size,
                implementation: t.name(),
                threads: n,
                ops_per_s: ops,
                mb_per_s: size.map(|s| ops * s as f64 / 1e6),
                p50_us: (per_op && !lats.is_empty()).then(|| median(&lats)),
                p99_us: (per_op && !lats.is_empty()).then(|| percentile(&lats, 99.0)),
                scaling_vs_1_thread: base.map(|b| paired(runs, b, &ops_of)),
                ops_per_cpu_second: median(&runs.iter().map(per_cpu_of).collect::<Vec<_>>()),
                cpu_efficiency_vs_1_thread: base.map(|b| paired(runs, b, &per_cpu_of)),
                cpu_percent,
                cpu_user_percent: med(|r| r.user_percent_all),
                cpu_sys_percent: med(|r| r.sys_percent_all),
                voluntary_switches_per_kop: median(
                    &runs.iter().map(|r| r.voluntary_per_kop).collect::<Vec<_>>(),
                ),
                involuntary_switches_per_kop: median(
                    &runs
                        .iter()
                        .map(|r| r.involuntary_per_kop)
                        .collect::<Vec<_>>(),
                ),
                runs_ops_per_s: per_run,
                batch: samples[ti].batch,
                processes: 1,
                per_process_ops_per_s: Vec::new(),
            });
        }
    }
    let mut ratios = Vec::new();
    for (k, &n) in thread_counts.iter().enumerate() {
        for (ti, t) in targets.iter().enumerate().skip(1) {
            ratios.push(Ratio {
                mechanism: bench.name(),
                size,
                threads: n,
                name: format!("ours/{}", t.name()),
                value: paired(&samples[0].runs[k], &samples[ti].runs[k], &ops_of),
            });
        }
    }
    Ok((rows, ratios))
}

/// Sets each `VAR=VALUE` of `--vs-env`, returning the previous values. Called before any
/// measuring thread exists, while only the modules opened so far may read the environment
/// (at their `C_Initialize`, which has returned).
fn set_env(pairs: &[String]) -> Result<Vec<(String, Option<std::ffi::OsString>)>, String> {
    let mut saved = Vec::new();
    for p in pairs {
        let (k, v) = p
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| format!("--vs-env {p}: expected VAR=VALUE"))?;
        saved.push((k.to_string(), std::env::var_os(k)));
        std::env::set_var(k, v);
    }
    Ok(saved)
}

/// Puts back what [`set_env`] changed.
fn restore_env(saved: Vec<(String, Option<std::ffi::OsString>)>) {
    for (k, v) in saved.into_iter().rev() {
        match v {
            Some(v) => std::env::set_var(&k, v),
            None => std::env::remove_var(&k),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Beside the executable, then ../lib, then $OPENCF_LIB_DIR; libopencf.so before
    /// libopencf_softtoken.so in each.
    #[test]
    fn default_module_lookup_order() {
        let root = std::env::temp_dir().join(format!("cfspeed-module-in-{}", std::process::id()));
        let (bin, lib, env) = (root.join("bin"), root.join("lib"), root.join("env"));
        for d in [&bin, &lib, &env] {
            std::fs::create_dir_all(d).unwrap();
        }
        let found = |e: Option<&Path>| module_in(&bin, e.map(|e| e.as_os_str().into()));
        assert_eq!(found(Some(&env)), None);
        std::fs::write(env.join("libopencf.so"), b"").unwrap();
        assert_eq!(found(Some(&env)), Some(env.join("libopencf.so")));
        assert_eq!(found(None), None);
        std::fs::write(lib.join("libopencf_softtoken.so"), b"").unwrap();
        assert_eq!(found(Some(&env)), Some(lib.join("libopencf_softtoken.so")));
        std::fs::write(lib.join("libopencf.so"), b"").unwrap();
        assert_eq!(found(Some(&env)), Some(lib.join("libopencf.so")));
        std::fs::write(bin.join("libopencf.so"), b"").unwrap();
        assert_eq!(found(Some(&env)), Some(bin.join("libopencf.so")));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
