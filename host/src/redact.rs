//! What the host hides when it shows an object to a person: a Secret's
//! `data` and `stringData` (and the copy of them `kubectl apply` keeps in
//! an annotation), always, and the fields the operator lists in the host
//! config (`sensitiveFields`). Values become [`MARKER`]; keys and the
//! object's shape stay, so a reader still sees which fields are set.
//!
//! Applied where the host displays objects (the web view's object API;
//! [`Redactor::redact`] and [`Redactor::json_patch`] are there for action
//! bodies printed by `--dry-run`); the cache and what plugins read are
//! never changed.
//! Redacting parses the object, so [`Redactor::object_json`] only does it
//! for kinds with something to hide and hands every other object's text
//! through as it is.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::object::{KObject, LAST_APPLIED};

/// What a hidden value is replaced with.
pub const MARKER: &str = "<redacted>";

/// The `sensitiveFields` key of the host config: a kind (`Kind` in any
/// API group, `Kind.group` in one: `ConfigMap`, `Widget.example.com`)
/// to the JSON pointers of its fields to hide (`/data/password`; `*`
/// matches every member or item: `/spec/containers/*/env/*/value`).
pub type SensitiveFields = BTreeMap<String, Vec<String>>;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedactError {
    #[error(
        "sensitiveFields: {0:?} is not a kind: write `Kind` for every API group or `Kind.group` for one (e.g. `ConfigMap`, `Widget.example.com`)"
    )]
    Kind(String),
    #[error(
        "sensitiveFields.{kind}: {pointer:?} is not a JSON pointer to a field: write it from the object's root, e.g. `/data/password` (`*` matches every member or item)"
    )]
    Pointer { kind: String, pointer: String },
}

/// The fields of one kind to hide.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    kind: String,
    /// `None`: the kind in every group.
    group: Option<String>,
    /// Unescaped segments; `*` matches every member or item.
    paths: Vec<Vec<String>>,
}

impl Rule {
    fn matches(&self, group: &str, kind: &str) -> bool {
        self.kind == kind && self.group.as_deref().is_none_or(|g| g == group)
    }
}

/// Hides sensitive fields of objects shown to people. Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redactor {
    rules: Arc<[Rule]>,
}

/// Always hidden: a Secret's values, and the annotation in which `kubectl
/// apply` keeps a copy of the whole object (the host strips it from the
/// cache by default, but not with `--keep-managed-fields`).
fn secret_rule() -> Rule {
    Rule {
        kind: "Secret".into(),
        group: None,
        paths: vec![
            vec!["data".into()],
            vec!["stringData".into()],
            vec!["metadata".into(), "annotations".into(), LAST_APPLIED.into()],
        ],
    }
}

impl Default for Redactor {
    /// Secrets only.
    fn default() -> Self {
        Self {
            rules: Arc::from(vec![secret_rule()]),
        }
    }
}

impl Redactor {
    /// Secrets, plus the operator's `sensitiveFields`.
    pub fn new(fields: &SensitiveFields) -> Result<Self, RedactError> {
        let mut rules = vec![secret_rule()];
        for (key, pointers) in fields {
            let (kind, group) = match key.split_once('.') {
                Some((k, g)) => (k, Some(g)),
                None => (key.as_str(), None),
            };
            let is_name = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric());
            let group_ok = group.is_none_or(|g| {
                !g.is_empty()
                    && g.split('.').all(|p| {
                        !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    })
            });
            if !is_name(kind) || !kind.starts_with(|c: char| c.is_ascii_uppercase()) || !group_ok {
                return Err(RedactError::Kind(key.clone()));
            }
            let mut paths = Vec::with_capacity(pointers.len());
            for p in pointers {
                match crate::pointer::segments(p) {
                    Some(s) if !s.is_empty() => paths.push(s),
                    _ => {
                        return Err(RedactError::Pointer {
                            kind: key.clone(),
                            pointer: p.clone(),
                        });
                    }
                }
            }
            rules.push(Rule {
                kind: kind.to_owned(),
                group: group.map(str::to_owned),
                paths,
            });
        }
        Ok(Self {
            rules: Arc::from(rules),
        })
    }

    /// The paths to hide in objects of `apiVersion`/`kind`.
    fn paths<'a>(&'a self, api_version: &str, kind: &str) -> Vec<&'a [String]> {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        self.rules
            .iter()
            .filter(|r| r.matches(group, kind))
            .flat_map(|r| r.paths.iter().map(Vec::as_slice))
            .collect()
    }

    /// Whether objects of this kind have fields to hide.
    pub fn applies(&self, api_version: &str, kind: &str) -> bool {
        !self.paths(api_version, kind).is_empty()
    }

    /// Hides the sensitive fields of `value`, an object of
    /// `apiVersion`/`kind` (or a merge patch or apply body for one).
    pub fn redact(&self, api_version: &str, kind: &str, value: &mut Value) {
        for path in self.paths(api_version, kind) {
            hide_at(value, path);
        }
    }

    /// An object's JSON as it may be shown: its own text when nothing of
    /// its kind is sensitive, else redacted.
    pub fn object_json<'a>(&self, object: &'a KObject) -> Cow<'a, str> {
        let meta = object.meta();
        if !self.applies(&meta.api_version, &meta.kind) {
            return Cow::Borrowed(object.json());
        }
        match object.to_value() {
            Ok(mut v) => {
                self.redact(&meta.api_version, &meta.kind, &mut v);
                Cow::Owned(v.to_string())
            }
            // The cache holds valid JSON; should it not, show nothing of it.
            Err(_) => Cow::Owned(format!("\"{MARKER}\"")),
        }
    }

    /// Hides what the operations of a JSON patch (RFC 6902) for an
    /// object of `apiVersion`/`kind` would write into sensitive fields:
    /// the `value` of an operation at or under a sensitive field whole,
    /// and the sensitive fields inside the `value` of one above them.
    pub fn json_patch(&self, api_version: &str, kind: &str, ops: &mut Value) {
        let paths = self.paths(api_version, kind);
        if paths.is_empty() {
            return;
        }
        for op in ops.as_array_mut().into_iter().flatten() {
            let Some(at) = op
                .get("path")
                .and_then(Value::as_str)
                .and_then(crate::pointer::segments)
            else {
                continue;
            };
            let Some(value) = op.get_mut("value") else {
                continue;
            };
            for path in &paths {
                let common = at.len().min(path.len());
                if !at
                    .iter()
                    .zip(path.iter())
                    .take(common)
                    .all(|(a, p)| p == "*" || a == p)
                {
                    continue;
                }
                if at.len() >= path.len() {
                    hide(value);
                } else {
                    hide_at(value, &path[at.len()..]);
                }
            }
        }
    }
}

/// Hides what `path` names in `value` (nothing when it names nothing).
fn hide_at(value: &mut Value, path: &[String]) {
    let Some((first, rest)) = path.split_first() else {
        hide(value);
        return;
    };
    match value {
        Value::Object(map) if first == "*" => {
            for v in map.values_mut() {
                hide_at(v, rest);
            }
        }
        Value::Object(map) => {
            if let Some(v) = map.get_mut(first) {
                hide_at(v, rest);
            }
        }
        Value::Array(items) if first == "*" => {
            for v in items {
                hide_at(v, rest);
            }
        }
        Value::Array(items) => {
            if let Some(v) = crate::pointer::array_index(first).and_then(|i| items.get_mut(i)) {
                hide_at(v, rest);
            }
        }
        _ => {}
    }
}

/// Replaces every value inside `value` by [`MARKER`], keeping the keys of
/// objects and the length of arrays; `null` stays (nothing is set).
fn hide(value: &mut Value) {
    match value {
        Value::Null => {}
        Value::Object(map) => map.values_mut().for_each(hide),
        Value::Array(items) => items.iter_mut().for_each(hide),
        other => *other = Value::String(MARKER.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::StripOptions;
    use serde_json::json;

    fn secret() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db-password", "namespace": "team-a",
                "annotations": {LAST_APPLIED: "{\"data\":{\"password\":\"aHVudGVyMg==\"}}", "team": "a"}},
            "type": "Opaque",
            "data": {"password": "aHVudGVyMg==", "user": "YWRtaW4="},
            "stringData": {"token": "hunter2"},
        })
    }

    #[test]
    fn a_secret_keeps_its_keys_and_loses_its_values() {
        let r = Redactor::default();
        let o = KObject::from_value(
            secret(),
            StripOptions {
                managed_fields: true,
                last_applied: false,
            },
        )
        .unwrap();
        let shown: Value = serde_json::from_str(&r.object_json(&o)).unwrap();
        assert_eq!(shown["data"], json!({"password": MARKER, "user": MARKER}));
        assert_eq!(shown["stringData"], json!({"token": MARKER}));
        assert_eq!(shown["metadata"]["annotations"][LAST_APPLIED], MARKER);
        assert_eq!(shown["metadata"]["annotations"]["team"], "a");
        assert_eq!(shown["metadata"]["name"], "db-password");
        assert_eq!(shown["type"], "Opaque");
        let text = r.object_json(&o);
        for secret in ["aHVudGVyMg==", "YWRtaW4=", "hunter2"] {
            assert!(!text.contains(secret), "{text}");
        }
        // The object itself is unchanged.
        assert!(o.json().contains("aHVudGVyMg=="));
    }

    #[test]
    fn other_kinds_pass_through_as_they_are() {
        let r = Redactor::default();
        let cm = KObject::from_value(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}}),
            StripOptions::default(),
        )
        .unwrap();
        assert!(matches!(r.object_json(&cm), Cow::Borrowed(_)));
        // A Secret of another group is a Secret too.
        assert!(r.applies("example.com/v1", "Secret"));
        assert!(!r.applies("v1", "ConfigMap"));
    }

    #[test]
    fn the_operator_lists_fields_by_kind_and_group_with_wildcards() {
        let fields: SensitiveFields = [
            ("ConfigMap".to_owned(), vec!["/data/password".to_owned()]),
            (
                "Widget.example.com".to_owned(),
                vec!["/spec/users/*/token".to_owned(), "/spec/a~1b".to_owned()],
            ),
            (
                "Pod".to_owned(),
                vec!["/spec/containers/*/env/*/value".to_owned()],
            ),
        ]
        .into_iter()
        .collect();
        let r = Redactor::new(&fields).unwrap();
        let mut cm = json!({"data": {"password": "p", "user": "u"}});
        r.redact("v1", "ConfigMap", &mut cm);
        assert_eq!(cm, json!({"data": {"password": MARKER, "user": "u"}}));
        let mut w = json!({"spec": {"users": [{"name": "a", "token": "t1"}, {"name": "b", "token": {"x": 1}}], "a/b": 3, "c": 4}});
        r.redact("example.com/v1", "Widget", &mut w);
        assert_eq!(
            w,
            json!({"spec": {"users": [{"name": "a", "token": MARKER}, {"name": "b", "token": {"x": MARKER}}], "a/b": MARKER, "c": 4}})
        );
        // The group is part of the kind when given.
        let mut other = json!({"spec": {"users": [{"token": "t"}]}});
        r.redact("other.io/v1", "Widget", &mut other);
        assert_eq!(other["spec"]["users"][0]["token"], "t");
        let mut pod = json!({"spec": {"containers": [{"env": [{"name": "A", "value": "s"}, {"name": "B", "valueFrom": {}}]}]}});
        r.redact("v1", "Pod", &mut pod);
        assert_eq!(pod["spec"]["containers"][0]["env"][0]["value"], MARKER);
        assert_eq!(pod["spec"]["containers"][0]["env"][1]["name"], "B");
        // Secrets stay hidden whatever the operator lists.
        let mut s = secret();
        r.redact("v1", "Secret", &mut s);
        assert_eq!(s["data"]["password"], MARKER);
    }

    #[test]
    fn bad_kinds_and_pointers_are_named() {
        let one = |k: &str, p: &str| {
            Redactor::new(&[(k.to_owned(), vec![p.to_owned()])].into_iter().collect())
        };
        assert_eq!(
            one("configmap", "/data"),
            Err(RedactError::Kind("configmap".into()))
        );
        assert_eq!(
            one("Widget.", "/data"),
            Err(RedactError::Kind("Widget.".into()))
        );
        let e = one("ConfigMap", "data/password").unwrap_err();
        assert!(e.to_string().contains("sensitiveFields.ConfigMap"), "{e}");
        assert!(
            one("ConfigMap", "").is_err(),
            "the whole object is not a field"
        );
        assert!(one("Widget.example.com", "/spec/x").is_ok());
    }

    #[test]
    fn json_patches_hide_what_they_write_into_sensitive_fields() {
        let r = Redactor::default();
        let mut ops = json!([
            {"op": "add", "path": "/data/password", "value": "c2VjcmV0"},
            {"op": "replace", "path": "/data", "value": {"a": "b"}},
            {"op": "add", "path": "/metadata", "value": {"annotations": {LAST_APPLIED: "x", "k": "v"}}},
            {"op": "add", "path": "/metadata/labels/x", "value": "y"},
            {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
            {"op": "remove", "path": "/stringData/token"},
        ]);
        r.json_patch("v1", "Secret", &mut ops);
        assert_eq!(ops[0]["value"], MARKER);
        assert_eq!(ops[1]["value"], json!({"a": MARKER}));
        assert_eq!(
            ops[2]["value"]["annotations"],
            json!({LAST_APPLIED: MARKER, "k": "v"})
        );
        assert_eq!(ops[3]["value"], "y");
        assert_eq!(ops[4]["value"], "7");
        let mut cm = json!([{"op": "add", "path": "/data/password", "value": "p"}]);
        r.json_patch("v1", "ConfigMap", &mut cm);
        assert_eq!(cm[0]["value"], "p");
    }
}
