//! Executes plugins' actions in order, with retries for conflicts and
//! transient failures, never forever; pausable for leader election; a
//! dry-run mode that only logs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::watch;

use super::Action;

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
    paused: watch::Sender<bool>,
    pub stats: ExecutorStats,
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
            paused: watch::channel(false).0,
            stats: ExecutorStats::default(),
        }
    }

    /// Stops executing (actions wait) until [`resume`](Self::resume).
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    pub fn resume(&self) {
        self.paused.send_replace(false);
    }

    /// Executes one plugin call's actions in order. Failures are logged with
    /// plugin, verb and resource, and counted; they do not fail the delta
    /// (the plugin's decision was right; the write is what failed).
    pub async fn execute_all(&self, plugin: &str, actions: Vec<Action>) {
        for action in actions {
            self.execute(plugin, &action).await;
        }
    }

    pub async fn execute(&self, plugin: &str, action: &Action) -> bool {
        let mut paused = self.paused.subscribe();
        let _ = paused.wait_for(|p| !*p).await;
        if self.options.dry_run {
            tracing::info!(plugin, action = %action, "dry run: not sending");
            self.stats.applied.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        let mut attempt = 1;
        loop {
            match self.sink.execute(plugin, action).await {
                Ok(()) => {
                    tracing::debug!(plugin, action = %action, "action applied");
                    self.stats.applied.fetch_add(1, Ordering::Relaxed);
                    return true;
                }
                Err(ActionError::NotFound(_)) if matches!(action, Action::Delete { .. }) => {
                    self.stats.applied.fetch_add(1, Ordering::Relaxed);
                    return true;
                }
                Err(e) if e.retryable() && attempt < self.options.max_attempts => {
                    self.stats.retried.fetch_add(1, Ordering::Relaxed);
                    let wait = self.options.base_backoff * 2u32.saturating_pow(attempt - 1);
                    tracing::warn!(plugin, verb = action.verb(), resource = %action.target(), attempt, error = %e, "action failed; retrying in {wait:?}");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                Err(e) => {
                    self.stats.failed.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(plugin, verb = action.verb(), resource = %action.target(), error = %e, "action failed; not retrying");
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
