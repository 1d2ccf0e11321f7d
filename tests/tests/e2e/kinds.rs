//! Kinds as the real server serves them: a CRD created during the run, a
//! plugin waiting for its CRD, a kind that cannot be watched, and the host's
//! built-in kind and field-selector tables checked against the server.

use super::*;

/// Creates the namespaced CRD `<plural>.e2e.kubewasm.io` (kind `kind`,
/// version v1, any fields).
async fn create_crd(client: &kube::Client, kind: &str, plural: &str) {
    let crds: Api<kube::core::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
            ),
            "customresourcedefinitions",
        ),
    );
    let crd: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.e2e.kubewasm.io")},
        "spec": {"group": "e2e.kubewasm.io", "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase()},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}))
    .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
}

#[tokio::test]
async fn a_crd_created_during_the_run_flows_like_builtins() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "e2e-crd";
    namespace(&client, ns, json!({})).await;
    // The host starts before the CRD exists.
    let host = HostProcess::start(
        cp.admin_kubeconfig(),
        &[(
            "recorder-cm",
            "recorder",
            Some(&recorder_sidecar("e2e-crd-none", &["configmaps"])),
        )],
    );
    host.wait_log("cache synced", WAIT).await;
    create_crd(&client, "Widget", "widgets").await;
    let widgets: Api<kube::core::DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("e2e.kubewasm.io", "v1", "Widget"),
            "widgets",
        ),
    );
    let widget = |name: &str, size: i64| -> kube::core::DynamicObject {
        serde_json::from_value(json!({"apiVersion": "e2e.kubewasm.io/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": ns}, "spec": {"size": size}}))
        .unwrap()
    };
    eventually("the CRD to be served", WAIT, || async {
        widgets
            .create(&PostParams::default(), &widget("w1", 1))
            .await
            .ok()
    })
    .await;
    // A plugin dropped in now names the new kind by resource name.
    install(
        host.plugins.path(),
        "recorder",
        "recorder",
        Some(&recorder_sidecar(ns, &["widgets.e2e.kubewasm.io"])),
    );
    wait_seen(&client, ns, |s| s.iter().any(|x| x.delta == "synced")).await;
    widgets
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 2}})),
        )
        .await
        .unwrap();
    widgets
        .create(&PostParams::default(), &widget("w2", 1))
        .await
        .unwrap();
    widgets
        .delete("w1", &DeleteParams::default())
        .await
        .unwrap();
    let seen = wait_seen(&client, ns, |s| s.len() >= 5).await;
    let shorts: Vec<String> = seen.iter().map(Seen::short).collect();
    assert_eq!(
        shorts,
        [
            "added w1 initial",
            "synced",
            "updated w1",
            "added w2",
            "deleted w1"
        ]
    );
    drop(host);
}

#[tokio::test]
async fn a_plugin_refused_for_an_unknown_kind_loads_once_its_crd_is_installed() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "e2e-crd-late";
    namespace(&client, ns, json!({})).await;
    // The plugin names a kind no CRD serves yet: refused, with the remedy.
    // (A 1 s folder poll, which is also when waiting plugins are retried.)
    let (_config, config_file) = host_config("poll: 1s\n");
    let config_arg = config_file.to_str().unwrap();
    let host = HostProcess::start_args(
        cp.admin_kubeconfig(),
        &["--config", config_arg],
        &[],
        |dir| {
            install(
                dir,
                "recorder",
                "recorder",
                Some(&recorder_sidecar(ns, &["gadgets.e2e.kubewasm.io"])),
            );
        },
    );
    host.wait_log("does not serve: install its CRD", WAIT).await;
    create_crd(&client, "Gadget", "gadgets").await;
    // Nothing touches the plugin folder: the host notices the new kind.
    wait_seen(&client, ns, |s| s.iter().any(|x| x.delta == "synced")).await;
    let gadgets: Api<kube::core::DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("e2e.kubewasm.io", "v1", "Gadget"),
            "gadgets",
        ),
    );
    let gadget: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "e2e.kubewasm.io/v1", "kind": "Gadget",
        "metadata": {"name": "g1", "namespace": ns}}))
    .unwrap();
    gadgets
        .create(&PostParams::default(), &gadget)
        .await
        .unwrap();
    let seen = wait_seen(&client, ns, |s| s.iter().any(|x| x.delta == "added")).await;
    let shorts: Vec<String> = seen.iter().map(Seen::short).collect();
    assert_eq!(shorts, ["synced", "added g1"]);
    assert!(
        host.logs()
            .contains("the cluster's kinds changed; loading the plugin again"),
        "{}",
        host.logs()
    );
    assert!(host.stop().success());
}

/// A kind the server serves but cannot list or watch (TokenReview: create
/// only) is refused at registration, naming the kind and the missing verb,
/// instead of an informer that 405s forever and stalls the plugin's other
/// subscriptions; other plugins are unaffected and the host becomes ready.
#[tokio::test]
async fn a_kind_that_cannot_be_watched_is_refused_at_registration() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "e2e-unwatchable";
    namespace(&client, ns, json!({})).await;
    let bad = recorder_sidecar(ns, &["configmaps", "tokenreviews.authentication.k8s.io"]);
    let good = recorder_sidecar(ns, &["configmaps"]);
    let host = HostProcess::start(
        cp.admin_kubeconfig(),
        &[
            ("unwatchable", "recorder", Some(&bad)),
            ("fine", "recorder", Some(&good)),
        ],
    );
    let line = host.wait_line("cannot load plugin", WAIT).await;
    for part in [
        "plugin=unwatchable",
        "tokenreviews.authentication.k8s.io cannot be subscribed to",
        "does not serve `list`",
        "its verbs: create",
    ] {
        assert!(line.contains(part), "{part:?} missing from: {line}");
    }
    let addr = host.metrics_addr(WAIT).await;
    eventually("/readyz 200", WAIT, || async {
        (http_get(addr, "/readyz").unwrap().0 == 200).then_some(())
    })
    .await;
    assert!(
        !host
            .logs()
            .contains("tokenreviews.authentication.k8s.io labels"),
        "no informer was started for it"
    );
    assert!(!host.logs().contains("starting informer tokenreviews"));
    let (exit, logs) = host.stop_with_logs();
    assert!(exit.success(), "exit {exit:?} after SIGTERM; log:\n{logs}");
}

/// The local cluster's built-in kind table knows every built-in kind the
/// real API server serves (its preferred version, plural and scope), and
/// names no kind the server does not serve.
#[tokio::test]
async fn the_built_in_kind_table_matches_the_real_servers_discovery() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let discovered = kubewasm::kind::KindRegistry::default();
    kubewasm::source::kube::discovery::Discovery::new(client, discovered.clone())
        .run()
        .await
        .unwrap();
    let builtin = kubewasm::kind::KindRegistry::builtin();
    // CRDs other tests install are not built in.
    let served: Vec<_> = discovered
        .all()
        .into_iter()
        .filter(|k| !k.gvk.group.contains("kubewasm"))
        .collect();
    assert!(served.len() > 60, "discovery found too little: {served:?}");
    let mut missing = Vec::new();
    for k in &served {
        let known = builtin
            .all()
            .into_iter()
            .find(|b| b.gvk.group == k.gvk.group && b.gvk.kind == k.gvk.kind);
        match known {
            Some(b) if b.plural == k.plural && b.namespaced == k.namespaced => {}
            other => missing.push(format!("{k:?} (table: {other:?})")),
        }
    }
    assert!(
        missing.is_empty(),
        "not in the table as served:\n{}",
        missing.join("\n")
    );
    for b in builtin.all() {
        assert!(
            served.iter().any(|k| k.gvk == b.gvk),
            "the table names {:?}, which the server does not serve at that version",
            b.gvk
        );
    }
}

/// Field selectors: what the host refuses at registration is exactly what
/// the real server refuses, for every listable built-in kind (each field
/// the host accepts, `metadata.namespace`, and an unknown field).
#[tokio::test]
async fn field_selector_support_matches_the_real_server() {
    use kube::api::{ApiResource, DynamicObject, ListParams};
    use kube::core::GroupVersionKind;
    use kubewasm::informer::selector::{FieldSelector, supported_fields};
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let create_only = [
        "bindings",
        "tokenreviews",
        "selfsubjectreviews",
        "localsubjectaccessreviews",
        "selfsubjectaccessreviews",
        "selfsubjectrulesreviews",
        "subjectaccessreviews",
    ];
    let mut mismatches = Vec::new();
    for kind in kubewasm::kind::KindRegistry::builtin().all() {
        if create_only.contains(&kind.plural.as_str()) {
            continue;
        }
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&kind.gvk.group, &kind.gvk.version, &kind.gvk.kind),
            &kind.plural,
        );
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let mut candidates: Vec<&str> = supported_fields(&kind);
        candidates.extend(["metadata.namespace", "spec.bogus"]);
        candidates.dedup();
        for field in candidates {
            let selector = format!("{field}=x");
            let ours = FieldSelector::parse(&selector)
                .unwrap()
                .check_supported(&kind)
                .is_ok();
            let theirs = match api
                .list_metadata(&ListParams::default().fields(&selector).limit(1))
                .await
            {
                Ok(_) => true,
                Err(kube::Error::Api(e)) if e.code == 400 => false,
                Err(e) => panic!("{} {selector}: {e}", kind.resource_name()),
            };
            if ours != theirs {
                mismatches.push(format!(
                    "{} {field}: host {ours}, server {theirs}",
                    kind.resource_name()
                ));
            }
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}
