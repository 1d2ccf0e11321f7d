//! Bounds on what one plugin may cost the host: the per-call caps a sidecar
//! sets in `limits` (live object handles, actions per call, log bytes per
//! call, action bytes per call) and the host-wide ceiling (host config `limits`) that no sidecar
//! can exceed, so a plugin cannot grant itself 3 GiB of memory: per
//! instance, per plugin (memory x concurrency) and for all plugins
//! together (a [`MemoryBudget`] every loaded version holds a share of),
//! plus the core instances, memories and tables one instance may create.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use serde::Deserialize;

use super::grants::GrantCeiling;
use super::manifest::{Limits, MAX_CONCURRENCY};
use crate::telemetry::Metrics;

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
    /// Bytes of JSON (applied objects and patches) buffered in one call:
    /// the host holds them, parsed, until the call's actions run.
    ActionBytesPerCall,
}

impl Cap {
    pub const ALL: [Cap; 4] = [
        Cap::Handles,
        Cap::ActionsPerCall,
        Cap::LogBytesPerCall,
        Cap::ActionBytesPerCall,
    ];

    /// The sidecar key that sets it.
    pub fn key(self) -> &'static str {
        match self {
            Cap::Handles => "limits.handles",
            Cap::ActionsPerCall => "limits.actionsPerCall",
            Cap::LogBytesPerCall => "limits.logBytesPerCall",
            Cap::ActionBytesPerCall => "limits.actionBytesPerCall",
        }
    }

    /// The `limit` label of `kubewasm_plugin_limit_exceeded_total`.
    pub fn label(self) -> &'static str {
        match self {
            Cap::Handles => "handles",
            Cap::ActionsPerCall => "actions_per_call",
            Cap::LogBytesPerCall => "log_bytes_per_call",
            Cap::ActionBytesPerCall => "action_bytes_per_call",
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
    pub action_bytes_per_call: u64,
}

impl CallCaps {
    pub fn from_limits(l: &Limits) -> Self {
        Self {
            handles: usize::try_from(l.handles).unwrap_or(usize::MAX),
            actions_per_call: usize::try_from(l.actions_per_call).unwrap_or(usize::MAX),
            log_bytes_per_call: l.log_bytes_per_call,
            action_bytes_per_call: l.action_bytes_per_call,
        }
    }

    pub fn value(&self, cap: Cap) -> u64 {
        match cap {
            Cap::Handles => self.handles as u64,
            Cap::ActionsPerCall => self.actions_per_call as u64,
            Cap::LogBytesPerCall => self.log_bytes_per_call,
            Cap::ActionBytesPerCall => self.action_bytes_per_call,
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
            Cap::ActionBytesPerCall => "bytes of applied objects and patches in one call",
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
pub struct CapCounters([Counter; 4]);

impl CapCounters {
    pub fn new(counters: [Counter; 4]) -> Self {
        Self(counters)
    }

    pub fn get(&self, cap: Cap) -> &Counter {
        &self.0[cap.slot()]
    }
}

/// The host-wide ceiling on what a sidecar's `limits` may ask for (host
/// config `limits`) and on what its `grants` may open (host config
/// `grants`). Unset keys keep their defaults.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Ceiling {
    /// Most linear memory per instance (all its memories together) a
    /// sidecar may set.
    #[serde(deserialize_with = "super::manifest::de_bytes")]
    #[schemars(schema_with = "crate::runtime::manifest::size_schema")]
    pub memory: u64,
    /// Longest call deadline a sidecar may set.
    #[serde(with = "humantime_serde")]
    #[schemars(schema_with = "crate::runtime::manifest::duration_schema")]
    pub timeout: Duration,
    /// Most live object handles per instance a sidecar may set.
    pub handles: u32,
    /// Most actions per call a sidecar may set.
    pub actions_per_call: u32,
    /// Highest action rate a sidecar may set.
    pub actions_per_second: u32,
    /// Most log bytes per call a sidecar may set.
    #[serde(deserialize_with = "super::manifest::de_bytes")]
    #[schemars(schema_with = "crate::runtime::manifest::size_schema")]
    pub log_bytes_per_call: u64,
    /// Most bytes of applied objects and patches per call a sidecar may set.
    #[serde(deserialize_with = "super::manifest::de_bytes")]
    #[schemars(schema_with = "crate::runtime::manifest::size_schema")]
    pub action_bytes_per_call: u64,
    /// Most instances (threads) of one plugin a sidecar may set.
    pub concurrency: usize,
    /// Most memory one plugin may reserve: its `limits.memory` times its
    /// `limits.concurrency`.
    #[serde(deserialize_with = "super::manifest::de_bytes")]
    #[schemars(schema_with = "crate::runtime::manifest::size_schema")]
    pub plugin_memory: u64,
    /// Most memory all loaded plugins together may reserve (each its
    /// memory x concurrency); a plugin that would go over does not load.
    #[serde(deserialize_with = "super::manifest::de_bytes")]
    #[schemars(schema_with = "crate::runtime::manifest::size_schema")]
    pub total_memory: u64,
    /// Most core module instances one plugin instance may create.
    pub instances: usize,
    /// Most linear memories one plugin instance may create.
    pub memories: usize,
    /// Most tables one plugin instance may create.
    pub tables: usize,
    /// The ceiling on grants: the host config's top-level `grants` key.
    #[serde(skip)]
    pub grants: GrantCeiling,
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
            action_bytes_per_call: 256 << 20,
            concurrency: MAX_CONCURRENCY,
            plugin_memory: 1 << 30,
            total_memory: 4 << 30,
            instances: DEFAULT_INSTANCES,
            memories: DEFAULT_MEMORIES,
            tables: DEFAULT_TABLES,
            grants: GrantCeiling::default(),
        }
    }
}

/// Core instances per plugin instance by default. The example plugins
/// create 3 (Rust), 4 (C, Go), 8 (JavaScript) and 14 (Python, which links
/// its runtime from several modules); wasmtime's own default is 10,000.
pub const DEFAULT_INSTANCES: usize = 32;
/// Linear memories per plugin instance by default: the example plugins
/// define 1 (2 for JavaScript). Each reserves its own address space.
pub const DEFAULT_MEMORIES: usize = 4;
/// Tables per plugin instance by default: the example plugins define 2.
pub const DEFAULT_TABLES: usize = 16;

/// What one plugin instance's store may create, from the ceiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreCaps {
    pub instances: usize,
    pub memories: usize,
    pub tables: usize,
}

impl Default for StoreCaps {
    fn default() -> Self {
        Ceiling::default().store_caps()
    }
}

impl StoreCaps {
    /// Names the ceiling a "count too high" instantiation error ran into.
    pub fn explain(&self, error: &str) -> Option<String> {
        let (key, n, what) = if error.contains("instance count too high") {
            ("instances", self.instances, "core instances")
        } else if error.contains("memory count too high") {
            ("memories", self.memories, "linear memories")
        } else if error.contains("table count too high") {
            ("tables", self.tables, "tables")
        } else {
            return None;
        };
        Some(format!(
            "the host's ceiling limits.{key} ({n} {what} per plugin instance; host config): {error}; raise limits.{key} in the host config if this plugin is trusted"
        ))
    }
}

/// The memory every loaded plugin version reserves (its memory x
/// concurrency), against the host config's `limits.totalMemory`. While two
/// versions of one plugin overlap (a swap) the plugin counts once, at the
/// larger of the two.
#[derive(Debug, Default)]
pub struct MemoryBudget {
    total: u64,
    held: parking_lot::Mutex<BudgetState>,
    /// The key that sets `total`, as refusals name it.
    what: String,
    /// The most plugins it holds at once, and the key that sets it.
    max_plugins: Option<(u32, String)>,
}

#[derive(Debug, Default)]
struct BudgetState {
    next: u64,
    /// Per plugin name: (reservation id, bytes) of its live versions.
    plugins: HashMap<Arc<str>, Vec<(u64, u64)>>,
}

impl BudgetState {
    fn charge(versions: &[(u64, u64)]) -> u64 {
        versions.iter().map(|(_, b)| *b).max().unwrap_or(0)
    }

    fn total(&self) -> u64 {
        self.plugins.values().map(|v| Self::charge(v)).sum()
    }
}

/// A plugin version's share of the [`MemoryBudget`], returned on drop.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<MemoryBudget>,
    plugin: Arc<str>,
    id: u64,
    /// Another budget's share, held and returned with this one (a
    /// tenant's namespace quota and the tenants' total).
    also: Option<Box<Reservation>>,
}

impl Reservation {
    /// This share and `other`, held together.
    #[must_use]
    pub fn with(mut self, other: Reservation) -> Self {
        self.also = Some(Box::new(other));
        self
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut held = self.budget.held.lock();
        if let Some(v) = held.plugins.get_mut(&self.plugin) {
            v.retain(|(id, _)| *id != self.id);
            if v.is_empty() {
                held.plugins.remove(&self.plugin);
            }
        }
    }
}

impl MemoryBudget {
    pub fn new(total: u64) -> Self {
        Self::named(total, "the host's ceiling limits.totalMemory", None)
    }

    /// A budget of `total` bytes whose refusals name `what` (the host
    /// config key that sets it), holding at most `max_plugins` plugins
    /// when given.
    pub fn named(total: u64, what: &str, max_plugins: Option<(u32, String)>) -> Self {
        Self {
            total,
            held: parking_lot::Mutex::default(),
            what: what.to_owned(),
            max_plugins,
        }
    }

    /// Bytes reserved now.
    pub fn reserved(&self) -> u64 {
        self.held.lock().total()
    }

    /// Reserves `bytes` for a version of `plugin`, or says why not.
    pub fn reserve(self: &Arc<Self>, plugin: &str, bytes: u64) -> Result<Reservation, String> {
        let mut held = self.held.lock();
        let plugin: Arc<str> = Arc::from(plugin);
        let mine = held
            .plugins
            .get(&plugin)
            .map_or(0, |v| BudgetState::charge(v));
        let others = held.total() - mine;
        if others.saturating_add(mine.max(bytes)) > self.total {
            return Err(format!(
                "the plugin's limits.memory x limits.concurrency ({bytes} bytes) and the {others} bytes the other loaded plugins reserve exceed {} ({} bytes, host config): lower the plugins' limits or raise it",
                self.what, self.total
            ));
        }
        if let Some((max, what)) = &self.max_plugins
            && !held.plugins.contains_key(&plugin)
            && held.plugins.len() >= usize::try_from(*max).unwrap_or(usize::MAX)
        {
            return Err(format!(
                "{} plugins are served already, as many as {what} allows ({max}): remove one or raise it",
                held.plugins.len()
            ));
        }
        held.next += 1;
        let id = held.next;
        held.plugins
            .entry(plugin.clone())
            .or_default()
            .push((id, bytes));
        Ok(Reservation {
            budget: self.clone(),
            plugin,
            id,
            also: None,
        })
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
        if limits.action_bytes_per_call > self.action_bytes_per_call {
            return over(
                "actionBytesPerCall",
                format!("{} bytes", limits.action_bytes_per_call),
                format!("{} bytes", self.action_bytes_per_call),
            );
        }
        if limits.concurrency > self.concurrency {
            return over(
                "concurrency",
                limits.concurrency.to_string(),
                self.concurrency.to_string(),
            );
        }
        let plugin = plugin_memory(limits);
        if plugin > self.plugin_memory {
            return Err(format!(
                "the sidecar's limits.memory x limits.concurrency ({} bytes x {} = {plugin} bytes) exceeds the host's ceiling limits.pluginMemory ({} bytes, host config); lower them in the sidecar or raise the ceiling",
                limits.memory, limits.concurrency, self.plugin_memory
            ));
        }
        Ok(())
    }

    /// What one plugin instance's store may create.
    pub fn store_caps(&self) -> StoreCaps {
        StoreCaps {
            instances: self.instances,
            memories: self.memories,
            tables: self.tables,
        }
    }

    /// Out-of-range ceilings are errors (a ceiling below the sidecar
    /// defaults would refuse every plugin without a sidecar).
    pub fn validate(&self) -> Result<(), String> {
        self.check(&Limits::default())
            .map_err(|e| format!("limits: the ceiling is below the sidecar defaults ({e})"))?;
        let default_plugin = plugin_memory(&Limits::default());
        if self.total_memory < default_plugin {
            return Err(format!(
                "limits.totalMemory ({} bytes) is below one plugin with the sidecar defaults ({default_plugin} bytes)",
                self.total_memory
            ));
        }
        for (key, n) in [
            ("instances", self.instances),
            ("memories", self.memories),
            ("tables", self.tables),
        ] {
            if n == 0 {
                return Err(format!(
                    "limits.{key} must be at least 1 (every plugin instance needs one)"
                ));
            }
        }
        Ok(())
    }
}

/// What a plugin with `limits` reserves: memory x concurrency.
pub fn plugin_memory(limits: &Limits) -> u64 {
    limits
        .memory
        .saturating_mul(u64::try_from(limits.concurrency).unwrap_or(u64::MAX))
}

impl Metrics {
    /// Handles for plugin `plugin`'s calls failed on a cap.
    pub fn plugin_caps(&self, plugin: &str) -> CapCounters {
        CapCounters::new(Cap::ALL.map(|cap| self.limit_exceeded(plugin, cap.label())))
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
            (
                Limits {
                    action_bytes_per_call: 1 << 30,
                    ..Limits::default()
                },
                "limits.actionBytesPerCall",
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
        for (c, key) in [
            (
                Ceiling {
                    total_memory: 1 << 20,
                    ..Ceiling::default()
                },
                "limits.totalMemory",
            ),
            (
                Ceiling {
                    plugin_memory: 1 << 20,
                    ..Ceiling::default()
                },
                "limits.pluginMemory",
            ),
            (
                Ceiling {
                    tables: 0,
                    ..Ceiling::default()
                },
                "limits.tables",
            ),
        ] {
            let e = c.validate().unwrap_err();
            assert!(e.contains(key), "{key}: {e}");
        }
    }

    #[test]
    fn memory_times_concurrency_is_capped_per_plugin() {
        let c = Ceiling {
            plugin_memory: 256 << 20,
            concurrency: 8,
            ..Ceiling::default()
        };
        let within = Limits {
            memory: 64 << 20,
            concurrency: 4,
            ..Limits::default()
        };
        assert!(c.check(&within).is_ok());
        let e = c
            .check(&Limits {
                concurrency: 5,
                ..within.clone()
            })
            .unwrap_err();
        assert!(
            e.contains("limits.memory x limits.concurrency (67108864 bytes x 5 = 335544320 bytes)")
                && e.contains("limits.pluginMemory (268435456 bytes"),
            "{e}"
        );
        let e = c
            .check(&Limits {
                memory: 1 << 20,
                concurrency: 9,
                ..within
            })
            .unwrap_err();
        assert!(
            e.contains("limits.concurrency (9)") && e.contains("(8, host config)"),
            "{e}"
        );
    }

    #[test]
    fn the_total_budget_counts_each_plugin_once_and_frees_on_drop() {
        let budget = Arc::new(MemoryBudget::new(100));
        let a = budget.reserve("a", 60).unwrap();
        let e = budget.reserve("b", 50).unwrap_err();
        assert!(
            e.contains("(50 bytes)")
                && e.contains("the 60 bytes the other loaded plugins reserve")
                && e.contains("limits.totalMemory (100 bytes"),
            "{e}"
        );
        let b = budget.reserve("b", 40).unwrap();
        assert_eq!(budget.reserved(), 100);
        // A new version of `a` beside the old one (a swap): counted once,
        // at the larger.
        let a2 = budget.reserve("a", 50).unwrap();
        assert_eq!(budget.reserved(), 100);
        assert!(budget.reserve("a", 61).is_err());
        drop(a);
        assert_eq!(budget.reserved(), 90);
        drop((a2, b));
        assert_eq!(budget.reserved(), 0);
    }

    #[test]
    fn count_errors_name_the_ceiling_key() {
        let caps = StoreCaps {
            instances: 3,
            memories: 1,
            tables: 2,
        };
        let e = caps
            .explain("resource limit exceeded: memory count too high at 2")
            .unwrap();
        assert!(
            e.contains("limits.memories (1 linear memories") && e.contains("at 2"),
            "{e}"
        );
        assert!(caps.explain("out of fuel").is_none());
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
