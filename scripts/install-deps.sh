#!/usr/bin/env bash
# Installs what building and testing OpenCF needs on Debian 12 (bookworm).
# Idempotent: a second run finds everything present and returns in seconds.
#
#   scripts/install-deps.sh            # system packages, Rust check, Python venv
#   SKIP_APT=1 scripts/install-deps.sh # only the Rust check and the venv
#
# Environment: VENV (default .venv), PYTHON (default python3).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
REQUIREMENTS="$ROOT/tests/python/requirements.txt"

export DEBIAN_FRONTEND=noninteractive
export PIP_DISABLE_PIP_VERSION_CHECK=1
export PIP_NO_INPUT=1

# Debian packages the build, the tests and the demo use.
APT_PACKAGES=(
    build-essential   # cc, make: the vendored OpenSSL and bundled SQLite builds
    perl              # OpenSSL's Configure
    pkg-config
    libssl-dev
    ca-certificates
    openssl           # the openssl CLI: demo and cross-checks
    opensc            # pkcs11-tool
    softhsm2          # third-party PKCS#11 module for comparisons
    gnutls-bin        # p11tool
    python3
    python3-venv
    python3-dev
    # tests/integration (docs/INTEGRATION.md): software that loads libopencf.so
    p11-kit                   # p11-kit list-modules
    p11-kit-modules           # p11-kit-proxy.so
    libengine-pkcs11-openssl  # OpenSSL's pkcs11 engine (libp11)
    nginx
    libnss3-tools             # modutil, certutil, pk12util, selfserv, tstclnt
    openssh-client
    openssh-server            # sshd, run on loopback by the test
    default-jdk-headless      # javac, SunPKCS11
    nodejs                    # pkcs11js; npm comes with it or from Debian's npm
    curl
)

log() { printf '[deps] %s\n' "$*"; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n "$@"
    else
        log "need root (or passwordless sudo) to run: $*"
        return 1
    fi
}

is_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

install_apt() {
    if [ "${SKIP_APT:-0}" = "1" ]; then
        log "SKIP_APT=1: not touching system packages"
        return
    fi
    if ! command -v dpkg-query >/dev/null 2>&1; then
        log "not a Debian-like system: install the equivalents of ${APT_PACKAGES[*]} by hand"
        return
    fi
    local missing=()
    local pkg
    for pkg in "${APT_PACKAGES[@]}"; do
        is_installed "$pkg" || missing+=("$pkg")
    done
    if [ "${#missing[@]}" -eq 0 ]; then
        log "system packages: all present"
        return
    fi
    log "installing: ${missing[*]}"
    as_root apt-get update -qq
    as_root apt-get install -y -qq --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
        "${missing[@]}" </dev/null
}

install_rust() {
    if [ -f "$HOME/.cargo/env" ]; then
        # shellcheck disable=SC1091
        . "$HOME/.cargo/env"
    fi
    if command -v cargo >/dev/null 2>&1; then
        log "rust: $(cargo --version)"
    else
        log "cargo not found: installing the stable toolchain with rustup"
        if ! command -v curl >/dev/null 2>&1; then
            as_root apt-get install -y -qq curl </dev/null
        fi
        curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs \
            | sh -s -- -y --profile minimal --component rustfmt,clippy
        # shellcheck disable=SC1091
        . "$HOME/.cargo/env"
        log "rust: $(cargo --version)"
    fi
    if command -v rustup >/dev/null 2>&1; then
        local comp
        for comp in rustfmt clippy; do
            if ! rustup component list --installed 2>/dev/null | grep -q "^$comp"; then
                log "adding rustup component $comp"
                rustup component add "$comp" || log "could not add $comp (make lint needs it)"
            fi
        done
    fi
}

install_venv() {
    local stamp="$VENV/.requirements.sha256"
    local want
    want="$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)"
    if [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        log "python venv: up to date ($VENV)"
        return
    fi
    if [ ! -x "$VENV/bin/python" ]; then
        log "creating python venv at $VENV with $PYTHON"
        "$PYTHON" -m venv "$VENV" || {
            log "$PYTHON -m venv failed; retrying with /usr/bin/python3"
            rm -rf "$VENV"
            /usr/bin/python3 -m venv "$VENV"
        }
    fi
    log "installing python test requirements"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -r "$REQUIREMENTS"
    printf '%s\n' "$want" >"$stamp"
    log "python venv: $("$VENV/bin/python" --version), $("$VENV/bin/python" -m pip list 2>/dev/null | grep -i '^python-pkcs11' | tr -s ' ')"
}

install_apt
install_rust
install_venv
log "done"
