#!/usr/bin/env bash
# Fuzzes the softtoken's template handling (fuzz/fuzz_targets/template.rs).
#
#   tests/fuzz.sh [SECONDS]     (default 60)
#
# With a nightly toolchain and cargo-fuzz (installed with `cargo install
# cargo-fuzz` when missing), runs libFuzzer for SECONDS over the seeds in
# fuzz/seeds/template plus the growing corpus in fuzz/corpus/template;
# crashes land in fuzz/artifacts/template/. Otherwise runs the stable driver
# (tests/pkcs11-tests/tests/fuzz_template.rs: seeds plus a seeded
# pseudo-random stream). FUZZ_MODE=stable forces the stable driver.
# The first line of output says which mode ran.
set -euo pipefail

secs="${1:-60}"
case "$secs" in
    '' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;;
esac
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$HOME/.cargo/bin:$PATH"
cargo="${CARGO:-cargo}"

have_nightly() { "$cargo" +nightly --version >/dev/null 2>&1; }
have_fuzz() { "$cargo" +nightly fuzz --version >/dev/null 2>&1; }

mode=stable
if [ "${FUZZ_MODE:-}" != stable ] && have_nightly; then
    if ! have_fuzz; then
        echo "fuzz.sh: cargo-fuzz missing, installing it (cargo install cargo-fuzz)" >&2
        "$cargo" install --locked cargo-fuzz >&2 || "$cargo" install cargo-fuzz >&2 ||
            echo "fuzz.sh: cargo-fuzz install failed, using the stable driver" >&2
    fi
    if have_fuzz; then mode=libfuzzer; fi
fi

if [ "$mode" = libfuzzer ]; then
    echo "fuzz.sh: mode libfuzzer (cargo +nightly fuzz run template, ${secs}s)"
    cd "$root/fuzz"
    mkdir -p corpus/template
    # The first corpus directory receives the new inputs; the seeds stay as they are.
    exec "$cargo" +nightly fuzz run template corpus/template seeds/template -- \
        -max_total_time="$secs" -print_final_stats=1 ${FUZZ_ARGS:-}
else
    # The stable driver runs a fixed number of inputs; scale it with SECONDS
    # (about 200k inputs per minute is well under the time on a small machine).
    iters="${FUZZ_ITERS:-$(( secs * 200000 / 60 ))}"
    echo "fuzz.sh: mode stable (stable driver, FUZZ_ITERS=$iters)"
    cd "$root"
    FUZZ_ITERS="$iters" exec "$cargo" test --release -p pkcs11-tests --test fuzz_template -- --nocapture
fi
