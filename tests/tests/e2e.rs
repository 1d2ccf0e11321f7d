//! End-to-end: the real `kubewasm` binary against a real kube-apiserver and
//! etcd (tests/controlplane). One control plane per run; every test in its
//! own namespace. The recorder plugin writes each delta it sees as an Event,
//! which the tests read back from the server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::*;
use kubewasm_tests::install;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

fn cm(ns: &str, name: &str, labels: Value, data: Value) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": labels}, "data": data}))
    .unwrap()
}

async fn create_cm(api: &Api<ConfigMap>, ns: &str, name: &str, v: &str) -> String {
    api.create(
        &PostParams::default(),
        &cm(ns, name, json!({}), json!({"v": v})),
    )
    .await
    .unwrap()
    .metadata
    .resource_version
    .unwrap()
}

async fn set_cm(api: &Api<ConfigMap>, name: &str, v: &str) -> String {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": v}})),
    )
    .await
    .unwrap()
    .metadata
    .resource_version
    .unwrap()
}

/// The recorder's deltas of one version, once they include `until`.
async fn wait_seen(client: &kube::Client, ns: &str, until: impl Fn(&[Seen]) -> bool) -> Vec<Seen> {
    eventually("the recorder's deltas", WAIT, || async {
        let seen = recorded(client, ns).await;
        until(&seen).then_some(seen)
    })
    .await
}

#[tokio::test]
async fn initial_list_synced_then_live_deltas_with_old_and_new() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "e2e-deltas";
    namespace(&client, ns, json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let rv_a = create_cm(&api, ns, "a", "1").await;
    create_cm(&api, ns, "b", "1").await;

    let host = HostProcess::start(
        cp.admin_kubeconfig(),
        &[(
            "recorder",
            "recorder",
            Some(&recorder_sidecar(ns, &["configmaps"])),
        )],
    );
    let seen = wait_seen(&client, ns, |s| s.iter().any(|x| x.delta == "synced")).await;
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
async fn example_plugins_write_to_the_server() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "e2e-examples";
    namespace(
        &client,
        ns,
        json!({"kubewasm.io/defaults": "enabled", "tenant": "yes"}),
    )
    .await;
    namespace(&client, "e2e-examples-src", json!({})).await;
    let src: Api<ConfigMap> = Api::namespaced(client.clone(), "e2e-examples-src");
    src.create(
        &PostParams::default(),
        &cm(
            "e2e-examples-src",
            "shared",
            json!({"kubewasm.io/replicate": "true"}),
            json!({"k": "1"}),
        ),
    )
    .await
    .unwrap();
    let root = kubewasm_tests::repo_root().join("examples/plugins");
    let sidecar = |p: &str| std::fs::read_to_string(root.join(format!("{p}.yaml"))).unwrap();
    let (nd, cl, cr) = (
        sidecar("namespace-defaults"),
        sidecar("crashloop-watcher"),
        sidecar("config-replicator"),
    );
    let host = HostProcess::start(
        cp.admin_kubeconfig(),
        &[
            ("namespace-defaults", "namespace_defaults", Some(&nd)),
            ("crashloop-watcher", "crashloop_watcher", Some(&cl)),
            ("config-replicator", "config_replicator", Some(&cr)),
        ],
    );

    // namespace-defaults: the policy exists, owned by kubewasm/namespace-defaults.
    let policies: Api<kube::core::DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("networking.k8s.io", "v1", "NetworkPolicy"),
            "networkpolicies",
        ),
    );
    let policy = eventually("default-deny NetworkPolicy", WAIT, || async {
        policies.get_opt("default-deny").await.unwrap()
    })
    .await;
    let managers = field_managers(&policy.metadata);
    assert!(
        managers.contains(&"kubewasm/namespace-defaults".to_owned()),
        "{managers:?}"
    );

    // config-replicator: the copy follows its source through update and delete.
    let copies: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    eventually("replicated ConfigMap", WAIT, || async {
        let c = copies.get_opt("shared").await.unwrap()?;
        (c.data?.get("k")? == "1").then_some(())
    })
    .await;
    src.patch(
        "shared",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "2"}})),
    )
    .await
    .unwrap();
    eventually("copy updated", WAIT, || async {
        let c = copies.get_opt("shared").await.unwrap()?;
        (c.data?.get("k")? == "2").then_some(())
    })
    .await;
    src.delete("shared", &DeleteParams::default())
        .await
        .unwrap();
    eventually("copy deleted", WAIT, || async {
        copies
            .get_opt("shared")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;

    // crashloop-watcher: Deployment -> ReplicaSet -> Pod made by hand (no
    // controllers run), restarts set through the status subresource.
    let dyn_api = |group: &str, kind: &str, plural: &str| -> Api<kube::core::DynamicObject> {
        Api::namespaced_with(
            client.clone(),
            ns,
            &kube::core::ApiResource::from_gvk_with_plural(
                &kube::core::GroupVersionKind::gvk(group, "v1", kind),
                plural,
            ),
        )
    };
    let labels = json!({"app": "web"});
    let spec_template = json!({"metadata": {"labels": labels},
        "spec": {"automountServiceAccountToken": false, "containers": [{"name": "app", "image": "example/app:1"}]}});
    let deploy: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": ns},
        "spec": {"selector": {"matchLabels": labels}, "template": spec_template}}))
    .unwrap();
    let deploy = dyn_api("apps", "Deployment", "deployments")
        .create(&PostParams::default(), &deploy)
        .await
        .unwrap();
    let owner = |kind: &str, o: &kube::core::DynamicObject, api_version: &str| {
        json!([{"apiVersion": api_version, "kind": kind,
        "name": o.metadata.name, "uid": o.metadata.uid, "controller": true}])
    };
    let rs: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-1", "namespace": ns, "ownerReferences": owner("Deployment", &deploy, "apps/v1")},
        "spec": {"selector": {"matchLabels": labels}, "template": spec_template}}))
    .unwrap();
    let rs = dyn_api("apps", "ReplicaSet", "replicasets")
        .create(&PostParams::default(), &rs)
        .await
        .unwrap();
    let pods = dyn_api("", "Pod", "pods");
    let pod: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-1-x", "namespace": ns, "labels": labels, "ownerReferences": owner("ReplicaSet", &rs, "apps/v1")},
        "spec": spec_template["spec"]}))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let status = |n: i64| {
        json!({"status": {"containerStatuses": [{"name": "app", "image": "example/app:1", "imageID": "",
        "ready": false, "restartCount": n, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}})
    };
    pods.patch_status("web-1-x", &PatchParams::default(), &Patch::Merge(status(2)))
        .await
        .unwrap();
    pods.patch_status("web-1-x", &PatchParams::default(), &Patch::Merge(status(6)))
        .await
        .unwrap();
    let deployments = dyn_api("apps", "Deployment", "deployments");
    eventually("crashloop annotation on the Deployment", WAIT, || async {
        let d = deployments.get("web").await.unwrap();
        (d.metadata
            .annotations?
            .get("kubewasm.io/crashloop-restarts")?
            == "6")
            .then_some(())
    })
    .await;
    let events: Api<kube::core::DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("events.k8s.io", "v1", "Event"),
            "events",
        ),
    );
    let crash = eventually("CrashLooping Event", WAIT, || async {
        let list = events.list(&Default::default()).await.unwrap();
        list.items
            .into_iter()
            .find(|e| e.data["reason"] == "CrashLooping")
    })
    .await;
    assert_eq!(crash.data["type"], "Warning");
    assert_eq!(crash.data["reportingController"], "kubewasm");
    assert_eq!(crash.data["regarding"]["name"], "web-1-x");
    assert!(
        crash.data["note"]
            .as_str()
            .unwrap()
            .contains("restarted 6 times")
    );
    assert!(host.stop().success());
}

/// Creates the namespaced CRD `<plural>.e2e.kubewasm.io` (kind `kind`,
/// version v1, any fields).
async fn create_crd(client: &kube::Client, kind: &str, plural: &str) {
    let crds: Api<kube::core::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
            ),
            "customresourcedefinitions",
        ),
    );
    let crd: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.e2e.kubewasm.io")},
        "spec": {"group": "e2e.kubewasm.io", "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase()},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}))
    .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
}

#[tokio::test]
async fn a_crd_created_during_the_run_flows_like_builtins() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "e2e-crd";
    namespace(&client, ns, json!({})).await;
    // The host starts before the CRD exists.
    let host = HostProcess::start(
        cp.admin_kubeconfig(),
        &[(
            "recorder-cm",
            "recorder",
            Some(&recorder_sidecar("e2e-crd-none", &["configmaps"])),
        )],
    );
    host.wait_log("cache synced", WAIT).await;
    create_crd(&client, "Widget", "widgets").await;
    let widgets: Api<kube::core::DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("e2e.kubewasm.io", "v1", "Widget"),
            "widgets",
        ),
    );
    let widget = |name: &str, size: i64| -> kube::core::DynamicObject {
        serde_json::from_value(json!({"apiVersion": "e2e.kubewasm.io/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": ns}, "spec": {"size": size}}))
        .unwrap()
    };
    eventually("the CRD to be served", WAIT, || async {
        widgets
            .create(&PostParams::default(), &widget("w1", 1))
            .await
            .ok()
    })
    .await;
    // A plugin dropped in now names the new kind by resource name.
    install(
        host.plugins.path(),
        "recorder",
        "recorder",
        Some(&recorder_sidecar(ns, &["widgets.e2e.kubewasm.io"])),
    );
    wait_seen(&client, ns, |s| s.iter().any(|x| x.delta == "synced")).await;
    widgets
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 2}})),
        )
        .await
        .unwrap();
    widgets
        .create(&PostParams::default(), &widget("w2", 1))
        .await
        .unwrap();
    widgets
        .delete("w1", &DeleteParams::default())
        .await
        .unwrap();
    let seen = wait_seen(&client, ns, |s| s.len() >= 5).await;
    let shorts: Vec<String> = seen.iter().map(Seen::short).collect();
    assert_eq!(
        shorts,
        [
            "added w1 initial",
            "synced",
            "updated w1",
            "added w2",
            "deleted w1"
        ]
    );
    drop(host);
}

#[tokio::test]
async fn a_plugin_refused_for_an_unknown_kind_loads_once_its_crd_is_installed() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "e2e-crd-late";
    namespace(&client, ns, json!({})).await;
    // The plugin names a kind no CRD serves yet: refused, with the remedy.
    // (A 1 s folder poll, which is also when waiting plugins are retried.)
    let (_config, config_file) = host_config("poll: 1s\n");
    let config_arg = config_file.to_str().unwrap();
    let host = HostProcess::start_args(
        cp.admin_kubeconfig(),
        &["--config", config_arg],
        &[],
        |dir| {
            install(
                dir,
                "recorder",
                "recorder",
                Some(&recorder_sidecar(ns, &["gadgets.e2e.kubewasm.io"])),
            );
        },
    );
    host.wait_log("does not serve: install its CRD", WAIT).await;
    create_crd(&client, "Gadget", "gadgets").await;
    // Nothing touches the plugin folder: the host notices the new kind.
    wait_seen(&client, ns, |s| s.iter().any(|x| x.delta == "synced")).await;
    let gadgets: Api<kube::core::DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("e2e.kubewasm.io", "v1", "Gadget"),
            "gadgets",
        ),
    );
    let gadget: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "e2e.kubewasm.io/v1", "kind": "Gadget",
        "metadata": {"name": "g1", "namespace": ns}}))
    .unwrap();
    gadgets
        .create(&PostParams::default(), &gadget)
        .await
        .unwrap();
    let seen = wait_seen(&client, ns, |s| s.iter().any(|x| x.delta == "added")).await;
    let shorts: Vec<String> = seen.iter().map(Seen::short).collect();
    assert_eq!(shorts, ["synced", "added g1"]);
    assert!(
        host.logs()
            .contains("the cluster's kinds changed; loading the plugin again"),
        "{}",
        host.logs()
    );
    assert!(host.stop().success());
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
    // then live deltas, none twice.
    let replay_end = seen
        .iter()
        .position(|s| s.delta == "synced")
        .expect("a synced marker");
    let mut replayed: Vec<&str> = seen[..replay_end].iter().map(|s| s.name.as_str()).collect();
    assert!(
        seen[..replay_end]
            .iter()
            .all(|s| s.delta == "added" && s.initial)
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

#[tokio::test]
async fn with_only_the_rbac_it_needs_the_host_works_and_a_forbidden_write_is_logged() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let (allowed, denied, src) = ("e2e-rbac-a", "e2e-rbac-b", "e2e-rbac-src");
    namespace(&client, allowed, json!({"e2e-rbac": "yes"})).await;
    namespace(&client, denied, json!({"e2e-rbac": "yes"})).await;
    namespace(&client, src, json!({})).await;
    // Read everywhere the plugin reads; write ConfigMaps only in `allowed`.
    let role: ClusterRole = serde_json::from_value(json!({"metadata": {"name": "e2e-kubewasm-read"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps", "namespaces"], "verbs": ["get", "list", "watch"]}]})).unwrap();
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({"metadata": {"name": "e2e-kubewasm-read"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "e2e-kubewasm-read"},
        "subjects": [{"kind": "User", "name": "kubewasm-e2e", "apiGroup": "rbac.authorization.k8s.io"}]})).unwrap();
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let write: Role = serde_json::from_value(json!({"metadata": {"name": "write", "namespace": allowed},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "patch", "create", "update", "delete"]}]})).unwrap();
    Api::<Role>::namespaced(client.clone(), allowed)
        .create(&PostParams::default(), &write)
        .await
        .unwrap();
    let rb: RoleBinding = serde_json::from_value(json!({"metadata": {"name": "write", "namespace": allowed},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "write"},
        "subjects": [{"kind": "User", "name": "kubewasm-e2e", "apiGroup": "rbac.authorization.k8s.io"}]})).unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), allowed)
        .create(&PostParams::default(), &rb)
        .await
        .unwrap();

    Api::<ConfigMap>::namespaced(client.clone(), src)
        .create(
            &PostParams::default(),
            &cm(
                src,
                "rbac-shared",
                json!({"e2e-rbac-replicate": "true"}),
                json!({"k": "1"}),
            ),
        )
        .await
        .unwrap();
    // The grant allows every namespace: the RBAC, narrower, refuses.
    let sidecar = format!(
        "config:\n  sourceSelector: e2e-rbac-replicate=true\n  namespaceSelector: e2e-rbac=yes\n{}",
        kubewasm_tests::REPLICATOR_ACCESS
    );
    let host = HostProcess::start(
        cp.user_kubeconfig(),
        &[("config-replicator", "config_replicator", Some(&sidecar))],
    );
    let copies: Api<ConfigMap> = Api::namespaced(client.clone(), allowed);
    eventually("the copy in the allowed namespace", WAIT, || async {
        copies.get_opt("rbac-shared").await.unwrap().map(|_| ())
    })
    .await;
    host.wait_log("action failed: ", WAIT).await;
    let logs = host.logs();
    let line = logs
        .lines()
        .find(|l| l.contains("action failed: "))
        .unwrap();
    for part in [
        "config-replicator",
        "verb=\"patch\"",
        "configmaps e2e-rbac-b/rbac-shared",
        "forbidden",
    ] {
        assert!(line.contains(part), "{part:?} missing from: {line}");
    }
    assert!(
        Api::<ConfigMap>::namespaced(client.clone(), denied)
            .get_opt("rbac-shared")
            .await
            .unwrap()
            .is_none()
    );
    // The host carries on: a later change still reaches the allowed copy.
    Api::<ConfigMap>::namespaced(client.clone(), src)
        .patch(
            "rbac-shared",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "2"}})),
        )
        .await
        .unwrap();
    eventually("the allowed copy follows", WAIT, || async {
        let c = copies.get_opt("rbac-shared").await.unwrap()?;
        (c.data?.get("k")? == "2").then_some(())
    })
    .await;
    assert!(host.stop().success());
}

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
    namespace(&client, ns, json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    for i in 0..8 {
        create_cm(&api, ns, &format!("c{i}"), "0").await;
    }
    let host = HostProcess::start(
        cp.admin_kubeconfig(),
        &[(
            "recorder",
            "recorder",
            Some(&recorder_sidecar(ns, &["configmaps"])),
        )],
    );
    wait_seen(&client, ns, |s| s.iter().any(|x| x.delta == "synced")).await;
    cp.restart().await.unwrap();
    // Churn at once, while the host is still reconnecting with backoff.
    let client = cp.admin_client().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    churn(&api, ns).await;
    let server = configmap_versions(&api).await;
    let seen = eventually("the plugin's view to equal the server's", WAIT, || async {
        let seen = recorded(&client, ns).await;
        (seen_view(&seen) == server).then_some(seen)
    })
    .await;
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
    namespace(&client, ns, json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    for i in 0..8 {
        create_cm(&api, ns, &format!("c{i}"), "0").await;
    }
    let host = HostProcess::start(
        cp.admin_kubeconfig(),
        &[(
            "recorder",
            "recorder",
            Some(&recorder_sidecar(ns, &["configmaps"])),
        )],
    );
    wait_seen(&client, ns, |s| s.iter().any(|x| x.delta == "synced")).await;
    set_cm(&api, "c0", "before").await;
    wait_seen(&client, ns, |s| s.iter().any(|x| x.delta == "updated")).await;

    let frozen = std::time::Instant::now();
    cp.pause_apiserver().unwrap();
    let thaw = scopeguard(&cp);
    host.wait_log("watch stalled", Duration::from_secs(60))
        .await;
    let reported = frozen.elapsed();
    let line = host
        .logs()
        .lines()
        .find(|l| l.contains("watch stalled"))
        .unwrap()
        .to_owned();
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
    let server = configmap_versions(&api).await;
    let seen = eventually("the plugin's view to equal the server's", WAIT, || async {
        let seen = recorded(&client, ns).await;
        (seen_view(&seen) == server).then_some(seen)
    })
    .await;
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
    namespace(&client, ns, json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    for i in 0..8 {
        create_cm(&api, ns, &format!("c{i}"), "0").await;
    }
    let host = HostProcess::start(
        cp.admin_kubeconfig(),
        &[(
            "recorder",
            "recorder",
            Some(&recorder_sidecar(ns, &["configmaps"])),
        )],
    );
    wait_seen(&client, ns, |s| s.iter().any(|x| x.delta == "synced")).await;
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
    let server = configmap_versions(&api).await;
    let seen = eventually(
        "the plugin's view to equal the server's after a relist",
        WAIT,
        || async {
            let seen = recorded(&client, ns).await;
            (seen_view(&seen) == server).then_some(seen)
        },
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

/// The config-replicator in all five languages, each built against WIT
/// 0.2 (its component exports `kubewasm:plugin/handler@0.2.0`), does its
/// job on the real server: copies, follows an update, goes with its source.
/// One host per language in turn (each compiles a large component; at
/// once they would only slow each other down). Other tests' replicators
/// run beside them on the shared server: each sweeps only the copies it
/// made (`kubewasm.io/replicated-by`).
#[tokio::test]
async fn plugins_in_all_five_languages_act_on_the_real_server() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let langs = ["rust", "js", "python", "c", "go"];
    let artifact = |lang: &str| {
        if lang == "rust" {
            kubewasm_tests::plugin_artifacts().join("config_replicator.wasm")
        } else {
            kubewasm_tests::language_artifacts().join(format!("{lang}-config-replicator.wasm"))
        }
    };
    for lang in langs {
        let bytes = std::fs::read(artifact(lang)).unwrap();
        let export = b"kubewasm:plugin/handler@0.2.0";
        assert!(
            bytes.windows(export.len()).any(|w| w == export),
            "the {lang} config-replicator does not export handler@0.2.0"
        );
    }
    let src_ns = "e2e-lang-src";
    namespace(&client, src_ns, json!({})).await;
    let src: Api<ConfigMap> = Api::namespaced(client.clone(), src_ns);
    for lang in langs {
        namespace(
            &client,
            &format!("e2e-lang-{lang}"),
            json!({format!("e2e-lang-{lang}"): "yes"}),
        )
        .await;
        let name = format!("from-{lang}");
        src.create(
            &PostParams::default(),
            &cm(
                src_ns,
                &name,
                json!({format!("e2e-lang-{lang}"): "true"}),
                json!({"k": "1"}),
            ),
        )
        .await
        .unwrap();
        let host = HostProcess::start_with(cp.admin_kubeconfig(), |dir| {
            let sidecar = format!(
                "config:\n  sourceSelector: e2e-lang-{lang}=true\n  namespaceSelector: e2e-lang-{lang}=yes\nlimits: {{memory: 256Mi, timeout: 5s}}\n{}",
                kubewasm_tests::REPLICATOR_ACCESS
            );
            kubewasm_tests::install_file(
                dir,
                &format!("{lang}-config-replicator"),
                &artifact(lang),
                Some(&sidecar),
            );
        });
        let copies: Api<ConfigMap> = Api::namespaced(client.clone(), &format!("e2e-lang-{lang}"));
        let copy = eventually(
            &format!("the {lang} plugin's copy"),
            Duration::from_secs(180),
            || async { copies.get_opt(&name).await.unwrap() },
        )
        .await;
        assert_eq!(copy.data.unwrap()["k"], "1");
        let managers = field_managers(&copy.metadata);
        assert!(
            managers.contains(&format!("kubewasm/{lang}-config-replicator")),
            "{managers:?}"
        );
        src.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "2"}})),
        )
        .await
        .unwrap();
        eventually(&format!("the {lang} copy follows"), WAIT, || async {
            let c = copies.get_opt(&name).await.unwrap()?;
            (c.data?.get("k")? == "2").then_some(())
        })
        .await;
        src.delete(&name, &DeleteParams::default()).await.unwrap();
        eventually(&format!("the {lang} copy is deleted"), WAIT, || async {
            copies.get_opt(&name).await.unwrap().is_none().then_some(())
        })
        .await;
        assert!(host.stop().success(), "{lang}: host exit");
    }
}

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

/// An identity that may read ConfigMaps but not Pods: the Pod informer is
/// refused (403), the plugin subscribed to it is reported broken on
/// `/readyz`, naming the verb and the resource to grant; granting it makes
/// the host ready.
#[tokio::test]
async fn a_forbidden_informer_marks_its_plugin_broken_on_readyz_until_granted() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let grant = |name: &str, resources: Value| {
        let role: ClusterRole = serde_json::from_value(json!({"metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": resources, "verbs": ["get", "list", "watch"]}]}))
        .unwrap();
        let binding: ClusterRoleBinding = serde_json::from_value(json!({"metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "User", "name": "kubewasm-e2e", "apiGroup": "rbac.authorization.k8s.io"}]}))
        .unwrap();
        let client = client.clone();
        async move {
            Api::<ClusterRole>::all(client.clone())
                .create(&PostParams::default(), &role)
                .await
                .unwrap();
            Api::<ClusterRoleBinding>::all(client)
                .create(&PostParams::default(), &binding)
                .await
                .unwrap();
        }
    };
    grant("e2e-forbidden-cm-only", json!(["configmaps"])).await;
    // testkit subscribes to Pods and ConfigMaps (and its sidecar grants it).
    let host = HostProcess::start(
        cp.user_kubeconfig(),
        &[(
            "pods-denied",
            "testkit",
            Some(kubewasm_tests::TESTKIT_ACCESS),
        )],
    );
    let addr = host.metrics_addr(WAIT).await;
    // The ConfigMap informer is allowed: once it has synced, /readyz names
    // only the broken plugin (before, it also lists the informer as not
    // synced, which on a loaded machine outlasts the refusal).
    let body = eventually_seen(
        "/readyz to name only the broken plugin (the ConfigMap informer is allowed and must sync)",
        WAIT,
        || async {
            let (code, _, body) = http_get(addr, "/readyz").unwrap();
            if code == 503
                && body.contains("plugin pods-denied is broken")
                && !body.contains("configmaps")
            {
                Ok(body)
            } else {
                Err(format!("{code}\n{body}"))
            }
        },
    )
    .await;
    let line = body
        .lines()
        .find(|l| l.contains("plugin pods-denied is broken"))
        .unwrap();
    assert!(
        (line.contains("refuses to list pods") || line.contains("refuses to watch pods"))
            && line.contains("grant the host's identity the list and watch verbs on pods"),
        "{body}"
    );
    // The log names the plugin too.
    host.wait_log("plugins=pods-denied", WAIT).await;
    // A one-shot run with the same identity does not wait forever: it ends
    // once nothing else is left, says what to grant, and exits non-zero.
    let plugins = tempfile::tempdir().unwrap();
    install(
        plugins.path(),
        "pods-denied",
        "testkit",
        Some(kubewasm_tests::TESTKIT_ACCESS),
    );
    let kubeconfig = cp.user_kubeconfig().to_owned();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(kubewasm_bin())
            .args([
                "run",
                "--until-idle",
                "--metrics-addr",
                "off",
                "--kubeconfig",
            ])
            .arg(&kubeconfig)
            .arg("--plugins")
            .arg(plugins.path())
            .env_remove("KUBECONFIG")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{:?}\n{stderr}", out.status);
    assert!(
        stderr.lines().any(|l| l.contains("informer pods")
            && (l.contains("forbidden to list") || l.contains("forbidden to watch"))
            && l.contains("plugins pods-denied never synced")),
        "{stderr}"
    );
    grant("e2e-forbidden-pods", json!(["pods"])).await;
    // The watcher retries with backoff (up to about 30 s between tries).
    eventually(
        "/readyz 200 once granted",
        Duration::from_secs(120),
        || async { (http_get(addr, "/readyz").unwrap().0 == 200).then_some(()) },
    )
    .await;
    assert!(host.stop().success());
}

/// A kind the server serves but cannot list or watch (TokenReview: create
/// only) is refused at registration, naming the kind and the missing verb,
/// instead of an informer that 405s forever and stalls the plugin's other
/// subscriptions; other plugins are unaffected and the host becomes ready.
#[tokio::test]
async fn a_kind_that_cannot_be_watched_is_refused_at_registration() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "e2e-unwatchable";
    namespace(&client, ns, json!({})).await;
    let bad = recorder_sidecar(ns, &["configmaps", "tokenreviews.authentication.k8s.io"]);
    let good = recorder_sidecar(ns, &["configmaps"]);
    let host = HostProcess::start(
        cp.admin_kubeconfig(),
        &[
            ("unwatchable", "recorder", Some(&bad)),
            ("fine", "recorder", Some(&good)),
        ],
    );
    host.wait_log("cannot load plugin", WAIT).await;
    let logs = host.logs();
    let line = logs
        .lines()
        .find(|l| l.contains("cannot load plugin"))
        .unwrap();
    for part in [
        "plugin=unwatchable",
        "tokenreviews.authentication.k8s.io cannot be subscribed to",
        "does not serve `list`",
        "its verbs: create",
    ] {
        assert!(line.contains(part), "{part:?} missing from: {line}");
    }
    let addr = host.metrics_addr(WAIT).await;
    eventually("/readyz 200", WAIT, || async {
        (http_get(addr, "/readyz").unwrap().0 == 200).then_some(())
    })
    .await;
    assert!(
        !host
            .logs()
            .contains("tokenreviews.authentication.k8s.io labels"),
        "no informer was started for it"
    );
    assert!(!host.logs().contains("starting informer tokenreviews"));
    let (exit, logs) = host.stop_with_logs();
    assert!(exit.success(), "exit {exit:?} after SIGTERM; log:\n{logs}");
}

/// The local cluster's built-in kind table knows every built-in kind the
/// real API server serves (its preferred version, plural and scope), and
/// names no kind the server does not serve.
#[tokio::test]
async fn the_built_in_kind_table_matches_the_real_servers_discovery() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let discovered = kubewasm::kind::KindRegistry::default();
    kubewasm::source::kube::discovery::Discovery::new(client, discovered.clone())
        .run()
        .await
        .unwrap();
    let builtin = kubewasm::kind::KindRegistry::builtin();
    // CRDs other tests install are not built in.
    let served: Vec<_> = discovered
        .all()
        .into_iter()
        .filter(|k| !k.gvk.group.contains("kubewasm"))
        .collect();
    assert!(served.len() > 60, "discovery found too little: {served:?}");
    let mut missing = Vec::new();
    for k in &served {
        let known = builtin
            .all()
            .into_iter()
            .find(|b| b.gvk.group == k.gvk.group && b.gvk.kind == k.gvk.kind);
        match known {
            Some(b) if b.plural == k.plural && b.namespaced == k.namespaced => {}
            other => missing.push(format!("{k:?} (table: {other:?})")),
        }
    }
    assert!(
        missing.is_empty(),
        "not in the table as served:\n{}",
        missing.join("\n")
    );
    for b in builtin.all() {
        assert!(
            served.iter().any(|k| k.gvk == b.gvk),
            "the table names {:?}, which the server does not serve at that version",
            b.gvk
        );
    }
}

/// Field selectors: what the host refuses at registration is exactly what
/// the real server refuses, for every listable built-in kind (each field
/// the host accepts, `metadata.namespace`, and an unknown field).
#[tokio::test]
async fn field_selector_support_matches_the_real_server() {
    use kube::api::{ApiResource, DynamicObject, ListParams};
    use kube::core::GroupVersionKind;
    use kubewasm::informer::selector::{FieldSelector, supported_fields};
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let create_only = [
        "bindings",
        "tokenreviews",
        "selfsubjectreviews",
        "localsubjectaccessreviews",
        "selfsubjectaccessreviews",
        "selfsubjectrulesreviews",
        "subjectaccessreviews",
    ];
    let mut mismatches = Vec::new();
    for kind in kubewasm::kind::KindRegistry::builtin().all() {
        if create_only.contains(&kind.plural.as_str()) {
            continue;
        }
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&kind.gvk.group, &kind.gvk.version, &kind.gvk.kind),
            &kind.plural,
        );
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let mut candidates: Vec<&str> = supported_fields(&kind);
        candidates.extend(["metadata.namespace", "spec.bogus"]);
        candidates.dedup();
        for field in candidates {
            let selector = format!("{field}=x");
            let ours = FieldSelector::parse(&selector)
                .unwrap()
                .check_supported(&kind)
                .is_ok();
            let theirs = match api
                .list_metadata(&ListParams::default().fields(&selector).limit(1))
                .await
            {
                Ok(_) => true,
                Err(kube::Error::Api(e)) if e.code == 400 => false,
                Err(e) => panic!("{} {selector}: {e}", kind.resource_name()),
            };
            if ours != theirs {
                mismatches.push(format!(
                    "{} {field}: host {ours}, server {theirs}",
                    kind.resource_name()
                ));
            }
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
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
    let server = configmap_versions(&api).await;
    let seen = eventually("the recorder's view equals the server's", WAIT, || async {
        let seen = recorded(&client, src).await;
        (seen_view(&seen) == server).then_some(seen)
    })
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
