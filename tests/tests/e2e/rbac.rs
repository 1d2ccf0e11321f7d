//! A host under an identity RBAC narrows: a forbidden write is logged and
//! the rest goes on; a forbidden informer marks its plugin broken on
//! `/readyz` until granted.

use super::*;

#[tokio::test]
async fn with_only_the_rbac_it_needs_the_host_works_and_a_forbidden_write_is_logged() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let (allowed, denied, src) = ("e2e-rbac-a", "e2e-rbac-b", "e2e-rbac-src");
    namespace(&client, allowed, json!({"e2e-rbac": "yes"})).await;
    namespace(&client, denied, json!({"e2e-rbac": "yes"})).await;
    namespace(&client, src, json!({})).await;
    // Read everywhere the plugin reads; write ConfigMaps only in `allowed`.
    let role: ClusterRole = serde_json::from_value(json!({"metadata": {"name": "e2e-kubewasm-read"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps", "namespaces"], "verbs": ["get", "list", "watch"]}]})).unwrap();
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({"metadata": {"name": "e2e-kubewasm-read"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "e2e-kubewasm-read"},
        "subjects": [{"kind": "User", "name": "kubewasm-e2e", "apiGroup": "rbac.authorization.k8s.io"}]})).unwrap();
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let write: Role = serde_json::from_value(json!({"metadata": {"name": "write", "namespace": allowed},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "patch", "create", "update", "delete"]}]})).unwrap();
    Api::<Role>::namespaced(client.clone(), allowed)
        .create(&PostParams::default(), &write)
        .await
        .unwrap();
    let rb: RoleBinding = serde_json::from_value(json!({"metadata": {"name": "write", "namespace": allowed},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "write"},
        "subjects": [{"kind": "User", "name": "kubewasm-e2e", "apiGroup": "rbac.authorization.k8s.io"}]})).unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), allowed)
        .create(&PostParams::default(), &rb)
        .await
        .unwrap();

    Api::<ConfigMap>::namespaced(client.clone(), src)
        .create(
            &PostParams::default(),
            &cm(
                src,
                "rbac-shared",
                json!({"e2e-rbac-replicate": "true"}),
                json!({"k": "1"}),
            ),
        )
        .await
        .unwrap();
    // The grant allows every namespace: the RBAC, narrower, refuses.
    let sidecar = format!(
        "config:\n  sourceSelector: e2e-rbac-replicate=true\n  namespaceSelector: e2e-rbac=yes\n{}",
        kubewasm_tests::REPLICATOR_ACCESS
    );
    let host = HostProcess::start(
        cp.user_kubeconfig(),
        &[("config-replicator", "config_replicator", Some(&sidecar))],
    );
    let copies: Api<ConfigMap> = Api::namespaced(client.clone(), allowed);
    eventually("the copy in the allowed namespace", WAIT, || async {
        copies.get_opt("rbac-shared").await.unwrap().map(|_| ())
    })
    .await;
    let line = host.wait_line("action failed: ", WAIT).await;
    for part in [
        "config-replicator",
        "verb=\"patch\"",
        "configmaps e2e-rbac-b/rbac-shared",
        "forbidden",
    ] {
        assert!(line.contains(part), "{part:?} missing from: {line}");
    }
    assert!(
        Api::<ConfigMap>::namespaced(client.clone(), denied)
            .get_opt("rbac-shared")
            .await
            .unwrap()
            .is_none()
    );
    // The host carries on: a later change still reaches the allowed copy.
    Api::<ConfigMap>::namespaced(client.clone(), src)
        .patch(
            "rbac-shared",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "2"}})),
        )
        .await
        .unwrap();
    eventually("the allowed copy follows", WAIT, || async {
        let c = copies.get_opt("rbac-shared").await.unwrap()?;
        (c.data?.get("k")? == "2").then_some(())
    })
    .await;
    assert!(host.stop().success());
}

/// An identity that may read ConfigMaps but not Pods: the Pod informer is
/// refused (403), the plugin subscribed to it is reported broken on
/// `/readyz`, naming the verb and the resource to grant; granting it makes
/// the host ready.
#[tokio::test]
async fn a_forbidden_informer_marks_its_plugin_broken_on_readyz_until_granted() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let grant = |name: &str, resources: Value| {
        let role: ClusterRole = serde_json::from_value(json!({"metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": resources, "verbs": ["get", "list", "watch"]}]}))
        .unwrap();
        let binding: ClusterRoleBinding = serde_json::from_value(json!({"metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "User", "name": "kubewasm-e2e", "apiGroup": "rbac.authorization.k8s.io"}]}))
        .unwrap();
        let client = client.clone();
        async move {
            Api::<ClusterRole>::all(client.clone())
                .create(&PostParams::default(), &role)
                .await
                .unwrap();
            Api::<ClusterRoleBinding>::all(client)
                .create(&PostParams::default(), &binding)
                .await
                .unwrap();
        }
    };
    grant("e2e-forbidden-cm-only", json!(["configmaps"])).await;
    // testkit subscribes to Pods and ConfigMaps (and its sidecar grants it).
    let host = HostProcess::start(
        cp.user_kubeconfig(),
        &[(
            "pods-denied",
            "testkit",
            Some(kubewasm_tests::TESTKIT_ACCESS),
        )],
    );
    let addr = host.metrics_addr(WAIT).await;
    // The ConfigMap informer is allowed: once it has synced, /readyz names
    // only the broken plugin (before, it also lists the informer as not
    // synced, which on a loaded machine outlasts the refusal).
    let body = eventually_seen(
        "/readyz to name only the broken plugin (the ConfigMap informer is allowed and must sync)",
        WAIT,
        || async {
            let (code, _, body) = http_get(addr, "/readyz").unwrap();
            if code == 503
                && body.contains("plugin pods-denied is broken")
                && !body.contains("configmaps")
            {
                Ok(body)
            } else {
                Err(format!("{code}\n{body}"))
            }
        },
    )
    .await;
    let line = body
        .lines()
        .find(|l| l.contains("plugin pods-denied is broken"))
        .unwrap();
    assert!(
        (line.contains("refuses to list pods") || line.contains("refuses to watch pods"))
            && line.contains("grant the host's identity the list and watch verbs on pods"),
        "{body}"
    );
    // The log names the plugin too.
    host.wait_log("plugins=pods-denied", WAIT).await;
    // A one-shot run with the same identity does not wait forever: it ends
    // once nothing else is left, says what to grant, and exits non-zero.
    let plugins = tempfile::tempdir().unwrap();
    install(
        plugins.path(),
        "pods-denied",
        "testkit",
        Some(kubewasm_tests::TESTKIT_ACCESS),
    );
    let kubeconfig = cp.user_kubeconfig().to_owned();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(kubewasm_bin())
            .args([
                "run",
                "--until-idle",
                "--metrics-addr",
                "off",
                "--kubeconfig",
            ])
            .arg(&kubeconfig)
            .arg("--plugins")
            .arg(plugins.path())
            .env_remove("KUBECONFIG")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{:?}\n{stderr}", out.status);
    assert!(
        stderr.lines().any(|l| l.contains("informer pods")
            && (l.contains("forbidden to list") || l.contains("forbidden to watch"))
            && l.contains("plugins pods-denied never synced")),
        "{stderr}"
    );
    grant("e2e-forbidden-pods", json!(["pods"])).await;
    // The watcher retries with backoff (up to about 30 s between tries).
    eventually(
        "/readyz 200 once granted",
        Duration::from_secs(120),
        || async { (http_get(addr, "/readyz").unwrap().0 == 200).then_some(()) },
    )
    .await;
    assert!(host.stop().success());
}
