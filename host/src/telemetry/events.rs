//! Typed telemetry events, in vector's style: one struct per occurrence
//! whose `emit()` writes the log line and counts it, so a log message and
//! its metric never drift apart. Per-delta successes are not events (they
//! are counted through pre-resolved handles); these are the occurrences
//! worth a log line. Each component defines its events beside itself
//! (`informer/internal_events.rs`, `dispatch/internal_events.rs`, ...);
//! here are only the host's own.

/// A core task ended without being asked to (or panicked): `/healthz`
/// fails from now on.
#[derive(Debug)]
pub struct TaskDied<'a> {
    pub task: &'a str,
    pub why: &'a str,
    pub panicked: bool,
}

impl TaskDied<'_> {
    pub fn emit(self) {
        tracing::error!(
            task = self.task,
            why = self.why,
            panicked = self.panicked,
            "core task ended unexpectedly; /healthz now fails"
        );
    }
}
