#!/usr/bin/env bash
# Everything CI checks: formatting, lints, guest plugins, all tests.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
rustup target add wasm32-wasip2
rustup component add rustfmt clippy
cargo fmt --all --check
(cd plugins && cargo fmt --all --check)
bash plugins/build.sh
(cd plugins && cargo clippy --release --target wasm32-wasip2 --workspace -- -D warnings)
(cd plugins && cargo test -p kubewasm-sdk)
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
