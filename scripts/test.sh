#!/usr/bin/env bash
# The whole test run: build, type-check, lint, then every test file.
# Usage: npm test            (everything)
#        npm test -- FILE... (only these test files, after the same checks)
set -euo pipefail
cd "$(dirname "$0")/.."

[ -d node_modules ] || npm ci --no-audit --no-fund
bash scripts/services.sh
npm run --silent build
npm run --silent typecheck
npm run --silent lint

if [ "$#" -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(find test -name '*.test.ts' | sort)
fi
exec node --import tsx --test --test-reporter=spec "${files[@]}"
