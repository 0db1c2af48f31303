#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2317  # functions run through check/check_out
# OpenSSH: `ssh-keygen -D libopencf.so` prints the public keys of the keys made through slot 0;
# an sshd started here on 127.0.0.1 (throwaway configuration and host key, AuthorizedKeysFile
# in the temporary directory, StrictModes no, UsePAM no, as the current user) accepts
#   - `ssh -I libopencf.so` with the PIN from an SSH_ASKPASS script (SSH_ASKPASS_REQUIRE=force),
#     authenticating with the EC key in the token, and
#   - `ssh -o BatchMode=yes` through an ssh-agent that holds the token (`ssh-add -s`),
#     authenticating with the RSA key in the token,
# each running `echo ok`; cryptoadm stat shows OpenCF signed.
#
# ssh reads the PIN of a PKCS#11 key only when it may prompt: with BatchMode=yes it gives up
# ("pin required"), so BatchMode=yes goes through ssh-agent, which asked for the PIN at ssh-add.
# As root, sshd needs its privilege separation directory /run/sshd, which the Debian service
# would create; the script creates it when missing.
set -uo pipefail

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
integration_init openssh

SSHD="$(command -v sshd || echo /usr/sbin/sshd)"
for tool in ssh ssh-keygen ssh-agent ssh-add "$SSHD"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        skip "OpenSSH" "$tool is missing (Debian: openssh-client openssh-server)"
        fail "OpenSSH is installed"
        finish
    fi
done
if [ "$(id -u)" -eq 0 ] && [ ! -d /run/sshd ]; then
    echo "note: creating /run/sshd, sshd's privilege separation directory"
    mkdir -p /run/sshd && chmod 0755 /run/sshd
fi

USER_NAME="$(id -un)"
PORT="$(free_port)"
printf '#!/bin/sh\nprintf "%%s\\n" "%s"\n' "$PIN" >"$WORK/askpass"
chmod 0700 "$WORK/askpass"
export SSH_ASKPASS="$WORK/askpass" SSH_ASKPASS_REQUIRE=force DISPLAY="${DISPLAY:-:0}"

token_init
check "EC P-256 key pair for ssh through slot 0" \
    p11_login --keypairgen --key-type EC:prime256v1 --id 61 --label ssh-ec
check "RSA-2048 key pair for ssh through slot 0" \
    p11_login --keypairgen --key-type rsa:2048 --id 62 --label ssh-rsa
check_out "ssh-keygen -D prints the token's ECDSA public key" '^ecdsa-sha2-nistp256 .* ssh-ec$' ssh-keygen -D "$LIB"
check_out "ssh-keygen -D prints the token's RSA public key" '^ssh-rsa .* ssh-rsa$' ssh-keygen -D "$LIB"
ssh-keygen -D "$LIB" 2>/dev/null >"$WORK/token-keys.pub"
grep ' ssh-ec$' "$WORK/token-keys.pub" >"$WORK/authorized_keys_ec"
grep ' ssh-rsa$' "$WORK/token-keys.pub" >"$WORK/authorized_keys_rsa"
cp "$WORK/authorized_keys_ec" "$WORK/authorized_keys"

ssh-keygen -q -t ed25519 -N '' -f "$WORK/host_key"
echo "[127.0.0.1]:$PORT $(cat "$WORK/host_key.pub")" >"$WORK/known_hosts"
cat >"$WORK/sshd_config" <<EOF
ListenAddress 127.0.0.1
Port $PORT
HostKey $WORK/host_key
PidFile $WORK/sshd.pid
AuthorizedKeysFile $WORK/authorized_keys
StrictModes no
UsePAM no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowUsers $USER_NAME
MaxStartups 4
LoginGraceTime 30
LogLevel VERBOSE
EOF
check "sshd -t accepts the throwaway configuration" "$SSHD" -t -f "$WORK/sshd_config"
SERVER_TIMEOUT=90 bg sshd "$SSHD" -D -e -f "$WORK/sshd_config"
if ! wait_log "$WORK/sshd.log" 'Server listening on 127.0.0.1' 20; then
    fail "sshd listens on 127.0.0.1:$PORT" "$WORK/sshd.log"
    finish
fi

SSH_OPTS=(-F /dev/null -p "$PORT" -o UserKnownHostsFile="$WORK/known_hosts" -o StrictHostKeyChecking=yes
    -o PreferredAuthentications=publickey -o PasswordAuthentication=no -o ConnectTimeout=10
    -o ServerAliveInterval=5 -o ServerAliveCountMax=2)

stat_reset
check_out "ssh -I libopencf.so logs in with the token's EC key and runs echo ok" '^ok$' \
    ssh "${SSH_OPTS[@]}" -o IdentityAgent=none -I "$LIB" "$USER_NAME@127.0.0.1" echo ok </dev/null
check_stat "cryptoadm stat: OpenCF made the ECDSA signature for ssh" 'CKM_ECDSA'
check_out "sshd accepted the ECDSA key" 'Accepted publickey for .* ECDSA' cat "$WORK/sshd.log"

# ssh-agent only loads PKCS#11 modules on its allow list (-P).
AGENT_SOCK="$WORK/agent.sock"
SERVER_TIMEOUT=90 bg ssh-agent ssh-agent -D -a "$AGENT_SOCK" -P "$LIB"
wait_log "$WORK/ssh-agent.log" 'SSH_AUTH_SOCK' 10 || true
cp "$WORK/authorized_keys_rsa" "$WORK/authorized_keys"
stat_reset
check_out "ssh-add -s loads the token into ssh-agent (PIN from SSH_ASKPASS)" 'Card added' \
    env SSH_AUTH_SOCK="$AGENT_SOCK" ssh-add -s "$LIB" </dev/null
check_out "ssh-add -l lists the token's keys" 'ssh-rsa \(RSA\)' env SSH_AUTH_SOCK="$AGENT_SOCK" ssh-add -l
check_out "ssh -o BatchMode=yes logs in through the agent with the token's RSA key" '^ok$' \
    ssh "${SSH_OPTS[@]}" -o BatchMode=yes -o IdentityAgent="$AGENT_SOCK" "$USER_NAME@127.0.0.1" echo ok </dev/null
check_stat "cryptoadm stat: OpenCF made the RSA signature for ssh" 'CKM_RSA_PKCS|CKM_SHA(256|512)_RSA_PKCS'
check_out "sshd accepted the RSA key" 'Accepted publickey for .* RSA' cat "$WORK/sshd.log"

finish
