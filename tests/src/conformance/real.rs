//! The real API server's side of a case: the simulated cluster's objects
//! put into it under the case's [`Translation`], read back, deleted.

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{ApiCapabilities, Scope};
use serde_json::Value;

use super::translate::{ObjectId, Translation};

/// The field manager the suite writes the case's state with.
const MANAGER: &str = "kubewasm-conformance";

/// A kind as the server serves it.
async fn resource(
    client: &kube::Client,
    id: &ObjectId,
) -> kube::Result<(ApiResource, ApiCapabilities)> {
    let (api_version, kind) = id.0.rsplit_once('/').unwrap_or(("", &id.0));
    let parsed = kubewasm::kind::Gvk::from_api_version(api_version, kind);
    let gvk = GroupVersionKind::gvk(&parsed.group, &parsed.version, &parsed.kind);
    kube::discovery::pinned_kind(client, &gvk).await
}

/// The server's api for object `id` (its namespace as the server names it).
async fn api(
    client: &kube::Client,
    id: &ObjectId,
    t: &Translation,
) -> kube::Result<(Api<DynamicObject>, bool)> {
    let (ar, caps) = resource(client, id).await?;
    let api = match (&caps.scope, &id.1) {
        (Scope::Namespaced, Some(ns)) => {
            Api::namespaced_with(client.clone(), &t.namespace(ns), &ar)
        }
        _ => Api::all_with(client.clone(), &ar),
    };
    let status = caps.subresources.iter().any(|(s, _)| s.plural == "status");
    Ok((api, status))
}

/// The server's name of object `id`.
fn name(id: &ObjectId, t: &Translation) -> String {
    if id.0 == "v1/Namespace" {
        t.namespace(&id.2)
    } else {
        id.2.clone()
    }
}

/// Puts `object` (as the simulation stores it) into the server: applied
/// whole, its status through the status subresource where the kind has
/// one; returns the server's object.
pub async fn put(client: &kube::Client, object: &Value, t: &Translation) -> Result<Value, String> {
    let id = super::translate::id_of(object).ok_or("an object without apiVersion, kind or name")?;
    let (api, has_status) = api(client, &id, t)
        .await
        .map_err(|e| format!("{id:?}: {e}"))?;
    let mut body = t.object(object, None);
    if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        for set_by_server in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
        ] {
            meta.remove(set_by_server);
        }
    }
    let status = body.as_object_mut().and_then(|o| o.remove("status"));
    let params = PatchParams::apply(MANAGER).force();
    let name = name(&id, t);
    let mut written = api
        .patch(&name, &params, &Patch::Apply(&body))
        .await
        .map_err(|e| format!("apply {id:?}: {e}"))?;
    if let Some(status) = status.filter(|_| has_status) {
        let mut doc = body.clone();
        doc["status"] = status;
        written = api
            .patch_status(&name, &params, &Patch::Apply(&doc))
            .await
            .map_err(|e| format!("apply the status of {id:?}: {e}"))?;
    }
    if id.0 == "apiextensions.k8s.io/v1/CustomResourceDefinition" {
        served(client, object).await?;
    }
    serde_json::to_value(written).map_err(|e| e.to_string())
}

/// Waits until the server serves every version of the CRD `crd` (it is
/// established and in discovery), up to 30 s.
async fn served(client: &kube::Client, crd: &Value) -> Result<(), String> {
    let spec = &crd["spec"];
    let (group, kind) = (
        spec["group"].as_str().unwrap_or_default(),
        spec["names"]["kind"].as_str().unwrap_or_default(),
    );
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    for version in spec["versions"].as_array().into_iter().flatten() {
        let v = version["name"].as_str().unwrap_or_default();
        let gvk = GroupVersionKind::gvk(group, v, kind);
        while let Err(e) = kube::discovery::pinned_kind(client, &gvk).await {
            if tokio::time::Instant::now() >= deadline {
                return Err(format!("{group}/{v} {kind} is not served: {e}"));
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// The server's object `id`, if it has one.
pub async fn get(
    client: &kube::Client,
    id: &ObjectId,
    t: &Translation,
) -> Result<Option<Value>, String> {
    let (api, _) = api(client, id, t)
        .await
        .map_err(|e| format!("{id:?}: {e}"))?;
    let got = api
        .get_opt(&name(id, t))
        .await
        .map_err(|e| format!("get {id:?}: {e}"))?;
    got.map(|o| serde_json::to_value(o).map_err(|e| e.to_string()))
        .transpose()
}

/// Deletes the server's object `id` (gone already is fine).
pub async fn delete(client: &kube::Client, id: &ObjectId, t: &Translation) -> Result<(), String> {
    let (api, _) = api(client, id, t)
        .await
        .map_err(|e| format!("{id:?}: {e}"))?;
    match api.delete(&name(id, t), &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(format!("delete {id:?}: {e}")),
    }
}
