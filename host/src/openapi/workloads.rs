//! Rules of the workload kinds that are Go code in the API server, not
//! schema: a controller's selector must select its own template, a Job's
//! Pods must not restart in place, a Deployment's must.

use serde_json::{Value, json};

use super::refusal::{Cause, CauseType};
use crate::kind::Gvk;

/// The causes of `object` (of kind `gvk`) on create and update.
pub fn check(gvk: &Gvk, object: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let controller = match (gvk.group.as_str(), gvk.kind.as_str()) {
        ("apps", "Deployment") => Some("deployment"),
        ("apps", "ReplicaSet") => Some("deployment"),
        ("apps", "StatefulSet") => Some("statefulset"),
        ("apps", "DaemonSet") => Some("daemonset"),
        _ => None,
    };
    if let Some(noun) = controller {
        causes.extend(selector_selects_template(object, noun));
    }
    let restart = object
        .pointer("/spec/template/spec/restartPolicy")
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty());
    // A Job's template is not defaulted, and any other value is refused
    // as missing; a controller's template defaults to `Always`.
    let (allowed, absent): (&[&str], Option<&str>) = match (gvk.group.as_str(), gvk.kind.as_str()) {
        ("batch", "Job") => (&["OnFailure", "Never"], None),
        ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet") => {
            (&["Always"], Some("Always"))
        }
        _ => (&[], None),
    };
    let job = gvk.group == "batch" && gvk.kind == "Job";
    // The server labels a Job's Pods with its name (`job-name`), a label
    // value: at most 63 bytes.
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if job && name.len() > 63 {
        causes.push(Cause::invalid(
            "spec.template.labels",
            Value::String(name.to_owned()),
            "must be no more than 63 bytes",
        ));
    }
    let listed = || {
        allowed
            .iter()
            .map(|a| format!("{a:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let field = "spec.template.spec.restartPolicy";
    match restart.or(absent) {
        _ if allowed.is_empty() => {}
        Some(r) if job && !allowed.contains(&r) => causes.push(Cause::required(
            field,
            format!("valid values: {}", listed()),
        )),
        None => causes.push(Cause::required(
            field,
            format!("valid values: {}", listed()),
        )),
        Some(r) if !allowed.contains(&r) => causes.push(Cause {
            kind: CauseType::NotSupported,
            field: field.into(),
            value: Some(Value::String(r.to_owned())),
            detail: format!("supported values: {}", listed()),
        }),
        Some(_) => {}
    }
    causes
}

/// `spec.selector` against `spec.template.metadata.labels`, as
/// `ValidatePodTemplateSpecForReplicaSet` (a missing selector selects
/// nothing, an empty one is refused on its own).
fn selector_selects_template(object: &Value, noun: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let selector = object.pointer("/spec/selector").filter(|v| !v.is_null());
    let labels = object
        .pointer("/spec/template/metadata/labels")
        .filter(|v| !v.is_null());
    let empty_labels = json!({});
    let label_map = labels.unwrap_or(&empty_labels);
    let selects = match selector {
        None => false,
        Some(sel) => {
            let match_labels = sel.get("matchLabels").and_then(Value::as_object);
            let expressions = sel.get("matchExpressions").and_then(Value::as_array);
            if match_labels.is_none_or(|m| m.is_empty()) && expressions.is_none_or(|e| e.is_empty())
            {
                causes.push(Cause::invalid(
                    "spec.selector",
                    sel.clone(),
                    format!("empty selector is invalid for {noun}"),
                ));
                return causes;
            }
            let labels_ok = match_labels
                .into_iter()
                .flatten()
                .all(|(k, v)| label_map.get(k) == Some(v));
            labels_ok
                && expressions
                    .into_iter()
                    .flatten()
                    .all(|e| expression_matches(e, label_map))
        }
    };
    if !selects {
        causes.push(Cause::invalid(
            "spec.template.metadata.labels",
            labels.cloned().unwrap_or(Value::Null),
            "`selector` does not match template `labels`",
        ));
    }
    causes
}

/// One `matchExpressions` requirement against labels.
fn expression_matches(expression: &Value, labels: &Value) -> bool {
    let key = expression
        .get("key")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let values: Vec<&Value> = expression
        .get("values")
        .and_then(Value::as_array)
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    let label = labels.get(key);
    match expression.get("operator").and_then(Value::as_str) {
        Some("In") => label.is_some_and(|l| values.contains(&l)),
        Some("NotIn") => label.is_none_or(|l| !values.contains(&l)),
        Some("Exists") => label.is_some(),
        Some("DoesNotExist") => label.is_none(),
        _ => false,
    }
}
