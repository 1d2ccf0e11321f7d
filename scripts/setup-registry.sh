#!/usr/bin/env bash
# The OCI registry the plugin distribution tests run (tests/src/registry.rs):
# Debian's docker-registry (the CNCF distribution registry) and htpasswd from
# apache2-utils for its basic-auth mode. Nothing is started or enabled here:
# the harness runs the registry with its own config on 127.0.0.1.
# Idempotent; run by scripts/setup.sh.
set -euo pipefail
packages=(docker-registry apache2-utils)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "==> apt-get install ${missing[*]}"
  sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  # The package's own service (on :5000) is not used; the harness's registry
  # has its own port, storage and config.
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
