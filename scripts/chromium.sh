#!/usr/bin/env bash
# Installs Debian's chromium when /usr/bin/chromium is missing: the HTML report of
# `ratelimiting simulate` is checked in a real headless browser (test/integration/simulate-html.test.ts).
set -euo pipefail
[ -x /usr/bin/chromium ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "chromium: /usr/bin/chromium is missing; run as root: apt-get install -y chromium" >&2
  exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
[ -x /usr/bin/chromium ] || { echo "chromium: apt-get did not install /usr/bin/chromium" >&2; exit 1; }
