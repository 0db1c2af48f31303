#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2317  # functions run through check/check_out
# nginx (Debian nginx) serving HTTPS on 127.0.0.1 with `ssl_certificate_key engine:pkcs11:…`:
# the private key is an EC P-256 key made sensitive and non-extractable in the OpenCF
# keystore through slot 0; OpenSSL reaches it through the libp11 pkcs11 engine (OPENSSL_CONF).
# nginx runs in the foreground with a temporary prefix, first as one process
# (master_process off), then as master and worker (the worker signs after fork). curl
# --cacert fetches the page over TLS 1.3 and 1.2; cryptoadm stat shows the handshake signatures
# counted by OpenCF.
set -uo pipefail

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
integration_init nginx

NGINX="$(command -v nginx || echo /usr/sbin/nginx)"
ENGINE_SO="$(find_pkcs11_engine)"
if [ ! -x "$NGINX" ] || [ -z "$ENGINE_SO" ] || ! command -v curl >/dev/null 2>&1; then
    skip "nginx" "nginx, curl or the OpenSSL pkcs11 engine is missing (Debian: nginx curl libengine-pkcs11-openssl)"
    fail "nginx, curl and the pkcs11 engine are installed"
    finish
fi

# nginx calls ENGINE_load_private_key without ENGINE_init: the engine must be initialized
# when the configuration is read (init = 1).
write_openssl_conf "$WORK/openssl.cnf" "$ENGINE_SO"
sed -i 's/^init = 0$/init = 1/' "$WORK/openssl.cnf"
export OPENSSL_CONF="$WORK/openssl.cnf"
KEY_URI="pkcs11:token=OpenCF%20Metaslot;object=web-ec;type=private"

# A sensitive, non-extractable key pair: pktool (OpenCF's own tool) when it is built, else
# python-pkcs11 from the test venv. pkcs11-tool 0.23 cannot ask for CKA_EXTRACTABLE false.
gen_web_key() {
    if [ -x "$RELEASE/pktool" ]; then
        "$RELEASE/pktool" --module "$LIB" --pin "$PIN" genkeypair --keytype ec --curve P-256 --label web-ec --id 41
    elif [ -x "${VENV:-$ROOT/.venv}/bin/python" ]; then
        "${VENV:-$ROOT/.venv}/bin/python" - "$LIB" "$PIN" <<'PY'
import sys, pkcs11
from pkcs11 import Attribute, KeyType
from pkcs11.util.ec import encode_named_curve_parameters
lib = pkcs11.lib(sys.argv[1])
token = lib.get_token(token_label="OpenCF Metaslot")
with token.open(user_pin=sys.argv[2], rw=True) as s:
    params = s.create_domain_parameters(KeyType.EC, {
        Attribute.EC_PARAMS: encode_named_curve_parameters("secp256r1")}, local=True)
    params.generate_keypair(store=True, label="web-ec", id=b"\x41", private_template={
        Attribute.SENSITIVE: True, Attribute.EXTRACTABLE: False})
PY
    else
        echo "neither target/release/pktool nor the python venv is there" >&2
        return 1
    fi
}

token_init
check "EC P-256 key pair, sensitive and non-extractable, through slot 0" gen_web_key
check_out "the key is sensitive and never extractable" 'Access: +sensitive, always sensitive, never extractable' \
    p11_login --list-objects --type privkey --label web-ec
check "self-signed certificate for the token key (openssl req, pkcs11 engine)" \
    openssl req -new -x509 -engine pkcs11 -keyform engine -key "$KEY_URI;pin-value=$PIN" -subj /CN=localhost \
    -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -days 2 -out "$WORK/cert.pem"

mkdir -p "$WORK/html" "$WORK/logs" "$WORK/tmp"
echo "hello from a key in OpenCF" >"$WORK/html/index.html"

write_nginx_conf() { # master_process on|off, port
    local user_line=""
    # As root, a master process would drop the worker to "nobody", which cannot open the keystore.
    if [ "$1" = on ] && [ "$(id -u)" -eq 0 ]; then user_line="user root root;"; fi
    cat >"$WORK/nginx.conf" <<EOF
daemon off;
master_process $1;
$user_line
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/logs/error.log info;
env OPENCF_SOFTTOKEN_DIR;
env OPENCF_STAT_DIR;
env XDG_CONFIG_HOME;
env OPENSSL_CONF;
events { worker_connections 16; }
http {
    access_log $WORK/logs/access.log;
    client_body_temp_path $WORK/tmp/body;
    proxy_temp_path $WORK/tmp/proxy;
    fastcgi_temp_path $WORK/tmp/fastcgi;
    uwsgi_temp_path $WORK/tmp/uwsgi;
    scgi_temp_path $WORK/tmp/scgi;
    server {
        listen 127.0.0.1:$2 ssl;
        server_name localhost;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_certificate $WORK/cert.pem;
        ssl_certificate_key "engine:pkcs11:$KEY_URI;pin-value=$PIN";
        root $WORK/html;
    }
}
EOF
}

fetch() { # port, curl options...
    local port="$1"; shift
    curl -sS --max-time 15 --cacert "$WORK/cert.pem" --resolve "localhost:$port:127.0.0.1" "$@" \
        "https://localhost:$port/"
}

serve_and_fetch() { # master_process on|off, description
    local port
    port="$(free_port)"
    write_nginx_conf "$1" "$port"
    check "nginx -t accepts the engine key ($2)" "$NGINX" -t -p "$WORK" -c "$WORK/nginx.conf" -e "$WORK/logs/error.log"
    stat_reset
    SERVER_TIMEOUT=60 bg "nginx-$1" "$NGINX" -p "$WORK" -c "$WORK/nginx.conf" -e "$WORK/logs/error.log"
    local pid="$BG_PID"
    if ! wait_port "$port" 20; then
        fail "nginx listens on 127.0.0.1:$port ($2)" "$WORK/logs/error.log"
        kill "$pid" 2>/dev/null
        return
    fi
    check_out "curl --cacert gets the page over TLS 1.3 ($2)" 'hello from a key in OpenCF' fetch "$port" --tlsv1.3
    check_out "curl --cacert gets the page over TLS 1.2 ($2)" 'hello from a key in OpenCF' fetch "$port" \
        --tlsv1.2 --tls-max 1.2
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    check_stat "cryptoadm stat: OpenCF signed both handshakes ($2)" 'CKM_ECDSA' 2
    if grep -E '\[(crit|alert|emerg)\]' "$WORK/logs/error.log" >"$WORK/last.log"; then
        fail "nginx error log is clean ($2)" "$WORK/last.log"
    fi
    : >"$WORK/logs/error.log"
}

serve_and_fetch off "one process"
serve_and_fetch on "master and worker"

finish
