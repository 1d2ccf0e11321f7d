#!/usr/bin/env bash
# Puts the example plugins' .wasm files (build outputs, not committed) where
# the kustomize base and the add-plugin overlay expect them:
#   deploy/base/plugins/{config-replicator,crashloop-watcher,namespace-defaults}.wasm
#   deploy/examples/add-plugin/plugins/recorder.wasm
# building them first (plugins/build.sh). Their sidecars (NAME.yaml) are
# committed next to them.
#
#   bash scripts/deploy-plugins.sh          # then: kubectl apply -k deploy/
#   bash scripts/deploy-plugins.sh --rbac   # also regenerate the committed RBAC
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PATH="$PATH:$HOME/.cargo/bin"

bash plugins/build.sh >/dev/null
built=plugins/target/wasm32-wasip2/release
copy() { # artifact dest
  install -m 0644 "$built/$1.wasm" "$2.tmp"
  mv "$2.tmp" "$2"
  printf '%8d  %s\n' "$(stat -c %s "$2")" "$2"
}
copy config_replicator deploy/base/plugins/config-replicator.wasm
copy crashloop_watcher deploy/base/plugins/crashloop-watcher.wasm
copy namespace_defaults deploy/base/plugins/namespace-defaults.wasm
copy recorder deploy/examples/add-plugin/plugins/recorder.wasm

if [[ "${1:-}" == "--rbac" ]]; then
  cargo build -q -p kubewasm --bin kubewasm
  bin="${CARGO_TARGET_DIR:-target}/debug/kubewasm"
  [[ "$bin" = /* ]] || bin="$root/$bin"
  "$bin" rbac --plugins deploy/base/plugins > deploy/base/rbac.yaml
  "$bin" rbac --plugins deploy/examples/add-plugin/plugins \
    --name kubewasm-recorder --service-account kubewasm --plugins-only \
    > deploy/examples/add-plugin/rbac.yaml
  echo "regenerated deploy/base/rbac.yaml and deploy/examples/add-plugin/rbac.yaml"
fi
