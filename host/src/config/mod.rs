//! The `run` settings, from flags and an optional config file
//! (`--config FILE`, YAML or JSON, `apiVersion: kubewasm.io/v1alpha1`,
//! `kind: HostConfig`). Flags win over the file; unknown keys are errors;
//! relative paths in the file are relative to the file's folder.
//!
//! The settings' shape (what the file may hold) is `settings.rs`'s; reading
//! a file and laying flags over it, `file.rs`'s; resolving them into the
//! options the host runs with, `options.rs`'s.

use std::path::PathBuf;
use std::time::Duration;

use crate::leader::ElectionConfigError;
use crate::redact::RedactError;

mod file;
mod options;
mod settings;
#[cfg(test)]
mod tests;

pub use settings::{
    CompilerKind, DispatchSettings, PluginObjectSettings, RunSettings, TenantNamespaceSettings,
    TenantSettings,
};

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
    /// Names this process answers to (`POD_NAME`, `POD_IP`, `HOSTNAME`),
    /// for the metrics listener's self-signed certificate.
    pub own_names: Vec<String>,
}

impl Environment {
    pub fn detect() -> Self {
        Self {
            kubeconfig_env: std::env::var_os("KUBECONFIG").is_some(),
            in_cluster: std::env::var_os("KUBERNETES_SERVICE_HOST").is_some(),
            identity: crate::telemetry::identity::holder_identity(),
            namespace: crate::telemetry::identity::pod_namespace(),
            own_names: ["POD_NAME", "POD_IP", "HOSTNAME"]
                .into_iter()
                .filter_map(|v| std::env::var(v).ok())
                .filter(|n| !n.is_empty())
                .collect(),
        }
    }
}
