#!/usr/bin/env bash
# Builds dist/{{name}}.wasm (a component) with jco's QuickJS backend
# (componentize-qjs, sync ABI); see README.md for the engine choice.
set -euo pipefail
cd "$(dirname "$0")"
if [[ ! -d node_modules ]]; then
  if [[ -f package-lock.json ]]; then npm ci --no-audit --no-fund; else npm install --no-audit --no-fund; fi
fi
mkdir -p dist
node_modules/.bin/componentize-qjs --wit wit -n plugin --js index.js --module-root . \
  --sync -o dist/{{name}}.wasm >/dev/null
# The sidecar: what the operator grants the plugin (see {{name}}.yaml).
cp {{name}}.yaml dist/{{name}}.yaml
ls -l dist/{{name}}.wasm
