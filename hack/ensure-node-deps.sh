#!/usr/bin/env bash
# Installs node_modules with `npm ci` when missing or when package-lock.json changed since the last
# install (a stamp holds the lock's hash), then builds the TypeScript to dist/. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=node_modules/.lock-sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [[ ! -f $stamp || "$(cat "$stamp")" != "$want" ]]; then
  echo "[ensure-node-deps] npm ci" >&2
  npm ci --no-audit --no-fund >&2
  echo "$want" > "$stamp"
fi
npx tsc -p tsconfig.json
