#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2317  # functions run through check/check_out
# Go: github.com/ThalesGroup/crypto11 (tests/integration/go, modules from the Go module
# proxy) opens the token "OpenCF Metaslot" of libopencf.so, generates RSA, ECDSA and AES keys
# there, signs through crypto.Signer (verified with crypto/rsa and crypto/ecdsa), decrypts
# RSA-OAEP through crypto.Decrypter and runs AES-GCM through cipher.AEAD; cryptoadm stat shows
# OpenCF did the work.
#
# crypto11 v1.5.0 needs Go 1.24.5 or newer (every release under the ThalesGroup path needs at
# least 1.23); Debian bookworm's golang-go is 1.19, so a newer Go must be on PATH (e.g. the
# go.dev tarball in /usr/local/go). Without one the test is skipped with that reason.
set -uo pipefail

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
integration_init go

export PATH="$PATH:/usr/local/go/bin" GOTOOLCHAIN=local GOFLAGS=-mod=readonly
SRC="$INTEGRATION_DIR/go"
need="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$SRC/go.mod")"
if ! command -v go >/dev/null 2>&1; then
    skip "crypto11" "no go toolchain on PATH; crypto11 needs Go >= $need (Debian bookworm's golang-go is 1.19)"
    finish
fi
have="$(go env GOVERSION | sed 's/^go//')"
if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
    skip "crypto11" "go $have is older than the $need crypto11 needs (Debian bookworm's golang-go is 1.19)"
    finish
fi

build() { (cd "$SRC" && go build -o "$WORK/opencf-crypto11" .); }
CHECK_TIMEOUT=300 check "go build (crypto11, cgo) with go $have" build
token_init
stat_reset
run_program opencf-crypto11 "$WORK/opencf-crypto11" "$LIB" "$PIN"
check_stat "cryptoadm stat: OpenCF made the RSA signatures" 'CKM_RSA_PKCS(_PSS)?' 2
check_stat "cryptoadm stat: OpenCF made the ECDSA signature" 'CKM_ECDSA'
check_stat "cryptoadm stat: OpenCF decrypted RSA-OAEP" 'CKM_RSA_PKCS_OAEP'
check_stat "cryptoadm stat: OpenCF ran AES-GCM" 'CKM_AES_GCM' 2

finish
