#!/usr/bin/env bash
# pktool import: PEM/DER private keys, public keys, certificates; PKCS#12 (openssl-made) whose
# key then signs data that openssl verifies; wrong password and bad files.
source "$(dirname "$0")/lib.sh"
init_pin
openssl req -x509 -newkey rsa:2048 -nodes -keyout rsa.key -out rsa.crt -subj /CN=p12-user -days 5 2>/dev/null
printf 'p12-pass\n' >p12pass
openssl pkcs12 -export -inkey rsa.key -in rsa.crt -out user.p12 -passout file:p12pass
jcheck "PKCS#12 import: key pair and certificate" \
    "sorted(o['class'] for o in d['created']) == ['cert', 'private', 'public'] and len({o['id'] for o in d['created']}) == 1" \
    PKTP --json import -i user.p12 --p12-pass-file p12pass --label p12
id="$(PKTP --json list --label p12 --type private | python3 -c 'import json,sys; print(json.load(sys.stdin)["objects"][0]["id"])')"
printf 'data to sign\n' >data
ok "the imported key signs (pkcs11-tool)" P11 --login --pin "$PIN" --sign -m SHA256-RSA-PKCS --id "$id" -i data -o data.sig
ok "openssl dgst -verify accepts it" openssl dgst -sha256 -verify <(openssl x509 -in rsa.crt -pubkey -noout) -signature data.sig data
cat rsa.crt rsa.key >combo.pem
jcheck "PEM with a certificate then its key: key pair and certificate, one label and id" \
    "sorted(o['class'] for o in d['created']) == ['cert', 'private', 'public'] and {o['label'] for o in d['created']} == {'combo'} and len({o['id'] for o in d['created']}) == 1" \
    PKTP --json import -i combo.pem --label combo
check "no terminal for the file password: names its options" 2 'use --p12-pass-file or --p12-pass-env' \
    bash -c "setsid $PKTOOL --module $MODULE_LIB --pin-file $WORK/pin import -i user.p12 </dev/null"
check "unset password variable: usage error" 2 "NOPE_UNSET_VAR_X is not set" PKTP import -i user.p12 --p12-pass-env NOPE_UNSET_VAR_X
printf 'wrong\n' >badpass
check "wrong PKCS#12 password: exit 9 and message" 9 'cannot open the PKCS#12 file: wrong password' PKTP import -i user.p12 --p12-pass-file badpass
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-384 -out ec.pem 2>/dev/null
jcheck "PEM EC private key (PKCS#8)" "d['created'][0]['curve'] == 'P-384' and d['created'][1]['class'] == 'public'" PKTP --json import -i ec.pem --label ec
jcheck "a second import of a key lists only the objects it created" \
    "[o['label'] for o in d['created']] == ['ec2', 'ec2']" PKTP --json import -i ec.pem --label ec2
openssl pkey -in ec.pem -pubout -out ec.pub
ok "stored public key equals the file's" bash -c "$PKTOOL --module $MODULE_LIB --pin-file $WORK/pin export --label ec2 --type public | cmp - ec.pub"
openssl genpkey -algorithm ED25519 -outform DER -out ed.der 2>/dev/null
jcheck "DER Ed25519 private key" "d['created'][0]['curve'] == 'Ed25519'" PKTP --json import -i ed.der --label ed
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 2>/dev/null | openssl pkey -pubout -out rsa.pub
jcheck "PEM public key alone" "len(d['created']) == 1 and d['created'][0]['class'] == 'public' and d['created'][0]['bits'] == 2048" PKTP --json import -i rsa.pub --label pubonly
openssl x509 -in rsa.crt -outform DER -out rsa.der
jcheck "DER certificate with --id" "d['created'][0]['class'] == 'cert' and d['created'][0]['id'] == 'beef'" PKTP --json import -i rsa.der --label c2 --id beef
# A label already used by an object of the same class: refused, exit 10, nothing imported.
check "import under a label a key already has: refused, exit 10" 10 \
    "already has a private key labelled 'ec'" PKTP import -i rsa.key --label ec
jcheck "nothing of it was imported" "sorted(o['class'] for o in d['objects']) == ['private', 'public']" \
    PKTP --json list --label ec
check "a certificate label in use (the PKCS#12 file's, labelled p12 before)" 10 \
    "already has a certificate labelled 'p12'" PKTP import -i rsa.der --label p12
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out two1.pem 2>/dev/null
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out two2.pem 2>/dev/null
cat two1.pem two2.pem >two.pem
check "two keys of one file under one --label: refused" 10 "two new private keys would both be labelled 'two'" \
    PKTP import -i two.pem --label two
jcheck "--allow-duplicate-label imports them" "len(d['created']) == 4" \
    PKTP --json import -i two.pem --label two --allow-duplicate-label
jcheck "--allow-duplicate-label imports under a label in use" "len(d['created']) == 2" \
    PKTP --json import -i rsa.key --label ec --allow-duplicate-label
echo "not a key" >junk.txt
check "unrecognised file: exit 4" 4 'not a certificate, key or PKCS#12' PKTP import -i junk.txt
check "missing file: exit 4" 4 'cannot read missing.pem' PKTP import -i missing.pem
printf 'x' >unreadable.pem; chmod 000 unreadable.pem
if [ "$(id -u)" -ne 0 ]; then
    check "unreadable file: exit 4" 4 'cannot read unreadable.pem' PKTP import -i unreadable.pem
else
    check "unreadable file (a directory): exit 4" 4 'cannot read' PKTP import -i "$WORK"
fi
# Two users' PKCS#12 files from one CA: the CA certificate comes with both. The second import
# finds it already in the token (same certificate, label and id) and does not store it again,
# neither refusing the file (exit 10) nor duplicating the CA.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.crt -subj "/CN=Shared CA" -days 5 2>/dev/null
for u in alice bob; do
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $u.key -out $u.csr -subj "/CN=$u" 2>/dev/null
    openssl x509 -req -in $u.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out $u.crt -days 5 2>/dev/null
    openssl pkcs12 -export -inkey $u.key -in $u.crt -certfile ca.crt -out $u.p12 -passout file:p12pass
done
jcheck "first user's PKCS#12: key pair, certificate and the CA" \
    "sorted(o['label'] for o in d['created']) == ['Shared CA', 'alice', 'alice', 'alice']" \
    PKTP --json import -i alice.p12 --p12-pass-file p12pass
jcheck "second user's: the CA already present, not stored again" \
    "sorted(o['label'] for o in d['created']) == ['bob', 'bob', 'bob'] and [o['label'] for o in d['present']] == ['Shared CA']" \
    PKTP --json import -i bob.p12 --p12-pass-file p12pass
jcheck "one CA certificate in the token" "len(d['objects']) == 1" PKTP --json list --label 'Shared CA'
check "the text output names it present" 0 'present +cert +label="Shared CA"' PKTP import -i bob.p12 --p12-pass-file p12pass --label bob2
# The names a PKCS#12 file gives its key's certificate and its CA certificates label them
# (the CN where it gives none); --label still wins.
openssl pkcs12 -export -inkey alice.key -in alice.crt -certfile ca.crt -name "Alice's signing key" \
    -caname "Our CA" -out named.p12 -passout file:p12pass
jcheck "friendlyName labels the key pair, its certificate and the CA" \
    "sorted(o['label'] for o in d['created']) == [\"Alice's signing key\"] * 3 + ['Our CA']" \
    PKTP --json import -i named.p12 --p12-pass-file p12pass --allow-duplicate-label
jcheck "--label over the friendlyName" \
    "sorted(o['label'] for o in d['created'])[:3] == ['alice3'] * 3" \
    PKTP --json import -i named.p12 --p12-pass-file p12pass --label alice3 --allow-duplicate-label
# A PKCS#12 file of certificates alone (openssl pkcs12 -export -nokeys) is imported as any file
# without a private key: each certificate is its own object.
openssl pkcs12 -export -nokeys -in ca.crt -out certs-only.p12 -passout file:p12pass
jcheck "a PKCS#12 file without a key: its certificate imported" \
    "[o['class'] for o in d['created']] == ['cert'] and d['created'][0]['label'] == 'certs-only'" \
    PKTP --json import -i certs-only.p12 --p12-pass-file p12pass --label certs-only
finish
