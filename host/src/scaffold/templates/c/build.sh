#!/usr/bin/env bash
# Builds dist/{{name}}.wasm (a component): wit-bindgen's C bindings, clang
# for wasm32-wasi (a reactor), then wasm-tools with the WASI preview1
# reactor adapter (written by tools/wasi-adapter, from crates.io).
# Needs: clang-19 lld-19 libclang-rt-19-dev-wasm32 wasi-libc (Debian),
# `cargo install --locked wit-bindgen-cli@0.63.0 wasm-tools@1.263.0`.
set -euo pipefail
cd "$(dirname "$0")"
clang="${CLANG:-$(command -v clang-19 || command -v clang)}"
mkdir -p build/gen dist
wit-bindgen c wit --world plugin --out-dir build/gen >build/wit-bindgen.log 2>&1 || { cat build/wit-bindgen.log >&2; exit 1; }
"$clang" --target=wasm32-wasi -mexec-model=reactor -O2 -Wall -Wextra -Wno-unused-parameter \
  -I build/gen -I sdk hello.c sdk/kubewasm.c build/gen/plugin.c build/gen/plugin_component_type.o \
  -Wl,--strip-all -o build/core.wasm
adapter=build/wasi_snapshot_preview1.reactor.wasm
if [[ ! -f "$adapter" ]]; then
  cargo run -q --release --locked --manifest-path tools/wasi-adapter/Cargo.toml \
    --target-dir "${CARGO_TARGET_DIR:-build/tools}" -- "$adapter"
fi
wasm-tools component new build/core.wasm --adapt "wasi_snapshot_preview1=$adapter" -o dist/{{name}}.wasm
# The sidecar: what the operator grants the plugin (see {{name}}.yaml).
cp {{name}}.yaml dist/{{name}}.yaml
ls -l dist/{{name}}.wasm
