//! The metadata the server owns: set on create, carried over every update
//! (a body cannot change a uid, a creationTimestamp or the deletion
//! fields), and `generation`, which only some kinds have (a ConfigMap has
//! none on a real server) and which moves when the spec changes.

use serde_json::{Map, Value, json};

use super::Context;
use crate::kind::{Gvk, is_builtin};

/// Fields an update carries from the stored object, whatever its body
/// says.
const CARRIED: [&str; 6] = [
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "resourceVersion",
    "namespace",
];

/// (group, kind) of the built-in kinds whose registry sets `generation`
/// (Kubernetes 1.35); every custom resource has one too.
const WITH_GENERATION: &[(&str, &str)] = &[
    ("", "Pod"),
    ("", "ReplicationController"),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
    ),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("apps", "DaemonSet"),
    ("apps", "Deployment"),
    ("apps", "ReplicaSet"),
    ("apps", "StatefulSet"),
    ("batch", "CronJob"),
    ("batch", "Job"),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
    ("networking.k8s.io", "Ingress"),
    ("networking.k8s.io", "NetworkPolicy"),
    ("policy", "PodDisruptionBudget"),
];

/// Whether objects of `gvk` carry a `generation`.
pub fn has_generation(gvk: &Gvk) -> bool {
    !is_builtin(gvk)
        || WITH_GENERATION
            .iter()
            .any(|(g, k)| *g == gvk.group && *k == gvk.kind)
}

fn meta_mut(v: &mut Value) -> Option<&mut Map<String, Value>> {
    if !v.get("metadata").is_some_and(Value::is_object) {
        v.as_object_mut()?.insert("metadata".into(), json!({}));
    }
    v.get_mut("metadata")?.as_object_mut()
}

/// Makes `v` a new object as the server creates it: `uid`, a
/// creationTimestamp, generation 1 for kinds that have one; no deletion
/// fields and no resourceVersion (the storage gives it one).
pub fn create(ctx: &Context<'_>, gvk: &Gvk, v: &mut Value, uid: String) {
    let now = ctx.timestamp();
    let Some(meta) = meta_mut(v) else {
        return;
    };
    meta.insert("uid".into(), json!(uid));
    meta.insert("creationTimestamp".into(), json!(now));
    for f in [
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        meta.remove(f);
    }
    if has_generation(gvk) {
        meta.insert("generation".into(), json!(1));
    }
}

/// Whether `generation` counts a change from `old` to `new`: anything
/// outside `metadata` (and `status`, where a subresource owns it).
pub fn spec_changed(old: &Value, new: &Value, has_status: bool) -> bool {
    let rest = |v: &Value| -> Option<Vec<(String, Value)>> {
        v.as_object().map(|m| {
            m.iter()
                .filter(|(k, _)| *k != "metadata" && !(has_status && *k == "status"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
    };
    rest(old) != rest(new)
}

/// A Deployment's registry counts a change of its annotations as one of
/// its spec (apps/v1 `PrepareForUpdate`: the rollback annotation once
/// drove rollouts), so annotating a Deployment moves its generation; no
/// other built-in kind does. Found by the conformance suite.
fn annotations_count(gvk: &Gvk, old: &Value, new: &Value) -> bool {
    gvk.group == "apps"
        && gvk.kind == "Deployment"
        && old.pointer("/metadata/annotations") != new.pointer("/metadata/annotations")
}

/// Makes `next`, an update's result over `stored`, carry the fields the
/// server owns, with `generation` bumped when the spec changed (for kinds
/// that have one; others keep whatever the stored object had).
pub fn carry(gvk: &Gvk, stored: &Value, next: &mut Value, has_status: bool) {
    let old_generation = stored.pointer("/metadata/generation").cloned();
    let generation = if has_generation(gvk) {
        let g = old_generation.as_ref().and_then(Value::as_i64).unwrap_or(1);
        Some(json!(
            g + i64::from(
                spec_changed(stored, next, has_status) || annotations_count(gvk, stored, next)
            )
        ))
    } else {
        old_generation
    };
    let Some(meta) = meta_mut(next) else {
        return;
    };
    for f in CARRIED {
        match stored.get("metadata").and_then(|m| m.get(f)) {
            Some(v) => meta.insert(f.into(), v.clone()),
            None => meta.remove(f),
        };
    }
    match generation {
        Some(g) => meta.insert("generation".into(), g),
        None => meta.remove("generation"),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::KindRegistry;
    use crate::sim::tests::ctx;

    #[test]
    fn annotating_a_deployment_moves_its_generation_as_the_server_does() {
        let dep = Gvk::new("apps", "v1", "Deployment");
        let stored = json!({"metadata": {"name": "d", "generation": 3}, "spec": {"replicas": 1}});
        let mut next =
            json!({"metadata": {"name": "d", "annotations": {"a": "1"}}, "spec": {"replicas": 1}});
        carry(&dep, &stored, &mut next, true);
        assert_eq!(next["metadata"]["generation"], 4);
        // A ReplicaSet's registry counts its spec only.
        let rs = Gvk::new("apps", "v1", "ReplicaSet");
        let mut next =
            json!({"metadata": {"name": "d", "annotations": {"a": "1"}}, "spec": {"replicas": 1}});
        carry(&rs, &stored, &mut next, true);
        assert_eq!(next["metadata"]["generation"], 3);
    }

    #[test]
    fn only_some_kinds_have_a_generation() {
        assert!(has_generation(&Gvk::new("apps", "v1", "Deployment")));
        assert!(has_generation(&Gvk::new("example.com", "v1", "Widget")));
        assert!(!has_generation(&Gvk::new("", "v1", "ConfigMap")));
        let kinds = KindRegistry::builtin();
        let mut cm = json!({"metadata": {"name": "c", "generation": 4, "resourceVersion": "9"}});
        create(
            &ctx(&kinds),
            &Gvk::new("", "v1", "ConfigMap"),
            &mut cm,
            "u".into(),
        );
        assert_eq!(
            cm["metadata"],
            json!({"name": "c", "uid": "u", "creationTimestamp": "1970-01-01T00:00:00Z"})
        );
        let mut d = json!({"metadata": {"name": "d"}});
        create(
            &ctx(&kinds),
            &Gvk::new("apps", "v1", "Deployment"),
            &mut d,
            "u".into(),
        );
        assert_eq!(d["metadata"]["generation"], 1);
    }

    #[test]
    fn generation_counts_spec_changes_and_status_where_no_subresource_owns_it() {
        let gvk = Gvk::new("example.com", "v1", "Gadget");
        let stored = json!({"metadata": {"generation": 2, "uid": "u"}, "spec": {"a": 1}, "status": {"s": 1}});
        let bump = |change: Value, has_status: bool| {
            let mut next = stored.clone();
            json_patch::merge(&mut next, &change);
            carry(&gvk, &stored, &mut next, has_status);
            next["metadata"]["generation"].as_i64().unwrap_or_default()
        };
        assert_eq!(bump(json!({"spec": {"a": 2}}), true), 3);
        assert_eq!(bump(json!({"metadata": {"labels": {"a": "b"}}}), true), 2);
        assert_eq!(bump(json!({"status": {"s": 2}}), true), 2);
        assert_eq!(bump(json!({"status": {"s": 2}}), false), 3);
    }

    #[test]
    fn an_update_cannot_change_what_the_server_owns() {
        let stored = json!({"metadata": {"uid": "u", "creationTimestamp": "t", "resourceVersion": "7",
            "deletionTimestamp": "d", "deletionGracePeriodSeconds": 0, "namespace": "n"}, "data": {}});
        let mut next = json!({"metadata": {"uid": "x", "resourceVersion": "8", "generation": 40,
            "deletionTimestamp": null, "namespace": "other"}, "data": {"k": "v"}});
        carry(&Gvk::new("", "v1", "ConfigMap"), &stored, &mut next, false);
        assert_eq!(next["metadata"], stored["metadata"]);
        assert_eq!(next["data"]["k"], "v");
    }
}
