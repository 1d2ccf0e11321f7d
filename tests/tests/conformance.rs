//! The conformance suite: fixtures run through `kubewasm test`'s simulated
//! cluster and, beside it, against the real API server of the test harness
//! (`kubewasm_tests::conformance`): each case's objects put into the
//! server under their own namespaces, each action the plugin emits sent
//! there through the host's own sink, and every answer (by kind) and
//! resulting object (without uids, resourceVersions, timestamps, and the
//! server's defaults) compared with the simulation's. Any difference fails,
//! naming the fixture, the case, the action and the field. The API server
//! with kube-controller-manager's garbage collector and no node
//! ([`control_plane`]): the suite waits for the real collector to reach
//! the simulated one's result.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::OnceLock;

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

/// [`kubewasm_tests::conformance::conform`] on this binary's control
/// plane, with a plugin of the repository's builds.
fn conform(plugin: &str, fixtures: Vec<PathBuf>, at_least: usize) {
    kubewasm_tests::conformance::conform(
        control_plane(),
        &plugin_artifacts().join(plugin),
        fixtures,
        at_least,
    );
}

#[test]
fn the_conformance_fixtures_agree_with_the_api_server() {
    conform("actor.wasm", fixtures("tests/conformance/fixtures"), 39);
}

/// This binary's control plane: the API server and the garbage collector.
fn control_plane() -> &'static ControlPlane {
    static CP: OnceLock<ControlPlane> = OnceLock::new();
    CP.get_or_init(|| {
        ControlPlane::builder()
            .controllers("garbagecollector")
            .start_blocking()
            .unwrap_or_else(|e| {
                panic!("starting the control plane with a garbage collector: {e:#}")
            })
    })
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
