#!/usr/bin/env bash
# Sets up what is missing (scripts/setup.sh), then everything CI checks:
# the supply chain, formatting, lints, guest plugins, unit, integration and
# end-to-end tests.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PATH="$PATH:$HOME/.cargo/bin:/usr/local/go/bin"
bash scripts/setup.sh
# Licences, sources, bans and advisories of every dependency, and the
# image's SBOM: one line per check (docs/SECURITY.md, "Supply chain").
bash scripts/supply-chain.sh
cargo fmt --all --check
(cd plugins && cargo fmt --all --check)
bash plugins/build.sh
bash plugins/build-languages.sh
(cd plugins && cargo clippy --release --target wasm32-wasip2 --workspace -- -D warnings)
(cd plugins && cargo test -p kubewasm-sdk)
cargo clippy --workspace --all-targets -- -D warnings
# Includes the fuzz targets (host/tests/fuzz.rs): each replays its committed
# corpus, then runs random inputs for 3 s (BOLERO_RANDOM_TEST_TIME_MS to change).
cargo test --workspace
