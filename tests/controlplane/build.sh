#!/usr/bin/env bash
# Builds the test cluster into tests/controlplane/bin: kubewasm-controlplane
# (the real kube-apiserver, kube-controller-manager, kube-scheduler and
# kubelet as subcommands of one binary, plus an embedded etcd), pause (the
# static sandbox program of the node's pause image), apiprobe (the node
# tests' in-cluster API client), fieldselprobe (apimachinery's field
# selector parser, for tests/tests/field_selectors.rs) and protoprobe
# (apimachinery's protobuf and JSON serializers, for
# tests/tests/proto_corpus.rs). A no-op when all are
# newer than go.mod, go.sum and every .go file.
#
# `build.sh --next` builds bin/kubewasm-apiserver-1.36 instead: the same
# program against the next Kubernetes minor (next.mod and next.sum,
# k8s.io/kubernetes v1.36.3) with the build tag apiserveronly (the API server
# and etcd; no node components, no kubectl), for the tests of what that
# release's API server adds (the sharded list and watch of KEP-5866, alpha in
# 1.36). scripts/setup.sh runs it beside the first; about 4.5 minutes cold on
# 2 cores.
#
# Needs Go (>= the go line in go.mod) and the Go module proxy. A cold build
# (empty module and build caches) takes several minutes on 2 cores; see
# README.md in this folder for measured numbers.
set -euo pipefail
cd "$(dirname "$0")"

# /version must report the release the module file pins.
version_of() {
  go mod edit -json "$1" | sed -n '/"Path": "k8s.io\/kubernetes"/{n;s/.*"Version": "\(.*\)".*/\1/p}'
}
ldflags_of() {
  local version
  version=$(version_of "$1")
  if [[ ! $version =~ ^v1\.([0-9]+)\.[0-9]+$ ]]; then
    echo "build.sh: cannot find the k8s.io/kubernetes version in $1 (got '$version')" >&2
    return 1
  fi
  local pkg=k8s.io/component-base/version
  echo "-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=${BASH_REMATCH[1]} -X $pkg.gitTreeState=clean"
}

if [[ ${1:-} == --next ]]; then
  next=bin/kubewasm-apiserver-1.36
  if [[ -x $next && -z $(find next.mod next.sum ./*.go -newer "$next" 2>/dev/null) ]]; then
    exit 0
  fi
  command -v go >/dev/null || { echo "build.sh: Go is not installed (https://go.dev/dl/)" >&2; exit 1; }
  ldflags=$(ldflags_of next.mod)
  # On CI (KUBEWASM_CI_TRIM=1, see scripts/test.sh) its build cache (about
  # 2 GB, shared with nothing else) goes as soon as the binary is built,
  # not at the end of the setup the other builds are still using the disk in.
  if [[ ${KUBEWASM_CI_TRIM:-} == 1 ]]; then
    GOCACHE=$(mktemp -d)
    export GOCACHE
    trap 'rm -rf "$GOCACHE"' EXIT
  fi
  mkdir -p bin
  echo "build.sh: building $next (k8s.io/kubernetes $(version_of next.mod), the API server alone)..." >&2
  start=$SECONDS
  go build -mod=readonly -modfile=next.mod -tags apiserveronly -trimpath -buildvcs=false \
    -ldflags "$ldflags" -o "$next.tmp" .
  mv -f "$next.tmp" "$next"
  echo "build.sh: built $next in $((SECONDS - start))s" >&2
  exit 0
fi

out=bin/kubewasm-controlplane
pause=bin/pause
probe=bin/apiprobe
fieldsel=bin/fieldselprobe
protoprobe=bin/protoprobe
if [[ -x $out && -x $pause && -x $probe && -x $fieldsel && -x $protoprobe && -z $(find go.mod go.sum ./*.go pause/*.go apiprobe/*.go fieldselprobe/*.go protoprobe/*.go -newer "$out" 2>/dev/null) ]]; then
  exit 0
fi
command -v go >/dev/null || { echo "build.sh: Go is not installed (https://go.dev/dl/)" >&2; exit 1; }

version=$(version_of go.mod)
ldflags=$(ldflags_of go.mod)

mkdir -p bin
echo "build.sh: building $out (k8s.io/kubernetes $version)..." >&2
start=$SECONDS
go build -mod=readonly -trimpath -buildvcs=false -ldflags "$ldflags" -o "$out.tmp" .
# The sandbox program: static, no cgo, a few hundred KB.
CGO_ENABLED=0 go build -mod=readonly -trimpath -buildvcs=false -ldflags "-s -w" -o "$pause" ./pause
# The node tests' in-cluster API client (static, for an image with no base).
CGO_ENABLED=0 go build -mod=readonly -trimpath -buildvcs=false -ldflags "-s -w" -o "$probe" ./apiprobe
# The real fields.ParseSelector, for the field selector differential test.
go build -mod=readonly -trimpath -buildvcs=false -ldflags "-s -w" -o "$fieldsel" ./fieldselprobe
# The real protobuf and JSON serializers, for the transcoder's differential
# test (and its field table: `protoprobe schema`).
go build -mod=readonly -trimpath -buildvcs=false -ldflags "-s -w" -o "$protoprobe" ./protoprobe
mv -f "$out.tmp" "$out"
echo "build.sh: built $out in $((SECONDS - start))s" >&2
