//! Label and annotation helpers, [`ObjectMeta`] readers and [`ObjectRef`]
//! constructors.

use k8s_openapi::Resource;

use crate::{Delta, KindRef, Object, ObjectMeta, ObjectRef, OwnerReference};

/// The value of label `key` on `object`, if set (one host call; nothing
/// else is copied).
pub fn label(object: &Object, key: &str) -> Option<String> {
    object.label(key)
}

/// The value of annotation `key` on `object`, if set (one host call).
pub fn annotation(object: &Object, key: &str) -> Option<String> {
    object.annotation(key)
}

fn lookup<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// Readers of a whole metadata record (from [`Object::meta`]), for handlers
/// that fetch it once and read much of it.
impl ObjectMeta {
    /// The value of label `key`, if set.
    pub fn label(&self, key: &str) -> Option<&str> {
        lookup(&self.labels, key)
    }

    /// The value of annotation `key`, if set.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        lookup(&self.annotations, key)
    }

    /// The owner reference marked `controller: true`, if any.
    pub fn controller_owner(&self) -> Option<&OwnerReference> {
        self.owner_references.iter().find(|o| o.controller)
    }

    /// Whether `finalizer` is among the finalizers.
    pub fn has_finalizer(&self, finalizer: &str) -> bool {
        self.finalizers.iter().any(|f| f == finalizer)
    }

    /// Whether the object is being finalized (has a deletion timestamp).
    pub fn is_terminating(&self) -> bool {
        self.deletion_timestamp.is_some()
    }

    /// `namespace/name`, or `name` for cluster-scoped objects.
    pub fn key(&self) -> String {
        key(self.namespace.as_deref(), &self.name)
    }
}

/// `namespace/name`, or `name` without a namespace.
pub(crate) fn key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

impl ObjectRef {
    /// A reference by kind, namespace (`None` if cluster-scoped) and name.
    pub fn new(kind: KindRef, namespace: Option<&str>, name: &str) -> Self {
        Self {
            kind,
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    /// A reference to a `K` by namespace (`None` if cluster-scoped) and
    /// name.
    pub fn of<K: Resource>(namespace: Option<&str>, name: &str) -> Self {
        Self::new(KindRef::of::<K>(), namespace, name)
    }

    /// A reference to the `K` that `meta` describes.
    pub fn from_meta<K: Resource>(meta: &ObjectMeta) -> Self {
        Self::with_meta(KindRef::of::<K>(), meta)
    }

    /// A reference of kind `kind` to the object `meta` describes.
    pub fn with_meta(kind: KindRef, meta: &ObjectMeta) -> Self {
        Self::new(kind, meta.namespace.as_deref(), &meta.name)
    }

    /// A reference to `object` as a `K` (two host calls: namespace, name).
    pub fn for_object<K: Resource>(object: &Object) -> Self {
        Self {
            kind: KindRef::of::<K>(),
            namespace: object.namespace(),
            name: object.name(),
        }
    }

    /// A reference to `object` with its own group/version/kind (three host
    /// calls: kind, namespace, name).
    pub fn from_object(object: &Object) -> Self {
        Self {
            kind: KindRef::Gvk(object.kind()),
            namespace: object.namespace(),
            name: object.name(),
        }
    }

    /// A reference to the delta's object as a `K`, from the delta's
    /// scalars (no host call).
    pub fn for_delta<K: Resource>(delta: &Delta) -> Self {
        Self::new(KindRef::of::<K>(), delta.namespace.as_deref(), &delta.name)
    }

    /// A reference to the delta's object with its own group/version/kind
    /// (one host call); `None` for `synced` deltas.
    pub fn from_delta(delta: &Delta) -> Option<Self> {
        let object = delta.object.as_ref()?;
        Some(Self::new(
            KindRef::Gvk(object.kind()),
            delta.namespace.as_deref(),
            &delta.name,
        ))
    }

    /// A reference to an owner, in `namespace` (owners share their
    /// dependent's namespace, or are cluster-scoped). Guard a write to it
    /// with `Preconditions::uid(&owner.uid)`.
    pub fn owner(owner: &OwnerReference, namespace: Option<&str>) -> Self {
        Self {
            kind: KindRef::Gvk(owner.gvk()),
            namespace: namespace.map(str::to_owned),
            name: owner.name.clone(),
        }
    }

    /// `namespace/name`, or `name` for cluster-scoped objects.
    pub fn key(&self) -> String {
        key(self.namespace.as_deref(), &self.name)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use k8s_openapi::api::core::v1::Pod;

    use super::*;
    use crate::DeltaType;

    pub(crate) fn owners() -> Vec<OwnerReference> {
        vec![
            OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: "x".into(),
                uid: "c".into(),
                controller: false,
                block_owner_deletion: false,
            },
            OwnerReference {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: "web-abc".into(),
                uid: "rs-1".into(),
                controller: true,
                block_owner_deletion: true,
            },
        ]
    }

    pub(crate) fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: namespace.map(str::to_owned),
            name: name.into(),
            uid: "u-1".into(),
            resource_version: "1".into(),
            generation: None,
            labels: vec![("app".into(), "web".into())],
            annotations: vec![("note".into(), "hi".into())],
            owner_references: owners(),
            finalizers: vec!["example.com/f".into()],
            creation_timestamp: None,
            deletion_timestamp: None,
        }
    }

    #[test]
    fn meta_helpers() {
        let m = meta("web-1", Some("shop"));
        assert_eq!(m.label("app"), Some("web"));
        assert_eq!(m.label("nope"), None);
        assert_eq!(m.annotation("note"), Some("hi"));
        let owner = m.controller_owner().map(|o| o.name.as_str());
        assert_eq!(owner, Some("web-abc"));
        assert!(m.owner_references[1].is::<ReplicaSet>());
        assert!(!m.owner_references[1].is::<Deployment>());
        assert!(m.has_finalizer("example.com/f") && !m.has_finalizer("x"));
        assert!(!m.is_terminating());
        assert_eq!(m.key(), "shop/web-1");
        assert_eq!(meta("n", None).key(), "n");
    }

    #[test]
    fn object_refs() {
        let m = meta("web-1", Some("shop"));
        let r = ObjectRef::from_meta::<Pod>(&m);
        assert_eq!(r.kind, KindRef::of::<Pod>());
        assert_eq!(
            (r.namespace.as_deref(), r.name.as_str()),
            (Some("shop"), "web-1")
        );
        assert_eq!(r.key(), "shop/web-1");
        let o = ObjectRef::owner(&m.owner_references[1], m.namespace.as_deref());
        assert_eq!(o.kind, KindRef::of::<ReplicaSet>());
        assert_eq!(o.name, "web-abc");
        assert_eq!(
            ObjectRef::of::<Deployment>(Some("shop"), "web"),
            ObjectRef::new(KindRef::of::<Deployment>(), Some("shop"), "web")
        );
        let d = Delta {
            delta_type: DeltaType::Synced,
            subscription: 0,
            namespace: Some("shop".into()),
            name: "web-1".into(),
            uid: String::new(),
            resource_version: String::new(),
            object: None,
            old_object: None,
            initial: false,
            final_state_unknown: false,
            attempt: 1,
            last_failure: None,
        };
        assert_eq!(ObjectRef::for_delta::<Pod>(&d), r);
        assert_eq!(ObjectRef::from_delta(&d), None);
    }
}
