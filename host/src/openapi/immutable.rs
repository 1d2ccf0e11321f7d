//! What an update may not change, by kind: the most important rules of
//! the built-in kinds' `ValidateXUpdate` functions (Go code, not schema),
//! each as the server words it. Not every rule of every kind: the table
//! is the list, and what is not in it is accepted.

use serde_json::{Map, Value};

use super::refusal::Cause;
use crate::kind::Gvk;

/// The fields a Pod update may change (`ValidatePodUpdate`); the rest of
/// its `spec` is fixed at creation.
const POD_SPEC_MESSAGE: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

const PVC_SPEC_MESSAGE: &str = "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims";

const STATEFULSET_SPEC_MESSAGE: &str = "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden";

const IMMUTABLE_WHEN_SET: &str = "field is immutable when `immutable` is set";

/// One row of the table: the kind and what its update may not change.
struct Rule {
    group: &'static str,
    kind: &'static str,
    check: fn(&Value, &Value) -> Vec<Cause>,
}

/// The table (the doc's list of rules, in the order the book shows it).
const RULES: &[Rule] = &[
    Rule {
        group: "",
        kind: "ConfigMap",
        check: config_map,
    },
    Rule {
        group: "",
        kind: "Secret",
        check: secret,
    },
    Rule {
        group: "",
        kind: "Pod",
        check: pod,
    },
    Rule {
        group: "",
        kind: "Service",
        check: service,
    },
    Rule {
        group: "",
        kind: "PersistentVolumeClaim",
        check: claim,
    },
    Rule {
        group: "apps",
        kind: "Deployment",
        check: selector,
    },
    Rule {
        group: "apps",
        kind: "ReplicaSet",
        check: selector,
    },
    Rule {
        group: "apps",
        kind: "DaemonSet",
        check: selector,
    },
    Rule {
        group: "apps",
        kind: "StatefulSet",
        check: stateful_set,
    },
    Rule {
        group: "batch",
        kind: "Job",
        check: job,
    },
];

/// The causes of changing `old` into `new` (both of kind `gvk`).
pub fn check(gvk: &Gvk, old: &Value, new: &Value) -> Vec<Cause> {
    RULES
        .iter()
        .filter(|r| r.group == gvk.group && r.kind == gvk.kind)
        .flat_map(|r| (r.check)(old, new))
        .collect()
}

fn at<'a>(v: &'a Value, pointer: &str) -> Option<&'a Value> {
    v.pointer(pointer).filter(|v| !v.is_null())
}

/// Present and different from before (absent in the body means "keep").
fn changed<'a>(old: &Value, new: &'a Value, pointer: &str) -> Option<&'a Value> {
    at(new, pointer).filter(|n| at(old, pointer) != Some(*n))
}

fn is_immutable(v: &Value) -> bool {
    at(v, "/immutable").and_then(Value::as_bool) == Some(true)
}

fn immutable_data(old: &Value, new: &Value, fields: &[&str]) -> Vec<Cause> {
    let mut causes = Vec::new();
    if !is_immutable(old) {
        return causes;
    }
    for field in fields {
        let empty = Value::Object(Map::new());
        let before = at(old, &format!("/{field}")).unwrap_or(&empty);
        let after = at(new, &format!("/{field}")).unwrap_or(&empty);
        if before != after {
            causes.push(Cause::forbidden(*field, IMMUTABLE_WHEN_SET));
        }
    }
    if !is_immutable(new) {
        causes.push(Cause::forbidden("immutable", IMMUTABLE_WHEN_SET));
    }
    causes
}

/// ConfigMap: `data`, `binaryData` and `immutable` once `immutable: true`.
fn config_map(old: &Value, new: &Value) -> Vec<Cause> {
    immutable_data(old, new, &["data", "binaryData"])
}

/// Secret: `data` once `immutable: true` (`stringData` is folded into
/// `data` before: the write path's job); `type` always.
fn secret(old: &Value, new: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(ty) = changed(old, new, "/type") {
        causes.push(Cause::invalid("type", ty.clone(), "field is immutable"));
    }
    causes.extend(immutable_data(old, new, &["data"]));
    causes
}

/// Pod: `spec` except images, `activeDeadlineSeconds`, added tolerations
/// and `terminationGracePeriodSeconds`, compared with the server's common
/// defaults filled in on both sides. (The server's message goes on with a
/// diff of its internal types; this one stops at the rule.)
fn pod(old: &Value, new: &Value) -> Vec<Cause> {
    let (Some(before), Some(after)) = (at(old, "/spec"), at(new, "/spec")) else {
        return Vec::new();
    };
    let mut before = before.clone();
    let mut after = after.clone();
    for spec in [&mut before, &mut after] {
        super::defaults::pod_spec(spec);
        if let Some(spec) = spec.as_object_mut() {
            for field in ["activeDeadlineSeconds", "terminationGracePeriodSeconds"] {
                spec.remove(field);
            }
            for c in super::defaults::containers_mut(spec) {
                c.remove("image");
            }
        }
    }
    // Tolerations may only be added to.
    let old_tolerations = take(&mut before, "tolerations");
    let new_tolerations = take(&mut after, "tolerations");
    let kept = old_tolerations.iter().all(|t| new_tolerations.contains(t));
    if before != after || !kept {
        vec![Cause::forbidden("spec", POD_SPEC_MESSAGE)]
    } else {
        Vec::new()
    }
}

fn take(spec: &mut Value, field: &str) -> Vec<Value> {
    match spec.as_object_mut().and_then(|s| s.remove(field)) {
        Some(Value::Array(items)) => items,
        _ => Vec::new(),
    }
}

/// Service: an allocated cluster IP never changes (the server names the
/// first of `clusterIPs`, which it keeps in step with `clusterIP`).
fn service(old: &Value, new: &Value) -> Vec<Cause> {
    let before = at(old, "/spec/clusterIP")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let after = at(new, "/spec/clusterIP")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let ips_before = at(old, "/spec/clusterIPs/0").and_then(Value::as_str);
    let ips_after = at(new, "/spec/clusterIPs/0").and_then(Value::as_str);
    let ip_changed = !before.is_empty() && !after.is_empty() && before != after;
    let ips_changed = ips_before.is_some() && ips_after.is_some() && ips_before != ips_after;
    if !(ip_changed || ips_changed) {
        return Vec::new();
    }
    // The server first keeps `clusterIPs[0]` in step with `clusterIP`.
    let mut shown: Vec<Value> = at(new, "/spec/clusterIPs")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if ip_changed {
        match shown.first_mut() {
            Some(first) => *first = Value::String(after.to_owned()),
            None => shown.push(Value::String(after.to_owned())),
        }
    }
    let shown = Value::Array(shown);
    vec![Cause::invalid(
        "spec.clusterIPs[0]",
        shown,
        "may not change once set",
    )]
}

/// PersistentVolumeClaim: `spec` is fixed, except `resources.requests`
/// and `volumeAttributesClassName` of a bound claim.
fn claim(old: &Value, new: &Value) -> Vec<Cause> {
    let (Some(before), Some(after)) = (at(old, "/spec"), at(new, "/spec")) else {
        return Vec::new();
    };
    let bound = at(old, "/status/phase").and_then(Value::as_str) == Some("Bound");
    let (mut before, mut after) = (before.clone(), after.clone());
    if bound {
        for spec in [&mut before, &mut after] {
            if let Some(requests) = spec
                .pointer_mut("/resources")
                .and_then(Value::as_object_mut)
            {
                requests.remove("requests");
            }
            if let Some(spec) = spec.as_object_mut() {
                spec.remove("volumeAttributesClassName");
            }
        }
    }
    if before != after {
        vec![Cause::forbidden("spec", PVC_SPEC_MESSAGE)]
    } else {
        Vec::new()
    }
}

/// Deployment, ReplicaSet, DaemonSet: the selector is fixed.
fn selector(old: &Value, new: &Value) -> Vec<Cause> {
    match changed(old, new, "/spec/selector") {
        Some(sel) => vec![Cause::invalid(
            "spec.selector",
            sel.clone(),
            "field is immutable",
        )],
        None => Vec::new(),
    }
}

/// StatefulSet: only the listed parts of `spec` change.
fn stateful_set(old: &Value, new: &Value) -> Vec<Cause> {
    const MUTABLE: &[&str] = &[
        "replicas",
        "ordinals",
        "template",
        "updateStrategy",
        "revisionHistoryLimit",
        "persistentVolumeClaimRetentionPolicy",
        "minReadySeconds",
    ];
    let strip = |spec: Option<&Value>| -> Map<String, Value> {
        let mut map = spec.and_then(Value::as_object).cloned().unwrap_or_default();
        map.retain(|k, _| !MUTABLE.contains(&k.as_str()));
        map
    };
    let (before, after) = (strip(at(old, "/spec")), strip(at(new, "/spec")));
    if at(new, "/spec").is_some() && before != after {
        vec![Cause::forbidden("spec", STATEFULSET_SPEC_MESSAGE)]
    } else {
        Vec::new()
    }
}

/// Job: the selector always, the template unless the Job is suspended.
fn job(old: &Value, new: &Value) -> Vec<Cause> {
    let mut causes = selector(old, new);
    let suspended = at(old, "/spec/suspend").and_then(Value::as_bool) == Some(true);
    if !suspended && let Some(template) = changed(old, new, "/spec/template") {
        causes.push(Cause::invalid(
            "spec.template",
            template.clone(),
            "field is immutable",
        ));
    }
    causes
}
