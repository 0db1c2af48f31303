#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2317  # functions run through check/check_out
# Node.js: pkcs11js (npm registry; a native addon built with node-gyp and the C++ toolchain)
# loads libopencf.so; tests/integration/node/opencf-pkcs11js.js generates RSA, EC and AES
# keys through slot 0, signs (PKCS#1 v1.5, PSS, ECDSA; verified with node:crypto), decrypts
# RSA-OAEP and runs AES-GCM; cryptoadm stat shows OpenCF did the work.
#
# The addon is built once into $OPENCF_NODE_CACHE (default ~/.cache/opencf-integration/node)
# against the installed Node headers (/usr/include/node, npm_config_nodedir=/usr), since
# node-gyp would otherwise download them. Without node, npm or a C++ compiler, or when the
# build fails, the test is skipped with the reason.
set -uo pipefail

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
integration_init node

SRC="$INTEGRATION_DIR/node"
CACHE="${OPENCF_NODE_CACHE:-$HOME/.cache/opencf-integration/node}"
for tool in node npm c++ make python3; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        skip "pkcs11js" "$tool is missing (Debian: nodejs npm build-essential python3)"
        finish
    fi
done

addon_ready() {
    [ -e "$CACHE/node_modules/pkcs11js/build/Release/pkcs11.node" ] && cmp -s "$SRC/package.json" "$CACHE/package.json"
}
build_addon() {
    mkdir -p "$CACHE" && cp "$SRC/package.json" "$CACHE/package.json" || return 1
    if [ -e /usr/include/node/node_api.h ]; then export npm_config_nodedir=/usr; fi
    (cd "$CACHE" && npm install --no-audit --no-fund --no-package-lock --foreground-scripts) &&
        [ -e "$CACHE/node_modules/pkcs11js/build/Release/pkcs11.node" ]
}
if addon_ready; then
    pass "pkcs11js addon already built in $CACHE"
elif CHECK_TIMEOUT=300 run_limited build_addon >"$WORK/npm.log" 2>&1; then
    pass "npm install pkcs11js (node-gyp build) in $CACHE"
else
    tail -15 "$WORK/npm.log" | sed 's/^/    /'
    skip "pkcs11js" "npm install pkcs11js did not build the addon (log above)"
    finish
fi

token_init
stat_reset
NODE_PATH="$CACHE/node_modules" run_program opencf-pkcs11js node "$SRC/opencf-pkcs11js.js" "$LIB" "$PIN"
check_stat "cryptoadm stat: OpenCF made the RSA signatures" 'CKM_SHA256_RSA_PKCS(_PSS)?' 2
check_stat "cryptoadm stat: OpenCF made the ECDSA signature" 'CKM_ECDSA_SHA256'
check_stat "cryptoadm stat: OpenCF decrypted RSA-OAEP" 'CKM_RSA_PKCS_OAEP'
check_stat "cryptoadm stat: OpenCF ran AES-GCM" 'CKM_AES_GCM' 2

finish
