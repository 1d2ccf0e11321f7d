//! The lister cache of one informer: objects by namespace/name, ordered (so a
//! namespace is a range), plus plugin-declared indexes.
//!
//! Built on persistent maps so that taking a snapshot is O(1): a plugin call
//! reads one consistent state however long it runs, while the informer keeps
//! writing.

use std::sync::Arc;

use imbl::{HashMap as PHashMap, OrdMap, OrdSet};
use parking_lot::RwLock;

use super::selector::LabelSelector;
use crate::object::{ObjectHandle, ObjectKey};

#[derive(Debug, Clone)]
struct Index {
    pointer: Arc<str>,
    entries: PHashMap<String, OrdSet<ObjectKey>>,
}

/// An immutable view of a store at one instant.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    objects: OrdMap<ObjectKey, ObjectHandle>,
    indexes: PHashMap<Arc<str>, Index>,
}

impl Snapshot {
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    pub fn get(&self, key: &ObjectKey) -> Option<ObjectHandle> {
        self.objects.get(key).cloned()
    }

    /// Objects in `namespace` (all when `None`) matching `selector`, sorted
    /// by namespace then name.
    pub fn list(&self, namespace: Option<&str>, selector: &LabelSelector) -> Vec<ObjectHandle> {
        let matches = |o: &&ObjectHandle| selector.is_empty() || selector.matches(o);
        match namespace {
            None => self.objects.values().filter(matches).cloned().collect(),
            Some(ns) => {
                let start = ObjectKey::new(Some(ns), "");
                self.objects
                    .range(start..)
                    .take_while(|(k, _)| k.namespace.as_deref() == Some(ns))
                    .map(|(_, v)| v)
                    .filter(matches)
                    .cloned()
                    .collect()
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &ObjectHandle> {
        self.objects.values()
    }

    /// `None` when no index of that name exists.
    pub fn by_index(&self, index: &str, value: &str) -> Option<Vec<ObjectHandle>> {
        let idx = self.indexes.get(index)?;
        Some(
            idx.entries
                .get(value)
                .map(|keys| {
                    keys.iter()
                        .filter_map(|k| self.objects.get(k).cloned())
                        .collect()
                })
                .unwrap_or_default(),
        )
    }

    pub fn has_index(&self, index: &str) -> bool {
        self.indexes.contains_key(index)
    }

    fn index_insert(&mut self, obj: &ObjectHandle) {
        let key = obj.key();
        for (_, idx) in self.indexes.iter_mut() {
            for value in obj.index_values(&idx.pointer) {
                idx.entries.entry(value).or_default().insert(key.clone());
            }
        }
    }

    fn index_remove(&mut self, obj: &ObjectHandle) {
        let key = obj.key();
        for (_, idx) in self.indexes.iter_mut() {
            for value in obj.index_values(&idx.pointer) {
                let now_empty = match idx.entries.get_mut(&value) {
                    Some(set) => {
                        set.remove(&key);
                        set.is_empty()
                    }
                    None => false,
                };
                if now_empty {
                    idx.entries.remove(&value);
                }
            }
        }
    }
}

/// A mutable store; readers take snapshots.
#[derive(Debug, Default)]
pub struct Store {
    state: RwLock<Snapshot>,
}

impl Store {
    pub fn snapshot(&self) -> Snapshot {
        self.state.read().clone()
    }

    pub fn get(&self, key: &ObjectKey) -> Option<ObjectHandle> {
        self.state.read().get(key)
    }

    pub fn len(&self) -> usize {
        self.state.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Inserts or replaces; returns the previous version.
    pub fn upsert(&self, obj: ObjectHandle) -> Option<ObjectHandle> {
        let mut s = self.state.write();
        let key = obj.key();
        let old = s.objects.insert(key, obj.clone());
        if let Some(old) = &old {
            s.index_remove(old);
        }
        s.index_insert(&obj);
        old
    }

    pub fn remove(&self, key: &ObjectKey) -> Option<ObjectHandle> {
        let mut s = self.state.write();
        let old = s.objects.remove(key);
        if let Some(old) = &old {
            s.index_remove(old);
        }
        old
    }

    /// Adds (or redefines) an index and fills it from the current objects.
    pub fn add_index(&self, name: &str, pointer: &str) {
        let mut s = self.state.write();
        let mut idx = Index {
            pointer: Arc::from(pointer),
            entries: PHashMap::new(),
        };
        for (key, obj) in &s.objects {
            for value in obj.index_values(pointer) {
                idx.entries.entry(value).or_default().insert(key.clone());
            }
        }
        s.indexes.insert(Arc::from(name), idx);
    }

    pub fn remove_index(&self, name: &str) {
        self.state.write().indexes.remove(name);
    }

    /// Total approximate heap bytes of the cached objects.
    /// Walks a snapshot, so writers are not held up while it counts.
    pub fn object_bytes(&self) -> usize {
        self.snapshot()
            .objects
            .values()
            .map(|o| o.heap_bytes())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::{KObject, StripOptions};

    fn pod(ns: &str, name: &str, node: &str, owner: &str, app: &str) -> ObjectHandle {
        Arc::new(
            KObject::from_value(
                serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": ns, "labels": {"app": app},
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": owner}]},
                    "spec": {"nodeName": node}}),
                StripOptions::default(),
            )
            .unwrap(),
        )
    }

    #[test]
    fn lists_by_namespace_selector_and_index() {
        let store = Store::default();
        store.add_index("node", "/spec/nodeName");
        store.upsert(pod("a", "p1", "n1", "o1", "web"));
        store.upsert(pod("a", "p2", "n2", "o1", "db"));
        store.upsert(pod("b", "p3", "n1", "o2", "web"));
        store.upsert(pod("ab", "p4", "n1", "o2", "web"));
        let all = LabelSelector::default();
        let names =
            |v: Vec<ObjectHandle>| v.iter().map(|o| o.key().to_string()).collect::<Vec<_>>();
        assert_eq!(
            names(store.snapshot().list(Some("a"), &all)),
            ["a/p1", "a/p2"]
        );
        let web = LabelSelector::parse("app=web").unwrap();
        assert_eq!(
            names(store.snapshot().list(None, &web)),
            ["a/p1", "ab/p4", "b/p3"]
        );
        assert_eq!(
            names(store.snapshot().by_index("node", "n1").unwrap()),
            ["a/p1", "ab/p4", "b/p3"]
        );
        // Late index creation backfills; updates move index entries.
        store.add_index("owner", "/metadata/ownerReferences/*/uid");
        assert_eq!(
            names(store.snapshot().by_index("owner", "o1").unwrap()),
            ["a/p1", "a/p2"]
        );
        let before = store.snapshot();
        store.upsert(pod("a", "p1", "n2", "o2", "web"));
        assert_eq!(
            names(store.snapshot().by_index("node", "n2").unwrap()),
            ["a/p1", "a/p2"]
        );
        assert_eq!(
            names(store.snapshot().by_index("owner", "o1").unwrap()),
            ["a/p2"]
        );
        // The earlier snapshot is unaffected: one consistent state per call.
        assert_eq!(names(before.by_index("node", "n2").unwrap()), ["a/p2"]);
        store.remove(&ObjectKey::new(Some("a"), "p2"));
        assert!(store.snapshot().by_index("owner", "o1").unwrap().is_empty());
        assert!(store.snapshot().by_index("missing", "x").is_none());
        assert_eq!(store.len(), 3);
    }
}
