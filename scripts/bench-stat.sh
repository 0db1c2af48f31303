#!/usr/bin/env bash
# What counting for `cryptoadm stat` costs on the hot path (issue 5, point 3):
# cfspeed's 16-byte AES-GCM rate through slot 0 of libopencf.so with counting on and
# with OPENCF_STAT=off (counting removed from the hot path), in alternating runs of
# separate processes (the switch is read at C_Initialize), each the median of
# --runs timed runs; the summary is the median of the per-round ratios.
#
#   scripts/bench-stat.sh [ROUNDS]      # default 7 rounds
#
# The configuration lists only the software token, so the figure does not depend
# on which other providers lie in target/release.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REL="$ROOT/target/release"
ROUNDS="${1:-7}"
for f in "$REL/cfspeed" "$REL/libopencf.so" "$REL/libopencf_softtoken.so"; do
    [ -e "$f" ] || { echo "bench-stat: $f not built (cargo build --release)" >&2; exit 1; }
done
WORK="$(mktemp -d "${TMPDIR:-/tmp}/opencf-bench-stat.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/ks" "$WORK/stat"
printf '[[provider]]\nname = "softtoken"\nmodule = "%s"\n' "$REL/libopencf_softtoken.so" >"$WORK/opencf.toml"
export OPENCF_CONF="$WORK/opencf.toml" OPENCF_SOFTTOKEN_DIR="$WORK/ks" OPENCF_STAT_DIR="$WORK/stat"

rate() { # prints ops/s of one cfspeed run
    "$REL/cfspeed" --module "$REL/libopencf.so" --slot 0 CKM_AES_GCM --sizes 16 \
        --runs 3 --seconds 1 --json 2>/dev/null |
        python3 -c 'import json,sys; d=json.load(sys.stdin); r=[x for x in d["results"] if x["implementation"]=="ours"][0]; print(r["ops_per_s"])'
}

echo "# cfspeed --module libopencf.so --slot 0 CKM_AES_GCM --sizes 16 --runs 3 --seconds 1, $ROUNDS rounds"
echo "round  counting-on ops/s  OPENCF_STAT=off ops/s  on/off"
ratios=()
for r in $(seq 1 "$ROUNDS"); do
    on="$(env -u OPENCF_STAT bash -c "$(declare -f rate); REL='$REL' rate")"
    off="$(OPENCF_STAT=off bash -c "$(declare -f rate); REL='$REL' rate")"
    ratio="$(python3 -c "print(f'{$on/$off:.3f}')")"
    ratios+=("$ratio")
    printf '%5s  %17.0f  %21.0f  %6s\n' "$r" "$on" "$off" "$ratio"
done
python3 -c "import statistics,sys; print('median on/off:', f'{statistics.median(map(float, sys.argv[1:])):.3f}')" "${ratios[@]}"
