//! The host as a Deployment runs it: probes, metrics and the Pod's
//! identity, and SIGTERM draining a slow plugin within the grace.

use super::*;

/// Probes, metrics and the downward-API identity against a real server:
/// ready once synced, a created ConfigMap moves the delta and delivery
/// counters, and the recorder's Events are reported by `POD_NAME`.
#[tokio::test]
async fn probes_metrics_and_pod_identity_on_the_real_server() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "e2e-metrics";
    namespace(&client, ns, json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    create_cm(&api, ns, "a", "1").await;
    let sidecar = recorder_sidecar(ns, &["configmaps"]);
    let host = HostProcess::start_with_env(
        cp.admin_kubeconfig(),
        &[
            ("POD_NAME", "kubewasm-7c9d-x2"),
            ("POD_NAMESPACE", "kubewasm-system"),
        ],
        |dir| install(dir, "recorder", "recorder", Some(&sidecar)),
    );
    let addr = host.metrics_addr(WAIT).await;
    assert_eq!(http_get(addr, "/healthz").unwrap().0, 200);
    eventually("/readyz 200", WAIT, || async {
        (http_get(addr, "/readyz").unwrap().0 == 200).then_some(())
    })
    .await;
    assert!(host.logs().contains("cache synced"), "{}", host.logs());

    let added = "kubewasm_informer_deltas_total{kind=\"configmaps\",type=\"added\"}";
    let delivered =
        "kubewasm_plugin_deltas_delivered_total{plugin=\"recorder\",kind=\"configmaps\"}";
    let body = http_get(addr, "/metrics").unwrap().2;
    let before = sample(&body, added).unwrap_or_else(|| panic!("no {added} in:\n{body}"));
    assert!(before >= 1.0, "{body}");
    create_cm(&api, ns, "b", "1").await;
    // A delivery is counted when the call returns, its actions when they
    // are applied: wait for both.
    let created = "kubewasm_actions_total{plugin=\"recorder\",verb=\"create\",outcome=\"applied\"}";
    let body = eventually(
        "the new ConfigMap counted, delivered and acted on",
        WAIT,
        || async {
            let body = http_get(addr, "/metrics").unwrap().2;
            (sample(&body, added)? > before
                && sample(&body, delivered)? >= 3.0
                && sample(&body, created)? >= 3.0)
                .then_some(body)
        },
    )
    .await;
    assert!(body.contains("kubewasm_leader 1"), "{body}");

    let seen = wait_seen(&client, ns, |s| s.iter().any(|x| x.name == "b")).await;
    assert!(!seen.is_empty());
    let events = recorder_events(&client, ns).await;
    assert!(!events.is_empty());
    for e in &events {
        let instance = e.data["reportingInstance"].as_str().unwrap_or_default();
        assert!(
            instance.starts_with("kubewasm-7c9d-x2/recorder@"),
            "the replica, then the plugin and its version: {instance}"
        );
    }
    assert!(host.stop().success(), "the host exits 0 on SIGTERM");
}

/// SIGTERM while a slow plugin has a long queue: the call in flight ends,
/// the batch stops between deltas, and the host exits 0 within the shutdown
/// grace, without abandoning anything (the rest is the next leader's replay).
#[tokio::test]
async fn sigterm_with_a_slow_plugin_drains_within_the_grace() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "e2e-slow-drain";
    namespace(&client, ns, json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    for i in 0..20 {
        create_cm(&api, ns, &format!("sleep-{i}"), "1").await;
    }
    // 2 s per delta, at least 20 deltas: 40 s of work, over the 10 s grace.
    let sidecar = format!(
        "config: {{mode: sleep, count: 2}}\nlimits: {{timeout: 5s}}\n{}",
        kubewasm_tests::TESTKIT_ACCESS
    );
    let host = HostProcess::start_args(
        cp.admin_kubeconfig(),
        &["--shutdown-grace", "10s"],
        &[],
        |dir| install(dir, "slow", "testkit", Some(&sidecar)),
    );
    // The backlog is queued (or already in a batch) once the cache synced.
    host.wait_log("cache synced informer=configmaps", WAIT)
        .await;
    let asked = std::time::Instant::now();
    // `stop` fails the test if the host is still running 20 s later.
    let (status, log) = host.stop_with_logs();
    let took = asked.elapsed();
    assert!(status.success(), "exit {status:?}; log:\n{log}");
    assert!(
        !log.contains("did not finish within the shutdown grace"),
        "the drain abandoned work; log:\n{log}"
    );
    // There was a backlog to stop: the version left deltas unhandled.
    let left: usize = log
        .lines()
        .find(|l| l.contains("plugin version stopped") && l.contains("plugin=slow"))
        .and_then(|l| {
            l.split("unhandled=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no stop line for slow; log:\n{log}"));
    assert!(left >= 1, "nothing was queued at SIGTERM; log:\n{log}");
    // 40 s of queued work did not hold the exit: it stopped between deltas.
    assert!(
        took < Duration::from_secs(10),
        "drain took {took:?}, over the 10 s grace; log:\n{log}"
    );
    eprintln!(
        "sigterm with a slow plugin: exited 0 after {took:?}, {left} deltas left to the replay"
    );
}
