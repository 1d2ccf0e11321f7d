//! The conformance suite: fixtures run through `kubewasm test`'s simulated
//! cluster and, beside it, against the real API server of the test harness
//! (`kubewasm_tests::conformance`): each case's objects put into the
//! server under their own namespaces, each action the plugin emits sent
//! there through the host's own sink, and every answer (by kind) and
//! resulting object (without uids, resourceVersions, timestamps, and the
//! server's defaults) compared with the simulation's. Any difference fails,
//! naming the fixture, the case, the action and the field. API server only
//! (`ControlPlane::shared()`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use kubewasm::testing::mirror::MirrorHandle;
use kubewasm_tests::conformance::mirror::RealMirror;
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::{plugin_artifacts, repo_root};

/// The fixtures of a folder, sorted.
fn fixtures(dir: &str) -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = std::fs::read_dir(repo_root().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    all.sort();
    all
}

/// Runs `fixtures` with `plugin` through the simulation, mirrored into the
/// real server; fails on a failing case or on any difference.
fn conform(plugin: &str, fixtures: Vec<PathBuf>, at_least: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cp = ControlPlane::shared();
    let client = rt.block_on(cp.admin_client());
    let run = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            % 0xfffff
    );
    let mirror = Arc::new(RealMirror::new(client, rt.handle().clone(), &run));
    let opts = kubewasm::testing::Options {
        plugin: plugin_artifacts().join(plugin),
        fixtures,
        mirror: Some(MirrorHandle(mirror.clone())),
        ..Default::default()
    };
    let mut out = Vec::new();
    let summary = kubewasm::testing::run(&opts, &mut out).unwrap();
    let text = String::from_utf8_lossy(&out);
    assert_eq!(
        summary.exit_code(),
        0,
        "the fixtures fail on the simulation:\n{text}"
    );
    let compared = mirror.compared.load(Ordering::SeqCst);
    assert!(
        compared >= at_least,
        "only {compared} actions compared (at least {at_least} expected):\n{text}"
    );
    let findings = mirror.findings();
    assert!(
        findings.is_empty(),
        "the simulation and the API server differ ({} findings, {compared} actions compared):\n{}",
        findings.len(),
        findings.join("\n")
    );
    eprintln!("{plugin}: {compared} actions compared, no difference");
}

#[test]
fn the_conformance_fixtures_agree_with_the_api_server() {
    conform("actor.wasm", fixtures("tests/conformance/fixtures"), 14);
}

/// Files under the repository's root.
fn files(paths: &[&str]) -> Vec<PathBuf> {
    paths.iter().map(|p| repo_root().join(p)).collect()
}

#[test]
fn the_example_plugins_fixtures_agree_with_the_api_server() {
    conform(
        "config_replicator.wasm",
        files(&[
            "plugins/config-replicator/tests/replicate.yaml",
            "plugins/config-replicator/tests/access.yaml",
        ]),
        10,
    );
    conform(
        "namespace_defaults.wasm",
        fixtures("plugins/namespace-defaults/tests"),
        1,
    );
    conform(
        "crashloop_watcher.wasm",
        fixtures("plugins/crashloop-watcher/tests"),
        1,
    );
}

#[test]
fn the_test_plugins_fixtures_agree_with_the_api_server() {
    conform(
        "testkit.wasm",
        files(&[
            "plugins/testing/testkit/tests/echo.yaml",
            "plugins/testing/testkit/tests/reconcile.yaml",
        ]),
        1,
    );
    conform(
        "noop.wasm",
        files(&["plugins/testing/noop/tests/noop.yaml"]),
        0,
    );
}
