//! kubewasm as a Deployment on the real single-node cluster
//! (tests/controlplane --node): the image built from the Containerfile
//! (`scripts/image.sh`) and imported into the node's containerd, the
//! `deploy/examples/single-node` overlay of `deploy/` applied server-side,
//! two replicas Ready only after their caches synced, exactly one holding
//! the Lease, the example plugins acting from inside the cluster with only
//! the generated RBAC, and `/metrics` of a running Pod moving as objects
//! change.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, LogParams, PostParams};
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::{eventually, field_managers, http_get, sample};
use kubewasm_tests::incluster::{
    NS, SELECTOR, apply_all, build_and_import_image, container_memory, holder_pod, lease_holder,
    metrics_addr, single_node_docs, wait_available,
};
use serde_json::json;

/// Image build (a warm release build), Pod start, plugin compile.
const TIMEOUT: Duration = Duration::from_secs(300);

#[tokio::test]
async fn deployment_is_ready_after_sync_leads_once_and_acts_with_its_rbac() {
    let cp = ControlPlane::shared_node();
    let _logs = cp.logs_on_failure();

    // The image, from the Containerfile's offline stage, imported.
    let took = build_and_import_image(cp);
    eprintln!("image built and imported in {took:?}");

    // The overlay, with the API server's port, applied server-side.
    let docs = single_node_docs(cp);
    let client = cp.admin_client().await;
    let applied = Instant::now();
    apply_all(&client, &docs).await;

    // Two replicas, Ready.
    wait_available(&client, 2, TIMEOUT).await;
    eprintln!(
        "kubectl apply -k to 2 Ready replicas: {:?}",
        applied.elapsed()
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let running = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=kubewasm"))
        .await
        .unwrap()
        .items;
    assert_eq!(running.len(), 2);

    // Ready only after sync: each Pod's Ready transition is not earlier
    // than its last "cache synced" log line (the probe is /readyz).
    for p in &running {
        let name = p.metadata.name.clone().unwrap();
        let ready_at = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .and_then(|c| c.last_transition_time.clone())
            .unwrap()
            .0;
        let logs = pods.logs(&name, &LogParams::default()).await.unwrap();
        let synced: Vec<jiff_like::Ts> = logs
            .lines()
            .filter(|l| l.contains("cache synced"))
            .filter_map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).ok()?;
                jiff_like::Ts::parse(v["timestamp"].as_str()?)
            })
            .collect();
        assert!(!synced.is_empty(), "no sync in {name}'s log:\n{logs}");
        let last = synced.iter().max().unwrap();
        assert!(
            ready_at.as_second() >= last.seconds,
            "{name} Ready at {ready_at} before its caches synced at {last:?}"
        );
    }

    // Memory of each replica after sync, as the kubelet measures it.
    for (pod, working_set, rss) in container_memory(&client).await {
        eprintln!(
            "{pod} after sync: working set {:.1} MiB, RSS {:.1} MiB",
            working_set as f64 / 1048576.0,
            rss as f64 / 1048576.0
        );
        assert!(rss > 0, "{pod}: no RSS measured");
    }

    // Exactly one holds the Lease.
    let identity = eventually("a lease holder", TIMEOUT, || lease_holder(&client)).await;
    let holder = holder_pod(&identity).to_owned();
    let names: Vec<String> = running
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert!(names.contains(&holder), "{holder} is not one of {names:?}");

    // The example plugin acts from inside the cluster with only its RBAC.
    let ns: Namespace = serde_json::from_value(json!({
        "metadata": {"name": "tenant-a", "labels": {"kubewasm.io/defaults": "enabled"}}
    }))
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let quotas: Api<k8s_openapi::api::core::v1::ResourceQuota> =
        Api::namespaced(client.clone(), "tenant-a");
    let quota = eventually("the default ResourceQuota", TIMEOUT, || async {
        quotas.list(&ListParams::default()).await.ok()?.items.pop()
    })
    .await;
    let managers = field_managers(&quota.metadata);
    assert!(
        managers.contains(&"kubewasm/namespace-defaults".to_owned()),
        "{managers:?}"
    );

    // /metrics of the leader moves when an object changes.
    let leader = running
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(holder.as_str()))
        .unwrap();
    let addr = metrics_addr(cp, leader.metadata.uid.as_deref().unwrap())
        .expect("the leader recorded its listener address");
    let series = "kubewasm_informer_deltas_total{kind=\"namespaces\",type=\"added\"}";
    let before = sample(&http_get(addr, "/metrics").unwrap().2, series).unwrap_or(0.0);
    let ns2: Namespace = serde_json::from_value(json!({"metadata": {"name": "tenant-b"}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns2)
        .await
        .unwrap();
    eventually("the Namespace delta counted", TIMEOUT, || async {
        let (code, _, body) = http_get(addr, "/metrics").ok()?;
        assert_eq!(code, 200);
        let leading = sample(&body, "kubewasm_leader")?;
        assert_eq!(leading, 1.0, "the holder reports itself leader");
        (sample(&body, series)? > before).then_some(())
    })
    .await;

    // Updating the plugins ConfigMap reaches the running Pods through the
    // kubelet's `..data` symlink swap: the new namespace-defaults version
    // (a new quota) serves without a restart.
    let mut cm = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "kubewasm-plugins")
        .unwrap()
        .clone();
    let sidecar = cm["data"]["namespace-defaults.yaml"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(sidecar.contains("pods: \"20\""), "{sidecar}");
    cm["data"]["namespace-defaults.yaml"] = json!(sidecar.replace("pods: \"20\"", "pods: \"7\""));
    let swapped = Instant::now();
    apply_all(&client, &[cm]).await;
    let ns3: Namespace = serde_json::from_value(json!({
        "metadata": {"name": "tenant-c", "labels": {"kubewasm.io/defaults": "enabled"}}
    }))
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns3)
        .await
        .unwrap();
    let quotas_c: Api<k8s_openapi::api::core::v1::ResourceQuota> =
        Api::namespaced(client.clone(), "tenant-c");
    eventually(
        "the swapped plugin's quota in tenant-c",
        TIMEOUT,
        || async {
            let q = quotas_c
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .pop()?;
            let pods = q.spec?.hard?.get("pods")?.0.clone();
            (pods == "7").then_some(())
        },
    )
    .await;
    eprintln!("plugin ConfigMap update served in {:?}", swapped.elapsed());
    let after = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=kubewasm"))
        .await
        .unwrap()
        .items;
    for p in &after {
        assert!(
            names.contains(p.metadata.name.as_ref().unwrap()),
            "a replica was replaced: {:?}",
            p.metadata.name
        );
        let restarts = p
            .status
            .as_ref()
            .unwrap()
            .container_statuses
            .as_ref()
            .unwrap()[0]
            .restart_count;
        assert_eq!(restarts, 0, "the swap restarted {:?}", p.metadata.name);
    }

    // An action outside the RBAC is refused by the API server and
    // reported, and the host carries on: the operator narrows the
    // plugins' ClusterRole (the plugin folder's generated RBAC) so that
    // namespace-defaults may read NetworkPolicies but no longer write them.
    let role = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "kubewasm-plugins")
        .unwrap()
        .clone();
    let mut narrowed = role.clone();
    let mut narrowed_rules = 0;
    for rule in narrowed["rules"].as_array_mut().unwrap() {
        if rule["resources"] == json!(["networkpolicies"]) {
            rule["verbs"] = json!(["get", "list", "watch"]);
            narrowed_rules += 1;
        }
    }
    assert_eq!(narrowed_rules, 1, "{role}");
    apply_all(&client, &[narrowed]).await;
    eventually("the narrowed role in force", TIMEOUT, || async {
        (!may(&client, "patch", "networking.k8s.io", "networkpolicies").await).then_some(())
    })
    .await;
    let refused_series =
        "kubewasm_actions_total{plugin=\"namespace-defaults\",verb=\"patch\",outcome=\"failed\"}";
    let refused_before =
        sample(&http_get(addr, "/metrics").unwrap().2, refused_series).unwrap_or(0.0);
    let ns4: Namespace = serde_json::from_value(json!({
        "metadata": {"name": "tenant-d", "labels": {"kubewasm.io/defaults": "enabled"}}
    }))
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns4)
        .await
        .unwrap();
    eventually("the refused write counted", TIMEOUT, || async {
        let (_, _, body) = http_get(addr, "/metrics").ok()?;
        (sample(&body, refused_series)? > refused_before).then_some(())
    })
    .await;
    let leader_name = leader.metadata.name.clone().unwrap();
    let refusal = eventually("the refusal in the leader's log", TIMEOUT, || async {
        let logs = pods.logs(&leader_name, &LogParams::default()).await.ok()?;
        logs.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| {
                v["fields"]["plugin"] == "namespace-defaults"
                    && v["level"] == "ERROR"
                    && v.to_string().contains("tenant-d")
                    && v.to_string().contains("networkpolicies")
            })
    })
    .await;
    let text = refusal.to_string();
    assert!(
        text.contains("forbidden"),
        "the refusal names its cause: {text}"
    );
    eprintln!("refused write reported: {text}");
    // The host carries on: config-replicator still acts (a new tenant gets
    // the copies of a source), and no replica restarted.
    let ns5: Namespace = serde_json::from_value(json!({
        "metadata": {"name": "tenant-e", "labels": {"tenant": "yes"}}
    }))
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns5)
        .await
        .unwrap();
    let source: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "shared-ca", "namespace": "tenant-b", "labels": {"kubewasm.io/replicate": "true"}},
        "data": {"ca.crt": "PEM"}
    }))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), "tenant-b")
        .create(&PostParams::default(), &source)
        .await
        .unwrap();
    let copies: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "tenant-e");
    eventually(
        "config-replicator's copy after the refusal",
        TIMEOUT,
        || async { copies.get("shared-ca").await.ok() },
    )
    .await;
    for p in pods
        .list(&ListParams::default().labels(SELECTOR))
        .await
        .unwrap()
        .items
    {
        let status = p.status.unwrap();
        assert_eq!(status.container_statuses.unwrap()[0].restart_count, 0);
    }
    apply_all(&client, &[role]).await;
}

/// Whether the host's ServiceAccount may `verb` `resource` cluster-wide,
/// as the API server's authorizer says now.
async fn may(client: &kube::Client, verb: &str, group: &str, resource: &str) -> bool {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {
            "user": "system:serviceaccount:kubewasm:kubewasm",
            "groups": ["system:serviceaccounts", "system:serviceaccounts:kubewasm", "system:authenticated"],
            "resourceAttributes": {"verb": verb, "group": group, "resource": resource, "namespace": "probe"}
        }
    }))
    .unwrap();
    Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .is_some_and(|s| s.allowed)
}

/// RFC 3339 timestamps of the host's JSON logs, to the second.
mod jiff_like {
    #[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
    pub struct Ts {
        pub seconds: i64,
    }

    impl Ts {
        pub fn parse(s: &str) -> Option<Ts> {
            let t: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time =
                serde_json::from_value(serde_json::Value::String(s.to_owned())).ok()?;
            Some(Ts {
                seconds: t.0.as_second(),
            })
        }
    }
}
