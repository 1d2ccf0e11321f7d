//! The status a Plugin object shows: the module served and conditions
//! saying whether the spec's version serves, and if not, why (the reason is
//! a short CamelCase word for `kubectl get`, the message says what to do).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::reasons::{self, Reason};
use crate::crd::{Condition, ConditionType, PluginStatus, ReplicaStatus};

/// The field manager of the host's status writes.
pub const MANAGER: &str = "kubewasm";

/// A version that serves, and what it was loaded from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    /// The version the plugin sees in `register`.
    pub version: String,
    /// `sha256:<hex>` of the module's bytes.
    pub content_digest: String,
    /// For OCI: the manifest's digest (what a spec pins or a tag resolved
    /// to).
    pub manifest_digest: Option<String>,
    /// For OCI: `registry/repository@<manifest digest>`.
    pub resolved_reference: Option<String>,
}

/// What the last reconcile of one object came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The spec's module serves.
    Serving(Served),
    /// The spec is being fetched and compiled; `serving` is an earlier
    /// spec's version that serves meanwhile, if any.
    Loading { serving: Option<Served> },
    /// The spec could not be served; `serving` is the version that still
    /// does (an earlier spec's), if any.
    Refused {
        reason: Reason,
        message: String,
        serving: Option<Served>,
    },
}

impl Outcome {
    /// What serves, whichever spec it came from.
    pub fn served(&self) -> Option<&Served> {
        match self {
            Self::Serving(s) => Some(s),
            Self::Loading { serving } | Self::Refused { serving, .. } => serving.as_ref(),
        }
    }
}

/// Whether a refusal for `reason` can clear without anyone changing
/// anything (a registry or the API server back, a ConfigMap created by the
/// same apply): the host keeps retrying it and says `Reconciling`. Every
/// other refusal needs a change (the spec, a key, the host config, RBAC) and
/// says `Stalled`, which kstatus reads as Failed, so a GitOps tool stops
/// waiting at once.
pub fn clears_by_itself(reason: Reason) -> bool {
    matches!(
        reason,
        reasons::PULL_FAILED | reasons::FETCH_FAILED | reasons::TENANT_CHECK_FAILED
    )
}

/// The longest message a condition or replica entry carries: a registry
/// (or anything else) that answers a long text cannot fill the object, nor
/// every watcher's cache of it, with it.
pub const MESSAGE_MAX: usize = 1024;

/// `message` whole up to [`MESSAGE_MAX`] bytes, else its start and its
/// length.
fn short(message: &str) -> String {
    if message.len() <= MESSAGE_MAX {
        return message.to_owned();
    }
    let cut = message.floor_char_boundary(MESSAGE_MAX - 64);
    format!("{}... ({} bytes in all)", &message[..cut], message.len())
}

fn condition(
    kind: ConditionType,
    ok: bool,
    reason: Reason,
    message: &str,
    generation: Option<i64>,
) -> Condition {
    Condition {
        type_: kind.as_str().to_owned(),
        status: if ok { "True" } else { "False" }.to_owned(),
        reason: reason.as_str().to_owned(),
        message: short(message),
        observed_generation: generation,
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
    }
}

/// The other replicas (ready ones, by the leader's reading) that do not
/// serve the spec of `generation`, as one sentence each.
fn behind(others: &[ReplicaStatus], generation: Option<i64>) -> Vec<String> {
    others
        .iter()
        .filter(|r| !(r.loaded && r.observed_generation == generation))
        .map(|r| {
            let serves = r
                .version
                .as_deref()
                .map_or("serves nothing".to_owned(), |v| {
                    format!("serves version {v}")
                });
            match (&r.reason, r.observed_generation) {
                (Some(reason), _) => format!("replica {} {serves} ({reason})", r.name),
                (None, Some(g)) if Some(g) != generation => {
                    format!(
                        "replica {} {serves} and has not loaded generation {} yet (it is on {g})",
                        r.name,
                        generation.unwrap_or_default()
                    )
                }
                _ => format!(
                    "replica {} {serves} and has not loaded this generation yet",
                    r.name
                ),
            }
        })
        .collect()
}

/// The status `outcome` (the leader's) amounts to for the object at
/// `generation`, given the entries of the other ready replicas in
/// `others`. `previous` keeps a condition's transition time while its
/// status holds, as the API conventions ask.
pub fn status_for(
    outcome: &Outcome,
    generation: Option<i64>,
    previous: Option<&PluginStatus>,
    others: &[ReplicaStatus],
) -> PluginStatus {
    use ConditionType::{Degraded, Loaded, Ready, Reconciling, Serving, Stalled};
    let c =
        |kind, ok, reason: Reason, message: &str| condition(kind, ok, reason, message, generation);
    let serving = match outcome.served() {
        Some(s) if matches!(outcome, Outcome::Serving(_)) => c(
            Serving,
            true,
            reasons::SPEC_VERSION,
            &format!("version {} of the current spec serves", s.version),
        ),
        Some(s) => c(
            Serving,
            true,
            reasons::PREVIOUS_VERSION,
            &format!(
                "version {} of an earlier spec keeps serving (content {})",
                s.version, s.content_digest
            ),
        ),
        None => c(
            Serving,
            false,
            reasons::NOTHING_SERVES,
            "no version of this plugin serves: no delta is delivered",
        ),
    };
    let mut conditions = match outcome {
        Outcome::Serving(served) => {
            let late = behind(others, generation);
            let msg = format!("version {} serves the spec's module", served.version);
            if late.is_empty() {
                vec![
                    c(Ready, true, reasons::SERVING, &msg),
                    serving,
                    c(Reconciling, false, reasons::SERVING, &msg),
                    c(Stalled, false, reasons::SERVING, &msg),
                    c(Loaded, true, reasons::LOADED, &msg),
                    c(Degraded, false, reasons::AS_EXPECTED, ""),
                ]
            } else {
                let why = format!(
                    "the leader serves version {}, but {}",
                    served.version,
                    late.join("; ")
                );
                vec![
                    c(Ready, false, reasons::REPLICAS_BEHIND, &why),
                    serving,
                    c(Reconciling, true, reasons::REPLICAS_BEHIND, &why),
                    c(Stalled, false, reasons::REPLICAS_BEHIND, &why),
                    c(Loaded, true, reasons::LOADED, &msg),
                    c(Degraded, false, reasons::AS_EXPECTED, ""),
                ]
            }
        }
        Outcome::Loading { .. } => {
            let msg = format!(
                "fetching, verifying and compiling the module of generation {}",
                generation.unwrap_or_default()
            );
            vec![
                c(Ready, false, reasons::RECONCILING, &msg),
                serving,
                c(Reconciling, true, reasons::LOADING, &msg),
                c(Stalled, false, reasons::LOADING, &msg),
                c(Loaded, false, reasons::LOADING, &msg),
                c(Degraded, false, reasons::AS_EXPECTED, ""),
            ]
        }
        Outcome::Refused {
            reason,
            message,
            serving: earlier,
        } => {
            let ready_msg = match earlier {
                Some(s) => format!(
                    "the current spec is refused ({message}); version {} of an earlier spec keeps serving",
                    s.version
                ),
                None => message.clone(),
            };
            let retried = clears_by_itself(*reason);
            let progress = if retried {
                format!("retried every 30 s: {message}")
            } else {
                format!("cannot be served without a change: {message}")
            };
            vec![
                c(Ready, false, *reason, &ready_msg),
                serving,
                c(Reconciling, retried, *reason, &progress),
                c(Stalled, !retried, *reason, &progress),
                c(Loaded, false, *reason, message),
                c(Degraded, true, *reason, message),
            ]
        }
    };
    if let Some(prev) = previous {
        for c in &mut conditions {
            if let Some(old) = prev.conditions.iter().find(|o| o.type_ == c.type_)
                && old.status == c.status
            {
                c.last_transition_time = old.last_transition_time.clone();
            }
        }
    }
    let served = outcome.served();
    PluginStatus {
        observed_generation: generation,
        content_digest: served.map(|s| s.content_digest.clone()),
        manifest_digest: served.and_then(|s| s.manifest_digest.clone()),
        resolved_reference: served.and_then(|s| s.resolved_reference.clone()),
        version: served.map(|s| s.version.clone()),
        conditions,
        replicas: Vec::new(),
    }
}

/// This replica's entry for `outcome` at `generation`.
pub fn replica_for(replica: &str, outcome: &Outcome, generation: Option<i64>) -> ReplicaStatus {
    let (loaded, reason, message) = match outcome {
        Outcome::Serving(_) => (true, None, None),
        Outcome::Loading { .. } => (false, Some(reasons::LOADING.as_str().to_owned()), None),
        Outcome::Refused {
            reason, message, ..
        } => (
            false,
            Some(reason.as_str().to_owned()),
            Some(short(message)),
        ),
    };
    ReplicaStatus {
        name: replica.to_owned(),
        observed_generation: generation,
        version: outcome.served().map(|s| s.version.clone()),
        loaded,
        reason,
        message,
    }
}

/// The field manager of a replica's own `status.replicas` entry: every
/// replica owns its entry, the leader (as [`MANAGER`]) the rest.
pub fn replica_manager(replica: &str) -> String {
    format!("{MANAGER}-replica-{replica}")
}

/// Server-side applies `status` (a part of the status subresource) as
/// `manager`, so only that manager's fields change.
pub async fn apply<K>(
    api: &Api<K>,
    name: &str,
    manager: &str,
    status: serde_json::Value,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(
        name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refusal quoting a huge text (a registry's error body) reaches
    /// status cut short, in every condition and in the replica entry.
    #[test]
    fn status_messages_are_cut_short() {
        let outcome = Outcome::Refused {
            reason: reasons::PULL_FAILED,
            message: format!("registry said: {}", "x".repeat(5 << 20)),
            serving: None,
        };
        let status = status_for(&outcome, Some(1), None, &[]);
        for c in &status.conditions {
            assert!(c.message.len() <= MESSAGE_MAX, "{}", c.message.len());
        }
        let ready = &status.conditions[0].message;
        assert!(ready.starts_with("registry said: xxx"), "{ready}");
        assert!(ready.ends_with("(5242895 bytes in all)"), "{ready}");
        let replica = replica_for("r", &outcome, Some(1));
        assert!(replica.message.unwrap().len() <= MESSAGE_MAX);
        // Short ones are whole.
        let ok = Outcome::Refused {
            reason: reasons::PULL_FAILED,
            message: "no such host".into(),
            serving: None,
        };
        assert_eq!(
            status_for(&ok, Some(1), None, &[]).conditions[0].message,
            "no such host"
        );
    }
}

#[cfg(test)]
mod conditions {
    use super::*;

    fn served(version: &str) -> Served {
        Served {
            version: version.into(),
            content_digest: "sha256:c".into(),
            manifest_digest: Some("sha256:m".into()),
            resolved_reference: Some("r.io/p@sha256:m".into()),
        }
    }

    /// (type, status, reason) of every condition kstatus and `kubectl
    /// wait` read.
    fn read(status: &PluginStatus) -> Vec<(String, String, String)> {
        status
            .conditions
            .iter()
            .filter(|c| ["Ready", "Serving", "Reconciling", "Stalled"].contains(&c.type_.as_str()))
            .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
            .collect()
    }

    fn expect(rows: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
        rows.iter()
            .map(|(t, s, r)| ((*t).to_owned(), (*s).to_owned(), (*r).to_owned()))
            .collect()
    }

    fn replica(name: &str, generation: i64, loaded: bool) -> ReplicaStatus {
        ReplicaStatus {
            name: name.into(),
            observed_generation: Some(generation),
            version: Some("v".into()),
            loaded,
            reason: (!loaded).then(|| "PullFailed".to_owned()),
            message: None,
        }
    }

    #[test]
    fn each_outcome_reads_as_kstatus_expects() {
        let refused = |reason: Reason, serving| Outcome::Refused {
            reason,
            message: "why".into(),
            serving,
        };
        type Case = (
            &'static str,
            Outcome,
            Vec<ReplicaStatus>,
            Vec<(&'static str, &'static str, &'static str)>,
        );
        let cases: Vec<Case> = vec![
            (
                "serving everywhere: Current",
                Outcome::Serving(served("a")),
                vec![replica("other", 2, true)],
                vec![
                    ("Ready", "True", "Serving"),
                    ("Serving", "True", "SpecVersion"),
                    ("Reconciling", "False", "Serving"),
                    ("Stalled", "False", "Serving"),
                ],
            ),
            (
                "a ready replica on the previous generation: InProgress",
                Outcome::Serving(served("a")),
                vec![replica("other", 1, true)],
                vec![
                    ("Ready", "False", "ReplicasBehind"),
                    ("Serving", "True", "SpecVersion"),
                    ("Reconciling", "True", "ReplicasBehind"),
                    ("Stalled", "False", "ReplicasBehind"),
                ],
            ),
            (
                "a replica that could not pull: InProgress",
                Outcome::Serving(served("a")),
                vec![replica("other", 2, false)],
                vec![
                    ("Ready", "False", "ReplicasBehind"),
                    ("Serving", "True", "SpecVersion"),
                    ("Reconciling", "True", "ReplicasBehind"),
                    ("Stalled", "False", "ReplicasBehind"),
                ],
            ),
            (
                "loading a new spec: InProgress",
                Outcome::Loading {
                    serving: Some(served("a")),
                },
                vec![],
                vec![
                    ("Ready", "False", "Reconciling"),
                    ("Serving", "True", "PreviousVersion"),
                    ("Reconciling", "True", "Loading"),
                    ("Stalled", "False", "Loading"),
                ],
            ),
            (
                "registry down on an update: InProgress, the previous version serving",
                refused(reasons::PULL_FAILED, Some(served("a"))),
                vec![],
                vec![
                    ("Ready", "False", "PullFailed"),
                    ("Serving", "True", "PreviousVersion"),
                    ("Reconciling", "True", "PullFailed"),
                    ("Stalled", "False", "PullFailed"),
                ],
            ),
            (
                "a refused signature on an update: Failed, the previous version serving",
                refused(reasons::SIGNATURE_REFUSED, Some(served("a"))),
                vec![],
                vec![
                    ("Ready", "False", "SignatureRefused"),
                    ("Serving", "True", "PreviousVersion"),
                    ("Reconciling", "False", "SignatureRefused"),
                    ("Stalled", "True", "SignatureRefused"),
                ],
            ),
            (
                "nothing serves after a restart with the registry down",
                refused(reasons::PULL_FAILED, None),
                vec![],
                vec![
                    ("Ready", "False", "PullFailed"),
                    ("Serving", "False", "NothingServes"),
                    ("Reconciling", "True", "PullFailed"),
                    ("Stalled", "False", "PullFailed"),
                ],
            ),
        ];
        for (name, outcome, others, want) in cases {
            let status = status_for(&outcome, Some(2), None, &others);
            assert_eq!(read(&status), expect(&want), "{name}");
            assert_eq!(status.observed_generation, Some(2), "{name}");
            assert!(
                status
                    .conditions
                    .iter()
                    .all(|c| c.observed_generation == Some(2)),
                "{name}"
            );
            // The version serving stays on status, whichever spec it is of.
            assert_eq!(
                status.version.is_some(),
                outcome.served().is_some(),
                "{name}"
            );
        }
    }

    #[test]
    fn a_refused_update_keeps_the_serving_versions_digests_apart() {
        let status = status_for(
            &Outcome::Refused {
                reason: reasons::SIGNATURE_REFUSED,
                message: "no key verifies it".into(),
                serving: Some(served("a")),
            },
            Some(3),
            None,
            &[],
        );
        assert_eq!(status.version.as_deref(), Some("a"));
        assert_eq!(status.content_digest.as_deref(), Some("sha256:c"));
        assert_eq!(status.manifest_digest.as_deref(), Some("sha256:m"));
        let ready = &status.conditions[0];
        assert!(ready.message.contains("no key verifies it"), "{ready:?}");
        assert!(ready.message.contains("version a"), "{ready:?}");
    }

    #[test]
    fn a_replica_entry_says_which_generation_it_serves() {
        let entry = replica_for("pod-a", &Outcome::Serving(served("a")), Some(4));
        assert_eq!(entry.observed_generation, Some(4));
        assert!(entry.loaded);
        let refused = replica_for(
            "pod-a",
            &Outcome::Refused {
                reason: reasons::PULL_FAILED,
                message: "down".into(),
                serving: Some(served("a")),
            },
            Some(5),
        );
        assert!(!refused.loaded);
        assert_eq!(refused.version.as_deref(), Some("a"));
        assert_eq!(refused.reason.as_deref(), Some("PullFailed"));
    }
}
