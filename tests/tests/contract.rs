//! WIT 0.2 against the real API server: what the host sends for a 0.2
//! plugin's writes means what it says there (preconditions end in a
//! conflict, not a write), and Events repeat as a series.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use kubewasm::actions::executor::{ActionError, ActionSink};
use kubewasm::actions::{Action, EventType, PatchType, Preconditions, Propagation, Target};
use kubewasm::kind::KindInfo;
use kubewasm::source::kube::KubeSink;
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::namespace;
use serde_json::json;

fn configmaps() -> KindInfo {
    KindInfo::new("", "v1", "ConfigMap", "configmaps", true)
}

fn target(ns: &str, name: &str, uid: Option<&str>, rv: Option<&str>) -> Target {
    Target {
        preconditions: Preconditions {
            uid: uid.map(Into::into),
            resource_version: rv.map(Into::into),
        },
        ..Target::new(configmaps(), Some(ns.into()), name)
    }
}

#[tokio::test]
async fn preconditions_are_enforced_by_the_real_api_server_as_conflicts() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "contract-preconditions";
    namespace(&client, ns, json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let made = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"v": "1"}}))
                .unwrap(),
        )
        .await
        .unwrap();
    let uid = made.metadata.uid.clone().unwrap();
    let rv = made.metadata.resource_version.clone().unwrap();
    let sink = KubeSink::new(client.clone());
    let apply = |t: Target, v: &str| Action::Apply {
        target: t,
        object: json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": ns}, "data": {"v": v}}),
        force: true,
        status: false,
    };
    let merge = |t: Target, v: &str| Action::Patch {
        target: t,
        patch_type: PatchType::Merge,
        patch: json!({"data": {"v": v}}),
    };
    let json_patch = |t: Target, v: &str| Action::Patch {
        target: t,
        patch_type: PatchType::Json,
        patch: json!([{"op": "replace", "path": "/data/v", "value": v}]),
    };
    let is_conflict = |r: Result<(), ActionError>, what: &str| match r {
        Err(ActionError::Conflict(m)) => m,
        other => panic!("{what}: expected a conflict, got {other:?}"),
    };
    // A stale resourceVersion and a foreign uid: refused as conflicts by
    // every write, and nothing is written.
    for (what, action) in [
        (
            "apply, stale rv",
            apply(target(ns, "c", None, Some("1")), "x"),
        ),
        (
            "apply, other uid",
            apply(
                target(ns, "c", Some("00000000-0000-0000-0000-000000000000"), None),
                "x",
            ),
        ),
        (
            "merge, stale rv",
            merge(target(ns, "c", None, Some("1")), "x"),
        ),
        (
            "merge, other uid",
            merge(
                target(ns, "c", Some("00000000-0000-0000-0000-000000000000"), None),
                "x",
            ),
        ),
        (
            "json, stale rv",
            json_patch(target(ns, "c", None, Some("1")), "x"),
        ),
        (
            "json, other uid",
            json_patch(
                target(ns, "c", Some("00000000-0000-0000-0000-000000000000"), None),
                "x",
            ),
        ),
        (
            "delete, stale rv",
            Action::Delete {
                target: target(ns, "c", None, Some("1")),
                propagation: Propagation::Background,
            },
        ),
        (
            "delete, other uid",
            Action::Delete {
                target: target(ns, "c", Some("00000000-0000-0000-0000-000000000000"), None),
                propagation: Propagation::Background,
            },
        ),
    ] {
        let m = is_conflict(sink.execute("p", &action).await, what);
        eprintln!("{what}: {m}");
    }
    let now = api.get("c").await.unwrap();
    assert_eq!(now.data.unwrap()["v"], "1", "no refused write landed");
    assert_eq!(now.metadata.resource_version.unwrap(), rv);

    // The right ones: each write lands (and moves the resourceVersion on).
    let mut rv = rv;
    type Write<'a> = &'a dyn Fn(Target, &str) -> Action;
    let writes: [Write; 3] = [&apply, &merge, &json_patch];
    for (i, make) in writes.iter().enumerate() {
        let v = format!("ok-{i}");
        sink.execute("p", &make(target(ns, "c", Some(&uid), Some(&rv)), &v))
            .await
            .unwrap_or_else(|e| panic!("write {i} with holding preconditions: {e}"));
        let now = api.get("c").await.unwrap();
        assert_eq!(now.data.unwrap()["v"], v);
        rv = now.metadata.resource_version.unwrap();
    }
    sink.execute(
        "p",
        &Action::Delete {
            target: target(ns, "c", Some(&uid), Some(&rv)),
            propagation: Propagation::Background,
        },
    )
    .await
    .unwrap();
    assert!(api.get_opt("c").await.unwrap().is_none());
}

#[tokio::test]
async fn a_repeated_event_is_one_object_with_a_series_on_the_real_server() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "contract-events";
    namespace(&client, ns, json!({})).await;
    let sink = KubeSink::new(client.clone());
    let event = |note: &str| Action::Event {
        regarding: Target {
            uid: Some("uid-x".into()),
            ..Target::new(configmaps(), Some(ns.into()), "x")
        },
        event_type: EventType::Warning,
        reason: "Repeating".into(),
        note: note.into(),
        reporter: "my-plugin@0123456789ab".into(),
    };
    for _ in 0..3 {
        sink.execute("my-plugin", &event("the same note"))
            .await
            .unwrap();
    }
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client, ns);
    let events = api
        .list(&ListParams::default().labels("kubewasm.io/plugin=my-plugin"))
        .await
        .unwrap()
        .items;
    assert_eq!(
        events.len(),
        1,
        "one Event object for the series: {events:?}"
    );
    let e = &events[0];
    assert_eq!(e.series.as_ref().map(|s| s.count), Some(3), "{e:?}");
    assert_eq!(e.action.as_deref(), Some("my-plugin"));
    assert!(
        e.reporting_instance
            .as_deref()
            .unwrap()
            .ends_with("/my-plugin@0123456789ab"),
        "{e:?}"
    );
}

#[tokio::test]
async fn plugins_of_0_1_and_0_2_in_one_folder_see_the_same_deltas() {
    use kubewasm_tests::e2e::*;
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "contract-side-by-side";
    namespace(&client, ns, json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let sidecar = recorder_sidecar(ns, &["configmaps"]);
    let host = HostProcess::start(
        cp.admin_kubeconfig(),
        &[
            ("recorder", "recorder", Some(&sidecar)),
            ("recorder-old", "recorder_v0_1", Some(&sidecar)),
        ],
    );
    let cm = |name: &str, v: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name}, "data": {"v": v}})).unwrap()
    };
    for i in 0..10 {
        api.create(&PostParams::default(), &cm(&format!("c{i}"), "1"))
            .await
            .unwrap();
    }
    for i in 0..10 {
        api.replace(&format!("c{i}"), &PostParams::default(), &{
            let mut c = api.get(&format!("c{i}")).await.unwrap();
            c.data = Some([("v".to_owned(), "2".to_owned())].into());
            c
        })
        .await
        .unwrap();
    }
    for i in (0..10).step_by(3) {
        api.delete(&format!("c{i}"), &Default::default())
            .await
            .unwrap();
    }
    let server = configmap_versions(&api).await;
    for plugin in ["recorder", "recorder-old"] {
        let seen = recorded_until_view_is(
            &client,
            ns,
            plugin,
            &server,
            &format!("{plugin}'s view"),
            std::time::Duration::from_secs(60),
        )
        .await;
        // Each delta once: no (type, name, rv) recorded twice.
        let mut keys: Vec<String> = seen
            .iter()
            .filter(|s| s.delta != "synced")
            .map(|s| format!("{} {} {}", s.delta, s.name, s.rv))
            .collect();
        let n = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), n, "{plugin} recorded a delta twice: {seen:?}");
    }
    let logs = host.logs();
    assert!(
        host.stop().success(),
        "the host exits 0 on SIGTERM:\n{logs}"
    );
}

#[tokio::test]
async fn a_0_2_plugin_is_told_its_attempt_and_last_failure_and_is_requeued() {
    use kubewasm_tests::e2e::*;
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "contract-reconcile";
    namespace(&client, ns, json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let host = HostProcess::start_with(cp.admin_kubeconfig(), |dir| {
        kubewasm_tests::install_testkit(
            dir,
            "reconciler",
            "config: {mode: reconcile, count: 300}\n",
        );
    });
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "reconcile-a"}, "data": {"v": "1"}}))
            .unwrap(),
    )
    .await
    .unwrap();
    let notes = eventually(
        "the requeued delta's Event",
        std::time::Duration::from_secs(60),
        || {
            let client = client.clone();
            async move {
                let mut notes: Vec<serde_json::Value> = plugin_events(&client, ns, "reconciler")
                    .await
                    .iter()
                    .filter(|e| e.data["reason"] == "Reconciled")
                    .filter_map(|e| serde_json::from_str(e.data["note"].as_str()?).ok())
                    .collect();
                notes.sort_by_key(|n| n["type"].as_str().unwrap_or_default().to_owned());
                (notes.len() >= 2).then_some(notes)
            }
        },
    )
    .await;
    let first = &notes[0];
    assert_eq!(first["type"], "added", "{notes:?}");
    assert_eq!(first["attempt"], 2, "the retry is attempt 2: {notes:?}");
    let failure = first["lastFailure"].as_str().unwrap_or_default();
    assert!(
        failure.contains("first attempt at contract-reconcile/reconcile-a"),
        "the retry says why the first attempt failed: {notes:?}"
    );
    let requeued = &notes[1];
    assert_eq!(requeued["type"], "requeue", "{notes:?}");
    assert_eq!(requeued["attempt"], 1);
    assert!(requeued["lastFailure"].is_null(), "{notes:?}");
    for n in &notes {
        assert_eq!(n["plugin"], "reconciler", "the name the host loaded it as");
        let version = n["version"].as_str().unwrap_or_default();
        assert!(
            version.len() == 12 && version.chars().all(|c| c.is_ascii_hexdigit()),
            "the version is the content hash: {version:?}"
        );
    }
    assert_eq!(notes.len(), 2, "requeued once, then done: {notes:?}");
    assert!(host.stop().success());
}
