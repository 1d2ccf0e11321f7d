#!/usr/bin/env bash
# Pins every k8s.io staging module to the release that matches k8s.io/kubernetes.
#
# k8s.io/kubernetes requires its staging modules (k8s.io/api, k8s.io/apiserver,
# ...) at v0.0.0 and replaces them with ./staging/src paths; Go ignores the
# replace directives of a dependency, so this module has to replace each of them
# itself with the published v0.<minor>.<patch> that matches v1.<minor>.<patch>.
# The list comes from k8s.io/kubernetes's own go.mod, fetched through the Go
# module proxy (GOPROXY), so it stays right when the version changes.
#
# Usage: gen-replaces.sh [v1.M.P [MODFILE]]   (default: the version go.mod
# requires, in go.mod; next.mod holds the 1.36 build's)
# Then: go mod tidy [-modfile=MODFILE], and build with -mod=readonly.
set -euo pipefail
cd "$(dirname "$0")"

modfile=${2:-go.mod}
version=${1:-$(go mod edit -json "$modfile" | sed -n '/"Path": "k8s.io\/kubernetes"/{n;s/.*"Version": "\(.*\)".*/\1/p}')}
if [[ ! $version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]]; then
  echo "gen-replaces.sh: need a k8s.io/kubernetes release like v1.35.8, got '$version'" >&2
  exit 1
fi
staging_version="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"

# `go mod download` goes through GOPROXY and verifies against GONOSUMDB/GOSUMDB.
gomod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
[[ -f $gomod ]] || { echo "gen-replaces.sh: could not fetch the go.mod of k8s.io/kubernetes@$version" >&2; exit 1; }

mapfile -t staging < <(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/src/.*#\1#p' "$gomod" | sort -u)
(( ${#staging[@]} > 0 )) || { echo "gen-replaces.sh: no staging replaces found in $gomod" >&2; exit 1; }

args=("-require=k8s.io/kubernetes@$version")
for m in "${staging[@]}"; do
  args+=("-replace=$m=$m@$staging_version")
done
go mod edit "${args[@]}" "$modfile"
echo "gen-replaces.sh: $modfile: k8s.io/kubernetes $version, ${#staging[@]} staging modules pinned to $staging_version" >&2
