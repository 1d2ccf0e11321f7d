#!/usr/bin/env bash
# Builds dist/{{name}}.wasm (a component) with cargo for wasm32-wasip2.
set -euo pipefail
cd "$(dirname "$0")"
kubewasm="${KUBEWASM:-kubewasm}"
command -v "$kubewasm" >/dev/null || { echo "error: $kubewasm not found (it runs the fixtures in tests/): put kubewasm on PATH or set KUBEWASM" >&2; exit 1; }
if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx wasm32-wasip2; then
  rustup target add wasm32-wasip2
fi
cargo build --release --target wasm32-wasip2
mkdir -p dist
cp "${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release/{{crate}}.wasm" dist/{{name}}.wasm
# The sidecar: what the operator grants the plugin (see {{name}}.yaml).
cp {{name}}.yaml dist/{{name}}.yaml
ls -l dist/{{name}}.wasm
# Its fixtures (tests/*.yaml): the plugin's behaviour, pinned, run through
# the host's own runtime without a cluster (kubewasm test; `--update` writes
# what the plugin did into a failing step for review).
"$kubewasm" test dist/{{name}}.wasm tests/*.yaml
