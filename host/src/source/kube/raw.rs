//! The watched object as kube's watcher carries it: the server's JSON text,
//! kept as text, and the four metadata fields the watcher itself reads.
//! Decoding a watch event into a `DynamicObject` built a tree of the whole
//! object (managedFields included) that the informer then turned back into
//! text; this decodes each object once, into the cache's compact form.

use std::borrow::Cow;

use kube::core::{ApiResource, DynamicResourceScope, ObjectMeta, Resource};
use serde::de::{Error as _, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::object::ObjectKey;

/// One object of a watch event or list, as text.
#[derive(Debug, Clone)]
pub struct RawObject {
    /// name, namespace, uid and resourceVersion only: what kube's watcher
    /// and its error messages use.
    meta: ObjectMeta,
    text: String,
    /// `metadata.namespace` is there but not a string: the object's key
    /// is unknown, not namespace-less.
    namespace_unreadable: bool,
}

impl RawObject {
    /// The object's JSON text as the server sent it.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Namespace and name, read from the metadata alone: what still names
    /// an object that does not decode whole. `None` when the name is
    /// missing or unreadable, or the namespace unreadable.
    pub fn key(&self) -> Option<ObjectKey> {
        let name = self.meta.name.as_deref()?;
        if self.namespace_unreadable {
            return None;
        }
        Some(ObjectKey::new(self.meta.namespace.as_deref(), name))
    }
}

/// serde_json's (stable, if unexported) name for raw values: asked for a
/// newtype struct of this name, its deserializer hands over the value's
/// text, checked but not decoded.
const RAW_TOKEN: &str = "$serde_json::private::RawValue";

/// The object's text: straight from serde_json's raw-value support, or,
/// when serde has buffered the object (a watch event whose `object` comes
/// before its `type`; the API server writes `type` first), re-encoded from
/// the buffered value.
struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = String;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<String, A::Error> {
        match map.next_key::<String>()? {
            Some(key) if key == RAW_TOKEN => map.next_value::<String>(),
            _ => Err(A::Error::custom(
                "expected serde_json's raw value (serde_json changed how it passes raw values?)",
            )),
        }
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        serde_json::to_string(&value).map_err(D::Error::custom)
    }
}

/// The metadata fields kube's watcher reads, as pointers into the metadata.
static HEAD: std::sync::LazyLock<sonic_rs::PointerTree> = std::sync::LazyLock::new(|| {
    let mut fields = sonic_rs::PointerTree::new();
    for key in ["name", "namespace", "uid", "resourceVersion"] {
        fields.add_path([key]);
    }
    fields
});

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = d.deserialize_newtype_struct(RAW_TOKEN, TextVisitor)?;
        let mut meta = ObjectMeta::default();
        let mut namespace_unreadable = false;
        match sonic_rs::get_from_str(&text, ["metadata"]) {
            Ok(m) => {
                // Only these four are decoded, from the metadata alone.
                let found = sonic_rs::get_many(m.as_raw_str(), &HEAD)
                    .map_err(|e| D::Error::custom(format!("object metadata: {e}")))?;
                let field = |i: usize| -> Result<Option<String>, serde_json::Error> {
                    match found.get(i).and_then(Option::as_ref) {
                        None => Ok(None),
                        Some(v) => serde_json::from_str::<Option<String>>(v.as_raw_str()),
                    }
                };
                // The watcher needs the resourceVersion. The rest only names
                // the object: one that is unreadable is left out, so that a
                // malformed list item still arrives and the informer loses
                // that object alone, instead of a whole page failing to decode.
                meta.resource_version =
                    field(3).map_err(|e| D::Error::custom(format!("object metadata: {e}")))?;
                meta.name = field(0).ok().flatten();
                let namespace = field(1);
                namespace_unreadable = namespace.is_err();
                meta.namespace = namespace.ok().flatten();
                meta.uid = field(2).ok().flatten();
            }
            // No metadata (a malformed object): the informer reports it.
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(D::Error::custom(format!("object: {e}"))),
        }
        Ok(Self {
            meta,
            text,
            namespace_unreadable,
        })
    }
}

impl Resource for RawObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_text_and_reads_the_watchers_fields() {
        let text = r#"{"metadata":{"managedFields":[{"manager":"m"}],"name":"a","namespace":"ns","resourceVersion":"42","uid":"u"},"spec":{"x":1}}"#;
        let o: RawObject = serde_json::from_str(text).unwrap();
        assert_eq!(o.text(), text);
        assert_eq!(o.meta().name.as_deref(), Some("a"));
        assert_eq!(o.meta().namespace.as_deref(), Some("ns"));
        assert_eq!(o.meta().resource_version.as_deref(), Some("42"));
        assert_eq!(o.meta().uid.as_deref(), Some("u"));
    }

    #[test]
    fn decodes_inside_watch_events_and_lists() {
        let ev: kube::core::WatchEvent<RawObject> = serde_json::from_str(
            r#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","resourceVersion":"7"}}}"#,
        )
        .unwrap();
        let kube::core::WatchEvent::Added(o) = ev else {
            panic!("not an Added event")
        };
        assert_eq!(o.meta().resource_version.as_deref(), Some("7"));
        // serde buffers an adjacently tagged event's content when `object`
        // comes first; the object's text then comes from the buffer.
        let ev: kube::core::WatchEvent<RawObject> = serde_json::from_str(
            r#"{"object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"q","resourceVersion":"8"}},"type":"MODIFIED"}"#,
        )
        .unwrap();
        let kube::core::WatchEvent::Modified(o) = ev else {
            panic!("not a Modified event")
        };
        assert_eq!(o.meta().name.as_deref(), Some("q"));
        assert!(
            o.text().contains(r#""resourceVersion":"8""#),
            "{}",
            o.text()
        );
        let list: kube::core::ObjectList<RawObject> = serde_json::from_str(
            r#"{"apiVersion":"v1","kind":"PodList","metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}"#,
        )
        .unwrap();
        let names: Vec<_> = list
            .items
            .iter()
            .map(|o| o.meta().name.clone().unwrap_or_default())
            .collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn metadata_of_the_wrong_type_is_an_error() {
        for text in [
            r#"{"metadata":{"name":"a","resourceVersion":7}}"#,
            r#"{"metadata":7}"#,
        ] {
            let err = serde_json::from_str::<RawObject>(text)
                .unwrap_err()
                .to_string();
            assert!(err.contains("object metadata"), "{text}: {err}");
        }
    }

    #[test]
    fn the_key_is_read_from_the_metadata_alone_or_not_at_all() {
        let key = |text: &str| {
            serde_json::from_str::<RawObject>(text)
                .unwrap()
                .key()
                .map(|k| k.to_string())
        };
        // The rest of the object is no matter: labels that do not decode.
        assert_eq!(
            key(r#"{"metadata":{"name":"a","namespace":"ns","labels":{"x":7}}}"#).as_deref(),
            Some("ns/a")
        );
        assert_eq!(key(r#"{"metadata":{"name":"a"}}"#).as_deref(), Some("a"));
        for unknown in [
            r#"{"metadata":{"name":7,"namespace":"ns"}}"#,
            r#"{"metadata":{"namespace":"ns"}}"#,
            // Not cluster-scoped: the namespace is there, unreadable.
            r#"{"metadata":{"name":"a","namespace":7}}"#,
            r#"{"kind":"ConfigMap"}"#,
        ] {
            assert_eq!(key(unknown), None, "{unknown}");
        }
    }

    #[test]
    fn an_unreadable_name_leaves_the_object_to_the_source_to_report() {
        let text = r#"{"metadata":{"name":7,"namespace":"ns","resourceVersion":"3"}}"#;
        let o: RawObject = serde_json::from_str(text).unwrap();
        assert_eq!(o.meta().name, None);
        assert_eq!(o.meta().namespace.as_deref(), Some("ns"));
        assert_eq!(o.meta().resource_version.as_deref(), Some("3"));
        assert_eq!(o.text(), text);
        // What the source decodes refuses it, so it cannot slip into a list.
        assert!(
            crate::object::KObject::from_json_text(
                o.text(),
                Some(("v1", "ConfigMap")),
                crate::object::StripOptions::default()
            )
            .is_err()
        );
    }
}
