#!/usr/bin/env bash
# cfspeed end to end (about 45 s): the default set on a fresh zero-config keystore in under a
# minute; three implementations side by side (the metaslot, native OpenSSL, SoftHSMv2);
# --json, --json-out, --chart, --multi, --break-even.
#
# cfspeed, libopencf.so and libopencf_softtoken.so are copied into a temporary directory, so
# that libopencf.so's built-in default configuration sees exactly the modules built for this
# test (it also loads any libopencf_accel.so found beside it) and cfspeed finds libopencf.so
# beside itself as a user's installation would.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
REL="$ROOT/target/release"
SOFTHSM="${SOFTHSM:-/usr/lib/softhsm/libsofthsm2.so}"
for f in cfspeed libopencf.so libopencf_softtoken.so; do
    [ -e "$REL/$f" ] || { echo "cfspeed test: $REL/$f missing: cargo build --release -p cfspeed -p opencf -p opencf-softtoken" >&2; exit 1; }
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/cfspeed-test.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/bin" "$WORK/softtoken" "$WORK/config" "$WORK/softhsm"
cp "$REL/cfspeed" "$REL/libopencf.so" "$REL/libopencf_softtoken.so" "$WORK/bin/"
CFSPEED="$WORK/bin/cfspeed"
export OPENCF_SOFTTOKEN_DIR="$WORK/softtoken" XDG_CONFIG_HOME="$WORK/config"
unset OPENCF_CONF CFSPEED_MODULE CFSPEED_PIN CFSPEED_VS_PIN
cd "$WORK"

PASSED=0
FAILED=0
ok() { PASSED=$((PASSED + 1)); echo "ok - $1"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL - $1" >&2; }
# expect NAME REGEX FILE: the file has a line matching REGEX.
expect() { if grep -Eq -- "$2" "$3"; then ok "$1"; else fail "$1: no line matching /$2/ in $3"; sed 's/^/    /' "$3" >&2; fi; }

# 1. The default set on a fresh keystore (PIN `changeme`, expired): under a minute, rows for
#    every benchmark of the set, ours and native.
start=$(date +%s.%N)
if "$CFSPEED" >default.out 2>default.err; then ok "cfspeed with no argument exits 0"; else fail "cfspeed with no argument failed"; cat default.err >&2; fi
secs=$(echo "$(date +%s.%N) - $start" | bc)
if [ "$(echo "$secs < 60" | bc)" = 1 ]; then ok "default set ran in ${secs%.*} s (< 60)"; else fail "default set took $secs s"; fi
for title in 'CKM_AES_GCM — 16 bytes' 'CKM_AES_GCM — 8192 bytes' 'CKM_SHA256 — 1024 bytes' 'CKM_SHA256_RSA_PKCS:2048' 'CKM_ECDSA:P-256'; do
    expect "default table: $title" "^$title\$" default.out
done
rows=$(grep -Ec '^  (ours|native) +1 +[0-9,]+ ' default.out || true)
if [ "$rows" -ge 10 ]; then ok "default table: $rows rows of ours and native"; else fail "default table has $rows rows"; fi
expect "default set runs on the metaslot" 'ours: .*libopencf.so .*slot 0, token "OpenCF Metaslot"' default.out
expect "expired PIN: runs unauthenticated and says so" 'no PIN given .*must be changed' default.out
expect "progress line on stderr" '^cfspeed: \[5/5\] CKM_ECDSA:P-256 done' default.err

# 2. Three implementations: the metaslot, native OpenSSL, SoftHSMv2.
if [ -e "$SOFTHSM" ] && command -v softhsm2-util >/dev/null; then
    printf 'directories.tokendir = %s\nobjectstore.backend = file\nlog.level = ERROR\n' "$WORK/softhsm" >softhsm2.conf
    export SOFTHSM2_CONF="$WORK/softhsm2.conf"
    softhsm2-util --init-token --free --label bench --pin 1234 --so-pin 5678 >/dev/null
    if "$CFSPEED" --native --vs-module "$SOFTHSM" CKM_AES_GCM CKM_SHA256_RSA_PKCS CKM_ECDSA \
        --seconds 0.2 --runs 1 --json-out vs.json --chart x.svg >vs.out 2>vs.err; then
        ok "--vs-module softhsm2 --native exits 0"
    else
        fail "--vs-module softhsm2 --native failed"; cat vs.err >&2
    fi
    for imp in ours native softhsm2; do
        n=$(grep -Ec "^  $imp +1 +[0-9,]+ " vs.out || true)
        if [ "$n" -ge 8 ]; then ok "$imp: $n rows"; else fail "$imp: $n rows"; fi
    done
    expect "ratios to native and softhsm2" '^  ratios, 1 thr: ours/native [0-9.]+ +ours/native-reuse [0-9.]+ +ours/softhsm2 [0-9.]+' vs.out
    expect "RSA ratios" '^  ratios, 1 thr: ours/native [0-9.]+ +ours/softhsm2 [0-9.]+$' vs.out

    # 3. --json-out: valid JSON with the table's numbers.
    if python3 -m json.tool vs.json >/dev/null; then ok "--json-out is valid JSON"; else fail "--json-out is not JSON"; fi
    if python3 - vs.out vs.json <<'EOF'; then ok "JSON numbers match the table"; else fail "JSON numbers differ from the table"; fi
import json, re, sys
table, doc = open(sys.argv[1]).read().splitlines(), json.load(open(sys.argv[2]))
rows = {}
title = None
for line in table:
    if line and not line.startswith((" ", "#")):
        title = line
    m = re.match(r"^  (\S+) +(\d+) +([\d,]+) +(\S+) +(\S+) +(\S+) +(\d+) +(\S+) +(\S+)", line)
    if m and title:
        rows[(title, m[1], int(m[2]))] = m
assert rows, "no rows in the table"
seen = 0
for r in doc["results"]:
    title = r["mechanism"] + (f" — {r['size']} bytes" if r["size"] is not None else "")
    m = rows[(title, r["implementation"], r["threads"])]
    assert int(m[3].replace(",", "")) == round(r["ops_per_s"]), (title, m[3], r["ops_per_s"])
    if r["mb_per_s"] is not None:
        assert abs(float(m[4]) - r["mb_per_s"]) < 0.006, (title, m[4], r["mb_per_s"])
    if r["p50_us"] is not None:
        assert abs(float(m[5]) - r["p50_us"]) < 0.051, (title, m[5], r["p50_us"])
    assert abs(float(m[8]) - r["cpu_user_percent"]) < 0.051
    seen += 1
assert seen == len(rows), (seen, len(rows))
EOF

    # 4. --chart: an SVG with a polyline and a legend entry per implementation, bars for RSA
    #    and ECDSA.
    if python3 -c 'import sys, xml.dom.minidom as m; m.parse(sys.argv[1])' x.svg; then ok "--chart writes well-formed SVG"; else fail "--chart SVG is not well-formed"; fi
    for imp in ours native native-reuse softhsm2; do
        expect "chart: polyline of $imp" "<polyline data-series=\"$imp\"" x.svg
        expect "chart: legend of $imp" ">$imp</text></g>" x.svg
    done
    expect "chart: ops/s bars for public-key rows" '<rect data-series="softhsm2"' x.svg
    expect "chart: log2 size axis" 'log2 scale' x.svg
else
    echo "skipped: SoftHSMv2 ($SOFTHSM, softhsm2-util) is not installed"
fi

# 5. --json on stdout parses.
if "$CFSPEED" CKM_SHA256 CKM_EDDSA --sizes 64 --native --seconds 0.1 --runs 1 --json >j.json 2>j.err \
    && python3 -m json.tool j.json >/dev/null; then ok "--json output parses"; else fail "--json output"; cat j.err >&2; fi

# 6. --multi 2: two processes, summed.
if "$CFSPEED" --multi 2 CKM_SHA256 --sizes 1024 --seconds 0.3 --runs 1 --json >multi.json 2>multi.err \
    && python3 - multi.json <<'EOF'; then ok "--multi 2 sums two processes"; else fail "--multi 2"; cat multi.err >&2; fi
import json, sys
d = json.load(open(sys.argv[1]))
assert d["processes"] == 2, d["processes"]
assert d["results"], "no rows"
for r in d["results"]:
    p = r["per_process_ops_per_s"]
    assert len(p) == 2 and all(x > 0 for x in p), p
    assert abs(sum(p) - r["ops_per_s"]) < 1e-6 * r["ops_per_s"], (p, r["ops_per_s"])
    assert r["processes"] == 2
EOF

# 7. --break-even prints a verdict (min_bytes or no threshold).
if "$CFSPEED" CKM_AES_GCM --break-even --native --sizes 16,16384 --seconds 0.1 --runs 1 >be.out 2>be.err; then
    ok "--break-even exits 0"
else
    fail "--break-even failed"; cat be.err >&2
fi
expect "--break-even verdict" '^(min_bytes = [0-9]+|  ours is not faster than native.*)$' be.out

# 7b. --update-size: each encryption multi-part (its output checked against OpenSSL's at
#     setup, so a wrong result fails the run), and the table says so.
if "$CFSPEED" CKM_AES_GCM CKM_AES_CTR --sizes 100000 --update-size 30000 --native --seconds 0.1 --runs 1 >upd.out 2>upd.err; then
    ok "--update-size exits 0"
else
    fail "--update-size failed"; cat upd.err >&2
fi
expect "--update-size described" 'multi-part: C_EncryptUpdate of 30000 bytes at a time' upd.out
expect "--update-size row" '^  ours +1 +[0-9,]+ ' upd.out

# 8. --chart with another format is refused before measuring.
if "$CFSPEED" CKM_SHA256 --chart x.png >png.out 2>&1; then fail "--chart x.png accepted"; else expect "--chart x.png refused" 'only SVG is written' png.out; fi

# 8a. A mechanism the configuration disables is skipped, with a note saying why it may be;
#     a run that measured nothing exits 1.
printf '[[provider]]\nname = "softtoken"\nmodule = "%s"\ndisabled = ["CKM_SHA256"]\n' \
    "$WORK/bin/libopencf_softtoken.so" >sha-off.toml
if OPENCF_CONF="$WORK/sha-off.toml" "$CFSPEED" CKM_SHA256 --sizes 16 --seconds 0.1 --runs 1 \
    >off.out 2>&1; then
    fail "a run that measured nothing exits 0"; cat off.out >&2
else
    expect "a run that measured nothing says so" '^cfspeed: nothing measured: .*disabled by the configuration' off.out
    expect "the skipped mechanism's note" 'CKM_SHA256: ours does not list the mechanism \(not supported, or disabled' off.out
fi

# 8b. Output into a pipe that closes early (`cfspeed | head -1`): exit 0, no panic.
set +o pipefail
"$CFSPEED" CKM_SHA256 --sizes 16 --seconds 0.1 --runs 1 2>pipe.err | head -1 >pipe.out
pipe_rc=${PIPESTATUS[0]}
set -o pipefail
if [ "$pipe_rc" = 0 ] && ! grep -q panicked pipe.err && [ "$(wc -l <pipe.out)" = 1 ]; then
    ok "a closed pipe on stdout (| head -1): exit 0, no panic"
else
    fail "a closed pipe on stdout: exit $pipe_rc"; cat pipe.err >&2
fi

# 9. --vs-env reaches the --vs-module's C_Initialize: a copy of libopencf.so initialized with
#    OPENCF_STAT=off counts nothing, the same copy with OPENCF_STAT=on counts its operations
#    (ours is the software token loaded directly, which never counts).
mkdir -p "$WORK/copy" "$WORK/statoff" "$WORK/staton"
cp "$WORK/bin/libopencf.so" "$WORK/copy/libopencf.so"
printf '[[provider]]\nname = "softtoken"\nmodule = "%s"\n' "$WORK/bin/libopencf_softtoken.so" >vsenv.toml
for mode in off on; do
    if OPENCF_CONF="$WORK/vsenv.toml" OPENCF_STAT_DIR="$WORK/stat$mode" "$CFSPEED" \
        --module "$WORK/bin/libopencf_softtoken.so" --vs-module "$WORK/copy/libopencf.so" --vs-slot 0 \
        --vs-env "OPENCF_STAT=$mode" CKM_SHA256 --sizes 16 --seconds 0.1 --runs 1 >"vsenv-$mode.out" 2>&1; then
        ok "--vs-env OPENCF_STAT=$mode exits 0"
    else
        fail "--vs-env OPENCF_STAT=$mode failed"; cat "vsenv-$mode.out" >&2
    fi
    OPENCF_STAT_DIR="$WORK/stat$mode" "$REL/cryptoadm" stat --json -m CKM_SHA256 >"vsenv-$mode.json" 2>/dev/null || true
done
if python3 - "$WORK/vsenv-off.json" "$WORK/vsenv-on.json" <<'PY'
import json, sys
def ops(f):
    try:
        d = json.load(open(f))
    except ValueError:
        return 0
    return sum(m["ops"] for m in d.get("mechanisms", []) if m["mechanism"] == "CKM_SHA256")
off, on = ops(sys.argv[1]), ops(sys.argv[2])
print(f"    counted with OPENCF_STAT=off: {off}, with OPENCF_STAT=on: {on}")
sys.exit(0 if off == 0 and on > 0 else 1)
PY
then ok "--vs-env sets the variable for the --vs-module only while it initializes"; else fail "--vs-env did not reach the --vs-module"; fi
if "$CFSPEED" --vs-module "$WORK/copy/libopencf.so" --vs-env NOEQUALS CKM_SHA256 >vsbad.out 2>&1; then
    fail "--vs-env NOEQUALS accepted"
else
    expect "--vs-env without '=' refused" 'expected VAR=VALUE' vsbad.out
fi

# --async-depth: one thread keeps many RSA (then ECDSA) signatures in flight on asynchronous sessions of the
# metaslot, with the accelerator beside the framework (without its RSA engine every call
# completes at once, and the figure is still measured). Without a provider that offers
# asynchronous sessions, a clear error.
if [ -e "$REL/libopencf_accel.so" ]; then
    mkdir -p "$WORK/accel" "$WORK/softtoken-async"
    cp "$REL/cfspeed" "$REL/libopencf.so" "$REL/libopencf_softtoken.so" "$REL/libopencf_accel.so" "$WORK/accel/"
    # async_row NAME OUT ROW ARGS...: cfspeed ARGS exits 0 and prints the asynchronous ROW.
    async_row() {
        local name=$1 out=$2 row=$3; shift 3
        if OPENCF_SOFTTOKEN_DIR="$WORK/softtoken-async" "$WORK/accel/cfspeed" "$@" \
            --seconds 0.2 --runs 1 >"$out" 2>&1; then
            ok "$name exits 0"
        else
            fail "$name failed"; cat "$out" >&2
        fi
        expect "$name row" "$row" "$out"
    }
    async_row "--async-depth" async.out '^  ours async +1 thr, 16 in flight: +[0-9]+ ops/s' \
        CKM_SHA256_RSA_PKCS --async-depth 16
    # ECDSA P-256 as well (the accelerator's multi-buffer engine in asynchronous sessions).
    async_row "--async-depth with ECDSA" asyncec.out \
        '^  ours async +1 thr, 16 in flight: +[0-9]+ ops/s' CKM_ECDSA:P-256 --async-depth 16
    # Two polling threads, each with its own sessions.
    async_row "--async-threads 2" asyncec2.out \
        '^  ours async +2 thr, 8 in flight each: +[0-9]+ ops/s' \
        CKM_ECDSA:P-256 --async-depth 8 --async-threads 2
    # --json holds the asynchronous figures too.
    if OPENCF_SOFTTOKEN_DIR="$WORK/softtoken-async" "$WORK/accel/cfspeed" CKM_ECDSA:P-256 \
        --async-depth 4 --seconds 0.2 --runs 1 --json >asyncjson.out 2>asyncjson.err &&
        python3 -c "import json,sys; a=json.load(open(sys.argv[1]))['asynchronous']; sys.exit(0 if len(a) == 1 and a[0]['mechanism'] == 'CKM_ECDSA:P-256' and a[0]['depth'] == 4 and a[0]['threads'] == 1 and a[0]['ops_per_sec'] > 0 else 1)" asyncjson.out; then
        ok "--async-depth --json: the asynchronous row in the JSON"
    else
        fail "--async-depth --json"; cat asyncjson.out asyncjson.err >&2
    fi
else
    echo "SKIP - --async-depth: $REL/libopencf_accel.so not built"
fi
if "$CFSPEED" CKM_SHA256_RSA_PKCS --async-depth 4 --seconds 0.1 --runs 1 >asyncno.out 2>&1; then
    fail "--async-depth without asynchronous sessions exits 0"
else
    expect "--async-depth without asynchronous sessions explained" 'does not offer asynchronous sessions' asyncno.out
fi

# Counts out of range are usage errors (exit 2) naming the range, before anything runs: a
# thread count the machine cannot start, a search among no objects.
for bad in "--threads 100000:1..=1024" "--threads 0:1..=1024" "--multi 1000:1..=256" \
    "--async-threads 0:1..=1024" "--find-objects 0:1..=1000000" "--async-depth 1000000:1..=256" \
    "--async-depth 0:1..=256"; do
    rc=0
    "$CFSPEED" ${bad%%:*} CKM_SHA256 >range.out 2>&1 || rc=$?
    if [ "$rc" -eq 2 ] && grep -q "is not in ${bad##*:}" range.out; then
        ok "${bad%%:*}: usage error naming ${bad##*:}"
    else
        fail "${bad%%:*}: exit $rc"; cat range.out >&2
    fi
done

# A run length past what a Duration holds is a usage error, not a panic; `find` without a PIN
# is refused before it writes a token object.
for bad in "--seconds inf:at most 86400" "--seconds 1e300:at most 86400" \
    "find --seconds 0.1:find needs --pin"; do
    rc=0
    OPENCF_SOFTTOKEN_DIR="$WORK/softtoken-nopin" "$CFSPEED" ${bad%%:*} CKM_SHA256 >bad.out 2>&1 || rc=$?
    if [ "$rc" -eq 2 ] && grep -q "${bad##*:}" bad.out && ! grep -q panicked bad.out; then
        ok "${bad%%:*}: usage error (${bad##*:})"
    else
        fail "${bad%%:*}: exit $rc"; cat bad.out >&2
    fi
done
if [ -e "$WORK/softtoken-nopin" ] && find "$WORK/softtoken-nopin" -name '*.sqlite' | grep -q .; then
    fail "find without --pin made a keystore"
fi

echo "cfspeed: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
