//! The action errors against the real API server: one test per row of the
//! book's table of action errors (docs/book/src/delivery.md) that the server can produce (409, a
//! failed JSON-patch test's 422, 404, 401, 403, an invalid request's 4xx, an
//! apply body the schema refuses (500 from structured merge)),
//! and 429/5xx through the fault proxy (the API server cannot be told to
//! refuse writes on demand). Each asserts the `ActionError` the sink
//! returns and what it tells the executor and the dispatcher
//! (`permanent`, `is_conflict`, `retry_after`). Plus Events recorded three
//! times under the RBAC that `kubewasm rbac` generates: one Event object
//! whose series counts 3.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kubewasm::actions::executor::{ActionError, ActionSink, Executor, ExecutorOptions};
use kubewasm::actions::{Action, EventType, PatchType, Preconditions, Propagation, Target};
use kubewasm::kind::KindInfo;
use kubewasm::source::kube::KubeSink;
use kubewasm::telemetry::{Identity, Telemetry};
use kubewasm_tests::controlplane::{ControlPlane, client_from};
use kubewasm_tests::e2e::{eventually, namespace, recorder_sidecar};
use kubewasm_tests::faultproxy::FaultProxy;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

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

fn apply(t: Target, v: &str) -> Action {
    let (ns, name) = (t.namespace.clone().unwrap(), t.name.clone());
    Action::Apply {
        target: t,
        object: json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns}, "data": {"v": v}}),
        force: true,
        status: false,
    }
}

fn merge(t: Target, v: &str) -> Action {
    Action::Patch {
        target: t,
        patch_type: PatchType::Merge,
        patch: json!({"data": {"v": v}}),
    }
}

fn json_patch(t: Target, ops: Value) -> Action {
    Action::Patch {
        target: t,
        patch_type: PatchType::Json,
        patch: ops,
    }
}

/// Creates ConfigMap `name` in `ns`; returns its uid and resourceVersion.
async fn create_cm(client: &kube::Client, ns: &str, name: &str) -> (String, String) {
    let made = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}, "data": {"v": "0"}}))
                .unwrap(),
        )
        .await
        .unwrap();
    (
        made.metadata.uid.unwrap(),
        made.metadata.resource_version.unwrap(),
    )
}

/// `v` of ConfigMap `name`, or `None` when it does not exist.
async fn value(client: &kube::Client, ns: &str, name: &str) -> Option<String> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()?;
    cm.data.and_then(|d| d.get("v").cloned())
}

/// A conflict: handed back to the plugin, never permanent, no wait asked.
fn assert_conflict(e: &ActionError, request: &str) {
    assert!(
        matches!(e, ActionError::Conflict(m) if m.starts_with(request)),
        "{request}: {e:?}"
    );
    assert!(e.is_conflict() && !e.permanent() && !e.transient(), "{e:?}");
    assert_eq!(e.retry_after(), None);
}

#[tokio::test]
async fn a_stale_resource_version_is_a_conflict_and_the_fresh_object_then_succeeds() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "status-409-rv";
    namespace(&client, ns, json!({})).await;
    let (_, stale) = create_cm(&client, ns, "c").await;
    // Someone else writes: the plugin's resourceVersion is stale.
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "other"}})),
        )
        .await
        .unwrap();
    let sink = KubeSink::new(client.clone());
    let guarded = || target(ns, "c", None, Some(&stale));
    for (action, request) in [
        (apply(guarded(), "1"), "patch configmaps status-409-rv/c"),
        (merge(guarded(), "1"), "patch configmaps status-409-rv/c"),
        (
            json_patch(
                guarded(),
                json!([{"op": "replace", "path": "/data/v", "value": "1"}]),
            ),
            "patch configmaps status-409-rv/c",
        ),
    ] {
        let e = sink.execute("p", &action).await.unwrap_err();
        assert_conflict(&e, request);
    }
    assert_eq!(value(&client, ns, "c").await.as_deref(), Some("other"));
    // The next attempt, on the fresh object, succeeds.
    let fresh = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get("c")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    sink.execute("p", &merge(target(ns, "c", None, Some(&fresh)), "2"))
        .await
        .unwrap();
    assert_eq!(value(&client, ns, "c").await.as_deref(), Some("2"));
}

#[tokio::test]
async fn a_uid_precondition_that_fails_is_a_conflict_on_delete_apply_and_patch() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "status-409-uid";
    namespace(&client, ns, json!({})).await;
    create_cm(&client, ns, "c").await;
    let sink = KubeSink::new(client.clone());
    // The object was deleted and recreated: the plugin's uid is another.
    let old = || target(ns, "c", Some("00000000-0000-0000-0000-000000000000"), None);
    let delete = Action::Delete {
        target: old(),
        propagation: Propagation::Background,
    };
    let e = sink.execute("p", &delete).await.unwrap_err();
    assert_conflict(&e, "delete configmaps status-409-uid/c");
    assert!(
        e.to_string().contains("UID in the precondition"),
        "the server's own words: {e}"
    );
    // Apply and patch: the server answers 422 on metadata.uid, read as the
    // failed precondition it is.
    for action in [apply(old(), "1"), merge(old(), "1")] {
        let e = sink.execute("p", &action).await.unwrap_err();
        assert_conflict(&e, "patch configmaps status-409-uid/c");
        assert!(e.to_string().contains("precondition failed"), "{e}");
    }
    assert_eq!(value(&client, ns, "c").await.as_deref(), Some("0"));
}

#[tokio::test]
async fn a_failed_json_patch_test_is_a_conflict_and_a_patch_that_does_not_apply_is_invalid() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "status-422-test";
    namespace(&client, ns, json!({})).await;
    let (_, rv) = create_cm(&client, ns, "c").await;
    let sink = KubeSink::new(client.clone());
    // The SDK's optimistic lock: a test of the resourceVersion first.
    let locked = |rv: &str| {
        json_patch(
            target(ns, "c", None, None),
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                {"op": "replace", "path": "/data/v", "value": "locked"},
            ]),
        )
    };
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "other"}})),
        )
        .await
        .unwrap();
    let e = sink.execute("p", &locked(&rv)).await.unwrap_err();
    assert_conflict(&e, "patch configmaps status-422-test/c");
    assert!(
        e.to_string()
            .contains("test of /metadata/resourceVersion failed"),
        "{e}"
    );
    assert_eq!(value(&client, ns, "c").await.as_deref(), Some("other"));

    // The same bare 422 for an operation that cannot apply: invalid, and
    // the error names the operation the server does not.
    let missing = json_patch(
        target(ns, "c", None, None),
        json!([{"op": "remove", "path": "/data/absent"}]),
    );
    let e = sink.execute("p", &missing).await.unwrap_err();
    assert!(
        matches!(&e, ActionError::Invalid(m) if m.contains("operation 1 of 1") && m.contains("/data/absent")),
        "{e:?}"
    );
    assert!(e.permanent() && !e.is_conflict());

    // With the current resourceVersion the lock holds.
    let fresh = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get("c")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    sink.execute("p", &locked(&fresh)).await.unwrap();
    assert_eq!(value(&client, ns, "c").await.as_deref(), Some("locked"));
}

#[tokio::test]
async fn writes_to_a_deleted_object_are_not_found_and_its_delete_is_done() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "status-404";
    namespace(&client, ns, json!({})).await;
    create_cm(&client, ns, "gone").await;
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .delete("gone", &DeleteParams::default())
        .await
        .unwrap();
    let sink = KubeSink::new(client.clone());
    let apply_status = Action::Apply {
        target: target(ns, "gone", None, None),
        object: json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "gone", "namespace": ns}}),
        force: true,
        status: true,
    };
    for action in [merge(target(ns, "gone", None, None), "1"), apply_status] {
        let e = sink.execute("p", &action).await.unwrap_err();
        assert!(matches!(e, ActionError::NotFound(_)), "{e:?}");
        // Not permanent: the dispatcher retries the key, and its next
        // attempt sees the delete.
        assert!(
            !e.permanent() && !e.is_conflict() && !e.transient(),
            "{e:?}"
        );
    }
    assert_eq!(value(&client, ns, "gone").await, None, "nothing recreated");
    // A delete of what is gone: the sink says 404, the executor counts it
    // done.
    let delete = Action::Delete {
        target: target(ns, "gone", None, None),
        propagation: Propagation::Background,
    };
    assert!(matches!(
        sink.execute("p", &delete).await,
        Err(ActionError::NotFound(_))
    ));
    let executor = Executor::new(
        Arc::new(sink),
        ExecutorOptions::default(),
        Telemetry::new(Identity::from_env()),
    );
    assert_eq!(executor.execute("p", &delete).await, Ok(()));
    assert_eq!(executor.stats.applied.load(Ordering::Relaxed), 1);
}

/// A kubeconfig in `dir` like the admin's, authenticating with `token`.
fn kubeconfig_with_token(cp: &ControlPlane, dir: &Path, token: &str) -> std::path::PathBuf {
    let admin = std::fs::read_to_string(cp.admin_kubeconfig()).unwrap();
    let lines: Vec<String> = admin
        .lines()
        .map(|l| match l.find("token:") {
            Some(i) => format!("{}token: {token}", &l[..i]),
            None => l.to_owned(),
        })
        .collect();
    assert!(
        lines.iter().any(|l| l.trim() == format!("token: {token}")),
        "the admin kubeconfig authenticates with a token: {admin}"
    );
    let path = dir.join(format!("kubeconfig-{}", &token[..token.len().min(8)]));
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

/// A bound token of ServiceAccount `sa` in `ns` (created if missing).
async fn service_account_token(client: &kube::Client, ns: &str, sa: &str) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": sa, "namespace": ns}})).unwrap();
    let _ = accounts.create(&PostParams::default(), &account).await;
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"expirationSeconds": 3600}})).unwrap();
    accounts
        .create_token_request(sa, &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token
}

#[tokio::test]
async fn a_refused_token_is_unauthorized_and_an_identity_without_rbac_forbidden() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "status-401-403";
    namespace(&client, ns, json!({})).await;
    create_cm(&client, ns, "c").await;
    let dir = tempfile::tempdir().unwrap();

    let bad = client_from(&kubeconfig_with_token(cp, dir.path(), "not-a-token"))
        .await
        .unwrap();
    let e = KubeSink::new(bad)
        .execute("p", &merge(target(ns, "c", None, None), "1"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ActionError::Unauthorized(m) if m.starts_with("patch configmaps status-401-403/c")),
        "{e:?}"
    );
    // Retried with backoff by the dispatcher (tokens rotate), not here.
    assert!(
        !e.permanent() && !e.transient() && !e.is_conflict(),
        "{e:?}"
    );

    let token = service_account_token(&client, ns, "nobody").await;
    let nobody = client_from(&kubeconfig_with_token(cp, dir.path(), &token))
        .await
        .unwrap();
    let e = KubeSink::new(nobody)
        .execute("p", &merge(target(ns, "c", None, None), "1"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ActionError::Forbidden(m) if m.starts_with("patch configmaps status-401-403/c") && m.contains("system:serviceaccount:status-401-403:nobody")),
        "{e:?}"
    );
    // Retried with backoff by the dispatcher (RBAC propagates), not here.
    assert!(
        !e.permanent() && !e.transient() && !e.is_conflict(),
        "{e:?}"
    );
    assert_eq!(value(&client, ns, "c").await.as_deref(), Some("0"));
}

#[tokio::test]
async fn an_invalid_object_is_the_one_permanent_refusal() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "status-4xx";
    namespace(&client, ns, json!({})).await;
    create_cm(&client, ns, "c").await;
    let sink = KubeSink::new(client.clone());
    let bad_label = Action::Patch {
        target: target(ns, "c", None, None),
        patch_type: PatchType::Merge,
        patch: json!({"metadata": {"labels": {"not a key!": "x"}}}),
    };
    let e = sink.execute("p", &bad_label).await.unwrap_err();
    assert!(
        matches!(&e, ActionError::Invalid(m) if m.contains("metadata.labels")),
        "{e:?}"
    );
    assert!(e.permanent() && !e.is_conflict() && !e.transient(), "{e:?}");
    // An apply whose body does not fit the schema: the server answers 500
    // (structured merge cannot type the patch), which is the body refused,
    // never a server fault to retry.
    let untyped = Action::Apply {
        target: target(ns, "c", None, None),
        object: json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": ns}, "data": {"v": 1}}),
        force: true,
        status: false,
    };
    let e = sink.execute("p", &untyped).await.unwrap_err();
    assert!(
        matches!(&e, ActionError::Invalid(m) if m.contains(".data.v") && m.contains("schema")),
        "{e:?}"
    );
    assert!(e.permanent() && !e.transient(), "{e:?}");
}

/// A client of the proxy without kube's own retry layer (which would
/// retry 429, 503 and 504 inside one attempt), so each injected answer
/// reaches the sink.
async fn proxy_client(proxy: &FaultProxy, dir: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(proxy.kubeconfig(dir)).unwrap();
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
async fn throttling_and_server_errors_are_retried_honouring_retry_after() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "status-429-5xx";
    namespace(&client, ns, json!({})).await;
    create_cm(&client, ns, "c").await;
    let proxy = FaultProxy::start(client.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let sink = Arc::new(KubeSink::new(proxy_client(&proxy, dir.path()).await));

    // Every write refused, in turn 429 (Retry-After: 1), 500, 503, 504.
    proxy.storm(1);
    for expected in [429, 500, 503, 504] {
        let e = sink
            .execute("p", &merge(target(ns, "c", None, None), "1"))
            .await
            .unwrap_err();
        assert!(
            matches!(&e, ActionError::Throttled { message, .. } if message.contains("injected by the test's fault proxy")),
            "{expected}: {e:?}"
        );
        assert!(e.transient() && !e.permanent() && !e.is_conflict(), "{e:?}");
        let asked = (expected == 429).then_some(Duration::from_secs(1));
        assert_eq!(e.retry_after(), asked, "{expected}: {e:?}");
    }
    assert_eq!(
        proxy.injected_by_status(),
        [(429, 1), (500, 1), (503, 1), (504, 1)]
    );

    // Through the executor: the 429 is retried, not before the second the
    // server asked for, and the write then goes through.
    let executor = Executor::new(
        sink.clone(),
        ExecutorOptions {
            base_backoff: Duration::from_millis(10),
            ..ExecutorOptions::default()
        },
        Telemetry::new(Identity::from_env()),
    );
    let calm = async {
        while proxy.injected() < 5 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        proxy.calm();
    };
    let write = merge(target(ns, "c", None, None), "after");
    let started = Instant::now();
    let (result, ()) = tokio::join!(executor.execute("p", &write), calm);
    result.unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "retried after {:?}, before the Retry-After",
        started.elapsed()
    );
    assert_eq!(executor.stats.retried.load(Ordering::Relaxed), 1);
    assert_eq!(proxy.injected_by_status()[0], (429, 2));
    assert_eq!(value(&client, ns, "c").await.as_deref(), Some("after"));
}

/// Server-side applies every document of `yaml` as the admin.
async fn apply_all(client: &kube::Client, yaml: &str) -> Vec<(String, String)> {
    let mut applied = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(yaml) {
        let value: Value = serde::Deserialize::deserialize(doc).unwrap();
        if value.is_null() {
            continue;
        }
        let obj: DynamicObject = serde_json::from_value(value.clone()).unwrap();
        let types = obj.types.clone().unwrap();
        let (group, version) = types
            .api_version
            .split_once('/')
            .unwrap_or(("", &types.api_version));
        let gvk = GroupVersionKind::gvk(group, version, &types.kind);
        let plural = format!("{}s", types.kind.to_lowercase());
        let ar = ApiResource::from_gvk_with_plural(&gvk, &plural);
        let name = obj.metadata.name.clone().unwrap();
        let api: Api<DynamicObject> = match &obj.metadata.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        api.patch(
            &name,
            &PatchParams::apply("status-codes-test").force(),
            &Patch::Apply(&obj),
        )
        .await
        .unwrap();
        applied.push((types.kind, name));
    }
    applied
}

/// Whether the identity of `client` may `verb` events.k8s.io Events in
/// `ns`, as the authorizer answers now.
async fn may(client: &kube::Client, ns: &str, verb: &str) -> bool {
    let review: SelfSubjectAccessReview = serde_json::from_value(json!({
        "spec": {"resourceAttributes": {"namespace": ns, "verb": verb,
            "group": "events.k8s.io", "resource": "events"}}}))
    .unwrap();
    Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .is_some_and(|s| s.allowed)
}

/// The API server alone is enough here (no node): RBAC binding and the
/// Events API are the API server's. The recorder plugin's folder goes
/// through `kubewasm rbac` (the library behind the command), its YAML is
/// applied, and the sink acts as the ServiceAccount it binds.
#[tokio::test]
async fn the_same_event_three_times_under_the_generated_rbac_is_one_event_counting_3() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "status-rbac-events";
    namespace(&client, ns, json!({})).await;
    let (uid, _) = create_cm(&client, ns, "kubewasm-recorder").await;

    let plugins = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    kubewasm_tests::install(
        plugins.path(),
        "recorder",
        "recorder",
        Some(&recorder_sidecar(ns, &["configmaps"])),
    );
    let yaml = kubewasm::rbac::generate(&kubewasm::rbac::RbacOptions {
        namespace: ns.into(),
        name: "status-recorder".into(),
        service_account: "recorder".into(),
        host_role: false,
        cache_dir: Some(cache.path().to_owned()),
        ..kubewasm::rbac::RbacOptions::new(plugins.path().to_owned())
    })
    .await
    .unwrap();
    assert!(
        yaml.contains("resources: [events]\n    verbs: [create, patch]"),
        "{yaml}"
    );
    let applied = apply_all(&client, &yaml).await;
    assert_eq!(
        applied,
        [
            ("Role".to_owned(), "status-recorder".to_owned()),
            ("RoleBinding".to_owned(), "status-recorder".to_owned())
        ],
        "{yaml}"
    );
    let token = service_account_token(&client, ns, "recorder").await;
    let dir = tempfile::tempdir().unwrap();
    let recorder = client_from(&kubeconfig_with_token(cp, dir.path(), &token))
        .await
        .unwrap();
    eventually("the generated RBAC to take effect", WAIT, || async {
        (may(&recorder, ns, "create").await && may(&recorder, ns, "patch").await).then_some(())
    })
    .await;

    let executor = Executor::new(
        Arc::new(KubeSink::new(recorder)),
        ExecutorOptions::default(),
        Telemetry::new(Identity::from_env()),
    );
    let event = Action::Event {
        regarding: Target {
            uid: Some(uid),
            ..Target::new(configmaps(), Some(ns.into()), "kubewasm-recorder")
        },
        event_type: EventType::Normal,
        reason: "Seen".into(),
        note: "the same note".into(),
        reporter: "recorder@1".into(),
    };
    // Three calls, each recording the same Event through the Event queue.
    for _ in 0..3 {
        executor
            .execute_all("recorder", vec![event.clone()])
            .await
            .unwrap();
    }
    executor.events_idle().await;
    assert_eq!(executor.stats.failed.load(Ordering::Relaxed), 0);
    assert_eq!(executor.stats.events_dropped.load(Ordering::Relaxed), 0);
    assert_eq!(executor.stats.applied.load(Ordering::Relaxed), 3);
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels("kubewasm.io/plugin=recorder"))
        .await
        .unwrap()
        .items;
    assert_eq!(
        events.len(),
        1,
        "one Event object for the series: {events:?}"
    );
    assert_eq!(
        events[0].series.as_ref().map(|s| s.count),
        Some(3),
        "{events:?}"
    );
}
