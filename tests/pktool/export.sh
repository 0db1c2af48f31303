#!/usr/bin/env bash
# pktool export: certificates and public keys as PEM/DER (loaded by openssl); private keys only
# when extractable and not sensitive, as PKCS#8 or PKCS#12.
source "$(dirname "$0")/lib.sh"
init_pin
PKTP genkeypair --keytype rsa --label locked >/dev/null
PKTP gencert --label locked --subject "CN=exp" >/dev/null
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ec.pem 2>/dev/null
PKTP import -i ec.pem --label open --sensitive false --extractable >/dev/null
PKTP gencert --label open --subject "CN=open" >/dev/null
ok "certificate PEM" PKTP export --label locked --type cert -o c.pem
ok "openssl reads it" openssl x509 -in c.pem -noout -subject
ok "certificate DER" PKTP export --label locked --type cert --format der -o c.der
ok "openssl reads the DER" openssl x509 -inform DER -in c.der -noout
ok "public key PEM" PKTP export --label locked --type public -o k.pub
ok "openssl reads the public key" openssl pkey -pubin -in k.pub -noout
ok "public key DER" PKTP export --label locked --type public --format der -o k.der
ok "openssl reads the DER public key" openssl pkey -pubin -inform DER -in k.der -noout
check "sensitive private key refused (exit 3, reason given)" 3 'CKA_SENSITIVE=true, CKA_EXTRACTABLE=false' PKTP export --label locked --type private
ok "extractable private key as PKCS#8" PKTP export --label open --type private --format pkcs8 -o open.pem
ok "same key as imported" bash -c "openssl pkey -in open.pem -pubout | cmp - <(openssl pkey -in ec.pem -pubout)"
printf 'exp-pass\n' >pp
ok "as PKCS#12 with its certificate" PKTP export --label open --type private --format pkcs12 --p12-pass-file pp -o open.p12
ok "openssl opens the PKCS#12 (key and cert)" bash -c "openssl pkcs12 -in open.p12 -passin file:pp -nodes | grep -q 'BEGIN CERTIFICATE' && openssl pkcs12 -in open.p12 -passin file:pp -nodes | grep -q 'PRIVATE KEY'"
check "ambiguous label: exit 6" 6 '3 objects match' PKTP export --label locked
check "stdout by default" 0 'BEGIN CERTIFICATE' PKTP export --label locked --type cert
# With --json stdout is the JSON report: data that would go there too is refused (exit 2, a
# JSON error, nothing else on stdout); with -o FILE the report says where it went.
jcheck "--json export to stdout: a JSON usage error" "d['exit'] == 2 and '-o FILE' in d['error']" \
    bash -c "$PKTOOL --module $MODULE_LIB --pin-file $WORK/pin --json export --label locked --type cert; [ \$? -eq 2 ]"
jcheck "--json gencsr to stdout: the same" "d['exit'] == 2" \
    bash -c "$PKTOOL --module $MODULE_LIB --pin-file $WORK/pin --json gencsr --label locked --subject CN=x; [ \$? -eq 2 ]"
jcheck "--json gencert -o -: the same" "d['exit'] == 2" \
    bash -c "$PKTOOL --module $MODULE_LIB --pin-file $WORK/pin --json gencert --label locked --subject CN=x --no-store -o -; [ \$? -eq 2 ]"
jcheck "--json export -o FILE: the report names the file" "d['output'] == 'j.pem'" \
    PKTP --json export --label locked --type cert -o j.pem
ok "and the file is the certificate" openssl x509 -in j.pem -noout
check "without --json, stdout is the data" 0 'BEGIN CERTIFICATE' PKTP export --label locked --type cert
# A private key file is readable by its owner only (0600, as openssl writes one), also when
# the file existed with a wider mode; other exports follow the umask.
umask 022
ok "PKCS#8 export (a fresh file)" PKTP export --label open --type private -o mode.pem
check "is mode 600" 0 '^600$' stat -c %a mode.pem
ok "PKCS#12 export" PKTP export --label open --type private --format pkcs12 --p12-pass-file pp -o mode.p12
check "is mode 600" 0 '^600$' stat -c %a mode.p12
: >wide.pem; chmod 644 wide.pem
ok "export over an existing 644 file" PKTP export --label open --type private -o wide.pem
check "is narrowed to 600" 0 '^600$' stat -c %a wide.pem
ok "a certificate export" PKTP export --label open --type cert -o mode.crt
check "follows the umask (644)" 0 '^644$' stat -c %a mode.crt
# An output path that is a symbolic link (planted in a directory others can write to) is
# refused, never followed: the file it names keeps its content and mode.
echo victim >victim; chmod 644 victim; ln -s victim link.pem
check "export to a symbolic link: refused, exit 4" 4 "link.pem: it is a symbolic link" \
    PKTP export --label open --type private -o link.pem
check "the file the link names is untouched" 0 '^victim 644$' bash -c 'echo "$(cat victim) $(stat -c %a victim)"'
check "no temporary file is left" 0 '^$' bash -c 'ls -A | grep pktool- || true'
finish
