#!/usr/bin/env bash
# pktool setpin: the expired default PIN is supplied as the old PIN; user and SO PIN changes.
source "$(dirname "$0")/lib.sh"
check "object calls fail while the PIN is expired" 3 'CKR_PIN_EXPIRED' PKT --pin changeme list
check "setpin on a fresh token uses 'changeme' itself" 0 "PIN of 'OpenCF Metaslot' changed" \
    PKT setpin --new-pin-file "$WORK/pin"
check "list works with the new PIN" 0 'object\(s\)' PKTP list
check "old PIN no longer works" 7 'CKR_PIN_INCORRECT' PKT --pin changeme list
printf 'second-pin-5678\n' >"$WORK/pin2"
check "change the user PIN again (old from --pin-file)" 0 'changed' PKTP setpin --new-pin-file "$WORK/pin2"
check "new PIN from --pin-env works" 0 'object\(s\)' env P2=second-pin-5678 "$PKTOOL" --module "$MODULE_LIB" --pin-env P2 list
check "wrong old PIN is named" 7 'CKR_PIN_INCORRECT' PKTP setpin --new-pin nope-1234
check "SO PIN change (expired default supplied)" 0 'SO PIN' PKT --token 'OpenCF Softtoken' setpin --so --new-pin so-pin-9876
check "no terminal for the new PIN: names the new-PIN options" 2 'use --new-pin-file, --new-pin-env or --new-pin' \
    bash -c "setsid $PKTOOL --module $MODULE_LIB --pin-file $WORK/pin2 setpin </dev/null"
check "no PIN source and no terminal: clear message" 2 'no terminal' bash -c "setsid $PKTOOL --module $MODULE_LIB list </dev/null"
finish
