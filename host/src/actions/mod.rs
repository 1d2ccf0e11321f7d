//! Actions plugins emit, and the executors that carry them out against a
//! real API server, the local folder cluster, or a dry-run log.

pub mod executor;
pub mod rate;

use serde_json::Value;

use crate::kind::KindInfo;

/// The object an action targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub kind: KindInfo,
    pub namespace: Option<String>,
    pub name: String,
    pub uid: Option<String>,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind.resource_name(), self.name),
            None => write!(f, "{} {}", self.kind.resource_name(), self.name),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// One write, validated when the plugin emitted it.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Server-side apply of `object` (to the status subresource when
    /// `status`).
    Apply {
        target: Target,
        object: Value,
        force: bool,
        status: bool,
    },
    Patch {
        target: Target,
        patch_type: PatchType,
        patch: Value,
    },
    Delete {
        target: Target,
        propagation: Propagation,
    },
    Event {
        regarding: Target,
        event_type: EventType,
        reason: String,
        note: String,
    },
}

impl Action {
    /// The API verb, as RBAC names it.
    pub fn verb(&self) -> &'static str {
        match self {
            Action::Apply { .. } | Action::Patch { .. } => "patch",
            Action::Delete { .. } => "delete",
            Action::Event { .. } => "create",
        }
    }

    pub fn target(&self) -> &Target {
        match self {
            Action::Apply { target, .. }
            | Action::Patch { target, .. }
            | Action::Delete { target, .. } => target,
            Action::Event { regarding, .. } => regarding,
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Apply {
                target,
                status,
                force,
                ..
            } => write!(
                f,
                "apply{}{} {target}",
                if *status { " status" } else { "" },
                if *force { " (force)" } else { "" }
            ),
            Action::Patch {
                target,
                patch_type,
                patch,
            } => {
                write!(f, "patch ({patch_type:?}) {target} {patch}")
            }
            Action::Delete {
                target,
                propagation,
            } => write!(f, "delete ({propagation:?}) {target}"),
            Action::Event {
                regarding,
                event_type,
                reason,
                note,
            } => {
                write!(f, "event {event_type:?} {reason} on {regarding}: {note}")
            }
        }
    }
}
