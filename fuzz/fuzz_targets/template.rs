//! libFuzzer target: arbitrary attribute templates through the softtoken's
//! template decoding, policy checks and key completion (see
//! `fuzz/src/template.rs` for the input format). Property: no panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../src/template.rs"]
mod harness;

fuzz_target!(|data: &[u8]| {
    harness::run(data);
});
