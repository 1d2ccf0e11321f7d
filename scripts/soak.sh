#!/usr/bin/env bash
# The soak run (not part of the test command): the release host against the
# real API server with the example plugins, under steady ConfigMap churn,
# config-replicator swapped every 5 minutes; prints the host's RSS every 10 s,
# its slope, and whether the copies converged on their sources (nothing lost).
#
#   bash scripts/soak.sh                       # 30 min at 200 changes/s
#   bash scripts/soak.sh --minutes 5 --rate 50 --swap-every-s 60
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PATH="$PATH:$HOME/.cargo/bin:/usr/local/go/bin"
target="${CARGO_TARGET_DIR:-target}"
[[ "$target" = /* ]] || target="$root/$target"
bash tests/controlplane/build.sh >/dev/null
bash plugins/build.sh >/dev/null
# KUBEWASM_BIN names the host to soak (e.g. the image's musl build); else
# the release build.
[[ -n "${KUBEWASM_BIN:-}" ]] || cargo build -q --release -p kubewasm --bin kubewasm
cargo build -q --release -p kubewasm-tests --bin soak
KUBEWASM_BIN="${KUBEWASM_BIN:-$target/release/kubewasm}" exec "$target/release/soak" "$@"
