#!/usr/bin/env bash
# Builds the config-replicator plugin written in JavaScript, Python, C and Go
# into plugins/target/languages/<lang>-config-replicator.wasm (components).
# Toolchains: plugins/install-toolchains.sh. Arguments pick languages
# (`bash build-languages.sh js c`; default: all four, or $KUBEWASM_LANGUAGES).
# A language whose sources, lock files, WIT and tool versions are unchanged
# since its last build is skipped (stamp files under target/languages/build).
# Generated bindings and intermediates go to target/languages/build/<lang>.
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

# fresh LANG FINGERPRINT: true when the artifact exists and was built from it.
fresh() {
  [[ -f "$out/$1-config-replicator.wasm" && -f "$build/$1.stamp" && "$(cat "$build/$1.stamp")" == "$2" ]]
}

is_component() {
  [[ "$(head -c 8 "$1" | od -An -tx1)" == " 00 61 73 6d 0d 00 01 00" ]]
}

done_lang() {
  local lang="$1" stamp="$2" wasm="$out/$1-config-replicator.wasm"
  if ! is_component "$wasm"; then
    echo "error: $wasm is not a WebAssembly component" >&2
    exit 1
  fi
  echo "$stamp" >"$build/$lang.stamp"
}

# The WASI preview1 reactor adapter (C and Go), from a crates.io crate.
adapter() {
  local a="$build/wasi_snapshot_preview1.reactor.wasm"
  if [[ ! -f "$a" || "$plugins/c/wasi-adapter/Cargo.lock" -nt "$a" ]]; then
    cargo run -q --release --locked --manifest-path "$plugins/c/wasi-adapter/Cargo.toml" \
      --target-dir "$build/tools" -- "$a"
  fi
  echo "$a"
}

js_deps() {
  need node
  if [[ ! -d js/node_modules || js/package-lock.json -nt js/node_modules/.package-lock.json ]]; then
    (cd js && npm ci --no-audit --no-fund --loglevel=error)
  fi
}

build_js() {
  need node
  local stamp
  stamp=$(fingerprint "$(node --version) qjs" js/package.json js/package-lock.json js/sdk js/config-replicator "$wit")
  fresh js "$stamp" && return 0
  js_deps
  # jco's QuickJS backend (componentize-qjs), sync ABI: the default engine
  # (docs/languages.md says why); it imports no WASI the host does not grant.
  (cd js && node_modules/.bin/componentize-qjs --wit "$wit" -n plugin --js "$plugins/js/config-replicator/index.js" \
    --module-root "$plugins/js" --sync -o "$out/js-config-replicator.wasm" >/dev/null)
  done_lang js "$stamp"
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
    (cd js && node_modules/.bin/componentize-qjs --wit "$wit" -n plugin --js "$plugins/js/config-replicator/index.js" \
      --module-root "$plugins/js" --sync --opt-size --stub-wasi -o "$out/js-qjs-small-config-replicator.wasm" >/dev/null)
    done_lang js-qjs-small "$stamp"
  fi
}

build_python() {
  local cpy="$venv/bin/componentize-py"
  if [[ ! -x "$cpy" ]]; then
    cpy=$(command -v componentize-py || true)
  fi
  if [[ -z "$cpy" ]]; then
    echo "error: componentize-py not found: run plugins/install-toolchains.sh" >&2
    exit 1
  fi
  local stamp
  stamp=$(fingerprint "$("$cpy" --version)" python/requirements.txt python/sdk python/config-replicator "$wit")
  fresh python "$stamp" && return 0
  (cd python && "$cpy" -d "$wit" -w plugin componentize app -p config-replicator -p sdk \
    -o "$out/python-config-replicator.wasm")
  done_lang python "$stamp"
}

build_c() {
  need wit-bindgen
  need wasm-tools
  if [[ -z "$clang" ]]; then
    echo "error: clang-19 not found: run plugins/install-toolchains.sh" >&2
    exit 1
  fi
  local stamp
  stamp=$(fingerprint "$("$clang" --version | head -1) $(wit-bindgen --version) $(wasm-tools --version)" \
    c/sdk c/config-replicator c/wasi-adapter/Cargo.lock "$wit")
  fresh c "$stamp" && return 0
  local dir="$build/c"
  rm -rf "$dir" && mkdir -p "$dir/gen"
  wit-bindgen c "$wit" --world plugin --out-dir "$dir/gen" >"$dir/wit-bindgen.log" 2>&1 ||
    { cat "$dir/wit-bindgen.log" >&2; exit 1; }
  "$clang" --target=wasm32-wasi -mexec-model=reactor -O2 -Wall -Wextra -Werror \
    -Wno-unused-parameter -I "$dir/gen" -I c/sdk \
    c/config-replicator/config_replicator.c c/sdk/kubewasm.c "$dir/gen/plugin.c" \
    "$dir/gen/plugin_component_type.o" -Wl,--strip-all -o "$dir/core.wasm"
  wasm-tools component new "$dir/core.wasm" --adapt "wasi_snapshot_preview1=$(adapter)" \
    -o "$out/c-config-replicator.wasm"
  done_lang c "$stamp"
}

build_go() {
  need go
  need wasm-tools
  local stamp
  stamp=$(fingerprint "$(go version) $(wasm-tools --version)" go c/wasi-adapter/Cargo.lock "$wit")
  fresh go "$stamp" && return 0
  local dir="$build/go"
  mkdir -p "$dir"
  # The SDK's unit tests run on this machine (everything but the ABI glue,
  # sdk/abi.go, builds for any GOOS; the tests use a fake host), and vet
  # checks both builds (-unsafeptr=false: the glue turns linear-memory
  # addresses into pointers by design).
  (cd go && go vet ./sdk)
  (cd go && go test -count=1 ./sdk >"$dir/go-test.log" 2>&1) || { cat "$dir/go-test.log" >&2; exit 1; }
  (cd go && GOOS=wasip1 GOARCH=wasm go vet -unsafeptr=false ./...)
  (cd go && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -ldflags=-s \
    -o "$dir/core.wasm" ./config-replicator)
  wasm-tools component embed "$wit" --world plugin "$dir/core.wasm" -o "$dir/embedded.wasm"
  wasm-tools component new "$dir/embedded.wasm" --adapt "wasi_snapshot_preview1=$(adapter)" \
    -o "$out/go-config-replicator.wasm"
  done_lang go "$stamp"
}

for lang in "${langs[@]}"; do
  case "$lang" in
    js | python | c | go | js-variants) "build_$lang" ;;
    *)
      echo "error: unknown language $lang (js, python, c, go; js-variants)" >&2
      exit 2
      ;;
  esac
  for wasm in "$out/$lang"-*config-replicator.wasm "$out/${lang%-variants}"-*-config-replicator.wasm; do
    [[ -f "$wasm" && ( "$lang" == js-variants || "$wasm" == "$out/$lang-config-replicator.wasm" ) ]] || continue
    printf '%9d  %s\n' "$(stat -c %s "$wasm")" "$wasm"
  done
done
