#!/usr/bin/env bash
# Puts the example plugins' .wasm files (build outputs, not committed) where
# the plugin-folder overlays expect them:
#   deploy/examples/plugin-folder/plugins/{config-replicator,crashloop-watcher,namespace-defaults}.wasm
#   deploy/examples/add-plugin/plugins/recorder.wasm
# building them first (plugins/build.sh), or taking them from
# KUBEWASM_PLUGIN_ARTIFACTS (a folder of built .wasm files, as the tests
# use) when set. Their sidecars (NAME.yaml) are committed next to them.
# The base (deploy/, the host alone) needs none of this.
#
#   bash scripts/deploy-plugins.sh          # then: kubectl apply --server-side -k deploy/examples/plugin-folder/
#   bash scripts/deploy-plugins.sh --rbac   # also regenerate the committed RBAC of deploy/
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PATH="$PATH:$HOME/.cargo/bin"

if [[ -n "${KUBEWASM_PLUGIN_ARTIFACTS:-}" ]]; then
  built=$KUBEWASM_PLUGIN_ARTIFACTS
else
  bash plugins/build.sh >/dev/null
  built=plugins/target/wasm32-wasip2/release
fi
folder=deploy/examples/plugin-folder/plugins
copy() { # artifact dest
  install -m 0644 "$built/$1.wasm" "$2.tmp"
  mv "$2.tmp" "$2"
  printf '%8d  %s\n' "$(stat -c %s "$2")" "$2"
}
copy config_replicator "$folder/config-replicator.wasm"
copy crashloop_watcher "$folder/crashloop-watcher.wasm"
copy namespace_defaults "$folder/namespace-defaults.wasm"
copy recorder deploy/examples/add-plugin/plugins/recorder.wasm

if [[ "${1:-}" == "--rbac" ]]; then
  cargo build -q -p kubewasm --bin kubewasm
  bin="${CARGO_TARGET_DIR:-target}/debug/kubewasm"
  [[ "$bin" = /* ]] || bin="$root/$bin"
  # The host alone: its Lease, --metrics-auth and Plugin objects.
  "$bin" rbac --host-only > deploy/base/rbac.yaml
  "$bin" rbac --plugins "$folder" \
    --name kubewasm-plugins --service-account kubewasm --plugins-only \
    > deploy/examples/plugin-folder/rbac.yaml
  "$bin" rbac --plugins deploy/examples/add-plugin/plugins \
    --name kubewasm-recorder --service-account kubewasm --plugins-only \
    > deploy/examples/add-plugin/rbac.yaml
  # The plugin image's config-replicator registers what the folder's does.
  image="$(mktemp -d)"
  trap 'rm -rf "$image"' EXIT
  cp "$folder/config-replicator.wasm" "$folder/config-replicator.yaml" "$image/"
  "$bin" rbac --plugins "$image" \
    --name kubewasm-plugins --service-account kubewasm --plugins-only \
    > deploy/examples/plugin-image/rbac.yaml
  echo "regenerated the RBAC of deploy/base, deploy/examples/plugin-folder, add-plugin and plugin-image"
fi
