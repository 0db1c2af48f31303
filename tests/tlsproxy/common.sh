# Sourced by tests/tlsproxy/run.sh and scripts/bench-tls.sh (REL: target/release).
#
# tlsproxy_workdir NAME   a temporary directory W, the list PIDS and a trap that kills the daemon
#                         (W/tlsproxy.pid) and every process in PIDS, then removes W; private
#                         softtoken, configuration and statistics directories; a private copy of
#                         libopencf.so and the software token (MOD), the instance file CONF and
#                         CFG, the tlsproxycfg command line for it
# pick_ports N            BASE: N consecutive free ports below the ephemeral range
# port_free PORT, wait_port PORT [up|down]

tlsproxy_workdir() {
    W=$(mktemp -d "/tmp/$1.XXXXXX")
    PIDS=()
    trap tlsproxy_cleanup EXIT INT TERM
    unset OPENCF_CONF
    export OPENCF_SOFTTOKEN_DIR=$W/softtoken XDG_CONFIG_HOME=$W/xdg OPENCF_STAT_DIR=$W/stat
    mkdir -p "$OPENCF_SOFTTOKEN_DIR" "$XDG_CONFIG_HOME" "$W/lib"
    mkdir -m 700 "$OPENCF_STAT_DIR"
    # A private copy of the framework and the software token: the zero-configuration default
    # loads every provider found beside libopencf.so, and only these two are wanted here.
    cp "$REL/libopencf.so" "$REL/libopencf_softtoken.so" "$W/lib/"
    MOD=$W/lib/libopencf.so
    CONF=$W/tlsproxy.toml
    CFG=("$REL/tlsproxycfg" --config "$CONF")
}

tlsproxy_cleanup() {
    [ -f "$W/tlsproxy.pid" ] && kill "$(cat "$W/tlsproxy.pid")" 2>/dev/null
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$W"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() { # PORT [up|down]: bounded wait (10 s) for a listener to appear or go
    local want=${2:-up}
    for _ in $(seq 100); do
        if port_free "$1"; then [ "$want" = down ] && return 0; else [ "$want" = up ] && return 0; fi
        sleep 0.1
    done
    return 1
}

# Free ports below the ephemeral range (so that no outgoing connection can hold one): a random
# base, moved on until N consecutive ports are free.
pick_ports() {
    local eph_low ok i
    eph_low=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    [ "$eph_low" -gt 12000 ] || eph_low=65000
    BASE=$((10000 + RANDOM % (eph_low - 10300)))
    for _ in $(seq 20); do
        ok=1
        for ((i = 0; i < $1; i++)); do port_free $((BASE + i)) || { ok=0; break; }; done
        [ $ok = 1 ] && return 0
        BASE=$((BASE + 10))
    done
}
