#!/usr/bin/env bash
# Runs cfspeed on the software token beside native OpenSSL and SoftHSMv2, each
# with a fresh keystore in a temporary directory: the figures of
# docs/PERFORMANCE.md.
#
# Usage: scripts/bench.sh [cfspeed arguments...]
#   With no arguments: the acceptance set of issue 2 (AES-128-GCM 16 B and
#   larger, RSA-2048 SHA256_RSA_PKCS, ECDSA P-256, find among 10,000 token
#   objects), 1 and 2 threads, --native, and SoftHSMv2 when it is installed.
#
# Environment: MODULE (default target/release/libopencf_softtoken.so),
#              CFSPEED (default target/release/cfspeed),
#              SOFTHSM (default /usr/lib/softhsm/libsofthsm2.so),
#              KEEP_WORKDIR=1 keeps the temporary keystores.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODULE="${MODULE:-$ROOT/target/release/libopencf_softtoken.so}"
CFSPEED="${CFSPEED:-$ROOT/target/release/cfspeed}"
SOFTHSM="${SOFTHSM:-/usr/lib/softhsm/libsofthsm2.so}"
PIN="bench-pin-1357"

for f in "$MODULE" "$CFSPEED"; do
    [ -e "$f" ] || { echo "bench: $f not found; run cargo build --release -p opencf-softtoken -p cfspeed" >&2; exit 1; }
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/opencf-bench.XXXXXX")"
if [ "${KEEP_WORKDIR:-}" = 1 ]; then
    echo "bench: keystores kept in $WORK" >&2
else
    trap 'rm -rf "$WORK"' EXIT
fi

# Our token: a fresh keystore; cfspeed changes the expired default PIN.
mkdir -p "$WORK/softtoken"
export OPENCF_SOFTTOKEN_DIR="$WORK/softtoken"
ours=(--module "$MODULE" --pin changeme --new-pin "$PIN")

# SoftHSMv2, when installed: a fresh token with PIN 1234.
vs=()
if [ -e "$SOFTHSM" ] && command -v softhsm2-util >/dev/null; then
    mkdir -p "$WORK/softhsm/tokens"
    printf 'directories.tokendir = %s\nobjectstore.backend = file\nlog.level = ERROR\n' \
        "$WORK/softhsm/tokens" >"$WORK/softhsm/softhsm2.conf"
    export SOFTHSM2_CONF="$WORK/softhsm/softhsm2.conf"
    softhsm2-util --init-token --free --label bench --so-pin 1234 --pin 1234 >/dev/null
    vs=(--vs-module "$SOFTHSM" --vs-pin 1234)
else
    echo "bench: SoftHSMv2 not installed ($SOFTHSM); measuring without it" >&2
fi

if [ $# -eq 0 ]; then
    set -- CKM_AES_GCM CKM_SHA256_RSA_PKCS CKM_ECDSA find \
        --native --threads 2 --sizes 16,1024,16384
fi
"$CFSPEED" "${ours[@]}" "${vs[@]}" "$@"
