#!/usr/bin/env bash
# Runs the SDK-native unit tests of every language: each SDK's fake host
# (its own tests) and the example config-replicator's tests through it,
# natively, without WebAssembly or a host:
#
#   rust    cargo test -p kubewasm-sdk -p config-replicator
#   js      node --test                      (plugins/js)
#   python  .venv/bin/python -m pytest       (plugins/python; pytest from
#           requirements-test.txt, installed by install-toolchains.sh)
#   c       a test program per suite, built with the machine's C compiler
#           (cc, or $CC) and AddressSanitizer when it links
#   go      go test ./sdk ./config-replicator
#
# Arguments pick languages (`bash test-languages.sh c go`; default all).
# Prints the time each took. Build output goes to
# $KUBEWASM_NATIVE_TESTS (default target/native-tests).
set -euo pipefail
cd "$(dirname "$0")"
plugins="$PWD"
export PATH="$HOME/.cargo/bin:/usr/local/go/bin:$PATH"
out="${KUBEWASM_NATIVE_TESTS:-$plugins/target/native-tests}"
venv="${KUBEWASM_PY_VENV:-$plugins/python/.venv}"
golden="$plugins/../host/src/informer/selector_golden.jsonl"

langs=("$@")
[[ ${#langs[@]} -gt 0 ]] || langs=(rust js python c go)

test_rust() {
  cargo test -q -p kubewasm-sdk -p config-replicator
}

test_js() {
  (cd js && node --test)
}

test_python() {
  if ! "$venv/bin/python" -m pytest --version >/dev/null 2>&1; then
    echo "error: pytest is not in $venv: run plugins/install-toolchains.sh" >&2
    return 1
  fi
  # No bytecode or cache files: sdk/ and config-replicator/ are bundled
  # into the component as they are.
  (cd python && PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider)
}

test_c() {
  local cc="${CC:-cc}" dir="$out/c" gen
  mkdir -p "$dir"
  # The bindings header: the SDK's copy when it has one, else wit-bindgen's.
  if [[ -f c/sdk/plugin.h ]]; then
    gen=c/sdk
  else
    gen="$dir/gen"
    mkdir -p "$gen"
    wit-bindgen c ../wit/v0.2.0 --world plugin --out-dir "$gen" >"$dir/wit-bindgen.log" 2>&1 ||
      { cat "$dir/wit-bindgen.log" >&2; return 1; }
  fi
  local flags=(-std=c11 -D_POSIX_C_SOURCE=200809L -g -Wall -Wextra -Werror -Wno-unused-parameter
    -I "$gen" -I c/sdk -I c/sdk/fake -I c/vendor/cjson)
  local common=(c/sdk/kubewasm.c c/sdk/fake/kubewasm_fake.c c/vendor/cjson/cJSON.c)
  if echo 'int main(void){return 0;}' | "$cc" -x c -fsanitize=address,undefined -o "$dir/probe" - 2>/dev/null; then
    flags+=(-fsanitize=address,undefined -fno-omit-frame-pointer)
  fi
  # The SDK, the fake and cJSON once, then one program per suite.
  local objs=() pids=() src pid
  for src in "${common[@]}"; do
    objs+=("$dir/$(basename "${src%.c}").o")
    "$cc" "${flags[@]}" -c "$src" -o "${objs[-1]}" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  "$cc" "${flags[@]}" c/sdk/fake/fake_test.c "${objs[@]}" -o "$dir/fake_test"
  "$cc" "${flags[@]}" c/config-replicator/config_replicator_test.c c/config-replicator/config_replicator.c \
    "${objs[@]}" -o "$dir/config_replicator_test"
  "$dir/fake_test" "$golden"
  "$dir/config_replicator_test"
}

test_go() {
  (cd go && go vet ./sdk ./config-replicator && go test -count=1 ./sdk ./config-replicator)
}

for lang in "${langs[@]}"; do
  case "$lang" in
    rust | js | python | c | go) ;;
    *)
      echo "error: unknown language $lang (rust, js, python, c, go)" >&2
      exit 2
      ;;
  esac
  start=$(date +%s%N)
  "test_$lang"
  printf '==> %s native unit tests passed in %d ms\n' "$lang" $((($(date +%s%N) - start) / 1000000))
done
