#!/usr/bin/env bash
# Builds the kubewasm image with no registry in reach: a static
# x86_64-unknown-linux-musl release binary (jemalloc as the allocator), then
# `buildah bud --target local` of the Containerfile (FROM scratch only),
# tagged localhost/kubewasm:dev, written as an archive to OUT, with a
# CycloneDX SBOM of the binary's crates beside it (OUT without .tar, plus
# .cdx.json: scripts/sbom.py). Prints the binary and image sizes.
#
#   bash scripts/image.sh [OUT]   (default: $CARGO_TARGET_DIR or target/, kubewasm-image.tar)
#   IMAGE_ARCHIVE=docker-archive bash scripts/image.sh OUT   (default: oci-archive)
#   IMAGE_TAG=localhost/kubewasm:dev
#   IMAGE_BINARY=target/debug/kubewasm bash scripts/image.sh OUT
#
# IMAGE_BINARY puts a binary built elsewhere in the same layout instead of
# building the release one: the in-cluster tests (tests/src/incluster.rs)
# pass the debug build every other test runs, which saves CI a second,
# release build of the whole dependency tree for another target (about ten
# minutes on 2 cores). A dynamically linked binary brings the libraries
# `ldd` names (glibc's loader, libc, libm, libgcc_s), its debug info
# stripped; such an image is for tests only, and gets no SBOM.
#
# Import it into a node's containerd with
#   ctr -n k8s.io images import OUT
# Installs buildah and musl-tools with apt (as root, else with sudo) when
# they are missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/rust-toolchain.sh
export PATH="$PATH:$HOME/.cargo/bin"

target_dir="${CARGO_TARGET_DIR:-target}"
[[ "$target_dir" = /* ]] || target_dir="$root/$target_dir"
out="${1:-$target_dir/kubewasm-image.tar}"
[[ "$out" = /* ]] || out="$PWD/$out"
tag="${IMAGE_TAG:-localhost/kubewasm:dev}"
archive="${IMAGE_ARCHIVE:-oci-archive}"
triple=x86_64-unknown-linux-musl

. scripts/lib/apt.sh
command -v buildah >/dev/null || apt_ensure buildah
[[ -f /etc/ssl/certs/ca-certificates.crt ]] || apt_ensure ca-certificates

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
# rootfs/: files the image takes as they are (the libraries of a dynamically
# linked IMAGE_BINARY); empty for the release image.
mkdir -p "$ctx/var/cache/kubewasm" "$ctx/plugins" "$ctx/rootfs"
cp /etc/ssl/certs/ca-certificates.crt "$ctx/ca-certificates.crt"
if [[ -n "${IMAGE_BINARY:-}" ]]; then
  bin="$IMAGE_BINARY"
  [[ -x "$bin" ]] || { echo "error: IMAGE_BINARY=$bin is not an executable file" >&2; exit 1; }
  strip --strip-debug -o "$ctx/kubewasm" "$bin"
  if readelf -l "$bin" | grep -q 'program interpreter'; then
    # Every library with its path (`libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6`),
    # and the loader (`/lib64/ld-linux-x86-64.so.2`).
    libs=$(ldd "$bin" | grep -o '/[^ ]*')
    [[ -n "$libs" ]] || { echo "error: ldd names no library of $bin" >&2; exit 1; }
    for lib in $libs; do
      mkdir -p "$ctx/rootfs$(dirname "$lib")"
      cp -L "$lib" "$ctx/rootfs$lib"
    done
  fi
else
  if ! rustup target list --installed | grep -qx "$triple"; then
    rustup target add "$triple"
  fi
  # ring and jemalloc compile C for the target: cc-rs finds musl-gcc.
  command -v musl-gcc >/dev/null || apt_ensure musl-tools
  # No debug info, symbols stripped: the image carries the binary only.
  CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=symbols \
    cargo build --locked --release -p kubewasm --bin kubewasm --target "$triple" --features jemalloc
  bin="$target_dir/$triple/release/kubewasm"
  if readelf -l "$bin" | grep -q 'program interpreter'; then
    echo "error: $bin is dynamically linked; the image has no libc" >&2
    exit 1
  fi
  cp "$bin" "$ctx/kubewasm"
fi
buildah bud --quiet --target local -f "$root/Containerfile" -t "$tag" "$ctx" >/dev/null
mkdir -p "$(dirname "$out")"
rm -f "$out"
buildah push --quiet "$tag" "$archive:$out:$tag"
# The SBOM of the crates that build compiled in (the same target and
# features), checked against Cargo.lock as it is written.
sbom="${out%.tar}.cdx.json"
if [[ -n "${IMAGE_BINARY:-}" ]]; then
  rm -f "$sbom"
  sbom_line="none: a test image of $IMAGE_BINARY"
else
  sbom_line=$(python3 "$root/scripts/sbom.py" "$sbom" --target "$triple" --features jemalloc)
fi

human() { numfmt --to=iec-i --suffix=B --format=%.1f "$1"; }
bin_size=$(stat -c %s "$ctx/kubewasm")
# The image's layers as stored (uncompressed tar), from its manifest.
image_size=$(buildah inspect --type image --format '{{.Manifest}}' "$tag" \
  | grep -o '"layers":\[.*\]' | grep -o '"size":[0-9]*' | cut -d: -f2 | awk '{s += $1} END {print s}')
gzip_size=$(gzip -c "$out" | wc -c)
echo "binary  $bin: $bin_size bytes ($(human "$bin_size"))"
echo "image   $tag: $image_size bytes ($(human "$image_size")) uncompressed, about $(human "$gzip_size") gzipped"
echo "archive $out ($archive)"
echo "sbom    $sbom_line"
