#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2317  # functions run through check/check_out
# Java: the JDK's SunPKCS11 provider configured for libopencf.so slot 0 (slotListIndex = 0)
# with a disabledMechanisms list. tests/integration/java/OpenCfJava.java, compiled with javac
# here, uses KeyStore "PKCS11" (aliases, certificates), KeyPairGenerator RSA and EC,
# Signature SHA256withRSA, SHA256withECDSA and RSASSA-PSS, Cipher AES/GCM/NoPadding and
# RSA/ECB/OAEPPadding, Mac HmacSHA256 and a JSSE TLS server on 127.0.0.1 whose key is in the
# token, each checked with Java's software providers; cryptoadm stat shows OpenCF did
# the work.
set -uo pipefail

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
integration_init java

if ! command -v javac >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1; then
    skip "Java" "javac or java is missing (Debian: default-jdk-headless)"
    fail "a JDK is installed"
    finish
fi
ENGINE_SO="$(find_pkcs11_engine)" || ENGINE_SO=""

token_init
# The TLS key entry: a key pair made through slot 0, a self-signed certificate for it and the
# certificate stored beside the key with the same CKA_ID (SunPKCS11 pairs them by CKA_ID).
make_tls_entry() {
    p11_login --keypairgen --key-type rsa:2048 --id 51 --label java-tls &&
        if [ -n "$ENGINE_SO" ]; then
            write_openssl_conf "$WORK/openssl.cnf" "$ENGINE_SO"
            OPENSSL_CONF="$WORK/openssl.cnf" openssl req -new -x509 -engine pkcs11 -keyform engine \
                -key "pkcs11:token=OpenCF%20Metaslot;object=java-tls;type=private;pin-value=$PIN" \
                -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -days 2 \
                -out "$WORK/tls.pem"
        else
            echo "the OpenSSL pkcs11 engine is needed to certify the token key" >&2
            false
        fi &&
        openssl x509 -in "$WORK/tls.pem" -outform DER -out "$WORK/tls.der" &&
        p11_login --write-object "$WORK/tls.der" --type cert --id 51 --label java-tls
}
check "RSA key pair and its certificate in the token (pkcs11-tool, openssl engine)" make_tls_entry

cat >"$WORK/sunpkcs11.cfg" <<CFG
name = OpenCF
library = $LIB
slotListIndex = 0
# Not to be used through the token by Java: SHA-1 digests and Triple DES.
disabledMechanisms = {
    CKM_SHA_1
    CKM_DES3_KEY_GEN
    CKM_DES3_ECB
    CKM_DES3_CBC
}
CFG

check "javac OpenCfJava.java" javac -d "$WORK/classes" "$INTEGRATION_DIR/java/OpenCfJava.java"
stat_reset
run_program OpenCfJava java -cp "$WORK/classes" OpenCfJava "$WORK/sunpkcs11.cfg" "$PIN" java-tls "$WORK/tls.pem"

check_stat "cryptoadm stat: OpenCF made the SHA256withRSA signature" 'CKM_SHA256_RSA_PKCS'
check_stat "cryptoadm stat: OpenCF made the ECDSA signature" 'CKM_ECDSA(_SHA256)?'
check_stat "cryptoadm stat: OpenCF made the PSS signatures" '(CKM_RSA_PKCS_PSS|CKM_SHA256_RSA_PKCS_PSS)'
check_stat "cryptoadm stat: OpenCF ran AES-GCM" 'CKM_AES_GCM' 2
check_stat "cryptoadm stat: OpenCF ran HMAC-SHA256" 'CKM_SHA256_HMAC'
check_stat "cryptoadm stat: OpenCF decrypted RSA" 'CKM_RSA_PKCS(_OAEP)?'

finish
