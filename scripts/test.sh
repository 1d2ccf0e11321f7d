#!/usr/bin/env bash
# Sets up what is missing (scripts/setup.sh), then everything CI checks:
# the supply chain, formatting, lints, guest plugins, unit, integration and
# end-to-end tests.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PATH="$PATH:$HOME/.cargo/bin:/usr/local/go/bin"
. scripts/lib/step.sh
# cosign (10 CPU-minutes cold, mostly Go module downloads and compiles)
# builds in the background while the rest is set up and the Rust builds
# run; the tests wait for it.
mkdir -p .tools
# One build from scratch: incremental state is several GB of target/ (4.5 GB
# here) that a single run never reads back.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
bash scripts/install-cosign.sh > .tools/install-cosign.log 2>&1 &
cosign_build=$!
KUBEWASM_COSIGN_BACKGROUND=1 step setup bash scripts/setup.sh
# Licences, sources, bans and advisories of every dependency, and the
# image's SBOM: one line per check (docs/SECURITY.md, "Supply chain").
step supply-chain bash scripts/supply-chain.sh
step fmt cargo fmt --all --check
(cd plugins && step fmt-plugins cargo fmt --all --check)
# The book (docs/book): it builds, and its Rust samples that can run do
# (`mdbook test`). Its links are checked by tests/tests/cli.rs
# (docs_links_resolve) and its generated references by the staleness tests
# of host/src/reference/ and host/src/main.rs, in `cargo test` below.
step book-build mdbook build docs/book
step book-test mdbook test docs/book
step plugins bash plugins/build.sh
step plugins-languages bash plugins/build-languages.sh
(cd plugins && step clippy-plugins cargo clippy --release --target wasm32-wasip2 --workspace -- -D warnings)
# The SDK-native unit tests (each SDK's fake host) of every language.
step sdk-tests bash plugins/test-languages.sh
step clippy cargo clippy --workspace --all-targets -- -D warnings
# The example plugins' fixtures through the kubewasm binary alone (the CI
# recipe of the book's "Testing a plugin", docs/book/src/testing.md); the same debug build the
# integration tests below run.
step build cargo build -p kubewasm --bin kubewasm
step fixtures bash plugins/test-fixtures.sh
if ! step wait-cosign wait "$cosign_build"; then
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
step test-build cargo test --workspace --no-run
step test cargo test --workspace
echo "==> scripts/test.sh: $SECONDS s"
