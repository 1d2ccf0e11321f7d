#!/usr/bin/env bash
# Installs what the checks and tests need on a fresh machine (as root, for apt) (idempotent;
# quick when everything is in place): the Rust pieces, the pinned guest
# toolchains of the non-Rust plugins, and the test control plane (a real
# kube-apiserver + etcd built from the official Go modules).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
# Where rustup and the Go tarball install, in case a login profile has not run.
export PATH="$PATH:$HOME/.cargo/bin:/usr/local/go/bin"
command -v cargo >/dev/null || { echo "Rust is required: https://rustup.rs (or run .ci/run)" >&2; exit 1; }
command -v go >/dev/null || { echo "Go is required for the test control plane (tests/controlplane)" >&2; exit 1; }
rustup target add wasm32-wasip2
rustup component add rustfmt clippy
# Pinned toolchains of the JavaScript, Python, C and Go plugins (apt,
# npm from the lock file, pip into plugins/python/.venv, cargo install --locked).
bash plugins/install-toolchains.sh
# The test control plane: a no-op when the binary is up to date; a cold
# build takes about 10 minutes and 1.9 GB of memory on 2 cores.
bash tests/controlplane/build.sh
