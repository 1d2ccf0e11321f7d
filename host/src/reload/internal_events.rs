//! The plugin lifecycle's telemetry events, beside it (vector's
//! `internal_events`): one struct per occurrence whose `emit()` writes the
//! log line and counts it.

use crate::telemetry::Metrics;

/// A plugin file was loaded (first time) or replaced a running version.
#[derive(Debug)]
pub struct PluginLoaded<'a> {
    pub plugin: &'a str,
    pub file: &'a std::path::Path,
    /// The version the plugin sees in its context: the component's SHA-256
    /// (the file with its sidecar is what reloads compare).
    pub version: &'a str,
    pub replaced: bool,
}

impl PluginLoaded<'_> {
    pub fn emit(self, metrics: &Metrics) {
        tracing::info!(plugin = %self.plugin, file = %self.file.display(), version = self.version, "plugin {}", if self.replaced { "replaced" } else { "loaded" });
        if self.replaced {
            metrics.plugin_reloaded(self.plugin);
        }
    }
}

/// A plugin file could not be loaded.
#[derive(Debug)]
pub struct PluginLoadFailed<'a> {
    pub plugin: &'a str,
    pub file: &'a std::path::Path,
    pub error: &'a str,
    /// A previous version keeps serving.
    pub previous_serving: bool,
}

impl PluginLoadFailed<'_> {
    pub fn emit(self, metrics: &Metrics) {
        tracing::error!(
            plugin = %self.plugin,
            file = %self.file.display(),
            error = %self.error,
            "cannot load plugin{}",
            if self.previous_serving { "; the previous version keeps serving" } else { "" }
        );
        metrics.plugin_load_failed(self.plugin);
    }
}
