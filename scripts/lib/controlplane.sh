# The test control plane (tests/controlplane) for the benchmark scripts:
# started in a fresh folder, stopped and removed when the script exits.
# Sets cp_dir, cp_pid and kubeconfig (its admin kubeconfig).
# Usage: start_controlplane NAME [kubewasm-controlplane arguments...]
# (NAME prefixes the errors: the calling script's name.)
start_controlplane() {
  local name=$1
  shift
  cp_dir="$(mktemp -d)"
  cp_pid=""
  trap stop_controlplane EXIT
  tests/controlplane/bin/kubewasm-controlplane --dir "$cp_dir/cp" "$@" \
    >"$cp_dir/ready" 2>"$cp_dir/controlplane.log" &
  cp_pid=$!
  for _ in $(seq 1 300); do
    grep -q "KUBEWASM-CONTROLPLANE READY" "$cp_dir/ready" 2>/dev/null && break
    kill -0 "$cp_pid" 2>/dev/null || { cat "$cp_dir/controlplane.log" >&2; echo "$name: the control plane exited" >&2; exit 1; }
    sleep 0.5
  done
  kubeconfig="$(sed -n 's/.*"adminKubeconfig":"\([^"]*\)".*/\1/p' "$cp_dir/ready")"
  [ -n "$kubeconfig" ] || { echo "$name: the control plane never became ready" >&2; exit 1; }
}

stop_controlplane() {
  if [ -n "${cp_pid:-}" ]; then
    kill -TERM "$cp_pid" 2>/dev/null || true
    wait "$cp_pid" 2>/dev/null || true
  fi
  rm -rf "${cp_dir:-}"
}
