//! Builders for what `register` returns.

use k8s_openapi::Resource;

use crate::{DeltaType, Index, KindRef, Registration, Subscription};

impl Subscription {
    /// A subscription to every object of `K`, in all namespaces, delivering
    /// [`DeltaType::OBJECT`] (added, updated, deleted, resync).
    pub fn kind<K: Resource>() -> Self {
        Self::to(KindRef::of::<K>())
    }

    /// Like [`Subscription::kind`], for a kind named as kubectl would
    /// (`deployments.apps`).
    pub fn resource(name: impl Into<String>) -> Self {
        Self::to(KindRef::resource(name))
    }

    /// Like [`Subscription::kind`], for any [`KindRef`].
    pub fn to(kind: KindRef) -> Self {
        Self {
            kind,
            namespace: None,
            label_selector: None,
            field_selector: None,
            deltas: DeltaType::OBJECT.to_vec(),
            fields: Vec::new(),
            resync_seconds: None,
        }
    }

    /// Only objects in this namespace.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Only objects whose labels match this selector (`app=web,tier!=db`).
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = Some(selector.into());
        self
    }

    /// Only objects matching this field selector (`spec.nodeName=node-1`).
    pub fn field_selector(mut self, selector: impl Into<String>) -> Self {
        self.field_selector = Some(selector.into());
        self
    }

    /// Which delta types to deliver.
    pub fn deltas(mut self, deltas: impl IntoIterator<Item = DeltaType>) -> Self {
        self.deltas = deltas.into_iter().collect();
        self
    }

    /// JSON pointers of the fields that matter: updates changing none of
    /// them (nor labels, annotations or the deletion timestamp) are skipped.
    pub fn fields<S: Into<String>>(mut self, pointers: impl IntoIterator<Item = S>) -> Self {
        self.fields = pointers.into_iter().map(Into::into).collect();
        self
    }

    /// No deltas: the subscription only makes the kind readable through
    /// [`cache`](crate::cache).
    pub fn cache_only(mut self) -> Self {
        self.deltas.clear();
        self
    }

    /// Replay every cached object as a `resync` delta this often.
    pub fn resync_every(mut self, seconds: u32) -> Self {
        self.resync_seconds = Some(seconds);
        self
    }
}

impl Default for Registration {
    fn default() -> Self {
        Self::new()
    }
}

impl Registration {
    /// No subscriptions, writes or indexes yet.
    pub fn new() -> Self {
        Self {
            subscriptions: Vec::new(),
            writes: Vec::new(),
            indexes: Vec::new(),
        }
    }

    /// Adds a subscription; deltas name it by its position
    /// ([`Delta::subscription`](crate::Delta)), in the order added.
    pub fn subscribe(mut self, subscription: Subscription) -> Self {
        self.subscriptions.push(subscription);
        self
    }

    /// Declares that the plugin writes `K`.
    pub fn writes<K: Resource>(self) -> Self {
        self.writes_kind(KindRef::of::<K>())
    }

    /// Declares that the plugin writes this kind.
    pub fn writes_kind(mut self, kind: KindRef) -> Self {
        self.writes.push(kind);
        self
    }

    /// Declares a secondary index, readable through
    /// [`cache::by_index`](crate::cache::by_index).
    pub fn index(mut self, index: Index) -> Self {
        self.indexes.push(index);
        self
    }
}

impl Index {
    /// An index named `name` over `K`, keyed by the value(s) at `pointer`
    /// (`*` iterates an array: `/metadata/ownerReferences/*/uid`).
    pub fn new<K: Resource>(name: impl Into<String>, pointer: impl Into<String>) -> Self {
        Self::over(name, KindRef::of::<K>(), pointer)
    }

    /// Like [`Index::new`], for any [`KindRef`].
    pub fn over(name: impl Into<String>, kind: KindRef, pointer: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            kind,
            pointer: pointer.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::*;

    #[test]
    fn builders() {
        let s = Subscription::kind::<Pod>()
            .namespace("shop")
            .labels("app=web")
            .field_selector("spec.nodeName=n1")
            .deltas([DeltaType::Added])
            .fields(["/spec/nodeName"])
            .resync_every(60);
        assert_eq!(s.kind, KindRef::of::<Pod>());
        assert_eq!(s.namespace.as_deref(), Some("shop"));
        assert_eq!(s.label_selector.as_deref(), Some("app=web"));
        assert_eq!(s.field_selector.as_deref(), Some("spec.nodeName=n1"));
        assert_eq!(s.deltas, vec![DeltaType::Added]);
        assert_eq!(s.fields, vec!["/spec/nodeName".to_owned()]);
        assert_eq!(s.resync_seconds, Some(60));
        assert_eq!(
            Subscription::kind::<Pod>().deltas,
            DeltaType::OBJECT.to_vec()
        );
        assert!(
            Subscription::resource("nodes")
                .cache_only()
                .deltas
                .is_empty()
        );

        let r = Registration::new()
            .subscribe(s)
            .writes::<Pod>()
            .writes_kind(KindRef::resource("deployments.apps"))
            .index(Index::new::<Pod>("by-node", "/spec/nodeName"));
        assert_eq!(r.subscriptions.len(), 1);
        assert_eq!(
            r.writes,
            vec![KindRef::of::<Pod>(), KindRef::resource("deployments.apps")]
        );
        assert_eq!(r.indexes[0].name, "by-node");
        assert_eq!(Registration::default(), Registration::new());
    }
}
