#!/usr/bin/env bash
# The cross toolchain of the aarch64 release binary, from the registries:
# zig (PyPI `ziglang`) as the C compiler and linker of the aarch64 musl
# target (ring and jemalloc compile C), driven by cargo-zigbuild (PyPI),
# both pinned into .tools/venv, and Rust's aarch64-unknown-linux-musl
# target. scripts/release.sh builds the aarch64 binary when these are
# installed (RELEASE_AARCH64=0 skips it, =1 requires it). Not part of
# scripts/setup.sh: CI builds no release binary.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PATH="$PATH:$HOME/.cargo/bin"
bash scripts/rust-toolchain.sh
rustup target list --installed | grep -qx aarch64-unknown-linux-musl \
  || rustup target add aarch64-unknown-linux-musl
[[ -x .tools/venv/bin/python ]] || python3 -m venv .tools/venv
echo "==> pip install ziglang==0.13.0.post1 cargo-zigbuild==0.24.1 (.tools/venv)"
.tools/venv/bin/pip install --quiet --disable-pip-version-check \
  ziglang==0.13.0.post1 cargo-zigbuild==0.24.1
