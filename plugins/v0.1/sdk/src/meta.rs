//! Metadata helpers and [`ObjectRef`] constructors.

use k8s_openapi::Resource;

use crate::{Delta, GroupVersionKind, KindRef, ObjectMeta, ObjectRef, OwnerReference};

/// The value of label `key`, if set.
pub fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.label(key)
}

/// The value of annotation `key`, if set.
pub fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotation(key)
}

/// The owner reference marked `controller: true`, if any.
pub fn controller_owner(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.controller_owner()
}

fn lookup<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

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

    /// Whether the object is being finalized (has a deletion timestamp).
    pub fn is_terminating(&self) -> bool {
        self.deletion_timestamp.is_some()
    }

    /// `namespace/name`, or `name` for cluster-scoped objects.
    pub fn key(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        }
    }
}

impl OwnerReference {
    /// Whether the owner is of `K`'s group and kind (any version).
    pub fn is<K: Resource>(&self) -> bool {
        self.gvk().is::<K>()
    }

    /// The owner's group/version/kind, from its `apiVersion` and `kind`.
    pub fn gvk(&self) -> GroupVersionKind {
        GroupVersionKind::from_api_version(&self.api_version, &self.kind)
    }
}

fn non_empty(uid: &str) -> Option<String> {
    (!uid.is_empty()).then(|| uid.to_owned())
}

impl ObjectRef {
    /// A reference without uid.
    pub fn new(kind: KindRef, namespace: Option<&str>, name: &str) -> Self {
        Self {
            kind,
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
            uid: None,
        }
    }

    /// A reference to a `K` by namespace (`None` if cluster-scoped) and
    /// name, without uid.
    pub fn of<K: Resource>(namespace: Option<&str>, name: &str) -> Self {
        Self::new(KindRef::of::<K>(), namespace, name)
    }

    /// A reference to the `K` that `meta` describes, with its uid (when
    /// known) as precondition / Event regarding uid.
    pub fn from_meta<K: Resource>(meta: &ObjectMeta) -> Self {
        Self::with_meta(KindRef::of::<K>(), meta)
    }

    /// A reference of kind `kind` to the object `meta` describes, with uid.
    pub fn with_meta(kind: KindRef, meta: &ObjectMeta) -> Self {
        Self {
            kind,
            namespace: meta.namespace.clone(),
            name: meta.name.clone(),
            uid: non_empty(&meta.uid),
        }
    }

    /// A reference to the object of a delta (its resolved kind and meta),
    /// with uid; `None` for `synced` deltas.
    pub fn from_delta(delta: &Delta) -> Option<Self> {
        let meta = delta.meta.as_ref()?;
        Some(Self::with_meta(KindRef::Gvk(delta.kind.clone()), meta))
    }

    /// A reference to an owner, in `namespace` (owners share their
    /// dependent's namespace, or are cluster-scoped), with its uid.
    pub fn owner(owner: &OwnerReference, namespace: Option<&str>) -> Self {
        Self {
            kind: KindRef::Gvk(owner.gvk()),
            namespace: namespace.map(str::to_owned),
            name: owner.name.clone(),
            uid: non_empty(&owner.uid),
        }
    }

    /// Sets the uid precondition.
    pub fn with_uid(mut self, uid: impl Into<String>) -> Self {
        self.uid = Some(uid.into());
        self
    }

    /// Drops the uid precondition.
    pub fn without_uid(mut self) -> Self {
        self.uid = None;
        self
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use k8s_openapi::api::core::v1::Pod;

    use super::*;

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
            owner_references: vec![
                OwnerReference {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    name: "x".into(),
                    uid: "c".into(),
                    controller: false,
                },
                OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "ReplicaSet".into(),
                    name: "web-abc".into(),
                    uid: "rs-1".into(),
                    controller: true,
                },
            ],
            creation_timestamp: None,
            deletion_timestamp: None,
        }
    }

    #[test]
    fn meta_helpers() {
        let m = meta("web-1", Some("shop"));
        assert_eq!(label(&m, "app"), Some("web"));
        assert_eq!(label(&m, "nope"), None);
        assert_eq!(annotation(&m, "note"), Some("hi"));
        let owner = controller_owner(&m).map(|o| o.name.as_str());
        assert_eq!(owner, Some("web-abc"));
        assert!(m.owner_references[1].is::<ReplicaSet>());
        assert!(!m.owner_references[1].is::<Deployment>());
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
            (r.namespace.as_deref(), r.name.as_str(), r.uid.as_deref()),
            (Some("shop"), "web-1", Some("u-1"))
        );
        assert_eq!(r.clone().without_uid().uid, None);
        let o = ObjectRef::owner(&m.owner_references[1], m.namespace.as_deref());
        assert_eq!(o.kind, KindRef::of::<ReplicaSet>());
        assert_eq!(o.uid.as_deref(), Some("rs-1"));
        let plain = ObjectRef::of::<Deployment>(Some("shop"), "web").with_uid("d-1");
        assert_eq!(plain.uid.as_deref(), Some("d-1"));
        let mut anon = m.clone();
        anon.uid.clear();
        assert_eq!(ObjectRef::from_meta::<Pod>(&anon).uid, None);
    }
}
