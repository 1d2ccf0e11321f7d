//! Reading a config file (version, kind, relative paths) and laying flags
//! over it.

use std::path::Path;

use super::{API_VERSION, ConfigError, DispatchSettings, KIND, RunSettings};

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
            &mut s.metrics_cert_dir,
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
            fast_first_compile: self.fast_first_compile.or(file.fast_first_compile),
            keep_managed_fields: self.keep_managed_fields.or(file.keep_managed_fields),
            initial_list: self.initial_list.or(file.initial_list),
            page_size: self.page_size.or(file.page_size),
            wire: self.wire.or(file.wire),
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
            shards: self.shards.or(file.shards),
            shard_key: self.shard_key.or(file.shard_key),
            shard_follow_owner: self.shard_follow_owner.or(file.shard_follow_owner),
            shard_cache: self.shard_cache.or(file.shard_cache),
            shutdown_grace: self.shutdown_grace.or(file.shutdown_grace),
            event_queue: self.event_queue.or(file.event_queue),
            metrics_addr: self.metrics_addr.or(file.metrics_addr),
            metrics_auth: self.metrics_auth.or(file.metrics_auth),
            metrics_cert_dir: self.metrics_cert_dir.or(file.metrics_cert_dir),
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
}
