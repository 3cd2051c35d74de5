#!/usr/bin/env bash
# Makes sure an nginx binary (with the auth_request module) is installed for the tests: installs
# the Debian package with apt-get if `nginx` is missing. Starts nothing: each test runs an nginx of
# its own (`nginx -p <tmpdir> -c <tmpdir>/nginx.conf -g 'daemon off;'`), on a free loopback port.
# Idempotent: an installed nginx is left alone.
# Usage: bash scripts/nginx.sh
set -euo pipefail

has_auth_request() {
  # `nginx -V` prints its configure arguments on stderr
  nginx -V 2>&1 | grep -q -- '--with-http_auth_request_module'
}

if command -v nginx >/dev/null 2>&1; then
  has_auth_request || {
    echo "nginx is installed but lacks the auth_request module: install Debian's 'nginx' package" >&2
    exit 1
  }
  exit 0
fi

if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
  echo "nginx is not installed: run 'apt-get install -y nginx' as root" >&2
  exit 1
fi
sudo_cmd=""
[ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"

# The package's postinst starts the system nginx (port 80) through invoke-rc.d unless a
# policy-rc.d forbids it (exit 101). The tests want the binary only: forbid it for the install
# when no policy exists, and remove that policy again afterwards.
policy=/usr/sbin/policy-rc.d
own_policy=""
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# written by scripts/nginx.sh for the length of one install\nexit 101\n' | $sudo_cmd tee "$policy" >/dev/null
  $sudo_cmd chmod +x "$policy"
  own_policy=1
fi
cleanup() {
  if [ -n "$own_policy" ]; then $sudo_cmd rm -f "$policy"; fi
}
trap cleanup EXIT

echo "installing nginx (apt-get)" >&2
# a stale package list fails the first try: update it then and try once more
$sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y nginx >/dev/null 2>&1 || {
  $sudo_cmd apt-get update >/dev/null
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y nginx >/dev/null
}

command -v nginx >/dev/null 2>&1 || {
  echo "nginx is still missing after 'apt-get install -y nginx'" >&2
  exit 1
}
has_auth_request || {
  echo "the installed nginx lacks the auth_request module" >&2
  exit 1
}
