//! The recording's action sink: the API server's answers to the plugin's
//! actions, sent as server-side dry runs, kept per attempt so that each
//! refusal becomes a `failures` entry of its step, which the replay's
//! simulated cluster answers the same way.
//!
//! A server's dry run sees the cluster, not the earlier dry runs of the
//! same call: a Namespace and then a ConfigMap in it would be answered
//! NotFound, which the call would never meet. So every action also runs
//! through the simulated cluster's dry run of the call, and an action that
//! concerns what an earlier one changed is answered by that simulation
//! alone, exactly as the replay (also a dry run of the call) answers it.

use std::sync::Arc;

use futures::future::BoxFuture;
use parking_lot::Mutex;

use crate::actions::Action;
use crate::actions::executor::{ActionError, ActionSink};
use crate::testing::cluster::SimCluster;
use crate::testing::fixture::{Failure, SimulatedError, Verb};

/// One attempt and its answer.
struct Attempt {
    action: Action,
    result: Result<(), ActionError>,
    /// Answered by the simulation (the replay answers it the same way
    /// with no failure rule).
    simulated: bool,
}

/// Passes actions to the real sink and keeps each attempt's answer.
pub struct Capture {
    inner: Arc<dyn ActionSink>,
    cluster: Arc<SimCluster>,
    attempts: Mutex<Vec<Attempt>>,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture").finish_non_exhaustive()
    }
}

impl Capture {
    /// `cluster`: the recording's simulated cluster, whose call-wide dry
    /// run follows the server's answers.
    pub fn new(inner: Arc<dyn ActionSink>, cluster: Arc<SimCluster>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            cluster,
            attempts: Mutex::default(),
        })
    }

    /// The refusals since the last take, as failure rules in the order the
    /// server gave them: consecutive refusals of the same action with the
    /// same error are one rule failing that many attempts (`times`), so a
    /// retried action that then went through is replayed the same way.
    /// Events are left out: their failures never change a call.
    pub fn take_failures(&self) -> Vec<Failure> {
        let attempts = std::mem::take(&mut *self.attempts.lock());
        let mut rules: Vec<(Action, Failure)> = Vec::new();
        // Whether the previous attempt was refused (and is the last rule).
        let mut refused_last = false;
        for Attempt {
            action,
            result,
            simulated: by_simulation,
        } in attempts
        {
            if action.is_event() || by_simulation {
                refused_last = false;
                continue;
            }
            let Err(error) = result else {
                refused_last = false;
                continue;
            };
            let Some((kind, retry_after)) = simulated(&error) else {
                refused_last = false;
                continue;
            };
            if let Some((last, rule)) = rules.last_mut()
                && refused_last
                && *last == action
                && rule.error == kind
            {
                rule.times = rule.times.map(|t| t + 1);
                continue;
            }
            refused_last = true;
            let failure = Failure {
                action: None,
                verb: Some(Verb::of(&action)),
                target: Some(action.target().to_string()),
                error: kind,
                times: Some(1),
                message: server_message(&action, &error),
                retry_after,
            };
            rules.push((action, failure));
        }
        rules.into_iter().map(|(_, f)| f).collect()
    }
}

impl ActionSink for Capture {
    fn execute<'a>(
        &'a self,
        plugin: &'a str,
        action: &'a Action,
    ) -> BoxFuture<'a, Result<(), ActionError>> {
        Box::pin(async move {
            let simulated = !action.is_event() && self.cluster.follows_the_call(action);
            let result = if simulated {
                self.cluster.dry_run(plugin, action)
            } else {
                let result = self.inner.execute(plugin, action).await;
                if result.is_ok() && !action.is_event() {
                    // The call's view follows what the server accepted;
                    // where the simulation would refuse it, the replay's
                    // own dry run refuses it too (and the conformance
                    // suite is where such a difference shows).
                    if let Err(e) = self.cluster.dry_run(plugin, action) {
                        tracing::warn!(plugin, action = %action.target(), error = %e, "the simulated cluster refuses an action the API server accepted in a dry run");
                    }
                }
                result
            };
            self.attempts.lock().push(Attempt {
                action: action.clone(),
                result: result.clone(),
                simulated,
            });
            result
        })
    }
}

/// The simulated error that answers as `error` did.
fn simulated(error: &ActionError) -> Option<(SimulatedError, Option<std::time::Duration>)> {
    Some(match error {
        ActionError::Conflict(_) => (SimulatedError::Conflict, None),
        ActionError::Unauthorized(_) => (SimulatedError::Unauthorized, None),
        ActionError::Forbidden(_) => (SimulatedError::Forbidden, None),
        ActionError::NotFound(_) => (SimulatedError::NotFound, None),
        ActionError::Invalid(_) => (SimulatedError::Invalid, None),
        ActionError::Throttled { retry_after, .. } => (SimulatedError::Throttled, *retry_after),
        ActionError::Transient(_) | ActionError::TimedOut(_) => (SimulatedError::Timeout, None),
        ActionError::NotLeader | ActionError::Stopping => return None,
    })
}

/// The server's own words, as the simulated cluster puts them back
/// between `VERB TARGET: ` and ` (Reason)`.
fn server_message(action: &Action, error: &ActionError) -> Option<String> {
    let text = match error {
        ActionError::Conflict(m)
        | ActionError::Unauthorized(m)
        | ActionError::Forbidden(m)
        | ActionError::NotFound(m)
        | ActionError::Invalid(m) => m,
        ActionError::Throttled { message, .. } => message,
        _ => return None,
    };
    let what = format!("{} {}: ", action.verb(), action.target());
    let text = text.strip_prefix(&what).unwrap_or(text);
    let text = match text.rfind(" (") {
        Some(at) if text.ends_with(')') => &text[..at],
        _ => text,
    };
    Some(text.to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::actions::Target;
    use crate::actions::executor::RecordingSink;
    use crate::kind::KindInfo;
    use futures::future::BoxFuture;

    fn apply(name: &str) -> Action {
        Action::Apply {
            target: Target::new(
                KindInfo::new("", "v1", "ConfigMap", "configmaps", true),
                Some("a".into()),
                name,
            ),
            object: serde_json::json!({}),
            force: true,
            status: false,
        }
    }

    fn cluster() -> Arc<SimCluster> {
        SimCluster::new(
            crate::kind::KindRegistry::builtin(),
            crate::runtime::harness::Harness::new(std::time::SystemTime::UNIX_EPOCH, 1),
            std::time::Duration::from_secs(10),
        )
    }

    fn attempt(action: Action, result: Result<(), ActionError>) -> Attempt {
        Attempt {
            action,
            result,
            simulated: false,
        }
    }

    #[test]
    fn repeated_refusals_of_one_action_are_one_rule_with_a_count() {
        let capture = Capture::new(Arc::new(RecordingSink::default()), cluster());
        let conflict = |n: &str| {
            Err(ActionError::Conflict(format!(
                "patch configmaps a/{n}: the object has been modified (Conflict)"
            )))
        };
        capture.attempts.lock().extend([
            attempt(apply("x"), conflict("x")),
            attempt(apply("x"), conflict("x")),
            attempt(apply("x"), Ok(())),
            attempt(apply("y"), conflict("y")),
        ]);
        let rules = capture.take_failures();
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0].target.as_deref(), Some("configmaps a/x"));
        assert_eq!(rules[0].times, Some(2));
        assert_eq!(rules[0].error, SimulatedError::Conflict);
        assert_eq!(
            rules[0].message.as_deref(),
            Some("the object has been modified")
        );
        assert_eq!(rules[1].times, Some(1));
        assert!(capture.take_failures().is_empty());
    }

    /// A server that answers each dry run on its own: a ConfigMap in a
    /// Namespace it does not have is NotFound.
    #[derive(Default)]
    struct DryRunServer {
        asked: Mutex<Vec<String>>,
    }

    impl ActionSink for DryRunServer {
        fn execute<'a>(
            &'a self,
            _plugin: &'a str,
            action: &'a Action,
        ) -> BoxFuture<'a, Result<(), ActionError>> {
            let target = action.target().to_string();
            self.asked.lock().push(target.clone());
            Box::pin(async move {
                if target.starts_with("configmaps new/") {
                    Err(ActionError::NotFound(format!(
                        "patch {target}: namespaces \"new\" not found (NotFound)"
                    )))
                } else {
                    Ok(())
                }
            })
        }
    }

    /// A Namespace, then a ConfigMap in it: the server's per-request dry
    /// run says NotFound, which the call never meets; the simulation of
    /// the whole call answers the second action, and no failure is kept.
    /// An action that concerns nothing the call changed still goes to the
    /// server, and a new call starts from the cluster again.
    #[tokio::test]
    async fn an_action_sees_the_earlier_dry_runs_of_its_call() {
        let server = Arc::new(DryRunServer::default());
        let cluster = cluster();
        let capture = Capture::new(server.clone(), cluster.clone());
        let kinds = crate::kind::KindRegistry::builtin();
        let resolve = |r: &str| {
            kinds
                .resolve(&crate::kind::KindRef::Resource(r.into()))
                .unwrap()
        };
        let namespace = Action::Apply {
            target: Target::new(resolve("namespaces"), None, "new"),
            object: serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "new"}}),
            force: true,
            status: false,
        };
        let in_it = |ns: &str| Action::Apply {
            target: Target::new(resolve("configmaps"), Some(ns.into()), "c"),
            object: serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": ns}, "data": {"k": "v"}}),
            force: true,
            status: false,
        };
        let call = [namespace.clone(), in_it("new"), in_it("other")];
        cluster.begin_call(&call);
        for a in &call {
            capture.execute("p", a).await.unwrap();
        }
        assert_eq!(
            *server.asked.lock(),
            ["namespaces new", "configmaps other/c"],
            "the ConfigMap in the new Namespace is the simulation's to answer"
        );
        assert!(capture.take_failures().is_empty());
        // Nothing of it stays: the cluster holds what it held.
        assert!(cluster.objects().is_empty());
        cluster.begin_call(std::slice::from_ref(&call[1]));
        let refused = capture.execute("p", &call[1]).await.unwrap_err();
        assert!(matches!(refused, ActionError::NotFound(_)), "{refused}");
        assert_eq!(capture.take_failures().len(), 1);
    }
}
