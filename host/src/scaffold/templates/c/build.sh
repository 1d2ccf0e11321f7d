#!/usr/bin/env bash
# Builds dist/{{name}}.wasm (a component): clang for wasm32-wasi (a reactor)
# with the SDK and its generated bindings (sdk/), then `kubewasm
# componentize`, which embeds the world's type (from wit/) and the WASI
# preview1 adapter. Needs: clang-19 lld-19 libclang-rt-19-dev-wasm32
# wasi-libc (Debian) and kubewasm (on PATH, or $KUBEWASM); nothing else.
set -euo pipefail
cd "$(dirname "$0")"
clang="${CLANG:-$(command -v clang-19 || command -v clang || true)}"
kubewasm="${KUBEWASM:-kubewasm}"
if [[ -z "$clang" ]]; then
  echo "error: clang-19 not found: apt-get install clang-19 lld-19 libclang-rt-19-dev-wasm32 wasi-libc" >&2
  exit 1
fi
command -v "$kubewasm" >/dev/null || { echo "error: $kubewasm not found: put kubewasm on PATH or set KUBEWASM" >&2; exit 1; }
mkdir -p build dist
# The name section is kept (a trap's backtrace names the functions); the
# DWARF that wasi-libc brings is not (-Wl,--strip-debug: 100 KB).
"$clang" --target=wasm32-wasi -mexec-model=reactor -O2 -Wall -Wextra -Wno-unused-parameter \
  -I sdk hello.c sdk/kubewasm.c sdk/plugin.c -Wl,--strip-debug -o build/core.wasm
"$kubewasm" componentize build/core.wasm --wit wit -o dist/{{name}}.wasm
# The sidecar: what the operator grants the plugin (see {{name}}.yaml).
cp {{name}}.yaml dist/{{name}}.yaml
ls -l dist/{{name}}.wasm
# Its fixtures (tests/*.yaml): the plugin's behaviour, pinned, run through
# the host's own runtime without a cluster (kubewasm test; `--update` writes
# what the plugin did into a failing step for review).
"$kubewasm" test dist/{{name}}.wasm tests/*.yaml
