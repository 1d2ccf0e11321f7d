#!/usr/bin/env bash
# Builds the host and the example plugins, runs them once over the demo
# cluster in examples/cluster (copied to target/demo, so the repository
# stays clean), and shows what each plugin did.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
command -v cargo >/dev/null || { echo "Rust is required: https://rustup.rs" >&2; exit 1; }
bash plugins/build.sh >/dev/null
cargo build --release -p kubewasm
target_dir="${CARGO_TARGET_DIR:-$root/target}"
kubewasm="$target_dir/release/kubewasm"
demo="$root/target/demo"
rm -rf "$demo" && mkdir -p "$demo/plugins"
cp -r examples/cluster "$demo/cluster"
for p in namespace-defaults crashloop-watcher config-replicator; do
  cp "plugins/target/wasm32-wasip2/release/${p//-/_}.wasm" "$demo/plugins/$p.wasm"
  cp "examples/plugins/$p.yaml" "$demo/plugins/$p.yaml"
done
"$kubewasm" run --local "$demo/cluster" --plugins "$demo/plugins" --until-idle
echo
echo "== objects the plugins created (new files in the cluster folder)"
(cd "$demo/cluster" && find . -name '*.yaml' -newer "$demo/plugins/config-replicator.yaml" | sort)
echo
echo "== events recorded (events.log)"
cat "$demo/cluster/events.log" 2>/dev/null || echo "(none)"
echo
echo "== annotations on Deployment team-a/shop"
grep -A3 'annotations:' "$demo/cluster/team-a/shop.yaml" | head -4
echo
# The same run, live, with the web view (kubewasm run --ui, on its own
# loopback listener): KEEP=1 keeps it.
ui="127.0.0.1:${UI_PORT:-9091}"
live=("$kubewasm" run --local "$demo/cluster" --plugins "$demo/plugins" --ui --ui-addr "$ui"
  --metrics-addr "127.0.0.1:${METRICS_PORT:-9090}")
if [[ "${KEEP:-}" == 1 ]]; then
  # exec keeps this script's PID: killing it stops the host (SIGTERM drains it).
  echo "== the host keeps running (edit files in $demo/cluster, drop plugins into $demo/plugins)"
  echo "== stop it with Ctrl-C, or kill $$ (its PID; a script started in the background ignores Ctrl-C)"
  echo "== web view: http://$ui/ui"
  exec "${live[@]}"
fi
echo "== web view: KEEP=1 bash scripts/demo.sh (or ${live[*]}), then open http://$ui/ui"
