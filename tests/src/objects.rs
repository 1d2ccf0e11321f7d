//! Helpers of the Plugin object tests: the kinds' APIs, waiting on a
//! condition, and the testkit `requeue` mode's log lines.

use std::time::Duration;

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;
use serde_json::json;

use crate::e2e::{HostProcess, eventually_seen, requeue_lines};

/// Creates the ConfigMap `name` holding testkit.wasm under that key, for
/// Plugin objects' `module.configMap`.
pub async fn testkit_configmap(api: &Api<ConfigMap>, name: &str) {
    let testkit = std::fs::read(crate::plugin_artifacts().join("testkit.wasm")).unwrap();
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        binary_data: Some(BTreeMap::from([(
            "testkit.wasm".to_owned(),
            ByteString(testkit),
        )])),
        ..Default::default()
    };
    api.create(&PostParams::default(), &cm).await.unwrap();
}

/// The ServiceAccount tenants act as by default.
pub const ACCOUNT: &str = "kubewasm-tenant";

/// The tenant's ServiceAccount in `ns`.
pub async fn tenant_account(client: &kube::Client, ns: &str) {
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": ACCOUNT}})).unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
}

/// Sets the tenant's Role in `ns` to `rules` (bound to its ServiceAccount).
pub async fn grant(client: &kube::Client, ns: &str, rules: Value) {
    let pp = PatchParams::apply("tenants-test").force();
    let role: Role = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": ACCOUNT, "namespace": ns}, "rules": rules,
    }))
    .unwrap();
    Api::<Role>::namespaced(client.clone(), ns)
        .patch(ACCOUNT, &pp, &Patch::Apply(&role))
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": ACCOUNT, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ACCOUNT},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": ns}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .patch(ACCOUNT, &pp, &Patch::Apply(&binding))
        .await
        .unwrap();
}

/// How long a Plugin object's status may take.
pub const WAIT: Duration = Duration::from_secs(60);

pub fn api(client: &kube::Client, kind: &str, namespace: Option<&str>) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("kubewasm.io", "v1alpha1", kind);
    let plural = if kind == "Plugin" {
        "plugins"
    } else {
        "namespacedplugins"
    };
    let ar = ApiResource::from_gvk_with_plural(&gvk, plural);
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// The object's condition `type` as (status, reason), and its status.
pub async fn condition(
    api: &Api<DynamicObject>,
    name: &str,
    kind: &str,
) -> Option<(String, String, Value)> {
    let obj = api.get(name).await.ok()?;
    let status = obj.data.get("status")?.clone();
    let c = find_condition(&status, kind)?;
    Some((
        c["status"].as_str()?.to_owned(),
        c["reason"].as_str()?.to_owned(),
        status,
    ))
}

/// Condition `kind` of a status.
pub fn find_condition<'a>(status: &'a Value, kind: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// Waits until condition `kind` of `name` has `status` and `reason`, and
/// the status describes `generation`; returns the status.
pub async fn wait_condition(
    api: &Api<DynamicObject>,
    host: &HostProcess,
    name: &str,
    generation: i64,
    condition: (&str, &str, &str),
) -> Value {
    wait_condition_for(api, name, generation, condition, WAIT, || async {
        format!("host log:\n{}", host.logs())
    })
    .await
}

/// [`wait_condition`] for `timeout`, with `logs` (the hosts' logs, however
/// they are read) shown while it waits in vain.
pub async fn wait_condition_for<L, Fut>(
    api: &Api<DynamicObject>,
    name: &str,
    generation: i64,
    (kind, status, reason): (&str, &str, &str),
    timeout: Duration,
    logs: L,
) -> Value
where
    L: Fn() -> Fut,
    Fut: std::future::Future<Output = String>,
{
    eventually_seen(
        &format!("{name}: {kind}={status} ({reason})"),
        timeout,
        || async {
            match condition(api, name, kind).await {
                Some((s, r, st))
                    if s == status && r == reason && st["observedGeneration"] == generation =>
                {
                    Ok(st)
                }
                other => Err(format!("{other:?}\n{}", logs().await)),
            }
        },
    )
    .await
}

/// Waits until the testkit `requeue` plugin logs a delta of object `name`
/// under config tag `tag` (which version of the plugin saw it).
pub async fn wait_requeue_seen(host: &HostProcess, tag: &str, name: &str) {
    eventually_seen(&format!("{tag} sees {name}"), WAIT, || async {
        let seen: Vec<String> = requeue_lines(&host.logs())
            .into_iter()
            .map(|l| format!("{}:{}", l.tag, l.name))
            .collect();
        seen.contains(&format!("{tag}:{name}"))
            .then_some(())
            .ok_or_else(|| format!("{seen:?}\nhost log:\n{}", host.logs()))
    })
    .await;
}

/// A refused update as status says it: `Ready` False (what `kubectl wait`
/// and kstatus read), and `Serving` naming the previous version that keeps
/// delivering.
pub fn assert_refused_update(status: &Value) {
    assert_eq!(
        find_condition(status, "Ready").unwrap()["status"],
        "False",
        "{status}"
    );
    assert_eq!(
        find_condition(status, "Serving").unwrap()["reason"],
        "PreviousVersion",
        "{status}"
    );
}
