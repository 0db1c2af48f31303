//! `--chart FILE.svg`: the results drawn as SVG, written by hand.
//!
//! Bulk mechanisms get one line chart each: x is the input size on a log2
//! axis, y is MB/s, one polyline per implementation (and thread count) with
//! a legend. Public-key and other unsized rows share one horizontal bar
//! chart of ops/s.

use std::fmt::Write;

use crate::report::Row;

const WIDTH: f64 = 960.0;
const LEFT: f64 = 80.0;
const LEGEND: f64 = 200.0;
const LINE_HEIGHT: f64 = 380.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const BAR: f64 = 20.0;
const BAR_LABEL: f64 = 300.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// Escapes text for XML.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The series name of a row: the implementation, with its thread count
/// when above one.
fn series(r: &Row) -> String {
    if r.threads > 1 {
        format!("{} ×{} thr", r.implementation, r.threads)
    } else {
        r.implementation.clone()
    }
}

/// A round tick step giving about `n` ticks up to `max`.
fn tick_step(max: f64, n: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / n;
    let p = 10f64.powf(raw.log10().floor());
    let f = raw / p;
    let m = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * p
}

fn number(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if v >= 100.0 || v == v.round() {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn size_label(b: usize) -> String {
    if b >= 1024 && b % 1024 == 0 {
        format!("{}k", b / 1024)
    } else {
        b.to_string()
    }
}

/// The SVG document for `rows`.
pub fn svg(title: &str, rows: &[Row]) -> String {
    // Colors by implementation, the same in every panel.
    let mut names: Vec<String> = Vec::new();
    for r in rows {
        let s = series(r);
        if !names.contains(&s) {
            names.push(s);
        }
    }
    let color = |s: &str| {
        let i = names.iter().position(|n| n == s).unwrap_or(0);
        COLORS[i % COLORS.len()]
    };
    let mut mechs: Vec<&str> = Vec::new();
    for r in rows.iter().filter(|r| r.size.is_some()) {
        if !mechs.contains(&r.mechanism.as_str()) {
            mechs.push(&r.mechanism);
        }
    }
    let bars: Vec<&Row> = rows.iter().filter(|r| r.size.is_none()).collect();
    let bar_height = if bars.is_empty() {
        0.0
    } else {
        TOP + BOTTOM + bars.len() as f64 * (BAR + 6.0)
    };
    let height = 30.0 + mechs.len() as f64 * LINE_HEIGHT + bar_height;

    // A long command line would run off the page.
    let title: String = if title.chars().count() > 140 {
        title.chars().take(139).chain(['…']).collect()
    } else {
        title.to_string()
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="20" text-anchor="middle" font-size="14">{}</text>"#,
        WIDTH / 2.0,
        esc(&title)
    );
    let mut y0 = 30.0;
    for mech in &mechs {
        line_panel(&mut out, mech, rows, y0, &color);
        y0 += LINE_HEIGHT;
    }
    if !bars.is_empty() {
        bar_panel(&mut out, &bars, y0, &color);
    }
    out.push_str("</svg>\n");
    out
}

/// One MB/s-over-size chart for `mech`, its top at `y0`.
fn line_panel(
    out: &mut String,
    mech: &str,
    rows: &[Row],
    y0: f64,
    color: &dyn Fn(&str) -> &'static str,
) {
    let rows: Vec<&Row> = rows
        .iter()
        .filter(|r| r.mechanism == mech && r.size.is_some() && r.mb_per_s.is_some())
        .collect();
    let (px0, px1) = (LEFT, WIDTH - LEGEND);
    let (py0, py1) = (y0 + TOP, y0 + LINE_HEIGHT - BOTTOM);
    let sizes: Vec<usize> = rows.iter().filter_map(|r| r.size).collect();
    let mut lo = sizes.iter().copied().min().unwrap_or(16).max(1) as f64;
    let mut hi = sizes.iter().copied().max().unwrap_or(16).max(1) as f64;
    if hi <= lo {
        lo /= 2.0;
        hi *= 2.0;
    }
    let (l0, l1) = (lo.log2(), hi.log2());
    let ymax_data = rows
        .iter()
        .filter_map(|r| r.mb_per_s)
        .fold(0.0f64, f64::max);
    let step = tick_step(ymax_data * 1.05, 5.0);
    let ymax = ((ymax_data * 1.05) / step).ceil().max(1.0) * step;
    let x = |s: f64| px0 + (s.log2() - l0) / (l1 - l0) * (px1 - px0);
    let y = |v: f64| py1 - v / ymax * (py1 - py0);

    let _ = writeln!(
        out,
        r#"<g class="panel" data-mechanism="{m}">
<text x="{}" y="{}" text-anchor="middle" font-size="13">{m} — MB/s by input size</text>
<line x1="{px0}" y1="{py1}" x2="{px1}" y2="{py1}" stroke="black"/>
<line x1="{px0}" y1="{py0}" x2="{px0}" y2="{py1}" stroke="black"/>
<text x="{}" y="{}" text-anchor="middle">input size (bytes, log2 scale)</text>
<text x="{}" y="{}" text-anchor="middle" transform="rotate(-90 {} {})">MB/s</text>"#,
        (px0 + px1) / 2.0,
        y0 + 22.0,
        (px0 + px1) / 2.0,
        py1 + 38.0,
        px0 - 55.0,
        (py0 + py1) / 2.0,
        px0 - 55.0,
        (py0 + py1) / 2.0,
        m = esc(mech)
    );
    // x ticks: every power of two in range (every other one when crowded).
    let (e0, e1) = (l0.ceil() as i32, l1.floor() as i32);
    let every = if e1 - e0 > 12 { 2 } else { 1 };
    for e in (e0..=e1).step_by(every) {
        let s = 2f64.powi(e);
        let _ = writeln!(
            out,
            r##"<line x1="{xx}" y1="{py1}" x2="{xx}" y2="{}" stroke="black"/><text x="{xx}" y="{}" text-anchor="middle">{}</text>"##,
            py1 + 5.0,
            py1 + 18.0,
            size_label(s as usize),
            xx = x(s)
        );
    }
    let mut v = 0.0;
    while v <= ymax + step * 0.01 {
        let yy = y(v);
        // The grid line at 0 would hide the axis.
        let grid = if v > 0.0 { "#ddd" } else { "black" };
        let _ = writeln!(
            out,
            r##"<line x1="{}" y1="{yy}" x2="{px1}" y2="{yy}" stroke="{grid}"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
            px0,
            px0 - 6.0,
            yy + 4.0,
            number(v)
        );
        v += step;
    }
    let mut names: Vec<String> = Vec::new();
    for r in &rows {
        let s = series(r);
        if !names.contains(&s) {
            names.push(s);
        }
    }
    for (i, name) in names.iter().enumerate() {
        let mut pts: Vec<(usize, f64)> = rows
            .iter()
            .filter(|r| &series(r) == name)
            .filter_map(|r| Some((r.size?, r.mb_per_s?)))
            .collect();
        pts.sort_by_key(|p| p.0);
        let c = color(name);
        let coords: Vec<String> = pts
            .iter()
            .map(|&(s, v)| format!("{:.1},{:.1}", x(s as f64), y(v)))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline data-series="{n}" fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#,
            coords.join(" "),
            n = esc(name)
        );
        for &(s, v) in &pts {
            let _ = writeln!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"><title>{} {} bytes: {:.2} MB/s</title></circle>"#,
                x(s as f64),
                y(v),
                esc(name),
                s,
                v
            );
        }
        let ly = py0 + 10.0 + i as f64 * 20.0;
        let _ = writeln!(
            out,
            r#"<g class="legend"><line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="3"/><text x="{}" y="{}">{}</text></g>"#,
            px1 + 15.0,
            px1 + 40.0,
            px1 + 46.0,
            ly + 4.0,
            esc(name)
        );
    }
    out.push_str("</g>\n");
}

/// One horizontal bar chart of ops/s for unsized rows, its top at `y0`.
fn bar_panel(out: &mut String, rows: &[&Row], y0: f64, color: &dyn Fn(&str) -> &'static str) {
    let (px0, px1) = (BAR_LABEL, WIDTH - LEGEND);
    let py0 = y0 + TOP;
    let py1 = py0 + rows.len() as f64 * (BAR + 6.0);
    let max = rows.iter().map(|r| r.ops_per_s).fold(0.0f64, f64::max);
    let step = tick_step(max * 1.05, 5.0);
    let xmax = ((max * 1.05) / step).ceil().max(1.0) * step;
    let x = |v: f64| px0 + v / xmax * (px1 - px0);
    let _ = writeln!(
        out,
        r#"<g class="panel" data-kind="bars">
<text x="{}" y="{}" text-anchor="middle" font-size="13">operations per second</text>
<line x1="{px0}" y1="{py1}" x2="{px1}" y2="{py1}" stroke="black"/>
<line x1="{px0}" y1="{py0}" x2="{px0}" y2="{py1}" stroke="black"/>
<text x="{}" y="{}" text-anchor="middle">ops/s</text>"#,
        (px0 + px1) / 2.0,
        y0 + 22.0,
        (px0 + px1) / 2.0,
        py1 + 38.0
    );
    let mut v = 0.0;
    while v <= xmax + step * 0.01 {
        let xx = x(v);
        let grid = if v > 0.0 { "#ddd" } else { "black" };
        let _ = writeln!(
            out,
            r##"<line x1="{xx}" y1="{py0}" x2="{xx}" y2="{py1}" stroke="{grid}"/><text x="{xx}" y="{}" text-anchor="middle">{}</text>"##,
            py1 + 18.0,
            number(v)
        );
        v += step;
    }
    let mut legend: Vec<String> = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let name = series(r);
        let c = color(&name);
        let by = py0 + 3.0 + i as f64 * (BAR + 6.0);
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="end">{} — {}</text><rect data-series="{n}" x="{px0}" y="{by}" width="{:.1}" height="{BAR}" fill="{c}"><title>{:.0} ops/s</title></rect><text x="{}" y="{}">{}</text>"#,
            px0 - 6.0,
            by + BAR * 0.7,
            esc(&r.mechanism),
            esc(&name),
            (x(r.ops_per_s) - px0).max(0.5),
            r.ops_per_s,
            x(r.ops_per_s) + 4.0,
            by + BAR * 0.7,
            number(r.ops_per_s),
            n = esc(&name)
        );
        if !legend.contains(&name) {
            legend.push(name);
        }
    }
    for (i, name) in legend.iter().enumerate() {
        let ly = py0 + 10.0 + i as f64 * 20.0;
        let _ = writeln!(
            out,
            r#"<g class="legend"><rect x="{}" y="{}" width="20" height="10" fill="{}"/><text x="{}" y="{}">{}</text></g>"#,
            px1 + 15.0,
            ly - 5.0,
            color(name),
            px1 + 46.0,
            ly + 4.0,
            esc(name)
        );
    }
    out.push_str("</g>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::row;

    /// A minimal XML check: every tag opened is closed in order.
    fn well_formed(doc: &str) -> bool {
        let mut stack: Vec<String> = Vec::new();
        let mut rest = doc;
        while let Some(i) = rest.find('<') {
            rest = &rest[i + 1..];
            let end = rest.find('>').unwrap();
            let tag = &rest[..end];
            rest = &rest[end + 1..];
            if tag.starts_with('?') || tag.starts_with('!') {
                continue;
            }
            if let Some(name) = tag.strip_prefix('/') {
                if stack.pop().as_deref() != Some(name.trim()) {
                    return false;
                }
            } else if !tag.ends_with('/') {
                stack.push(tag.split_whitespace().next().unwrap().to_string());
            }
        }
        stack.is_empty()
    }

    #[test]
    fn lines_and_bars() {
        let mut rows = Vec::new();
        for (imp, f) in [("ours", 1.0), ("native", 2.0), ("softhsm2 <&>", 0.5)] {
            for s in [16, 1024, 16384] {
                rows.push(row("CKM_AES_GCM", Some(s), imp, f * s as f64 * 1000.0));
            }
        }
        rows.push(row("CKM_ECDSA:P-256", None, "ours", 30000.0));
        rows.push(row("CKM_ECDSA:P-256", None, "native", 40000.0));
        let doc = svg("cfspeed test", &rows);
        assert!(well_formed(&doc), "{doc}");
        assert_eq!(doc.matches("<polyline").count(), 3);
        for n in ["ours", "native", "softhsm2 &lt;&amp;&gt;"] {
            assert!(
                doc.contains(&format!("<polyline data-series=\"{n}\"")),
                "{n}"
            );
            assert!(doc.contains(&format!(">{n}</text></g>")), "legend {n}");
        }
        assert_eq!(doc.matches("<rect data-series").count(), 2);
        assert!(doc.contains("log2"));
        assert!(doc.contains(">16k</text>"));
    }

    #[test]
    fn one_size_and_no_rows() {
        let rows = vec![row("CKM_SHA256", Some(1024), "ours", 5.0)];
        let doc = svg("t", &rows);
        assert!(well_formed(&doc));
        assert_eq!(doc.matches("<polyline").count(), 1);
        assert!(well_formed(&svg("t", &[])));
    }

    #[test]
    fn ticks() {
        assert_eq!(tick_step(1000.0, 5.0), 200.0);
        assert_eq!(tick_step(7.0, 5.0), 2.0);
        assert_eq!(tick_step(0.0, 5.0), 1.0);
    }
}
