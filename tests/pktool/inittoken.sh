#!/usr/bin/env bash
# pktool inittoken: initialise the empty slot with a label, SO PIN and user PIN.
source "$(dirname "$0")/lib.sh"
printf 'so-pin-1111\n' >"$WORK/so"
check "needs --slot" 2 'needs --slot' PKT --pin-file "$WORK/so" inittoken --label x
# The softtoken's empty slot, by description (its token has no label yet).
SPARE="$(PKT --json tokens | python3 -c "import json,sys
d = json.load(sys.stdin)
print(*[s['slot'] for s in d['slots'] if s['description'] == 'OpenCF Softtoken slot 1' and 'TOKEN_INITIALIZED' not in s['token']['flags']])")"
check "the softtoken's empty slot is listed once" 0 '^[0-9]+$' echo "$SPARE"
check "initialise the empty slot ($SPARE)" 0 "token 'Second' initialized in slot $SPARE\$" \
    PKT --slot "$SPARE" --pin-file "$WORK/so" inittoken --label Second --user-pin-file "$WORK/pin"
jcheck "slot $SPARE now holds token 'Second'" \
    "[s for s in d['slots'] if s['slot'] == $SPARE][0]['token']['label'] == 'Second'" PKT --json tokens
check "the new token is usable by label" 0 'created' PKTP --token Second genkey --label k2
check "its key is listed there" 0 'label="k2"' PKTP --token Second list
check "unknown token label: not found" 5 "no token labelled 'Nope'" PKTP --token Nope list
# Everything that can fail on pktool's side comes before C_InitToken, which destroys every
# object: a user PIN file that is empty or missing, a label over 32 bytes.
: >"$WORK/empty"
check "re-initialising with an empty --user-pin-file: usage error" 2 "the file .*empty holding the user PIN is empty" \
    PKT --slot "$SPARE" --pin-file "$WORK/so" inittoken --label Second --user-pin-file "$WORK/empty"
check "re-initialising with a missing --user-pin-file: file error" 4 "no-such-file" \
    PKT --slot "$SPARE" --pin-file "$WORK/so" inittoken --label Second --user-pin-file "$WORK/no-such-file"
check "a label over 32 bytes: usage error" 2 "is 33 bytes; a token label holds at most 32" \
    PKT --slot "$SPARE" --pin-file "$WORK/so" inittoken --label "$(printf 'a%.0s' $(seq 1 31))é" --user-pin-file "$WORK/pin"
check "after the refused commands the token still holds its key" 0 'label="k2"' PKTP --token Second list
finish
