//! The host's representation of one API object: compact JSON text plus the
//! decoded metadata every handler needs.
//!
//! Why this shape: parsing a 4 KB Pod into a tree costs ~20 us, far more than
//! a component call. The host therefore keeps the object as compact JSON (the
//! smallest faithful form, and what `to-json` hands out without re-encoding),
//! decodes `metadata` once per object version (shared by every plugin), and
//! answers field reads with a lazy JSON-pointer scan that skips everything not
//! on the path.

use sonic_rs::JsonValueTrait;
use std::borrow::Cow;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::kind::Gvk;

/// The annotation `kubectl apply` keeps a full copy of the object in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error("object is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("object has no {0}")]
    Missing(&'static str),
    #[error("object is not valid JSON: {0}")]
    Scan(#[from] sonic_rs::Error),
    #[error("object's {0} is not a JSON object")]
    NotAnObject(&'static str),
}

/// One `metadata.ownerReferences` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct OwnerRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    #[serde(default)]
    pub controller: Option<bool>,
    #[serde(default)]
    pub block_owner_deletion: Option<bool>,
}

/// The decoded metadata of an object.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Meta {
    pub api_version: Box<str>,
    pub kind: Box<str>,
    pub namespace: Option<Box<str>>,
    pub name: Box<str>,
    pub uid: Box<str>,
    pub resource_version: Box<str>,
    pub generation: Option<i64>,
    pub labels: Vec<(Box<str>, Box<str>)>,
    pub annotations: Vec<(Box<str>, Box<str>)>,
    pub owner_references: Vec<OwnerRef>,
    pub creation_timestamp: Option<Box<str>>,
    pub deletion_timestamp: Option<Box<str>>,
}

impl Meta {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| &**k == key)
            .map(|(_, v)| &**v)
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations
            .iter()
            .find(|(k, _)| &**k == key)
            .map(|(_, v)| &**v)
    }
}

/// Which bulky, rarely read parts of an object the cache drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StripOptions {
    pub managed_fields: bool,
    pub last_applied: bool,
}

impl Default for StripOptions {
    fn default() -> Self {
        Self {
            managed_fields: true,
            last_applied: true,
        }
    }
}

/// An immutable object version, shared between the cache, queues and plugins.
#[derive(Debug, PartialEq, Eq)]
pub struct KObject {
    json: Box<str>,
    meta: Meta,
}

/// Objects are shared, never copied.
pub type ObjectHandle = Arc<KObject>;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMeta {
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    generation: Option<i64>,
    #[serde(default)]
    labels: Option<std::collections::BTreeMap<String, String>>,
    #[serde(default)]
    annotations: Option<std::collections::BTreeMap<String, String>>,
    #[serde(default)]
    owner_references: Option<Vec<OwnerRef>>,
    #[serde(default)]
    creation_timestamp: Option<String>,
    #[serde(default)]
    deletion_timestamp: Option<String>,
}

fn boxed_pairs(
    map: Option<std::collections::BTreeMap<String, String>>,
) -> Vec<(Box<str>, Box<str>)> {
    map.unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str()))
        .collect()
}

impl RawMeta {
    fn into_meta(self, api_version: &str, kind: &str) -> Result<Meta, ObjectError> {
        let name = self.name.ok_or(ObjectError::Missing("metadata.name"))?;
        Ok(Meta {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: self.namespace.filter(|n| !n.is_empty()).map(Into::into),
            name: name.into(),
            uid: self.uid.unwrap_or_default().into(),
            resource_version: self.resource_version.unwrap_or_default().into(),
            generation: self.generation,
            labels: boxed_pairs(self.labels),
            annotations: boxed_pairs(self.annotations),
            owner_references: self.owner_references.unwrap_or_default(),
            creation_timestamp: self.creation_timestamp.map(Into::into),
            deletion_timestamp: self.deletion_timestamp.map(Into::into),
        })
    }
}

/// Appends `"key":raw` to a comma-separated member list. `key` is written
/// as a JSON string (escaped); `raw` is JSON text already.
fn push_member(out: &mut String, key: &str, raw: &str) -> Result<(), ObjectError> {
    if !out.is_empty() && !out.ends_with('{') {
        out.push(',');
    }
    // Keys are plain in practice: written as they are, escaped otherwise.
    if key.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(key);
        out.push('"');
    } else {
        out.push_str(&serde_json::to_string(key)?);
    }
    out.push(':');
    out.push_str(raw);
    Ok(())
}

/// The metadata object's text without what `strip` drops: its members
/// copied as text, `managedFields` left out, the last-applied annotation
/// left out of the annotations (and the annotations with it when that was
/// the only one).
fn strip_metadata(text: &str, strip: StripOptions) -> Result<String, ObjectError> {
    if !text.starts_with('{') {
        return Err(ObjectError::NotAnObject("metadata"));
    }
    let mut body = String::with_capacity(text.len());
    for entry in sonic_rs::to_object_iter(text) {
        let (key, value) = entry?;
        match &*key {
            "managedFields" if strip.managed_fields => {}
            "annotations" if strip.last_applied => {
                let raw = value.as_raw_str();
                // An empty annotations object goes too (as from_value drops it).
                let empty = raw[1..].trim_start().starts_with('}');
                if !raw.contains(LAST_APPLIED) && !empty {
                    push_member(&mut body, &key, raw)?;
                    continue;
                }
                let mut ann = String::with_capacity(raw.len());
                for a in sonic_rs::to_object_iter(raw) {
                    let (k, v) = a?;
                    if k != LAST_APPLIED {
                        push_member(&mut ann, &k, v.as_raw_str())?;
                    }
                }
                if !ann.is_empty() {
                    push_member(&mut body, &key, &format!("{{{ann}}}"))?;
                }
            }
            _ => push_member(&mut body, &key, value.as_raw_str())?,
        }
    }
    Ok(format!("{{{body}}}"))
}

impl KObject {
    /// Builds an object from a decoded value, dropping what `strip` says.
    pub fn from_value(mut value: Value, strip: StripOptions) -> Result<Self, ObjectError> {
        let api_version = value["apiVersion"]
            .as_str()
            .ok_or(ObjectError::Missing("apiVersion"))?
            .to_owned();
        let kind = value["kind"]
            .as_str()
            .ok_or(ObjectError::Missing("kind"))?
            .to_owned();
        let metadata = value
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .ok_or(ObjectError::Missing("metadata"))?;
        if strip.managed_fields {
            metadata.remove("managedFields");
        }
        if strip.last_applied
            && let Some(Value::Object(ann)) = metadata.get_mut("annotations")
        {
            ann.remove(LAST_APPLIED);
            if ann.is_empty() {
                metadata.remove("annotations");
            }
        }
        let raw: RawMeta = serde_json::from_value(Value::Object(metadata.clone()))?;
        let meta = raw.into_meta(&api_version, &kind)?;
        let json = serde_json::to_string(&value)?.into_boxed_str();
        Ok(Self { json, meta })
    }

    /// Builds an object from the JSON text of one object as a server sent
    /// it, in one lazy scan and without a tree: the top-level members are
    /// copied as text, metadata's `managedFields` (and the last-applied
    /// annotation, as `strip` says) dropped on the way, and only what is
    /// left of the metadata is decoded. `types` (apiVersion, kind) fills in
    /// what list items leave out.
    pub fn from_json_text(
        text: &str,
        types: Option<(&str, &str)>,
        strip: StripOptions,
    ) -> Result<Self, ObjectError> {
        // The members, comma-separated, without the braces.
        let mut body = String::with_capacity(text.len());
        let mut api_version: Option<String> = None;
        let mut kind: Option<String> = None;
        let mut meta_text: Option<String> = None;
        for entry in sonic_rs::to_object_iter(text) {
            let (key, value) = entry?;
            match &*key {
                // Present but not a string: malformed, whatever `types` says
                // (filling it in would write the member twice).
                "apiVersion" => {
                    let v = value.as_str().ok_or(ObjectError::Missing("apiVersion"))?;
                    api_version = Some(v.to_owned());
                }
                "kind" => {
                    kind = Some(
                        value
                            .as_str()
                            .ok_or(ObjectError::Missing("kind"))?
                            .to_owned(),
                    )
                }
                "metadata" => {
                    let m = strip_metadata(value.as_raw_str(), strip)?;
                    push_member(&mut body, "metadata", &m)?;
                    meta_text = Some(m);
                    continue;
                }
                _ => {}
            }
            push_member(&mut body, &key, value.as_raw_str())?;
        }
        // List items carry no apiVersion and kind: the list's type is theirs.
        let mut json = String::with_capacity(body.len() + 64);
        json.push('{');
        if let Some((v, k)) = types {
            if api_version.is_none() {
                push_member(&mut json, "apiVersion", &serde_json::to_string(v)?)?;
                api_version = Some(v.to_owned());
            }
            if kind.is_none() {
                push_member(&mut json, "kind", &serde_json::to_string(k)?)?;
                kind = Some(k.to_owned());
            }
        }
        if json.len() > 1 && !body.is_empty() {
            json.push(',');
        }
        json.push_str(&body);
        json.push('}');
        let api_version = api_version.ok_or(ObjectError::Missing("apiVersion"))?;
        let kind = kind.ok_or(ObjectError::Missing("kind"))?;
        let meta_text = meta_text.ok_or(ObjectError::Missing("metadata"))?;
        let raw: RawMeta = serde_json::from_str(&meta_text)?;
        let meta = raw.into_meta(&api_version, &kind)?;
        Ok(Self {
            json: json.into_boxed_str(),
            meta,
        })
    }

    pub fn from_json(text: &str, strip: StripOptions) -> Result<Self, ObjectError> {
        Self::from_value(serde_json::from_str(text)?, strip)
    }

    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    pub fn json(&self) -> &str {
        &self.json
    }

    pub fn to_value(&self) -> Result<Value, ObjectError> {
        Ok(serde_json::from_str(&self.json)?)
    }

    pub fn gvk(&self) -> Gvk {
        Gvk::from_api_version(&self.meta.api_version, &self.meta.kind)
    }

    pub fn namespace(&self) -> Option<&str> {
        self.meta.namespace.as_deref()
    }

    pub fn name(&self) -> &str {
        &self.meta.name
    }

    /// `namespace/name`, or `name` for cluster-scoped objects.
    pub fn key(&self) -> ObjectKey {
        ObjectKey::new(self.namespace(), self.name())
    }

    /// Approximate heap bytes held by this object (for the cache's
    /// bytes-per-object figure).
    pub fn heap_bytes(&self) -> usize {
        let m = &self.meta;
        let pairs = |v: &Vec<(Box<str>, Box<str>)>| {
            v.capacity() * std::mem::size_of::<(Box<str>, Box<str>)>()
                + v.iter().map(|(a, b)| a.len() + b.len()).sum::<usize>()
        };
        std::mem::size_of::<Self>()
            + self.json.len()
            + m.api_version.len()
            + m.kind.len()
            + m.namespace.as_ref().map_or(0, |s| s.len())
            + m.name.len()
            + m.uid.len()
            + m.resource_version.len()
            + pairs(&m.labels)
            + pairs(&m.annotations)
            + m.owner_references.capacity() * std::mem::size_of::<OwnerRef>()
            + m.owner_references
                .iter()
                .map(|o| o.api_version.len() + o.kind.len() + o.name.len() + o.uid.len())
                .sum::<usize>()
            + m.creation_timestamp.as_ref().map_or(0, |s| s.len())
            + m.deletion_timestamp.as_ref().map_or(0, |s| s.len())
    }

    /// The value at an RFC 6901 pointer, found by a lazy scan of the text.
    pub fn field(&self, pointer: &str) -> Option<FieldValue> {
        let raw = raw_at(&self.json, pointer)?;
        Some(FieldValue::from_raw(&raw))
    }

    /// The values at several pointers, in order, as [`field`](Self::field)
    /// finds each, in one pass over the text that ends at the last of them
    /// (a handler reading `/spec/x` and `/status/y` skips the metadata once).
    pub fn fields<S: AsRef<str>>(&self, pointers: &[S]) -> Vec<Option<FieldValue>> {
        self.fields_within(pointers, usize::MAX).unwrap_or_default()
    }

    /// [`fields`](Self::fields), or `Err(bytes)` when reading them would
    /// take more than `budget` bytes: the pointers' segments (each a
    /// string) or the values found. A guest asking for the whole object, or
    /// for a pointer of 128 empty segments, a million times must not make
    /// the host build it a million times.
    pub fn fields_within<S: AsRef<str>>(
        &self,
        pointers: &[S],
        budget: usize,
    ) -> Result<Vec<Option<FieldValue>>, usize> {
        let segment_bytes = pointers
            .iter()
            .map(|p| {
                let p = p.as_ref();
                crate::pointer::segment_count(p)
                    .min(crate::pointer::MAX_SEGMENTS)
                    .saturating_mul(std::mem::size_of::<String>())
                    .saturating_add(p.len())
            })
            .fold(0usize, usize::saturating_add);
        if segment_bytes > budget {
            return Err(segment_bytes);
        }
        let parsed: Vec<Option<Vec<String>>> = pointers
            .iter()
            .map(|p| crate::pointer::segments(p.as_ref()))
            .collect();
        let valid: Vec<Vec<String>> = parsed.iter().flatten().cloned().collect();
        let found = crate::pointer::raw_at_many(&self.json, &valid);
        let bytes = found
            .iter()
            .flatten()
            .fold(0usize, |sum, raw| sum.saturating_add(raw.len()));
        if bytes > budget {
            return Err(bytes);
        }
        let mut found = found.into_iter();
        Ok(parsed
            .iter()
            .map(|p| {
                p.as_ref()?;
                found.next().flatten().map(FieldValue::from_raw)
            })
            .collect())
    }

    /// The raw JSON text at a pointer (cheap equality checks between versions).
    pub fn raw_field(&self, pointer: &str) -> Option<Cow<'_, str>> {
        raw_at(&self.json, pointer)
    }

    /// Every value a pointer with `*` array wildcards reaches, as index keys.
    pub fn index_values(&self, pointer: &str) -> Vec<String> {
        let mut out = Vec::new();
        match pointer.split_once("/*") {
            None => {
                if let Some(v) = self.field(pointer) {
                    out.extend(v.as_index_key());
                }
            }
            Some((head, tail)) => {
                let Some(raw) = raw_at(&self.json, head) else {
                    return out;
                };
                let Ok(Value::Array(items)) = serde_json::from_str::<Value>(&raw) else {
                    return out;
                };
                for item in items {
                    collect_wildcard(&item, tail, &mut out);
                }
            }
        }
        out
    }
}

fn collect_wildcard(value: &Value, pointer: &str, out: &mut Vec<String>) {
    match pointer.split_once("/*") {
        None => {
            let found = if pointer.is_empty() {
                Some(value)
            } else {
                value.pointer(pointer)
            };
            if let Some(v) = found {
                match v {
                    Value::String(s) => out.push(s.clone()),
                    Value::Null | Value::Array(_) | Value::Object(_) => {}
                    other => out.push(other.to_string()),
                }
            }
        }
        Some((head, tail)) => {
            let arr = if head.is_empty() {
                Some(value)
            } else {
                value.pointer(head)
            };
            if let Some(Value::Array(items)) = arr {
                for item in items {
                    collect_wildcard(item, tail, out);
                }
            }
        }
    }
}

fn raw_at<'a>(json: &'a str, pointer: &str) -> Option<Cow<'a, str>> {
    let segs = crate::pointer::segments(pointer)?;
    crate::pointer::raw_at(json, &segs).map(Cow::Borrowed)
}

/// A scalar (or compact JSON text for arrays and objects) read from an object.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    Null,
    Boolean(bool),
    Integer(i64),
    Float(f64),
    Text(String),
    Json(String),
}

impl FieldValue {
    fn from_raw(raw: &str) -> Self {
        match raw.as_bytes().first() {
            Some(b'"') => serde_json::from_str::<String>(raw)
                .map(FieldValue::Text)
                .unwrap_or_else(|_| FieldValue::Json(raw.to_owned())),
            Some(b't') => FieldValue::Boolean(true),
            Some(b'f') => FieldValue::Boolean(false),
            Some(b'n') => FieldValue::Null,
            Some(b'{' | b'[') => FieldValue::Json(raw.to_owned()),
            _ => raw
                .parse::<i64>()
                .map(FieldValue::Integer)
                .or_else(|_| raw.parse::<f64>().map(FieldValue::Float))
                .unwrap_or_else(|_| FieldValue::Json(raw.to_owned())),
        }
    }

    /// The string an index keys this value by.
    pub fn as_index_key(&self) -> Option<String> {
        match self {
            FieldValue::Text(s) => Some(s.clone()),
            FieldValue::Integer(i) => Some(i.to_string()),
            FieldValue::Boolean(b) => Some(b.to_string()),
            FieldValue::Float(f) => Some(f.to_string()),
            FieldValue::Null | FieldValue::Json(_) => None,
        }
    }
}

/// `namespace/name` (or `name`): an object's identity within one kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub namespace: Option<Arc<str>>,
    pub name: Arc<str>,
}

impl ObjectKey {
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        Self {
            namespace: namespace.filter(|n| !n.is_empty()).map(Arc::from),
            name: Arc::from(name),
        }
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Both ways in (a decoded value, the server's text) give the same
    /// object: the same metadata, the same JSON value.
    fn same_both_ways(value: &Value, types: Option<(&str, &str)>) {
        let text = serde_json::to_string(value).unwrap();
        let mut full = value.clone();
        if let Some((v, k)) = types {
            full["apiVersion"] = json!(v);
            full["kind"] = json!(k);
        }
        for strip in [
            StripOptions::default(),
            StripOptions {
                managed_fields: false,
                last_applied: false,
            },
        ] {
            let a = KObject::from_value(full.clone(), strip).unwrap();
            let b = KObject::from_json_text(&text, types, strip).unwrap();
            assert_eq!(a.meta, b.meta, "{text}");
            assert_eq!(a.to_value().unwrap(), b.to_value().unwrap(), "{text}");
        }
    }

    #[test]
    fn server_text_decodes_like_a_value() {
        same_both_ways(
            &json!({"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
                "labels": {"app": "web", "q\"uote": "x"},
                "annotations": {LAST_APPLIED: "{\"kind\":\"Pod\"}", "keep": "yes"},
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": "rs1", "controller": true}]},
              "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"phase": "Running"}}),
            None,
        );
        // The last-applied annotation alone: the annotations go with it.
        same_both_ways(
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": "a", "annotations": {LAST_APPLIED: "{}"}}, "data": {"k": "v"}}),
            None,
        );
        // A list item: no apiVersion or kind, the list's are used.
        same_both_ways(
            &json!({"metadata": {"name": "n", "resourceVersion": "3"}, "spec": {}}),
            Some(("v1", "Namespace")),
        );
    }

    #[test]
    fn server_text_that_is_not_an_object_is_refused() {
        for (text, want) in [
            (
                r#"{"apiVersion":"v1","kind":"Pod","metadata":[1]}"#,
                "metadata",
            ),
            (r#"{"apiVersion":"v1","kind":"Pod"}"#, "metadata"),
            (
                r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"}"#,
                "JSON",
            ),
            (r#"{"kind":"Pod","metadata":{"name":"a"}}"#, "apiVersion"),
        ] {
            let err = KObject::from_json_text(text, None, StripOptions::default())
                .expect_err(text)
                .to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
        // A list's type fills in a missing apiVersion, never a malformed one.
        let text = r#"{"apiVersion":1,"kind":"Pod","metadata":{"name":"a"}}"#;
        let err = KObject::from_json_text(text, Some(("v1", "Pod")), StripOptions::default())
            .expect_err(text)
            .to_string();
        assert!(err.contains("apiVersion"), "{err}");
    }

    /// Every object of the corpus (../shared/corpus, or KUBEWASM_CORPUS)
    /// with an identity, as a value; `None` (and a message saying nothing
    /// was checked) where there is no corpus.
    fn corpus_values() -> Option<Vec<Value>> {
        let corpus = std::env::var("KUBEWASM_CORPUS").map_or_else(
            |_| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/corpus"),
            std::path::PathBuf::from,
        );
        let Ok(kinds) = std::fs::read_dir(corpus.join("objects")) else {
            eprintln!(
                "no corpus at {}: set KUBEWASM_CORPUS; skipping the corpus check (nothing checked)",
                corpus.display()
            );
            return None;
        };
        let mut out = Vec::new();
        for kind in kinds.flatten() {
            for file in std::fs::read_dir(kind.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let Ok(text) = std::fs::read_to_string(file.path()) else {
                    continue;
                };
                let Ok(value) = serde_json::from_str::<Value>(&text) else {
                    continue;
                };
                if value["metadata"]["name"].is_string() && value["kind"].is_string() {
                    out.push(value);
                }
            }
        }
        assert!(out.len() > 1000, "only {} corpus objects read", out.len());
        Some(out)
    }

    /// Every object of the corpus decodes from its text exactly as from its
    /// value.
    #[test]
    fn corpus_objects_decode_from_text_like_from_a_value() {
        for value in corpus_values().into_iter().flatten() {
            same_both_ways(&value, None);
        }
    }

    /// Pointers to the nodes of every corpus object (and to an absent
    /// member and index below each container; up to 60 per object) read what serde_json's
    /// `Value::pointer` reads, alone and in one pass with its neighbours.
    #[test]
    fn corpus_fields_read_what_serde_json_pointer_reads() {
        let mut checked = 0usize;
        for value in corpus_values().into_iter().flatten() {
            let Ok(obj) = KObject::from_value(value, StripOptions::default()) else {
                continue;
            };
            let stored: Value = serde_json::from_str(obj.json()).unwrap();
            let all = crate::pointer::every_pointer(&stored, true);
            // Bounded for a debug build: up to ~60 evenly spread pointers.
            let step = all.len().div_ceil(60);
            let all: Vec<String> = all.into_iter().step_by(step).collect();
            let want: Vec<Option<Value>> = all.iter().map(|p| stored.pointer(p).cloned()).collect();
            let parse = |raw: &str| serde_json::from_str::<Value>(raw).unwrap();
            for (p, w) in all.iter().zip(&want) {
                let got = raw_at(obj.json(), p).map(|r| parse(&r));
                assert_eq!(got.as_ref(), w.as_ref(), "{p}");
            }
            // Windows of neighbours in one pass (shared parents, prefixes).
            for window in all.chunks(3) {
                let paths: Vec<Vec<String>> = window
                    .iter()
                    .map(|p| crate::pointer::segments(p).unwrap())
                    .collect();
                let got = crate::pointer::raw_at_many(obj.json(), &paths);
                for (raw, p) in got.iter().zip(window) {
                    assert_eq!(
                        raw.map(parse),
                        stored.pointer(p).cloned(),
                        "{p} in {window:?}"
                    );
                }
            }
            checked += all.len();
        }
        eprintln!("{checked} pointers checked");
    }

    fn pod() -> KObject {
        KObject::from_value(
            json!({"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
                "labels": {"app": "web"},
                "annotations": {LAST_APPLIED: "{...}", "keep": "yes"},
                "managedFields": [{"manager": "kubectl"}],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": "rs1", "controller": true}]},
              "spec": {"nodeName": "node-a", "containers": [{"name": "app", "image": "nginx"}, {"name": "side", "image": "envoy"}]},
              "status": {"phase": "Running", "containerStatuses": [{"name": "app", "restartCount": 3, "ready": true}]}}),
            StripOptions::default(),
        )
        .unwrap()
    }

    #[test]
    fn strips_and_decodes_metadata() {
        let p = pod();
        assert!(!p.json().contains("managedFields"));
        assert!(!p.json().contains(LAST_APPLIED));
        assert_eq!(p.meta().annotation("keep"), Some("yes"));
        assert_eq!(p.meta().label("app"), Some("web"));
        assert_eq!(p.meta().owner_references[0].uid, "rs1");
        assert_eq!(p.key().to_string(), "shop/web-1");
        assert_eq!(p.gvk(), Gvk::new("", "v1", "Pod"));
    }

    #[test]
    fn reads_fields_by_pointer() {
        let p = pod();
        assert_eq!(
            p.field("/spec/nodeName"),
            Some(FieldValue::Text("node-a".into()))
        );
        assert_eq!(
            p.field("/status/containerStatuses/0/restartCount"),
            Some(FieldValue::Integer(3))
        );
        assert_eq!(
            p.field("/status/containerStatuses/0/ready"),
            Some(FieldValue::Boolean(true))
        );
        assert_eq!(p.field("/spec/missing"), None);
        assert_eq!(p.field("bad"), None);
        assert!(matches!(
            p.field("/spec/containers"),
            Some(FieldValue::Json(_))
        ));
        assert_eq!(
            p.index_values("/spec/containers/*/image"),
            vec!["nginx".to_owned(), "envoy".to_owned()]
        );
        assert_eq!(
            p.index_values("/metadata/ownerReferences/*/uid"),
            vec!["rs1".to_owned()]
        );
        assert_eq!(p.index_values("/spec/nodeName"), vec!["node-a".to_owned()]);
    }

    #[test]
    fn escaped_and_numeric_keys() {
        let o = KObject::from_value(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c",
              "labels": {"a/b": "x"}}, "data": {"0": "zero"}}),
            StripOptions::default(),
        )
        .unwrap();
        assert_eq!(
            o.field("/metadata/labels/a~1b"),
            Some(FieldValue::Text("x".into()))
        );
        assert_eq!(o.field("/data/0"), Some(FieldValue::Text("zero".into())));
    }

    /// `fields_within` refuses, before building anything, pointers whose
    /// segments or values whose text would exceed the budget, and names
    /// the size.
    #[test]
    fn fields_within_refuses_what_exceeds_the_budget() {
        let o = pod();
        let whole = o.json().len();
        let pointers = vec![""; 1000];
        assert_eq!(o.fields_within(&pointers, 999 * whole), Err(1000 * whole));
        let fit = o.fields_within(&pointers, 1000 * whole).unwrap();
        assert_eq!(fit.len(), 1000);
        // 1000 pointers of 100 empty segments: 2.4 MB of segments to build.
        let deep = vec!["/".repeat(100); 1000];
        assert!(o.fields_within(&deep, 1 << 20).is_err());
        assert_eq!(o.fields_within(&deep, 4 << 20).map(|v| v.len()), Ok(1000));
        assert_eq!(
            o.fields_within(&["/kind", "/nope"], 64),
            Ok(vec![Some(FieldValue::Text("Pod".into())), None])
        );
    }

    /// `fields` (one scan for key-only pointers) answers exactly what
    /// `field` answers pointer by pointer, missing, escaped, indexed and
    /// repeated pointers included.
    #[test]
    fn fields_in_one_scan_equal_field_by_field() {
        let p = pod();
        let o = KObject::from_value(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c",
              "labels": {"a/b": "x", "t~": "y"}}, "data": {"0": "zero", "01": "one"}}),
            StripOptions::default(),
        )
        .unwrap();
        let sets: &[&[&str]] = &[
            &["/spec/nodeName", "/status/phase"],
            &["/status/phase", "/spec/nodeName", "/spec/nodeName"],
            &["/spec/missing", "/status/phase", "/nope/deeper"],
            &["/spec/nodeName/x", "/metadata/name"],
            &[
                "/spec/containers",
                "/status/containerStatuses/0/restartCount",
                "/metadata/labels/app",
            ],
            &["", "/kind", "bad", "/metadata/uid"],
            &[
                "/metadata/labels/a~1b",
                "/metadata/labels/t~0",
                "/data/0",
                "/data/01",
            ],
            &["/spec", "/spec/containers/1/image"],
        ];
        for set in sets {
            for obj in [&p, &o] {
                let one_by_one: Vec<_> = set.iter().map(|ptr| obj.field(ptr)).collect();
                assert_eq!(obj.fields(set), one_by_one, "{set:?}");
            }
        }
        assert_eq!(
            p.fields(&["/spec/nodeName", "/status/phase"]),
            vec![
                Some(FieldValue::Text("node-a".into())),
                Some(FieldValue::Text("Running".into()))
            ]
        );
    }

    /// Found by the `fuzz_json_pointer` target: `/01` read item 1 of an
    /// array, where RFC 6901 (and serde_json) find nothing.
    #[test]
    fn array_indexes_have_no_leading_zero_or_sign() {
        let p = pod();
        assert!(p.field("/spec/containers/1").is_some());
        assert!(p.field("/spec/containers/0").is_some());
        for bad in [
            "/spec/containers/01",
            "/spec/containers/00",
            "/spec/containers/+1",
        ] {
            assert_eq!(p.field(bad), None, "{bad}");
        }
        // As object keys they are plain strings.
        let o = KObject::from_value(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
              "data": {"01": "one"}}),
            StripOptions::default(),
        )
        .unwrap();
        assert_eq!(o.field("/data/01"), Some(FieldValue::Text("one".into())));
    }

    #[test]
    fn rejects_objects_without_identity() {
        assert!(matches!(
            KObject::from_value(
                json!({"kind": "Pod", "metadata": {"name": "x"}}),
                StripOptions::default()
            ),
            Err(ObjectError::Missing("apiVersion"))
        ));
        assert!(matches!(
            KObject::from_value(
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}}),
                StripOptions::default()
            ),
            Err(ObjectError::Missing("metadata.name"))
        ));
    }
}
