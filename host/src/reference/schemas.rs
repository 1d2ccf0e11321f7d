//! JSON Schemas of what operators write, for editors (`# yaml-language-server:
//! $schema=...`) and the book: the host config ([`crate::config::RunSettings`]
//! plus its `apiVersion` and `kind`), the sidecar (the keys a Plugin's spec
//! shares with it, [`crate::crd::PluginParts`] without `module`, as the
//! host parses a spec through the sidecar's parser) and the two Plugin kinds
//! (their CRDs' schemas, as the API server validates them).

use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

use crate::config::{API_VERSION, KIND, RunSettings};
use crate::crd::{NamespacedPlugin, Plugin, PluginParts};

/// Where the schemas are published, relative to the repository's root.
pub const DIR: &str = "docs/book/src/reference/schemas";

/// Each schema's file name (in [`DIR`]) and text (pretty JSON, a final
/// newline).
pub fn all() -> Vec<(&'static str, String)> {
    [
        ("host-config.schema.json", host_config()),
        ("sidecar.schema.json", sidecar()),
        ("plugin.schema.json", crd_schema::<Plugin>("Plugin")),
        (
            "namespacedplugin.schema.json",
            crd_schema::<NamespacedPlugin>("NamespacedPlugin"),
        ),
    ]
    .into_iter()
    .map(|(name, schema)| {
        let text = serde_json::to_string_pretty(&schema).unwrap_or_default();
        (name, text + "\n")
    })
    .collect()
}

/// `T`'s root schema (draft 7), titled.
fn root_schema<T: schemars::JsonSchema>(title: &str, description: &str) -> Value {
    let mut schema = SchemaSettings::draft07()
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    if let Some(obj) = schema.as_object_mut() {
        obj.insert("title".into(), json!(title));
        obj.insert("description".into(), json!(description));
    }
    schema
}

/// The host config file: its settings, plus the header the parser takes out
/// before decoding them.
pub fn host_config() -> Value {
    let mut schema = root_schema::<RunSettings>(
        "kubewasm host config",
        "The file `kubewasm run --config` reads (docs/book/src/config.md).",
    );
    if let Some(obj) = schema.as_object_mut() {
        if let Some(Value::Object(props)) = obj.get_mut("properties") {
            props.insert("apiVersion".into(), json!({"const": API_VERSION}));
            props.insert("kind".into(), json!({"const": KIND}));
        }
        obj.insert("required".into(), json!(["apiVersion", "kind"]));
    }
    without_null_defaults(&mut schema);
    schema
}

/// schemars writes `"default": null` for every `Option` under
/// `#[serde(default)]`; an editor would offer `null`, which the parser
/// takes as unset: leave the key out instead.
fn without_null_defaults(schema: &mut Value) {
    match schema {
        Value::Object(obj) => {
            if obj.get("default") == Some(&Value::Null) {
                obj.remove("default");
            }
            obj.values_mut().for_each(without_null_defaults);
        }
        Value::Array(items) => items.iter_mut().for_each(without_null_defaults),
        _ => {}
    }
}

/// A plugin's sidecar (`NAME.yaml` beside `NAME.wasm`).
pub fn sidecar() -> Value {
    let mut schema = root_schema::<PluginParts>(
        "kubewasm plugin sidecar",
        "NAME.yaml beside NAME.wasm in the plugin folder (docs/book/src/plugin-folder.md).",
    );
    if let Some(obj) = schema.as_object_mut() {
        if let Some(Value::Object(props)) = obj.get_mut("properties") {
            props.remove("module");
        }
        if let Some(Value::Array(required)) = obj.get_mut("required") {
            required.retain(|r| r != "module");
        }
        if let Some(Value::Object(defs)) = obj.get_mut("definitions") {
            defs.remove("ModuleSource");
            for name in ["OciModule", "ConfigMapModule", "KeyRef", "ObjectName"] {
                defs.remove(name);
            }
        }
    }
    // The sidecar's parser refuses unknown keys (a Plugin's CRD prunes them).
    closed(&mut schema);
    without_null_defaults(&mut schema);
    schema
}

/// Every object schema with `properties` refuses other keys.
fn closed(schema: &mut Value) {
    match schema {
        Value::Object(obj) => {
            if obj.contains_key("properties") && !obj.contains_key("additionalProperties") {
                obj.insert("additionalProperties".into(), Value::Bool(false));
            }
            obj.values_mut().for_each(closed);
        }
        Value::Array(items) => items.iter_mut().for_each(closed),
        _ => {}
    }
}

/// A CRD kind as a standalone JSON Schema: the CRD's own schema (generated
/// from the same types, what `kubectl apply` is checked against).
fn crd_schema<K: kube::CustomResourceExt>(kind: &str) -> Value {
    let crd = K::crd();
    let schema = crd
        .spec
        .versions
        .first()
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .map(|s| serde_json::to_value(s).unwrap_or_default())
        .unwrap_or_default();
    let mut schema = match schema {
        Value::Object(obj) => obj,
        _ => serde_json::Map::new(),
    };
    schema.insert(
        "$schema".into(),
        json!("http://json-schema.org/draft-07/schema#"),
    );
    schema.insert("title".into(), json!(format!("kubewasm {kind}")));
    if let Some(Value::Object(props)) = schema.get_mut("properties") {
        props.insert(
            "apiVersion".into(),
            json!({"const": format!("{}/{}", crd.spec.group, crd.spec.versions.first().map(|v| v.name.as_str()).unwrap_or_default())}),
        );
        props.insert("kind".into(), json!({"const": kind}));
    }
    schema.insert("required".into(), json!(["apiVersion", "kind", "spec"]));
    Value::Object(schema)
}
