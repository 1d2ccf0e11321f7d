//! Tenants' own ceiling and quotas. A NamespacedPlugin is admitted against
//! the tenants' ceiling (by default nothing of the outside world and small
//! limits), never the operator's, and against its namespace's quota
//! (plugins, memory x concurrency, actions per second) and the tenants'
//! shared memory budget: a tenant can spend neither the operator's budget
//! nor another namespace's quota.

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota as RateQuota, RateLimiter};
use serde::Deserialize;

use super::grants::GrantCeiling;
use super::limits::{Ceiling, MemoryBudget, Reservation, plugin_memory};
use super::manifest::Limits;

/// The tenants' ceiling: the host config's `pluginObjects.tenants.ceiling`.
/// Unset keys keep the tenant defaults ([`TenantLimits`]), not the
/// operator's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct TenantCeilingSettings {
    /// The most a NamespacedPlugin's `limits` may ask for.
    pub limits: TenantLimits,
    /// What of the outside world a NamespacedPlugin's `grants` may open:
    /// nothing by default (no env, network or stdio; directories never).
    pub grants: GrantCeiling,
}

/// The tenants' ceiling on `limits`, key by key as the host's `limits`;
/// each unset key keeps its tenant default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct TenantLimits {
    /// Linear memory per instance (default `64Mi`, a plugin's default).
    #[serde(deserialize_with = "de_opt_bytes")]
    #[schemars(schema_with = "crate::runtime::manifest::size_schema")]
    pub memory: Option<u64>,
    /// Call deadline (default `1s`).
    #[serde(default, with = "humantime_serde")]
    #[schemars(schema_with = "crate::runtime::manifest::duration_schema")]
    pub timeout: Option<Duration>,
    /// Live object handles per instance (default 100,000).
    pub handles: Option<u32>,
    /// Actions per call (default 1,000).
    pub actions_per_call: Option<u32>,
    /// Action rate of one plugin (default 100 a second).
    pub actions_per_second: Option<u32>,
    /// Log bytes per call (default `1Mi`).
    #[serde(deserialize_with = "de_opt_bytes")]
    #[schemars(schema_with = "crate::runtime::manifest::size_schema")]
    pub log_bytes_per_call: Option<u64>,
    /// Bytes of applied objects and patches per call (default `8Mi`).
    #[serde(deserialize_with = "de_opt_bytes")]
    #[schemars(schema_with = "crate::runtime::manifest::size_schema")]
    pub action_bytes_per_call: Option<u64>,
    /// Instances of one plugin (default 2).
    pub concurrency: Option<usize>,
    /// Memory x concurrency of one plugin (default `128Mi`).
    #[serde(deserialize_with = "de_opt_bytes")]
    #[schemars(schema_with = "crate::runtime::manifest::size_schema")]
    pub plugin_memory: Option<u64>,
    /// Memory x concurrency of every tenant plugin together, in all
    /// namespaces (default `1Gi`).
    #[serde(deserialize_with = "de_opt_bytes")]
    #[schemars(schema_with = "crate::runtime::manifest::size_schema")]
    pub total_memory: Option<u64>,
    /// Core instances per plugin instance (default 32: a Python plugin
    /// makes 14).
    pub instances: Option<usize>,
    /// Linear memories per plugin instance (default 4).
    pub memories: Option<usize>,
    /// Tables per plugin instance (default 16).
    pub tables: Option<usize>,
}

fn de_opt_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    super::manifest::de_bytes(d).map(Some)
}

/// What one tenant namespace may hold (`pluginObjects.tenants.quota`, and
/// per namespace `pluginObjects.tenants.namespaces.NS.quota`); each unset
/// key keeps its default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct QuotaSettings {
    /// NamespacedPlugins served at once (default 5).
    pub plugins: Option<u32>,
    /// Memory x concurrency of the namespace's plugins together (default
    /// `256Mi`).
    #[serde(deserialize_with = "de_opt_bytes")]
    #[schemars(schema_with = "crate::runtime::manifest::size_schema")]
    pub memory: Option<u64>,
    /// Actions a second of the namespace's plugins together (default 100).
    pub actions_per_second: Option<u32>,
}

/// A namespace's quota, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    pub plugins: u32,
    pub memory: u64,
    pub actions_per_second: u32,
}

impl Default for Quota {
    fn default() -> Self {
        Self {
            plugins: 5,
            memory: 256 << 20,
            actions_per_second: 100,
        }
    }
}

impl Quota {
    /// `settings` over `base`.
    pub fn with(self, settings: &QuotaSettings) -> Self {
        Self {
            plugins: settings.plugins.unwrap_or(self.plugins),
            memory: settings.memory.unwrap_or(self.memory),
            actions_per_second: settings
                .actions_per_second
                .unwrap_or(self.actions_per_second),
        }
    }
}

/// The ceiling a tenant plugin is admitted against when the host config
/// says nothing: a plugin's defaults (what a spec without `limits` gets)
/// and no more, but two instances; nothing of the outside world.
pub fn tenant_default_ceiling() -> Ceiling {
    let d = Limits::default();
    Ceiling {
        memory: d.memory,
        timeout: d.timeout,
        handles: d.handles,
        actions_per_call: d.actions_per_call,
        actions_per_second: d.actions_per_second,
        log_bytes_per_call: d.log_bytes_per_call,
        action_bytes_per_call: d.action_bytes_per_call,
        concurrency: 2,
        plugin_memory: 128 << 20,
        total_memory: 1 << 30,
        instances: super::limits::DEFAULT_INSTANCES,
        memories: super::limits::DEFAULT_MEMORIES,
        tables: super::limits::DEFAULT_TABLES,
        grants: GrantCeiling::default(),
    }
}

impl TenantCeilingSettings {
    /// The ceiling these settings make, over the tenant defaults.
    pub fn ceiling(&self) -> Ceiling {
        let d = tenant_default_ceiling();
        let l = &self.limits;
        Ceiling {
            memory: l.memory.unwrap_or(d.memory),
            timeout: l.timeout.unwrap_or(d.timeout),
            handles: l.handles.unwrap_or(d.handles),
            actions_per_call: l.actions_per_call.unwrap_or(d.actions_per_call),
            actions_per_second: l.actions_per_second.unwrap_or(d.actions_per_second),
            log_bytes_per_call: l.log_bytes_per_call.unwrap_or(d.log_bytes_per_call),
            action_bytes_per_call: l.action_bytes_per_call.unwrap_or(d.action_bytes_per_call),
            concurrency: l.concurrency.unwrap_or(d.concurrency),
            plugin_memory: l.plugin_memory.unwrap_or(d.plugin_memory),
            total_memory: l.total_memory.unwrap_or(d.total_memory),
            instances: l.instances.unwrap_or(d.instances),
            memories: l.memories.unwrap_or(d.memories),
            tables: l.tables.unwrap_or(d.tables),
            grants: self.grants.clone(),
        }
    }
}

/// The tenants' ceiling and quotas as configured (what [`TenantPolicy`]
/// is built from).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantOptions {
    pub ceiling: Ceiling,
    /// Every namespace's, unless `quotas` names it.
    pub quota: Quota,
    pub quotas: BTreeMap<String, Quota>,
}

impl Default for TenantOptions {
    fn default() -> Self {
        Self {
            ceiling: tenant_default_ceiling(),
            quota: Quota::default(),
            quotas: BTreeMap::new(),
        }
    }
}

impl TenantOptions {
    /// From the host config: the ceiling, the default quota and each
    /// namespace's (over the default).
    pub fn from_settings<'a>(
        ceiling: Option<&TenantCeilingSettings>,
        quota: Option<&QuotaSettings>,
        namespaces: impl IntoIterator<Item = (&'a String, Option<&'a QuotaSettings>)>,
    ) -> Self {
        let base = quota.map_or_else(Quota::default, |q| Quota::default().with(q));
        Self {
            ceiling: ceiling.map_or_else(tenant_default_ceiling, TenantCeilingSettings::ceiling),
            quota: base,
            quotas: namespaces
                .into_iter()
                .filter_map(|(ns, q)| Some((ns.clone(), base.with(q?))))
                .collect(),
        }
    }

    /// The policy these options make, holding nothing yet.
    pub fn policy(&self) -> TenantPolicy {
        TenantPolicy::new(self.ceiling.clone(), self.quota, self.quotas.clone())
    }
}

/// The tenants' ceiling and quotas in force, and what they hold now.
#[derive(Debug)]
pub struct TenantPolicy {
    ceiling: Ceiling,
    quota: Quota,
    quotas: BTreeMap<String, Quota>,
    /// Every tenant plugin together (the ceiling's `totalMemory`).
    total: Arc<MemoryBudget>,
    namespaces: parking_lot::Mutex<HashMap<String, Arc<NamespaceState>>>,
}

/// What one namespace holds: its memory quota and its shared action rate.
#[derive(Debug)]
struct NamespaceState {
    budget: Arc<MemoryBudget>,
    rate: Option<Arc<DefaultDirectRateLimiter>>,
}

impl Default for TenantPolicy {
    fn default() -> Self {
        Self::new(tenant_default_ceiling(), Quota::default(), BTreeMap::new())
    }
}

impl TenantPolicy {
    /// `quota` for every namespace, `quotas` for the named ones.
    pub fn new(ceiling: Ceiling, quota: Quota, quotas: BTreeMap<String, Quota>) -> Self {
        let total = Arc::new(MemoryBudget::named(
            ceiling.total_memory,
            "the tenants' ceiling pluginObjects.tenants.ceiling.limits.totalMemory (every namespace's plugins together)",
            None,
        ));
        Self {
            ceiling,
            quota,
            quotas,
            total,
            namespaces: parking_lot::Mutex::default(),
        }
    }

    /// The ceiling tenants are admitted against.
    pub fn ceiling(&self) -> &Ceiling {
        &self.ceiling
    }

    /// `namespace`'s quota.
    pub fn quota(&self, namespace: &str) -> Quota {
        self.quotas.get(namespace).copied().unwrap_or(self.quota)
    }

    fn namespace(&self, namespace: &str) -> Arc<NamespaceState> {
        let mut all = self.namespaces.lock();
        all.entry(namespace.to_owned())
            .or_insert_with(|| {
                let quota = self.quota(namespace);
                Arc::new(NamespaceState {
                    budget: Arc::new(MemoryBudget::named(
                        quota.memory,
                        &format!(
                            "namespace {namespace}'s quota memory (pluginObjects.tenants quota: its plugins' memory x concurrency together)"
                        ),
                        Some((
                            quota.plugins,
                            format!(
                                "namespace {namespace}'s quota plugins (pluginObjects.tenants quota, host config)"
                            ),
                        )),
                    )),
                    rate: NonZeroU32::new(quota.actions_per_second).map(|r| {
                        Arc::new(RateLimiter::direct(RateQuota::per_second(r).allow_burst(r)))
                    }),
                })
            })
            .clone()
    }

    /// Checks a tenant plugin's `limits` against the tenants' ceiling, and
    /// reserves its memory x concurrency in its namespace's quota and the
    /// tenants' total (returned when the version is dropped); errors name
    /// the quota or ceiling key.
    pub fn admit(
        &self,
        namespace: &str,
        plugin: &str,
        limits: &Limits,
    ) -> Result<Reservation, Refused> {
        self.ceiling
            .check(limits)
            .map_err(|e| Refused::Ceiling(as_tenants(&e)))?;
        let bytes = plugin_memory(limits);
        let state = self.namespace(namespace);
        let in_namespace = state
            .budget
            .reserve(plugin, bytes)
            .map_err(Refused::Quota)?;
        let in_total = self
            .total
            .reserve(plugin, bytes)
            .map_err(Refused::Ceiling)?;
        Ok(in_namespace.with(in_total))
    }

    /// The action rate `namespace`'s plugins share (`None`: unlimited).
    pub fn rate(&self, namespace: &str) -> Option<Arc<DefaultDirectRateLimiter>> {
        self.namespace(namespace).rate.clone()
    }
}

/// Why a tenant plugin is not admitted; the message names the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Over the tenants' ceiling (one plugin's limits, or all tenants'
    /// memory together).
    Ceiling(String),
    /// Over its namespace's quota.
    Quota(String),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ceiling(m) | Self::Quota(m) => f.write_str(m),
        }
    }
}

/// A ceiling's message, said of the tenants' ceiling.
pub fn as_tenants(message: &str) -> String {
    message
        .replace(
            "the host's ceiling ",
            "the tenants' ceiling pluginObjects.tenants.ceiling.",
        )
        .replace("the sidecar's ", "the spec's ")
        .replace("in the sidecar", "in the spec")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(memory: u64, concurrency: usize) -> Limits {
        Limits {
            memory,
            concurrency,
            timeout: Duration::from_millis(500),
            handles: 1000,
            actions_per_call: 10,
            actions_per_second: 10,
            log_bytes_per_call: 1024,
            action_bytes_per_call: 1024,
            ..Limits::default()
        }
    }

    /// Unset keys keep the tenant defaults, not the operator's.
    #[test]
    fn the_tenant_ceiling_defaults_small_and_grants_nothing() {
        let settings: TenantCeilingSettings =
            serde_yaml_ng::from_str("limits: {memory: 32Mi}").unwrap();
        let c = settings.ceiling();
        assert_eq!(c.memory, 32 << 20);
        assert_eq!(c.concurrency, 2);
        assert_eq!(c.timeout, Duration::from_secs(1));
        assert!(c.grants.env.is_empty() && !c.grants.stdio && c.grants.dirs.is_empty());
        let err = c.check(&limits(64 << 20, 1)).map_err(|e| as_tenants(&e));
        let err = err.unwrap_err();
        assert!(
            err.contains("pluginObjects.tenants.ceiling.limits.memory"),
            "{err}"
        );
    }

    /// A namespace's plugins share its quota; another namespace and the
    /// operator's budget are untouched; a dropped version gives it back.
    #[test]
    fn quotas_hold_per_namespace() {
        let policy = TenantPolicy::new(
            tenant_default_ceiling(),
            Quota {
                plugins: 2,
                memory: 100 << 20,
                actions_per_second: 5,
            },
            BTreeMap::from([(
                "big".to_owned(),
                Quota {
                    plugins: 10,
                    memory: 500 << 20,
                    actions_per_second: 0,
                },
            )]),
        );
        let a = policy
            .admit("team-a", "team-a/x", &limits(32 << 20, 2))
            .unwrap();
        let err = policy
            .admit("team-a", "team-a/y", &limits(32 << 20, 2))
            .unwrap_err();
        assert!(matches!(&err, Refused::Quota(_)), "{err}");
        assert!(
            err.to_string().contains("namespace team-a's quota memory"),
            "{err}"
        );
        // Another namespace has its own.
        let _b = policy
            .admit("team-b", "team-b/y", &limits(32 << 20, 2))
            .unwrap();
        drop(a);
        let _a2 = policy
            .admit("team-a", "team-a/y", &limits(16 << 20, 1))
            .unwrap();
        let _a3 = policy
            .admit("team-a", "team-a/z", &limits(16 << 20, 1))
            .unwrap();
        let err = policy
            .admit("team-a", "team-a/w", &limits(1 << 20, 1))
            .unwrap_err();
        assert!(
            err.to_string().contains("namespace team-a's quota plugins"),
            "{err}"
        );
        // Per-namespace quota and rate.
        assert_eq!(policy.quota("big").plugins, 10);
        assert!(policy.rate("big").is_none());
        let rate = policy.rate("team-a").unwrap();
        let same = policy.rate("team-a").unwrap();
        assert!(Arc::ptr_eq(&rate, &same), "one rate per namespace");
    }
}
