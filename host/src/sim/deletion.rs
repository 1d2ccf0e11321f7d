//! Deletion as the API server's registry does it: an object with
//! finalizers is marked (`deletionTimestamp`, a grace period of 0,
//! generation bumped where it has one) and stays until its last finalizer
//! is removed, which deletes it in that same write; no later write removes
//! the mark (the carried fields, `meta::carry`) or adds a finalizer (422).
//! A Pod bound to a node is deleted gracefully: marked with its grace
//! period (`terminationGracePeriodSeconds`, 30 by default) for the kubelet
//! to finish; an unscheduled or finished Pod goes at once.

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use super::Outcome;
use crate::actions::Propagation;
use crate::actions::executor::ActionError;

/// The garbage collector's finalizers (apimachinery's
/// `FinalizerOrphanDependents` and `FinalizerDeleteDependents`), added by a
/// delete with propagation `Orphan` or `Foreground`.
pub const ORPHAN: &str = "orphan";
pub const FOREGROUND: &str = "foregroundDeletion";

/// A Pod's grace period when its spec gives none.
const POD_GRACE_SECONDS: i64 = 30;

pub fn finalizers(v: &Value) -> Vec<&str> {
    v.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

pub fn is_terminating(v: &Value) -> bool {
    v.pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

/// Whether the write that produced `v` deletes it: the object is
/// terminating, its last finalizer is gone and no grace period runs (the
/// server then deletes it in the same request; a Pod in its grace period
/// waits for its kubelet).
pub fn finalized(v: &Value) -> bool {
    let grace = v
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    is_terminating(v) && finalizers(v).is_empty() && grace == 0
}

/// The server refuses new finalizers on an object being deleted (422, in
/// its words).
pub fn check_no_new_finalizers(
    what: &str,
    stored: &Value,
    next: &Value,
) -> Result<(), ActionError> {
    if !is_terminating(stored) {
        return Ok(());
    }
    let before = finalizers(stored);
    let added: Vec<&str> = finalizers(next)
        .into_iter()
        .filter(|f| !before.contains(f))
        .collect();
    if added.is_empty() {
        return Ok(());
    }
    let kind = next["kind"]
        .as_str()
        .or(stored["kind"].as_str())
        .unwrap_or("object");
    let name = stored
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Err(ActionError::Invalid(format!(
        "{what}: {kind} {name:?} is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?} (Invalid)"
    )))
}

/// The grace period a delete gives `stored` (0: none, it goes or waits for
/// finalizers only).
fn grace_seconds(stored: &Value) -> i64 {
    let pod = stored["apiVersion"] == "v1" && stored["kind"] == "Pod";
    if !pod {
        return 0;
    }
    let bound = stored
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let finished = matches!(
        stored.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    if !bound || finished {
        return 0;
    }
    stored
        .pointer("/spec/terminationGracePeriodSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(POD_GRACE_SECONDS)
        .max(0)
}

/// A delete of `stored` at `now`: gone, marked (finalizers or a grace
/// period hold it), or unchanged when it was already being deleted.
/// `collector`: whether a garbage collector runs to finish foreground and
/// orphan deletions (only then does the delete add its finalizer).
pub fn delete(
    now: SystemTime,
    collector: bool,
    stored: &Value,
    propagation: Propagation,
) -> Outcome {
    if is_terminating(stored) {
        return Outcome::Unchanged;
    }
    let mut list: Vec<String> = finalizers(stored).into_iter().map(str::to_owned).collect();
    let gc = match propagation {
        _ if !collector => None,
        Propagation::Background => None,
        Propagation::Foreground => Some(FOREGROUND),
        Propagation::Orphan => Some(ORPHAN),
    };
    if let Some(f) = gc
        && !list.iter().any(|x| x == f)
    {
        list.push(f.to_owned());
    }
    let grace = grace_seconds(stored);
    if list.is_empty() && grace == 0 {
        return Outcome::Gone(stored.clone());
    }
    let at = now + Duration::from_secs(grace.unsigned_abs());
    let mut next = stored.clone();
    let generation = stored
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    if let Some(meta) = next.get_mut("metadata").and_then(Value::as_object_mut) {
        if !list.is_empty() {
            meta.insert("finalizers".into(), json!(list));
        }
        meta.insert("deletionTimestamp".into(), json!(super::timestamp(at)));
        meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
        if let Some(g) = generation.filter(|g| *g > 0) {
            meta.insert("generation".into(), json!(g + 1));
        }
    }
    Outcome::Put(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: SystemTime = SystemTime::UNIX_EPOCH;

    fn cm(extra: Value) -> Value {
        let mut v = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "uid": "u", "generation": 2}});
        json_patch::merge(&mut v, &extra);
        v
    }

    #[test]
    fn finalizers_hold_a_delete_and_mark_the_object() {
        assert!(matches!(
            delete(T0, false, &cm(json!({})), Propagation::Background),
            Outcome::Gone(_)
        ));
        let held = cm(json!({"metadata": {"finalizers": ["example.com/f"]}}));
        let Outcome::Put(next) = delete(T0, false, &held, Propagation::Background) else {
            panic!("not marked");
        };
        assert_eq!(
            next["metadata"]["deletionTimestamp"],
            "1970-01-01T00:00:00Z"
        );
        assert_eq!(next["metadata"]["deletionGracePeriodSeconds"], 0);
        assert_eq!(next["metadata"]["generation"], 3);
        assert!(!finalized(&next));
        assert_eq!(
            delete(T0, false, &next, Propagation::Background),
            Outcome::Unchanged
        );
        let mut last = next.clone();
        last["metadata"]["finalizers"] = json!([]);
        assert!(finalized(&last));
    }

    #[test]
    fn propagation_adds_the_collectors_finalizer_only_where_one_runs() {
        for (p, f) in [
            (Propagation::Foreground, FOREGROUND),
            (Propagation::Orphan, ORPHAN),
        ] {
            let Outcome::Put(next) = delete(T0, true, &cm(json!({})), p) else {
                panic!("{p:?} not marked");
            };
            assert_eq!(finalizers(&next), [f]);
            assert!(matches!(
                delete(T0, false, &cm(json!({})), p),
                Outcome::Gone(_)
            ));
        }
    }

    #[test]
    fn a_pod_bound_to_a_node_is_deleted_gracefully() {
        let pod = |spec: Value| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "generation": 1}, "spec": spec});
        assert!(matches!(
            delete(T0, false, &pod(json!({})), Propagation::Background),
            Outcome::Gone(_)
        ));
        let Outcome::Put(next) = delete(
            T0,
            false,
            &pod(json!({"nodeName": "n"})),
            Propagation::Background,
        ) else {
            panic!("not graceful");
        };
        assert_eq!(next["metadata"]["deletionGracePeriodSeconds"], 30);
        assert_eq!(
            next["metadata"]["deletionTimestamp"],
            "1970-01-01T00:00:30Z"
        );
        assert_eq!(next["metadata"]["generation"], 2);
        assert!(!finalized(&next), "the kubelet finishes it");
    }

    #[test]
    fn no_finalizer_can_be_added_to_a_terminating_object() {
        let terminating = cm(
            json!({"metadata": {"finalizers": ["a"], "deletionTimestamp": "2026-01-02T00:00:00Z"}}),
        );
        let more = cm(json!({"metadata": {"finalizers": ["a", "b"]}}));
        let e = check_no_new_finalizers("patch", &terminating, &more).unwrap_err();
        assert!(
            matches!(&e, ActionError::Invalid(m) if m.contains("no new finalizers can be added if the object is being deleted") && m.contains("\"b\"")),
            "{e}"
        );
        assert!(check_no_new_finalizers("patch", &terminating, &cm(json!({}))).is_ok());
        assert!(check_no_new_finalizers("patch", &cm(json!({})), &more).is_ok());
    }
}
