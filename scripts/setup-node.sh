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
# The test node's runtime (tests/controlplane --node): Debian's containerd,
# runc and CNI plugins, and a static busybox for the test images. Nothing is
# started or enabled here: the harness runs containerd with its own config.
node_packages=(containerd runc containernetworking-plugins busybox-static)
[[ ${1:-} != --apt-packages ]] || { echo "${node_packages[@]}"; exit 0; }
# A system-wide containerd the package may start is not used (and does not
# collide: the harness's has its own root, state and socket).
. scripts/lib/apt.sh
apt_ensure "${node_packages[@]}"
command -v go >/dev/null || { echo "Go is required for the test cluster (tests/controlplane)" >&2; exit 1; }
# The test cluster: a no-op when the binaries are up to date; a cold build
# takes about 15 minutes and 3 GB of memory on 2 cores (see
# tests/controlplane/README.md).
bash tests/controlplane/build.sh
