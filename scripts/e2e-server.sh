#!/usr/bin/env bash
# Server for the browser tests: a fresh production build and a fresh embedded database each run
# (E2E_SKIP_BUILD=1 reuses the last build while iterating locally).
set -euo pipefail
cd "$(dirname "$0")/.."
unset DATABASE_URL
rm -rf "${FLOTILLA_DATA_DIR:?}"
if [ "${E2E_SKIP_BUILD:-}" != "1" ]; then npx next build; fi
exec npx tsx scripts/start.ts
