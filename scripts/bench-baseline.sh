#!/usr/bin/env bash
# The baseline table of docs/PERFORMANCE.md (issue 5, point 4): every mechanism family through
# slot 0 of libopencf.so, beside native OpenSSL and SoftHSMv2, 1 and 2 threads, in one cfspeed
# run. The framework's configuration lists only the software token, so the figures are the
# softtoken's behind the metaslot whatever other providers lie in target/release.
#
#   scripts/bench-baseline.sh [extra cfspeed arguments]     # e.g. --seconds 1 --runs 5
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REL="$ROOT/target/release"
SOFTHSM="${SOFTHSM:-/usr/lib/softhsm/libsofthsm2.so}"
for f in "$REL/cfspeed" "$REL/libopencf.so" "$REL/libopencf_softtoken.so" "$SOFTHSM"; do
    [ -e "$f" ] || { echo "bench-baseline: $f missing (cargo build --release; apt-get install softhsm2)" >&2; exit 1; }
done
WORK="$(mktemp -d "${TMPDIR:-/tmp}/opencf-baseline.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/ks" "$WORK/stat" "$WORK/softhsm"
printf '[[provider]]\nname = "softtoken"\nmodule = "%s"\n' "$REL/libopencf_softtoken.so" >"$WORK/opencf.toml"
printf 'directories.tokendir = %s\nobjectstore.backend = file\n' "$WORK/softhsm" >"$WORK/softhsm2.conf"
export OPENCF_CONF="$WORK/opencf.toml" OPENCF_SOFTTOKEN_DIR="$WORK/ks" OPENCF_STAT_DIR="$WORK/stat" \
    SOFTHSM2_CONF="$WORK/softhsm2.conf"
softhsm2-util --init-token --free --label bench --pin 1234 --so-pin 5678 >/dev/null

MECHS=(
    CKM_AES_GCM CKM_AES_CBC_PAD CKM_AES_CTR CKM_AES_ECB CKM_CHACHA20_POLY1305
    CKM_SHA256 CKM_SHA512 CKM_SHA3_256 CKM_SHA256_HMAC
    CKM_SHA256_RSA_PKCS CKM_SHA256_RSA_PKCS:2048:verify CKM_SHA256_RSA_PKCS_PSS CKM_RSA_PKCS_OAEP
    CKM_ECDSA:P-256 CKM_ECDSA:P-256:verify CKM_ECDSA:P-384 CKM_EDDSA CKM_ECDH1_DERIVE
    CKM_ML_DSA CKM_ML_KEM
)
set -x
"$REL/cfspeed" --module "$REL/libopencf.so" --slot 0 --native \
    --vs-module "$SOFTHSM" --vs-pin 1234 --threads 2 --sizes 16,1024,16384 \
    --seconds 0.3 --runs 3 "${MECHS[@]}" "$@"
