# shellcheck shell=bash
# Shared by the tests/integration/*.sh scripts: sourced, never run.
#
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#   integration_init NAME        # temp dir, environment, trap, counters
#   token_init                   # fresh keystore: change the expired PIN to $PIN
#   check NAME CMD...            # PASS when CMD exits 0
#   check_out NAME REGEX CMD...  # PASS when CMD exits 0 and its output matches REGEX
#   check_stat NAME MECH_REGEX [MIN]     # PASS when cryptoadm stat counted MIN operations
#   skip NAME REASON
#   bg NAME CMD...               # start a server in the background, killed by the trap
#   finish                       # "NAME: N passed, M failed", exit status
#
# Every command runs under `timeout $CHECK_TIMEOUT` (default 60 s); servers are killed on
# exit. The environment points the framework at a temporary keystore, configuration and
# statistics directory, so nothing outside the temporary directory is touched.

INTEGRATION_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$INTEGRATION_DIR/../.." && pwd)"
RELEASE="${RELEASE:-$ROOT/target/release}"
LIB="${LIB:-$RELEASE/libopencf.so}"
SOFTTOKEN="$RELEASE/libopencf_softtoken.so"
CRYPTOADM="$RELEASE/cryptoadm"
# Used by the scripts that source this file.
# shellcheck disable=SC2034
PIN="${PIN:-integration-pin-42}"
# shellcheck disable=SC2034
METASLOT="OpenCF Metaslot"
CHECK_TIMEOUT="${CHECK_TIMEOUT:-60}"
passed=0 failed=0
BG_PIDS=()

integration_init() { # name
    NAME="$1"
    local f
    for f in "$LIB" "$SOFTTOKEN" "$CRYPTOADM"; do
        [ -e "$f" ] || {
            echo "$NAME: $f not built (cargo build --release -p opencf -p opencf-softtoken -p cryptoadm)" >&2
            exit 1
        }
    done
    if [ -e /etc/opencf/opencf.toml ]; then
        echo "$NAME: /etc/opencf/opencf.toml exists; these tests need a machine without a system configuration" >&2
        exit 1
    fi
    WORK="$(mktemp -d "${TMPDIR:-/tmp}/opencf-$NAME.XXXXXX")"
    trap integration_cleanup EXIT
    trap 'exit 130' INT TERM
    export OPENCF_SOFTTOKEN_DIR="$WORK/keystore" XDG_CONFIG_HOME="$WORK/config" \
        OPENCF_STAT_DIR="$WORK/stat"
    unset OPENCF_CONF OPENCF_METASLOT_ENABLED OPENCF_METASLOT_KEYSTORE OPENCF_STAT
    mkdir -p "$XDG_CONFIG_HOME" "$OPENCF_STAT_DIR"
}

integration_cleanup() {
    local pid
    for pid in "${BG_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${BG_PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    if [ "${KEEP_WORKDIR:-0}" = "1" ]; then
        echo "work directory kept: $WORK"
    else
        rm -rf "$WORK"
    fi
}

pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { # name, [log file]
    echo "FAIL $1"
    if [ -n "${2:-}" ] && [ -s "$2" ]; then sed 's/^/    /' "$2" | tail -20; fi
    failed=$((failed + 1))
}
skip() { echo "SKIP $1 ($2)"; }

# Runs a command or shell function under the time limit; output to $WORK/last.log.
run_limited() {
    if declare -F "$1" >/dev/null; then
        "$@"
    else
        timeout --kill-after=5 "$CHECK_TIMEOUT" "$@"
    fi
}

check() { # name, command...
    local name="$1"; shift
    if run_limited "$@" >"$WORK/last.log" 2>&1; then pass "$name"; else fail "$name" "$WORK/last.log"; fi
}

check_out() { # name, regex, command...
    local name="$1" pattern="$2"; shift 2
    if run_limited "$@" >"$WORK/last.log" 2>&1 && grep -qE -- "$pattern" "$WORK/last.log"; then
        pass "$name"
    else
        echo "    (expected output matching '$pattern')" >>"$WORK/last.log"
        fail "$name" "$WORK/last.log"
    fi
}

# The operations `cryptoadm stat --json` counted on the mechanisms whose name matches MECH_REGEX
# (a Python regular expression, matched in full) in the providers whose name matches
# $STAT_PROVIDERS (default: any provider; the metaslot routes each operation to the first
# provider that can do it, e.g. "accel" before "softtoken" when both are installed).
# Prints the total, then "provider N" for each provider that counted some.
stat_ops() { # mech_regex
    "$CRYPTOADM" stat --json --dir "$OPENCF_STAT_DIR" | python3 -c '
import json, re, sys
providers, mech = re.compile(sys.argv[1]), re.compile(sys.argv[2])
per = {}
for m in json.load(sys.stdin)["mechanisms"]:
    if providers.fullmatch(m["provider"]) and mech.fullmatch(m["mechanism"]) and m["ops"]:
        per[m["provider"]] = per.get(m["provider"], 0) + m["ops"]
print(sum(per.values()), ", ".join(f"{p} {n}" for p, n in sorted(per.items())))
' "${STAT_PROVIDERS:-.+}" "$1"
}

# PASS when OpenCF's providers did at least MIN (default 1) operations of MECH_REGEX since the
# last stat_reset: proof that the work was done behind libopencf.so, not in the consumer.
check_stat() { # name, mech_regex, [minimum ops, default 1]
    local name="$1" mech="$2" min="${3:-1}" out ops
    out="$(stat_ops "$mech" 2>"$WORK/last.log")" || out=0
    ops="${out%% *}"
    if [ "${ops:-0}" -ge "$min" ]; then
        pass "$name (${out#* })"
    else
        "$CRYPTOADM" stat --dir "$OPENCF_STAT_DIR" >>"$WORK/last.log" 2>&1 || true
        echo "    (wanted >= $min ops of $mech, got ${ops:-0})" >>"$WORK/last.log"
        fail "$name" "$WORK/last.log"
    fi
}

# Runs a program that prints its own PASS/FAIL/SKIP lines (a Java, Python, Go or Node.js
# check program) under a time limit, shows those lines and adds them to the counts; a program
# that fails without a FAIL line counts as one failure.
run_program() { # name, command...
    local name="$1" rc p f; shift
    CHECK_TIMEOUT="${PROGRAM_TIMEOUT:-120}" run_limited "$@" >"$WORK/$name.log" 2>&1
    rc=$?
    grep -E '^(PASS|FAIL|SKIP|    caused by)' "$WORK/$name.log"
    p="$(grep -c '^PASS' "$WORK/$name.log")"
    f="$(grep -c '^FAIL' "$WORK/$name.log")"
    passed=$((passed + p)) failed=$((failed + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        fail "$name ran to its end (exit $rc)" "$WORK/$name.log"
    fi
}

stat_reset() { "$CRYPTOADM" stat --reset --dir "$OPENCF_STAT_DIR" >/dev/null 2>&1 || true; }

P11TOOL_ARGS=(--module "$LIB" --slot 0)
p11() { pkcs11-tool "${P11TOOL_ARGS[@]}" "$@"; }
p11_login() { pkcs11-tool "${P11TOOL_ARGS[@]}" --login --pin "$PIN" "$@"; }

# A fresh keystore has the expired PIN "changeme"; every test changes it first.
token_init() {
    check_out "change the expired default PIN through slot 0" 'PIN successfully changed' \
        p11 --login --pin changeme --change-pin --new-pin "$PIN"
}

# Prints the libp11 engine's path (Debian libengine-pkcs11-openssl); fails when it is missing.
find_pkcs11_engine() {
    local f
    for f in "$(openssl version -e 2>/dev/null | sed -n 's/^ENGINESDIR: "\(.*\)"$/\1/p')/pkcs11.so" \
        /usr/lib/x86_64-linux-gnu/engines-3/pkcs11.so /usr/lib/*/engines-3/pkcs11.so; do
        if [ -e "$f" ]; then echo "$f"; return 0; fi
    done
    return 1
}

# An OpenSSL configuration that loads the libp11 pkcs11 engine with libopencf.so as its
# PKCS#11 module (used with OPENSSL_CONF; nginx reads it too).
write_openssl_conf() { # file, engine .so
    cat >"$1" <<EOF
openssl_conf = openssl_init

[openssl_init]
engines = engine_section

[engine_section]
pkcs11 = pkcs11_section

[pkcs11_section]
engine_id = pkcs11
dynamic_path = $2
MODULE_PATH = $LIB
init = 0
EOF
}

# A free TCP port on 127.0.0.1 (the kernel's choice among the ephemeral ports).
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits up to SECONDS for something to listen on 127.0.0.1:PORT.
wait_port() { # port, [seconds, default 20]
    local port="$1" deadline=$((SECONDS + ${2:-20}))
    while [ "$SECONDS" -lt "$deadline" ]; do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
        sleep 0.2
    done
    return 1
}

# Waits up to SECONDS for FILE to hold a line matching REGEX (a server's "listening" line,
# for servers that count every connection, a readiness probe included).
wait_log() { # file, regex, [seconds, default 20]
    local deadline=$((SECONDS + ${3:-20}))
    while [ "$SECONDS" -lt "$deadline" ]; do
        if grep -qE -- "$2" "$1" 2>/dev/null; then return 0; fi
        sleep 0.2
    done
    return 1
}

# Starts a background server under `timeout` (SERVER_TIMEOUT, default 120 s) with output in
# $WORK/NAME.log; the trap kills it. Sets BG_PID.
bg() { # name, command...
    local name="$1"; shift
    timeout --kill-after=5 "${SERVER_TIMEOUT:-120}" "$@" >"$WORK/$name.log" 2>&1 &
    BG_PID=$!
    BG_PIDS+=("$BG_PID")
}

finish() {
    echo "$NAME: $passed passed, $failed failed"
    if [ "$failed" -eq 0 ]; then exit 0; else exit 1; fi
}
