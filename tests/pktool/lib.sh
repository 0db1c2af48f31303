# Shared set-up for the pktool tests: sourced by each tests/pktool/*.sh.
#
# Gives each script its own keystore, XDG_CONFIG_HOME and work directory (removed on exit),
# the PKT command (pktool against target/release/libopencf.so), and the assertion helpers:
#   check NAME RC PATTERN CMD...   CMD exits with RC and its output (stdout+stderr) matches PATTERN
#   ok NAME CMD...                 CMD exits 0
#   jcheck NAME EXPR CMD...        CMD exits 0 and prints JSON d for which python EXPR is true
# `finish` prints the summary line "pktool-NAME: N passed, N failed" and exits non-zero on failure.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
LIB_DIR="${LIB_DIR:-$ROOT/target/release}"
PKTOOL="$LIB_DIR/pktool"
MODULE_LIB="$LIB_DIR/libopencf.so"
SOFTHSM="${SOFTHSM:-/usr/lib/softhsm/libsofthsm2.so}"
for f in "$PKTOOL" "$MODULE_LIB" "$LIB_DIR/libopencf_softtoken.so"; do
    [ -e "$f" ] || { echo "pktool tests: $f not built (cargo build --release -p opencf -p opencf-softtoken -p pktool)" >&2; exit 1; }
done
SUITE="$(basename "$0" .sh)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/pktool-$SUITE.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/keystore" "$WORK/xdg"
export OPENCF_SOFTTOKEN_DIR="$WORK/keystore" XDG_CONFIG_HOME="$WORK/xdg"
unset OPENCF_CONF OPENCF_METASLOT_ENABLED OPENCF_METASLOT_KEYSTORE
cd "$WORK" || exit 1

PIN=pktool-pin-1234
printf '%s\n' "$PIN" >"$WORK/pin"
PKT() { "$PKTOOL" --module "$MODULE_LIB" "$@"; }
PKTP() { PKT --pin-file "$WORK/pin" "$@"; }
P11() { pkcs11-tool --module "$MODULE_LIB" "$@"; }

passed=0 failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; [ -n "${2:-}" ] && echo "$2" | tail -15 | sed 's/^/    /'; failed=$((failed + 1)); }

check() { # name, expected exit code, pattern, command...
    local name="$1" want="$2" pattern="$3"; shift 3
    local out rc
    out="$("$@" 2>&1)"; rc=$?
    if [ "$rc" -ne "$want" ]; then
        fail "$name (exit $rc, want $want)" "$out"
    elif ! grep -qE -- "$pattern" <<<"$out"; then
        fail "$name (no '$pattern')" "$out"
    else
        pass "$name"
    fi
}

ok() { # name, command...
    local name="$1"; shift
    local out
    if out="$("$@" 2>&1)"; then pass "$name"; else fail "$name (exit $?)" "$out"; fi
}

jcheck() { # name, python expression over d, command...
    local name="$1" expr="$2"; shift 2
    local out
    if out="$("$@" 2>/dev/null)" && python3 -c "import json,sys
d = json.loads(sys.stdin.read())
sys.exit(0 if ($expr) else 1)" <<<"$out"; then
        pass "$name"
    else
        fail "$name" "$out"
    fi
}

# Changes the fresh token's expired PIN to $PIN.
init_pin() { PKT --pin changeme setpin --new-pin-file "$WORK/pin" >/dev/null 2>&1 || { echo "set-up: setpin failed" >&2; exit 1; }; }

finish() {
    echo "pktool-$SUITE: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
