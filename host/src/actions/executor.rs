//! Executes one plugin call's actions in order and stops at the first
//! that fails, so the dispatcher can fail the call and retry its delta (an
//! ordered pair such as "delete the child, then drop the finalizer" never
//! runs half). Each attempt has a timeout; transient failures (429, 5xx,
//! transport errors, timeouts) are retried here with exponential backoff
//! and jitter, a bounded number of times; conflicts and refusals are not
//! (retrying the same request gives the same answer). Gated by leadership
//! (a follower executes nothing, and a leader that loses its lease
//! abandons the action in flight); a dry-run mode only logs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use backon::BackoffBuilder;
use tokio_util::sync::CancellationToken;

use super::Action;
use super::rate::ActionRate;
use crate::leader::Leadership;
use crate::telemetry::events::{ActionApplied, ActionConflict, ActionFailed, ActionRetrying};
use crate::telemetry::feed::FeedRecord;
use crate::telemetry::metrics::Outcome;
use crate::telemetry::{ActionCounters, Telemetry};
use futures::future::BoxFuture;
use parking_lot::Mutex;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    #[error("forbidden: {0}")]
    Forbidden(String),
    #[error("rejected as invalid: {0}")]
    Invalid(String),
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("transient failure: {0}")]
    Transient(String),
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    /// Not executed: this replica does not (or no longer) lead.
    #[error("not executed: this replica is not the leader")]
    NotLeader,
    /// Abandoned between attempts: the plugin version is stopping.
    #[error("abandoned: the plugin version is stopping")]
    Stopping,
}

impl ActionError {
    /// Whether the executor tries the same request again (the answer may
    /// differ next time).
    pub fn transient(&self) -> bool {
        matches!(self, ActionError::Transient(_) | ActionError::TimedOut(_))
    }

    /// The delay the server asked for (lead's placeholder until the
    /// status-code mapping lands).
    pub fn retry_after(&self) -> Option<Duration> {
        None
    }

    /// Whether the same delta handled again can never succeed: the API
    /// server refuses the request as such (403, 400/422).
    pub fn permanent(&self) -> bool {
        matches!(self, ActionError::Forbidden(_) | ActionError::Invalid(_))
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
    /// Refused or abandoned because this replica was not (or stopped
    /// being) the leader.
    pub fenced: AtomicU64,
    /// Not run because an earlier action of the same call failed.
    pub skipped: AtomicU64,
}

#[derive(Debug, Clone)]
pub struct ExecutorOptions {
    pub dry_run: bool,
    /// Attempts per action when failures are transient (429, 5xx,
    /// transport errors, timeouts).
    pub max_attempts: u32,
    /// The first wait between attempts; doubles each time, plus jitter.
    pub base_backoff: Duration,
    /// The longest wait between attempts (before jitter).
    pub max_backoff: Duration,
    /// How long one attempt may take.
    pub timeout: Duration,
}

impl Default for ExecutorOptions {
    fn default() -> Self {
        Self {
            dry_run: false,
            max_attempts: 8,
            base_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(10),
            timeout: Duration::from_secs(10),
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
    sink: Arc<dyn ActionSink>,
    options: ExecutorOptions,
    leadership: Leadership,
    pub stats: ExecutorStats,
    telemetry: Telemetry,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("options", &self.options)
            .finish()
    }
}

impl Executor {
    pub fn new(sink: Arc<dyn ActionSink>, options: ExecutorOptions) -> Self {
        Self {
            sink,
            options,
            leadership: Leadership::always(),
            stats: ExecutorStats::default(),
            telemetry: Telemetry::default(),
        }
    }

    /// Executes only while `leadership` leads (the default: always).
    #[must_use]
    pub fn with_leadership(mut self, leadership: Leadership) -> Self {
        self.leadership = leadership;
        self
    }

    /// Counts actions into `telemetry`'s metrics.
    #[must_use]
    pub fn with_telemetry(mut self, telemetry: Telemetry) -> Self {
        self.telemetry = telemetry;
        self
    }

    fn fenced(&self, plugin: &str, counters: &ActionCounters, action: &Action) -> ActionError {
        self.stats.fenced.fetch_add(1, Ordering::Relaxed);
        counters.outcome(action.verb(), Outcome::Fenced).inc();
        tracing::debug!(plugin, verb = action.verb(), resource = %action.target(), "not the leader: action not executed");
        ActionError::NotLeader
    }

    /// Executes one plugin call's actions in order, stopping at the first
    /// that fails: the rest are not run (counted as `skipped`) and the
    /// failure is returned, for the dispatcher to retry the delta.
    pub async fn execute_all(
        &self,
        plugin: &str,
        actions: Vec<Action>,
    ) -> Result<(), ActionFailure> {
        if actions.is_empty() {
            return Ok(());
        }
        let counters = self.telemetry.metrics().actions(plugin);
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
    /// each action drawn from the plugin's `rate`; `stop` cancelled
    /// abandons the waits for the rate and between attempts.
    pub async fn execute_all_counted(
        &self,
        plugin: &str,
        counters: &ActionCounters,
        rate: &ActionRate,
        actions: Vec<Action>,
        stop: &CancellationToken,
    ) -> Result<(), ActionFailure> {
        let total = actions.len();
        for (i, action) in actions.iter().enumerate() {
            // Timed only for the web view's feed, when a page is open and
            // the feed's budget allows.
            let started = self.telemetry.feed().admit().then(std::time::Instant::now);
            let result = if self.options.dry_run || rate.acquire(plugin, stop).await.is_ok() {
                self.run(plugin, counters, action, stop).await
            } else {
                Err((ActionError::Stopping, 0))
            };
            if let Some(started) = started {
                self.to_feed(plugin, action, &result, started.elapsed());
            }
            if let Err((error, attempts)) = result {
                for rest in &actions[i + 1..] {
                    self.stats.skipped.fetch_add(1, Ordering::Relaxed);
                    counters.outcome(rest.verb(), Outcome::Skipped).inc();
                }
                return Err(ActionFailure {
                    index: i + 1,
                    total,
                    action: action.to_string(),
                    attempts,
                    error,
                });
            }
        }
        Ok(())
    }

    /// Shows one action's outcome in the web view's feed.
    fn to_feed(
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

    /// Executes one action (its own retries included).
    pub async fn execute(&self, plugin: &str, action: &Action) -> Result<(), ActionError> {
        let counters = self.telemetry.metrics().actions(plugin);
        self.run(plugin, &counters, action, &CancellationToken::new())
            .await
            .map_err(|(e, _)| e)
    }

    async fn run(
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
            tracing::info!(plugin, action = %action, "dry run: not sending");
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
            let wait = if error.transient() {
                waits.next()
            } else {
                None
            };
            let Some(wait) = wait else {
                if let ActionError::Conflict(message) = &error {
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
                        error: &error,
                    }
                    .emit(&self.stats, counters);
                }
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
                () = stop.cancelled() => return Err((ActionError::Stopping, attempt)),
                () = tokio::time::sleep(wait) => {}
            }
            attempt += 1;
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
}
