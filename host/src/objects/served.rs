//! Whether the cluster serves the Plugin kinds yet: until it does, plugins
//! come from the folder alone, and the host asks again without a restart.

use std::time::Duration;

use backon::BackoffBuilder;
use kube::Api;
use tokio_util::sync::CancellationToken;

use super::{PluginObjects, RETRY};
use crate::crd::Plugin;

/// Why the Plugin kinds cannot be watched yet (`PluginObjects::run`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NotServed {
    /// 404: the CRDs are not installed, or not established yet.
    Absent,
    /// 403: the host's RBAC does not let it list them.
    Forbidden,
    /// Anything else (the API server away, a timeout): said each time.
    Failed,
}

impl PluginObjects {
    /// Whether the cluster serves the Plugin kinds: `Ok(false)` when the
    /// API server answers 404 (their CRDs are not installed, or not yet
    /// established); any other failure is an error, not an answer.
    pub async fn served(client: &kube::Client) -> Result<bool, kube::Error> {
        match Api::<Plugin>::all(client.clone())
            .list(&kube::api::ListParams::default().limit(1))
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Returns once the cluster serves the Plugin kinds (`false` if
    /// cancelled first). Until then plugins come from the folder alone;
    /// asked again with a backoff from 1 s to [`RETRY`], so CRDs applied
    /// beside the Deployment (`kubectl apply -k`, established a moment
    /// after the Pod starts) or installed later are picked up without a
    /// restart.
    pub(super) async fn until_served(&self, cancel: &CancellationToken) -> bool {
        // backon, as the executor's retries: 1 s, doubling, at most RETRY
        // (no jitter: one request per host, and "within 30 s" holds),
        // without an end.
        let mut waits = backon::ExponentialBuilder::default()
            .with_min_delay(Duration::from_secs(1))
            .with_max_delay(RETRY)
            .with_factor(2.0)
            .without_max_times()
            .build();
        // What was last said, so that a state that lasts is said once.
        let mut said: Option<NotServed> = None;
        loop {
            let now = match Self::served(&self.client).await {
                Ok(true) => {
                    if said.is_some() {
                        tracing::info!(
                            "the cluster serves plugins.kubewasm.io now: watching Plugin objects"
                        );
                    }
                    return true;
                }
                Ok(false) => NotServed::Absent,
                Err(kube::Error::Api(s)) if s.code == 403 => NotServed::Forbidden,
                Err(e) => {
                    tracing::warn!(
                        error = %e,
                        "could not tell whether the cluster serves plugins.kubewasm.io; asking again"
                    );
                    NotServed::Failed
                }
            };
            if said != Some(now) {
                match now {
                    NotServed::Absent => tracing::info!(
                        "the cluster does not serve plugins.kubewasm.io (install deploy/base/crds.yaml): plugins come from the folder until it does"
                    ),
                    NotServed::Forbidden => tracing::warn!(
                        "the host may not list plugins.kubewasm.io: plugins come from the folder until it may; grant the host's roles (`kubewasm rbac`, deploy/base/rbac.yaml) or turn Plugin objects off (pluginObjects.enabled: false)"
                    ),
                    NotServed::Failed => {}
                }
                said = Some(now);
            }
            let wait = waits.next().unwrap_or(RETRY);
            tokio::select! {
                () = cancel.cancelled() => return false,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }
}
