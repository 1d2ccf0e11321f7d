//! Shared informers: one list+watch per (kind, namespace, label selector,
//! field selector), shared by every subscription that asks for the same
//! thing, feeding a lister cache and fanning deltas out to subscribers.
//!
//! This is client-go's Reflector + DeltaFIFO + SharedIndexInformer in one
//! task per informer; the per-plugin queueing lives in `dispatch`.
//!
//! An informer is `shared.rs`'s (its store, its subscribers), its
//! list+watch loop `reflector.rs`'s, and the set that shares informers
//! between subscriptions `set.rs`'s; what they hand out is a `delta.rs`.
//! The objects an informer could not decode are `undecodable.rs`'s.

pub mod internal_events;
pub mod selector;
pub mod store;

mod delta;
mod reflector;
#[cfg(test)]
pub(crate) mod scripted;
mod set;
mod shared;
#[cfg(test)]
mod tests;
mod undecodable;

use std::sync::Arc;

use futures::stream::BoxStream;

use crate::kind::KindInfo;
use crate::object::{KObject, ObjectError, ObjectKey};
pub use delta::{Delta, DeltaType};
pub use set::{InformerSet, SubscriptionHandle};
pub use shared::{CacheView, Forbidden, Informer};
pub use store::{Snapshot, Store};
pub use undecodable::UndecodableObject;

/// What one informer lists and watches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InformerSpec {
    pub kind: KindInfo,
    pub namespace: Option<String>,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
}

impl std::fmt::Display for InformerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.kind.resource_name())?;
        if let Some(ns) = &self.namespace {
            write!(f, " in {ns}")?;
        }
        if let Some(l) = &self.label_selector {
            write!(f, " labels {l:?}")?;
        }
        if let Some(fs) = &self.field_selector {
            write!(f, " fields {fs:?}")?;
        }
        Ok(())
    }
}

/// One event of a source's list+watch stream (the shape of kube-runtime's
/// `watcher::Event`): a (re)list is `Init`, `InitApply`*, `InitDone`.
#[derive(Debug)]
pub enum WatchEvent {
    Init,
    InitApply(KObject),
    InitDone,
    Apply(KObject),
    Delete(KObject),
    /// An object of a list or watch event that could not be decoded: one
    /// object lost, not the list or the watch (see [`Undecodable`]).
    Undecodable(Undecodable),
    /// The source is alive and nothing changed (it answered a probe after
    /// a silence): ends a reported stall.
    Progress,
}

/// Which event an undecodable object came in: what it would have been.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UndecodableEvent {
    /// An item of the list in progress: the list goes on without it.
    InitApply,
    /// An added or modified object: the cache keeps its previous state.
    Apply,
    /// A deleted object: removed from the cache by its key alone.
    Delete,
}

/// An object the source received but could not decode into the cache's
/// form. Its key, read from its metadata alone, is what lets the informer
/// keep (or remove) the right cached object instead of giving up on the
/// whole list.
#[derive(Debug, Clone)]
pub struct Undecodable {
    pub event: UndecodableEvent,
    /// Namespace and name; `None` when even they are unreadable.
    pub key: Option<ObjectKey>,
    pub error: Arc<ObjectError>,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum SourceError {
    /// The API server refused `verb` (`list` or `watch`) with 403.
    #[error(
        "forbidden to {verb}: {message} (grant the host's identity list and watch on this resource)"
    )]
    Forbidden { verb: &'static str, message: String },
    /// The watch produced nothing for `silent` and the server did not
    /// answer a probe: frozen, partitioned or overloaded. The watch keeps
    /// waiting (and the source keeps probing).
    #[error(
        "no watch event for {}s and the API server does not answer a list ({cause}); still waiting",
        silent.as_secs()
    )]
    Stalled {
        silent: std::time::Duration,
        cause: String,
    },
    #[error("{0}")]
    Other(String),
}

/// Where objects come from: a real API server or the local folder cluster.
pub trait Source: Send + Sync + 'static {
    /// A never-ending list+watch stream for `spec`; errors are reported and
    /// the stream recovers by itself (relisting as needed).
    fn watch(&self, spec: &InformerSpec) -> BoxStream<'static, Result<WatchEvent, SourceError>>;

    /// [`watch`](Self::watch) narrowed to the objects of the shards `shards`
    /// holds, where the source can (the API server's `shardSelector`); the
    /// informer filters what comes anyway, so a source that cannot narrow
    /// (the default) returns everything.
    fn watch_shards(
        &self,
        spec: &InformerSpec,
        shards: &crate::shard::ShardSet,
    ) -> BoxStream<'static, Result<WatchEvent, SourceError>> {
        let _ = shards;
        self.watch(spec)
    }
}
