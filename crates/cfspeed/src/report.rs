//! Results, the text table and the JSON form.

use std::sync::Mutex;

use serde::Serialize;

static NOTES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Records a line for the report's notes (setup timings and the like).
pub fn note(s: String) {
    NOTES.lock().unwrap_or_else(|e| e.into_inner()).push(s);
}

/// The notes recorded so far.
pub fn notes() -> Vec<String> {
    NOTES.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The machine the run happened on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// Logical CPUs available to the process.
    pub cpus: usize,
    /// `model name` from /proc/cpuinfo.
    pub cpu_model: String,
    /// Which of the flags that matter here the CPU has.
    pub cpu_flags: Vec<String>,
}

impl Machine {
    /// Reads /proc/cpuinfo.
    pub fn detect() -> Machine {
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            info.lines()
                .find(|l| l.split(':').next().map(str::trim) == Some(name))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
                .unwrap_or_default()
        };
        let flags = field("flags");
        let have: Vec<&str> = flags.split_whitespace().collect();
        let cpu_flags = [
            "aes",
            "pclmulqdq",
            "avx2",
            "avx512f",
            "avx512ifma",
            "vaes",
            "vpclmulqdq",
            "sha_ni",
            "adx",
            "bmi2",
        ]
        .iter()
        .filter(|f| have.contains(f))
        .map(|f| f.to_string())
        .collect();
        Machine {
            cpus: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            cpu_model: field("model name"),
            cpu_flags,
        }
    }
}

/// One module taking part.
#[derive(Debug, Clone, Serialize)]
pub struct ModuleInfo {
    /// Name in the table.
    pub name: String,
    /// Library path.
    pub path: String,
    /// `C_GetInfo` description and version.
    pub library: String,
    /// Slot id.
    pub slot: u64,
    /// Token label.
    pub token: String,
}

/// One (mechanism, size, implementation, threads) measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Mechanism (or `find`).
    pub mechanism: String,
    /// Input bytes per operation, for bulk mechanisms.
    pub size: Option<usize>,
    /// `ours`, `native`, `native-reuse`, or the other module's name.
    pub implementation: String,
    /// Threads, each with its own session or context.
    pub threads: usize,
    /// Median over the runs of the aggregate operations per second.
    pub ops_per_s: f64,
    /// `ops_per_s` × size, in 10^6 bytes per second (bulk mechanisms).
    pub mb_per_s: Option<f64>,
    /// Median single-operation latency over all runs, µs (timed one by one).
    pub p50_us: Option<f64>,
    /// 99th percentile single-operation latency, µs.
    pub p99_us: Option<f64>,
    /// Median over rounds of this row's ops/s divided by the same
    /// implementation's 1-thread ops/s in the same round.
    pub scaling_vs_1_thread: Option<f64>,
    /// Each run's aggregate operations per second.
    pub runs_ops_per_s: Vec<f64>,
    /// Median process CPU use during the runs, % of one CPU (a fully busy
    /// thread is 100).
    pub cpu_percent: f64,
    /// Median voluntary context switches (threads blocking) per 1000 ops.
    pub voluntary_switches_per_kop: f64,
    /// Median involuntary context switches (preempted) per 1000 ops.
    pub involuntary_switches_per_kop: f64,
    /// `ops_per_s` per CPU-second used (`ops_per_s` / (`cpu_percent`/100)):
    /// comparing it between thread counts separates a module's own
    /// contention from a busy machine.
    pub ops_per_cpu_second: f64,
    /// Median over rounds of ops per CPU-second divided by the 1-thread
    /// figure of the same round.
    pub cpu_efficiency_vs_1_thread: Option<f64>,
    /// Operations per timed batch.
    pub batch: usize,
}

/// A ratio between two rows of the same mechanism, size and thread count.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    /// Mechanism.
    pub mechanism: String,
    /// Size, for bulk mechanisms.
    pub size: Option<usize>,
    /// Threads.
    pub threads: usize,
    /// e.g. `ours/native`.
    pub name: String,
    /// Median over rounds of (ops/s of the first / ops/s of the second);
    /// the two ran back to back in each round.
    pub value: f64,
}

/// Everything one invocation measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The command line.
    pub command: String,
    /// The machine.
    pub machine: Machine,
    /// OpenSSL linked into cfspeed (the native baseline).
    pub openssl: String,
    /// The modules measured.
    pub modules: Vec<ModuleInfo>,
    /// Seconds per run.
    pub seconds: f64,
    /// Runs per row (the median is reported).
    pub runs: usize,
    /// The measurements.
    pub results: Vec<Row>,
    /// ours/native, ours/<other module>, ...
    pub ratios: Vec<Ratio>,
    /// Setup timings and remarks.
    pub notes: Vec<String>,
}

/// `1234567.8` → `1,234,568`.
pub fn thousands(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let s = format!("{:.0}", v.round());
    let (sign, digits) = s.strip_prefix('-').map_or(("", s.as_str()), |d| ("-", d));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.prec$}"))
}

/// Prints the header of the text report.
pub fn print_header(r: &Report) {
    println!("# {}", r.command);
    println!(
        "# machine: {} CPUs, {}; flags: {}",
        r.machine.cpus,
        r.machine.cpu_model,
        r.machine.cpu_flags.join(" ")
    );
    println!("# native: {} (linked into cfspeed)", r.openssl);
    for m in &r.modules {
        println!(
            "# {}: {} — {}, slot {}, token \"{}\"",
            m.name, m.path, m.library, m.slot, m.token
        );
    }
    println!(
        "# each figure: median of {} runs of {:.2} s; ops/s summed over threads; \
         ratios and ×1 thr: median of the per-round ratios (implementations interleaved)",
        r.runs, r.seconds
    );
}

/// Prints one (mechanism, size) table.
pub fn print_group(title: &str, what: &str, rows: &[Row], ratios: &[Ratio]) {
    println!();
    println!("{title}");
    println!("  {what}");
    println!(
        "  {:<14} {:>3} {:>12} {:>10} {:>9} {:>9} {:>6} {:>9}",
        "impl", "thr", "ops/s", "MB/s", "p50 µs", "p99 µs", "cpu%", "×1 thr"
    );
    for r in rows {
        println!(
            "  {:<14} {:>3} {:>12} {:>10} {:>9} {:>9} {:>6.0} {:>9}",
            r.implementation,
            r.threads,
            thousands(r.ops_per_s),
            opt(r.mb_per_s, 2),
            opt(r.p50_us, 1),
            opt(r.p99_us, 1),
            r.cpu_percent,
            r.scaling_vs_1_thread
                .map_or(String::new(), |x| format!("{x:.2}×")),
        );
    }
    let eff: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            r.cpu_efficiency_vs_1_thread
                .map(|e| format!("{} {} thr {:.2}", r.implementation, r.threads, e))
        })
        .collect();
    if !eff.is_empty() {
        println!("  ops per CPU-second vs 1 thr: {}", eff.join("   "));
    }
    let mut threads: Vec<usize> = ratios.iter().map(|r| r.threads).collect();
    threads.dedup();
    for t in threads {
        let parts: Vec<String> = ratios
            .iter()
            .filter(|r| r.threads == t)
            .map(|r| format!("{} {:.2}", r.name, r.value))
            .collect();
        println!("  ratios, {t} thr: {}", parts.join("   "));
    }
}
