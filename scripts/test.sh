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
# image's SBOM: one line per check (docs/book/src/security.md, "Supply chain").
step supply-chain bash scripts/supply-chain.sh
step fmt cargo fmt --all --check
(cd plugins && step fmt-plugins cargo fmt --all --check)
# The book (docs/book): it builds, and its Rust samples that can run do
# (`mdbook test`). In `cargo test` below: its links in the sources
# (tests/tests/cli.rs, docs_links_resolve) and in the rendered HTML
# (tests/tests/book.rs, rendered_links_resolve, which builds it again; both
# refuse a link out of the book), its `console` examples through the debug
# kubewasm binary (tests/tests/book.rs, console_examples_run, with trycmd),
# that its user pages carry no run dates, commit hashes or issue numbers and
# that the metrics, flags, config keys, Plugin fields and status reasons it
# names exist in the code (tests/tests/book.rs, against the generated
# references), and its generated references by the staleness tests of
# host/src/reference/ and host/src/main.rs.
step book-build mdbook build docs/book
step book-test mdbook test docs/book
step plugins bash plugins/build.sh
(cd plugins && step clippy-plugins cargo clippy --release --target wasm32-wasip2 --workspace -- -D warnings)
step clippy cargo clippy --workspace --all-targets -- -D warnings
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
step test-build cargo test --workspace --no-run
# One debug kubewasm for everything below: the one that build left in
# target/debug. The tests' dev-dependencies turn on tokio's `test-util`, so
# a `cargo build -p kubewasm` (what plugins/build-languages.sh and the test
# harness run when nothing is named) would compile tokio and everything on it
# (hyper, kube, wasmtime-wasi, the host) a second time.
target_dir="${CARGO_TARGET_DIR:-target}"
[[ "$target_dir" = /* ]] || target_dir="$root/$target_dir"
export KUBEWASM="$target_dir/debug/kubewasm" KUBEWASM_BIN="$target_dir/debug/kubewasm"
[[ -x $KUBEWASM ]] || { echo "error: $KUBEWASM is missing after the test build" >&2; exit 1; }
# The non-Rust plugins (C and Go componentized by that kubewasm), and the
# SDK-native unit tests (each SDK's fake host) of every language.
step plugins-languages bash plugins/build-languages.sh
step sdk-tests bash plugins/test-languages.sh
# The example plugins' fixtures through the kubewasm binary alone (the CI
# recipe of the book's "Testing a plugin", docs/book/src/testing.md).
step fixtures bash plugins/test-fixtures.sh
# Includes the fuzz targets (host/tests/fuzz.rs, and wit_fuzz.rs from the
# guest side): each replays its committed corpus or fixed programs, then runs
# random inputs for a bounded time (BOLERO_RANDOM_TEST_TIME_MS to change).
step test cargo test --workspace
echo "==> scripts/test.sh: $SECONDS s"
