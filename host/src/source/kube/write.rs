//! Actions against the API server: server-side apply with the field manager
//! `kubewasm/<plugin>` (also on the status subresource), merge and JSON
//! patches, deletes with a propagation policy, and events.k8s.io/v1 Events
//! reported by the `kubewasm` controller. Errors are classified so that the
//! executor retries conflicts and transient failures only.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use futures::future::BoxFuture;
use kube::Client;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::core::DynamicObject;
use serde_json::json;

use crate::actions::executor::{ActionError, ActionSink};
use crate::actions::{Action, EventType, PatchType, Propagation, Target};
use crate::kind::KindInfo;
use crate::telemetry::Identity;

/// The reporting controller of every Event kubewasm records.
pub const REPORTING_CONTROLLER: &str = "kubewasm";

/// Field manager of a plugin's writes: `kubewasm/<plugin>`.
pub fn field_manager(plugin: &str) -> String {
    format!("kubewasm/{plugin}")
}

/// The API-server action sink.
pub struct KubeSink {
    client: Client,
    /// Who reports Events: the pod name in a cluster, else the host name.
    instance: String,
    seq: AtomicU64,
}

impl std::fmt::Debug for KubeSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeSink")
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl KubeSink {
    /// Reports Events as this replica ([`Identity::from_env`]).
    pub fn new(client: Client) -> Self {
        Self::with_identity(client, &Identity::from_env())
    }

    /// Reports Events as `identity`'s instance (the pod name in a cluster).
    pub fn with_identity(client: Client, identity: &Identity) -> Self {
        Self {
            client,
            instance: identity.instance().to_owned(),
            seq: AtomicU64::new(0),
        }
    }

    fn api(&self, target: &Target) -> kube::Api<DynamicObject> {
        super::dynamic_api(&self.client, &target.kind, target.namespace.as_deref())
    }

    async fn run(&self, plugin: &str, action: &Action) -> Result<(), kube::Error> {
        match action {
            Action::Apply {
                target,
                object,
                force,
                status,
            } => {
                let mut params = PatchParams::apply(&field_manager(plugin));
                params.force = *force;
                let api = self.api(target);
                let patch = Patch::Apply(object);
                if *status {
                    api.patch_status(&target.name, &params, &patch).await?;
                } else {
                    api.patch(&target.name, &params, &patch).await?;
                }
            }
            Action::Patch {
                target,
                patch_type,
                patch,
            } => {
                let params = PatchParams {
                    field_manager: Some(field_manager(plugin)),
                    ..PatchParams::default()
                };
                let api = self.api(target);
                match patch_type {
                    PatchType::Merge => {
                        api.patch(&target.name, &params, &Patch::Merge(patch))
                            .await?;
                    }
                    PatchType::Json => {
                        let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                            .map_err(kube::Error::SerdeError)?;
                        api.patch(&target.name, &params, &Patch::<()>::Json(ops))
                            .await?;
                    }
                }
            }
            Action::Delete {
                target,
                propagation,
            } => {
                let params = DeleteParams {
                    propagation_policy: Some(match propagation {
                        Propagation::Background => PropagationPolicy::Background,
                        Propagation::Foreground => PropagationPolicy::Foreground,
                        Propagation::Orphan => PropagationPolicy::Orphan,
                    }),
                    ..DeleteParams::default()
                };
                self.api(target).delete(&target.name, &params).await?;
            }
            Action::Event {
                regarding,
                event_type,
                reason,
                note,
            } => {
                let event = self.event(plugin, regarding, *event_type, reason, note);
                let events = KindInfo::new("events.k8s.io", "v1", "Event", "events", true);
                let ns = regarding.namespace.as_deref().unwrap_or("default");
                let obj: DynamicObject =
                    serde_json::from_value(event).map_err(kube::Error::SerdeError)?;
                super::dynamic_api(&self.client, &events, Some(ns))
                    .create(
                        &PostParams {
                            field_manager: Some(field_manager(plugin)),
                            ..PostParams::default()
                        },
                        &obj,
                    )
                    .await?;
            }
        }
        Ok(())
    }

    /// An events.k8s.io/v1 Event, named as client-go names them
    /// (`<regarding>.<hex nanos>`).
    fn event(
        &self,
        plugin: &str,
        regarding: &Target,
        event_type: EventType,
        reason: &str,
        note: &str,
    ) -> serde_json::Value {
        let now = SystemTime::now();
        let nanos = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
            .wrapping_add(u128::from(self.seq.fetch_add(1, Ordering::Relaxed)));
        let ns = regarding.namespace.as_deref().unwrap_or("default");
        let mut instance = format!("{}/{plugin}", self.instance);
        instance.truncate(128);
        let mut note = note.to_owned();
        if note.len() > 1024 {
            let mut cut = 1021;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
            note.push_str("...");
        }
        json!({
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {
                "name": format!("{}.{nanos:x}", regarding.name),
                "namespace": ns,
                "labels": {"kubewasm.io/plugin": plugin},
            },
            "eventTime": humantime::format_rfc3339_micros(now).to_string(),
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": instance,
            "action": reason,
            "reason": reason,
            "type": match event_type { EventType::Normal => "Normal", EventType::Warning => "Warning" },
            "note": note,
            "regarding": {
                "apiVersion": regarding.kind.gvk.api_version(),
                "kind": regarding.kind.gvk.kind,
                "namespace": regarding.namespace,
                "name": regarding.name,
                "uid": regarding.uid,
            },
        })
    }
}

/// Sorts an API error into what the executor does with it.
pub fn classify(action: &Action, err: kube::Error) -> ActionError {
    let what = format!("{} {}", action.verb(), action.target());
    match err {
        kube::Error::Api(s) => {
            let msg = format!("{what}: {} ({})", s.message, s.reason);
            match s.code {
                403 => ActionError::Forbidden(msg),
                404 => ActionError::NotFound(msg),
                409 => ActionError::Conflict(msg),
                429 | 500.. => ActionError::Transient(msg),
                _ => ActionError::Invalid(msg),
            }
        }
        kube::Error::SerdeError(e) => ActionError::Invalid(format!("{what}: {e}")),
        other => ActionError::Transient(format!("{what}: {other}")),
    }
}

impl ActionSink for KubeSink {
    fn execute<'a>(
        &'a self,
        plugin: &'a str,
        action: &'a Action,
    ) -> BoxFuture<'a, Result<(), ActionError>> {
        Box::pin(async move {
            self.run(plugin, action)
                .await
                .map_err(|e| classify(action, e))
        })
    }
}
