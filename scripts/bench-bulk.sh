#!/usr/bin/env bash
# One 64 MiB AES-GCM encryption through slot 0 (issue 6, point 3), read against what the
# machine's memory allows at the same moment.
#
# Usage: scripts/bench-bulk.sh [ROUNDS]        (default 6)
#
# Each round runs, back to back:
#   1. target/copy-ceiling 64 5 (scripts/copy-ceiling.c, built here): one 64 MiB buffer copied
#      into another by 1 and by every core, with ordinary and with non-temporal stores;
#   2. cfspeed on slot 0 of libopencf.so with the built-in default configuration (no
#      OPENCF_CONF, an empty XDG_CONFIG_HOME, a fresh keystore), CKM_AES_GCM of 67108864
#      bytes, --native, --vs-module libopencf_softtoken.so, --runs 3 --seconds 1;
# and prints one line: the copy rates (MB/s of the source), our and native's MB/s, and
# cfspeed's ratio ours/native. A bulk cipher cannot run faster than a copy of the same
# bytes, so the copy columns are the ceiling of that round (docs/PERFORMANCE.md, "A ceiling
# for the 64 MiB encryption").
#
# Environment: CFSPEED, FRAMEWORK, MODULE (defaults under target/release), CC (default cc).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS="${1:-6}"
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 [ROUNDS]" >&2; exit 2; }
CFSPEED="${CFSPEED:-$ROOT/target/release/cfspeed}"
FRAMEWORK="${FRAMEWORK:-$ROOT/target/release/libopencf.so}"
MODULE="${MODULE:-$ROOT/target/release/libopencf_softtoken.so}"
for f in "$CFSPEED" "$FRAMEWORK" "$MODULE" "$(dirname "$FRAMEWORK")/libopencf_accel.so"; do
    [ -e "$f" ] || { echo "bench-bulk: $f not found; run cargo build --release --workspace" >&2; exit 1; }
done
if [ -e /etc/opencf/opencf.toml ]; then
    echo "bench-bulk: /etc/opencf/opencf.toml exists; this measures the built-in default" >&2
    exit 1
fi
CEILING="$ROOT/target/copy-ceiling"
"${CC:-cc}" -O2 -pthread -o "$CEILING" "$ROOT/scripts/copy-ceiling.c"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/opencf-bench-bulk.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
unset OPENCF_CONF OPENCF_METASLOT_ENABLED OPENCF_METASLOT_KEYSTORE

echo "# $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "# copy: target/copy-ceiling 64 5; gcm: cfspeed --module $(basename "$FRAMEWORK") --slot 0 CKM_AES_GCM --sizes 67108864 --native --vs-module $(basename "$MODULE") --runs 3 --seconds 1 (built-in default configuration)"
printf '%-8s %10s %10s %10s %10s | %10s %10s %8s\n' time "store×1" "store×N" "stream×1" "stream×N" \
    "ours MB/s" "native" "ratio"
# rate MODE THREADS: MB/s from this round's copy-ceiling output; mbs WHO: MB/s of cfspeed's
# one-thread row.
rate() { awk -v m="$1" -v t="$2" '$1 == m && $2 == t { print $3 }' <<<"$copy"; }
mbs() { awk -v who="$1" '$1 == who && $2 == 1 { print $4 }' <<<"$out"; }
for i in $(seq "$ROUNDS"); do
    copy="$("$CEILING" 64 5)"
    dir="$WORK/round$i"
    mkdir -p "$dir/xdg" "$dir/softtoken"
    out="$(XDG_CONFIG_HOME="$dir/xdg" OPENCF_SOFTTOKEN_DIR="$dir/softtoken" "$CFSPEED" \
        --module "$FRAMEWORK" --slot 0 CKM_AES_GCM --sizes 67108864 --native \
        --vs-module "$MODULE" --runs 3 --seconds 1 2>&1)"
    ratio="$(sed -n 's/.*ratios, 1 thr: ours\/native \([0-9.]*\).*/\1/p' <<<"$out")"
    printf '%-8s %10s %10s %10s %10s | %10s %10s %8s\n' "$(date +%T)" \
        "$(rate store 1)" "$(rate store "$(nproc)")" "$(rate stream 1)" "$(rate stream "$(nproc)")" \
        "$(mbs ours)" "$(mbs native)" "${ratio:-?}"
done
