//! Smoke tests of the whole single-node cluster (tests/controlplane --node):
//! kube-apiserver, etcd, kube-controller-manager, kube-scheduler, a kubelet
//! and containerd, all the official components. Each test checks something
//! only a real component does: the scheduler and kubelet run Pods, the
//! ReplicaSet controller replaces them, the namespace controller finalizes a
//! namespace, the garbage collector follows owner references, and the
//! kubelet projects a service-account token that the API server authorizes
//! with RBAC. Pods use `hostNetwork` and a static image built locally
//! (Debian's busybox-static and the harness's apiprobe; no registry).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams};
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::eventually;
use serde_json::json;

const BUSYBOX: &str = "kubewasm.local/busybox:1";
/// Pod start on a busy 2-core machine: scheduling, sandbox, container.
const POD_TIMEOUT: Duration = Duration::from_secs(120);

/// The shared cluster, with the busybox image imported once.
fn cluster() -> &'static ControlPlane {
    static IMAGE: OnceLock<()> = OnceLock::new();
    let cp = ControlPlane::shared_node();
    IMAGE.get_or_init(|| {
        let busybox = Path::new("/bin/busybox");
        assert!(
            busybox.is_file(),
            "/bin/busybox is missing: apt-get install busybox-static (scripts/setup.sh does it)"
        );
        let links = [
            ("/bin/sh", "busybox"),
            ("/bin/sleep", "busybox"),
            ("/bin/cat", "busybox"),
        ];
        let probe = ControlPlane::tool("apiprobe").unwrap();
        cp.build_and_load_image(
            BUSYBOX,
            &[
                (busybox, "/bin/busybox"),
                (probe.as_path(), "/bin/apiprobe"),
            ],
            &links,
        )
        .unwrap_or_else(|e| panic!("busybox image: {e:#}"));
    });
    cp
}

/// Creates a namespace and waits for the ServiceAccount controller to give
/// it its `default` ServiceAccount (Pods are refused until then).
async fn namespace(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    eventually("the default ServiceAccount", POD_TIMEOUT, || {
        let sas = sas.clone();
        async move { sas.get_opt("default").await.ok().flatten() }
    })
    .await;
}

fn pod_spec(command: &str) -> serde_json::Value {
    json!({
        "hostNetwork": true,
        "terminationGracePeriodSeconds": 1,
        "containers": [{
            "name": "main",
            "image": BUSYBOX,
            "imagePullPolicy": "Never",
            "command": ["/bin/sh", "-c", command],
        }]
    })
}

async fn available_replicas(api: &Api<Deployment>, name: &str) -> i32 {
    api.get(name)
        .await
        .ok()
        .and_then(|d| d.status)
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}

async fn running_pods(api: &Api<Pod>, selector: &str) -> Vec<Pod> {
    api.list(&ListParams::default().labels(selector))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        })
        .collect()
}

#[tokio::test]
async fn deployment_becomes_available_and_pods_are_replaced() {
    let cp = cluster();
    let _logs = cp.logs_on_failure();
    let client = cp.admin_client().await;
    let ns = "node-deploy";
    namespace(&client, ns).await;

    let started = Instant::now();
    let deploy: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "sleeper", "namespace": ns},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "sleeper"}},
            "template": {
                "metadata": {"labels": {"app": "sleeper"}},
                "spec": pod_spec("sleep 3600"),
            }
        }
    }))
    .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    deployments
        .create(&PostParams::default(), &deploy)
        .await
        .unwrap();
    eventually("2 available replicas", POD_TIMEOUT, || async {
        (available_replicas(&deployments, "sleeper").await == 2).then_some(())
    })
    .await;
    eprintln!(
        "Deployment available with 2 replicas in {:?}",
        started.elapsed()
    );

    // Every replica runs on the node, started by the kubelet.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let before = running_pods(&pods, "app=sleeper").await;
    assert_eq!(before.len(), 2, "two running Pods");
    for p in &before {
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), cp.node_name());
        let status = p.status.as_ref().unwrap();
        let cs = &status.container_statuses.as_ref().unwrap()[0];
        assert!(cs.ready, "container ready: {cs:?}");
        assert!(
            cs.container_id
                .as_deref()
                .unwrap_or("")
                .starts_with("containerd://"),
            "run by containerd: {cs:?}"
        );
    }

    // The ReplicaSet controller replaces a deleted Pod.
    let victim = before[0].metadata.name.clone().unwrap();
    let victim_uid = before[0].metadata.uid.clone().unwrap();
    let replaced_at = Instant::now();
    pods.delete(&victim, &DeleteParams::default())
        .await
        .unwrap();
    let after = eventually("a replacement Pod", POD_TIMEOUT, || async {
        let now = running_pods(&pods, "app=sleeper").await;
        let gone = pods.get_opt(&victim).await.unwrap().is_none();
        (gone
            && now.len() == 2
            && now
                .iter()
                .all(|p| p.metadata.uid.as_deref() != Some(victim_uid.as_str())))
        .then_some(now)
    })
    .await;
    eprintln!("Pod replaced in {:?}", replaced_at.elapsed());
    assert!(
        after
            .iter()
            .all(|p| p.metadata.name.as_deref() != Some(victim.as_str()))
    );
    eventually("2 available replicas again", POD_TIMEOUT, || async {
        (available_replicas(&deployments, "sleeper").await == 2).then_some(())
    })
    .await;
}

#[tokio::test]
async fn deleting_a_namespace_with_a_running_pod_completes() {
    let cp = cluster();
    let _logs = cp.logs_on_failure();
    let client = cp.admin_client().await;
    let ns = "node-ns-delete";
    namespace(&client, ns).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "sleeper", "namespace": ns},
        "spec": pod_spec("sleep 3600"),
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    eventually("the Pod running", POD_TIMEOUT, || async {
        let p = pods.get("sleeper").await.ok()?;
        (p.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "data"}, "data": {"a": "1"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let started = Instant::now();
    namespaces
        .delete(ns, &DeleteParams::default())
        .await
        .unwrap();
    // The namespace controller deletes the contents (the kubelet stops the
    // Pod), then removes the `kubernetes` finalizer.
    eventually("the namespace gone", POD_TIMEOUT, || async {
        namespaces
            .get_opt(ns)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    eprintln!(
        "namespace with a running Pod deleted in {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn garbage_collector_deletes_what_an_owner_owned() {
    let cp = cluster();
    let _logs = cp.logs_on_failure();
    let client = cp.admin_client().await;
    let ns = "node-gc";
    namespace(&client, ns).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let owner = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap(),
        )
        .await
        .unwrap();
    let owned: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "owned", "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner.metadata.uid.clone().unwrap(),
        }]}
    }))
    .unwrap();
    cms.create(&PostParams::default(), &owned).await.unwrap();
    // An unowned neighbour must survive.
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "bystander"}})).unwrap(),
    )
    .await
    .unwrap();

    let started = Instant::now();
    cms.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    eventually("the owned ConfigMap collected", POD_TIMEOUT, || async {
        cms.get_opt("owned").await.unwrap().is_none().then_some(())
    })
    .await;
    eprintln!("owned ConfigMap collected in {:?}", started.elapsed());
    assert!(
        cms.get_opt("bystander").await.unwrap().is_some(),
        "the garbage collector removed an object nobody owned"
    );
}

#[tokio::test]
async fn projected_service_account_token_grants_exactly_its_rbac() {
    let cp = cluster();
    let _logs = cp.logs_on_failure();
    let client = cp.admin_client().await;
    let ns = "node-token";
    namespace(&client, ns).await;

    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "reader"}})).unwrap(),
    )
    .await
    .unwrap();
    let roles: Api<Role> = Api::namespaced(client.clone(), ns);
    roles
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "configmap-reader"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), ns);
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "reader-reads-configmaps"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmap-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}]
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "marker-7f3a"}})).unwrap(),
    )
    .await
    .unwrap();

    // The Pod reaches the API server on 127.0.0.1 (host network; no
    // kube-proxy) as client-go's in-cluster config does: the token and CA the
    // kubelet projected, the certificate verified.
    let script = "apiprobe /api/v1/namespaces/$NS/configmaps /api/v1/namespaces/$NS/secrets \
                  /api/v1/namespaces/kube-system/configmaps; apiprobe -anonymous /api/v1/namespaces/$NS/configmaps";
    let mut spec = pod_spec(script);
    spec["serviceAccountName"] = json!("reader");
    spec["restartPolicy"] = json!("Never");
    spec["containers"][0]["env"] = json!([
        {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
        {"name": "KUBERNETES_SERVICE_PORT", "value": cp.port().to_string()},
        {"name": "NS", "value": ns},
    ]);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "probe"}, "spec": spec})).unwrap(),
    )
    .await
    .unwrap();
    let phase = eventually("the probe Pod to finish", POD_TIMEOUT, || async {
        let p = pods.get("probe").await.ok()?;
        let phase = p.status?.phase?;
        matches!(phase.as_str(), "Succeeded" | "Failed").then_some(phase)
    })
    .await;
    // The logs come from the kubelet through the API server.
    let logs = pods.logs("probe", &LogParams::default()).await.unwrap();
    assert_eq!(phase, "Succeeded", "probe Pod failed; its log:\n{logs}");
    let line = |path: &str, anonymous: bool| {
        logs.lines()
            .filter(|l| l.starts_with(&format!("GET {path} ->")))
            .nth(usize::from(anonymous))
            .unwrap_or_else(|| panic!("no line for {path} in the probe's log:\n{logs}"))
            .to_owned()
    };
    let own = line(&format!("/api/v1/namespaces/{ns}/configmaps"), false);
    assert!(
        own.contains("-> 200 ") && own.contains("marker-7f3a"),
        "the token must list the namespace's ConfigMaps: {own}\nwhole log:\n{logs}"
    );
    for (path, anonymous, code) in [
        (format!("/api/v1/namespaces/{ns}/secrets"), false, 403),
        (
            "/api/v1/namespaces/kube-system/configmaps".to_owned(),
            false,
            403,
        ),
        (format!("/api/v1/namespaces/{ns}/configmaps"), true, 403),
    ] {
        let l = line(&path, anonymous);
        assert!(
            l.contains(&format!("-> {code}")),
            "{path} (anonymous: {anonymous}) must answer {code}: {l}\nwhole log:\n{logs}"
        );
    }
}
