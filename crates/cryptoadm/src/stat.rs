//! `cryptoadm stat`: the live counters of `opencf-stat`, as a table, JSON or the Prometheus
//! text format, once or every few seconds (like Solaris `kstat 1`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use opencf_config::{mechanism_from_name, mechanism_name};
use opencf_stat::{MechKey, MechStats, NamedKey, Snapshot, HIST_BUCKETS, OTHER_MECH};
use serde_json::{json, Value};

use crate::{is_root, usage, Fail};

#[derive(Args, Debug)]
pub struct StatArgs {
    /// Only this provider (or component, for named counters).
    #[arg(short = 'p', value_name = "PROVIDER")]
    provider: Option<String>,
    /// Only this mechanism (CKM_AES_GCM, or a number); hides the named counters.
    #[arg(short = 'm', value_name = "MECH")]
    mechanism: Option<String>,
    /// Repeat every S seconds; reports after the first show the change over the interval.
    #[arg(long, value_name = "S")]
    interval: Option<f64>,
    /// With --interval: number of reports (default: until interrupted).
    #[arg(long, value_name = "N", requires = "interval")]
    count: Option<u64>,
    /// Prometheus text exposition format (totals).
    #[arg(long, conflicts_with_all = ["interval", "reset"])]
    prometheus: bool,
    /// Zero the counters: later reports count from now.
    #[arg(long, conflicts_with_all = ["interval", "provider", "mechanism"])]
    reset: bool,
    /// Statistics directory (default: $OPENCF_STAT_DIR, else /dev/shm/opencf-stat-<uid>; root
    /// reads every user's).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Rows that pass the -p/-m filters.
struct Filter {
    provider: Option<String>,
    mechanism: Option<u64>,
}

impl Filter {
    fn mech(&self, k: &MechKey) -> bool {
        self.provider.as_ref().is_none_or(|p| *p == k.provider)
            && self.mechanism.is_none_or(|m| m == k.mechanism)
    }
    fn named(&self, k: &NamedKey) -> bool {
        self.mechanism.is_none() && self.provider.as_ref().is_none_or(|p| *p == k.component)
    }
}

pub fn run(args: &StatArgs, json: bool) -> Result<u8, Fail> {
    if args.prometheus && json {
        return Err(usage("--prometheus and --json exclude each other"));
    }
    let interval = match args.interval {
        None => None,
        Some(s) if s.is_finite() && s > 0.0 && s < 1e9 => Some(Duration::from_secs_f64(s)),
        Some(_) => return Err(usage("--interval needs a positive number of seconds")),
    };
    if args.count == Some(0) {
        return Err(usage("--count needs a positive number"));
    }
    let filter = Filter {
        // The counters keep the first bytes of a configured name: a full name finds its rows.
        provider: args
            .provider
            .as_deref()
            .map(|p| opencf_stat::truncate_name(p).to_string()),
        mechanism: match &args.mechanism {
            None => None,
            Some(m) => Some(
                mechanism_from_name(m)
                    .ok_or_else(|| usage(format!("unknown mechanism \"{m}\"")))?,
            ),
        },
    };
    let dirs = dirs(args)?;
    for d in &dirs {
        if let Some(why) = counting_off_in(d) {
            eprintln!("cryptoadm: note: {}: {why}", d.display());
        }
    }
    if args.reset {
        for d in &dirs {
            opencf_stat::reset(d)
                .map_err(|e| Fail::Problem(format!("{}: cannot reset: {e}", d.display())))?;
        }
        return Ok(0);
    }
    let mut prev: Option<Snapshot> = None;
    let mut n = 0u64;
    loop {
        let now = read_all(&dirs)?;
        let shown = match &prev {
            None => now.clone(),
            Some(p) => now.since(p),
        };
        if args.prometheus {
            outln!("{}", prometheus(&shown, &filter).trim_end());
        } else if json {
            let v = to_json(&shown, &filter, &dirs, prev.as_ref().and(args.interval));
            if interval.is_some() {
                outln!("{v}");
            } else {
                crate::print_json(&v);
            }
        } else {
            if n > 0 {
                outln!();
            }
            outln!("{}", table(&shown, &filter).trim_end());
        }
        n += 1;
        let Some(every) = interval else { break };
        if args.count.is_some_and(|c| n >= c) {
            break;
        }
        prev = Some(now);
        std::thread::sleep(every);
    }
    Ok(0)
}

/// Why the framework counts nothing in statistics directory `d`, when it is so: the writers
/// refuse a directory that group or others may write (docs/STAT.md, "Never failing"), and an
/// empty table would not say why.
fn counting_off_in(d: &Path) -> Option<&'static str> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(d).ok()?;
    (meta.is_dir() && meta.mode() & 0o022 != 0)
        .then_some("writable by group or others: the framework counts nothing there")
}

/// --dir, else $OPENCF_STAT_DIR, else every user's directory for root, else the user's own.
fn dirs(args: &StatArgs) -> Result<Vec<PathBuf>, Fail> {
    if let Some(d) = &args.dir {
        return Ok(vec![d.clone()]);
    }
    if std::env::var_os(opencf_stat::ENV_DIR).is_some_and(|d| !d.is_empty()) || !is_root() {
        return opencf_stat::default_dir()
            .map(|d| vec![d])
            .map_err(|e| Fail::Problem(format!("cannot find the statistics directory: {e}")));
    }
    Ok(opencf_stat::user_dirs())
}

fn read_all(dirs: &[PathBuf]) -> Result<Snapshot, Fail> {
    let mut total = Snapshot::default();
    for d in dirs {
        let s = opencf_stat::read(d).map_err(|e| Fail::Problem(read_error(d, &e)))?;
        total.merge(&s);
    }
    Ok(total)
}

/// The message for a directory that cannot be read; a damaged totals file (the error names
/// it) is left in place and `--reset` replaces it.
fn read_error(dir: &Path, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::InvalidData {
        format!(
            "cannot read the statistics: {e} (`cryptoadm stat --reset --dir {}` replaces \
             the damaged file; the counters then start from zero)",
            dir.display()
        )
    } else {
        format!("{}: cannot read: {e}", dir.display())
    }
}

fn mech_label(m: u64) -> String {
    if m == OTHER_MECH {
        "other".into()
    } else {
        mechanism_name(m)
    }
}

/// "850ns", "12.3us", "4.50ms", "1.20s"; "-" without a value.
fn duration(ns: Option<u64>) -> String {
    match ns {
        None => "-".into(),
        Some(n) if n < 1_000 => format!("{n}ns"),
        Some(n) if n < 1_000_000 => format!("{:.1}us", n as f64 / 1e3),
        Some(n) if n < 1_000_000_000 => format!("{:.2}ms", n as f64 / 1e6),
        Some(n) => format!("{:.2}s", n as f64 / 1e9),
    }
}

fn mech_rows<'a>(
    s: &'a Snapshot,
    f: &'a Filter,
) -> impl Iterator<Item = (&'a MechKey, &'a MechStats)> + 'a {
    s.mechanisms
        .iter()
        .filter(move |(k, v)| f.mech(k) && !v.is_zero())
}

fn named_rows<'a>(
    s: &'a Snapshot,
    f: &'a Filter,
) -> impl Iterator<Item = (&'a NamedKey, u64, bool)> + 'a {
    let counters = s.counters.iter().map(|(k, &v)| (k, v, false));
    let gauges = s.gauges.iter().map(|(k, &v)| (k, v, true));
    counters
        .chain(gauges)
        .filter(move |(k, v, gauge)| f.named(k) && (*v != 0 || *gauge))
}

fn table(s: &Snapshot, f: &Filter) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{:<16} {:<28} {:>10} {:>14} {:>7} {:>9} {:>7} {:>9} {:>9}",
        "PROVIDER", "MECHANISM", "OPS", "BYTES", "ERRORS", "FALLBACKS", "BUSY", "P50", "P99"
    );
    for (k, v) in mech_rows(s, f) {
        let _ = writeln!(
            t,
            "{:<16} {:<28} {:>10} {:>14} {:>7} {:>9} {:>7} {:>9} {:>9}",
            k.provider,
            mech_label(k.mechanism),
            v.ops,
            v.bytes,
            v.errors,
            v.fallbacks,
            v.busy,
            duration(v.percentile_ns(0.5)),
            duration(v.percentile_ns(0.99)),
        );
    }
    let named: Vec<_> = named_rows(s, f).collect();
    if !named.is_empty() {
        let _ = writeln!(t, "\n{:<16} {:<32} {:>14}", "COMPONENT", "COUNTER", "VALUE");
        for (k, v, gauge) in named {
            let name = if gauge {
                format!("{} (gauge)", k.name)
            } else {
                k.name.clone()
            };
            let _ = writeln!(t, "{:<16} {:<32} {:>14}", k.component, name, v);
        }
    }
    t
}

fn to_json(s: &Snapshot, f: &Filter, dirs: &[PathBuf], interval: Option<f64>) -> Value {
    let mechs: Vec<Value> = mech_rows(s, f)
        .map(|(k, v)| {
            json!({
                "provider": k.provider,
                "mechanism": mech_label(k.mechanism),
                "mechanism_value": k.mechanism,
                "ops": v.ops,
                "bytes": v.bytes,
                "errors": v.errors,
                "fallbacks": v.fallbacks,
                "busy": v.busy,
                "latency_sum_ns": v.latency_sum_ns,
                "p50_ns": v.percentile_ns(0.5),
                "p99_ns": v.percentile_ns(0.99),
                "histogram": v.histogram,
            })
        })
        .collect();
    let named = |gauges: bool| -> Vec<Value> {
        named_rows(s, f)
            .filter(|r| r.2 == gauges)
            .map(|(k, v, _)| json!({ "component": k.component, "name": k.name, "value": v }))
            .collect()
    };
    json!({
        "directories": dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>(),
        "processes": s.processes,
        "interval": interval,
        "mechanisms": mechs,
        "counters": named(false),
        "gauges": named(true),
    })
}

/// Nanoseconds as exact decimal seconds: 4096 → "0.000004096", 2_000_000_000 → "2".
fn seconds(ns: u64) -> String {
    let (s, frac) = (ns / 1_000_000_000, ns % 1_000_000_000);
    if frac == 0 {
        return s.to_string();
    }
    let digits = format!("{frac:09}");
    format!("{s}.{}", digits.trim_end_matches('0'))
}

/// A Prometheus label value: backslash, double quote and newline escaped.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

type Getter = fn(&MechStats) -> u64;

fn prometheus(s: &Snapshot, f: &Filter) -> String {
    let rows: Vec<_> = mech_rows(s, f)
        .map(|(k, v)| {
            let labels = format!(
                "provider=\"{}\",mechanism=\"{}\"",
                label(&k.provider),
                label(&mech_label(k.mechanism))
            );
            (labels, v)
        })
        .collect();
    let mut t = String::new();
    let scalars: [(&str, &str, Getter); 5] = [
        ("operations", "Operations completed", |v| v.ops),
        ("bytes", "Bytes of input processed", |v| v.bytes),
        ("errors", "Operations that failed", |v| v.errors),
        (
            "fallbacks",
            "Operations the metaslot moved to another provider",
            |v| v.fallbacks,
        ),
        (
            "busy",
            "Operations refused because the provider was busy",
            |v| v.busy,
        ),
    ];
    for (name, help, get) in scalars {
        let _ = writeln!(
            t,
            "# HELP opencf_{name}_total {help}, by provider and mechanism."
        );
        let _ = writeln!(t, "# TYPE opencf_{name}_total counter");
        for (labels, v) in &rows {
            let _ = writeln!(t, "opencf_{name}_total{{{labels}}} {}", get(v));
        }
    }
    let h = "opencf_operation_latency_seconds";
    let _ = writeln!(t, "# HELP {h} Latency of completed operations.");
    let _ = writeln!(t, "# TYPE {h} histogram");
    for (labels, v) in &rows {
        let mut cumulative = 0u64;
        for (i, n) in v.histogram.iter().enumerate().take(HIST_BUCKETS - 1) {
            cumulative += n;
            let le = seconds(opencf_stat::bucket_high_ns(i).unwrap_or(u64::MAX));
            let _ = writeln!(t, "{h}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
        let count = v.histogram_count();
        let _ = writeln!(t, "{h}_bucket{{{labels},le=\"+Inf\"}} {count}");
        let _ = writeln!(t, "{h}_sum{{{labels}}} {}", seconds(v.latency_sum_ns));
        let _ = writeln!(t, "{h}_count{{{labels}}} {count}");
    }
    let named: Vec<_> = named_rows(s, f).collect();
    for (metric, gauge, help, kind) in [
        (
            "opencf_counter_total",
            false,
            "Counters of OpenCF components.",
            "counter",
        ),
        (
            "opencf_gauge",
            true,
            "Current values of OpenCF components.",
            "gauge",
        ),
    ] {
        let _ = writeln!(t, "# HELP {metric} {help}");
        let _ = writeln!(t, "# TYPE {metric} {kind}");
        for (k, v, _) in named.iter().filter(|r| r.2 == gauge) {
            let _ = writeln!(
                t,
                "{metric}{{component=\"{}\",name=\"{}\"}} {v}",
                label(&k.component),
                label(&k.name)
            );
        }
    }
    t
}
