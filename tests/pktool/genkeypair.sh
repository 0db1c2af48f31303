#!/usr/bin/env bash
# pktool genkeypair: every key pair type the softtoken offers; default CKA_ID; keys sign.
source "$(dirname "$0")/lib.sh"
init_pin
gen() { # name, expected key_type, python check on the private key p, genkeypair args...
    local name="$1" kt="$2" extra="$3"; shift 3
    jcheck "$name" "len(d['created']) == 2 and all(o['key_type'] == '$kt' for o in d['created']) and \
d['created'][0]['class'] == 'private' and d['created'][1]['class'] == 'public' and \
d['created'][0]['id'] == d['created'][1]['id'] != '' and (lambda p: $extra)(d['created'][0])" \
        PKTP --json genkeypair "$@"
}
gen "RSA 2048" RSA "p['bits'] == 2048 and p['flags']['sign']" --keytype rsa --label rsa
gen "RSA 3072 with --id" RSA "p['bits'] == 3072 and p['id'] == '0102'" --keytype rsa --size 3072 --label rsa3 --id 0102
gen "EC P-256" EC "p['curve'] == 'P-256' and p['flags']['sign'] and not p['flags']['decrypt']" --keytype ec --label p256
gen "EC P-384" EC "p['curve'] == 'P-384'" --keytype ec --curve P-384 --label p384
gen "EC P-521" EC "p['curve'] == 'P-521'" --keytype ec --curve P-521 --label p521
gen "Ed25519" EC_EDWARDS "p['curve'] == 'Ed25519'" --keytype ed25519 --label ed
gen "Ed448" EC_EDWARDS "p['curve'] == 'Ed448'" --keytype ed448 --label ed448
gen "X25519" EC_MONTGOMERY "p['curve'] == 'X25519' and p['flags']['derive'] and not p['flags']['sign']" --keytype x25519 --label x
gen "X448" EC_MONTGOMERY "p['curve'] == 'X448'" --keytype x448 --label x448
for n in 44 65 87; do gen "ML-DSA-$n" ML_DSA "p['parameter_set'] == 'ML-DSA-$n'" --keytype ml-dsa-$n --label mldsa$n; done
for n in 512 768 1024; do gen "ML-KEM-$n" ML_KEM "p['parameter_set'] == 'ML-KEM-$n'" --keytype ml-kem-$n --label mlkem$n; done
check "unknown curve" 2 'unknown curve' PKTP genkeypair --keytype ec --curve P-192
check "RSA size out of range" 2 'outside 1024..8192' PKTP genkeypair --size 512
# The default CKA_ID is the SHA-1 of the RSA modulus.
id="$(PKTP --json list --label rsa --type public | python3 -c 'import json,sys,hashlib; o=json.load(sys.stdin)["objects"][0]; print(o["id"] == hashlib.sha1(bytes.fromhex(o["modulus"])).hexdigest())')"
check "default id is SHA-1 of the modulus" 0 True echo "$id"
# The EC key signs (pkcs11-tool) and openssl verifies with the exported public key.
printf 'signed by the token\n' >data
ecid="$(PKTP --json list --label p256 --type private | python3 -c 'import json,sys; print(json.load(sys.stdin)["objects"][0]["id"])')"
ok "EC key signs through pkcs11-tool" P11 --login --pin "$PIN" --sign -m ECDSA-SHA256 --signature-format openssl --id "$ecid" -i data -o data.sig
ok "export its public key" PKTP export --label p256 --type public -o p256.pub
ok "openssl verifies the signature" openssl dgst -sha256 -verify p256.pub -signature data.sig data
# A label a key pair already has is refused (exit 10, nothing created) unless allowed.
check "a second key pair under a label in use: refused, exit 10" 10 \
    "already has a private key labelled 'p256' \(id [0-9a-f]+\).*--allow-duplicate-label" \
    PKTP genkeypair --keytype ec --label p256
jcheck "nothing was created" "len(d['objects']) == 2" PKTP --json list --label p256
jcheck "--allow-duplicate-label creates it" "len(d['created']) == 2" \
    PKTP --json genkeypair --keytype ec --label p256 --allow-duplicate-label
jcheck "the label now names two key pairs" "len(d['objects']) == 4" PKTP --json list --label p256
finish
