//! The `run` settings, from flags and an optional config file
//! (`--config FILE`, YAML or JSON, `apiVersion: kubewasm.io/v1alpha1`,
//! `kind: HostConfig`). Flags win over the file; unknown keys are errors;
//! relative paths in the file are relative to the file's folder.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::app::{ClusterTarget, RunOptions};
use crate::dispatch::DispatchOptions;
use crate::object::StripOptions;
use crate::runtime::EngineOptions;
use crate::source::kube::{InitialList, KubeTarget};

/// The only config file version so far.
pub const API_VERSION: &str = "kubewasm.io/v1alpha1";
pub const KIND: &str = "HostConfig";

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
}

/// Whether a real cluster can be reached without flags, in kubectl's order:
/// `KUBECONFIG`, the pod's service account, `~/.kube/config`.
pub fn default_cluster_available() -> bool {
    std::env::var_os("KUBECONFIG").is_some()
        || std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
        || crate::source::kube::home_kubeconfig().is_some_and(|p| p.is_file())
}

/// Every `run` setting, each optional so that flags and file can merge.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RunSettings {
    pub plugins: Option<PathBuf>,
    pub local: Option<PathBuf>,
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    pub dry_run: Option<bool>,
    pub until_idle: Option<bool>,
    pub cache_dir: Option<PathBuf>,
    pub keep_managed_fields: Option<bool>,
    pub initial_list: Option<InitialList>,
    pub page_size: Option<u32>,
    #[serde(default, with = "humantime_serde")]
    pub poll: Option<Duration>,
    pub dispatch: Option<DispatchSettings>,
}

/// Retry policy of every plugin's queue.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DispatchSettings {
    pub max_attempts: Option<u32>,
    #[serde(default, with = "humantime_serde")]
    pub base_backoff: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub max_backoff: Option<Duration>,
    pub unhealthy_after: Option<u64>,
}

impl RunSettings {
    /// Reads a config file, checking its version and kind.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
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
            .map_err(|e| invalid(format!("{e} (see the README's configuration reference)")))?;
        let base = path.parent().unwrap_or(Path::new("."));
        for p in [
            &mut s.plugins,
            &mut s.local,
            &mut s.kubeconfig,
            &mut s.cache_dir,
        ]
        .into_iter()
        .flatten()
        {
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
            keep_managed_fields: self.keep_managed_fields.or(file.keep_managed_fields),
            initial_list: self.initial_list.or(file.initial_list),
            page_size: self.page_size.or(file.page_size),
            poll: self.poll.or(file.poll),
            dispatch,
        }
    }

    /// Picks the cluster: `local` for the embedded cluster; a kubeconfig or
    /// context (or `default_cluster`: see [`default_cluster_available`]) for
    /// a real one; otherwise an error saying which flag to pass. Values out
    /// of range are errors.
    pub fn into_options(self, default_cluster: bool) -> Result<RunOptions, ConfigError> {
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
        let mut engine = EngineOptions::default();
        if let Some(dir) = self.cache_dir {
            engine.cache_dir = Some(dir);
        }
        let keep = self.keep_managed_fields.unwrap_or(false);
        let mut dispatch = DispatchOptions::default();
        if let Some(d) = self.dispatch {
            dispatch.max_attempts = d.max_attempts.unwrap_or(dispatch.max_attempts);
            dispatch.base_backoff = d.base_backoff.unwrap_or(dispatch.base_backoff);
            dispatch.max_backoff = d.max_backoff.unwrap_or(dispatch.max_backoff);
            dispatch.unhealthy_after = d.unhealthy_after.unwrap_or(dispatch.unhealthy_after);
        }
        Ok(RunOptions {
            plugins,
            cluster,
            dry_run: self.dry_run.unwrap_or(false),
            until_idle: self.until_idle.unwrap_or(false),
            engine,
            strip: StripOptions {
                managed_fields: !keep,
                last_applied: !keep,
            },
            dispatch,
            poll: self.poll.unwrap_or(Duration::from_secs(30)),
        })
    }

    fn check_ranges(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::OutOfRange(m));
        if self.poll.is_some_and(|p| p.is_zero()) {
            return bad(
                "poll must be longer than 0s (it is the plugin folder's rescan period)".into(),
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
            "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: plugins\nkubeconfig: /k/config\ncontext: dev\ninitialList: paged\ndispatch: {maxAttempts: 3, baseBackoff: 250ms}\n",
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
        assert_eq!(opts.dispatch.max_attempts, 3);
        assert_eq!(opts.dispatch.base_backoff, Duration::from_millis(250));
        match opts.cluster {
            ClusterTarget::Kube(t) => {
                assert_eq!(t.context.as_deref(), Some("prod"));
                assert_eq!(t.kubeconfig.as_deref(), Some(Path::new("/k/config")));
                assert_eq!(t.initial_list, InitialList::Paged);
            }
            other => panic!("expected a kube target, got {other:?}"),
        }
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
            none.into_options(true).unwrap().cluster,
            ClusterTarget::Kube(_)
        ));
        assert!(matches!(
            RunSettings::default().into_options(false),
            Err(ConfigError::NoPlugins)
        ));
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
