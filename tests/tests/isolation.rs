//! The runtime isolates plugins: a trap, a deadline overrun, an
//! out-of-memory, a malformed file or a wrong WIT version each fail alone
//! while another plugin keeps working; and the plugin folder loads,
//! replaces and unloads live (half-written files, symlink swaps).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use kubewasm::actions::executor::RecordingSink;
use kubewasm::app::App;
use kubewasm::reload::DirError;
use kubewasm::reload::Outcome;
use kubewasm::runtime::{LoadError, Manifest, Runtime};
use kubewasm_tests::{Harness, describe, idle, install, wasm, write_cluster};
use tokio_util::sync::CancellationToken;

/// The app's plugin folder watched (its poll an hour away), once its
/// events flow; cancel the token and await the task to stop it.
async fn watching(
    app: &App,
) -> (
    CancellationToken,
    tokio::task::JoinHandle<Result<(), DirError>>,
) {
    let cancel = CancellationToken::new();
    let (ready_tx, ready) = tokio::sync::oneshot::channel();
    let watcher = tokio::spawn(app.plugin_dir.clone().watch_with_ready(
        cancel.clone(),
        Duration::from_secs(3600),
        ready_tx,
    ));
    ready.await.unwrap();
    (cancel, watcher)
}

/// The first actions the sink records within `within`, described.
async fn first_actions(sink: &RecordingSink, within: Duration) -> Vec<String> {
    let deadline = std::time::Instant::now() + within;
    let mut got = Vec::new();
    while got.is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        got = sink.take();
    }
    got.iter().map(|(_, a)| describe(a)).collect()
}

fn pods(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {n}, namespace: default}}\nspec: {{containers: [{{name: c, image: x}}]}}\n"))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Runs a misbehaving testkit next to a healthy echo plugin; returns the
/// summary and the echo plugin's actions.
async fn misbehave(mode: &str, limits: &str) -> (kubewasm::app::Summary, Vec<String>) {
    let h = Harness::new();
    write_cluster(
        h.cluster.path(),
        &[("pods.yaml", &pods(&[&format!("{mode}-1"), "fine-1"]))],
    );
    install(
        h.plugins.path(),
        "bad",
        "testkit",
        Some(&format!(
            "config: {{mode: {mode}}}\nlimits: {limits}\n{}",
            kubewasm_tests::TESTKIT_ACCESS
        )),
    );
    install(
        h.plugins.path(),
        "good",
        "testkit",
        Some(&format!(
            "config: {{mode: echo}}\n{}",
            kubewasm_tests::TESTKIT_ACCESS
        )),
    );
    let (app, sink) = h.start_recording().await;
    idle(&app).await;
    let summary = app.summary();
    app.shutdown().await;
    let mut good: Vec<String> = sink
        .take()
        .into_iter()
        .filter(|(p, _)| p == "good")
        .map(|(_, a)| describe(&a))
        .collect();
    good.sort();
    (summary, good)
}

fn echo_actions() -> Vec<String> {
    vec![
        r#"patch Merge pods default/fine-1 {"metadata":{"annotations":{"kubewasm.io/seen":"added"}}}"#.to_owned(),
        r#"patch Merge pods default/MODE-1 {"metadata":{"annotations":{"kubewasm.io/seen":"added"}}}"#.to_owned(),
    ]
}

fn expected(mode: &str) -> Vec<String> {
    let mut v: Vec<String> = echo_actions()
        .into_iter()
        .map(|s| s.replace("MODE", mode))
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trapping_plugin_fails_alone_and_its_delta_goes_dead_after_retries() {
    let (summary, good) = misbehave("trap", "{maxAttempts: 3}").await;
    let bad = &summary.plugins["bad"];
    assert_eq!((bad.failed_calls, bad.dead), (3, 1), "{summary}");
    assert_eq!(
        bad.delivered, 1,
        "the healthy object still went through: {summary}"
    );
    assert_eq!(good, expected("trap"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_plugin_hits_its_deadline() {
    let (summary, good) = misbehave("spin", "{maxAttempts: 2, timeout: 100ms}").await;
    let bad = &summary.plugins["bad"];
    assert_eq!(
        (bad.failed_calls, bad.dead, bad.delivered),
        (2, 1, 1),
        "{summary}"
    );
    assert_eq!(good, expected("spin"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_allocating_past_its_limit_is_stopped() {
    let (summary, good) = misbehave("oom", "{maxAttempts: 2, memory: 16Mi}").await;
    let bad = &summary.plugins["bad"];
    assert_eq!(
        (bad.failed_calls, bad.dead, bad.delivered),
        (2, 1, 1),
        "{summary}"
    );
    assert_eq!(good, expected("oom"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_then_permanent_errors_follow_the_handler_result() {
    let (summary, _) = misbehave("retry", "{maxAttempts: 4}").await;
    assert_eq!(
        (
            summary.plugins["bad"].failed_calls,
            summary.plugins["bad"].dead
        ),
        (4, 1)
    );
    let (summary, _) = misbehave("permanent", "{maxAttempts: 4}").await;
    assert_eq!(
        (
            summary.plugins["bad"].failed_calls,
            summary.plugins["bad"].dead
        ),
        (1, 1),
        "a permanent error is not retried"
    );
}

#[test]
fn bad_files_get_errors_that_name_the_cause() {
    let cache = tempfile::tempdir().unwrap();
    let rt = Runtime::new(kubewasm::runtime::EngineOptions {
        epoch_deadlines: true,
        cache_dir: Some(cache.path().to_owned()),
        ..Default::default()
    })
    .unwrap();
    let prep = |bytes: &[u8]| {
        rt.prepare("x", bytes, Manifest::default())
            .map(|_| ())
            .unwrap_err()
    };
    let good = wasm("noop");
    assert!(
        matches!(prep(&good[..good.len() / 2]), LoadError::Truncated),
        "half-written"
    );
    assert!(matches!(prep(b""), LoadError::Truncated));
    assert!(matches!(prep(b"not wasm at all"), LoadError::NotWasm));
    assert!(matches!(prep(b"\0asm\x01\0\0\0"), LoadError::CoreModule));
    match prep(&wasm("wrong_version")) {
        LoadError::WrongVersion { found } => assert_eq!(found, "0.0.9"),
        other => panic!("expected a version error, got {other}"),
    }
    let msg = prep(&wasm("wrong_version")).to_string();
    assert!(
        msg.contains("@0.0.9")
            && msg.contains("0.1.x")
            && msg.contains("0.2.x")
            && msg.contains("rebuild"),
        "{msg}"
    );
}

#[test]
fn compiled_components_are_cached_on_disk() {
    let cache = tempfile::tempdir().unwrap();
    let opts = kubewasm::runtime::EngineOptions {
        epoch_deadlines: true,
        cache_dir: Some(cache.path().to_owned()),
        ..Default::default()
    };
    let bytes = wasm("noop");
    let first = Runtime::new(opts.clone())
        .unwrap()
        .prepare("noop", &bytes, Manifest::default())
        .unwrap();
    assert_eq!(
        first.compile_source,
        kubewasm::runtime::CompileSource::Compiled
    );
    // A new engine, as after a restart: loads from the cache.
    let second = Runtime::new(opts)
        .unwrap()
        .prepare("noop", &bytes, Manifest::default())
        .unwrap();
    assert_eq!(
        second.compile_source,
        kubewasm::runtime::CompileSource::Cached
    );
    // One artifact, beside the cache's artifact key.
    let artifacts = std::fs::read_dir(cache.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".cwasm")
        })
        .count();
    assert_eq!(artifacts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_folder_loads_replaces_and_unloads_live() {
    let h = Harness::new();
    write_cluster(h.cluster.path(), &[("pods.yaml", &pods(&["a", "b"]))]);
    let (app, sink) = h.start_recording().await;
    idle(&app).await;
    let dir = &app.plugin_dir;
    assert!(dir.scan().await.unwrap().is_empty());

    // New file: loaded, and it receives the cache as initial deltas.
    install(
        h.plugins.path(),
        "p",
        "testkit",
        Some(&format!(
            "config: {{mode: echo}}\n{}",
            kubewasm_tests::TESTKIT_ACCESS
        )),
    );
    assert_eq!(dir.scan().await.unwrap()["p"], Outcome::Loaded);
    idle(&app).await;
    assert_eq!(sink.take().len(), 2);

    // A half-written replacement fails and the old version keeps serving.
    let full = wasm("noop");
    std::fs::write(h.plugins.path().join("p.wasm"), &full[..full.len() / 3]).unwrap();
    match &dir.scan().await.unwrap()["p"] {
        Outcome::Failed(msg) => assert!(msg.contains("truncated"), "{msg}"),
        other => panic!("{other:?}"),
    }
    assert!(
        dir.scan().await.unwrap().is_empty(),
        "a failed file is not retried until it changes"
    );
    write_cluster(h.cluster.path(), &[("pods.yaml", &pods(&["a", "b", "c"]))]);
    app.local().unwrap().rescan().unwrap();
    idle(&app).await;
    let served: Vec<String> = sink.take().iter().map(|(_, a)| describe(a)).collect();
    assert_eq!(
        served,
        vec![
            r#"patch Merge pods default/c {"metadata":{"annotations":{"kubewasm.io/seen":"added"}}}"#
        ]
    );

    // A wrong-version file is refused the same way.
    std::fs::write(h.plugins.path().join("p.wasm"), wasm("wrong_version")).unwrap();
    assert!(matches!(&dir.scan().await.unwrap()["p"], Outcome::Failed(m) if m.contains("0.0.9")));

    // Completing the write swaps in the new version (noop: no actions).
    install(h.plugins.path(), "p", "noop", None);
    std::fs::remove_file(h.plugins.path().join("p.yaml")).unwrap();
    assert_eq!(dir.scan().await.unwrap()["p"], Outcome::Replaced);
    idle(&app).await;
    assert!(sink.take().is_empty());
    assert!(
        app.host
            .get("p")
            .await
            .unwrap()
            .stats()
            .delivered
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    );

    // Removing the file unloads it.
    std::fs::remove_file(h.plugins.path().join("p.wasm")).unwrap();
    assert_eq!(dir.scan().await.unwrap()["p"], Outcome::Unloaded);
    assert!(app.host.get("p").await.is_none());
    app.shutdown().await;
}

/// A file renamed into the folder is a finished write: the watcher scans
/// at once instead of waiting for its debounce. The debounce is set to an
/// hour (and the poll too), so only the rename can load the new version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_into_the_folder_loads_without_the_debounce() {
    let h = Harness::new();
    write_cluster(h.cluster.path(), &[("pods.yaml", &pods(&["a"]))]);
    install(h.plugins.path(), "p", "noop", None);
    let (app, sink) = h.start_recording().await;
    idle(&app).await;
    let first = app.host.get("p").await.unwrap().version().to_owned();

    app.plugin_dir.set_debounce(Duration::from_secs(3600));
    let (cancel, watcher) = watching(&app).await;

    // The sidecar, then the plugin, renamed in (as `kubewasm compile`
    // users and editors ship files).
    let tmp = h.plugins.path().join(".p.yaml.tmp");
    std::fs::write(
        &tmp,
        format!("config: {{mode: echo}}\n{}", kubewasm_tests::TESTKIT_ACCESS),
    )
    .unwrap();
    std::fs::rename(&tmp, h.plugins.path().join("p.yaml")).unwrap();
    install(h.plugins.path(), "p", "testkit", None);

    // The new version replays the cache: one echo patch for pod a.
    assert_eq!(
        first_actions(&sink, Duration::from_secs(30)).await,
        vec![
            r#"patch Merge pods default/a {"metadata":{"annotations":{"kubewasm.io/seen":"added"}}}"#
        ]
    );
    // The version is the file's own content digest (the folder scan hashes
    // the file once and passes that digest down to the cache).
    let version = app.host.get("p").await.unwrap().version().to_owned();
    assert_ne!(version, first);
    let file = std::fs::read(h.plugins.path().join("p.wasm")).unwrap();
    assert_eq!(
        version,
        kubewasm::runtime::engine::content_digest(&file)[..12]
    );
    cancel.cancel();
    watcher.await.unwrap().unwrap();
    app.shutdown().await;
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_style_symlink_swap_reloads_through_the_watcher() {
    use std::os::unix::fs::symlink;
    let h = Harness::new();
    write_cluster(h.cluster.path(), &[("pods.yaml", &pods(&["a"]))]);
    // The layout kubelet gives a ConfigMap volume.
    let root = h.plugins.path();
    let v1 = root.join("..2026_11_22_v1");
    std::fs::create_dir(&v1).unwrap();
    std::fs::write(v1.join("p.wasm"), wasm("noop")).unwrap();
    symlink("..2026_11_22_v1", root.join("..data")).unwrap();
    symlink("..data/p.wasm", root.join("p.wasm")).unwrap();

    let (app, sink) = h.start_recording().await;
    idle(&app).await;
    assert!(app.host.get("p").await.is_some());
    assert!(sink.take().is_empty(), "noop emits nothing");

    let (cancel, watcher) = watching(&app).await;
    // kubelet's atomic update: new timestamped dir, new ..data symlink renamed over the old.
    let v2 = root.join("..2026_11_22_v2");
    std::fs::create_dir(&v2).unwrap();
    std::fs::write(v2.join("p.wasm"), wasm("testkit")).unwrap();
    std::fs::write(
        v2.join("p.yaml"),
        format!("config: {{mode: echo}}\n{}", kubewasm_tests::TESTKIT_ACCESS),
    )
    .unwrap();
    symlink("..data/p.yaml", root.join("p.yaml")).unwrap();
    symlink("..2026_11_22_v2", root.join("..data_tmp")).unwrap();
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    std::fs::remove_dir_all(&v1).unwrap();

    // The new version replays the cache: one echo patch for pod a.
    assert_eq!(
        first_actions(&sink, Duration::from_secs(20)).await,
        vec![
            r#"patch Merge pods default/a {"metadata":{"annotations":{"kubewasm.io/seen":"added"}}}"#
        ]
    );
    cancel.cancel();
    watcher.await.unwrap().unwrap();
    app.shutdown().await;
}

/// Starts a host over `h` with `opts` changed by `tune`, recording actions.
async fn start_tuned(
    h: &Harness,
    tune: impl FnOnce(&mut kubewasm::app::RunOptions),
) -> (
    kubewasm::app::App,
    std::sync::Arc<kubewasm::actions::executor::RecordingSink>,
) {
    let mut opts = h.options();
    tune(&mut opts);
    let sink = std::sync::Arc::new(kubewasm::actions::executor::RecordingSink::default());
    let app = kubewasm::app::App::start_with(
        &opts,
        Some(sink.clone() as std::sync::Arc<dyn kubewasm::actions::executor::ActionSink>),
        kubewasm::telemetry::Telemetry::new(kubewasm::telemetry::Identity::from_env()),
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap();
    (app, sink)
}

/// Polls `cond` every 20 ms for up to 30 s.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_configs_max_attempts_applies_when_the_sidecar_sets_none() {
    let h = Harness::new();
    write_cluster(h.cluster.path(), &[("pods.yaml", &pods(&["trap-1"]))]);
    install(
        h.plugins.path(),
        "bad",
        "testkit",
        Some(&format!(
            "config: {{mode: trap}}\n{}",
            kubewasm_tests::TESTKIT_ACCESS
        )),
    );
    let (app, _) = start_tuned(&h, |o| {
        o.dispatch.max_attempts = Some(2);
        o.dispatch.unhealthy_after = 100;
    })
    .await;
    idle(&app).await;
    let summary = app.summary();
    app.shutdown().await;
    let bad = &summary.plugins["bad"];
    assert_eq!((bad.failed_calls, bad.dead), (2, 1), "{summary}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_keeps_trapping_is_quarantined_and_keeps_its_deltas() {
    let h = Harness::new();
    let names: Vec<String> = (0..10).map(|i| format!("trap-{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    write_cluster(h.cluster.path(), &[("pods.yaml", &pods(&names))]);
    install(
        h.plugins.path(),
        "bad",
        "testkit",
        Some(&format!(
            "config: {{mode: trap}}\nlimits: {{maxAttempts: 1000}}\n{}",
            kubewasm_tests::TESTKIT_ACCESS
        )),
    );
    let (app, _) = start_tuned(&h, |o| {
        o.dispatch.unhealthy_after = 3;
        o.dispatch.quarantine_base = Duration::from_millis(200);
        o.dispatch.quarantine_max = Duration::from_millis(400);
    })
    .await;
    let version = app.host.get("bad").await.unwrap();
    let stats = version.stats().clone();
    let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::SeqCst);
    // 200 + 400 + 400 ms of quarantine: without it, ten deltas retried
    // every 10-100 ms would make dozens of instances in that time.
    eventually("three quarantines", || load(&stats.quarantines) >= 3).await;
    let instances = version.instantiations();
    let calls = load(&stats.failed_calls);
    let quarantines = load(&stats.quarantines);
    // Three instances trapped before the first quarantine; each later one
    // follows a single trial call on a single new instance (one may be in flight).
    assert!(
        instances <= quarantines + 3,
        "{instances} instances for {quarantines} quarantines"
    );
    assert!(
        calls <= quarantines + 3,
        "{calls} calls for {quarantines} quarantines"
    );
    // Nothing was given up or handled: every delta is still queued.
    assert_eq!((load(&stats.dead), load(&stats.delivered)), (0, 0));
    assert!(!app.host.all_idle().await);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_sidecar_is_an_error_and_the_plugin_does_not_load() {
    let h = Harness::new();
    write_cluster(h.cluster.path(), &[("pods.yaml", &pods(&["a"]))]);
    let (app, _) = h.start_recording().await;
    idle(&app).await;
    install(h.plugins.path(), "p", "testkit", None);
    // Exists, cannot be read as a file.
    std::fs::create_dir(h.plugins.path().join("p.yaml")).unwrap();
    match &app.plugin_dir.scan().await.unwrap()["p"] {
        Outcome::Failed(m) => assert!(m.contains("p.yaml") && m.contains("cannot read"), "{m}"),
        other => panic!("expected a failure, got {other:?}"),
    }
    assert!(app.host.get("p").await.is_none());
    assert!(app.summary().failed_loads.contains_key("p"));
    // Readable again: it loads.
    std::fs::remove_dir(h.plugins.path().join("p.yaml")).unwrap();
    std::fs::write(
        h.plugins.path().join("p.yaml"),
        format!("config: {{mode: ok}}\n{}", kubewasm_tests::TESTKIT_ACCESS),
    )
    .unwrap();
    assert_eq!(app.plugin_dir.scan().await.unwrap()["p"], Outcome::Loaded);
    assert!(app.summary().failed_loads.is_empty());
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_subscriptions_to_one_kind_read_and_index_their_own_caches() {
    let h = Harness::new();
    let cm = |ns: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x, namespace: {ns}}}\ndata: {{app: x}}\n"
        )
    };
    write_cluster(
        h.cluster.path(),
        &[
            ("pods.yaml", &pods(&["x"])),
            ("one.yaml", &cm("one")),
            ("two.yaml", &cm("two")),
            ("three.yaml", &cm("three")),
        ],
    );
    install(
        h.plugins.path(),
        "p",
        "testkit",
        Some(&format!(
            "config: {{mode: two-caches}}\n{}",
            kubewasm_tests::TESTKIT_ACCESS
        )),
    );
    let (app, sink) = h.start_recording().await;
    idle(&app).await;
    app.shutdown().await;
    let got: Vec<String> = sink.take().iter().map(|(_, a)| describe(a)).collect();
    assert_eq!(
        got,
        vec![
            r#"patch Merge pods default/x {"metadata":{"annotations":{"kubewasm.io/found":"one=true,two=true,listed=2,indexed=2"}}}"#
        ]
    );
}
