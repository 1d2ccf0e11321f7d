//! What the API server does to an object's metadata on each write, for
//! the local cluster: uids, generation and timestamps, deletion with
//! finalizers, preconditions, and the owner references its garbage
//! collector follows. Pure functions over JSON values, so every rule is
//! tested here, apart from the files and the watchers.

use serde_json::{Value, json};

use crate::actions::executor::ActionError;
use crate::actions::{Propagation, Target};

/// Metadata the cluster owns: a manifest or a plugin cannot change them
/// on an existing object (they are carried from the stored state, and
/// ignored when comparing a file with it).
pub(super) const SYSTEM_FIELDS: [&str; 7] = [
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "managedFields",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// The garbage collector's finalizers (apimachinery's
/// `FinalizerOrphanDependents` and `FinalizerDeleteDependents`), added by a
/// delete with propagation `Orphan` or `Foreground`.
pub(super) const ORPHAN: &str = "orphan";
pub(super) const FOREGROUND: &str = "foregroundDeletion";

/// The object without the fields the cluster owns.
pub(super) fn user_view(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in SYSTEM_FIELDS {
            meta.remove(f);
        }
    }
    v
}

pub(super) fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// A fresh uid: an RFC 9562 version 4 (random) UUID, as the API server
/// gives every new object. Never derived from the name, so an object
/// deleted and created again under its name is another object, and a uid
/// precondition taken from the old one fails. (getrandom is already the
/// host's randomness source; the uuid crate would add a dependency for
/// these few lines.)
pub(super) fn new_uid() -> Result<String, getrandom::Error> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b)?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let x: String = b.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &x[0..8],
        &x[8..12],
        &x[12..16],
        &x[16..20],
        &x[20..32]
    ))
}

fn meta_str<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get("metadata")?.get(field)?.as_str()
}

pub(super) fn uid(v: &Value) -> Option<&str> {
    meta_str(v, "uid").filter(|u| !u.is_empty())
}

pub(super) fn finalizers(v: &Value) -> Vec<&str> {
    v.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

pub(super) fn is_terminating(v: &Value) -> bool {
    v.pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

/// Whether the write that produced `v` deletes it: the object is
/// terminating and its last finalizer is gone (the server then deletes it
/// in the same request).
pub(super) fn finalized(v: &Value) -> bool {
    is_terminating(v) && finalizers(v).is_empty()
}

fn meta_mut(v: &mut Value) -> Option<&mut serde_json::Map<String, Value>> {
    if !v.get("metadata").is_some_and(Value::is_object) {
        v.as_object_mut()?.insert("metadata".into(), json!({}));
    }
    v.get_mut("metadata")?.as_object_mut()
}

/// Whether `generation` counts a change from `old` to `new`: anything
/// outside `metadata` and `status` (the rule for custom resources; for the
/// built-in kinds with a spec it is the spec).
fn spec_changed(old: &Value, new: &Value) -> bool {
    fn rest(v: &Value) -> Option<Vec<(&String, &Value)>> {
        v.as_object().map(|m| {
            m.iter()
                .filter(|(k, _)| *k != "metadata" && *k != "status")
                .collect()
        })
    }
    rest(old) != rest(new)
}

/// Makes `next`, a write's result over `stored`, what the server would
/// store: the fields it owns carried over (uid, creationTimestamp,
/// deletionTimestamp and its grace period: a write cannot change them),
/// and generation bumped when the spec changed. The resourceVersion is the
/// writer's to set.
pub(super) fn carry_system_fields(stored: &Value, next: &mut Value) {
    let generation = stored
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1)
        + i64::from(spec_changed(stored, next));
    let Some(meta) = meta_mut(next) else {
        return;
    };
    for f in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "resourceVersion",
    ] {
        match stored.get("metadata").and_then(|m| m.get(f)) {
            Some(v) => meta.insert(f.into(), v.clone()),
            None => meta.remove(f),
        };
    }
    meta.insert("generation".into(), json!(generation));
}

/// Makes `v` a new object: `uid` unless the manifest gives one (the folder
/// is the cluster's storage: a file the cluster wrote keeps its objects'
/// uids across restarts), a creationTimestamp (the manifest's if any),
/// generation 1 unless given. A deletionTimestamp is kept only with
/// finalizers to wait for (the server never stores one without).
pub(super) fn create(v: &mut Value, uid: impl FnOnce() -> String) {
    let nothing_to_wait_for = finalized(v);
    let Some(meta) = meta_mut(v) else {
        return;
    };
    if !meta
        .get("uid")
        .and_then(Value::as_str)
        .is_some_and(|u| !u.is_empty())
    {
        meta.insert("uid".into(), json!(uid()));
    }
    if !meta.get("creationTimestamp").is_some_and(Value::is_string) {
        meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
    }
    if !meta.get("generation").is_some_and(Value::is_i64) {
        meta.insert("generation".into(), json!(1));
    }
    if nothing_to_wait_for {
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
    }
}

/// Enforces a write's preconditions as the API server does: a uid or
/// resourceVersion that differs from the stored object's is a conflict
/// (the server's 409, with its wording).
pub(crate) fn check_preconditions(
    target: &Target,
    stored: Option<&Value>,
) -> Result<(), ActionError> {
    let p = &target.preconditions;
    if p.is_empty() {
        return Ok(());
    }
    let Some(stored) = stored else {
        return Err(ActionError::Conflict(format!(
            "{target}: Precondition failed: the object does not exist"
        )));
    };
    check(
        target,
        stored,
        p.uid.as_deref(),
        p.resource_version.as_deref(),
    )
}

fn check(
    target: &Target,
    stored: &Value,
    uid: Option<&str>,
    resource_version: Option<&str>,
) -> Result<(), ActionError> {
    let meta = |f: &str| meta_str(stored, f).unwrap_or("");
    if let Some(uid) = uid
        && uid != meta("uid")
    {
        return Err(ActionError::Conflict(format!(
            "{target}: Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
            meta("uid")
        )));
    }
    if let Some(rv) = resource_version
        && rv != meta("resourceVersion")
    {
        return Err(ActionError::Conflict(format!(
            "{target}: the object has been modified; please apply your changes to the latest version and try again (resourceVersion in precondition: {rv}, in object meta: {})",
            meta("resourceVersion")
        )));
    }
    Ok(())
}

/// The preconditions a write carries in its own body: a uid or
/// resourceVersion in an applied object, a merge patch or the result of a
/// JSON patch that differs from the stored one fails as the server fails
/// it (409), before anything is written.
pub(super) fn check_body(target: &Target, stored: &Value, next: &Value) -> Result<(), ActionError> {
    check(
        target,
        stored,
        meta_str(next, "uid").filter(|u| !u.is_empty()),
        meta_str(next, "resourceVersion").filter(|r| !r.is_empty()),
    )
}

/// The server refuses new finalizers on an object being deleted (422).
pub(super) fn check_no_new_finalizers(
    what: &dyn std::fmt::Display,
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
        Ok(())
    } else {
        Err(ActionError::Invalid(format!(
            "{what}: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
        )))
    }
}

/// What a delete does to an object.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Deletion {
    /// No finalizer holds it: it goes now.
    Gone,
    /// Finalizers hold it: its new state, with a deletionTimestamp (and a
    /// grace period of 0, generation bumped), an update to its watchers.
    Terminating(Value),
    /// It was already being deleted: nothing changes, as on the server.
    AlreadyTerminating,
}

/// A delete of `stored` as the server's registry does it
/// (`markAsDeleting`): propagation `Foreground` or `Orphan` adds the
/// garbage collector's finalizer, and any finalizer makes the object
/// terminate instead of going.
pub(super) fn delete(stored: &Value, propagation: Propagation) -> Deletion {
    if is_terminating(stored) {
        return Deletion::AlreadyTerminating;
    }
    let mut next = stored.clone();
    let gc = match propagation {
        Propagation::Background => None,
        Propagation::Foreground => Some(FOREGROUND),
        Propagation::Orphan => Some(ORPHAN),
    };
    let mut list: Vec<String> = finalizers(stored).into_iter().map(str::to_owned).collect();
    if let Some(f) = gc
        && !list.iter().any(|x| x == f)
    {
        list.push(f.to_owned());
    }
    if list.is_empty() {
        return Deletion::Gone;
    }
    let generation = stored
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    if let Some(meta) = meta_mut(&mut next) {
        meta.insert("finalizers".into(), json!(list));
        meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
        meta.insert("deletionGracePeriodSeconds".into(), json!(0));
        if let Some(g) = generation.filter(|g| *g > 0) {
            meta.insert("generation".into(), json!(g + 1));
        }
    }
    Deletion::Terminating(next)
}

/// `v` without `finalizer`.
pub(super) fn without_finalizer(v: &Value, finalizer: &str) -> Value {
    let mut next = v.clone();
    if let Some(list) = next
        .pointer_mut("/metadata/finalizers")
        .and_then(Value::as_array_mut)
    {
        list.retain(|f| f.as_str() != Some(finalizer));
    }
    next
}

/// The uids of `v`'s owners, each with whether it blocks the owner's
/// foreground deletion (`blockOwnerDeletion`).
pub(super) fn owners(v: &Value) -> Vec<(String, bool)> {
    v.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| {
                    let uid = r.get("uid")?.as_str()?.to_owned();
                    let block = r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true);
                    Some((uid, block))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `v` without its owner references to `owner_uid` (the field removed when
/// none is left, as the garbage collector's patch leaves it).
pub(super) fn without_owner(v: &Value, owner_uid: &str) -> Value {
    let mut next = v.clone();
    if let Some(meta) = next.get_mut("metadata").and_then(Value::as_object_mut) {
        let empty = match meta
            .get_mut("ownerReferences")
            .and_then(Value::as_array_mut)
        {
            Some(refs) => {
                refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid));
                refs.is_empty()
            }
            None => false,
        };
        if empty {
            meta.remove("ownerReferences");
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::Preconditions;
    use crate::kind::{KindRef, KindRegistry};

    fn cm(extra: Value) -> Value {
        let mut v = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "d", "uid": "u-1", "resourceVersion": "7",
                "generation": 2, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "data": {"k": "v"}});
        json_patch::merge(&mut v, &extra);
        v
    }

    fn target(uid: Option<&str>, rv: Option<&str>) -> Target {
        let kind = KindRegistry::builtin()
            .resolve(&KindRef::Resource("configmaps".into()))
            .unwrap();
        let mut t = Target::new(kind, Some("d".into()), "c");
        t.preconditions = Preconditions {
            uid: uid.map(str::to_owned),
            resource_version: rv.map(str::to_owned),
        };
        t
    }

    #[test]
    fn uids_are_random_version_4_uuids() {
        let a = new_uid().unwrap();
        let b = new_uid().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4", "{a}");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "{a}");
    }

    #[test]
    fn creation_keeps_a_manifests_uid_and_assigns_one_otherwise() {
        let mut given = json!({"metadata": {"name": "c", "uid": "from-file"}});
        create(&mut given, || "fresh".into());
        assert_eq!(given["metadata"]["uid"], "from-file");
        assert_eq!(given["metadata"]["generation"], 1);
        assert!(given["metadata"]["creationTimestamp"].is_string());
        let mut bare = json!({"metadata": {"name": "c"}});
        create(&mut bare, || "fresh".into());
        assert_eq!(bare["metadata"]["uid"], "fresh");
        // A deletionTimestamp with nothing to wait for is dropped.
        let mut stale =
            json!({"metadata": {"name": "c", "deletionTimestamp": "2026-01-01T00:00:00Z"}});
        create(&mut stale, || "fresh".into());
        assert!(stale["metadata"].get("deletionTimestamp").is_none());
        let mut held = json!({"metadata": {"name": "c", "finalizers": ["f"], "deletionTimestamp": "2026-01-01T00:00:00Z"}});
        create(&mut held, || "fresh".into());
        assert!(is_terminating(&held));
    }

    #[test]
    fn generation_counts_spec_changes_only() {
        let stored = cm(json!({"spec": {"replicas": 1}}));
        let bump = |change: Value| {
            let mut next = stored.clone();
            json_patch::merge(&mut next, &change);
            carry_system_fields(&stored, &mut next);
            next["metadata"]["generation"].as_i64().unwrap()
        };
        assert_eq!(bump(json!({"spec": {"replicas": 2}})), 3);
        assert_eq!(
            bump(json!({"data": {"k": "w"}})),
            3,
            "any field outside metadata and status"
        );
        assert_eq!(bump(json!({"metadata": {"labels": {"a": "b"}}})), 2);
        assert_eq!(bump(json!({"status": {"phase": "Ready"}})), 2);
    }

    #[test]
    fn a_write_cannot_change_what_the_server_owns() {
        let stored = cm(
            json!({"metadata": {"finalizers": ["f"], "deletionTimestamp": "2026-01-02T00:00:00Z", "deletionGracePeriodSeconds": 0}}),
        );
        let mut next = stored.clone();
        json_patch::merge(
            &mut next,
            &json!({"metadata": {"uid": "other", "creationTimestamp": null, "deletionTimestamp": null, "generation": 40}}),
        );
        carry_system_fields(&stored, &mut next);
        for f in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            assert_eq!(next["metadata"][f], stored["metadata"][f], "{f}");
        }
    }

    #[test]
    fn deleting_with_finalizers_marks_the_object_terminating() {
        assert_eq!(
            delete(&cm(json!({})), Propagation::Background),
            Deletion::Gone
        );
        let held = cm(json!({"metadata": {"finalizers": ["example.com/f"]}}));
        let Deletion::Terminating(next) = delete(&held, Propagation::Background) else {
            panic!("not terminating");
        };
        assert!(is_terminating(&next));
        assert_eq!(next["metadata"]["deletionGracePeriodSeconds"], 0);
        assert_eq!(next["metadata"]["generation"], 3, "markAsDeleting bumps it");
        assert_eq!(finalizers(&next), ["example.com/f"]);
        assert!(!finalized(&next));
        assert_eq!(
            delete(&next, Propagation::Background),
            Deletion::AlreadyTerminating
        );
        assert!(finalized(&without_finalizer(&next, "example.com/f")));
        // Foreground and orphan deletions wait for the garbage collector.
        for (p, f) in [
            (Propagation::Foreground, FOREGROUND),
            (Propagation::Orphan, ORPHAN),
        ] {
            let Deletion::Terminating(next) = delete(&cm(json!({})), p) else {
                panic!("{p:?} not terminating");
            };
            assert_eq!(finalizers(&next), [f]);
        }
    }

    #[test]
    fn preconditions_in_options_and_in_the_body_are_checked() {
        let stored = cm(json!({}));
        assert!(check_preconditions(&target(Some("u-1"), Some("7")), Some(&stored)).is_ok());
        let e = check_preconditions(&target(Some("u-0"), None), Some(&stored)).unwrap_err();
        assert!(
            matches!(&e, ActionError::Conflict(m) if m.contains("UID in precondition: u-0, UID in object meta: u-1")),
            "{e}"
        );
        let e = check_preconditions(&target(None, Some("6")), Some(&stored)).unwrap_err();
        assert!(e.is_conflict(), "{e}");
        assert!(
            check_preconditions(&target(Some("u-1"), None), None)
                .unwrap_err()
                .is_conflict()
        );
        let t = target(None, None);
        assert!(
            check_body(
                &t,
                &stored,
                &cm(json!({"metadata": {"resourceVersion": "6"}}))
            )
            .unwrap_err()
            .is_conflict()
        );
        assert!(
            check_body(&t, &stored, &cm(json!({"metadata": {"uid": "u-2"}})))
                .unwrap_err()
                .is_conflict()
        );
        assert!(check_body(&t, &stored, &json!({"metadata": {}})).is_ok());
    }

    #[test]
    fn no_finalizer_can_be_added_to_a_terminating_object() {
        let t = target(None, None);
        let terminating = cm(
            json!({"metadata": {"finalizers": ["a"], "deletionTimestamp": "2026-01-02T00:00:00Z"}}),
        );
        let more = cm(json!({"metadata": {"finalizers": ["a", "b"]}}));
        let e = check_no_new_finalizers(&t, &terminating, &more).unwrap_err();
        assert!(
            matches!(&e, ActionError::Invalid(m) if m.contains("\"b\"")),
            "{e}"
        );
        assert!(check_no_new_finalizers(&t, &terminating, &cm(json!({}))).is_ok());
        assert!(check_no_new_finalizers(&t, &cm(json!({})), &more).is_ok());
    }

    #[test]
    fn owner_references_are_read_and_dropped_by_uid() {
        let v = json!({"metadata": {"ownerReferences": [
            {"uid": "a", "blockOwnerDeletion": true}, {"uid": "b"}]}});
        assert_eq!(
            owners(&v),
            [("a".to_owned(), true), ("b".to_owned(), false)]
        );
        let one = without_owner(&v, "a");
        assert_eq!(owners(&one), [("b".to_owned(), false)]);
        assert!(
            without_owner(&one, "b")["metadata"]
                .get("ownerReferences")
                .is_none()
        );
    }
}
