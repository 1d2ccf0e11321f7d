//! What a call did, in the fixture's terms: the delta in a few words, its
//! actions and Events as entries, its result.

use crate::actions::executor::ActionFailure;
use crate::actions::{Action, EventType, PatchType, Propagation};
use crate::informer::DeltaType;
use crate::kind::KindRegistry;
use crate::runtime::{CallDelta, CallError, LastFailure};

use super::fixture::{
    ActionEntry, Apply, ApplyStatus, CallResult, Delete, EventEntry, EventKind, Patch, PatchKind,
    Preconditions, PropagationKind,
};

/// The delta in a few words: `added configmaps platform/ca-bundle`,
/// `requeue ...`, `updated ... (attempt 2, after conflict)`;
/// `subscription` is named when another subscription has the same kind.
pub fn describe(delta: &CallDelta, kinds: &KindRegistry, name_subscription: bool) -> String {
    let what = match delta.dtype {
        _ if delta.requeued => "requeue",
        DeltaType::Added if delta.initial => "added (initial)",
        DeltaType::Added => "added",
        DeltaType::Updated => "updated",
        DeltaType::Deleted if delta.final_state_unknown => "deleted (final state unknown)",
        DeltaType::Deleted => "deleted",
        DeltaType::Resync => "resync",
        DeltaType::Synced => "synced",
    };
    let resource = kinds
        .by_gvk(&delta.kind)
        .map_or_else(|| delta.kind.to_string(), |k| k.resource_name());
    let mut out = format!("{what} {resource}");
    if let Some(o) = &delta.object {
        out.push(' ');
        out.push_str(&o.key().to_string());
    }
    if name_subscription {
        out.push_str(&format!(" [subscription {}]", delta.subscription));
    }
    if delta.attempt > 1 {
        let after = match &delta.last_failure {
            Some(LastFailure::Retry(_)) => ", after retry",
            Some(LastFailure::Trapped(_)) => ", after a trap",
            Some(LastFailure::Conflict(_)) => ", after conflict",
            Some(LastFailure::ActionFailed(_)) => ", after a failed action",
            None => "",
        };
        out.push_str(&format!(" (attempt {}{after})", delta.attempt));
    }
    out
}

/// The entries of a call's actions: writes and Events apart, each in the
/// order emitted.
pub fn entries(actions: &[Action]) -> (Vec<ActionEntry>, Vec<EventEntry>) {
    let mut writes = Vec::new();
    let mut events = Vec::new();
    for a in actions {
        match a {
            Action::Apply {
                target,
                object,
                force,
                status,
            } => {
                let preconditions = preconditions(&target.preconditions);
                writes.push(if *status {
                    ActionEntry::ApplyStatus(ApplyStatus {
                        preconditions,
                        object: object.clone(),
                    })
                } else {
                    ActionEntry::Apply(Apply {
                        force: *force,
                        preconditions,
                        object: object.clone(),
                    })
                });
            }
            Action::Patch {
                target,
                patch_type,
                patch,
            } => writes.push(ActionEntry::Patch(Patch {
                target: target.to_string(),
                patch_type: match patch_type {
                    PatchType::Merge => PatchKind::Merge,
                    PatchType::Json => PatchKind::Json,
                },
                preconditions: preconditions(&target.preconditions),
                patch: patch.clone(),
            })),
            Action::Delete {
                target,
                propagation,
            } => writes.push(ActionEntry::Delete(Delete {
                target: target.to_string(),
                propagation: match propagation {
                    Propagation::Background => PropagationKind::Background,
                    Propagation::Foreground => PropagationKind::Foreground,
                    Propagation::Orphan => PropagationKind::Orphan,
                },
                preconditions: preconditions(&target.preconditions),
            })),
            Action::Event {
                regarding,
                event_type,
                reason,
                note,
                ..
            } => events.push(EventEntry {
                regarding: regarding.to_string(),
                regarding_uid: regarding.uid.clone(),
                event_type: match event_type {
                    EventType::Normal => EventKind::Normal,
                    EventType::Warning => EventKind::Warning,
                },
                reason: reason.clone(),
                note: note.clone(),
            }),
        }
    }
    (writes, events)
}

fn preconditions(p: &crate::actions::Preconditions) -> Preconditions {
    Preconditions {
        uid: p.uid.clone(),
        resource_version: p.resource_version.clone(),
    }
}

/// A failed call's result.
pub fn call_failed(e: &CallError) -> CallResult {
    match e {
        CallError::Retry(m) => CallResult::Retry(Some(m.clone())),
        CallError::Permanent(m) => CallResult::Permanent(Some(m.clone())),
        other => CallResult::Trapped(Some(other.to_string())),
    }
}

/// The result of a call whose actions failed.
pub fn actions_failed(f: &ActionFailure) -> CallResult {
    if f.error.is_conflict() {
        CallResult::Conflict(Some(f.to_string()))
    } else {
        CallResult::ActionFailed(Some(f.to_string()))
    }
}
