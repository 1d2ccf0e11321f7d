#!/usr/bin/env bash
# Builds dist/{{name}}.wasm (a component): Go for GOOS=wasip1 (a reactor,
# -buildmode=c-shared), then `kubewasm componentize`, which embeds the
# world's type (from wit/) and the WASI preview1 adapter.
# Needs: Go 1.24+ and kubewasm (on PATH, or $KUBEWASM); nothing else.
set -euo pipefail
cd "$(dirname "$0")"
kubewasm="${KUBEWASM:-kubewasm}"
command -v go >/dev/null || { echo "error: go not found: Go 1.24 or newer is needed (https://go.dev/dl)" >&2; exit 1; }
command -v "$kubewasm" >/dev/null || { echo "error: $kubewasm not found: put kubewasm on PATH or set KUBEWASM" >&2; exit 1; }
mkdir -p build dist
# Not stripped (no -ldflags=-s): the name section makes a trap's backtrace
# name the Go functions; -trimpath keeps file paths in panics module-relative.
GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o build/core.wasm .
"$kubewasm" componentize build/core.wasm --wit wit -o dist/{{name}}.wasm
# The sidecar: what the operator grants the plugin (see {{name}}.yaml).
cp {{name}}.yaml dist/{{name}}.yaml
ls -l dist/{{name}}.wasm
# Its fixtures (tests/*.yaml): the plugin's behaviour, pinned, run through
# the host's own runtime without a cluster (kubewasm test; `--update` writes
# what the plugin did into a failing step for review).
"$kubewasm" test dist/{{name}}.wasm tests/*.yaml
