//! Executes one plugin call's actions in order and stops at the first
//! that fails, so the dispatcher can fail the call and retry its object (an
//! ordered pair such as "delete the child, then drop the finalizer" never
//! runs half). Each attempt has a timeout; failures the server may answer
//! differently next time (429, 5xx, transport errors, timeouts) are retried
//! here with exponential backoff and jitter, at least as long as the server
//! asked (`Retry-After`), a bounded number of times; conflicts, refusals
//! and invalid requests are not (the same request gets the same answer).
//! Gated by leadership (a follower executes nothing, and a leader that
//! loses its lease abandons the action in flight) and by the caller's
//! fence (a stopping plugin version starts no further action); a dry-run
//! mode only logs.
//!
//! Events are not part of that ordered list: they are recorded after the
//! call's other actions all succeeded, through a bounded queue served off
//! the call's path ([`super::events`]), and never fail a call.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use backon::BackoffBuilder;
use tokio_util::sync::CancellationToken;

use super::Action;
use super::events::EventQueue;
use super::internal_events::{
    ActionApplied, ActionConflict, ActionFailed, ActionRetrying, EventNotRecorded,
};
use super::rate::ActionRate;
use crate::activity::Activity;
use crate::leader::Leadership;
use crate::telemetry::feed::FeedRecord;
use crate::telemetry::metrics::Outcome;
use crate::telemetry::{ActionCounters, Telemetry};
use futures::future::BoxFuture;
use parking_lot::Mutex;

/// How an action failed, as the API server (or the way to it) answered.
/// What the executor does with each: [`transient`](Self::transient) ones
/// are retried here; the rest go back to the dispatcher, which retries the
/// object with backoff unless [`permanent`](Self::permanent), and hands a
/// [conflict](Self::is_conflict) back to the plugin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    /// 401: the credentials were refused (an expired or rotated token).
    /// Not permanent: tokens are refreshed, so the object is retried.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// 403: RBAC (or a terminating namespace) refuses it. Not permanent:
    /// RBAC changes propagate, so the object is retried.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// Any other 4xx (400, 422, ...) or a body that cannot be encoded:
    /// the same request can never succeed.
    #[error("rejected as invalid: {0}")]
    Invalid(String),
    /// 409, a failed JSON-patch `test` (422), or a uid precondition (422
    /// on `metadata.uid`): the object is not what the plugin saw. Handed
    /// back to the plugin, whose next attempt sees the fresh object.
    #[error("conflict: {0}")]
    Conflict(String),
    /// Not found (404). Success for a delete; for other writes the object
    /// or its namespace is gone, and the next attempt sees the delete.
    #[error("not found: {0}")]
    NotFound(String),
    /// 429 and 5xx: the server asks to come back later, after
    /// `retry_after` when it said (`Retry-After`, `retryAfterSeconds`).
    #[error("throttled: {message}{}", after(retry_after))]
    Throttled {
        message: String,
        retry_after: Option<Duration>,
    },
    /// No answer: a transport error (connection refused or reset, TLS).
    #[error("transient failure: {0}")]
    Transient(String),
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    /// Not executed: this replica does not (or no longer) lead.
    #[error("not executed: this replica is not the leader")]
    NotLeader,
    /// Not executed: the plugin version is stopping (its fence was
    /// cancelled), so this action and the call's later ones were refused.
    #[error("not executed: the plugin version is stopping")]
    Stopping,
}

fn after(retry_after: &Option<Duration>) -> String {
    retry_after.map_or_else(String::new, |d| {
        format!(" (the server asks to retry after {d:?})")
    })
}

impl ActionError {
    /// Whether the executor sends the same request again (the answer may
    /// differ next time): 429, 5xx, transport errors, timeouts.
    pub fn transient(&self) -> bool {
        matches!(
            self,
            ActionError::Transient(_) | ActionError::TimedOut(_) | ActionError::Throttled { .. }
        )
    }

    /// Whether handling the object again can never succeed: only an
    /// invalid request (4xx other than 401, 403, 404, 409 and a failed
    /// precondition; a body that cannot be encoded). 401 and 403 are not:
    /// tokens rotate and RBAC propagates.
    pub fn permanent(&self) -> bool {
        matches!(self, ActionError::Invalid(_))
    }

    /// Whether the object changed under the plugin (409, a failed JSON
    /// patch `test`, a failed uid precondition): its next attempt must
    /// decide again from the fresh object.
    pub fn is_conflict(&self) -> bool {
        matches!(self, ActionError::Conflict(_))
    }

    /// How long the server asked to wait before trying again (429 and 5xx
    /// with `Retry-After` or `details.retryAfterSeconds`).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ActionError::Throttled { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// The action that stopped a call's actions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("action {index} of {total} ({action}) failed after {attempts} attempt(s): {error}")]
pub struct ActionFailure {
    /// 1-based position in the call's actions.
    pub index: usize,
    pub total: usize,
    /// The action, as logged.
    pub action: String,
    pub attempts: u32,
    pub error: ActionError,
}

/// Where actions go: the API server, the local cluster, a recorder.
pub trait ActionSink: Send + Sync + 'static {
    fn execute<'a>(
        &'a self,
        plugin: &'a str,
        action: &'a Action,
    ) -> BoxFuture<'a, Result<(), ActionError>>;
}

/// Counters, for `--until-idle`'s summary and metrics.
#[derive(Debug, Default)]
pub struct ExecutorStats {
    pub applied: AtomicU64,
    pub failed: AtomicU64,
    pub retried: AtomicU64,
    /// Refused: this replica was not (or stopped being) the leader, or the
    /// plugin version's fence was cancelled.
    pub fenced: AtomicU64,
    /// Not run because an earlier action of the same call failed.
    pub skipped: AtomicU64,
    /// Events dropped because the Event queue was full (or the host was
    /// shutting down).
    pub events_dropped: AtomicU64,
}

/// Events queued at most, by default (see [`ExecutorOptions::event_queue`]).
pub const DEFAULT_EVENT_QUEUE: usize = 1024;

#[derive(Debug, Clone)]
pub struct ExecutorOptions {
    pub dry_run: bool,
    /// Attempts per action when failures are transient (429, 5xx,
    /// transport errors, timeouts).
    pub max_attempts: u32,
    /// The first wait between attempts; doubles each time, plus jitter.
    pub base_backoff: Duration,
    /// The longest wait between attempts (before jitter). A server that
    /// asks for longer (`Retry-After`) gets the failure handed back to the
    /// dispatcher, which waits per object instead of holding the call.
    pub max_backoff: Duration,
    /// How long one attempt may take.
    pub timeout: Duration,
    /// Events waiting to be recorded at most; past it, Events are dropped
    /// and counted (`kubewasm_events_dropped_total`).
    pub event_queue: usize,
    /// How long shutdown waits for queued Events to be recorded.
    pub event_drain: Duration,
    /// How the waits between attempts pass.
    pub attempt_wait: AttemptWait,
}

/// How the executor waits between attempts of an action.
#[derive(Clone, Default)]
pub enum AttemptWait {
    /// Sleeps (the host).
    #[default]
    Sleep,
    /// Does not sleep: tells a virtual clock how long the wait was
    /// (`kubewasm test`, whose clock moves only when told).
    Virtual(Arc<dyn Fn(Duration) + Send + Sync>),
}

impl std::fmt::Debug for AttemptWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AttemptWait::Sleep => "Sleep",
            AttemptWait::Virtual(_) => "Virtual",
        })
    }
}

impl AttemptWait {
    async fn wait(&self, d: Duration) {
        match self {
            AttemptWait::Sleep => tokio::time::sleep(d).await,
            AttemptWait::Virtual(advance) => advance(d),
        }
    }
}

impl Default for ExecutorOptions {
    fn default() -> Self {
        Self {
            dry_run: false,
            max_attempts: 8,
            base_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(10),
            timeout: Duration::from_secs(10),
            event_queue: DEFAULT_EVENT_QUEUE,
            event_drain: Duration::from_secs(5),
            attempt_wait: AttemptWait::Sleep,
        }
    }
}

impl ExecutorOptions {
    /// The waits between attempts: exponential with jitter (each wait is
    /// between 1x and 2x its exponential value).
    fn backoff(&self) -> impl Iterator<Item = Duration> + use<> {
        backon::ExponentialBuilder::default()
            .with_min_delay(self.base_backoff)
            .with_max_delay(self.max_backoff)
            .with_factor(2.0)
            .with_jitter()
            .with_max_times(self.max_attempts.saturating_sub(1) as usize)
            .build()
    }
}

pub struct Executor {
    runner: Runner,
    pub stats: Arc<ExecutorStats>,
    events: EventQueue,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("options", &self.runner.options)
            .finish_non_exhaustive()
    }
}

impl Executor {
    pub fn new(sink: Arc<dyn ActionSink>, options: ExecutorOptions) -> Self {
        let stats = Arc::new(ExecutorStats::default());
        let events = EventQueue::new(options.event_queue);
        Self {
            runner: Runner {
                sink,
                options: Arc::new(options),
                leadership: Leadership::always(),
                stats: stats.clone(),
                telemetry: Telemetry::default(),
            },
            stats,
            events,
        }
    }

    /// Executes only while `leadership` leads (the default: always).
    #[must_use]
    pub fn with_leadership(mut self, leadership: Leadership) -> Self {
        self.runner.leadership = leadership;
        self
    }

    /// Counts actions into `telemetry`'s metrics.
    #[must_use]
    pub fn with_telemetry(mut self, telemetry: Telemetry) -> Self {
        self.runner.telemetry = telemetry;
        self
    }

    /// Counts queued and in-flight Events as work in `activity`, so that
    /// `--until-idle` and the tests' idle waits see them recorded.
    #[must_use]
    pub fn with_activity(mut self, activity: Arc<Activity>) -> Self {
        self.events.set_activity(activity);
        self
    }

    /// Executes one plugin call's actions in order, stopping at the first
    /// that fails: the rest are not run (counted as `skipped`) and the
    /// failure is returned, for the dispatcher to retry the object.
    pub async fn execute_all(
        &self,
        plugin: &str,
        actions: Vec<Action>,
    ) -> Result<(), ActionFailure> {
        if actions.is_empty() {
            return Ok(());
        }
        let counters = self.runner.telemetry.metrics().actions(plugin);
        self.execute_all_counted(
            plugin,
            &counters,
            &ActionRate::unlimited(),
            actions,
            &CancellationToken::new(),
        )
        .await
    }

    /// [`execute_all`](Self::execute_all) counting into the plugin's
    /// pre-resolved `counters` (the dispatcher's path: no label lookup),
    /// each action drawn from the plugin's `rate`.
    ///
    /// `fence` cancelled (the plugin version's stop grace ran out) means
    /// no further action of the call starts: the next one and the rest are
    /// refused and counted `fenced`, a wait for the rate or between
    /// attempts is abandoned, and the call fails with
    /// [`ActionError::Stopping`] (an attempt already sent is not recalled).
    ///
    /// Events are taken out of the order: once every other action
    /// succeeded they are handed to the Event queue and the call returns;
    /// a call that fails queues none of them (its retry will emit them
    /// again), and an Event that fails later never fails the call.
    pub async fn execute_all_counted(
        &self,
        plugin: &str,
        counters: &ActionCounters,
        rate: &ActionRate,
        actions: Vec<Action>,
        fence: &CancellationToken,
    ) -> Result<(), ActionFailure> {
        let total = actions.len();
        let mut events = Vec::new();
        for (i, action) in actions.iter().enumerate() {
            if fence.is_cancelled() {
                let error = self.runner.refused(plugin, counters, action);
                self.not_run(counters, &events, &actions[i + 1..], Outcome::Fenced);
                return Err(ActionFailure {
                    index: i + 1,
                    total,
                    action: action.to_string(),
                    attempts: 0,
                    error,
                });
            }
            if action.is_event() {
                events.push(action.clone());
                continue;
            }
            // Timed only for the web view's feed, when a page is open and
            // the feed's budget allows.
            let started = self
                .runner
                .telemetry
                .feed()
                .admit()
                .then(std::time::Instant::now);
            let result = if self.runner.options.dry_run || rate.acquire(plugin, fence).await.is_ok()
            {
                self.runner.run(plugin, counters, action, fence).await
            } else {
                Err((self.runner.refused(plugin, counters, action), 0))
            };
            if let Some(started) = started {
                self.runner
                    .to_feed(plugin, action, &result, started.elapsed());
            }
            if let Err((error, attempts)) = result {
                let outcome = if error == ActionError::Stopping {
                    Outcome::Fenced
                } else {
                    Outcome::Skipped
                };
                self.not_run(counters, &events, &actions[i + 1..], outcome);
                return Err(ActionFailure {
                    index: i + 1,
                    total,
                    action: action.to_string(),
                    attempts,
                    error,
                });
            }
        }
        self.events.enqueue(&self.runner, plugin, counters, events);
        Ok(())
    }

    /// Counts the actions a failed call did not run: its deferred Events
    /// and the actions after the failed one.
    fn not_run(
        &self,
        counters: &ActionCounters,
        deferred: &[Action],
        rest: &[Action],
        outcome: Outcome,
    ) {
        let stat = if outcome == Outcome::Fenced {
            &self.stats.fenced
        } else {
            &self.stats.skipped
        };
        for action in deferred.iter().chain(rest) {
            stat.fetch_add(1, Ordering::Relaxed);
            counters.outcome(action.verb(), outcome).inc();
        }
    }

    /// Executes one action (its own retries included), an Event too, at
    /// once: for callers outside a plugin call.
    pub async fn execute(&self, plugin: &str, action: &Action) -> Result<(), ActionError> {
        let counters = self.runner.telemetry.metrics().actions(plugin);
        self.runner
            .run(plugin, &counters, action, &CancellationToken::new())
            .await
            .map_err(|(e, _)| e)
    }

    /// Events queued or being recorded now.
    pub fn events_pending(&self) -> u64 {
        self.events.pending()
    }

    /// Waits until no Event is queued or being recorded.
    pub async fn events_idle(&self) {
        self.events.idle().await;
    }

    /// Stops the Event queue: refuses new Events, waits for the queued ones
    /// to be recorded (at most [`ExecutorOptions::event_drain`]), then
    /// abandons the rest (counted as dropped) and stops the worker.
    pub async fn shutdown(&self) {
        self.events.shutdown(self.runner.options.event_drain).await;
    }
}

/// What executing an action needs, cheap to clone: the Event queue's
/// worker holds one.
#[derive(Clone)]
pub(crate) struct Runner {
    sink: Arc<dyn ActionSink>,
    options: Arc<ExecutorOptions>,
    leadership: Leadership,
    pub(crate) stats: Arc<ExecutorStats>,
    telemetry: Telemetry,
}

impl Runner {
    /// Refuses `action` because this replica does not (or no longer) lead.
    fn fenced(&self, plugin: &str, counters: &ActionCounters, action: &Action) -> ActionError {
        self.refuse(plugin, counters, action, ActionError::NotLeader)
    }

    /// Refuses `action` because its plugin version is stopping.
    pub(crate) fn refused(
        &self,
        plugin: &str,
        counters: &ActionCounters,
        action: &Action,
    ) -> ActionError {
        self.refuse(plugin, counters, action, ActionError::Stopping)
    }

    /// Counts and logs an action not executed, and returns why.
    fn refuse(
        &self,
        plugin: &str,
        counters: &ActionCounters,
        action: &Action,
        why: ActionError,
    ) -> ActionError {
        self.stats.fenced.fetch_add(1, Ordering::Relaxed);
        counters.outcome(action.verb(), Outcome::Fenced).inc();
        tracing::debug!(plugin, verb = action.verb(), resource = %action.target(), reason = %why, "action not executed");
        why
    }

    /// Shows one action's outcome in the web view's feed.
    pub(crate) fn to_feed(
        &self,
        plugin: &str,
        action: &Action,
        result: &Result<(), (ActionError, u32)>,
        took: Duration,
    ) {
        let target = action.target();
        let (outcome, error) = match result {
            Ok(()) if self.options.dry_run => ("dry_run", None),
            Ok(()) => ("applied", None),
            Err((e @ ActionError::Conflict(_), _)) => ("conflict", Some(e.to_string())),
            Err((ActionError::NotLeader, _)) => ("fenced", None),
            Err((ActionError::Stopping, _)) => ("stopping", None),
            Err((e, _)) => ("failed", Some(e.to_string())),
        };
        self.telemetry.feed().publish(FeedRecord {
            t: FeedRecord::now_ms(),
            row: "action",
            plugin: Arc::from(plugin),
            kind: target.kind.gvk.kind.clone(),
            namespace: target.namespace.clone(),
            name: target.name.clone(),
            what: action.verb(),
            outcome,
            us: FeedRecord::micros(took),
            error,
        });
    }

    pub(crate) fn feed_admits(&self) -> bool {
        self.telemetry.feed().admit()
    }

    /// Executes one action with its retries; `stop` cancelled abandons a
    /// wait between attempts.
    pub(crate) async fn run(
        &self,
        plugin: &str,
        counters: &ActionCounters,
        action: &Action,
        stop: &CancellationToken,
    ) -> Result<(), (ActionError, u32)> {
        let mut gate = self.leadership.subscribe();
        let term = *gate.borrow_and_update();
        if !term.leading {
            return Err((self.fenced(plugin, counters, action), 0));
        }
        // Resolves when this term ends (even if a new one began since).
        let ended = async move {
            if gate
                .wait_for(|s| !s.leading || s.term != term.term)
                .await
                .is_err()
            {
                std::future::pending::<()>().await;
            }
        };
        tokio::pin!(ended);
        if self.options.dry_run {
            dry_run(plugin, action, &self.telemetry.redactor());
            self.stats.applied.fetch_add(1, Ordering::Relaxed);
            counters.outcome(action.verb(), Outcome::DryRun).inc();
            return Ok(());
        }
        let mut waits = self.options.backoff();
        let mut attempt = 1;
        loop {
            let result = tokio::select! {
                biased;
                () = &mut ended => return Err((self.fenced(plugin, counters, action), attempt)),
                r = tokio::time::timeout(self.options.timeout, self.sink.execute(plugin, action)) => {
                    r.unwrap_or(Err(ActionError::TimedOut(self.options.timeout)))
                }
            };
            let error = match result {
                Ok(()) => {
                    ActionApplied { plugin, action }.emit(&self.stats, counters);
                    return Ok(());
                }
                Err(ActionError::NotFound(_)) if matches!(action, Action::Delete { .. }) => {
                    ActionApplied { plugin, action }.emit(&self.stats, counters);
                    return Ok(());
                }
                Err(e) => e,
            };
            let Some(wait) = self.next_wait(&error, &mut waits) else {
                self.failed(plugin, counters, action, &error);
                return Err((error, attempt));
            };
            ActionRetrying {
                plugin,
                action,
                attempt,
                error: &error,
                wait,
            }
            .emit(&self.stats, counters);
            tokio::select! {
                biased;
                () = &mut ended => return Err((self.fenced(plugin, counters, action), attempt)),
                () = stop.cancelled() => return Err((self.refused(plugin, counters, action), attempt)),
                () = self.options.attempt_wait.wait(wait) => {}
            }
            attempt += 1;
        }
    }

    /// The wait before the next attempt, or `None` to stop retrying: the
    /// failure is not transient, the attempts are spent, or the server
    /// asked for a longer wait than [`ExecutorOptions::max_backoff`] (the
    /// dispatcher then waits it out per object, holding no call).
    fn next_wait(
        &self,
        error: &ActionError,
        waits: &mut impl Iterator<Item = Duration>,
    ) -> Option<Duration> {
        if !error.transient() {
            return None;
        }
        let wait = waits.next()?;
        match error.retry_after() {
            Some(asked) if asked > self.options.max_backoff => None,
            Some(asked) => Some(wait.max(asked)),
            None => Some(wait),
        }
    }

    fn failed(
        &self,
        plugin: &str,
        counters: &ActionCounters,
        action: &Action,
        error: &ActionError,
    ) {
        if action.is_event() {
            EventNotRecorded {
                plugin,
                action,
                error,
            }
            .emit(&self.stats, counters);
        } else if let ActionError::Conflict(message) = error {
            ActionConflict {
                plugin,
                action,
                message,
            }
            .emit(&self.stats, counters);
        } else {
            ActionFailed {
                plugin,
                action,
                error,
            }
            .emit(&self.stats, counters);
        }
    }
}

/// `--dry-run`'s line for an action: what would be sent, body included
/// (an apply's object as it would go, with its preconditions; a patch's
/// patch; an Event's note).
fn dry_run(plugin: &str, action: &Action, redactor: &crate::redact::Redactor) {
    match action {
        Action::Apply { target, object, .. } => {
            let g = &target.kind.gvk;
            let mut body = object.clone();
            target.preconditions.embed_in(&mut body);
            redactor.redact(&g.api_version(), &g.kind, &mut body);
            tracing::info!(plugin, action = %action.summary(), body = %body, "dry run: not sending (server-side apply)");
        }
        Action::Patch {
            target,
            patch_type: super::PatchType::Merge,
            patch,
        } => {
            let g = &target.kind.gvk;
            let mut body = patch.clone();
            target.preconditions.embed_in(&mut body);
            redactor.redact(&g.api_version(), &g.kind, &mut body);
            tracing::info!(plugin, action = %action.summary(), body = %body, "dry run: not sending (merge patch)");
        }
        Action::Patch {
            target,
            patch_type: super::PatchType::Json,
            patch,
        } => {
            let g = &target.kind.gvk;
            let mut ops = target.preconditions.json_patch_ops();
            ops.extend(patch.as_array().into_iter().flatten().cloned());
            let mut body = serde_json::Value::Array(ops);
            redactor.json_patch(&g.api_version(), &g.kind, &mut body);
            tracing::info!(plugin, action = %action.summary(), body = %body, "dry run: not sending (JSON patch)");
        }
        Action::Delete { .. } | Action::Event { .. } => {
            tracing::info!(plugin, action = %action, "dry run: not sending");
        }
    }
}

/// Records actions instead of executing them: for fixture tests and
/// `--dry-run`-style inspection.
#[derive(Debug, Default)]
pub struct RecordingSink {
    actions: Mutex<Vec<(String, Action)>>,
}

impl RecordingSink {
    pub fn take(&self) -> Vec<(String, Action)> {
        std::mem::take(&mut *self.actions.lock())
    }
}

impl ActionSink for RecordingSink {
    fn execute<'a>(
        &'a self,
        plugin: &'a str,
        action: &'a Action,
    ) -> BoxFuture<'a, Result<(), ActionError>> {
        self.actions
            .lock()
            .push((plugin.to_owned(), action.clone()));
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::actions::{EventType, Target};
    use crate::kind::KindInfo;

    /// A sink whose writes take 5s, recording those that complete.
    #[derive(Default)]
    struct SlowSink(Mutex<Vec<String>>);

    impl ActionSink for SlowSink {
        fn execute<'a>(
            &'a self,
            _plugin: &'a str,
            action: &'a Action,
        ) -> BoxFuture<'a, Result<(), ActionError>> {
            Box::pin(async move {
                tokio::time::sleep(Duration::from_secs(5)).await;
                self.0.lock().push(action.to_string());
                Ok(())
            })
        }
    }

    fn event(reason: &str) -> Action {
        Action::Event {
            regarding: Target {
                kind: KindInfo::new("", "v1", "ConfigMap", "configmaps", true).into(),
                namespace: Some("n".into()),
                name: "c".into(),
                uid: None,
                preconditions: Default::default(),
            },
            event_type: EventType::Normal,
            reason: reason.into(),
            note: String::new(),
            reporter: "p@0".into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn followers_execute_nothing_and_a_lost_term_abandons_the_write_in_flight() {
        let sink = Arc::new(SlowSink::default());
        let leadership = Leadership::follower();
        let ex = Arc::new(
            Executor::new(sink.clone(), ExecutorOptions::default())
                .with_leadership(leadership.clone()),
        );
        assert_eq!(
            ex.execute("p", &event("follower")).await,
            Err(ActionError::NotLeader)
        );
        assert_eq!(ex.stats.fenced.load(Ordering::Relaxed), 1);

        leadership.gain();
        let ex2 = ex.clone();
        let in_flight = tokio::spawn(async move { ex2.execute("p", &event("lost")).await });
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Lost and regained before the write returns: still a new term, so
        // the old term's write is abandoned.
        leadership.lose();
        leadership.gain();
        assert_eq!(in_flight.await.unwrap(), Err(ActionError::NotLeader));
        assert_eq!(ex.stats.fenced.load(Ordering::Relaxed), 2);

        assert_eq!(ex.execute("p", &event("leader")).await, Ok(()));
        let done = sink.0.lock().clone();
        assert_eq!(done.len(), 1, "{done:?}");
        assert!(done[0].contains("leader"), "{done:?}");
    }

    /// A sink that answers each action (by its [`Action::summary`], Event
    /// reasons for Events) from a script (default: success), logs every
    /// attempt, and holds Events while `hold` has no permits.
    #[derive(Default)]
    struct Scripted {
        answers: Mutex<std::collections::HashMap<String, Vec<Result<(), ActionError>>>>,
        log: Mutex<Vec<String>>,
        hold: Option<Arc<tokio::sync::Semaphore>>,
        /// Cancelled when an action with this name is executed.
        cancel_on: Option<(String, CancellationToken)>,
    }

    fn name(action: &Action) -> String {
        match action {
            Action::Event { reason, .. } => format!("event {reason}"),
            other => other.summary(),
        }
    }

    impl Scripted {
        fn answer(&self, action: &str, answers: Vec<Result<(), ActionError>>) {
            self.answers.lock().insert(action.to_owned(), answers);
        }

        fn log(&self) -> Vec<String> {
            self.log.lock().clone()
        }
    }

    impl ActionSink for Scripted {
        fn execute<'a>(
            &'a self,
            _plugin: &'a str,
            action: &'a Action,
        ) -> BoxFuture<'a, Result<(), ActionError>> {
            Box::pin(async move {
                let name = name(action);
                if let (Some(hold), true) = (&self.hold, action.is_event()) {
                    hold.acquire().await.unwrap().forget();
                }
                self.log.lock().push(name.clone());
                if let Some((on, token)) = &self.cancel_on
                    && *on == name
                {
                    token.cancel();
                }
                let mut answers = self.answers.lock();
                match answers.get_mut(&name) {
                    Some(a) if !a.is_empty() => a.remove(0),
                    _ => Ok(()),
                }
            })
        }
    }

    fn patch(name: &str) -> Action {
        Action::Patch {
            target: Target::new(
                KindInfo::new("", "v1", "ConfigMap", "configmaps", true),
                Some("n".into()),
                name,
            ),
            patch_type: crate::actions::PatchType::Merge,
            patch: serde_json::json!({"data": {"k": "v"}}),
        }
    }

    fn quick() -> ExecutorOptions {
        ExecutorOptions {
            base_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
            ..ExecutorOptions::default()
        }
    }

    async fn call(
        ex: &Executor,
        actions: Vec<Action>,
        fence: &CancellationToken,
    ) -> Result<(), ActionFailure> {
        let counters = ex.runner.telemetry.metrics().actions("p");
        ex.execute_all_counted("p", &counters, &ActionRate::unlimited(), actions, fence)
            .await
    }

    fn count(ex: &Executor, verb: &str, outcome: Outcome) -> u64 {
        ex.runner
            .telemetry
            .metrics()
            .actions("p")
            .outcome(verb, outcome)
            .get()
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_fence_refuses_the_calls_remaining_actions() {
        // Cancelled before the call: nothing runs.
        let sink = Arc::new(Scripted::default());
        let ex = Executor::new(sink.clone(), quick());
        let fence = CancellationToken::new();
        fence.cancel();
        let err = call(&ex, vec![patch("a"), event("e"), patch("b")], &fence)
            .await
            .unwrap_err();
        assert_eq!(
            (err.error, err.index, err.attempts),
            (ActionError::Stopping, 1, 0)
        );
        assert!(sink.log().is_empty());
        assert_eq!(ex.stats.fenced.load(Ordering::Relaxed), 3);
        assert_eq!(count(&ex, "patch", Outcome::Fenced), 2);
        assert_eq!(count(&ex, "create", Outcome::Fenced), 1);

        // Cancelled while the first action runs: it completes (it was sent),
        // the rest are refused, and the Event before them is not queued.
        let fence = CancellationToken::new();
        let sink = Arc::new(Scripted {
            cancel_on: Some(("patch configmaps n/a".into(), fence.clone())),
            ..Scripted::default()
        });
        let ex = Executor::new(sink.clone(), quick());
        let err = call(
            &ex,
            vec![event("e"), patch("a"), patch("b"), patch("c")],
            &fence,
        )
        .await
        .unwrap_err();
        assert_eq!((err.error, err.index), (ActionError::Stopping, 3));
        ex.events_idle().await;
        assert_eq!(sink.log(), ["patch configmaps n/a"]);
        assert_eq!(ex.stats.applied.load(Ordering::Relaxed), 1);
        // b, c and the deferred Event.
        assert_eq!(ex.stats.fenced.load(Ordering::Relaxed), 3);
        assert_eq!(ex.events_pending(), 0);

        // Cancelled during the wait between attempts: the wait is
        // abandoned, the action and the rest are refused.
        let sink = Arc::new(Scripted::default());
        sink.answer(
            "patch configmaps n/a",
            vec![Err(ActionError::Transient("reset".into()))],
        );
        let ex = Arc::new(Executor::new(sink.clone(), quick()));
        let fence = CancellationToken::new();
        let (ex2, fence2) = (ex.clone(), fence.clone());
        let running =
            tokio::spawn(async move { call(&ex2, vec![patch("a"), patch("b")], &fence2).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            sink.log(),
            ["patch configmaps n/a"],
            "first attempt, then a wait"
        );
        fence.cancel();
        let err = running.await.unwrap().unwrap_err();
        assert_eq!(
            (err.error, err.index, err.attempts),
            (ActionError::Stopping, 1, 1)
        );
        assert_eq!(sink.log().len(), 1, "no attempt after the fence");
        assert_eq!(ex.stats.fenced.load(Ordering::Relaxed), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn events_are_recorded_after_the_calls_other_actions_and_off_its_path() {
        let hold = Arc::new(tokio::sync::Semaphore::new(0));
        let sink = Arc::new(Scripted {
            hold: Some(hold.clone()),
            ..Scripted::default()
        });
        let activity = Arc::new(Activity::default());
        let ex = Executor::new(sink.clone(), quick()).with_activity(activity.clone());
        let fence = CancellationToken::new();
        // The call returns while its Events are still held by the sink.
        call(
            &ex,
            vec![event("first"), patch("a"), event("second")],
            &fence,
        )
        .await
        .unwrap();
        assert_eq!(sink.log(), ["patch configmaps n/a"]);
        assert_eq!(ex.events_pending(), 2);
        assert!(!activity.is_idle(), "queued Events are work");
        hold.add_permits(2);
        ex.events_idle().await;
        assert_eq!(
            sink.log(),
            ["patch configmaps n/a", "event first", "event second"]
        );
        assert!(activity.is_idle());
        assert_eq!(count(&ex, "create", Outcome::Applied), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_call_queues_none_of_its_events_and_a_failed_event_fails_nothing() {
        let sink = Arc::new(Scripted::default());
        sink.answer(
            "patch configmaps n/b",
            vec![Err(ActionError::Invalid("bad".into()))],
        );
        sink.answer(
            "event refused",
            vec![Err(ActionError::Forbidden("terminating namespace".into()))],
        );
        let ex = Executor::new(sink.clone(), quick());
        let fence = CancellationToken::new();
        let err = call(&ex, vec![event("lost"), patch("a"), patch("b")], &fence)
            .await
            .unwrap_err();
        assert_eq!(err.index, 3);
        ex.events_idle().await;
        assert_eq!(sink.log(), ["patch configmaps n/a", "patch configmaps n/b"]);
        assert_eq!(count(&ex, "create", Outcome::Skipped), 1);

        // Its retry succeeds: the Event goes once.
        call(&ex, vec![event("lost"), patch("a"), patch("b")], &fence)
            .await
            .unwrap();
        ex.events_idle().await;
        assert_eq!(sink.log().iter().filter(|l| *l == "event lost").count(), 1);

        // A refused Event is counted as a failure, and the call stands.
        call(&ex, vec![event("refused"), patch("c")], &fence)
            .await
            .unwrap();
        ex.events_idle().await;
        assert_eq!(count(&ex, "create", Outcome::Failed), 1);
        assert!(sink.log().contains(&"patch configmaps n/c".to_owned()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_event_queue_drops_and_counts() {
        let hold = Arc::new(tokio::sync::Semaphore::new(0));
        let sink = Arc::new(Scripted {
            hold: Some(hold.clone()),
            ..Scripted::default()
        });
        let ex = Executor::new(
            sink.clone(),
            ExecutorOptions {
                event_queue: 2,
                ..quick()
            },
        );
        let fence = CancellationToken::new();
        let events: Vec<Action> = (0..5).map(|i| event(&format!("e{i}"))).collect();
        // Queued in one go (the worker has not taken any yet): 2 fit.
        call(&ex, events, &fence).await.unwrap();
        assert_eq!(ex.stats.events_dropped.load(Ordering::Relaxed), 3);
        assert_eq!(
            ex.runner
                .telemetry
                .metrics()
                .actions("p")
                .events_dropped
                .get(),
            3
        );
        let metrics = ex.runner.telemetry.metrics().encode().unwrap();
        assert!(
            metrics.contains("kubewasm_events_dropped_total{plugin=\"p\"} 3"),
            "{metrics}"
        );
        hold.add_permits(5);
        ex.events_idle().await;
        assert_eq!(sink.log(), ["event e0", "event e1"]);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_records_queued_events_within_the_drain_time_and_drops_the_rest() {
        // Each Event takes 5 s: 3 fit in a 20 s drain.
        let sink = Arc::new(SlowSink::default());
        let ex = Executor::new(
            sink.clone(),
            ExecutorOptions {
                event_drain: Duration::from_secs(20),
                ..quick()
            },
        );
        let fence = CancellationToken::new();
        call(&ex, vec![event("a"), event("b"), event("c")], &fence)
            .await
            .unwrap();
        ex.shutdown().await;
        assert_eq!(sink.0.lock().len(), 3);
        // Refused once shut down.
        call(&ex, vec![event("late")], &fence).await.unwrap();
        assert_eq!(ex.stats.events_dropped.load(Ordering::Relaxed), 1);

        // A 7 s drain: one is recorded, the one in flight is abandoned and
        // the last is dropped unsent.
        let sink = Arc::new(SlowSink::default());
        let ex = Executor::new(
            sink.clone(),
            ExecutorOptions {
                event_drain: Duration::from_secs(7),
                ..quick()
            },
        );
        call(&ex, vec![event("a"), event("b"), event("c")], &fence)
            .await
            .unwrap();
        let started = tokio::time::Instant::now();
        ex.shutdown().await;
        assert!(started.elapsed() < Duration::from_secs(8));
        assert_eq!(sink.0.lock().len(), 1);
        assert_eq!(ex.stats.events_dropped.load(Ordering::Relaxed), 2);
        assert_eq!(ex.events_pending(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_servers_retry_after_is_honoured_or_handed_back() {
        let sink = Arc::new(Scripted::default());
        let throttled = |secs| {
            Err(ActionError::Throttled {
                message: "429".into(),
                retry_after: Some(Duration::from_secs(secs)),
            })
        };
        sink.answer("patch configmaps n/a", vec![throttled(3), Ok(())]);
        let ex = Executor::new(sink.clone(), quick());
        let started = tokio::time::Instant::now();
        ex.execute("p", &patch("a")).await.unwrap();
        assert!(
            started.elapsed() >= Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(ex.stats.retried.load(Ordering::Relaxed), 1);

        // Longer than max_backoff: not waited out here, handed back.
        sink.answer("patch configmaps n/b", vec![throttled(60), Ok(())]);
        let started = tokio::time::Instant::now();
        let err = ex.execute("p", &patch("b")).await.unwrap_err();
        assert_eq!(err.retry_after(), Some(Duration::from_secs(60)));
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(sink.log().iter().filter(|l| l.ends_with("n/b")).count(), 1);
    }

    #[test]
    fn only_invalid_requests_are_permanent() {
        let cases = [
            (ActionError::Unauthorized("t".into()), false, false, false),
            (ActionError::Forbidden("t".into()), false, false, false),
            (ActionError::Invalid("t".into()), true, false, false),
            (ActionError::Conflict("t".into()), false, true, false),
            (ActionError::NotFound("t".into()), false, false, false),
            (
                ActionError::Throttled {
                    message: "t".into(),
                    retry_after: None,
                },
                false,
                false,
                true,
            ),
            (ActionError::Transient("t".into()), false, false, true),
            (
                ActionError::TimedOut(Duration::from_secs(1)),
                false,
                false,
                true,
            ),
        ];
        for (e, permanent, conflict, transient) in cases {
            assert_eq!(e.permanent(), permanent, "{e}");
            assert_eq!(e.is_conflict(), conflict, "{e}");
            assert_eq!(e.transient(), transient, "{e}");
            assert_eq!(e.retry_after(), None, "{e}");
        }
        let e = ActionError::Throttled {
            message: "m".into(),
            retry_after: Some(Duration::from_secs(2)),
        };
        assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
        assert!(e.to_string().contains("retry after 2s"), "{e}");
    }

    /// Log lines written while a test runs on its own thread.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn dry_run_prints_an_applys_body_as_it_would_be_sent_like_a_patchs() {
        let logs = Captured::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let sink = Arc::new(Scripted::default());
        let ex = Executor::new(
            sink.clone(),
            ExecutorOptions {
                dry_run: true,
                ..quick()
            },
        );
        let mut guarded = Target::new(
            KindInfo::new("", "v1", "ConfigMap", "configmaps", true),
            Some("n".into()),
            "a",
        );
        guarded.preconditions.resource_version = Some("7".into());
        let apply = Action::Apply {
            target: guarded,
            object: serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "namespace": "n"}, "data": {"k": "applied"}}),
            force: false,
            status: false,
        };
        call(&ex, vec![apply, patch("b")], &CancellationToken::new())
            .await
            .unwrap();
        assert!(sink.log().is_empty(), "a dry run sends nothing");
        let text = String::from_utf8(logs.0.lock().clone()).unwrap();
        let line = |needle: &str| {
            text.lines()
                .find(|l| l.contains(needle))
                .unwrap_or_else(|| panic!("no line with {needle}: {text}"))
                .to_owned()
        };
        let applied = line("apply configmaps n/a");
        assert!(applied.contains("dry run: not sending"), "{applied}");
        assert!(
            applied.contains(r#""data":{"k":"applied"}"#)
                && applied.contains(r#""resourceVersion":"7""#),
            "the body as sent, precondition included: {applied}"
        );
        let patched = line("patch configmaps n/b");
        assert!(patched.contains(r#"{"data":{"k":"v"}}"#), "{patched}");
        assert_eq!(count(&ex, "patch", Outcome::DryRun), 2);
    }
}
