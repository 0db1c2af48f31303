#!/usr/bin/env bash
# pktool gencert: self-signed certificates from RSA, EC, Ed25519 keys; stored with the key's id.
source "$(dirname "$0")/lib.sh"
init_pin
for kt in rsa ec ed25519; do
    PKTP genkeypair --keytype $kt --label $kt >/dev/null
    ok "$kt: gencert" PKTP gencert --label $kt --subject "CN=$kt self" --san "DNS:$kt.example" --days 10 -o $kt.crt
    check "$kt: openssl x509 -text parses it" 0 "Subject: CN ?= ?$kt self" openssl x509 -in $kt.crt -noout -text
    ok "$kt: self-signature verifies" openssl verify -CAfile $kt.crt -partial_chain $kt.crt
    ok "$kt: certificate key equals token public key" bash -c "openssl x509 -in $kt.crt -pubkey -noout | cmp - <($PKTOOL --module $MODULE_LIB --pin-file $WORK/pin export --label $kt --type public)"
    jcheck "$kt: stored in the token with the key's id" \
        "len(d['objects']) == 3 and len({o['id'] for o in d['objects']}) == 1" PKTP --json list --label $kt
done
check "validity in days" 0 'notAfter' openssl x509 -in rsa.crt -noout -enddate
ok "--ca sets CA:TRUE" bash -c "$PKTOOL --module $MODULE_LIB --pin-file $WORK/pin gencert --label ec --subject CN=ca --ca --no-store -o ca.crt && openssl x509 -in ca.crt -noout -text | grep -q 'CA:TRUE'"
check "--serial" 0 'serial=0ABCDEF1' bash -c "$PKTOOL --module $MODULE_LIB --pin-file $WORK/pin gencert --label ec --subject CN=s --serial 0abcdef1 --no-store -o s.crt && openssl x509 -in s.crt -noout -serial"
check "empty subject: usage error" 2 'subject is empty' PKTP gencert --label ec --subject "" --no-store -o empty.crt
check "unknown subject name: usage error naming it" 2 "unknown attribute name 'XX'" PKTP gencert --label ec --subject "XX=1" --no-store -o x.crt
long="CN=$(printf 'a%.0s' $(seq 1 5000))"
check "a CN over 64 characters: the reason, the value cut short" 2 \
    "subject part 'CN=a{37}…': bad value for CN \(5000 characters\): string too long\$" \
    PKTP gencert --label ec --subject "$long" --no-store -o x.crt
check "C of three letters: too long" 2 'bad value for C \(3 characters\): string too long' PKTP gencert --label ec --subject "C=USA" --no-store -o x.crt
PKTP genkeypair --keytype x25519 --label xk >/dev/null
check "X25519 cannot sign: usage error" 2 'RSA, EC and EdDSA' PKTP gencert --label xk --subject CN=x
# The certificate takes the key's label: a second one for that key is refused unless allowed.
check "a second stored certificate under a label in use: refused, exit 10" 10 \
    "already has a certificate labelled 'ec'" PKTP gencert --label ec --subject CN=again
ok "--no-store stores nothing, so it is not checked" PKTP gencert --label ec --subject CN=again --no-store -o again.crt
ok "--cert-label gives it a label of its own" PKTP gencert --label ec --subject CN=again --cert-label ec-2
ok "--allow-duplicate-label stores it" PKTP gencert --label ec --subject CN=again --allow-duplicate-label
jcheck "two certificates labelled ec" "len(d['objects']) == 2" PKTP --json list --label ec --type cert
# A gencert that fails changes nothing in the token: the format is checked before the login,
# and the output file is written before the certificate is stored.
PKTP genkeypair --keytype ec --label fresh >/dev/null
check "--format xyz: usage error" 2 '--format xyz: use pem or der' PKTP gencert --label fresh --subject CN=f --format xyz -o f.pem
check "an output in a missing directory: file error" 4 'cannot write' PKTP gencert --label fresh --subject CN=f -o "$WORK/no-dir/f.pem"
check "an output that is a directory: file error" 4 'cannot write' PKTP gencert --label fresh --subject CN=f -o "$WORK"
jcheck "no certificate was stored by the failed commands" "len(d['objects']) == 0" PKTP --json list --label fresh --type cert
ok "the retry stores it" PKTP gencert --label fresh --subject CN=f -o f.pem
finish
