#!/usr/bin/env bash
# What the real single-node test cluster needs (tests/controlplane --node),
# on a fresh Debian 12 machine as root: Debian's containerd, runc and CNI
# plugins and a static busybox (for the test images), and the cluster's
# binaries built from the official Go modules. Idempotent; run by
# scripts/setup.sh and scripts/demo-cluster.sh.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null || { echo "Go is required for the test cluster (tests/controlplane)" >&2; exit 1; }
# The test node's runtime (tests/controlplane --node): Debian's containerd,
# runc and CNI plugins, and a static busybox for the test images. Nothing is
# started or enabled here: the harness runs containerd with its own config.
node_packages=(containerd runc containernetworking-plugins busybox-static)
missing=()
for p in "${node_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "==> apt-get install ${missing[*]}"
  sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  # A system-wide containerd the package may start is not used (and does
  # not collide: the harness's has its own root, state and socket).
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The test cluster: a no-op when the binaries are up to date; a cold build
# takes about 15 minutes and 3 GB of memory on 2 cores (see
# tests/controlplane/README.md).
bash tests/controlplane/build.sh
