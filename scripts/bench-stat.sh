#!/usr/bin/env bash
# What counting for `cryptoadm stat` costs on the hot path (issue 5, point 3):
# cfspeed's 16-byte AES-GCM rate through slot 0 of libopencf.so with counting on,
# against a second copy of the same libopencf.so initialized with OPENCF_STAT=off
# (counting removed from the hot path: no counter handle is ever looked up), both
# loaded into ONE cfspeed process and measured in interleaved rounds, so that a slow
# spell of this shared machine hits both alike. The summary line is cfspeed's
# median of the per-round ratios.
#
#   scripts/bench-stat.sh [cfspeed arguments...]   # default: --runs 15 --seconds 0.3
#   CONTROL=1 scripts/bench-stat.sh ...             # both copies count: the noise floor
#
# The configuration lists only the software token, so the figure does not depend
# on which other providers lie in target/release. Both copies share that software
# token (one instance in the process) and its keystore.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REL="$ROOT/target/release"
for f in "$REL/cfspeed" "$REL/libopencf.so" "$REL/libopencf_softtoken.so"; do
    [ -e "$f" ] || { echo "bench-stat: $f not built (cargo build --release)" >&2; exit 1; }
done
WORK="$(mktemp -d "${TMPDIR:-/tmp}/opencf-bench-stat.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/ks" "$WORK/stat" "$WORK/off"
printf '[[provider]]\nname = "softtoken"\nmodule = "%s"\n' "$REL/libopencf_softtoken.so" >"$WORK/opencf.toml"
# A second file, so that the dynamic loader gives it its own instance.
cp "$REL/libopencf.so" "$WORK/off/libopencf.so"
export OPENCF_CONF="$WORK/opencf.toml" OPENCF_SOFTTOKEN_DIR="$WORK/ks" OPENCF_STAT_DIR="$WORK/stat"
unset OPENCF_STAT

if [ $# -eq 0 ]; then
    set -- --runs 15 --seconds 0.3
fi
off=off
[ "${CONTROL:-}" = 1 ] && off=on
echo "# second copy: OPENCF_STAT=$off"
"$REL/cfspeed" --module "$REL/libopencf.so" --slot 0 --pin changeme --new-pin bench-stat-2468 \
    --vs-module "$WORK/off/libopencf.so" --vs-slot 0 --vs-pin bench-stat-2468 \
    --vs-env OPENCF_STAT=$off CKM_AES_GCM --sizes 16 "$@"
# The counted side really counted: its operations are in the statistics.
"$REL/cryptoadm" stat --json 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
rows = [m for m in d.get("mechanisms", []) if m.get("mechanism") in ("CKM_AES_GCM", 4231)]
print("# counted by cryptoadm stat: CKM_AES_GCM ops =", sum(m.get("ops", 0) for m in rows))
' || true
