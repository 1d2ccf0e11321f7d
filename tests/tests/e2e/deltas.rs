//! What the recorder sees: the initial list, then live deltas with their
//! old and new versions; across hot swaps under churn, also while its
//! Events are refused, nothing is lost or repeated.

use super::*;

#[tokio::test]
async fn initial_list_synced_then_live_deltas_with_old_and_new() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "e2e-deltas";
    namespace(&client, ns, json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let rv_a = create_cm(&api, ns, "a", "1").await;
    create_cm(&api, ns, "b", "1").await;

    let (host, seen) = recorder_synced(cp, &client, ns).await;
    let mut initial: Vec<String> = seen.iter().map(Seen::short).collect();
    // Order within the initial list is the server's; the marker comes last.
    assert_eq!(initial.pop().as_deref(), Some("synced"));
    initial.sort();
    assert_eq!(initial, ["added a initial", "added b initial"]);

    let rv_a2 = set_cm(&api, "a", "2").await;
    api.delete("b", &DeleteParams::default()).await.unwrap();
    let rv_c = create_cm(&api, ns, "c", "1").await;
    let seen = wait_seen(&client, ns, |s| s.len() >= 6).await;
    let live: Vec<String> = seen[3..].iter().map(Seen::short).collect();
    assert_eq!(live, ["updated a", "deleted b", "added c"]);
    assert_eq!(
        (seen[3].rv.as_str(), seen[3].old_rv.as_str()),
        (rv_a2.as_str(), rv_a.as_str())
    );
    assert_eq!(seen[5].rv, rv_c);
    assert_eq!(seen_view(&seen), configmap_versions(&api).await);
    assert!(host.stop().success(), "the host exits 0 on SIGTERM");
}

#[tokio::test]
async fn hot_reload_under_churn_loses_and_duplicates_nothing() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "e2e-reload";
    namespace(&client, ns, json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    for i in 0..10 {
        create_cm(&api, ns, &format!("c{i}"), "0").await;
    }
    let sidecar = recorder_sidecar(ns, &["configmaps"]);
    let host = HostProcess::start(
        cp.admin_kubeconfig(),
        &[("recorder", "recorder", Some(&sidecar))],
    );
    wait_seen(&client, ns, |s| s.iter().any(|x| x.delta == "synced")).await;

    let churn_api = api.clone();
    let churn = tokio::spawn(async move {
        for round in 1..=30 {
            let i = round % 10;
            set_cm(&churn_api, &format!("c{i}"), &round.to_string()).await;
            if round % 7 == 0 {
                create_cm(&churn_api, "e2e-reload", &format!("n{round}"), "0").await;
            }
            // n7 and n14 go again (a c-object deleted here would be
            // updated later).
            if round == 15 || round == 29 {
                let victim = if round == 15 { "n7" } else { "n14" };
                churn_api
                    .delete(victim, &DeleteParams::default())
                    .await
                    .unwrap();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    // A new build of the same plugin: same code, different bytes (a custom
    // section), so the folder sees a new version.
    let mut bytes = kubewasm_tests::wasm("recorder");
    bytes.extend_from_slice(&[0x00, 0x09, 0x08]);
    bytes.extend_from_slice(b"e2e-swap");
    let tmp = host.plugins.path().join(".recorder.wasm.tmp");
    std::fs::write(&tmp, &bytes).unwrap();
    std::fs::rename(&tmp, host.plugins.path().join("recorder.wasm")).unwrap();
    churn.await.unwrap();
    let server = configmap_versions(&api).await;

    let seen = eventually("two versions, the new one caught up", WAIT, || async {
        let seen = recorded(&client, ns).await;
        let versions: std::collections::BTreeSet<&str> =
            seen.iter().map(|s| s.version.as_str()).collect();
        let last = versions.iter().next_back()?.to_owned();
        let new: Vec<Seen> = seen.iter().filter(|s| s.version == last).cloned().collect();
        (versions.len() == 2 && seen_view(&new) == server).then_some(new)
    })
    .await;
    // The new version: its initial replay (each object once, then synced),
    // then live deltas, none twice. An object deleted while its replayed
    // add still waited is handed over as its delete, in the add's place
    // (the plugin may have acted on it in an earlier version).
    let replay_end = seen
        .iter()
        .position(|s| s.delta == "synced")
        .expect("a synced marker");
    let mut replayed: Vec<&str> = seen[..replay_end].iter().map(|s| s.name.as_str()).collect();
    let shown: Vec<String> = seen.iter().map(Seen::short).collect();
    assert!(
        seen[..replay_end]
            .iter()
            .all(|s| (s.delta == "added" && s.initial)
                || (s.delta == "deleted" && !server.contains_key(&s.name))),
        "the replay holds initial adds and deletes of objects gone: {shown:?}"
    );
    replayed.sort_unstable();
    let before = replayed.len();
    replayed.dedup();
    assert_eq!(before, replayed.len(), "an object replayed twice");
    let mut live: Vec<(String, String, String)> = seen[replay_end + 1..]
        .iter()
        .map(|s| (s.name.clone(), s.rv.clone(), s.delta.clone()))
        .collect();
    let n = live.len();
    live.sort();
    live.dedup();
    assert_eq!(n, live.len(), "a live delta delivered twice");
    assert!(
        host.logs().contains("previous version stopped"),
        "{}",
        host.logs()
    );
    drop(host);
}

/// Whether the test user may create events.k8s.io Events in `ns`, as the
/// API server's authorizer answers now.
async fn user_may_record(cp: &ControlPlane, ns: &str) -> bool {
    use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
    let review: SelfSubjectAccessReview = serde_json::from_value(json!({
        "spec": {"resourceAttributes": {"namespace": ns, "verb": "create",
            "group": "events.k8s.io", "resource": "events"}}}))
    .unwrap();
    Api::<SelfSubjectAccessReview>::all(cp.user_client().await)
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .is_some_and(|s| s.allowed)
}

/// Swaps in a new build of the recorder (same code, different bytes) and
/// waits until the host has stopped the previous version.
async fn swap_recorder(host: &HostProcess, n: usize) {
    let mut bytes = kubewasm_tests::wasm("recorder");
    bytes.extend_from_slice(&[0x00, 0x09, 0x08]);
    bytes.extend_from_slice(format!("swap{n:04}").as_bytes());
    let tmp = host.plugins.path().join(".recorder.wasm.tmp");
    std::fs::write(&tmp, &bytes).unwrap();
    std::fs::rename(&tmp, host.plugins.path().join("recorder.wasm")).unwrap();
    eventually("the previous version to stop", WAIT, || async {
        (host.logs().matches("previous version stopped").count() >= n).then_some(())
    })
    .await;
}

/// The recorder's writes (its Events) refused with 403 while ConfigMaps
/// churn, then allowed again, with two hot swaps during the churn: every
/// delete and every change is recorded by some version, exactly once after
/// its last success; refused deltas go to dead letters (listed by
/// `kubewasm dead-letters`) and the next version handles them.
#[tokio::test]
async fn refused_events_and_swaps_during_churn_lose_no_delete_and_repeat_nothing() {
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "e2e-deliver";
    namespace(&client, ns, json!({})).await;
    let user =
        json!([{"kind": "User", "name": "kubewasm-e2e", "apiGroup": "rbac.authorization.k8s.io"}]);
    let roles: Api<Role> = Api::namespaced(client.clone(), ns);
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), ns);
    for (name, rules) in [
        (
            "read",
            json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]),
        ),
        (
            "record",
            json!([{"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]}]),
        ),
    ] {
        let role: Role =
            serde_json::from_value(json!({"metadata": {"name": name}, "rules": rules})).unwrap();
        roles.create(&PostParams::default(), &role).await.unwrap();
    }
    let binding = |name: &str| -> RoleBinding {
        serde_json::from_value(json!({"metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": user}))
        .unwrap()
    };
    bindings
        .create(&PostParams::default(), &binding("read"))
        .await
        .unwrap();
    bindings
        .create(&PostParams::default(), &binding("record"))
        .await
        .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    for i in 0..10 {
        create_cm(&api, ns, &format!("c{i}"), "0").await;
    }
    eventually("the user to be allowed to record", WAIT, || async {
        user_may_record(cp, ns).await.then_some(())
    })
    .await;
    let sidecar = recorder_sidecar(ns, &["configmaps"]);
    let host = HostProcess::start(
        cp.user_kubeconfig(),
        &[("recorder", "recorder", Some(&sidecar))],
    );
    let addr = host.metrics_addr(WAIT).await;
    wait_seen(&client, ns, |s| s.iter().any(|x| x.delta == "synced")).await;
    let mut deleted = Vec::new();
    let mut delete = async |name: &str| {
        api.delete(name, &DeleteParams::default()).await.unwrap();
        deleted.push(name.to_owned());
    };

    // Healthy churn.
    for i in 0..3 {
        set_cm(&api, &format!("c{i}"), "a").await;
    }
    delete("c5").await;
    create_cm(&api, ns, "n0", "0").await;
    wait_seen(&client, ns, |s| {
        s.iter().any(|x| x.short() == "deleted c5") && s.iter().any(|x| x.short() == "added n0")
    })
    .await;

    // Events refused (403): best-effort and off the call's path, they fail
    // alone: every delta is handled (nothing retried, nothing dead), each
    // refused Event is counted and logged with its request, and none is sent
    // again later.
    let failed_events = |metrics: &str| {
        sample(
            metrics,
            "kubewasm_actions_total{plugin=\"recorder\",verb=\"create\",outcome=\"failed\"}",
        )
        .unwrap_or(0.0)
    };
    let (_, _, before) = http_get(addr, "/metrics").unwrap();
    let failed_before = failed_events(&before);
    bindings
        .delete("record", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the user to be refused", WAIT, || async {
        (!user_may_record(cp, ns).await).then_some(())
    })
    .await;
    for i in 0..3 {
        set_cm(&api, &format!("c{i}"), "b").await;
    }
    let mut refused = Vec::new();
    for name in ["c6", "c7", "n0"] {
        api.delete(name, &DeleteParams::default()).await.unwrap();
        refused.push(name.to_owned());
    }
    create_cm(&api, ns, "n1", "0").await;
    create_cm(&api, ns, "n2", "0").await;
    // 3 updates, 3 deletes, 2 adds: 8 Events refused.
    eventually("the refused Events to be counted", WAIT, || async {
        let (_, _, m) = http_get(addr, "/metrics").ok()?;
        (failed_events(&m) >= failed_before + 8.0).then_some(())
    })
    .await;
    let (code, _, body) = http_get(addr, "/dead-letters").unwrap();
    assert_eq!(
        (code, body.as_str()),
        (200, "[]"),
        "a refused Event fails no call"
    );
    let logs = host.logs();
    assert!(
        logs.contains("create events.k8s.io/v1 events e2e-deliver/"),
        "a refused Event is logged with its request:\n{logs}"
    );

    // Allowed again; two swaps while the churn goes on.
    bindings
        .create(&PostParams::default(), &binding("record"))
        .await
        .unwrap();
    eventually("the user to be allowed again", WAIT, || async {
        user_may_record(cp, ns).await.then_some(())
    })
    .await;
    let churn_api = api.clone();
    let churn = tokio::spawn(async move {
        for round in 0..40 {
            set_cm(&churn_api, &format!("c{}", round % 5), &format!("r{round}")).await;
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    });
    swap_recorder(&host, 1).await;
    delete("c8").await;
    delete("n1").await;
    create_cm(&api, ns, "n3", "0").await;
    swap_recorder(&host, 2).await;
    delete("c9").await;
    delete("n2").await;
    churn.await.unwrap();
    let server = configmap_versions(&api).await;

    let seen = eventually(
        "the last version caught up with the server",
        WAIT,
        || async {
            let seen = recorded(&client, ns).await;
            let last = seen.iter().map(|s| s.version.clone()).max()?;
            let newest: Vec<Seen> = seen.iter().filter(|s| s.version == last).cloned().collect();
            let versions: std::collections::BTreeSet<&str> =
                seen.iter().map(|s| s.version.as_str()).collect();
            (versions.len() == 3 && seen_view(&newest) == server).then_some(seen)
        },
    )
    .await;
    // Every delete handled by some version, exactly once; the deletes whose
    // Events were refused are never recorded (an Event is not re-sent).
    for name in &deleted {
        let n = seen
            .iter()
            .filter(|s| s.delta == "deleted" && &s.name == name)
            .count();
        assert_eq!(n, 1, "deleted {name} recorded {n} times: {seen:#?}");
    }
    for name in &refused {
        let n = seen
            .iter()
            .filter(|s| s.delta == "deleted" && &s.name == name)
            .count();
        assert_eq!(
            n, 0,
            "the refused Event of deleted {name} was sent again: {seen:#?}"
        );
    }
    // No live change recorded twice, across versions.
    let mut live: Vec<(&str, &str, &str)> = seen
        .iter()
        .filter(|s| !s.initial && s.delta != "synced")
        .map(|s| (s.name.as_str(), s.rv.as_str(), s.delta.as_str()))
        .collect();
    let n = live.len();
    live.sort_unstable();
    live.dedup();
    assert_eq!(n, live.len(), "a delta recorded twice: {seen:#?}");
    // Nothing dead.
    let (_, _, body) = http_get(addr, "/dead-letters").unwrap();
    assert_eq!(body, "[]");
    assert!(host.stop().success());
}
