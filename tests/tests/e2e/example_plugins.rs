//! The example plugins writing to the real server, and the
//! config-replicator built in all five languages doing its job there.

use super::*;

#[tokio::test]
async fn example_plugins_write_to_the_server() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "e2e-examples";
    namespace(
        &client,
        ns,
        json!({"kubewasm.io/defaults": "enabled", "tenant": "yes"}),
    )
    .await;
    namespace(&client, "e2e-examples-src", json!({})).await;
    let src: Api<ConfigMap> = Api::namespaced(client.clone(), "e2e-examples-src");
    src.create(
        &PostParams::default(),
        &cm(
            "e2e-examples-src",
            "shared",
            json!({"kubewasm.io/replicate": "true"}),
            json!({"k": "1"}),
        ),
    )
    .await
    .unwrap();
    let root = kubewasm_tests::repo_root().join("examples/plugins");
    let sidecar = |p: &str| std::fs::read_to_string(root.join(format!("{p}.yaml"))).unwrap();
    let (nd, cl, cr) = (
        sidecar("namespace-defaults"),
        sidecar("crashloop-watcher"),
        sidecar("config-replicator"),
    );
    let host = HostProcess::start(
        cp.admin_kubeconfig(),
        &[
            ("namespace-defaults", "namespace_defaults", Some(&nd)),
            ("crashloop-watcher", "crashloop_watcher", Some(&cl)),
            ("config-replicator", "config_replicator", Some(&cr)),
        ],
    );

    // namespace-defaults: the policy exists, owned by kubewasm/namespace-defaults.
    let policies: Api<kube::core::DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("networking.k8s.io", "v1", "NetworkPolicy"),
            "networkpolicies",
        ),
    );
    let policy = eventually("default-deny NetworkPolicy", WAIT, || async {
        policies.get_opt("default-deny").await.unwrap()
    })
    .await;
    let managers = field_managers(&policy.metadata);
    assert!(
        managers.contains(&"kubewasm/namespace-defaults".to_owned()),
        "{managers:?}"
    );

    // config-replicator: the copy follows its source through update and delete.
    let copies: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    eventually("replicated ConfigMap", WAIT, || async {
        let c = copies.get_opt("shared").await.unwrap()?;
        (c.data?.get("k")? == "1").then_some(())
    })
    .await;
    src.patch(
        "shared",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "2"}})),
    )
    .await
    .unwrap();
    eventually("copy updated", WAIT, || async {
        let c = copies.get_opt("shared").await.unwrap()?;
        (c.data?.get("k")? == "2").then_some(())
    })
    .await;
    src.delete("shared", &DeleteParams::default())
        .await
        .unwrap();
    eventually("copy deleted", WAIT, || async {
        copies
            .get_opt("shared")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;

    // crashloop-watcher: Deployment -> ReplicaSet -> Pod made by hand (no
    // controllers run), restarts set through the status subresource.
    let dyn_api = |group: &str, kind: &str, plural: &str| -> Api<kube::core::DynamicObject> {
        Api::namespaced_with(
            client.clone(),
            ns,
            &kube::core::ApiResource::from_gvk_with_plural(
                &kube::core::GroupVersionKind::gvk(group, "v1", kind),
                plural,
            ),
        )
    };
    let labels = json!({"app": "web"});
    let spec_template = json!({"metadata": {"labels": labels},
        "spec": {"automountServiceAccountToken": false, "containers": [{"name": "app", "image": "example/app:1"}]}});
    let deploy: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": ns},
        "spec": {"selector": {"matchLabels": labels}, "template": spec_template}}))
    .unwrap();
    let deploy = dyn_api("apps", "Deployment", "deployments")
        .create(&PostParams::default(), &deploy)
        .await
        .unwrap();
    let owner = |kind: &str, o: &kube::core::DynamicObject, api_version: &str| {
        json!([{"apiVersion": api_version, "kind": kind,
        "name": o.metadata.name, "uid": o.metadata.uid, "controller": true}])
    };
    let rs: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-1", "namespace": ns, "ownerReferences": owner("Deployment", &deploy, "apps/v1")},
        "spec": {"selector": {"matchLabels": labels}, "template": spec_template}}))
    .unwrap();
    let rs = dyn_api("apps", "ReplicaSet", "replicasets")
        .create(&PostParams::default(), &rs)
        .await
        .unwrap();
    let pods = dyn_api("", "Pod", "pods");
    let pod: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-1-x", "namespace": ns, "labels": labels, "ownerReferences": owner("ReplicaSet", &rs, "apps/v1")},
        "spec": spec_template["spec"]}))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let status = |n: i64| {
        json!({"status": {"containerStatuses": [{"name": "app", "image": "example/app:1", "imageID": "",
        "ready": false, "restartCount": n, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}})
    };
    pods.patch_status("web-1-x", &PatchParams::default(), &Patch::Merge(status(2)))
        .await
        .unwrap();
    pods.patch_status("web-1-x", &PatchParams::default(), &Patch::Merge(status(6)))
        .await
        .unwrap();
    let deployments = dyn_api("apps", "Deployment", "deployments");
    eventually("crashloop annotation on the Deployment", WAIT, || async {
        let d = deployments.get("web").await.unwrap();
        (d.metadata
            .annotations?
            .get("kubewasm.io/crashloop-restarts")?
            == "6")
            .then_some(())
    })
    .await;
    let events: Api<kube::core::DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("events.k8s.io", "v1", "Event"),
            "events",
        ),
    );
    let crash = eventually("CrashLooping Event", WAIT, || async {
        let list = events.list(&Default::default()).await.unwrap();
        list.items
            .into_iter()
            .find(|e| e.data["reason"] == "CrashLooping")
    })
    .await;
    assert_eq!(crash.data["type"], "Warning");
    assert_eq!(crash.data["reportingController"], "kubewasm");
    assert_eq!(crash.data["regarding"]["name"], "web-1-x");
    assert!(
        crash.data["note"]
            .as_str()
            .unwrap()
            .contains("restarted 6 times")
    );
    assert!(host.stop().success());
}

/// The config-replicator in all five languages, each built against WIT
/// 0.2 (its component exports `kubewasm:plugin/handler@0.2.0`), does its
/// job on the real server: copies, follows an update, goes with its source.
/// One host per language in turn (each compiles a large component; at
/// once they would only slow each other down). Other tests' replicators
/// run beside them on the shared server: each sweeps only the copies it
/// made (`kubewasm.io/replicated-by`).
#[tokio::test]
async fn plugins_in_all_five_languages_act_on_the_real_server() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let langs = ["rust", "js", "python", "c", "go"];
    let artifact = |lang: &str| {
        if lang == "rust" {
            kubewasm_tests::plugin_artifacts().join("config_replicator.wasm")
        } else {
            kubewasm_tests::language_artifacts().join(format!("{lang}-config-replicator.wasm"))
        }
    };
    for lang in langs {
        let bytes = std::fs::read(artifact(lang)).unwrap();
        let export = b"kubewasm:plugin/handler@0.2.0";
        assert!(
            bytes.windows(export.len()).any(|w| w == export),
            "the {lang} config-replicator does not export handler@0.2.0"
        );
    }
    let src_ns = "e2e-lang-src";
    namespace(&client, src_ns, json!({})).await;
    let src: Api<ConfigMap> = Api::namespaced(client.clone(), src_ns);
    for lang in langs {
        namespace(
            &client,
            &format!("e2e-lang-{lang}"),
            json!({format!("e2e-lang-{lang}"): "yes"}),
        )
        .await;
        let name = format!("from-{lang}");
        src.create(
            &PostParams::default(),
            &cm(
                src_ns,
                &name,
                json!({format!("e2e-lang-{lang}"): "true"}),
                json!({"k": "1"}),
            ),
        )
        .await
        .unwrap();
        let host = HostProcess::start_with(cp.admin_kubeconfig(), |dir| {
            let sidecar = format!(
                "config:\n  sourceSelector: e2e-lang-{lang}=true\n  namespaceSelector: e2e-lang-{lang}=yes\nlimits: {{memory: 256Mi, timeout: 5s}}\n{}",
                kubewasm_tests::REPLICATOR_ACCESS
            );
            kubewasm_tests::install_file(
                dir,
                &format!("{lang}-config-replicator"),
                &artifact(lang),
                Some(&sidecar),
            );
        });
        let copies: Api<ConfigMap> = Api::namespaced(client.clone(), &format!("e2e-lang-{lang}"));
        let copy = eventually(
            &format!("the {lang} plugin's copy"),
            Duration::from_secs(180),
            || async { copies.get_opt(&name).await.unwrap() },
        )
        .await;
        assert_eq!(copy.data.unwrap()["k"], "1");
        let managers = field_managers(&copy.metadata);
        assert!(
            managers.contains(&format!("kubewasm/{lang}-config-replicator")),
            "{managers:?}"
        );
        src.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "2"}})),
        )
        .await
        .unwrap();
        eventually(&format!("the {lang} copy follows"), WAIT, || async {
            let c = copies.get_opt(&name).await.unwrap()?;
            (c.data?.get("k")? == "2").then_some(())
        })
        .await;
        src.delete(&name, &DeleteParams::default()).await.unwrap();
        eventually(&format!("the {lang} copy is deleted"), WAIT, || async {
            copies.get_opt(&name).await.unwrap().is_none().then_some(())
        })
        .await;
        assert!(host.stop().success(), "{lang}: host exit");
    }
}
