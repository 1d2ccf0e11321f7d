//! The local cluster's own object rules, beside the simulated API
//! server's write path ([`crate::sim`], which answers the plugins'
//! actions, and [`crate::sim::gc`], its garbage collector): manifests
//! read as objects (a manifest's uid kept) and the fields a manifest edit
//! cannot change. Pure functions over JSON values, so every rule is
//! tested here, apart from the files and the watchers.

use serde_json::{Value, json};

use crate::kind::Gvk;
pub(super) use crate::sim::deletion::finalized;

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

fn meta_mut(v: &mut Value) -> Option<&mut serde_json::Map<String, Value>> {
    if !v.get("metadata").is_some_and(Value::is_object) {
        v.as_object_mut()?.insert("metadata".into(), json!({}));
    }
    v.get_mut("metadata")?.as_object_mut()
}

/// The kind of a stored object.
fn gvk_of(v: &Value) -> Gvk {
    Gvk::from_api_version(
        v["apiVersion"].as_str().unwrap_or_default(),
        v["kind"].as_str().unwrap_or_default(),
    )
}

/// Makes `next`, an edit's or the garbage collector's write over
/// `stored`, what the server would store: the fields it owns carried over
/// ([`crate::sim::meta::carry`]; status changes never count as spec
/// changes here, where a manifest is the only way to write a status). The
/// resourceVersion is the writer's to set.
pub(super) fn carry_system_fields(stored: &Value, next: &mut Value) {
    crate::sim::meta::carry(&gvk_of(stored), stored, next, true);
}

/// Makes `v` a new object: `uid` unless the manifest gives one (the folder
/// is the cluster's storage: a file the cluster wrote keeps its objects'
/// uids across restarts), a creationTimestamp (the manifest's if any),
/// generation 1 unless given, for kinds that have one. A deletionTimestamp
/// is kept only with finalizers to wait for (the server never stores one
/// without).
pub(super) fn create(v: &mut Value, uid: impl FnOnce() -> String) {
    let nothing_to_wait_for = finalized(v);
    let has_generation = crate::sim::meta::has_generation(&gvk_of(v));
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
    if has_generation && !meta.get("generation").is_some_and(Value::is_i64) {
        meta.insert("generation".into(), json!(1));
    }
    if nothing_to_wait_for {
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::deletion::is_terminating;

    fn cm(extra: Value) -> Value {
        let mut v = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "d", "uid": "u-1", "resourceVersion": "7",
                "generation": 2, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "data": {"k": "v"}});
        json_patch::merge(&mut v, &extra);
        v
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
        // A custom resource: every one has a generation.
        let stored =
            cm(json!({"apiVersion": "example.com/v1", "kind": "Widget", "spec": {"replicas": 1}}));
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
}
