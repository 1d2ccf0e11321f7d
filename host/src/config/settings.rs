//! What a config file may hold, every key optional so flags and file can
//! merge; serde reads it (unknown keys are errors) and schemars documents it.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::admin::server::MetricsAddr;
use crate::admin::ui::UiAddr;
use crate::redact::SensitiveFields;
use crate::runtime::grants::GrantCeiling;
use crate::runtime::limits::Ceiling;
use crate::source::kube::{InitialList, Wire};

/// Every `run` setting, each optional so that flags and file can merge.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RunSettings {
    pub plugins: Option<PathBuf>,
    pub local: Option<PathBuf>,
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    pub dry_run: Option<bool>,
    pub until_idle: Option<bool>,
    pub cache_dir: Option<PathBuf>,
    /// Size cap of the compile cache and the modules pulled for Plugin
    /// objects together (`1Gi`, `512Mi` or bytes; default 1Gi): after each
    /// new artifact or pull, the least recently used others of either kind
    /// go. One cap, not one per cache: the operator sizes one disk budget.
    #[serde(default, deserialize_with = "de_opt_bytes")]
    #[schemars(schema_with = "crate::runtime::manifest::size_schema")]
    pub compile_cache_max: Option<u64>,
    /// Where plugins are compiled (default `child`).
    pub compiler: Option<CompilerKind>,
    /// The operator's key file (at least 32 bytes, e.g. a mounted Secret)
    /// that signs and verifies compiled artifacts; unset, the host
    /// generates a key of its own into the cache folder.
    pub artifact_key: Option<PathBuf>,
    /// `auto` (default): a component of 1 MiB or more whose optimized code
    /// is not in the compile cache is served at once by the fast compile
    /// tier (Winch), its optimized code compiled in the background and
    /// swapped in; `off`: every plugin waits for its optimized code.
    pub fast_first_compile: Option<crate::runtime::FastFirstCompile>,
    pub keep_managed_fields: Option<bool>,
    pub initial_list: Option<InitialList>,
    pub page_size: Option<u32>,
    /// `auto` (default): informers read built-in kinds as protobuf, which
    /// the API server encodes faster and sends smaller, and see the JSON
    /// it would have sent; `json`: JSON for everything.
    pub wire: Option<Wire>,
    #[serde(default, with = "humantime_serde")]
    #[schemars(schema_with = "crate::runtime::manifest::duration_schema")]
    pub poll: Option<Duration>,
    pub dispatch: Option<DispatchSettings>,
    /// Leader election on a Lease (default: on in a Pod, off elsewhere).
    pub leader_elect: Option<bool>,
    #[serde(default, with = "humantime_serde")]
    #[schemars(schema_with = "crate::runtime::manifest::duration_schema")]
    pub leader_elect_lease_duration: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    #[schemars(schema_with = "crate::runtime::manifest::duration_schema")]
    pub leader_elect_renew_deadline: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    #[schemars(schema_with = "crate::runtime::manifest::duration_schema")]
    pub leader_elect_retry_period: Option<Duration>,
    pub leader_elect_lease_name: Option<String>,
    pub leader_elect_namespace: Option<String>,
    /// Split the objects into this many shards, each fenced by its own
    /// Lease, so that several replicas act at once (1 to 64; needs leader
    /// election, and turns it on).
    pub shards: Option<u32>,
    /// What places an object in a shard: `uid` (default) or `namespace`.
    pub shard_key: Option<crate::shard::ShardKey>,
    /// Place an object with a controller owner by its owner's uid.
    pub shard_follow_owner: Option<bool>,
    /// What a replica's informers cache: `all` objects (default) or only
    /// those of the shards it `held`s.
    pub shard_cache: Option<crate::shard::ShardCache>,
    /// How long SIGTERM waits for in-flight calls and actions.
    #[serde(default, with = "humantime_serde")]
    #[schemars(schema_with = "crate::runtime::manifest::duration_schema")]
    pub shutdown_grace: Option<Duration>,
    /// Events waiting to be recorded at most (default 1024); past it a
    /// plugin's Events are dropped and counted, never holding it back.
    pub event_queue: Option<usize>,
    /// `/healthz`, `/readyz` and `/metrics` listen address (`HOST:PORT`,
    /// `:PORT` or `off`); default `0.0.0.0:9090`, off for `untilIdle` runs.
    #[schemars(with = "Option<String>")]
    pub metrics_addr: Option<MetricsAddr>,
    /// `/metrics` and `/dead-letters` need a Kubernetes bearer token that
    /// may `get` them (TokenReview, then SubjectAccessReview); probes never
    /// do. Default: on in a Pod using its service account, off elsewhere
    /// (kubeconfig runs, the local cluster, which has no API server to ask).
    pub metrics_auth: Option<bool>,
    /// A folder holding `tls.crt` and `tls.key` (a mounted
    /// `kubernetes.io/tls` Secret, re-read when they change): `/metrics`
    /// and `/dead-letters` are served over TLS with it. With
    /// `metricsAuth` and no folder, over TLS with a certificate
    /// self-signed at start.
    pub metrics_cert_dir: Option<PathBuf>,
    /// Serve the live web view (read-only; default off) on its own
    /// listener, `uiAddr`.
    pub ui: Option<bool>,
    /// The web view's listen address (`HOST:PORT`, or `:PORT` on
    /// 127.0.0.1); default `127.0.0.1:9091`.
    #[schemars(with = "Option<String>")]
    pub ui_addr: Option<UiAddr>,
    /// Host names (or addresses) the web view answers to besides
    /// `localhost` and loopback addresses, e.g. the name of a proxy in
    /// front of it.
    pub ui_allowed_hosts: Option<Vec<String>>,
    /// Fields to redact where the host shows objects (the web view), by
    /// kind (`Kind` in every group, `Kind.group` in
    /// one): JSON pointers, `*` matching every member or item. Secret
    /// `data` and `stringData` are always redacted.
    pub sensitive_fields: Option<SensitiveFields>,
    /// The ceiling on every sidecar's `limits` (memory, timeout, handles,
    /// actionsPerCall, logBytesPerCall, actionBytesPerCall, concurrency; pluginMemory and
    /// totalMemory; instances, memories, tables): a sidecar asking for more
    /// does not load.
    pub limits: Option<Ceiling>,
    /// The ceiling on every sidecar's `grants` (dirs, env, network,
    /// stdio): nothing by default.
    pub grants: Option<GrantCeiling>,
    /// Plugins as objects (`Plugin`, `NamespacedPlugin`): on against a
    /// real cluster that serves their CRDs, unless turned off.
    pub plugin_objects: Option<PluginObjectSettings>,
    /// The config file these settings came from (never granted to a
    /// plugin).
    #[serde(skip)]
    pub config_file: Option<PathBuf>,
}

/// Plugins as objects, in the host config (`pluginObjects:`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PluginObjectSettings {
    /// `false` turns Plugin objects off (the folder alone serves).
    pub enabled: Option<bool>,
    /// Namespaces whose NamespacedPlugins run (`*`: all); none by default:
    /// a tenant's plugin runs on the host's CPU and memory, so the operator
    /// opts each namespace in.
    pub tenant_namespaces: Option<Vec<String>>,
    /// PEM file of a CA registries may be signed by (besides the system
    /// roots), e.g. a mounted ConfigMap.
    #[serde(rename = "registryCA")]
    pub registry_ca: Option<PathBuf>,
    /// Registries spoken to over plain HTTP (development only).
    pub plain_http_registries: Option<Vec<String>>,
    /// Which OCI modules must carry a cosign signature, and by which keys:
    /// `[{prefix: registry.example.com/team, keys: [/etc/kubewasm/cosign.pub]}]`
    /// (the longest matching prefix applies; `*` matches every registry).
    /// A module none of its keys verifies is refused (`SignatureRefused`)
    /// and the running version keeps serving. None by default.
    pub signatures: Option<Vec<crate::oci::SignatureRuleSettings>>,
    /// The longest one pull from a registry may take, manifest, module,
    /// signatures, tokens and redirects together (default `2m`): a
    /// registry that trickles fails the pull (`PullFailed`, naming the
    /// deadline) and holds only the Plugins that name it.
    #[serde(default, with = "humantime_serde")]
    #[schemars(schema_with = "crate::runtime::manifest::duration_schema")]
    pub pull_timeout: Option<Duration>,
    /// Who tenants act as: each NamespacedPlugin's reads of what it
    /// references (module ConfigMap, pull Secret, keys) and its plugin's
    /// writes go out impersonating a ServiceAccount of its namespace, so
    /// that namespace's RBAC bounds it.
    pub tenants: Option<TenantSettings>,
}

/// `pluginObjects.tenants`: the identity tenants act as.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TenantSettings {
    /// The ServiceAccount of a tenant namespace that its plugins act as
    /// (default `kubewasm-tenant`); the host needs `impersonate` on it.
    pub service_account: Option<String>,
    /// Per tenant namespace, what differs from the default.
    pub namespaces: Option<std::collections::BTreeMap<String, TenantNamespaceSettings>>,
    /// The most a NamespacedPlugin may ask for, apart from the operator's
    /// ceiling (`limits`, `grants`), which a tenant never draws on. By
    /// default a plugin's default limits (two instances) and no grants.
    pub ceiling: Option<crate::runtime::tenants::TenantCeilingSettings>,
    /// What each tenant namespace may hold (plugins, memory x
    /// concurrency, actions a second), unless `namespaces` says otherwise;
    /// by default 5 plugins, 256Mi and 100 actions a second.
    pub quota: Option<crate::runtime::tenants::QuotaSettings>,
    /// How often a serving tenant plugin's account is asked again whether
    /// it may still read what the plugin reads through the shared cache
    /// (default 5m): a Role revoked stops the plugin within this.
    #[serde(default, with = "humantime_serde")]
    #[schemars(schema_with = "crate::runtime::manifest::duration_schema")]
    pub recheck: Option<Duration>,
}

impl TenantSettings {
    /// Which ServiceAccount each tenant namespace acts as.
    pub fn accounts(&self) -> crate::objects::TenantAccounts {
        crate::objects::TenantAccounts::new(
            self.service_account.clone(),
            self.namespaces
                .iter()
                .flatten()
                .filter_map(|(ns, s)| Some((ns.clone(), s.service_account.clone()?))),
        )
    }
}

/// One tenant namespace's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TenantNamespaceSettings {
    /// The ServiceAccount this namespace's plugins act as.
    pub service_account: Option<String>,
    /// This namespace's quota, over the default quota.
    pub quota: Option<crate::runtime::tenants::QuotaSettings>,
}

/// Where plugins are compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum CompilerKind {
    /// A child process (`kubewasm __compile`): Cranelift's memory leaves
    /// with it, and the host's RSS stays where it was.
    Child,
    /// A thread of the host (the compile's memory stays with the allocator).
    InProcess,
}

fn de_opt_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    crate::runtime::manifest::de_bytes(d).map(Some)
}

/// Retry policy of every plugin's queue.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DispatchSettings {
    /// Failed attempts after which a key is parked as a dead letter (still
    /// retried every `maxBackoff`); unset: parked only when its backoff
    /// reaches `maxBackoff`.
    pub max_attempts: Option<u32>,
    /// The first wait before a failed key is tried again (default 100ms);
    /// doubled per failure, with jitter.
    #[serde(default, with = "humantime_serde")]
    #[schemars(schema_with = "crate::runtime::manifest::duration_schema")]
    pub base_backoff: Option<Duration>,
    /// The longest wait between attempts of one key (default 5m); a key
    /// that reaches it is parked and retried at this interval.
    #[serde(default, with = "humantime_serde")]
    #[schemars(schema_with = "crate::runtime::manifest::duration_schema")]
    pub max_backoff: Option<Duration>,
    pub unhealthy_after: Option<u64>,
    /// The resync period of subscriptions that set none (WIT 0.2); `0s`
    /// turns those off.
    #[serde(default, with = "humantime_serde")]
    #[schemars(schema_with = "crate::runtime::manifest::duration_schema")]
    pub default_resync: Option<Duration>,
}
