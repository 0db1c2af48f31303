#!/usr/bin/env bash
# pktool inittoken: initialise the empty slot with a label, SO PIN and user PIN.
source "$(dirname "$0")/lib.sh"
printf 'so-pin-1111\n' >"$WORK/so"
check "needs --slot" 2 'needs --slot' PKT --pin-file "$WORK/so" inittoken --label x
check "initialise slot 2" 0 "token 'Second' initialized in slot 2" \
    PKT --slot 2 --pin-file "$WORK/so" inittoken --label Second --user-pin-file "$WORK/pin"
jcheck "slot 2 now holds token 'Second'" \
    "[s for s in d['slots'] if s['slot'] == 2][0]['token']['label'] == 'Second'" PKT --json tokens
check "the new token is usable by label" 0 'created' PKTP --token Second genkey --label k2
check "its key is listed there" 0 'label="k2"' PKTP --token Second list
check "unknown token label: not found" 5 "no token labelled 'Nope'" PKTP --token Nope list
finish
