//! Field paths as server-side apply tracks them (structured-merge-diff's
//! `fieldpath`): a path's steps are a map key (`f:name`), a `map` list's
//! element by its key values (`k:{"name":"c"}`) or a `set` list's element
//! by its value (`v:"x"`); atomic lists and maps are one leaf. A manager
//! owns a set of paths, kept in `metadata.managedFields` as `fieldsV1`.
//!
//! Which lists and maps are granular comes from the kind's OpenAPI schema
//! ([`crate::openapi::schema`]: `x-kubernetes-list-type`,
//! `x-kubernetes-list-map-keys`, `x-kubernetes-map-type`); a custom
//! resource's from its CRD's schema when the registry learned the CRD, its
//! `metadata` always an ObjectMeta; what no schema types (no CRD, or
//! `x-kubernetes-preserve-unknown-fields`) is typed by its values as the
//! server deduces an untyped object: maps granular, lists atomic.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::kind::Gvk;
use crate::openapi::schema::{self, Document, Schema};

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    /// A map's key or a struct's field.
    Field(String),
    /// A `map` list's element: its key fields and values, as JSON with
    /// the fields sorted (the server's `k:` text).
    Key(String),
    /// A `set` list's element: its value as JSON (the server's `v:`).
    Value(String),
}

pub type Path = Vec<Step>;
pub type Set = BTreeSet<Path>;

/// What a value at some place of the schema is, for merging and owning.
#[derive(Debug, Clone, Copy)]
pub enum Shape<'a> {
    /// A scalar, or a value that does not fit its schema: one leaf.
    Scalar,
    /// An atomic list or map: one leaf, replaced whole.
    Atomic,
    /// A granular map or struct: each key on its own.
    Map,
    /// A `set` list: each value on its own.
    Set,
    /// A `map` list: each element on its own, by these key fields.
    MapList(&'a [String]),
}

/// A place in a kind's schema; `schema: None` is an untyped value.
#[derive(Debug, Clone, Copy)]
pub struct Ty<'a> {
    doc: Option<&'a Document>,
    schema: Option<&'a Schema>,
    /// A built-in kind's, stored as Go structs: an emptied map or list
    /// goes (`omitempty`); a custom resource keeps it.
    go: bool,
    /// The top of a custom resource: its `metadata` is an ObjectMeta
    /// whatever its CRD's schema says.
    crd_root: bool,
}

impl Ty<'static> {
    /// The top of built-in `gvk`'s schema; `None` for kinds the release
    /// does not build in.
    pub fn builtin(gvk: &Gvk) -> Option<Self> {
        let (doc, _, s) = schema::lookup(gvk)?;
        Some(Ty {
            doc: Some(doc),
            schema: Some(s),
            go: true,
            crd_root: false,
        })
    }

    /// The top of `gvk`'s schema, untyped for kinds the release does not
    /// build in.
    pub fn of(gvk: &Gvk) -> Self {
        Ty::builtin(gvk).unwrap_or(Ty::UNTYPED)
    }

    const UNTYPED: Ty<'static> = Ty {
        doc: None,
        schema: None,
        go: false,
        crd_root: false,
    };

    /// A custom resource's ObjectMeta, typed as the built-in one.
    fn object_meta() -> Ty<'static> {
        let Some(doc) = schema::document("", "v1") else {
            return Ty::UNTYPED;
        };
        Ty {
            doc: Some(doc),
            schema: doc.component("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"),
            go: false,
            crd_root: false,
        }
    }
}

/// A CRD's `openAPIV3Schema` as a [`Schema`] (a boolean
/// `additionalProperties` read as an untyped map or none); `None` when
/// it does not read.
pub fn crd_schema(v: &Value) -> Option<Schema> {
    fn booleans_out(v: &mut Value) {
        match v {
            Value::Object(o) => {
                match o.get("additionalProperties") {
                    Some(Value::Bool(true)) => {
                        o.insert("additionalProperties".into(), Value::Object(Map::new()));
                    }
                    Some(Value::Bool(false)) => {
                        o.remove("additionalProperties");
                    }
                    _ => {}
                }
                o.values_mut().for_each(booleans_out);
            }
            Value::Array(a) => a.iter_mut().for_each(booleans_out),
            _ => {}
        }
    }
    let mut v = v.clone();
    booleans_out(&mut v);
    serde_json::from_value(v).ok()
}

impl<'a> Ty<'a> {
    /// The top of a custom resource whose CRD declares `schema` (`None`:
    /// untyped): maps and structs granular, lists atomic unless marked.
    pub fn custom(schema: Option<&'a Schema>) -> Ty<'a> {
        Ty {
            doc: None,
            schema,
            go: false,
            crd_root: true,
        }
    }

    fn resolved(&self) -> Option<&'a Schema> {
        let s = self.schema?;
        Some(match self.doc {
            Some(d) => d.resolve(s).0,
            None => s,
        })
    }

    fn with(&self, schema: Option<&'a Schema>) -> Ty<'a> {
        match schema {
            Some(s) => Ty {
                doc: self.doc,
                schema: Some(s),
                go: self.go,
                crd_root: false,
            },
            None => Ty::UNTYPED,
        }
    }

    /// The type of `key` in this map, and whether it is a declared field
    /// of a struct (the server tracks a declared field that has children
    /// by its children only).
    pub fn field(&self, key: &str) -> (Ty<'a>, bool) {
        if self.crd_root && key == "metadata" {
            return (Ty::object_meta(), true);
        }
        let Some(s) = self.resolved() else {
            return (Ty::UNTYPED, false);
        };
        if let Some(p) = s.properties.get(key) {
            return (self.with(Some(p)), true);
        }
        (self.with(s.additional_properties.as_deref()), false)
    }

    /// The type of this list's elements.
    pub fn item(&self) -> Ty<'a> {
        self.with(self.resolved().and_then(|s| s.items.as_deref()))
    }

    /// Whether an emptied `value` of this type goes when stored: a typed
    /// list or map (Go's `omitempty` slices and maps), not a struct.
    pub fn drops_when_empty(&self, value: &Value) -> bool {
        let Some(s) = self.resolved().filter(|_| self.go) else {
            return false;
        };
        match value {
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => o.is_empty() && s.properties.is_empty(),
            _ => false,
        }
    }

    /// What `value` is at this place. A list whose elements cannot be
    /// told apart (a key missing, two alike) counts as atomic.
    pub fn shape(&self, value: &Value) -> Shape<'a> {
        let Some(s) = self.resolved() else {
            return untyped(value);
        };
        if s.int_or_string {
            return Shape::Scalar;
        }
        if s.items.is_some() || s.ty.as_deref() == Some("array") {
            let Value::Array(items) = value else {
                return Shape::Scalar;
            };
            let shape = match s.list_type.as_deref() {
                Some("set") => Shape::Set,
                Some("map") if !s.list_map_keys.is_empty() => Shape::MapList(&s.list_map_keys),
                _ => Shape::Atomic,
            };
            return match self.steps(shape, items) {
                Some(_) => shape,
                None => Shape::Atomic,
            };
        }
        if !s.properties.is_empty() || s.additional_properties.is_some() {
            return match (value, s.map_type.as_deref()) {
                (Value::Object(_), Some("atomic")) => Shape::Atomic,
                (Value::Object(_), _) => Shape::Map,
                _ => Shape::Scalar,
            };
        }
        if s.ty.is_none() || s.ty.as_deref() == Some("object") || s.preserve_unknown_fields {
            return untyped(value);
        }
        Shape::Scalar
    }

    /// The step of each element of a list of `shape`, `None` when two are
    /// alike or one has no key (the server refuses such an apply; here the
    /// list is then atomic).
    pub fn steps(&self, shape: Shape<'a>, items: &[Value]) -> Option<Vec<Step>> {
        let item = self.item();
        let mut seen = BTreeSet::new();
        let mut out = Vec::with_capacity(items.len());
        for v in items {
            let step = match shape {
                Shape::Set => Step::Value(v.to_string()),
                Shape::MapList(keys) => item.key_step(keys, v)?,
                _ => return Some(Vec::new()),
            };
            if !seen.insert(step.clone()) {
                return None;
            }
            out.push(step);
        }
        Some(out)
    }

    /// A `map` list element's step: its key fields' values, a missing one
    /// taken from the schema's default (as the server does for `protocol`).
    fn key_step(&self, keys: &[String], element: &Value) -> Option<Step> {
        let mut values = BTreeMap::new();
        for k in keys {
            let v = match element.get(k) {
                Some(v) => v.clone(),
                None => self.field(k).0.resolved()?.default.clone()?,
            };
            values.insert(k.as_str(), v);
        }
        serde_json::to_string(&values).ok().map(Step::Key)
    }
}

/// An untyped value as the server deduces it: objects are granular maps,
/// lists atomic.
fn untyped(value: &Value) -> Shape<'static> {
    match value {
        Value::Object(_) => Shape::Map,
        Value::Array(_) => Shape::Atomic,
        _ => Shape::Scalar,
    }
}

/// The paths `value` sets, each with its value when it is a leaf (`None`:
/// an element or undeclared key that has children too), as the server's
/// `ToFieldSet`: a declared struct field with children is not itself a
/// member, a map key or list element is.
pub fn fields(ty: Ty<'_>, value: &Value) -> BTreeMap<Path, Option<Value>> {
    let mut out = BTreeMap::new();
    walk(ty, value, &mut Vec::new(), &mut out);
    out
}

fn walk(ty: Ty<'_>, value: &Value, path: &mut Path, out: &mut BTreeMap<Path, Option<Value>>) {
    match (ty.shape(value), value) {
        (Shape::Map, Value::Object(map)) => {
            for (k, v) in map {
                let (child, declared) = ty.field(k);
                path.push(Step::Field(k.clone()));
                walk(child, v, path, out);
                if v.is_null() || v.as_object().is_some_and(Map::is_empty) {
                    out.insert(path.clone(), Some(v.clone()));
                } else if !declared {
                    out.entry(path.clone()).or_insert(None);
                }
                path.pop();
            }
        }
        (shape @ (Shape::Set | Shape::MapList(_)), Value::Array(items)) => {
            let steps = ty.steps(shape, items).unwrap_or_default();
            let item = ty.item();
            for (step, v) in steps.into_iter().zip(items) {
                path.push(step);
                walk(item, v, path, out);
                out.entry(path.clone()).or_insert(None);
                path.pop();
            }
        }
        _ => {
            if !path.is_empty() {
                out.insert(path.clone(), Some(value.clone()));
            }
        }
    }
}

/// The paths no manager owns, whatever a body says (the server's
/// `stripMeta`): the object's identity and what the server sets.
const STRIPPED: &[&[&str]] = &[
    &["apiVersion"],
    &["kind"],
    &["metadata"],
    &["metadata", "name"],
    &["metadata", "namespace"],
    &["metadata", "creationTimestamp"],
    &["metadata", "selfLink"],
    &["metadata", "uid"],
    &["metadata", "clusterName"],
    &["metadata", "generation"],
    &["metadata", "managedFields"],
    &["metadata", "resourceVersion"],
];

/// `set` without the paths no manager owns.
pub fn strip(mut set: Set) -> Set {
    for p in STRIPPED {
        set.remove(&field_path(p));
    }
    set
}

/// A path of map keys.
pub fn field_path(keys: &[&str]) -> Path {
    keys.iter().map(|k| Step::Field((*k).to_string())).collect()
}

/// `set` with the struct fields above its paths as members too (the
/// server's `EnsureNamedFieldsAreMembers`), so that a parent some manager
/// still has something under is not pruned.
pub fn with_parents(set: &Set) -> Set {
    let mut out = set.clone();
    for p in set {
        for end in 1..p.len() {
            if matches!(p[end - 1], Step::Field(_)) {
                out.insert(p[..end].to_vec());
            }
        }
    }
    out
}

/// A step as `fieldsV1` spells it.
fn step_text(step: &Step) -> String {
    match step {
        Step::Field(f) => format!("f:{f}"),
        Step::Key(k) => format!("k:{k}"),
        Step::Value(v) => format!("v:{v}"),
    }
}

/// A `fieldsV1` key as a step (keys and values made canonical); `None`
/// for what this simulation never writes (`i:` list indexes).
fn step_of(text: &str) -> Option<Step> {
    let (kind, rest) = text.split_at_checked(2)?;
    match kind {
        "f:" => Some(Step::Field(rest.to_string())),
        "k:" => {
            let keys: BTreeMap<String, Value> = serde_json::from_str(rest).ok()?;
            serde_json::to_string(&keys).ok().map(Step::Key)
        }
        "v:" => {
            let v: Value = serde_json::from_str(rest).ok()?;
            Some(Step::Value(v.to_string()))
        }
        _ => None,
    }
}

/// `set` in the server's `fieldsV1` form: a path's steps nested, `{}` for
/// a member without children, `".": {}` for one with.
pub fn to_fields_v1(set: &Set) -> Value {
    #[derive(Default)]
    struct Node {
        member: bool,
        children: BTreeMap<String, Node>,
    }
    fn render(n: &Node) -> Value {
        let mut m = Map::new();
        if n.member && !n.children.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        for (k, c) in &n.children {
            m.insert(k.clone(), render(c));
        }
        Value::Object(m)
    }
    let mut root = Node::default();
    for path in set {
        let mut node = &mut root;
        for step in path {
            node = node.children.entry(step_text(step)).or_default();
        }
        node.member = true;
    }
    render(&root)
}

/// The set a `fieldsV1` value spells.
pub fn from_fields_v1(v: &Value) -> Set {
    fn read(v: &Value, path: &mut Path, out: &mut Set) {
        let Some(o) = v.as_object() else {
            return;
        };
        if o.is_empty() && !path.is_empty() {
            out.insert(path.clone());
        }
        for (k, child) in o {
            if k == "." {
                if !path.is_empty() {
                    out.insert(path.clone());
                }
                continue;
            }
            let Some(step) = step_of(k) else {
                continue;
            };
            path.push(step);
            read(child, path, out);
            path.pop();
        }
    }
    let mut out = Set::new();
    read(v, &mut Vec::new(), &mut out);
    out
}

/// A path as the server's conflict message spells it
/// (`.spec.containers[name="c"].image`).
pub fn path_text(path: &Path) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Field(f) => {
                out.push('.');
                out.push_str(f);
            }
            Step::Key(k) => {
                let keys: BTreeMap<String, Value> = serde_json::from_str(k).unwrap_or_default();
                let inner: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
                out.push_str(&format!("[{}]", inner.join(",")));
            }
            Step::Value(v) => out.push_str(&format!("[={v}]")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn a_pods_field_set_reads_its_schema_and_round_trips_through_fields_v1() {
        let ty = Ty::of(&Gvk::new("", "v1", "Pod"));
        let pod = json!({"metadata": {"labels": {"a": "b"}, "finalizers": ["x"]},
            "spec": {"containers": [{"name": "c", "args": ["1"], "ports": [{"containerPort": 80}]}]}});
        let set: Set = strip(fields(ty, &pod).into_keys().collect());
        let v1 = to_fields_v1(&set);
        // The port's protocol is its schema's default; the args an atomic
        // leaf; the finalizers a set; the labels a map.
        assert_eq!(
            v1,
            json!({"f:metadata": {"f:finalizers": {"v:\"x\"": {}}, "f:labels": {"f:a": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:args": {}, "f:name": {},
                    "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}}}}})
        );
        assert_eq!(from_fields_v1(&v1), set);
        // An untyped custom resource: every key a member, lists atomic,
        // its metadata an ObjectMeta all the same.
        let untyped = fields(
            Ty::custom(None),
            &json!({"metadata": {"finalizers": ["x"]}, "spec": {"a": {"b": 1}, "l": [1]}}),
        );
        let keys: Vec<String> = untyped.keys().map(path_text).collect();
        assert_eq!(
            keys,
            [
                ".metadata.finalizers[=\"x\"]",
                ".spec",
                ".spec.a",
                ".spec.a.b",
                ".spec.l"
            ]
        );
        // One whose CRD marks a map list: by its keys.
        let crd = crd_schema(
            &json!({"type": "object", "properties": {"spec": {"type": "object",
            "additionalProperties": false,
            "properties": {"rules": {"type": "array", "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["id"],
                "items": {"type": "object", "additionalProperties": true}}}}}}),
        )
        .unwrap();
        let typed = fields(
            Ty::custom(Some(&crd)),
            &json!({"spec": {"rules": [{"id": "r", "x": 1}]}}),
        );
        let keys: Vec<String> = typed.keys().map(path_text).collect();
        assert_eq!(
            keys,
            [
                ".spec.rules[id=\"r\"]",
                ".spec.rules[id=\"r\"].id",
                ".spec.rules[id=\"r\"].x"
            ]
        );
    }
}
