#!/usr/bin/env bash
# pktool signcsr: a CA key in the token issues a certificate for a CSR made by openssl;
# openssl verify -CAfile accepts it; CA certificate from the token or a file.
source "$(dirname "$0")/lib.sh"
init_pin
PKTP genkeypair --keytype ec --curve P-384 --label ca >/dev/null
PKTP gencert --label ca --subject "CN=Test CA,O=Example" --ca --days 30 -o ca.pem >/dev/null
openssl req -new -newkey rsa:2048 -nodes -keyout leaf.key -subj "/CN=leaf.example" \
    -addext "subjectAltName=DNS:leaf.example,IP:198.51.100.4" -out leaf.csr 2>/dev/null
ok "signcsr with the CA certificate from the token" PKTP signcsr --label ca --csr leaf.csr --days 7 -o leaf.pem
check "openssl verify -CAfile ca.pem" 0 'leaf.pem: OK' openssl verify -CAfile ca.pem leaf.pem
check "issuer is the CA" 0 'issuer=CN ?= ?Test CA' openssl x509 -in leaf.pem -noout -issuer
check "requested SANs kept" 0 'DNS:leaf.example, IP Address:198.51.100.4' openssl x509 -in leaf.pem -noout -text
check "leaf is not a CA" 0 'CA:FALSE' openssl x509 -in leaf.pem -noout -text
PKTP genkeypair --keytype rsa --label rsaca >/dev/null
PKTP gencert --label rsaca --subject "CN=RSA CA" --ca --no-store -o rsaca.pem >/dev/null
ok "RSA CA with --ca-cert FILE" PKTP signcsr --label rsaca --ca-cert rsaca.pem --csr leaf.csr -o leaf2.pem
check "verifies against the RSA CA" 0 'leaf2.pem: OK' openssl verify -CAfile rsaca.pem leaf2.pem
check "no CA certificate in the token: exit 5" 5 'give --ca-cert' PKTP signcsr --label rsaca --csr leaf.csr
echo junk >bad.csr
check "not a CSR: exit 4" 4 'not a PKCS#10 request' PKTP signcsr --label ca --csr bad.csr
# A --ca-cert of another key is the file's fault, said as such (exit 4), not a token failure;
# a request with an empty subject and no subjectAltName is refused (RFC 5280 4.1.2.6).
check "--ca-cert of another key: exit 4, naming the file" 4 "the CA certificate's public key is not the one of the token key" \
    PKTP signcsr --label ca --ca-cert rsaca.pem --csr leaf.csr -o leaf3.pem
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout anon.key -subj "/" -out anon.csr 2>/dev/null
check "a request without any subject: exit 4" 4 'the request names no subject' \
    PKTP signcsr --label ca --csr anon.csr -o anon.pem
check "a SAN without a name: usage error" 2 "SAN 'DNS:' has no name after its kind" \
    PKTP gencsr --label ca --subject CN=x --san 'DNS:,email:' -o x.csr
finish
