#!/usr/bin/env bash
# The framework with no configuration at all: libopencf.so finds the software token beside
# itself, shows "OpenCF Metaslot" as slot 0, passes pkcs11-tool's own test on slot 0, and runs
# the whole Wycheproof suite through slot 0.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
LIB="${LIB:-$ROOT/target/release/libopencf.so}"
[ -e "$LIB" ] || { echo "metaslot: $LIB not built (cargo build --release -p opencf)" >&2; exit 1; }
if [ -e /etc/opencf/opencf.toml ]; then
    echo "metaslot: /etc/opencf/opencf.toml exists; this test needs a machine without a system configuration" >&2
    exit 1
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/opencf-metaslot.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
export OPENCF_SOFTTOKEN_DIR="$WORK/keystore" XDG_CONFIG_HOME="$WORK/config"
unset OPENCF_CONF OPENCF_METASLOT_ENABLED OPENCF_METASLOT_KEYSTORE
PIN=metaslot-pin-97
passed=0 failed=0

step() { # name, command...
    local name="$1"; shift
    local out
    if out="$("$@" 2>&1)"; then
        if grep -qiE 'failed|error:|Aborting' <<<"$out"; then
            echo "FAIL $name"; echo "$out" | tail -20; failed=$((failed + 1)); return
        fi
        echo "PASS $name"; passed=$((passed + 1))
    else
        echo "FAIL $name"; echo "$out" | tail -20; failed=$((failed + 1))
    fi
}

expect() { # name, pattern, command...
    local name="$1" pattern="$2"; shift 2
    local out
    out="$("$@" 2>&1 || true)"
    if grep -qE "$pattern" <<<"$out"; then
        echo "PASS $name"; passed=$((passed + 1))
    else
        echo "FAIL $name (no '$pattern')"; echo "$out" | tail -20; failed=$((failed + 1))
    fi
}

P11="pkcs11-tool --module $LIB"
expect "slot 0 is the metaslot" 'Slot 0 \(0x0\): OpenCF Metaslot' $P11 --list-slots
# The providers' slots follow in the default's order: the accelerator's first when
# libopencf_accel.so lies beside libopencf.so, then the softtoken's.
if [ -e "$(dirname "$LIB")/libopencf_accel.so" ]; then
    expect "the accelerator's slot follows" 'Slot 1 \(0x1\): OpenCF Accelerator' $P11 --list-slots
    SOFT=2
else
    SOFT=1
fi
expect "the softtoken's slots follow" "Slot $SOFT \\(0x$SOFT\\): OpenCF Softtoken" $P11 --list-slots
expect "change the default PIN through slot 0" 'PIN successfully changed' \
    $P11 --slot 0 --login --pin changeme --change-pin --new-pin "$PIN"
step "RSA key pair through slot 0" $P11 --slot 0 --login --pin "$PIN" --keypairgen --key-type rsa:2048 --id 01 --label rsa
expect "AES key through slot 0" "Secret Key Object; AES length 32" $P11 --slot 0 --login --pin "$PIN" --keygen --key-type AES:32 --id 02 --label aes
expect "pkcs11-tool --test --login on slot 0" 'No errors' $P11 --slot 0 --login --pin "$PIN" --test
expect "the key made through slot 0 is in the softtoken" 'label: +rsa' \
    pkcs11-tool --module "$(dirname "$LIB")/libopencf_softtoken.so" --login --pin "$PIN" --list-objects --type privkey

echo "--- Wycheproof through slot 0"
if OPENCF_MODULE="$LIB" OPENCF_TEST_SLOT=0 cargo test --release -q -p pkcs11-tests --test wycheproof \
    --manifest-path "$ROOT/Cargo.toml"; then
    echo "PASS Wycheproof through slot 0"; passed=$((passed + 1))
else
    echo "FAIL Wycheproof through slot 0"; failed=$((failed + 1))
fi

echo "metaslot: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
