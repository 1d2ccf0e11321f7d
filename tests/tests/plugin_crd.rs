//! The Plugin and NamespacedPlugin CRDs (deploy/base/crds.yaml, generated
//! from host/src/crd) on the real API server: they install and become
//! Established; a good object is stored and its status subresource is
//! writable; a bad spec is refused at create with a message that names the
//! field (the CEL rules and the schema's enums and ranges); `kubectl get
//! plugins` columns come from the server's Table output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::install_plugin_crds;
use kubewasm_tests::objects::api;
use serde_json::{Value, json};

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const CONTENT: &str = "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

fn object(kind: &str, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "kubewasm.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap()
}

/// Creates the object and returns the server's refusal message (panics if
/// it was accepted).
async fn refused(api: &Api<DynamicObject>, obj: &DynamicObject) -> String {
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => panic!(
            "{} was accepted",
            obj.metadata.name.as_deref().unwrap_or("")
        ),
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422, "{s:?}");
            s.message
        }
        Err(e) => panic!("unexpected error: {e}"),
    }
}

#[tokio::test]
async fn plugin_crds_install_validate_and_print() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    install_plugin_crds(&client).await;
    let plugins = api(&client, "Plugin", None);

    // A good Plugin is stored, and the host can write its status.
    let good = object(
        "Plugin",
        "replicator",
        json!({"module": {"oci": {"reference": format!("registry.example:5000/plugins/replicator@{DIGEST}")}},
               "config": {"source": {"namespace": "a", "name": "b"}, "any": [1, {"x": null}]},
               "limits": {"memory": "32Mi", "timeout": "250ms", "concurrency": 2},
               "access": [{"kinds": ["configmaps"], "verbs": ["read", "apply"], "namespaces": ["a"]}]}),
    );
    let created = plugins.create(&PostParams::default(), &good).await.unwrap();
    // Before any host writes status, the object says no generation was
    // observed, so kstatus reads it InProgress, not Current.
    let fresh = plugins.get("replicator").await.unwrap();
    assert_eq!(
        fresh.data["status"]["observedGeneration"], -1,
        "{:?}",
        fresh.data
    );
    let mut value = serde_json::to_value(&fresh).unwrap();
    value["apiVersion"] = json!("kubewasm.io/v1alpha1");
    value["kind"] = json!("Plugin");
    assert_eq!(
        kubewasm_tests::tools::compute_status(&value)["status"],
        "InProgress",
        "{value}"
    );
    assert_eq!(
        created.data["spec"]["config"]["any"],
        json!([1, {"x": null}]),
        "config is kept as written"
    );
    plugins
        .patch_status(
            "replicator",
            &PatchParams::apply("kubewasm").force(),
            &Patch::Apply(json!({
                "apiVersion": "kubewasm.io/v1alpha1", "kind": "Plugin",
                "status": {"observedGeneration": 1, "contentDigest": CONTENT, "manifestDigest": DIGEST, "version": "0123456789ab",
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Serving",
                        "message": "served by 2 of 2 replicas", "lastTransitionTime": "2026-11-26T00:00:00Z"}]}
            })),
        )
        .await
        .unwrap();

    // `kubectl get plugins`: the server's Table has our columns and values.
    let request = http::Request::get("/apis/kubewasm.io/v1alpha1/plugins")
        .header(
            "Accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())
        .unwrap();
    let table: Value = client.request(request).await.unwrap();
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        columns,
        [
            "Name", "Version", "Ready", "Reason", "Manifest", "Content", "Age"
        ]
    );
    let row = &table["rows"][0]["cells"];
    assert_eq!(row[0], "replicator");
    assert_eq!(row[1], "0123456789ab");
    assert_eq!(row[2], "True");
    assert_eq!(row[4], DIGEST, "the manifest digest the spec pins");
    assert_eq!(row[5], CONTENT, "the module's own digest, apart");

    // The tag-and-digest form `kubewasm push` prints is accepted (the
    // digest pins, the tag is for people), as Docker and Kubernetes accept
    // it.
    let tagged = object(
        "Plugin",
        "tag-and-digest",
        json!({"module": {"oci": {"reference": format!("registry.example:5000/plugins/replicator:v1.2@{DIGEST}")}}}),
    );
    plugins
        .create(&PostParams::default(), &tagged)
        .await
        .unwrap();

    // `kubewasm migrate` turns the base's plugin folder into Plugins the
    // API server accepts.
    let out = kubewasm_tests::e2e::succeeded(
        std::process::Command::new(kubewasm_tests::e2e::kubewasm_bin())
            .args(["migrate", "--configmap", "kubewasm-plugins"])
            .arg(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../deploy/examples/plugin-folder/plugins"),
            )
            .output()
            .unwrap(),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut migrated = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let obj: DynamicObject = serde::Deserialize::deserialize(doc).unwrap();
        let name = obj.metadata.name.clone().unwrap();
        plugins.create(&PostParams::default(), &obj).await.unwrap();
        migrated.push(name);
    }
    assert_eq!(
        migrated,
        [
            "config-replicator",
            "crashloop-watcher",
            "namespace-defaults"
        ]
    );

    // Each bad spec is refused naming the field and what is wrong.
    let cases: Vec<(&str, Value, &[&str])> = vec![
        (
            "two-sources",
            json!({"module": {"file": "x.wasm", "oci": {"reference": format!("r.example/p@{DIGEST}")}}}),
            &[
                "spec.module",
                "module needs exactly one of oci, configMap or file",
            ],
        ),
        (
            "no-source",
            json!({"module": {}}),
            &[
                "spec.module",
                "module needs exactly one of oci, configMap or file",
            ],
        ),
        (
            "bad-reference",
            json!({"module": {"oci": {"reference": "replicator"}}}),
            &[
                "spec.module.oci.reference",
                "reference must be registry/repository@sha256",
            ],
        ),
        (
            "port-but-no-tag",
            json!({"module": {"oci": {"reference": "registry.example:5000/plugins/replicator"}}}),
            &[
                "spec.module.oci.reference",
                "registry/repository:tag@sha256",
            ],
        ),
        (
            "short-digest",
            json!({"module": {"oci": {"reference": "r.example/p:v1@sha256:abc"}}}),
            &["spec.module.oci.reference"],
        ),
        (
            "path-in-file",
            json!({"module": {"file": "../etc/x.wasm"}}),
            &["spec.module.file", "without a path"],
        ),
        (
            "both-namespace-forms",
            json!({"module": {"file": "x.wasm"}, "access": [{"kinds": ["pods"], "verbs": ["events"],
                "namespaces": ["a"], "namespaceSelector": {"matchLabels": {"t": "y"}}}]}),
            &[
                "spec.access[0]",
                "namespaces or namespaceSelector, not both",
            ],
        ),
        (
            "read-by-label",
            json!({"module": {"file": "x.wasm"}, "access": [{"kinds": ["pods"], "verbs": ["read"],
                "namespaceSelector": {"matchLabels": {"t": "y"}}}]}),
            &["spec.access[0]", "namespaceSelector cannot grant read"],
        ),
        (
            "unknown-verb",
            json!({"module": {"file": "x.wasm"}, "access": [{"kinds": ["pods"], "verbs": ["fly"]}]}),
            &["spec.access[0].verbs[0]", "fly"],
        ),
        (
            "too-many-instances",
            json!({"module": {"file": "x.wasm"}, "limits": {"concurrency": 1000}}),
            &["spec.limits.concurrency", "256"],
        ),
    ];
    for (name, spec, wants) in cases {
        let message = refused(&plugins, &object("Plugin", name, spec)).await;
        for want in wants {
            assert!(
                message.contains(want),
                "{name}: {want:?} not in {message:?}"
            );
        }
    }

    // A tenant's plugin cannot name a host file or host directories.
    let tenants = api(&client, "NamespacedPlugin", Some("default"));
    let message = refused(
        &tenants,
        &object(
            "NamespacedPlugin",
            "from-file",
            json!({"module": {"file": "x.wasm"}}),
        ),
    )
    .await;
    assert!(
        message.contains("cannot load a file from the host's plugin folder"),
        "{message}"
    );
    let message = refused(
        &tenants,
        &object(
            "NamespacedPlugin",
            "with-dirs",
            json!({"module": {"oci": {"reference": format!("r.example/p@{DIGEST}")}},
                   "grants": {"dirs": [{"host": "/etc", "guest": "/etc"}]}}),
        ),
    )
    .await;
    assert!(
        message.contains("cannot be granted host directories"),
        "{message}"
    );
    tenants
        .create(
            &PostParams::default(),
            &object(
                "NamespacedPlugin",
                "ok",
                json!({"module": {"configMap": {"name": "modules", "key": "p.wasm"}}}),
            ),
        )
        .await
        .unwrap();
}
