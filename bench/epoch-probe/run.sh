#!/usr/bin/env bash
# Builds the parse-all decision as a core module at opt-level 3 and "s" and
# times it natively and in wasmtime with epoch checks, without, and with a
# branch-to-trap check of the same density (probe/src/main.rs says why).
# Not part of the test command: a measurement, about a minute warm.
set -euo pipefail
cd "$(dirname "$0")"
rustup target add wasm32-wasip1 >/dev/null
target="${CARGO_TARGET_DIR:-$PWD/target}/epoch-probe"
out="$target/guests"
mkdir -p "$out"
for level in 3 s; do
  CARGO_PROFILE_RELEASE_OPT_LEVEL="$level" CARGO_TARGET_DIR="$target/guest-$level" \
    cargo build --quiet --release --target wasm32-wasip1 --manifest-path guest/Cargo.toml
  cp "$target/guest-$level/wasm32-wasip1/release/epoch_probe_guest.wasm" "$out/opt-level-$level.wasm"
done
CARGO_TARGET_DIR="$target/probe" cargo run --quiet --release --manifest-path probe/Cargo.toml -- \
  "$out/opt-level-3.wasm" "$out/opt-level-s.wasm"
