#!/usr/bin/env bash
# pktool delete: by label, id or URI; confirmation unless -y.
source "$(dirname "$0")/lib.sh"
init_pin
PKTP genkey --label one --id 01 >/dev/null
PKTP genkey --label two --id 02 >/dev/null
PKTP genkeypair --keytype ec --label pair --id 03 >/dev/null
check "without -y and without a terminal: refuses" 2 'add -y' bash -c "setsid $PKTOOL --module $MODULE_LIB --pin-file $WORK/pin delete --label one </dev/null"
jcheck "nothing was deleted" "len(d['objects']) == 1" PKTP --json list --label one
check "delete by label" 0 'deleted pkcs11:.*object=one' PKTP delete --label one -y
jcheck "gone" "len(d['objects']) == 0" PKTP --json list --label one
check "delete by id" 0 'object=two' PKTP delete --id 02 -y
check "delete by URI (private half only)" 0 'type=private' PKTP delete --uri 'pkcs11:object=pair;type=private' -y
jcheck "public half stays" "[o['class'] for o in d['objects']] == ['public']" PKTP --json list --label pair
check "unknown object: exit 5" 5 'no object matches' PKTP delete --label nothing -y
check "no selector: usage error" 2 'name what to delete' PKTP delete -y
# An object that matches but cannot be read (the test-only faulty module wrapping the same
# software token answers CKR_DEVICE_ERROR for the objects labelled "bad"): the readable
# matches are deleted, the unreadable one is named by its handle and kept, and delete exits 3.
FAULTY="$LIB_DIR/libopencf_faulty.so"
if [ -e "$FAULTY" ]; then
    PKTF() { OPENCF_FAULTY_INNER="$LIB_DIR/libopencf_softtoken.so" OPENCF_FAULTY_MODE=attr-error:bad \
        "$PKTOOL" --module "$FAULTY" --pin-file "$WORK/pin" "$@"; }
    PKTP genkey --label bad --id 0e >/dev/null
    PKTP genkey --label good --id 0e >/dev/null
    PKTP genkey --label bad2 --id 0f >/dev/null
    check "unreadable match: the readable one deleted" 3 'deleted pkcs11:.*object=good' PKTF delete --id 0e -y
    check "unreadable match named by its handle" 3 \
        'object handle [0-9]+: reading attributes: C_GetAttributeValue returned CKR_DEVICE_ERROR; not deleted' \
        PKTF delete --id 0e -y
    check "and counted" 3 '1 of 1 matching objects could not be read' PKTF delete --label bad -y
    jcheck "the unreadable object kept, the readable one gone" \
        "sorted(o['label'] for o in d['objects'] if o['id'] == '0e') == ['bad']" PKTP --json list --objtype secret-key
    jcheck "--json names the unreadable one" "d['deleted'] == [] and len(d['unreadable']) == 1" \
        bash -c "OPENCF_FAULTY_INNER=$LIB_DIR/libopencf_softtoken.so OPENCF_FAULTY_MODE=attr-error:bad $PKTOOL --module $FAULTY --pin-file $WORK/pin --json delete --label bad -y; [ \$? -eq 3 ]"
    check "readable objects still deleted normally" 0 'object=bad2' PKTF delete --label bad2 -y
else
    fail "an unreadable object: $FAULTY not built (cargo build --release -p opencf-faulty)"
fi
finish
