#!/usr/bin/env bash
# Builds every guest plugin as a WebAssembly component (wasm32-wasip2,
# release profile): the 0.2 plugins and the frozen 0.1 ones in v0.1/
# (`<name>_v0_1.wasm`), all members of this workspace. Lists the .wasm
# files with their sizes. Extra
# arguments go to cargo (e.g. `-p noop`). Output:
# plugins/target/wasm32-wasip2/release/<crate_name>.wasm
set -euo pipefail
cd "$(dirname "$0")"

# The pinned toolchain with its wasm32-wasip2 target (rust-toolchain.toml);
# every script that builds goes through here or scripts/setup.sh.
bash ../scripts/rust-toolchain.sh

# Always plugins/target, whatever CARGO_TARGET_DIR says: the host finds them there.
cargo build --release --target wasm32-wasip2 --workspace --locked --target-dir target "$@"

out=target/wasm32-wasip2/release
component=" 00 61 73 6d 0d 00 01 00"
status=0
for wasm in "$out"/*.wasm; do
  magic=$(head -c 8 "$wasm" | od -An -tx1)
  if [[ "$magic" != "$component" ]]; then
    echo "error: $wasm is not a WebAssembly component (starts with$magic)" >&2
    status=1
  fi
  printf '%8d  %s\n' "$(stat -c %s "$wasm")" "$wasm"
done
exit "$status"
