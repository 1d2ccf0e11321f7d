#!/usr/bin/env bash
# Installs the pinned mdbook that builds and tests the book (docs/book),
# into cargo's bin (idempotent: kept when already at its version). Not in
# Debian's archive nor on PyPI, so from crates.io; without the default
# `serve` and `watch` features (no web server, no file watcher: CI only
# builds and tests), which leaves out tokio, axum and notify.
set -euo pipefail
export PATH="$PATH:$HOME/.cargo/bin"

MDBOOK=0.5.4

if [[ "$(mdbook --version 2>/dev/null)" != "mdbook v$MDBOOK" ]]; then
  printf '==> %s\n' "cargo install mdbook@$MDBOOK"
  # Built in a temporary directory that cargo removes, whatever
  # CARGO_TARGET_DIR says: only the binary stays.
  # At opt-level 1: it renders a book of some forty pages, where the
  # build's time is what counts.
  (unset CARGO_TARGET_DIR && CARGO_PROFILE_RELEASE_OPT_LEVEL=1 cargo install --quiet --locked \
    --no-default-features --features search "mdbook@$MDBOOK")
fi
