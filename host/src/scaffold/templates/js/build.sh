#!/usr/bin/env bash
# Builds dist/{{name}}.wasm (a component) with jco's QuickJS backend
# (componentize-qjs, sync ABI); see README.md for the engine choice.
set -euo pipefail
cd "$(dirname "$0")"
kubewasm="${KUBEWASM:-kubewasm}"
command -v "$kubewasm" >/dev/null || { echo "error: $kubewasm not found (it runs the fixtures in tests/): put kubewasm on PATH or set KUBEWASM" >&2; exit 1; }
if [[ ! -d node_modules ]]; then
  if [[ -f package-lock.json ]]; then npm ci --no-audit --no-fund; else npm install --no-audit --no-fund; fi
fi
mkdir -p dist
node_modules/.bin/componentize-qjs --wit wit -n plugin --js index.js --module-root . \
  --sync -o dist/{{name}}.wasm >/dev/null
# The sidecar: what the operator grants the plugin (see {{name}}.yaml).
cp {{name}}.yaml dist/{{name}}.yaml
ls -l dist/{{name}}.wasm
# Its fixtures (tests/*.yaml): the plugin's behaviour, pinned, run through
# the host's own runtime without a cluster (kubewasm test; `--update` writes
# what the plugin did into a failing step for review).
"$kubewasm" test dist/{{name}}.wasm tests/*.yaml
