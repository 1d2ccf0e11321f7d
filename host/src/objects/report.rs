//! What the host writes on Plugin objects: each replica its own entry of
//! `status.replicas`, the leader the rest. The leader's `Ready` speaks for
//! every ready replica: it reads the other replicas' entries off the object
//! and the host's Pods off the API server, prunes the entries of Pods that
//! are gone, and says `ReplicasBehind` while a ready one has not loaded
//! the current spec.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};

use super::status::{self, MANAGER, status_for};
use super::{PluginObjects, Source};
use crate::crd::{NamespacedPlugin, Plugin, PluginStatus, ReplicaStatus};

/// The host's Pods as the leader last listed them: name -> Ready.
pub(super) type LivePods = BTreeMap<String, bool>;

/// Which recomputed statuses [`PluginObjects::refresh`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Write {
    /// Those that differ from what this replica last wrote.
    Changed,
    /// Every one.
    All,
}

impl PluginObjects {
    /// The other replicas' entries that count for `Ready`: those of ready
    /// Pods when the host's Pods are known (and an empty entry for a ready
    /// Pod that has not written one yet: it has not loaded the spec), else
    /// all of them.
    pub(super) fn counted(&self, entries: &[ReplicaStatus]) -> Vec<ReplicaStatus> {
        let live = self.live.lock().clone();
        let others = entries.iter().filter(|r| r.name != self.replica);
        let Some(pods) = live else {
            return others.cloned().collect();
        };
        let mut counted: Vec<ReplicaStatus> = others
            .filter(|r| pods.get(&r.name) == Some(&true))
            .cloned()
            .collect();
        for (pod, ready) in &pods {
            if *ready && *pod != self.replica && !entries.iter().any(|r| r.name == *pod) {
                counted.push(ReplicaStatus {
                    name: pod.clone(),
                    ..ReplicaStatus::default()
                });
            }
        }
        counted
    }

    /// Recomputes the status of `source` from what this replica knows (its
    /// outcome, the other replicas' entries as last seen) and writes it if
    /// it changed, while leading.
    pub(super) async fn refresh(&self, source: &Source, write: Write) {
        if !self.leadership.state().coordinates() {
            return;
        }
        let status = {
            let mut known = self.known.lock().await;
            let Some(k) = known.get_mut(source) else {
                return;
            };
            let others = self.counted(&k.others);
            let status = status_for(&k.outcome, k.generation, k.status.as_ref(), &others);
            if write == Write::Changed && k.status.as_ref().is_some_and(|p| same_status(p, &status))
            {
                return;
            }
            k.status = Some(status.clone());
            status
        };
        self.write_status(source, &status).await;
    }

    /// Lists the host's Pods (name -> Ready) into `live`; `None` when they
    /// cannot be known (outside a Pod, or the list failed).
    pub(super) async fn list_pods(&self) -> Option<LivePods> {
        let namespace = self.pod_namespace.clone()?;
        let pods = match Api::<Pod>::namespaced(self.client.clone(), &namespace)
            .list(&ListParams::default())
            .await
        {
            Ok(list) => {
                // The host's own Pods: those labelled as this replica's Pod
                // is (its name and instance), not everything else the
                // namespace runs.
                let Some(me) = list
                    .items
                    .iter()
                    .find(|p| p.metadata.name.as_deref() == Some(self.replica.as_str()))
                else {
                    tracing::debug!(replica = %self.replica, "this replica's Pod is not in its namespace's list: every status entry counts");
                    *self.live.lock() = None;
                    return None;
                };
                let mine = same_workload(me);
                list.items
                    .into_iter()
                    .filter(|p| {
                        mine.iter().all(|(k, v)| {
                            p.metadata.labels.as_ref().and_then(|l| l.get(k)) == Some(v)
                        })
                    })
                    .filter_map(|p| {
                        let ready = p
                            .status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|c| {
                                c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            });
                        Some((p.metadata.name?, ready))
                    })
                    .collect::<LivePods>()
            }
            Err(e) => {
                tracing::warn!(namespace, error = %e, "cannot list the host's Pods: status.replicas is not pruned and every replica counts for Ready until it can (grant list on pods in this namespace: kubewasm rbac)");
                *self.live.lock() = None;
                return None;
            }
        };
        *self.live.lock() = Some(pods.clone());
        Some(pods)
    }

    /// While leading: lists the host's Pods (in a Pod), prunes the
    /// `status.replicas` entries of Pods that are gone (a rollout, a drain,
    /// a deleted Pod), and recomputes every status (a replica that became
    /// ready or unready changes what `Ready` waits for), writing those that
    /// changed, or all of them with [`Write::All`] (a new leader: what it
    /// computed as a follower was never written). Outside a Pod the host
    /// cannot tell a replica that is gone from one elsewhere, and prunes
    /// nothing.
    pub(super) async fn check_replicas(&self, write: Write) {
        if !self.leadership.state().coordinates() {
            return;
        }
        if let Some(pods) = self.list_pods().await {
            self.prune_gone(&pods).await;
        }
        let all: Vec<Source> = self.known.lock().await.keys().cloned().collect();
        for source in all {
            self.refresh(&source, write).await;
        }
    }

    /// Prunes, from every object's status, the entries of Pods `pods` does
    /// not hold.
    async fn prune_gone(&self, pods: &LivePods) {
        tracing::debug!(pods = ?pods, "the host's Pods, as the leader lists them");
        type Gone = (Source, Vec<String>, Vec<ReplicaStatus>);
        let gone: Vec<Gone> = self
            .known
            .lock()
            .await
            .iter()
            .filter_map(|(s, k)| {
                let names: Vec<String> = k
                    .others
                    .iter()
                    .filter(|r| r.name != self.replica && !pods.contains_key(&r.name))
                    .map(|r| r.name.clone())
                    .collect();
                (!names.is_empty()).then(|| (s.clone(), names, k.others.clone()))
            })
            .collect();
        for (source, names, entries) in gone {
            match self.prune(&source, &names, &entries).await {
                Ok(()) => {
                    tracing::info!(object = %source.display(), replicas = ?names, "pruned the status entries of replicas whose Pods are gone");
                    if let Some(k) = self.known.lock().await.get_mut(&source) {
                        k.others.retain(|r| !names.contains(&r.name));
                    }
                }
                Err(e) => {
                    tracing::warn!(object = %source.display(), replicas = ?names, error = %e, "cannot prune the status entries of replicas whose Pods are gone; retried");
                }
            }
        }
    }

    /// Removes the entries of `names` from `status.replicas` (`entries`,
    /// as the watch last delivered them, in the server's order), by a JSON
    /// patch that tests each entry's name at its index: an entry that moved
    /// since fails the patch rather than removing another, and the next
    /// check tries again with what the watch has delivered by then. No read
    /// of the object: the host may only watch it and patch its status.
    async fn prune(
        &self,
        source: &Source,
        names: &[String],
        entries: &[ReplicaStatus],
    ) -> Result<(), kube::Error> {
        let current = PluginStatus {
            replicas: entries.to_vec(),
            ..PluginStatus::default()
        };
        let mut ops = Vec::new();
        // Highest index first: removing one does not move the others.
        for (i, entry) in current.replicas.iter().enumerate().rev() {
            if names.contains(&entry.name) {
                let path = format!("/status/replicas/{i}");
                ops.push(serde_json::json!({"op": "test", "path": format!("{path}/name"), "value": entry.name}));
                ops.push(serde_json::json!({"op": "remove", "path": path}));
            }
        }
        if ops.is_empty() {
            return Ok(());
        }
        let patch: json_patch::Patch = serde_json::from_value(serde_json::Value::Array(ops))
            .map_err(kube::Error::SerdeError)?;
        let params = PatchParams::default();
        match source {
            Source::Cluster(name) => Api::<Plugin>::all(self.client.clone())
                .patch_status(name, &params, &Patch::<()>::Json(patch))
                .await
                .map(|_| ()),
            Source::Tenant { namespace, name } => {
                Api::<NamespacedPlugin>::namespaced(self.client.clone(), namespace)
                    .patch_status(name, &params, &Patch::<()>::Json(patch))
                    .await
                    .map(|_| ())
            }
        }
    }

    /// What `/readyz`'s text and the web view say about `source` on this
    /// replica: nothing while some version serves, else why none does.
    /// When that changes, an Event on the object says so too (for a
    /// Plugin: a NamespacedPlugin's namespace is its tenant's).
    pub(super) async fn note(&self, source: &Source, outcome: &super::Outcome) {
        let text = match outcome {
            super::Outcome::Refused {
                reason,
                message,
                serving: None,
            } => Some((*reason, message.clone())),
            _ => None,
        };
        let subject = source.display();
        let telemetry = self.host.telemetry();
        let before = telemetry.notes_of(&subject);
        telemetry.note(
            &subject,
            text.as_ref()
                .map(|(reason, message)| format!("not serving {subject}: {reason}: {message}")),
        );
        let Source::Cluster(name) = source else {
            return;
        };
        let event = match (&text, before.is_some()) {
            (Some((reason, message)), false) => Event {
                type_: EventType::Warning,
                reason: reason.as_str().to_owned(),
                note: Some(format!(
                    "replica {} serves no version: {message}",
                    self.replica
                )),
                action: "Load".into(),
                secondary: None,
            },
            (None, true) => Event {
                type_: EventType::Normal,
                reason: super::reasons::SERVING.as_str().into(),
                note: Some(format!("replica {} serves it again", self.replica)),
                action: "Load".into(),
                secondary: None,
            },
            _ => return,
        };
        let reference = ObjectReference {
            api_version: Some("kubewasm.io/v1alpha1".into()),
            kind: Some("Plugin".into()),
            name: Some(name.clone()),
            ..ObjectReference::default()
        };
        if let Err(e) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(object = %subject, error = %e, "cannot write an Event about the Plugin object (grant create on events.k8s.io events in default: kubewasm rbac)");
        }
    }

    /// Every replica reports its own load state, leader or not.
    pub(super) async fn write_replica(&self, source: &Source, entry: &ReplicaStatus) {
        let manager = status::replica_manager(&entry.name);
        let part = serde_json::json!({"replicas": [entry]});
        if let Err(e) = self.apply_status(source, &manager, part).await {
            tracing::warn!(object = %source.display(), replica = %entry.name, error = %e, "cannot write this replica's load state to the Plugin object's status");
        }
    }

    pub(super) async fn write_status(&self, source: &Source, status: &PluginStatus) {
        let result = match serde_json::to_value(status) {
            Ok(part) => self.apply_status(source, MANAGER, part).await,
            Err(e) => Err(kube::Error::SerdeError(e)),
        };
        if let Err(e) = result {
            tracing::warn!(object = %source.display(), error = %e, "cannot write the Plugin object's status");
        }
    }

    /// Applies part of the status of the object `source` names, as `manager`.
    async fn apply_status(
        &self,
        source: &Source,
        manager: &str,
        part: serde_json::Value,
    ) -> Result<(), kube::Error> {
        match source {
            Source::Cluster(name) => {
                let api = Api::<Plugin>::all(self.client.clone());
                status::apply(&api, name, manager, part).await
            }
            Source::Tenant { namespace, name } => {
                let api = Api::<NamespacedPlugin>::namespaced(self.client.clone(), namespace);
                status::apply(&api, name, manager, part).await
            }
        }
    }
}

/// The labels that tell the host's Pods from others of the namespace: the
/// well-known name and instance labels this replica's Pod carries.
fn same_workload(pod: &Pod) -> Vec<(String, String)> {
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    ["app.kubernetes.io/name", "app.kubernetes.io/instance"]
        .iter()
        .filter_map(|k| Some(((*k).to_owned(), labels.get(*k)?.clone())))
        .collect()
}

/// Two statuses say the same (transition times aside).
pub(super) fn same_status(a: &PluginStatus, b: &PluginStatus) -> bool {
    let strip = |s: &PluginStatus| {
        let mut s = s.clone();
        for c in &mut s.conditions {
            c.last_transition_time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            );
        }
        s
    };
    strip(a) == strip(b)
}
