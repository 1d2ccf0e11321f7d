#!/usr/bin/env bash
# The shards capacity benchmark (not in CI; about 15 minutes on 2 cores):
# bench/src/bin/shard_bench.rs against the test control plane (a real
# kube-apiserver and etcd), with a release kubewasm. Three sets:
#
# - heavy: the heavy plugin (plugins/testing/heavy: a fixed CPU cost per
#   delta and one server-side apply) over ConfigMaps, 3 shards, 1, 2 and 3
#   replicas, and the takeover time of a killed shard holder; then the same
#   with dry-run actions (the CPU alone);
# - realistic: the realistic plugin (a cache read and one patch per Pod)
#   over Pods, 3 shards, 1, 2 and 3 replicas;
# - simulation: many replicas whose cost is a wait (the heavy plugin with
#   no CPU work and a 2 ms wait per delta, standing in for a slow API) and
#   dry-run actions, 8 and 16 shards: what the shards scale to when the
#   cores are not what runs out.
#
# Usage: bash scripts/shard-capacity.sh [--objects N] [--work ROUNDS]
#        [--sets heavy,realistic,simulation] [--kubewasm BIN]
# Output: target/bench/shards.jsonl (one line per run) and a table on stdout.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PATH="$PATH:$HOME/.cargo/bin:/usr/local/go/bin"

objects=3000
work=200000
sets=heavy,realistic,simulation
kubewasm=""
while [ $# -gt 0 ]; do
  case "$1" in
    --objects) objects="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --sets) sets="$2"; shift 2 ;;
    --kubewasm) kubewasm="$2"; shift 2 ;;
    *) echo "shard-capacity.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done

target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
out="$target/bench"
mkdir -p "$out"

echo "shard-capacity.sh: building" >&2
bash plugins/build.sh -p heavy -p realistic >/dev/null
if [ -z "$kubewasm" ]; then
  cargo build --release -p kubewasm --bin kubewasm
  kubewasm="$target/release/kubewasm"
fi
(cd bench && CARGO_TARGET_DIR="$target/bench-build" cargo build --release --bin shard-bench)
bench="$target/bench-build/release/shard-bench"
bash tests/controlplane/build.sh

. scripts/lib/controlplane.sh
start_controlplane shard-capacity.sh

wasm="$root/plugins/target/wasm32-wasip2/release"
rm -f "$out/shards.jsonl"
run() {
  "$bench" --kubeconfig "$kubeconfig" --kubewasm "$kubewasm" --out "$out/shards.jsonl" \
    --work-dir "$out/shards" "$@"
}
case ",$sets," in *,heavy,*)
  run --label heavy --plugin "$wasm/heavy.wasm" --objects "$objects" --work "$work" \
    --shards 3 --replicas 1,2,3 --takeover
  # The same work with dry-run actions: the plugin's CPU alone, no wait
  # on the API server per delta.
  run --label heavy-dry-run --plugin "$wasm/heavy.wasm" --objects "$objects" --work "$work" \
    --dry-run --shards 3 --replicas 1,2,3 ;;
esac
case ",$sets," in *,realistic,*)
  run --label realistic --plugin "$wasm/realistic.wasm" --objects "$objects" \
    --shards 3 --replicas 1,2,3 ;;
esac
case ",$sets," in *,simulation,*)
  run --label sim-8 --plugin "$wasm/heavy.wasm" --objects "$objects" --work 0 \
    --wait-micros 2000 --dry-run --shards 8 --replicas 1,2,4,8 --takeover
  run --label sim-16 --plugin "$wasm/heavy.wasm" --objects "$objects" --work 0 \
    --wait-micros 2000 --dry-run --shards 16 --replicas 1,4,8,16 --takeover ;;
esac
echo "shard-capacity.sh: $out/shards.jsonl" >&2
