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
# Debian's packages of every step below in one apt transaction (one index
# download instead of one per step; each step still checks its own and finds
# them): chromium for the web view's browser tests (tests/tests/ui.rs),
# buildah for the image (scripts/image.sh), and each script's --apt-packages.
. scripts/lib/apt.sh
apt_packages=(chromium buildah
  $(bash scripts/setup-registry.sh --apt-packages)
  $(bash plugins/install-toolchains.sh --apt-packages)
  $(bash scripts/setup-node.sh --apt-packages))
step apt apt_ensure "${apt_packages[@]}"

# The Go builds run in the background, beside the steps below that mostly
# wait on npm and PyPI: the test cluster (tests/controlplane, about 15
# minutes on 2 cores cold; scripts/setup-node.sh) and the tests' Go tools
# (tests/tools/build.sh: helm, kubectl at the test cluster's version with
# its kustomize for the deploy/ tests, kstatus, into .tools/bin; about 10
# minutes cold). Each one's output is printed when it ends.
logs=.tools/setup-logs
mkdir -p "$logs"
declare -A background=()
in_background() {
  local name=$1
  shift
  ( step "$name" "$@" ) >"$logs/$name.log" 2>&1 &
  background[$name]=$!
}
in_background node bash scripts/setup-node.sh
# The Kubernetes 1.36 API server the tests of its alpha sharded list and
# watch run on (about 4.5 minutes cold on 2 cores).
in_background apiserver-1.36 bash tests/controlplane/build.sh --next
in_background go-tools bash tests/tools/build.sh

# playwright-core for the browser tests, from tests/ui's lock file (no
# browser download: Debian's chromium).
if [[ ! -d tests/ui/node_modules/playwright-core || tests/ui/package-lock.json -nt tests/ui/node_modules/.package-lock.json ]]; then
  (cd tests/ui && step ui-npm npm ci --no-audit --no-fund --loglevel=error)
fi
# The supply-chain checks' tools (scripts/supply-chain.sh), pinned: cargo-deny
# into cargo's bin, pip-audit and the CycloneDX schema validator into a venv
# of their own (.tools/venv).
step supply-chain-tools bash scripts/install-supply-chain-tools.sh
# mdbook, pinned, into cargo's bin: test.sh builds and tests the book
# (docs/book).
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

failed=()
for name in "${!background[@]}"; do
  wait "${background[$name]}" || failed+=("$name")
  cat "$logs/$name.log"
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "error: setup failed in: ${failed[*]} (their output is above, and in $logs/)" >&2
  exit 1
fi
