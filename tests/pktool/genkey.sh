#!/usr/bin/env bash
# pktool genkey: AES, generic secret, DES3, ChaCha20 with size, label, id and flags.
source "$(dirname "$0")/lib.sh"
init_pin
jcheck "AES-128 with id and flags" \
    "d['created'][0]['key_type'] == 'AES' and d['created'][0]['bits'] == 128 and d['created'][0]['id'] == 'a1b2' and d['created'][0]['flags']['sensitive'] is False and d['created'][0]['flags']['extractable'] is True" \
    PKTP --json genkey --keytype aes --size 128 --label a128 --id a1b2 --sensitive false --extractable
jcheck "AES-128 listed with its value (not sensitive)" \
    "len(d['objects']) == 1 and d['objects'][0]['bits'] == 128 and len(d['objects'][0]['value']) == 32" \
    PKTP --json list --label a128 --values
jcheck "AES-256 default: sensitive, not extractable" \
    "d['created'][0]['bits'] == 256 and d['created'][0]['flags']['sensitive'] and not d['created'][0]['flags']['extractable']" \
    PKTP --json genkey --label a256
jcheck "generic secret 512 bits" "d['created'][0]['key_type'] == 'GENERIC_SECRET' and d['created'][0]['bits'] == 512" \
    PKTP --json genkey --keytype generic --size 512 --label g
jcheck "DES3" "d['created'][0]['key_type'] == 'DES3'" PKTP --json genkey --keytype des3 --label d3
jcheck "ChaCha20" "d['created'][0]['key_type'] == 'CHACHA20' and d['created'][0]['bits'] == 256" \
    PKTP --json genkey --keytype chacha20 --label cc
check "bad AES size is a usage error" 2 'not valid for aes' PKTP genkey --size 100
check "unknown key type" 2 'unknown secret key type' PKTP genkey --keytype rc4
# The AES key works: encrypt and decrypt with pkcs11-tool.
printf '0123456789abcdef' >plain
ok "AES key encrypts through pkcs11-tool" P11 --login --pin "$PIN" --encrypt -m AES-ECB --id a1b2 -i plain -o ct
ok "and decrypts back" P11 --login --pin "$PIN" --decrypt -m AES-ECB --id a1b2 -i ct -o back
ok "round trip equal" cmp plain back
check "a second secret key under a label in use: refused, exit 10" 10 \
    "already has a secret key labelled 'a128'" PKTP genkey --keytype aes --size 128 --label a128
ok "a public key under that label is another class: allowed" \
    PKTP genkeypair --keytype ec --label a128
jcheck "--allow-duplicate-label creates it" "len(d['created']) == 1" \
    PKTP --json genkey --keytype aes --size 128 --label a128 --allow-duplicate-label
finish
