#!/usr/bin/env bash
# Builds the Go tools of the tests into .tools/bin of the repository
# (gitignored), from this folder's one Go module, so the k8s.io packages
# compile once for all three:
#
#   helm     Helm v4 (helm.sh/helm/v4/cmd/helm, a `tool` of go.mod): the
#            chart's lint and template tests, and scripts/release.sh's
#            `helm package`
#   kubectl  kubectl's own command tree (kubectl/), at the test cluster's
#            version: CI machines have none
#   kstatus  the status cli-utils computes for one object (kstatus/)
#
# Builds each tool older than go.mod, go.sum, this script or its own
# folder; a no-op when none is. Needs Go (>= go.mod's go line) and the Go module
# proxy. Cold (empty module and build caches) on 2 cores: see the numbers in
# tests/tools/README.md.
#
# Why helm v4.1 and not the newest v4: Helm v4.2 and later require k8s.io
# v0.36 and v0.37, which would pull kubectl (one module, one version of each
# k8s.io module) two minor versions past the test cluster's 1.35, outside
# kubectl's supported skew. v4.1 is on k8s.io v0.35, as kubectl and the test
# cluster (tests/controlplane) are.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$here"
export PATH="$PATH:/usr/local/go/bin"
bin="$root/.tools/bin"

# What each tool is built from: go.mod, go.sum, this script and its own
# folder (helm has none here).
stale() {
  local t=$1
  [[ ! -x $bin/$t ]] || [[ -n $(find go.mod go.sum build.sh $([[ -d $t ]] && echo "$t") -newer "$bin/$t" 2>/dev/null) ]]
}
todo=()
for t in helm kubectl kstatus; do
  if stale "$t"; then todo+=("$t"); fi
done
[[ ${#todo[@]} == 0 ]] && exit 0
command -v go >/dev/null || { echo "tests/tools/build.sh: Go is not installed" >&2; exit 1; }

# The versions the binaries report, read from go.mod.
modver() { go list -m -f '{{.Version}}' "$1"; }
kube=$(modver k8s.io/kubectl)
[[ $kube =~ ^v0\.([0-9]+)\.([0-9]+)$ ]] || { echo "tests/tools/build.sh: unexpected k8s.io/kubectl version $kube" >&2; exit 1; }
minor=${BASH_REMATCH[1]}
kube_version="v1.$minor.${BASH_REMATCH[2]}"
helm_version=$(modver helm.sh/helm/v4)
kubectl_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kubectl_ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done

mkdir -p "$bin"
start=$SECONDS
# -trimpath as tests/controlplane/build.sh builds: the k8s.io packages both
# modules share at the same version come from Go's build cache.
build() {
  local name=$1 ldflags=$2 pkg=$3
  echo "tests/tools/build.sh: building $bin/$name" >&2
  go build -mod=readonly -trimpath -buildvcs=false -ldflags "$ldflags" -o "$bin/$name.tmp" "$pkg"
  mv -f "$bin/$name.tmp" "$bin/$name"
}
for t in "${todo[@]}"; do
  case $t in
    helm) build helm "-s -w -X helm.sh/helm/v4/internal/version.version=$helm_version" helm.sh/helm/v4/cmd/helm ;;
    kubectl) build kubectl "$kubectl_ldflags" ./kubectl ;;
    kstatus) build kstatus "-s -w" ./kstatus ;;
  esac
done
echo "tests/tools/build.sh: ${todo[*]} built in $((SECONDS - start)) s (helm $helm_version, kubectl $kube_version)" >&2
