#!/usr/bin/env bash
# Builds the config-replicator plugin written in JavaScript, Python, C and Go
# into plugins/target/languages/<lang>-config-replicator.wasm (components).
# Toolchains: plugins/install-toolchains.sh. Arguments pick languages
# (`bash build-languages.sh js c`; default: all four, or $KUBEWASM_LANGUAGES).
# `bench` builds instead the benchmark plugins of all four (twins of
# plugins/testing/{noop,realistic,parse-all}, for host/benches/languages.rs)
# into <lang>-noop.wasm, <lang>-realistic.wasm and <lang>-parse-all.wasm;
# `js-bench`, `python-bench`, `c-bench`, `go-bench` one language's. Not part
# of the default (the test command does not build them).
# A build whose sources, lock files, WIT and tool versions are unchanged
# since its last build is skipped (stamp files under target/languages/build).
# Intermediates go to target/languages/build/<lang>.
# C and Go need their compiler and kubewasm only (`kubewasm componentize`,
# no cargo, wasm-tools nor wit-bindgen): $KUBEWASM names the binary, else
# this repository's is built with cargo when there is one, else the
# `kubewasm` on PATH.
set -euo pipefail
cd "$(dirname "$0")"
plugins="$PWD"
wit="$plugins/../wit/v0.2.0"
out="$plugins/target/languages"
build="$out/build"
mkdir -p "$build"

langs=("$@")
if [[ ${#langs[@]} -eq 0 ]]; then
  read -r -a langs <<<"${KUBEWASM_LANGUAGES:-js python c go}"
fi

clang="${CLANG:-$(command -v clang-19 || command -v clang || true)}"
venv="${KUBEWASM_PY_VENV:-$plugins/python/.venv}"
export PATH="$HOME/.cargo/bin:/usr/local/go/bin:$PATH"

need() {
  if ! command -v "$1" >/dev/null; then
    echo "error: $1 not found: run plugins/install-toolchains.sh" >&2
    exit 1
  fi
}

# The hash of the given files' contents and names plus extra strings.
fingerprint() {
  local extra="$1"
  shift
  {
    echo "$extra"
    find "$@" -type f ! -path '*/node_modules/*' ! -path '*/__pycache__/*' ! -path '*/.venv/*' \
      ! -path '*/target/*' -print0 | sort -z | xargs -0 sha256sum
  } | sha256sum | cut -d' ' -f1
}

# fresh NAME FINGERPRINT [WASM...]: true when the artifacts (default
# NAME-config-replicator.wasm) exist and were built from it.
fresh() {
  local name="$1" stamp="$2"
  shift 2
  [[ $# -gt 0 ]] || set -- "$name-config-replicator.wasm"
  for wasm in "$@"; do
    [[ -f "$out/$wasm" ]] || return 1
  done
  [[ -f "$build/$name.stamp" && "$(cat "$build/$name.stamp")" == "$stamp" ]]
}

is_component() {
  [[ "$(head -c 8 "$1" | od -An -tx1)" == " 00 61 73 6d 0d 00 01 00" ]]
}

# done_lang NAME FINGERPRINT [WASM...]: checks the artifacts (default
# NAME-config-replicator.wasm) and records what they were built from.
done_lang() {
  local name="$1" stamp="$2"
  shift 2
  [[ $# -gt 0 ]] || set -- "$name-config-replicator.wasm"
  for wasm in "$@"; do
    if ! is_component "$out/$wasm"; then
      echo "error: $out/$wasm is not a WebAssembly component" >&2
      exit 1
    fi
  done
  echo "$stamp" >"$build/$name.stamp"
}

# The benchmark plugins' names (plugins/testing/<name> in Rust).
bench_names=(noop realistic parse-all)
# bench_wasm LANG: their artifacts' file names.
bench_wasm() {
  local name
  for name in "${bench_names[@]}"; do
    echo "$1-$name.wasm"
  done
}

# kubewasm for `componentize` (C and Go), found once: see the top.
kubewasm=""
kubewasm_tool() {
  [[ -n "$kubewasm" ]] && return 0
  if [[ -n "${KUBEWASM:-}" ]]; then
    kubewasm="$KUBEWASM"
  elif command -v cargo >/dev/null; then
    (cd .. && cargo build -q -p kubewasm --bin kubewasm)
    local target="${CARGO_TARGET_DIR:-target}"
    [[ "$target" == /* ]] || target="$plugins/../$target"
    kubewasm="$target/debug/kubewasm"
  else
    kubewasm="$(command -v kubewasm || true)"
  fi
  if [[ -z "$kubewasm" || ! -x "$kubewasm" ]]; then
    echo "error: kubewasm not found: set KUBEWASM or put it on PATH" >&2
    exit 1
  fi
}

# componentize CORE.wasm OUT.wasm: the plugin component, with the world's
# type of $wit and the WASI preview1 adapter that kubewasm embeds.
componentize() {
  "$kubewasm" componentize "$1" --wit "$wit" -o "$2" >/dev/null
}

# What the C and Go components depend on besides their sources: the
# compiler's version (in the caller's string), kubewasm's componentize and
# the crates it uses (wit-component, the adapter: ../Cargo.lock).
componentize_inputs() {
  echo "$plugins/../Cargo.lock" "$plugins/../host/src/toolchain"
}

js_deps() {
  need node
  if [[ ! -d js/node_modules || js/package-lock.json -nt js/node_modules/.package-lock.json ]]; then
    (cd js && npm ci --no-audit --no-fund --loglevel=error)
  fi
}

# qjs SOURCE OUT.wasm [OPTIONS...]: a JS module (importing ../sdk) as a
# component with jco's QuickJS backend (componentize-qjs), sync ABI.
qjs() {
  local src="$1" wasm="$2"
  shift 2
  (cd js && node_modules/.bin/componentize-qjs --wit "$wit" -n plugin --js "$plugins/js/$src" \
    --module-root "$plugins/js" --sync "$@" -o "$wasm" >/dev/null)
}

build_js() {
  need node
  local stamp
  stamp=$(fingerprint "$(node --version) qjs" js/package.json js/package-lock.json js/sdk js/config-replicator "$wit")
  fresh js "$stamp" && return 0
  js_deps
  # jco's QuickJS backend (componentize-qjs), sync ABI: the default engine
  # (docs/book/src/languages-js.md, "Engine", says why); it imports no WASI the host does not grant.
  qjs config-replicator/index.js "$out/js-config-replicator.wasm"
  done_lang js "$stamp"
}

build_js-bench() {
  need node
  local stamp name
  stamp=$(fingerprint "$(node --version) qjs" js/package.json js/package-lock.json js/sdk js/bench "$wit")
  fresh js-bench "$stamp" $(bench_wasm js) && return 0
  js_deps
  for name in "${bench_names[@]}"; do
    qjs "bench/$name.js" "$out/js-$name.wasm"
  done
  done_lang js-bench "$stamp" $(bench_wasm js)
}

# Not built by default: the same JS plugin with componentize-js
# (StarlingMonkey), and with QuickJS size-optimised and WASI stubbed, for
# size and speed comparisons (host/benches/languages.rs).
build_js-variants() {
  local stamp
  js_deps
  stamp=$(fingerprint "$(node --version) sm" js/package.json js/package-lock.json js/sdk js/config-replicator "$wit")
  if ! fresh js-sm "$stamp"; then
    # No WASI features: the host grants none by default and links no wasi:http.
    (cd js && node_modules/.bin/componentize-js config-replicator/index.js -w "$wit" -n plugin \
      -d stdio random clocks http fetch-event -o "$out/js-sm-config-replicator.wasm")
    done_lang js-sm "$stamp"
  fi
  stamp=$(fingerprint "$(node --version) qjs-small" js/package.json js/package-lock.json js/sdk js/config-replicator "$wit")
  if ! fresh js-qjs-small "$stamp"; then
    qjs config-replicator/index.js "$out/js-qjs-small-config-replicator.wasm" --opt-size --stub-wasi
    done_lang js-qjs-small "$stamp"
  fi
}

componentize_py() {
  local cpy="$venv/bin/componentize-py"
  if [[ ! -x "$cpy" ]]; then
    cpy=$(command -v componentize-py || true)
  fi
  if [[ -z "$cpy" ]]; then
    echo "error: componentize-py not found: run plugins/install-toolchains.sh" >&2
    exit 1
  fi
  echo "$cpy"
}

build_python() {
  local cpy stamp
  cpy=$(componentize_py)
  stamp=$(fingerprint "$("$cpy" --version)" python/requirements.txt python/sdk python/config-replicator "$wit")
  fresh python "$stamp" && return 0
  (cd python && "$cpy" -d "$wit" -w plugin componentize app -p config-replicator -p sdk \
    -o "$out/python-config-replicator.wasm")
  done_lang python "$stamp"
}

build_python-bench() {
  local cpy stamp name
  cpy=$(componentize_py)
  stamp=$(fingerprint "$("$cpy" --version)" python/requirements.txt python/sdk python/bench "$wit")
  fresh python-bench "$stamp" $(bench_wasm python) && return 0
  for name in "${bench_names[@]}"; do
    (cd python && "$cpy" -d "$wit" -w plugin componentize "${name//-/_}" -p bench -p sdk \
      -o "$out/python-$name.wasm" >/dev/null)
  done
  done_lang python-bench "$stamp" $(bench_wasm python)
}

c_tools() {
  if [[ -z "$clang" ]]; then
    echo "error: clang-19 not found: run plugins/install-toolchains.sh" >&2
    exit 1
  fi
  kubewasm_tool
}

c_fingerprint() {
  fingerprint "$("$clang" --version | head -1) $("$kubewasm" --version)" \
    c/sdk $(componentize_inputs) "$wit" "$@"
}

# c_component DIR OUT.wasm CFLAGS_AND_SOURCES...: a reactor with the SDK and
# its bindings (c/sdk/plugin.{c,h}, generated ahead of time), made a
# component by kubewasm. Names kept (a trap's backtrace names the
# functions), wasi-libc's DWARF dropped.
c_component() {
  local dir="$1" wasm="$2"
  shift 2
  mkdir -p "$dir"
  "$clang" --target=wasm32-wasi -mexec-model=reactor -O2 -Wall -Wextra -Werror \
    -Wno-unused-parameter -I c/sdk \
    "$@" c/sdk/kubewasm.c c/sdk/plugin.c -Wl,--strip-debug -o "$dir/core.wasm"
  componentize "$dir/core.wasm" "$wasm"
}

build_c() {
  c_tools
  local stamp
  stamp=$(c_fingerprint c/config-replicator)
  fresh c "$stamp" && return 0
  c_component "$build/c" "$out/c-config-replicator.wasm" c/config-replicator/config_replicator.c
  done_lang c "$stamp"
}

build_c-bench() {
  c_tools
  local stamp name extra
  stamp=$(c_fingerprint c/bench c/vendor)
  fresh c-bench "$stamp" $(bench_wasm c) && return 0
  for name in "${bench_names[@]}"; do
    extra=()
    # parse-all parses with cJSON (vendored; the SDK has no JSON parser).
    [[ "$name" == parse-all ]] && extra=(-I c/vendor/cjson c/vendor/cjson/cJSON.c)
    c_component "$build/c-bench" "$out/c-$name.wasm" "${extra[@]}" "c/bench/${name//-/_}.c"
  done
  done_lang c-bench "$stamp" $(bench_wasm c)
}

# go_component DIR PACKAGE OUT.wasm: a wasip1 c-shared build of PACKAGE
# (under plugins/go), made a component by kubewasm. Not stripped (no
# -ldflags=-s): a trap's backtrace names the Go functions.
go_component() {
  local dir="$1" pkg="$2" wasm="$3"
  mkdir -p "$dir"
  (cd go && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o "$dir/core.wasm" "$pkg")
  componentize "$dir/core.wasm" "$wasm"
}

build_go() {
  need go
  kubewasm_tool
  local stamp
  stamp=$(fingerprint "$(go version) $("$kubewasm" --version)" go/go.mod go/sdk go/config-replicator \
    $(componentize_inputs) "$wit")
  fresh go "$stamp" && return 0
  local dir="$build/go"
  mkdir -p "$dir"
  # The SDK's unit tests run on this machine (everything but the ABI glue,
  # sdk/abi.go, builds for any GOOS; the tests use a fake host), and vet
  # checks both builds (-unsafeptr=false: the glue turns linear-memory
  # addresses into pointers by design).
  (cd go && go vet ./sdk)
  (cd go && go test -count=1 ./sdk >"$dir/go-test.log" 2>&1) || { cat "$dir/go-test.log" >&2; exit 1; }
  (cd go && GOOS=wasip1 GOARCH=wasm go vet -unsafeptr=false ./sdk ./config-replicator)
  go_component "$dir" ./config-replicator "$out/go-config-replicator.wasm"
  done_lang go "$stamp"
}

build_go-bench() {
  need go
  kubewasm_tool
  local stamp name
  stamp=$(fingerprint "$(go version) $("$kubewasm" --version)" go/go.mod go/sdk go/bench \
    $(componentize_inputs) "$wit")
  fresh go-bench "$stamp" $(bench_wasm go) && return 0
  (cd go && GOOS=wasip1 GOARCH=wasm go vet -unsafeptr=false ./bench/...)
  for name in "${bench_names[@]}"; do
    go_component "$build/go-bench/$name" "./bench/$name" "$out/go-$name.wasm"
  done
  done_lang go-bench "$stamp" $(bench_wasm go)
}

if [[ " ${langs[*]} " == *" bench "* ]]; then
  rest=()
  for lang in "${langs[@]}"; do
    if [[ "$lang" == bench ]]; then rest+=(js-bench python-bench c-bench go-bench); else rest+=("$lang"); fi
  done
  langs=("${rest[@]}")
fi
for lang in "${langs[@]}"; do
  case "$lang" in
    js | python | c | go | js-variants | js-bench | python-bench | c-bench | go-bench) "build_$lang" ;;
    *)
      echo "error: unknown language $lang (js, python, c, go; js-variants; bench or <lang>-bench)" >&2
      exit 2
      ;;
  esac
  if [[ "$lang" == *-bench ]]; then
    wasms=()
    for wasm in $(bench_wasm "${lang%-bench}"); do wasms+=("$out/$wasm"); done
  else
    wasms=("$out/$lang"-*config-replicator.wasm "$out/${lang%-variants}"-*-config-replicator.wasm)
  fi
  for wasm in "${wasms[@]}"; do
    [[ -f "$wasm" && ( "$lang" == js-variants || "$lang" == *-bench || "$wasm" == "$out/$lang-config-replicator.wasm" ) ]] || continue
    printf '%9d  %s\n' "$(stat -c %s "$wasm")" "$wasm"
  done
done
