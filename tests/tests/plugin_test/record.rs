//! `kubewasm record` against the shared control plane, replayed with
//! `kubewasm test`: a recording under churn replays to the same actions,
//! Secrets are redacted, retries and requeues become pending steps, SIGTERM
//! writes what was recorded, and a bad kubeconfig or output folder is named.

use super::*;

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

/// An object deleted and created again while the recording's watch could
/// not resume (a relist after 410 Expired, as after an etcd compaction) is
/// recorded as the host's informer delivers it: the old object's delete
/// (its final state unknown) then the new one's add, never an update from
/// one object to another; the recording replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_recreated_across_a_relist_is_recorded_as_a_delete_then_an_add() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, DeleteParams, PostParams};
    use kubewasm_tests::controlplane::ControlPlane;
    use kubewasm_tests::e2e::{eventually, namespace};
    use kubewasm_tests::faultproxy::FaultProxy;

    let cp = tokio::task::spawn_blocking(ControlPlane::shared)
        .await
        .unwrap();
    let client = cp.admin_client().await;
    let ns = format!("rec-relist-{}", run_id());
    namespace(&client, &ns, serde_json::json!({})).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm = |value: &str| -> ConfigMap {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "again", "namespace": &ns},
            "data": {"v": value},
        }))
        .unwrap()
    };
    let first = cms.create(&PostParams::default(), &cm("1")).await.unwrap();
    let plugins = plugin_folder(
        &plugin_artifacts().join("recorder.wasm"),
        "recorder",
        &format!(
            "config: {{namespace: {ns}, resources: [configmaps]}}\naccess:\n  - {{kinds: [configmaps], verbs: [read, events], namespaces: [{ns}]}}\n"
        ),
    );
    let proxy = FaultProxy::start(client.clone()).await;
    let kubeconfig_dir = tempfile::tempdir().unwrap();
    let kubeconfig = proxy.kubeconfig(kubeconfig_dir.path());
    let out_dir = tempfile::tempdir().unwrap();
    let recording = {
        let (kubeconfig, plugins, out) = (
            kubeconfig.clone(),
            plugins.path().to_owned(),
            out_dir.path().to_owned(),
        );
        tokio::spawn(
            async move { record(&kubeconfig, &plugins, &out, &["--duration", "25s"]).await },
        )
    };
    // The recording watches once its list is in: then cut its watch and
    // hold the next, delete and recreate the object, and answer the held
    // watch with 410 so that only a list can show what happened.
    eventually(
        "the recording's watch is open",
        Duration::from_secs(60),
        || async { proxy.hold_watches_once_watching().then_some(()) },
    )
    .await;
    eventually(
        "the recording asks to watch again",
        Duration::from_secs(30),
        || async { (proxy.held_watches() > 0).then_some(()) },
    )
    .await;
    cms.delete("again", &DeleteParams::default()).await.unwrap();
    let second = cms.create(&PostParams::default(), &cm("2")).await.unwrap();
    proxy.expire_held_watches();
    let (out, _) = recording.await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    let fixture = out_dir.path().join("recorder.yaml");
    let written = std::fs::read_to_string(&fixture).unwrap();
    let doc: serde_json::Value = serde_yaml_ng::from_str(&written).unwrap();
    let steps: Vec<(String, String, bool)> = doc["cases"][0]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["object"]["metadata"]["name"] == "again")
        .map(|s| {
            (
                s["delta"].as_str().unwrap_or_default().to_owned(),
                s["object"]["metadata"]["uid"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                s["finalStateUnknown"] == true,
            )
        })
        .collect();
    let (old, new) = (
        first.metadata.uid.clone().unwrap(),
        second.metadata.uid.clone().unwrap(),
    );
    assert_eq!(
        steps,
        [
            ("deleted".to_owned(), old, true),
            ("added".to_owned(), new, false)
        ],
        "{written}"
    );
    let (out, _) = kubewasm_test(
        &shared_cache(),
        &[
            &plugins.path().join("recorder.wasm").display().to_string(),
            &fixture.display().to_string(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}\n{written}", text(&out));
}

/// A call's actions are recorded as one dry run of the call: the actor
/// applies a Namespace and then a ConfigMap in it. The server's dry run
/// of the ConfigMap alone says the Namespace is not found, which the
/// call would never meet; the recording keeps no such failure, writes
/// nothing to the cluster, and replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calls_dry_run_actions_see_the_earlier_ones() {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use kube::api::{Api, PostParams};
    use kubewasm_tests::controlplane::ControlPlane;
    use kubewasm_tests::e2e::namespace;

    let cp = tokio::task::spawn_blocking(ControlPlane::shared)
        .await
        .unwrap();
    let client = cp.admin_client().await;
    let id = run_id();
    let (ns, created) = (format!("rec-call-{id}"), format!("rec-new-{id}"));
    namespace(&client, &ns, serde_json::json!({})).await;
    let actions = serde_json::json!([
        {"apply": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": &created}}},
        {"apply": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "inside", "namespace": &created}, "data": {"k": "v"}}},
    ]);
    let script: ConfigMap = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "script", "namespace": &ns, "labels": {"actor": "script"}},
        "data": {"actions": actions.to_string()},
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &script)
        .await
        .unwrap();
    let plugins = plugin_folder(
        &plugin_artifacts().join("actor.wasm"),
        "actor",
        &format!(
            "config: {{writes: [configmaps, namespaces]}}\naccess:\n  - {{kinds: [configmaps], verbs: [read, apply], namespaces: [{ns}, {created}]}}\n  - {{kinds: [namespaces], verbs: [read, apply]}}\n"
        ),
    );
    let out_dir = tempfile::tempdir().unwrap();
    let (out, _) = record(
        cp.admin_kubeconfig(),
        plugins.path(),
        out_dir.path(),
        &["--until-idle"],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let fixture = out_dir.path().join("actor.yaml");
    let written = std::fs::read_to_string(&fixture).unwrap();
    let doc: serde_json::Value = serde_yaml_ng::from_str(&written).unwrap();
    let steps = doc["cases"][0]["steps"].as_array().unwrap();
    let call = steps
        .iter()
        .flat_map(|s| s["expect"].as_array().into_iter().flatten())
        .find(|c| c["call"].as_str().is_some_and(|c| c.ends_with("/script")))
        .unwrap_or_else(|| panic!("no call for the script:\n{written}"));
    assert_eq!(call["result"], "ok", "{written}");
    assert_eq!(
        call["actions"].as_array().map(Vec::len),
        Some(2),
        "{written}"
    );
    assert!(
        steps.iter().all(|s| s.get("failures").is_none()),
        "a failure the call never meets was recorded:\n{written}"
    );
    let namespaces: Api<Namespace> = Api::all(client.clone());
    assert!(
        namespaces.get_opt(&created).await.unwrap().is_none(),
        "a recording wrote to the cluster"
    );
    let (out, _) = kubewasm_test(
        &shared_cache(),
        &[
            &plugins.path().join("actor.wasm").display().to_string(),
            &fixture.display().to_string(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}\n{written}", text(&out));
}
