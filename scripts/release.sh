#!/usr/bin/env bash
# Writes a release of kubewasm into dist/ (docs/book/src/contributing/releasing.md):
#
#   kubewasm-VERSION-x86_64-linux-musl            the static musl binary
#   kubewasm-VERSION-x86_64-linux-musl.cdx.json   its CycloneDX SBOM (crates)
#   kubewasm-VERSION-aarch64-linux-musl           the same for aarch64, cross-built with
#   kubewasm-VERSION-aarch64-linux-musl.cdx.json  zig (scripts/install-cross.sh) where it is
#                                                 installed (RELEASE_AARCH64=0 skips it,
#                                                 =1 requires it)
#   kubewasm-VERSION-image.oci.tar                the image, an OCI layout
#                                                 tarball tagged localhost/kubewasm:VERSION
#                                                 (a `+` of VERSION as `_`)
#   kubewasm-VERSION-image.cdx.json               the image's CycloneDX SBOM
#   kubewasm-VERSION-image.payload.json           cosign's simple-signing payload
#                                                 over the image's manifest digest
#   kubewasm-VERSION.tgz                          the Helm chart (version and appVersion VERSION)
#   CHANGELOG.md                                  this release's section (git-cliff, cliff.toml)
#   cosign.pub                                    the public key of the signatures
#   *.sig                                         `cosign sign-blob` signatures (base64) of
#                                                 each file above, and of the image payload
#   SHA256SUMS, SHA256SUMS.sig                    every file's SHA-256, and its signature
#
#   RELEASE_KEY=cosign.key COSIGN_PASSWORD=... bash scripts/release.sh VERSION
#   RELEASE_UNSIGNED=1 bash scripts/release.sh VERSION   (no key: no .sig, no cosign.pub)
#   DIST=dir                          write there instead of dist/ (emptied first)
#   RELEASE_BINARY=target/debug/kubewasm
#                                     put that binary in the binary's place and the
#                                     image instead of building the release one (as
#                                     scripts/image.sh's IMAGE_BINARY does): for
#                                     tests of this script only
#
# VERSION is SemVer, the workspace's version (Cargo.toml) or a pre-release or
# build of it (0.1.0, 0.1.0-rc.1, 0.1.0+build.5). Needs buildah and the
# tools of .tools/: helm (tests/tools/build.sh), cosign
# (scripts/install-cosign.sh), git-cliff (scripts/install-supply-chain-tools.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PATH="$PATH:$HOME/.cargo/bin:/usr/local/go/bin"

die() { echo "release.sh: $*" >&2; exit 1; }
say() { echo "==> $*"; }

version="${1:-}"
[[ -n $version ]] || die "usage: scripts/release.sh VERSION (e.g. $(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1))"
# SemVer 2.0.0: MAJOR.MINOR.PATCH[-PRE][+BUILD].
semver='^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-((0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*))?(\+([0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*))?$'
[[ $version =~ $semver ]] || die "$version is not a SemVer version (MAJOR.MINOR.PATCH[-PRE][+BUILD])"
core="${BASH_REMATCH[1]}.${BASH_REMATCH[2]}.${BASH_REMATCH[3]}"
workspace=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
[[ $core == "$workspace" ]] \
  || die "$version is not the workspace's version $workspace (Cargo.toml) or a pre-release or build of it: bump [workspace.package] version first"

tools="$root/.tools/bin"
cosign="$tools/cosign"
helm="$tools/helm"
cliff="$root/.tools/venv/bin/git-cliff"
if [[ -n "${RELEASE_KEY:-}" ]]; then
  [[ -f $RELEASE_KEY ]] || die "RELEASE_KEY=$RELEASE_KEY is not a file (a cosign key: cosign generate-key-pair)"
  [[ -x $cosign ]] || die "$cosign is missing: bash scripts/install-cosign.sh"
  [[ -n "${COSIGN_PASSWORD+set}" ]] || die "COSIGN_PASSWORD is not set (the password of RELEASE_KEY; empty for none)"
  signed=1
elif [[ "${RELEASE_UNSIGNED:-}" == 1 ]]; then
  signed=0
else
  die "no RELEASE_KEY (a cosign key file, with COSIGN_PASSWORD): a release is signed; RELEASE_UNSIGNED=1 to write one without signatures"
fi
[[ -x $helm ]] || die "$helm is missing: bash tests/tools/build.sh"
[[ -x $cliff ]] || die "$cliff is missing: bash scripts/install-supply-chain-tools.sh"
command -v buildah >/dev/null || die "buildah is missing (scripts/setup.sh installs it)"

dist="${DIST:-$root/dist}"
[[ "$dist" = /* ]] || dist="$PWD/$dist"
rm -rf "$dist"
mkdir -p "$dist"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
triple=x86_64-unknown-linux-musl
target_dir="${CARGO_TARGET_DIR:-target}"
[[ "$target_dir" = /* ]] || target_dir="$root/$target_dir"

bin="kubewasm-$version-x86_64-linux-musl"
image="kubewasm-$version-image"
# An image tag has no `+`: build metadata is spelled with `_` there, as
# the chart's default image.tag spells its appVersion.
tag="localhost/kubewasm:${version//+/_}"

# The image, and with it the binary: scripts/image.sh builds the static musl
# release binary (or takes RELEASE_BINARY) and the image from the
# Containerfile, written as an OCI layout tarball.
if [[ -n "${RELEASE_BINARY:-}" ]]; then
  [[ -x $RELEASE_BINARY ]] || die "RELEASE_BINARY=$RELEASE_BINARY is not an executable file"
  say "RELEASE_BINARY: $RELEASE_BINARY goes into dist/ and the image instead of a release build (for tests: not a release)"
  IMAGE_BINARY="$RELEASE_BINARY" IMAGE_TAG="$tag" IMAGE_ARCHIVE=oci-archive \
    bash scripts/image.sh "$work/image.tar" | sed 's/^/    /'
  cp "$RELEASE_BINARY" "$dist/$bin"
else
  say "the static release binary and the image (scripts/image.sh)"
  IMAGE_TAG="$tag" IMAGE_ARCHIVE=oci-archive bash scripts/image.sh "$work/image.tar" | sed 's/^/    /'
  cp "$target_dir/$triple/release/kubewasm" "$dist/$bin"
fi
mv "$work/image.tar" "$dist/$image.oci.tar"

# aarch64: cross-built with zig as C compiler and linker (cargo-zigbuild),
# the cross toolchain the registries serve (scripts/install-cross.sh).
arm_triple=aarch64-unknown-linux-musl
arm_bin="kubewasm-$version-aarch64-linux-musl"
zigbuild="$root/.tools/venv/bin/cargo-zigbuild"
arm=0
if [[ -n "${RELEASE_BINARY:-}" ]]; then
  [[ "${RELEASE_AARCH64:-}" == 1 ]] && die "RELEASE_AARCH64=1 with RELEASE_BINARY: a test release has no aarch64 binary"
  say "no aarch64 binary: RELEASE_BINARY (a test release)"
elif [[ "${RELEASE_AARCH64:-}" == 0 ]]; then
  say "no aarch64 binary: RELEASE_AARCH64=0"
elif [[ -x $zigbuild ]] && rustup target list --installed | grep -qx "$arm_triple"; then
  arm=1
elif [[ "${RELEASE_AARCH64:-}" == 1 ]]; then
  die "RELEASE_AARCH64=1 but the cross toolchain is missing: bash scripts/install-cross.sh"
else
  say "no aarch64 binary: its cross toolchain is not installed (bash scripts/install-cross.sh)"
fi
if [[ $arm == 1 ]]; then
  say "the static aarch64 release binary (cargo zigbuild)"
  PATH="$root/.tools/venv/bin:$PATH" CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=symbols \
    "$zigbuild" zigbuild --locked --release -p kubewasm --bin kubewasm --target "$arm_triple" --features jemalloc
  arm_out="$target_dir/$arm_triple/release/kubewasm"
  file "$arm_out" | grep -q 'ARM aarch64' || die "$arm_out is not an aarch64 binary: $(file "$arm_out")"
  readelf -l "$arm_out" | grep -q 'program interpreter' && die "$arm_out is dynamically linked"
  cp "$arm_out" "$dist/$arm_bin"
fi

# The manifest the tag names in the layout: what a registry stores when the
# tarball is pushed as it is (skopeo copy --preserve-digests).
mkdir -p "$work/layout"
tar -xf "$dist/$image.oci.tar" -C "$work/layout" index.json
digest=$(python3 - "$work/layout/index.json" "$tag" <<'EOF'
import json, sys
index = json.load(open(sys.argv[1]))
names = [m for m in index["manifests"]
         if m.get("annotations", {}).get("org.opencontainers.image.ref.name") in (sys.argv[2], sys.argv[2].rsplit(":", 1)[1])]
if len(names) != 1:
    sys.exit(f"index.json names {sys.argv[2]} {len(names)} times: {index}")
print(names[0]["digest"])
EOF
)
say "image $tag: manifest $digest"

say "SBOMs (CycloneDX)"
python3 scripts/sbom.py "$dist/$bin.cdx.json" --target "$triple" --features jemalloc | sed 's/^/    /'
if [[ $arm == 1 ]]; then
  python3 scripts/sbom.py "$dist/$arm_bin.cdx.json" --target "$arm_triple" --features jemalloc | sed 's/^/    /'
fi
python3 scripts/image-sbom.py "$dist/$image.cdx.json" --archive "$dist/$image.oci.tar" --tag "$tag" \
  --binary-sbom "$dist/$bin.cdx.json" | sed 's/^/    /'

say "chart (helm package)"
"$helm" package charts/kubewasm --version "$version" --app-version "$version" -d "$dist" >/dev/null
[[ -f "$dist/kubewasm-$version.tgz" ]] || die "helm package wrote no $dist/kubewasm-$version.tgz"

say "CHANGELOG.md (git-cliff)"
"$cliff" --config cliff.toml --unreleased --tag "v$version" --output "$dist/CHANGELOG.md" 2>/dev/null

# cosign's simple-signing payload of the image (what `cosign sign` signs):
# signed here as a blob, it is attached after a push with
#   cosign attach signature --payload P --signature P.sig REGISTRY/REPO@DIGEST
# and `cosign verify --key cosign.pub REGISTRY/REPO@DIGEST` checks it.
python3 - "$digest" "${tag%:*}" > "$dist/$image.payload.json" <<'EOF'
import json, sys
print(json.dumps({"critical": {"identity": {"docker-reference": sys.argv[2]},
                               "image": {"docker-manifest-digest": sys.argv[1]},
                               "type": "cosign container image signature"},
                  "optional": None}, separators=(",", ":")), end="")
EOF

if [[ $signed == 1 ]]; then
  say "signatures (cosign sign-blob --key $RELEASE_KEY)"
  "$cosign" public-key --key "$RELEASE_KEY" > "$dist/cosign.pub"
  sign() {
    "$cosign" sign-blob --yes --tlog-upload=false --key "$RELEASE_KEY" \
      --output-signature "$1.sig" "$1" >/dev/null 2>"$work/cosign.log" \
      || { cat "$work/cosign.log" >&2; die "cosign sign-blob $1 failed"; }
  }
  for f in "$dist"/*; do
    [[ $f == "$dist/cosign.pub" ]] || sign "$f"
  done
fi

(cd "$dist" && sha256sum -- * > "$work/SHA256SUMS" && mv "$work/SHA256SUMS" SHA256SUMS)
if [[ $signed == 1 ]]; then
  sign "$dist/SHA256SUMS"
else
  say "unsigned (RELEASE_UNSIGNED=1): no .sig files, no cosign.pub"
fi

say "$dist"
(cd "$dist" && for f in *; do
  printf '  %12s  %-8s  %s\n' "$(stat -c %s "$f")" "$(numfmt --to=iec-i --suffix=B --format=%.1f "$(stat -c %s "$f")")" "$f"
done)
