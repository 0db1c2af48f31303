#!/usr/bin/env bash
# Measures the framework's overhead (scripts/bench.sh --framework, 16-byte AES-GCM) over
# several link layouts of libopencf.so: for each LEAD, the hot code of
# crates/opencf/hot-text.ld starts LEAD bytes into its page instead of the tree's lead, the
# workspace is built, the libraries are copied to a directory of their own and measured with
# the softtoken-only and the zero configuration. The tree's hot-text.ld is restored (and the
# workspace rebuilt) at the end. docs/PERFORMANCE.md, "Link layout".
#
# Usage: scripts/bench-layout.sh LEAD...      e.g. scripts/bench-layout.sh 0 1024 2672 3584
# Environment: RUNS (default 9), SECONDS_PER_RUN (default 0.3), KEEP=DIR (keep the libraries
# of each layout in DIR/lead-LEAD)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LD="$ROOT/crates/opencf/hot-text.ld"
[ $# -gt 0 ] || { echo "usage: $0 LEAD..." >&2; exit 2; }
for lead in "$@"; do
    [[ "$lead" =~ ^[0-9]+$ ]] || { echo "bench-layout: LEAD $lead is not a number of bytes" >&2; exit 2; }
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/opencf-layout.XXXXXX")"
cp "$LD" "$WORK/hot-text.ld"
restore() {
    cp "$WORK/hot-text.ld" "$LD"
    (cd "$ROOT" && cargo build --release --workspace >/dev/null 2>&1) || true
    rm -rf "$WORK"
}
trap restore EXIT

ratio() {
    "$ROOT/scripts/bench.sh" --framework CKM_AES_GCM --sizes 16 --runs "${RUNS:-9}" \
        --seconds "${SECONDS_PER_RUN:-0.3}" 2>&1 | awk '/ratios, 1 thr/ { print $NF }'
}

echo "# lead  softtoken-only  zero-config   (16-byte AES-GCM, slot 0 / softtoken alone)"
for lead in "$@"; do
    # The tree's lead line (if any) replaced by this one.
    python3 - "$WORK/hot-text.ld" "$LD" "$lead" <<'PY'
import re, sys
src, dst, lead = sys.argv[1:]
s = open(src).read()
s = re.sub(r"    /\* Lead:[^\n]*\n    \. \+= \d+;\n", "", s)
s = re.sub(r"  \.text\.opencf_hot[^\n]*:\n  \{\n",
           "  .text.opencf_hot ALIGN(0x1000) :\n  {\n    . += %d;\n" % int(lead), s, count=1)
open(dst, "w").write(s)
PY
    (cd "$ROOT" && cargo build --release --workspace >/dev/null 2>&1) ||
        { echo "bench-layout: build failed for lead $lead" >&2; exit 1; }
    dir="${KEEP:-$WORK}/lead-$lead"
    mkdir -p "$dir"
    cp "$ROOT"/target/release/lib*.so "$dir/"
    only="$(FRAMEWORK="$dir/libopencf.so" MODULE="$dir/libopencf_softtoken.so" ratio)"
    zero="$(ZERO_CONFIG=1 FRAMEWORK="$dir/libopencf.so" MODULE="$dir/libopencf_softtoken.so" ratio)"
    printf '%6s  %14s  %11s\n' "$lead" "$only" "$zero"
done
