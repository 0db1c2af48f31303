#!/usr/bin/env bash
# pktool migrate: a SoftHSMv2 token with RSA, EC and AES keys (extractable and not, sensitive
# and not) and a certificate is copied into the OpenCF token; every extractable object arrives
# with identical attributes, the non-extractable key is reported.
source "$(dirname "$0")/lib.sh"
[ -e "$SOFTHSM" ] || { echo "SKIP: $SOFTHSM not installed"; echo "FAIL softhsm missing"; exit 1; }
mkdir -p "$WORK/softhsm"
printf 'directories.tokendir = %s\nobjectstore.backend = file\n' "$WORK/softhsm" >"$WORK/softhsm2.conf"
export SOFTHSM2_CONF="$WORK/softhsm2.conf"
softhsm2-util --init-token --free --label source --pin 1234 --so-pin 4321 >/dev/null
init_pin
SRC() { "$PKTOOL" --module "$SOFTHSM" --token source --pin 1234 "$@"; }
ok "src: RSA pair, extractable, not sensitive" SRC genkeypair --keytype rsa --label rsa --id 01 --extractable --sensitive false
ok "src: EC pair, extractable, sensitive" SRC genkeypair --keytype ec --label ec --id 02 --extractable --sensitive true
ok "src: AES-256, extractable, not sensitive" SRC genkey --label aes --id 03 --extractable --sensitive false
ok "src: AES-128, extractable, sensitive" SRC genkey --label aes128 --size 128 --id 04 --extractable --sensitive true
ok "src: EC pair, not extractable" SRC genkeypair --keytype ec --label stuck --id 05 --extractable false
ok "src: certificate for the RSA key" SRC gencert --label rsa --subject "CN=migrated"
SRC --json list --values >src.json
check "migrate reports the non-extractable key and exits 3" 3 'not copied .*label="stuck".*not extractable' \
    PKTP migrate --from-module "$SOFTHSM" --from-token source --from-pin 1234
PKTP --json list --values >dst.json
cat >cmp.py <<'PY'
import json, sys
src = json.load(open("src.json"))["objects"]
dst = json.load(open("dst.json"))["objects"]
FIELDS = ["class", "label", "id", "key_type", "modulus", "public_exponent", "ec_point", "curve", "bits", "value", "subject"]
FLAGS = ["token", "private", "sensitive", "extractable", "encrypt", "decrypt", "sign", "verify", "wrap", "unwrap", "derive"]
bad = []
copied = 0
for s in src:
    if s["label"] == "stuck" and s["class"] == "private":
        if any(d["label"] == "stuck" and d["class"] == "private" for d in dst):
            bad.append("the non-extractable key was copied")
        continue
    m = [d for d in dst if (d["class"], d["label"], d["id"]) == (s["class"], s["label"], s["id"])]
    if len(m) != 1:
        bad.append("missing %s %s" % (s["class"], s["label"]))
        continue
    d = m[0]
    for f in FIELDS:
        if s.get(f) != d.get(f):
            bad.append("%s %s: %s differs: %r != %r" % (s["class"], s["label"], f, s.get(f), d.get(f)))
    for f in FLAGS:
        if f in s["flags"] and s["flags"][f] != d["flags"].get(f):
            bad.append("%s %s: flag %s differs" % (s["class"], s["label"], f))
    copied += 1
if sys.argv[1:] == ["value"]:
    aes = [d for d in dst if d["label"] == "aes"]
    sys.exit(0 if aes and len(aes[0].get("value", "")) == 64 else 1)
print("copied and identical:", copied, "problems:", bad)
sys.exit(1 if bad or copied != 8 else 0)
PY
check "every extractable object copied with identical attributes" 0 'copied and identical: 8 problems: \[\]' python3 cmp.py
ok "non-sensitive AES CKA_VALUE compared (present in both)" python3 cmp.py value
# The copied sensitive EC key (wrapped path) signs; the source public key verifies.
printf 'after migration\n' >data
ok "migrated EC key signs" P11 --login --pin "$PIN" --sign -m ECDSA-SHA256 --signature-format openssl --id 02 -i data -o data.sig
ok "source public key (from SoftHSM) verifies it" bash -c "$PKTOOL --module $SOFTHSM --token source --pin 1234 export --id 02 --type public -o src02.pub && openssl dgst -sha256 -verify src02.pub -signature data.sig data"
check "second run: everything present, stuck key reported again" 3 'present .*label="rsa"' \
    PKTP migrate --from-module "$SOFTHSM" --from-token source --from-pin 1234
jcheck "json report names the reason" \
    "any(o['label'] == 'stuck' and o['status'] == 'not copied' and 'CKA_EXTRACTABLE=false' in o['reason'] for o in d['objects'])" \
    bash -c "$PKTOOL --module $MODULE_LIB --pin-file $WORK/pin --json migrate --from-module $SOFTHSM --from-token source --from-pin 1234; [ \$? -eq 3 ]"
check "wrong source PIN named" 7 'CKR_PIN_INCORRECT' PKTP migrate --from-module "$SOFTHSM" --from-token source --from-pin 9999
# A label this token already uses for an object of the same class (with another id) is
# refused as by genkey and import: exit 10, nothing copied, unless --allow-duplicate-label.
ok "src: AES key 'clash'" SRC genkey --label clash --id 21 --extractable --sensitive false
ok "src: AES key 'fresh'" SRC genkey --label fresh --id 23 --extractable --sensitive false
ok "dst: another AES key 'clash'" PKTP genkey --label clash --id 22
check "migrate refuses the taken label" 10 "already has a secret key labelled 'clash' \(id 22\).*--allow-duplicate-label" \
    PKTP migrate --from-module "$SOFTHSM" --from-token source --from-pin 1234
check "--dry-run refuses it too" 10 "labelled 'clash'" \
    PKTP migrate --dry-run --from-module "$SOFTHSM" --from-token source --from-pin 1234
jcheck "nothing was copied" "sorted(o['id'] for o in d['objects'] if o['label'] in ('clash', 'fresh')) == ['22']" \
    PKTP --json list --objtype secret-key
check "--allow-duplicate-label copies it anyway" 3 'copied .*label="clash"' \
    PKTP migrate --allow-duplicate-label --from-module "$SOFTHSM" --from-token source --from-pin 1234
jcheck "both keys now have the label" "sorted(o['id'] for o in d['objects'] if o['label'] == 'clash') == ['21', '22']" \
    PKTP --json list --objtype secret-key
# A source object whose attributes cannot be read (the test-only faulty module wrapping this
# same software token answers CKR_DEVICE_ERROR for the objects labelled "fresh", copied above;
# the others are present) is reported as not copied, by its handle, and the migration exits 3
# rather than passing it over in silence.
FAULTY="$LIB_DIR/libopencf_faulty.so"
if [ -e "$FAULTY" ]; then
    check "an unreadable source object: not copied, named by its handle, exit 3" 3 \
        'not copied .*object handle [0-9]+: reading attributes: C_GetAttributeValue returned CKR_DEVICE_ERROR' \
        env OPENCF_FAULTY_INNER="$LIB_DIR/libopencf_softtoken.so" OPENCF_FAULTY_MODE=attr-error:fresh \
        "$PKTOOL" --module "$MODULE_LIB" --pin-file "$WORK/pin" migrate --from-module "$FAULTY" --from-pin-file "$WORK/pin"
else
    fail "an unreadable object: $FAULTY not built (cargo build --release -p opencf-faulty)"
fi
# A source label that is not UTF-8 is compared as stored: a second run finds the copy present
# instead of copying the key again under the same label.
ok "src: AES key with a non-UTF-8 label" pkcs11-tool --module "$SOFTHSM" --token-label source --login --pin 1234 \
    --keygen --key-type AES:16 --label $'raw\xffkey' --id 5151 --extractable
check "migrate copies it" 3 'copied +secret-key label="raw.*key" id=5151' \
    PKTP migrate --from-module "$SOFTHSM" --from-token source --from-pin 1234
check "a second migrate finds it present" 3 'present +secret-key label="raw.*key" id=5151' \
    PKTP migrate --from-module "$SOFTHSM" --from-token source --from-pin 1234
jcheck "one copy in this token" "len(d['objects']) == 1" PKTP --json list --id 5151
# A data object has no CKA_ID: a second run finds its copy by class and label instead of
# refusing the label as taken (exit 10) or, with --allow-duplicate-label, copying it again.
printf 'some data\n' >dat
ok "src: a data object" pkcs11-tool --module "$SOFTHSM" --token-label source --login --pin 1234 \
    --write-object dat --type data --label data1
check "migrate copies it" 3 'copied +data +label="data1"' \
    PKTP migrate --from-module "$SOFTHSM" --from-token source --from-pin 1234
check "a second migrate finds it present" 3 'present +data +label="data1"' \
    PKTP migrate --from-module "$SOFTHSM" --from-token source --from-pin 1234
check "and with --allow-duplicate-label as well" 3 'present +data +label="data1"' \
    PKTP migrate --from-module "$SOFTHSM" --from-token source --from-pin 1234 --allow-duplicate-label
jcheck "one data object in this token" "len(d['objects']) == 1" PKTP --json list --objtype data --label data1
finish
