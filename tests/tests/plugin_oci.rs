//! Plugin objects whose modules come from an OCI registry (Debian's
//! docker-registry on 127.0.0.1 with a test CA, `kubewasm_tests::registry`),
//! against the real API server and the host binary. Its own test binary:
//! every host watches every Plugin of its control plane.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::{HostProcess, host_config, install_plugin_crds, namespace};
use kubewasm_tests::objects::{api, assert_refused_update, wait_condition, wait_requeue_seen};
use kubewasm_tests::registry::test_key;
use serde_json::json;

/// An OCI module: pulled by tag (the status pins the digest it resolved
/// to), then by that digest; with the registry down, a spec change of a
/// pinned module is served from the digest cache, and a tag the cache
/// cannot answer is refused with PullFailed while the running version
/// keeps serving. Under a signature rule, an unsigned module is refused
/// (SignatureRefused), served once signed, and a new digest signed by
/// another key is refused while the signed version keeps serving. A
/// Plugin naming its own verification keys is refused until they verify.
#[tokio::test]
async fn oci_plugin_objects_pin_their_digest_and_survive_a_registry_outage() {
    use kubewasm::oci::{Credentials, OciClient, PullOptions, Transport};
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    install_plugin_crds(&client).await;
    let ns = "objects-oci";
    namespace(&client, ns, json!({})).await;
    let mut registry = kubewasm_tests::registry::Registry::start().await;
    let testkit = std::fs::read(kubewasm_tests::plugin_artifacts().join("testkit.wasm")).unwrap();
    let pusher = OciClient::new(
        Transport::default()
            .with_ca_pem(&registry.ca_pem(), "test CA")
            .unwrap(),
        PullOptions::default(),
    );
    let tagged = format!("{}/plugins/testkit:v1", registry.host());
    let pushed = pusher
        .push(&testkit, &tagged, &Credentials::Anonymous)
        .await
        .unwrap();
    // Modules under <registry>/signed/ must carry a cosign signature by
    // `team`'s key; the rest need none.
    let keys = tempfile::tempdir().unwrap();
    let team = test_key("team");
    let team_pub = keys.path().join("team.pub");
    std::fs::write(&team_pub, team.public_key().to_pem()).unwrap();
    let (_config, config_file) = host_config(&format!(
        "pluginObjects:\n  registryCA: {}\n  signatures:\n    - {{prefix: '{}/signed', keys: ['{}']}}\n",
        registry.ca_path().display(),
        registry.host(),
        team_pub.display()
    ));
    let host = HostProcess::with_config(cp.admin_kubeconfig(), &config_file);
    let plugins = api(&client, "Plugin", None);
    let spec = |reference: &str, tag: &str| {
        json!({
            "module": {"oci": {"reference": reference}},
            "config": {"mode": "requeue", "count": 3_600_000, "tag": tag},
            "access": [{"kinds": ["configmaps"], "verbs": ["read"], "namespaces": [ns]}],
        })
    };
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubewasm.io/v1alpha1", "kind": "Plugin",
        "metadata": {"name": "ocitest"}, "spec": spec(&tagged, "o1"),
    }))
    .unwrap();
    plugins.create(&PostParams::default(), &obj).await.unwrap();
    let status = wait_condition(&plugins, &host, "ocitest", 1, ("Ready", "True", "Serving")).await;
    let pinned = format!("{}/plugins/testkit@{}", registry.host(), pushed.digest);
    assert_eq!(status["resolvedReference"], pinned, "{status}");

    // Pinned by the digest the tag resolved to.
    let set = |reference: String, tag: &'static str| {
        let plugins = plugins.clone();
        let spec = spec(&reference, tag);
        async move {
            plugins
                .patch(
                    "ocitest",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": spec})),
                )
                .await
                .unwrap();
        }
    };
    set(pinned.clone(), "o2").await;
    wait_condition(&plugins, &host, "ocitest", 2, ("Ready", "True", "Serving")).await;

    // The registry goes down: the pinned module comes from the cache.
    // Signatures: an unsigned module under the rule is refused with the
    // reason; signed afterwards, the retry serves it; a new digest signed by
    // another key is refused while the signed one keeps serving.
    let signed_ref = format!("{}/signed/testkit:v1", registry.host());
    let signed = pusher
        .push(&testkit, &signed_ref, &Credentials::Anonymous)
        .await
        .unwrap();
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubewasm.io/v1alpha1", "kind": "Plugin",
        "metadata": {"name": "signedtest"}, "spec": spec(&signed_ref, "s1"),
    }))
    .unwrap();
    plugins.create(&PostParams::default(), &obj).await.unwrap();
    let status = wait_condition(
        &plugins,
        &host,
        "signedtest",
        1,
        ("Ready", "False", "SignatureRefused"),
    )
    .await;
    assert!(status.to_string().contains("signed/testkit"), "{status}");
    pusher
        .push_signature(&signed_ref, &signed.digest, &team, &Credentials::Anonymous)
        .await
        .unwrap();
    wait_condition(
        &plugins,
        &host,
        "signedtest",
        1,
        ("Ready", "True", "Serving"),
    )
    .await;
    let other_ref = format!("{}/signed/testkit:v2", registry.host());
    let noop = kubewasm_tests::wasm("noop");
    let other = pusher
        .push(&noop, &other_ref, &Credentials::Anonymous)
        .await
        .unwrap();
    pusher
        .push_signature(
            &other_ref,
            &other.digest,
            &test_key("mallory"),
            &Credentials::Anonymous,
        )
        .await
        .unwrap();
    plugins
        .patch(
            "signedtest",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"module": {"oci": {"reference": other_ref}}}})),
        )
        .await
        .unwrap();
    let status = wait_condition(
        &plugins,
        &host,
        "signedtest",
        2,
        ("Degraded", "True", "SignatureRefused"),
    )
    .await;
    assert_refused_update(&status);
    plugins
        .delete("signedtest", &kube::api::DeleteParams::default())
        .await
        .unwrap();

    // Keys the Plugin itself names (a ConfigMap in the host's namespace):
    // the unsigned testkit is refused until `team` signs it.
    namespace(&client, "kubewasm", json!({})).await;
    let keys_cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "plugin-keys", "namespace": "kubewasm"},
        "data": {"team.pub": team.public_key().to_pem()},
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), "kubewasm")
        .create(&PostParams::default(), &keys_cm)
        .await
        .unwrap();
    let mut keyed_spec = spec(&pinned, "k1");
    keyed_spec["module"]["oci"]["verifyKeys"] =
        json!([{"configMap": "plugin-keys", "key": "team.pub"}]);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubewasm.io/v1alpha1", "kind": "Plugin",
        "metadata": {"name": "keyed"}, "spec": keyed_spec,
    }))
    .unwrap();
    plugins.create(&PostParams::default(), &obj).await.unwrap();
    wait_condition(
        &plugins,
        &host,
        "keyed",
        1,
        ("Ready", "False", "SignatureRefused"),
    )
    .await;
    pusher
        .push_signature(&tagged, &pushed.digest, &team, &Credentials::Anonymous)
        .await
        .unwrap();
    wait_condition(&plugins, &host, "keyed", 1, ("Ready", "True", "Serving")).await;
    plugins
        .delete("keyed", &kube::api::DeleteParams::default())
        .await
        .unwrap();

    registry.stop();
    set(pinned.clone(), "o3").await;
    wait_condition(&plugins, &host, "ocitest", 3, ("Ready", "True", "Serving")).await;
    let watched = Api::<ConfigMap>::namespaced(client.clone(), ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "requeue-oci"}, "data": {"k": "v"}}))
            .unwrap();
    watched.create(&PostParams::default(), &cm).await.unwrap();
    wait_requeue_seen(&host, "o3", "requeue-oci").await;

    // A tag while the registry is down: refused, o3 keeps serving.
    set(format!("{}/plugins/testkit:v2", registry.host()), "o4").await;
    let status = wait_condition(
        &plugins,
        &host,
        "ocitest",
        4,
        ("Degraded", "True", "PullFailed"),
    )
    .await;
    assert_refused_update(&status);
    let (exit, logs) = host.stop_with_logs();
    assert!(exit.success(), "{logs}");
}
