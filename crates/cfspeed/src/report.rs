//! Results, the text table and the JSON form.

use std::sync::Mutex;

use serde::{Deserialize, Serialize};

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
#[derive(Debug, Clone, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// Median user-mode CPU time during the runs, % of all the machine's
    /// CPUs (100 = every core busy in user mode).
    pub cpu_user_percent: f64,
    /// Median kernel CPU time during the runs, % of all the machine's CPUs.
    pub cpu_sys_percent: f64,
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
    /// Processes that ran this row at the same time (`--multi`); the
    /// figures above are their sums (latencies: median p50, highest p99).
    pub processes: usize,
    /// With `--multi`: each process's ops/s (they add up to `ops_per_s`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_process_ops_per_s: Vec<f64>,
}

/// A ratio between two rows of the same mechanism, size and thread count.
#[derive(Debug, Clone, Serialize, Deserialize)]
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

/// One `--async-depth` measurement: signatures of `mechanism` kept `depth` in flight on
/// asynchronous sessions by each of `threads` polling threads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AsyncRow {
    /// Benchmark name.
    pub mechanism: String,
    /// Signatures in flight per thread.
    pub depth: usize,
    /// Polling threads (rates summed).
    pub threads: usize,
    /// Median signatures per second.
    pub ops_per_sec: f64,
    /// Median CPU of the process, in % of one CPU.
    pub cpu_percent: f64,
    /// Signatures per second of each run.
    pub runs: Vec<f64>,
}

/// Everything one invocation measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// Processes run side by side (`--multi`), 1 otherwise.
    pub processes: usize,
    /// The measurements.
    pub results: Vec<Row>,
    /// ours/native, ours/<other module>, ...
    pub ratios: Vec<Ratio>,
    /// `--break-even`: the sweeps and their thresholds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub break_even: Vec<crate::breakeven::BreakEven>,
    /// `--async-depth`: the signatures on asynchronous sessions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub asynchronous: Vec<AsyncRow>,
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
    outln!("# {}", r.command);
    outln!(
        "# machine: {} CPUs, {}; flags: {}",
        r.machine.cpus,
        r.machine.cpu_model,
        r.machine.cpu_flags.join(" ")
    );
    outln!("# native: {} (linked into cfspeed)", r.openssl);
    for m in &r.modules {
        outln!(
            "# {}: {} — {}, slot {}, token \"{}\"",
            m.name,
            m.path,
            m.library,
            m.slot,
            m.token
        );
    }
    outln!(
        "# each figure: median of {} runs of {:.2} s; ops/s summed over threads{}; \
         ratios and ×1 thr: median of the per-round ratios (implementations interleaved); \
         usr%/sys%: CPU time of all {} CPUs",
        r.runs,
        r.seconds,
        if r.processes > 1 {
            format!(" and over {} processes (--multi)", r.processes)
        } else {
            String::new()
        },
        r.machine.cpus
    );
}

/// Prints one (mechanism, size) table.
pub fn print_group(title: &str, what: &str, rows: &[Row], ratios: &[Ratio]) {
    outln!();
    outln!("{title}");
    outln!("  {what}");
    outln!(
        "  {:<14} {:>3} {:>12} {:>10} {:>9} {:>9} {:>6} {:>5} {:>5} {:>9}",
        "impl",
        "thr",
        "ops/s",
        "MB/s",
        "p50 µs",
        "p99 µs",
        "cpu%",
        "usr%",
        "sys%",
        "×1 thr"
    );
    for r in rows {
        outln!(
            "  {:<14} {:>3} {:>12} {:>10} {:>9} {:>9} {:>6.0} {:>5.1} {:>5.1} {:>9}",
            r.implementation,
            r.threads,
            thousands(r.ops_per_s),
            opt(r.mb_per_s, 2),
            opt(r.p50_us, 1),
            opt(r.p99_us, 1),
            r.cpu_percent,
            r.cpu_user_percent,
            r.cpu_sys_percent,
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
        outln!("  ops per CPU-second vs 1 thr: {}", eff.join("   "));
    }
    let mut threads: Vec<usize> = ratios.iter().map(|r| r.threads).collect();
    threads.dedup();
    for t in threads {
        let parts: Vec<String> = ratios
            .iter()
            .filter(|r| r.threads == t)
            .map(|r| format!("{} {:.2}", r.name, r.value))
            .collect();
        outln!("  ratios, {t} thr: {}", parts.join("   "));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A row with `ops_per_s` and the rest filled in plausibly.
    pub fn row(mechanism: &str, size: Option<usize>, implementation: &str, ops: f64) -> Row {
        Row {
            mechanism: mechanism.into(),
            size,
            implementation: implementation.into(),
            threads: 1,
            ops_per_s: ops,
            mb_per_s: size.map(|s| ops * s as f64 / 1e6),
            p50_us: size.is_none().then_some(10.0),
            p99_us: size.is_none().then_some(20.0),
            scaling_vs_1_thread: None,
            runs_ops_per_s: vec![ops],
            cpu_percent: 100.0,
            cpu_user_percent: 45.0,
            cpu_sys_percent: 5.0,
            voluntary_switches_per_kop: 0.0,
            involuntary_switches_per_kop: 0.0,
            ops_per_cpu_second: ops,
            cpu_efficiency_vs_1_thread: None,
            batch: 1,
            processes: 1,
            per_process_ops_per_s: Vec::new(),
        }
    }

    #[test]
    fn json_shape() {
        let r = Report {
            command: "cfspeed".into(),
            machine: Machine::detect(),
            openssl: "OpenSSL".into(),
            modules: vec![],
            seconds: 0.5,
            runs: 3,
            processes: 1,
            results: vec![row("CKM_SHA256", Some(1024), "ours", 1000.0)],
            ratios: vec![Ratio {
                mechanism: "CKM_SHA256".into(),
                size: Some(1024),
                threads: 1,
                name: "ours/native".into(),
                value: 0.5,
            }],
            asynchronous: Vec::new(),
            break_even: Vec::new(),
            notes: vec![],
        };
        let v: serde_json::Value = serde_json::to_value(&r).unwrap();
        for k in [
            "command",
            "machine",
            "openssl",
            "modules",
            "seconds",
            "runs",
            "processes",
            "results",
            "ratios",
            "notes",
        ] {
            assert!(v.get(k).is_some(), "{k}");
        }
        assert!(v.get("break_even").is_none());
        let row = &v["results"][0];
        for k in [
            "mechanism",
            "size",
            "implementation",
            "threads",
            "ops_per_s",
            "mb_per_s",
            "p50_us",
            "p99_us",
            "cpu_percent",
            "cpu_user_percent",
            "cpu_sys_percent",
            "processes",
        ] {
            assert!(row.get(k).is_some(), "{k}");
        }
        assert_eq!(row["mb_per_s"].as_f64(), Some(1.024));
        assert!(row.get("per_process_ops_per_s").is_none());
        // It reads back (what --multi does with its children's output).
        let back: Report = serde_json::from_value(v).unwrap();
        assert_eq!(back.results[0].ops_per_s, 1000.0);
        assert_eq!(thousands(1234567.8), "1,234,568");
    }
}
