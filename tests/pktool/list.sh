#!/usr/bin/env bash
# pktool list: keys, certificates, all; attributes; filters; URI selection; --json.
source "$(dirname "$0")/lib.sh"
init_pin
PKTP genkeypair --keytype ec --label web >/dev/null
PKTP gencert --label web --subject "CN=web.example" >/dev/null
PKTP genkey --label aes --id 0a0b >/dev/null
check "human list shows every object" 0 "4 object\(s\)" PKTP list
check "human line has type, curve, flags and URI" 0 'curve="P-256"' PKTP list --objtype keys
check "flags shown" 0 'flags: .*sign' PKTP list --label web --type private
jcheck "--objtype keys: 3 keys, no cert" "len(d['objects']) == 3 and all(o['class'] != 'cert' for o in d['objects'])" PKTP --json list --objtype keys
jcheck "--objtype cert: the certificate with subject" "len(d['objects']) == 1 and d['objects'][0]['subject'] == 'CN=web.example'" PKTP --json list --objtype cert
jcheck "--label filter" "sorted(o['class'] for o in d['objects']) == ['cert', 'private', 'public']" PKTP --json list --label web
jcheck "--id filter" "len(d['objects']) == 1 and d['objects'][0]['label'] == 'aes'" PKTP --json list --id 0a0b
jcheck "--id with 0x and colons: the same key" "len(d['objects']) == 1 and d['objects'][0]['label'] == 'aes'" PKTP --json list --id 0x0a:0b
jcheck "URI selection (percent-encoded id)" "len(d['objects']) == 1 and d['objects'][0]['class'] == 'secret-key'" \
    PKTP --json list --uri 'pkcs11:token=OpenCF%20Metaslot;id=%0A%0B;type=secret-key'
uri="$(PKTP --json list --label web --type private | python3 -c 'import json,sys; print(json.load(sys.stdin)["objects"][0]["uri"])')"
jcheck "the URI list prints selects that object" "len(d['objects']) == 1 and d['objects'][0]['label'] == 'web'" PKTP --json list --uri "$uri"
check "bad URI is a usage error" 2 'unknown attribute' PKTP list --uri 'pkcs11:colour=red'
check "bad --type" 2 'unknown object type' PKTP list --type thing
jcheck "sensitive values are not shown" "'value' not in d['objects'][0]" PKTP --json list --label aes --values
check "bad --objtype names every choice" 2 'keys, private, public, cert, secret-key, data, all' PKTP list --objtype bogus
PKTP genkey --label plain --sensitive false --extractable >/dev/null
check "--values shows a non-sensitive key's value" 0 'value=[0-9a-f]{64}' PKTP list --values --label plain
# An object whose attributes cannot be read (the test-only faulty module wrapping the same
# software token answers CKR_DEVICE_ERROR for the objects labelled "aes", as for an object
# damaged in a token's store): the four others are listed, the unreadable one is named by its
# handle on stderr, and list exits 3.
FAULTY="$LIB_DIR/libopencf_faulty.so"
if [ -e "$FAULTY" ]; then
    PKTF() { OPENCF_FAULTY_INNER="$LIB_DIR/libopencf_softtoken.so" OPENCF_FAULTY_MODE=attr-error:aes \
        "$PKTOOL" --module "$FAULTY" --pin-file "$WORK/pin" "$@"; }
    check "an unreadable object: the others still listed, exit 3" 3 "token 'OpenCF Faulty': 4 object\(s\)" PKTF list
    check "the unreadable object named by its handle" 3 \
        "object handle [0-9]+: reading attributes: C_GetAttributeValue returned CKR_DEVICE_ERROR" PKTF list
    check "and the count of those unread" 3 "1 of 5 objects could not be read" PKTF list
    check "--json: the good objects and the unreadable one" 3 '"handle": [0-9]+' PKTF --json list
else
    fail "an unreadable object: $FAULTY not built (cargo build --release -p opencf-faulty)"
fi
# A label that is not UTF-8 (CKA_LABEL is bytes; pkcs11-tool writes what it is given): the URI
# list prints percent-encodes those bytes, so it selects the object (it used to encode the
# replacement character, a URI that matched nothing).
P11 --login --pin "$PIN" --keygen --key-type AES:16 --label $'raw\xffkey' --id 7e7e >/dev/null 2>&1
raw="$(PKTP --json list --id 7e7e | python3 -c 'import json,sys; print(json.load(sys.stdin)["objects"][0]["uri"])')"
check "the URI of a non-UTF-8 label encodes its bytes" 0 'object=raw%FFkey' echo "$raw"
jcheck "and selects the object" "len(d['objects']) == 1 and d['objects'][0]['id'] == '7e7e'" PKTP --json list --uri "$raw"
check "delete --uri with it" 0 'deleted .*object=raw%FFkey' PKTP delete --uri "$raw" -y
finish
