#!/usr/bin/env bash
# Builds dist/{{name}}.wasm (a component): Go for GOOS=wasip1 (a reactor,
# -buildmode=c-shared), the WIT embedded with wasm-tools, then the WASI
# preview1 reactor adapter (written by tools/wasi-adapter, from crates.io).
# Needs: Go 1.24+, `cargo install --locked wasm-tools@1.263.0`, Rust.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p build dist
GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -ldflags=-s -o build/core.wasm .
wasm-tools component embed wit --world plugin build/core.wasm -o build/embedded.wasm
adapter=build/wasi_snapshot_preview1.reactor.wasm
if [[ ! -f "$adapter" ]]; then
  cargo run -q --release --locked --manifest-path tools/wasi-adapter/Cargo.toml \
    --target-dir "${CARGO_TARGET_DIR:-build/tools}" -- "$adapter"
fi
wasm-tools component new build/embedded.wasm --adapt "wasi_snapshot_preview1=$adapter" -o dist/{{name}}.wasm
# The sidecar: what the operator grants the plugin (see {{name}}.yaml).
cp {{name}}.yaml dist/{{name}}.yaml
ls -l dist/{{name}}.wasm
