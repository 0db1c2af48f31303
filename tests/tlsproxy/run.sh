#!/usr/bin/env bash
# opencf-tlsproxy end to end: keys imported into the softtoken behind libopencf.so (sensitive,
# not extractable), curl and openssl over TLS 1.3 and 1.2 with RSA-2048, ECDSA P-256 and Ed25519,
# PKCS#1 v1.5 signatures, resumption by session ID and ticket, fallback of a ClientHello the
# proxy cannot serve, reload with SIGHUP keeping established connections, a reload of a
# missing or endless instance file refused, delete, robustness
# (malformed/random/mutated first flights, a stalled handshake, 10,000 idle connections, the
# application down, reset or killed), the PROXY protocol header (v1, v2) and the idle timeout,
# worker processes (`workers = 2`: tickets resumed on
# either worker, reload, a killed worker restarted, stop), the accelerator provider behind the
# proxy (RSA signatures by its engine; corrupted engine results caught and signed by the
# software token instead) and the counters in
# `cryptoadm stat --json`.
#
# Every server listens on 127.0.0.1 on high ports; every wait is bounded; a trap kills every
# process this script starts. Prints PASS/FAIL lines and `tlsproxy: N passed, M failed`.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
REL=$ROOT/target/release
HERE=$ROOT/tests/tlsproxy
IDLE_CONNS=${TLSPROXY_IDLE_CONNS:-10000}

# Descriptors: each idle connection holds two in the proxy (client and application side). Raise
# the hard limit where allowed (root with CAP_SYS_RESOURCE), the soft one to the hard one; the
# daemons started below inherit them. Where one process cannot hold them all, the idle test runs
# its own daemon with enough worker processes (the limit is per process) and says so.
ulimit -Hn 65536 2>/dev/null
ulimit -Sn "$(ulimit -Hn)" 2>/dev/null
NOFILE=$(ulimit -Sn)
[ "$NOFILE" = unlimited ] && NOFILE=1048576
IDLE_WORKERS=1
if [ $((2 * IDLE_CONNS + 100)) -gt "$NOFILE" ]; then
    # One more than the even share needs: the kernel's spread over the workers is not exact.
    IDLE_WORKERS=$(((2 * IDLE_CONNS + 100 + NOFILE - 1) / NOFILE + 1))
fi

for b in opencf-tlsproxy tlsproxycfg cryptoadm libopencf.so libopencf_softtoken.so; do
    [ -e "$REL/$b" ] || { echo "missing $REL/$b (cargo build --release -p opencf-tlsproxy -p opencf -p opencf-softtoken -p cryptoadm)"; exit 1; }
done
for t in curl openssl pkcs11-tool python3; do
    command -v "$t" >/dev/null || { echo "missing $t (scripts/install-deps.sh)"; exit 1; }
done

. "$HERE/common.sh"
tlsproxy_workdir opencf-tlsproxy-test
mkdir -p "$W/www"

PASSED=0
FAILED=0
pass() { echo "PASS: $1"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL: $1"; FAILED=$((FAILED + 1)); }
check() { local name=$1; shift; if "$@"; then pass "$name"; else fail "$name"; fi; }

pick_ports 39
HTTP=$BASE; P_RSA=$((BASE + 1)); P_FB=$((BASE + 2)); P_EC=$((BASE + 3)); P_P11=$((BASE + 4))
P_ROB=$((BASE + 5)); P_ECHO=$((BASE + 6)); P_BK=$((BASE + 7)); P_BKEND=$((BASE + 8))
P_W=$((BASE + 9)); P_IDLE=$((BASE + 10)); P_PP1=$((BASE + 11)); P_PPB1=$((BASE + 12))
P_PP2=$((BASE + 13)); P_PPB2=$((BASE + 14)); P_IT=$((BASE + 15)); P_ED=$((BASE + 16))
P_CH1=$((BASE + 17)); P_CH2=$((BASE + 18)); P_CH3=$((BASE + 19)); P_AR=$((BASE + 20)); P_AE=$((BASE + 21))
P_SL=$((BASE + 22)); P_ST=$((BASE + 23)); P_AL=$((BASE + 24)); P_ALB=$((BASE + 25))
P_AN=$((BASE + 26)); P_H2=$((BASE + 27)); P_MT=$((BASE + 28)); P_MO=$((BASE + 29)); P_MTB=$((BASE + 30))
P_OC=$((BASE + 31)); P_GQ=$((BASE + 32)); P_GW=$((BASE + 33)); P_RA=$((BASE + 34)); P_RA2=$((BASE + 35))
P_RF=$((BASE + 36)); P_SH1=$((BASE + 37)); P_SH2=$((BASE + 38))

# --- setup: PIN, certificates, servers -----------------------------------------------------
pkcs11-tool --module "$MOD" --token-label 'OpenCF Softtoken' --login --pin changeme --change-pin --new-pin 'tls pin' >/dev/null 2>&1 \
    || { echo "cannot set the softtoken PIN"; exit 1; }
printf 'tls pin\n' > "$W/pin"
printf 'p12 pass\n' > "$W/p12pass"
(
    cd "$W"
    san=(-addext subjectAltName=DNS:localhost)
    openssl req -x509 -newkey rsa:2048 -nodes -keyout rsa.key -out rsa.crt -subj /CN=localhost -days 2 "${san[@]}"
    cat rsa.key rsa.crt > rsa.pem
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ec.key -out ec.crt \
        -subj /CN=localhost -days 2 "${san[@]}"
    openssl pkcs12 -export -inkey ec.key -in ec.crt -out ec.p12 -passout pass:'p12 pass'
    openssl req -x509 -newkey ed25519 -nodes -keyout ed.key -out ed.crt -subj /CN=localhost -days 2 "${san[@]}"
    cat ed.key ed.crt > ed.pem
    # A root, an intermediate and a leaf it signs (for the chain of a token certificate).
    ca=(basicConstraints=critical,CA:TRUE keyUsage=critical,keyCertSign,cRLSign)
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout root.key -out root.crt \
        -subj /CN=test-root -days 2 -addext "${ca[0]}" -addext "${ca[1]}"
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout inter.key -out inter.csr \
        -subj /CN=test-intermediate
    printf '%s\n' "${ca[@]}" > ca.ext
    openssl x509 -req -in inter.csr -CA root.crt -CAkey root.key -CAcreateserial -out inter.crt -days 2 -extfile ca.ext
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout leaf.key -out leaf.csr -subj /CN=localhost
    printf 'subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n' > leaf.ext
    openssl x509 -req -in leaf.csr -CA inter.crt -CAkey inter.key -CAcreateserial -out leaf.crt -days 2 -extfile leaf.ext
    cat leaf.key leaf.crt > leaf.pem
    openssl req -x509 -newkey rsa:2048 -nodes -keyout fb.key -out fb.crt -subj /CN=fallback-server -days 2
) >/dev/null 2>&1 || { echo "openssl could not make the test certificates"; exit 1; }
echo "hello through opencf-tlsproxy" > "$W/www/index.html"
(cd "$W/www" && exec python3 -m http.server "$HTTP" --bind 127.0.0.1 >"$W/http.log" 2>&1) &
PIDS+=($!)
openssl s_server -accept "127.0.0.1:$P_FB" -cert "$W/fb.crt" -key "$W/fb.key" -cipher AES128-SHA \
    -www -quiet >"$W/s_server.log" 2>&1 &
PIDS+=($!)
wait_port "$HTTP" && wait_port "$P_FB" || { echo "test servers did not start"; exit 1; }

# The module for tlsproxycfg and the daemon (written before the first create).
printf 'module = "%s"\n' "$MOD" > "$CONF"

# --- instances -------------------------------------------------------------------------------
# RSA from PEM, ECDHE and TLS 1.3 suites only, fallback to the s_server; the daemon starts here.
"${CFG[@]}" create -f pem -i "$W/rsa.pem" -p "$W/pin" -x "$HTTP" -F "$P_FB" -z 100 -t 600 \
    -c TLS13_AES_128_GCM_SHA256,TLS13_AES_256_GCM_SHA384,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 \
    --start 127.0.0.1 "$P_RSA" > "$W/create1.log" 2>&1
check "create -f pem (RSA-2048) --start: daemon listening" wait_port "$P_RSA"
[ -s "$W/create1.log" ] && sed 's/^/    /' "$W/create1.log"
# ECDSA P-256 from PKCS#12, added to the running daemon (SIGHUP).
"${CFG[@]}" create -f pkcs12 -i "$W/ec.p12" -P "$W/p12pass" -p "$W/pin" -C web-ec -x "$HTTP" \
    127.0.0.1 "$P_EC" > "$W/create2.log" 2>&1
check "create -f pkcs12 (ECDSA P-256), reload: listening" wait_port "$P_EC"
# Ed25519 from PEM, into a file whose mode (0640) the rewrite keeps.
chmod 640 "$CONF"
"${CFG[@]}" create -f pem -i "$W/ed.pem" -p "$W/pin" -C web-ed -x "$HTTP" \
    127.0.0.1 "$P_ED" > "$W/create9.log" 2>&1
check "create -f pem (Ed25519), reload: listening" wait_port "$P_ED"
mode_ok() { local m; m=$(stat -c %a "$CONF"); echo "    instance file mode after create: $m"; [ "$m" = 640 ]; }
check "create rewrites the instance file with its mode kept (0640)" mode_ok
# A refused option leaves nothing behind: no key in the token, no instance in the file.
refused_ok() {
    local opt msg
    for opt in "--versions 1.4|unknown TLS version" "--handshake-timeout 0|between 1 and 3600" \
        "--idle-timeout 99999999999|at most" "--unknown-sni fallback|needs fallback_port" \
        "--alpn h2,h2|named twice" "--client-auth optional|go with client_ca_file" \
        "--client-ca $W/ec.key|no certificate" \
        "--versions 1.2 -c TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256|no usable cipher suite" \
        "-F 0|0 is not in 1..=65535" "-F $P_IT|fallback_port = $P_IT is where instance"; do
        msg=${opt#*|}
        # shellcheck disable=SC2086
        if "${CFG[@]}" create -f pem -i "$W/ed.pem" -p "$W/pin" -C refused-key -x "$HTTP" \
            ${opt%%|*} 127.0.0.1 "$P_IT" > "$W/refused.log" 2>&1; then
            echo "    accepted: ${opt%%|*}"; return 1
        fi
        grep -q "$msg" "$W/refused.log" || { sed 's/^/    /' "$W/refused.log"; return 1; }
    done
    sed 's/^/    /' "$W/refused.log"
    ! pkcs11-tool --module "$MOD" --login --pin 'tls pin' --list-objects 2>/dev/null | grep -q refused-key \
        && ! grep -q "port = $P_IT" "$CONF"
}
check "create with a refused option: an error, and no key imported, no instance written" refused_ok
# A listening socket that overlaps an instance's (the same port, the same address or a wildcard
# covering it), or port 0: refused before anything is imported.
refused_target_ok() {
    local t msg
    for t in "0.0.0.0 $P_RSA|overlaps instance 127.0.0.1-$P_RSA" "$P_RSA|0.0.0.0 (every IPv4 address) covers 127.0.0.1" \
        ":: $P_EC|:: (every IPv6 and IPv4 address) covers 127.0.0.1" "127.0.0.1 0|bad port"; do
        msg=${t#*|}
        # shellcheck disable=SC2086
        if "${CFG[@]}" create -f pem -i "$W/ed.pem" -p "$W/pin" -C refused-key -x "$HTTP" \
            ${t%%|*} > "$W/refused.log" 2>&1; then
            echo "    accepted: ${t%%|*}"; return 1
        fi
        grep -qF "$msg" "$W/refused.log" || { sed 's/^/    /' "$W/refused.log"; return 1; }
    done
    sed 's/^/    /' "$W/refused.log"
    ! pkcs11-tool --module "$MOD" --login --pin 'tls pin' --list-objects 2>/dev/null | grep -q refused-key \
        && [ "$(grep -c "^port = $P_RSA" "$CONF")" = 1 ] && ! grep -q "^port = 0" "$CONF"
}
check "create on a port and address another instance listens on (or a wildcard covering it), or port 0: refused, no key imported" refused_target_ok

# The keys are in the token, sensitive and never extractable.
keys_ok() {
    pkcs11-tool --module "$MOD" --login --pin 'tls pin' --list-objects --type privkey 2>/dev/null > "$W/keys.txt"
    python3 - "$W/keys.txt" <<'PY'
import re, sys
blocks = open(sys.argv[1]).read().split("Private Key Object")[1:]
found = {}
for b in blocks:
    label = re.search(r"label:\s*(.*)", b).group(1).strip()
    access = re.search(r"Access:\s*(.*)", b).group(1)
    flags = [f.strip() for f in access.split(",")]
    sensitive = "sensitive" in flags
    extractable = "extractable" in flags
    print(f"    {label}: {b.splitlines()[0].strip()} access: {access.strip()}")
    found[label] = sensitive and not extractable
ok = len(found) == 3 and all(found.values())
sys.exit(0 if ok else 1)
PY
}
check "imported keys: CKA_SENSITIVE=TRUE, CKA_EXTRACTABLE=FALSE (pkcs11-tool)" keys_ok

# --- curl over TLS 1.3 and 1.2 ---------------------------------------------------------------
curl_ok() { # PORT CAFILE [curl options]: the page comes back over the expected version
    local port=$1 ca=$2; shift 2
    local out
    out=$(curl -sS --max-time 10 --cacert "$ca" --resolve "localhost:$port:127.0.0.1" \
        -w '\n%{http_code}' "$@" "https://localhost:$port/" 2>&1)
    [[ $out == *"hello through opencf-tlsproxy"*$'\n'200 ]] || { echo "    curl: $out"; return 1; }
}
check "curl TLS 1.3, RSA-2048 key in the token" curl_ok "$P_RSA" "$W/rsa.crt" --tlsv1.3
check "curl TLS 1.2 (--tls-max 1.2), RSA-2048" curl_ok "$P_RSA" "$W/rsa.crt" --tls-max 1.2
check "curl TLS 1.3, ECDSA P-256 key in the token" curl_ok "$P_EC" "$W/ec.crt" --tlsv1.3
check "curl TLS 1.2 (--tls-max 1.2), ECDSA P-256" curl_ok "$P_EC" "$W/ec.crt" --tls-max 1.2
check "curl TLS 1.3, Ed25519 key in the token" curl_ok "$P_ED" "$W/ed.crt" --tlsv1.3
check "curl TLS 1.2 (--tls-max 1.2), Ed25519" curl_ok "$P_ED" "$W/ed.crt" --tls-max 1.2

# One connection, stdin closed after HOLD seconds (default 0.5), all of it within S_TIMEOUT
# seconds (default 10).
s_client() { # PORT [options]
    local port=$1; shift
    (sleep "${HOLD:-0.5}"; echo) | timeout "${S_TIMEOUT:-10}" openssl s_client -connect "127.0.0.1:$port" \
        -servername localhost "$@" 2>&1
}
pkcs1_ok() {
    local out; out=$(s_client "$P_RSA" -tls1_2 -sigalgs RSA+SHA256 -CAfile "$W/rsa.crt")
    grep -q "Peer signature type: RSA$" <<<"$out" && grep -q "Verify return code: 0" <<<"$out"
}
check "TLS 1.2 with an RSA PKCS#1 v1.5 signature (CKM_SHA256_RSA_PKCS)" pkcs1_ok
ed25519_ok() {
    local out; out=$(s_client "$P_ED" -tls1_3 -CAfile "$W/ed.crt")
    grep -qi "Peer signature type: Ed25519" <<<"$out" && grep -q "Verify return code: 0" <<<"$out"
}
check "TLS 1.3 with an Ed25519 signature (CKM_EDDSA), verified by openssl s_client" ed25519_ok

# --- resumption --------------------------------------------------------------------------------
resumed() { # PORT: first connection saves the session, the second shows Reused
    local port=$1; shift
    rm -f "$W/sess"
    s_client "$port" "$@" -sess_out "$W/sess" | grep -q "^New," || return 1
    local out; out=$(s_client "$port" "$@" -sess_in "$W/sess")
    grep -q "^Reused," <<<"$out" || { grep -E "^(New|Reused)" <<<"$out" | sed 's/^/    /'; return 1; }
}
check "resumption by session ID (TLS 1.2, -no_ticket): Reused" resumed "$P_RSA" -tls1_2 -no_ticket
check "resumption by ticket (TLS 1.3): Reused" resumed "$P_EC" -tls1_3
check "resumption by ticket (TLS 1.2): Reused" resumed "$P_EC" -tls1_2

# --- the benchmark client ----------------------------------------------------------------------
bench_ca_refused() { # a CA path that is not a regular file: an error at once, not a read without end
    local out; out=$(timeout 10 "$REL/tls-bench" run --connect "127.0.0.1:$P_EC" --ca /dev/zero -d 1 2>&1)
    [ $? -eq 1 ] && grep -q "/dev/zero: not a regular file" <<<"$out" || { sed 's/^/    /' <<<"$out"; return 1; }
}
check "tls-bench refuses a CA file that is a device (/dev/zero)" bench_ca_refused

# --- fallback ----------------------------------------------------------------------------------
fallback_ok() {
    local out; out=$(s_client "$P_RSA" -tls1_2 -cipher AES128-SHA)
    grep -E "^subject=|Cipher is" <<<"$out" | sed 's/^/    /'
    grep -q "^subject=CN *= *fallback-server" <<<"$out" && grep -q "Cipher is AES128-SHA" <<<"$out"
}
check "AES128-SHA-only ClientHello completes with the fallback server (its certificate)" fallback_ok
groups_fallback_ok() { # no key-exchange group in common with the proxy: the fallback server
    local out; out=$(s_client "$P_RSA" -tls1_3 -groups ffdhe2048)
    grep -E "^subject=|Server Temp Key" <<<"$out" | sed 's/^/    /'
    grep -q "^subject=CN *= *fallback-server" <<<"$out"
}
check "a TLS 1.3 ClientHello offering only ffdhe2048 (no group the proxy has) completes with the fallback server" groups_fallback_ok
proxy_cert_ok() { s_client "$P_RSA" -tls1_2 | grep -q "^subject=CN *= *localhost"; }
check "a ClientHello it can serve still gets the proxy's certificate" proxy_cert_ok

# --- tlsproxycfg: pkcs11 format, reload keeps connections, list, delete ------------------------
create_p11() {
    "${CFG[@]}" create -f pkcs11 -T "OpenCF Metaslot" -C web-ec -p "$W/pin" -x "$HTTP" \
        --versions 1.3 -F "$P_FB" --unknown-sni fallback 127.0.0.1 "$P_P11" > "$W/create3.log" 2>&1 \
        && wait_port "$P_P11" || { sed 's/^/    /' "$W/create3.log"; return 1; }
}
hold_ok() { python3 "$HERE/robust.py" hold "$P_RSA" "$W/rsa.crt" bash -c "$(declare -f create_p11 wait_port port_free); CFG=(${CFG[*]@Q}); W=$W HTTP=$HTTP P_P11=$P_P11 P_FB=$P_FB; create_p11"; }
check "create -f pkcs11 -T -C (token key and certificate) while a connection is open: it survives the reload" hold_ok
check "curl through the pkcs11-format instance (TLS 1.3)" curl_ok "$P_P11" "$W/ec.crt"
unknown_sni_ok() {
    s_client "$P_P11" -servername unknown.test | grep -q "^subject=CN *= *fallback-server" \
        && s_client "$P_P11" | grep -q "^subject=CN *= *localhost"
}
check "unknown_sni = fallback: an unknown name goes to the fallback server, localhost does not" unknown_sni_ok
list_ok() {
    local out; out=$("${CFG[@]}" list)
    sed 's/^/    /' <<<"$out"
    [ "$(grep -c "^127.0.0.1-" <<<"$out")" = 4 ] && grep -q "daemon: running" <<<"$out"
}
check "tlsproxycfg list: four instances, daemon running" list_ok
delete_ok() { "${CFG[@]}" delete 127.0.0.1 "$P_P11" >/dev/null && wait_port "$P_P11" down && curl_ok "$P_RSA" "$W/rsa.crt"; }
check "tlsproxycfg delete: its port closes, the others keep serving" delete_ok
# An instance whose certificate file (written by create) another instance of the file names
# too: delete keeps the file while that one does, and removes it with the last one.
shared_ok() {
    local f="$W/tlsproxy.d/127.0.0.1-$P_SH1.pem" uri
    "${CFG[@]}" create -f pem -i "$W/rsa.pem" -p "$W/pin" -C shared-rsa -x "$HTTP" 127.0.0.1 "$P_SH1" \
        > "$W/create-shared.log" 2>&1 && wait_port "$P_SH1" || return 1
    uri=$(grep -o 'pkcs11:[^"]*object=shared-rsa[^"]*' "$CONF" | head -1)
    printf '\n[[instance]]\naddress = "127.0.0.1"\nport = %s\nproxy_port = %s\npin_file = "%s"\ncert_file = "%s"\nkey_uri = "%s"\n' \
        "$P_SH2" "$HTTP" "$W/pin" "$f" "$uri" >> "$CONF"
    kill -HUP "$(cat "$W/tlsproxy.pid")" && wait_port "$P_SH2" || return 1
    "${CFG[@]}" delete 127.0.0.1 "$P_SH1" > /dev/null && wait_port "$P_SH1" down || return 1
    [ -f "$f" ] || { echo "    $f removed, though instance 127.0.0.1-$P_SH2 names it"; return 1; }
    curl_ok "$P_SH2" "$W/rsa.crt" || return 1
    "${CFG[@]}" delete 127.0.0.1 "$P_SH2" > /dev/null && wait_port "$P_SH2" down && [ ! -e "$f" ]
}
check "tlsproxycfg delete keeps a certificate file another instance names, and removes it with the last" shared_ok

# --- robustness ---------------------------------------------------------------------------------
# An instance whose application (P_BKEND) is started, reset and killed by robust.py backend.
"${CFG[@]}" create -f pkcs11 -T "OpenCF Metaslot" -C web-ec -p "$W/pin" -x "$P_BKEND" \
    127.0.0.1 "$P_BK" > "$W/create5.log" 2>&1
wait_port "$P_BK" || fail "application-down instance did not start"
"${CFG[@]}" create -f pkcs11 -T "OpenCF Metaslot" -C web-ec -p "$W/pin" -x "$P_ECHO" \
    --handshake-timeout 2 127.0.0.1 "$P_ROB" > "$W/create4.log" 2>&1
wait_port "$P_ROB" || fail "robustness instance did not start"
check "malformed, truncated, random and mutated first flights: all closed, then a good handshake" \
    python3 "$HERE/robust.py" fuzz "$P_ROB" "$W/ec.crt"
check "a client stalled mid-handshake is dropped after the 2 s handshake timeout" \
    python3 "$HERE/robust.py" stall "$P_ROB" 2
check "large ClientHellos (padding to 40 KB, one byte per record): served; records beyond 64 KiB: closed" \
    python3 "$HERE/robust.py" bighello "$P_ROB"
python3 "$HERE/robust.py" echo "$P_ECHO" &
PIDS+=($!)
wait_port "$P_ECHO" || fail "echo service did not start"
check "a TLS 1.2 renegotiation attempt gets the no_renegotiation alert at once (the application idle)" \
    python3 "$HERE/robust.py" reneg "$P_ROB" "$W/ec.crt"
# Starts opencf-tlsproxy on W/STEM.toml in the background (pid file W/STEM.pid, errors in
# W/STEM.log; variables assigned before the call reach it, THREADS=N gives it N runtime threads)
# and waits until it listens on every PORT and has written its pid file; otherwise prints its log.
start_daemon() { # STEM PORT...
    local stem=$1 p; shift
    "$REL/opencf-tlsproxy" --config "$W/$stem.toml" --pid-file "$W/$stem.pid" ${THREADS:+--threads "$THREADS"} \
        2>"$W/$stem.log" &
    PIDS+=($!)
    for p in "$@"; do wait_port "$p" || { sed 's/^/    /' "$W/$stem.log"; return 1; }; done
    for _ in $(seq 100); do [ -s "$W/$stem.pid" ] && return 0; sleep 0.1; done
    sed 's/^/    /' "$W/$stem.log"
    return 1
}
# An [[instance]] block on PORT for the token's RSA-2048 key (made by the first create) or its
# P-256 key (web-ec), relaying to BACKEND (default: the HTTP server).
instance_toml() { # PORT rsa|ec [BACKEND]
    local cert key
    case $2 in
        rsa) cert=127.0.0.1-$P_RSA.pem key=tlsproxy-127.0.0.1-$P_RSA ;;
        *) cert=127.0.0.1-$P_EC.pem key=web-ec ;;
    esac
    cat <<TOML

[[instance]]
address = "127.0.0.1"
port = $1
proxy_port = ${3:-$HTTP}
pin_file = "$W/pin"
cert_file = "$W/tlsproxy.d/$cert"
key_uri = "pkcs11:token=OpenCF%20Metaslot;object=$key;type=private"
TOML
}
# A daemon of its own (EC key, echo service), given worker processes to run: the instance file,
# then the daemon in the background with its pid file (WORKERS, INSTANCE_PORT, FILE_STEM).
workers_daemon() {
    local n=$1 port=$2 stem=$3 backend=${4:-$HTTP}
    {
        printf 'module = "%s"\nworkers = %s\n' "$MOD" "$n"
        instance_toml "$port" ec "$backend"
        echo "session_timeout = 600"
    } > "$W/$stem.toml"
    start_daemon "$stem" "$port"
}
# The worker processes of a supervisor (its children).
worker_pids() { cat /proc/"$1"/task/*/children 2>/dev/null | tr ' ' '\n' | grep . | sort -n; }
# Stops a daemon with SIGTERM: its process and its pid file gone, every PORT closed.
sigterm_ok() { # STEM PORT...
    local stem=$1 pid p; shift
    pid=$(cat "$W/$stem.pid") && kill -TERM "$pid" || return 1
    for _ in $(seq 150); do [ -e "/proc/$pid" ] || break; sleep 0.1; done
    [ ! -e "/proc/$pid" ] || { echo "    daemon $pid still running"; return 1; }
    [ ! -e "$W/$stem.pid" ] || return 1
    for p in "$@"; do port_free "$p" || return 1; done
}
# The same for a supervisor: its worker processes gone too.
term_ok() { # STEM PORT
    local sup ws p
    sup=$(cat "$W/$1.pid") && ws=$(worker_pids "$sup") || return 1
    sigterm_ok "$@" || return 1
    for p in $ws; do [ ! -e "/proc/$p" ] || { echo "    worker $p still running"; return 1; }; done
}

if [ "$IDLE_WORKERS" -gt 1 ]; then
    workers_daemon "$IDLE_WORKERS" "$P_IDLE" idle "$P_ECHO" || fail "idle-connection daemon did not start"
    IDLE_PORT=$P_IDLE IDLE_PID=$(cat "$W/idle.pid")
    IDLE_NOTE=" ($IDLE_WORKERS worker processes: descriptor limit $NOFILE per process, 2 per connection)"
else
    IDLE_PORT=$P_ROB IDLE_PID=$(cat "$W/tlsproxy.pid") IDLE_NOTE=" (one process)"
fi
echo "    descriptor limit $NOFILE: $IDLE_CONNS idle connections$IDLE_NOTE"
check "$IDLE_CONNS concurrent idle TLS connections, all still relaying; requests served meanwhile and after$IDLE_NOTE" \
    python3 "$HERE/robust.py" idle "$IDLE_PORT" "$IDLE_CONNS" "$W/ec.crt" "$IDLE_PID" \
    bash -c "$(declare -f curl_ok); W=$W; curl_ok $P_RSA $W/rsa.crt"
if [ "$IDLE_WORKERS" -gt 1 ]; then
    check "SIGTERM to the idle-connection daemon: supervisor and $IDLE_WORKERS workers gone, pid file removed" \
        term_ok idle "$P_IDLE"
fi
check "application down, one connection reset, application killed: that client closed cleanly, others served" \
    python3 "$HERE/robust.py" backend "$P_BK" "$P_BKEND" "$P_ROB" "$W/ec.crt"
check "a client's FIN without close_notify gets the whole answer; an application's reset ends without close_notify" \
    python3 "$HERE/robust.py" ends "$P_BK" "$W/ec.crt" "$P_BKEND"
# A second certificate by SNI on the robustness instance (the last one in the file), added by
# editing the file and sending SIGHUP: the RSA key answers for rsa.test, the EC key otherwise.
sni_ok() {
    cat >> "$CONF" <<TOML

[[instance.sni]]
names = ["rsa.test", "*.rsa.test"]
cert_file = "$W/tlsproxy.d/127.0.0.1-$P_RSA.pem"
key_uri = "pkcs11:token=OpenCF%20Metaslot;object=tlsproxy-127.0.0.1-$P_RSA;type=private"
TOML
    kill -HUP "$(cat "$W/tlsproxy.pid")" || return 1
    local i out
    for i in $(seq 50); do
        out=$(s_client "$P_ROB" -servername www.rsa.test -tls1_3)
        grep -q "Peer signature type: RSA-PSS" <<<"$out" && break
        sleep 0.1
    done
    grep -q "Peer signature type: RSA-PSS" <<<"$out" || return 1
    out=$(s_client "$P_ROB" -servername other.test -tls1_3)
    grep -q "Peer signature type: ECDSA" <<<"$out" || return 1
    out=$(s_client "$P_ROB" -servername rsa.test -tls1_3)
    grep -q "Peer signature type: RSA-PSS" <<<"$out"
}
check "SNI: a second certificate added by editing the file and SIGHUP, chosen by name (with a wildcard)" sni_ok
alive_ok() { kill -0 "$(cat "$W/tlsproxy.pid")" && curl_ok "$P_RSA" "$W/rsa.crt"; }
check "the daemon is alive and serving after the robustness runs" alive_ok

# --- PROXY protocol header and idle timeout -----------------------------------------------------
stat_sum() { # COUNTER...: the sum of these tlsproxy counters in `cryptoadm stat --json`
    "$REL/cryptoadm" stat --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
c = {x["name"]: x["value"] for x in d["counters"] if x["component"] == "tlsproxy"}
print(sum(c.get(n, 0) for n in sys.argv[1:]))' "$@"
}
"${CFG[@]}" create -f pkcs11 -T "OpenCF Metaslot" -C web-ec -p "$W/pin" -x "$P_PPB1" \
    --proxy-protocol v1 127.0.0.1 "$P_PP1" > "$W/create6.log" 2>&1
"${CFG[@]}" create -f pkcs11 -T "OpenCF Metaslot" -C web-ec -p "$W/pin" -x "$P_PPB2" \
    --proxy-protocol v2 127.0.0.1 "$P_PP2" > "$W/create7.log" 2>&1
"${CFG[@]}" create -f pkcs11 -T "OpenCF Metaslot" -C web-ec -p "$W/pin" -x "$P_ECHO" \
    --idle-timeout 2 127.0.0.1 "$P_IT" > "$W/create8.log" 2>&1
wait_port "$P_PP1" && wait_port "$P_PP2" && wait_port "$P_IT" || fail "PROXY protocol and idle-timeout instances did not start"
check "--proxy-protocol v1: the application reads the client's address and port first, then its bytes" \
    python3 "$HERE/robust.py" proxyproto "$P_PP1" "$W/ec.crt" "$P_PPB1" v1
check "--proxy-protocol v2: the same with the binary header" \
    python3 "$HERE/robust.py" proxyproto "$P_PP2" "$W/ec.crt" "$P_PPB2" v2
idle_before=$(stat_sum idle_timeouts)
check "--idle-timeout 2: an idle relay is closed cleanly after 2 s, a busy one stays open" \
    python3 "$HERE/robust.py" idletimeout "$P_IT" "$W/ec.crt" 2
idle_counted_ok() { [ "$(stat_sum idle_timeouts)" -ge $((idle_before + 2)) ]; }
check "cryptoadm stat counts the relays closed for idleness (idle_timeouts)" idle_counted_ok
pp_list_ok() { local out; out=$("${CFG[@]}" list) && grep -q "^127.0.0.1-$P_PP2 .* $P_PPB2/v2 " <<<"$out"; }
check "tlsproxycfg list shows the PROXY protocol version beside the clear-text port" pp_list_ok
list_pipe_ok() { # a reader that stops after one line: no panic, exit 0
    "${CFG[@]}" list 2>"$W/list-pipe.err" | head -1 >/dev/null
    [ "${PIPESTATUS[0]}" = 0 ] && ! grep -q panicked "$W/list-pipe.err"
}
check "tlsproxycfg list | head -1: exit 0, no panic" list_pipe_ok

# --- application protocols (ALPN) --------------------------------------------------------------
# P_AL: h2 and http/1.1 (h2 preferred), a PROXY v2 header, the fallback server. P_AN: h2 alone,
# no fallback, in front of nginx speaking HTTP/2 in clear text (prior knowledge) on P_H2.
"${CFG[@]}" create -f pkcs11 -T "OpenCF Metaslot" -C web-ec -p "$W/pin" -x "$P_ALB" -F "$P_FB" \
    --alpn h2,http/1.1 --proxy-protocol v2 127.0.0.1 "$P_AL" > "$W/create12.log" 2>&1
"${CFG[@]}" create -f pkcs11 -T "OpenCF Metaslot" -C web-ec -p "$W/pin" -x "$P_H2" \
    --alpn h2 127.0.0.1 "$P_AN" > "$W/create13.log" 2>&1
wait_port "$P_AL" && wait_port "$P_AN" || fail "ALPN instances did not start"
check "--alpn h2,http/1.1: a client offering http/1.1,h2 gets h2 (the instance's order), and the PROXY v2 header carries it with the server name and the TLS version and suite" \
    python3 "$HERE/robust.py" proxyproto "$P_AL" "$W/ec.crt" "$P_ALB" v2 http/1.1,h2 h2
check "--alpn h2,http/1.1: a client offering http/1.1 alone gets http/1.1" \
    python3 "$HERE/robust.py" proxyproto "$P_AL" "$W/ec.crt" "$P_ALB" v2 http/1.1 http/1.1
check "--alpn: a client offering no ALPN is served without a protocol (no ALPN field in the header)" \
    python3 "$HERE/robust.py" proxyproto "$P_AL" "$W/ec.crt" "$P_ALB" v2
alpn_fallback_ok() { # a client offering only a protocol the instance does not speak
    local out
    out=$(s_client "$P_AL" -alpn spdy/3)
    grep -q "^subject=CN *= *fallback-server" <<<"$out" || { grep -m3 -E "subject|alert|ALPN" <<<"$out" | sed 's/^/    /'; return 1; }
    out=$(s_client "$P_AN" -alpn spdy/3 -tls1_3)
    grep -m1 -i "alert" <<<"$out" | sed 's/^/    without a fallback port: /'
    grep -qi "alert no application protocol" <<<"$out" && ! grep -q "^subject=" <<<"$out"
}
check "ALPN spdy/3 alone: handed to the fallback server; without a fallback port, the no_application_protocol alert" alpn_fallback_ok
h2_ok() { # curl negotiates h2 with the proxy; nginx behind it answers over HTTP/2 in clear text
    local ng out
    ng=$(command -v nginx || echo /usr/sbin/nginx)
    [ -x "$ng" ] || { echo "    nginx is not installed (Debian: nginx)"; return 1; }
    mkdir -p "$W/h2/logs"
    cat > "$W/h2/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $W/h2/nginx.pid;
error_log $W/h2/logs/error.log;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path $W/h2/body; proxy_temp_path $W/h2/proxy;
    fastcgi_temp_path $W/h2/fastcgi; uwsgi_temp_path $W/h2/uwsgi; scgi_temp_path $W/h2/scgi;
    server {
        listen 127.0.0.1:$P_H2 http2;
        location / { default_type text/plain; return 200 "\$server_protocol from nginx\n"; }
    }
}
EOF
    "$ng" -p "$W/h2" -c "$W/h2/nginx.conf" -e "$W/h2/logs/error.log" &
    PIDS+=($!)
    wait_port "$P_H2" || { sed 's/^/    /' "$W/h2/logs/error.log"; return 1; }
    out=$(curl -sS --max-time 10 --http2 --cacert "$W/ec.crt" --resolve "localhost:$P_AN:127.0.0.1" \
        -w '%{http_version}' "https://localhost:$P_AN/" 2>&1)
    echo "    curl --http2: $(tr '\n' ' ' <<<"$out")"
    [ "$out" = $'HTTP/2.0 from nginx\n2' ]
}
check "curl --http2 through --alpn h2 to nginx speaking HTTP/2 in clear text: HTTP/2 end to end" h2_ok

# --- client certificates (mutual TLS) ------------------------------------------------------------
# A CA of clients, two clients it signs (one revoked in the first list, both in the second), and a
# stranger signed by another CA. P_MT requires a certificate and sends a PROXY v2 header to
# P_MTB (an application in robust.py); P_MO makes one optional, in front of the HTTP server.
(
    cd "$W"
    ca=(basicConstraints=critical,CA:TRUE keyUsage=critical,keyCertSign,cRLSign)
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout cca.key -out cca.crt \
        -subj /CN=test-clients-ca -days 2 -addext "${ca[0]}" -addext "${ca[1]}"
    printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n' > client.ext
    for c in client revoked stranger; do
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$c.key" -out "$c.csr" \
            -subj "/CN=test-$c"
    done
    openssl x509 -req -in client.csr -CA cca.crt -CAkey cca.key -CAcreateserial -out client.crt -days 2 -extfile client.ext
    openssl x509 -req -in revoked.csr -CA cca.crt -CAkey cca.key -CAcreateserial -out revoked.crt -days 2 -extfile client.ext
    openssl x509 -req -in stranger.csr -CA root.crt -CAkey root.key -CAcreateserial -out stranger.crt -days 2 -extfile client.ext
    mkdir -p cadb && : > cadb/index.txt && echo 01 > cadb/crlnumber
    printf '[ca]\ndefault_ca = d\n[d]\ndatabase = %s\ncrlnumber = %s\ndefault_md = sha256\ndefault_crl_days = 2\n' \
        "$W/cadb/index.txt" "$W/cadb/crlnumber" > cadb/ca.cnf
    openssl ca -batch -config cadb/ca.cnf -keyfile cca.key -cert cca.crt -revoke revoked.crt
    openssl ca -batch -config cadb/ca.cnf -keyfile cca.key -cert cca.crt -gencrl -out clients.crl
    openssl ca -batch -config cadb/ca.cnf -keyfile cca.key -cert cca.crt -revoke client.crt
    openssl ca -batch -config cadb/ca.cnf -keyfile cca.key -cert cca.crt -gencrl -out clients2.crl
) > "$W/clientcerts.log" 2>&1 || { sed 's/^/    /' "$W/clientcerts.log"; fail "openssl could not make the client certificates"; }
"${CFG[@]}" create -f pkcs11 -T "OpenCF Metaslot" -C web-ec -p "$W/pin" -x "$P_MTB" \
    --client-ca "$W/cca.crt" --client-crl "$W/clients.crl" --proxy-protocol v2 127.0.0.1 "$P_MT" > "$W/create14.log" 2>&1
"${CFG[@]}" create -f pkcs11 -T "OpenCF Metaslot" -C web-ec -p "$W/pin" -x "$HTTP" \
    --client-ca "$W/cca.crt" --client-auth optional 127.0.0.1 "$P_MO" > "$W/create15.log" 2>&1
wait_port "$P_MT" && wait_port "$P_MO" || { sed 's/^/    /' "$W/create14.log" "$W/create15.log"; fail "client-certificate instances did not start"; }
check "--client-ca: a client certificate reaches the application as PP2_TYPE_SSL (flags 7, verify 0, its CN); a resumed session keeps it (flags 5)" \
    python3 "$HERE/robust.py" clientcert "$P_MT" "$W/ec.crt" "$P_MTB" "$W/client.crt" "$W/client.key" test-client yes
mtls_refused_ok() { # s_client without a certificate, with the stranger's, with the revoked one
    local a b c
    alert() { s_client "$P_MT" -CAfile "$W/ec.crt" "$@" | grep -io "alert [a-z ]*" | head -1; }
    a=$(alert -tls1_3)
    b=$(alert -tls1_3 -cert "$W/stranger.crt" -key "$W/stranger.key")
    c=$(alert -tls1_2 -cert "$W/revoked.crt" -key "$W/revoked.key")
    echo "    none: $a; another CA's: $b; revoked (TLS 1.2): $c"
    [ "$a" = "alert certificate required" ] && [ "$b" = "alert unknown ca" ] && [ "$c" = "alert certificate revoked" ]
}
check "--client-ca: no certificate, one from another CA, a revoked one (--client-crl): certificate_required, unknown_ca, certificate_revoked alerts" mtls_refused_ok
mtls_optional_ok() {
    curl_ok "$P_MO" "$W/ec.crt" || return 1
    curl_ok "$P_MO" "$W/ec.crt" --tls-max 1.2 --cert "$W/client.crt" --key "$W/client.key" || return 1
    ! curl -s --max-time 10 --cacert "$W/ec.crt" --resolve "localhost:$P_MO:127.0.0.1" \
        --cert "$W/stranger.crt" --key "$W/stranger.key" -o /dev/null "https://localhost:$P_MO/"
}
check "--client-auth optional: curl without a certificate and with one (TLS 1.2) served; another CA's refused" mtls_optional_ok
reload_wait() { # CMD…: runs CMD, then waits (10 s at most) for the daemon to log one more reload
    local n; n=$(grep -c "reloaded:" "$W/tlsproxy.log")
    "$@" || return 1
    for _ in $(seq 100); do
        [ "$(grep -c "reloaded:" "$W/tlsproxy.log")" -gt "$n" ] && return 0
        sleep 0.1
    done
    return 1
}
check "a reload with the same client CA and CRL keeps sessions: the first session resumes after SIGHUP" \
    python3 "$HERE/robust.py" clientcert "$P_MT" "$W/ec.crt" "$P_MTB" "$W/client.crt" "$W/client.key" test-client yes \
    bash -c "$(declare -f reload_wait); W=$W; reload_wait kill -HUP $(cat "$W/tlsproxy.pid")"
check "a reload with a new CRL (the client revoked): its session does not resume, the client is refused" \
    python3 "$HERE/robust.py" clientcert "$P_MT" "$W/ec.crt" "$P_MTB" "$W/client.crt" "$W/client.key" test-client refused \
    bash -c "$(declare -f reload_wait); W=$W; cp $W/clients2.crl $W/clients.crl && reload_wait kill -HUP $(cat "$W/tlsproxy.pid")"

# --- a token certificate with its CA chain (-h, as ksslcfg) ------------------------------------
# The leaf's key and certificate go into the token with a PEM file holding the leaf alone; that
# instance serves the leaf alone. A pkcs11-format instance of the same objects with -h sends the
# intermediate after it, and a client that trusts only the root verifies the chain.
"${CFG[@]}" create -f pem -i "$W/leaf.pem" -p "$W/pin" -C chained -x "$HTTP" 127.0.0.1 "$P_CH1" > "$W/create10.log" 2>&1
"${CFG[@]}" create -f pkcs11 -T "OpenCF Metaslot" -C chained -h "$W/inter.crt" -p "$W/pin" -x "$HTTP" \
    127.0.0.1 "$P_CH2" > "$W/create11.log" 2>&1
wait_port "$P_CH1" && wait_port "$P_CH2" || fail "chain instances did not start"
chain_ok() {
    local leaf_only with_chain
    leaf_only=$(s_client "$P_CH1" -CAfile "$W/root.crt" -showcerts)
    with_chain=$(s_client "$P_CH2" -CAfile "$W/root.crt" -showcerts)
    grep "Verify return code" <<<"$leaf_only" | head -1 | sed 's/^ */    leaf alone: /'
    grep "Verify return code" <<<"$with_chain" | head -1 | sed 's/^ */    with -h:    /'
    grep -Eq "Verify return code: 2[01] " <<<"$leaf_only" \
        && grep -q "Verify return code: 0 (ok)" <<<"$with_chain" \
        && grep -q "^ 1 s:.*CN *= *test-intermediate" <<<"$with_chain"
}
check "create -f pkcs11 -h CHAIN: the token's leaf is sent with the intermediate, verified against the root alone" chain_ok
h_refused_ok() {
    local out
    if out=$("${CFG[@]}" create -f pem -i "$W/leaf.pem" -h "$W/inter.crt" -x "$HTTP" 127.0.0.1 "$P_CH3" 2>&1); then
        return 1
    fi
    grep -q "carries its own chain" <<<"$out"
}
check "-h with -f pem is refused (the PEM file carries the chain)" h_refused_ok

# --- OCSP stapling (--ocsp) ---------------------------------------------------------------------
# The intermediate answers for the leaf: a good response, a second good one made later (the
# renewal), and one saying revoked.
(
    cd "$W"
    serial=$(openssl x509 -in leaf.crt -noout -serial | cut -d= -f2)
    printf 'V\t301231235959Z\t\t%s\tunknown\t/CN=localhost\n' "$serial" > ocsp-good.idx
    printf 'R\t301231235959Z\t%s\t%s\tunknown\t/CN=localhost\n' "$(date -u +%y%m%d%H%M%SZ)" "$serial" > ocsp-revoked.idx
    openssl ocsp -issuer inter.crt -cert leaf.crt -no_nonce -reqout ocsp.req
    respond() { openssl ocsp -index "$1" -rsigner inter.crt -rkey inter.key -CA inter.crt -reqin ocsp.req -respout "$2" -ndays 1; }
    respond ocsp-good.idx leaf.ocsp && respond ocsp-revoked.idx leaf-revoked.ocsp
    sleep 1.1
    respond ocsp-good.idx leaf-renewed.ocsp
) > "$W/ocsp.log" 2>&1 || { sed 's/^/    /' "$W/ocsp.log"; fail "openssl could not make the OCSP responses"; }
"${CFG[@]}" create -f pkcs11 -T "OpenCF Metaslot" -C chained -h "$W/inter.crt" --ocsp "$W/leaf.ocsp" -p "$W/pin" \
    -x "$HTTP" 127.0.0.1 "$P_OC" > "$W/create16.log" 2>&1
wait_port "$P_OC" || { sed 's/^/    /' "$W/create16.log"; fail "OCSP instance did not start"; }
this_update() { grep -m1 "This Update" <<<"$1" | sed 's/^ *This Update: *//'; }
ocsp_ok() {
    local out13 out12 none
    out13=$(s_client "$P_OC" -status -tls1_3 -CAfile "$W/root.crt")
    out12=$(s_client "$P_OC" -status -tls1_2 -CAfile "$W/root.crt")
    none=$(s_client "$P_CH2" -status -tls1_3 -CAfile "$W/root.crt")
    echo "    TLS 1.3: $(grep -m1 "OCSP Response Status" <<<"$out13" | sed 's/^ *//'), $(grep -m1 "Cert Status" <<<"$out13" | sed 's/^ *//'); without --ocsp: $(grep -m1 "OCSP response:" <<<"$none")"
    for out in "$out13" "$out12"; do
        grep -q "OCSP Response Status: successful" <<<"$out" && grep -q "Cert Status: good" <<<"$out" \
            && grep -q "Verify return code: 0 (ok)" <<<"$out" || return 1
    done
    grep -q "OCSP response: no response sent" <<<"$none"
}
check "--ocsp: the response is stapled over TLS 1.3 and 1.2 (s_client -status: successful, good); none without it" ocsp_ok
ocsp_renew_ok() { # a renewed response in the file and SIGHUP: the next handshake staples it
    local before after
    before=$(this_update "$(s_client "$P_OC" -status -CAfile "$W/root.crt")")
    cp "$W/leaf-renewed.ocsp" "$W/leaf.ocsp"
    reload_wait kill -HUP "$(cat "$W/tlsproxy.pid")" || return 1
    after=$(this_update "$(s_client "$P_OC" -status -CAfile "$W/root.crt")")
    echo "    This Update before: $before; after the reload: $after"
    [ -n "$before" ] && [ -n "$after" ] && [ "$before" != "$after" ]
}
check "--ocsp: a renewed response replaced in the file is stapled after SIGHUP" ocsp_renew_ok
ocsp_refused_ok() { # a response saying revoked, and a file that is no OCSP response
    local out1 out2
    cat "$W/leaf.key" "$W/leaf.crt" "$W/inter.crt" > "$W/leafchain.pem"
    out1=$("${CFG[@]}" create -f pem -i "$W/leafchain.pem" -C ocsp-refused --ocsp "$W/leaf-revoked.ocsp" -p "$W/pin" \
        -x "$HTTP" 127.0.0.1 "$P_CH3" 2>&1) && return 1
    out2=$("${CFG[@]}" create -f pkcs11 -T "OpenCF Metaslot" -C chained -h "$W/inter.crt" --ocsp "$W/leaf.crt" \
        -p "$W/pin" -x "$HTTP" 127.0.0.1 "$P_CH3" 2>&1) && return 1
    echo "    $out1"; echo "    $out2"
    grep -q "says the certificate is revoked" <<<"$out1" && grep -q "not a DER OCSP response" <<<"$out2" \
        && ! pkcs11-tool --module "$MOD" --login --pin 'tls pin' --list-objects 2>/dev/null | grep -q ocsp-refused
}
check "--ocsp with a response saying revoked, or with a file that is none: refused, no key imported" ocsp_refused_ok
list_options_ok() { # the settings the columns do not show, on a line below each instance
    local out; out=$("${CFG[@]}" list) || return 1
    grep -E "^127.0.0.1-($P_MT|$P_OC) " -A1 <<<"$out" | sed 's/^/    /'
    grep -A1 "^127.0.0.1-$P_AL " <<<"$out" | grep -q "^  *alpn h2,http/1.1$" \
        && grep -A1 "^127.0.0.1-$P_MT " <<<"$out" | grep -q "^  *client certificates required (CA cca.crt, CRL clients.crl)$" \
        && grep -A1 "^127.0.0.1-$P_MO " <<<"$out" | grep -q "^  *client certificates optional (CA cca.crt)$" \
        && grep -A1 "^127.0.0.1-$P_OC " <<<"$out" | grep -q "^  *OCSP leaf.ocsp$" \
        && grep -A1 "^127.0.0.1-$P_IT " <<<"$out" | grep -q "^  *idle timeout 2 s$" \
        || { grep -E "^127.0.0.1-($P_AL|$P_MT|$P_MO|$P_OC|$P_IT) " -A1 <<<"$out" | sed 's/^/    /'; return 1; }
}
check "tlsproxycfg list: ALPN, client certificates, OCSP and the idle timeout below each instance" list_options_ok

# --- worker processes ---------------------------------------------------------------------------
workers_start_ok() {
    workers_daemon 2 "$P_W" workers || return 1
    SUP=$(cat "$W/workers.pid")
    local out; out=$("$REL/tlsproxycfg" --config "$W/workers.toml" --pid-file "$W/workers.pid" list)
    sed 's/^/    /' <<<"$out" | tail -1
    [ "$(worker_pids "$SUP" | wc -l)" = 2 ] && grep -q "daemon: running, pid $SUP, 2 workers" <<<"$out" \
        && [ "$(grep -c "worker [01]\]: instance 127.0.0.1-$P_W listening" "$W/workers.log")" = 2 ]
}
check "workers = 2: a supervisor (pid file) and 2 worker processes, each listening (tlsproxycfg list)" workers_start_ok
check "workers = 2: curl TLS 1.3" curl_ok "$P_W" "$W/ec.crt" --tlsv1.3
workers_stat_ok() { # 40 connections spread over the workers: the counters add up to 40
    local before after i
    before=$(stat_sum handshakes_full handshakes_resumed) || return 1
    for i in $(seq 40); do curl_ok "$P_W" "$W/ec.crt" || return 1; done
    after=$(stat_sum handshakes_full handshakes_resumed) || return 1
    echo "    handshakes counted: $before before, $after after 40 connections"
    [ $((after - before)) = 40 ]
}
check "workers = 2: cryptoadm stat sums the workers' counters (40 handshakes over both)" workers_stat_ok
resumed_n() { # PORT N [options]: one session saved, then N connections in a row show Reused
    local port=$1 n=$2 i out; shift 2
    rm -f "$W/sess"
    s_client "$port" "$@" -sess_out "$W/sess" | grep -q "^New," || return 1
    for i in $(seq "$n"); do
        out=$(s_client "$port" "$@" -sess_in "$W/sess")
        grep -q "^Reused," <<<"$out" || { echo "    connection $i:"; grep -E "^(New|Reused)" <<<"$out" | sed 's/^/    /'; return 1; }
    done
}
check "workers = 2: a TLS 1.3 ticket resumes 8 times in a row (whichever worker each lands on)" resumed_n "$P_W" 8 -tls1_3
check "workers = 2: a TLS 1.2 ticket resumes 8 times in a row" resumed_n "$P_W" 8 -tls1_2
workers_reload_ok() { # an SNI entry added, SIGHUP to the supervisor: both workers reload
    cat >> "$W/workers.toml" <<TOML

[[instance.sni]]
names = ["rsa.test"]
cert_file = "$W/tlsproxy.d/127.0.0.1-$P_RSA.pem"
key_uri = "pkcs11:token=OpenCF%20Metaslot;object=tlsproxy-127.0.0.1-$P_RSA;type=private"
TOML
    kill -HUP "$SUP" || return 1
    for _ in $(seq 100); do
        [ "$(grep -c "worker [01]\]: reloaded: 0 started, 1 updated" "$W/workers.log")" = 2 ] && break
        sleep 0.1
    done
    grep "reloaded" "$W/workers.log" | sed 's/^/    /'
    [ "$(grep -c "worker [01]\]: reloaded: 0 started, 1 updated" "$W/workers.log")" = 2 ] || return 1
    local i
    for i in $(seq 8); do
        s_client "$P_W" -servername rsa.test -tls1_3 | grep -q "Peer signature type: RSA-PSS" || return 1
        s_client "$P_W" -tls1_3 | grep -q "Peer signature type: ECDSA" || return 1
    done
}
check "workers = 2: SIGHUP to the supervisor reloads both workers (a new SNI certificate served on 8 connections)" workers_reload_ok
workers_kill_ok() { # SIGKILL to one worker: it is started again, the service keeps answering
    rm -f "$W/sess"
    s_client "$P_W" -tls1_3 -sess_out "$W/sess" | grep -q "^New," || return 1
    local old new victim i
    old=$(worker_pids "$SUP"); victim=$(head -1 <<<"$old")
    kill -KILL "$victim" || return 1
    for _ in $(seq 100); do
        new=$(worker_pids "$SUP")
        [ "$(wc -l <<<"$new")" = 2 ] && ! grep -qx "$victim" <<<"$new" && grep -q "restarted" "$W/workers.log" && break
        sleep 0.1
    done
    grep -E "exited|restarted" "$W/workers.log" | sed 's/^/    /'
    [ "$(wc -l <<<"$new")" = 2 ] && ! grep -qx "$victim" <<<"$new" && grep -q "restarted, pid" "$W/workers.log" || return 1
    for i in $(seq 8); do curl_ok "$P_W" "$W/ec.crt" || return 1; done
    # A ticket issued before the kill resumes on the new worker too (the same ticket keys).
    for i in $(seq 6); do s_client "$P_W" -tls1_3 -sess_in "$W/sess" | grep -q "^Reused," || return 1; done
}
check "workers = 2: a worker killed with SIGKILL is restarted; service and earlier tickets keep working" workers_kill_ok
check "workers = 2: SIGTERM to the supervisor stops both workers and removes the pid file" term_ok workers "$P_W"
orphans_ok() { # the supervisor killed with SIGKILL: its workers see the pipe close and exit
    workers_daemon 2 "$P_W" orphans || return 1
    local sup ws p
    sup=$(cat "$W/orphans.pid"); ws=$(worker_pids "$sup")
    [ "$(wc -l <<<"$ws")" = 2 ] || return 1
    any_alive() { # a worker still running (not a zombie)
        for p in $ws; do [ -e "/proc/$p" ] && [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" != Z ] && return 0; done
        return 1
    }
    kill -KILL "$sup" || return 1
    for _ in $(seq 100); do any_alive || break; sleep 0.1; done
    grep "supervisor is gone" "$W/orphans.log" | sed 's/^/    /'
    ! any_alive && [ "$(grep -c "supervisor is gone" "$W/orphans.log")" = 2 ] && wait_port "$P_W" down
}
check "workers = 2: the supervisor killed (SIGKILL): both workers exit, the port closes" orphans_ok
workers_bad_ok() { # a worker that cannot start: the daemon exits non-zero, the error on stderr
    sed -e "s/^workers = 2/workers = 1/" -e "s/object=web-ec;type=private/object=no-such-key;type=private/" \
        "$W/workers.toml" > "$W/bad.toml"
    local out rc
    out=$(timeout 30 "$REL/opencf-tlsproxy" --config "$W/bad.toml" --workers 2 2>&1); rc=$?
    sed 's/^/    /' <<<"$out"
    [ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -q "worker 0\].*no-such-key" <<<"$out" \
        && grep -q "worker 0 (pid [0-9]*) failed to start" <<<"$out" || return 1
    out=$("$REL/opencf-tlsproxy" --config "$W/bad.toml" --workers 65 2>&1) && return 1
    grep -q "between 1 and 64" <<<"$out"
}
check "--workers 2 with a missing key: exits non-zero with the worker's error; --workers 65 refused" workers_bad_ok

# --- graceful stop (SIGQUIT) ---------------------------------------------------------------------
# Daemons of their own in front of the echo service with drain_timeout = 3: one process, whose
# last connection ends before the timeout, and a supervisor with two workers, whose connection
# stays open until the timeout ends it.
graceful_ok() { # STEM PORT WORKERS close|hold
    { printf 'module = "%s"\nworkers = %s\ndrain_timeout = 3\n' "$MOD" "$3"; instance_toml "$2" ec "$P_ECHO"; } > "$W/$1.toml"
    start_daemon "$1" "$2" || return 1
    python3 "$HERE/robust.py" drain "$2" "$W/ec.crt" "$(cat "$W/$1.pid")" 3 "$4" || return 1
    grep "gracefully\|every connection\|drain_timeout" "$W/$1.log" | sed 's/^/    /'
    [ ! -e "$W/$1.pid" ]
}
check "SIGQUIT: new connections refused at once, open ones served until they end; then the daemon exits (pid file removed)" \
    graceful_ok graceful "$P_GQ" 1 close
check "SIGQUIT to a supervisor with 2 workers: the same, and a connection left open is ended at drain_timeout (3 s)" \
    graceful_ok graceful-w "$P_GW" 2 hold

# --- reload: an instance's address changed on the same port ----------------------------------
# A daemon of its own: 127.0.0.1:P_RA, then the same port on every address and a new instance on
# P_RA2 (the old listener closed before the new one is bound), then back to 127.0.0.1 with an
# instance on a port another process holds: that reload fails and the listener closed for it is
# bound again.
readdr_toml() { # ADDRESS_LINE_FILTER: the instance on P_RA (its address line kept or dropped), then more
    { printf 'module = "%s"\n' "$MOD"; instance_toml "$P_RA" ec | grep -v "$1"; shift; for p in "$@"; do instance_toml "$p" ec; done; } > "$W/readdr.toml"
}
readdr_wait() { # PATTERN: the daemon logs it (10 s at most)
    for _ in $(seq 100); do grep -q "$1" "$W/readdr.log" && return 0; sleep 0.1; done
    sed 's/^/    /' "$W/readdr.log"; return 1
}
reload_address_ok() {
    readdr_toml '^$' && start_daemon readdr "$P_RA" || return 1
    readdr_toml '^address' "$P_RA2"
    kill -HUP "$(cat "$W/readdr.pid")" && readdr_wait "reloaded: 2 started, 0 updated, 1 stopped" || return 1
    grep -E "listening|reload" "$W/readdr.log" | sed 's/^/    /'
    grep -q "instance $P_RA listening on 0.0.0.0:$P_RA " "$W/readdr.log" \
        && curl_ok "$P_RA" "$W/ec.crt" && curl_ok "$P_RA2" "$W/ec.crt" || return 1
    # (the port held: the fallback s_server's, which no instance here relays to; one an
    # instance relays to would be refused before any listener is touched)
    readdr_toml '^$' "$P_RA2" "$P_FB"
    kill -HUP "$(cat "$W/readdr.pid")" && readdr_wait "reload failed" || return 1
    grep "reload failed" "$W/readdr.log" | sed 's/^/    /'
    grep -q "reload failed.*[Aa]ddress already in use" "$W/readdr.log" \
        || { echo "    the reload did not fail at binding the port"; return 1; }
    curl_ok "$P_RA" "$W/ec.crt" && curl_ok "$P_RA2" "$W/ec.crt" || return 1
    if command -v ss >/dev/null; then
        ss -ltnH "sport = :$P_RA" | grep -q "0.0.0.0:$P_RA " || { echo "    not listening on 0.0.0.0:$P_RA"; return 1; }
    fi
    sigterm_ok readdr "$P_RA" "$P_RA2"
}
check "SIGHUP moving an instance from 127.0.0.1 to every address on its port: applied with a new instance; a reload failing after that move binds the old listener again" \
    reload_address_ok

# --- reload: the instance file gone, or not a regular file ---------------------------------
# A daemon of its own on P_RF. SIGHUP with the file moved away: the reload fails and the
# instance keeps serving (a missing file is not an empty configuration). With the file a
# symbolic link to /dev/zero, then a FIFO: refused at once (not a regular file), the instance
# still served. The file back: reloaded. `tlsproxycfg delete` of the last instance writes a
# file without instances, and its reload stops the instance. /dev/zero again and SIGHUP, then
# SIGTERM: the daemon stops (it is not reading the endless file).
rf_wait() { # PATTERN N: the daemon's log holds PATTERN N times (10 s at most)
    for _ in $(seq 100); do [ "$(grep -c "$1" "$W/rfile.log")" -ge "$2" ] && return 0; sleep 0.1; done
    sed 's/^/    /' "$W/rfile.log"; return 1
}
reload_unreadable_ok() {
    local pid
    { printf 'module = "%s"\n' "$MOD"; instance_toml "$P_RF" ec; } > "$W/rfile.toml"
    start_daemon rfile "$P_RF" && pid=$(cat "$W/rfile.pid") || return 1
    mv "$W/rfile.toml" "$W/rfile.toml.away" && kill -HUP "$pid" || return 1
    rf_wait "reload failed, nothing changed: .*rfile.toml: No such file" 1 && curl_ok "$P_RF" "$W/ec.crt" || return 1
    ln -s /dev/zero "$W/rfile.toml" && kill -HUP "$pid" || return 1
    rf_wait "reload failed, nothing changed: .*not a regular file" 1 && curl_ok "$P_RF" "$W/ec.crt" || return 1
    rm "$W/rfile.toml" && mkfifo "$W/rfile.toml" && kill -HUP "$pid" || return 1
    rf_wait "reload failed, nothing changed: .*not a regular file" 2 && curl_ok "$P_RF" "$W/ec.crt" || return 1
    rm "$W/rfile.toml" && mv "$W/rfile.toml.away" "$W/rfile.toml" && kill -HUP "$pid" || return 1
    rf_wait "reloaded:" 1 && curl_ok "$P_RF" "$W/ec.crt" || return 1
    "$REL/tlsproxycfg" --config "$W/rfile.toml" delete 127.0.0.1 "$P_RF" >/dev/null || return 1
    rf_wait "reloaded: 0 started, 0 updated, 1 stopped" 1 && wait_port "$P_RF" down || return 1
    [ -f "$W/rfile.toml" ] && ! grep -q '^\[\[instance' "$W/rfile.toml" || { echo "    delete left no file, or an instance in it"; return 1; }
    grep "reload" "$W/rfile.log" | sed 's/^/    /'
    rm "$W/rfile.toml" && ln -s /dev/zero "$W/rfile.toml" && kill -HUP "$pid" || return 1
    sleep 0.5
    sigterm_ok rfile
}
check "SIGHUP with the instance file missing, /dev/zero or a FIFO: the reload fails and the instance keeps serving; SIGTERM still stops the daemon; delete of the last instance stops it" \
    reload_unreadable_ok

# --- the accelerator provider behind the proxy ------------------------------------------------
# A daemon of its own whose libopencf.so has libopencf_accel.so beside it (the built-in default
# then puts the accelerator first), serving the token's RSA-2048 and P-256 keys, with its own
# statistics directory. OPENCF_ACCEL_BATCH=1 sends every RSA signature to the engine (a lone
# request runs a pass of its own), so the clients below verify signatures the engine made; the
# accelerator signs P-256 in ordinary sessions with OpenSSL (docs/ACCEL.md). Again with
# OPENCF_ACCEL_FAULT=engine-error: every RSA engine result is corrupted, the accelerator catches
# it and answers an error, and the framework signs with the software token instead.
ACCEL_ENGINES=1
if [ ! -e "$REL/libopencf_accel.so" ]; then
    ACCEL_ENGINES=
elif ! grep -qw avx512ifma /proc/cpuinfo || [[ ",${OPENCF_ACCEL_DISABLE:-}," == *,ifma,* ]]; then
    ACCEL_ENGINES=0
fi
accel_daemon() { # STEM FAULT: the daemon on P_AR (RSA) and P_AE (EC), its pid in W/STEM.pid
    local stem=$1 fault=$2
    mkdir -p "$W/lib-$stem" && mkdir -m 700 "$W/stat-$stem" || return 1
    cp "$W/lib/libopencf.so" "$W/lib/libopencf_softtoken.so" "$REL/libopencf_accel.so" "$W/lib-$stem/" || return 1
    {
        printf 'module = "%s"\n' "$W/lib-$stem/libopencf.so"
        instance_toml "$P_AR" rsa
        instance_toml "$P_AE" ec
    } > "$W/$stem.toml"
    OPENCF_STAT_DIR="$W/stat-$stem" OPENCF_ACCEL_BATCH=1 OPENCF_ACCEL_FAULT="$fault" \
        start_daemon "$stem" "$P_AR" "$P_AE"
}
accel_handshakes_ok() { # four handshakes, each signature checked by the client
    curl_ok "$P_AR" "$W/rsa.crt" --tlsv1.3 && curl_ok "$P_AR" "$W/rsa.crt" --tls-max 1.2 \
        && curl_ok "$P_AE" "$W/ec.crt" --tlsv1.3 && curl_ok "$P_AE" "$W/ec.crt" --tls-max 1.2
}
daemon_stat_ok() { # STEM, then "name>=N" or "name=N" conditions on W/stat-STEM's mechanisms and counters
    local stem=$1; shift
    "$REL/cryptoadm" stat --dir "$W/stat-$stem" --json > "$W/stat-$stem.json" || return 1
    python3 - "$W/stat-$stem.json" "$@" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1]))
v = {}
for x in d["mechanisms"]:
    for field in ("ops", "fallbacks"):
        key = f'{x["provider"]}.{x["mechanism"]}.{field}'
        v[key] = v.get(key, 0) + x[field]
for x in d["counters"]:
    v[f'{x["component"]}.{x["name"]}'] = x["value"]
print("    " + ", ".join(f"{k}={n}" for k, n in sorted(v.items())
                          if k.startswith(("accel.", "softtoken.", "faulty.", "tlsproxy.sig", "tlsproxy.watch")) and n))
ok = True
for cond in sys.argv[2:]:
    name, op, want = re.fullmatch(r"([\w.]+)(>=|=)(\d+)", cond).groups()
    got = v.get(name, 0)
    if not (got >= int(want) if op == ">=" else got == int(want)):
        print(f"    {name} = {got}, wanted {op} {want}")
        ok = False
sys.exit(0 if ok else 1)
PY
}
if [ -z "$ACCEL_ENGINES" ]; then
    echo "SKIP: the accelerator behind the proxy: $REL/libopencf_accel.so not built"
else
    check "the accelerator behind the proxy (OPENCF_ACCEL_BATCH=1): daemon listening" accel_daemon accel ""
    check "accelerator: curl TLS 1.3 and 1.2 with the RSA-2048 and P-256 keys" accel_handshakes_ok
    if [ "$ACCEL_ENGINES" = 1 ]; then
        check "accelerator: every signature made there, the RSA ones by its engine (cryptoadm stat)" \
            daemon_stat_ok accel "accel.CKM_SHA256_RSA_PKCS_PSS.ops>=2" "accel.CKM_ECDSA.ops>=2" \
            "accel.rsa_passes>=2" "accel.rsa_direct=0" "softtoken.CKM_SHA256_RSA_PKCS_PSS.ops=0" \
            "softtoken.CKM_ECDSA.ops=0"
    else
        echo "SKIP: the accelerator's RSA engine: this CPU has no AVX-512 IFMA (or OPENCF_ACCEL_DISABLE=ifma); only the handshakes are checked"
    fi
    check "accelerator: SIGTERM stops that daemon" sigterm_ok accel "$P_AR" "$P_AE"
    check "the accelerator with corrupted engine results (OPENCF_ACCEL_FAULT=engine-error): daemon listening" \
        accel_daemon faulty engine-error
    check "corrupted engine results: curl TLS 1.3 and 1.2 with both keys still succeeds" accel_handshakes_ok
    if [ "$ACCEL_ENGINES" = 1 ]; then
        check "corrupted RSA engine results: caught, and the software token signed instead (cryptoadm stat)" \
            daemon_stat_ok faulty "accel.rsa_faults>=2" "accel.CKM_SHA256_RSA_PKCS_PSS.fallbacks>=2" \
            "softtoken.CKM_SHA256_RSA_PKCS_PSS.ops>=2" "accel.CKM_ECDSA.ops>=2"
    fi
    check "corrupted engine results: SIGTERM stops that daemon" sigterm_ok faulty "$P_AR" "$P_AE"
fi

# --- slow tokens ------------------------------------------------------------------------------
# Daemons of their own with two runtime threads (--threads 2) and max_offloaded_signatures = 4,
# whose libopencf.so has one provider: the test-only faulty module (libopencf_faulty.so)
# wrapping the software token, in `slow:MS` mode, so that each signature takes SLOW_MS, as
# behind a network or a busy hardware module.
# - "slow" is slow from the start. Its first signature runs on a runtime thread (nothing is
#   known of the token yet); after it the token counts as slow. Six handshakes at once: four
#   signatures run side by side off the runtime threads (block_in_place:
#   signatures_offloaded), the other two are refused at once (signatures_refused: those
#   clients get an alert rather than wait for a place), and meanwhile a resumed handshake (no
#   signature) is served at once. With the signatures on the runtime threads, the two threads
#   would be held for three rounds of SLOW_MS, and every other connection with them.
# - "stuck" is fast, then switched to slow (OPENCF_FAULTY_SWITCH), as a token that stops
#   answering. The first signature after the switch holds a runtime thread (the watchdog wakes
#   the other one: watchdog_wakeups); the next, begun while it runs, is known slow and runs off
#   the runtime threads; a resumed handshake is served at once meanwhile. Then SIGTERM while a
#   signature waits 30 s: the daemon does not wait for it.
SLOW_MS=3000
faulty_daemon() { # STEM PORT MODE: MODE goes to OPENCF_FAULTY_MODE (empty: the file W/STEM.switch)
    local stem=$1 port=$2 mode=$3
    mkdir -m 700 "$W/stat-$stem" && : > "$W/$stem.switch" || return 1
    cat > "$W/$stem-opencf.toml" <<TOML
[metaslot]
enabled = true
keystore = "OpenCF Faulty"

[[provider]]
name = "faulty"
module = "$REL/libopencf_faulty.so"
TOML
    { printf 'module = "%s"\nmax_offloaded_signatures = 4\n' "$MOD"; instance_toml "$port" ec; } > "$W/$stem.toml"
    OPENCF_CONF="$W/$stem-opencf.toml" OPENCF_FAULTY_INNER="$W/lib/libopencf_softtoken.so" \
        OPENCF_FAULTY_MODE="$mode" OPENCF_FAULTY_SWITCH="$W/$stem.switch" OPENCF_STAT_DIR="$W/stat-$stem" \
        THREADS=2 start_daemon "$stem" "$port"
}
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }
resumed_at_once() { # PORT SESSION: resumed, and served within 1.5 s (s_client holds on 0.5 s)
    local r0 out took
    r0=$(date +%s%N)
    out=$(s_client "$1" -tls1_3 -CAfile "$W/ec.crt" -sess_in "$2")
    took=$(ms_since "$r0")
    echo "    a resumed handshake meanwhile, and its close: $took ms"
    grep -q "^Reused," <<<"$out" || { echo "    not resumed"; return 1; }
    [ "$took" -lt 1500 ] || { echo "    held up by the signatures"; return 1; }
}
slow_first_ok() { # one handshake (on a runtime thread), its session kept
    rm -f "$W/sess-slow"
    # stdin held open past the signature, so that s_client reads the session ticket.
    HOLD=$((SLOW_MS / 1000 + 2)) S_TIMEOUT=20 s_client "$P_SL" -tls1_3 -CAfile "$W/ec.crt" \
        -sess_out "$W/sess-slow" | grep -q "^New," \
        && daemon_stat_ok slow "faulty.CKM_ECDSA.ops=1" "tlsproxy.signatures_offloaded=0"
}
slow_parallel_ok() {
    local t0 i code ms pids=() served=0 refused=0 served_ms=0 refused_ms=0 rc=0
    t0=$(date +%s%N)
    for i in 1 2 3 4 5 6; do
        (curl_ok "$P_SL" "$W/ec.crt" --tlsv1.3 > "$W/slow-curl$i.log" 2>&1
            echo "$? $(ms_since "$t0")" > "$W/slow-curl$i.rc") &
        pids+=($!)
    done
    sleep 0.5
    resumed_at_once "$P_SL" "$W/sess-slow" || rc=1
    wait "${pids[@]}"
    for i in 1 2 3 4 5 6; do
        read -r code ms < "$W/slow-curl$i.rc" || return 1
        if [ "$code" = 0 ]; then
            served=$((served + 1)); [ "$ms" -gt "$served_ms" ] && served_ms=$ms
        else
            refused=$((refused + 1)); [ "$ms" -gt "$refused_ms" ] && refused_ms=$ms
        fi
    done
    echo "    six full handshakes at once, each signature $SLOW_MS ms: $served served (the last after $served_ms ms), $refused refused (the last after $refused_ms ms)"
    [ "$served" = 4 ] && [ "$refused" = 2 ] || rc=1
    [ "$served_ms" -lt $((SLOW_MS * 2 - 500)) ] || { echo "    the signatures did not run side by side"; rc=1; }
    [ "$refused_ms" -lt 1500 ] || { echo "    the refusals were not at once"; rc=1; }
    daemon_stat_ok slow "faulty.CKM_ECDSA.ops=5" "tlsproxy.signatures_offloaded=4" \
        "tlsproxy.signatures_refused=2" || rc=1
    return $rc
}
stuck_ok() {
    local i a b rc=0
    for i in 1 2 3; do curl_ok "$P_ST" "$W/ec.crt" --tlsv1.3 || return 1; done
    rm -f "$W/sess-stuck"
    s_client "$P_ST" -tls1_3 -CAfile "$W/ec.crt" -sess_out "$W/sess-stuck" | grep -q "^New," || return 1
    echo "slow:$SLOW_MS" > "$W/stuck.switch"
    curl_ok "$P_ST" "$W/ec.crt" --tlsv1.3 & a=$!
    sleep 0.5
    curl_ok "$P_ST" "$W/ec.crt" --tlsv1.3 & b=$!
    sleep 0.5
    resumed_at_once "$P_ST" "$W/sess-stuck" || rc=1
    wait "$a" || rc=1
    wait "$b" || rc=1
    daemon_stat_ok stuck "faulty.CKM_ECDSA.ops=6" "tlsproxy.signatures_offloaded=1" \
        "tlsproxy.watchdog_wakeups>=1" || rc=1
    return $rc
}
stuck_stop_ok() { # SIGTERM while a signature waits for a token that does not answer for 30 s
    local c t0 took
    echo "slow:30000" > "$W/stuck.switch"
    curl -s -o /dev/null --max-time 40 --cacert "$W/ec.crt" --resolve "localhost:$P_ST:127.0.0.1" \
        "https://localhost:$P_ST/" & c=$!
    sleep 0.5
    t0=$(date +%s%N)
    sigterm_ok stuck "$P_ST" || return 1
    took=$(ms_since "$t0")
    echo "    stopped $took ms after SIGTERM, a signature still waiting"
    wait "$c" && { echo "    the waiting handshake completed"; return 1; }
    [ "$took" -lt 5000 ]
}
if [ -e "$REL/libopencf_faulty.so" ]; then
    check "a slow token (every signature ${SLOW_MS} ms, 2 runtime threads): daemon listening" \
        faulty_daemon slow "$P_SL" "slow:$SLOW_MS"
    check "slow token: the first handshake signs on a runtime thread (signatures_offloaded 0)" slow_first_ok
    check "slow token: six handshakes at once: four sign side by side, two refused at once (max_offloaded_signatures 4), a resumed one served meanwhile" \
        slow_parallel_ok
    check "slow token: SIGTERM stops that daemon" sigterm_ok slow "$P_SL"
    check "a token that stops answering: daemon listening" faulty_daemon stuck "$P_ST" ""
    check "a token that stops answering: the next signature runs off the runtime threads, a resumed handshake is served meanwhile" \
        stuck_ok
    check "a token that stops answering: SIGTERM stops that daemon within 5 s, a signature still waiting" \
        stuck_stop_ok
else
    fail "the slow-token daemons: $REL/libopencf_faulty.so not built (cargo build --release --workspace)"
fi

# --- counters ---------------------------------------------------------------------------------
stat_ok() {
    "$REL/cryptoadm" stat --json > "$W/stat.json" || return 1
    "$REL/cryptoadm" stat | sed 's/^/    /'
    python3 - "$W/stat.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
c = {x["name"]: x["value"] for x in d["counters"] if x["component"] == "tlsproxy"}
m = {}
for x in d["mechanisms"]:
    if x["provider"] == "softtoken":
        m[x["mechanism"]] = m.get(x["mechanism"], 0) + x["ops"]
print("    tlsproxy:", ", ".join(f"{k}={v}" for k, v in sorted(c.items())))
print("    softtoken signatures:", ", ".join(f"{k}={v}" for k, v in sorted(m.items())))
ok = (c.get("handshakes_full", 0) >= 10 and c.get("handshakes_resumed", 0) >= 3
      and c.get("fallbacks", 0) >= 1 and c.get("malformed", 0) >= 1
      and c.get("handshake_timeouts", 0) >= 1 and c.get("bytes_in", 0) > 0 and c.get("bytes_out", 0) > 0
      and m.get("CKM_ECDSA", 0) >= 4 and m.get("CKM_SHA256_RSA_PKCS_PSS", 0) + m.get("CKM_RSA_PKCS_PSS", 0) >= 2
      and m.get("CKM_SHA256_RSA_PKCS", 0) >= 1 and m.get("CKM_EDDSA", 0) >= 3)
sys.exit(0 if ok else 1)
PY
}
check "cryptoadm stat --json: proxy handshake counters and softtoken signatures" stat_ok

stop_ok() { "${CFG[@]}" stop >/dev/null && wait_port "$P_RSA" down && [ ! -e "$W/tlsproxy.pid" ]; }
check "tlsproxycfg stop: daemon gone, pid file removed" stop_ok

# A pid file left by a killed daemon may name a pid the system gave to another process since:
# tlsproxycfg takes only an opencf-tlsproxy process, so no other process is signalled.
stale_pid_ok() {
    sleep 300 & local other=$!
    PIDS+=("$other")
    echo "$other" > "$W/tlsproxy.pid"
    "${CFG[@]}" list | grep -q "daemon: not running" || return 1
    "${CFG[@]}" stop >/dev/null 2>&1
    kill -0 "$other" 2>/dev/null || return 1
    rm -f "$W/tlsproxy.pid"
}
check "a stale pid file that names another process: not running, and stop signals nothing" stale_pid_ok
# An instance file whose pid file or log would be itself (x.pid, x.log) is refused before
# anything is started or written.
same_file_ok() {
    local f out
    for f in "$W/inst.pid" "$W/inst.log"; do
        printf 'drain_timeout = 5\n' > "$f"
        out=$(timeout 20 "$REL/tlsproxycfg" --config "$f" start 2>&1) && return 1
        grep -q "would be the instance file itself" <<<"$out" || { echo "$out"; return 1; }
        [ "$(cat "$f")" = "drain_timeout = 5" ] || return 1
    done
    out=$(timeout 10 "$REL/opencf-tlsproxy" --config "$CONF" --pid-file "$CONF" 2>&1) && return 1
    grep -q "would be the instance file itself" <<<"$out" || { echo "$out"; return 1; }
}
check "a pid file or log that would be the instance file: refused, the file unchanged" same_file_ok

echo "tlsproxy: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
