#!/usr/bin/env bash
# Sets up what is missing (scripts/setup.sh), then everything CI checks:
# the supply chain, formatting, lints, guest plugins, unit, integration and
# end-to-end tests.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PATH="$PATH:$HOME/.cargo/bin:/usr/local/go/bin"
# cosign (10 CPU-minutes cold, mostly Go module downloads and compiles)
# builds in the background while the rest is set up and the Rust builds
# run; the tests wait for it.
mkdir -p .tools
# One build from scratch: incremental state is several GB of target/ (4.5 GB
# here) that a single run never reads back.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
bash scripts/install-cosign.sh > .tools/install-cosign.log 2>&1 &
cosign_build=$!
KUBEWASM_COSIGN_BACKGROUND=1 bash scripts/setup.sh
# Licences, sources, bans and advisories of every dependency, and the
# image's SBOM: one line per check (docs/SECURITY.md, "Supply chain").
bash scripts/supply-chain.sh
cargo fmt --all --check
(cd plugins && cargo fmt --all --check)
# The book (docs/book): it builds, and its Rust samples that can run do
# (`mdbook test`). Its links are checked by tests/tests/cli.rs
# (docs_links_resolve) and its generated references by the staleness tests
# of host/src/reference/ and host/src/main.rs, in `cargo test` below.
mdbook build docs/book
mdbook test docs/book
bash plugins/build.sh
bash plugins/build-languages.sh
(cd plugins && cargo clippy --release --target wasm32-wasip2 --workspace -- -D warnings)
# The SDK-native unit tests (each SDK's fake host) of every language.
bash plugins/test-languages.sh
cargo clippy --workspace --all-targets -- -D warnings
# The example plugins' fixtures through the kubewasm binary alone (the CI
# recipe of the book's "Testing a plugin", docs/book/src/testing.md); the same debug build the
# integration tests below run.
cargo build -p kubewasm --bin kubewasm
bash plugins/test-fixtures.sh
if ! wait "$cosign_build"; then
  cat .tools/install-cosign.log >&2
  echo "error: building cosign failed (log above); the signature interoperability tests need it" >&2
  exit 1
fi
# On CI (KUBEWASM_CI_TRIM=1, set by .ci/run) the Go build and module caches
# of the control plane and cosign (about 6.5 GB), and apt's downloaded
# packages, are dropped before the largest Rust build: their binaries are
# built, tests/controlplane/build.sh is a no-op from here on, and the Go
# plugins the tests build need only the standard library. Not done on a
# developer's machine, where the caches make the next setup quick.
if [[ "${KUBEWASM_CI_TRIM:-}" == 1 ]]; then
  df -h . | sed -n '2s/^/disk before trimming: /p'
  go clean -cache -modcache
  apt-get clean 2>/dev/null || true
  df -h . | sed -n '2s/^/disk after trimming: /p'
fi
# Includes the fuzz targets (host/tests/fuzz.rs, and wit_fuzz.rs from the
# guest side): each replays its committed corpus or fixed programs, then runs
# random inputs for a bounded time (BOLERO_RANDOM_TEST_TIME_MS to change).
cargo test --workspace
