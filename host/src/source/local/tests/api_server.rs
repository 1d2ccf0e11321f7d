//! The API server's semantics over files.

use super::*;
use crate::actions::PatchType;

#[tokio::test]
async fn a_delete_waits_for_the_finalizers_and_the_last_one_deletes() {
    let mut f = Fixture::new(&[("c.yaml", &cm("c", HELD))]);
    // A ConfigMap has no generation on the server, and a delete gives it none.
    assert!(f.meta("c", "generation").is_null());
    f.delete(f.target("c")).unwrap();
    assert_eq!(f.events(), ["apply c terminating"]);
    assert!(f.meta("c", "deletionTimestamp").is_string());
    assert_eq!(f.meta("c", "deletionGracePeriodSeconds"), 0);
    assert!(f.meta("c", "generation").is_null());
    assert!(f.text("c.yaml").unwrap().contains("deletionTimestamp"));
    // A delete of a terminating object changes nothing.
    let rv = f.meta("c", "resourceVersion");
    f.delete(f.target("c")).unwrap();
    assert_eq!(f.events(), Vec::<String>::new());
    assert_eq!(f.meta("c", "resourceVersion"), rv);
    // No new finalizer while terminating (the server's 422).
    let e = f
        .patch(
            "c",
            json!({"metadata": {"finalizers": ["example.com/cleanup", "x/y"]}}),
        )
        .unwrap_err();
    assert!(
        matches!(&e, ActionError::Invalid(m) if m.contains("no new finalizers")),
        "{e}"
    );
    // Other writes go through; the deletionTimestamp cannot be unset.
    f.patch(
        "c",
        json!({"metadata": {"deletionTimestamp": null, "labels": {"a": "b"}}}),
    )
    .unwrap();
    assert_eq!(f.events(), ["apply c terminating"]);
    // The last finalizer removed (as the SDK does, a JSON patch with
    // preconditions): a delete, and the document leaves the folder.
    let mut target = f.target("c");
    target.preconditions.resource_version =
        Some(f.meta("c", "resourceVersion").as_str().unwrap().to_owned());
    f.run(Action::Patch {
        target,
        patch_type: PatchType::Json,
        patch: json!([{"op": "remove", "path": "/metadata/finalizers/0"}]),
    })
    .unwrap();
    assert_eq!(f.events(), ["delete c"]);
    assert!(f.get("c").is_none());
    assert!(!f.path("c.yaml").exists());
}

#[tokio::test]
async fn a_removed_file_deletes_gracefully_and_is_not_written_back() {
    let two = format!("{}---\n{}", cm("held", HELD), cm("free", ""));
    let mut f = Fixture::new(&[("two.yaml", &two)]);
    std::fs::remove_file(f.path("two.yaml")).unwrap();
    f.cluster.rescan().unwrap();
    let mut events = f.events();
    events.sort();
    assert_eq!(events, ["apply held terminating", "delete free"]);
    // The terminating object lives on in memory; a write to it does not
    // bring its file back.
    f.patch("held", json!({"data": {"k": "v"}})).unwrap();
    assert_eq!(f.events(), ["apply held terminating"]);
    assert!(!f.path("two.yaml").exists());
    f.cluster.rescan().unwrap();
    assert_eq!(
        f.events(),
        Vec::<String>::new(),
        "its absence is not deleted again"
    );
    // A new object written to that file's path meanwhile does not carry it.
    std::fs::write(f.path("two.yaml"), cm("other", "")).unwrap();
    f.cluster.rescan().unwrap();
    f.patch("other", json!({"data": {"k": "v"}})).unwrap();
    assert!(!f.text("two.yaml").unwrap().contains("held"));
    assert_eq!(f.events(), ["apply other", "apply other"]);
    // Its finalizer removed: gone, nothing written.
    f.patch("held", json!({"metadata": {"finalizers": null}}))
        .unwrap();
    assert_eq!(f.events(), ["delete held"]);
    assert!(f.get("held").is_none());
}

#[tokio::test]
async fn a_document_put_back_updates_the_terminating_object() {
    let mut f = Fixture::new(&[("c.yaml", &cm("c", HELD))]);
    let uid = f.meta("c", "uid");
    std::fs::remove_file(f.path("c.yaml")).unwrap();
    f.cluster.rescan().unwrap();
    assert_eq!(f.events(), ["apply c terminating"]);
    std::fs::write(
        f.path("c.yaml"),
        cm("c", &format!("{HELD}data: {{k: back}}\n")),
    )
    .unwrap();
    f.cluster.rescan().unwrap();
    assert_eq!(f.events(), ["apply c terminating"]);
    assert_eq!(f.meta("c", "uid"), uid);
    assert_eq!(f.get("c").unwrap()["data"]["k"], "back");
    // Attached again: the finalizer removed by hand in the file deletes
    // it, and its document leaves the file (or it would come back).
    std::fs::write(
        f.path("c.yaml"),
        cm("c", "  finalizers: []\ndata: {k: back}\n"),
    )
    .unwrap();
    f.cluster.rescan().unwrap();
    assert_eq!(f.events(), ["delete c"]);
    assert!(!f.path("c.yaml").exists());
    f.cluster.rescan().unwrap();
    assert_eq!(f.events(), Vec::<String>::new());
}

#[tokio::test]
async fn uids_are_new_for_a_recreated_object_and_kept_from_a_manifest() {
    let mut f = Fixture::new(&[
        ("c.yaml", &cm("c", "")),
        (
            "given.yaml",
            &cm("given", "  uid: 1b4e28ba-2fa1-41d2-883f-0016d3cca427\n"),
        ),
    ]);
    assert_eq!(
        f.meta("given", "uid"),
        "1b4e28ba-2fa1-41d2-883f-0016d3cca427"
    );
    let first = f.meta("c", "uid");
    assert!(f.meta("c", "creationTimestamp").is_string());
    std::fs::remove_file(f.path("c.yaml")).unwrap();
    f.cluster.rescan().unwrap();
    std::fs::write(f.path("c.yaml"), cm("c", "")).unwrap();
    f.cluster.rescan().unwrap();
    assert_eq!(f.events(), ["delete c", "apply c"]);
    let second = f.meta("c", "uid");
    assert_ne!(first, second);
    // A uid precondition from the first incarnation fails (409), the
    // same for a resourceVersion one, and the object stays.
    let mut stale = f.target("c");
    stale.preconditions.uid = Some(first.as_str().unwrap().to_owned());
    let e = f.delete(stale).unwrap_err();
    assert!(
        e.is_conflict() && e.to_string().contains("UID in precondition"),
        "{e}"
    );
    let mut stale = f.target("c");
    stale.preconditions.resource_version = Some("1".into());
    assert!(f.delete(stale).unwrap_err().is_conflict());
    assert!(f.get("c").is_some());
    let mut current = f.target("c");
    current.preconditions.uid = Some(second.as_str().unwrap().to_owned());
    f.delete(current).unwrap();
    assert_eq!(f.events(), ["delete c"]);
    // A plugin's apply creating it again with the old uid in its body is
    // refused (409, as on the server); without, it gets a new uid.
    let again = |uid: Option<&Value>| {
        let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "d"}});
        if let Some(uid) = uid {
            object["metadata"]["uid"] = uid.clone();
        }
        Action::Apply {
            target: f.target("c"),
            object,
            force: true,
            status: false,
        }
    };
    assert!(f.run(again(Some(&second))).unwrap_err().is_conflict());
    f.run(again(None)).unwrap();
    let third = f.meta("c", "uid");
    assert!(third != first && third != second, "{third}");
}

#[tokio::test]
async fn generation_and_resource_version_move_as_on_the_server() {
    // A ConfigMap: no generation (the server gives it none) and no status
    // subresource; the kinds that have them are the simulated server's
    // tests (`crate::sim`).
    let mut f = Fixture::new(&[("c.yaml", &cm("c", "spec: {n: 1}\n"))]);
    let state = |f: &Fixture| {
        (
            f.meta("c", "generation"),
            f.meta("c", "resourceVersion")
                .as_str()
                .unwrap()
                .parse::<u64>()
                .unwrap(),
        )
    };
    let (g, rv) = state(&f);
    assert!(g.is_null(), "{g}");
    f.patch("c", json!({"spec": {"n": 2}})).unwrap();
    assert_eq!(state(&f), (Value::Null, rv + 1));
    f.patch("c", json!({"metadata": {"labels": {"a": "b"}}}))
        .unwrap();
    assert_eq!(state(&f), (Value::Null, rv + 2));
    let e = f
        .run(Action::Apply {
            target: f.target("c"),
            object: json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "d"}, "status": {"ok": true}}),
            force: true,
            status: true,
        })
        .unwrap_err();
    assert!(matches!(e, ActionError::NotFound(_)), "{e}");
    assert_eq!(state(&f), (Value::Null, rv + 2));
    assert_eq!(f.events().len(), 2);
    // A write that changes nothing stores nothing.
    f.patch("c", json!({"spec": {"n": 2}})).unwrap();
    assert_eq!(state(&f), (Value::Null, rv + 2));
    assert_eq!(f.events(), Vec::<String>::new());
    // A hand edit is a write too.
    let text = f.text("c.yaml").unwrap().replace("n: 2", "n: 3");
    std::fs::write(f.path("c.yaml"), text).unwrap();
    f.cluster.rescan().unwrap();
    assert_eq!(state(&f), (Value::Null, rv + 3));
}

#[tokio::test]
async fn an_edit_made_before_a_write_is_read_first() {
    let mut f = Fixture::new(&[("c.yaml", &cm("c", "data: {a: '1'}\n"))]);
    let rv = f.meta("c", "resourceVersion").as_str().unwrap().to_owned();
    // Edited, not read yet (the folder watcher has not fired).
    std::fs::write(f.path("c.yaml"), cm("c", "data: {a: '1', edit: yes}\n")).unwrap();
    // A write that expects the old resourceVersion: the edit is read,
    // and the write fails as on the server (409).
    let mut stale = f.target("c");
    stale.preconditions.resource_version = Some(rv.clone());
    let e = f
        .run(Action::Patch {
            target: stale,
            patch_type: PatchType::Merge,
            patch: json!({"data": {"plugin": "x"}}),
        })
        .unwrap_err();
    assert!(e.is_conflict(), "{e}");
    assert_eq!(f.events(), ["apply c"], "the edit reached the watchers");
    assert!(f.text("c.yaml").unwrap().contains("edit: yes"));
    // Without a precondition, the patch is applied over the edit.
    std::fs::write(
        f.path("c.yaml"),
        cm("c", "data: {a: '1', edit: yes, more: yes}\n"),
    )
    .unwrap();
    f.patch("c", json!({"data": {"plugin": "x"}})).unwrap();
    assert_eq!(f.events(), ["apply c", "apply c"]);
    let data = f.get("c").unwrap()["data"].clone();
    assert_eq!(
        data,
        json!({"a": "1", "edit": "yes", "more": "yes", "plugin": "x"})
    );
    let on_disk = parse_manifests(Path::new("c.yaml"), &f.text("c.yaml").unwrap()).unwrap();
    assert_eq!(on_disk[0]["data"], data);
}

#[tokio::test]
async fn an_edit_saved_while_the_cluster_writes_is_kept_and_the_write_redone_over_it() {
    for precondition in [false, true] {
        let mut f = Fixture::new(&[("c.yaml", &cm("c", "data: {a: '1'}\n"))]);
        let rv = f.meta("c", "resourceVersion").as_str().unwrap().to_owned();
        // The edit lands after the write's check, before its swap, once.
        let edit = cm("c", "data: {a: '1', edit: yes}\n");
        let mut once = Some(edit.clone());
        *f.cluster.before_swap.lock() = Some(Box::new(move |file: &Path| {
            if let Some(text) = once.take() {
                std::fs::write(file, text).unwrap();
            }
        }));
        let mut target = f.target("c");
        if precondition {
            target.preconditions.resource_version = Some(rv);
        }
        let r = f.run(Action::Patch {
            target,
            patch_type: PatchType::Merge,
            patch: json!({"data": {"plugin": "x"}}),
        });
        let on_disk = parse_manifests(Path::new("c.yaml"), &f.text("c.yaml").unwrap()).unwrap();
        let data = f.get("c").unwrap()["data"].clone();
        assert_eq!(on_disk[0]["data"], data, "the folder and the cluster agree");
        if precondition {
            assert!(r.unwrap_err().is_conflict());
            assert_eq!(data, json!({"a": "1", "edit": "yes"}));
            assert_eq!(f.events(), ["apply c"]);
        } else {
            r.unwrap();
            assert_eq!(data, json!({"a": "1", "edit": "yes", "plugin": "x"}));
            assert_eq!(f.events(), ["apply c", "apply c"]);
        }
        let hidden: Vec<_> = std::fs::read_dir(f.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().starts_with('.'))
            .collect();
        assert!(hidden.is_empty(), "{hidden:?}");
    }
}

#[tokio::test]
async fn a_file_holding_what_the_cluster_cannot_read_is_never_written() {
    let text = format!("{}---\n{}", cm("c", ""), cm("Not_Valid", ""));
    let f = Fixture::new(&[("c.yaml", &text)]);
    let e = f.patch("c", json!({"data": {"k": "v"}})).unwrap_err();
    assert!(e.transient() && e.to_string().contains("c.yaml"), "{e}");
    assert_eq!(f.text("c.yaml").unwrap(), text);
    // Half-saved: the same until it parses.
    std::fs::write(f.path("c.yaml"), "apiVersion: v1\nkind: [\n").unwrap();
    assert!(
        f.patch("c", json!({"data": {"k": "v"}}))
            .unwrap_err()
            .transient()
    );
    std::fs::write(f.path("c.yaml"), cm("c", "")).unwrap();
    f.patch("c", json!({"data": {"k": "v"}})).unwrap();
    assert!(f.text("c.yaml").unwrap().contains("k: v"));
}

#[tokio::test]
async fn json_manifests_are_written_as_json() {
    let f = Fixture::new(&[(
        "c.json",
        r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "d"}}"#,
    )]);
    f.patch("c", json!({"data": {"k": "v"}})).unwrap();
    let v: Value = serde_json::from_str(&f.text("c.json").unwrap()).unwrap();
    assert_eq!(v["data"]["k"], "v");
}

#[tokio::test]
async fn background_deletion_collects_dependents_with_no_owner_left() {
    let mut f = Fixture::new(&[
        ("o.yaml", &cm("o", "  uid: owner-1\n")),
        ("p.yaml", &cm("p", "  uid: owner-2\n")),
        ("a.yaml", &owned("a", &[("owner-1", false)], "")),
        (
            "b.yaml",
            &owned("b", &[("owner-1", false), ("owner-2", false)], ""),
        ),
        ("held.yaml", &owned("held", &[("owner-1", false)], HELD)),
        (
            "grandchild.yaml",
            &cm(
                "g",
                "  ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: a, uid: child-a}]\n",
            ),
        ),
    ]);
    // a's uid is random: point the grandchild at it.
    let a_uid = f.meta("a", "uid");
    let text = f
        .text("grandchild.yaml")
        .unwrap()
        .replace("child-a", a_uid.as_str().unwrap());
    std::fs::write(f.path("grandchild.yaml"), text).unwrap();
    f.cluster.rescan().unwrap();
    f.events();
    f.delete(f.target("o")).unwrap();
    let mut events = f.events();
    events.sort();
    assert_eq!(
        events,
        [
            "apply b",
            "apply held terminating",
            "delete a",
            "delete g",
            "delete o"
        ]
    );
    // b keeps its other owner and loses the reference to the gone one.
    assert_eq!(
        crate::sim::gc::owners(&f.get("b").unwrap()),
        [("owner-2".to_owned(), false)]
    );
    for gone in ["o.yaml", "a.yaml", "grandchild.yaml"] {
        assert!(!f.path(gone).exists(), "{gone}");
    }
}

#[tokio::test]
async fn foreground_deletion_waits_for_blocking_dependents() {
    let mut f = Fixture::new(&[
        ("o.yaml", &cm("o", "  uid: owner-1\n")),
        (
            "blocker.yaml",
            &owned("blocker", &[("owner-1", true)], HELD),
        ),
        ("free.yaml", &owned("free", &[("owner-1", false)], "")),
    ]);
    f.run(Action::Delete {
        target: f.target("o"),
        propagation: Propagation::Foreground,
    })
    .unwrap();
    // The dependents, which have none of their own, are deleted in the
    // background (as kube-controller-manager's collector does): the one
    // with a finalizer waits, terminating.
    let mut events = f.events();
    events.sort();
    assert_eq!(
        events,
        [
            "apply blocker terminating",
            "apply o terminating",
            "delete free"
        ]
    );
    assert_eq!(
        crate::sim::deletion::finalizers(&f.get("o").unwrap()),
        [crate::sim::deletion::FOREGROUND]
    );
    assert_eq!(
        crate::sim::deletion::finalizers(&f.get("blocker").unwrap()),
        ["example.com/cleanup"]
    );
    // The owner goes once its blocking dependent has.
    f.patch("blocker", json!({"metadata": {"finalizers": null}}))
        .unwrap();
    assert_eq!(f.events(), ["delete blocker", "delete o"]);
    assert!(f.get("o").is_none());
}

#[tokio::test]
async fn orphan_deletion_drops_the_references_and_keeps_the_dependents() {
    let mut f = Fixture::new(&[
        ("o.yaml", &cm("o", "  uid: owner-1\n")),
        ("a.yaml", &owned("a", &[("owner-1", true)], "")),
    ]);
    f.run(Action::Delete {
        target: f.target("o"),
        propagation: Propagation::Orphan,
    })
    .unwrap();
    assert_eq!(f.events(), ["apply o terminating", "apply a", "delete o"]);
    assert!(
        f.get("a").unwrap()["metadata"]
            .get("ownerReferences")
            .is_none()
    );
    assert!(!f.text("a.yaml").unwrap().contains("ownerReferences"));
}
