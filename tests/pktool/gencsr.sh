#!/usr/bin/env bash
# pktool gencsr: PKCS#10 signed by RSA, EC and Ed25519 token keys; openssl req -verify.
source "$(dirname "$0")/lib.sh"
init_pin
for kt in rsa ec ed25519; do
    PKTP genkeypair --keytype $kt --label $kt >/dev/null
    ok "$kt: gencsr" PKTP gencsr --label $kt --subject "CN=$kt.example,O=Example Org,C=DE" --san "DNS:$kt.example,IP:192.0.2.7,email:ops@example.org" -o $kt.csr
    check "$kt: openssl req -verify" 0 'verify OK' openssl req -in $kt.csr -verify -noout
    check "$kt: subject" 0 "CN ?= ?$kt.example" openssl req -in $kt.csr -noout -subject
    check "$kt: SANs requested" 0 'DNS:.*IP Address:192.0.2.7.*email:ops@example.org' openssl req -in $kt.csr -noout -text
    ok "$kt: request key equals token key" bash -c "openssl req -in $kt.csr -pubkey -noout | cmp - <($PKTOOL --module $MODULE_LIB --pin-file $WORK/pin export --label $kt --type public)"
done
check "DER output" 0 'verify OK' bash -c "$PKTOOL --module $MODULE_LIB --pin-file $WORK/pin gencsr --label ec --subject CN=d --format der -o d.der && openssl req -inform DER -in d.der -verify -noout"
check "bad subject" 2 "has no '='" PKTP gencsr --label ec --subject "CN"
check "bad SAN" 2 'not an IP address' PKTP gencsr --label ec --subject CN=x --san IP:nope
check "no such key: exit 5" 5 'no object matches' PKTP gencsr --label none --subject CN=x
finish
