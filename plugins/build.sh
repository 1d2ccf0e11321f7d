#!/usr/bin/env bash
# Builds every guest plugin as a WebAssembly component (wasm32-wasip2).
set -euo pipefail
cd "$(dirname "$0")"
rustup target add wasm32-wasip2 >/dev/null 2>&1 || true
cargo build --release --target wasm32-wasip2 --workspace --exclude bench-logic --exclude kubewasm-sdk "$@"
ls -l target/wasm32-wasip2/release/*.wasm | awk '{print $5, $9}'
