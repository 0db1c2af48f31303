#!/usr/bin/env bash
# make bench-tls: TLS handshakes per second and latency, opencf-tlsproxy against nginx.
#
# Same machine, same client (tls-bench, tokio + rustls), same certificates and keys (a test CA,
# an ECDSA P-256 and an RSA-2048 leaf for localhost), same application behind both (tls-bench
# backend, a trivial HTTP server on 127.0.0.1). nginx reads the keys from PEM files;
# opencf-tlsproxy has them in the OpenCF software token (imported by tlsproxycfg: sensitive,
# not extractable), every handshake signature a C_Sign through libopencf.so. Each run: one
# HTTP request per connection, (a) full handshakes (no session cache in the client), (b) with
# resumption (the client's session cache: TLS 1.3 tickets). TLS 1.3, X25519.
#
# Environment: BENCH_TLS_SECONDS (measured seconds per run, default 5), BENCH_TLS_CONCURRENCY
# (clients, default 16), BENCH_TLS_THREADS (client threads, default 2), BENCH_TLS_WORKERS
# (proxy worker threads and nginx worker processes, default: the number of CPUs),
# BENCH_TLS_KEYS (default "ec rsa") and BENCH_TLS_MODES (default "full resume") select the rows,
# BENCH_TLS_PROXY_THREADS (the proxy's runtime threads, default as computed from the above),
# BENCH_TLS_PROXY_PROCS (opencf-tlsproxy worker processes, `--workers`, default 1; with more
# than one, each runs BENCH_TLS_WORKERS / BENCH_TLS_PROXY_PROCS threads, at least one),
# BENCH_TLS_ACCEL=1 (the accelerator provider, libopencf_accel.so, beside the proxy's private
# libopencf.so: the built-in default then routes to it first; `cryptoadm stat` of the run is
# printed at the end to show where the signatures ran).
# Every server listens on 127.0.0.1 only; every wait is bounded; a trap kills what it started.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
REL=$ROOT/target/release
SECONDS_PER_RUN=${BENCH_TLS_SECONDS:-5}
CONC=${BENCH_TLS_CONCURRENCY:-16}
THREADS=${BENCH_TLS_THREADS:-2}
WORKERS=${BENCH_TLS_WORKERS:-$(nproc)}
PROXY_PROCS=${BENCH_TLS_PROXY_PROCS:-1}
PROXY_THREADS=$WORKERS
if [ "$PROXY_PROCS" -gt 1 ]; then
    PROXY_THREADS=$((WORKERS / PROXY_PROCS))
    [ "$PROXY_THREADS" -ge 1 ] || PROXY_THREADS=1
fi
PROXY_THREADS=${BENCH_TLS_PROXY_THREADS:-$PROXY_THREADS}
KEYS=${BENCH_TLS_KEYS:-ec rsa}
MODES=${BENCH_TLS_MODES:-full resume}
for k in $KEYS; do case $k in ec|rsa) ;; *) echo "BENCH_TLS_KEYS: $k is not ec or rsa"; exit 1;; esac; done
for m in $MODES; do case $m in full|resume) ;; *) echo "BENCH_TLS_MODES: $m is not full or resume"; exit 1;; esac; done

for b in opencf-tlsproxy tlsproxycfg tls-bench libopencf.so libopencf_softtoken.so; do
    [ -e "$REL/$b" ] || { echo "missing $REL/$b (cargo build --release -p opencf-tlsproxy -p opencf -p opencf-softtoken)"; exit 1; }
done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
for t in "$NGINX" openssl pkcs11-tool; do
    command -v "$t" >/dev/null || { echo "missing $t"; exit 1; }
done

. "$ROOT/tests/tlsproxy/common.sh"
tlsproxy_workdir opencf-bench-tls
mkdir -p "$W/nginx/logs"
if [ "${BENCH_TLS_ACCEL:-0}" = 1 ]; then
    [ -e "$REL/libopencf_accel.so" ] || { echo "missing $REL/libopencf_accel.so (cargo build --release -p opencf-accel)"; exit 1; }
    cp "$REL/libopencf_accel.so" "$W/lib/"
fi
pick_ports 5
BACK=$BASE; PX_EC=$((BASE + 1)); PX_RSA=$((BASE + 2)); NG_EC=$((BASE + 3)); NG_RSA=$((BASE + 4))

# --- certificates: a CA, two leaves for localhost ---------------------------------------------
(
    cd "$W"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.crt \
        -subj "/CN=bench CA" -days 2
    ext=$'subjectAltName=DNS:localhost\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth'
    printf '%s\n' "$ext" > leaf.ext
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ec.key -out ec.csr -subj /CN=localhost
    openssl req -newkey rsa:2048 -nodes -keyout rsa.key -out rsa.csr -subj /CN=localhost
    for k in ec rsa; do
        openssl x509 -req -in $k.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile leaf.ext -out $k.crt
        cat $k.key $k.crt > $k.pem
    done
) >/dev/null 2>&1 || { echo "openssl could not make the certificates"; exit 1; }

# --- the application, the proxy, nginx -----------------------------------------------------------
"$REL/tls-bench" backend --listen "127.0.0.1:$BACK" &
PIDS+=($!)
wait_port "$BACK" || { echo "backend did not start"; exit 1; }

pkcs11-tool --module "$MOD" --token-label 'OpenCF Softtoken' --login --pin changeme --change-pin --new-pin 'bench pin' >/dev/null 2>&1 \
    || { echo "cannot set the softtoken PIN"; exit 1; }
printf 'bench pin\n' > "$W/pin"
printf 'module = "%s"\n' "$MOD" > "$CONF"
"${CFG[@]}" create -f pem -i "$W/ec.pem" -p "$W/pin" -x "$BACK" -C bench-ec 127.0.0.1 "$PX_EC" >"$W/c1.log" 2>&1 \
    && "${CFG[@]}" create -f pem -i "$W/rsa.pem" -p "$W/pin" -x "$BACK" -C bench-rsa 127.0.0.1 "$PX_RSA" >"$W/c2.log" 2>&1 \
    || { cat "$W"/c*.log; echo "tlsproxycfg create failed"; exit 1; }
"$REL/opencf-tlsproxy" --config "$CONF" --pid-file "$W/tlsproxy.pid" --threads "$PROXY_THREADS" \
    --workers "$PROXY_PROCS" >"$W/tlsproxy.log" 2>&1 &
PIDS+=($!)
PROXY_PID=$!
wait_port "$PX_EC" && wait_port "$PX_RSA" || { cat "$W/tlsproxy.log"; echo "opencf-tlsproxy did not start"; exit 1; }
# With worker processes, their CPU time counts too (the supervisor's is negligible).
if [ "$PROXY_PROCS" -gt 1 ]; then
    for _ in $(seq 100); do
        [ "$(pgrep -c -P "$PROXY_PID")" -ge "$PROXY_PROCS" ] && break
        sleep 0.1
    done
    sleep 1   # the last worker binds its listeners after it starts
    PROXY_PID=$(echo "$PROXY_PID" $(pgrep -P "$PROXY_PID") | tr ' ' ,)
fi

cat > "$W/nginx/nginx.conf" <<NGINX
daemon off;
master_process on;
worker_processes $WORKERS;
user $(id -un) $(id -gn);
pid $W/nginx/nginx.pid;
error_log $W/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $W/nginx/body;
    proxy_temp_path $W/nginx/proxy;
    fastcgi_temp_path $W/nginx/fastcgi;
    uwsgi_temp_path $W/nginx/uwsgi;
    scgi_temp_path $W/nginx/scgi;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:SSL:10m;
    ssl_session_tickets on;
    server {
        listen 127.0.0.1:$NG_EC ssl;
        ssl_certificate $W/ec.crt;
        ssl_certificate_key $W/ec.key;
        location / { proxy_pass http://127.0.0.1:$BACK; }
    }
    server {
        listen 127.0.0.1:$NG_RSA ssl;
        ssl_certificate $W/rsa.crt;
        ssl_certificate_key $W/rsa.key;
        location / { proxy_pass http://127.0.0.1:$BACK; }
    }
}
NGINX
"$NGINX" -p "$W/nginx" -c "$W/nginx/nginx.conf" -e "$W/nginx/logs/error.log" &
PIDS+=($!)
NGINX_PID=$!
wait_port "$NG_EC" && wait_port "$NG_RSA" || { cat "$W/nginx/logs/error.log"; echo "nginx did not start"; exit 1; }
NGINX_PIDS=$(echo "$NGINX_PID" $(pgrep -P "$NGINX_PID") | tr ' ' ,)

# --- runs -----------------------------------------------------------------------------------------
echo "# $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); client and servers share them"
echo "# $("$NGINX" -v 2>&1); opencf-tlsproxy with the keys in the OpenCF softtoken (C_Sign through libopencf.so)"
echo "# tls-bench run: $CONC clients on $THREADS threads, ${SECONDS_PER_RUN} s measured after 1 s of warm-up, TLS 1.3, one HTTP request per connection"
echo "# servers: opencf-tlsproxy $PROXY_PROCS process(es) of $PROXY_THREADS thread(s) / $WORKERS nginx worker processes; hs = TCP connect to handshake done, req = to the end of the answer"
echo "# srv CPU/hs: the server's processes' CPU time (user + system; nginx: master and workers) over the measured seconds / handshakes; cli: the client's"
FAILED=0
header=--header
for key in $KEYS; do
    for mode in $MODES; do
        for server in nginx opencf-tlsproxy; do
            if [ $server = nginx ]; then port=$([ $key = ec ] && echo "$NG_EC" || echo "$NG_RSA"); pids=$NGINX_PIDS
            else port=$([ $key = ec ] && echo "$PX_EC" || echo "$PX_RSA"); pids=$PROXY_PID; fi
            label=$([ $key = ec ] && echo "P-256" || echo "RSA-2048")
            resume=(); [ $mode = resume ] && resume=(--resume)
            timeout $((SECONDS_PER_RUN + 30)) "$REL/tls-bench" run --connect "127.0.0.1:$port" --ca "$W/ca.crt" \
                -c "$CONC" -d "$SECONDS_PER_RUN" --threads "$THREADS" "${resume[@]}" \
                --server "$server" --key "$label" --cpu-pids "$pids" $header || FAILED=1
            header=
        done
    done
done
if [ "${BENCH_TLS_ACCEL:-0}" = 1 ]; then
    echo "# cryptoadm stat (signatures by provider and mechanism):"
    "$REL/cryptoadm" stat --dir "$OPENCF_STAT_DIR" 2>&1 | grep -vE "CKM_(AES|SHA_1|SHA256 |SHA384 |SHA512 )" | head -30 || true
fi
[ "$FAILED" = 0 ] || { echo "some runs failed"; exit 1; }
