#!/bin/sh
# Build and run the table-driven bad-input test against the softtoken module and the
# accelerator provider, then the differential sequence test (seqdiff.c): random call
# sequences through slot 0 of the framework, and through the software token's own slot
# there, must get the answers the softtoken gives when loaded alone. Last, the operation
# life-cycle and login rules (oplife.c) on the softtoken and on slot 0, one keystore used by
# several processes at once (multiproc.c), and slot 0 in front of a provider that lies
# (hostile.c, liar.c).
#   MODULE=path/to/module.so tests/c/run.sh     (default: release softtoken)
#   SANITIZE=0 tests/c/run.sh                   (build without ASan/UBSan)
#   SEQDIFF_FIRST=N SEQDIFF_SEEDS=N SEQDIFF_STEPS=N tests/c/run.sh
#                                               (seeds of the sequence test: default 1, 40, 500)
set -eu
cd "$(dirname "$0")/../.."
MODULE=${MODULE:-target/release/libopencf_softtoken.so}
if [ ! -f "$MODULE" ]; then
    cargo build --release -p opencf-softtoken
fi
mkdir -p target
CFLAGS="-Wall -Werror -O1 -g"
# ASan/UBSan work with dlopen of the (uninstrumented) Rust module; leak
# checking is disabled because leaks inside the module are not this test's.
if [ "${SANITIZE:-1}" = 1 ]; then
    CFLAGS="$CFLAGS -fsanitize=address,undefined -fno-omit-frame-pointer"
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fi
cc $CFLAGS -Itests/c -o target/badinput tests/c/badinput.c -ldl
cc $CFLAGS -Itests/c -o target/seqdiff tests/c/seqdiff.c -ldl
cc $CFLAGS -Itests/c -o target/oplife tests/c/oplife.c -ldl -lpthread
cc $CFLAGS -Itests/c -o target/hostile tests/c/hostile.c -ldl -lpthread
cc $CFLAGS -Itests/c -o target/multiproc tests/c/multiproc.c -ldl
# The lying provider is loaded by the (uninstrumented) framework: built without sanitizers.
mkdir -p target/liar
cc -Wall -Werror -O1 -g -shared -fPIC -Itests/c -o target/liar/liar.so tests/c/liar.c -lpthread
cp target/liar/liar.so target/liar/liar-b.so
cc -Wall -Werror -O1 -g -shared -fPIC -DLIAR_LEGACY -Itests/c -o target/liar/liar-legacy.so \
    tests/c/liar.c -lpthread
OPENCF_SOFTTOKEN_DIR=$(mktemp -d)
export OPENCF_SOFTTOKEN_DIR
trap 'rm -rf "$OPENCF_SOFTTOKEN_DIR"' EXIT
./target/badinput "$MODULE"
# The accelerator provider loaded on its own has a table of its own (no token storage, no
# login, engine rows skipped where the engine is absent); run again as on a CPU without the
# engines.
ACCEL=target/release/libopencf_accel.so
if [ ! -f "$ACCEL" ]; then
    cargo build --release -p opencf-accel
fi
./target/badinput --accel "$ACCEL"
OPENCF_ACCEL_DISABLE=ifma,bulk ./target/badinput --accel "$ACCEL"

FRAMEWORK=target/release/libopencf.so
if [ ! -f "$FRAMEWORK" ] || [ ! -f target/release/libopencf_softtoken.so ]; then
    cargo build --release --workspace
fi
./target/seqdiff target/release/libopencf_softtoken.so "$FRAMEWORK" 0 \
    "${SEQDIFF_FIRST:-1}" "${SEQDIFF_SEEDS:-40}" "${SEQDIFF_STEPS:-500}"
# The software token's own slot through the framework (a pass-through session) answers as
# the token does too.
./target/seqdiff target/release/libopencf_softtoken.so "$FRAMEWORK" "label=OpenCF Softtoken" \
    "${SEQDIFF_FIRST:-1}" 8 "${SEQDIFF_STEPS:-500}"
# Operation life cycle and login rules: the software token alone, then slot 0 in the
# zero configuration (the accelerator first), each on a fresh token.
# On slot 0, the counters of a forked child are read with cryptoadm.
CRYPTOADM=target/release/cryptoadm
[ -f "$CRYPTOADM" ] || cargo build --release -p cryptoadm
for m in target/release/libopencf_softtoken.so "$FRAMEWORK"; do
    d=$(mktemp -d)
    stat_reader=
    [ "$m" = "$FRAMEWORK" ] && stat_reader="$PWD/$CRYPTOADM"
    env -u OPENCF_CONF OPENCF_SOFTTOKEN_DIR="$d/token" XDG_CONFIG_HOME="$d/config" \
        OPENCF_STAT_DIR="$d/stat" ${stat_reader:+OPLIFE_CRYPTOADM="$stat_reader"} \
        ./target/oplife "$m" 0 || { rm -rf "$d"; exit 1; }
    rm -rf "$d"
done
# One keystore, several processes at once: this one on the software token alone, then on
# slot 0; the others on the software token module.
for m in target/release/libopencf_softtoken.so "$FRAMEWORK"; do
    d=$(mktemp -d)
    env -u OPENCF_CONF OPENCF_SOFTTOKEN_DIR="$d/token" XDG_CONFIG_HOME="$d/config" \
        OPENCF_STAT_DIR="$d/stat" ./target/multiproc "$m" 0 target/release/libopencf_softtoken.so \
        || { rm -rf "$d"; exit 1; }
    rm -rf "$d"
done
# Slot 0 in front of a provider that lies, before the software token.
d=$(mktemp -d)
env -u OPENCF_CONF OPENCF_SOFTTOKEN_DIR="$d/token" XDG_CONFIG_HOME="$d/config" \
    OPENCF_STAT_DIR="$d/stat" ./target/hostile "$FRAMEWORK" "$PWD/target/liar/liar.so" \
    "$PWD/target/liar/liar-b.so" "$PWD/target/liar/liar-legacy.so" "$d" || { rm -rf "$d"; exit 1; }
rm -rf "$d"
