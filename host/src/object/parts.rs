//! One object's JSON text split into its members inside the one
//! deserialisation of the watch event or list that carries it.
//!
//! Why: the object used to be scanned three times (serde_json checking the
//! raw value, a metadata read for kube's watcher, then a walk of every
//! member to build the cache's text). Here serde_json's own pass hands over
//! each top-level member's text, and each metadata member's, appended to one
//! buffer (no allocation per member); the cache's form is then put together
//! by copying spans ([`super::KObject::from_parts`]) and decoding only the
//! few metadata scalars it keeps.

use std::fmt;
use std::ops::Range;

use serde::de::{DeserializeSeed, Error as _, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// serde_json's (stable, if unexported) name for raw values: asked for a
/// newtype struct of this name, its deserializer hands over the value's
/// text, checked but not decoded.
const RAW_TOKEN: &str = "$serde_json::private::RawValue";

/// The top-level members the cache reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Top {
    ApiVersion,
    Kind,
    Metadata,
}

const TOP: [(&str, Top); 3] = [
    ("apiVersion", Top::ApiVersion),
    ("kind", Top::Kind),
    ("metadata", Top::Metadata),
];

/// The metadata members the cache decodes or treats apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Name,
    Namespace,
    Uid,
    ResourceVersion,
    Generation,
    OwnerReferences,
    CreationTimestamp,
    DeletionTimestamp,
    Labels,
    Annotations,
    ManagedFields,
}

const FIELDS: [(&str, Field); 11] = [
    ("name", Field::Name),
    ("namespace", Field::Namespace),
    ("uid", Field::Uid),
    ("resourceVersion", Field::ResourceVersion),
    ("generation", Field::Generation),
    ("ownerReferences", Field::OwnerReferences),
    ("creationTimestamp", Field::CreationTimestamp),
    ("deletionTimestamp", Field::DeletionTimestamp),
    ("labels", Field::Labels),
    ("annotations", Field::Annotations),
    ("managedFields", Field::ManagedFields),
];

/// One member: its key as JSON text (quoted) and its value's text, spans
/// of [`ObjectParts::buf`], and what it is when the cache cares.
#[derive(Debug, Clone)]
pub(super) struct Member<T> {
    key: Range<u32>,
    value: Range<u32>,
    pub(super) tag: Option<T>,
}

/// An object's members, in the text's order. Metadata's members are
/// split too when `metadata` is a JSON object.
#[derive(Debug, Clone, Default)]
pub struct ObjectParts {
    buf: String,
    top: Vec<Member<Top>>,
    meta: Vec<Member<Field>>,
    /// Where `metadata` is in `top`.
    metadata_at: Option<usize>,
}

impl ObjectParts {
    /// The text a span names.
    pub(super) fn text(&self, span: &Range<u32>) -> &str {
        self.buf
            .get(span.start as usize..span.end as usize)
            .unwrap_or_default()
    }

    pub(super) fn top(&self) -> impl Iterator<Item = (&str, &str, Option<Top>)> {
        self.top
            .iter()
            .map(|m| (self.text(&m.key), self.text(&m.value), m.tag))
    }

    pub(super) fn meta(&self) -> impl Iterator<Item = (&str, &str, Option<Field>)> {
        self.meta
            .iter()
            .map(|m| (self.text(&m.key), self.text(&m.value), m.tag))
    }

    pub(super) fn has_metadata(&self) -> bool {
        self.metadata_at.is_some()
    }

    /// The text of a top-level member the cache reads.
    pub(super) fn top_value(&self, which: Top) -> Option<&str> {
        self.top
            .iter()
            .find(|m| m.tag == Some(which))
            .map(|m| self.text(&m.value))
    }

    /// The text of a metadata member.
    pub fn meta_value(&self, which: Field) -> Option<&str> {
        self.meta
            .iter()
            .find(|m| m.tag == Some(which))
            .map(|m| self.text(&m.value))
    }

    /// A metadata string member: `Ok(None)` when absent or `null`.
    pub fn meta_str(&self, which: Field) -> Result<Option<String>, serde_json::Error> {
        self.meta_value(which).map_or(Ok(None), decode_str)
    }

    /// Bytes of text held (the cost of having split it).
    pub fn text_len(&self) -> usize {
        self.buf.len()
    }
}

/// A JSON string's value, or `None` for `null`; plain strings (no
/// escapes, as names and versions are) without serde.
pub(super) fn decode_str(raw: &str) -> Result<Option<String>, serde_json::Error> {
    if let Some(inner) = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"'))
        && !inner.contains(['\\', '"'])
        && !inner.bytes().any(|b| b < 0x20)
    {
        return Ok(Some(inner.to_owned()));
    }
    serde_json::from_str(raw)
}

impl<'de> Deserialize<'de> for ObjectParts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(TopVisitor)
    }
}

struct TopVisitor;

impl<'de> Visitor<'de> for TopVisitor {
    type Value = ObjectParts;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an API object (a JSON object)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ObjectParts, A::Error> {
        let mut parts = ObjectParts {
            buf: String::with_capacity(map.size_hint().unwrap_or(0) * 64 + 1024),
            ..ObjectParts::default()
        };
        while let Some((key, tag)) = map.next_key_seed(KeySeed {
            buf: &mut parts.buf,
            names: &TOP,
            comma: false,
        })? {
            if tag == Some(Top::Metadata) {
                if parts.metadata_at.is_some() {
                    return Err(A::Error::duplicate_field("metadata"));
                }
                let start = offset(&parts.buf)?;
                let meta = map.next_value_seed(MetaSeed {
                    buf: &mut parts.buf,
                })?;
                let value = start..offset(&parts.buf)?;
                parts.meta = meta;
                parts.metadata_at = Some(parts.top.len());
                parts.top.push(Member { key, value, tag });
                continue;
            }
            if tag.is_some() && parts.top.iter().any(|m| m.tag == tag) {
                let name = TOP
                    .iter()
                    .find(|(_, t)| Some(*t) == tag)
                    .map_or("", |n| n.0);
                return Err(A::Error::duplicate_field(name));
            }
            let value = map.next_value_seed(RawSeed {
                buf: &mut parts.buf,
            })?;
            parts.top.push(Member { key, value, tag });
        }
        Ok(parts)
    }
}

/// The metadata object, its members appended to the buffer one by one
/// (written as `{"k":v,...}` so the span of the whole is its text too).
struct MetaSeed<'b> {
    buf: &'b mut String,
}

impl<'de> DeserializeSeed<'de> for MetaSeed<'_> {
    type Value = Vec<Member<Field>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for MetaSeed<'_> {
    type Value = Vec<Member<Field>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("object metadata as a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members: Vec<Member<Field>> = Vec::with_capacity(12);
        self.buf.push('{');
        while let Some((key, tag)) = map.next_key_seed(KeySeed {
            buf: self.buf,
            names: &FIELDS,
            comma: !members.is_empty(),
        })? {
            if let Some(t) = tag
                && members.iter().any(|m| m.tag == Some(t))
            {
                let name = FIELDS.iter().find(|(_, f)| *f == t).map_or("", |n| n.0);
                return Err(A::Error::custom(format!(
                    "object metadata: duplicate field `{name}`"
                )));
            }
            self.buf.push(':');
            let value = map.next_value_seed(RawSeed { buf: self.buf })?;
            members.push(Member { key, value, tag });
        }
        self.buf.push('}');
        Ok(members)
    }
}

/// A member's key: written to the buffer as JSON text (after a comma when
/// it is not the first), told apart by name.
struct KeySeed<'b, T: 'static> {
    buf: &'b mut String,
    names: &'static [(&'static str, T)],
    comma: bool,
}

impl<'de, T: Copy> DeserializeSeed<'de> for KeySeed<'_, T> {
    type Value = (Range<u32>, Option<T>);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, T: Copy> Visitor<'de> for KeySeed<'_, T> {
    type Value = (Range<u32>, Option<T>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<Self::Value, E> {
        if self.comma {
            self.buf.push(',');
        }
        let start = offset(self.buf)?;
        if key.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
            self.buf.push('"');
            self.buf.push_str(key);
            self.buf.push('"');
        } else {
            let quoted = serde_json::to_string(key).map_err(E::custom)?;
            self.buf.push_str(&quoted);
        }
        let tag = self.names.iter().find(|(n, _)| *n == key).map(|(_, t)| *t);
        Ok((start..offset(self.buf)?, tag))
    }
}

/// A value's text appended to the buffer: serde_json's raw text, or, when
/// serde has buffered the value (a watch event whose `object` comes before
/// its `type`; the API server writes `type` first), the buffered value
/// written again.
struct RawSeed<'b> {
    buf: &'b mut String,
}

impl<'de> DeserializeSeed<'de> for RawSeed<'_> {
    type Value = Range<u32>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_newtype_struct(RAW_TOKEN, self)
    }
}

impl<'de> Visitor<'de> for RawSeed<'_> {
    type Value = Range<u32>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        if map.next_key_seed(IsRawToken)? != Some(true) {
            return Err(A::Error::custom(
                "expected serde_json's raw value (serde_json changed how it passes raw values?)",
            ));
        }
        let start = offset(self.buf)?;
        map.next_value_seed(AppendStr { buf: self.buf })?;
        Ok(start..offset(self.buf)?)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        let start = offset(self.buf)?;
        let text = serde_json::to_string(&value).map_err(D::Error::custom)?;
        self.buf.push_str(&text);
        Ok(start..offset(self.buf)?)
    }
}

/// Whether a key is serde_json's raw-value token, read without a copy.
struct IsRawToken;

impl<'de> DeserializeSeed<'de> for IsRawToken {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for IsRawToken {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("serde_json's raw value token")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<bool, E> {
        Ok(key == RAW_TOKEN)
    }
}

/// A string appended to the buffer (the raw text serde_json lends).
struct AppendStr<'b> {
    buf: &'b mut String,
}

impl<'de> DeserializeSeed<'de> for AppendStr<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for AppendStr<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value's text")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<(), E> {
        self.buf.push_str(text);
        Ok(())
    }
}

/// The buffer's length as a span offset: objects are far below 4 GiB (the
/// API server refuses requests over 3 MiB), so this fails only on garbage.
fn offset<E: serde::de::Error>(buf: &str) -> Result<u32, E> {
    u32::try_from(buf.len()).map_err(|_| E::custom("object text over 4 GiB"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::{KObject, StripOptions};

    const KEEP: StripOptions = StripOptions {
        managed_fields: false,
        last_applied: false,
    };

    #[test]
    fn the_members_are_copied_in_order_as_the_server_wrote_them() {
        // Whitespace between members goes; inside values it stays (the
        // value's text is the server's). Escaped keys are written escaped.
        let text = "{ \"kind\" : \"Pod\", \"apiVersion\":\"v1\",\n \"metadata\": {\"name\":\"a\", \"x\\\"y\": [1, 2],\"managedFields\":[{}]}, \"spec\": {\"a\": 1} }";
        let parts: ObjectParts = serde_json::from_str(text).unwrap();
        let o = KObject::from_parts(&parts, None, KEEP).unwrap();
        assert_eq!(
            o.json(),
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","x\"y":[1, 2],"managedFields":[{}]},"spec":{"a": 1}}"#
        );
        let o = KObject::from_parts(&parts, None, StripOptions::default()).unwrap();
        assert_eq!(
            o.json(),
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","x\"y":[1, 2]},"spec":{"a": 1}}"#
        );
        // The metadata's span is its own text.
        assert_eq!(
            parts.top_value(Top::Metadata),
            Some(r#"{"name":"a","x\"y":[1, 2],"managedFields":[{}]}"#)
        );
    }

    #[test]
    fn a_buffered_object_is_written_again_from_the_buffer() {
        // `object` before `type`: serde buffers the object, so its members
        // come from serde's copy, not serde_json's raw text.
        let ev: kube::core::WatchEvent<ObjectParts> = serde_json::from_str(
            r#"{"object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"q","labels":{"a":"b"}},"spec":{"n":1.5}},"type":"MODIFIED"}"#,
        )
        .unwrap();
        let kube::core::WatchEvent::Modified(parts) = ev else {
            panic!("not a Modified event")
        };
        let o = KObject::from_parts(&parts, None, KEEP).unwrap();
        assert_eq!(
            o.json(),
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"q","labels":{"a":"b"}},"spec":{"n":1.5}}"#
        );
        assert_eq!(o.label("a"), Some("b"));
    }

    #[test]
    fn a_field_the_cache_reads_twice_is_refused() {
        for (text, want) in [
            (
                r#"{"metadata":{"name":"a","name":"b"}}"#,
                "duplicate field `name`",
            ),
            (
                r#"{"kind":"A","kind":"B","metadata":{"name":"a"}}"#,
                "duplicate field `kind`",
            ),
            (
                r#"{"metadata":{"name":"a"},"metadata":{"name":"b"}}"#,
                "duplicate field `metadata`",
            ),
        ] {
            let err = serde_json::from_str::<ObjectParts>(text)
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
        // Members the cache does not read may repeat, as the text has them.
        let parts: ObjectParts =
            serde_json::from_str(r#"{"metadata":{"name":"a","x":1,"x":2},"y":1,"y":2}"#).unwrap();
        let o = KObject::from_parts(&parts, Some(("v1", "X")), KEEP).unwrap();
        assert_eq!(
            o.json(),
            r#"{"apiVersion":"v1","kind":"X","metadata":{"name":"a","x":1,"x":2},"y":1,"y":2}"#
        );
    }

    #[test]
    fn scalars_decode_plain_and_escaped() {
        assert_eq!(decode_str(r#""abc""#).unwrap().as_deref(), Some("abc"));
        assert_eq!(decode_str(r#""a\"b""#).unwrap().as_deref(), Some("a\"b"));
        assert_eq!(decode_str(r#""\u00e9""#).unwrap().as_deref(), Some("é"));
        assert_eq!(decode_str("null").unwrap(), None);
        assert!(decode_str("7").is_err());
    }
}
