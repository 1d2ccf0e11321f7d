//! When a failed key is tried again: capped exponential backoff with
//! jitter per key (client-go's per-item limiter, kube-runtime's error
//! policy), behind one rate for all of a plugin's retries (client-go's
//! overall bucket), and no silent end: past the cap, or past the opt-in
//! attempt budget, the key is parked as a dead letter and still retried at
//! the cap interval.

use std::time::Duration;

use tokio::time::Instant;

use crate::actions::executor::ActionFailure;
use crate::runtime::{CallError, LastFailure};

/// Why a delta failed: its handler call, or one of the call's actions.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Failure {
    #[error(transparent)]
    Call(#[from] CallError),
    #[error(transparent)]
    Actions(#[from] ActionFailure),
}

impl Failure {
    /// Whether handling the key again may succeed.
    pub fn retryable(&self) -> bool {
        match self {
            Failure::Call(e) => e.retryable(),
            Failure::Actions(f) => !f.error.permanent(),
        }
    }

    fn is_conflict(&self) -> bool {
        matches!(self, Failure::Actions(f) if f.error.is_conflict())
    }

    /// How the next attempt's delta reports this failure.
    pub fn last_failure(&self) -> LastFailure {
        match self {
            Failure::Call(CallError::Retry(m)) => LastFailure::Retry(m.clone()),
            Failure::Call(e) => LastFailure::Trapped(e.to_string()),
            Failure::Actions(f) if self.is_conflict() => LastFailure::Conflict(f.to_string()),
            Failure::Actions(f) => LastFailure::ActionFailed(f.to_string()),
        }
    }

    /// A few words for the log line.
    pub fn what(&self) -> &'static str {
        match self {
            Failure::Call(_) => "handler call failed",
            Failure::Actions(_) if self.is_conflict() => {
                "an action hit a conflict (a precondition, or fields another manager owns)"
            }
            Failure::Actions(f) if f.error.permanent() => {
                "an action was refused by the API server as invalid (not retried)"
            }
            Failure::Actions(_) => "an action failed",
        }
    }
}

/// The retry policy of one plugin version.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// The first wait.
    pub base: Duration,
    /// The longest wait: a key that reaches it is parked.
    pub cap: Duration,
    /// Failed attempts after which a key is parked even below the cap
    /// (opt-in; `None` parks only at the cap).
    pub max_attempts: Option<u32>,
    /// All of the plugin's retries together, per second, and the burst
    /// allowed above that rate.
    pub rate: u32,
    pub burst: u32,
}

/// How a failed key goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub wait: Duration,
    /// Past the attempt budget or the cap: listed as a dead letter, still
    /// retried every `cap`.
    pub parked: bool,
}

impl RetryPolicy {
    /// The wait after failed attempt number `failures` (1 after the first),
    /// at least what the server asked for (`at_least`, a Retry-After).
    /// Exponential from `base`, doubled per failure, with up to 100 %
    /// jitter, never above `cap`.
    pub fn decide(&self, failures: u32, at_least: Option<Duration>) -> Decision {
        let cap = self.cap.max(self.base);
        let exp = self
            .base
            .saturating_mul(1u32 << failures.saturating_sub(1).min(30))
            .min(cap);
        let over_budget = self.max_attempts.is_some_and(|m| failures >= m);
        let parked = exp >= cap || over_budget;
        let wait = if parked {
            cap
        } else {
            let jitter = exp.mul_f64(fastrand::f64());
            (exp + jitter).min(cap)
        };
        // A server's Retry-After is honoured up to the cap.
        Decision {
            wait: wait.max(at_least.unwrap_or_default().min(cap)),
            parked,
        }
    }
}

/// The plugin-wide retry rate: a generic cell rate (a token bucket without
/// a refill task): each retry takes the next slot; past the burst, slots
/// are `1/rate` apart.
#[derive(Debug)]
pub struct RetryRate {
    interval: Duration,
    burst: Duration,
    /// The theoretical arrival time of the next retry.
    tat: Option<Instant>,
}

impl RetryRate {
    pub fn new(rate: u32, burst: u32) -> Self {
        let interval = Duration::from_secs(1) / rate.max(1);
        Self {
            interval,
            burst: interval.saturating_mul(burst.max(1)),
            tat: None,
        }
    }

    /// Reserves a slot for a retry wanted at `at`; returns when it may run.
    pub fn reserve(&mut self, at: Instant) -> Instant {
        let tat = self.tat.map_or(at, |t| t.max(at));
        self.tat = Some(tat + self.interval);
        // Within the burst a retry runs when it wants to.
        let earliest = (tat + self.interval).checked_sub(self.burst).unwrap_or(at);
        earliest.max(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_attempts: Option<u32>) -> RetryPolicy {
        RetryPolicy {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(300),
            max_attempts,
            rate: 100,
            burst: 1000,
        }
    }

    #[test]
    fn backoff_doubles_with_jitter_and_parks_at_the_cap_without_an_end() {
        let p = policy(None);
        for failures in 1..=12 {
            let exp = Duration::from_millis(100) * (1 << (failures - 1));
            for _ in 0..50 {
                let d = p.decide(failures, None);
                assert!(!d.parked, "{failures}");
                assert!(
                    d.wait >= exp && d.wait < exp * 2,
                    "{failures}: {:?}",
                    d.wait
                );
            }
        }
        // 100 ms x 2^12 > 300 s: parked, retried every 300 s, forever.
        for failures in [13, 14, 100, u32::MAX] {
            assert_eq!(
                p.decide(failures, None),
                Decision {
                    wait: Duration::from_secs(300),
                    parked: true
                }
            );
        }
    }

    #[test]
    fn an_attempt_budget_parks_early_and_retry_after_is_honoured() {
        let p = policy(Some(3));
        assert!(!p.decide(2, None).parked);
        let d = p.decide(3, None);
        assert!(d.parked);
        assert_eq!(d.wait, Duration::from_secs(300));
        let d = policy(None).decide(1, Some(Duration::from_secs(7)));
        assert_eq!(d.wait, Duration::from_secs(7));
    }

    #[test]
    fn the_overall_rate_lets_a_burst_through_then_spaces_retries() {
        let mut r = RetryRate::new(10, 5);
        let t0 = Instant::now();
        for _ in 0..5 {
            assert_eq!(r.reserve(t0), t0);
        }
        // The sixth waits one interval, the seventh two.
        assert_eq!(r.reserve(t0), t0 + Duration::from_millis(100));
        assert_eq!(r.reserve(t0), t0 + Duration::from_millis(200));
        // Later wants are not held back once the bucket has drained.
        let later = t0 + Duration::from_secs(10);
        assert_eq!(r.reserve(later), later);
    }
}
