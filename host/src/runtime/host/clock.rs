//! The clock the plugin sees: the system's, or a test harness's.

use super::HostState;

impl HostState {
    /// Now, as the plugin sees it: the system's time, or a test harness's.
    fn clock_now(&self) -> std::time::SystemTime {
        self.harness.as_ref().map_or_else(
            std::time::SystemTime::now,
            crate::runtime::harness::Harness::now,
        )
    }

    /// Wall-clock time since the Unix epoch: (seconds, nanoseconds).
    pub(in crate::runtime) fn clock_parts(&self) -> (i64, u32) {
        let d = self
            .clock_now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        (
            i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            d.subsec_nanos(),
        )
    }

    /// Now as RFC 3339 with seconds precision.
    pub(in crate::runtime) fn clock_rfc3339(&self) -> String {
        humantime::format_rfc3339_seconds(self.clock_now()).to_string()
    }
}
