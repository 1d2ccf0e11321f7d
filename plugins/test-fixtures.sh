#!/usr/bin/env bash
# The example plugins' behaviour, pinned by their fixtures and checked with
# nothing but the kubewasm binary (`kubewasm test`, no cluster): the CI
# recipe of the book's "Testing a plugin", docs/book/src/testing.md, run by scripts/test.sh. The
# config-replicator's five twins (Rust, JavaScript, Python, C, Go) must pass
# the same fixtures. Needs the built plugins (plugins/build.sh and
# plugins/build-languages.sh) and kubewasm ($KUBEWASM, else target/debug's,
# else PATH). JUnit reports go to target/fixtures/ (override: FIXTURES_JUNIT).
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd .. && pwd)
kubewasm="${KUBEWASM:-}"
if [[ -z $kubewasm ]]; then
  target="${CARGO_TARGET_DIR:-$root/target}"
  if [[ -x $target/debug/kubewasm ]]; then kubewasm=$target/debug/kubewasm; else kubewasm=kubewasm; fi
fi
command -v "$kubewasm" >/dev/null || { echo "error: $kubewasm not found: build it (cargo build -p kubewasm) or set KUBEWASM" >&2; exit 1; }
junit="${FIXTURES_JUNIT:-$root/target/fixtures}"
mkdir -p "$junit"
rust=target/wasm32-wasip2/release
langs=target/languages
replicator=(config-replicator/tests/replicate.yaml config-replicator/tests/access.yaml)

failed=()
# run REPORT WASM [ARGS...]: one kubewasm test run; its JUnit in $junit/REPORT.xml.
run() {
  local report=$1 wasm=$2
  shift 2
  [[ -f $wasm ]] || { echo "error: $wasm is missing: run plugins/build.sh and plugins/build-languages.sh" >&2; exit 1; }
  echo "==> $report"
  if ! "$kubewasm" test "$wasm" "$@" --junit "$junit/$report.xml"; then
    failed+=("$report")
  fi
}

run config-replicator "$rust/config_replicator.wasm" "${replicator[@]}"
for lang in js python c go; do
  run "config-replicator-$lang" "$langs/$lang-config-replicator.wasm" "${replicator[@]}" --name config_replicator
done
run namespace-defaults "$rust/namespace_defaults.wasm" namespace-defaults/tests/*.yaml
run crashloop-watcher "$rust/crashloop_watcher.wasm" crashloop-watcher/tests/*.yaml
# The simulated API server's answers, one per case, as the real server gives
# them (tests/conformance: the actor emits exactly what a case's script says).
run conformance "$rust/actor.wasm" ../tests/conformance/fixtures/*.yaml

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "error: fixtures failed for: ${failed[*]} (reports in $junit)" >&2
  exit 1
fi
echo "fixtures: all passed (reports in $junit)"
