#!/usr/bin/env bash
# Makes sure a memcached answers on 127.0.0.1:11211 for the tests: installs it with apt-get if it
# is missing, starts one (daemonized, loopback only) if none answers, then waits until it does.
# Idempotent: a memcached already answering is left alone.
# Usage: bash scripts/memcached.sh   (RL_MEMCACHED_PORT overrides the port)
set -euo pipefail
port="${RL_MEMCACHED_PORT:-11211}"

answers() {
  # a "version" round trip through bash's /dev/tcp, so no nc/telnet is needed
  timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/${port} && printf 'version\r\n' >&3 && head -c 8 <&3" 2>/dev/null | grep -q '^VERSION'
}

if answers; then
  exit 0
fi

if ! command -v memcached >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
    echo "memcached is not installed: run 'apt-get install -y memcached' as root" >&2
    exit 1
  fi
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  echo "installing memcached (apt-get)" >&2
  $sudo_cmd apt-get install -y memcached >/dev/null 2>&1 || {
    $sudo_cmd apt-get update >/dev/null
    $sudo_cmd apt-get install -y memcached >/dev/null
  }
fi

user_opt=()
[ "$(id -u)" -eq 0 ] && user_opt=(-u nobody)
memcached -d "${user_opt[@]}" -l 127.0.0.1 -p "$port" -U 0 -m 64 -c 1024

for _ in $(seq 1 50); do
  if answers; then
    exit 0
  fi
  sleep 0.1
done
echo "memcached did not answer on 127.0.0.1:${port}" >&2
exit 1
