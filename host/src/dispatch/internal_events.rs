//! The dispatcher's telemetry events, beside it (vector's
//! `internal_events`): one struct per occurrence whose `emit()` writes the
//! log line and counts it.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Failure, PluginStats};
use crate::runtime::CallError;

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
