//! Helpers of the Plugin object tests: the kinds' APIs, waiting on a
//! condition, and the testkit `requeue` mode's log lines.

use std::time::Duration;

use kube::Api;
use kube::api::DynamicObject;
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

use crate::e2e::{HostProcess, eventually_seen};

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
    let c = status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)?
        .clone();
    Some((
        c["status"].as_str()?.to_owned(),
        c["reason"].as_str()?.to_owned(),
        status,
    ))
}

/// Waits until condition `kind` of `name` has `status` and `reason`, and
/// the status describes `generation`; returns the status.
pub async fn wait_condition(
    api: &Api<DynamicObject>,
    host: &HostProcess,
    name: &str,
    generation: i64,
    (kind, status, reason): (&str, &str, &str),
) -> Value {
    eventually_seen(
        &format!("{name}: {kind}={status} ({reason})"),
        WAIT,
        || async {
            match condition(api, name, kind).await {
                Some((s, r, st))
                    if s == status && r == reason && st["observedGeneration"] == generation =>
                {
                    Ok(st)
                }
                other => Err(format!("{other:?}\nhost log:\n{}", host.logs())),
            }
        },
    )
    .await
}

pub fn tags_seen(logs: &str) -> Vec<String> {
    logs.lines()
        .filter_map(|l| {
            let at = l.find("testkit-requeue {")? + "testkit-requeue ".len();
            let v: Value = serde_json::Deserializer::from_str(&l[at..])
                .into_iter()
                .next()?
                .ok()?;
            Some(format!("{}:{}", v["tag"].as_str()?, v["name"].as_str()?))
        })
        .collect()
}
