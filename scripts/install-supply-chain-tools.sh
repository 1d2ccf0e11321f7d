#!/usr/bin/env bash
# Installs the pinned tools of scripts/supply-chain.sh (idempotent: a tool
# already at its version is kept), from the package registries only:
#
#   crates.io   cargo-deny (cargo install --locked, without its fat LTO)
#   PyPI        pip-audit, cyclonedx-python-lib with its JSON schema
#               validation (for the SBOM check), and git-cliff (the
#               changelog of scripts/release.sh, a binary wheel), into
#               .tools/venv
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PATH="$PATH:$HOME/.cargo/bin"

CARGO_DENY=0.20.2
PIP_AUDIT=2.10.1
CYCLONEDX_LIB=11.12.0
GIT_CLIFF=2.14.2

step() { printf '==> %s\n' "$*"; }

if [[ "$(cargo-deny --version 2>/dev/null)" != "cargo-deny $CARGO_DENY" ]]; then
  step "cargo install cargo-deny@$CARGO_DENY"
  # Built in a temporary directory that cargo removes, whatever
  # CARGO_TARGET_DIR says: only the binary stays. Without the fat LTO and
  # single codegen unit of cargo-deny's release profile, which make most
  # of its build one serial step: cargo's release defaults instead.
  (unset CARGO_TARGET_DIR && CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
    cargo install --quiet --locked "cargo-deny@$CARGO_DENY")
fi

venv=.tools/venv
# The dist-infos name the versions (`pip-audit --version` takes seconds).
have() { compgen -G "$venv/lib/python3*/site-packages/$1.dist-info" >/dev/null; }
if ! have "pip_audit-$PIP_AUDIT" || ! have "cyclonedx_python_lib-$CYCLONEDX_LIB" || ! have "jsonschema-*" \
  || ! have "git_cliff-$GIT_CLIFF"; then
  step "pip install pip-audit==$PIP_AUDIT cyclonedx-python-lib[json-validation]==$CYCLONEDX_LIB git-cliff==$GIT_CLIFF (.tools/venv)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    "pip-audit==$PIP_AUDIT" "cyclonedx-python-lib[json-validation]==$CYCLONEDX_LIB" "git-cliff==$GIT_CLIFF"
fi
