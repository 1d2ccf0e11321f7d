//! The status a Plugin object shows: the module served and conditions
//! saying whether the spec's version serves, and if not, why (the reason is
//! a short CamelCase word for `kubectl get`, the message says what to do).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::crd::{Condition, ConditionType, PluginStatus, ReplicaStatus};

/// The field manager of the host's status writes.
pub const MANAGER: &str = "kubewasm";

/// What the last reconcile of one object came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The spec's module serves as `version`.
    Serving {
        digest: String,
        version: String,
        resolved_reference: Option<String>,
    },
    /// The spec could not be served; `serving` is the version that still
    /// does (an earlier spec's), if any.
    Refused {
        reason: &'static str,
        message: String,
        serving: Option<(String, String)>,
    },
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
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> Condition {
    Condition {
        type_: kind.as_str().to_owned(),
        status: if ok { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message: short(message),
        observed_generation: generation,
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
    }
}

/// The status `outcome` amounts to for the object at `generation`.
/// `previous` keeps a condition's transition time while its status holds,
/// as the API conventions ask.
pub fn status_for(
    outcome: &Outcome,
    generation: Option<i64>,
    previous: Option<&PluginStatus>,
) -> PluginStatus {
    let mut conditions = match outcome {
        Outcome::Serving { version, .. } => {
            let msg = format!("version {version} serves the spec's module");
            vec![
                condition(ConditionType::Ready, true, "Serving", &msg, generation),
                condition(ConditionType::Loaded, true, "Loaded", &msg, generation),
                condition(ConditionType::Degraded, false, "AsExpected", "", generation),
            ]
        }
        Outcome::Refused {
            reason,
            message,
            serving,
        } => {
            let ready = match serving {
                Some((version, _)) => condition(
                    ConditionType::Ready,
                    true,
                    "PreviousVersionServing",
                    &format!("version {version} of an earlier spec keeps serving: {message}"),
                    generation,
                ),
                None => condition(ConditionType::Ready, false, reason, message, generation),
            };
            vec![
                ready,
                condition(ConditionType::Loaded, false, reason, message, generation),
                condition(ConditionType::Degraded, true, reason, message, generation),
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
    let (digest, version, resolved_reference) = match outcome {
        Outcome::Serving {
            digest,
            version,
            resolved_reference,
        } => (
            Some(digest.clone()),
            Some(version.clone()),
            resolved_reference.clone(),
        ),
        Outcome::Refused { serving, .. } => match serving {
            Some((version, digest)) => (Some(digest.clone()), Some(version.clone()), None),
            None => (None, None, None),
        },
    };
    PluginStatus {
        observed_generation: generation,
        digest,
        resolved_reference,
        version,
        conditions,
        replicas: Vec::new(),
    }
}

/// This replica's entry for `outcome`.
pub fn replica_for(replica: &str, outcome: &Outcome) -> ReplicaStatus {
    match outcome {
        Outcome::Serving { version, .. } => ReplicaStatus {
            name: replica.to_owned(),
            version: Some(version.clone()),
            loaded: true,
            reason: None,
            message: None,
        },
        Outcome::Refused {
            reason,
            message,
            serving,
        } => ReplicaStatus {
            name: replica.to_owned(),
            version: serving.as_ref().map(|(v, _)| v.clone()),
            loaded: false,
            reason: Some((*reason).to_owned()),
            message: Some(short(message)),
        },
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
            reason: "PullFailed",
            message: format!("registry said: {}", "x".repeat(5 << 20)),
            serving: None,
        };
        let status = status_for(&outcome, Some(1), None);
        for c in &status.conditions {
            assert!(c.message.len() <= MESSAGE_MAX, "{}", c.message.len());
        }
        let ready = &status.conditions[0].message;
        assert!(ready.starts_with("registry said: xxx"), "{ready}");
        assert!(ready.ends_with("(5242895 bytes in all)"), "{ready}");
        let replica = replica_for("r", &outcome);
        assert!(replica.message.unwrap().len() <= MESSAGE_MAX);
        // Short ones are whole.
        let ok = Outcome::Refused {
            reason: "PullFailed",
            message: "no such host".into(),
            serving: None,
        };
        assert_eq!(
            status_for(&ok, Some(1), None).conditions[0].message,
            "no such host"
        );
    }
}
