//! The decision logic of the `parse-all` plugin, as a plain library: the
//! plugin runs it in the guest on `object.to-json()`, and the host
//! benchmark runs the very same code natively to compare.
//!
//! No wit-bindgen here: it builds natively and for wasm32.

use k8s_openapi::api::core::v1::{Container, Pod};

/// The annotation [`evaluate`]'s patch sets.
pub const ANNOTATION: &str = "kubewasm.io/health";

/// Decodes a full Pod and reports what an operator would want flagged:
/// restarts, containers without a memory limit, and phases other than
/// `Running`/`Succeeded`.
///
/// Returns a merge patch setting annotation [`ANNOTATION`] to
/// `phase=<phase> node=<node> restarts=<sum of restartCount over
/// containerStatuses and initContainerStatuses> unlimited=<names of
/// containers and init containers without limits.memory, comma-separated,
/// or ->`, e.g.
/// `{"metadata":{"annotations":{"kubewasm.io/health":"phase=Running node=n1 restarts=2 unlimited=app"}}}`;
/// `None` when there is nothing to report (no restarts, every container
/// memory-limited, phase `Running` or `Succeeded`). An error when the JSON
/// is not a Pod.
pub fn evaluate(pod_json: &str) -> Result<Option<String>, String> {
    let pod: Pod = serde_json::from_str(pod_json).map_err(|e| format!("not a Pod: {e}"))?;
    let spec = pod.spec.unwrap_or_default();
    let status = pod.status.unwrap_or_default();

    let restarts: i64 = status
        .container_statuses
        .iter()
        .chain(status.init_container_statuses.iter())
        .flatten()
        .map(|c| i64::from(c.restart_count))
        .sum();
    let unlimited: Vec<&str> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .filter(|c| !has_memory_limit(c))
        .map(|c| c.name.as_str())
        .collect();
    let phase = status.phase.as_deref().unwrap_or("Unknown");

    if restarts == 0 && unlimited.is_empty() && matches!(phase, "Running" | "Succeeded") {
        return Ok(None);
    }
    let node = spec.node_name.as_deref().unwrap_or("-");
    let unlimited = if unlimited.is_empty() {
        "-".to_owned()
    } else {
        unlimited.join(",")
    };
    let summary = format!("phase={phase} node={node} restarts={restarts} unlimited={unlimited}");
    let patch = serde_json::json!({"metadata": {"annotations": {ANNOTATION: summary}}});
    Ok(Some(patch.to_string()))
}

fn has_memory_limit(c: &Container) -> bool {
    c.resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .is_some_and(|l| l.contains_key("memory"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn pod(phase: &str, restarts: i32, limited: bool) -> String {
        let resources = if limited {
            serde_json::json!({"limits": {"memory": "128Mi"}})
        } else {
            serde_json::json!({"requests": {"cpu": "100m"}})
        };
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "shop"},
            "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "x", "resources": resources}]},
            "status": {"phase": phase, "containerStatuses": [{"name": "app", "restartCount": restarts, "ready": true, "image": "x", "imageID": "y"}]},
        })
        .to_string()
    }

    #[test]
    fn healthy_pods_have_nothing_to_report() {
        assert_eq!(evaluate(&pod("Running", 0, true)).unwrap(), None);
        assert_eq!(evaluate(&pod("Succeeded", 0, true)).unwrap(), None);
    }

    #[test]
    fn reports_restarts_limits_and_phase() {
        assert_eq!(
            evaluate(&pod("Running", 2, false)).unwrap().as_deref(),
            Some(
                r#"{"metadata":{"annotations":{"kubewasm.io/health":"phase=Running node=n1 restarts=2 unlimited=app"}}}"#
            )
        );
        assert_eq!(
            evaluate(&pod("Pending", 0, true)).unwrap().as_deref(),
            Some(
                r#"{"metadata":{"annotations":{"kubewasm.io/health":"phase=Pending node=n1 restarts=0 unlimited=-"}}}"#
            )
        );
    }

    #[test]
    fn rejects_what_is_not_a_pod() {
        assert!(evaluate("{").is_err());
        assert!(evaluate(r#"{"spec": 3}"#).is_err());
    }
}
