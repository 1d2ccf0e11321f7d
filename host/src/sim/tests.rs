//! The write path end to end, one rule per test, with the answers a real
//! API server gave to the same requests (`tests/tests/sim_server.rs`).
#![allow(clippy::unwrap_used)]

use std::time::SystemTime;

use serde_json::{Value, json};

use super::*;
use crate::actions::{Preconditions, Propagation};
use crate::kind::{KindInfo, KindRef};

/// A write path's context with no collector and no validation, at the
/// epoch: what the rule files' tests share.
pub(super) fn ctx(kinds: &KindRegistry) -> Context<'_> {
    Context {
        kinds,
        now: SystemTime::UNIX_EPOCH,
        garbage_collector: false,
        validator: &NoValidation,
        manager: "kubewasm/actor",
    }
}

fn target(kinds: &KindRegistry, resource: &str, name: &str) -> Target {
    let kind: KindInfo = kinds.resolve(&KindRef::Resource(resource.into())).unwrap();
    Target::new(kind, Some("a".into()), name)
}

fn apply(t: Target, body: Value, status: bool) -> Action {
    let mut object = json!({"apiVersion": t.kind.gvk.api_version(), "kind": t.kind.gvk.kind,
        "metadata": {"name": t.name, "namespace": "a"}});
    json_patch::merge(&mut object, &body);
    Action::Apply {
        target: t,
        object,
        force: true,
        status,
    }
}

fn merge(t: Target, patch: Value) -> Action {
    Action::Patch {
        target: t,
        patch_type: PatchType::Merge,
        patch,
    }
}

/// Runs `action` over `stored`; the stored object after it (with a
/// resourceVersion of `rv`, as a storage would give it).
fn run(
    kinds: &KindRegistry,
    action: &Action,
    stored: Option<&Value>,
    rv: u64,
) -> Result<Option<Value>, ActionError> {
    let outcome = write(&ctx(kinds), action, stored, &mut || Ok("u-1".into()))?;
    Ok(match outcome {
        Outcome::Unchanged => stored.cloned(),
        Outcome::Put(mut v) => {
            v["metadata"]["resourceVersion"] = json!(rv.to_string());
            Some(v)
        }
        Outcome::Gone(_) => None,
    })
}

#[test]
fn bodies_carry_preconditions_and_never_overwrite_the_servers_fields() {
    let kinds = KindRegistry::builtin();
    let t = || target(&kinds, "configmaps", "c");
    let made = run(
        &kinds,
        &apply(t(), json!({"data": {"v": "0"}}), false),
        None,
        1,
    )
    .unwrap()
    .unwrap();
    assert_eq!(made["metadata"]["uid"], "u-1");
    assert!(
        made["metadata"].get("generation").is_none(),
        "a ConfigMap has none"
    );
    let stale = apply(
        t(),
        json!({"metadata": {"resourceVersion": "0"}, "data": {"v": "1"}}),
        false,
    );
    assert!(
        run(&kinds, &stale, Some(&made), 2)
            .unwrap_err()
            .is_conflict()
    );
    let other_uid = merge(t(), json!({"metadata": {"uid": "u-9"}, "data": {"v": "1"}}));
    assert!(matches!(
        run(&kinds, &other_uid, Some(&made), 2),
        Err(ActionError::Invalid(_))
    ));
    let current = merge(
        t(),
        json!({"metadata": {"uid": "u-1", "resourceVersion": "1"}, "data": {"v": "1"}}),
    );
    let next = run(&kinds, &current, Some(&made), 2).unwrap().unwrap();
    assert_eq!(next["data"]["v"], "1");
    assert_eq!(next["metadata"]["uid"], "u-1");
    // A plugin's uid precondition the sink put in the body: a conflict.
    let mut gone = t();
    gone.preconditions = Preconditions {
        uid: Some("u-0".into()),
        resource_version: None,
    };
    assert!(
        run(&kinds, &merge(gone, json!({})), Some(&next), 3)
            .unwrap_err()
            .is_conflict()
    );
    // Creating with a uid is refused; with a resourceVersion it creates.
    let with_uid = apply(
        target(&kinds, "configmaps", "n"),
        json!({"metadata": {"uid": "u-5"}}),
        false,
    );
    assert!(run(&kinds, &with_uid, None, 3).unwrap_err().is_conflict());
    let with_rv = apply(
        target(&kinds, "configmaps", "n"),
        json!({"metadata": {"resourceVersion": "5"}}),
        false,
    );
    assert!(run(&kinds, &with_rv, None, 3).unwrap().is_some());
    // A JSON patch's test and an added resourceVersion.
    let json = |ops: Value| Action::Patch {
        target: t(),
        patch_type: PatchType::Json,
        patch: ops,
    };
    let failed = json(json!([{"op": "test", "path": "/data/v", "value": "9"}]));
    assert!(
        run(&kinds, &failed, Some(&next), 3)
            .unwrap_err()
            .is_conflict()
    );
    let stale = json(json!([{"op": "add", "path": "/metadata/resourceVersion", "value": "1"}]));
    assert!(
        run(&kinds, &stale, Some(&next), 3)
            .unwrap_err()
            .is_conflict()
    );
}

#[test]
fn writes_that_change_nothing_store_nothing() {
    let kinds = KindRegistry::builtin();
    let t = || target(&kinds, "configmaps", "c");
    let made = run(
        &kinds,
        &apply(t(), json!({"data": {"v": "0"}}), false),
        None,
        1,
    )
    .unwrap()
    .unwrap();
    for action in [
        apply(t(), json!({"data": {"v": "0"}}), false),
        merge(t(), json!({"data": {"v": "0"}})),
        Action::Patch {
            target: t(),
            patch_type: PatchType::Json,
            patch: json!([{"op": "replace", "path": "/data/v", "value": "0"}]),
        },
    ] {
        assert_eq!(
            write(&ctx(&kinds), &action, Some(&made), &mut || Ok("x".into())).unwrap(),
            Outcome::Unchanged,
            "{action:?}"
        );
    }
}

#[test]
fn a_status_subresource_splits_the_writes() {
    let kinds = KindRegistry::builtin();
    let t = || target(&kinds, "deployments", "d");
    let made = run(
        &kinds,
        &apply(
            t(),
            json!({"spec": {"replicas": 1}, "status": {"replicas": 3}}),
            false,
        ),
        None,
        1,
    )
    .unwrap()
    .unwrap();
    assert!(made.get("status").is_none(), "{made}");
    assert_eq!(made["metadata"]["generation"], 1);
    // Through the resource: the status is the stored one, nothing changed.
    let main = merge(t(), json!({"status": {"replicas": 4}}));
    assert_eq!(
        write(&ctx(&kinds), &main, Some(&made), &mut || Ok("x".into())).unwrap(),
        Outcome::Unchanged
    );
    // Through the subresource: only the status.
    let status = apply(
        t(),
        json!({"spec": {"replicas": 9}, "status": {"replicas": 5}, "metadata": {"labels": {"a": "b"}}}),
        true,
    );
    let next = run(&kinds, &status, Some(&made), 2).unwrap().unwrap();
    assert_eq!(next["status"]["replicas"], 5);
    assert_eq!(next["spec"]["replicas"], 1);
    assert!(next["metadata"].get("labels").is_none());
    assert_eq!(next["metadata"]["generation"], 1);
    // A kind without one has no /status.
    let cm = apply(
        target(&kinds, "configmaps", "c"),
        json!({"status": {}}),
        true,
    );
    assert!(matches!(
        run(&kinds, &cm, Some(&json!({"metadata": {"name": "c"}})), 2),
        Err(ActionError::NotFound(_))
    ));
}

#[test]
fn a_terminating_object_keeps_its_mark_takes_no_new_finalizer_and_goes_with_its_last() {
    let kinds = KindRegistry::builtin();
    let t = || target(&kinds, "configmaps", "f");
    let made = run(
        &kinds,
        &apply(
            t(),
            json!({"metadata": {"finalizers": ["example.com/f"]}}),
            false,
        ),
        None,
        1,
    )
    .unwrap()
    .unwrap();
    let delete = Action::Delete {
        target: t(),
        propagation: Propagation::Background,
    };
    let marked = run(&kinds, &delete, Some(&made), 2).unwrap().unwrap();
    assert!(deletion::is_terminating(&marked));
    let undelete = merge(
        t(),
        json!({"metadata": {"deletionTimestamp": null}, "data": {"v": "1"}}),
    );
    let still = run(&kinds, &undelete, Some(&marked), 3).unwrap().unwrap();
    assert!(deletion::is_terminating(&still), "{still}");
    assert_eq!(still["data"]["v"], "1");
    let more = merge(
        t(),
        json!({"metadata": {"finalizers": ["example.com/f", "example.com/g"]}}),
    );
    assert!(matches!(
        run(&kinds, &more, Some(&still), 4),
        Err(ActionError::Invalid(_))
    ));
    assert_eq!(
        write(&ctx(&kinds), &delete, Some(&still), &mut || Ok("x".into())).unwrap(),
        Outcome::Unchanged
    );
    let last = merge(t(), json!({"metadata": {"finalizers": null}}));
    assert!(matches!(
        write(&ctx(&kinds), &last, Some(&still), &mut || Ok("x".into())).unwrap(),
        Outcome::Gone(_)
    ));
}

#[test]
fn the_validator_sees_every_change_and_its_refusal_is_the_answer() {
    struct Refuse;
    impl Validate for Refuse {
        fn validate(&self, check: &Check<'_>) -> Result<(), ActionError> {
            Err(ActionError::Invalid(format!("{}: refused", check.what)))
        }
    }
    let kinds = KindRegistry::builtin();
    let c = Context {
        validator: &Refuse,
        ..ctx(&kinds)
    };
    let a = apply(target(&kinds, "configmaps", "c"), json!({}), false);
    assert!(matches!(
        write(&c, &a, None, &mut || Ok("u".into())),
        Err(ActionError::Invalid(_))
    ));
}

#[test]
fn the_open_api_validator_refuses_what_the_server_refuses() {
    let kinds = KindRegistry::builtin();
    let c = Context {
        validator: &crate::sim::OpenApi,
        ..ctx(&kinds)
    };
    let t = target(&kinds, "configmaps", "c");
    // A number where the API has a string: the server's apply answers 500
    // (structured merge), which the sink reads as an invalid body.
    let typed = apply(t.clone(), json!({"data": {"v": 1}}), false);
    let e = write(&c, &typed, None, &mut || Ok("u".into())).unwrap_err();
    assert!(
        matches!(&e, ActionError::Invalid(m) if m.contains(".data.v") && m.contains("schema")),
        "{e:?}"
    );
    // An immutable ConfigMap's data may not change.
    let stored = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "a", "uid": "u", "resourceVersion": "1"},
        "immutable": true, "data": {"v": "1"}});
    let change = apply(t, json!({"data": {"v": "2"}}), false);
    let e = write(&c, &change, Some(&stored), &mut || Ok("u".into())).unwrap_err();
    assert!(
        matches!(&e, ActionError::Invalid(m) if m.contains("immutable")),
        "{e:?}"
    );
}

/// Server-side apply by `manager` of `body` over `stored` (a Pod or a
/// ConfigMap `c` in `a`): the stored object after it.
fn apply_by(
    kinds: &KindRegistry,
    manager: &str,
    resource: &str,
    body: Value,
    force: bool,
    stored: Option<&Value>,
) -> Result<Value, ActionError> {
    let mut a = apply(target(kinds, resource, "c"), body, false);
    if let Action::Apply { force: f, .. } = &mut a {
        *f = force;
    }
    let c = Context {
        manager,
        ..ctx(kinds)
    };
    Ok(match write(&c, &a, stored, &mut || Ok("u-1".into()))? {
        Outcome::Put(v) => v,
        Outcome::Unchanged => stored.cloned().unwrap(),
        Outcome::Gone(_) => panic!("gone"),
    })
}

/// The managers of `v` with their fieldsV1, by name.
fn owners(v: &Value) -> Vec<(String, String, Value)> {
    v["metadata"]["managedFields"]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|e| {
                    (
                        e["manager"].as_str().unwrap().to_string(),
                        e["operation"].as_str().unwrap().to_string(),
                        e["fieldsV1"].clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn an_applied_field_no_longer_applied_is_removed() {
    let kinds = KindRegistry::builtin();
    let me = "kubewasm/actor";
    let made = apply_by(
        &kinds,
        me,
        "configmaps",
        json!({"data": {"a": "1", "b": "2"}}),
        true,
        None,
    )
    .unwrap();
    assert_eq!(made["data"], json!({"a": "1", "b": "2"}));
    assert_eq!(
        owners(&made),
        [(
            me.into(),
            "Apply".into(),
            json!({"f:data": {"f:a": {}, "f:b": {}}})
        )]
    );
    let next = apply_by(
        &kinds,
        me,
        "configmaps",
        json!({"data": {"a": "1"}}),
        true,
        Some(&made),
    )
    .unwrap();
    assert_eq!(next["data"], json!({"a": "1"}));
    assert_eq!(
        owners(&next),
        [(me.into(), "Apply".into(), json!({"f:data": {"f:a": {}}}))]
    );
    // Nothing applied: the emptied map goes, as the server's Go type
    // drops it.
    let bare = apply_by(&kinds, me, "configmaps", json!({}), true, Some(&next)).unwrap();
    assert!(bare.get("data").is_none(), "{bare}");
    assert_eq!(bare["metadata"]["name"], "c");
}

#[test]
fn a_field_someone_else_set_stays() {
    let kinds = KindRegistry::builtin();
    let me = "kubewasm/actor";
    // A fixture's object: no managedFields, owned before the first apply.
    let fixture = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "a", "uid": "u-0", "resourceVersion": "1"},
        "data": {"x": "0"}});
    let first = apply_by(
        &kinds,
        me,
        "configmaps",
        json!({"data": {"a": "1"}}),
        true,
        Some(&fixture),
    )
    .unwrap();
    assert_eq!(first["data"], json!({"x": "0", "a": "1"}));
    let managers: Vec<String> = owners(&first).into_iter().map(|o| o.0).collect();
    assert_eq!(managers, [me, apply::BEFORE_FIRST_APPLY]);
    let second = apply_by(
        &kinds,
        me,
        "configmaps",
        json!({"data": {"b": "2"}}),
        true,
        Some(&first),
    )
    .unwrap();
    assert_eq!(second["data"], json!({"x": "0", "b": "2"}));
    // Another plugin's patch takes the field it changes: no longer
    // applying it leaves it.
    let patch = merge(
        target(&kinds, "configmaps", "c"),
        json!({"data": {"b": "3"}}),
    );
    let c = Context {
        manager: "kubewasm/other",
        ..ctx(&kinds)
    };
    let Outcome::Put(patched) = write(&c, &patch, Some(&second), &mut || Ok("x".into())).unwrap()
    else {
        panic!("the patch changes the object")
    };
    assert!(owners(&patched).contains(&(
        "kubewasm/other".into(),
        "Update".into(),
        json!({"f:data": {"f:b": {}}})
    )));
    let third = apply_by(
        &kinds,
        me,
        "configmaps",
        json!({"data": {"a": "4"}}),
        true,
        Some(&patched),
    )
    .unwrap();
    assert_eq!(third["data"], json!({"x": "0", "a": "4", "b": "3"}));
    // Another applier's field stays too.
    let theirs = apply_by(
        &kinds,
        "kubewasm/other",
        "configmaps",
        json!({"data": {"o": "1"}}),
        true,
        Some(&third),
    )
    .unwrap();
    let mine = apply_by(&kinds, me, "configmaps", json!({}), true, Some(&theirs)).unwrap();
    assert_eq!(mine["data"], json!({"x": "0", "b": "3", "o": "1"}));
}

#[test]
fn a_map_list_merges_by_key_and_an_atomic_list_is_replaced() {
    let kinds = KindRegistry::builtin();
    let me = "kubewasm/actor";
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "c", "namespace": "a", "uid": "u-0", "resourceVersion": "1"},
        "spec": {"containers": [{"name": "side", "image": "s", "args": ["x", "y"]}]}});
    let body = |image: &str, args: Value| {
        json!({"spec": {"containers": [
            {"name": "app", "image": image, "env": [{"name": "A", "value": "1"}]},
            {"name": "side", "args": args}]}})
    };
    let first = apply_by(
        &kinds,
        me,
        "pods",
        body("a:1", json!(["z"])),
        true,
        Some(&pod),
    )
    .unwrap();
    // The applied order where the config orders the elements (the
    // server's merge), the args list replaced whole.
    assert_eq!(
        first["spec"]["containers"],
        json!([{"name": "app", "image": "a:1", "env": [{"name": "A", "value": "1"}]},
               {"name": "side", "image": "s", "args": ["z"]}])
    );
    let (_, _, mine) = owners(&first).into_iter().find(|o| o.0 == me).unwrap();
    assert_eq!(
        mine["f:spec"]["f:containers"]["k:{\"name\":\"app\"}"],
        json!({".": {}, "f:env": {"k:{\"name\":\"A\"}": {".": {}, "f:name": {}, "f:value": {}}},
               "f:image": {}, "f:name": {}})
    );
    // The env list merges by name; the element no longer applied goes,
    // the one the fixture had stays (with the args this manager took).
    let next = apply_by(
        &kinds,
        me,
        "pods",
        json!({"spec": {"containers": [{"name": "side", "args": ["w"]}]}}),
        true,
        Some(&first),
    )
    .unwrap();
    assert_eq!(
        next["spec"]["containers"],
        json!([{"name": "side", "image": "s", "args": ["w"]}])
    );
}

#[test]
fn a_change_to_another_managers_field_conflicts_unless_forced() {
    let kinds = KindRegistry::builtin();
    let theirs = apply_by(
        &kinds,
        "kubewasm/other",
        "configmaps",
        json!({"data": {"a": "1"}}),
        true,
        None,
    )
    .unwrap();
    let e = apply_by(
        &kinds,
        "kubewasm/actor",
        "configmaps",
        json!({"data": {"a": "2"}}),
        false,
        Some(&theirs),
    )
    .unwrap_err();
    assert!(
        matches!(&e, ActionError::Conflict(m) if m.contains("kubewasm/other") && m.contains(".data.a")),
        "{e:?}"
    );
    // A fixture's field, owned by before-first-apply (an updater).
    let fixture = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "a", "uid": "u-0", "resourceVersion": "1"},
        "data": {"x": "0"}});
    let e = apply_by(
        &kinds,
        "kubewasm/actor",
        "configmaps",
        json!({"data": {"x": "1"}}),
        false,
        Some(&fixture),
    )
    .unwrap_err();
    assert_eq!(
        e,
        ActionError::Conflict(
            "patch configmaps a/c: Apply failed with 1 conflict: conflict with \"before-first-apply\" using v1: .data.x (Conflict)".into()
        )
    );
    // The same value is no conflict: both own it.
    let shared = apply_by(
        &kinds,
        "kubewasm/actor",
        "configmaps",
        json!({"data": {"a": "1"}}),
        false,
        Some(&theirs),
    )
    .unwrap();
    assert_eq!(owners(&shared).len(), 2);
    // Forced, the field changes hands.
    let taken = apply_by(
        &kinds,
        "kubewasm/actor",
        "configmaps",
        json!({"data": {"a": "2"}}),
        true,
        Some(&theirs),
    )
    .unwrap();
    assert_eq!(taken["data"]["a"], "2");
    assert_eq!(
        owners(&taken),
        [(
            "kubewasm/actor".into(),
            "Apply".into(),
            json!({"f:data": {"f:a": {}}})
        )]
    );
}

#[test]
fn a_status_apply_owns_only_the_status_and_gives_up_what_it_no_longer_applies() {
    let kinds = KindRegistry::builtin();
    let t = || target(&kinds, "deployments", "d");
    let made = run(
        &kinds,
        &apply(t(), json!({"spec": {"replicas": 1}}), false),
        None,
        1,
    )
    .unwrap()
    .unwrap();
    let status = |body: Value| apply(t(), body, true);
    let first = run(
        &kinds,
        &status(json!({"spec": {"replicas": 9}, "status": {"replicas": 1, "readyReplicas": 1}})),
        Some(&made),
        2,
    )
    .unwrap()
    .unwrap();
    assert_eq!(first["status"], json!({"replicas": 1, "readyReplicas": 1}));
    assert_eq!(first["spec"]["replicas"], 1);
    let entry = first["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["subresource"] == "status")
        .unwrap();
    assert_eq!(
        entry["fieldsV1"],
        json!({"f:status": {"f:readyReplicas": {}, "f:replicas": {}}})
    );
    let next = run(
        &kinds,
        &status(json!({"status": {"replicas": 2}})),
        Some(&first),
        3,
    )
    .unwrap()
    .unwrap();
    assert_eq!(next["status"], json!({"replicas": 2}));
    assert_eq!(next["spec"]["replicas"], 1);
}

#[test]
fn a_custom_resource_merges_by_its_crds_schema() {
    let kinds = KindRegistry::builtin();
    kinds.learn_crd(
        &json!({"spec": {"group": "example.com", "scope": "Namespaced",
        "names": {"kind": "Widget", "plural": "widgets"},
        "versions": [{"name": "v1", "served": true, "storage": true,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {
                    "rules": {"type": "array", "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["id"],
                        "items": {"type": "object", "properties": {"id": {"type": "string"}}}},
                    "tags": {"type": "array", "items": {"type": "string"}}}}}}}}]}}),
    );
    let stored = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "c", "namespace": "a", "uid": "u-0", "resourceVersion": "1", "generation": 1},
        "spec": {"rules": [{"id": "z"}], "tags": ["t"]}});
    let next = apply_by(
        &kinds,
        "kubewasm/actor",
        "widgets",
        json!({"spec": {"rules": [{"id": "a"}], "tags": ["u"]}}),
        true,
        Some(&stored),
    )
    .unwrap();
    // The map list keeps the fixture's element; the unmarked list is
    // atomic.
    assert_eq!(
        next["spec"],
        json!({"rules": [{"id": "z"}, {"id": "a"}], "tags": ["u"]})
    );
}
