//! A real API server: client construction (kubeconfig, context, in-cluster),
//! discovery into the kind registry, the watch source and the action sink.

pub mod discovery;
pub mod impersonate;
pub mod raw;
mod sharded;
pub mod watch;
pub mod wire;
pub mod write;

use std::path::PathBuf;

use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde::{Deserialize, Serialize};

use crate::telemetry::WireCounters;

pub use discovery::Discovery;
pub use impersonate::{Impersonations, ServiceAccountRef};
pub use watch::{InitialList, KubeSource};
pub use wire::{Wire, WireLayer};
pub use write::KubeSink;

#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("cannot read kubeconfig {path}: {source} (check --kubeconfig)")]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error(
        "no usable cluster configuration: {0} (pass --kubeconfig FILE, set KUBECONFIG, run in a pod, or use --local DIR)"
    )]
    Infer(String),
    #[error("cannot build a client for {server}: {source}")]
    Client { server: String, source: kube::Error },
    #[error(
        "discovery failed: {0} (is the API server reachable, and may this user get /api and /apis?)"
    )]
    Discovery(#[source] kube::Error),
}

/// How to reach a real API server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubeTarget {
    /// Kubeconfig file; `None` infers (KUBECONFIG, ~/.kube/config, in-cluster).
    pub kubeconfig: Option<PathBuf>,
    /// Context in the kubeconfig; `None` is its current context.
    pub context: Option<String>,
    /// Initial list strategy of every informer.
    #[serde(default)]
    pub initial_list: InitialList,
    /// Page size of paged initial lists.
    #[serde(default = "default_page_size")]
    pub page_size: u32,
    /// Encoding of informers' lists and watches.
    #[serde(default)]
    pub wire: Wire,
}

fn default_page_size() -> u32 {
    500
}

impl KubeTarget {
    pub fn new(kubeconfig: Option<PathBuf>, context: Option<String>) -> Self {
        Self {
            kubeconfig,
            context,
            initial_list: InitialList::default(),
            page_size: default_page_size(),
            wire: Wire::default(),
        }
    }

    /// Builds the client: an explicit kubeconfig file, else the usual
    /// inference (KUBECONFIG, ~/.kube/config, the pod's service account).
    /// Its responses are counted nowhere; a running host counts them with
    /// [`KubeTarget::client_counted`].
    pub async fn client(&self) -> Result<Client, KubeError> {
        self.client_counted(WireCounters::default()).await
    }

    /// [`KubeTarget::client`], its list and watch responses counted by
    /// encoding in `counters`.
    pub async fn client_counted(&self, counters: WireCounters) -> Result<Client, KubeError> {
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..KubeConfigOptions::default()
        };
        let config = match (&self.kubeconfig, &self.context) {
            (Some(path), _) => {
                let kc = Kubeconfig::read_from(path).map_err(|source| KubeError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?;
                Config::from_custom_kubeconfig(kc, &options)
                    .await
                    .map_err(|source| KubeError::Kubeconfig {
                        path: path.clone(),
                        source,
                    })?
            }
            (None, Some(_)) => Config::from_kubeconfig(&options)
                .await
                .map_err(|e| KubeError::Infer(e.to_string()))?,
            // kubectl's order: KUBECONFIG, the pod's service account, then
            // ~/.kube/config (kube's `infer` would read ~/.kube/config first).
            (None, None) if std::env::var_os("KUBECONFIG").is_none() => match Config::incluster() {
                Ok(c) => c,
                Err(_) => Config::from_kubeconfig(&options)
                    .await
                    .map_err(|e| KubeError::Infer(e.to_string()))?,
            },
            (None, None) => Config::from_kubeconfig(&options)
                .await
                .map_err(|e| KubeError::Infer(e.to_string()))?,
        };
        let mut config = config;
        if !config.disable_compression && is_loopback(&config.cluster_url) {
            // Compressing a list costs the API server and the host CPU and
            // saves nothing on a loopback connection.
            tracing::debug!(server = %config.cluster_url, "loopback API server: responses asked uncompressed");
            config.disable_compression = true;
        }
        let server = config.cluster_url.to_string();
        let layer = WireLayer::new(self.wire, counters);
        ClientBuilder::try_from(config)
            .map(|builder| builder.with_layer(&layer).build())
            .map_err(|source| KubeError::Client { server, source })
    }
}

/// Whether `url` names this machine (`localhost`, 127.0.0.0/8, `::1`).
fn is_loopback(url: &http::Uri) -> bool {
    match url
        .host()
        .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
    {
        Some("localhost") => true,
        Some(h) => h
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    }
}

/// `~/.kube/config`, where kubectl looks when nothing else names a cluster.
pub fn home_kubeconfig() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".kube").join("config"))
}

/// The `ApiResource` kube's dynamic API needs for a kind we resolved.
pub(crate) fn api_resource(kind: &crate::kind::KindInfo) -> kube::core::ApiResource {
    kube::core::ApiResource {
        group: kind.gvk.group.clone(),
        version: kind.gvk.version.clone(),
        api_version: kind.gvk.api_version(),
        kind: kind.gvk.kind.clone(),
        plural: kind.plural.clone(),
    }
}

/// A dynamic API handle scoped to `namespace` when the kind is namespaced
/// (of `DynamicObject`s for writes, of [`raw::RawObject`]s for watches).
pub(crate) fn dynamic_api<K>(
    client: &Client,
    kind: &crate::kind::KindInfo,
    namespace: Option<&str>,
) -> kube::Api<K>
where
    K: kube::Resource<
            DynamicType = kube::core::ApiResource,
            Scope = kube::core::DynamicResourceScope,
        >,
{
    let ar = api_resource(kind);
    match namespace {
        Some(ns) if kind.namespaced => kube::Api::namespaced_with(client.clone(), ns, &ar),
        _ => kube::Api::all_with(client.clone(), &ar),
    }
}

#[cfg(test)]
mod loopback_tests {
    #[test]
    fn loopback_servers_are_told_from_others() {
        for (url, want) in [
            ("https://127.0.0.1:6443", true),
            ("https://127.3.4.5", true),
            ("https://localhost:443", true),
            ("https://[::1]:6443", true),
            ("https://10.0.0.1:443", false),
            ("https://kubernetes.default.svc", false),
            ("https://localhost.example.com", false),
        ] {
            let uri: http::Uri = url.parse().unwrap();
            assert_eq!(super::is_loopback(&uri), want, "{url}");
        }
    }
}
