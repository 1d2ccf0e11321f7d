//! The recording's action sink: the API server's answers to the plugin's
//! actions, sent as server-side dry runs, kept per attempt so that each
//! refusal becomes a `failures` entry of its step, which the replay's
//! simulated cluster answers the same way.

use std::sync::Arc;

use futures::future::BoxFuture;
use parking_lot::Mutex;

use crate::actions::Action;
use crate::actions::executor::{ActionError, ActionSink};
use crate::testing::fixture::{Failure, SimulatedError, Verb};

/// Passes actions to the real sink and keeps each attempt's answer.
pub struct Capture {
    inner: Arc<dyn ActionSink>,
    attempts: Mutex<Vec<(Action, Result<(), ActionError>)>>,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture").finish_non_exhaustive()
    }
}

impl Capture {
    pub fn new(inner: Arc<dyn ActionSink>) -> Arc<Self> {
        Arc::new(Self {
            inner,
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
        for (action, result) in attempts {
            if action.is_event() {
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
            let result = self.inner.execute(plugin, action).await;
            self.attempts.lock().push((action.clone(), result.clone()));
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

    #[test]
    fn repeated_refusals_of_one_action_are_one_rule_with_a_count() {
        let capture = Capture::new(Arc::new(RecordingSink::default()));
        let conflict = |n: &str| {
            Err(ActionError::Conflict(format!(
                "patch configmaps a/{n}: the object has been modified (Conflict)"
            )))
        };
        capture.attempts.lock().extend([
            (apply("x"), conflict("x")),
            (apply("x"), conflict("x")),
            (apply("x"), Ok(())),
            (apply("y"), conflict("y")),
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
}
