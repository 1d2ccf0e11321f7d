//! Resolving settings into the options the host runs with: the cluster,
//! the defaults that depend on the environment, ranges checked.

use std::path::PathBuf;
use std::time::Duration;

use crate::admin::server::MetricsAddr;
use crate::admin::tls::TlsSource;
use crate::app::{AdminOptions, ClusterTarget, RunOptions};
use crate::dispatch::DispatchOptions;
use crate::leader::{self, ElectionOptions};
use crate::object::StripOptions;
use crate::redact::Redactor;
use crate::runtime::grants::absolute;
use crate::runtime::{Compiler, EngineOptions};
use crate::source::kube::KubeTarget;

use super::{
    CompilerKind, ConfigError, DEFAULT_SHUTDOWN_GRACE, Environment, PluginObjectSettings,
    RunSettings,
};

impl RunSettings {
    /// Picks the cluster: `local` for the embedded cluster; a kubeconfig or
    /// context (or `default_cluster`: see
    /// [`default_cluster_available`](super::default_cluster_available)) for
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
        engine.fast_first = self.fast_first_compile.unwrap_or_default().into();
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
                tenant_accounts: settings
                    .as_ref()
                    .and_then(|s| s.tenants.as_ref())
                    .map(crate::config::TenantSettings::accounts)
                    .unwrap_or_default(),
                pull_timeout: settings.as_ref().and_then(|s| s.pull_timeout),
                tenant_recheck: settings
                    .as_ref()
                    .and_then(|s| s.tenants.as_ref())
                    .and_then(|t| t.recheck)
                    .unwrap_or(crate::objects::TENANT_RECHECK),
                tenant_limits: {
                    let tenants = settings.as_ref().and_then(|s| s.tenants.as_ref());
                    let mut o = crate::runtime::tenants::TenantOptions::from_settings(
                        tenants.and_then(|t| t.ceiling.as_ref()),
                        tenants.and_then(|t| t.quota.as_ref()),
                        tenants
                            .and_then(|t| t.namespaces.as_ref())
                            .into_iter()
                            .flatten()
                            .map(|(ns, s)| (ns, s.quota.as_ref())),
                    );
                    // The host's own files are never granted to a tenant
                    // either.
                    o.ceiling.grants.protect(limits.grants.protected.clone());
                    o
                },
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
            event_queue: self
                .event_queue
                .unwrap_or(crate::actions::executor::DEFAULT_EVENT_QUEUE),
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
        // A token never crosses the network in clear: authentication
        // brings TLS, with a self-signed certificate when none is mounted.
        let metrics_tls = match (&self.metrics_cert_dir, metrics_auth) {
            (Some(dir), _) => Some(TlsSource::Dir(dir.clone())),
            (None, true) => Some(TlsSource::SelfSigned(env.own_names.clone())),
            (None, false) => None,
        };
        Ok(AdminOptions {
            ui_addr: self.ui_addr.clone().unwrap_or_default(),
            ui_allowed_hosts: self.ui_allowed_hosts.clone().unwrap_or_default(),
            metrics_auth,
            metrics_tls,
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
        if self
            .plugin_objects
            .as_ref()
            .and_then(|o| o.pull_timeout)
            .is_some_and(|t| t.is_zero())
        {
            return bad(
                "pluginObjects.pullTimeout must be longer than 0s (it bounds each pull from a registry; leave it out for 2m)"
                    .into(),
            );
        }
        if let Some(c) = self
            .plugin_objects
            .as_ref()
            .and_then(|o| o.tenants.as_ref())
            .and_then(|t| t.ceiling.as_ref())
        {
            c.ceiling().validate().map_err(|e| {
                ConfigError::OutOfRange(format!(
                    "pluginObjects.tenants.ceiling.{}",
                    crate::runtime::tenants::as_tenants(&e)
                ))
            })?;
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
        if self.event_queue == Some(0) {
            return bad(
                "eventQueue must be at least 1 (it bounds the Events waiting to be recorded; leave it out for 1024)"
                    .into(),
            );
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
        let sharded = self.shards.is_some();
        let enabled = match self.leader_elect {
            Some(true) if local => {
                return Err(ConfigError::Conflict(
                    "--leader-elect needs a real cluster: the embedded local cluster (--local) has no Lease to elect on".into(),
                ));
            }
            Some(false) if sharded => {
                return Err(ConfigError::Conflict(
                    "--shards needs leader election: each shard is fenced by its own Lease (drop --leader-elect=false)".into(),
                ));
            }
            None if sharded && local => {
                return Err(ConfigError::Conflict(
                    "--shards needs a real cluster: the embedded local cluster (--local) has no Lease to elect on".into(),
                ));
            }
            Some(on) => on,
            None => sharded || (env.in_cluster && !explicit_config && !local),
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
            shards: self.shards.map(|count| leader::ShardOptions {
                count,
                key: self.shard_key.unwrap_or_default(),
                follow_owner: self.shard_follow_owner.unwrap_or(false),
                cache: self.shard_cache.unwrap_or_default(),
            }),
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
        if let Some(w) = self.wire {
            t.wire = w;
        }
        t
    }
}
