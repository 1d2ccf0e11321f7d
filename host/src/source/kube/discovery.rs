//! Discovery into the kind registry, so that plugins can name any kind the
//! server serves (built-in or CRD) by group/version/kind or resource name.
//! A plugin naming a kind the registry does not know triggers a refresh:
//! a CRD installed after start is found without a restart.

use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use kube::Client;
use kube::discovery::Scope;
use tokio::sync::Mutex;

use super::KubeError;
use crate::kind::{KindInfo, KindRegistry};

pub use crate::kind::KindDiscovery;

/// Discovery against the API server.
pub struct Discovery {
    client: Client,
    kinds: KindRegistry,
    /// Last refresh, to rate-limit refreshes caused by bad registrations.
    last: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Discovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discovery").finish_non_exhaustive()
    }
}

/// Refreshes closer together than this reuse the last result.
const MIN_INTERVAL: Duration = Duration::from_secs(2);

impl Discovery {
    pub fn new(client: Client, kinds: KindRegistry) -> Self {
        Self {
            client,
            kinds,
            last: Mutex::new(None),
        }
    }

    /// Runs discovery (aggregated where served, else per group) and records
    /// every resource with its scope, plus each group's preferred version.
    pub async fn run(&self) -> Result<usize, KubeError> {
        let discovery = match kube::Discovery::new(self.client.clone())
            .run_aggregated()
            .await
        {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!(error = %e, "aggregated discovery unavailable; discovering per group");
                kube::Discovery::new(self.client.clone())
                    .run()
                    .await
                    .map_err(KubeError::Discovery)?
            }
        };
        let before = self.kinds.generation();
        let mut count = 0;
        for group in discovery.groups() {
            self.kinds
                .set_preferred(group.name(), group.preferred_version_or_latest());
            for version in group.versions() {
                for (ar, caps) in group.versioned_resources(version) {
                    if ar.plural.contains('/') {
                        continue; // subresource
                    }
                    let info = KindInfo::new(
                        &ar.group,
                        &ar.version,
                        &ar.kind,
                        &ar.plural,
                        caps.scope == Scope::Namespaced,
                    );
                    // Registration refuses kinds an informer cannot list or watch.
                    self.kinds.set_verbs(&info.gvk, caps.operations.clone());
                    self.kinds.insert(info);
                    count += 1;
                }
            }
        }
        *self.last.lock().await = Some(Instant::now());
        if self.kinds.generation() == before {
            tracing::debug!(resources = count, "discovery done; no new kinds");
        } else {
            tracing::info!(resources = count, "discovery done");
        }
        Ok(count)
    }
}

impl KindDiscovery for Discovery {
    fn refresh(&self) -> BoxFuture<'_, Result<usize, String>> {
        Box::pin(async move {
            if let Some(last) = *self.last.lock().await
                && last.elapsed() < MIN_INTERVAL
            {
                return Ok(0);
            }
            self.run().await.map_err(|e| e.to_string())
        })
    }
}
