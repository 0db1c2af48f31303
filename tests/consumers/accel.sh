#!/usr/bin/env bash
# The RSA Wycheproof files through slot 0 with the accelerator first: libopencf.so over
# [accel, softtoken] (the softtoken as keystore). RSA signing and decryption run in
# libopencf_accel.so (keys moved in by AES-KWP); verification and encryption, and the key
# sizes the engine does not serve, in the softtoken.
#
# Skipped (exit 0, with the reason) on a CPU without AVX-512 IFMA, or with
# OPENCF_ACCEL_DISABLE=ifma: the accelerator then lists no RSA mechanism and the run would
# test only the softtoken.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
REL="$ROOT/target/release"
for f in libopencf.so libopencf_softtoken.so libopencf_accel.so; do
    [ -e "$REL/$f" ] || { echo "accel: $REL/$f not built (cargo build --release -p opencf -p opencf-softtoken -p opencf-accel)" >&2; exit 1; }
done
if ! grep -qw avx512ifma /proc/cpuinfo || ! grep -qw avx512f /proc/cpuinfo; then
    echo "accel: SKIP: this CPU has no AVX-512 IFMA, so the accelerator serves no RSA mechanism"
    exit 0
fi
if [[ ",${OPENCF_ACCEL_DISABLE:-}," == *,ifma,* ]]; then
    echo "accel: SKIP: OPENCF_ACCEL_DISABLE=ifma turns the RSA engine off"
    exit 0
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/opencf-accel.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
cat >"$WORK/opencf.toml" <<CONF
[metaslot]
enabled = true
keystore = "OpenCF Softtoken"
auto_key_migrate = true

[[provider]]
name = "accel"
module = "$REL/libopencf_accel.so"

[[provider]]
name = "softtoken"
module = "$REL/libopencf_softtoken.so"
CONF
export OPENCF_CONF="$WORK/opencf.toml" OPENCF_SOFTTOKEN_DIR="$WORK/keystore"
unset OPENCF_METASLOT_ENABLED OPENCF_METASLOT_KEYSTORE OPENCF_ACCEL_FAULT

if pkcs11-tool --module "$REL/libopencf.so" --list-slots 2>/dev/null | grep -q 'OpenCF Accelerator'; then
    echo "PASS the accelerator is loaded behind slot 0"
else
    echo "FAIL the accelerator is not among the slots"; exit 1
fi
echo "--- RSA Wycheproof files through slot 0, accelerator first"
OPENCF_MODULE="$REL/libopencf.so" OPENCF_TEST_SLOT=0 \
    cargo test --release -q -p pkcs11-tests --test wycheproof --manifest-path "$ROOT/Cargo.toml" -- rsa_
echo "accel: RSA Wycheproof through slot 0 passed"
