//! A serving tenant plugin's account asked again, on the host's timer,
//! whether it may still read what the plugin reads through the shared
//! cache: those reads never reach the API server as the tenant, so a Role
//! revoked later is only seen here.

use super::status::{Outcome, replica_for, status_for};
use super::{PluginObjects, Source, reasons, tenant};
use crate::crd::PluginParts;

impl PluginObjects {
    /// The tenant plugins serving now.
    pub(super) async fn serving_tenants(&self) -> Vec<Source> {
        self.known
            .lock()
            .await
            .iter()
            .filter(|(s, k)| matches!(s, Source::Tenant { .. }) && k.serving.is_some())
            .map(|(s, _)| s.clone())
            .collect()
    }

    /// Asks again whether a serving tenant plugin's account may read what
    /// the serving spec reads through the shared cache (the reads the API
    /// server never sees as the tenant); if the account is gone or refused,
    /// the plugin stops at once, no earlier version kept, and the spec is
    /// retried as any refused one. An API server that cannot answer leaves
    /// it serving until the next check.
    pub(super) async fn recheck(&self, source: &Source) {
        let Source::Tenant { namespace, .. } = source else {
            return;
        };
        let parts = {
            let known = self.known.lock().await;
            let Some(k) = known.get(source) else { return };
            if k.serving.is_none() {
                return;
            }
            match k
                .installed
                .as_ref()
                .map(|(spec, _)| serde_json::from_str::<PluginParts>(spec))
            {
                Some(Ok(parts)) => parts,
                _ => return,
            }
        };
        let account = self.options.tenant_accounts.account(namespace);
        let checked = match parts.confined_to(namespace) {
            Ok(confined) => match tenant::check_account(&self.client, &account).await {
                Ok(()) => tenant::check_reads(&self.client, &account, &confined).await,
                Err(refusal) => Err(refusal),
            },
            Err(e) => Err((reasons::NOT_GRANTED, e.to_string())),
        };
        let (reason, message) = match checked {
            Ok(()) => return,
            Err((reason, message)) if reason == reasons::TENANT_CHECK_FAILED => {
                tracing::warn!(object = %source.display(), error = %message, "could not recheck a tenant plugin's reads; it keeps serving until the next check");
                return;
            }
            Err(refusal) => refusal,
        };
        let name = source.plugin_name();
        if self.host.unload_from(&source.origin(), &name).await {
            tracing::warn!(plugin = %name, object = %source.display(), %reason, error = %message, "tenant plugin stopped: its account may no longer read what it reads");
        }
        let outcome = Outcome::Refused {
            reason,
            message,
            serving: None,
        };
        let status = {
            let mut known = self.known.lock().await;
            let Some(k) = known.get_mut(source) else {
                return;
            };
            let others = self.counted(&k.others);
            let status = status_for(&outcome, k.generation, k.status.as_ref(), &others);
            k.installed = None;
            k.serving = None;
            k.pins.clear();
            k.replica = Some(replica_for(&self.replica, &outcome, k.generation));
            k.outcome = outcome;
            k.status = Some(status.clone());
            (status, k.replica.clone())
        };
        if self.leadership.state().coordinates() {
            self.write_status(source, &status.0).await;
        }
        if let Some(replica) = status.1 {
            self.write_replica(source, &replica).await;
        }
    }
}
