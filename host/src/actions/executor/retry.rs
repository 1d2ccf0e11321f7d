//! The retry policy: how many attempts, how long each may take, and the
//! waits between them (exponential with jitter, at least what the server
//! asked for).

use std::sync::Arc;
use std::time::Duration;

use backon::BackoffBuilder;

use super::ActionError;

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
    pub(super) async fn wait(&self, d: Duration) {
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
    pub(super) fn backoff(&self) -> impl Iterator<Item = Duration> + use<> {
        backon::ExponentialBuilder::default()
            .with_min_delay(self.base_backoff)
            .with_max_delay(self.max_backoff)
            .with_factor(2.0)
            .with_jitter()
            .with_max_times(self.max_attempts.saturating_sub(1) as usize)
            .build()
    }

    /// The wait before the next attempt, or `None` to stop retrying: the
    /// failure is not transient, the attempts are spent, or the server
    /// asked for a longer wait than [`ExecutorOptions::max_backoff`] (the
    /// dispatcher then waits it out per object, holding no call).
    pub(super) fn next_wait(
        &self,
        error: &ActionError,
        waits: &mut impl Iterator<Item = Duration>,
    ) -> Option<Duration> {
        if !error.transient() {
            return None;
        }
        let wait = waits.next()?;
        match error.retry_after() {
            Some(asked) if asked > self.max_backoff => None,
            Some(asked) => Some(wait.max(asked)),
            None => Some(wait),
        }
    }
}
