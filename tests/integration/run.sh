#!/usr/bin/env bash
# Runs the integration tests: software people already run (p11-kit, OpenSSL, nginx, NSS,
# Java, OpenSSH, GnuTLS, Python, Go, Node.js) against target/release/libopencf.so, on
# loopback only. See docs/INTEGRATION.md.
#
#   tests/integration/run.sh               # every consumer, in order
#   tests/integration/run.sh openssl nginx # some of them
#
# Each consumer is tests/integration/NAME.sh and ends with "NAME: N passed, M failed".
# Every one runs even when an earlier one fails; the last line sums them up.
set -uo pipefail

DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ALL=(p11-kit openssl nginx nss java openssh gnutls python go node)
if [ "$#" -gt 0 ]; then NAMES=("$@"); else NAMES=("${ALL[@]}"); fi

ok=0 bad=0 bad_names=""
for name in "${NAMES[@]}"; do
    script="$DIR/$name.sh"
    [ -e "$script" ] || continue
    printf '\n--- %s\n' "$name"
    start=$SECONDS
    if "$script"; then
        ok=$((ok + 1))
    else
        bad=$((bad + 1)); bad_names="$bad_names $name"
    fi
    printf -- '--- %s: %ss\n' "$name" "$((SECONDS - start))"
done
echo
if [ "$bad" -ne 0 ]; then echo "failed consumers:$bad_names"; fi
echo "integration: $ok consumers passed, $bad failed"
[ "$bad" -eq 0 ]
