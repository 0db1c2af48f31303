//! The segment layout, shared by the writer and the reader. Everything is a `u64` cell
//! (native byte order, naturally aligned); see docs/STAT.md.

use std::sync::atomic::{AtomicU64, Ordering};

/// "OCFSTAT1" as a little-endian number.
pub const MAGIC: u64 = u64::from_le_bytes(*b"OCFSTAT1");
pub const VERSION: u64 = 1;

// Header cells.
pub const H_MAGIC: usize = 0;
pub const H_VERSION: usize = 1;
pub const H_PID: usize = 2;
pub const H_START: usize = 3;
pub const H_MECH_CAP: usize = 4;
pub const H_MECH_CELLS: usize = 5;
pub const H_MECH_USED: usize = 6;
pub const H_NAMED_CAP: usize = 7;
pub const H_NAMED_CELLS: usize = 8;
pub const H_NAMED_USED: usize = 9;
pub const H_BUCKETS: usize = 10;
pub const HEADER_CELLS: usize = 16;

/// Mechanism entries per segment; the last one is the "other" entry.
pub const MECH_CAP: usize = 256;
/// Named counters per segment; the last one is the "other" entry.
pub const NAMED_CAP: usize = 128;

/// Latency histogram buckets: bucket 0 counts latencies below 128 ns, bucket `i` (1..=30)
/// those in `[2^(i+6), 2^(i+7))` ns, bucket 31 those of 2^37 ns (about 137 s) and more.
pub const HIST_BUCKETS: usize = 32;
/// log2 of the upper bound of bucket 0.
pub const HIST_SHIFT: u32 = 7;

// Mechanism entry cells. The counters one operation touches share the first cache line.
pub const M_OPS: usize = 0;
pub const M_BYTES: usize = 1;
pub const M_LAT_SUM: usize = 2;
pub const M_ERRORS: usize = 3;
pub const M_FALLBACKS: usize = 4;
pub const M_BUSY: usize = 5;
pub const M_MECH: usize = 6;
pub const M_NAME: usize = 8;
pub const M_HIST: usize = 12;
pub const MECH_CELLS: usize = 48;

// Named entry cells.
pub const N_COMPONENT: usize = 0;
pub const N_NAME: usize = 4;
pub const N_KIND: usize = 8;
pub const N_VALUE: usize = 9;
pub const NAMED_CELLS: usize = 12;

pub const KIND_COUNTER: u64 = 1;
pub const KIND_GAUGE: u64 = 2;

/// Longest stored name, in bytes (provider, component or counter name).
pub const NAME_MAX: usize = 32;
pub const NAME_CELLS: usize = NAME_MAX / 8;

/// Mechanism number of the "other" entry (`CK_UNAVAILABLE_INFORMATION`).
pub const OTHER_MECH: u64 = u64::MAX;
pub const OTHER_NAME: &str = "other";

pub const MECH_BASE: usize = HEADER_CELLS;
pub const NAMED_BASE: usize = MECH_BASE + MECH_CAP * MECH_CELLS;
pub const TOTAL_CELLS: usize = NAMED_BASE + NAMED_CAP * NAMED_CELLS;

/// Histogram bucket of a latency: one `lzcnt` and two comparisons.
#[inline]
pub fn bucket(latency_ns: u64) -> usize {
    let bits = 64 - latency_ns.leading_zeros();
    (bits.saturating_sub(HIST_SHIFT) as usize).min(HIST_BUCKETS - 1)
}

/// Lower bound of bucket `i`, in nanoseconds.
pub fn bucket_low_ns(i: usize) -> u64 {
    if i == 0 {
        0
    } else {
        1u64 << (i as u32 + HIST_SHIFT - 1)
    }
}

/// Upper bound (exclusive) of bucket `i`, in nanoseconds; `None` for the last, open bucket.
pub fn bucket_high_ns(i: usize) -> Option<u64> {
    (i + 1 < HIST_BUCKETS).then(|| 1u64 << (i as u32 + HIST_SHIFT))
}

/// The longest prefix of `s` that fits in [`NAME_MAX`] bytes without splitting a character.
pub fn truncate_name(s: &str) -> &str {
    if s.len() <= NAME_MAX {
        return s;
    }
    let mut end = NAME_MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Stores a (truncated) name, zero-padded, into [`NAME_CELLS`] cells.
pub fn store_name(cells: &[AtomicU64], s: &str) {
    let mut bytes = [0u8; NAME_MAX];
    let s = truncate_name(s);
    bytes[..s.len()].copy_from_slice(s.as_bytes());
    for (i, chunk) in bytes.chunks_exact(8).enumerate() {
        let v = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        cells[i].store(v, Ordering::Relaxed);
    }
}

/// Reads a name stored by [`store_name`].
pub fn load_name(cells: &[AtomicU64]) -> String {
    let mut bytes = Vec::with_capacity(NAME_MAX);
    for c in &cells[..NAME_CELLS] {
        bytes.extend_from_slice(&c.load(Ordering::Relaxed).to_le_bytes());
    }
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// The start time of process `pid` (field 22 of `/proc/PID/stat`, clock ticks since boot);
/// `None` if there is no such process or it has exited and waits to be reaped (a zombie, whose
/// counters can no longer change).
pub fn process_start(pid: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may itself contain ") ".
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    if matches!(fields.next(), Some("Z" | "X" | "x")) {
        return None;
    }
    fields.nth(22 - 4)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(127), 0);
        assert_eq!(bucket(128), 1);
        assert_eq!(bucket(255), 1);
        assert_eq!(bucket(256), 2);
        assert_eq!(bucket(u64::MAX), HIST_BUCKETS - 1);
        for i in 0..HIST_BUCKETS {
            assert_eq!(bucket(bucket_low_ns(i)), i);
            if let Some(h) = bucket_high_ns(i) {
                assert_eq!(bucket(h - 1), i);
                assert_eq!(bucket(h), i + 1);
            }
        }
    }

    #[test]
    fn names() {
        let cells: Vec<AtomicU64> = (0..NAME_CELLS).map(|_| AtomicU64::new(0)).collect();
        store_name(&cells, "softtoken");
        assert_eq!(load_name(&cells), "softtoken");
        let long = "é".repeat(20);
        store_name(&cells, &long);
        assert_eq!(load_name(&cells), "é".repeat(16));
        assert!(process_start("self").is_some());
        assert!(process_start("0").is_none());
    }
}
