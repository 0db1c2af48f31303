#!/usr/bin/env bash
# Runs every pktool test script, sums their PASS/FAIL lines and fails if any failed.
set -uo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
total_pass=0 total_fail=0 bad=""
for t in "$DIR"/*.sh; do
    name="$(basename "$t" .sh)"
    case "$name" in run | lib) continue ;; esac
    echo "--- $name"
    out="$(bash "$t" 2>&1)"; rc=$?
    echo "$out"
    p=$(grep -c '^PASS ' <<<"$out"); f=$(grep -c '^FAIL ' <<<"$out")
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then total_fail=$((total_fail + 1)); echo "FAIL $name exited $rc"; fi
    [ "$rc" -ne 0 ] && bad="$bad $name"
done
echo
[ -n "$bad" ] && echo "failed scripts:$bad"
echo "pktool: $total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
