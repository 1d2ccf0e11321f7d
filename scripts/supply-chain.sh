#!/usr/bin/env bash
# The supply-chain checks CI runs (scripts/test.sh, after setup): cargo-deny
# over every Rust workspace (licences, bans, sources, advisories), the
# advisories of the guest toolchains' npm and PyPI lock files and of the Go
# modules, and the image's SBOM (scripts/sbom.sh). One line per check:
#
#   supply-chain: CHECK: passed | failed | not run: REASON
#
# and exits non-zero when any check failed. A check that cannot run from here
# (its database is out of reach) says so and why; it is never counted as
# passed. docs/book/src/security.md, "Supply chain", says what each check covers.
#
#   bash scripts/supply-chain.sh            (needs cargo-deny and the tools
#                                            venv: scripts/setup.sh)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PATH="$PATH:$HOME/.cargo/bin:/usr/local/go/bin"

# Where each check's full output goes; printed when the check fails.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

passed=0 failed=0 notrun=0
result() { # NAME STATUS [DETAIL]
  local name=$1 status=$2 detail=${3:-}
  case $status in
    passed) passed=$((passed + 1)) ;;
    failed) failed=$((failed + 1)) ;;
    "not run") notrun=$((notrun + 1)) ;;
  esac
  printf 'supply-chain: %s: %s%s\n' "$name" "$status" "${detail:+ ($detail)}"
}
show() { sed 's/^/    /' "$1" >&2; }

# --- Rust: cargo-deny over every workspace ---------------------------------
# The root (host, tests), the guests, the benchmark and the native helpers
# that CI or the benchmarks build: each has its own Cargo.lock.
workspaces=(. plugins bench bench/epoch-probe/probe bench/epoch-probe/guest)

# The RustSec database lives in a git repository, which a machine that
# reaches only package registries (this project's, and its CI) cannot
# fetch: the advisories checks run only with SUPPLY_CHAIN_ONLINE=1, and
# otherwise say "not run" on their lines (never "passed").
config="$root/deny.toml"
advisories=no
db_note="not fetched (only package registries are reachable here; SUPPLY_CHAIN_ONLINE=1 fetches it): the advisories checks do not run"
if [[ ${SUPPLY_CHAIN_ONLINE:-0} = 1 ]]; then
  if timeout 120 cargo deny --log-level error --config "$config" fetch db >"$tmp/fetch.log" 2>&1; then
    advisories=yes
    db_note="the live database, fetched now"
  else
    show "$tmp/fetch.log"
    result "cargo deny fetch db" failed "SUPPLY_CHAIN_ONLINE=1 but the RustSec database could not be fetched"
  fi
fi

echo "supply-chain: RustSec advisory database: $db_note"
if ! command -v cargo-deny >/dev/null; then
  result "cargo-deny" failed "cargo-deny is not installed: run scripts/setup.sh"
else
  for ws in "${workspaces[@]}"; do
    name=${ws#./}
    [[ $ws = . ]] && name=root
    # The crates of the lock file as committed (--locked: never updated),
    # downloaded first so that cargo-deny can run --offline: it then reads
    # the advisory database it was given instead of fetching one.
    if ! cargo fetch --locked --quiet --manifest-path "$ws/Cargo.toml" >"$tmp/fetch-${name//\//-}.log" 2>&1; then
      show "$tmp/fetch-${name//\//-}.log"
      result "cargo fetch ($name)" failed "the lock file's crates could not be downloaded"
      continue
    fi
    for check in licenses bans sources advisories; do
      log="$tmp/deny-$check-${name//\//-}.log"
      if [[ $check = advisories && $advisories = no ]]; then
        result "cargo deny $check ($name)" "not run" "the RustSec database is not fetched here"
        continue
      fi
      if cargo deny --manifest-path "$ws/Cargo.toml" --config "$config" --locked --offline \
        --log-level warn --color never check --hide-inclusion-graph "$check" >"$log" 2>&1; then
        note=""
        [[ $check = advisories ]] && note="live RustSec database"
        if [[ $check = bans ]]; then
          dups=$(grep -c 'warning\[duplicate\]' "$log" || true)
          note="$dups crates in several versions, warned"
        fi
        result "cargo deny $check ($name)" passed "$note"
      else
        show "$log"
        result "cargo deny $check ($name)" failed
      fi
    done
  done
fi

# --- npm: the guest toolchain (plugins/js) and the browser tests (tests/ui) ---
# Every package of both lock files is a build or test tool that runs in CI
# (plugins/js's are all devDependencies, and componentize-js embeds its
# JavaScript engine into the plugins it builds), so none is omitted.
npm_audit() { # DIR
  local dir=$1 log="$tmp/npm-${1//\//-}.json"
  local status=0
  (cd "$dir" && npm audit --json --audit-level=high >"$log" 2>"$log.err") || status=$?
  python3 - "$log" "$status" <<'EOF'
import json, sys
path, status = sys.argv[1], int(sys.argv[2])
try:
    report = json.load(open(path))
except ValueError:
    report = {}
if "auditReportVersion" not in report:
    # The registry did not answer with a report: its audit endpoint is out of reach.
    why = report.get("message") or "no audit report"
    print(f"not run\tthe npm registry's audit endpoint did not answer here: {why}")
    sys.exit(0)
v = report["metadata"]["vulnerabilities"]
counts = ", ".join(f"{v[k]} {k}" for k in ("critical", "high", "moderate", "low"))
print(("failed" if status else "passed") + f"\t{counts}; fails at high")
EOF
}
if ! command -v npm >/dev/null; then
  result "npm audit" failed "npm is not installed: run scripts/setup.sh"
else
  for dir in plugins/js tests/ui; do
    IFS=$'\t' read -r status detail < <(npm_audit "$dir")
    [[ $status = failed ]] && show "$tmp/npm-${dir//\//-}.json"
    result "npm audit ($dir)" "$status" "$detail"
  done
fi

# --- PyPI: the Python guest toolchain (plugins/python/requirements.txt) ---
# pip-audit asks PyPI's JSON API per version (/pypi/NAME/VERSION/json);
# a package it cannot find there is skipped, and pip-audit still says "No
# known vulnerabilities found": a skip is reported here as not run.
pip_audit="$root/.tools/venv/bin/pip-audit"
if [[ ! -x $pip_audit ]]; then
  result "pip-audit (plugins/python)" failed "pip-audit is not installed: run scripts/setup.sh"
else
  log="$tmp/pip-audit.json"
  status=0
  # Every requirement is pinned (==) and componentize-py has no
  # dependencies: audit the file as it is, without a resolver run.
  "$pip_audit" -r plugins/python/requirements.txt --no-deps --disable-pip \
    --progress-spinner off -f json -o "$log" >"$log.out" 2>&1 || status=$?
  IFS=$'\t' read -r status detail < <(python3 - "$log" "$status" <<'EOF'
import json, sys
path, status = sys.argv[1], int(sys.argv[2])
try:
    report = json.load(open(path))
except (OSError, ValueError):
    print("failed\tpip-audit wrote no report")
    sys.exit(0)
deps = report.get("dependencies", [])
skipped = [d for d in deps if "skip_reason" in d]
vulns = sum(len(d.get("vulns", [])) for d in deps)
if status or vulns:
    print(f"failed\t{vulns} known vulnerabilities")
elif skipped or not deps:
    reason = skipped[0]["skip_reason"] if skipped else "no dependency audited"
    print(f"not run\tPyPI's per-version JSON API, which carries the advisories, is not served here: {reason}")
else:
    print(f"passed\t{len(deps)} packages, no known vulnerabilities")
EOF
)
  [[ $status = failed ]] && { show "$log.out"; [[ -f $log ]] && show "$log"; }
  result "pip-audit (plugins/python)" "$status" "$detail"
fi

# --- Go: the Go guest, the test control plane, the client-go baseline ---
# govulncheck reads the Go vulnerability database, which is not one of
# the registries this machine and CI reach; it is not wired in yet.
result "govulncheck (plugins/go, tests/controlplane, bench/client-go)" "not run" \
  "the Go vulnerability database is not reachable from here (only package registries are)"

# --- SBOM: the one scripts/image.sh writes beside the image ---
# Generated as image.sh generates it (without building the image), then
# validated against the CycloneDX 1.5 JSON schema (cyclonedx-python-lib's
# strict validator, in the tools venv).
log="$tmp/sbom.log"
sbom="$tmp/kubewasm.cdx.json"
if ! python3 scripts/sbom.py "$sbom" >"$log" 2>&1; then
  show "$log"
  result "sbom (scripts/sbom.py)" failed "generation"
elif ! "$root/.tools/venv/bin/python" - "$sbom" >>"$log" 2>&1 <<'EOF'
import sys
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
error = JsonStrictValidator(SchemaVersion.V1_5).validate_str(open(sys.argv[1]).read())
if error is not None:
    sys.exit(f"{sys.argv[1]} is not valid CycloneDX 1.5: {error}")
EOF
then
  show "$log"
  result "sbom (scripts/sbom.py)" failed "not valid CycloneDX 1.5 (or the tools venv is missing: scripts/setup.sh)"
else
  line=$(head -1 "$log")
  result "sbom (scripts/sbom.py)" passed "valid CycloneDX 1.5: ${line#*: CycloneDX 1.5, }"
fi

echo "supply-chain summary: passed $passed, failed $failed, not run $notrun"
[[ $failed -eq 0 ]]
