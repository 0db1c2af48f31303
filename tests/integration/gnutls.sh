#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2317  # functions run through check/check_out
# GnuTLS (Debian gnutls-bin) with --provider libopencf.so: p11tool lists the tokens, generates
# EC and RSA keys in the metaslot, lists them and test-signs; certtool makes a self-signed
# certificate with a pkcs11: URI key (openssl verifies it) and p11tool stores it in the token;
# gnutls-cli authenticates with that certificate and token key to an openssl s_server on
# 127.0.0.1. cryptoadm stat shows OpenCF signed. The PIN comes from GNUTLS_PIN.
set -uo pipefail

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
integration_init gnutls

for tool in p11tool certtool gnutls-cli; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        skip "GnuTLS" "$tool is missing (Debian: gnutls-bin)"
        fail "the GnuTLS tools are installed"
        finish
    fi
done
export GNUTLS_PIN="$PIN"
TOKEN_URI="pkcs11:token=OpenCF%20Metaslot"
EC_URI="$TOKEN_URI;object=gnutls-ec;type=private"
RSA_URI="$TOKEN_URI;object=gnutls-rsa;type=private"
P11TOOL=(p11tool --provider "$LIB")

check_out "p11tool --list-tokens shows the metaslot" 'URL: pkcs11:.*token=OpenCF%20Metaslot' \
    "${P11TOOL[@]}" --list-tokens
token_init
check "p11tool --generate-privkey ECDSA secp256r1 in the metaslot" \
    "${P11TOOL[@]}" --login --generate-privkey ECDSA --curve secp256r1 --label gnutls-ec --id 71 "$TOKEN_URI"
check "p11tool --generate-privkey RSA 2048 in the metaslot" \
    "${P11TOOL[@]}" --login --generate-privkey RSA --bits 2048 --label gnutls-rsa --id 72 "$TOKEN_URI"
check_out "p11tool --list-all shows the EC private key" 'token=OpenCF%20Metaslot;id=%71;object=gnutls-ec;type=private' \
    "${P11TOOL[@]}" --login --list-all "$TOKEN_URI"
check_out "p11tool --list-all shows the RSA private key" 'id=%72;object=gnutls-rsa;type=private' \
    "${P11TOOL[@]}" --login --list-all "$TOKEN_URI"

stat_reset
check_out "p11tool --test-sign with the RSA key" 'Verifying against public key in the token\.\.\. ok' \
    "${P11TOOL[@]}" --login --test-sign "$RSA_URI"
check_out "p11tool --test-sign with the EC key" 'Verifying against public key in the token\.\.\. ok' \
    "${P11TOOL[@]}" --login --test-sign "$EC_URI"
check_stat "cryptoadm stat: OpenCF made the RSA test signature" 'CKM_RSA_PKCS'
check_stat "cryptoadm stat: OpenCF made the ECDSA test signature" 'CKM_ECDSA'

cat >"$WORK/cert.tmpl" <<EOF
cn = localhost
expiration_days = 2
dns_name = localhost
ip_address = 127.0.0.1
tls_www_server
tls_www_client
signing_key
EOF
stat_reset
check "certtool --generate-self-signed with the pkcs11: URI key" \
    certtool --provider "$LIB" --generate-self-signed --load-privkey "$EC_URI" --template "$WORK/cert.tmpl" \
    --outfile "$WORK/cert.pem"
check_out "openssl verifies the GnuTLS certificate" ': OK' openssl verify -CAfile "$WORK/cert.pem" "$WORK/cert.pem"
check_stat "cryptoadm stat: OpenCF signed the certificate" 'CKM_ECDSA'
check "p11tool --write stores the certificate beside its key" \
    "${P11TOOL[@]}" --login --write --load-certificate "$WORK/cert.pem" --label gnutls-ec --id 71 "$TOKEN_URI"
check_out "p11tool --list-all-certs shows it" 'object=gnutls-ec;type=cert' \
    "${P11TOOL[@]}" --list-all-certs "$TOKEN_URI"

# gnutls-cli's client certificate and key are in the token; the server demands and verifies them.
client_auth() {
    local port
    port="$(free_port)"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$WORK/server.key" \
        -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -days 2 \
        -out "$WORK/server.pem" 2>/dev/null || return 1
    SERVER_TIMEOUT=30 bg s_server openssl s_server -accept "127.0.0.1:$port" -cert "$WORK/server.pem" \
        -key "$WORK/server.key" -Verify 1 -CAfile "$WORK/cert.pem" -verify_return_error -www -naccept 1
    wait_log "$WORK/s_server.log" '^ACCEPT' 20 || { echo "s_server did not start"; return 1; }
    printf 'GET / HTTP/1.0\r\n\r\n' | timeout 20 gnutls-cli --provider "$LIB" --x509cafile "$WORK/server.pem" \
        --x509certfile "$WORK/cert.pem" --x509keyfile "$EC_URI" -p "$port" 127.0.0.1
}
stat_reset
check_out "gnutls-cli authenticates to s_server with the token key" 'HTTP/1.0 200' client_auth
check_stat "cryptoadm stat: OpenCF signed the client's CertificateVerify" 'CKM_ECDSA'

finish
