#!/usr/bin/env bash
# OpenSC pkcs11-tool as a consumer of the OpenCF software token.
#
# On a fresh keystore: check the fresh-token state, change the default PIN with
# --change-pin, generate keys, sign with the token and verify with openssl, then
# run pkcs11-tool's own module tests (--test, --test-ec, --test-fork,
# --test-threads) and initialise the spare token with --init-token/--init-pin.
# A step passes when pkcs11-tool exits 0 AND its output holds none of the
# markers pkcs11-tool prints for a failure ("failed", "ERR", "error:",
# "Aborting", "warning:"), and holds what the step expects.
#
# Environment:
#   MODULE        module to test (default target/release/libopencf_softtoken.so)
#   PKCS11_TOOL   pkcs11-tool binary (default: pkcs11-tool on PATH)
#   STEP_TIMEOUT  seconds one pkcs11-tool run may take (default 300)
#   KEEP_WORKDIR  1: keep the temporary keystore and logs for inspection
#   SOFTHSM       1: run the same steps against SoftHSMv2 instead (a check of
#                 this script; SoftHSMv2 itself fails several steps)
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PKCS11_TOOL="${PKCS11_TOOL:-pkcs11-tool}"
STEP_TIMEOUT="${STEP_TIMEOUT:-300}"

TOKEN_LABEL="OpenCF Softtoken"
DEFAULT_PIN="changeme"
SO_PIN="changeme"
USER_PIN="opencf-user-1"
SPARE_LABEL="OpenCF Spare"
SPARE_SO_PIN="opencf-so-2"
SPARE_USER_PIN="opencf-user-2"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/opencf-pkcs11-tool.XXXXXX")"
cleanup() {
    if [ "${KEEP_WORKDIR:-0}" = "1" ]; then
        echo "work directory kept: $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

if [ "${SOFTHSM:-0}" = "1" ]; then
    MODULE="${MODULE_SOFTHSM:-/usr/lib/softhsm/libsofthsm2.so}"
    mkdir -p "$WORK/softhsm-tokens"
    printf 'directories.tokendir = %s\nobjectstore.backend = file\n' "$WORK/softhsm-tokens" >"$WORK/softhsm2.conf"
    export SOFTHSM2_CONF="$WORK/softhsm2.conf"
    softhsm2-util --init-token --free --label "$TOKEN_LABEL" \
        --so-pin "$SO_PIN" --pin "$DEFAULT_PIN" >/dev/null
else
    MODULE="${MODULE:-$ROOT/target/release/libopencf_softtoken.so}"
fi
export OPENCF_SOFTTOKEN_DIR="$WORK/keystore"
mkdir -p "$OPENCF_SOFTTOKEN_DIR"
chmod 700 "$OPENCF_SOFTTOKEN_DIR"

for tool in "$PKCS11_TOOL" openssl timeout; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "pkcs11-tool suite: '$tool' not found (run 'make deps')" >&2
        exit 2
    fi
done
if [ ! -f "$MODULE" ]; then
    echo "pkcs11-tool suite: module not found: $MODULE (run 'make build')" >&2
    exit 2
fi

PASSED=0
FAILED=0
FAILED_STEPS=()
STEP_NO=0
FAIL_MARKERS='failed|ERR|error:|Aborting|warning:'
# Warnings that are expected behaviour, not failures:
# - pkcs11-tool tries to print every secret key's CKA_VALUE when it lists one;
#   a key that is sensitive or not extractable must refuse with this code.
# - --test's signature test feeds the first RSA mechanism (RSA_X_509, a
#   single-part mechanism) to C_SignUpdate; pkcs11-tool accepts
#   CKR_FUNCTION_NOT_SUPPORTED there and only warns.
EXPECTED_WARNINGS='C_GetAttributeValue\(VALUE\) failed: rv = CKR_ATTRIBUTE_SENSITIVE|C_SignUpdate failed: rv = CKR_FUNCTION_NOT_SUPPORTED'

# p11 ARGS...: pkcs11-tool on the module under test, never reading stdin.
p11() {
    timeout --kill-after=10 "$STEP_TIMEOUT" "$PKCS11_TOOL" --module "$MODULE" "$@" </dev/null
}

# step NAME [--expect REGEX]... [--allow REGEX] -- COMMAND...
# Runs COMMAND (stdout and stderr to a log). Passes when it exits 0, the log
# matches every --expect and no failure marker (lines matching --allow or
# EXPECTED_WARNINGS are exempt from the marker check).
step() {
    local name="$1"
    shift
    local expects=() allow="$EXPECTED_WARNINGS"
    while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
        case "$1" in
        --expect) expects+=("$2"); shift 2 ;;
        --allow) allow="$allow|$2"; shift 2 ;;
        *) echo "step: bad option $1" >&2; return 2 ;;
        esac
    done
    shift
    STEP_NO=$((STEP_NO + 1))
    local log
    log="$WORK/step-$(printf '%02d' "$STEP_NO").log"
    printf -- '--- [%02d] %s\n' "$STEP_NO" "$name"
    printf '    $ %s\n' "$*" >"$log"
    local rc=0
    "$@" >>"$log" 2>&1 || rc=$?
    local why=()
    [ "$rc" -eq 0 ] || why+=("exit status $rc")
    local markers
    markers="$(grep -E "$FAIL_MARKERS" "$log" | grep -Ev "$allow" || true)"
    [ -z "$markers" ] || why+=("failure markers in output")
    local re
    for re in "${expects[@]}"; do
        grep -Eq -- "$re" "$log" || why+=("output lacks /$re/")
    done
    if [ "${#why[@]}" -eq 0 ]; then
        PASSED=$((PASSED + 1))
        printf '    PASS\n'
        return 0
    fi
    FAILED=$((FAILED + 1))
    FAILED_STEPS+=("$name")
    printf '    FAIL: %s\n' "$(IFS=';'; echo "${why[*]}")"
    if [ -n "$markers" ]; then
        printf '%s\n' "$markers" | head -n 20 | sed 's/^/    | /'
    fi
    printf '    ---- output (last 40 lines) ----\n'
    tail -n 40 "$log" | sed 's/^/    | /'
    return 1
}

# expect_failure NAME REGEX -- COMMAND...: passes when COMMAND exits non-zero
# and its output matches REGEX (the return code it must be refused with).
expect_failure() {
    local name="$1" re="$2"
    shift 3
    STEP_NO=$((STEP_NO + 1))
    local log
    log="$WORK/step-$(printf '%02d' "$STEP_NO").log"
    printf -- '--- [%02d] %s\n' "$STEP_NO" "$name"
    local rc=0
    "$@" >"$log" 2>&1 || rc=$?
    if [ "$rc" -ne 0 ] && grep -Eq -- "$re" "$log"; then
        PASSED=$((PASSED + 1))
        printf '    PASS (refused with %s)\n' "$re"
        return 0
    fi
    FAILED=$((FAILED + 1))
    FAILED_STEPS+=("$name")
    if [ "$rc" -eq 0 ]; then
        printf '    FAIL: the command succeeded\n'
    else
        printf '    FAIL: refused, but the output lacks /%s/\n' "$re"
    fi
    tail -n 20 "$log" | sed 's/^/    | /'
    return 1
}

# Threads check for --test-threads: every thread ended, each call returned
# CKR_OK (C_Initialize may also say ALREADY_INITIALIZED: threads race the main
# thread to it), and no unknown test command. pkcs11-tool prints the threads'
# states while it waits for them, then once more after all have ended; only
# that last report counts.
threads_ok() {
    local log="$1"
    grep -q 'test_threads cleanup finished' "$log" || { echo "no cleanup line"; return 1; }
    grep -q 'test_threads all threads have ended' "$log" || { echo "threads never ended"; return 1; }
    if grep -E 'Unknown test|slot not available' "$log"; then return 1; fi
    if grep -E 'returned' "$log" | grep -Ev 'returned +(CKR_OK|CKR_CRYPTOKI_ALREADY_INITIALIZED)$'; then
        return 1
    fi
    if awk '/test_threads all threads have ended/ { last = 1; next }
            last && /^test_threads thread:/' "$log" |
        grep -Ev 'state:-1, rv:(CKR_OK|CKR_CRYPTOKI_ALREADY_INITIALIZED)$'; then
        return 1
    fi
    if grep -E '^Main C_Initialize' "$log" | grep -Ev 'rv:(CKR_OK|CKR_CRYPTOKI_ALREADY_INITIALIZED)$'; then
        return 1
    fi
    return 0
}

# test_threads NAME SPEC...: pkcs11-tool -L with one thread per SPEC.
test_threads() {
    local name="$1"
    shift
    local args=() spec
    for spec in "$@"; do args+=(--test-threads "$spec"); done
    STEP_NO=$((STEP_NO + 1))
    local log
    log="$WORK/step-$(printf '%02d' "$STEP_NO").log"
    printf -- '--- [%02d] %s\n' "$STEP_NO" "$name"
    local rc=0
    p11 "${args[@]}" -L >"$log" 2>&1 || rc=$?
    local why=()
    [ "$rc" -eq 0 ] || why+=("exit status $rc")
    local bad
    bad="$(threads_ok "$log")" || why+=("thread results: ${bad:-see output}")
    if grep -E "$FAIL_MARKERS" "$log" | grep -Evq "$EXPECTED_WARNINGS"; then
        why+=("failure markers in output")
    fi
    if [ "${#why[@]}" -eq 0 ]; then
        PASSED=$((PASSED + 1))
        printf '    PASS (%s thread(s))\n' "$#"
        return 0
    fi
    FAILED=$((FAILED + 1))
    FAILED_STEPS+=("$name")
    printf '    FAIL: %s\n' "$(IFS=';'; echo "${why[*]}")"
    tail -n 40 "$log" | sed 's/^/    | /'
    return 1
}

# ---------------------------------------------------------------------------
echo "pkcs11-tool suite"
echo "  module:   $MODULE"
echo "  keystore: $OPENCF_SOFTTOKEN_DIR"
echo "  tool:     $(command -v "$PKCS11_TOOL") ($(dpkg-query -W -f='${Version}' opensc 2>/dev/null || echo 'version unknown'))"
echo

TOK=(--token-label "$TOKEN_LABEL")

step "module loads and describes itself (--show-info)" \
    --expect 'Cryptoki version' -- \
    p11 --show-info

if [ "${SOFTHSM:-0}" != "1" ]; then
    step "fresh token: label '$TOKEN_LABEL', user PIN to be changed" \
        --expect "token label +: $TOKEN_LABEL" \
        --expect 'user PIN to be changed' -- \
        p11 --list-token-slots
fi

step "change the default user PIN (--login --pin $DEFAULT_PIN --change-pin --new-pin ...)" \
    --expect 'PIN successfully changed' -- \
    p11 "${TOK[@]}" --login --pin "$DEFAULT_PIN" --change-pin --new-pin "$USER_PIN"

if [ "${SOFTHSM:-0}" != "1" ]; then
    check_flag_cleared() {
        local out
        out="$(p11 "${TOK[@]}" --list-token-slots 2>&1)" || return 1
        printf '%s\n' "$out"
        if printf '%s\n' "$out" | grep -q 'user PIN to be changed'; then
            echo "the token still says 'user PIN to be changed'"
            return 1
        fi
    }
    step "token no longer asks for a PIN change" -- check_flag_cleared
fi

expect_failure "old PIN is refused" CKR_PIN_INCORRECT -- \
    p11 "${TOK[@]}" --login --pin "$DEFAULT_PIN" --list-objects

step "new PIN logs in and lists objects" -- \
    p11 "${TOK[@]}" --login --pin "$USER_PIN" --list-objects

LOGIN=("${TOK[@]}" --login --pin "$USER_PIN")

step "generate RSA-1024 key pair (id 01)" --expect 'Key pair generated' -- \
    p11 "${LOGIN[@]}" --keypairgen --key-type rsa:1024 --id 01 --label rsa1024
step "generate RSA-2048 key pair (id 02)" --expect 'Key pair generated' -- \
    p11 "${LOGIN[@]}" --keypairgen --key-type rsa:2048 --id 02 --label rsa2048
step "generate EC P-256 key pair (id 03)" --expect 'Key pair generated' -- \
    p11 "${LOGIN[@]}" --keypairgen --key-type EC:prime256v1 --id 03 --label ec256
step "generate EC P-521 key pair (id 04)" --expect 'Key pair generated' -- \
    p11 "${LOGIN[@]}" --keypairgen --key-type EC:secp521r1 --id 04 --label ec521
step "generate a 64-byte generic secret (HMAC) key" --expect 'Key generated' -- \
    p11 "${LOGIN[@]}" --keygen --key-type GENERIC:64 --id 05 --label hmac-key
step "generate an AES-256 key" --expect 'Key generated' -- \
    p11 "${LOGIN[@]}" --keygen --key-type AES:32 --id 06 --label aes256

# Sign on the token, verify with openssl against the exported public key.
head -c 4096 /dev/urandom >"$WORK/data.bin"
# The P-256 public key is rebuilt from CKA_EC_POINT as --list-objects prints it
# (scripts/lib/p256-spki.sh says why not --read-object).
# shellcheck source=scripts/lib/p256-spki.sh
. "$ROOT/scripts/lib/p256-spki.sh"
sign_and_verify() {
    local id="$1" mech="$2" kind="$3"
    shift 3
    if [ "$kind" = ec ]; then
        p11 "${LOGIN[@]}" --list-objects --type pubkey | p256_spki "$id" >"$WORK/$id.pub.der" ||
            return 1
    else
        p11 "${LOGIN[@]}" --read-object --type pubkey --id "$id" -o "$WORK/$id.pub.der" || return 1
    fi
    openssl pkey -pubin -inform DER -in "$WORK/$id.pub.der" -out "$WORK/$id.pub.pem" || return 1
    p11 "${LOGIN[@]}" --sign --id "$id" -m "$mech" "$@" \
        -i "$WORK/data.bin" -o "$WORK/$id.sig" || return 1
    echo "openssl ($kind): $(openssl dgst -sha256 -verify "$WORK/$id.pub.pem" \
        -signature "$WORK/$id.sig" "$WORK/data.bin" 2>&1)"
}
step "RSA-2048 SHA256-RSA-PKCS signature verifies with openssl" \
    --expect 'openssl \(rsa\): Verified OK' -- \
    sign_and_verify 02 SHA256-RSA-PKCS rsa
step "EC P-256 ECDSA-SHA256 signature verifies with openssl" \
    --expect 'openssl \(ec\): Verified OK' -- \
    sign_and_verify 03 ECDSA-SHA256 ec --signature-format openssl

step "--test --login" --expect '^No errors$' -- \
    p11 "${LOGIN[@]}" --test
step "--test --login --allow-sw (also the tests meant for CKF_HW mechanisms)" \
    --expect '^No errors$' -- \
    p11 "${LOGIN[@]}" --test --allow-sw
step "--test-ec --login (P-256 key pair generated by the test)" \
    --expect '==> OK' -- \
    p11 "${LOGIN[@]}" --test-ec --session-rw --id 0ec1 --key-type EC:prime256v1
step "--test-ec --login (P-384)" \
    --expect '==> OK' -- \
    p11 "${LOGIN[@]}" --test-ec --session-rw --id 0ec2 --key-type EC:secp384r1
step "--test-fork" \
    --expect 'Calling C_Initialize in forked child process' -- \
    p11 --test-fork --show-info

test_threads "--test-threads IN (C_Initialize(NULL) in a thread)" IN
test_threads "--test-threads ILGISLT0 (OS locking, GetInfo, GetSlotList, token 0)" ILGISLT0
test_threads "--test-threads x4 concurrent (IL/IN, GetInfo, GetSlotList, tokens 0 and 1)" \
    ILGISLT0 INGISLT0 ILGISLT1 INGISLT1

# The spare, uninitialised token: C_InitToken, then C_InitPIN as SO.
find_spare_slot() {
    # The first slot whose token is not initialised; prints its ID (0x...).
    p11 --list-slots 2>/dev/null | awk '
        /^Slot [0-9]+ \(0x[0-9a-fA-F]+\)/ { id = $3; gsub(/[():]/, "", id); next }
        /token state: +uninitialized/ && id != "" { print id; exit }'
}
SPARE_SLOT="$(find_spare_slot)"
if [ -z "$SPARE_SLOT" ]; then
    step "an uninitialised token is offered for C_InitToken" -- \
        sh -c 'echo "no slot shows token state: uninitialized"; exit 1'
else
    step "--init-token on the spare token (slot $SPARE_SLOT)" \
        --expect 'Token successfully initialized' -- \
        p11 --slot "$SPARE_SLOT" --init-token --label "$SPARE_LABEL" --so-pin "$SPARE_SO_PIN"
    step "--init-pin as SO on the new token" \
        --expect 'User PIN successfully initialized' -- \
        p11 --token-label "$SPARE_LABEL" --login --login-type so --so-pin "$SPARE_SO_PIN" \
        --init-pin --pin "$SPARE_USER_PIN"
    step "the new token generates and lists a key pair" \
        --expect 'Key pair generated' -- \
        p11 --token-label "$SPARE_LABEL" --login --pin "$SPARE_USER_PIN" \
        --keypairgen --key-type EC:prime256v1 --id 10 --label spare-ec
    step "the first token still holds its own keys" \
        --expect 'label: +rsa2048' --expect 'label: +ec256' -- \
        p11 "${LOGIN[@]}" --list-objects
fi

echo
if [ "$FAILED" -ne 0 ]; then
    echo "failed steps:"
    printf '  - %s\n' "${FAILED_STEPS[@]}"
fi
echo "pkcs11-tool: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
