//! The simulated cluster's storage, dry runs, collector and failure rules.

#![allow(clippy::unwrap_used)]
use super::*;
use crate::actions::{PatchType, Preconditions};

fn cluster() -> Arc<SimCluster> {
    SimCluster::new(
        KindRegistry::builtin(),
        Harness::new(std::time::SystemTime::UNIX_EPOCH, 1),
        Duration::from_secs(10),
    )
}

fn target(c: &SimCluster, name: &str) -> Target {
    let kind = c
        .kinds
        .resolve(&crate::kind::KindRef::Resource("configmaps".into()))
        .unwrap();
    Target::new(kind, Some("a".into()), name)
}

async fn run(c: &SimCluster, a: &Action) -> Result<(), ActionError> {
    c.begin_call(std::slice::from_ref(a));
    c.execute("p", a).await
}

/// A dry-run cluster answers as it would (preconditions, not found)
/// and keeps what it holds.
#[tokio::test]
async fn a_dry_run_answers_actions_without_applying_them() {
    let c = cluster();
    c.set_dry_run(true);
    let (id, stored) = c
        .put(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": "a"}, "data": {"k": "1"}}))
        .unwrap();
    let apply = |name: &str, v: &str| Action::Apply {
        target: target(&c, name),
        object: json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "a"}, "data": {"k": v}}),
        force: true,
        status: false,
    };
    run(&c, &apply("x", "2")).await.unwrap();
    run(&c, &apply("new", "1")).await.unwrap();
    let patch = Action::Patch {
        target: target(&c, "missing"),
        patch_type: PatchType::Merge,
        patch: json!({"data": {"k": "2"}}),
    };
    assert!(matches!(
        run(&c, &patch).await,
        Err(ActionError::NotFound(_))
    ));
    let mut stale = target(&c, "x");
    stale.preconditions = Preconditions {
        uid: Some("another".into()),
        resource_version: None,
    };
    let delete = Action::Delete {
        target: stale,
        propagation: crate::actions::Propagation::Background,
    };
    assert!(matches!(
        run(&c, &delete).await,
        Err(ActionError::Conflict(_))
    ));
    assert_eq!(c.get(&id), Some(stored.clone()));
    assert_eq!(c.objects().len(), 1);
    // Within one call, an action sees the earlier ones (a dry run of
    // the call); the next call starts from the cluster again.
    let patch_new = Action::Patch {
        target: target(&c, "new"),
        patch_type: PatchType::Merge,
        patch: json!({"data": {"k": "2"}}),
    };
    let call = [apply("new", "1"), patch_new.clone()];
    c.begin_call(&call);
    for a in &call {
        c.execute("p", a).await.unwrap();
    }
    assert!(matches!(
        run(&c, &patch_new).await,
        Err(ActionError::NotFound(_))
    ));
    assert_eq!(c.get(&id), Some(stored));
    assert!(c.take_changes().is_empty(), "a dry run echoes nothing");
    c.set_dry_run(false);
    run(&c, &apply("new", "1")).await.unwrap();
    assert_eq!(c.objects().len(), 2);
}

#[tokio::test]
async fn writes_keep_the_servers_bookkeeping_and_finalizers_hold_a_delete() {
    let c = cluster();
    let (id, stored) = c
        .put(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": "a", "finalizers": ["example.com/f"]}, "data": {"k": "1"}}))
        .unwrap();
    let uid = stored["metadata"]["uid"].as_str().unwrap().to_owned();
    assert_eq!(stored["metadata"]["resourceVersion"], "1");
    let patch = Action::Patch {
        target: target(&c, "x"),
        patch_type: PatchType::Merge,
        patch: json!({"data": {"k": "2"}}),
    };
    run(&c, &patch).await.unwrap();
    let now = c.get(&id).unwrap();
    assert_eq!(now["data"]["k"], "2");
    assert_eq!(now["metadata"]["resourceVersion"], "2");
    assert_eq!(now["metadata"]["uid"], uid.as_str());

    let mut stale = target(&c, "x");
    stale.preconditions = Preconditions {
        uid: None,
        resource_version: Some("1".into()),
    };
    let err = run(
        &c,
        &Action::Delete {
            target: stale,
            propagation: crate::actions::Propagation::Background,
        },
    )
    .await
    .unwrap_err();
    assert!(err.is_conflict(), "{err}");

    let delete = Action::Delete {
        target: target(&c, "x"),
        propagation: crate::actions::Propagation::Background,
    };
    run(&c, &delete).await.unwrap();
    let held = c.get(&id).unwrap();
    assert!(held["metadata"]["deletionTimestamp"].is_string(), "{held}");
    // The last finalizer goes: so does the object; recreated, it has
    // another uid.
    let drop_finalizer = Action::Patch {
        target: target(&c, "x"),
        patch_type: PatchType::Merge,
        patch: json!({"metadata": {"finalizers": null}}),
    };
    run(&c, &drop_finalizer).await.unwrap();
    assert!(c.get(&id).is_none());
    let (_, again) = c
        .put(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "a"}}))
        .unwrap();
    assert_ne!(again["metadata"]["uid"], uid.as_str());
}

/// The collector after an owner's delete: background (dependents with
/// no other owner deleted, the others let go of it; an owner the
/// cluster never held counts as live), foreground (the owner waits
/// for a blocking dependent's own finalizer) and orphan (dependents
/// let go). Its writes are echoed as the plugin's own are.
#[tokio::test]
async fn the_garbage_collector_follows_owner_references() {
    let c = cluster();
    let put = |name: &str, owners: &[(&Value, bool)], finalizers: Value| {
        let refs: Vec<Value> = owners
            .iter()
            .map(|(o, block)| {
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                "name": o["metadata"]["name"], "uid": o["metadata"]["uid"],
                "blockOwnerDeletion": block})
            })
            .collect();
        c.put(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "a", "ownerReferences": refs,
                "finalizers": finalizers}}))
            .unwrap()
    };
    let none = json!([]);
    let ghost = json!({"metadata": {"name": "ghost", "uid": "never-held"}});
    let (_, owner) = put("owner", &[], none.clone());
    let (_, other) = put("other", &[], none.clone());
    let (only, _) = put("only", &[(&owner, false)], none.clone());
    let (shared, _) = put("shared", &[(&owner, false), (&other, false)], none.clone());
    let (unseen, _) = put("unseen", &[(&owner, false), (&ghost, false)], none.clone());
    let delete = |name: &str, propagation| Action::Delete {
        target: target(&c, name),
        propagation,
    };
    use crate::actions::Propagation::{Background, Foreground, Orphan};
    run(&c, &delete("owner", Background)).await.unwrap();
    assert!(
        c.get(&only).is_none(),
        "a dependent with no owner left goes"
    );
    let refs = |id: &Id| -> Vec<String> {
        c.get(id).unwrap()["metadata"]["ownerReferences"]
            .as_array()
            .map(|r| {
                r.iter()
                    .map(|r| r["name"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(refs(&shared), ["other"]);
    assert_eq!(refs(&unseen), ["ghost"]);
    let echoed: Vec<(String, bool)> = c
        .take_changes()
        .into_iter()
        .map(|ch| (ch.id.1.name.to_string(), ch.deleted))
        .collect();
    assert_eq!(
        echoed,
        [
            ("owner".to_owned(), true),
            ("only".to_owned(), true),
            ("shared".to_owned(), false),
            ("unseen".to_owned(), false)
        ]
    );

    let (owner_id, owner) = put("fg", &[], none.clone());
    let (held, _) = put("held", &[(&owner, true)], json!(["example.com/f"]));
    let (free, _) = put("free", &[(&owner, false)], none.clone());
    run(&c, &delete("fg", Foreground)).await.unwrap();
    assert!(c.get(&free).is_none());
    let waiting = c.get(&owner_id).unwrap();
    assert_eq!(
        waiting["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    assert!(c.get(&held).unwrap()["metadata"]["deletionTimestamp"].is_string());
    let release = Action::Patch {
        target: target(&c, "held"),
        patch_type: PatchType::Merge,
        patch: json!({"metadata": {"finalizers": null}}),
    };
    run(&c, &release).await.unwrap();
    assert!(c.get(&held).is_none());
    assert!(
        c.get(&owner_id).is_none(),
        "the owner went once nothing blocked it"
    );

    let (orphaner, owner) = put("orphaner", &[], none.clone());
    let (kept, _) = put("kept", &[(&owner, true)], none);
    run(&c, &delete("orphaner", Orphan)).await.unwrap();
    assert!(c.get(&orphaner).is_none());
    assert!(
        c.get(&kept).unwrap()["metadata"]
            .get("ownerReferences")
            .is_none()
    );
}

#[tokio::test]
async fn failures_match_by_position_verb_and_target_and_run_out() {
    let c = cluster();
    let apply = |name: &str| Action::Apply {
        target: target(&c, name),
        object: json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "a"}}),
        force: true,
        status: false,
    };
    let (one, two) = (apply("one"), apply("two"));
    let rule = |yaml: &str| serde_yaml_ng::from_str::<Failure>(yaml).unwrap();
    c.set_case_failures(vec![rule("{action: 2, error: conflict, times: 1}")]);
    c.set_step_failures(vec![rule(
        "{target: ConfigMap a/one, verb: apply, error: serverError, retryAfter: 2s}",
    )]);
    c.begin_call(&[one.clone(), two.clone()]);
    let e = c.execute("p", &one).await.unwrap_err();
    assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
    // Worded as the kube sink words it: the RBAC verb (an apply is a patch).
    assert!(
        e.to_string()
            .contains("patch configmaps a/one: Internal error occurred (InternalError)"),
        "{e}"
    );
    let e = c.execute("p", &two).await.unwrap_err();
    assert!(e.is_conflict());
    assert!(
        e.to_string()
            .contains(r#"Operation cannot be fulfilled on configmaps "two""#),
        "{e}"
    );
    // Its one time is spent, and stays spent in the next step: the
    // retry of action 2 goes through.
    c.set_step_failures(Vec::new());
    c.execute("p", &two).await.unwrap();
    assert!(target_matches(
        &c.kinds,
        "configmaps a/two",
        &target(&c, "two")
    ));
    assert!(!target_matches(
        &c.kinds,
        "configmaps b/two",
        &target(&c, "two")
    ));
}
