#!/usr/bin/env bash
# Builds dist/{{name}}.wasm (a component) with componentize-py. Uses
# $COMPONENTIZE_PY, else .venv (created with requirements.txt when missing).
set -euo pipefail
cd "$(dirname "$0")"
kubewasm="${KUBEWASM:-kubewasm}"
command -v "$kubewasm" >/dev/null || { echo "error: $kubewasm not found (it runs the fixtures in tests/): put kubewasm on PATH or set KUBEWASM" >&2; exit 1; }
cpy="${COMPONENTIZE_PY:-}"
if [[ -z "$cpy" ]]; then
  if [[ ! -x .venv/bin/componentize-py ]]; then
    python3 -m venv .venv
    .venv/bin/pip install -q -r requirements.txt
  fi
  cpy=.venv/bin/componentize-py
fi
mkdir -p dist
"$cpy" -d wit -w plugin componentize app -p . -p sdk -o dist/{{name}}.wasm
# The sidecar: what the operator grants the plugin (see {{name}}.yaml).
cp {{name}}.yaml dist/{{name}}.yaml
ls -l dist/{{name}}.wasm
# Its fixtures (tests/*.yaml): the plugin's behaviour, pinned, run through
# the host's own runtime without a cluster (kubewasm test; `--update` writes
# what the plugin did into a failing step for review).
"$kubewasm" test dist/{{name}}.wasm tests/*.yaml
