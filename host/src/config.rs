//! The `run` settings, from flags and an optional config file
//! (`--config FILE`, YAML or JSON, `apiVersion: kubewasm.io/v1alpha1`,
//! `kind: HostConfig`). Flags win over the file; unknown keys are errors;
//! relative paths in the file are relative to the file's folder.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::admin::server::MetricsAddr;
use crate::admin::ui::UiAddr;
use crate::app::{AdminOptions, ClusterTarget, RunOptions};
use crate::dispatch::DispatchOptions;
use crate::leader::{self, ElectionConfigError, ElectionOptions};
use crate::object::StripOptions;
use crate::redact::{RedactError, Redactor, SensitiveFields};
use crate::runtime::grants::{GrantCeiling, absolute};
use crate::runtime::limits::Ceiling;
use crate::runtime::{Compiler, EngineOptions};
use crate::source::kube::{InitialList, KubeTarget};

/// The only config file version so far.
pub const API_VERSION: &str = "kubewasm.io/v1alpha1";
pub const KIND: &str = "HostConfig";
/// How long SIGTERM waits for in-flight calls and actions by default.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("{0}")]
    Conflict(String),
    #[error("no plugin folder: pass --plugins DIR (or set `plugins:` in the config file)")]
    NoPlugins,
    #[error(
        "no cluster: pass --local DIR to run the embedded cluster over a folder of manifests, or --kubeconfig FILE (KUBECONFIG, ~/.kube/config and a pod's service account are used when present)"
    )]
    NoCluster,
    #[error("{0}")]
    OutOfRange(String),
    #[error(transparent)]
    Election(#[from] ElectionConfigError),
    #[error(transparent)]
    Redact(#[from] RedactError),
}

/// Whether a real cluster can be reached without flags, in kubectl's order:
/// `KUBECONFIG`, the pod's service account, `~/.kube/config`.
pub fn default_cluster_available() -> bool {
    std::env::var_os("KUBECONFIG").is_some()
        || std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
        || crate::source::kube::home_kubeconfig().is_some_and(|p| p.is_file())
}

/// What the process environment says, for defaults that depend on where
/// the host runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    /// `KUBECONFIG` is set.
    pub kubeconfig_env: bool,
    /// `KUBERNETES_SERVICE_HOST` is set: running in a Pod.
    pub in_cluster: bool,
    /// Lease holder identity (`POD_NAME_<suffix>`, else `HOSTNAME_<suffix>`).
    pub identity: String,
    /// `POD_NAMESPACE`, else the service account's namespace file.
    pub namespace: Option<String>,
}

impl Environment {
    pub fn detect() -> Self {
        Self {
            kubeconfig_env: std::env::var_os("KUBECONFIG").is_some(),
            in_cluster: std::env::var_os("KUBERNETES_SERVICE_HOST").is_some(),
            identity: crate::telemetry::identity::holder_identity(),
            namespace: crate::telemetry::identity::pod_namespace(),
        }
    }
}

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
    pub keep_managed_fields: Option<bool>,
    pub initial_list: Option<InitialList>,
    pub page_size: Option<u32>,
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
    /// How long SIGTERM waits for in-flight calls and actions.
    #[serde(default, with = "humantime_serde")]
    #[schemars(schema_with = "crate::runtime::manifest::duration_schema")]
    pub shutdown_grace: Option<Duration>,
    /// `/healthz`, `/readyz` and `/metrics` listen address (`HOST:PORT`,
    /// `:PORT` or `off`); default `0.0.0.0:9090`, off for `untilIdle` runs.
    #[schemars(with = "Option<String>")]
    pub metrics_addr: Option<MetricsAddr>,
    /// `/metrics` and `/dead-letters` need a Kubernetes bearer token that
    /// may `get` them (TokenReview, then SubjectAccessReview); probes never
    /// do. Default: on in a Pod using its service account, off elsewhere
    /// (kubeconfig runs, the local cluster, which has no API server to ask).
    pub metrics_auth: Option<bool>,
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

impl RunSettings {
    /// Reads a config file, checking its version and kind.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut s = Self::parse(&text, path)?;
        s.config_file = Some(path.to_owned());
        Ok(s)
    }

    /// Parses config text; `path` names the file in errors and anchors
    /// relative paths.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        };
        // `flatten` and `deny_unknown_fields` do not mix in serde: take
        // the header keys out, then decode the rest strictly.
        let value: serde_json::Value =
            serde_yaml_ng::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let map = value
            .as_object()
            .ok_or_else(|| invalid("expected a mapping of settings".into()))?;
        let mut rest = map.clone();
        let api_version = rest.remove("apiVersion");
        let kind = rest.remove("kind");
        let (api_version, kind) = (
            api_version.as_ref().and_then(|v| v.as_str()).unwrap_or(""),
            kind.as_ref().and_then(|v| v.as_str()).unwrap_or(""),
        );
        if api_version != API_VERSION || kind != KIND {
            return Err(invalid(format!(
                "expected `apiVersion: {API_VERSION}` and `kind: {KIND}`, found {api_version:?} / {kind:?}"
            )));
        }
        let mut s: RunSettings = serde_json::from_value(serde_json::Value::Object(rest))
            .map_err(|e| invalid(format!("{e} (see docs/book/src/config.md)")))?;
        let base = path.parent().unwrap_or(Path::new("."));
        for p in [
            &mut s.plugins,
            &mut s.local,
            &mut s.kubeconfig,
            &mut s.cache_dir,
            &mut s.artifact_key,
        ]
        .into_iter()
        .flatten()
        .chain(s.grants.iter_mut().flat_map(|g| g.dirs.iter_mut()))
        .chain(s.plugin_objects.iter_mut().flat_map(|o| {
            o.registry_ca.iter_mut().chain(
                o.signatures
                    .iter_mut()
                    .flatten()
                    .flat_map(|r| r.keys.iter_mut()),
            )
        })) {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
        Ok(s)
    }

    /// `self` (flags) over `file`.
    #[must_use]
    pub fn over(self, file: RunSettings) -> RunSettings {
        let dispatch = match (self.dispatch, file.dispatch) {
            (Some(a), Some(b)) => Some(DispatchSettings {
                max_attempts: a.max_attempts.or(b.max_attempts),
                base_backoff: a.base_backoff.or(b.base_backoff),
                max_backoff: a.max_backoff.or(b.max_backoff),
                unhealthy_after: a.unhealthy_after.or(b.unhealthy_after),
                default_resync: a.default_resync.or(b.default_resync),
            }),
            (a, b) => a.or(b),
        };
        RunSettings {
            plugins: self.plugins.or(file.plugins),
            local: self.local.or(file.local),
            kubeconfig: self.kubeconfig.or(file.kubeconfig),
            context: self.context.or(file.context),
            dry_run: self.dry_run.or(file.dry_run),
            until_idle: self.until_idle.or(file.until_idle),
            cache_dir: self.cache_dir.or(file.cache_dir),
            compile_cache_max: self.compile_cache_max.or(file.compile_cache_max),
            compiler: self.compiler.or(file.compiler),
            artifact_key: self.artifact_key.or(file.artifact_key),
            keep_managed_fields: self.keep_managed_fields.or(file.keep_managed_fields),
            initial_list: self.initial_list.or(file.initial_list),
            page_size: self.page_size.or(file.page_size),
            poll: self.poll.or(file.poll),
            dispatch,
            leader_elect: self.leader_elect.or(file.leader_elect),
            leader_elect_lease_duration: self
                .leader_elect_lease_duration
                .or(file.leader_elect_lease_duration),
            leader_elect_renew_deadline: self
                .leader_elect_renew_deadline
                .or(file.leader_elect_renew_deadline),
            leader_elect_retry_period: self
                .leader_elect_retry_period
                .or(file.leader_elect_retry_period),
            leader_elect_lease_name: self
                .leader_elect_lease_name
                .or(file.leader_elect_lease_name),
            leader_elect_namespace: self.leader_elect_namespace.or(file.leader_elect_namespace),
            shutdown_grace: self.shutdown_grace.or(file.shutdown_grace),
            metrics_addr: self.metrics_addr.or(file.metrics_addr),
            metrics_auth: self.metrics_auth.or(file.metrics_auth),
            ui: self.ui.or(file.ui),
            ui_addr: self.ui_addr.or(file.ui_addr),
            ui_allowed_hosts: self.ui_allowed_hosts.or(file.ui_allowed_hosts),
            sensitive_fields: self.sensitive_fields.or(file.sensitive_fields),
            limits: self.limits.or(file.limits),
            grants: self.grants.or(file.grants),
            plugin_objects: self.plugin_objects.or(file.plugin_objects),
            config_file: self.config_file.or(file.config_file),
        }
    }

    /// Picks the cluster: `local` for the embedded cluster; a kubeconfig or
    /// context (or `default_cluster`: see [`default_cluster_available`]) for
    /// a real one; otherwise an error saying which flag to pass. Values out
    /// of range are errors. Election defaults come from the process
    /// environment.
    pub fn into_options(self, default_cluster: bool) -> Result<RunOptions, ConfigError> {
        self.into_options_in(default_cluster, &Environment::detect())
    }

    /// [`into_options`](Self::into_options) with the environment given.
    pub fn into_options_in(
        self,
        default_cluster: bool,
        env: &Environment,
    ) -> Result<RunOptions, ConfigError> {
        let plugins = self.plugins.clone().ok_or(ConfigError::NoPlugins)?;
        let wants_kube = self.kubeconfig.is_some() || self.context.is_some();
        let cluster = match (self.local.clone(), wants_kube) {
            (Some(_), true) => {
                return Err(ConfigError::Conflict(
                    "both a local cluster folder and a kubeconfig/context are set: pick one".into(),
                ));
            }
            (Some(dir), false) => ClusterTarget::Local(dir),
            (None, true) => ClusterTarget::Kube(self.kube_target()),
            (None, false) if default_cluster => ClusterTarget::Kube(self.kube_target()),
            (None, false) => return Err(ConfigError::NoCluster),
        };
        self.check_ranges()?;
        let election = self.election(&cluster, env)?;
        let admin = self.admin(&cluster, env)?;
        let mut engine = EngineOptions::default();
        if let Some(dir) = self.cache_dir {
            engine.cache_dir = Some(dir);
        }
        if let Some(max) = self.compile_cache_max {
            engine.cache_max_bytes = max;
        }
        engine.artifact_key = self.artifact_key;
        engine.compiler = match self.compiler.unwrap_or(CompilerKind::Child) {
            CompilerKind::Child => Compiler::child_of_current_exe(),
            CompilerKind::InProcess => Compiler::InProcess,
        };
        let keep = self.keep_managed_fields.unwrap_or(false);
        let mut dispatch = DispatchOptions::default();
        if let Some(d) = self.dispatch {
            dispatch.max_attempts = d.max_attempts.or(dispatch.max_attempts);
            dispatch.base_backoff = d.base_backoff.unwrap_or(dispatch.base_backoff);
            dispatch.max_backoff = d.max_backoff.unwrap_or(dispatch.max_backoff);
            dispatch.unhealthy_after = d.unhealthy_after.unwrap_or(dispatch.unhealthy_after);
            if let Some(r) = d.default_resync {
                dispatch.default_resync = (!r.is_zero()).then_some(r);
            }
        }
        let until_idle = self.until_idle.unwrap_or(false);
        // A run that ends by itself has no scraper and no probes.
        let metrics_addr = match self.metrics_addr {
            Some(a) => a,
            None if until_idle => MetricsAddr::Off,
            None => MetricsAddr::default(),
        };
        let ui = self.ui.unwrap_or(false);
        let mut limits = self.limits.unwrap_or_default();
        limits.grants = self.grants.unwrap_or_default();
        // The host's own files are never granted to a plugin.
        let mut own: Vec<PathBuf> = [self.config_file, Some(plugins.clone())]
            .into_iter()
            .flatten()
            .collect();
        match &cluster {
            ClusterTarget::Local(dir) => own.push(dir.clone()),
            ClusterTarget::Kube(t) => {
                own.extend(t.kubeconfig.clone());
                if let Some(env) = std::env::var_os("KUBECONFIG") {
                    own.extend(std::env::split_paths(&env));
                }
                own.extend(crate::source::kube::home_kubeconfig());
            }
        }
        limits.grants.protect(
            own.iter()
                .filter(|p| !p.as_os_str().is_empty())
                .map(|p| absolute(p)),
        );
        let objects = match (&cluster, &self.plugin_objects) {
            (ClusterTarget::Local(_), _) => None,
            (
                _,
                Some(PluginObjectSettings {
                    enabled: Some(false),
                    ..
                }),
            ) => None,
            (_, settings) => Some(crate::objects::ObjectOptions {
                namespace: election
                    .as_ref()
                    .map(|e| e.namespace.clone())
                    .or_else(|| env.namespace.clone())
                    .unwrap_or_else(|| "kubewasm".into()),
                tenant_namespaces: settings
                    .as_ref()
                    .and_then(|s| s.tenant_namespaces.clone())
                    .unwrap_or_default(),
                registry_ca: settings.as_ref().and_then(|s| s.registry_ca.clone()),
                plain_http_registries: settings
                    .as_ref()
                    .and_then(|s| s.plain_http_registries.clone())
                    .unwrap_or_default(),
                signatures: settings
                    .as_ref()
                    .and_then(|s| s.signatures.clone())
                    .unwrap_or_default(),
            }),
        };
        Ok(RunOptions {
            plugins,
            cluster,
            objects,
            dry_run: self.dry_run.unwrap_or(false),
            until_idle,
            engine,
            strip: StripOptions {
                managed_fields: !keep,
                last_applied: !keep,
            },
            dispatch,
            poll: self.poll.unwrap_or(Duration::from_secs(30)),
            election,
            shutdown_grace: self.shutdown_grace.unwrap_or(DEFAULT_SHUTDOWN_GRACE),
            metrics_addr,
            ui,
            admin,
            limits,
        })
    }

    /// The admin surfaces' settings. Metrics authentication is on by
    /// default where election is (a Pod using its service account: the
    /// listener is reachable from the cluster network), and refused on the
    /// local cluster, which has no API server to review tokens.
    fn admin(
        &self,
        cluster: &ClusterTarget,
        env: &Environment,
    ) -> Result<AdminOptions, ConfigError> {
        let local = matches!(cluster, ClusterTarget::Local(_));
        let explicit_config =
            self.kubeconfig.is_some() || self.context.is_some() || env.kubeconfig_env;
        let metrics_auth = match self.metrics_auth {
            Some(true) if local => {
                return Err(ConfigError::Conflict(
                    "--metrics-auth needs a real cluster: the embedded local cluster (--local) has no API server to review tokens".into(),
                ));
            }
            Some(on) => on,
            None => env.in_cluster && !explicit_config && !local,
        };
        let redactor = match &self.sensitive_fields {
            Some(fields) => Redactor::new(fields)?,
            None => Redactor::default(),
        };
        Ok(AdminOptions {
            ui_addr: self.ui_addr.clone().unwrap_or_default(),
            ui_allowed_hosts: self.ui_allowed_hosts.clone().unwrap_or_default(),
            metrics_auth,
            redactor,
        })
    }

    fn check_ranges(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::OutOfRange(m));
        if self.poll.is_some_and(|p| p.is_zero()) {
            return bad(
                "poll must be longer than 0s (it is the plugin folder's rescan period)".into(),
            );
        }
        if let Some(c) = &self.limits {
            c.validate().map_err(ConfigError::OutOfRange)?;
        }
        if self.compile_cache_max == Some(0) {
            return bad(
                "compileCacheMax must be more than 0 (it caps the compile cache; leave it out for 1Gi)"
                    .into(),
            );
        }
        if self.page_size == Some(0) {
            return bad("pageSize must be at least 1".into());
        }
        if let Some(d) = &self.dispatch {
            if d.max_attempts == Some(0) {
                return bad("dispatch.maxAttempts must be at least 1".into());
            }
            if d.unhealthy_after == Some(0) {
                return bad("dispatch.unhealthyAfter must be at least 1".into());
            }
            let defaults = DispatchOptions::default();
            let base = d.base_backoff.unwrap_or(defaults.base_backoff);
            let max = d.max_backoff.unwrap_or(defaults.max_backoff);
            if base.is_zero() || max < base {
                return bad(format!(
                    "dispatch.baseBackoff must be longer than 0s and at most dispatch.maxBackoff (found {base:?} and {max:?})"
                ));
            }
        }
        Ok(())
    }

    /// Leader election: on by default only in a Pod using its service
    /// account (no kubeconfig or context given); never on the local
    /// cluster.
    fn election(
        &self,
        cluster: &ClusterTarget,
        env: &Environment,
    ) -> Result<Option<ElectionOptions>, ConfigError> {
        let local = matches!(cluster, ClusterTarget::Local(_));
        let explicit_config =
            self.kubeconfig.is_some() || self.context.is_some() || env.kubeconfig_env;
        let enabled = match self.leader_elect {
            Some(true) if local => {
                return Err(ConfigError::Conflict(
                    "--leader-elect needs a real cluster: the embedded local cluster (--local) has no Lease to elect on".into(),
                ));
            }
            Some(on) => on,
            None => env.in_cluster && !explicit_config && !local,
        };
        if !enabled {
            return Ok(None);
        }
        let opts = ElectionOptions {
            identity: env.identity.clone(),
            lease_name: self
                .leader_elect_lease_name
                .clone()
                .unwrap_or_else(|| leader::DEFAULT_LEASE_NAME.to_owned()),
            namespace: self
                .leader_elect_namespace
                .clone()
                .or_else(|| env.namespace.clone())
                .unwrap_or_else(|| "default".to_owned()),
            lease_duration: self
                .leader_elect_lease_duration
                .unwrap_or(leader::DEFAULT_LEASE_DURATION),
            renew_deadline: self
                .leader_elect_renew_deadline
                .unwrap_or(leader::DEFAULT_RENEW_DEADLINE),
            retry_period: self
                .leader_elect_retry_period
                .unwrap_or(leader::DEFAULT_RETRY_PERIOD),
        };
        opts.validate()?;
        Ok(Some(opts))
    }

    fn kube_target(&self) -> KubeTarget {
        let mut t = KubeTarget::new(self.kubeconfig.clone(), self.context.clone());
        if let Some(i) = self.initial_list {
            t.initial_list = i;
        }
        if let Some(p) = self.page_size {
            t.page_size = p;
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_settings_merge_under_flags_and_resolve_paths() {
        let file = RunSettings::parse(
            "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: plugins\nkubeconfig: /k/config\ncontext: dev\ninitialList: paged\ndispatch: {maxAttempts: 3, baseBackoff: 250ms}\nmetricsAddr: 127.0.0.1:0\n",
            Path::new("/etc/kubewasm/config.yaml"),
        )
        .unwrap();
        assert_eq!(
            file.plugins.as_deref(),
            Some(Path::new("/etc/kubewasm/plugins"))
        );
        let flags = RunSettings {
            context: Some("prod".into()),
            dry_run: Some(true),
            ..RunSettings::default()
        };
        let opts = flags.over(file).into_options(false).unwrap();
        assert!(opts.dry_run);
        assert_eq!(opts.metrics_addr, MetricsAddr::Listen("127.0.0.1:0".into()));
        assert_eq!(opts.dispatch.max_attempts, Some(3));
        assert_eq!(opts.dispatch.base_backoff, Duration::from_millis(250));
        assert_eq!(
            opts.dispatch.default_resync,
            Some(crate::runtime::DEFAULT_RESYNC),
            "unset: the documented default"
        );
        match opts.cluster {
            ClusterTarget::Kube(t) => {
                assert_eq!(t.context.as_deref(), Some("prod"));
                assert_eq!(t.kubeconfig.as_deref(), Some(Path::new("/k/config")));
                assert_eq!(t.initial_list, InitialList::Paged);
            }
            other => panic!("expected a kube target, got {other:?}"),
        }
    }

    /// `pluginObjects.signatures`: rules as written, key paths resolved
    /// against the config file's folder like every other path.
    #[test]
    fn signature_rules_resolve_their_key_paths() {
        let file = RunSettings::parse(
            "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\npluginObjects:\n  signatures:\n  - {prefix: reg.example/team, keys: [keys/cosign.pub, /abs/other.pub]}\n",
            Path::new("/etc/kubewasm/config.yaml"),
        )
        .unwrap();
        let rules = file.plugin_objects.unwrap().signatures.unwrap();
        assert_eq!(rules[0].prefix, "reg.example/team");
        assert_eq!(
            rules[0].keys,
            [
                PathBuf::from("/etc/kubewasm/keys/cosign.pub"),
                PathBuf::from("/abs/other.pub")
            ]
        );
    }

    /// The compile cache's cap and the compiler: defaults, file keys and
    /// the refusal of a zero cap.
    #[test]
    fn compile_cache_cap_and_compiler_from_the_host_config() {
        let parse = |extra: &str| {
            RunSettings::parse(
                &format!("apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: /p\nlocal: /c\n{extra}"),
                Path::new("/etc/kubewasm/config.yaml"),
            )
            .unwrap()
            .into_options(false)
        };
        let defaults = parse("").unwrap();
        assert_eq!(
            defaults.engine.cache_max_bytes,
            crate::runtime::cache::DEFAULT_MAX_BYTES
        );
        assert!(matches!(defaults.engine.compiler, Compiler::Child { .. }));
        assert_eq!(defaults.engine.artifact_key, None);
        let set =
            parse("compileCacheMax: 256Mi\ncompiler: inProcess\nartifactKey: keys/artifact\n")
                .unwrap();
        assert_eq!(set.engine.cache_max_bytes, 256 << 20);
        assert_eq!(set.engine.compiler, Compiler::InProcess);
        assert_eq!(
            set.engine.artifact_key.as_deref(),
            Some(Path::new("/etc/kubewasm/keys/artifact"))
        );
        let err = parse("compileCacheMax: 0\n").unwrap_err().to_string();
        assert!(err.contains("compileCacheMax"), "{err}");
        let err = RunSettings::parse(
            "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\ncompileCacheMax: lots\n",
            Path::new("c.yaml"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("1Gi"), "{err}");
    }

    /// `dispatch.defaultResync` sets the period of 0.2 subscriptions that
    /// set none; `0s` turns those resyncs off.
    #[test]
    fn default_resync_from_the_host_config() {
        let resync = |text: &str| {
            RunSettings::parse(
                &format!("apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: p\nkubeconfig: k\n{text}"),
                Path::new("/c.yaml"),
            )
            .unwrap()
            .into_options(false)
            .unwrap()
            .dispatch
            .default_resync
        };
        assert_eq!(
            resync("dispatch: {defaultResync: 90m}\n"),
            Some(Duration::from_secs(5400))
        );
        assert_eq!(resync("dispatch: {defaultResync: 0s}\n"), None);
        use crate::runtime::Resync;
        assert_eq!(
            Resync::HostDefault.period(Some(Duration::from_secs(7))),
            Some(Duration::from_secs(7))
        );
        assert_eq!(Resync::HostDefault.period(None), None);
        assert_eq!(Resync::Off.period(Some(Duration::from_secs(7))), None);
        assert_eq!(
            Resync::Every(Duration::from_secs(3)).period(None),
            Some(Duration::from_secs(3))
        );
    }

    fn pod() -> Environment {
        Environment {
            kubeconfig_env: false,
            in_cluster: true,
            identity: "kubewasm-0".into(),
            namespace: Some("kubewasm-system".into()),
        }
    }

    #[test]
    fn the_limits_ceiling_comes_from_the_file_and_must_admit_the_defaults() {
        let parse = |limits: &str| {
            RunSettings::parse(
                &format!(
                    "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: p\nlocal: c\nlimits: {limits}\n"
                ),
                Path::new("/x/config.yaml"),
            )
        };
        let opts = parse("{memory: 512Mi, actionsPerCall: 2000}")
            .unwrap()
            .into_options(false)
            .unwrap();
        assert_eq!(opts.limits.memory, 512 << 20);
        assert_eq!(opts.limits.actions_per_call, 2000);
        assert_eq!(opts.limits.timeout, Ceiling::default().timeout);
        let err = parse("{memory: 16Mi}")
            .unwrap()
            .into_options(false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("limits.memory"), "{err}");
        assert!(parse("{memry: 1Gi}").is_err(), "unknown keys are errors");
    }

    /// The grants ceiling is the file's top-level `grants`, relative
    /// folders are the file's, nothing is granted by default, and the
    /// host's own files are never granted whatever it lists.
    #[test]
    fn the_grants_ceiling_comes_from_the_file_and_protects_the_hosts_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for d in ["plugins", "cluster", "certs"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let config = root.join("config.yaml");
        std::fs::write(
            &config,
            "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: plugins\nlocal: cluster\nlimits: {totalMemory: 2Gi, instances: 20}\ngrants:\n  dirs: [certs, /]\n  env: [HTTP_PROXY]\n  network: ['*.example.com:443']\n  stdio: true\n",
        )
        .unwrap();
        let opts = RunSettings::from_file(&config)
            .unwrap()
            .into_options(false)
            .unwrap();
        let g = &opts.limits.grants;
        assert_eq!(g.dirs, [root.join("certs"), PathBuf::from("/")]);
        assert_eq!(g.env, ["HTTP_PROXY"]);
        assert!(g.stdio);
        assert_eq!(g.network.allow.len(), 1);
        assert_eq!(opts.limits.total_memory, 2 << 30);
        assert_eq!(opts.limits.instances, 20);
        for own in [config.clone(), root.join("plugins"), root.join("cluster")] {
            assert!(
                g.protected.contains(&own),
                "{}: {:?}",
                own.display(),
                g.protected
            );
        }
        // `/` is in the ceiling, yet the config file's folder (above the
        // host's files) and the plugin folder are refused.
        use crate::runtime::manifest::{DirGrant, Grants};
        for host in [root.clone(), root.join("plugins")] {
            let asked = Grants {
                dirs: vec![DirGrant {
                    host: host.clone(),
                    guest: "/g".into(),
                }],
                ..Grants::default()
            };
            let e = g.check(&asked).unwrap_err();
            assert!(e.contains("never granted"), "{}: {e}", host.display());
        }
        // Unset: nothing, and unknown keys are errors.
        let none = RunSettings::parse(
            "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: p\nlocal: c\n",
            Path::new("/x/c.yaml"),
        )
        .unwrap()
        .into_options(false)
        .unwrap();
        assert!(none.limits.grants.dirs.is_empty() && !none.limits.grants.stdio);
        assert!(none.limits.grants.network.allow.is_empty());
        let e = RunSettings::parse(
            "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\ngrants: {folders: [/x]}\n",
            Path::new("c.yaml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("unknown field `folders`"), "{e}");
    }

    #[test]
    fn election_is_on_in_a_pod_and_off_elsewhere() {
        let base = RunSettings {
            plugins: Some("p".into()),
            ..RunSettings::default()
        };
        let e = base
            .clone()
            .into_options_in(true, &pod())
            .unwrap()
            .election
            .expect("on by default in a pod");
        assert_eq!(e.identity, "kubewasm-0");
        assert_eq!(e.namespace, "kubewasm-system");
        assert_eq!(e.lease_name, "kubewasm");
        assert_eq!(e.lease_duration, Duration::from_secs(15));
        assert_eq!(e.renew_deadline, Duration::from_secs(10));
        assert_eq!(e.retry_period, Duration::from_secs(2));
        // A kubeconfig (flag or KUBECONFIG) means a run from outside.
        let outside = RunSettings {
            kubeconfig: Some("k".into()),
            ..base.clone()
        };
        assert_eq!(
            outside
                .clone()
                .into_options_in(true, &pod())
                .unwrap()
                .election,
            None
        );
        let env_kubeconfig = Environment {
            kubeconfig_env: true,
            ..pod()
        };
        assert_eq!(
            base.clone()
                .into_options_in(true, &env_kubeconfig)
                .unwrap()
                .election,
            None
        );
        // Explicitly on from outside, with the namespace fallback.
        let on = RunSettings {
            leader_elect: Some(true),
            ..outside
        };
        let e = on
            .into_options_in(true, &Environment::default())
            .unwrap()
            .election
            .unwrap();
        assert_eq!(e.namespace, "default");
        // Explicitly off in a pod: runs as without election.
        let off = RunSettings {
            leader_elect: Some(false),
            ..base.clone()
        };
        assert_eq!(off.into_options_in(true, &pod()).unwrap().election, None);
        // The local cluster: off by default, an error when asked for.
        let local = RunSettings {
            local: Some("l".into()),
            ..base.clone()
        };
        assert_eq!(
            local
                .clone()
                .into_options_in(false, &pod())
                .unwrap()
                .election,
            None
        );
        let e = RunSettings {
            leader_elect: Some(true),
            ..local
        }
        .into_options_in(false, &pod())
        .unwrap_err()
        .to_string();
        assert!(e.contains("--leader-elect needs a real cluster"), "{e}");
        // Durations are checked, naming the flag.
        let e = RunSettings {
            leader_elect_renew_deadline: Some(Duration::from_secs(15)),
            ..base
        }
        .into_options_in(true, &pod())
        .unwrap_err()
        .to_string();
        assert!(e.contains("--leader-elect-renew-deadline"), "{e}");
    }

    #[test]
    fn election_keys_in_the_file() {
        let file = RunSettings::parse(
            "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: p\nkubeconfig: k\nleaderElect: true\nleaderElectLeaseDuration: 4s\nleaderElectRenewDeadline: 3s\nleaderElectRetryPeriod: 500ms\nleaderElectLeaseName: ha\nleaderElectNamespace: ops\nshutdownGrace: 5s\n",
            Path::new("c.yaml"),
        )
        .unwrap();
        let opts = RunSettings::default()
            .over(file)
            .into_options_in(false, &Environment::default())
            .unwrap();
        assert_eq!(opts.shutdown_grace, Duration::from_secs(5));
        let e = opts.election.unwrap();
        assert_eq!((e.lease_name.as_str(), e.namespace.as_str()), ("ha", "ops"));
        assert_eq!(e.retry_period, Duration::from_millis(500));
        let e = RunSettings::parse(
            "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nleaderElection: true\n",
            Path::new("c.yaml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("unknown field `leaderElection`"), "{e}");
    }

    #[test]
    fn unknown_keys_wrong_version_and_conflicts_are_errors() {
        let p = Path::new("c.yaml");
        let e = RunSettings::parse(
            "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugin: x\n",
            p,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("unknown field `plugin`"), "{e}");
        let e = RunSettings::parse("plugins: x\n", p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("apiVersion: kubewasm.io/v1alpha1"), "{e}");
        let both = RunSettings {
            plugins: Some("p".into()),
            local: Some("l".into()),
            kubeconfig: Some("k".into()),
            ..RunSettings::default()
        };
        assert!(matches!(
            both.into_options(false),
            Err(ConfigError::Conflict(_))
        ));
        let none = RunSettings {
            plugins: Some("p".into()),
            ..RunSettings::default()
        };
        let e = none.clone().into_options(false).unwrap_err().to_string();
        assert!(
            e.contains("--local DIR") && e.contains("--kubeconfig"),
            "{e}"
        );
        assert!(matches!(
            none.clone().into_options(true).unwrap().cluster,
            ClusterTarget::Kube(_)
        ));
        assert!(matches!(
            RunSettings::default().into_options(false),
            Err(ConfigError::NoPlugins)
        ));
        // The listener: on by default, off for runs that end by themselves,
        // and a bad address is an error naming it.
        assert_eq!(
            none.clone().into_options(true).unwrap().metrics_addr,
            MetricsAddr::Listen("0.0.0.0:9090".into())
        );
        let idle = RunSettings {
            until_idle: Some(true),
            ..none.clone()
        };
        assert_eq!(
            idle.into_options(true).unwrap().metrics_addr,
            MetricsAddr::Off
        );
        let e = RunSettings::parse(
            "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nmetricsAddr: nine\n",
            p,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("invalid metrics address \"nine\""), "{e}");
        // The web view: off by default, a file key, on its own loopback
        // listener whatever the metrics listener does.
        let defaults = none.clone().into_options(true).unwrap();
        assert!(!defaults.ui);
        assert_eq!(defaults.admin.ui_addr.as_str(), "127.0.0.1:9091");
        assert!(defaults.admin.ui_allowed_hosts.is_empty());
        let ui = RunSettings::parse(
            "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: p\nlocal: l\nui: true\n",
            p,
        )
        .unwrap();
        assert!(ui.clone().into_options(false).unwrap().ui);
        let off = RunSettings {
            metrics_addr: Some(MetricsAddr::Off),
            ..ui.clone()
        };
        let opts = off.into_options(false).unwrap();
        assert!(opts.ui && opts.metrics_addr == MetricsAddr::Off);
        let idle_ui = RunSettings {
            until_idle: Some(true),
            ..ui
        };
        assert!(idle_ui.into_options(false).unwrap().ui);
    }

    #[test]
    fn the_web_view_address_and_hosts_and_sensitive_fields_from_the_file() {
        let parse = |extra: &str| {
            RunSettings::parse(
                &format!(
                    "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: p\nlocal: l\n{extra}"
                ),
                Path::new("/c.yaml"),
            )
        };
        let opts = parse(
            "ui: true\nuiAddr: \":8443\"\nuiAllowedHosts: [kubewasm.internal]\nsensitiveFields: {ConfigMap: [/data/password]}\n",
        )
        .unwrap()
        .into_options(false)
        .unwrap();
        // `:PORT` stays on loopback.
        assert_eq!(opts.admin.ui_addr.as_str(), "127.0.0.1:8443");
        assert_eq!(opts.admin.ui_allowed_hosts, ["kubewasm.internal"]);
        let mut cm = serde_json::json!({"data": {"password": "p", "user": "u"}});
        opts.admin.redactor.redact("v1", "ConfigMap", &mut cm);
        assert_eq!(cm["data"]["password"], crate::redact::MARKER);
        assert_eq!(cm["data"]["user"], "u");
        let e = parse("sensitiveFields: {ConfigMap: [data]}\n")
            .unwrap()
            .into_options(false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("sensitiveFields.ConfigMap") && e.contains("\"data\""),
            "{e}"
        );
        let e = parse("uiAddr: nine\n").unwrap_err().to_string();
        assert!(e.contains("invalid web view address"), "{e}");
    }

    #[test]
    fn metrics_auth_is_on_in_a_pod_off_elsewhere_and_needs_a_real_cluster() {
        let base = RunSettings {
            plugins: Some("p".into()),
            ..RunSettings::default()
        };
        assert!(
            base.clone()
                .into_options_in(true, &pod())
                .unwrap()
                .admin
                .metrics_auth
        );
        let kubeconfig = RunSettings {
            kubeconfig: Some("k".into()),
            ..base.clone()
        };
        assert!(
            !kubeconfig
                .clone()
                .into_options_in(true, &pod())
                .unwrap()
                .admin
                .metrics_auth
        );
        assert!(
            !base
                .clone()
                .into_options_in(true, &Environment::default())
                .unwrap()
                .admin
                .metrics_auth
        );
        let on = RunSettings {
            metrics_auth: Some(true),
            ..kubeconfig
        };
        assert!(
            on.into_options_in(true, &Environment::default())
                .unwrap()
                .admin
                .metrics_auth
        );
        let off = RunSettings {
            metrics_auth: Some(false),
            ..base.clone()
        };
        assert!(
            !off.into_options_in(true, &pod())
                .unwrap()
                .admin
                .metrics_auth
        );
        let local = RunSettings {
            local: Some("l".into()),
            metrics_auth: Some(true),
            ..base
        };
        let e = local
            .into_options_in(false, &pod())
            .unwrap_err()
            .to_string();
        assert!(e.contains("--metrics-auth needs a real cluster"), "{e}");
        let file = RunSettings::parse(
            "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: p\nkubeconfig: k\nmetricsAuth: true\n",
            Path::new("/c.yaml"),
        )
        .unwrap();
        assert!(
            file.into_options_in(false, &Environment::default())
                .unwrap()
                .admin
                .metrics_auth
        );
    }

    #[test]
    fn out_of_range_values_are_errors_not_panics() {
        let p = Path::new("c.yaml");
        for (text, key) in [
            ("poll: 0s", "poll"),
            ("pageSize: 0", "pageSize"),
            ("dispatch: {maxAttempts: 0}", "dispatch.maxAttempts"),
            ("dispatch: {unhealthyAfter: 0}", "dispatch.unhealthyAfter"),
            ("dispatch: {baseBackoff: 0s}", "dispatch.baseBackoff"),
            (
                "dispatch: {baseBackoff: 10s, maxBackoff: 1s}",
                "dispatch.maxBackoff",
            ),
        ] {
            let s = RunSettings::parse(
                &format!("apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: p\nlocal: l\n{text}\n"),
                p,
            )
            .unwrap();
            let e = s.into_options(false).unwrap_err();
            assert!(
                matches!(&e, ConfigError::OutOfRange(m) if m.contains(key)),
                "{text}: {e}"
            );
        }
    }
}
