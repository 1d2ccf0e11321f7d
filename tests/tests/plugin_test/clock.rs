//! The virtual clock: retries and requeues come due on it without real
//! waiting, and the plugin reads it.

use super::*;

/// testkit's reconcile mode: a retry, then a requeue after 30 s, then
/// done; the clock jumps to each (the calls' `at` is checked), and the
/// whole run takes no real 30 s.
#[test]
fn requeues_and_retries_run_on_the_virtual_clock() {
    let testkit = plugin_artifacts().join("testkit.wasm");
    let (out, took) = kubewasm_test(
        &shared_cache(),
        &[
            testkit.to_str().unwrap(),
            "plugins/testing/testkit/tests/reconcile.yaml",
        ],
    );
    let report = text(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    let fixture =
        std::fs::read_to_string(repo_root().join("plugins/testing/testkit/tests/reconcile.yaml"))
            .unwrap();
    for line in [
        "call: added configmaps shop/reconcile-me (attempt 2, after retry)",
        "requeueAfter: 30s",
        "call: requeue configmaps shop/reconcile-me",
        "at: 2026-03-01T12:00:30.",
    ] {
        assert!(fixture.contains(line), "{line}");
    }
    // The time is checked: another clock start fails the run.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reconcile.yaml");
    std::fs::write(
        &path,
        fixture
            .replace(
                "sidecar: sidecar.yaml",
                &format!(
                    "sidecar: {}",
                    repo_root()
                        .join("plugins/testing/testkit/tests/sidecar.yaml")
                        .display()
                ),
            )
            .replace("clock: 2026-03-01T12:00:00Z", "clock: 2026-03-01T13:00:00Z"),
    )
    .unwrap();
    let (out, _) = kubewasm_test(
        &shared_cache(),
        &[testkit.to_str().unwrap(), path.to_str().unwrap()],
    );
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        stdout(&out).contains(r#"expect[0].at: expected "2026-03-01T12:00:00.000Z", observed "2026-03-01T13:00:00.000Z""#),
        "{report}"
    );
}

/// The plugin reads the virtual clock: the recorder plugin takes its
/// version id from `clock::now()` at register, and notes it in every
/// Event; it is the fixture's clock, to the nanosecond.
#[test]
fn the_plugin_sees_the_virtual_clock() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("recorder.yaml"),
        "access:\n  - {kinds: [configmaps], verbs: [read, events]}\n",
    )
    .unwrap();
    let fixture = dir.path().join("clock.yaml");
    std::fs::write(
        &fixture,
        "sidecar: recorder.yaml\nconfig: {namespace: shop, resources: [configmaps]}\nclock: 2026-05-04T03:02:01Z\ncases:\n  - name: one delta\n    steps:\n      - delta: added\n        object: {apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: shop}}\n",
    )
    .unwrap();
    let recorder = plugin_artifacts().join("recorder.wasm");
    let (out, _) = kubewasm_test(
        &shared_cache(),
        &[
            recorder.to_str().unwrap(),
            fixture.to_str().unwrap(),
            "--update",
        ],
    );
    let report = text(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    let recorded = std::fs::read_to_string(&fixture).unwrap();
    // 2026-05-04T03:02:01Z is 1777863721 s after the epoch.
    assert!(
        recorded.contains(r#""version":"1777863721000000000""#),
        "{recorded}"
    );
}

/// A plugin's own writes come back to it as the server's watch would send
/// them: testkit's `actions` mode annotates its object, the echo's call
/// writes the same and nothing more comes back; with two writes that undo
/// each other every call changes the object again, a loop shown as 8 echo
/// calls a step (the rest wait for `pending: true` steps).
#[test]
fn a_plugins_own_writes_come_back_to_it_and_a_loop_is_bounded() {
    let testkit = plugin_artifacts().join("testkit.wasm");
    let (out, _) = kubewasm_test(
        &shared_cache(),
        &[
            testkit.to_str().unwrap(),
            "plugins/testing/testkit/tests/echo.yaml",
        ],
    );
    let report = text(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    let out = stdout(&out);
    assert!(out.contains("ends it  (2 calls"), "{report}");
    assert!(out.contains("8 echoes a step  (18 calls"), "{report}");
}
