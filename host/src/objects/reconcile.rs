//! One Plugin object's reconcile: what its spec asks for (checked, for a
//! tenant, against its namespace and account), fetched and installed, and
//! the status that says what serves.

use std::sync::Arc;

use super::source::{Seen, Source};
use super::status::{Outcome, Served, replica_for, status_for};
use super::{Known, PluginObjects, fetch, reasons, report::Write, report::same_status, tenant};
use crate::runtime::{Content, LoadError};
use crate::source::kube::ServiceAccountRef;

/// What a failed pull adds when this replica never served the object: it
/// started (a Pod replaced, a rollout) and its cache holds no copy.
const NO_COPY: &str = "; this replica holds no copy of the module in its cache, so nothing serves until the registry answers (a cache on an emptyDir is emptied when its Pod is replaced: give it a PersistentVolumeClaim to serve pinned modules across Pod replacements)";

/// Pulls from one registry at once: a registry that stalls holds this
/// many reconciles, and only of the objects that name it.
const PULLS_PER_REGISTRY: usize = 2;

impl PluginObjects {
    /// Loads (or swaps to) what the object names, if its spec or module
    /// changed, and writes its status while leading.
    pub(super) async fn reconcile(&self, obj: Seen, retrying: bool) {
        let name = obj.source.plugin_name();
        let spec_key = serde_json::to_string(&obj.parts).unwrap_or_default();
        let (previous_install, serving, mut previous_status, previous_replica) = {
            let mut known = self.known.lock().await;
            // The same generation again (the watch resumed, or the event is
            // a status write): nothing to load; refused specs are retried on
            // their own timer. Another replica's entry may have changed,
            // which the leader's Ready counts.
            if !retrying
                && let Some(k) = known.get_mut(&obj.source)
                && k.generation.is_some()
                && k.generation == obj.generation
                && k.parts == obj.parts
            {
                let entries = obj.status.map(|s| s.replicas).unwrap_or_default();
                if k.others != entries {
                    // An entry of a Pod not known to be ready (it started
                    // after the last list): list again, so it counts.
                    let unknown = {
                        let live = self.live.lock();
                        entries.iter().any(|r| {
                            r.name != self.replica
                                && live
                                    .as_ref()
                                    .is_some_and(|pods| pods.get(&r.name) != Some(&true))
                        })
                    };
                    k.others = entries;
                    drop(known);
                    if unknown && self.leadership.state().coordinates() {
                        self.list_pods().await;
                    }
                    self.refresh(&obj.source, Write::Changed).await;
                }
                return;
            }
            match known.get(&obj.source) {
                Some(k) => (
                    k.installed.clone(),
                    k.serving.clone(),
                    k.status.clone(),
                    k.replica.clone(),
                ),
                // A replica that starts reads the status on the object, to
                // keep its transition times.
                None => (None, None, obj.status.clone(), None),
            }
        };
        let others = obj
            .status
            .as_ref()
            .map(|s| s.replicas.clone())
            .unwrap_or_default();
        // A new spec: say so before fetching and compiling it, while
        // leading, unless the object already speaks of this generation (a
        // replica starting, or taking over, finds it so).
        if !retrying
            && self.leadership.state().coordinates()
            && previous_status
                .as_ref()
                .is_none_or(|p| p.observed_generation != obj.generation)
        {
            let loading = Outcome::Loading {
                serving: serving.clone(),
            };
            let status = status_for(
                &loading,
                obj.generation,
                previous_status.as_ref(),
                &self.counted(&others),
            );
            self.write_status(&obj.source, &status).await;
            previous_status = Some(status);
        }
        // The new module's cache entries, pinned from the fetch on: kept
        // while it loads and, once it serves, with it.
        let mut fetched_pins = Vec::new();
        let outcome = match self.prepare(&obj).await {
            Err((reason, mut message)) => {
                if reason == reasons::PULL_FAILED && serving.is_none() && previous_install.is_none()
                {
                    message.push_str(NO_COPY);
                }
                Outcome::Refused {
                    reason,
                    message,
                    serving: serving.clone(),
                }
            }
            Ok((manifest, fetched, account)) => {
                if let Some(account) = account {
                    // Set before the install, so the new version's first
                    // write already goes out as the tenant.
                    self.impersonations.set(&name, account);
                }
                fetched_pins = fetched.pins;
                let content = Content::hashed(fetched.bytes);
                let digest = format!("sha256:{}", content.digest().unwrap_or_default());
                let unchanged = previous_install
                    .as_ref()
                    .is_some_and(|(s, d)| *s == spec_key && *d == digest);
                let served = |version: String| Served {
                    version,
                    content_digest: digest.clone(),
                    manifest_digest: fetched.manifest_digest.clone(),
                    resolved_reference: fetched.resolved_reference.clone(),
                };
                match (&serving, unchanged) {
                    (Some(s), true) => Outcome::Serving(served(s.version.clone())),
                    _ => match self
                        .host
                        .install_from(obj.source.origin(), &name, content, manifest)
                        .await
                    {
                        Ok(v) => {
                            tracing::info!(plugin = %name, version = v.version(), %digest, object = %obj.source.display(), "Plugin object loaded");
                            Outcome::Serving(served(v.version().to_owned()))
                        }
                        Err(e) => Outcome::Refused {
                            reason: load_reason(&e),
                            message: e.to_string(),
                            serving: serving.clone(),
                        },
                    },
                }
            }
        };
        if let Outcome::Refused {
            reason, message, ..
        } = &outcome
            && !retrying
        {
            tracing::warn!(plugin = %name, object = %obj.source.display(), %reason, error = %message, "Plugin object not served");
        }
        self.note(&obj.source, &outcome).await;
        let status = status_for(
            &outcome,
            obj.generation,
            previous_status.as_ref(),
            &self.counted(&others),
        );
        let (installed, serving) = match &outcome {
            Outcome::Serving(s) => (Some((spec_key, s.content_digest.clone())), Some(s.clone())),
            Outcome::Refused { .. } | Outcome::Loading { .. } => (previous_install, serving),
        };
        let changed_status = previous_status
            .as_ref()
            .is_none_or(|p| !same_status(p, &status));
        let replica = replica_for(&self.replica, &outcome, obj.generation);
        let changed_replica = previous_replica.as_ref() != Some(&replica);
        let mut known = self.known.lock().await;
        // A refused spec leaves the previous module serving: its entries
        // stay pinned, the refused one's are let go.
        let pins = match &outcome {
            Outcome::Serving(_) => fetched_pins,
            Outcome::Refused { .. } | Outcome::Loading { .. } => known
                .get_mut(&obj.source)
                .map(|k| std::mem::take(&mut k.pins))
                .unwrap_or_default(),
        };
        known.insert(
            obj.source.clone(),
            Known {
                generation: obj.generation,
                parts: obj.parts,
                installed,
                serving,
                outcome,
                status: Some(status.clone()),
                replica: Some(replica.clone()),
                others,
                pins,
            },
        );
        drop(known);
        if changed_status && self.leadership.state().coordinates() {
            self.write_status(&obj.source, &status).await;
        }
        if changed_replica {
            self.write_replica(&obj.source, &replica).await;
        }
    }

    /// The manifest and module an object asks for, and the account a
    /// tenant's acts as, or why it cannot run: (condition reason, message).
    async fn prepare(
        &self,
        obj: &Seen,
    ) -> Result<
        (
            crate::runtime::Manifest,
            fetch::Fetched,
            Option<ServiceAccountRef>,
        ),
        tenant::Refusal,
    > {
        let (parts, namespace, account) = match &obj.source {
            Source::Cluster(_) => (obj.parts.clone(), self.options.namespace.as_str(), None),
            Source::Tenant { namespace, .. } => {
                if !self.options.tenant_allowed(namespace) {
                    return Err((
                        reasons::NAMESPACE_NOT_ALLOWED,
                        format!(
                            "namespace {namespace} may not run its own plugins: the host config's pluginObjects.tenantNamespaces does not list it"
                        ),
                    ));
                }
                if obj.parts.access.is_none() {
                    return Err((
                        reasons::INVALID_SPEC,
                        "a NamespacedPlugin lists its access (what it may read and write in its namespace)".into(),
                    ));
                }
                // Before any read: whatever another namespace holds, its
                // name is never asked for.
                tenant::check_references(&obj.parts, namespace)?;
                let confined = obj
                    .parts
                    .confined_to(namespace)
                    .map_err(|e| (reasons::NOT_GRANTED, e.to_string()))?;
                let account = self.options.tenant_accounts.account(namespace);
                tenant::check_account(&self.client, &account).await?;
                tenant::check_reads(&self.client, &account, &confined).await?;
                (confined, namespace.as_str(), Some(account))
            }
        };
        // Checked before fetching, so a taken name costs no pull; the
        // install checks again (the folder may take it meanwhile).
        let name = obj.source.plugin_name();
        if let Some(holder) = self.host.origins().holder(&name)
            && holder != obj.source.origin()
        {
            let e = LoadError::NameTaken {
                name,
                holder: holder.to_string(),
            };
            return Err((reasons::NAME_TAKEN, e.to_string()));
        }
        let mut manifest = parts
            .manifest(&obj.source.display())
            .map_err(|e| (reasons::INVALID_SPEC, e.to_string()))?;
        // A tenant's plugin is admitted against the tenants' ceiling and
        // its namespace's quota, never the operator's.
        if let Source::Tenant { namespace, .. } = &obj.source {
            manifest.tenant = Some(namespace.clone());
        }
        let _slot = self.registry_slot(&parts.module).await;
        let fetched = self
            .fetcher
            .fetch(&name, &parts.module, namespace, account.as_ref())
            .await
            .map_err(|e| (e.reason(), e.to_string()))?;
        Ok((manifest, fetched, account))
    }

    /// A slot of the registry an OCI module is pulled from
    /// ([`PULLS_PER_REGISTRY`]); `None` for other sources.
    async fn registry_slot(
        &self,
        module: &crate::crd::ModuleSource,
    ) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let reference = module
            .oci
            .as_ref()?
            .reference
            .parse::<crate::oci::Reference>()
            .ok()?;
        let registry = reference.resolve_registry().to_ascii_lowercase();
        let slots = self
            .registries
            .lock()
            .entry(registry)
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(PULLS_PER_REGISTRY)))
            .clone();
        slots.acquire_owned().await.ok()
    }
}

/// The condition reason of a load failure.
fn load_reason(e: &LoadError) -> reasons::Reason {
    match e {
        LoadError::NotGranted(_) | LoadError::OverCeiling(_) => reasons::NOT_GRANTED,
        LoadError::OverQuota(_) => reasons::QUOTA_EXCEEDED,
        LoadError::Manifest(_) => reasons::INVALID_SPEC,
        LoadError::UnknownKind(_) => reasons::UNKNOWN_KIND,
        LoadError::Register(_) | LoadError::BadRegistration(_) => reasons::REGISTER_FAILED,
        LoadError::Compile(_) | LoadError::Invalid(_) | LoadError::Truncated => {
            reasons::COMPILE_FAILED
        }
        LoadError::NotWasm
        | LoadError::CoreModule
        | LoadError::WrongVersion { .. }
        | LoadError::NotAPlugin { .. }
        | LoadError::Imports(_) => reasons::NOT_A_PLUGIN,
        LoadError::Start(_) => reasons::START_FAILED,
        LoadError::NameTaken { .. } => reasons::NAME_TAKEN,
    }
}
