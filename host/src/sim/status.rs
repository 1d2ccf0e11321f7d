//! The status subresource: for a kind that has one, the resource's own
//! writes keep the stored status and status writes change only the
//! status (observed on a real API server: a Deployment applied or patched
//! with a status keeps its own; a status apply carrying a spec or labels
//! changes neither: [`super::apply`] with its status part). Kinds
//! without one (ConfigMaps, custom resources whose CRD does not enable it) store `status` as any other field and
//! have no `/status` to write to (404).

use serde_json::Value;

use crate::actions::Target;
use crate::actions::executor::ActionError;
use crate::kind::{Gvk, KindRegistry};

/// (group, kind) of the built-in kinds of Kubernetes 1.35 served with a
/// status subresource.
const BUILTIN: &[(&str, &str)] = &[
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("", "PersistentVolumeClaim"),
    ("", "Pod"),
    ("", "ReplicationController"),
    ("", "ResourceQuota"),
    ("", "Service"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("apiregistration.k8s.io", "APIService"),
    ("apps", "DaemonSet"),
    ("apps", "Deployment"),
    ("apps", "ReplicaSet"),
    ("apps", "StatefulSet"),
    ("autoscaling", "HorizontalPodAutoscaler"),
    ("batch", "CronJob"),
    ("batch", "Job"),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
    ("networking.k8s.io", "Ingress"),
    ("networking.k8s.io", "ServiceCIDR"),
    ("policy", "PodDisruptionBudget"),
    ("resource.k8s.io", "ResourceClaim"),
    ("storage.k8s.io", "VolumeAttachment"),
];

/// Whether `gvk` is served with a status subresource: a built-in kind of
/// the table, or a custom resource whose CRD enables it.
pub fn has_subresource(kinds: &KindRegistry, gvk: &Gvk) -> bool {
    BUILTIN
        .iter()
        .any(|(g, k)| *g == gvk.group && *k == gvk.kind)
        || kinds.crd_has_status(gvk)
}

/// The server's 404 for a status write to a kind without the subresource.
pub fn no_subresource(what: &str, target: &Target) -> ActionError {
    ActionError::NotFound(format!(
        "{what}: the server could not find the requested resource ({} has no status subresource) (NotFound)",
        target.kind.resource_name()
    ))
}

/// `next` with `stored`'s status (none when it had none): what a write to
/// the resource itself stores where a status subresource owns the status.
pub fn keep_stored(stored: &Value, next: &mut Value) {
    let Some(next) = next.as_object_mut() else {
        return;
    };
    match stored.get("status") {
        Some(s) => next.insert("status".into(), s.clone()),
        None => next.remove("status"),
    };
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn built_in_kinds_and_crds_that_enable_it_have_a_status_subresource() {
        let kinds = KindRegistry::builtin();
        assert!(has_subresource(
            &kinds,
            &Gvk::new("apps", "v1", "Deployment")
        ));
        assert!(has_subresource(&kinds, &Gvk::new("", "v1", "Pod")));
        assert!(!has_subresource(&kinds, &Gvk::new("", "v1", "ConfigMap")));
        let crd = |name: &str, status: bool| {
            let mut version = json!({"name": "v1", "served": true, "storage": true});
            if status {
                version["subresources"] = json!({"status": {}});
            }
            json!({"spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"kind": name, "plural": format!("{}s", name.to_lowercase())},
                "versions": [version]}})
        };
        kinds.learn_crd(&crd("Widget", true));
        kinds.learn_crd(&crd("Gadget", false));
        assert!(has_subresource(
            &kinds,
            &Gvk::new("example.com", "v1", "Widget")
        ));
        assert!(!has_subresource(
            &kinds,
            &Gvk::new("example.com", "v1", "Gadget")
        ));
    }

    #[test]
    fn main_writes_keep_the_stored_status() {
        let stored = json!({"spec": {"replicas": 1}, "status": {"ready": 1}});
        let mut next = json!({"spec": {"replicas": 2}, "status": {"ready": 9}});
        keep_stored(&stored, &mut next);
        assert_eq!(
            next,
            json!({"spec": {"replicas": 2}, "status": {"ready": 1}})
        );
        let mut fresh = json!({"spec": {}, "status": {"ready": 9}});
        keep_stored(&json!({"spec": {}}), &mut fresh);
        assert!(fresh.get("status").is_none());
    }
}
