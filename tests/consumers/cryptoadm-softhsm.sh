#!/usr/bin/env bash
# cryptoadm with a third-party provider: install SoftHSMv2 next to the softtoken, generate an EC
# key through slot 0 (so it is stored in the softtoken keystore), disable the softtoken's ECDSA
# (and the accelerator's CKM_ECDSA, which the default configuration puts first) and show that an
# ECDSA signature on slot 0 is then computed inside SoftHSMv2 and verifies with openssl; enable
# them again and uninstall SoftHSMv2. Uninstalling the softtoken, which holds the metaslot's
# keystore token, is refused.
#
# Where the signature ran is told by `cryptoadm stat`: SoftHSMv2's CKM_ECDSA operations go up
# by two for a signature and its verification through slot 0 (python-pkcs11 from .venv) while
# the softtoken's and the accelerator's ECDSA are disabled, and not at all once they are
# enabled again. The
# framework's clone of the key in SoftHSMv2 is slot 0's own: SoftHSMv2's slot of the same
# libopencf.so instance does not list it.
#
# Environment:
#   LIB_DIR   directory with libopencf.so, libopencf_softtoken.so, cryptoadm (default target/release)
#   SOFTHSM   SoftHSMv2 module (default /usr/lib/softhsm/libsofthsm2.so)
#   PYTHON    python with python-pkcs11 (default .venv/bin/python)
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
LIB_DIR="${LIB_DIR:-$ROOT/target/release}"
LIB="$LIB_DIR/libopencf.so"
SOFTTOKEN="$LIB_DIR/libopencf_softtoken.so"
SOFTHSM="${SOFTHSM:-/usr/lib/softhsm/libsofthsm2.so}"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
for f in "$LIB" "$SOFTTOKEN" "$LIB_DIR/cryptoadm"; do
    [ -e "$f" ] || { echo "cryptoadm-softhsm: $f not built (cargo build --release)" >&2; exit 1; }
done
[ -e "$SOFTHSM" ] || { echo "cryptoadm-softhsm: $SOFTHSM not installed (apt-get install softhsm2)" >&2; exit 1; }
command -v softhsm2-util >/dev/null || { echo "cryptoadm-softhsm: softhsm2-util not found" >&2; exit 1; }
"$PYTHON" -c 'import pkcs11' 2>/dev/null || { echo "cryptoadm-softhsm: $PYTHON lacks python-pkcs11" >&2; exit 1; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/opencf-cryptoadm-softhsm.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
CONF="$WORK/opencf.toml"
mkdir -p "$WORK/keystore" "$WORK/xdg" "$WORK/softhsm-tokens"
printf 'directories.tokendir = %s\nobjectstore.backend = file\n' "$WORK/softhsm-tokens" >"$WORK/softhsm2.conf"
export OPENCF_CONF="$CONF" OPENCF_SOFTTOKEN_DIR="$WORK/keystore" XDG_CONFIG_HOME="$WORK/xdg" \
    OPENCF_LIB_DIR="$LIB_DIR" SOFTHSM2_CONF="$WORK/softhsm2.conf" OPENCF_STAT_DIR="$WORK/stat"
unset OPENCF_METASLOT_ENABLED OPENCF_METASLOT_KEYSTORE
PIN=cryptoadm-pin-42
passed=0 failed=0

pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; [ -n "${2:-}" ] && echo "$2" | tail -20; failed=$((failed + 1)); }

step() { # name, command...: exit 0 and no failure marker in the output
    local name="$1"; shift
    local out
    if out="$("$@" 2>&1)" && ! grep -qiE 'failed|error:|Aborting' <<<"$out"; then
        pass "$name"
    else
        fail "$name" "$out"
    fi
}

expect() { # name, pattern, command...: the output matches pattern
    local name="$1" pattern="$2"; shift 2
    local out
    out="$("$@" 2>&1 || true)"
    if grep -qE -- "$pattern" <<<"$out"; then pass "$name"; else fail "$name (no '$pattern')" "$out"; fi
}

refuse() { # name, pattern, command...: the output does not match pattern
    local name="$1" pattern="$2"; shift 2
    local out
    out="$("$@" 2>&1 || true)"
    if grep -qE -- "$pattern" <<<"$out"; then fail "$name (found '$pattern')" "$out"; else pass "$name"; fi
}

json() { # name, python expression over `d` (the parsed JSON) and prov(NAME), cryptoadm arguments...
    local name="$1" expr="$2"; shift 2
    local out
    if out="$(ADM --json "$@" 2>&1)" &&
        "$PYTHON" -c "import json,sys
d = json.loads(sys.stdin.read())
prov = lambda n: next(p for p in d['providers'] if p['name'] == n)
sys.exit(0 if ($expr) else 1)" <<<"$out"; then
        pass "$name"
    else
        fail "$name" "$out"
    fi
}

ADM() { "$LIB_DIR/cryptoadm" --config "$CONF" "$@"; }
P11="pkcs11-tool --module $LIB"

# A signature through slot 0. Prints "signature OK", how many keys labelled "ec" SoftHSMv2's
# slot lists in the same process after it ("hsm-slot-lists N"), and whether the softtoken's own
# slot lists CKM_ECDSA.
cat >"$WORK/route.py" <<'PY'
import hashlib
import sys
import pkcs11
from pkcs11 import Attribute, Mechanism, ObjectClass

lib = pkcs11.lib(sys.argv[1])
pin = sys.argv[2]
tokens = {s.get_token().label.strip(): s for s in lib.get_slots(token_present=True)}
meta, hsm, soft = tokens["OpenCF Metaslot"], tokens["softhsm"], tokens["OpenCF Softtoken"]

def listed():
    with hsm.get_token().open() as hs:
        return len(list(hs.get_objects({Attribute.LABEL: "ec"})))

print("softtoken-lists-ecdsa", Mechanism.ECDSA in soft.get_mechanisms())
with meta.get_token().open(user_pin=pin) as s:
    priv = s.get_key(object_class=ObjectClass.PRIVATE_KEY, label="ec")
    pub = s.get_key(object_class=ObjectClass.PUBLIC_KEY, label="ec")
    digest = hashlib.sha256(b"signed through slot 0\n").digest()
    sig = priv.sign(digest, mechanism=Mechanism.ECDSA)
    print("signature", "OK" if pub.verify(digest, sig, mechanism=Mechanism.ECDSA) else "BAD")
    print("hsm-slot-lists", listed())
PY
ROUTE=("$PYTHON" "$WORK/route.py" "$LIB" "$PIN")

hsm_ecdsa_ops() { # SoftHSMv2's CKM_ECDSA operations so far, as cryptoadm stat reports them
    ADM stat -p softhsm -m CKM_ECDSA --json |
        "$PYTHON" -c 'import json,sys; print(sum(m["ops"] for m in json.load(sys.stdin)["mechanisms"]))'
}

# SoftHSMv2 2.6 offers only the raw CKM_ECDSA (no CKM_ECDSA_SHA256), so the signatures here are
# CKM_ECDSA over a SHA-256 digest: the same signature as ECDSA-SHA256 over the file, which is
# what openssl verifies.
sign_and_verify() { # name: sign a file's SHA-256 digest through slot 0 with pkcs11-tool, verify with openssl
    local name="$1" out
    head -c 3000 /dev/urandom >"$WORK/data"
    openssl dgst -sha256 -binary -out "$WORK/digest" "$WORK/data"
    rm -f "$WORK/sig"
    if out="$($P11 --slot 0 --login --pin "$PIN" --sign -m ECDSA --id 11 --signature-format openssl \
        -i "$WORK/digest" -o "$WORK/sig" 2>&1)" &&
        out="$(openssl dgst -sha256 -verify "$WORK/pub.pem" -signature "$WORK/sig" "$WORK/data" 2>&1)" &&
        grep -q 'Verified OK' <<<"$out"; then
        pass "$name"
    else
        fail "$name" "$out"
    fi
}

echo "--- SoftHSMv2 token"
step "softhsm2-util --init-token" softhsm2-util --init-token --free --label softhsm --so-pin 1234 --pin 1234

echo "--- install"
step "cryptoadm install provider=$SOFTHSM name=softhsm" ADM install provider="$SOFTHSM" name=softhsm
expect "list shows softhsm" "^ +softhsm +$SOFTHSM +\(enabled\)" ADM list
expect "list keeps the softtoken first" "^ +softtoken .*\(enabled\)" ADM list
expect "list -m shows softhsm's mechanisms" "^Provider: softhsm \($SOFTHSM\)" ADM list -m
expect "list -m lists CKM_ECDSA under softhsm" "CKM_ECDSA" sh -c "'$LIB_DIR/cryptoadm' --config '$CONF' list -m | sed -n '/^Provider: softhsm/,\$p'"
expect "list -p shows softhsm" "^softhsm: all mechanisms are enabled" ADM list -p
expect "list -v shows softhsm's token" 'Token: "softhsm"' ADM list -v
json "list --json has softhsm" \
    "any(p['name']=='softhsm' and p['path']=='$SOFTHSM' and p['state']=='enabled' for p in d['providers'])" list
json "list -m --json has softhsm with CKM_ECDSA" \
    "any(m['name']=='CKM_ECDSA' for s in prov('softhsm')['slots'] for m in s['mechanisms'])" list -m
json "list -p --json has softhsm, all enabled" "prov('softhsm')['all_enabled'] is True" list -p
json "list -v --json has softhsm's token" \
    "any(s.get('token', {}).get('label')=='softhsm' and s['mechanisms'] for s in prov('softhsm')['slots'])" list -v
expect "libopencf.so shows SoftHSMv2's slot" 'token label +: softhsm' $P11 --list-slots
expect "install refuses a file that is not a PKCS#11 module" 'not installed' \
    ADM install provider=/etc/passwd name=bogus
refuse "the refused module is not listed" '^ +bogus ' ADM list

echo "--- EC key through slot 0"
expect "change the default PIN through slot 0" 'PIN successfully changed' \
    $P11 --slot 0 --login --pin changeme --change-pin --new-pin "$PIN"
step "EC P-256 key pair through slot 0" \
    $P11 --slot 0 --login --pin "$PIN" --keypairgen --key-type EC:prime256v1 --id 11 --label ec
expect "the key is in the softtoken keystore" 'label: +ec' \
    pkcs11-tool --module "$SOFTTOKEN" --login --pin "$PIN" --list-objects --type privkey
refuse "the key is not in SoftHSMv2's token" 'label: +ec' \
    pkcs11-tool --module "$SOFTHSM" --token-label softhsm --login --pin 1234 --list-objects
# From CKA_EC_POINT as listed through slot 0 (scripts/lib/p256-spki.sh says why not
# --read-object).
# shellcheck source=scripts/lib/p256-spki.sh
. "$ROOT/scripts/lib/p256-spki.sh"
if $P11 --slot 0 --list-objects --type pubkey 2>/dev/null | p256_spki 11 >"$WORK/pub.der" &&
    openssl pkey -pubin -inform DER -in "$WORK/pub.der" -out "$WORK/pub.pem" 2>/dev/null; then
    pass "public key read through slot 0"
else
    fail "public key read through slot 0"
fi

echo "--- softtoken ECDSA disabled"
step "cryptoadm disable provider=softtoken mechanism=CKM_ECDSA,CKM_ECDSA_SHA256" \
    ADM disable provider=softtoken mechanism=CKM_ECDSA,CKM_ECDSA_SHA256
step "cryptoadm disable provider=accel mechanism=CKM_ECDSA" \
    ADM disable provider=accel mechanism=CKM_ECDSA
expect "list -p shows the exception" \
    '^softtoken: all mechanisms are enabled, except CKM_ECDSA(_SHA256)?, CKM_ECDSA(_SHA256)?\.' ADM list -p
json "list -p --json shows the exception" \
    "sorted(prov('softtoken')['disabled'])==['CKM_ECDSA','CKM_ECDSA_SHA256'] and not prov('softtoken')['all_enabled']" list -p
refuse "libopencf.so's softtoken slot lists neither CKM_ECDSA nor CKM_ECDSA_SHA256" '^ *ECDSA(-SHA256)?,' \
    $P11 --token-label 'OpenCF Softtoken' --list-mechanisms
expect "libopencf.so's softtoken slot still lists its other mechanisms" '^ *SHA256-RSA-PKCS,' \
    $P11 --token-label 'OpenCF Softtoken' --list-mechanisms
expect "slot 0 still lists CKM_ECDSA (from SoftHSMv2)" '^ *ECDSA,' $P11 --slot 0 --list-mechanisms
sign_and_verify "CKM_ECDSA through slot 0 verifies with openssl"
before="$(hsm_ecdsa_ops)"
out="$("${ROUTE[@]}" 2>&1)"
after="$(hsm_ecdsa_ops)"
echo "$out" | sed 's/^/    /'
echo "    SoftHSMv2 CKM_ECDSA operations: $before, then $after"
if grep -qx 'softtoken-lists-ecdsa False' <<<"$out" && grep -qx 'signature OK' <<<"$out" &&
    [ -n "$before" ] && [ "$after" = $((before + 2)) ]; then
    pass "the signature and its verification ran in SoftHSMv2 (cryptoadm stat counts both there)"
else
    fail "the signature ran in SoftHSMv2" "$out"
fi
if grep -qx 'hsm-slot-lists 0' <<<"$out"; then
    pass "slot 0's clone of the key is not listed in SoftHSMv2's own slot"
else
    fail "slot 0's clone of the key is not listed in SoftHSMv2's own slot" "$out"
fi
refuse "the clone did not outlive the process (SoftHSMv2's token holds no key)" 'label: +ec' \
    pkcs11-tool --module "$SOFTHSM" --token-label softhsm --login --pin 1234 --list-objects

echo "--- softtoken ECDSA enabled again"
step "cryptoadm enable provider=softtoken mechanism=CKM_ECDSA,CKM_ECDSA_SHA256" \
    ADM enable provider=softtoken mechanism=CKM_ECDSA,CKM_ECDSA_SHA256
step "cryptoadm enable provider=accel mechanism=CKM_ECDSA" \
    ADM enable provider=accel mechanism=CKM_ECDSA
expect "list -p shows all mechanisms enabled" '^softtoken: all mechanisms are enabled\.' ADM list -p
json "list -p --json shows all mechanisms enabled" \
    "prov('softtoken')['all_enabled'] is True and prov('softtoken')['disabled']==[]" list -p
expect "libopencf.so's softtoken slot lists CKM_ECDSA again" '^ *ECDSA,' $P11 --token-label 'OpenCF Softtoken' --list-mechanisms
expect "libopencf.so's softtoken slot lists CKM_ECDSA_SHA256 again" '^ *ECDSA-SHA256,' $P11 --token-label 'OpenCF Softtoken' --list-mechanisms
sign_and_verify "CKM_ECDSA through slot 0 verifies again"
before="$(hsm_ecdsa_ops)"
out="$("${ROUTE[@]}" 2>&1)"
after="$(hsm_ecdsa_ops)"
echo "$out" | sed 's/^/    /'
echo "    SoftHSMv2 CKM_ECDSA operations: $before, then $after"
if grep -qx 'softtoken-lists-ecdsa True' <<<"$out" && grep -qx 'signature OK' <<<"$out" &&
    [ -n "$before" ] && [ "$after" = "$before" ]; then
    pass "the signature no longer ran in SoftHSMv2 (the accelerator or the softtoken signed)"
else
    fail "the signature no longer ran in SoftHSMv2" "$out"
fi

echo "--- uninstall"
step "cryptoadm uninstall provider=softhsm" ADM uninstall provider=softhsm
refuse "list no longer shows softhsm" '^ +softhsm ' ADM list
expect "list still shows the softtoken" '^ +softtoken ' ADM list
json "list --json no longer has softhsm" "all(p['name']!='softhsm' for p in d['providers'])" list
refuse "libopencf.so no longer shows SoftHSMv2's slot" 'SoftHSM' $P11 --list-slots

echo "--- keystore provider"
expect "uninstall refuses the provider with the metaslot's keystore token" \
    'keystore token "OpenCF Softtoken", which no other provider has' ADM uninstall provider=softtoken
expect "refresh: the configuration still loads" 'provider\(s\) OK' ADM refresh
expect "libopencf.so still starts" 'OpenCF Metaslot' $P11 --list-slots

echo "cryptoadm-softhsm: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
