#!/usr/bin/env bash
# The OCI registry the plugin distribution tests run (tests/src/registry.rs):
# Debian's docker-registry (the CNCF distribution registry) and htpasswd from
# apache2-utils for its basic-auth mode, and openssl, which makes the
# registry's test CA and the book tutorial's signing key (tests/tests/tutorial.rs).
# Nothing is started or enabled here:
# the harness runs the registry with its own config on 127.0.0.1.
# Idempotent; run by scripts/setup.sh.
set -euo pipefail
packages=(docker-registry apache2-utils openssl)
[[ ${1:-} != --apt-packages ]] || { echo "${packages[@]}"; exit 0; }
# The package's own service (on :5000) is not used; the harness's registry
# has its own port, storage and config.
. "$(dirname "$0")/lib/apt.sh"
apt_ensure "${packages[@]}"
