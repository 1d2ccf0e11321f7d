#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

/// deploy/base/crds.yaml is what `kubewasm crds` prints: regenerate it with
/// `cargo run -p kubewasm -- crds > deploy/base/crds.yaml`.
#[test]
fn deployed_crds_are_the_generated_ones() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/base/crds.yaml");
    let deployed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        deployed == crds_yaml().unwrap(),
        "{} is stale: run `cargo run -p kubewasm -- crds > deploy/base/crds.yaml`",
        path.display()
    );
}

#[test]
fn crds_carry_cel_rules_printer_columns_and_a_status_subresource() {
    let text = crds_yaml().unwrap();
    for needle in [
        "module needs exactly one of oci, configMap or file",
        "reference must be registry/repository@sha256",
        "an access rule takes namespaces or namespaceSelector, not both",
        "a NamespacedPlugin cannot load a file",
        "x-kubernetes-preserve-unknown-fields: true",
        "x-kubernetes-int-or-string: true",
        "jsonPath: .status.contentDigest",
        "jsonPath: .status.manifestDigest",
        "registry/repository:tag@sha256",
        "status: {}",
    ] {
        assert!(text.contains(needle), "{needle} missing from the CRDs");
    }
    let crds = crds();
    for crd in &crds {
        let status = &crd.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap()
            .properties
            .as_ref()
            .unwrap()["status"];
        assert_eq!(
            status.default.as_ref().map(|d| d.0.clone()),
            Some(serde_json::json!({"observedGeneration": -1})),
            "an object no host has looked at is not Current"
        );
    }
    assert_eq!(crds[0].spec.scope, "Cluster");
    assert_eq!(crds[1].spec.scope, "Namespaced");
}

fn parts(yaml: &str) -> PluginParts {
    serde_yaml_ng::from_str(yaml).unwrap()
}

#[test]
fn a_spec_is_checked_as_its_sidecar_would_be() {
    let p = parts(
        "module: {file: x.wasm}\nconfig: {threshold: 3}\nlimits: {memory: 32Mi, timeout: 250ms}\naccess: [{kinds: [configmaps], verbs: [read, apply], namespaces: [a]}]\n",
    );
    let m = p.manifest("plugins.kubewasm.io/x").unwrap();
    assert_eq!(m.limits.memory, 32 << 20);
    assert_eq!(m.config_json(), r#"{"threshold":3}"#);
    let bad = parts("module: {file: x.wasm}\nlimits: {memory: lots}\n");
    let err = bad
        .manifest("plugins.kubewasm.io/x")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("plugins.kubewasm.io/x") && err.contains("lots"),
        "{err}"
    );
}

#[test]
fn a_namespaced_plugin_is_confined_to_its_namespace() {
    let p = parts(
        "module: {file: x.wasm}\naccess: [{kinds: [configmaps], verbs: [read]}, {kinds: [pods], verbs: [read], namespaces: ['*']}]\n",
    );
    let confined = p.confined_to("team-a").unwrap();
    for rule in confined.access.as_ref().unwrap() {
        assert_eq!(rule.namespaces.as_deref(), Some(&["team-a".to_owned()][..]));
    }
    let other = parts(
        "module: {file: x.wasm}\naccess: [{kinds: [pods], verbs: [read], namespaces: [team-a, team-b]}]\n",
    );
    let err = other.confined_to("team-a").unwrap_err().to_string();
    assert!(err.contains("team-b") && err.contains("access[0]"), "{err}");
}

/// Each object a NamespacedPlugin references is refused when it names
/// another namespace (the field is named, the other namespace is not);
/// its own namespace, or none, is fine.
#[test]
fn a_namespaced_plugin_references_its_own_namespace_only() {
    let cases = [
        (
            "module: {configMap: {name: m, key: k, namespace: kubewasm}}",
            Some("module.configMap.namespace"),
        ),
        (
            "module: {oci: {reference: 'r.io/x:1', pullSecret: {name: regcred, namespace: kubewasm}}}",
            Some("module.oci.pullSecret.namespace"),
        ),
        (
            "module: {oci: {reference: 'r.io/x:1', verifyKeys: [{configMap: k, key: p}, {configMap: k, key: p, namespace: team-b}]}}",
            Some("module.oci.verifyKeys[1].namespace"),
        ),
        (
            "module: {configMap: {name: m, key: k, namespace: team-a}}",
            None,
        ),
        (
            "module: {oci: {reference: 'r.io/x:1', pullSecret: {name: regcred}, verifyKeys: [{configMap: k, key: p}]}}",
            None,
        ),
    ];
    for (yaml, want) in cases {
        assert_eq!(
            parts(yaml).reference_outside("team-a").as_deref(),
            want,
            "{yaml}"
        );
    }
    let text = crds_yaml().unwrap();
    for field in [
        "remove module.configMap.namespace",
        "remove module.oci.pullSecret.namespace",
        "remove module.oci.verifyKeys[].namespace",
    ] {
        assert!(text.contains(field), "the CRD's CEL rule for {field}");
    }
}
