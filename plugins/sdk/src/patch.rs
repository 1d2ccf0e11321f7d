//! RFC 6902 JSON patches and RFC 6901 JSON pointers.
//!
//! ```
//! use kubewasm_sdk::patch::{JsonPatch, pointer};
//! let p = JsonPatch::new()
//!     .test("/metadata/resourceVersion", "42")
//!     .add(&pointer(["metadata", "annotations", "example.com/owner"]), "me")
//!     .remove("/metadata/labels/stale");
//! assert_eq!(
//!     p.to_string(),
//!     r#"[{"op":"test","path":"/metadata/resourceVersion","value":"42"},{"op":"add","path":"/metadata/annotations/example.com~1owner","value":"me"},{"op":"remove","path":"/metadata/labels/stale"}]"#
//! );
//! ```

use std::fmt;

use serde_json::{Map, Value};

/// Escapes one reference token of a JSON pointer: `~` becomes `~0`, `/`
/// becomes `~1` (`example.com/zone` → `example.com~1zone`).
pub fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// A JSON pointer from unescaped segments:
/// `pointer(["metadata", "labels", "app.kubernetes.io/name"])` is
/// `/metadata/labels/app.kubernetes.io~1name`; no segments is `""` (the
/// whole document).
pub fn pointer<S: AsRef<str>>(segments: impl IntoIterator<Item = S>) -> String {
    segments.into_iter().fold(String::new(), |mut p, s| {
        p.push('/');
        p.push_str(&escape(s.as_ref()));
        p
    })
}

/// An RFC 6902 JSON patch: a list of operations applied in order, all or
/// nothing. Paths are JSON pointers, already escaped (build them with
/// [`pointer()`] when a segment may hold `/` or `~`); `-` as the last segment
/// of an `add` appends to an array.
///
/// Send it with [`actions::patch_json`](crate::actions::patch_json).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JsonPatch {
    ops: Vec<Value>,
}

impl JsonPatch {
    /// No operations yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn op(mut self, op: &str, path: &str, value: Option<Value>) -> Self {
        let mut map = Map::new();
        map.insert("op".to_owned(), Value::from(op));
        map.insert("path".to_owned(), Value::from(path));
        if let Some(value) = value {
            map.insert("value".to_owned(), value);
        }
        self.ops.push(Value::Object(map));
        self
    }

    /// `add`: sets `path` (creating an object member, or inserting into an
    /// array at that index, `-` appending).
    pub fn add(self, path: &str, value: impl Into<Value>) -> Self {
        self.op("add", path, Some(value.into()))
    }

    /// `remove`: deletes `path`, which must exist.
    pub fn remove(self, path: &str) -> Self {
        self.op("remove", path, None)
    }

    /// `replace`: sets `path`, which must exist.
    pub fn replace(self, path: &str, value: impl Into<Value>) -> Self {
        self.op("replace", path, Some(value.into()))
    }

    /// `test`: the whole patch fails unless `path` equals `value`.
    pub fn test(self, path: &str, value: impl Into<Value>) -> Self {
        self.op("test", path, Some(value.into()))
    }

    /// Whether there are no operations.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// How many operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// The operations, as JSON objects (`{"op", "path", "value"?}`).
    pub fn ops(&self) -> &[Value] {
        &self.ops
    }

    /// The patch as a JSON array.
    pub fn to_value(&self) -> Value {
        Value::Array(self.ops.clone())
    }
}

impl From<JsonPatch> for Value {
    fn from(patch: JsonPatch) -> Self {
        Value::Array(patch.ops)
    }
}

impl fmt::Display for JsonPatch {
    /// The compact JSON text (what is sent).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, op) in self.ops.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{op}")?;
        }
        f.write_str("]")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn escaping() {
        assert_eq!(escape("a/b~c"), "a~1b~0c");
        assert_eq!(escape("~1"), "~01");
        assert_eq!(
            pointer(["metadata", "annotations", "k/v"]),
            "/metadata/annotations/k~1v"
        );
        assert_eq!(pointer(Vec::<String>::new()), "");
        assert_eq!(pointer([""]), "/");
    }

    #[test]
    fn ops_in_order() {
        let p = JsonPatch::new()
            .add("/a/-", 1)
            .replace("/b", json!({"c": [true]}))
            .remove("/d")
            .test("/e", Value::Null);
        assert_eq!(p.len(), 4);
        assert!(!p.is_empty() && JsonPatch::new().is_empty());
        let expected = json!([
            {"op": "add", "path": "/a/-", "value": 1},
            {"op": "replace", "path": "/b", "value": {"c": [true]}},
            {"op": "remove", "path": "/d"},
            {"op": "test", "path": "/e", "value": null},
        ]);
        assert_eq!(p.to_value(), expected);
        assert_eq!(p.to_string(), expected.to_string());
        assert_eq!(Value::from(p), expected);
        assert_eq!(JsonPatch::new().to_string(), "[]");
    }
}
