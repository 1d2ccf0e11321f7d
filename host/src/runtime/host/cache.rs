//! Cache reads: one consistent snapshot per cache for the whole call,
//! reads checked against the registration's subscriptions and the grant,
//! objects of overlapping caches merged.

use std::collections::HashSet;
use std::sync::Arc;

use wasmtime::component::Resource;

use super::{HostState, ReadError};
use crate::informer::selector::LabelSelector;
use crate::informer::{CacheView, Snapshot};
use crate::kind::{KindInfo, KindRef};
use crate::object::{ObjectHandle, ObjectKey};
use crate::runtime::access::Verb;

impl HostState {
    /// The call's snapshot of a cache (one per cache per call).
    pub(super) fn snapshot_of(&mut self, cache: &CacheView) -> Snapshot {
        let id = cache.id();
        if let Some((_, s)) = self.snapshots.iter().find(|(i, _)| *i == id) {
            return s.clone();
        }
        let s = cache.snapshot();
        self.snapshots.push((id, s.clone()));
        s
    }

    /// The call's snapshots of every cache of `kind`, after checking that
    /// the grant lets the plugin read `namespace` (`None`: the whole cache,
    /// which the grant already narrowed at registration).
    fn snapshot_for(
        &mut self,
        kind: &KindRef,
        namespace: Option<&str>,
    ) -> Result<(Arc<KindInfo>, Vec<Snapshot>), ReadError> {
        let scope = self.scope().map_err(ReadError::NotSubscribed)?;
        let info = self
            .resolve(&scope, kind)
            .map_err(ReadError::NotSubscribed)?;
        let informers = scope.reads.get(&info.gvk).ok_or_else(|| {
            ReadError::NotSubscribed(format!(
                "{} is not among this plugin's subscriptions; add a subscription (with no delta types for read-only access)",
                info.resource_name()
            ))
        })?;
        let namespace = namespace.filter(|_| info.namespaced);
        if namespace.is_some() || !info.namespaced {
            self.granted(&scope, &info, Verb::Read, namespace)
                .map_err(ReadError::Forbidden)?;
        }
        let snaps = informers.iter().map(|i| self.snapshot_of(i)).collect();
        Ok((info, snaps))
    }
    /// One object of a readable kind, from the call's snapshot.
    #[tracing::instrument(level = "trace", skip_all, fields(plugin = %self.plugin, kind = ?kind, namespace = namespace, name = name))]
    pub(in crate::runtime) fn cache_get(
        &mut self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
    ) -> wasmtime::Result<Result<Option<Resource<ObjectHandle>>, ReadError>> {
        let (info, snaps) = match self.snapshot_for(kind, namespace) {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        };
        let ns = if info.namespaced { namespace } else { None };
        let key = ObjectKey::new(ns, name);
        match snaps.iter().find_map(|s| s.get(&key)) {
            Some(o) => Ok(Ok(Some(self.push_object(o)?))),
            None => Ok(Ok(None)),
        }
    }

    /// Objects of a readable kind, optionally in one namespace and
    /// matching a label selector.
    #[tracing::instrument(level = "trace", skip_all, fields(plugin = %self.plugin, kind = ?kind, namespace = namespace))]
    pub(in crate::runtime) fn cache_list(
        &mut self,
        kind: &KindRef,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> wasmtime::Result<Result<Vec<Resource<ObjectHandle>>, ReadError>> {
        let ns = namespace.filter(|n| !n.is_empty());
        let (_, snaps) = match self.snapshot_for(kind, ns) {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        };
        let selector = match LabelSelector::parse(label_selector.unwrap_or("")) {
            Ok(s) => s,
            Err(e) => return Ok(Err(ReadError::InvalidSelector(e.to_string()))),
        };
        let objs = merge(snaps.iter().map(|s| s.list(ns, &selector)));
        Ok(Ok(self.push_all(objs)?))
    }

    /// Objects a declared index maps `value` to.
    #[tracing::instrument(level = "trace", skip_all, fields(plugin = %self.plugin, index = index, value = value))]
    pub(in crate::runtime) fn cache_by_index(
        &mut self,
        index: &str,
        value: &str,
    ) -> wasmtime::Result<Result<Vec<Resource<ObjectHandle>>, ReadError>> {
        let scope = match self.scope() {
            Ok(s) => s,
            Err(e) => return Ok(Err(ReadError::UnknownIndex(e))),
        };
        let Some(caches) = scope.indexes.get(index) else {
            return Ok(Err(ReadError::UnknownIndex(format!(
                "no index {:?} was declared at registration",
                crate::names::excerpt(index)
            ))));
        };
        let found: Vec<Vec<ObjectHandle>> = caches
            .iter()
            .map(|(informer, store_index)| {
                self.snapshot_of(informer)
                    .by_index(store_index, value)
                    .unwrap_or_default()
            })
            .collect();
        let objs = merge(found);
        Ok(Ok(self.push_all(objs)?))
    }
}

/// The objects of several caches of one kind, each once (caches with
/// overlapping selections hold the same object).
fn merge(lists: impl IntoIterator<Item = Vec<ObjectHandle>>) -> Vec<ObjectHandle> {
    let mut lists = lists.into_iter();
    let Some(mut out) = lists.next() else {
        return Vec::new();
    };
    let mut rest = lists.peekable();
    if rest.peek().is_none() {
        return out;
    }
    let mut seen: HashSet<ObjectKey> = out.iter().map(|o| o.key()).collect();
    for list in rest {
        for o in list {
            if seen.insert(o.key()) {
                out.push(o);
            }
        }
    }
    out
}
