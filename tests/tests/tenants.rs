//! A hostile tenant on the real API server. The host runs with the admin
//! kubeconfig (it could read and write anything), and still a tenant's
//! NamespacedPlugin reaches its own namespace only: the API server refuses
//! a reference to another namespace at apply (CEL); what it references in
//! its own is read as its namespace's ServiceAccount, so a missing or
//! unbound ServiceAccount gets a status naming it; the kinds its access
//! reads are asked of the API server for that ServiceAccount; its plugin's
//! writes go out as it (a write its Role does not allow is refused, though
//! the host may); and tenants draw on their own ceiling and their
//! namespace's quota, never the operator's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::{
    HostProcess, eventually_seen, host_config, http_get, install_plugin_crds, namespace,
};
use kubewasm_tests::objects::{
    ACCOUNT, WAIT, api, grant, tenant_account as account, testkit_configmap, wait_condition,
};
use serde_json::{Value, json};

/// Each host loads every NamespacedPlugin of the cluster: the tests take
/// turns.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn tenant_plugin(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "kubewasm.io/v1alpha1", "kind": "NamespacedPlugin",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap()
}

/// testkit from the ConfigMap `modules` of the plugin's own namespace.
fn testkit_spec(config: Value, access: Value) -> Value {
    json!({
        "module": {"configMap": {"name": "modules", "key": "testkit.wasm"}},
        "config": config,
        "access": access,
    })
}

/// Reads of the kinds testkit subscribes to, and its module ConfigMap.
fn reads() -> Value {
    json!([
        {"apiGroups": [""], "resources": ["configmaps", "pods"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["modules"], "verbs": ["get"]},
    ])
}

/// Bumps `name` to `generation` and waits for it to be refused for
/// `reason`, its status saying `says`.
async fn refused(
    plugins: &Api<DynamicObject>,
    host: &HostProcess,
    (name, generation): (&str, i64),
    reason: &str,
    says: &str,
) {
    bump(plugins, name, &generation.to_string()).await;
    let status = wait_condition(plugins, host, name, generation, ("Ready", "False", reason)).await;
    assert!(status.to_string().contains(says), "{status}");
}

/// Changes the spec's config `tag` (a new generation: reconciled now).
async fn bump(plugins: &Api<DynamicObject>, name: &str, tag: &str) {
    plugins
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"config": {"tag": tag}}})),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_tenant_reaches_its_own_namespace_and_nothing_else() {
    let _serial = SERIAL.lock().await;
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    install_plugin_crds(&client).await;
    let (team, other) = ("hostile-a", "victim-b");
    for n in [team, other] {
        namespace(&client, n, json!({})).await;
    }
    // The other namespace holds a module and a registry Secret the
    // tenant must never reach.
    testkit_configmap(&Api::namespaced(client.clone(), other), "modules").await;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "regcred"}, "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": "eyJhdXRocyI6e319"},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), other)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    testkit_configmap(&Api::namespaced(client.clone(), team), "modules").await;
    let (_config, config_file) = host_config(&format!(
        "pluginObjects:\n  tenantNamespaces: [{team}]\n  tenants:\n    recheck: 2s\n"
    ));
    let host = HostProcess::with_config(cp.admin_kubeconfig(), &config_file);
    let plugins = api(&client, "NamespacedPlugin", Some(team));

    // 1. A reference to another namespace is refused by the API server at
    // apply, whichever object it is.
    for (field, module) in [
        (
            "module.configMap.namespace",
            json!({"configMap": {"name": "modules", "namespace": other, "key": "testkit.wasm"}}),
        ),
        (
            "module.oci.pullSecret.namespace",
            json!({"oci": {"reference": "reg.test/x:1", "pullSecret": {"name": "regcred", "namespace": other}}}),
        ),
        (
            "module.oci.verifyKeys[].namespace",
            json!({"oci": {"reference": "reg.test/x:1", "verifyKeys": [{"configMap": "keys", "key": "k", "namespace": other}]}}),
        ),
    ] {
        let mut spec = testkit_spec(
            json!({"mode": "ok"}),
            json!([{"kinds": ["configmaps"], "verbs": ["read"]}]),
        );
        spec["module"] = module;
        let err = plugins
            .create(&PostParams::default(), &tenant_plugin("escape", spec))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("remove {field}")), "{field}: {err}");
    }

    // 2. Its own module, but no ServiceAccount to read it as: said so.
    let access = json!([{"kinds": ["configmaps", "pods"], "verbs": ["read", "patch"]}]);
    let spec = testkit_spec(json!({"mode": "actions", "count": 1}), access);
    plugins
        .create(&PostParams::default(), &tenant_plugin("t", spec))
        .await
        .unwrap();
    let status = wait_condition(
        &plugins,
        &host,
        "t",
        1,
        ("Ready", "False", "TenantAccountMissing"),
    )
    .await;
    assert!(
        status
            .to_string()
            .contains(&format!("ServiceAccount {team}/{ACCOUNT}")),
        "{status}"
    );

    // 3. The ServiceAccount, unbound: its reads are refused (asked for it
    // before the plugin loads), though the host itself may read anything.
    account(&client, team).await;
    refused(
        &plugins,
        &host,
        ("t", 2),
        "TenantForbidden",
        "may not list configmaps",
    )
    .await;

    // 4. It may list and watch, but not get its module: the module is read
    // as it, and refused.
    grant(
        &client,
        team,
        json!([{"apiGroups": [""], "resources": ["configmaps", "pods"], "verbs": ["list", "watch"]}]),
    )
    .await;
    let says = format!("may not get configmaps {team}/modules");
    refused(&plugins, &host, ("t", 3), "TenantForbidden", &says).await;

    // 5. Granted its module: it serves.
    grant(&client, team, reads()).await;
    bump(&plugins, "t", "4").await;
    wait_condition(&plugins, &host, "t", 4, ("Ready", "True", "Serving")).await;

    // 6. Its writes go out as its ServiceAccount: a patch its Role does
    // not allow is refused by the API server (the host could have made it).
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), team);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "actions-1"}, "data": {"k": "v"}}))
            .unwrap();
    configmaps
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let user = format!("system:serviceaccount:{team}:{ACCOUNT}");
    eventually_seen(
        "the tenant's patch refused as its ServiceAccount",
        WAIT,
        || async {
            let logs = host.logs();
            logs.lines()
                .any(|l| {
                    l.contains(&user)
                        && l.contains("cannot patch resource")
                        && l.contains("actions-1")
                })
                .then_some(())
                .ok_or(logs)
        },
    )
    .await;
    let annotated = |cm: &ConfigMap| {
        cm.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kubewasm.io/n"))
            .cloned()
    };
    assert_eq!(annotated(&configmaps.get("actions-1").await.unwrap()), None);
    // Granted the patch: the retried delta goes through.
    let mut rules = reads();
    rules
        .as_array_mut()
        .unwrap()
        .push(json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch"]}));
    grant(&client, team, rules).await;
    eventually_seen("the tenant's patch, once granted", WAIT, || async {
        let cm = configmaps
            .get("actions-1")
            .await
            .map_err(|e| e.to_string())?;
        annotated(&cm).ok_or_else(|| format!("{:?}", cm.metadata.annotations))
    })
    .await;

    // 7. Its reads through the shared cache never reach the API server as
    // the tenant: revoking them stops the serving plugin at the next
    // recheck (2 s here), no earlier version kept; granted again, it
    // serves again.
    grant(&client, team, json!([])).await;
    let status = wait_condition(
        &plugins,
        &host,
        "t",
        4,
        ("Ready", "False", "TenantForbidden"),
    )
    .await;
    assert!(
        status.to_string().contains("may not list configmaps"),
        "{status}"
    );
    grant(&client, team, reads()).await;
    wait_condition(&plugins, &host, "t", 4, ("Ready", "True", "Serving")).await;

    // Nothing of the other namespace in any status or log line.
    let all = api(&client, "NamespacedPlugin", None)
        .list(&Default::default())
        .await
        .unwrap();
    let statuses = serde_json::to_string(
        &all.items
            .iter()
            .map(|o| &o.data["status"])
            .collect::<Vec<_>>(),
    )
    .unwrap();
    // The metrics name the tenant's plugin, never the other namespace.
    let addr = host.metrics_addr(WAIT).await;
    let (code, _, metrics) = http_get(addr, "/metrics").unwrap();
    assert_eq!(code, 200, "{metrics}");
    assert!(
        metrics.contains("kubewasm_") && metrics.contains(&format!("{team}/t")),
        "{metrics}"
    );
    let (exit, logs) = host.stop_with_logs();
    assert!(exit.success(), "{logs}");
    for text in [&statuses, &logs, &metrics] {
        assert!(!text.contains(other), "{text}");
        assert!(!text.contains("regcred"), "{text}");
    }
}

#[tokio::test]
async fn tenants_draw_on_their_own_ceiling_and_quota() {
    let _serial = SERIAL.lock().await;
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    install_plugin_crds(&client).await;
    let team = "quota-a";
    namespace(&client, team, json!({})).await;
    testkit_configmap(&Api::namespaced(client.clone(), team), "modules").await;
    account(&client, team).await;
    grant(&client, team, reads()).await;
    // The operator's ceiling is generous and grants HOME; tenants keep
    // their own (64Mi, no grants) and one plugin each.
    let (_config, config_file) = host_config(&format!(
        "limits: {{memory: 512Mi, pluginMemory: 1Gi}}\ngrants: {{env: [HOME]}}\npluginObjects:\n  tenantNamespaces: [{team}]\n  tenants:\n    quota: {{plugins: 1}}\n"
    ));
    let host = HostProcess::with_config(cp.admin_kubeconfig(), &config_file);
    let plugins = api(&client, "NamespacedPlugin", Some(team));
    // testkit declares writes of both kinds.
    let access = json!([{"kinds": ["configmaps", "pods"], "verbs": ["read", "patch"]}]);
    let with = |extra: Value| {
        let mut spec = testkit_spec(json!({"mode": "ok"}), access.clone());
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        spec
    };

    // Past the tenants' ceiling, within the operator's: refused, naming
    // the tenants' key.
    plugins
        .create(
            &PostParams::default(),
            &tenant_plugin("env", with(json!({"grants": {"env": ["HOME"]}}))),
        )
        .await
        .unwrap();
    let status = wait_condition(&plugins, &host, "env", 1, ("Ready", "False", "NotGranted")).await;
    assert!(
        status
            .to_string()
            .contains("pluginObjects.tenants.ceiling.grants.env"),
        "{status}"
    );
    plugins
        .create(
            &PostParams::default(),
            &tenant_plugin("big", with(json!({"limits": {"memory": "128Mi"}}))),
        )
        .await
        .unwrap();
    let status = wait_condition(&plugins, &host, "big", 1, ("Ready", "False", "NotGranted")).await;
    assert!(
        status
            .to_string()
            .contains("pluginObjects.tenants.ceiling.limits.memory"),
        "{status}"
    );

    // One plugin serves; the namespace's second is over its quota.
    plugins
        .create(
            &PostParams::default(),
            &tenant_plugin("one", with(json!({}))),
        )
        .await
        .unwrap();
    wait_condition(&plugins, &host, "one", 1, ("Ready", "True", "Serving")).await;
    plugins
        .create(
            &PostParams::default(),
            &tenant_plugin("two", with(json!({}))),
        )
        .await
        .unwrap();
    let status = wait_condition(
        &plugins,
        &host,
        "two",
        1,
        ("Ready", "False", "QuotaExceeded"),
    )
    .await;
    assert!(
        status
            .to_string()
            .contains(&format!("namespace {team}'s quota plugins")),
        "{status}"
    );
    // The first gone, the second fits.
    plugins.delete("one", &Default::default()).await.unwrap();
    host.wait_log("Plugin object deleted; plugin unloaded", WAIT)
        .await;
    bump(&plugins, "two", "again").await;
    wait_condition(&plugins, &host, "two", 2, ("Ready", "True", "Serving")).await;
    let (exit, logs) = host.stop_with_logs();
    assert!(exit.success(), "{logs}");
}
