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
finish
