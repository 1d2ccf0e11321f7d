//! `metadata` as apimachinery's `ValidateObjectMeta` and
//! `ValidateObjectMetaUpdate` check it: the name's format for the kind,
//! label keys and values, finalizer names, and on update the fields that
//! never change and the finalizers of a terminating object.

use serde_json::Value;

use super::refusal::Cause;

const SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1035: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const LABEL_VALUE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const QUALIFIED_NAME: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const PREFIXED: &str = "with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')";

/// The finalizers Kubernetes itself defines (no domain needed).
const STANDARD_FINALIZERS: &[&str] = &["kubernetes", "orphan", "foregroundDeletion"];

/// How a kind's names are checked (each kind's `ValidateXName`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// Most kinds.
    Subdomain,
    /// Namespaces and StatefulSets (their Pods' hostnames).
    Label,
    /// Services (the name becomes a DNS label that must start with a letter).
    Dns1035,
    /// The RBAC kinds: anything that is a path segment (`system:x`).
    PathSegment,
    /// APIServices (`v1.apps`, `v1.`): checked against their spec by the
    /// server, not here.
    Unchecked,
}

impl NameRule {
    pub fn of(group: &str, kind: &str) -> Self {
        match (group, kind) {
            ("", "Namespace") | ("apps", "StatefulSet") => Self::Label,
            ("", "Service") => Self::Dns1035,
            ("rbac.authorization.k8s.io", _) => Self::PathSegment,
            ("apiregistration.k8s.io", "APIService") => Self::Unchecked,
            _ => Self::Subdomain,
        }
    }

    /// The messages apimachinery gives `name` (empty: valid).
    pub fn check(self, name: &str) -> Vec<String> {
        let mut out = Vec::new();
        match self {
            Self::Subdomain => {
                if name.len() > 253 {
                    out.push("must be no more than 253 characters".to_owned());
                }
                if !name.split('.').all(is_label) {
                    out.push(SUBDOMAIN.to_owned());
                }
            }
            Self::Label => {
                if name.len() > 63 {
                    out.push("must be no more than 63 characters".to_owned());
                }
                if !is_label(name) {
                    // A valid subdomain that is no label has dots.
                    if name.split('.').all(is_label) {
                        out.push("must not contain dots".to_owned());
                    } else {
                        out.push(LABEL.to_owned());
                    }
                }
            }
            Self::Dns1035 => {
                if name.len() > 63 {
                    out.push("must be no more than 63 characters".to_owned());
                }
                if !is_label(name) || !name.starts_with(|c: char| c.is_ascii_lowercase()) {
                    out.push(DNS1035.to_owned());
                }
            }
            Self::Unchecked => {}
            Self::PathSegment => {
                for bad in [".", ".."] {
                    if name == bad {
                        out.push(format!("may not be '{bad}'"));
                    }
                }
                for bad in ["/", "%"] {
                    if name.contains(bad) {
                        out.push(format!("may not contain '{bad}'"));
                    }
                }
            }
        }
        out
    }
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 characters.
fn is_label_value(s: &str) -> bool {
    let b = s.as_bytes();
    s.len() <= 63
        && (b.is_empty()
            || (b
                .iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()))
}

/// A qualified name's problems (`IsQualifiedName`): label and annotation
/// keys (1.35 words a key with two slashes as a label key for both).
fn qualified_name(key: &str) -> Vec<String> {
    let parts: Vec<&str> = key.split('/').collect();
    let (prefix, name) = match parts.as_slice() {
        [name] => (None, *name),
        [prefix, name] => (Some(*prefix), *name),
        _ => return vec![format!("a valid label key {QUALIFIED_NAME} {PREFIXED}")],
    };
    let mut out = Vec::new();
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            out.push("prefix part must be non-empty".to_owned());
        } else {
            out.extend(
                NameRule::Subdomain
                    .check(prefix)
                    .into_iter()
                    .map(|m| format!("prefix part {m}")),
            );
        }
    }
    if name.is_empty() {
        out.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        out.push("name part must be no more than 63 characters".to_owned());
    }
    let b = name.as_bytes();
    let regex_ok = !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric();
    if !regex_ok {
        out.push(format!("name part {QUALIFIED_NAME}"));
    }
    out
}

fn meta<'a>(object: &'a Value, field: &str) -> Option<&'a Value> {
    object.get("metadata")?.get(field).filter(|v| !v.is_null())
}

fn meta_str<'a>(object: &'a Value, field: &str) -> &'a str {
    meta(object, field)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// `ValidateObjectMeta` of a created (or updated) object of `group`/`kind`.
pub fn validate(group: &str, kind: &str, object: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let name = meta_str(object, "name");
    if name.is_empty() {
        if meta_str(object, "generateName").is_empty() {
            causes.push(Cause::required(
                "metadata.name",
                "name or generateName is required",
            ));
        }
    } else {
        for message in NameRule::of(group, kind).check(name) {
            causes.push(Cause::invalid(
                "metadata.name",
                Value::String(name.to_owned()),
                message,
            ));
        }
    }
    if let Some(labels) = meta(object, "labels").and_then(Value::as_object) {
        for (key, value) in labels {
            for message in qualified_name(key) {
                causes.push(Cause::invalid(
                    "metadata.labels",
                    Value::String(key.clone()),
                    message,
                ));
            }
            let text = value.as_str().unwrap_or_default();
            if text.len() > 63 {
                causes.push(Cause::invalid(
                    "metadata.labels",
                    value.clone(),
                    "must be no more than 63 characters",
                ));
            }
            if !is_label_value(text) && text.len() <= 63 {
                causes.push(Cause::invalid(
                    "metadata.labels",
                    value.clone(),
                    LABEL_VALUE,
                ));
            }
        }
    }
    if let Some(annotations) = meta(object, "annotations").and_then(Value::as_object) {
        for key in annotations.keys() {
            for message in qualified_name(&key.to_ascii_lowercase()) {
                causes.push(Cause::invalid(
                    "metadata.annotations",
                    Value::String(key.clone()),
                    message,
                ));
            }
        }
    }
    let finalizers = meta(object, "finalizers").and_then(Value::as_array);
    for (i, finalizer) in finalizers.into_iter().flatten().enumerate() {
        let text = finalizer.as_str().unwrap_or_default();
        if !text.contains('/') && !STANDARD_FINALIZERS.contains(&text) {
            causes.push(Cause::invalid(
                format!("metadata.finalizers[{i}]"),
                finalizer.clone(),
                "name is neither a standard finalizer name nor is it fully qualified",
            ));
        }
    }
    causes
}

/// `ValidateObjectMetaUpdate`: what may not change, and no new finalizer
/// on an object being deleted. (The server ignores a changed
/// `deletionTimestamp` or `creationTimestamp` rather than refusing it:
/// that is the write path's to carry over.)
pub fn validate_update(old: &Value, new: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    // A field the body leaves out keeps its value (the server fills it
    // from the stored object or the URL); the name and namespace are also
    // checked against the URL first, which answers 400, not 422.
    for field in ["name", "namespace", "uid", "deletionGracePeriodSeconds"] {
        let (before, after) = (meta(old, field), meta(new, field));
        if let Some(after) = after
            && Some(after) != before
        {
            causes.push(Cause::invalid(
                format!("metadata.{field}"),
                after.clone(),
                "field is immutable",
            ));
        }
    }
    if meta(old, "deletionTimestamp").is_some() {
        let had: Vec<&Value> = meta(old, "finalizers")
            .and_then(Value::as_array)
            .map(|f| f.iter().collect())
            .unwrap_or_default();
        let added: Vec<String> = meta(new, "finalizers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|f| !had.contains(f))
            .map(|f| format!("{:?}", f.as_str().unwrap_or_default()))
            .collect();
        if !added.is_empty() {
            causes.push(Cause::forbidden(
                "metadata.finalizers",
                format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    added.join(", ")
                ),
            ));
        }
    }
    causes
}
