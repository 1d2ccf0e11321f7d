#!/usr/bin/env bash
# The cosign CLI of the signature interoperability tests
# (tests/tests/oci_signatures.rs), built from its Go module through the Go
# module proxy into .tools/bin (gitignored). Idempotent: a binary already at
# the pinned version is kept. Cold on this 2-core machine (next to a cargo
# build): 13.4 minutes of wall time, 10 minutes of CPU, about 1.8 GB of Go
# module cache and 1.1 GB of build cache; the binary is 137 MB.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PATH="$PATH:/usr/local/go/bin"

# v2.6.5: the newest v2 release in the Go module proxy (2026-11).
COSIGN=v2.6.5
bin="$root/.tools/bin"

if [[ "$("$bin/cosign" version --json 2>/dev/null | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p')" != "$COSIGN" ]]; then
  echo "==> go install github.com/sigstore/cosign/v2/cmd/cosign@$COSIGN"
  mkdir -p "$bin"
  # -ldflags set the version cosign reports (the release's own build sets it
  # the same way), so the check above sees the pinned version next time.
  GOBIN="$bin" go install \
    -ldflags "-X sigs.k8s.io/release-utils/version.gitVersion=$COSIGN" \
    "github.com/sigstore/cosign/v2/cmd/cosign@$COSIGN"
fi
