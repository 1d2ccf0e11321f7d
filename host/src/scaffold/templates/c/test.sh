#!/usr/bin/env bash
# Builds and runs the unit tests (hello_test.c) natively, with the
# machine's C compiler ($CC, else cc) and the SDK's fake host
# (sdk/fake): no WebAssembly, no host.
set -euo pipefail
cd "$(dirname "$0")"
cc="${CC:-cc}"
mkdir -p build/test
# The bindings header: the SDK's copy when it has one, else wit-bindgen's.
gen=sdk
if [[ ! -f sdk/plugin.h ]]; then
  gen=build/test/gen
  mkdir -p "$gen"
  wit-bindgen c wit --world plugin --out-dir "$gen" >build/test/wit-bindgen.log 2>&1 ||
    { cat build/test/wit-bindgen.log >&2; exit 1; }
fi
flags=(-std=c11 -D_POSIX_C_SOURCE=200809L -g -Wall -Wextra -Wno-unused-parameter -I "$gen" -I sdk -I sdk/fake)
# AddressSanitizer finds leaks and overruns when the compiler has it.
if echo 'int main(void){return 0;}' | "$cc" -x c -fsanitize=address,undefined -o build/test/probe - 2>/dev/null; then
  flags+=(-fsanitize=address,undefined -fno-omit-frame-pointer)
fi
"$cc" "${flags[@]}" hello_test.c hello.c sdk/kubewasm.c sdk/fake/kubewasm_fake.c sdk/fake/cJSON.c -o build/test/hello_test
build/test/hello_test
