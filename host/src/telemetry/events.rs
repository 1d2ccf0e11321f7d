//! Typed telemetry events, in vector's style: one struct per occurrence
//! whose `emit()` writes the log line and counts it, so a log message and
//! its metric never drift apart. Per-delta successes are not events (they
//! are counted through pre-resolved handles); these are the occurrences
//! worth a log line.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::actions::Action;
use crate::actions::executor::{ActionError, ExecutorStats};
use crate::dispatch::{Failure, PluginStats};
use crate::informer::{InformerSpec, SourceError};
use crate::runtime::CallError;

use super::metrics::{ActionCounters, InformerCounters, Metrics, Outcome};

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

/// A handler call went over a cap of the plugin's limits and failed.
#[derive(Debug)]
pub struct PluginLimitExceeded<'a> {
    pub plugin: &'a str,
    pub cap: crate::runtime::limits::Cap,
    pub message: &'a str,
}

impl PluginLimitExceeded<'_> {
    pub fn emit(self, counter: &prometheus_client::metrics::counter::Counter) {
        tracing::warn!(
            plugin = self.plugin,
            limit = self.cap.label(),
            "handler call failed: plugin exceeded {}",
            self.message
        );
        counter.inc();
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

/// A delta failed (its handler call, or one of the call's actions) and
/// will be handled again after `wait`.
#[derive(Debug)]
pub struct DeltaRetrying<'a> {
    pub plugin: &'a str,
    pub kind: &'a str,
    pub key: &'a str,
    pub attempt: u32,
    pub error: &'a Failure,
    pub wait: Duration,
}

impl DeltaRetrying<'_> {
    pub fn emit(self, stats: &PluginStats) {
        let Self {
            plugin,
            kind,
            key,
            attempt,
            error,
            wait,
        } = self;
        tracing::warn!(plugin, kind, key, attempt, error = %error, "{}; retrying the delta in {wait:?}", error.what());
        if matches!(error, Failure::Call(_)) {
            stats.failed_calls.fetch_add(1, Ordering::Relaxed);
        }
        stats.retries.fetch_add(1, Ordering::Relaxed);
    }
}

/// A key failed for good (the plugin or the API server said so), or was
/// parked (past its attempt budget or backoff cap, still retried every
/// `retry_every`): it goes to the plugin's dead letters.
#[derive(Debug)]
pub struct DeltaDead<'a> {
    pub plugin: &'a str,
    pub kind: &'a str,
    pub key: &'a str,
    pub attempts: u32,
    /// `added`, `updated`, `deleted`, `resync`, `requeue` or `synced`.
    pub delta: &'a str,
    pub error: &'a Failure,
    pub retry_every: Option<Duration>,
}

impl DeltaDead<'_> {
    pub fn emit(self, stats: &PluginStats) {
        let Self {
            plugin,
            kind,
            key,
            attempts,
            delta,
            error,
            retry_every,
        } = self;
        match retry_every {
            Some(every) => {
                tracing::error!(plugin, kind, key, attempts, delta, error = %error, "{}; the key is parked as a dead letter (listed by `kubewasm dead-letters`) and still retried every {every:?}", error.what())
            }
            None => {
                tracing::error!(plugin, kind, key, attempts, delta, error = %error, "{}; not retried: the delta goes to dead letters (listed by `kubewasm dead-letters`; a delete is handed to the plugin's next version)", error.what())
            }
        }
        if matches!(error, Failure::Call(_)) {
            stats.failed_calls.fetch_add(1, Ordering::Relaxed);
        }
        stats.dead.fetch_add(1, Ordering::Relaxed);
    }
}

/// A plugin trapped `unhealthy_after` times in a row.
#[derive(Debug)]
pub struct PluginUnhealthy<'a> {
    pub plugin: &'a str,
    pub consecutive_failures: u64,
    pub error: &'a CallError,
}

impl PluginUnhealthy<'_> {
    pub fn emit(self) {
        tracing::error!(plugin = self.plugin, consecutive_failures = self.consecutive_failures, error = %self.error, "plugin is unhealthy: it keeps trapping; other plugins are unaffected");
    }
}

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

/// A plugin file was loaded (first time) or replaced a running version.
#[derive(Debug)]
pub struct PluginLoaded<'a> {
    pub plugin: &'a str,
    pub file: &'a std::path::Path,
    /// The version the plugin sees in its context: the component's SHA-256
    /// (the file with its sidecar is what reloads compare).
    pub version: &'a str,
    pub replaced: bool,
}

impl PluginLoaded<'_> {
    pub fn emit(self, metrics: &Metrics) {
        tracing::info!(plugin = %self.plugin, file = %self.file.display(), version = self.version, "plugin {}", if self.replaced { "replaced" } else { "loaded" });
        if self.replaced {
            metrics.plugin_reloaded(self.plugin);
        }
    }
}

/// A plugin file could not be loaded.
#[derive(Debug)]
pub struct PluginLoadFailed<'a> {
    pub plugin: &'a str,
    pub file: &'a std::path::Path,
    pub error: &'a str,
    /// A previous version keeps serving.
    pub previous_serving: bool,
}

impl PluginLoadFailed<'_> {
    pub fn emit(self, metrics: &Metrics) {
        tracing::error!(
            plugin = %self.plugin,
            file = %self.file.display(),
            error = %self.error,
            "cannot load plugin{}",
            if self.previous_serving { "; the previous version keeps serving" } else { "" }
        );
        metrics.plugin_load_failed(self.plugin);
    }
}

/// A core task ended without being asked to (or panicked): `/healthz`
/// fails from now on.
#[derive(Debug)]
pub struct TaskDied<'a> {
    pub task: &'a str,
    pub why: &'a str,
    pub panicked: bool,
}

impl TaskDied<'_> {
    pub fn emit(self) {
        tracing::error!(
            task = self.task,
            why = self.why,
            panicked = self.panicked,
            "core task ended unexpectedly; /healthz now fails"
        );
    }
}

/// The metrics and health listener is up.
#[derive(Debug)]
pub struct MetricsListening {
    pub addr: std::net::SocketAddr,
    /// `/metrics` and `/dead-letters` need a bearer token (`--metrics-auth`).
    pub auth: bool,
}

impl MetricsListening {
    pub fn emit(self) {
        tracing::info!(addr = %self.addr, auth = self.auth, "metrics listening");
    }
}

/// The web view's listener is up.
#[derive(Debug)]
pub struct UiListening {
    pub addr: std::net::SocketAddr,
}

impl UiListening {
    pub fn emit(self) {
        let url = format!("http://{}/ui", self.addr);
        if self.addr.ip().is_loopback() {
            tracing::info!(url = %url, "web view serving");
        } else {
            tracing::warn!(url = %url, "web view serving on a non-loopback address: whoever reaches it sees the host's plugins, caches and feed (Secrets redacted); list the names clients use with --ui-allowed-host");
        }
    }
}
