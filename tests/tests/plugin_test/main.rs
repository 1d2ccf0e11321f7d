//! `kubewasm test`: the real binary on the example plugins' fixtures
//! (plugins/*/tests/*.yaml): passing runs, a failing expectation (exit 1,
//! the differing field named), `--update` writing it back, `--junit`, a
//! bad fixture (exit 2), simulated conflicts, requeues on the virtual
//! clock, the sidecar's access list, and the JavaScript twin of the
//! config-replicator passing the same fixture once its compile is cached.
//!
//! This file holds how the tests run the binary and read its output;
//! `fixtures` checks runs of the config-replicator's fixtures, `clock` the
//! virtual clock (and the watch echoes of a plugin's own writes), and `record` recordings made with `kubewasm record`
//! against the real API server and replayed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use kubewasm_tests::e2e::kubewasm_bin;
use kubewasm_tests::{language_artifacts, plugin_artifacts, repo_root};

mod clock;
mod fixtures;
mod record;

/// The compile cache the Rust plugins' runs share (across test processes,
/// as the other suites' `target/kubewasm-test-cache`).
fn shared_cache() -> PathBuf {
    repo_root().join("target/kubewasm-test-cache")
}

/// `kubewasm test ARGS` with the compile cache `cache`; returns its output
/// and how long it took.
fn kubewasm_test(cache: &Path, args: &[&str]) -> (Output, Duration) {
    // Built (once) before the clock starts.
    let bin = kubewasm_bin();
    let start = Instant::now();
    let out = Command::new(bin)
        .arg("test")
        .args(args)
        .arg("--cache-dir")
        .arg(cache)
        .current_dir(repo_root())
        .output()
        .expect("run kubewasm test");
    (out, start.elapsed())
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status.code(),
        stdout(o),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn replicator() -> String {
    plugin_artifacts()
        .join("config_replicator.wasm")
        .display()
        .to_string()
}
