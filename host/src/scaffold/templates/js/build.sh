#!/usr/bin/env bash
# Builds dist/{{name}}.wasm (a component) with componentize-js.
set -euo pipefail
cd "$(dirname "$0")"
if [[ ! -d node_modules ]]; then
  if [[ -f package-lock.json ]]; then npm ci --no-audit --no-fund; else npm install --no-audit --no-fund; fi
fi
mkdir -p dist
# No WASI features: the host grants none by default and links no wasi:http.
node_modules/.bin/componentize-js index.js -w wit -n plugin \
  -d stdio random clocks http fetch-event -o dist/{{name}}.wasm
# The sidecar: what the operator grants the plugin (see {{name}}.yaml).
cp {{name}}.yaml dist/{{name}}.yaml
ls -l dist/{{name}}.wasm
