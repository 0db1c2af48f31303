#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# p11-kit: OpenCF registered with a per-user module file (packaging/opencf.module.in, as
# `make install-user` writes it) under a temporary XDG_CONFIG_HOME. `p11-kit list-modules`
# shows it; pkcs11-tool through p11-kit-proxy.so finds the "OpenCF Metaslot" token, makes a
# key there and signs with it; openssl verifies; cryptoadm stat shows OpenCF signed.
#
# p11-kit ignores per-user configuration in programs running as root, so as root the script
# runs itself again as the unprivileged user nobody (with setpriv); nothing system-wide is
# touched either way.
set -uo pipefail

if [ "$(id -u)" -eq 0 ] && [ -z "${OPENCF_P11KIT_AS_USER:-}" ]; then
    if command -v setpriv >/dev/null 2>&1; then
        echo "note: p11-kit skips per-user module files for root; running this test as nobody"
        exec setpriv --reuid=65534 --regid=65534 --clear-groups \
            env OPENCF_P11KIT_AS_USER=1 HOME=/nonexistent TMPDIR=/tmp "$0" "$@"
    fi
    echo "p11-kit: running as root and setpriv is missing: p11-kit would ignore the per-user module file" >&2
    echo "p11-kit: 0 passed, 1 failed"
    exit 1
fi

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
integration_init p11-kit

PROXY=""
for f in /usr/lib/x86_64-linux-gnu/p11-kit-proxy.so /usr/lib/*/p11-kit-proxy.so /usr/lib64/p11-kit-proxy.so \
    /usr/lib/p11-kit-proxy.so; do
    if [ -e "$f" ]; then PROXY="$f"; break; fi
done
if ! command -v p11-kit >/dev/null 2>&1 || [ -z "$PROXY" ]; then
    skip "p11-kit" "p11-kit or p11-kit-proxy.so not installed (Debian: p11-kit p11-kit-modules)"
    fail "p11-kit is installed"
    finish
fi

export HOME="$WORK/home"
mkdir -p "$XDG_CONFIG_HOME/pkcs11/modules" "$HOME"
sed "s|@LIBDIR@|$(dirname "$LIB")|" "$ROOT/packaging/opencf.module.in" \
    >"$XDG_CONFIG_HOME/pkcs11/modules/opencf.module"

check_out "p11-kit list-modules shows the opencf module" '^opencf: .*libopencf\.so' p11-kit list-modules
check_out "p11-kit list-modules shows the OpenCF Metaslot token" 'token: OpenCF Metaslot' p11-kit list-modules
PROXY_TOOL=(pkcs11-tool --module "$PROXY" --token-label "$METASLOT")
check_out "pkcs11-tool via $(basename "$PROXY") lists the OpenCF Metaslot token" "token label +: $METASLOT" \
    pkcs11-tool --module "$PROXY" --list-token-slots
check_out "change the expired PIN through the proxy" 'PIN successfully changed' \
    "${PROXY_TOOL[@]}" --login --pin changeme --change-pin --new-pin "$PIN"
check "EC P-256 key pair through the proxy" \
    "${PROXY_TOOL[@]}" --login --pin "$PIN" --keypairgen --key-type EC:prime256v1 --id a1 --label p11kit-ec
check_out "the key made through the proxy is in the softtoken" 'label: +p11kit-ec' \
    pkcs11-tool --module "$SOFTTOKEN" --login --pin "$PIN" --list-objects --type privkey

head -c 4096 /dev/urandom >"$WORK/data"
stat_reset
check "ECDSA-SHA256 signature through the proxy" \
    "${PROXY_TOOL[@]}" --login --pin "$PIN" --sign --mechanism ECDSA-SHA256 --signature-format openssl \
    --id a1 -i "$WORK/data" -o "$WORK/sig"
# From CKA_EC_POINT as listed through the proxy (scripts/lib/p256-spki.sh says why not
# --read-object).
# shellcheck source=scripts/lib/p256-spki.sh
. "$ROOT/scripts/lib/p256-spki.sh"
export_p256() {
    timeout --kill-after=5 "$CHECK_TIMEOUT" "${PROXY_TOOL[@]}" --list-objects --type pubkey |
        p256_spki a1 >"$WORK/pub.der"
}
check "export the public key through the proxy" export_p256
check_out "openssl verifies the signature" 'Verified OK' \
    openssl dgst -sha256 -keyform DER -verify "$WORK/pub.der" -signature "$WORK/sig" "$WORK/data"
check_stat "cryptoadm stat: OpenCF made the signature" 'CKM_ECDSA_SHA256'

# `make install` into a staging directory: the module file names the installed library, the
# TLS proxy's unit the installed daemon, and an installed tool finds the libraries in ../lib.
STAGE="$WORK/stage"
check "make install DESTDIR=… PREFIX=/usr/local" \
    make -C "$ROOT" --no-print-directory install DESTDIR="$STAGE" PREFIX=/usr/local
for f in usr/local/lib/libopencf.so usr/local/lib/libopencf_softtoken.so \
    usr/local/lib/libopencf_accel.so usr/local/bin/cryptoadm usr/local/bin/opencf-tlsproxy \
    usr/local/bin/tlsproxycfg; do
    check "installed $f" test -x "$STAGE/$f"
done
check_out "the module file names the installed libopencf.so" '^module: /usr/local/lib/libopencf.so$' \
    cat "$STAGE/etc/pkcs11/modules/opencf.module"
check_out "the unit runs the installed daemon" '^ExecStart=/usr/local/bin/opencf-tlsproxy ' \
    cat "$STAGE/usr/local/lib/systemd/system/opencf-tlsproxy@.service"
check_out "an installed cryptoadm finds the libraries in ../lib" "softtoken +$STAGE/usr/local/lib/libopencf_softtoken.so" \
    env -u OPENCF_LIB_DIR -u OPENCF_CONF XDG_CONFIG_HOME="$WORK/stage-config" "$STAGE/usr/local/bin/cryptoadm" list
check "make uninstall leaves nothing behind" \
    bash -c 'make -C "$1" --no-print-directory uninstall DESTDIR="$2" PREFIX=/usr/local >/dev/null && [ -z "$(find "$2" -type f)" ]' _ "$ROOT" "$STAGE"

finish
