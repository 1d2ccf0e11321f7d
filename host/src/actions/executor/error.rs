//! How an action failed, and which action stopped a call.

use std::time::Duration;

/// How an action failed, as the API server (or the way to it) answered.
/// What the executor does with each: [`transient`](Self::transient) ones
/// are retried here; the rest go back to the dispatcher, which retries the
/// object with backoff unless [`permanent`](Self::permanent), and hands a
/// [conflict](Self::is_conflict) back to the plugin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    /// 401: the credentials were refused (an expired or rotated token).
    /// Not permanent: tokens are refreshed, so the object is retried.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// 403: RBAC (or a terminating namespace) refuses it. Not permanent:
    /// RBAC changes propagate, so the object is retried.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// Any other 4xx (400, 422, ...) or a body that cannot be encoded:
    /// the same request can never succeed.
    #[error("rejected as invalid: {0}")]
    Invalid(String),
    /// 409, a failed JSON-patch `test` (422), or a uid precondition (422
    /// on `metadata.uid`): the object is not what the plugin saw. Handed
    /// back to the plugin, whose next attempt sees the fresh object.
    #[error("conflict: {0}")]
    Conflict(String),
    /// Not found (404). Success for a delete; for other writes the object
    /// or its namespace is gone, and the next attempt sees the delete.
    #[error("not found: {0}")]
    NotFound(String),
    /// 429 and 5xx: the server asks to come back later, after
    /// `retry_after` when it said (`Retry-After`, `retryAfterSeconds`).
    #[error("throttled: {message}{}", after(retry_after))]
    Throttled {
        message: String,
        retry_after: Option<Duration>,
    },
    /// No answer: a transport error (connection refused or reset, TLS).
    #[error("transient failure: {0}")]
    Transient(String),
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    /// Not executed: this replica does not (or no longer) lead.
    #[error("not executed: this replica is not the leader")]
    NotLeader,
    /// Not executed: the plugin version is stopping (its fence was
    /// cancelled), so this action and the call's later ones were refused.
    #[error("not executed: the plugin version is stopping")]
    Stopping,
}

fn after(retry_after: &Option<Duration>) -> String {
    retry_after.map_or_else(String::new, |d| {
        format!(" (the server asks to retry after {d:?})")
    })
}

impl ActionError {
    /// Whether the executor sends the same request again (the answer may
    /// differ next time): 429, 5xx, transport errors, timeouts.
    pub fn transient(&self) -> bool {
        matches!(
            self,
            ActionError::Transient(_) | ActionError::TimedOut(_) | ActionError::Throttled { .. }
        )
    }

    /// Whether handling the object again can never succeed: only an
    /// invalid request (4xx other than 401, 403, 404, 409 and a failed
    /// precondition; a body that cannot be encoded). 401 and 403 are not:
    /// tokens rotate and RBAC propagates.
    pub fn permanent(&self) -> bool {
        matches!(self, ActionError::Invalid(_))
    }

    /// Whether the object changed under the plugin (409, a failed JSON
    /// patch `test`, a failed uid precondition): its next attempt must
    /// decide again from the fresh object.
    pub fn is_conflict(&self) -> bool {
        matches!(self, ActionError::Conflict(_))
    }

    /// How a refusal of the request `what` (`patch configmaps a/b`) reads:
    /// the API server's message, and its reason when it gave one. The same
    /// for the real server's answers and the simulated one's.
    pub fn server_words(what: &str, message: &str, reason: &str) -> String {
        if reason.is_empty() {
            format!("{what}: {message}")
        } else {
            format!("{what}: {message} ({reason})")
        }
    }

    /// A server-side apply whose body does not fit the kind's schema (a
    /// string where a number goes, a field the kind does not declare): the
    /// API server answers 500, its structured-merge code failing to type
    /// the patch, but it is the body refused, and retrying it can never
    /// succeed.
    pub fn apply_body_untyped(what: &str, message: &str) -> Self {
        ActionError::Invalid(format!(
            "{what}: the body does not fit the kind's schema: {message}"
        ))
    }

    /// The failure's class in one word, for traces and logs that group
    /// failures (`throttled`, `conflict`, ...).
    pub fn class(&self) -> &'static str {
        match self {
            ActionError::Unauthorized(_) => "unauthorized",
            ActionError::Forbidden(_) => "forbidden",
            ActionError::Invalid(_) => "invalid",
            ActionError::Conflict(_) => "conflict",
            ActionError::NotFound(_) => "not_found",
            ActionError::Throttled { .. } => "throttled",
            ActionError::Transient(_) => "transient",
            ActionError::TimedOut(_) => "timed_out",
            ActionError::NotLeader => "not_leader",
            ActionError::Stopping => "stopping",
        }
    }

    /// How long the server asked to wait before trying again (429 and 5xx
    /// with `Retry-After` or `details.retryAfterSeconds`).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ActionError::Throttled { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// The action that stopped a call's actions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("action {index} of {total} ({action}) failed after {attempts} attempt(s): {error}")]
pub struct ActionFailure {
    /// 1-based position in the call's actions.
    pub index: usize,
    pub total: usize,
    /// The action, as logged.
    pub action: String,
    pub attempts: u32,
    pub error: ActionError,
}
