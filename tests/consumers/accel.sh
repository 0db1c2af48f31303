#!/usr/bin/env bash
# The RSA and AES-GCM Wycheproof files through slot 0 with the accelerator first:
# libopencf.so over [accel, softtoken] (the softtoken as keystore), with no min_bytes, so
# that every AES-GCM operation runs in the accelerator. RSA signing and decryption run in
# libopencf_accel.so (keys moved in by AES-KWP); verification and encryption, and the key
# sizes the engine does not serve, in the softtoken; the private operations once as the
# scheduler places them (few in flight: OpenSSL inside the accelerator) and once all on the
# engine (OPENCF_ACCEL_BATCH=1), which the accelerator's counters must show. AES-GCM runs on
# the bulk engine, once as it chooses (one piece for such small inputs) and once cut into 3
# pieces (OPENCF_ACCEL_BULK_PARTS=3), so that the combination of partial tags meets every
# vector.
#
# Each part is skipped (with the reason) where the accelerator does not serve it: RSA on a
# CPU without AVX-512 IFMA or with OPENCF_ACCEL_DISABLE=ifma, AES-GCM on one core or with
# OPENCF_ACCEL_DISABLE=bulk.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
REL="$ROOT/target/release"
for f in libopencf.so libopencf_softtoken.so libopencf_accel.so; do
    [ -e "$REL/$f" ] || { echo "accel: $REL/$f not built (cargo build --release -p opencf -p opencf-softtoken -p opencf-accel)" >&2; exit 1; }
done
rsa=1
if ! grep -qw avx512ifma /proc/cpuinfo || ! grep -qw avx512f /proc/cpuinfo; then
    echo "accel: SKIP RSA: this CPU has no AVX-512 IFMA, so the accelerator serves no RSA mechanism"
    rsa=0
fi
if [[ ",${OPENCF_ACCEL_DISABLE:-}," == *,ifma,* ]]; then
    echo "accel: SKIP RSA: OPENCF_ACCEL_DISABLE=ifma turns the RSA engine off"
    rsa=0
fi
gcm=1
if [ "$(nproc)" -lt 2 ]; then
    echo "accel: SKIP AES-GCM: one core, so the accelerator offers no bulk engine"
    gcm=0
fi
if [[ ",${OPENCF_ACCEL_DISABLE:-}," == *,bulk,* ]]; then
    echo "accel: SKIP AES-GCM: OPENCF_ACCEL_DISABLE=bulk turns the bulk engine off"
    gcm=0
fi
if [ $rsa = 0 ] && [ $gcm = 0 ]; then
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
unset OPENCF_METASLOT_ENABLED OPENCF_METASLOT_KEYSTORE OPENCF_ACCEL_FAULT OPENCF_ACCEL_BULK_PARTS

if pkcs11-tool --module "$REL/libopencf.so" --list-slots 2>/dev/null | grep -q 'OpenCF Accelerator'; then
    echo "PASS the accelerator is loaded behind slot 0"
else
    echo "FAIL the accelerator is not among the slots"; exit 1
fi
wycheproof() {
    OPENCF_MODULE="$REL/libopencf.so" OPENCF_TEST_SLOT=0 \
        cargo test --release -q -p pkcs11-tests --test wycheproof --manifest-path "$ROOT/Cargo.toml" -- "$@"
}
if [ $rsa = 1 ]; then
    echo "--- RSA Wycheproof files through slot 0, accelerator first"
    wycheproof rsa_
    # The test threads keep a request or two in flight, below the batching threshold, so the
    # private operations above ran with OpenSSL inside the accelerator. Again with every
    # request on the engine (OPENCF_ACCEL_BATCH=1: a lone request runs a pass of its own), and
    # the accelerator's counters must show passes and no request on OpenSSL's path.
    echo "--- the same, every private operation on the engine (OPENCF_ACCEL_BATCH=1)"
    OPENCF_STAT_DIR="$WORK/stat-engine" OPENCF_ACCEL_BATCH=1 wycheproof rsa_
    counters="$("$REL/cryptoadm" stat --dir "$WORK/stat-engine" -p accel)"
    counter() { awk -v c="$1" '$1 == "accel" && $2 == c { print $3 }' <<<"$counters"; }
    passes="$(counter rsa_passes)" direct="$(counter rsa_direct)"
    if [ "${passes:-0}" -gt 0 ] && [ "${direct:-0}" = 0 ]; then
        echo "PASS the engine ran the private operations: rsa_passes ${passes}, rsa_direct 0"
    else
        echo "FAIL rsa_passes ${passes:-0}, rsa_direct ${direct:-0}: the engine did not run them"
        echo "$counters"
        exit 1
    fi
    echo "accel: RSA Wycheproof through slot 0 passed"
fi
if [ $gcm = 1 ]; then
    if pkcs11-tool --module "$REL/libopencf_accel.so" --list-mechanisms 2>/dev/null | grep -q 'AES-GCM'; then
        echo "PASS the accelerator lists CKM_AES_GCM"
    else
        echo "FAIL the accelerator does not list CKM_AES_GCM"; exit 1
    fi
    echo "--- AES-GCM Wycheproof file through slot 0, accelerator first"
    wycheproof aes_gcm
    echo "--- the same, each operation cut into 3 pieces"
    OPENCF_ACCEL_BULK_PARTS=3 wycheproof aes_gcm
    echo "accel: AES-GCM Wycheproof through slot 0 passed"
fi
