//! The informer's telemetry events, beside it (vector's
//! `internal_events`): one struct per occurrence whose `emit()` writes the
//! log line and counts it.

use super::{InformerSpec, SourceError, Undecodable, UndecodableEvent};
use crate::telemetry::InformerCounters;

/// A watch stream failed; kube-runtime's watcher restarts it with backoff
/// (resuming from the last resourceVersion, or relisting).
#[derive(Debug)]
pub struct WatchFailed<'a> {
    pub informer: &'a InformerSpec,
    pub error: &'a SourceError,
}

impl WatchFailed<'_> {
    pub fn emit(self, counters: &InformerCounters) {
        tracing::warn!(informer = %self.informer, error = %self.error, "watch error; the stream retries with backoff");
        counters.watch_restarts.inc();
    }
}

/// An informer's watch went silent and the API server did not answer a
/// probe; logged again each time the source probes in vain, counted once.
#[derive(Debug)]
pub struct WatchStalled<'a> {
    pub informer: &'a InformerSpec,
    pub error: &'a SourceError,
    /// The first report of this stall.
    pub first: bool,
}

impl WatchStalled<'_> {
    pub fn emit(self, counters: &InformerCounters) {
        tracing::warn!(informer = %self.informer, error = %self.error, "watch stalled");
        if self.first {
            counters.watch_stalls.inc();
        }
    }
}

/// A stalled watch answered again.
#[derive(Debug)]
pub struct WatchResumed<'a> {
    pub informer: &'a InformerSpec,
    pub after: std::time::Duration,
}

impl WatchResumed<'_> {
    pub fn emit(self) {
        tracing::info!(informer = %self.informer, stalled_for_s = self.after.as_secs(), "watch resumed after a stall");
    }
}

/// The API server refuses an informer (403): the plugins subscribed to it
/// cannot sync and are broken until the host's identity is granted the verb.
#[derive(Debug)]
pub struct InformerForbidden<'a> {
    pub informer: &'a InformerSpec,
    pub verb: &'a str,
    pub plugins: &'a [String],
    pub message: &'a str,
}

impl InformerForbidden<'_> {
    pub fn emit(self) {
        let plugins = self.plugins.join(", ");
        tracing::error!(
            informer = %self.informer,
            verb = self.verb,
            plugins = %plugins,
            error = self.message,
            "{}",
            forbidden_reason(self.informer, self.verb)
        );
    }
}

/// What a refused informer means and how to fix it, for logs and readiness.
pub fn forbidden_reason(informer: &InformerSpec, verb: &str) -> String {
    let resource = informer.kind.resource_name();
    format!(
        "the API server refuses to {verb} {resource} (informer {informer}): grant the host's identity the list and watch verbs on {resource}"
    )
}

/// An informer started a list after its initial one.
#[derive(Debug)]
pub struct Relisted<'a> {
    pub informer: &'a InformerSpec,
}

impl Relisted<'_> {
    pub fn emit(self, counters: &InformerCounters) {
        tracing::info!(informer = %self.informer, "relisting");
        counters.relists.inc();
    }
}

/// An object of a list item or watch event could not be decoded: one
/// object is lost, never the list or the watch.
#[derive(Debug)]
pub struct ObjectUndecodable<'a> {
    pub informer: &'a InformerSpec,
    pub object: &'a Undecodable,
}

impl ObjectUndecodable<'_> {
    pub fn emit(self, counters: &InformerCounters) {
        let named = self.object.key.is_some();
        let what = match (self.object.event, named) {
            (UndecodableEvent::InitApply, true) => {
                "cannot decode a listed object; the list applies without it and the cache keeps its last decoded state, if any"
            }
            (UndecodableEvent::InitApply, false) => {
                "cannot decode a listed object nor read its name; the list applies without it and deletes nothing"
            }
            (UndecodableEvent::Apply, true) => {
                "cannot decode a watched object; the cache keeps its previous state"
            }
            (UndecodableEvent::Apply, false) => {
                "cannot decode a watched object nor read its name; the event is skipped"
            }
            (UndecodableEvent::Delete, true) => {
                "cannot decode a deleted object; it is deleted by its name, with its last decoded state"
            }
            (UndecodableEvent::Delete, false) => {
                "cannot decode a deleted object nor read its name; it stays cached until the next list"
            }
        };
        let object = self
            .object
            .key
            .as_ref()
            .map_or_else(|| "(name unreadable)".to_owned(), ToString::to_string);
        tracing::warn!(informer = %self.informer, object = %object, error = %self.object.error, "{what}");
        counters.decode_failures.inc();
    }
}
