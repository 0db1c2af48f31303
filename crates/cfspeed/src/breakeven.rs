//! `--break-even`: the input size from which the measured module is faster
//! than a baseline, i.e. the `min_bytes` an offload provider should get.
//!
//! Method: the module and the baseline are measured at every size of a sweep
//! (powers of two from 16 bytes to 64 KiB unless `--sizes` is given), run
//! by run interleaved; at each size the ratio is the median over rounds of
//! (module ops/s ÷ baseline ops/s). Offloading pays where the ratio is above
//! 1: the per-call overhead of an accelerator (submission, completion,
//! copies) is fixed while its throughput advantage grows with the size. The
//! threshold is the smallest swept size from which the ratio stays above 1
//! at every larger size, so a noisy single point below the crossing does not
//! give a threshold that is too low. Between the last size where the module
//! loses and that size, the crossing is also estimated by linear
//! interpolation of the ratio over log2(size), for information; the
//! recommended `min_bytes` is the measured size (the conservative choice).

use serde::{Deserialize, Serialize};

/// One point of the sweep.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Input bytes.
    pub size: usize,
    /// Module ops/s divided by baseline ops/s (median over rounds).
    pub ratio: f64,
}

/// The outcome of a sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BreakEven {
    /// Mechanism.
    pub mechanism: String,
    /// The module measured (`ours`).
    pub module: String,
    /// The baseline it is compared with.
    pub versus: String,
    /// The sweep, by size.
    pub points: Vec<Point>,
    /// The smallest swept size from which the module is faster at every
    /// larger swept size; `None` when it is not faster at the largest.
    pub min_bytes: Option<usize>,
    /// The module is faster at every swept size (no threshold needed).
    pub faster_everywhere: bool,
    /// Interpolated size where the ratio crosses 1, when it does.
    pub crossing_estimate: Option<f64>,
}

/// Finds the break-even size in `points` (any order).
pub fn find(mechanism: &str, module: &str, versus: &str, points: &[Point]) -> BreakEven {
    let mut pts: Vec<Point> = points
        .iter()
        .copied()
        .filter(|p| p.ratio.is_finite())
        .collect();
    pts.sort_by_key(|p| p.size);
    // Walk down from the largest size while the module stays faster.
    let mut first = pts.len();
    while first > 0 && pts[first - 1].ratio > 1.0 {
        first -= 1;
    }
    let min_bytes = (first < pts.len()).then(|| pts[first].size);
    let crossing_estimate = (first > 0 && first < pts.len()).then(|| {
        let (a, b) = (pts[first - 1], pts[first]);
        let (la, lb) = ((a.size as f64).log2(), (b.size as f64).log2());
        let t = ((1.0 - a.ratio) / (b.ratio - a.ratio)).clamp(0.0, 1.0);
        (la + t * (lb - la)).exp2()
    });
    BreakEven {
        mechanism: mechanism.to_string(),
        module: module.to_string(),
        versus: versus.to_string(),
        faster_everywhere: first == 0 && !pts.is_empty(),
        points: pts,
        min_bytes,
        crossing_estimate,
    }
}

/// The text printed after the sweep: the points, the verdict, and the
/// configuration lines.
pub fn render(b: &BreakEven) -> String {
    let mut s = format!(
        "\nbreak-even, {}: {} vs {} (ratio = {} ops/s ÷ {} ops/s)\n",
        b.mechanism, b.module, b.versus, b.module, b.versus
    );
    s.push_str("  bytes      ratio\n");
    for p in &b.points {
        let mark = if p.ratio > 1.0 { "  faster" } else { "" };
        s.push_str(&format!("  {:<10} {:>5.2}{mark}\n", p.size, p.ratio));
    }
    let mech = b.mechanism.split(':').next().unwrap_or(&b.mechanism);
    match (b.min_bytes, b.faster_everywhere) {
        (None, _) => s.push_str(&format!(
            "  {} is not faster than {} at the largest size measured: no offload threshold \
             pays off here (leave the mechanism to {}, or measure larger sizes)\n",
            b.module, b.versus, b.versus
        )),
        (Some(n), true) => s.push_str(&format!(
            "  {} is faster at every size measured (from {n} bytes): no threshold needed\n\
             [provider.policy.{mech}]\nmin_bytes = 0\n",
            b.module
        )),
        (Some(n), false) => {
            if let Some(x) = b.crossing_estimate {
                s.push_str(&format!(
                    "  the ratio crosses 1 near {x:.0} bytes (interpolated)\n"
                ));
            }
            s.push_str(&format!(
                "  {} is faster from {n} bytes on; in the provider's section of opencf.toml:\n\
                 [provider.policy.{mech}]\nmin_bytes = {n}\n",
                b.module
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pts(v: &[(usize, f64)]) -> Vec<Point> {
        v.iter()
            .map(|&(size, ratio)| Point { size, ratio })
            .collect()
    }

    #[test]
    fn crossing_in_the_middle() {
        let b = find(
            "CKM_AES_GCM",
            "ours",
            "native",
            &pts(&[
                (16, 0.2),
                (4096, 1.5),
                (256, 0.6),
                (1024, 0.9),
                (16384, 3.0),
            ]),
        );
        assert_eq!(b.min_bytes, Some(4096));
        assert!(!b.faster_everywhere);
        let x = b.crossing_estimate.unwrap();
        assert!(x > 1024.0 && x < 4096.0, "{x}");
        // 0.9 → 1.5 over log2 10 → 12: crosses a sixth of the way.
        assert!((x.log2() - (10.0 + 2.0 / 6.0)).abs() < 1e-9);
        let text = render(&b);
        assert!(
            text.contains("[provider.policy.CKM_AES_GCM]\nmin_bytes = 4096\n"),
            "{text}"
        );
    }

    #[test]
    fn a_noisy_point_above_one_below_the_crossing_is_ignored() {
        let b = find(
            "CKM_AES_GCM",
            "ours",
            "native",
            &pts(&[(16, 1.1), (64, 0.8), (256, 0.95), (1024, 1.2), (4096, 2.0)]),
        );
        assert_eq!(b.min_bytes, Some(1024));
    }

    #[test]
    fn never_and_always() {
        let never = find(
            "CKM_AES_CTR",
            "ours",
            "native",
            &pts(&[(16, 0.5), (64, 0.9), (256, 0.99)]),
        );
        assert_eq!(never.min_bytes, None);
        assert!(render(&never).contains("not faster"));
        let always = find(
            "CKM_AES_CTR",
            "ours",
            "native",
            &pts(&[(16, 1.5), (64, 2.0)]),
        );
        assert_eq!(always.min_bytes, Some(16));
        assert!(always.faster_everywhere);
        assert_eq!(always.crossing_estimate, None);
        assert!(render(&always).contains("min_bytes = 0"));
        let empty = find("CKM_AES_CTR", "ours", "native", &[]);
        assert_eq!(empty.min_bytes, None);
        assert!(!empty.faster_everywhere);
        // A NaN (a failed size) is left out.
        let nan = find("X", "a", "b", &pts(&[(16, f64::NAN), (64, 2.0)]));
        assert_eq!(nan.points.len(), 1);
    }
}
