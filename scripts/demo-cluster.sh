#!/usr/bin/env bash
# The cluster demo: a real single-node Kubernetes cluster on this machine
# (kube-apiserver, etcd, kube-controller-manager, kube-scheduler, a kubelet
# with Debian's containerd; tests/controlplane --node), kubewasm running in
# it as a Deployment (2 replicas, leader election, the image built from the
# Containerfile, deploy/examples/single-node), and what its example plugins
# did. Needs root (apt, containerd) and Go; installs what is missing.
# Stops the cluster at the end. KEEP=1 keeps it running until the script is
# stopped: Ctrl-C in the foreground, else `kill PID` with the PID it prints
# (a script started in the background ignores Ctrl-C).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PATH="$PATH:$HOME/.cargo/bin:/usr/local/go/bin"
step() { printf '\n==> %s\n' "$*"; }
start=$SECONDS

step "setting up the node's packages and building the test cluster (cold: about 15 min)"
bash scripts/setup-node.sh
if ! kubectl version --client >/dev/null 2>&1 && ! command -v kustomize >/dev/null; then
  GOBIN=/usr/local/bin go install sigs.k8s.io/kustomize/kustomize/v5@v5.5.0
fi
step "building the example plugins and the kubewasm image"
bash plugins/build.sh >/dev/null
bash scripts/deploy-plugins.sh >/dev/null
target_dir="${CARGO_TARGET_DIR:-$root/target}"
image="$target_dir/kubewasm-image.tar"
IMAGE_ARCHIVE=docker-archive bash scripts/image.sh "$image"

step "starting the cluster"
cp=tests/controlplane/bin/kubewasm-controlplane
dir="$(mktemp -d /tmp/kubewasm-demo-XXXXXX)"
exec 3< <(tail -f /dev/null)  # keeps the control plane's stdin open
"$cp" --dir "$dir" --node --exit-on-stdin-eof --remove-dir <&3 >"$dir.ready" 2>"$dir.log" &
cp_pid=$!
stop() {
  if kill -0 "$cp_pid" 2>/dev/null; then
    echo "stopping the cluster..."
    kill -TERM "$cp_pid"; wait "$cp_pid" || true
  fi
  rm -f "$dir.ready" "$dir.log"
}
trap stop EXIT
until grep -q READY "$dir.ready" 2>/dev/null; do
  kill -0 "$cp_pid" 2>/dev/null || { cat "$dir.log" >&2; exit 1; }
  sleep 0.5
done
kc="$dir/admin.kubeconfig"
port=$(sed -n 's/.*"server":"https:\/\/127.0.0.1:\([0-9]*\)".*/\1/p' "$dir.ready")
echo "cluster up in $((SECONDS - start))s in total; kubeconfig: $kc"

step "importing the image and applying deploy/examples/single-node"
ctr --address "$dir/node/containerd/containerd.sock" -n k8s.io images import --all-platforms "$image" >/dev/null
if kubectl version --client >/dev/null 2>&1; then render=(kubectl kustomize); else render=(kustomize build); fi
# The overlay has no web view; the demo turns it on, on each replica's own
# free port of this machine's loopback (logged as `web view serving url=`).
"${render[@]}" deploy/examples/single-node | sed "s/APISERVER_PORT/\"$port\"/" |
  sed 's/^\( *\)- --metrics-auth=false$/&\n\1- --ui\n\1- --ui-addr=127.0.0.1:0/' |
  "$cp" apply --kubeconfig "$kc" --field-manager demo
deployed=$SECONDS

step "waiting for 2 Ready replicas"
get() { "$cp" get --kubeconfig "$kc" "$@"; }
until [[ "$(get deployments.apps kubewasm kubewasm '{.status.availableReplicas}')" == 2 ]]; do
  (( SECONDS - deployed < 300 )) || { echo "not Ready after 300s" >&2; exit 1; }
  sleep 1
done
echo "2 replicas Ready $((SECONDS - deployed))s after apply; leader: $(get leases.coordination.k8s.io kubewasm kubewasm '{.spec.holderIdentity}')"

step "giving the plugins something to do"
"$cp" apply --kubeconfig "$kc" --field-manager demo <<'YAML'
apiVersion: v1
kind: Namespace
metadata: {name: team-a, labels: {kubewasm.io/defaults: enabled, tenant: "yes"}}
---
apiVersion: v1
kind: Namespace
metadata: {name: shared}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: org-settings, namespace: shared, labels: {kubewasm.io/replicate: "true"}}
data: {region: eu-west, support: "24x7"}
YAML
until [[ -n "$(get configmaps org-settings team-a '{.metadata.name}')" && -n "$(get resourcequotas default-quota team-a '{.metadata.name}')" ]]; do
  (( SECONDS - deployed < 400 )) || { echo "the plugins did not act within 400s" >&2; exit 1; }
  sleep 1
done

step "what the plugins did (field managers show who wrote what)"
for o in "resourcequotas default-quota team-a" "networkpolicies.networking.k8s.io default-deny team-a" "configmaps org-settings team-a"; do
  set -- $o
  echo "$1/$2 in $3: managers $(get "$1" "$2" "$3" '{.metadata.managedFields[*].manager}')"
done

step "the web view (--ui) of the leader"
# hostNetwork: each replica's web view is on a free loopback port of this
# machine, logged as `web view serving url=...` (on the Pod network: --ui,
# then kubectl port-forward -n kubewasm pod/<the leader's Pod> 9091 and
# http://127.0.0.1:9091/ui; `kubewasm status` names the leader's Pod).
leader=$(get leases.coordination.k8s.io kubewasm kubewasm '{.spec.holderIdentity}')
leader_pod=${leader%_*}
ui_url=$(grep -rhoE '"url":"http://[^"]+/ui"' "$dir/node/pod-logs/" 2>/dev/null |
  sed 's/.*"url":"//; s/"$//' | head -1)
for log in "$dir/node/pod-logs/kubewasm_${leader_pod}_"*/; do
  found=$(grep -rhoE '"url":"http://[^"]+/ui"' "$log" 2>/dev/null | sed 's/.*"url":"//; s/"$//' | tail -1)
  [[ -n "$found" ]] && ui_url=$found
done
echo
echo "demo done in $((SECONDS - start))s"
echo "web view of ${leader_pod:-the leader}: ${ui_url:-(not found in the pod logs)}"
[[ "${KEEP:-}" == 1 ]] || echo "(KEEP=1 bash scripts/demo-cluster.sh keeps the cluster, and the page, running)"
if [[ "${KEEP:-}" == 1 ]]; then
  echo "the cluster keeps running (KUBECONFIG=$kc); stop it with Ctrl-C, or kill $$ (this script's PID; a script started in the background ignores Ctrl-C)"
  wait "$cp_pid"
fi
