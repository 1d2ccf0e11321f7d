//! The API server misbehaving: restarted mid-stream, frozen for a minute,
//! compacted past a watch (410 Gone), and answering writes with storms of
//! 429 and 5xx; no delta is lost or repeated.

use super::*;

/// Creates, updates and deletes ConfigMaps: `c0..c4` updated, `c5, c6`
/// deleted, `n0..n2` created.
async fn churn(api: &Api<ConfigMap>, ns: &str) {
    for i in 0..5 {
        set_cm(api, &format!("c{i}"), "churned").await;
    }
    for i in 5..7 {
        api.delete(&format!("c{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    for i in 0..3 {
        create_cm(api, ns, &format!("n{i}"), "0").await;
    }
}

/// Waits until the recorder's view of the ConfigMaps in `ns` equals what
/// the server holds now, saying `what` it waits for; returns what it
/// recorded.
async fn recorder_caught_up(
    client: &kube::Client,
    api: &Api<ConfigMap>,
    ns: &str,
    what: &str,
) -> Vec<Seen> {
    let server = configmap_versions(api).await;
    recorded_until_view_is(client, ns, "recorder", &server, what, WAIT).await
}

/// Live deltas (after the first synced marker) never repeat.
fn assert_no_duplicates(seen: &[Seen]) {
    let start = seen
        .iter()
        .position(|s| s.delta == "synced")
        .map_or(0, |p| p + 1);
    let mut live: Vec<(&str, &str, &str)> = seen[start..]
        .iter()
        .filter(|s| s.delta != "synced")
        .map(|s| (s.name.as_str(), s.rv.as_str(), s.delta.as_str()))
        .collect();
    let n = live.len();
    live.sort_unstable();
    live.dedup();
    assert_eq!(n, live.len(), "a delta was delivered twice: {seen:#?}");
}

#[tokio::test]
async fn api_server_restart_mid_stream_loses_no_delta() {
    // Its own control plane: restarting the shared one would disturb the
    // other tests.
    let cp = ControlPlane::start().await.unwrap();
    let client = cp.admin_client().await;
    let ns = "e2e-restart";
    eight_configmaps(&client, ns).await;
    let (host, _) = recorder_synced(&cp, &client, ns).await;
    cp.restart().await.unwrap();
    // Churn at once, while the host is still reconnecting with backoff.
    let client = cp.admin_client().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    churn(&api, ns).await;
    let seen =
        recorder_caught_up(&client, &api, ns, "the plugin's view to equal the server's").await;
    assert_no_duplicates(&seen);
    assert!(host.stop().success());
}

/// A hung API server (SIGSTOP for 60 s: connections open, nothing
/// answers) looks like a quiet cluster until the host probes it: the stall
/// is reported naming the informer, and after the thaw the watch resumes
/// with nothing lost or repeated.
#[tokio::test]
async fn api_server_frozen_for_a_minute_is_reported_and_loses_no_delta() {
    let cp = ControlPlane::start().await.unwrap();
    let client = cp.admin_client().await;
    let ns = "e2e-freeze";
    let api = eight_configmaps(&client, ns).await;
    let (host, _) = recorder_synced(&cp, &client, ns).await;
    set_cm(&api, "c0", "before").await;
    wait_seen(&client, ns, |s| s.iter().any(|x| x.delta == "updated")).await;

    let frozen = std::time::Instant::now();
    cp.pause_apiserver().unwrap();
    let thaw = scopeguard(&cp);
    let line = host
        .wait_line("watch stalled", Duration::from_secs(60))
        .await;
    let reported = frozen.elapsed();
    assert!(
        line.contains("configmaps"),
        "the stall names the informer: {line}"
    );
    assert!(line.contains("does not answer"), "{line}");
    // The rest of the minute, then thaw.
    tokio::time::sleep(Duration::from_secs(60).saturating_sub(frozen.elapsed())).await;
    drop(thaw);
    let thawed = std::time::Instant::now();

    churn(&api, ns).await;
    let seen =
        recorder_caught_up(&client, &api, ns, "the plugin's view to equal the server's").await;
    eprintln!(
        "API server frozen {:?}: stall reported after {reported:?}; view equal to the server {:?} after the thaw",
        thawed - frozen,
        thawed.elapsed()
    );
    assert_no_duplicates(&seen);
    host.wait_log("watch resumed after a stall", WAIT).await;
    assert!(host.stop().success());
}

/// Resumes a paused API server when dropped (also when the test fails).
fn scopeguard(cp: &ControlPlane) -> impl Drop + '_ {
    struct Thaw<'a>(&'a ControlPlane);
    impl Drop for Thaw<'_> {
        fn drop(&mut self) {
            self.0.resume_apiserver().unwrap();
        }
    }
    Thaw(cp)
}

#[tokio::test]
async fn gone_410_relists_and_reports_missed_deletions_as_final_state_unknown() {
    // Short compaction and no watch cache: a watch resumed from an old
    // resourceVersion hits etcd's compaction and gets 410 Gone.
    let cp = ControlPlane::builder()
        .compaction(Duration::from_secs(1))
        .watch_cache(false)
        .start()
        .await
        .unwrap();
    let client = cp.admin_client().await;
    let ns = "e2e-gone";
    eight_configmaps(&client, ns).await;
    let (host, _) = recorder_synced(&cp, &client, ns).await;
    // Freeze the host and cut its watch (restarting the API server), so
    // that it sees nothing of what follows until it reconnects...
    host.pause();
    cp.restart().await.unwrap();
    let client = cp.admin_client().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    churn(&api, ns).await;
    // ...by when compaction has passed its last resourceVersion.
    tokio::time::sleep(Duration::from_secs(5)).await;
    host.resume();
    let seen = recorder_caught_up(
        &client,
        &api,
        ns,
        "the plugin's view to equal the server's after a relist",
    )
    .await;
    let deletes: Vec<String> = seen
        .iter()
        .filter(|s| s.delta == "deleted")
        .map(Seen::short)
        .collect();
    assert_eq!(
        deletes,
        ["deleted c5 unknown", "deleted c6 unknown"],
        "{seen:#?}"
    );
    // The deleted objects arrive with their last known state.
    for s in seen.iter().filter(|s| s.delta == "deleted") {
        let added = seen
            .iter()
            .find(|a| a.name == s.name && a.delta == "added")
            .unwrap();
        assert_eq!(s.rv, added.rv, "last known state of {}", s.name);
    }
    assert!(
        host.logs().contains("410") || host.logs().to_lowercase().contains("too old"),
        "no 410 in the host log:\n{}",
        host.logs()
    );
    // The relist and the vanished objects show in the metrics.
    let body = http_get(host.metrics_addr(WAIT).await, "/metrics")
        .unwrap()
        .2;
    for (series, least) in [
        ("kubewasm_informer_relists_total{kind=\"configmaps\"}", 1.0),
        (
            "kubewasm_informer_deltas_total{kind=\"configmaps\",type=\"deleted\"}",
            2.0,
        ),
    ] {
        let v = sample(&body, series).unwrap_or_else(|| panic!("no {series} in:\n{body}"));
        assert!(v >= least, "{series} {v}:\n{body}");
    }
    drop(host);
}

/// 429 and 5xx storms on writes: a proxy between the host and the API
/// server answers one write in two itself (429 with Retry-After, 500, 503,
/// 504 in turn) for the whole run. The host retries: every copy follows its
/// source, none outlives it, the recorder saw each delta exactly once, no
/// delta is dead, and the host exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_storms_of_429_and_5xx_lose_and_double_nothing() {
    use kubewasm_tests::faultproxy::FaultProxy;
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let src = "e2e-storm-src";
    let tenants = ["e2e-storm-t1", "e2e-storm-t2"];
    namespace(&client, src, json!({})).await;
    for t in tenants {
        namespace(&client, t, json!({"storm-tenant": "yes"})).await;
    }
    let proxy = FaultProxy::start(client.clone()).await;
    proxy.storm(2);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = proxy.kubeconfig(dir.path());
    let replicator = format!(
        "config: {{sourceSelector: storm-source=yes, namespaceSelector: storm-tenant=yes}}\n{}",
        kubewasm_tests::REPLICATOR_ACCESS
    );
    let host = HostProcess::start(
        &kubeconfig,
        &[
            ("config-replicator", "config_replicator", Some(&replicator)),
            (
                "recorder",
                "recorder",
                Some(&recorder_sidecar(src, &["configmaps"])),
            ),
        ],
    );
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), src);
    let source = |name: &str, v: u32| {
        cm(
            src,
            name,
            json!({"storm-source": "yes"}),
            json!({"v": v.to_string()}),
        )
    };
    // Creates, updates, deletes and a source that stops being one.
    for i in 0..10 {
        api.create(&PostParams::default(), &source(&format!("s-{i}"), 0))
            .await
            .unwrap();
    }
    for i in 0..10 {
        set_cm(&api, &format!("s-{i}"), "1").await;
    }
    for i in 0..3 {
        api.delete(&format!("s-{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    for i in 10..13 {
        api.create(&PostParams::default(), &source(&format!("s-{i}"), 2))
            .await
            .unwrap();
    }
    api.patch(
        "s-9",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"storm-source": null}}})),
    )
    .await
    .unwrap();
    for i in 3..13 {
        set_cm(&api, &format!("s-{i}"), "3").await;
    }

    // Converges while the storm goes on.
    eventually(
        "copies equal their sources under the storm",
        WAIT,
        || async {
            let sources = copies_match_sources(&client, src, "storm-source=yes", &tenants)
                .await
                .ok()??;
            (sources.len() == 9).then_some(())
        },
    )
    .await;
    let seen = recorder_caught_up(
        &client,
        &api,
        src,
        "the recorder's view equals the server's",
    )
    .await;
    // Exactly once: no delta (type, object, version) recorded twice.
    let mut once = std::collections::BTreeSet::new();
    for s in &seen {
        assert!(
            once.insert((s.delta.clone(), s.name.clone(), s.rv.clone())),
            "recorded twice: {}",
            s.short()
        );
    }
    let addr = host.metrics_addr(WAIT).await;
    let (_, _, metrics) = http_get(addr, "/metrics").unwrap();
    let retries: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("kubewasm_action_retries_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    for plugin in ["config-replicator", "recorder"] {
        let dead = format!("kubewasm_plugin_dead_letters_total{{plugin=\"{plugin}\"}}");
        assert_eq!(sample(&metrics, &dead), Some(0.0), "{dead}\n{metrics}");
    }
    let injected = proxy.injected();
    assert!(injected >= 20, "only {injected} writes refused");
    // kube's client retries 429, 503 and 504 itself (honouring
    // Retry-After); a 500 reaches the executor, which retries it.
    let by_status = proxy.injected_by_status();
    let five_hundreds = by_status
        .iter()
        .find(|(c, _)| *c == 500)
        .map_or(0, |(_, n)| *n);
    assert!(five_hundreds >= 1, "{by_status:?}");
    assert!(
        retries >= five_hundreds as f64,
        "{retries} executor retries for {five_hundreds} injected 500s"
    );
    proxy.calm();
    let (status, log) = host.stop_with_logs();
    assert!(status.success(), "exit {status:?}; log:\n{log}");
    eprintln!(
        "write storm: {injected} writes refused {by_status:?}, {retries} executor retries, {} deltas recorded once each, nothing dead",
        seen.len()
    );
}
