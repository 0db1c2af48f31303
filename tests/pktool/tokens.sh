#!/usr/bin/env bash
# pktool tokens: slots, labels, flags and the PIN state (expired default, ok, locked).
source "$(dirname "$0")/lib.sh"
check "lists the metaslot in slot 0" 0 'slot 0: OpenCF Metaslot' PKT tokens
check "fresh token: user PIN expired" 0 'user PIN: expired' PKT tokens
check "uninitialised slot shown" 0 'not initialized' PKT tokens
jcheck "json: USER_PIN_TO_BE_CHANGED flag" \
    "'USER_PIN_TO_BE_CHANGED' in d['slots'][0]['token']['flags'] and [s['token']['label'] for s in d['slots'][1:] if s['token']['label'] != 'OpenCF Accelerator'][0] == 'OpenCF Softtoken'" \
    PKT --json tokens
init_pin
jcheck "after setpin the user PIN is ok" "d['slots'][0]['token']['user_pin'] == 'ok'" PKT --json tokens
check "--module default found beside pktool" 0 'OpenCF Metaslot' "$PKTOOL" tokens
check "missing module: file error" 4 "does not exist" "$PKTOOL" --module /nonexistent/lib.so tokens
finish
