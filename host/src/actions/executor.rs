//! Executes plugins' actions in order, with retries for conflicts and
//! transient failures, never forever; gated by leadership (a follower
//! executes nothing, and a leader that loses its lease abandons the action
//! in flight); a dry-run mode that only logs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::Action;
use crate::leader::Leadership;
use crate::telemetry::events::{ActionApplied, ActionFailed, ActionRetrying};
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
}

impl ActionError {
    pub fn retryable(&self) -> bool {
        matches!(self, ActionError::Conflict(_) | ActionError::Transient(_))
    }
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
}

#[derive(Debug, Clone)]
pub struct ExecutorOptions {
    pub dry_run: bool,
    pub max_attempts: u32,
    pub base_backoff: Duration,
}

impl Default for ExecutorOptions {
    fn default() -> Self {
        Self {
            dry_run: false,
            max_attempts: 5,
            base_backoff: Duration::from_millis(200),
        }
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

    fn fenced(&self, plugin: &str, counters: &ActionCounters, action: &Action) -> bool {
        self.stats.fenced.fetch_add(1, Ordering::Relaxed);
        counters.outcome(action.verb(), Outcome::Fenced).inc();
        tracing::debug!(plugin, verb = action.verb(), resource = %action.target(), "not the leader: action not executed");
        false
    }

    /// Executes one plugin call's actions in order. Failures are logged with
    /// plugin, verb and resource, and counted; they do not fail the delta
    /// (the plugin's decision was right; the write is what failed).
    pub async fn execute_all(&self, plugin: &str, actions: Vec<Action>) {
        if actions.is_empty() {
            return;
        }
        let counters = self.telemetry.metrics().actions(plugin);
        self.execute_all_counted(plugin, &counters, actions).await;
    }

    /// [`execute_all`](Self::execute_all) counting into the plugin's
    /// pre-resolved `counters` (the dispatcher's path: no label lookup).
    pub async fn execute_all_counted(
        &self,
        plugin: &str,
        counters: &ActionCounters,
        actions: Vec<Action>,
    ) {
        for action in actions {
            self.run(plugin, counters, &action).await;
        }
    }

    pub async fn execute(&self, plugin: &str, action: &Action) -> bool {
        let counters = self.telemetry.metrics().actions(plugin);
        self.run(plugin, &counters, action).await
    }

    async fn run(&self, plugin: &str, counters: &ActionCounters, action: &Action) -> bool {
        let mut gate = self.leadership.subscribe();
        let term = *gate.borrow_and_update();
        if !term.leading {
            return self.fenced(plugin, counters, action);
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
            return true;
        }
        let mut attempt = 1;
        loop {
            let result = tokio::select! {
                biased;
                () = &mut ended => return self.fenced(plugin, counters, action),
                r = self.sink.execute(plugin, action) => r,
            };
            match result {
                Ok(()) => {
                    ActionApplied { plugin, action }.emit(&self.stats, counters);
                    return true;
                }
                Err(ActionError::NotFound(_)) if matches!(action, Action::Delete { .. }) => {
                    ActionApplied { plugin, action }.emit(&self.stats, counters);
                    return true;
                }
                Err(e) if e.retryable() && attempt < self.options.max_attempts => {
                    let wait = self.options.base_backoff * 2u32.saturating_pow(attempt - 1);
                    ActionRetrying {
                        plugin,
                        action,
                        attempt,
                        error: &e,
                        wait,
                    }
                    .emit(&self.stats, counters);
                    tokio::select! {
                        biased;
                        () = &mut ended => return self.fenced(plugin, counters, action),
                        () = tokio::time::sleep(wait) => {}
                    }
                    attempt += 1;
                }
                Err(e) => {
                    ActionFailed {
                        plugin,
                        action,
                        error: &e,
                    }
                    .emit(&self.stats, counters);
                    return false;
                }
            }
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
                kind: KindInfo::new("", "v1", "ConfigMap", "configmaps", true),
                namespace: Some("n".into()),
                name: "c".into(),
                uid: None,
            },
            event_type: EventType::Normal,
            reason: reason.into(),
            note: String::new(),
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
        assert!(!ex.execute("p", &event("follower")).await);
        assert_eq!(ex.stats.fenced.load(Ordering::Relaxed), 1);

        leadership.gain();
        let ex2 = ex.clone();
        let in_flight = tokio::spawn(async move { ex2.execute("p", &event("lost")).await });
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Lost and regained before the write returns: still a new term, so
        // the old term's write is abandoned.
        leadership.lose();
        leadership.gain();
        assert!(!in_flight.await.unwrap());
        assert_eq!(ex.stats.fenced.load(Ordering::Relaxed), 2);

        assert!(ex.execute("p", &event("leader")).await);
        let done = sink.0.lock().clone();
        assert_eq!(done.len(), 1, "{done:?}");
        assert!(done[0].contains("leader"), "{done:?}");
    }
}
