#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Python: PyKCS11 (tests/python/requirements.txt, installed into .venv by make deps) loads
# libopencf.so; tests/integration/python/opencf_pykcs11.py generates RSA, EC and AES keys
# through slot 0, signs (PKCS#1 v1.5, PSS, ECDSA), decrypts RSA-OAEP and runs AES-GCM, each
# result checked with the cryptography package; cryptoadm stat shows OpenCF did the work.
# python-pkcs11, the other binding, has its own suite: tests/python (make suite-python).
set -uo pipefail

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
integration_init python

PY="${VENV:-$ROOT/.venv}/bin/python"
if [ ! -x "$PY" ] || ! "$PY" -c 'import PyKCS11, cryptography' 2>/dev/null; then
    skip "PyKCS11" "$PY with PyKCS11 and cryptography is missing (make deps installs tests/python/requirements.txt)"
    fail "PyKCS11 is installed"
    finish
fi

token_init
stat_reset
run_program opencf_pykcs11 "$PY" "$INTEGRATION_DIR/python/opencf_pykcs11.py" "$LIB" "$PIN"
check_stat "cryptoadm stat: OpenCF made the RSA signatures" 'CKM_SHA256_RSA_PKCS(_PSS)?' 2
check_stat "cryptoadm stat: OpenCF made the ECDSA signature" 'CKM_ECDSA_SHA256'
check_stat "cryptoadm stat: OpenCF decrypted RSA-OAEP" 'CKM_RSA_PKCS_OAEP'
check_stat "cryptoadm stat: OpenCF ran AES-GCM" 'CKM_AES_GCM' 2

finish
