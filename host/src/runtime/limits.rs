//! Bounds on what one plugin may cost the host: the per-call caps a sidecar
//! sets in `limits` (live object handles, actions per call, log bytes per
//! call) and the host-wide ceiling (host config `limits`) that no sidecar
//! can exceed, so a plugin cannot grant itself 3 GiB of memory.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use serde::Deserialize;

use super::manifest::Limits;

/// A per-plugin cap that fails the call when exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cap {
    /// Object handles alive in one instance (across calls: handles the
    /// guest never drops).
    Handles,
    /// Actions buffered in one call.
    ActionsPerCall,
    /// Bytes of `log` records in one call.
    LogBytesPerCall,
}

impl Cap {
    pub const ALL: [Cap; 3] = [Cap::Handles, Cap::ActionsPerCall, Cap::LogBytesPerCall];

    /// The sidecar key that sets it.
    pub fn key(self) -> &'static str {
        match self {
            Cap::Handles => "limits.handles",
            Cap::ActionsPerCall => "limits.actionsPerCall",
            Cap::LogBytesPerCall => "limits.logBytesPerCall",
        }
    }

    /// The `limit` label of `kubewasm_plugin_limit_exceeded_total`.
    pub fn label(self) -> &'static str {
        match self {
            Cap::Handles => "handles",
            Cap::ActionsPerCall => "actions_per_call",
            Cap::LogBytesPerCall => "log_bytes_per_call",
        }
    }

    fn slot(self) -> usize {
        self as usize
    }
}

/// The caps of one instance, copied from its sidecar's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallCaps {
    pub handles: usize,
    pub actions_per_call: usize,
    pub log_bytes_per_call: u64,
}

impl CallCaps {
    pub fn from_limits(l: &Limits) -> Self {
        Self {
            handles: usize::try_from(l.handles).unwrap_or(usize::MAX),
            actions_per_call: usize::try_from(l.actions_per_call).unwrap_or(usize::MAX),
            log_bytes_per_call: l.log_bytes_per_call,
        }
    }

    pub fn value(&self, cap: Cap) -> u64 {
        match cap {
            Cap::Handles => self.handles as u64,
            Cap::ActionsPerCall => self.actions_per_call as u64,
            Cap::LogBytesPerCall => self.log_bytes_per_call,
        }
    }
}

impl Default for CallCaps {
    fn default() -> Self {
        Self::from_limits(&Limits::default())
    }
}

/// Why a call failed on a cap; the message names the sidecar key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapExceeded {
    pub cap: Cap,
    pub limit: u64,
}

impl std::fmt::Display for CapExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.cap {
            Cap::Handles => "live object handles (objects the guest holds and has not dropped)",
            Cap::ActionsPerCall => "actions in one call",
            Cap::LogBytesPerCall => "bytes of log records in one call",
        };
        write!(
            f,
            "{} ({} {what}); raise {} in the plugin's sidecar (within the host's ceiling) if this is expected",
            self.cap.key(),
            self.limit,
            self.cap.key()
        )
    }
}

/// Per-plugin counters of calls failed on a cap, resolved once.
#[derive(Debug, Clone, Default)]
pub struct CapCounters([Counter; 3]);

impl CapCounters {
    pub fn new(counters: [Counter; 3]) -> Self {
        Self(counters)
    }

    pub fn get(&self, cap: Cap) -> &Counter {
        &self.0[cap.slot()]
    }
}

/// The host-wide ceiling on what a sidecar's `limits` may ask for (host
/// config `limits`). Unset keys keep their defaults.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Ceiling {
    /// Most linear memory per instance a sidecar may set.
    #[serde(deserialize_with = "super::manifest::de_bytes")]
    pub memory: u64,
    /// Longest call deadline a sidecar may set.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Most live object handles per instance a sidecar may set.
    pub handles: u32,
    /// Most actions per call a sidecar may set.
    pub actions_per_call: u32,
    /// Highest action rate a sidecar may set.
    pub actions_per_second: u32,
    /// Most log bytes per call a sidecar may set.
    #[serde(deserialize_with = "super::manifest::de_bytes")]
    pub log_bytes_per_call: u64,
}

impl Default for Ceiling {
    fn default() -> Self {
        Self {
            memory: 1 << 30,
            timeout: Duration::from_secs(60),
            handles: 1_000_000,
            actions_per_call: 100_000,
            actions_per_second: 10_000,
            log_bytes_per_call: 16 << 20,
        }
    }
}

impl Ceiling {
    /// An error naming the sidecar's value and the ceiling when a limit is
    /// over it.
    pub fn check(&self, limits: &Limits) -> Result<(), String> {
        let over = |key: &str, asked: String, ceiling: String| {
            Err(format!(
                "the sidecar's limits.{key} ({asked}) exceeds the host's ceiling limits.{key} ({ceiling}, host config); lower it in the sidecar or raise the ceiling"
            ))
        };
        if limits.memory > self.memory {
            return over(
                "memory",
                format!("{} bytes", limits.memory),
                format!("{} bytes", self.memory),
            );
        }
        if limits.timeout > self.timeout {
            return over(
                "timeout",
                format!("{:?}", limits.timeout),
                format!("{:?}", self.timeout),
            );
        }
        if limits.handles > self.handles {
            return over(
                "handles",
                limits.handles.to_string(),
                self.handles.to_string(),
            );
        }
        if limits.actions_per_call > self.actions_per_call {
            return over(
                "actionsPerCall",
                limits.actions_per_call.to_string(),
                self.actions_per_call.to_string(),
            );
        }
        if limits.actions_per_second > self.actions_per_second {
            return over(
                "actionsPerSecond",
                limits.actions_per_second.to_string(),
                self.actions_per_second.to_string(),
            );
        }
        if limits.log_bytes_per_call > self.log_bytes_per_call {
            return over(
                "logBytesPerCall",
                format!("{} bytes", limits.log_bytes_per_call),
                format!("{} bytes", self.log_bytes_per_call),
            );
        }
        Ok(())
    }

    /// Out-of-range ceilings are errors (a ceiling below the sidecar
    /// defaults would refuse every plugin without a sidecar).
    pub fn validate(&self) -> Result<(), String> {
        self.check(&Limits::default())
            .map_err(|e| format!("limits: the ceiling is below the sidecar defaults ({e})"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_over_the_ceiling_names_both_values() {
        let ceiling = Ceiling {
            memory: 1 << 30,
            ..Ceiling::default()
        };
        let limits = Limits {
            memory: 3 << 30,
            ..Limits::default()
        };
        let err = ceiling.check(&limits).unwrap_err();
        assert!(
            err.contains("limits.memory")
                && err.contains("3221225472 bytes")
                && err.contains("1073741824 bytes")
                && err.contains("ceiling"),
            "{err}"
        );
        assert!(ceiling.check(&Limits::default()).is_ok());
        for (limits, key) in [
            (
                Limits {
                    actions_per_call: 200_000,
                    ..Limits::default()
                },
                "limits.actionsPerCall",
            ),
            (
                Limits {
                    timeout: Duration::from_secs(3600),
                    ..Limits::default()
                },
                "limits.timeout",
            ),
        ] {
            let err = Ceiling::default().check(&limits).unwrap_err();
            assert!(err.contains(key), "{err}");
        }
    }

    #[test]
    fn a_ceiling_below_the_defaults_is_refused() {
        let c = Ceiling {
            actions_per_call: 10,
            ..Ceiling::default()
        };
        assert!(c.validate().unwrap_err().contains("actionsPerCall"));
        assert!(Ceiling::default().validate().is_ok());
    }

    #[test]
    fn cap_errors_name_the_sidecar_key() {
        let msg = CapExceeded {
            cap: Cap::ActionsPerCall,
            limit: 5,
        }
        .to_string();
        assert!(msg.starts_with("limits.actionsPerCall (5 actions"), "{msg}");
    }
}
