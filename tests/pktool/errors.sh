#!/usr/bin/env bash
# Error reporting: wrong PIN, locked PIN, unknown object, ambiguous label, unreadable file,
# wrong PKCS#12 password: a clear message naming the cause and the documented exit code
# (2 usage, 3 token, 4 file, 5 no such object, 6 ambiguous, 7 wrong PIN, 8 locked PIN,
# 9 wrong file password), and nothing in the token changes.
source "$(dirname "$0")/lib.sh"
init_pin
PKTP genkeypair --keytype ec --label dup >/dev/null
before="$(PKTP --json list)"
check "wrong PIN: CKR_PIN_INCORRECT, exit 7" 7 "logging in to token 'OpenCF Metaslot': C_Login returned CKR_PIN_INCORRECT" PKT --pin wrong-pin-0 list
jcheck "wrong PIN in --json names the CKR" "d['ckr'] == 'CKR_PIN_INCORRECT' and d['exit'] == 7" \
    bash -c "$PKTOOL --module $MODULE_LIB --pin wrong-pin-0 --json list; true"
# Usage errors of a subject or SAN come before the login: a wrong PIN is not even tried.
check "bad subject with a wrong PIN: the subject's usage error" 2 "unknown attribute name 'XX'" \
    PKT --pin wrong-pin-0 gencert --label dup --subject XX=1 --no-store -o x.crt
check "bad SAN with a wrong PIN: the SAN's usage error" 2 "SAN 'foo' needs a kind" \
    PKT --pin wrong-pin-0 gencsr --label dup --subject CN=x --san foo -o x.csr
check "bad --format with a wrong PIN: usage error" 2 "use pem or der" \
    PKT --pin wrong-pin-0 gencsr --label dup --subject CN=x --format txt -o x.csr
check "unknown object: exit 5" 5 "no object matches label='ghost'" PKTP export --label ghost
check "ambiguous label: exit 6" 6 "2 objects match label='dup'; narrow it" PKTP export --label dup
# The object options' usage errors come before the login too: after the successful login
# above, none of these commands with a wrong PIN may count a failure.
check "bad hex id with a wrong PIN: the id's usage error" 2 "'zz' is not hex: 'z'" PKT --pin wrong-pin-0 list --id zz
check "bad id of a new key with a wrong PIN: usage error" 2 "'0xg1' is not hex: 'g'" PKT --pin wrong-pin-0 genkey --keytype aes --id 0xg1
check "bad --type with a wrong PIN: usage error" 2 "unknown object type 'bogus'" PKT --pin wrong-pin-0 export --label dup --type bogus -o x.pem
check "delete that names nothing, with a wrong PIN: usage error" 2 "name what to delete" PKT --pin wrong-pin-0 delete -y
jcheck "no failed login was counted" "'USER_PIN_COUNT_LOW' not in d['slots'][0]['token']['flags']" PKT --json tokens
check "bad --format of export, with a wrong PIN: usage error" 2 "--format xyz" PKT --pin wrong-pin-0 export --label dup -o x.out --format xyz
check "signcsr's missing request, with a wrong PIN: file error" 4 "no-such.csr" PKT --pin wrong-pin-0 signcsr --label dup --csr "$WORK/no-such.csr" -o x.crt
check "gencert's --serial that is not hex, with a wrong PIN: usage error" 2 "--serial 'zz' is not hex" PKT --pin wrong-pin-0 gencert --label dup --subject CN=x --serial zz --no-store -o x.crt
check "gencert's --days past what a certificate can say: usage error" 2 "--days 4294967295" PKT --pin wrong-pin-0 gencert --label dup --subject CN=x --days 4294967295 --no-store -o x.crt
check "genkey's unknown key type, with a wrong PIN: usage error" 2 "unknown secret key type 'bogus'" PKT --pin wrong-pin-0 genkey --keytype bogus
check "genkey's --size 7, with a wrong PIN: usage error" 2 "--size 7 is not valid" PKT --pin wrong-pin-0 genkey --size 7
check "genkeypair's unknown curve, with a wrong PIN: usage error" 2 "unknown curve 'p-999'" PKT --pin wrong-pin-0 genkeypair --keytype ec --curve P-999
check "genkeypair's RSA --size 13, with a wrong PIN: usage error" 2 "RSA --size 13 is outside" PKT --pin wrong-pin-0 genkeypair --keytype rsa --size 13
check "two PIN sources at once: usage error" 2 "the PIN of token .* is given more than one way; give one of --pin-file, --pin-env or --pin" PKT --pin-file "$WORK/pin" --pin wrong-pin-0 list
check "an empty --pin: usage error" 2 "the PIN of token .* given on the command line is empty, and an empty one is not tried" PKT --pin '' list
check "an empty PIN variable: usage error" 2 "the PIN of token .* in environment variable EMPTY_PIN is empty" env EMPTY_PIN= "$PKTOOL" --module "$MODULE_LIB" --pin-env EMPTY_PIN list
jcheck "still no failed login counted" "'USER_PIN_COUNT_LOW' not in d['slots'][0]['token']['flags']" PKT --json tokens
check "non-ASCII in an id: usage error, no crash" 2 "is not hex: a character other than" PKTP list --id 'aé1'
check "an empty id (an unset variable): usage error, nothing deleted" 2 "is an empty id" PKTP delete --id '' -y
check "a sign in an id: usage error" 2 "'\\+f' is not hex: '\\+'" PKTP list --id '+f'
check "unreadable PIN file: exit 4" 4 'cannot read the file .*no-such-pin holding the PIN' PKT --pin-file "$WORK/no-such-pin" list
: >"$WORK/empty-pin"
check "empty PIN file: usage error, no login tried" 2 "the file .*empty-pin holding the PIN .* is empty" PKT --pin-file "$WORK/empty-pin" list
check "PIN file that never ends (/dev/zero): exit 4" 4 "the file /dev/zero holding the PIN .* is longer than 65536 bytes" PKT --pin-file /dev/zero list
check "PIN from a pipe (process substitution)" 0 "" PKT --pin-file <(cat "$WORK/pin") list
check "input file that never ends (/dev/zero): exit 4" 4 '/dev/zero is larger than 67108864 bytes' PKTP import -i /dev/zero
check "unreadable input file: exit 4" 4 'cannot read /nonexistent/key.pem' PKTP import -i /nonexistent/key.pem
check "unwritable output: exit 4" 4 'cannot write /nonexistent/dir/out.pem' PKTP export --label dup --type public -o /nonexistent/dir/out.pem
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout k.pem -out c.pem -subj /CN=x 2>/dev/null
openssl pkcs12 -export -inkey k.pem -in c.pem -out x.p12 -passout pass:right
check "wrong PKCS#12 password: exit 9" 9 'wrong password' env P12=wrong "$PKTOOL" --module "$MODULE_LIB" --pin-file "$WORK/pin" import -i x.p12 --p12-pass-env P12
check "empty PKCS#12 password file is an empty password" 9 'wrong password' PKTP import -i x.p12 --p12-pass-file "$WORK/empty-pin"
cat k.pem c.pem >mixed.pem
printf -- '-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n' >>mixed.pem
check "PEM with a block it cannot import: exit 4, nothing stored" 4 "PEM 'X509 CRL' is not importable" PKTP import -i mixed.pem
check "bad hex id: usage error" 2 'is not hex' PKTP list --id zz
check "bad option: clap usage error" 2 'unexpected argument' PKTP list --bogus
after="$(PKTP --json list)"
if [ "$before" = "$after" ]; then pass "the failed commands changed nothing in the token"; else fail "the token changed" "$(diff <(echo "$before") <(echo "$after"))"; fi
# A label in an error message is shown on one line with its control characters escaped: a
# line end or a terminal code in it cannot break the message or reach the terminal.
PKTP genkey --label $'two\nlines\x1b[31m' >/dev/null
check "a taken label with a line end and a terminal code: one line, escaped" 10 \
    "labelled 'two\\\\nlines\\\\u\\{1b\\}\\[31m'" PKTP genkey --label $'two\nlines\x1b[31m'
check "input from a pipe (process substitution)" 0 'imported cert +label="piped"' PKTP import -i <(openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout /dev/null -subj /CN=piped -days 1 2>/dev/null) --label piped
# Lock the user PIN: the softtoken locks it after 10 failures.
for _ in $(seq 1 10); do PKT --pin wrong-pin-0 list >/dev/null 2>&1; done
check "locked PIN: CKR_PIN_LOCKED, exit 8" 8 'CKR_PIN_LOCKED' PKTP list
check "tokens shows the PIN locked" 0 'user PIN: locked' PKT tokens
jcheck "json flag USER_PIN_LOCKED" "'USER_PIN_LOCKED' in d['slots'][0]['token']['flags']" PKT --json tokens
# A usage error found while parsing the command line is JSON on stdout too with --json.
jcheck "--json: an unknown option is a JSON usage error" \
    "d['exit'] == 2 and d['ckr'] is None and '--bogus' in d['error']" \
    bash -c "$PKTOOL --module $MODULE_LIB --json list --bogus; [ \$? -eq 2 ]"
jcheck "--json: a missing subcommand too" "d['exit'] == 2 and 'subcommand' in d['error']" \
    bash -c "$PKTOOL --module $MODULE_LIB --json; [ \$? -eq 2 ]"
check "without --json the usage error stays text" 2 "^error: unexpected argument '--bogus'" PKT list --bogus
check "--json --help is still the help" 0 'Usage: pktool' PKT --json --help
finish
