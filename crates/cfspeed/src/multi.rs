//! `--multi N`: N cfspeed processes side by side, like `openssl speed
//! -multi`. cfspeed runs itself N times with the same arguments plus the
//! hidden `--child` (JSON on stdout, no progress line), waits for all, and
//! adds up their rows: ops/s, MB/s and CPU use are sums, latency p50 is the
//! median of the processes' p50 and p99 the highest p99. Every process runs
//! the same sequence of implementations with the same timings, so the
//! processes measure the same row at about the same time (setup such as key
//! generation can shift them a little, as with `openssl speed -multi`).

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use crate::bench::median;
use crate::report::{Ratio, Report, Row};

/// Options that take a value and must not reach the children.
const PARENT_ONLY_VALUE: [&str; 3] = ["--multi", "--chart", "--json-out"];
/// Flags that must not reach the children.
const PARENT_ONLY_FLAG: [&str; 1] = ["--json"];

/// The children's arguments: the parent's without `--multi`, `--chart`,
/// `--json-out` and `--json`, plus `--child`.
pub fn child_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip = false;
    for a in args {
        if skip {
            skip = false;
            continue;
        }
        let name = a.split('=').next().unwrap_or(a);
        if PARENT_ONLY_VALUE.contains(&name) {
            skip = !a.contains('=');
            continue;
        }
        if PARENT_ONLY_FLAG.contains(&a.as_str()) {
            continue;
        }
        out.push(a.clone());
    }
    out.push("--child".into());
    out
}

/// Runs `n` children of this executable with `args` (without the program
/// name) and returns their reports.
pub fn run_children(n: usize, args: &[String]) -> Result<Vec<Report>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("locating cfspeed: {e}"))?;
    let child_args = child_args(args);
    let children: Vec<_> = (0..n)
        .map(|_| {
            Command::new(&exe)
                .args(&child_args)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| format!("starting {}: {e}", exe.display()))
        })
        .collect::<Result<_, _>>()?;
    let mut reports = Vec::new();
    let mut failed = Vec::new();
    for (i, c) in children.into_iter().enumerate() {
        let out = c
            .wait_with_output()
            .map_err(|e| format!("waiting for process {}: {e}", i + 1))?;
        match serde_json::from_slice::<Report>(&out.stdout) {
            Ok(r) => reports.push(r),
            Err(e) => failed.push(format!(
                "process {} ({}): no report ({e})",
                i + 1,
                out.status
            )),
        }
    }
    if !failed.is_empty() {
        return Err(failed.join("; "));
    }
    Ok(reports)
}

type Key = (String, Option<usize>, String, usize);

fn key(r: &Row) -> Key {
    (
        r.mechanism.clone(),
        r.size,
        r.implementation.clone(),
        r.threads,
    )
}

/// Adds up the children's reports into one (rows present in every child).
pub fn merge(mut reports: Vec<Report>) -> Result<Report, String> {
    if reports.is_empty() {
        return Err("no process reported".into());
    }
    let n = reports.len();
    let mut by_key: BTreeMap<Key, Vec<Row>> = BTreeMap::new();
    for r in &reports {
        for row in &r.results {
            by_key.entry(key(row)).or_default().push(row.clone());
        }
    }
    let mut base = reports.remove(0);
    let mut notes = base.notes.clone();
    for r in &reports {
        for note in &r.notes {
            if !notes.contains(note) {
                notes.push(note.clone());
            }
        }
    }
    let mut results = Vec::new();
    for row in &base.results {
        let rows = &by_key[&key(row)];
        if rows.len() != n {
            notes.push(format!(
                "{} {:?} {}: only {} of {n} processes measured it; left out",
                row.mechanism,
                row.size,
                row.implementation,
                rows.len()
            ));
            continue;
        }
        let sum = |f: &dyn Fn(&Row) -> f64| rows.iter().map(f).sum::<f64>();
        let opt_vals =
            |f: &dyn Fn(&Row) -> Option<f64>| rows.iter().filter_map(f).collect::<Vec<f64>>();
        let p50 = opt_vals(&|r| r.p50_us);
        let p99 = opt_vals(&|r| r.p99_us);
        let per_process: Vec<f64> = rows.iter().map(|r| r.ops_per_s).collect();
        let cpu = sum(&|r| r.cpu_percent);
        let ops = sum(&|r| r.ops_per_s);
        results.push(Row {
            ops_per_s: ops,
            mb_per_s: row.mb_per_s.map(|_| sum(&|r| r.mb_per_s.unwrap_or(0.0))),
            p50_us: (!p50.is_empty()).then(|| median(&p50)),
            p99_us: p99.iter().copied().reduce(f64::max),
            cpu_percent: cpu,
            cpu_user_percent: sum(&|r| r.cpu_user_percent),
            cpu_sys_percent: sum(&|r| r.cpu_sys_percent),
            ops_per_cpu_second: ops / (cpu / 100.0).max(1e-9),
            runs_ops_per_s: Vec::new(),
            processes: n,
            per_process_ops_per_s: per_process,
            ..row.clone()
        });
    }
    // Ratios between the summed rows.
    let find = |m: &str, s: Option<usize>, imp: &str, t: usize| {
        results
            .iter()
            .find(|r| r.mechanism == m && r.size == s && r.implementation == imp && r.threads == t)
            .map(|r| r.ops_per_s)
    };
    let ratios: Vec<Ratio> = base
        .ratios
        .iter()
        .filter_map(|q| {
            let (a, b) = q.name.split_once('/')?;
            let (x, y) = (
                find(&q.mechanism, q.size, a, q.threads)?,
                find(&q.mechanism, q.size, b, q.threads)?,
            );
            Some(Ratio {
                value: x / y,
                ..q.clone()
            })
        })
        .collect();
    base.results = results;
    base.ratios = ratios;
    base.notes = notes;
    base.processes = n;
    Ok(base)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::row;
    use crate::report::Machine;

    fn report(ours: f64, native: f64) -> Report {
        Report {
            command: "cfspeed --child".into(),
            machine: Machine::detect(),
            openssl: String::new(),
            modules: vec![],
            seconds: 0.2,
            runs: 1,
            processes: 1,
            results: vec![
                row("CKM_SHA256", Some(1024), "ours", ours),
                row("CKM_SHA256", Some(1024), "native", native),
                row("CKM_ECDSA:P-256", None, "ours", ours),
            ],
            ratios: vec![Ratio {
                mechanism: "CKM_SHA256".into(),
                size: Some(1024),
                threads: 1,
                name: "ours/native".into(),
                value: ours / native,
            }],
            break_even: vec![],
            asynchronous: vec![],
            notes: vec!["a".into()],
        }
    }

    #[test]
    fn sums_processes() {
        let m = merge(vec![report(100.0, 400.0), report(300.0, 400.0)]).unwrap();
        assert_eq!(m.processes, 2);
        assert_eq!(m.results.len(), 3);
        let r = &m.results[0];
        assert_eq!(r.ops_per_s, 400.0);
        assert_eq!(r.per_process_ops_per_s, vec![100.0, 300.0]);
        assert!((r.mb_per_s.unwrap() - 0.4096).abs() < 1e-12);
        assert_eq!(r.cpu_user_percent, 90.0);
        assert_eq!(r.processes, 2);
        assert_eq!(m.ratios[0].value, 0.5);
        assert_eq!(m.results[2].p99_us, Some(20.0));
        assert_eq!(m.notes, vec!["a".to_string()]);
        assert!(merge(vec![]).is_err());
    }

    #[test]
    fn child_arguments() {
        let a: Vec<String> = [
            "CKM_SHA256",
            "--multi",
            "2",
            "--json",
            "--chart=x.svg",
            "--json-out",
            "o.json",
            "--seconds",
            "0.2",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            child_args(&a),
            vec!["CKM_SHA256", "--seconds", "0.2", "--child"]
        );
    }
}
