#!/usr/bin/env bash
# Installs what the checks and tests need on a fresh machine (as root, for apt) (idempotent;
# quick when everything is in place): the Rust pieces, the pinned guest
# toolchains of the non-Rust plugins, and the test control plane (a real
# kube-apiserver + etcd built from the official Go modules).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
# Where rustup and the Go tarball install, in case a login profile has not run.
export PATH="$PATH:$HOME/.cargo/bin:/usr/local/go/bin"
. scripts/lib/step.sh
command -v cargo >/dev/null || { echo "Rust is required: https://rustup.rs (or run .ci/run)" >&2; exit 1; }
command -v go >/dev/null || { echo "Go is required for the test control plane (tests/controlplane)" >&2; exit 1; }
# The pinned toolchain with its components and targets (rust-toolchain.toml).
step rust-toolchain bash scripts/rust-toolchain.sh
# kustomize for the deploy/ tests: kubectl's built-in one, else a pinned
# build from the Go module proxy (no kubectl in Debian's archive; its
# kubernetes-client is 1.20, whose kustomize is too old for deploy/).
if ! kubectl version --client >/dev/null 2>&1 && ! command -v kustomize >/dev/null; then
  GOBIN=/usr/local/bin step kustomize go install sigs.k8s.io/kustomize/kustomize/v5@v5.5.0
fi
# The web view's browser tests (tests/tests/ui.rs): Debian's chromium, and
# playwright-core from tests/ui's lock file (no browser download).
if ! dpkg-query -W -f='${Status}' chromium 2>/dev/null | grep -q "install ok installed"; then
  sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
if [[ ! -d tests/ui/node_modules/playwright-core || tests/ui/package-lock.json -nt tests/ui/node_modules/.package-lock.json ]]; then
  (cd tests/ui && npm ci --no-audit --no-fund --loglevel=error)
fi
# The supply-chain checks' tools (scripts/supply-chain.sh), pinned: cargo-deny
# into cargo's bin (6 minutes of CPU cold), pip-audit and the CycloneDX
# schema validator into a venv of their own (.tools/venv).
step supply-chain-tools bash scripts/install-supply-chain-tools.sh
# mdbook, pinned, into cargo's bin (3.7 minutes of CPU cold): test.sh builds
# and tests the book (docs/book).
step mdbook bash scripts/install-mdbook.sh
# Pinned toolchains of the JavaScript, Python, C and Go plugins (apt,
# npm from the lock file, pip into plugins/python/.venv; C and Go need only
# their compiler and kubewasm).
step guest-toolchains bash plugins/install-toolchains.sh
# The OCI registry of the plugin distribution tests (tests/tests/oci.rs):
# Debian's docker-registry and htpasswd (scripts/setup-registry.sh).
step registry bash scripts/setup-registry.sh
# The cosign CLI of the signature interoperability tests
# (tests/tests/oci_signatures.rs), built from its Go module into .tools/bin.
# scripts/test.sh starts this build in the background (its module downloads
# overlap the Rust builds) and says so with KUBEWASM_COSIGN_BACKGROUND=1.
if [[ "${KUBEWASM_COSIGN_BACKGROUND:-}" != 1 ]]; then
  step cosign bash scripts/install-cosign.sh
fi
# The test cluster: the node's packages (containerd, runc, CNI plugins,
# busybox-static) and the control-plane binaries (scripts/setup-node.sh).
step node bash scripts/setup-node.sh
