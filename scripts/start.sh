#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build, run.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d node_modules ] || npm ci --no-audit --no-fund
npm run --silent build
exec node dist/server/cli.js serve "$@"
