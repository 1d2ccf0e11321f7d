#!/usr/bin/env bash
# Installs the pinned toolchains plugins/build-languages.sh needs, from the
# package registries only, on a fresh Debian 12 machine (as root, or with
# sudo for apt). Idempotent: what is already at the pinned version is kept.
#
#   Debian apt   clang-19 lld-19 libclang-rt-19-dev-wasm32 wasi-libc   (C)
#   rustup       targets wasm32-wasip2, wasm32-wasip1
#   npm          plugins/js/package-lock.json (npm install --no-save): jco 1.35.0,
#                componentize-js 0.23.0                                 (JavaScript)
#   PyPI         plugins/python/requirements.txt into plugins/python/.venv:
#                componentize-py 0.25.1                                 (Python)
#                plugins/python/requirements-test.txt: pytest 9.2.0     (its unit tests)
#   Go           1.24 or newer must be on the machine (GOOS=wasip1 with
#                go:wasmexport); it is not installed here.
# C and Go need nothing else: `kubewasm componentize` makes their core
# modules components (the WIT world's type and the WASI adapter are built
# into kubewasm), and the C bindings are generated ahead of time
# (plugins/c/sdk/plugin.{c,h}).
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$HOME/.cargo/bin:/usr/local/go/bin:$PATH"

APT_PACKAGES=(clang-19 lld-19 libclang-rt-19-dev-wasm32 wasi-libc)

step() { printf '==> %s\n' "$*"; }

# apt: only when a package is missing.
[[ ${1:-} != --apt-packages ]] || { echo "${APT_PACKAGES[@]}"; exit 0; }
. ../scripts/lib/apt.sh
apt_ensure "${APT_PACKAGES[@]}"

if command -v rustup >/dev/null; then
  step "rustup target add wasm32-wasip2 wasm32-wasip1"
  rustup target add wasm32-wasip2 wasm32-wasip1 >/dev/null 2>&1
fi

# npm: the versions of the lock file. Not `npm ci`: npm 11 refuses this lock
# as "out of sync" because some packages name platform binaries that were
# never published (e.g. jco-node-fs-win32-arm64-msvc), which no lock can
# hold; `npm install --no-save` installs the locked versions and leaves the
# lock untouched.
if [[ ! -d js/node_modules || js/package-lock.json -nt js/node_modules/.package-lock.json ]]; then
  step "npm install --no-save (plugins/js, from package-lock.json)"
  (cd js && npm install --no-save --no-audit --no-fund --loglevel=error)
fi

# PyPI: a venv of its own.
want=$(sed -n 's/^componentize-py==//p' python/requirements.txt)
if [[ "$(python/.venv/bin/componentize-py --version 2>/dev/null)" != "componentize-py $want"* ]]; then
  step "pip install -r python/requirements.txt (plugins/python/.venv)"
  python3 -m venv python/.venv
  python/.venv/bin/pip install --quiet --disable-pip-version-check -r python/requirements.txt
fi

# pytest, for the SDK's fake-host unit tests (test-languages.sh), in the
# same venv (the fake generates its bindings with componentize-py).
want=$(sed -n 's/^pytest==//p' python/requirements-test.txt)
if [[ "$(python/.venv/bin/python -m pytest --version 2>&1)" != "pytest $want" ]]; then
  step "pip install -r python/requirements-test.txt (plugins/python/.venv)"
  python/.venv/bin/pip install --quiet --disable-pip-version-check -r python/requirements-test.txt
fi

# Go: checked, not installed.
if ! command -v go >/dev/null; then
  echo "error: Go 1.24 or newer is needed for plugins/go (GOOS=wasip1, go:wasmexport)" >&2
  exit 1
fi
minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
if [[ "$minor" -lt 24 ]]; then
  echo "error: $(go env GOVERSION) is too old for plugins/go: Go 1.24 or newer is needed" >&2
  exit 1
fi

step "toolchains ready: $(clang-19 --version | head -1); node $(node --version); $(python/.venv/bin/componentize-py --version); $(go env GOVERSION)"
