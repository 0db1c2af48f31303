#!/usr/bin/env bash
# The content of the files import reads and export writes, given hostile but plausible:
# a private key whose parts disagree (an EC key with another key's public point, an RSA key
# with a wrong CRT value), two DER objects in one file, files that ask for 2^31-1 iterations,
# an encrypted PKCS#8 under a plain PRIVATE KEY label, a password with a NUL byte; and exports
# a PKCS#12 file could not make honestly (two certificates of one key, a certificate of
# another key under the key's id). Each is refused with its exit code and nothing stored, or
# done right; never a panic, a wait of minutes, or OpenSSL's own prompt.
source "$(dirname "$0")/lib.sh"
init_pin
printf 'secret\n' >enc-pass
before="$(PKTP --json list)"

openssl ecparam -name prime256v1 -genkey -noout -outform DER -out a.der 2>/dev/null
openssl ecparam -name prime256v1 -genkey -noout -outform DER -out b.der 2>/dev/null
# SEC1: the public point (65 bytes) ends the structure: a's private value, b's point.
python3 -c "
import base64
a, b = open('a.der','rb').read(), open('b.der','rb').read()
d = base64.encodebytes(a[:-65] + b[-65:]).decode()
open('ec-mismatch.pem','w').write('-----BEGIN EC PRIVATE KEY-----\n' + d + '-----END EC PRIVATE KEY-----\n')"
check "an EC key whose public point is another key's: exit 4" 4 \
    "ec-mismatch.pem: the private key is not consistent with itself" PKTP import -i ec-mismatch.pem --label mism

openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:1024 -outform DER -out rsa.der 2>/dev/null
openssl rsa -inform DER -in rsa.der -traditional -outform DER -out rsa1.der 2>/dev/null
# RSAPrivateKey: the CRT coefficient (qInv) is its last integer; change its last byte.
python3 -c "
import base64
d = bytearray(open('rsa1.der','rb').read()); d[-1] ^= 1
open('rsa-iqmp.pem','w').write('-----BEGIN RSA PRIVATE KEY-----\n' + base64.encodebytes(bytes(d)).decode() + '-----END RSA PRIVATE KEY-----\n')"
check "an RSA key with a wrong CRT coefficient: exit 4" 4 \
    "rsa-iqmp.pem: the private key is not consistent with itself .*iqmp" PKTP import -i rsa-iqmp.pem --label bad-iqmp

# A PKCS#12 file: one key, with its certificate.
for k in one two; do
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $k.key -out $k.crt -subj /CN=$k 2>/dev/null
done
openssl pkcs12 -export -inkey one.key -in one.crt -out one.p12 -passout pass:pw 2>/dev/null

# Two DER objects in one file: the second is not dropped without a word.
openssl x509 -in one.crt -outform DER -out one-crt.der
openssl pkey -in one.key -outform DER -out one-key.der
cat one-crt.der one-key.der >joined.der
check "two DER objects in one file: exit 4" 4 "bytes follow the first DER object" PKTP import -i joined.der

# A password with a NUL byte: refused (exit 9), not a panic.
printf 'p\0w\n' >nul-pass
check "a PKCS#12 password with a NUL byte: exit 9" 9 "the password holds a NUL byte" \
    PKTP import -i one.p12 --p12-pass-file nul-pass

# Files that ask for 2^31-1 key-derivation or MAC iterations: refused at once (exit 4), where
# OpenSSL would work through them for many minutes. The count is written over OpenSSL's 2048.
cat >iter.py <<'PY'
import base64, sys
def parse(b):
    out, i = [], 0
    while i < len(b):
        tag, n = b[i], b[i + 1]; i += 2
        if n & 0x80:
            k = n & 0x7f; n = int.from_bytes(b[i:i + k], 'big'); i += k
        body = b[i:i + n]; i += n
        out.append([tag, parse(body) if tag & 0x20 else body])
    return out
def enc(items):
    out = b''
    for tag, v in items:
        body = enc(v) if tag & 0x20 else v
        if tag == 0x02 and body == b'\x08\x00':
            body = b'\x7f\xff\xff\xff'
        n = len(body)
        ln = bytes([n]) if n < 0x80 else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + n.to_bytes((n.bit_length() + 7) // 8, 'big')
        out += bytes([tag]) + ln + body
    return out
src, dst, kind = sys.argv[1:]
if kind == 'pem':
    lines = open(src).read().split('\n')
    der = base64.b64decode(''.join(l for l in lines if l and not l.startswith('-----')))
    b64 = base64.encodebytes(enc(parse(der))).decode()
    open(dst, 'w').write(lines[0] + '\n' + b64 + lines[0].replace('BEGIN', 'END') + '\n')
else:
    open(dst, 'wb').write(enc(parse(open(src, 'rb').read())))
PY
openssl pkcs8 -topk8 -in one.key -v2 aes-256-cbc -iter 2048 -passout pass:secret -out iter-ok.pem 2>/dev/null
python3 iter.py iter-ok.pem iter-huge.pem pem
check "an encrypted PKCS#8 asking for 2^31-1 iterations: exit 4 at once" 4 \
    "asks for 2147483647 key-derivation or MAC iterations" timeout 20 "$PKTOOL" --module "$MODULE_LIB" \
    --pin-file "$WORK/pin" import -i iter-huge.pem --p12-pass-file enc-pass
openssl pkcs12 -export -inkey one.key -in one.crt -iter 2048 -out iter-ok.p12 -passout pass:pw 2>/dev/null
python3 iter.py iter-ok.p12 iter-huge.p12 der
check "a PKCS#12 file asking for 2^31-1 iterations: exit 4 at once" 4 \
    "asks for 2147483647 key-derivation or MAC iterations" timeout 20 "$PKTOOL" --module "$MODULE_LIB" \
    --pin-file "$WORK/pin" import -i iter-huge.p12 --p12-pass-file enc-pass

after="$(PKTP --json list)"
if [ "$before" = "$after" ]; then pass "the refused imports stored nothing"; else fail "the token changed" "$(diff <(echo "$before") <(echo "$after"))"; fi

# An encrypted PKCS#8 under a plain PRIVATE KEY label: pktool's password, not OpenSSL's
# prompt (which would ignore --p12-pass-file, and wait on a terminal).
openssl pkcs8 -topk8 -in one.key -v2 aes-256-cbc -passout pass:secret -out enc.pem 2>/dev/null
sed -i 's/ENCRYPTED PRIVATE KEY/PRIVATE KEY/' enc.pem
check "an encrypted PKCS#8 labelled PRIVATE KEY imports with --p12-pass-file" 0 \
    'imported private +label="relabelled"' PKTP import -i enc.pem --label relabelled --p12-pass-file enc-pass </dev/null
if PKTP import -i enc.pem --label again --p12-pass-file enc-pass </dev/null 2>&1 | grep -q 'Enter PEM pass phrase'; then
    fail "OpenSSL's own prompt ran"
else
    pass "no OpenSSL prompt"
fi

# PKCS#12 exports: an extractable key with two certificates of its id (a renewal) is refused
# rather than written without one; a certificate of another key under the key's id too.
PKTP genkeypair --keytype ec --label ren --sensitive false --extractable >/dev/null
PKTP gencert --label ren --subject CN=ren -o ren1.crt >/dev/null
PKTP gencert --label ren --subject CN=ren --days 700 --cert-label ren-renewed -o ren2.crt >/dev/null
check "PKCS#12 export with two certificates of the key: exit 6, nothing written" 6 \
    "2 certificates have id .*nothing was written" PKTP export --label ren --type private --format pkcs12 --p12-pass-file enc-pass -o ren.p12
[ -e ren.p12 ] && fail "a file was written" || pass "no file written"
PKTP genkeypair --keytype ec --label other --sensitive false --extractable >/dev/null
id=$(PKTP --json list --label other --type private | python3 -c "import json,sys; print(json.load(sys.stdin)['objects'][0]['id'])")
PKTP import -i two.crt --label other-cert --id "$id" >/dev/null
check "PKCS#12 export with another key's certificate under the key's id: exit 3" 3 \
    "is not the key's: its public key differs" PKTP export --label other --type private --format pkcs12 --p12-pass-file enc-pass -o other.p12
PKTP genkeypair --keytype ec --label plain --sensitive false --extractable >/dev/null
check "PKCS#12 export with a NUL byte in the password: exit 9" 9 "the password holds a NUL byte" \
    PKTP export --label plain --type private --format pkcs12 --p12-pass-file nul-pass -o x.p12
finish
