//! A plugin's action rate (`limits.actionsPerSecond`): one plugin that
//! emits thousands of actions must not take the API server's attention
//! from the others, and when it waits on its rate the operator is told
//! (a warning naming the limit, and the throttle counters) instead of
//! seeing a silent queue.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use tokio_util::sync::CancellationToken;

use crate::telemetry::Metrics;

/// How often a throttled plugin's warning repeats, at most.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Rates above this are not limited (the limiter's nanosecond clock cannot
/// space actions closer).
pub const UNLIMITED_ABOVE: u32 = 1_000_000;

/// The budget one plugin's actions are drawn from (shared by its versions'
/// instances; a burst of one second's worth), and a budget it shares with
/// other plugins (a tenant namespace's quota), if any.
pub struct ActionRate {
    limiter: Option<DefaultDirectRateLimiter>,
    per_second: u32,
    shared: Option<SharedRate>,
    last_warning: Mutex<Option<Instant>>,
    throttled: Counter,
    waited: Counter<f64>,
}

/// An action rate several plugins draw from together.
#[derive(Clone)]
pub struct SharedRate {
    limiter: Arc<DefaultDirectRateLimiter>,
    per_second: u32,
    /// The config key that sets it, as the warning names it.
    what: Arc<str>,
}

impl std::fmt::Debug for SharedRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRate")
            .field("per_second", &self.per_second)
            .field("what", &self.what)
            .finish()
    }
}

impl SharedRate {
    /// `limiter` lets `per_second` actions a second go; `what` names the
    /// key that sets it.
    pub fn new(limiter: Arc<DefaultDirectRateLimiter>, per_second: u32, what: &str) -> Self {
        Self {
            limiter,
            per_second,
            what: Arc::from(what),
        }
    }
}

impl std::fmt::Debug for ActionRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActionRate")
            .field("per_second", &self.per_second)
            .finish_non_exhaustive()
    }
}

/// The wait was abandoned: the plugin version is stopping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Abandoned;

impl ActionRate {
    /// `per_second` actions a second (0, or over [`UNLIMITED_ABOVE`]:
    /// unlimited), counting waits into `throttled` (actions that waited)
    /// and `waited` (seconds).
    pub fn new(per_second: u32, throttled: Counter, waited: Counter<f64>) -> Self {
        Self {
            limiter: NonZeroU32::new(per_second)
                .filter(|r| r.get() <= UNLIMITED_ABOVE)
                .map(|r| RateLimiter::direct(Quota::per_second(r).allow_burst(r))),
            per_second,
            shared: None,
            last_warning: Mutex::new(None),
            throttled,
            waited,
        }
    }

    /// Draws from `shared` too, after the plugin's own rate.
    #[must_use]
    pub fn with_shared(mut self, shared: Option<SharedRate>) -> Self {
        self.shared = shared;
        self
    }

    /// No limit (library callers and tests outside a dispatcher).
    pub fn unlimited() -> Self {
        Self::new(0, Counter::default(), Counter::default())
    }

    /// Waits until the next action may go, or until `stop`.
    pub async fn acquire(&self, plugin: &str, stop: &CancellationToken) -> Result<(), Abandoned> {
        if let Some(limiter) = &self.limiter {
            self.wait_on(limiter, None, plugin, stop).await?;
        }
        if let Some(shared) = &self.shared {
            self.wait_on(&shared.limiter, Some(shared), plugin, stop)
                .await?;
        }
        Ok(())
    }

    /// Waits until `limiter` lets the next action go (counted and warned
    /// of as the plugin's own rate, or `shared`), or until `stop`.
    async fn wait_on(
        &self,
        limiter: &DefaultDirectRateLimiter,
        shared: Option<&SharedRate>,
        plugin: &str,
        stop: &CancellationToken,
    ) -> Result<(), Abandoned> {
        let mut started = None;
        loop {
            match limiter.check() {
                Ok(()) => break,
                Err(not_until) => {
                    let wait = not_until.wait_time_from(DefaultClock::default().now());
                    let since = *started.get_or_insert_with(|| {
                        self.throttled.inc();
                        self.warn(plugin, shared);
                        Instant::now()
                    });
                    tokio::select! {
                        biased;
                        () = stop.cancelled() => {
                            self.waited.inc_by(since.elapsed().as_secs_f64());
                            return Err(Abandoned);
                        }
                        () = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
        if let Some(since) = started {
            self.waited.inc_by(since.elapsed().as_secs_f64());
        }
        Ok(())
    }

    fn warn(&self, plugin: &str, shared: Option<&SharedRate>) {
        let now = Instant::now();
        let mut last = self.last_warning.lock();
        if last.is_some_and(|t| now.duration_since(t) < WARN_EVERY) {
            return;
        }
        *last = Some(now);
        if let Some(shared) = shared {
            tracing::warn!(
                plugin,
                actions_per_second = shared.per_second,
                limit = %shared.what,
                "plugin's actions are throttled at a rate it shares with other plugins; its deltas wait meanwhile"
            );
            return;
        }
        tracing::warn!(
            plugin,
            actions_per_second = self.per_second,
            "plugin's actions are throttled at its limits.actionsPerSecond; its deltas wait meanwhile (raise it in the plugin's sidecar if the API server can take more)"
        );
    }
}

impl Metrics {
    /// Plugin `plugin`'s action budget of `per_second`, counted.
    pub fn action_rate(&self, plugin: &str, per_second: u32) -> ActionRate {
        let (throttled, waited) = self.throttle_counters(plugin);
        ActionRate::new(per_second, throttled, waited)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_burst_over_the_rate_waits_and_is_counted() {
        let throttled = Counter::default();
        let waited = Counter::<f64>::default();
        let rate = ActionRate::new(20, throttled.clone(), waited.clone());
        let stop = CancellationToken::new();
        let start = Instant::now();
        // One second's burst goes at once, the next 10 at 20/s.
        for _ in 0..30 {
            rate.acquire("p", &stop).await.unwrap();
        }
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(400), "{took:?}");
        // 10 wait on an idle machine; on a loaded one the burst itself can
        // take long enough for a token or two to come back.
        let n = throttled.get();
        assert!((7..=10).contains(&n), "{n} acquisitions throttled");
        assert!(waited.get() >= 0.04 * n as f64, "{}", waited.get());
    }

    #[tokio::test]
    async fn a_stopping_version_abandons_the_wait() {
        let rate = ActionRate::new(1, Counter::default(), Counter::default());
        let stop = CancellationToken::new();
        rate.acquire("p", &stop).await.unwrap();
        stop.cancel();
        assert_eq!(rate.acquire("p", &stop).await, Err(Abandoned));
    }

    #[tokio::test]
    async fn zero_is_unlimited() {
        let throttled = Counter::default();
        let rate = ActionRate::new(0, throttled.clone(), Counter::default());
        let stop = CancellationToken::new();
        for _ in 0..10_000 {
            rate.acquire("p", &stop).await.unwrap();
        }
        assert_eq!(throttled.get(), 0);
    }
}
