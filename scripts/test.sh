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
# c8 collects V8's coverage of the test processes and prints a summary of src/ at the end (the
# HTML report goes to .tmp/coverage); code the tests run in child processes from dist/ (the CLI
# started as a server) is not mapped back to src/ and does not count.
exec npx c8 --all --extension .ts --reporter=text-summary --reporter=html --include 'src/**' \
  --temp-directory .tmp/c8 --report-dir .tmp/coverage \
  node --import tsx --test --test-reporter=spec "${files[@]}"
