//! Actions against the API server: server-side apply with the field manager
//! `kubewasm/<plugin>` (also on the status subresource), merge and JSON
//! patches, deletes with a propagation policy, and events.k8s.io/v1 Events
//! reported by the `kubewasm` controller. Errors are classified so that the
//! executor retries conflicts and transient failures only.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use futures::future::BoxFuture;
use kube::Client;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy};
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
    /// Recent Events by series key, to count repeats instead of creating
    /// objects.
    series: parking_lot::Mutex<std::collections::HashMap<SeriesKey, Series>>,
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
            series: parking_lot::Mutex::default(),
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
                let mut object = object.clone();
                target.preconditions.embed_in(&mut object);
                let patch = Patch::Apply(&object);
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
                        let mut patch = patch.clone();
                        target.preconditions.embed_in(&mut patch);
                        api.patch(&target.name, &params, &Patch::Merge(&patch))
                            .await?;
                    }
                    PatchType::Json => {
                        let mut ops = target.preconditions.json_patch_ops();
                        ops.extend(patch.as_array().into_iter().flatten().cloned());
                        let ops: json_patch::Patch =
                            serde_json::from_value(serde_json::Value::Array(ops))
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
                let p = &target.preconditions;
                let params = DeleteParams {
                    propagation_policy: Some(match propagation {
                        Propagation::Background => PropagationPolicy::Background,
                        Propagation::Foreground => PropagationPolicy::Foreground,
                        Propagation::Orphan => PropagationPolicy::Orphan,
                    }),
                    preconditions: (!p.is_empty()).then(|| Preconditions {
                        uid: p.uid.clone(),
                        resource_version: p.resource_version.clone(),
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
                reporter,
            } => {
                self.record_event(plugin, reporter, regarding, *event_type, reason, note)
                    .await?;
            }
        }
        Ok(())
    }

    /// Creates an Event, or, when the same one (reporter, regarding object,
    /// type, reason and note) was recorded within [`SERIES_WINDOW`], counts
    /// the repeat in that Event's `series` instead of creating another
    /// object. client-go's and kube's recorders leave the note out of the
    /// key and so keep only the first note of a series; keeping it in, a
    /// changed note is never lost (client-go's core/v1 correlator counts
    /// identical Events the same way).
    async fn record_event(
        &self,
        plugin: &str,
        reporter: &str,
        regarding: &Target,
        event_type: EventType,
        reason: &str,
        note: &str,
    ) -> Result<(), kube::Error> {
        let events = KindInfo::new("events.k8s.io", "v1", "Event", "events", true);
        let ns = regarding.namespace.as_deref().unwrap_or("default");
        let api = super::dynamic_api(&self.client, &events, Some(ns));
        let key = SeriesKey {
            reporter: reporter.to_owned(),
            regarding: regarding.to_string(),
            uid: regarding.uid.clone(),
            event_type,
            reason: reason.to_owned(),
            note: note.to_owned(),
        };
        let now = SystemTime::now();
        let repeat = {
            let mut series = self.series.lock();
            series.retain(|_, s| now.duration_since(s.last).unwrap_or_default() < SERIES_WINDOW);
            series.get_mut(&key).map(|s| {
                s.count += 1;
                s.last = now;
                (s.name.clone(), s.count)
            })
        };
        let params = PatchParams {
            field_manager: Some(field_manager(plugin)),
            ..PatchParams::default()
        };
        if let Some((name, count)) = repeat {
            let series = json!({"series": {
                "count": count,
                "lastObservedTime": humantime::format_rfc3339_micros(now).to_string(),
            }});
            match api.patch(&name, &params, &Patch::Merge(&series)).await {
                Ok(_) => return Ok(()),
                // The Event expired or was deleted: start a new one.
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    self.series.lock().remove(&key);
                }
                Err(e) => return Err(e),
            }
        }
        let event = self.event(plugin, reporter, regarding, event_type, reason, note, now);
        let name = event["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let obj: DynamicObject = serde_json::from_value(event).map_err(kube::Error::SerdeError)?;
        api.create(
            &PostParams {
                field_manager: Some(field_manager(plugin)),
                ..PostParams::default()
            },
            &obj,
        )
        .await?;
        let mut series = self.series.lock();
        if series.len() >= SERIES_CAPACITY {
            // Full: forget the oldest half rather than grow.
            let mut lasts: Vec<SystemTime> = series.values().map(|s| s.last).collect();
            lasts.sort();
            let cut = lasts[lasts.len() / 2];
            series.retain(|_, s| s.last > cut);
        }
        series.insert(
            key,
            Series {
                name,
                count: 1,
                last: now,
            },
        );
        Ok(())
    }

    /// An events.k8s.io/v1 Event, named as client-go names them
    /// (`<regarding>.<hex nanos>`).
    #[allow(clippy::too_many_arguments)]
    fn event(
        &self,
        plugin: &str,
        reporter: &str,
        regarding: &Target,
        event_type: EventType,
        reason: &str,
        note: &str,
        now: SystemTime,
    ) -> serde_json::Value {
        let nanos = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
            .wrapping_add(u128::from(self.seq.fetch_add(1, Ordering::Relaxed)));
        let ns = regarding.namespace.as_deref().unwrap_or("default");
        let mut instance = format!("{}/{reporter}", self.instance);
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
        let mut action = plugin.to_owned();
        action.truncate(128);
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
            "action": action,
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

/// How long a repeated Event is counted in the first one's series (kube's
/// recorder: 6 minutes).
pub const SERIES_WINDOW: std::time::Duration = std::time::Duration::from_secs(6 * 60);
/// Series remembered at most (the oldest half is forgotten when full).
const SERIES_CAPACITY: usize = 4096;

/// What makes two Events the same series.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SeriesKey {
    reporter: String,
    regarding: String,
    uid: Option<String>,
    event_type: EventType,
    reason: String,
    note: String,
}

#[derive(Debug)]
struct Series {
    name: String,
    count: i64,
    last: SystemTime,
}

/// A uid precondition of an apply or a patch travels in the body's
/// metadata, where the server checks it as an immutable field: a mismatch
/// comes back as 422 on `metadata.uid`. That is the precondition failing,
/// so it becomes the 409 a failed precondition is everywhere else.
fn precondition_failed(action: &Action, err: kube::Error) -> kube::Error {
    match (action, err) {
        (Action::Apply { target, .. } | Action::Patch { target, .. }, kube::Error::Api(mut s))
            if s.code == 422
                && target.preconditions.uid.is_some()
                && s.message.contains("metadata.uid")
                && s.message.contains("immutable") =>
        {
            s.code = 409;
            s.reason = "Conflict".into();
            s.message = format!(
                "Precondition failed: UID in precondition: {}, the object has another ({})",
                target.preconditions.uid.as_deref().unwrap_or_default(),
                s.message
            );
            kube::Error::Api(s)
        }
        (_, err) => err,
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
                .map_err(|e| precondition_failed(action, e))
                .map_err(|e| classify(action, e))
        })
    }
}
