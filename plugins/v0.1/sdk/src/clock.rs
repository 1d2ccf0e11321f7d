//! The host's clock.

use crate::bindings::kubewasm::plugin::clock as raw;
pub use crate::bindings::kubewasm::plugin::clock::Instant;

/// Wall-clock time since the Unix epoch, as the host sees it.
pub fn now() -> Instant {
    raw::now()
}

/// Now as RFC 3339 with seconds precision (`2026-11-22T17:00:00Z`).
pub fn now_rfc3339() -> String {
    raw::now_rfc3339()
}
