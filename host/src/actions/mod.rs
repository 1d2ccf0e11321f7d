//! Actions plugins emit, and the executors that carry them out against a
//! real API server, the local folder cluster, or a dry-run log.

pub mod events;
pub mod executor;
pub mod internal_events;
pub mod rate;

use std::sync::Arc;

use serde_json::Value;

use crate::kind::KindInfo;

/// Field manager of a plugin's writes: `kubewasm/<plugin>` (the sink's,
/// and the simulated server's record of who owns which field).
pub fn field_manager(plugin: &str) -> String {
    format!("kubewasm/{plugin}")
}

/// The object an action targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Shared: resolved once per plugin instance, not per action.
    pub kind: Arc<KindInfo>,
    pub namespace: Option<String>,
    pub name: String,
    /// The object's uid when the plugin gave it: an Event's regarding uid.
    /// (A precondition only when it is also in `preconditions`.)
    pub uid: Option<String>,
    /// What the server must check before writing (WIT 0.2).
    pub preconditions: Preconditions,
}

/// Conditions the server checks before a write; one that does not hold
/// fails the write with a conflict.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preconditions {
    /// The object must have this uid (it was not deleted and recreated).
    pub uid: Option<String>,
    /// The object must be at this resourceVersion (nobody wrote it since).
    pub resource_version: Option<String>,
}

impl Preconditions {
    pub fn is_empty(&self) -> bool {
        self.uid.is_none() && self.resource_version.is_none()
    }

    /// Sets the preconditions in an object's (or a merge patch's)
    /// `metadata`: the API server enforces a uid and a resourceVersion found
    /// there on apply, update and patch, answering 409 Conflict.
    pub fn embed_in(&self, object: &mut Value) {
        if self.is_empty() {
            return;
        }
        let Value::Object(root) = object else {
            return;
        };
        let meta = root
            .entry("metadata")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Value::Object(meta) = meta {
            if let Some(uid) = &self.uid {
                meta.insert("uid".into(), Value::from(uid.as_str()));
            }
            if let Some(rv) = &self.resource_version {
                meta.insert("resourceVersion".into(), Value::from(rv.as_str()));
            }
        }
    }

    /// The preconditions as JSON patch operations that go first in a JSON
    /// patch: `add` of the field sets it on the patched object, which the
    /// server then checks against the stored one (409 on a mismatch), as
    /// for a merge patch.
    pub fn json_patch_ops(&self) -> Vec<Value> {
        let mut ops = Vec::new();
        if let Some(uid) = &self.uid {
            ops.push(serde_json::json!({"op": "add", "path": "/metadata/uid", "value": uid}));
        }
        if let Some(rv) = &self.resource_version {
            ops.push(
                serde_json::json!({"op": "add", "path": "/metadata/resourceVersion", "value": rv}),
            );
        }
        ops
    }
}

impl Target {
    /// A target with no uid and no preconditions.
    pub fn new(
        kind: impl Into<Arc<KindInfo>>,
        namespace: Option<String>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            kind: kind.into(),
            namespace,
            name: name.into(),
            uid: None,
            preconditions: Preconditions::default(),
        }
    }
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
        /// Who reports it: `<plugin>@<version>` (after the host's instance
        /// in `reportingInstance`).
        reporter: std::sync::Arc<str>,
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

    /// What the action does, as the plugin asked it: `apply`, `patch`,
    /// `delete` or `event` (the RBAC [`verb`](Self::verb) calls an apply a
    /// patch and an Event a create).
    pub fn operation(&self) -> &'static str {
        match self {
            Action::Apply { .. } => "apply",
            Action::Patch { .. } => "patch",
            Action::Delete { .. } => "delete",
            Action::Event { .. } => "event",
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

    /// The request in a few words, for log lines: `apply deployments.apps
    /// shop/web`, `apply status ...`, `patch ...`, `delete ...`, `event
    /// regarding ...` (no bodies: [`Display`](std::fmt::Display) shows a
    /// patch's).
    pub fn summary(&self) -> String {
        match self {
            Action::Apply { target, status, .. } => {
                format!("apply{} {target}", if *status { " status" } else { "" })
            }
            Action::Patch { target, .. } => format!("patch {target}"),
            Action::Delete { target, .. } => format!("delete {target}"),
            Action::Event { regarding, .. } => format!("event regarding {regarding}"),
        }
    }

    /// Whether the executor defers it: Events are recorded after the
    /// call's other actions succeeded, off the call's path.
    pub fn is_event(&self) -> bool {
        matches!(self, Action::Event { .. })
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
                ..
            } => {
                write!(f, "event {event_type:?} {reason} on {regarding}: {note}")
            }
        }
    }
}
