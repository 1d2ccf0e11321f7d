//! Required fields, read from the schema's `required` lists: the built-in
//! kinds' validation (Go code) refuses the same fields as missing
//! (`spec.selector: Required value`). A field whose schema defaults to
//! `{}` (a Deployment's `spec` and `template`) is a struct value in Go,
//! never missing: when absent, what is required inside it is checked
//! against `{}`, as the server validates the zero struct. Fields the
//! schema marks optional but validation requires are listed in
//! [`ALSO_REQUIRED`].

use serde_json::{Value, json};

use super::decode::Step;
use super::refusal::{Cause, field_path};
use super::schema::{Document, Schema};

/// Fields the schema leaves optional (tools may omit them in templates
/// and overlays) that the server's validation requires, by component.
const ALSO_REQUIRED: &[(&str, &str)] = &[("io.k8s.api.core.v1.Container", "image")];

/// The causes for missing required fields of `object` (whose kind's
/// schema is `schema`); `metadata` is [`super::meta`]'s and `status` is
/// not validated on a write of the main resource.
pub fn check(doc: &Document, schema: &Schema, object: &Value) -> Vec<Cause> {
    let mut walk = Walk {
        doc,
        path: Vec::new(),
        causes: Vec::new(),
    };
    if let Some(map) = object.as_object() {
        for (key, value) in map {
            if key == "metadata" || key == "status" {
                continue;
            }
            if let Some(prop) = schema.properties.get(key) {
                walk.path.push(Step::Field(key.clone()));
                walk.value(prop, value);
                walk.path.pop();
            }
        }
        walk.required(schema, None, map, &["metadata", "status"]);
        walk.zero_structs(schema, map, &["metadata", "status"]);
    }
    walk.causes
}

/// Missing as Go validation sees it: absent, null, `""` or `[]`.
fn missing(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    }
}

struct Walk<'a> {
    doc: &'a Document,
    path: Vec<Step>,
    causes: Vec<Cause>,
}

impl<'a> Walk<'a> {
    fn value(&mut self, schema: &'a Schema, value: &Value) {
        let (s, name) = self.doc.resolve(schema);
        match value {
            Value::Object(map) if !s.properties.is_empty() => {
                for (key, field) in map {
                    if let Some(prop) = s.properties.get(key) {
                        self.path.push(Step::Field(key.clone()));
                        self.value(prop, field);
                        self.path.pop();
                    }
                }
                self.required(s, name, map, &[]);
                self.zero_structs(s, map, &[]);
            }
            Value::Object(map) => {
                if let Some(entry) = s.additional_properties.as_deref() {
                    for (key, field) in map {
                        self.path.push(Step::Key(key.clone()));
                        self.value(entry, field);
                        self.path.pop();
                    }
                }
            }
            Value::Array(items) => {
                if let Some(item) = s.items.as_deref() {
                    for (i, v) in items.iter().enumerate() {
                        self.path.push(Step::Item(i, None));
                        self.value(item, v);
                        self.path.pop();
                    }
                }
            }
            _ => {}
        }
    }

    /// The required fields of the object `map` (of component `name`).
    fn required(
        &mut self,
        s: &'a Schema,
        name: Option<&str>,
        map: &serde_json::Map<String, Value>,
        skip: &[&str],
    ) {
        let also = ALSO_REQUIRED
            .iter()
            .filter(|(component, _)| Some(*component) == name)
            .map(|(_, field)| *field);
        let fields: Vec<&str> = s.required.iter().map(String::as_str).chain(also).collect();
        for field in fields {
            if skip.contains(&field) || !missing(map.get(field)) {
                continue;
            }
            if s.properties.get(field).is_some_and(is_struct_value) {
                // Never missing: `zero_structs` checks inside it.
                continue;
            }
            self.path.push(Step::Field(field.to_owned()));
            self.causes
                .push(missing_cause(name, field, field_path(&self.path)));
            self.path.pop();
        }
    }

    /// The absent fields of `map` that are struct values in Go, checked as
    /// the zero struct `{}`.
    fn zero_structs(&mut self, s: &'a Schema, map: &serde_json::Map<String, Value>, skip: &[&str]) {
        for (key, prop) in &s.properties {
            if skip.contains(&key.as_str()) || !is_struct_value(prop) || !missing(map.get(key)) {
                continue;
            }
            self.path.push(Step::Field(key.clone()));
            self.value(prop, &json!({}));
            self.path.pop();
        }
    }
}

/// How validation words a missing required field: `Required value`, but
/// for the few fields whose Go check says more or checks the zero value.
fn missing_cause(component: Option<&str>, field: &str, path: String) -> Cause {
    match (component.unwrap_or_default(), field) {
        ("io.k8s.api.core.v1.ServicePort", "port") => {
            Cause::invalid(path, json!(0), "must be between 1 and 65535, inclusive")
        }
        ("io.k8s.api.networking.v1.HTTPIngressPath", "pathType") => {
            Cause::required(path, "pathType must be specified")
        }
        _ => Cause::required(path, String::new()),
    }
}

/// A field the schema defaults to `{}`: a struct value in Go, not a pointer.
fn is_struct_value(prop: &Schema) -> bool {
    prop.default == Some(json!({}))
}
