//! One action's execution: the leadership gate, the attempts and their
//! timeout, the waits between them, and how each outcome is counted,
//! logged, traced (one `action` span per action run) and shown in the web
//! view's feed.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::dry_run::dry_run;
use super::{ActionError, ActionSink, ExecutorOptions, ExecutorStats};
use crate::actions::Action;
use crate::actions::internal_events::{
    ActionApplied, ActionConflict, ActionFailed, ActionRetrying, EventNotRecorded,
};
use crate::leader::Leadership;
use crate::telemetry::feed::FeedRecord;
use crate::telemetry::metrics::Outcome;
use crate::telemetry::{ActionCounters, Telemetry};

/// What executing an action needs, cheap to clone: the Event queue's
/// worker holds one.
#[derive(Clone)]
pub(crate) struct Runner {
    pub(super) sink: Arc<dyn ActionSink>,
    pub(super) options: Arc<ExecutorOptions>,
    pub(super) leadership: Leadership,
    pub(crate) stats: Arc<ExecutorStats>,
    pub(super) telemetry: Telemetry,
}

impl Runner {
    /// Whether this replica acts now, and a way to wait until it does.
    pub(crate) fn leadership(&self) -> &Leadership {
        &self.leadership
    }

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
        let outcome = self.outcome(result);
        let error = match result {
            Err((e, _)) if matches!(outcome, "conflict" | "failed") => Some(e.to_string()),
            _ => None,
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

    /// How an action ended, as the feed and the `action` span name it.
    fn outcome(&self, result: &Result<(), (ActionError, u32)>) -> &'static str {
        match result {
            Ok(()) if self.options.dry_run => "dry_run",
            Ok(()) => "applied",
            Err((ActionError::Conflict(_), _)) => "conflict",
            Err((ActionError::NotLeader, _)) => "fenced",
            Err((ActionError::Stopping, _)) => "stopping",
            Err(_) => "failed",
        }
    }

    pub(crate) fn feed_admits(&self) -> bool {
        self.telemetry.feed().admit()
    }

    /// Executes one action with its retries; `stop` cancelled abandons a
    /// wait between attempts. Traced as one debug span `action` (the
    /// plugin, what it does to which object, the attempts made), whose
    /// `outcome` (and the failure's `error` class) is recorded when it
    /// ends; the API writes it makes are spans inside it.
    pub(crate) async fn run(
        &self,
        plugin: &str,
        counters: &ActionCounters,
        action: &Action,
        stop: &CancellationToken,
        call_term: Option<u64>,
    ) -> Result<(), (ActionError, u32)> {
        let target = action.target();
        let span = tracing::debug_span!(
            "action",
            plugin,
            op = action.operation(),
            verb = action.verb(),
            kind = %target.kind.gvk.kind,
            namespace = target.namespace.as_deref(),
            name = %target.name,
            attempts = 0u32,
            outcome = tracing::field::Empty,
            error = tracing::field::Empty,
        );
        let result = self
            .attempts(plugin, counters, action, stop, call_term, &span)
            .instrument(span.clone())
            .await;
        span.record("outcome", self.outcome(&result));
        if let Err((e, attempts)) = &result {
            span.record("attempts", attempts);
            span.record("error", e.class());
        }
        result
    }

    /// [`run`](Self::run)'s work, counting its attempts in `span`.
    async fn attempts(
        &self,
        plugin: &str,
        counters: &ActionCounters,
        action: &Action,
        stop: &CancellationToken,
        call_term: Option<u64>,
        span: &tracing::Span,
    ) -> Result<(), (ActionError, u32)> {
        let mut gate = self.leadership.subscribe();
        let term = *gate.borrow_and_update();
        if !term.leading || call_term.is_some_and(|t| t != term.term) {
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
            span.record("attempts", attempt);
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
            let Some(wait) = self.options.next_wait(&error, &mut waits) else {
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
