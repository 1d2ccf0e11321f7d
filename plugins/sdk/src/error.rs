//! Building [`HandlerError`]s, and reading why a previous attempt failed.

use std::fmt::{self, Display};

use crate::{Failure, HandlerError};

/// A failure retrying will not fix (malformed input, a refused action): the
/// host records the delta as dead.
pub fn permanent(message: impl Into<String>) -> HandlerError {
    HandlerError::Permanent(message.into())
}

/// A transient failure: the host retries the delta with backoff.
pub fn retry(message: impl Into<String>) -> HandlerError {
    HandlerError::Retry(message.into())
}

impl HandlerError {
    /// The error's message.
    pub fn message(&self) -> &str {
        match self {
            Self::Retry(m) | Self::Permanent(m) => m,
        }
    }

    /// Whether the host will retry the delta.
    pub fn is_retry(&self) -> bool {
        matches!(self, Self::Retry(_))
    }
}

impl Failure {
    /// The failure's message.
    pub fn message(&self) -> &str {
        match self {
            Self::Retry(m) | Self::Trapped(m) | Self::Conflict(m) | Self::ActionFailed(m) => m,
        }
    }

    /// Whether an action hit a conflict (another field manager, or a uid or
    /// resourceVersion precondition that did not hold): re-read the cache
    /// and decide again.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict(_))
    }

    /// The WIT name of the case: `retry`, `trapped`, `conflict` or
    /// `action-failed`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Retry(_) => "retry",
            Self::Trapped(_) => "trapped",
            Self::Conflict(_) => "conflict",
            Self::ActionFailed(_) => "action-failed",
        }
    }
}

impl Display for Failure {
    /// `<kind>: <message>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind(), self.message())
    }
}

/// Turns any displayable error into a [`HandlerError`] with context:
/// `serde_json::from_str(s).permanent("decoding data")?`.
pub trait ResultExt<T> {
    /// Maps the error to [`HandlerError::Permanent`], as `"{context}: {error}"`.
    fn permanent(self, context: &str) -> Result<T, HandlerError>;
    /// Maps the error to [`HandlerError::Retry`], as `"{context}: {error}"`.
    fn retry(self, context: &str) -> Result<T, HandlerError>;
}

impl<T, E: Display> ResultExt<T> for Result<T, E> {
    fn permanent(self, context: &str) -> Result<T, HandlerError> {
        self.map_err(|e| permanent(format!("{context}: {e}")))
    }

    fn retry(self, context: &str) -> Result<T, HandlerError> {
        self.map_err(|e| retry(format!("{context}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_and_kind() {
        let r: Result<(), &str> = Err("boom");
        let e = r.permanent("decoding").unwrap_err();
        assert_eq!(e.message(), "decoding: boom");
        assert!(!e.is_retry());
        assert!(Err::<(), _>("x").retry("later").unwrap_err().is_retry());
        let f = Failure::Conflict("rv 3 is stale".into());
        assert!(f.is_conflict() && !Failure::Trapped("t".into()).is_conflict());
        assert_eq!(f.to_string(), "conflict: rv 3 is stale");
        assert_eq!(Failure::ActionFailed("x".into()).kind(), "action-failed");
    }
}
