#!/usr/bin/env bash
# Installs the Rust toolchain that rust-toolchain.toml pins, with its
# components and targets, when it is missing. rustup would do it on first
# use only where auto-install is on (RUSTUP_AUTO_INSTALL=0 turns it off, and
# a fresh machine has only the `stable` rustup installed). Quick when present.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:$HOME/.cargo/bin"
if command -v rustup >/dev/null; then
  rustup --quiet toolchain install --no-self-update >/dev/null
fi
