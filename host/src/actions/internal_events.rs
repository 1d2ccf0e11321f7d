//! The executor's telemetry events, beside it (vector's
//! `internal_events`): one struct per occurrence whose `emit()` writes the
//! log line and counts it. (`events.rs` beside this records the Kubernetes
//! Events plugins emit.)

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Action;
use super::executor::{ActionError, ExecutorStats};
use crate::telemetry::ActionCounters;
use crate::telemetry::metrics::Outcome;

/// An action reached the cluster.
#[derive(Debug)]
pub struct ActionApplied<'a> {
    pub plugin: &'a str,
    pub action: &'a Action,
}

impl ActionApplied<'_> {
    pub fn emit(self, stats: &ExecutorStats, counters: &ActionCounters) {
        tracing::debug!(plugin = self.plugin, action = %self.action, "action applied");
        stats.applied.fetch_add(1, Ordering::Relaxed);
        counters.outcome(self.action.verb(), Outcome::Applied).inc();
    }
}

/// An action failed and will be retried.
#[derive(Debug)]
pub struct ActionRetrying<'a> {
    pub plugin: &'a str,
    pub action: &'a Action,
    pub attempt: u32,
    pub error: &'a ActionError,
    pub wait: Duration,
}

impl ActionRetrying<'_> {
    pub fn emit(self, stats: &ExecutorStats, counters: &ActionCounters) {
        let verb = self.action.verb();
        let wait = self.wait;
        tracing::warn!(plugin = self.plugin, verb, resource = %self.action.target(), attempt = self.attempt, error = %self.error, "action failed; retrying in {wait:?}");
        stats.retried.fetch_add(1, Ordering::Relaxed);
        counters.retry(verb).inc();
    }
}

/// An action failed and the executor does not retry it (no longer
/// transient, or out of attempts): its call fails.
#[derive(Debug)]
pub struct ActionFailed<'a> {
    pub plugin: &'a str,
    pub action: &'a Action,
    pub error: &'a ActionError,
}

impl ActionFailed<'_> {
    pub fn emit(self, stats: &ExecutorStats, counters: &ActionCounters) {
        let verb = self.action.verb();
        let what = self.action.summary();
        let then = if self.error.permanent() {
            "the request is invalid and is not retried"
        } else {
            "the call fails and its object is handled again after a backoff"
        };
        tracing::error!(plugin = self.plugin, verb, resource = %self.action.target(), error = %self.error, "action failed: {what}; {then}");
        stats.failed.fetch_add(1, Ordering::Relaxed);
        counters.outcome(verb, Outcome::Failed).inc();
    }
}

/// A write was refused because the object is not what the plugin saw: a
/// server-side apply conflict (another field manager owns some of the
/// fields), a uid or resourceVersion precondition that did not hold, or a
/// JSON patch whose `test` failed. Not retried as such (the same request
/// gets the same answer): the call fails and the object is handed back to
/// the plugin, whose next attempt sees its current state.
#[derive(Debug)]
pub struct ActionConflict<'a> {
    pub plugin: &'a str,
    pub action: &'a Action,
    /// The API server's message (naming the conflicting managers and
    /// fields, or the precondition).
    pub message: &'a str,
}

impl ActionConflict<'_> {
    pub fn emit(self, stats: &ExecutorStats, counters: &ActionCounters) {
        let verb = self.action.verb();
        let what = self.action.summary();
        let ssa = matches!(self.action, Action::Apply { .. })
            && self.action.target().preconditions.is_empty();
        if ssa {
            tracing::warn!(plugin = self.plugin, verb, resource = %self.action.target(), conflict = self.message, "conflict on {what}: another field manager owns some of these fields; the call fails and the plugin handles the object again (apply with force, or stop setting those fields)");
        } else {
            tracing::warn!(plugin = self.plugin, verb, resource = %self.action.target(), conflict = self.message, "conflict on {what}: the object changed since the plugin read it (a uid or resourceVersion precondition or a JSON-patch test did not hold); the call fails and the plugin handles the object again from its current state (last-failure: conflict)");
        }
        stats.failed.fetch_add(1, Ordering::Relaxed);
        counters.outcome(verb, Outcome::Conflict).inc();
    }
}

/// An Event was not recorded (after the executor's retries of transient
/// failures). Events are best-effort: the call that emitted it succeeded
/// and is not retried. The error names the real request (`create` of a new
/// Event, `patch` of a series).
#[derive(Debug)]
pub struct EventNotRecorded<'a> {
    pub plugin: &'a str,
    pub action: &'a Action,
    pub error: &'a ActionError,
}

impl EventNotRecorded<'_> {
    pub fn emit(self, stats: &ExecutorStats, counters: &ActionCounters) {
        tracing::warn!(plugin = self.plugin, regarding = %self.action.target(), error = %self.error, "Event not recorded (Events are best-effort: the call that emitted it stands)");
        stats.failed.fetch_add(1, Ordering::Relaxed);
        counters.outcome(self.action.verb(), Outcome::Failed).inc();
    }
}

/// Events of a plugin were dropped without being recorded: the Event queue
/// was full (or the host was shutting down). Logged at most every 10 s per
/// plugin, with the drops since the last report; each drop is counted in
/// `kubewasm_events_dropped_total` where it happens.
#[derive(Debug)]
pub struct EventsDropped<'a> {
    pub plugin: &'a str,
    pub dropped: u64,
    pub capacity: usize,
    pub why: &'static str,
}

impl EventsDropped<'_> {
    pub fn emit(self) {
        tracing::warn!(
            plugin = self.plugin,
            dropped = self.dropped,
            queue_capacity = self.capacity,
            "Events dropped, not recorded: {} (the plugin emits more Events than the API server takes; they are best-effort)",
            self.why
        );
    }
}
