//! What the API server's decoding refuses before any validation runs: a
//! value of the wrong JSON type for its field (`data.foo: 1` in a
//! ConfigMap, `replicas: "3"`), a quantity or base64 text that does not
//! parse, and (in a server-side apply only) a field the schema does not
//! declare. The server answers these per verb, not with 422 (see
//! [`super::refusal`]): create and update decode the body into the Go type
//! (encoding/json's first error, 400), apply converts it to a typed value
//! (structured-merge-diff's errors, 500), a patch decodes the patched
//! object (422 on the field `patch`).

use serde_json::Value;

use super::schema::{Document, Schema};

/// One step of a path into the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A declared field.
    Field(String),
    /// A key of a map (`data.foo`).
    Key(String),
    /// A list item: its index and, in an associative list, its keys as
    /// structured-merge-diff names them (`name="c"`).
    Item(usize, Option<String>),
}

/// What the field's schema wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    String,
    Integer {
        go: &'static str,
        min: i64,
        max: i64,
    },
    Number,
    Boolean,
    List {
        go: String,
    },
    Map {
        go: String,
    },
    IntOrString,
    Quantity,
    /// Base64 text (`format: byte`): the first byte that is not, as Go's
    /// decoder counts it.
    Base64 {
        at: usize,
    },
    /// Apply only: a field the schema does not declare.
    Declared,
}

/// A value the decoder refuses, with what the messages of each verb need.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    pub path: Vec<Step>,
    /// The Go struct that owns the innermost field (`ContainerPort`).
    pub go_struct: String,
    pub expected: Expected,
    pub got: Value,
}

impl Mismatch {
    /// The path as encoding/json names it: field names only, dotted.
    pub fn go_path(&self) -> String {
        let fields: Vec<&str> = self
            .path
            .iter()
            .filter_map(|s| match s {
                Step::Field(f) => Some(f.as_str()),
                _ => None,
            })
            .collect();
        fields.join(".")
    }

    /// The path as structured-merge-diff names it (`.spec.containers[name="c"].image`).
    pub fn smd_path(&self) -> String {
        let mut out = String::new();
        for step in &self.path {
            match step {
                Step::Field(f) | Step::Key(f) => {
                    out.push('.');
                    out.push_str(f);
                }
                Step::Item(_, Some(keys)) => out.push_str(&format!("[{keys}]")),
                Step::Item(i, None) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    }

    /// The path as field validation names it (`spec.containers[0].image`).
    pub fn field_path(&self) -> String {
        super::refusal::field_path(&self.path)
    }
}

/// Walks `value` against `schema`, collecting what decoding refuses;
/// `declared` also refuses undeclared fields (a server-side apply does).
pub fn check(
    doc: &Document,
    component: &str,
    schema: &Schema,
    value: &Value,
    declared: bool,
) -> Vec<Mismatch> {
    let mut walk = Walk {
        doc,
        declared,
        path: Vec::new(),
        found: Vec::new(),
    };
    walk.object(schema, component, value);
    walk.found
}

struct Walk<'a> {
    doc: &'a Document,
    declared: bool,
    path: Vec<Step>,
    found: Vec<Mismatch>,
}

/// The Go type name of a component (`io.k8s.api.core.v1.Container` is
/// `v1.Container`).
fn go_type_of_component(name: &str) -> String {
    let mut parts = name.rsplit('.');
    let ty = parts.next().unwrap_or(name);
    match parts.next() {
        Some(package) => format!("{package}.{ty}"),
        None => ty.to_owned(),
    }
}

/// The short struct name of a component (`Container`).
fn struct_name(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

impl<'a> Walk<'a> {
    fn refuse(&mut self, owner: &str, expected: Expected, got: &Value) {
        self.found.push(Mismatch {
            path: self.path.clone(),
            go_struct: struct_name(owner).to_owned(),
            expected,
            got: got.clone(),
        });
    }

    /// The Go type a schema decodes into, for messages.
    fn go_type(&self, schema: &Schema) -> String {
        let (s, name) = self.doc.resolve(schema);
        if let Some(name) = name {
            return go_type_of_component(name);
        }
        match s.ty.as_deref() {
            Some("string") if s.format.as_deref() == Some("byte") => "[]uint8".into(),
            Some("string") => "string".into(),
            Some("integer") => integer(s).0.into(),
            Some("number") => "float64".into(),
            Some("boolean") => "bool".into(),
            Some("array") => format!(
                "[]{}",
                s.items
                    .as_deref()
                    .map(|i| self.go_type(i))
                    .unwrap_or_default()
            ),
            Some("object") => match s.additional_properties.as_deref() {
                Some(v) => format!("map[string]{}", self.go_type(v)),
                None => "map[string]interface {}".into(),
            },
            _ => "interface {}".into(),
        }
    }

    /// `value` against `schema`, inside the struct `owner`.
    fn value(&mut self, schema: &'a Schema, owner: &str, value: &Value) {
        if value.is_null() {
            // encoding/json leaves the field as it was; apply drops it.
            return;
        }
        let (s, name) = self.doc.resolve(schema);
        if s.int_or_string || s.format.as_deref() == Some("int-or-string") {
            let ok = value.is_string() || value.as_i64().is_some_and(|n| i32::try_from(n).is_ok());
            if !ok {
                self.refuse(owner, Expected::IntOrString, value);
            }
            return;
        }
        if !s.one_of.is_empty() || name == Some("io.k8s.apimachinery.pkg.api.resource.Quantity") {
            let ok = match value {
                Value::Number(_) => true,
                Value::String(text) => is_quantity(text),
                _ => false,
            };
            if !ok {
                self.refuse(owner, Expected::Quantity, value);
            }
            return;
        }
        if s.preserve_unknown_fields
            || name == Some("io.k8s.apimachinery.pkg.runtime.RawExtension")
            || name == Some("io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1")
        {
            return;
        }
        match s.ty.as_deref() {
            Some("string") => match value.as_str() {
                Some(text) if s.format.as_deref() == Some("byte") => {
                    if let Some(at) = base64_error(text) {
                        self.refuse(owner, Expected::Base64 { at }, value);
                    }
                }
                Some(_) => {}
                None => self.refuse(owner, Expected::String, value),
            },
            Some("integer") => {
                let (go, min, max) = integer(s);
                let ok = value.as_i64().is_some_and(|n| n >= min && n <= max);
                if !ok {
                    self.refuse(owner, Expected::Integer { go, min, max }, value);
                }
            }
            Some("number") => {
                if !value.is_number() {
                    self.refuse(owner, Expected::Number, value);
                }
            }
            Some("boolean") => {
                if !value.is_boolean() {
                    self.refuse(owner, Expected::Boolean, value);
                }
            }
            Some("array") => {
                let Some(items) = value.as_array() else {
                    let go = self.go_type(schema);
                    return self.refuse(owner, Expected::List { go }, value);
                };
                let Some(item_schema) = s.items.as_deref() else {
                    return;
                };
                for (i, item) in items.iter().enumerate() {
                    let keys = self.list_keys(s, item_schema, item);
                    self.path.push(Step::Item(i, keys));
                    self.value(item_schema, owner, item);
                    self.path.pop();
                }
            }
            Some("object") => {
                if !value.is_object() {
                    let go = self.go_type(schema);
                    return self.refuse(owner, Expected::Map { go }, value);
                }
                let owner = name.unwrap_or(owner).to_owned();
                self.object(s, &owner, value);
            }
            _ => {}
        }
    }

    /// An object's fields: declared ones against their schema, map entries
    /// against `additionalProperties`, others dropped (refused in apply).
    fn object(&mut self, s: &'a Schema, owner: &str, value: &Value) {
        let Some(map) = value.as_object() else {
            let go = self.go_type(s);
            return self.refuse(owner, Expected::Map { go }, value);
        };
        for (key, field) in map {
            if let Some(prop) = s.properties.get(key) {
                self.path.push(Step::Field(key.clone()));
                self.value(prop, owner, field);
                self.path.pop();
            } else if let Some(entry) = s.additional_properties.as_deref() {
                self.path.push(Step::Key(key.clone()));
                self.value(entry, owner, field);
                self.path.pop();
            } else if self.declared && !s.properties.is_empty() {
                self.path.push(Step::Field(key.clone()));
                self.refuse(owner, Expected::Declared, field);
                self.path.pop();
            }
        }
    }

    /// An associative list item's keys as structured-merge-diff prints
    /// them (`containerPort=80,protocol="TCP"`), defaults filled in.
    fn list_keys(&self, list: &Schema, item_schema: &Schema, item: &Value) -> Option<String> {
        match list.list_type.as_deref() {
            Some("map") if !list.list_map_keys.is_empty() => {
                let (item_schema, _) = self.doc.resolve(item_schema);
                let parts: Vec<String> = list
                    .list_map_keys
                    .iter()
                    .filter_map(|k| {
                        let v = item.get(k).filter(|v| !v.is_null()).cloned().or_else(|| {
                            let prop = item_schema.properties.get(k)?;
                            self.doc
                                .resolve(prop)
                                .0
                                .default
                                .clone()
                                .or(prop.default.clone())
                        })?;
                        Some(format!("{k}={v}"))
                    })
                    .collect();
                Some(parts.join(","))
            }
            Some("set") => Some(format!("={item}")),
            _ => None,
        }
    }
}

/// The Go integer type of an `integer` schema and its range.
fn integer(s: &Schema) -> (&'static str, i64, i64) {
    match s.format.as_deref() {
        Some("int32") => ("int32", i32::MIN.into(), i32::MAX.into()),
        _ => ("int64", i64::MIN, i64::MAX),
    }
}

/// apimachinery's first check of a quantity's text (`ParseQuantity`'s
/// regular expression `^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$`) and
/// its suffixes.
pub fn is_quantity(text: &str) -> bool {
    let text = text.trim();
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    let digits = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(digits);
    if number.is_empty() || number.matches('.').count() > 1 || number == "." {
        return false;
    }
    const SUFFIXES: &[&str] = &[
        "", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E",
    ];
    if SUFFIXES.contains(&suffix) {
        return true;
    }
    // Decimal exponents: `1e3`, `1E-2`.
    let Some(exp) = suffix.strip_prefix(['e', 'E']) else {
        return false;
    };
    let exp = exp.strip_prefix(['+', '-']).unwrap_or(exp);
    !exp.is_empty() && exp.bytes().all(|b| b.is_ascii_digit())
}

/// Where Go's standard base64 decoder stops on `text` (`None`: it decodes).
/// Go reports the offset of the first byte outside the alphabet, or the
/// end for a length or padding error.
fn base64_error(text: &str) -> Option<usize> {
    use base64::Engine;
    if base64::engine::general_purpose::STANDARD
        .decode(text)
        .is_ok()
    {
        return None;
    }
    let bad = text
        .bytes()
        .position(|b| !(b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'='));
    Some(bad.unwrap_or_else(|| {
        let body = text.trim_end_matches('=');
        body.len() - body.len() % 4
    }))
}
