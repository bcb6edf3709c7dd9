#!/usr/bin/env bash
# Runs one test file of this folder with node (ctest: serve_openai_client,
# serve_openai_load). Exit 77 (ctest: skipped) when node or the openai package
# is missing; `make deps` (install.sh) installs the package.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v node >/dev/null 2>&1; then
  echo "skipped: node is not installed (scripts/setup.sh installs it)"
  exit 77
fi
if [[ ! -d "$here/node_modules/openai" ]]; then
  echo "skipped: the openai package is not installed (run: bash $here/install.sh)"
  exit 77
fi
exec node --test-reporter=spec "$here/$1"
