//! Label and field selectors, with the grammar `kubectl` accepts.

use crate::kind::KindInfo;
use crate::object::{FieldValue, KObject, Meta};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid selector {selector:?}: {reason}")]
pub struct SelectorError {
    pub selector: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector (`app=web,tier!=db,env in (a,b),!legacy`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    reqs: Vec<Requirement>,
}

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

impl LabelSelector {
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let err = |reason: &str| SelectorError {
            selector: selector.to_owned(),
            reason: reason.to_owned(),
        };
        let mut reqs = Vec::new();
        if selector.trim().is_empty() {
            return Ok(Self { reqs });
        }
        for part in split_top(selector) {
            let part = part.trim();
            if part.is_empty() {
                return Err(err("empty requirement"));
            }
            let valid_key = |k: &str| {
                !k.is_empty()
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
            };
            let set_req =
                |rest: &str, negate: bool, key: &str| -> Result<Requirement, SelectorError> {
                    let inner = rest
                        .trim()
                        .strip_prefix('(')
                        .and_then(|r| r.strip_suffix(')'))
                        .ok_or_else(|| err("a set must be written (a,b)"))?;
                    let values: Vec<String> = inner
                        .split(',')
                        .map(|v| v.trim().to_owned())
                        .filter(|v| !v.is_empty())
                        .collect();
                    Ok(if negate {
                        Requirement::NotIn(key.to_owned(), values)
                    } else {
                        Requirement::In(key.to_owned(), values)
                    })
                };
            let req = if let Some(key) = part.strip_prefix('!') {
                let key = key.trim();
                if !valid_key(key) {
                    return Err(err("bad key after '!'"));
                }
                Requirement::NotExists(key.to_owned())
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEq(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = part.split_once("==") {
                Requirement::Eq(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = part.split_once('=') {
                Requirement::Eq(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some(idx) = part.find(" notin ") {
                set_req(&part[idx + 7..], true, part[..idx].trim())?
            } else if let Some(idx) = part.find(" in ") {
                set_req(&part[idx + 4..], false, part[..idx].trim())?
            } else if valid_key(part) {
                Requirement::Exists(part.to_owned())
            } else {
                return Err(err(&format!("cannot parse requirement {part:?}")));
            };
            let key = match &req {
                Requirement::Eq(k, _)
                | Requirement::NotEq(k, _)
                | Requirement::In(k, _)
                | Requirement::NotIn(k, _)
                | Requirement::Exists(k)
                | Requirement::NotExists(k) => k,
            };
            if !valid_key(key) {
                return Err(err(&format!("bad label key {key:?}")));
            }
            reqs.push(req);
        }
        Ok(Self { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    pub fn matches(&self, meta: &Meta) -> bool {
        self.reqs.iter().all(|r| match r {
            Requirement::Eq(k, v) => meta.label(k) == Some(v.as_str()),
            Requirement::NotEq(k, v) => meta.label(k) != Some(v.as_str()),
            Requirement::In(k, vs) => meta.label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Requirement::NotIn(k, vs) => meta.label(k).is_none_or(|l| vs.iter().all(|v| v != l)),
            Requirement::Exists(k) => meta.label(k).is_some(),
            Requirement::NotExists(k) => meta.label(k).is_none(),
        })
    }
}

/// A field selector (`metadata.name=x,status.phase!=Running`), evaluated on
/// the object's fields the way the API server does for the fields it
/// supports; any dotted path works here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    reqs: Vec<(String, bool, String)>,
}

impl FieldSelector {
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        for part in selector.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (path, eq, value) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(SelectorError {
                    selector: selector.to_owned(),
                    reason: format!("{part:?} is not key=value or key!=value"),
                });
            };
            let pointer = format!("/{}", path.trim().replace('.', "/"));
            reqs.push((pointer, eq, value.trim().to_owned()));
        }
        Ok(Self { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Refuses a field the API server does not support for `kind`, as the
    /// server does (`field label not supported`). Kinds that are not built
    /// in (CRDs) support `metadata.name`, `metadata.namespace` and their
    /// CRD's `selectableFields`, which the registry does not know: every
    /// field passes for them.
    pub fn check_supported(&self, kind: &KindInfo) -> Result<(), String> {
        if !crate::kind::is_builtin(&kind.gvk) {
            return Ok(());
        }
        let supported = supported_fields(kind);
        for (pointer, _, _) in &self.reqs {
            let field = pointer.trim_start_matches('/').replace('/', ".");
            if !supported.contains(&field.as_str()) {
                return Err(format!(
                    "field label not supported for {}: {field} (the API server supports {})",
                    kind.resource_name(),
                    supported.join(", ")
                ));
            }
        }
        Ok(())
    }

    pub fn matches(&self, obj: &KObject) -> bool {
        self.reqs.iter().all(|(pointer, eq, value)| {
            let actual = match obj.field(pointer) {
                Some(FieldValue::Text(s)) => s,
                Some(other) => other.as_index_key().unwrap_or_default(),
                None => String::new(),
            };
            (actual == *value) == *eq
        })
    }
}

/// The field labels a Kubernetes 1.35 API server accepts in a field
/// selector for a built-in kind: `metadata.name` and `metadata.namespace`
/// (the generic set, also for most cluster-scoped kinds) plus the kind's
/// own; the cluster-scoped kinds with their own set have no
/// `metadata.namespace`. Checked against a real server by
/// `tests/tests/e2e.rs`.
pub fn supported_fields(kind: &KindInfo) -> Vec<&'static str> {
    let mut fields = vec!["metadata.name"];
    let own: &[&str] = match (kind.gvk.group.as_str(), kind.plural.as_str()) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        ],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("", "secrets") => &["type"],
        ("", "namespaces") => &["status.phase"],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "replicationcontrollers") => &["status.replicas"],
        ("", "services") => &["spec.clusterIP", "spec.type"],
        ("batch", "jobs") => &["status.successful"],
        ("certificates.k8s.io", "certificatesigningrequests") => &["spec.signerName"],
        ("resource.k8s.io", "resourceslices") => &["spec.nodeName", "spec.driver"],
        _ => &[],
    };
    if kind.namespaced || own.is_empty() {
        fields.push("metadata.namespace");
    }
    fields.extend(own);
    fields
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::StripOptions;

    #[test]
    fn field_selectors_are_limited_to_what_the_server_supports() {
        let kinds = crate::kind::KindRegistry::builtin();
        let kind = |r: &str| {
            kinds
                .resolve(&crate::kind::KindRef::Resource(r.into()))
                .unwrap()
        };
        let sel = |s: &str| FieldSelector::parse(s).unwrap();
        sel("spec.nodeName=n,status.phase!=Running,metadata.namespace=x")
            .check_supported(&kind("pods"))
            .unwrap();
        let e = sel("spec.nodeName=n")
            .check_supported(&kind("configmaps"))
            .unwrap_err();
        assert!(
            e.contains("configmaps") && e.contains("spec.nodeName") && e.contains("metadata.name"),
            "{e}"
        );
        // Cluster-scoped kinds have no metadata.namespace.
        assert!(
            sel("metadata.namespace=x")
                .check_supported(&kind("nodes"))
                .is_err()
        );
        sel("spec.unschedulable=true")
            .check_supported(&kind("nodes"))
            .unwrap();
        // CRDs: whatever their selectableFields say; not known here.
        let widget = KindInfo::new("example.com", "v1", "Widget", "widgets", true);
        sel("spec.color=red").check_supported(&widget).unwrap();
    }

    fn obj(labels: serde_json::Value) -> KObject {
        KObject::from_value(
            serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "n", "labels": labels},
                "status": {"phase": "Running"}}),
            StripOptions::default(),
        )
        .unwrap()
    }

    #[test]
    fn label_selector_grammar() {
        let o = obj(serde_json::json!({"app": "web", "env": "prod"}));
        let m = o.meta();
        for (sel, want) in [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app=web,env=dev", false),
            ("env in (prod, staging)", true),
            ("env notin (prod)", false),
            ("tier notin (db)", true),
            ("app", true),
            ("!app", false),
            ("!legacy", true),
            ("app in (web),!legacy,env", true),
        ] {
            assert_eq!(LabelSelector::parse(sel).unwrap().matches(m), want, "{sel}");
        }
        assert!(LabelSelector::parse("app=web,,x").is_err());
        assert!(LabelSelector::parse("env in prod").is_err());
        assert!(LabelSelector::parse("a b").is_err());
    }

    #[test]
    fn field_selector() {
        let o = obj(serde_json::json!({}));
        assert!(FieldSelector::parse("metadata.name=p").unwrap().matches(&o));
        assert!(
            FieldSelector::parse("status.phase!=Pending")
                .unwrap()
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse("metadata.namespace=x")
                .unwrap()
                .matches(&o)
        );
        assert!(FieldSelector::parse("nonsense").is_err());
    }
}
