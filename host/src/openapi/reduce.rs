//! From what the API server serves at `/openapi/v3/<group-version>` to the
//! committed file: the kinds of that group-version, the components they
//! reach, and of each schema only what validation reads. Descriptions,
//! paths and the API machinery's own kinds go; a whole release's built-in
//! schemas shrink from 5.8 MB to about 0.35 MB.
//!
//! The generator and the staleness test (`tests/tests/openapi.rs`) call
//! [`reduce`] on the live server's documents and write or compare
//! [`super::schema::file_name`]; the rules live here so that a unit test
//! covers them without a server.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

/// The schema keywords kept; everything else (descriptions, patch
/// strategies, group-version-kind lists) is dropped.
const KEPT: &[&str] = &[
    "type",
    "format",
    "required",
    "enum",
    "default",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
];

/// How the generated files say where they come from.
pub const REGENERATE: &str =
    "cargo test -p kubewasm-tests --test openapi schemas_are_the_served_ones";

/// Why a served document cannot be reduced.
#[derive(Debug, thiserror::Error)]
pub enum ReduceError {
    #[error("the document has no components.schemas object")]
    NoComponents,
    #[error("{kind} is served by both {first} and {second}")]
    TwoSchemas {
        kind: String,
        first: String,
        second: String,
    },
    #[error("{from} refers to {to}, which the document does not define")]
    Dangling { from: String, to: String },
}

/// Reduces the served document of `group`/`version` to the committed text:
/// one component per line, sorted, so a new release's diff reads by schema.
pub fn reduce(group: &str, version: &str, served: &Value) -> Result<String, ReduceError> {
    let components = served
        .pointer("/components/schemas")
        .and_then(Value::as_object)
        .ok_or(ReduceError::NoComponents)?;
    let kinds = kinds_of(group, version, components)?;
    let mut kept: BTreeMap<String, Value> = BTreeMap::new();
    let mut todo: Vec<(String, String)> =
        kinds.iter().map(|(k, n)| (k.clone(), n.clone())).collect();
    while let Some((from, name)) = todo.pop() {
        if kept.contains_key(&name) {
            continue;
        }
        let schema = components.get(&name).ok_or_else(|| ReduceError::Dangling {
            from: from.clone(),
            to: name.clone(),
        })?;
        let reduced = schema_of(schema);
        let mut refs = BTreeSet::new();
        references(&reduced, &mut refs);
        todo.extend(refs.into_iter().map(|r| (name.clone(), r)));
        kept.insert(name, reduced);
    }
    let api = if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    };
    let mut out = String::from("{\n");
    let note = format!(
        "Generated from kube-apiserver v{}'s /openapi/v3/{api}: do not edit; `KUBEWASM_REGENERATE=1 {REGENERATE}` rewrites it.",
        super::schema::KUBERNETES_VERSION
    );
    out.push_str(&format!("\"//\": {},\n", Value::String(note)));
    out.push_str(&format!(
        "\"kinds\": {},\n\"schemas\": {{\n",
        Value::Object(
            kinds
                .into_iter()
                .map(|(k, n)| (k, Value::String(n)))
                .collect()
        )
    ));
    let last = kept.len().saturating_sub(1);
    for (i, (name, schema)) in kept.iter().enumerate() {
        let comma = if i == last { "" } else { "," };
        out.push_str(&format!(
            "{}: {schema}{comma}\n",
            Value::String(name.clone())
        ));
    }
    out.push_str("}\n}\n");
    Ok(out)
}

/// The kinds the document serves for its own group-version: components
/// whose `x-kubernetes-group-version-kind` names it, lists and the API
/// machinery's shared kinds (DeleteOptions, Status, WatchEvent) left out.
fn kinds_of(
    group: &str,
    version: &str,
    components: &Map<String, Value>,
) -> Result<BTreeMap<String, String>, ReduceError> {
    let mut kinds = BTreeMap::new();
    for (name, schema) in components {
        if name.starts_with("io.k8s.apimachinery.") {
            continue;
        }
        let gvks = schema
            .get("x-kubernetes-group-version-kind")
            .and_then(Value::as_array);
        for gvk in gvks.into_iter().flatten() {
            let field = |f: &str| gvk.get(f).and_then(Value::as_str).unwrap_or_default();
            let kind = field("kind");
            if field("group") != group || field("version") != version || kind.ends_with("List") {
                continue;
            }
            if let Some(first) = kinds.insert(kind.to_owned(), name.clone())
                && first != *name
            {
                return Err(ReduceError::TwoSchemas {
                    kind: kind.to_owned(),
                    first,
                    second: name.clone(),
                });
            }
        }
    }
    Ok(kinds)
}

/// One schema reduced: the kept keywords, `allOf: [{$ref}]` (how the
/// server wraps a reference that carries a default) as a plain `$ref`
/// with the component's name only, and the nested schemas reduced too.
fn schema_of(schema: &Value) -> Value {
    let Some(object) = schema.as_object() else {
        return Value::Object(Map::new());
    };
    let mut out = Map::new();
    let reference = object.get("$ref").or_else(|| {
        object
            .get("allOf")
            .and_then(Value::as_array)
            .filter(|all| all.len() == 1)
            .and_then(|all| all[0].get("$ref"))
    });
    if let Some(r) = reference.and_then(Value::as_str) {
        let name = r.rsplit('/').next().unwrap_or(r);
        out.insert("$ref".into(), Value::String(name.to_owned()));
    }
    for key in KEPT {
        if let Some(v) = object.get(*key) {
            out.insert((*key).to_owned(), v.clone());
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(v) = object.get(key).filter(|v| v.is_object()) {
            out.insert(key.to_owned(), schema_of(v));
        }
    }
    if let Some(props) = object.get("properties").and_then(Value::as_object) {
        let props = props.iter().map(|(k, v)| (k.clone(), schema_of(v)));
        out.insert("properties".into(), Value::Object(props.collect()));
    }
    if let Some(one_of) = object.get("oneOf").and_then(Value::as_array) {
        out.insert(
            "oneOf".into(),
            Value::Array(one_of.iter().map(schema_of).collect()),
        );
    }
    Value::Object(out)
}

/// The component names a reduced schema refers to.
fn references(schema: &Value, out: &mut BTreeSet<String>) {
    if let Some(Value::String(r)) = schema.get("$ref") {
        out.insert(r.clone());
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        props.values().for_each(|p| references(p, out));
    }
    for key in ["items", "additionalProperties"] {
        if let Some(nested) = schema.get(key) {
            references(nested, out);
        }
    }
    if let Some(one_of) = schema.get("oneOf").and_then(Value::as_array) {
        one_of.iter().for_each(|p| references(p, out));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn served() -> Value {
        json!({"components": {"schemas": {
            "io.k8s.api.core.v1.ConfigMap": {
                "description": "gone",
                "type": "object",
                "properties": {
                    "data": {"type": "object", "additionalProperties": {"type": "string", "default": ""}},
                    "metadata": {"default": {}, "allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]}
                },
                "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "ConfigMap"}]
            },
            "io.k8s.api.core.v1.ConfigMapList": {
                "type": "object",
                "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "ConfigMapList"}]
            },
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {
                "type": "object",
                "properties": {"name": {"type": "string", "description": "gone"}}
            },
            "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions": {
                "type": "object",
                "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "DeleteOptions"}]
            },
            "io.k8s.api.core.v1.Unreached": {"type": "object"}
        }}})
    }

    #[test]
    fn keeps_the_kinds_their_components_and_the_keywords_validation_reads() {
        let text = reduce("", "v1", &served()).unwrap();
        let doc: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            doc["kinds"],
            json!({"ConfigMap": "io.k8s.api.core.v1.ConfigMap"})
        );
        let schemas = doc["schemas"].as_object().unwrap();
        let names: Vec<&str> = schemas.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "io.k8s.api.core.v1.ConfigMap",
                "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
            ]
        );
        assert_eq!(
            schemas["io.k8s.api.core.v1.ConfigMap"],
            json!({"type": "object", "properties": {
                "data": {"type": "object", "additionalProperties": {"type": "string", "default": ""}},
                "metadata": {"$ref": "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "default": {}}
            }})
        );
        assert!(text.starts_with(
            "{\n\"//\": \"Generated from kube-apiserver v1.35.8's /openapi/v3/api/v1"
        ));
        assert_eq!(text.lines().count(), 8, "one line per schema:\n{text}");
    }

    #[test]
    fn a_dangling_reference_or_a_missing_document_is_an_error() {
        let mut doc = served();
        doc["components"]["schemas"]
            .as_object_mut()
            .unwrap()
            .remove("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta");
        assert!(matches!(
            reduce("", "v1", &doc),
            Err(ReduceError::Dangling { .. })
        ));
        assert!(matches!(
            reduce("", "v1", &json!({})),
            Err(ReduceError::NoComponents)
        ));
    }
}
