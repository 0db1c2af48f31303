#!/usr/bin/env bash
# A tour of the OpenCF software token with OpenSC's pkcs11-tool and openssl:
# a fresh token in a temporary keystore, the default PIN changed, an RSA and an
# EC key pair generated inside the token, a file signed by the token and the
# signature verified by openssl with the exported public key.
# Then the framework, libopencf.so, with no configuration at all: the metaslot
# (slot 0) over the same keystore, `cryptoadm list -v`, a key pair generated
# and used through slot 0, and how to point an application at libopencf.so.
# It ends with a short cfspeed run on the metaslot beside native OpenSSL and the
# `cryptoadm stat` table of the work it routed.
#
# Environment: MODULE (default target/release/libopencf_softtoken.so),
#              FRAMEWORK (default target/release/libopencf.so),
#              CRYPTOADM (default target/release/cryptoadm),
#              CFSPEED (default target/release/cfspeed),
#              KEEP_WORKDIR=1 keeps the temporary keystore and files.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/p256-spki.sh
. "$ROOT/scripts/lib/p256-spki.sh"
MODULE="${MODULE:-$ROOT/target/release/libopencf_softtoken.so}"
FRAMEWORK="${FRAMEWORK:-$ROOT/target/release/libopencf.so}"
CRYPTOADM="${CRYPTOADM:-$ROOT/target/release/cryptoadm}"
CFSPEED="${CFSPEED:-$ROOT/target/release/cfspeed}"
TOKEN_LABEL="OpenCF Softtoken"
DEFAULT_PIN="changeme"
NEW_PIN="demo-pin-2468"

if [ -t 1 ]; then
    BOLD=$'\033[1m' DIM=$'\033[2m' GREEN=$'\033[32m' RED=$'\033[31m' RESET=$'\033[0m'
else
    BOLD='' DIM='' GREEN='' RED='' RESET=''
fi

STEP=0
heading() {
    STEP=$((STEP + 1))
    printf '\n%s== %d. %s ==%s\n' "$BOLD" "$STEP" "$*" "$RESET"
}
note() { printf '%s%s%s\n' "$DIM" "$*" "$RESET"; }
ok() { printf '%s✔ %s%s\n' "$GREEN" "$*" "$RESET"; }
die() {
    printf '%s✘ %s%s\n' "$RED" "$*" "$RESET" >&2
    exit 1
}
# show CMD...: print the command as a user would type it, then run it.
show() {
    local arg line='$'
    for arg in "$@"; do
        if [[ "$arg" =~ [[:space:]] ]]; then line+=" '$arg'"; else line+=" $arg"; fi
    done
    line="${line/#\$ p11 /\$ pkcs11-tool --module \$MODULE }"
    line="${line/#\$ fw /\$ pkcs11-tool --module \$FRAMEWORK }"
    line="${line/#\$ $CRYPTOADM /\$ cryptoadm }"
    line="${line//$WORK/\$WORK}"
    printf '%s%s%s\n' "$DIM" "$line" "$RESET"
    "$@"
}

for tool in pkcs11-tool openssl; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found: run 'make deps' first"
done
for f in "$MODULE" "$FRAMEWORK" "$CRYPTOADM"; do
    [ -f "$f" ] || die "not found: $f (run 'make build')"
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/opencf-demo.XXXXXX")"
cleanup() {
    if [ "${KEEP_WORKDIR:-0}" = "1" ]; then
        note "files kept in $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
export OPENCF_SOFTTOKEN_DIR="$WORK/keystore"
# Every step counts into the demo's own statistics, not the caller's.
export OPENCF_STAT_DIR="$WORK/stat"
mkdir -p "$OPENCF_SOFTTOKEN_DIR"
chmod 700 "$OPENCF_SOFTTOKEN_DIR"

p11() { pkcs11-tool --module "$MODULE" "$@" </dev/null 2>&1; }

printf '%sOpenCF software token demo%s\n' "$BOLD" "$RESET"
echo "module:   $MODULE"
echo "keystore: $OPENCF_SOFTTOKEN_DIR (OPENCF_SOFTTOKEN_DIR, fresh and temporary)"
echo "files:    $WORK"
echo "(\$MODULE and \$WORK below stand for these paths)"

heading "The module and its slots"
show p11 --show-info
show p11 --list-slots

heading "A fresh token must have its default PIN changed"
note "The token starts with user PIN '$DEFAULT_PIN' and the flag 'user PIN to be changed';"
note "until the PIN is changed, every object call answers CKR_PIN_EXPIRED."
show p11 --token-label "$TOKEN_LABEL" --login --pin "$DEFAULT_PIN" \
    --change-pin --new-pin "$NEW_PIN"
show p11 --token-label "$TOKEN_LABEL" --list-token-slots | grep -E 'token (label|flags)'

LOGIN=(--token-label "$TOKEN_LABEL" --login --pin "$NEW_PIN")

heading "Generate an RSA-2048 key pair inside the token"
show p11 "${LOGIN[@]}" --keypairgen --key-type rsa:2048 --id 01 --label demo-rsa

heading "Generate an EC P-256 key pair inside the token"
show p11 "${LOGIN[@]}" --keypairgen --key-type EC:prime256v1 --id 02 --label demo-ec

heading "Objects on the token"
show p11 "${LOGIN[@]}" --list-objects

DOC="$WORK/document.txt"
{
    echo "OpenCF demo document"
    date -u '+signed at %Y-%m-%dT%H:%M:%SZ'
} >"$DOC"

# sign_and_verify ID MECHANISM NAME [pkcs11-tool options...]
sign_and_verify() {
    local id="$1" mech="$2" name="$3"
    shift 3
    heading "Sign a file with the $name private key and verify with openssl"
    note "1) export the public key (DER) from the token and convert it to PEM"
    if [ "$name" = ec ]; then
        # From CKA_EC_POINT (scripts/lib/p256-spki.sh says why not --read-object).
        printf '%s$ pkcs11-tool --module $MODULE --list-objects --type pubkey | p256_spki %s > $WORK/%s.pub.der%s\n' \
            "$DIM" "$id" "$name" "$RESET"
        p11 "${LOGIN[@]}" --list-objects --type pubkey | p256_spki "$id" >"$WORK/$name.pub.der" ||
            die "no P-256 public key with id $id"
    else
        show p11 "${LOGIN[@]}" --read-object --type pubkey --id "$id" -o "$WORK/$name.pub.der"
    fi
    show openssl pkey -pubin -inform DER -in "$WORK/$name.pub.der" -out "$WORK/$name.pub.pem"
    note "2) sign inside the token with $mech"
    show p11 "${LOGIN[@]}" --sign --id "$id" -m "$mech" "$@" \
        -i "$DOC" -o "$WORK/$name.sig"
    note "3) verify with openssl, outside the token"
    show openssl dgst -sha256 -verify "$WORK/$name.pub.pem" -signature "$WORK/$name.sig" "$DOC" \
        || die "openssl did not verify the $name signature"
    ok "$name signature made by the token verifies with openssl"
    note "4) a changed document must not verify"
    cp "$DOC" "$WORK/tampered.txt"
    echo "one more line" >>"$WORK/tampered.txt"
    if openssl dgst -sha256 -verify "$WORK/$name.pub.pem" -signature "$WORK/$name.sig" \
        "$WORK/tampered.txt" >/dev/null 2>&1; then
        die "the $name signature verified a changed document"
    fi
    ok "openssl rejects the $name signature on the changed document"
}

sign_and_verify 01 SHA256-RSA-PKCS rsa
sign_and_verify 02 ECDSA-SHA256 ec --signature-format openssl

# ---------------------------------------------------------------------------
# The framework: libopencf.so with zero configuration.
# ---------------------------------------------------------------------------
# No OPENCF_CONF, an empty per-user config directory (XDG_CONFIG_HOME), no
# system-wide file: the built-in default loads the softtoken found beside
# libopencf.so, and slot 0, the metaslot, keeps its keys in the softtoken's
# keystore (the same OPENCF_SOFTTOKEN_DIR as above). Only read-only cryptoadm
# listings are run here.
unset OPENCF_CONF OPENCF_METASLOT_ENABLED OPENCF_METASLOT_KEYSTORE
export XDG_CONFIG_HOME="$WORK/xdg"
mkdir -p "$XDG_CONFIG_HOME"
fw() { pkcs11-tool --module "$FRAMEWORK" "$@" </dev/null 2>&1; }

heading "The framework, libopencf.so, with no configuration file"
note "\$FRAMEWORK = $FRAMEWORK"
note "XDG_CONFIG_HOME=\$WORK/xdg (empty), OPENCF_CONF unset: the built-in default applies"
[ -e /etc/opencf/opencf.toml ] && note "(note: /etc/opencf/opencf.toml exists and is used instead of the built-in default)"
show "$CRYPTOADM" list
show "$CRYPTOADM" list metaslot
show fw --list-slots
fw --list-slots | grep -q 'OpenCF Metaslot' || die "slot 0 is not the metaslot"
ok "slot 0 is the OpenCF Metaslot, the softtoken's own slots follow"

heading "cryptoadm list -v: slots, tokens and mechanisms of every provider"
printf '%s$ cryptoadm list -v | head -40%s\n' "$DIM" "$RESET"
"$CRYPTOADM" list -v >"$WORK/cryptoadm-list-v.txt" 2>&1 || die "cryptoadm list -v failed"
head -40 "$WORK/cryptoadm-list-v.txt"
note "($(wc -l <"$WORK/cryptoadm-list-v.txt") lines in all)"

FW_LOGIN=(--slot 0 --login --pin "$NEW_PIN")
heading "Keys generated and used through slot 0 (the metaslot)"
note "Login goes to the keystore token: the softtoken PIN changed above."
show fw "${FW_LOGIN[@]}" --keypairgen --key-type rsa:2048 --id 11 --label metaslot-rsa
show fw "${FW_LOGIN[@]}" --list-objects --type privkey
show fw "${FW_LOGIN[@]}" --read-object --type pubkey --id 11 -o "$WORK/meta.pub.der"
show openssl pkey -pubin -inform DER -in "$WORK/meta.pub.der" -out "$WORK/meta.pub.pem"
show fw "${FW_LOGIN[@]}" --sign --id 11 -m SHA256-RSA-PKCS -i "$DOC" -o "$WORK/meta.sig"
show openssl dgst -sha256 -verify "$WORK/meta.pub.pem" -signature "$WORK/meta.sig" "$DOC" \
    || die "openssl did not verify the signature made through slot 0"
ok "RSA-2048 key pair generated through slot 0; its signature verifies with openssl"
note "The key lives in the keystore token: it is also listed on the softtoken's own slot."
show p11 "${LOGIN[@]}" --list-objects --type privkey | grep -E 'label|ID'

heading "cfspeed on the metaslot beside native OpenSSL, and the counters it left"
note "cfspeed with no argument: a short representative set on slot 0 of libopencf.so, each"
note "row beside the same operation through OpenSSL EVP in this process (about 20 s)."
show "$CFSPEED" --module "$FRAMEWORK" || die "cfspeed failed"
note "PKCS#11 3.2 asynchronous sessions: two threads, each keeping 16 ECDSA P-256 signatures in"
note "flight (C_Sign answers CKR_PENDING, C_AsyncComplete collects). The accelerator provider"
note "signs them eight at a time on its AVX-512 IFMA engine where the CPU has one; blocking"
note "callers (the table) get OpenSSL's rate."
show "$CFSPEED" --module "$FRAMEWORK" CKM_ECDSA:P-256 --threads 2 --native --seconds 0.5 \
    --runs 1 --async-depth 16 --async-threads 2 || die "cfspeed --async-depth failed"
note "cryptoadm stat: per provider and mechanism, what the metaslot routed (this demo's processes)"
show "$CRYPTOADM" stat
"$CRYPTOADM" stat --json | grep -q '"ops"' || die "cryptoadm stat shows no operations"
ok "cryptoadm stat counted the work the metaslot sent to each provider"

heading "Done"
ok "token created, PIN changed, RSA and EC keys generated, signatures verified"
ok "libopencf.so with no configuration: metaslot at slot 0, key generated and used there"
echo "How to use: point any PKCS#11 application at $FRAMEWORK and use slot 0 (the metaslot);"
echo "e.g. pkcs11-tool --module $FRAMEWORK --slot 0 --login --list-objects"
echo "(no config: the softtoken beside libopencf.so; OPENCF_SOFTTOKEN_DIR chooses its keystore;"
echo " 'cryptoadm list' shows the providers, 'cryptoadm install provider=PATH' adds one)."
