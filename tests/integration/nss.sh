#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2317  # functions run through check/check_out
# NSS (Debian libnss3-tools) with libopencf.so added to a temporary NSS database by modutil:
# the "OpenCF Metaslot" slot is listed; pk12util imports a key and certificate into it;
# certutil lists them (-L, -K) and makes an EC key and a self-signed certificate there (-S);
# vfychain validates the stored certificate; tstclnt authenticates to an openssl s_server on
# 127.0.0.1 with the client certificate and token key; cmsutil signs with the token key and
# openssl cms verifies. cryptoadm stat shows OpenCF signed.
#
# NSS looks up certificates on a login-required token only after logging in: name the token
# (-h "OpenCF Metaslot") and give the PIN (-f file) to certutil.
set -uo pipefail

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
integration_init nss

for tool in modutil certutil pk12util vfychain tstclnt cmsutil; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        skip "NSS" "$tool is missing (Debian: libnss3-tools)"
        fail "the NSS tools are installed"
        finish
    fi
done

DB="sql:$WORK/nssdb"
mkdir -p "$WORK/nssdb"
printf '%s\n' "$PIN" >"$WORK/pin.txt"
head -c 64 /dev/urandom >"$WORK/noise"
NSS_LOGIN=(-d "$DB" -h "$METASLOT" -f "$WORK/pin.txt")

check "certutil -N: an empty NSS database" certutil -N -d "$DB" --empty-password
check_out "modutil -add opencf" 'added to database' \
    modutil -dbdir "$DB" -add opencf -libfile "$LIB" -force
check_out "modutil -list shows the OpenCF Metaslot slot" "slot: $METASLOT" modutil -dbdir "$DB" -list
token_init

# A CA and a client certificate made by openssl, carried into the token in a PKCS#12 file.
make_p12() {
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$WORK/ca.key" -subj /CN=opencf-nss-ca -days 2 \
        -out "$WORK/ca.pem" &&
        openssl req -newkey rsa:2048 -nodes -keyout "$WORK/client.key" -subj /CN=opencf-nss-client \
            -out "$WORK/client.csr" &&
        openssl x509 -req -in "$WORK/client.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" -days 2 \
            -out "$WORK/client.pem" &&
        openssl pkcs12 -export -inkey "$WORK/client.key" -in "$WORK/client.pem" -name nssclient \
            -passout pass:p12-pass -out "$WORK/client.p12" &&
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$WORK/server.key" \
            -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -days 2 \
            -out "$WORK/server.pem" &&
        certutil -A -d "$DB" -n opencf-nss-ca -t "CT,C," -i "$WORK/ca.pem" &&
        certutil -A -d "$DB" -n test-server -t "P,," -i "$WORK/server.pem"
}
check "openssl: a CA, a client PKCS#12 file and a server certificate" make_p12

check_out "pk12util -i imports the key and certificate into the metaslot" 'IMPORT SUCCESSFUL' \
    pk12util -i "$WORK/client.p12" -d "$DB" -h "$METASLOT" -W p12-pass -k "$WORK/pin.txt"
check_out "certutil -L -h lists the certificate in the token" "$METASLOT:nssclient +u,u,u" \
    certutil -L "${NSS_LOGIN[@]}"
check_out "certutil -K -h lists the private key in the token" '> rsa +[0-9a-f]+ +nssclient' \
    certutil -K "${NSS_LOGIN[@]}"
check_out "the imported key is in the softtoken's keystore" 'Private Key Object; RSA' \
    pkcs11-tool --module "$SOFTTOKEN" --login --pin "$PIN" --list-objects --type privkey
export_cert() { certutil -L "${NSS_LOGIN[@]}" -n "$METASLOT:nssclient" -a >"$WORK/exported.pem" </dev/null; }
check "certutil -L -a exports the certificate from the token" export_cert
check_out "vfychain validates the token's certificate against the CA" 'Chain is good' \
    vfychain -d "$DB" -u 1 -a "$WORK/exported.pem"

stat_reset
check "certutil -S: EC key pair and self-signed certificate made in the token" \
    certutil -S "${NSS_LOGIN[@]}" -s CN=opencf-nss-gen -n nssgen -x -t "u,u,u" -k ec -q nistp256 -Z SHA256 \
    -z "$WORK/noise"
check_out "certutil -K lists the generated EC key" '> ec +[0-9a-f]+ +OpenCF Metaslot:nssgen' \
    certutil -K "${NSS_LOGIN[@]}"
check_stat "cryptoadm stat: OpenCF signed the NSS certificate" 'CKM_ECDSA'

# tstclnt's client certificate and key are in the token; the server demands and verifies them.
# tstclnt sends the request from a file (-A; with the request on stdin it never exits).
tls_client_auth() { # protocol range
    local port
    port="$(free_port)"
    SERVER_TIMEOUT=30 bg "s_server-$1" openssl s_server -accept "127.0.0.1:$port" -cert "$WORK/server.pem" \
        -key "$WORK/server.key" -Verify 1 -CAfile "$WORK/ca.pem" -verify_return_error -www -naccept 1
    wait_log "$WORK/s_server-$1.log" '^ACCEPT' 20 || { echo "s_server did not start"; return 1; }
    printf 'GET / HTTP/1.0\r\n\r\n' >"$WORK/request"
    timeout 20 tstclnt -h 127.0.0.1 -p "$port" -d "$DB" -n "$METASLOT:nssclient" -w "$PIN" -V "$1" \
        -A "$WORK/request" </dev/null
}
stat_reset
check_out "tstclnt authenticates with the token key over TLS 1.3" 'HTTP/1.0 200' tls_client_auth tls1.3:tls1.3
check_out "tstclnt authenticates with the token key over TLS 1.2" 'HTTP/1.0 200' tls_client_auth tls1.2:tls1.2
check_stat "cryptoadm stat: OpenCF signed both CertificateVerify messages" 'CKM_RSA_PKCS(_PSS)?' 2

head -c 2000 /dev/urandom >"$WORK/data"
cms_sign_verify() {
    cmsutil -S -N "$METASLOT:nssclient" -d "$DB" -p "$PIN" -H SHA256 -i "$WORK/data" -o "$WORK/data.p7" &&
        openssl cms -verify -inform DER -in "$WORK/data.p7" -CAfile "$WORK/ca.pem" -purpose any \
            -out "$WORK/data.out" &&
        cmp "$WORK/data" "$WORK/data.out"
}
stat_reset
check_out "cmsutil -S signs with the token key, openssl cms verifies" 'Verification successful' cms_sign_verify
check_stat "cryptoadm stat: OpenCF made the CMS signature" 'CKM_RSA_PKCS'

finish
