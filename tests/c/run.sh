#!/bin/sh
# Build and run the table-driven bad-input test against the softtoken module.
#   MODULE=path/to/module.so tests/c/run.sh     (default: release softtoken)
#   SANITIZE=0 tests/c/run.sh                   (build without ASan/UBSan)
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
OPENCF_SOFTTOKEN_DIR=$(mktemp -d)
export OPENCF_SOFTTOKEN_DIR
trap 'rm -rf "$OPENCF_SOFTTOKEN_DIR"' EXIT
./target/badinput "$MODULE"
