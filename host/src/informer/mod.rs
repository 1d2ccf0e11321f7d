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

use std::sync::Arc;

use futures::stream::BoxStream;

use crate::kind::KindInfo;
use crate::object::{KObject, ObjectError};
pub use delta::{Delta, DeltaType};
pub use set::{InformerSet, SubscriptionHandle};
pub use shared::{CacheView, Forbidden, Informer};
pub use store::{Snapshot, Store};

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
    /// The source is alive and nothing changed (it answered a probe after
    /// a silence): ends a reported stall.
    Progress,
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
    /// An item of a (re)list could not be decoded. A list missing one
    /// object would read as that object's deletion, so the list is void:
    /// the source delivers no `InitDone` for it and lists again after
    /// backoff, and the informer discards what it buffered (its cache and
    /// deltas stay as they were).
    #[error(
        "{informer}: cannot decode list item {position}{}: {cause}; the list is discarded (the cache keeps the last complete one) and retried with backoff",
        object.as_deref().map(|o| format!(" ({o})")).unwrap_or_default()
    )]
    ListItemUndecodable {
        /// The informer's spec, as displayed.
        informer: String,
        /// The item's position in the list, from 1.
        position: usize,
        /// `namespace/name` (or `name`), when the item's name is readable.
        object: Option<String>,
        #[source]
        cause: Arc<ObjectError>,
    },
    #[error("{0}")]
    Other(String),
}

/// Where objects come from: a real API server or the local folder cluster.
pub trait Source: Send + Sync + 'static {
    /// A never-ending list+watch stream for `spec`; errors are reported and
    /// the stream recovers by itself (relisting as needed).
    fn watch(&self, spec: &InformerSpec) -> BoxStream<'static, Result<WatchEvent, SourceError>>;
}
