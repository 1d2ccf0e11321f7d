#!/usr/bin/env bash
# Compares `kubewasm run --wire auto` (protobuf for built-in kinds) with
# `--wire json` on a running API server: for each wire, the CPU (user +
# system) kubewasm spent from its start to its Pod informer's "cache synced"
# line, the wall time to that line, and the kube-apiserver's CPU over the
# same span. A hand-run comparison, not a test: load the Pods first (e.g.
# bench's loader: `load-pods --kubeconfig K --count 10000`).
#
#   bash scripts/wire-compare.sh --kubeconfig K --apiserver-pid PID \
#     [--kubewasm BIN] [--noop PLUGIN.wasm] [--rounds N] [--initial-list stream|paged]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
kubewasm="${CARGO_TARGET_DIR:-$root/target}/debug/kubewasm"
noop="$root/plugins/target/wasm32-wasip2/release/noop.wasm"
rounds=3
initial_list=stream
kubeconfig=""
apiserver=""
while [ $# -gt 0 ]; do
  case "$1" in
    --kubeconfig) kubeconfig="$2"; shift 2 ;;
    --apiserver-pid) apiserver="$2"; shift 2 ;;
    --kubewasm) kubewasm="$2"; shift 2 ;;
    --noop) noop="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --initial-list) initial_list="$2"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "wire-compare.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$kubeconfig" ] && [ -n "$apiserver" ] || { echo "wire-compare.sh: --kubeconfig and --apiserver-pid are required" >&2; exit 2; }

tick="$(getconf CLK_TCK)"
# utime + stime of a process, in seconds.
cpu() { awk -v t="$tick" '{ sub(/.*\) /, ""); print ($12 + $13) / t }' "/proc/$1/stat"; }

work="$(mktemp -d)"
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/plugins"
cp "$noop" "$work/plugins/noop.wasm"
printf 'access:\n  - {kinds: [pods], verbs: [read]}\n' >"$work/plugins/noop.yaml"

run() { # wire
  local log="$work/log-$1" before after start end cpu_host
  : >"$log"
  before="$(cpu "$apiserver")"
  start="$(date +%s.%N)"
  RUST_LOG=info "$kubewasm" run --plugins "$work/plugins" --cache-dir "$work/cache" \
    --kubeconfig "$kubeconfig" --initial-list "$initial_list" --wire "$1" \
    --log-format text --metrics-addr off >/dev/null 2>"$log" &
  pid=$!
  until grep -q 'cache synced.*informer=pods ' "$log"; do
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; echo "wire-compare.sh: kubewasm exited" >&2; exit 1; }
    sleep 0.05
  done
  end="$(date +%s.%N)"
  cpu_host="$(cpu "$pid")"
  after="$(cpu "$apiserver")"
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
  printf '%-5s synced %6.2f s  kubewasm CPU %6.2f s  kube-apiserver CPU %6.2f s\n' \
    "$1" "$(echo "$end - $start" | bc)" "$cpu_host" "$(echo "$after - $before" | bc)"
}

# A warm-up: the plugin's compile lands in the cache.
run json >/dev/null
for round in $(seq 1 "$rounds"); do
  echo "round $round ($initial_list lists):"
  run auto
  run json
done
