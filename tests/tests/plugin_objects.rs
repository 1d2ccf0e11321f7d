//! Plugins as objects on the real API server: the host (the binary, run
//! with a kubeconfig and an empty plugin folder) loads a `Plugin` whose
//! module is in a ConfigMap, reports it Ready with its digest, swaps it
//! when the spec changes (the new config's log lines appear, no restart),
//! keeps the old version serving when the spec names a broken module (and
//! says so: Ready False, Serving PreviousVersion), refuses a tenant's
//! NamespacedPlugin in a namespace the host config does not list or one
//! asking beyond its namespace, and unloads a deleted Plugin. A host
//! started before the cluster serves the CRDs picks them up later.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::{
    HostProcess, eventually_seen, host_config, install_plugin_crds, namespace, requeue_lines,
};
use kubewasm_tests::objects::{
    WAIT, api, condition, find_condition, testkit_configmap, wait_condition, wait_requeue_seen,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

fn spec(key: &str, tag: &str, ns: &str) -> Value {
    json!({
        "module": {"configMap": {"name": "modules", "key": key}},
        "config": {"mode": "requeue", "count": 3_600_000, "tag": tag},
        "access": [{"kinds": ["configmaps"], "verbs": ["read"], "namespaces": [ns]}],
    })
}

/// A Plugin `name` of [`spec`] whose module is testkit in the ConfigMap
/// `configmap` of `ns` (see [`testkit_configmap`]).
fn testkit_plugin(name: &str, configmap: &str, ns: &str, tag: &str) -> DynamicObject {
    let mut spec = spec("testkit.wasm", tag, ns);
    spec["module"] =
        json!({"configMap": {"name": configmap, "namespace": ns, "key": "testkit.wasm"}});
    serde_json::from_value(json!({
        "apiVersion": "kubewasm.io/v1alpha1", "kind": "Plugin",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap()
}

/// Creates the ConfigMap `name` in `api`'s namespace: a delta for the
/// testkit plugins there, which requeue it under their tag.
async fn touch(api: &Api<ConfigMap>, name: &str) {
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
}

/// The tests here share one control plane and every host loads every
/// Plugin object: they take turns, so one's hosts never serve the other's
/// objects.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn plugin_objects_load_swap_refuse_and_unload() {
    let _serial = SERIAL.lock().await;
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    install_plugin_crds(&client).await;
    let ns = "objects-watched";
    for n in ["kubewasm", ns, "tenant-ok", "tenant-no"] {
        namespace(&client, n, json!({})).await;
    }
    // The modules: testkit, and a file that is not WebAssembly.
    let testkit = std::fs::read(kubewasm_tests::plugin_artifacts().join("testkit.wasm")).unwrap();
    let hex: String = Sha256::digest(&testkit)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let digest = format!("sha256:{hex}");
    let modules = BTreeMap::from([
        ("testkit.wasm".to_owned(), ByteString(testkit.clone())),
        (
            "broken.wasm".to_owned(),
            ByteString(b"not wasm at all".to_vec()),
        ),
    ]);
    for n in ["kubewasm", "tenant-ok"] {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "modules", "namespace": n},
        }))
        .unwrap();
        let cm = ConfigMap {
            binary_data: Some(modules.clone()),
            ..cm
        };
        Api::<ConfigMap>::namespaced(client.clone(), n)
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
    }
    // The tenant's ServiceAccount, which its reads go out as: it may
    // list and watch ConfigMaps there and get its module.
    kubewasm_tests::objects::tenant_account(&client, "tenant-ok").await;
    kubewasm_tests::objects::grant(
        &client,
        "tenant-ok",
        json!([
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]},
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["modules"], "verbs": ["get"]},
        ]),
    )
    .await;
    // A ceiling on what any spec may ask for (limits.memory).
    let (_config, config_file) =
        host_config("pluginObjects:\n  tenantNamespaces: [tenant-ok]\nlimits:\n  memory: 256Mi\n");
    // Two replicas (no election: both act), each reporting its own load
    // state under its Pod name.
    let start = |pod: &str| {
        HostProcess::start_args(
            cp.admin_kubeconfig(),
            &["--config", config_file.to_str().unwrap()],
            &[("POD_NAME", pod)],
            |_| {},
        )
    };
    let host = start("replica-a");
    let other = start("replica-b");
    let plugins = api(&client, "Plugin", None);
    // (replica, loaded, version, reason) of each entry, once both replicas
    // report `loaded` as wanted.
    let replicas = |loaded: bool| {
        let plugins = plugins.clone();
        let logs = format!("{}\n--- replica-b:\n{}", host.logs(), other.logs());
        async move {
            let obj = plugins.get("objtest").await.map_err(|e| e.to_string())?;
            let entries = obj.data["status"]["replicas"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let mut view: Vec<(String, bool, String, String)> = entries
                .iter()
                .map(|e| {
                    (
                        e["name"].as_str().unwrap_or("").to_owned(),
                        e["loaded"].as_bool().unwrap_or(false),
                        e["version"].as_str().unwrap_or("").to_owned(),
                        e["reason"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect();
            view.sort();
            let names: Vec<&str> = view.iter().map(|v| v.0.as_str()).collect();
            if names == ["replica-a", "replica-b"] && view.iter().all(|v| v.1 == loaded) {
                Ok(view)
            } else {
                Err(format!("{view:?}\n{logs}"))
            }
        }
    };
    let watched = Api::<ConfigMap>::namespaced(client.clone(), ns);

    // Loaded from its ConfigMap, Ready, with the module's digest.
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubewasm.io/v1alpha1", "kind": "Plugin",
        "metadata": {"name": "objtest"}, "spec": spec("testkit.wasm", "v1", ns),
    }))
    .unwrap();
    plugins.create(&PostParams::default(), &obj).await.unwrap();
    let status = wait_condition(&plugins, &host, "objtest", 1, ("Ready", "True", "Serving")).await;
    assert_eq!(status["contentDigest"], digest);
    let version = &digest["sha256:".len().."sha256:".len() + 12];
    assert_eq!(status["version"], version);
    let both = eventually_seen("both replicas loaded", WAIT, || replicas(true)).await;
    assert!(both.iter().all(|r| r.2 == version), "{both:?}");
    touch(&watched, "requeue-first").await;
    wait_requeue_seen(&host, "v1", "requeue-first").await;

    // A new config: swapped in place, the new version's lines appear.
    plugins
        .patch(
            "objtest",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"config": {"tag": "v2"}}})),
        )
        .await
        .unwrap();
    wait_condition(&plugins, &host, "objtest", 2, ("Ready", "True", "Serving")).await;
    touch(&watched, "requeue-second").await;
    wait_requeue_seen(&host, "v2", "requeue-second").await;

    // A broken module: refused, said so, and v2 keeps serving.
    plugins
        .patch(
            "objtest",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"module": {"configMap": {"key": "broken.wasm"}}}})),
        )
        .await
        .unwrap();
    let status = wait_condition(
        &plugins,
        &host,
        "objtest",
        3,
        ("Degraded", "True", "NotAPlugin"),
    )
    .await;
    // Ready is False (kubectl wait and kstatus see the failed update),
    // and a condition says the previous version keeps serving.
    let ready = find_condition(&status, "Ready").unwrap();
    assert_eq!(
        (&ready["status"], &ready["reason"]),
        (&json!("False"), &json!("NotAPlugin")),
        "{status}"
    );
    let serving = find_condition(&status, "Serving").unwrap();
    assert_eq!(
        (&serving["status"], &serving["reason"]),
        (&json!("True"), &json!("PreviousVersion")),
        "{status}"
    );
    assert_eq!(
        find_condition(&status, "Stalled").unwrap()["status"],
        "True",
        "a module that is no plugin needs a change: {status}"
    );
    assert_eq!(status["contentDigest"], digest, "the digest still served");
    let both = eventually_seen("both replicas refused it", WAIT, || replicas(false)).await;
    assert!(
        both.iter().all(|r| r.2 == version && r.3 == "NotAPlugin"),
        "each still serves the old version and says why: {both:?}"
    );
    touch(&watched, "requeue-third").await;
    wait_requeue_seen(&host, "v2", "requeue-third").await;

    // Tenants: a namespace the host config does not list is refused; one
    // it lists runs, confined to it: a rule naming another namespace is not
    // granted.
    let refused_ns = api(&client, "NamespacedPlugin", Some("tenant-no"));
    let tenant = |name: &str, spec: Value| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "kubewasm.io/v1alpha1", "kind": "NamespacedPlugin",
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap()
    };
    refused_ns
        .create(
            &PostParams::default(),
            &tenant("t", spec("testkit.wasm", "t", "tenant-no")),
        )
        .await
        .unwrap();
    wait_condition(
        &refused_ns,
        &host,
        "t",
        1,
        ("Ready", "False", "NamespaceNotAllowed"),
    )
    .await;
    let allowed = api(&client, "NamespacedPlugin", Some("tenant-ok"));
    allowed
        .create(
            &PostParams::default(),
            &tenant("t", spec("testkit.wasm", "t", "tenant-ok")),
        )
        .await
        .unwrap();
    wait_condition(&allowed, &host, "t", 1, ("Ready", "True", "Serving")).await;
    allowed
        .create(
            &PostParams::default(),
            &tenant("greedy", spec("testkit.wasm", "g", ns)),
        )
        .await
        .unwrap();
    let status = wait_condition(
        &allowed,
        &host,
        "greedy",
        1,
        ("Ready", "False", "NotGranted"),
    )
    .await;
    assert!(
        status
            .to_string()
            .contains("confined to its namespace tenant-ok"),
        "{status}"
    );

    // A Plugin asking past the host config's ceiling: refused, naming it.
    let mut greedy = spec("testkit.wasm", "c", ns);
    greedy["limits"] = json!({"memory": "512Mi"});
    plugins
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "kubewasm.io/v1alpha1", "kind": "Plugin",
                "metadata": {"name": "over-ceiling"}, "spec": greedy,
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let status = wait_condition(
        &plugins,
        &host,
        "over-ceiling",
        1,
        ("Ready", "False", "NotGranted"),
    )
    .await;
    assert!(
        status.to_string().contains("limits.memory"),
        "the refusal names the ceiling: {status}"
    );
    plugins
        .delete("over-ceiling", &DeleteParams::default())
        .await
        .unwrap();

    // Deleted: unloaded.
    plugins
        .delete("objtest", &DeleteParams::default())
        .await
        .unwrap();
    host.wait_log("Plugin object deleted; plugin unloaded", WAIT)
        .await;
    let (exit, logs) = host.stop_with_logs();
    assert!(exit.success(), "{logs}");
    let (exit, logs) = other.stop_with_logs();
    assert!(exit.success(), "{logs}");
}

/// A plugin folder file and a Plugin object of the same name never replace
/// each other: whichever serves keeps serving; a later file is refused with
/// an error naming both (the object serving on), a later object shows
/// `NameTaken` (the file serving on), and each loads once the other gives
/// the name back, without waiting for a poll.
#[tokio::test]
async fn a_folder_plugin_and_a_plugin_object_never_replace_each_other() {
    let _serial = SERIAL.lock().await;
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    install_plugin_crds(&client).await;
    let ns = "clash-watched";
    namespace(&client, ns, json!({})).await;
    let watched = Api::<ConfigMap>::namespaced(client.clone(), ns);
    testkit_configmap(&watched, "clash-modules").await;
    let plugins = api(&client, "Plugin", None);
    let object = testkit_plugin("clash", "clash-modules", ns, "object");
    let sidecar = format!(
        "config: {{mode: requeue, count: 3600000, tag: folder}}\naccess:\n  - {{kinds: [configmaps], verbs: [read], namespaces: [{ns}]}}\n"
    );
    let host = HostProcess::start_with(cp.admin_kubeconfig(), |_| {});
    let file = host.plugins.path().join("clash.wasm");
    let log_line = |needles: Vec<String>| {
        let logs = host.logs();
        async move {
            logs.lines()
                .find(|l| needles.iter().all(|n| l.contains(n.as_str())))
                .map(str::to_owned)
                .ok_or_else(|| format!("no line with {needles:?}:\n{logs}"))
        }
    };

    // The object serves first.
    plugins
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    wait_condition(&plugins, &host, "clash", 1, ("Ready", "True", "Serving")).await;
    touch(&watched, "requeue-clash-1").await;
    wait_requeue_seen(&host, "object", "requeue-clash-1").await;

    // A file of the same name is refused, naming the file and the object.
    kubewasm_tests::install(host.plugins.path(), "clash", "testkit", Some(&sidecar));
    let refused = eventually_seen("the file refused", WAIT, || {
        log_line(vec![
            "cannot load plugin".into(),
            file.display().to_string(),
            "taken by the object plugins.kubewasm.io/clash".into(),
        ])
    })
    .await;
    assert!(refused.contains("rename one of them"), "{refused}");
    touch(&watched, "requeue-clash-2").await;
    wait_requeue_seen(&host, "object", "requeue-clash-2").await;
    let (status, reason, _) = condition(&plugins, "clash", "Ready").await.unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Serving"));
    assert!(
        requeue_lines(&host.logs())
            .iter()
            .all(|l| l.tag == "object"),
        "the file's plugin never ran:\n{}",
        host.logs()
    );

    // The object deleted: the file loads at once and serves.
    plugins
        .delete("clash", &DeleteParams::default())
        .await
        .unwrap();
    eventually_seen("the file loaded", WAIT, || {
        log_line(vec!["plugin loaded".into(), file.display().to_string()])
    })
    .await;
    touch(&watched, "requeue-clash-3").await;
    wait_requeue_seen(&host, "folder", "requeue-clash-3").await;

    // The object again: refused while the file serves, and says why.
    plugins
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    let status = wait_condition(&plugins, &host, "clash", 1, ("Ready", "False", "NameTaken")).await;
    let ready = find_condition(&status, "Ready").unwrap().to_string();
    assert!(
        ready.contains(&format!("the plugin folder's file {}", file.display())),
        "{ready}"
    );
    // Nothing of the object serves on this replica: its /readyz text and
    // an Event on the object say so (the replica stays ready).
    let metrics = host.metrics_addr(WAIT).await;
    let (code, _, body) = kubewasm_tests::e2e::http_get(metrics, "/readyz").unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("not serving plugins.kubewasm.io/clash: NameTaken: "),
        "{body}"
    );
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    kubewasm_tests::e2e::eventually("a Warning Event about plugin clash", WAIT, || async {
        events
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("clash")
                    && e.reason.as_deref() == Some("NameTaken")
                    && e.type_.as_deref() == Some("Warning")
            })
    })
    .await;
    touch(&watched, "requeue-clash-4").await;
    wait_requeue_seen(&host, "folder", "requeue-clash-4").await;
    assert!(
        !requeue_lines(&host.logs())
            .iter()
            .any(|l| l.tag == "object" && l.name == "requeue-clash-4"),
        "the object's plugin did not come back:\n{}",
        host.logs()
    );

    // The file removed: the object loads (its retry is due at once).
    std::fs::remove_file(&file).unwrap();
    std::fs::remove_file(host.plugins.path().join("clash.yaml")).unwrap();
    wait_condition(&plugins, &host, "clash", 1, ("Ready", "True", "Serving")).await;
    let (_, _, body) = kubewasm_tests::e2e::http_get(metrics, "/readyz").unwrap();
    assert!(
        !body.contains("not serving plugins.kubewasm.io/clash"),
        "{body}"
    );
    touch(&watched, "requeue-clash-5").await;
    wait_requeue_seen(&host, "object", "requeue-clash-5").await;

    plugins
        .delete("clash", &DeleteParams::default())
        .await
        .unwrap();
    host.wait_log("Plugin object deleted; plugin unloaded", WAIT)
        .await;
    let (exit, logs) = host.stop_with_logs();
    assert!(exit.success(), "{logs}");
}

/// `kubewasm rbac --from-cluster` lists the Plugin and NamespacedPlugin
/// objects of the kubeconfig's cluster (the context named) and renders
/// their access as the host grants it: the Plugin's in the ClusterRole and
/// a Role where it lists a namespace, the tenant's in a Role in its own
/// namespace only, bound to its ServiceAccount (the host keeps the reads
/// its cache makes there).
#[tokio::test]
async fn rbac_from_the_cluster_follows_the_plugin_objects() {
    let _serial = SERIAL.lock().await;
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    install_plugin_crds(&client).await;
    // The tests here take turns: whatever an earlier one left goes first.
    let plugins = api(&client, "Plugin", None);
    for p in plugins.list(&Default::default()).await.unwrap() {
        let _ = plugins
            .delete(&p.metadata.name.unwrap(), &DeleteParams::default())
            .await;
    }
    let tenants_everywhere = api(&client, "NamespacedPlugin", None);
    for p in tenants_everywhere.list(&Default::default()).await.unwrap() {
        let ns = p.metadata.namespace.unwrap();
        let _ = api(&client, "NamespacedPlugin", Some(&ns))
            .delete(&p.metadata.name.unwrap(), &DeleteParams::default())
            .await;
    }
    namespace(&client, "rbac-tenant", json!({})).await;
    let object = |kind: &str, name: &str, spec: Value| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "kubewasm.io/v1alpha1", "kind": kind,
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap()
    };
    plugins
        .create(
            &PostParams::default(),
            &object(
                "Plugin",
                "rbac-ops",
                json!({"module": {"configMap": {"name": "m", "key": "ops.wasm"}},
                       "access": [{"kinds": ["deployments.apps"], "verbs": ["read", "apply"]},
                                  {"kinds": ["secrets"], "verbs": ["read"], "namespaces": ["rbac-tenant"]}]}),
            ),
        )
        .await
        .unwrap();
    api(&client, "NamespacedPlugin", Some("rbac-tenant"))
        .create(
            &PostParams::default(),
            &object(
                "NamespacedPlugin",
                "mine",
                json!({"module": {"configMap": {"name": "m", "key": "mine.wasm"}},
                       "access": [{"kinds": ["configmaps"], "verbs": ["read", "delete", "events"]}]}),
            ),
        )
        .await
        .unwrap();
    let kubeconfig: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(cp.admin_kubeconfig()).unwrap()).unwrap();
    let context = kubeconfig["current-context"].as_str().unwrap().to_owned();
    let out = kubewasm_tests::e2e::succeeded(
        std::process::Command::new(kubewasm_tests::e2e::kubewasm_bin())
            .args(["rbac", "--from-cluster", "--plugins-only", "--kubeconfig"])
            .arg(cp.admin_kubeconfig())
            .args(["--context", &context])
            .env_remove("KUBECONFIG")
            .output()
            .unwrap(),
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    // (kind, namespace) -> its rules as "group/resource verbs".
    let roles = kubewasm_tests::manifests::roles(&stdout);
    let expected = vec![
        (
            "ClusterRole".to_owned(),
            String::new(),
            vec!["apps/deployments create,get,list,patch,watch".to_owned()],
        ),
        // The host's there: what its cache lists and watches, for both.
        (
            "Role".to_owned(),
            "rbac-tenant".to_owned(),
            vec![
                "/configmaps get,list,watch".to_owned(),
                "/secrets get,list,watch".to_owned(),
            ],
        ),
        // The tenant's own, bound to its ServiceAccount: its reads (asked
        // for it), its deletes and Events, and its module ConfigMap.
        (
            "Role".to_owned(),
            "rbac-tenant".to_owned(),
            vec![
                "/configmaps delete,get,list,watch".to_owned(),
                "events.k8s.io/events create,patch".to_owned(),
            ],
        ),
    ];
    assert_eq!(roles, expected, "{stdout}");
    assert!(
        stdout.contains("--from-cluster")
            && stdout.contains("plugins.kubewasm.io/rbac-ops")
            && stdout.contains("namespacedplugins.kubewasm.io/mine in rbac-tenant"),
        "{stdout}"
    );

    plugins
        .delete("rbac-ops", &DeleteParams::default())
        .await
        .unwrap();
    api(&client, "NamespacedPlugin", Some("rbac-tenant"))
        .delete("mine", &DeleteParams::default())
        .await
        .unwrap();
}

/// A host started before the cluster serves plugins.kubewasm.io (CRDs
/// applied beside the Deployment, established a moment after the Pod
/// starts, or installed later) says plugins come from the folder until it
/// does, keeps asking, and serves a Plugin object once the CRDs are there,
/// without a restart. Its own control plane: the shared one has the CRDs.
#[tokio::test]
async fn plugin_crds_installed_after_the_host_started_are_picked_up() {
    let cp = ControlPlane::start().await.unwrap();
    let client = cp.admin_client().await;
    let ns = "late-crds";
    namespace(&client, ns, json!({})).await;
    let watched = Api::<ConfigMap>::namespaced(client.clone(), ns);
    testkit_configmap(&watched, "late-modules").await;

    let host = HostProcess::start_with(cp.admin_kubeconfig(), |_| {});
    // A host whose user may not list Plugins (a 403, CRDs or not) says
    // what to grant, once, and also serves its folder meanwhile.
    let unbound = HostProcess::start_with(cp.user_kubeconfig(), |_| {});
    let not_served = "the cluster does not serve plugins.kubewasm.io (install deploy/base/crds.yaml): plugins come from the folder until it does";
    host.wait_log(not_served, WAIT).await;
    let forbidden = "the host may not list plugins.kubewasm.io: plugins come from the folder until it may; grant the host's roles (`kubewasm rbac`, deploy/base/rbac.yaml) or turn Plugin objects off (pluginObjects.enabled: false)";
    unbound.wait_log(forbidden, WAIT).await;

    install_plugin_crds(&client).await;
    let serves = "the cluster serves plugins.kubewasm.io now: watching Plugin objects";
    host.wait_log(serves, WAIT).await;
    assert_eq!(
        host.logs().matches(not_served).count(),
        1,
        "{}",
        host.logs()
    );

    // Granted list and watch, the other host starts watching too.
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "late-crds-plugins"},
        "rules": [{"apiGroups": ["kubewasm.io"], "resources": ["plugins", "namespacedplugins"], "verbs": ["get", "list", "watch"]}],
    }))
    .unwrap();
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "late-crds-plugins"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "late-crds-plugins"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": ControlPlane::USER}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    unbound.wait_log(serves, WAIT).await;
    assert_eq!(
        unbound.logs().matches(forbidden).count(),
        1,
        "{}",
        unbound.logs()
    );
    let (exit, logs) = unbound.stop_with_logs();
    assert!(exit.success(), "{logs}");
    let plugins = api(&client, "Plugin", None);
    let object = testkit_plugin("late", "late-modules", ns, "late");
    plugins
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    wait_condition(&plugins, &host, "late", 1, ("Ready", "True", "Serving")).await;
    touch(&watched, "requeue-late").await;
    wait_requeue_seen(&host, "late", "requeue-late").await;
    let (exit, logs) = host.stop_with_logs();
    assert!(exit.success(), "{logs}");
}
