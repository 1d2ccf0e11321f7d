//! The runtime's telemetry events, beside it (vector's `internal_events`):
//! one struct per occurrence whose `emit()` writes the log line and counts
//! it.

use super::limits::Cap;

/// A handler call went over a cap of the plugin's limits and failed.
#[derive(Debug)]
pub struct PluginLimitExceeded<'a> {
    pub plugin: &'a str,
    pub cap: Cap,
    pub message: &'a str,
}

impl PluginLimitExceeded<'_> {
    pub fn emit(self, counter: &prometheus_client::metrics::counter::Counter) {
        tracing::warn!(
            plugin = self.plugin,
            limit = self.cap.label(),
            "handler call failed: plugin exceeded {}",
            self.message
        );
        counter.inc();
    }
}
