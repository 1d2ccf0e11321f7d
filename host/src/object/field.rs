//! Field reads: a lazy JSON-pointer scan of the object's text.

use std::borrow::Cow;

use serde_json::Value;

use super::KObject;

impl KObject {
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
    /// take more than `budget` bytes: what the read builds per pointer
    /// (its parsed segments, the walk's slot, the value's slot), counted
    /// before any of it is built, or the values found. A guest asking for
    /// the whole object, or for a pointer of 128 empty segments, a million
    /// times must not make the host build it a million times.
    pub fn fields_within<S: AsRef<str>>(
        &self,
        pointers: &[S],
        budget: usize,
    ) -> Result<Vec<Option<FieldValue>>, usize> {
        use std::mem::size_of;
        const PER_POINTER: usize = size_of::<Vec<Cow<'_, str>>>()
            + size_of::<bool>()
            + size_of::<Option<&str>>()
            + size_of::<usize>()
            + size_of::<Option<FieldValue>>();
        let building = pointers
            .iter()
            .map(|p| {
                let p = p.as_ref();
                // Segments borrow from the pointer unless an escape is unescaped.
                let copied = if p.contains('~') { p.len() } else { 0 };
                crate::pointer::segment_count(p)
                    .min(crate::pointer::MAX_SEGMENTS)
                    .saturating_mul(size_of::<Cow<'_, str>>())
                    .saturating_add(copied)
                    .saturating_add(PER_POINTER)
            })
            .fold(0usize, usize::saturating_add);
        if building > budget {
            return Err(building);
        }
        let mut valid = Vec::with_capacity(pointers.len());
        let is_pointer: Vec<bool> = pointers
            .iter()
            .map(|p| {
                crate::pointer::segments_borrowed(p.as_ref())
                    .map(|segments| valid.push(segments))
                    .is_some()
            })
            .collect();
        let found = crate::pointer::raw_at_many(&self.json, &valid);
        drop(valid);
        let bytes = found
            .iter()
            .flatten()
            .fold(0usize, |sum, raw| sum.saturating_add(raw.len()));
        if bytes > budget {
            return Err(bytes);
        }
        let mut found = found.into_iter();
        Ok(is_pointer
            .iter()
            .map(|&ok| {
                if !ok {
                    return None;
                }
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

pub(super) fn raw_at<'a>(json: &'a str, pointer: &str) -> Option<Cow<'a, str>> {
    let segs = crate::pointer::segments_borrowed(pointer)?;
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
