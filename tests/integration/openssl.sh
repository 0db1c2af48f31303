#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2317  # functions run through check/check_out
# OpenSSL 3 with the libp11 pkcs11 engine (Debian libengine-pkcs11-openssl) pointed at
# libopencf.so by an OpenSSL configuration file in a temporary directory (OPENSSL_CONF).
# Keys made through slot 0 ("OpenCF Metaslot") sign a self-signed certificate (openssl req),
# serve TLS 1.3 and TLS 1.2 from openssl s_server on 127.0.0.1 to a verifying s_client, sign
# with pkeyutl (PKCS#1 v1.5, PSS, ECDSA) and decrypt RSA-OAEP; openssl's software
# verifies each result and cryptoadm stat shows that OpenCF did the private-key work.
set -uo pipefail

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
integration_init openssl

ENGINE_SO="$(find_pkcs11_engine)"
if [ -z "$ENGINE_SO" ]; then
    skip "OpenSSL pkcs11 engine" "engines-3/pkcs11.so not found (Debian: libengine-pkcs11-openssl)"
    fail "the libp11 engine is installed"
    finish
fi

write_openssl_conf "$WORK/openssl.cnf" "$ENGINE_SO"
export OPENSSL_CONF="$WORK/openssl.cnf"
ENG=(-engine pkcs11 -keyform engine)
RSA_URI="pkcs11:token=OpenCF%20Metaslot;object=ossl-rsa;type=private"
EC_URI="pkcs11:token=OpenCF%20Metaslot;object=ossl-ec;type=private"

check_out "the pkcs11 engine loads through OPENSSL_CONF" 'available' openssl engine -t pkcs11
token_init
check "RSA-2048 key pair through slot 0" p11_login --keypairgen --key-type rsa:2048 --id 21 --label ossl-rsa
check "EC P-256 key pair through slot 0" p11_login --keypairgen --key-type EC:prime256v1 --id 22 --label ossl-ec

stat_reset
check "openssl req -x509 with the RSA token key (PIN in the URI)" \
    openssl req -new -x509 "${ENG[@]}" -key "$RSA_URI;pin-value=$PIN" -subj /CN=localhost \
    -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -days 2 -out "$WORK/rsa.pem"
check_out "the RSA certificate verifies" ': OK' openssl verify -CAfile "$WORK/rsa.pem" "$WORK/rsa.pem"
check "openssl req -x509 with the EC token key (PIN with -passin)" \
    openssl req -new -x509 "${ENG[@]}" -key "$EC_URI" -passin "pass:$PIN" -subj /CN=localhost -days 2 \
    -out "$WORK/ec.pem"
check_out "the EC certificate verifies" ': OK' openssl verify -CAfile "$WORK/ec.pem" "$WORK/ec.pem"
check_stat "cryptoadm stat: OpenCF signed the RSA certificate" 'CKM_RSA_PKCS'
check_stat "cryptoadm stat: OpenCF signed the EC certificate" 'CKM_ECDSA'

PORT="$(free_port)"
SERVER_TIMEOUT=60 bg s_server openssl s_server "${ENG[@]}" -key "$RSA_URI;pin-value=$PIN" -cert "$WORK/rsa.pem" \
    -accept "127.0.0.1:$PORT" -www -naccept 3  # the readiness probe is one
https_get() { # s_client options...
    printf 'GET / HTTP/1.0\r\n\r\n' | timeout 20 openssl s_client -connect "127.0.0.1:$PORT" \
        -verify_return_error -CAfile "$WORK/rsa.pem" -verify_hostname localhost -servername localhost -ign_eof "$@"
}
stat_reset
if wait_port "$PORT" 20; then
    check_out "s_client verifies s_server's token-key certificate over TLS 1.3" \
        'HTTP/1.0 200' https_get -tls1_3
    check_out "s_client verifies s_server over TLS 1.2 (ECDHE-RSA)" 'HTTP/1.0 200' https_get -tls1_2 \
        -cipher ECDHE-RSA-AES128-GCM-SHA256
    check_stat "cryptoadm stat: OpenCF signed the handshakes (RSA-PSS)" 'CKM_RSA_PKCS_PSS' 2
else
    fail "openssl s_server listens on 127.0.0.1:$PORT" "$WORK/s_server.log"
fi

head -c 1000 /dev/urandom >"$WORK/data"
openssl dgst -sha256 -binary "$WORK/data" >"$WORK/hash"
sign_verify() { # cert, key URI, pkeyopt options...
    local cert="$1" uri="$2"; shift 2
    openssl pkeyutl -sign "${ENG[@]}" -inkey "$uri;pin-value=$PIN" -in "$WORK/hash" -out "$WORK/sig" "$@" &&
        openssl pkeyutl -verify -certin -inkey "$cert" -in "$WORK/hash" -sigfile "$WORK/sig" "$@"
}
stat_reset
check_out "pkeyutl -sign RSA PKCS#1 v1.5, verified with the certificate" 'Verified Successfully' \
    sign_verify "$WORK/rsa.pem" "$RSA_URI" -pkeyopt digest:sha256
check_out "pkeyutl -sign RSA-PSS, verified with the certificate" 'Verified Successfully' \
    sign_verify "$WORK/rsa.pem" "$RSA_URI" -pkeyopt digest:sha256 -pkeyopt rsa_padding_mode:pss \
    -pkeyopt rsa_pss_saltlen:32
check_out "pkeyutl -sign ECDSA, verified with the certificate" 'Verified Successfully' \
    sign_verify "$WORK/ec.pem" "$EC_URI"
dgst_sign_verify() {
    openssl dgst -sha256 "${ENG[@]}" -sign "$EC_URI;pin-value=$PIN" -out "$WORK/dsig" "$WORK/data" &&
        openssl x509 -in "$WORK/ec.pem" -pubkey -noout >"$WORK/ec.pub" &&
        openssl dgst -sha256 -verify "$WORK/ec.pub" -signature "$WORK/dsig" "$WORK/data"
}
oaep_decrypt() {
    local oaep=(-pkeyopt rsa_padding_mode:oaep -pkeyopt rsa_oaep_md:sha256)
    openssl pkeyutl -encrypt -certin -inkey "$WORK/rsa.pem" -in "$WORK/hash" -out "$WORK/ct" "${oaep[@]}" &&
        openssl pkeyutl -decrypt "${ENG[@]}" -inkey "$RSA_URI;pin-value=$PIN" -in "$WORK/ct" -out "$WORK/pt" \
            "${oaep[@]}" &&
        cmp "$WORK/pt" "$WORK/hash"
}
check_out "openssl dgst -sha256 -sign with the EC engine key" 'Verified OK' dgst_sign_verify
check "pkeyutl -decrypt RSA-OAEP with the engine key" oaep_decrypt
check_stat "cryptoadm stat: OpenCF made the PKCS#1 v1.5 signature" 'CKM_RSA_PKCS'
check_stat "cryptoadm stat: OpenCF made the PSS signature" 'CKM_RSA_PKCS_PSS'
check_stat "cryptoadm stat: OpenCF made the ECDSA signatures" 'CKM_ECDSA' 2
check_stat "cryptoadm stat: OpenCF decrypted RSA-OAEP" 'CKM_RSA_PKCS_OAEP'

if apt-cache policy pkcs11-provider 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    skip "pkcs11-provider variant" "not written yet; the package exists on this system"
else
    skip "pkcs11-provider variant" "Debian bookworm has no pkcs11-provider package"
fi

finish
