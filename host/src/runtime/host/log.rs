//! Plugin logging: records written under the `plugin` target (or captured
//! by a test harness), within `limits.logBytesPerCall`.

use super::HostState;
use crate::runtime::limits::Cap;

impl HostState {
    /// Whether a plugin log record at `level` would be written (under a
    /// test harness every record is captured).
    pub(in crate::runtime) fn log_enabled(&self, level: tracing::Level) -> bool {
        if self.harness.is_some() {
            return true;
        }
        match level {
            tracing::Level::TRACE => tracing::enabled!(target: "plugin", tracing::Level::TRACE),
            tracing::Level::DEBUG => tracing::enabled!(target: "plugin", tracing::Level::DEBUG),
            tracing::Level::INFO => tracing::enabled!(target: "plugin", tracing::Level::INFO),
            tracing::Level::WARN => tracing::enabled!(target: "plugin", tracing::Level::WARN),
            _ => tracing::enabled!(target: "plugin", tracing::Level::ERROR),
        }
    }

    /// Writes a plugin log record, within `limits.logBytesPerCall`.
    pub(in crate::runtime) fn log_write(
        &mut self,
        level: tracing::Level,
        message: &str,
        fields: &[(String, String)],
    ) {
        let size = message.len() + fields.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
        self.log_bytes = self.log_bytes.saturating_add(size as u64);
        if self.log_bytes > self.caps.log_bytes_per_call {
            // Dropped: the call fails with the cap once it returns.
            if self.cap_hit.is_none() {
                let e = self.exceeded(Cap::LogBytesPerCall);
                tracing::warn!(target: "plugin", plugin = &*self.plugin, "log records dropped: plugin exceeded {e}");
            }
            return;
        }
        if let Some(h) = &self.harness {
            h.log(crate::runtime::harness::LogLine {
                level: level_name(level),
                message: message.to_owned(),
                fields: fields.to_vec(),
            });
            return;
        }
        let fields: String = fields
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect::<Vec<_>>()
            .join(" ");
        let plugin = &*self.plugin;
        match level {
            tracing::Level::TRACE => tracing::trace!(target: "plugin", plugin, fields, "{message}"),
            tracing::Level::DEBUG => tracing::debug!(target: "plugin", plugin, fields, "{message}"),
            tracing::Level::INFO => tracing::info!(target: "plugin", plugin, fields, "{message}"),
            tracing::Level::WARN => tracing::warn!(target: "plugin", plugin, fields, "{message}"),
            _ => tracing::error!(target: "plugin", plugin, fields, "{message}"),
        }
    }
}

fn level_name(level: tracing::Level) -> &'static str {
    match level {
        tracing::Level::TRACE => "TRACE",
        tracing::Level::DEBUG => "DEBUG",
        tracing::Level::INFO => "INFO",
        tracing::Level::WARN => "WARN",
        _ => "ERROR",
    }
}
