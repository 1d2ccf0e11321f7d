//! Smoke test of the test control plane (tests/controlplane): a real
//! kube-apiserver v1.35 with etcd, token users, RBAC, watch-list and an
//! API server restart that keeps the data.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kube::runtime::watcher;
use kubewasm_tests::controlplane::ControlPlane;

fn meta(name: &str, ns: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: ns.map(Into::into),
        ..ObjectMeta::default()
    }
}

fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

async fn grant_configmap_reader(client: &kube::Client, ns: &str) {
    let roles: Api<Role> = Api::namespaced(client.clone(), ns);
    roles
        .create(
            &PostParams::default(),
            &Role {
                metadata: meta("configmap-reader", Some(ns)),
                rules: Some(vec![PolicyRule {
                    api_groups: Some(vec![String::new()]),
                    resources: Some(vec!["configmaps".into()]),
                    verbs: vec!["get".into(), "list".into(), "watch".into()],
                    ..PolicyRule::default()
                }]),
            },
        )
        .await
        .unwrap();
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), ns);
    bindings
        .create(
            &PostParams::default(),
            &RoleBinding {
                metadata: meta("e2e-reads-configmaps", Some(ns)),
                role_ref: RoleRef {
                    api_group: "rbac.authorization.k8s.io".into(),
                    kind: "Role".into(),
                    name: "configmap-reader".into(),
                },
                subjects: Some(vec![Subject {
                    kind: "User".into(),
                    name: ControlPlane::USER.into(),
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    ..Subject::default()
                }]),
            },
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn version_rbac_and_restart() {
    let started = Instant::now();
    let cp = ControlPlane::start().await.unwrap();
    eprintln!(
        "control plane {} ready in {:?}",
        cp.server(),
        started.elapsed()
    );
    assert!(cp.admin_kubeconfig().is_file());
    assert!(cp.user_kubeconfig().is_file());
    assert!(cp.etcd().starts_with("http://127.0.0.1:"));

    let admin = cp.admin_client().await;
    let version = admin.apiserver_version().await.unwrap();
    assert!(
        version.git_version.starts_with("v1.35."),
        "gitVersion {}",
        version.git_version
    );
    assert_eq!(
        (version.major.as_str(), version.minor.as_str()),
        ("1", "35")
    );

    let ns = "smoke";
    Api::<Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: meta(ns, None),
                ..Namespace::default()
            },
        )
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    cms.create(
        &PostParams::default(),
        &ConfigMap {
            metadata: meta("hello", Some(ns)),
            data: Some([("greeting".to_owned(), "hi".to_owned())].into()),
            ..ConfigMap::default()
        },
    )
    .await
    .unwrap();

    // The non-admin user may not list ConfigMaps...
    let user = cp.user_client().await;
    let user_cms: Api<ConfigMap> = Api::namespaced(user.clone(), ns);
    let err = user_cms.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(status_code(&err), Some(403), "{err}");

    // ...until a RoleBinding grants it (the authorizer's cache follows
    // within milliseconds).
    grant_configmap_reader(&admin, ns).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let listed = loop {
        match user_cms.list(&ListParams::default()).await {
            Ok(list) => break list,
            Err(e) if status_code(&e) == Some(403) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("user list after the RoleBinding: {e}"),
        }
    };
    let names: Vec<_> = listed
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    assert_eq!(names, ["hello"]);
    // Still nothing beyond what the Role grants.
    let err = Api::<ConfigMap>::namespaced(user.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert_eq!(status_code(&err), Some(403), "{err}");

    // Restart the API server: same address, same data, same RBAC.
    let t = Instant::now();
    cp.restart().await.unwrap();
    eprintln!("API server restarted in {:?}", t.elapsed());
    let admin = cp.admin_client().await;
    let cm = Api::<ConfigMap>::namespaced(admin, ns)
        .get("hello")
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["greeting"], "hi");
    let names: Vec<_> = Api::<ConfigMap>::namespaced(cp.user_client().await, ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    assert_eq!(names, ["hello"]);
}

/// The shared instance serves a watch-list (streaming initial list,
/// `sendInitialEvents=true`): the WatchList feature is on.
#[tokio::test]
async fn shared_instance_streams_initial_lists() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client().await;
    let ns = "smoke-watchlist";
    Api::<Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: meta(ns, None),
                ..Namespace::default()
            },
        )
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    for name in ["a", "b", "c"] {
        cms.create(
            &PostParams::default(),
            &ConfigMap {
                metadata: meta(name, Some(ns)),
                ..ConfigMap::default()
            },
        )
        .await
        .unwrap();
    }
    // The watch cache may serve a list started right after the writes from
    // a moment before the last one: list again until it has all three
    // (each list still has to have the streaming shape).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut events = watcher(cms.clone(), watcher::Config::default().streaming_lists()).boxed();
        let mut initial = Vec::new();
        let done = tokio::time::timeout_at(deadline, async {
            while let Some(event) = events.try_next().await.unwrap() {
                match event {
                    watcher::Event::Init => {}
                    watcher::Event::InitApply(cm) => initial.push(cm.metadata.name.unwrap()),
                    watcher::Event::InitDone => return,
                    other => panic!("unexpected event before InitDone: {other:?}"),
                }
            }
            panic!("the watch ended before InitDone");
        })
        .await;
        assert!(done.is_ok(), "no InitDone within 30s");
        initial.sort();
        if initial == ["a", "b", "c"] {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the streaming list never had all three: {initial:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
