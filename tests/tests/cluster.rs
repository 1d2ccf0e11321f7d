//! kubewasm as a Deployment on the real single-node cluster
//! (tests/controlplane --node): the image built from the Containerfile
//! (`scripts/image.sh`) and imported into the node's containerd, the
//! `deploy/examples/single-node` overlay of `deploy/` applied server-side,
//! two replicas Ready only after their caches synced, exactly one holding
//! the Lease, the example plugins acting from inside the cluster with only
//! the generated RBAC, and `/metrics` of a running Pod moving as objects
//! change.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DynamicObject, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::discovery::{Discovery, Scope};
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::{eventually, field_managers, http_get, sample};
use kubewasm_tests::manifests::{docs, kustomize};
use kubewasm_tests::repo_root;
use serde_json::json;

const NS: &str = "kubewasm";
/// Image build (a warm release build), Pod start, plugin compile.
const TIMEOUT: Duration = Duration::from_secs(300);

fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Applies every document server-side, as `kubectl apply --server-side`.
async fn apply_all(client: &kube::Client, docs: &[serde_json::Value]) {
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let pp = PatchParams::apply("kubewasm-e2e").force();
    for doc in docs {
        let gvk = kube::core::GroupVersionKind::try_from(
            &serde_json::from_value::<kube::core::TypeMeta>(doc.clone()).unwrap(),
        )
        .unwrap();
        let (ar, caps) = discovery
            .resolve_gvk(&gvk)
            .unwrap_or_else(|| panic!("unknown kind {gvk:?}"));
        let name = doc["metadata"]["name"].as_str().unwrap();
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => Api::namespaced_with(
                client.clone(),
                doc["metadata"]["namespace"].as_str().unwrap_or("default"),
                &ar,
            ),
            Scope::Cluster => Api::all_with(client.clone(), &ar),
        };
        api.patch(name, &pp, &Patch::Apply(doc))
            .await
            .unwrap_or_else(|e| panic!("applying {gvk:?} {name}: {e}"));
    }
}

/// The listener address a Pod recorded in its emptyDir: the test runs on
/// the node, so it reads the kubelet's volume directly.
fn metrics_addr(cp: &ControlPlane, pod_uid: &str) -> Option<std::net::SocketAddr> {
    let file: PathBuf = cp.dir().join(format!(
        "node/kubelet/pods/{pod_uid}/volumes/kubernetes.io~empty-dir/compile-cache/metrics-addr"
    ));
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

#[tokio::test]
async fn deployment_is_ready_after_sync_leads_once_and_acts_with_its_rbac() {
    let cp = ControlPlane::shared_node();
    let _logs = cp.logs_on_failure();
    let root = repo_root();

    // The image, from the Containerfile's offline stage, imported.
    let started = Instant::now();
    let archive = cp.dir().join("kubewasm-image.tar");
    run(
        Command::new("bash")
            .arg(root.join("scripts/image.sh"))
            .arg(&archive)
            .env("IMAGE_ARCHIVE", "docker-archive"),
        "scripts/image.sh",
    );
    cp.load_image(&archive).unwrap();
    eprintln!("image built and imported in {:?}", started.elapsed());

    // The overlay, with the API server's port, applied server-side.
    run(
        Command::new("bash").arg(root.join("scripts/deploy-plugins.sh")),
        "scripts/deploy-plugins.sh",
    );
    let rendered = kustomize(&root.join("deploy/examples/single-node"))
        .replace("APISERVER_PORT", &format!("\"{}\"", cp.port()));
    let docs = docs(&rendered);
    assert!(docs.iter().any(|d| d["kind"] == "Deployment"));
    let client = cp.admin_client().await;
    let applied = Instant::now();
    apply_all(&client, &docs).await;

    // Two replicas, Ready.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    eventually("2 available kubewasm replicas", TIMEOUT, || async {
        let d = deployments.get("kubewasm").await.ok()?;
        (d.status?.available_replicas? == 2).then_some(())
    })
    .await;
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

    // Exactly one holds the Lease.
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let holder = eventually("a lease holder", TIMEOUT, || async {
        leases.get("kubewasm").await.ok()?.spec?.holder_identity
    })
    .await;
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
