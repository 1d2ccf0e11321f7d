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
# passed. docs/SECURITY.md, "Supply chain", says what each check covers.
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
workspaces=(. plugins bench plugins/c/wasi-adapter bench/epoch-probe/probe bench/epoch-probe/guest)

# The RustSec database: the live repository when it can be fetched, else
# the snapshot in supply-chain/ (supply-chain/README.md), opened as
# cargo-deny opens a fetched one.
config="$root/deny.toml"
db_note=""
if timeout 120 cargo deny --log-level error --config "$config" fetch db >"$tmp/fetch.log" 2>&1; then
  db_note="the live database, fetched now"
  db_short="live RustSec database"
else
  snapshot="$root/supply-chain/rustsec-advisory-db.tar.gz"
  commit_date=$(sed -n 's/^commit-date: *//p' "$root/supply-chain/README.md")
  # cargo-deny's directory for the default URL: advisory-db-<XxHash64 of
  # the URL, seed 0xca80de71> (src/advisories/helpers/db.rs).
  db="$tmp/advisory-dbs/advisory-db-3157b0e258782691"
  mkdir -p "$db"
  tar -xzf "$snapshot" -C "$db" --strip-components=1
  # A git repository whose commit and HEAD carry the snapshot's date, so
  # that cargo-deny's staleness check (maximum-db-staleness) sees its age.
  git -C "$db" init -q
  git -C "$db" add -A
  GIT_AUTHOR_DATE="$commit_date" GIT_COMMITTER_DATE="$commit_date" \
    git -C "$db" -c user.name=kubewasm -c user.email=ci@kubewasm.invalid \
    -c commit.gpgsign=false commit -q -m "RustSec advisory-db snapshot"
  touch -d "$commit_date" "$db/.git/HEAD"
  sed "/^\[advisories\]/a db-path = \"$tmp/advisory-dbs\"" deny.toml >"$tmp/deny.toml"
  config="$tmp/deny.toml"
  age=$((($(date +%s) - $(date -d "$commit_date" +%s)) / 86400))
  db_note="the in-tree snapshot of ${commit_date%%T*}, $age days old: the live database is not reachable from here (only package registries are), so advisories published since are not seen"
  db_short="RustSec snapshot of ${commit_date%%T*}"
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
      if cargo deny --manifest-path "$ws/Cargo.toml" --config "$config" --locked --offline \
        --log-level warn --color never check --hide-inclusion-graph "$check" >"$log" 2>&1; then
        note=""
        [[ $check = advisories ]] && note=$db_short
        if [[ $check = bans ]]; then
          dups=$(grep -c 'warning\[duplicate\]' "$log" || true)
          note="$dups crates in several versions, warned"
        fi
        result "cargo deny $check ($name)" passed "$note"
      else
        show "$log"
        result "cargo deny $check ($name)" failed "$([[ $check = advisories ]] && echo "$db_short")"
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
# govulncheck reads the Go vulnerability database at vuln.go.dev, which is
# not one of the registries this machine and CI reach.
if curl -sf --max-time 10 -o /dev/null https://vuln.go.dev/index/db.json.gz 2>/dev/null; then
  result "govulncheck (plugins/go, tests/controlplane, bench/client-go)" "not run" \
    "vuln.go.dev is reachable here, but govulncheck is not wired into this script yet"
else
  result "govulncheck (plugins/go, tests/controlplane, bench/client-go)" "not run" \
    "the Go vulnerability database (vuln.go.dev) is not reachable from here (only package registries are)"
fi

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
