//! `cfspeed`: measures a PKCS#11 module through its C ABI, side by side with
//! native OpenSSL and with another PKCS#11 module, in the same run.
//!
//! ```text
//! cfspeed [MECH…] [--module PATH] [--slot N | --token LABEL] [--pin PIN]
//!         [--native] [--vs-module PATH [--vs-slot N] [--vs-pin PIN]]
//!         [--threads N] [--seconds S] [--runs R] [--sizes 16,64,…] [--json]
//! ```
//!
//! Every figure is the median of `--runs` timed runs of `--seconds` each;
//! the implementations are interleaved run by run so that a noisy machine
//! disturbs them alike.

#![forbid(unsafe_code)]

mod bench;
mod cpu;
mod mechs;
mod p11;
mod raw;
mod report;

use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use clap::Parser;

use crate::bench::{calibrate, median, percentile, RunResult};
use crate::mechs::{Bench, NativeKind, NativeTarget, P11Target, Target};
use crate::p11::{short_name, Module, ModuleSpec};
use crate::report::{Machine, ModuleInfo, Ratio, Report, Row};

/// Measure PKCS#11 mechanisms through the C ABI, beside native OpenSSL and
/// another PKCS#11 module.
#[derive(Parser, Debug)]
#[command(name = "cfspeed", version)]
struct Args {
    /// Mechanisms: CKM_AES_GCM, CKM_SHA256_RSA_PKCS, CKM_ECDSA, find
    /// (C_FindObjects by label among --find-objects token objects).
    /// Default: CKM_AES_GCM CKM_SHA256_RSA_PKCS CKM_ECDSA.
    mechanisms: Vec<String>,

    /// The PKCS#11 module to measure. Default: libopencf.so, else
    /// libopencf_softtoken.so, next to the cfspeed executable.
    #[arg(long, env = "CFSPEED_MODULE")]
    module: Option<PathBuf>,
    /// Slot id. Default: the first slot with an initialized token.
    #[arg(long)]
    slot: Option<u64>,
    /// Token label (instead of --slot).
    #[arg(long)]
    token: Option<String>,
    /// User PIN.
    #[arg(long, env = "CFSPEED_PIN")]
    pin: Option<String>,
    /// If the token says the user PIN must be changed, change it to this
    /// (a fresh OpenCF softtoken has PIN `changeme`, expired).
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
    /// User PIN of --vs-module's token.
    #[arg(long, env = "CFSPEED_VS_PIN")]
    vs_pin: Option<String>,

    /// Threads, each with its own session; with N > 1, 1 thread is measured
    /// too and the scaling printed.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Measure only --threads N, not also 1 thread (for profiling).
    #[arg(long, hide = true)]
    only_threads: bool,
    /// AES-GCM with several threads: one key object per thread instead of
    /// one key shared by all (shows what sharing a key object costs).
    #[arg(long)]
    key_per_thread: bool,
    /// Seconds per timed run.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Timed runs per figure; the median is reported.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Input sizes in bytes for bulk mechanisms.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "16,64,256,1024,8192,16384"
    )]
    sizes: Vec<usize>,
    /// Token objects the `find` benchmark searches among (created once,
    /// reused by later runs on the same keystore).
    #[arg(long, default_value_t = 10_000)]
    find_objects: usize,
    /// Print the results as JSON instead of tables.
    #[arg(long)]
    json: bool,
}

fn default_module() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("locating cfspeed: {e}"))?;
    let dir = exe.parent().ok_or("cfspeed has no directory")?;
    for name in ["libopencf.so", "libopencf_softtoken.so"] {
        let p = dir.join(name);
        if p.exists() {
            return Ok(p);
        }
    }
    Err(format!(
        "no module given and neither libopencf.so nor libopencf_softtoken.so is in {}; use --module",
        dir.display()
    ))
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

fn run(args: Args) -> Result<bool, String> {
    if args.threads == 0
        || args.runs == 0
        || args.seconds.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
    {
        return Err("--threads, --runs and --seconds must be positive".into());
    }
    let benches: Vec<Bench> = if args.mechanisms.is_empty() {
        vec![Bench::AesGcm, Bench::RsaSha256, Bench::Ecdsa]
    } else {
        args.mechanisms
            .iter()
            .map(|m| Bench::parse(m))
            .collect::<Result<_, _>>()?
    };
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
            if args.vs_pin.is_none() {
                return Err("--vs-module needs --vs-pin (or CFSPEED_VS_PIN)".into());
            }
            let mut name = short_name(p);
            if name == "ours" || name == "native" || name == "native-reuse" {
                name = format!("vs-{name}");
            }
            Some(Rc::new(Module::open(
                &name,
                &ModuleSpec {
                    path: p.clone(),
                    slot: args.vs_slot,
                    token: args.vs_token.clone(),
                    pin: args.vs_pin.clone(),
                    new_pin: None,
                },
            )?))
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
        seconds: args.seconds,
        runs: args.runs,
        results: Vec::new(),
        ratios: Vec::new(),
        notes: Vec::new(),
    };
    if !args.json {
        report::print_header(&report);
    }

    let mut thread_counts = vec![1];
    if args.threads > 1 {
        thread_counts.push(args.threads);
        if args.only_threads {
            thread_counts.remove(0);
        }
    }
    let max_threads = args.threads;
    let duration = Duration::from_secs_f64(args.seconds);
    let warm = Duration::from_secs_f64((args.seconds * 0.2).clamp(0.05, 0.3));
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut all_ok = true;

    for bench in benches {
        // One-off setup: keys and objects in each module, native keys.
        let mut targets: Vec<Box<dyn Target>> = Vec::new();
        match P11Target::setup(bench, ours.clone(), args.find_objects) {
            Ok(mut t) => {
                t.key_per_thread = args.key_per_thread;
                targets.push(Box::new(t))
            }
            Err(e) => {
                eprintln!("cfspeed: {}: ours: {e}", bench.name());
                report::note(format!("{}: ours failed: {e}", bench.name()));
                all_ok = false;
                continue;
            }
        }
        if args.native {
            for kind in [NativeKind::PerOp, NativeKind::Reuse] {
                if let Some(t) = NativeTarget::setup(bench, kind)? {
                    targets.push(Box::new(t));
                }
            }
        }
        if let Some(vs) = &vs {
            match P11Target::setup(bench, vs.clone(), args.find_objects) {
                Ok(mut t) => {
                    t.key_per_thread = args.key_per_thread;
                    targets.push(Box::new(t))
                }
                Err(e) => {
                    eprintln!("cfspeed: {}: {}: {e}", bench.name(), vs.name);
                    report::note(format!("{}: {} failed: {e}", bench.name(), vs.name));
                }
            }
        }

        let sizes: Vec<Option<usize>> = if bench.sized() {
            args.sizes.iter().map(|s| Some(*s)).collect()
        } else {
            vec![None]
        };
        for size in sizes {
            let title = match size {
                Some(s) => format!("{} — {s} bytes", bench.name()),
                None => bench.name().to_string(),
            };
            match measure(
                &args,
                bench,
                size,
                &targets,
                &thread_counts,
                max_threads,
                duration,
                warm,
                tty,
                &title,
            ) {
                Ok((rows, ratios)) => {
                    if !args.json {
                        report::print_group(
                            &title,
                            &bench.describe(size.unwrap_or(0), args.find_objects),
                            &rows,
                            &ratios,
                        );
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
    }

    report.notes = report::notes();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| format!("JSON: {e}"))?
        );
    } else if !report.notes.is_empty() {
        println!();
        for n in &report.notes {
            println!("# note: {n}");
        }
    }
    Ok(all_ok)
}

#[allow(clippy::too_many_arguments)]
fn measure(
    args: &Args,
    bench: Bench,
    size: Option<usize>,
    targets: &[Box<dyn Target>],
    thread_counts: &[usize],
    max_threads: usize,
    duration: Duration,
    warm: Duration,
    tty: bool,
    title: &str,
) -> Result<(Vec<Row>, Vec<Ratio>), String> {
    let bytes = size.unwrap_or(0);
    let per_op = bench.per_op_latency();
    let mut workers = Vec::new();
    let mut samples = Vec::new();
    for t in targets {
        let mut ws = t.workers(max_threads, bytes)?;
        // Warm every session, then size the timed batches on one thread.
        bench::run(&mut ws, warm, 1, false).map_err(|e| format!("{}: {e}", t.name()))?;
        let batch = calibrate(&mut ws[..1], warm, Duration::from_micros(20), per_op)
            .map_err(|e| format!("{}: {e}", t.name()))?;
        workers.push(ws);
        samples.push(Samples {
            batch,
            runs: vec![Vec::new(); thread_counts.len()],
        });
    }
    for r in 0..args.runs {
        if tty {
            eprint!("\r{title}: run {}/{}   ", r + 1, args.runs);
        }
        for (ti, t) in targets.iter().enumerate() {
            for (k, &n) in thread_counts.iter().enumerate() {
                let out = bench::run(&mut workers[ti][..n], duration, samples[ti].batch, per_op)
                    .map_err(|e| format!("{}: {e}", t.name()))?;
                samples[ti].runs[k].push(out);
            }
        }
    }
    if tty {
        eprint!("\r{}\r", " ".repeat(title.len() + 16));
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
            rows.push(Row {
                mechanism: bench.name().to_string(),
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
            });
        }
    }
    let mut ratios = Vec::new();
    for (k, &n) in thread_counts.iter().enumerate() {
        for (ti, t) in targets.iter().enumerate().skip(1) {
            ratios.push(Ratio {
                mechanism: bench.name().to_string(),
                size,
                threads: n,
                name: format!("ours/{}", t.name()),
                value: paired(&samples[0].runs[k], &samples[ti].runs[k], &ops_of),
            });
        }
    }
    Ok((rows, ratios))
}
