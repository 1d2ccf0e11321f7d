//! The watched object as kube's watcher carries it: the object's members
//! as serde_json's one pass over the event split them, and the four
//! metadata fields the watcher itself reads. Decoding a watch event into a
//! `DynamicObject` built a tree of the whole object (managedFields
//! included) that the informer then turned back into text; this reads each
//! object once, and the cache's form is put together from its members
//! ([`KObject::from_parts`](crate::object::KObject::from_parts)).

use std::borrow::Cow;

use kube::core::{ApiResource, DynamicResourceScope, ObjectMeta, Resource};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

use crate::object::{Field, ObjectKey, ObjectParts};

/// One object of a watch event or list, split into its members.
#[derive(Debug, Clone)]
pub struct RawObject {
    /// name, namespace, uid and resourceVersion only: what kube's watcher
    /// and its error messages use.
    meta: ObjectMeta,
    parts: ObjectParts,
    /// `metadata.namespace` is there but not a string: the object's key
    /// is unknown, not namespace-less.
    namespace_unreadable: bool,
}

impl RawObject {
    /// The object's members, as the server sent them.
    pub fn parts(&self) -> &ObjectParts {
        &self.parts
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

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let parts = ObjectParts::deserialize(d)?;
        // The watcher needs the resourceVersion. The rest only names the
        // object: one that is unreadable is left out, so that a malformed
        // list item still arrives and the informer loses that object alone,
        // instead of a whole page failing to decode. No metadata (a
        // malformed object): the informer reports it.
        let field = |f| parts.meta_str(f);
        let meta = ObjectMeta {
            resource_version: field(Field::ResourceVersion)
                .map_err(|e| D::Error::custom(format!("object metadata: {e}")))?,
            name: field(Field::Name).ok().flatten(),
            namespace: field(Field::Namespace).ok().flatten(),
            uid: field(Field::Uid).ok().flatten(),
            ..ObjectMeta::default()
        };
        let namespace_unreadable = field(Field::Namespace).is_err();
        Ok(Self {
            meta,
            parts,
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
    use crate::object::KObject;

    #[test]
    fn keeps_the_text_and_reads_the_watchers_fields() {
        let text = r#"{"metadata":{"managedFields":[{"manager":"m"}],"name":"a","namespace":"ns","resourceVersion":"42","uid":"u"},"spec":{"x":1}}"#;
        let o: RawObject = serde_json::from_str(text).unwrap();
        let keep = crate::object::StripOptions {
            managed_fields: false,
            last_applied: false,
        };
        let kept = KObject::from_parts(o.parts(), Some(("v1", "ConfigMap")), keep).unwrap();
        assert_eq!(
            kept.json(),
            format!(r#"{{"apiVersion":"v1","kind":"ConfigMap",{}"#, &text[1..])
        );
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
        let cached =
            KObject::from_parts(o.parts(), None, crate::object::StripOptions::default()).unwrap();
        assert_eq!(cached.meta().resource_version.as_ref(), "8");
        assert!(
            cached
                .json()
                .starts_with(r#"{"apiVersion":"v1","kind":"Pod","#),
            "{}",
            cached.json()
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
        // What the source decodes refuses it, so it cannot slip into a list.
        assert!(
            KObject::from_parts(
                o.parts(),
                Some(("v1", "ConfigMap")),
                crate::object::StripOptions::default()
            )
            .is_err()
        );
    }
}
