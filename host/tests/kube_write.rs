//! The API-server action sink against a mock server: the exact requests
//! (verb, path, field manager, content type, body) for every action, how
//! failures are classified (a JSON patch's bare 422 told apart by reading
//! the object, a refusal's Retry-After kept), and how the executor treats
//! conflicts, 403 and 422. `tests/tests/status_codes.rs` checks the same
//! against the real API server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use kubewasm::actions::executor::{ActionError, ActionSink, Executor, ExecutorOptions};
use kubewasm::actions::{Action, EventType, PatchType, Preconditions, Propagation, Target};
use kubewasm::kind::KindInfo;
use kubewasm::source::kube::KubeSink;
use serde_json::json;

fn deployment() -> Target {
    Target {
        kind: KindInfo::new("apps", "v1", "Deployment", "deployments", true).into(),
        namespace: Some("shop".into()),
        name: "web".into(),
        uid: Some("uid-web".into()),
        preconditions: Default::default(),
    }
}

/// Runs `action` through the sink while the mock answers with `reply`;
/// returns the request seen and the sink's result.
async fn one(
    action: Action,
    reply: fn() -> http::Response<MockBody>,
) -> (Seen, Result<(), ActionError>) {
    let (client, mut server) = mock_client();
    let sink = KubeSink::new(client);
    let script = tokio::spawn(async move {
        let (seen, send) = next(&mut server).await;
        send.send_response(reply());
        seen
    });
    let result = sink.execute("my-plugin", &action).await;
    (script.await.unwrap(), result)
}

fn ok() -> http::Response<MockBody> {
    json_response(
        200,
        &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"}}),
    )
}

#[tokio::test]
async fn apply_is_server_side_apply_with_the_plugin_field_manager() {
    let object = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "annotations": {"a": "b"}}});
    let (seen, r) = one(
        Action::Apply {
            target: deployment(),
            object: object.clone(),
            force: true,
            status: false,
        },
        ok,
    )
    .await;
    r.unwrap();
    assert_eq!(seen.method, "PATCH");
    assert_eq!(seen.path, "/apis/apps/v1/namespaces/shop/deployments/web");
    assert_eq!(
        seen.param("fieldManager").as_deref(),
        Some("kubewasm/my-plugin")
    );
    assert_eq!(seen.param("force").as_deref(), Some("true"));
    assert_eq!(
        seen.content_type.as_deref(),
        Some("application/apply-patch+yaml")
    );
    assert_eq!(seen.body.as_ref(), Some(&object));

    let (seen, r) = one(
        Action::Apply {
            target: deployment(),
            object: object.clone(),
            force: false,
            status: true,
        },
        ok,
    )
    .await;
    r.unwrap();
    assert_eq!(
        seen.path,
        "/apis/apps/v1/namespaces/shop/deployments/web/status"
    );
    assert_eq!(seen.param("force"), None);
}

#[tokio::test]
async fn patches_and_deletes_use_the_right_content_type_and_options() {
    let (seen, r) = one(
        Action::Patch {
            target: deployment(),
            patch_type: PatchType::Merge,
            patch: json!({"metadata": {"annotations": {"x": "y"}}}),
        },
        ok,
    )
    .await;
    r.unwrap();
    assert_eq!(seen.method, "PATCH");
    assert_eq!(
        seen.content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    assert_eq!(
        seen.param("fieldManager").as_deref(),
        Some("kubewasm/my-plugin")
    );
    assert_eq!(
        seen.body,
        Some(json!({"metadata": {"annotations": {"x": "y"}}}))
    );

    let ops = json!([{"op": "replace", "path": "/spec/replicas", "value": 3}]);
    let (seen, r) = one(
        Action::Patch {
            target: deployment(),
            patch_type: PatchType::Json,
            patch: ops.clone(),
        },
        ok,
    )
    .await;
    r.unwrap();
    assert_eq!(
        seen.content_type.as_deref(),
        Some("application/json-patch+json")
    );
    assert_eq!(seen.body, Some(ops));

    let (seen, r) = one(
        Action::Delete {
            target: deployment(),
            propagation: Propagation::Foreground,
        },
        ok,
    )
    .await;
    r.unwrap();
    assert_eq!(seen.method, "DELETE");
    assert_eq!(seen.path, "/apis/apps/v1/namespaces/shop/deployments/web");
    assert_eq!(seen.body.unwrap()["propagationPolicy"], "Foreground");
}

#[tokio::test]
async fn events_are_events_k8s_io_v1_reported_by_kubewasm() {
    let pod = Target {
        kind: KindInfo::new("", "v1", "Pod", "pods", true).into(),
        namespace: Some("shop".into()),
        name: "web-1".into(),
        uid: Some("uid-pod".into()),
        preconditions: Default::default(),
    };
    let (seen, r) = one(
        Action::Event {
            regarding: pod,
            event_type: EventType::Warning,
            reason: "CrashLooping".into(),
            note: "container app restarted 5 times".into(),
            reporter: "my-plugin@0123456789ab".into(),
        },
        || json_response(201, &json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "x"}})),
    )
    .await;
    r.unwrap();
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.path, "/apis/events.k8s.io/v1/namespaces/shop/events");
    let body = seen.body.unwrap();
    assert_eq!(body["reportingController"], "kubewasm");
    assert!(
        body["reportingInstance"]
            .as_str()
            .unwrap()
            .ends_with("/my-plugin@0123456789ab"),
        "{body}"
    );
    assert_eq!(
        body["action"], "my-plugin",
        "the action is the plugin, as the WIT says"
    );
    assert_eq!(body["type"], "Warning");
    assert_eq!(body["reason"], "CrashLooping");
    assert_eq!(body["note"], "container app restarted 5 times");
    assert_eq!(
        body["regarding"],
        json!({"apiVersion": "v1", "kind": "Pod", "namespace": "shop", "name": "web-1", "uid": "uid-pod"})
    );
    assert!(
        body["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("web-1.")
    );
    assert_eq!(
        body["metadata"]["labels"]["kubewasm.io/plugin"],
        "my-plugin"
    );
    assert!(body["eventTime"].as_str().unwrap().ends_with('Z'));
}

#[tokio::test]
async fn errors_are_classified() {
    let action = || Action::Patch {
        target: deployment(),
        patch_type: PatchType::Merge,
        patch: json!({}),
    };
    type Case = (fn() -> http::Response<MockBody>, fn(&ActionError) -> bool);
    let cases: [Case; 7] = [
        (
            || {
                status(
                    403,
                    "Forbidden",
                    "deployments.apps \"web\" is forbidden: User \"u\" cannot patch resource \"deployments\"",
                )
            },
            |e| matches!(e, ActionError::Forbidden(m) if m.contains("cannot patch") && m.contains("patch deployments.apps shop/web")),
        ),
        (
            || status(422, "Invalid", "spec.replicas: Invalid value: -1"),
            |e| matches!(e, ActionError::Invalid(_)),
        ),
        (
            || status(409, "Conflict", "Apply failed with 1 conflict"),
            |e| matches!(e, ActionError::Conflict(_)),
        ),
        (
            || status(404, "NotFound", "deployments.apps \"web\" not found"),
            |e| matches!(e, ActionError::NotFound(_)),
        ),
        (
            || status(503, "ServiceUnavailable", "etcd leader changed"),
            |e| matches!(e, ActionError::Throttled { .. }),
        ),
        (
            || status(401, "Unauthorized", "Unauthorized"),
            |e| matches!(e, ActionError::Unauthorized(_)),
        ),
        (
            // The API server's own 429 is plain text with a Retry-After.
            || {
                let mut r =
                    json_response(429, &json!("Too many requests, please try again later."));
                r.headers_mut()
                    .insert("retry-after", http::HeaderValue::from_static("4"));
                r
            },
            |e| e.retry_after() == Some(Duration::from_secs(4)),
        ),
    ];
    for (reply, check) in cases {
        let (_, r) = one(action(), reply).await;
        let e = r.unwrap_err();
        assert!(check(&e), "{e:?}");
    }
}

#[tokio::test]
async fn executor_retries_transient_failures_but_not_conflicts_forbidden_or_invalid() {
    let (client, mut server) = mock_client();
    let executor = Executor::new(
        Arc::new(KubeSink::new(client)),
        ExecutorOptions {
            dry_run: false,
            max_attempts: 4,
            base_backoff: Duration::from_millis(5),
            max_backoff: Duration::from_millis(20),
            timeout: Duration::from_secs(5),
            ..ExecutorOptions::default()
        },
        kubewasm::telemetry::Telemetry::new(kubewasm::telemetry::Identity::from_env()),
    );
    let action = Action::Patch {
        target: deployment(),
        patch_type: PatchType::Merge,
        patch: json!({"a": 1}),
    };
    let script = tokio::spawn(async move {
        for reply in [
            status(503, "ServiceUnavailable", "etcd leader changed"),
            status(429, "TooManyRequests", "slow down"),
            ok(),
        ] {
            let (seen, send) = next(&mut server).await;
            assert_eq!(seen.method, "PATCH");
            send.send_response(reply);
        }
        // 409, 403, 422: exactly one attempt each.
        for reply in [
            status(
                409,
                "Conflict",
                "Apply failed with 1 conflict: conflict with \"kubectl\"",
            ),
            status(403, "Forbidden", "no"),
            status(422, "Invalid", "bad"),
        ] {
            let (_, send) = next(&mut server).await;
            send.send_response(reply);
        }
        server
    });
    assert_eq!(executor.execute("p", &action).await, Ok(()));
    assert_eq!(executor.stats.retried.load(Ordering::Relaxed), 2);
    let conflict = executor.execute("p", &action).await.unwrap_err();
    assert!(
        matches!(&conflict, ActionError::Conflict(m) if m.contains("kubectl")),
        "{conflict:?}"
    );
    assert!(matches!(
        executor.execute("p", &action).await,
        Err(ActionError::Forbidden(_))
    ));
    assert!(matches!(
        executor.execute("p", &action).await,
        Err(ActionError::Invalid(_))
    ));
    assert_eq!(executor.stats.retried.load(Ordering::Relaxed), 2);
    assert_eq!(executor.stats.failed.load(Ordering::Relaxed), 3);
    assert_eq!(executor.stats.applied.load(Ordering::Relaxed), 1);
    let mut server = script.await.unwrap();
    // No further request was made (nothing retried forever).
    assert!(
        tokio::time::timeout(Duration::from_millis(200), server.next_request())
            .await
            .is_err()
    );
}

fn guarded() -> Target {
    Target {
        preconditions: Preconditions {
            uid: Some("uid-web".into()),
            resource_version: Some("41".into()),
        },
        ..deployment()
    }
}

#[tokio::test]
async fn preconditions_reach_the_server_on_apply_patch_and_delete() {
    // Apply and merge patch: in the body's metadata, which the server checks.
    let (seen, r) = one(
        Action::Apply {
            target: guarded(),
            object: json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "shop"}}),
            force: false,
            status: false,
        },
        ok,
    )
    .await;
    r.unwrap();
    let body = seen.body.unwrap();
    assert_eq!(body["metadata"]["uid"], "uid-web");
    assert_eq!(body["metadata"]["resourceVersion"], "41");

    let (seen, r) = one(
        Action::Patch {
            target: guarded(),
            patch_type: PatchType::Merge,
            patch: json!({"spec": {"replicas": 2}}),
        },
        ok,
    )
    .await;
    r.unwrap();
    assert_eq!(
        seen.body,
        Some(json!({"spec": {"replicas": 2},
            "metadata": {"uid": "uid-web", "resourceVersion": "41"}}))
    );

    // JSON patch: operations setting them go first.
    let (seen, r) = one(
        Action::Patch {
            target: guarded(),
            patch_type: PatchType::Json,
            patch: json!([{"op": "replace", "path": "/spec/replicas", "value": 3}]),
        },
        ok,
    )
    .await;
    r.unwrap();
    assert_eq!(
        seen.body,
        Some(json!([
            {"op": "add", "path": "/metadata/uid", "value": "uid-web"},
            {"op": "add", "path": "/metadata/resourceVersion", "value": "41"},
            {"op": "replace", "path": "/spec/replicas", "value": 3},
        ]))
    );

    // Delete: DeleteOptions.preconditions.
    let (seen, r) = one(
        Action::Delete {
            target: guarded(),
            propagation: Propagation::Background,
        },
        ok,
    )
    .await;
    r.unwrap();
    assert_eq!(
        seen.body.unwrap()["preconditions"],
        json!({"uid": "uid-web", "resourceVersion": "41"})
    );

    // Without preconditions nothing is added (0.1 plugins' writes).
    let (seen, r) = one(
        Action::Delete {
            target: deployment(),
            propagation: Propagation::Background,
        },
        ok,
    )
    .await;
    r.unwrap();
    assert!(seen.body.unwrap().get("preconditions").is_none());
}

#[tokio::test]
async fn a_repeated_event_counts_in_its_series_instead_of_a_new_object() {
    let (client, mut server) = mock_client();
    let sink = KubeSink::new(client);
    let event = |note: &str| Action::Event {
        regarding: Target {
            kind: KindInfo::new("", "v1", "Pod", "pods", true).into(),
            namespace: Some("shop".into()),
            name: "web-1".into(),
            uid: Some("uid-pod".into()),
            preconditions: Default::default(),
        },
        event_type: EventType::Warning,
        reason: "CrashLooping".into(),
        note: note.into(),
        reporter: "my-plugin@0123456789ab".into(),
    };
    let script = tokio::spawn(async move {
        let mut seen = Vec::new();
        for _ in 0..4 {
            let (s, send) = next(&mut server).await;
            send.send_response(json_response(
                201,
                &json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "x"}}),
            ));
            seen.push(s);
        }
        seen
    });
    for _ in 0..3 {
        sink.execute("my-plugin", &event("restarted 5 times"))
            .await
            .unwrap();
    }
    // A changed note is a new Event, not a lost one.
    sink.execute("my-plugin", &event("restarted 6 times"))
        .await
        .unwrap();
    let seen = script.await.unwrap();
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[3].method, "POST", "another note: another Event");
    let name = seen[0].body.as_ref().unwrap()["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    for (i, s) in seen[1..3].iter().enumerate() {
        assert_eq!(s.method, "PATCH", "repeat {i} patches the first Event");
        assert_eq!(
            s.path,
            format!("/apis/events.k8s.io/v1/namespaces/shop/events/{name}")
        );
        let body = s.body.as_ref().unwrap();
        assert_eq!(body["series"]["count"], i as i64 + 2, "{body}");
        assert!(body["series"]["lastObservedTime"].is_string(), "{body}");
    }
}

/// A JSON patch with a `test` whose answer is the API server's bare 422:
/// the sink reads the object and replays the operations to tell a failed
/// test (a conflict) from an invalid patch.
#[tokio::test]
async fn a_json_patch_refused_with_a_bare_422_is_replayed_on_the_object_to_name_the_cause() {
    let bare = || {
        status(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        )
    };
    let current = || {
        json_response(
            200,
            &json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "shop", "resourceVersion": "42"},
                "spec": {"replicas": 1}}),
        )
    };
    let patch = |ops: serde_json::Value| Action::Patch {
        target: deployment(),
        patch_type: PatchType::Json,
        patch: ops,
    };
    type Reply = fn() -> http::Response<MockBody>;
    async fn run(action: Action, replies: Vec<Reply>) -> (Vec<Seen>, ActionError) {
        let (client, mut server) = mock_client();
        let sink = KubeSink::new(client);
        let script = tokio::spawn(async move {
            let mut seen = Vec::new();
            for reply in replies {
                let (s, send) = next(&mut server).await;
                send.send_response(reply());
                seen.push(s);
            }
            seen
        });
        let e = sink.execute("p", &action).await.unwrap_err();
        (script.await.unwrap(), e)
    }

    // The SDK's optimistic lock: a test of the resourceVersion the plugin saw.
    let lock = json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": "41"},
        {"op": "replace", "path": "/spec/replicas", "value": 3},
    ]);
    let (seen, e) = run(patch(lock.clone()), vec![bare, current]).await;
    assert_eq!(
        (seen[1].method.as_str(), seen[1].path.as_str()),
        ("GET", "/apis/apps/v1/namespaces/shop/deployments/web")
    );
    assert!(
        matches!(&e, ActionError::Conflict(m) if m.contains("test of /metadata/resourceVersion failed") && m.starts_with("patch deployments.apps shop/web")),
        "{e:?}"
    );

    // A remove of a missing path: invalid, naming the operation.
    let missing = json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
        {"op": "remove", "path": "/spec/paused"},
    ]);
    let (_, e) = run(patch(missing), vec![bare, current]).await;
    assert!(
        matches!(&e, ActionError::Invalid(m) if m.contains("operation 2 of 2") && m.contains("/spec/paused")),
        "{e:?}"
    );
    assert!(e.permanent());

    // The object cannot be read: a patch with a test is taken as a conflict.
    let (_, e) = run(
        patch(lock.clone()),
        vec![bare, || status(403, "Forbidden", "cannot get deployments")],
    )
    .await;
    assert!(e.is_conflict(), "{e:?}");
    // The object is gone: the next attempt sees the delete.
    let (_, e) = run(
        patch(lock),
        vec![bare, || {
            status(404, "NotFound", "deployments.apps \"web\" not found")
        }],
    )
    .await;
    assert!(matches!(e, ActionError::NotFound(_)), "{e:?}");
}

/// The Event of the tests below: `Scaled` about the Deployment.
fn scaled() -> Action {
    Action::Event {
        regarding: deployment(),
        event_type: EventType::Normal,
        reason: "Scaled".into(),
        note: "to 3".into(),
        reporter: "p@1".into(),
    }
}

/// A failed Event names the request that failed: the series patch of an
/// Event already recorded, or the create of a new one, not the object the
/// Event is about.
#[tokio::test]
async fn a_failed_event_names_the_real_verb_and_resource() {
    let (client, mut server) = mock_client();
    let sink = KubeSink::new(client);
    let event = scaled();
    let script = tokio::spawn(async move {
        let (first, send) = next(&mut server).await;
        send.send_response(json_response(
            201,
            &json!({"kind": "Event", "apiVersion": "events.k8s.io/v1", "metadata": {"name": "x"}}),
        ));
        let (_, send) = next(&mut server).await;
        send.send_response(status(
            403,
            "Forbidden",
            "User \"u\" cannot patch resource \"events\"",
        ));
        // The series patch failed: the repeat after it counts 2 again.
        let (retry, send) = next(&mut server).await;
        send.send_response(json_response(
            200,
            &json!({"kind": "Event", "apiVersion": "events.k8s.io/v1", "metadata": {"name": "x"}}),
        ));
        (first, retry)
    });
    sink.execute("p", &event).await.unwrap();
    let e = sink.execute("p", &event).await.unwrap_err();
    sink.execute("p", &event).await.unwrap();
    let (first, retry) = script.await.unwrap();
    let name = first.body.as_ref().unwrap()["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        matches!(&e, ActionError::Forbidden(m) if m.starts_with(&format!("patch events.k8s.io/v1 events shop/{name}: "))),
        "{e:?}"
    );
    assert_eq!(retry.method, "PATCH");
    assert_eq!(retry.body.unwrap()["series"]["count"], 2);
}

/// An Event whose name another process's Event took (two replicas
/// recording in the same nanosecond) is created again under a new name,
/// and counted as recorded; a second refusal is the action's failure.
#[tokio::test]
async fn an_event_name_already_taken_is_created_again_under_another() {
    let (client, mut server) = mock_client();
    let sink = KubeSink::new(client);
    let event = scaled();
    let taken = || {
        status(
            409,
            "AlreadyExists",
            "events.events.k8s.io \"x\" already exists",
        )
    };
    let script = tokio::spawn(async move {
        let (first, send) = next(&mut server).await;
        send.send_response(taken());
        let (second, send) = next(&mut server).await;
        send.send_response(json_response(
            201,
            &json!({"kind": "Event", "apiVersion": "events.k8s.io/v1", "metadata": {"name": "x"}}),
        ));
        (first, second)
    });
    sink.execute("p", &event).await.unwrap();
    let (first, second) = script.await.unwrap();
    let name = |s: &Seen| {
        s.body.as_ref().unwrap()["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(
        (first.method.as_str(), second.method.as_str()),
        ("POST", "POST")
    );
    assert_ne!(
        name(&first),
        name(&second),
        "created again under a new name"
    );

    // Taken twice in a row: not a name clash, a failure.
    let (client, mut server) = mock_client();
    let sink = KubeSink::new(client);
    let script = tokio::spawn(async move {
        for _ in 0..2 {
            let (_, send) = next(&mut server).await;
            send.send_response(taken());
        }
    });
    let e = sink.execute("p", &event).await.unwrap_err();
    script.await.unwrap();
    assert!(matches!(e, ActionError::Conflict(_)), "{e:?}");
}
