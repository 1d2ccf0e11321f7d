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

mod dry_run;
mod error;
mod recording;
mod retry;
mod runner;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

pub use error::{ActionError, ActionFailure};
pub use recording::RecordingSink;
pub use retry::{AttemptWait, DEFAULT_EVENT_QUEUE, ExecutorOptions};
pub(crate) use runner::Runner;

use super::Action;
use super::events::EventQueue;
use super::rate::ActionRate;
use crate::activity::Activity;
use crate::leader::Leadership;
use crate::telemetry::metrics::Outcome;
use crate::telemetry::{ActionCounters, Telemetry};

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
    /// An executor writing to `sink`, counting actions into `telemetry`'s
    /// metrics (the registry `/metrics` serves) and showing them in its
    /// feed.
    pub fn new(sink: Arc<dyn ActionSink>, options: ExecutorOptions, telemetry: Telemetry) -> Self {
        let stats = Arc::new(ExecutorStats::default());
        let events = EventQueue::new(options.event_queue);
        Self {
            runner: Runner {
                sink,
                options: Arc::new(options),
                leadership: Leadership::always(),
                stats: stats.clone(),
                telemetry,
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
            None,
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
    /// `term` (the leadership term the call was made in) refuses every
    /// action once another term leads: a call that straddled a loss and a
    /// regain acts for a term that is over.
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
        term: Option<u64>,
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
                self.runner.run(plugin, counters, action, fence, term).await
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
            .run(plugin, &counters, action, &CancellationToken::new(), None)
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
