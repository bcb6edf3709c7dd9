#!/usr/bin/env bash
# Installs this folder's npm packages (the openai client, pinned by
# package-lock.json) when they are missing; a second run does nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [[ -d "$here/node_modules/openai" ]]; then exit 0; fi
if ! command -v npm >/dev/null 2>&1; then
  echo "install.sh: npm not found; the openai client tests will skip (scripts/setup.sh installs nodejs and npm)" >&2
  exit 0
fi
echo "install.sh: npm ci in $here"
npm ci --prefix "$here" --no-audit --no-fund
