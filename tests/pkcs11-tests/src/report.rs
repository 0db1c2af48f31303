//! Per-file bookkeeping for vector runs: what each case expected, what the
//! module did, and the one-line summary the tests print.

use crate::wycheproof::{Case, Expect};
use std::collections::BTreeMap;
use std::fmt;

/// What running one case through the module gave.
#[derive(Debug)]
pub enum Outcome {
    /// The operation succeeded and its output was the expected one (or the
    /// signature / MAC verified).
    Ok,
    /// The operation succeeded but gave a different output than the vector
    /// states. Runners report this only where success itself was wrong or
    /// the output should have matched; where a different output is the
    /// rejection (e.g. a MAC over a modified tag) they report [`Outcome::Err`].
    Wrong(String),
    /// The module refused: a `CKR_*` error, or a verification failure.
    Err(String),
    /// The harness refused to turn the vector's encoding into the PKCS#11
    /// form (e.g. a DER ECDSA signature that is not strict DER); counts as a
    /// rejection of an invalid case.
    Encoding(String),
    /// PKCS#11 cannot express the case; counted under the reason.
    Skip(&'static str),
}

/// Counts for one vector file.
#[derive(Debug, Default)]
pub struct Tally {
    file: String,
    valid_total: usize,
    valid_passed: usize,
    invalid_total: usize,
    invalid_rejected: usize,
    rejected_by_encoding: usize,
    acceptable_ok: usize,
    acceptable_err: usize,
    skipped: BTreeMap<&'static str, usize>,
    failures: Vec<String>,
}

impl Tally {
    /// A fresh tally for `file`.
    pub fn new(file: &str) -> Self {
        Tally {
            file: file.to_string(),
            ..Default::default()
        }
    }

    /// Records the outcome of `case`.
    pub fn record(&mut self, case: &Case, outcome: Outcome) {
        if let Outcome::Skip(reason) = outcome {
            *self.skipped.entry(reason).or_default() += 1;
            return;
        }
        let id = format!("tcId {} ({})", case.tc_id, case.comment);
        match case.result {
            Expect::Valid => {
                self.valid_total += 1;
                match outcome {
                    Outcome::Ok => self.valid_passed += 1,
                    Outcome::Wrong(m) => self.fail(format!("{id}: valid, wrong output: {m}")),
                    Outcome::Err(m) => self.fail(format!("{id}: valid, failed: {m}")),
                    Outcome::Encoding(m) => {
                        self.fail(format!("{id}: valid, harness could not encode: {m}"))
                    }
                    Outcome::Skip(_) => unreachable!(),
                }
            }
            Expect::Invalid => {
                self.invalid_total += 1;
                match outcome {
                    Outcome::Err(_) => self.invalid_rejected += 1,
                    Outcome::Encoding(_) => {
                        self.invalid_rejected += 1;
                        self.rejected_by_encoding += 1;
                    }
                    Outcome::Ok => self.fail(format!("{id}: invalid, accepted")),
                    Outcome::Wrong(m) => {
                        self.fail(format!("{id}: invalid, accepted with an output: {m}"))
                    }
                    Outcome::Skip(_) => unreachable!(),
                }
            }
            Expect::Acceptable => match outcome {
                Outcome::Ok => self.acceptable_ok += 1,
                Outcome::Err(_) | Outcome::Encoding(_) => self.acceptable_err += 1,
                Outcome::Wrong(m) => self.fail(format!("{id}: acceptable, wrong output: {m}")),
                Outcome::Skip(_) => unreachable!(),
            },
        }
    }

    /// Records a failure that is not tied to one case (e.g. a group key the
    /// module refused although the group has valid cases).
    pub fn fail(&mut self, message: String) {
        self.failures.push(message);
    }

    /// Number of cases counted (all verdicts, skips included).
    pub fn cases(&self) -> usize {
        self.valid_total
            + self.invalid_total
            + self.acceptable_ok
            + self.acceptable_err
            + self.skipped.values().sum::<usize>()
    }

    /// The failures recorded so far.
    pub fn failures(&self) -> &[String] {
        &self.failures
    }

    /// Prints the summary line and up to `limit` failure lines.
    ///
    /// Written straight to the process's stderr, not through `eprintln!`, so
    /// the counts show even when the test harness captures test output.
    pub fn print(&self, limit: usize) {
        use std::fmt::Write as _;
        use std::io::Write as _;
        let mut text = format!("{self}\n");
        for f in self.failures.iter().take(limit) {
            let _ = writeln!(text, "  FAIL {f}");
        }
        if self.failures.len() > limit {
            let _ = writeln!(
                text,
                "  ... and {} more failures",
                self.failures.len() - limit
            );
        }
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} valid passed/{}, {} invalid rejected/{}",
            self.file,
            self.valid_passed,
            self.valid_total,
            self.invalid_rejected,
            self.invalid_total
        )?;
        if self.rejected_by_encoding > 0 {
            write!(f, " ({} rejected by encoding)", self.rejected_by_encoding)?;
        }
        write!(
            f,
            ", {} acceptable ({}/{})",
            self.acceptable_ok + self.acceptable_err,
            self.acceptable_ok,
            self.acceptable_err
        )?;
        let skipped: usize = self.skipped.values().sum();
        write!(f, ", {skipped} skipped")?;
        if skipped > 0 {
            let reasons: Vec<String> = self
                .skipped
                .iter()
                .map(|(r, n)| format!("{n}: {r}"))
                .collect();
            write!(f, " ({})", reasons.join("; "))?;
        }
        Ok(())
    }
}
