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
#        scripts/bench.sh --framework [cfspeed arguments...]
#   The framework's overhead (issue 3, point 7): slot 0 (the metaslot) of
#   libopencf.so over the software token against libopencf_softtoken.so loaded
#   directly as --vs-module, in the same cfspeed run and on the same fresh
#   keystore. The framework runs on a configuration that lists only the software
#   token (so that other providers built into target/release, such as the
#   accelerator with its own AES-GCM, do not change what is measured);
#   ZERO_CONFIG=1 uses the built-in default instead (OPENCF_CONF unset,
#   XDG_CONFIG_HOME an empty directory).
#   With no further arguments: CKM_AES_GCM (16 bytes) and CKM_SHA256_RSA_PKCS,
#   1 thread, --runs 11.
#   COPIES=N (N > 1) runs cfspeed N times, each time on fresh byte-for-byte copies
#   of the libraries (framework, software token and accelerator side by side in
#   a directory of their own, so the software token is linked in as installed),
#   and ends with the median over the copies of each "ratios" line. A copy of a
#   library lands on other physical pages than the built file; on the virtual
#   machines where the figures are taken, identical bytes have run 22-25% apart
#   from one file copy to another (docs/PERFORMANCE.md, "Where the library's
#   pages land"), so a single file measures its placement as much as its code.
#
# Environment: MODULE (default target/release/libopencf_softtoken.so),
#              CFSPEED (default target/release/cfspeed),
#              SOFTHSM (default /usr/lib/softhsm/libsofthsm2.so),
#              FRAMEWORK (with --framework; default target/release/libopencf.so),
#              KEEP_WORKDIR=1 keeps the temporary keystores.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODULE="${MODULE:-$ROOT/target/release/libopencf_softtoken.so}"
CFSPEED="${CFSPEED:-$ROOT/target/release/cfspeed}"
SOFTHSM="${SOFTHSM:-/usr/lib/softhsm/libsofthsm2.so}"
PIN="bench-pin-1357"

FRAMEWORK_MODE=0
if [ "${1:-}" = "--framework" ]; then
    FRAMEWORK_MODE=1
    shift
fi

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

if [ "$FRAMEWORK_MODE" = 1 ]; then
    FRAMEWORK="${FRAMEWORK:-$ROOT/target/release/libopencf.so}"
    [ -e "$FRAMEWORK" ] || { echo "bench: $FRAMEWORK not found; run cargo build --release -p opencf" >&2; exit 1; }
    # No system-wide or per-user config: a softtoken-only OPENCF_CONF, or (ZERO_CONFIG=1)
    # the built-in default.
    if [ "${ZERO_CONFIG:-}" = 1 ] && [ -e /etc/opencf/opencf.toml ]; then
        echo "bench: /etc/opencf/opencf.toml exists; --framework measures the zero-config default" >&2
        exit 1
    fi
    unset OPENCF_CONF OPENCF_METASLOT_ENABLED OPENCF_METASLOT_KEYSTORE
    mkdir -p "$WORK/xdg"
    export XDG_CONFIG_HOME="$WORK/xdg"
    # pair FRAMEWORK TOKEN DIR ARGS...: one cfspeed run, slot 0 of FRAMEWORK against TOKEN
    # loaded directly, on a fresh keystore in DIR (with DIR/opencf.toml listing only TOKEN,
    # unless ZERO_CONFIG=1). Slot 0 changes the keystore's expired PIN (C_SetPIN goes to the
    # keystore token); the softtoken loaded directly opens the same keystore and logs in with
    # the new PIN.
    pair() {
        local fw="$1" token="$2" dir="$3"
        shift 3
        mkdir -p "$dir/softtoken"
        if [ "${ZERO_CONFIG:-}" != 1 ]; then
            printf '[[provider]]\nname = "softtoken"\nmodule = "%s"\n' "$token" >"$dir/opencf.toml"
            export OPENCF_CONF="$dir/opencf.toml"
        fi
        OPENCF_SOFTTOKEN_DIR="$dir/softtoken" "$CFSPEED" --module "$fw" --slot 0 \
            --pin changeme --new-pin "$PIN" --vs-module "$token" --vs-pin "$PIN" "$@"
    }
    if [ $# -eq 0 ]; then
        set -- CKM_AES_GCM CKM_SHA256_RSA_PKCS --sizes 16 --runs 11
    fi
    COPIES="${COPIES:-1}"
    [[ "$COPIES" =~ ^[1-9][0-9]*$ ]] || { echo "bench: COPIES=$COPIES is not a positive number" >&2; exit 1; }
    if [ "$COPIES" = 1 ]; then
        pair "$FRAMEWORK" "$MODULE" "$WORK" "$@"
        exit
    fi
    accel="$(dirname "$FRAMEWORK")/libopencf_accel.so"
    for i in $(seq "$COPIES"); do
        dir="$WORK/copy$i"
        mkdir -p "$dir"
        cp "$FRAMEWORK" "$dir/libopencf.so"
        cp "$MODULE" "$dir/libopencf_softtoken.so"
        if [ -e "$accel" ]; then cp "$accel" "$dir/libopencf_accel.so"; fi
        echo "# copy $i of $COPIES: $dir"
        pair "$dir/libopencf.so" "$dir/libopencf_softtoken.so" "$dir" "$@" | tee -a "$WORK/copies.txt"
    done
    # The median over the copies of each ratio, per measurement (the line above the table).
    echo
    echo "# medians over $COPIES copies"
    python3 - "$WORK/copies.txt" <<'EOF_PY'
import re, statistics, sys
head, seen = None, {}
for line in open(sys.argv[1]):
    if line.strip() and not line.startswith((" ", "#")):
        head = line.strip()
    m = re.match(r"\s+ratios, (\d+) thr: (.*)", line)
    if m and head:
        for name, v in re.findall(r"(\S+) ([0-9.]+)", m.group(2)):
            seen.setdefault((head, m.group(1), name), []).append(float(v))
for (head, thr, name), v in seen.items():
    print(f"{head}  {thr} thr  {name}  median {statistics.median(v):.2f}  (" + ", ".join(f"{x:.2f}" for x in v) + ")")
EOF_PY
    exit
fi

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
