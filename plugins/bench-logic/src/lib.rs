//! A realistic handler body that decodes the whole Pod: used by the
//! `parse-all` plugin and, natively, by the host benchmark to compare.

use k8s_openapi::api::core::v1::Pod;

/// Decodes a Pod and returns a merge patch summarising restarts and
/// containers without resource limits.
pub fn evaluate(pod_json: &str) -> Result<Option<String>, String> {
    let pod: Pod = serde_json::from_str(pod_json).map_err(|e| format!("not a Pod: {e}"))?;
    let spec = pod.spec.as_ref().ok_or("pod has no spec")?;
    let unlimited = spec
        .containers
        .iter()
        .filter(|c| {
            c.resources
                .as_ref()
                .and_then(|r| r.limits.as_ref())
                .is_none_or(|l| l.is_empty())
        })
        .count();
    let restarts: i32 = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).sum())
        .unwrap_or(0);
    let node = spec.node_name.as_deref().unwrap_or("");
    let patch = serde_json::json!({"metadata": {"annotations": {
        "kubewasm.io/summary": format!("node={node} restarts={restarts} unlimited={unlimited}")
    }}});
    Ok(Some(patch.to_string()))
}
