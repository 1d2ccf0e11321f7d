//! `kubewasm test`: the real binary on the example plugins' fixtures
//! (plugins/*/tests/*.yaml): passing runs, a failing expectation (exit 1,
//! the differing field named), `--update` writing it back, `--junit`, a
//! bad fixture (exit 2), simulated conflicts, requeues on the virtual
//! clock, the sidecar's access list, and the JavaScript twin of the
//! config-replicator passing the same fixture once its compile is cached.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use kubewasm_tests::e2e::kubewasm_bin;
use kubewasm_tests::{language_artifacts, plugin_artifacts, repo_root};

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

const REPLICATOR_TESTS: &str = "plugins/config-replicator/tests";

/// A copy of the config-replicator's fixtures in a temporary folder, the
/// example sidecar's path made absolute, so a test may change them.
fn replicator_fixtures() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let from = repo_root().join(REPLICATOR_TESTS);
    copy_tree(&from, dir.path());
    let fixture = dir.path().join("replicate.yaml");
    let sidecar = repo_root().join("examples/plugins/config-replicator.yaml");
    let text = std::fs::read_to_string(&fixture).unwrap().replace(
        "sidecar: ../../../examples/plugins/config-replicator.yaml",
        &format!("sidecar: {}", sidecar.display()),
    );
    std::fs::write(&fixture, text).unwrap();
    dir
}

fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn the_config_replicator_fixtures_pass() {
    let (out, took) = kubewasm_test(
        &shared_cache(),
        &[
            &replicator(),
            &format!("{REPLICATOR_TESTS}/replicate.yaml"),
            &format!("{REPLICATOR_TESTS}/access.yaml"),
        ],
    );
    let report = text(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    let passed = stdout(&out)
        .lines()
        .filter(|l| l.starts_with("PASS "))
        .count();
    assert_eq!(passed, 9, "{report}");
    assert!(
        stdout(&out).contains("test result: ok. 9 passed; 0 failed; 0 errors"),
        "{report}"
    );
    eprintln!("config-replicator, 9 cases: {took:?}\n{report}");
}

/// A simulated 409 on the second apply: the call's result is the conflict
/// (the host hands it back), and the pending retry is attempt 2, told of
/// the conflict, with the fresh object; it applies both copies again.
#[test]
fn a_simulated_conflict_is_handed_back_and_retried() {
    let (out, _) = kubewasm_test(
        &shared_cache(),
        &[
            &replicator(),
            &format!("{REPLICATOR_TESTS}/replicate.yaml"),
            "--filter",
            "conflict",
        ],
    );
    let report = text(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert!(stdout(&out).contains("1 passed"), "{report}");
    assert!(stdout(&out).contains("6 filtered out"), "{report}");
    let fixture =
        std::fs::read_to_string(repo_root().join(REPLICATOR_TESTS).join("replicate.yaml")).unwrap();
    assert!(fixture.contains("conflict: 'action 2 of 2 (apply (force) configmaps team-b/ca-bundle) failed after 1 attempt(s): conflict:"));
    assert!(
        fixture.contains("call: added configmaps platform/ca-bundle (attempt 2, after conflict)")
    );

    // The conflict is checked: expecting `ok` instead fails, naming it.
    let dir = replicator_fixtures();
    let path = dir.path().join("replicate.yaml");
    let lines: Vec<String> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let at = lines
        .iter()
        .position(|l| l.trim_start().starts_with("conflict: 'action 2 of 2"))
        .unwrap();
    assert_eq!(lines[at - 1].trim(), "result:");
    let indent = &lines[at - 1][..lines[at - 1].len() - "result:".len()];
    let mut changed: Vec<String> = lines[..at - 1].to_vec();
    changed.push(format!("{indent}result: ok"));
    changed.extend(lines[at + 1..].iter().cloned());
    let changed = changed.join("\n") + "\n";
    std::fs::write(&path, changed).unwrap();
    let (out, _) = kubewasm_test(
        &shared_cache(),
        &[
            &replicator(),
            path.to_str().unwrap(),
            "--filter",
            "conflict",
        ],
    );
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        stdout(&out).contains("step 1: expect[0].result: expected \"ok\", observed {\"conflict\":"),
        "{report}"
    );
}

/// An expectation that does not hold: exit 1, the differing field named,
/// a unified diff; `--update` writes the observation back, and the file is
/// then exactly what it was (comments and layout kept).
#[test]
fn a_failing_fixture_names_the_field_and_update_writes_it_back() {
    let dir = replicator_fixtures();
    let path = dir.path().join("replicate.yaml");
    let original = std::fs::read_to_string(&path).unwrap();
    let marker = "data:\n                    ca.crt: PEM-2";
    assert_eq!(original.matches(marker).count(), 2, "the fixture changed");
    let broken = original.replacen(marker, "data:\n                    ca.crt: PEM-3", 1);
    std::fs::write(&path, &broken).unwrap();

    let (out, _) = kubewasm_test(&shared_cache(), &[&replicator(), path.to_str().unwrap()]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        stdout(&out).contains(
            r#"step 1: expect[0].actions[0].apply.object.data["ca.crt"]: expected "PEM-3", observed "PEM-2""#
        ),
        "{report}"
    );
    assert!(
        stdout(&out).contains("--- expected\n    +++ observed"),
        "{report}"
    );
    assert!(
        stdout(&out).contains("-          ca.crt: PEM-3\n    +          ca.crt: PEM-2"),
        "{report}"
    );
    assert!(
        stdout(&out).contains("test result: FAILED. 6 passed; 1 failed"),
        "{report}"
    );

    let (out, _) = kubewasm_test(
        &shared_cache(),
        &[&replicator(), path.to_str().unwrap(), "--update"],
    );
    let report = text(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert!(
        stdout(&out).contains("UPDATED") && stdout(&out).contains("1 updated"),
        "{report}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), original);
    let (out, _) = kubewasm_test(&shared_cache(), &[&replicator(), path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

#[test]
fn junit_reports_each_case_and_the_failure() {
    let dir = replicator_fixtures();
    let path = dir.path().join("replicate.yaml");
    let original = std::fs::read_to_string(&path).unwrap();
    let marker = "data:\n                    ca.crt: PEM-2";
    std::fs::write(
        &path,
        original.replacen(marker, "data:\n                    ca.crt: PEM-9", 1),
    )
    .unwrap();
    let junit = dir.path().join("junit.xml");
    let (out, _) = kubewasm_test(
        &shared_cache(),
        &[
            &replicator(),
            path.to_str().unwrap(),
            dir.path().join("access.yaml").to_str().unwrap(),
            "--junit",
            junit.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let xml = std::fs::read_to_string(&junit).unwrap();
    let report = quick_junit::Report::deserialize_from_str(&xml).unwrap();
    assert_eq!(
        (report.tests, report.failures, report.errors),
        (9, 1, 0),
        "{xml}"
    );
    assert_eq!(report.test_suites.len(), 2);
    let failed: Vec<_> = report
        .test_suites
        .iter()
        .flat_map(|s| &s.test_cases)
        .filter(|c| !matches!(c.status, quick_junit::TestCaseStatus::Success { .. }))
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(
        failed[0].name.as_str(),
        "a changed source updates its copies"
    );
    assert_eq!(failed[0].classname.as_ref().unwrap().as_str(), "replicate");
    assert!(
        xml.contains("ca.crt&quot;]: expected &quot;PEM-9&quot;, observed &quot;PEM-2&quot;"),
        "{xml}"
    );
}

/// A fixture that cannot be run as written: exit 2, the message names the
/// file, the case and the field.
#[test]
fn a_bad_fixture_exits_2_naming_the_file_case_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(
        &path,
        "cases:\n  - name: fine\n    steps: [{pending: true, expect: []}]\n  - name: typo in a result\n    steps:\n      - pending: true\n        expect:\n          - result: retyr\n",
    )
    .unwrap();
    let (out, _) = kubewasm_test(&shared_cache(), &[&replicator(), path.to_str().unwrap()]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(2), "{report}");
    let expected = format!(
        "ERROR {}: case 2 (\"typo in a result\"): cases[1].steps[0].expect[0].result: expected one of ok,",
        path.display()
    );
    assert!(stdout(&out).contains(&expected), "{report}");
    assert!(stdout(&out).contains("found retyr"), "{report}");

    // A reference to an object the cache does not hold: exit 2 too.
    std::fs::write(
        &path,
        format!(
            "sidecar: {}\ncases:\n  - name: missing object\n    steps:\n      - delta: added\n        object: configmaps nowhere/nothing\n        expect: []\n",
            repo_root().join("examples/plugins/config-replicator.yaml").display()
        ),
    )
    .unwrap();
    let (out, _) = kubewasm_test(&shared_cache(), &[&replicator(), path.to_str().unwrap()]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(2), "{report}");
    assert!(
        stdout(&out).contains(
            "cases[0].steps[0].object: configmaps nowhere/nothing is not in the cache at this step"
        ),
        "{report}"
    );

    // The arguments swapped: exit 2, saying what the plugin must be.
    let (out, _) = kubewasm_test(&shared_cache(), &[path.to_str().unwrap(), &replicator()]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(2), "{report}");
    assert!(
        report.contains("is not a WebAssembly component (give the plugin's .wasm first"),
        "{report}"
    );
}

/// The sidecar's access list holds as in the host: a write outside it is
/// refused when emitted (the handler's error is the call's result), a
/// registration it does not cover is refused at load; the fixture says so.
#[test]
fn the_sidecars_access_list_is_enforced() {
    let (out, _) = kubewasm_test(
        &shared_cache(),
        &[&replicator(), &format!("{REPLICATOR_TESTS}/access.yaml")],
    );
    let report = text(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    let fixture =
        std::fs::read_to_string(repo_root().join(REPLICATOR_TESTS).join("access.yaml")).unwrap();
    assert!(fixture.contains("may not apply configmaps in namespace team-b: its sidecar grants apply on configmaps only in namespaces [team-a]"));

    // Without the case's sidecar (the plugin's permissive one), the same
    // step writes into team-b and the expectation fails.
    let dir = replicator_fixtures();
    let path = dir.path().join("access.yaml");
    let text_before = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text_before.replace(
            "    sidecar: team-a-only.yaml\n",
            &format!(
                "    sidecar: {}\n",
                repo_root()
                    .join("examples/plugins/config-replicator.yaml")
                    .display()
            ),
        ),
    )
    .unwrap();
    let (out, _) = kubewasm_test(&shared_cache(), &[&replicator(), path.to_str().unwrap()]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    // It now writes into team-b too, and its call succeeds.
    assert!(
        stdout(&out).contains("step 1: expect[0].actions: expected nothing, observed [{\"apply\""),
        "{report}"
    );
    assert!(
        stdout(&out).contains("-    permanent: 'action refused, not granted"),
        "{report}"
    );
    assert!(stdout(&out).contains("+  result: ok"), "{report}");
}

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

/// The JavaScript config-replicator passes the Rust one's fixture; its
/// compile (seconds) happens once: the second run loads it from the
/// compile cache.
#[test]
fn the_javascript_twin_passes_the_same_fixture_and_its_compile_is_cached() {
    let js = js_replicator();
    let cache = tempfile::tempdir().unwrap();
    let args = [
        js.to_str().unwrap(),
        "plugins/config-replicator/tests/replicate.yaml",
        "--name",
        "config_replicator",
    ];
    let (first, cold) = kubewasm_test(cache.path(), &args);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    assert!(
        stdout(&first).contains(", compiled in "),
        "{}",
        text(&first)
    );
    let (second, warm) = kubewasm_test(cache.path(), &args);
    let report = text(&second);
    assert_eq!(second.status.code(), Some(0), "{report}");
    assert!(stdout(&second).contains("compile cached"), "{report}");
    assert!(stdout(&second).contains("7 passed"), "{report}");
    assert!(warm * 2 < cold, "cold {cold:?}, cached {warm:?}");
    eprintln!("JavaScript config-replicator, 7 cases: cold {cold:?}, cached {warm:?}\n{report}");
}

/// The JavaScript config-replicator, as plugins/build-languages.sh writes
/// it (built through the harness when it is not there yet).
fn js_replicator() -> PathBuf {
    let built = repo_root().join("plugins/target/languages/js-config-replicator.wasm");
    if built.is_file() {
        return built;
    }
    language_artifacts().join("js-config-replicator.wasm")
}

#[test]
fn the_schema_is_printed() {
    let out = Command::new(kubewasm_bin())
        .args(["test", "--schema"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let committed: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("docs/fixture.schema.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(printed, committed);
    assert_eq!(printed["title"], "kubewasm test fixture");
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

// --- kubewasm record ---------------------------------------------------

/// `kubewasm record ARGS` with the shared compile cache; its output and
/// how long it took.
fn kubewasm_record(args: &[&str]) -> (Output, Duration) {
    let bin = kubewasm_bin();
    let start = Instant::now();
    let out = Command::new(bin)
        .arg("record")
        .args(args)
        .arg("--cache-dir")
        .arg(shared_cache())
        .current_dir(repo_root())
        .output()
        .expect("run kubewasm record");
    (out, start.elapsed())
}

/// `kubewasm record` of the folder `plugins` against `kubeconfig` into
/// `out`, stopped by `stop` (`--duration 6s`, `--until-idle`...), off the
/// async runtime so the test's own tasks (a churn) go on meanwhile.
async fn record(
    kubeconfig: &Path,
    plugins: &Path,
    out: &Path,
    stop: &[&str],
) -> (Output, Duration) {
    let mut args: Vec<String> = [
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        "--plugins".into(),
        plugins.display().to_string(),
        "--out".into(),
        out.display().to_string(),
    ]
    .into();
    args.extend(stop.iter().map(|a| a.to_string()));
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        kubewasm_record(&args)
    })
    .await
    .unwrap()
}

/// A plugin folder holding `wasm` as `NAME.wasm` and `sidecar` as its
/// `NAME.yaml`.
fn plugin_folder(wasm: &Path, name: &str, sidecar: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(wasm, dir.path().join(format!("{name}.wasm"))).unwrap();
    std::fs::write(dir.path().join(format!("{name}.yaml")), sidecar).unwrap();
    dir
}

/// A suffix that keeps this run's namespaces apart on the shared server.
fn run_id() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros()
            % 0xffff_ffff
    )
}

/// The done-when of issue 27's recording: the config-replicator recorded
/// against the real API server while the e2e churn changes its sources,
/// nothing written to the cluster, and `kubewasm test` replaying the
/// recording to the same actions (and failing when one is changed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_of_the_churn_replays_to_the_same_actions() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, ListParams};
    use kubewasm_tests::controlplane::ControlPlane;
    use kubewasm_tests::e2e::{churn, namespace};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let cp = tokio::task::spawn_blocking(ControlPlane::shared)
        .await
        .unwrap();
    let client = cp.admin_client().await;
    let id = run_id();
    let src = format!("rec-src-{id}");
    let tenants = [format!("rec-t1-{id}"), format!("rec-t2-{id}")];
    namespace(&client, &src, serde_json::json!({})).await;
    for t in &tenants {
        namespace(&client, t, serde_json::json!({"record-tenant": &id})).await;
    }
    let sidecar = format!(
        "config:\n  sourceSelector: kubewasm.io/replicate=true\n  namespaceSelector: record-tenant={id}\n\
         access:\n  - {{kinds: [configmaps], verbs: [read], namespaces: [{src}, {t1}, {t2}]}}\n  \
         - {{kinds: [namespaces], verbs: [read]}}\n  \
         - {{kinds: [configmaps], verbs: [apply, delete], namespaces: [{t1}, {t2}]}}\n",
        t1 = tenants[0],
        t2 = tenants[1]
    );
    let plugins = plugin_folder(
        &plugin_artifacts().join("config_replicator.wasm"),
        "config_replicator",
        &sidecar,
    );
    let out_dir = tempfile::tempdir().unwrap();
    // The compile cached before the clock and the churn start.
    let _ = kubewasm_bin();

    let stop = Arc::new(AtomicBool::new(false));
    let churner = tokio::spawn({
        let (client, stop, src) = (client.clone(), stop.clone(), src.clone());
        async move { churn(client, &src, "kubewasm.io/replicate", &stop).await }
    });
    let (out, took) = record(
        cp.admin_kubeconfig(),
        plugins.path(),
        out_dir.path(),
        &["--duration", "10s", "--seed", "7"],
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    let changes = churner.await.unwrap();
    let report = text(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    eprintln!("recorded in {took:?} while the churn made {changes} changes: {report}");

    let fixture = out_dir.path().join("config_replicator.yaml");
    let written = std::fs::read_to_string(&fixture).unwrap();
    let doc: serde_json::Value = serde_yaml_ng::from_str(&written).unwrap();
    assert_eq!(doc["dryRun"], true, "{written}");
    let steps = doc["cases"][0]["steps"].as_array().unwrap();
    let with_actions = steps
        .iter()
        .filter(|s| {
            s["expect"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["actions"].as_array().is_some_and(|a| !a.is_empty()))
        })
        .count();
    let deltas = steps.iter().filter(|s| s.get("delta").is_some()).count();
    eprintln!(
        "{} steps, {deltas} deltas, {with_actions} with actions",
        steps.len()
    );
    assert!(deltas >= 50, "only {deltas} deltas recorded:\n{report}");
    assert!(
        with_actions >= 50,
        "only {with_actions} steps with actions:\n{report}"
    );
    assert!(
        steps[0]["initialList"] == true,
        "the recording starts with the initial list"
    );

    // Nothing was written: no copy exists in either tenant.
    for t in &tenants {
        let copies = Api::<ConfigMap>::namespaced(client.clone(), t)
            .list(&ListParams::default().labels("kubewasm.io/replica=true"))
            .await
            .unwrap();
        assert!(
            copies.items.is_empty(),
            "the recording wrote copies into {t}: {:?}",
            copies
                .items
                .iter()
                .map(|c| &c.metadata.name)
                .collect::<Vec<_>>()
        );
    }

    // The replay reproduces every recorded call (with the recording's
    // sidecar, which the fixture names, whichever .wasm is given).
    let fixture_arg = fixture.display().to_string();
    let (out, took) = kubewasm_test(&shared_cache(), &[&replicator(), &fixture_arg]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert!(
        stdout(&out).contains("test result: ok. 1 passed; 0 failed"),
        "{report}"
    );
    eprintln!("replayed in {took:?}");

    // And it can fail: one recorded action changed.
    let mut changed = doc.clone();
    let action = changed["cases"][0]["steps"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .flat_map(|s| s["expect"].as_array_mut().into_iter().flatten())
        .flat_map(|c| c["actions"].as_array_mut().into_iter().flatten())
        .find(|a| a["apply"]["object"]["data"]["value"].is_string())
        .expect("an apply of a copy");
    action["apply"]["object"]["data"]["value"] = serde_json::json!("tampered");
    std::fs::write(&fixture, serde_yaml_ng::to_string(&changed).unwrap()).unwrap();
    let (out, _) = kubewasm_test(&shared_cache(), &[&replicator(), &fixture_arg]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        stdout(&out).contains(r#"apply.object.data.value: expected "tampered", observed"#),
        "{report}"
    );
}

/// A Secret the plugin reads is in the recording with its values
/// replaced by the marker: its value appears nowhere in the file, and the
/// recording still replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_redacts_secret_values() {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, PostParams};
    use kubewasm_tests::controlplane::ControlPlane;
    use kubewasm_tests::e2e::{namespace, recorder_sidecar};

    let cp = tokio::task::spawn_blocking(ControlPlane::shared)
        .await
        .unwrap();
    let client = cp.admin_client().await;
    let id = run_id();
    let ns = format!("rec-secret-{id}");
    namespace(&client, &ns, serde_json::json!({})).await;
    let plain = format!("s3cr3t-value-{id}");
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "token", "namespace": &ns},
        "stringData": {"token": &plain}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let plugins = plugin_folder(
        &plugin_artifacts().join("recorder.wasm"),
        "recorder",
        &recorder_sidecar(&ns, &["secrets"]),
    );
    let out_dir = tempfile::tempdir().unwrap();
    let (out, _) = record(
        cp.admin_kubeconfig(),
        plugins.path(),
        out_dir.path(),
        &["--until-idle", "--quiet", "1s"],
    )
    .await;
    let report = text(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    let fixture = out_dir.path().join("recorder.yaml");
    let bytes = std::fs::read(&fixture).unwrap();
    let written = String::from_utf8_lossy(&bytes);
    let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &plain);
    assert!(written.contains("name: token"), "{written}");
    assert!(written.contains("token: <redacted>"), "{written}");
    for value in [&plain, &encoded] {
        assert!(!written.contains(value.as_str()), "{value} in:\n{written}");
    }
    let (out, _) = kubewasm_test(
        &shared_cache(),
        &[
            &plugins.path().join("recorder.wasm").display().to_string(),
            &fixture.display().to_string(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

/// A kubeconfig that cannot be read, and an out folder that cannot be
/// written, end the recording at once with a message naming the file.
#[test]
fn a_bad_kubeconfig_or_out_folder_is_named() {
    let plugins = plugin_folder(
        &plugin_artifacts().join("noop.wasm"),
        "noop",
        "config: {}\n",
    );
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("broken-kubeconfig");
    std::fs::write(&kubeconfig, "clusters: [this is not a kubeconfig\n").unwrap();
    let out_dir = dir.path().join("out");
    let (out, _) = kubewasm_record(&[
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--plugins",
        plugins.path().to_str().unwrap(),
        "--out",
        out_dir.to_str().unwrap(),
        "--until-idle",
    ]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("cannot read kubeconfig {}", kubeconfig.display())),
        "{report}"
    );

    let not_a_dir = dir.path().join("a-file");
    std::fs::write(&not_a_dir, "").unwrap();
    let (out, _) = kubewasm_record(&[
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--plugins",
        plugins.path().to_str().unwrap(),
        "--out",
        not_a_dir.to_str().unwrap(),
        "--duration",
        "1s",
    ]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!(
            "cannot write to the output folder {}",
            not_a_dir.display()
        )),
        "{report}"
    );
}

/// Retries and requeues the plugin asks for while recording come due in
/// the recording as `pending` steps, at the same virtual times in the
/// replay (testkit's `reconcile` mode: a retry, then a requeue).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recordings_retries_and_requeues_are_pending_steps_that_replay() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};
    use kubewasm_tests::controlplane::ControlPlane;
    use kubewasm_tests::e2e::namespace;

    let cp = tokio::task::spawn_blocking(ControlPlane::shared)
        .await
        .unwrap();
    let client = cp.admin_client().await;
    let ns = format!("rec-retry-{}", run_id());
    namespace(&client, &ns, serde_json::json!({})).await;
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "reconcile-me", "namespace": &ns}
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let plugins = plugin_folder(
        &plugin_artifacts().join("testkit.wasm"),
        "testkit",
        &format!(
            "config: {{mode: reconcile, count: 500}}\naccess:\n  - {{kinds: [pods, configmaps], verbs: [read, apply, patch, delete, events], namespaces: [{ns}]}}\n"
        ),
    );
    let out_dir = tempfile::tempdir().unwrap();
    let (out, _) = record(
        cp.admin_kubeconfig(),
        plugins.path(),
        out_dir.path(),
        &["--duration", "6s"],
    )
    .await;
    let report = text(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    let fixture = out_dir.path().join("testkit.yaml");
    let written = std::fs::read_to_string(&fixture).unwrap();
    let doc: serde_json::Value = serde_yaml_ng::from_str(&written).unwrap();
    let steps = doc["cases"][0]["steps"].as_array().unwrap();
    let results: Vec<String> = steps
        .iter()
        .flat_map(|s| s["expect"].as_array().into_iter().flatten())
        .map(|c| format!("{} -> {}", c["call"], c["result"]))
        .collect();
    let pending = steps.iter().filter(|s| s["pending"] == true).count();
    assert!(
        pending >= 2,
        "{pending} pending steps: {results:#?}\n{written}"
    );
    assert!(
        results.iter().any(|r| r.contains("retry"))
            && results.iter().any(|r| r.contains("requeueAfter")),
        "{results:#?}"
    );
    let (out, _) = kubewasm_test(
        &shared_cache(),
        &[
            &plugins.path().join("testkit.wasm").display().to_string(),
            &fixture.display().to_string(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}\n{written}", text(&out));
}

/// SIGTERM stops a recording early, and what was recorded is written
/// (exit 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_a_recording_and_writes_it() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};
    use kubewasm_tests::controlplane::ControlPlane;
    use kubewasm_tests::e2e::namespace;
    use std::io::BufRead;

    let cp = tokio::task::spawn_blocking(ControlPlane::shared)
        .await
        .unwrap();
    let client = cp.admin_client().await;
    let ns = format!("rec-term-{}", run_id());
    namespace(&client, &ns, serde_json::json!({})).await;
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": &ns, "labels": {"kubewasm.io/replicate": "true"}},
        "data": {"k": "v"}
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let plugins = plugin_folder(
        &plugin_artifacts().join("config_replicator.wasm"),
        "config_replicator",
        &format!(
            "access:\n  - {{kinds: [configmaps], verbs: [read, apply, delete], namespaces: [{ns}]}}\n  - {{kinds: [namespaces], verbs: [read]}}\n"
        ),
    );
    let out_dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(kubewasm_bin())
        .arg("record")
        .arg("--kubeconfig")
        .arg(cp.admin_kubeconfig())
        .arg("--plugins")
        .arg(plugins.path())
        .arg("--out")
        .arg(out_dir.path())
        .args(["--duration", "10m", "--log-format", "json", "--cache-dir"])
        .arg(shared_cache())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let started = Instant::now();
    // Its log read to the end (a closed stderr would fail its writes), the
    // recording's start told on a channel.
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let log = std::thread::spawn(move || {
        let mut seen = String::new();
        for line in std::io::BufReader::new(stderr).lines() {
            let line = line.unwrap();
            if line.contains("caches listed; recording") {
                let _ = started_tx.send(());
            }
            seen.push_str(&line);
            seen.push('\n');
        }
        seen
    });
    let recording = tokio::task::spawn_blocking(move || started_rx.recv().is_ok())
        .await
        .unwrap();
    assert!(
        recording,
        "the recording never started:\n{}",
        log.join().unwrap()
    );
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let report = format!("{}{}", text(&out), log.join().unwrap());
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert!(
        report.contains("signal received: stopping the recording"),
        "{report}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "stopped only after {:?}",
        started.elapsed()
    );
    let written = std::fs::read_to_string(out_dir.path().join("config_replicator.yaml")).unwrap();
    let doc: serde_json::Value = serde_yaml_ng::from_str(&written).unwrap();
    assert_eq!(
        doc["cases"][0]["steps"][0]["initialList"], true,
        "{written}"
    );
    assert!(
        doc["cache"]["objects"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["metadata"]["name"] == "settings"
                && o["metadata"]["namespace"] == ns.as_str()),
        "{written}"
    );
}
