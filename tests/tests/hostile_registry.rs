//! A hostile registry on the real API server: Plugins naming a registry
//! that answers a multi-GiB manifest, trickles a byte at a time, answers
//! a 16 MiB error page or redirects to another host each fail on their own
//! (a short status, within the pull deadline), while a Plugin that names
//! none of them is served in its usual time and the host's memory stays
//! bounded. The figures (time to Ready with and without the hostile pulls
//! in flight, the host's peak RSS) are printed (`-- --nocapture`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kube::Api;
use kube::api::{DynamicObject, PostParams};
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::{
    HostProcess, eventually_seen, host_config, install_plugin_crds, namespace,
};
use kubewasm_tests::hostile_registry::{HostileRegistry, peak_rss};
use kubewasm_tests::objects::{WAIT, api, condition, testkit_configmap, wait_condition};
use serde_json::{Value, json};

/// Bytes of the `huge` manifest: far past any cap, never held whole by
/// either side.
const HUGE: u64 = 4 << 30;

fn plugin(name: &str, module: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "kubewasm.io/v1alpha1", "kind": "Plugin",
        "metadata": {"name": name},
        "spec": {
            "module": module,
            "config": {"mode": "ok"},
            "access": [{"kinds": ["configmaps", "pods"], "verbs": ["read", "patch"], "namespaces": ["hostile-reg"]}],
        },
    }))
    .unwrap()
}

/// Creates `name` (a ConfigMap module) and returns how long it took to be
/// served.
async fn served_in(plugins: &Api<DynamicObject>, host: &HostProcess, name: &str) -> Duration {
    let start = Instant::now();
    let module = json!({"configMap": {"name": "modules", "namespace": "hostile-reg", "key": "testkit.wasm"}});
    plugins
        .create(&PostParams::default(), &plugin(name, module))
        .await
        .unwrap();
    wait_condition(plugins, host, name, 1, ("Ready", "True", "Serving")).await;
    start.elapsed()
}

#[tokio::test]
async fn a_hostile_registry_hurts_only_the_plugins_that_name_it() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    install_plugin_crds(&client).await;
    namespace(&client, "hostile-reg", json!({})).await;
    testkit_configmap(&Api::namespaced(client.clone(), "hostile-reg"), "modules").await;
    let registry = HostileRegistry::start(HUGE).await.unwrap();
    let reg = registry.host();
    let deadline = Duration::from_secs(20);
    let (_config, config_file) = host_config(&format!(
        "pluginObjects:\n  plainHttpRegistries: [\"{reg}\"]\n  pullTimeout: {}s\n",
        deadline.as_secs()
    ));
    let host = HostProcess::with_config(cp.admin_kubeconfig(), &config_file);
    let plugins = api(&client, "Plugin", None);

    // The usual time, nothing hostile in flight.
    let baseline = served_in(&plugins, &host, "calm-before").await;

    // The hostile ones, each pulling.
    let kinds = ["huge", "trickle", "errorbody", "redirect"];
    for kind in kinds {
        let module = json!({"oci": {"reference": format!("{reg}/{kind}/x:1")}});
        plugins
            .create(
                &PostParams::default(),
                &plugin(&format!("from-{kind}"), module),
            )
            .await
            .unwrap();
    }
    // Both long answers under way before the next Plugin comes.
    eventually_seen(
        "the huge and trickled manifests streaming",
        WAIT,
        || async {
            let seen = &registry.seen;
            (seen.manifests("huge") > 0
                && seen.manifests("trickle") > 0
                && seen.open.load(Ordering::SeqCst) > 0)
                .then_some(())
                .ok_or_else(|| format!("{:?}\nhost log:\n{}", seen.manifests, host.logs()))
        },
    )
    .await;
    let during = served_in(&plugins, &host, "calm-during").await;
    let trickling =
        registry.seen.manifests("trickle") > 0 && registry.seen.open.load(Ordering::SeqCst) > 0;

    // Each hostile one fails alone, with a short status, within the
    // deadline (plus the retries' own pace).
    let started = Instant::now();
    for kind in kinds {
        let name = format!("from-{kind}");
        let status =
            wait_condition(&plugins, &host, &name, 1, ("Ready", "False", "PullFailed")).await;
        let ready = kubewasm_tests::objects::find_condition(&status, "Ready").unwrap();
        let message = ready["message"].as_str().unwrap();
        assert!(
            message.len() <= 1024,
            "{kind}: {} bytes: {message}",
            message.len()
        );
        // At most an excerpt of the 16 MiB error page.
        let quoted = message.bytes().filter(|b| *b == b'E').count();
        assert!(
            quoted <= 256,
            "{kind}: {quoted} bytes of the error page quoted: {message}"
        );
    }
    let failed_within = started.elapsed();
    let trickle = condition(&plugins, "from-trickle", "Ready").await.unwrap();
    assert!(
        trickle.2.to_string().contains("deadline"),
        "the trickle fails at the pull deadline: {}",
        trickle.2
    );
    let peak = peak_rss(host.pid()).unwrap();
    eprintln!(
        "hostile registry: a Plugin served in {baseline:?} before, {during:?} with the hostile pulls in flight (trickle still open: {trickling}); the hostile Plugins failed within {failed_within:?} (deadline {deadline:?}); {} MiB streamed to the host; host peak RSS {} MiB",
        registry.seen.streamed.load(Ordering::Relaxed) >> 20,
        peak >> 20
    );
    // A multi-GiB manifest was offered: the host read at most its cap.
    assert!(peak < 1 << 30, "host peak RSS {} MiB", peak >> 20);
    assert!(
        during < baseline + deadline,
        "a Plugin naming no hostile registry waited on one: {during:?} (before: {baseline:?})"
    );
    for name in [
        "calm-before",
        "calm-during",
        "from-huge",
        "from-trickle",
        "from-errorbody",
        "from-redirect",
    ] {
        plugins.delete(name, &Default::default()).await.unwrap();
    }
    let (exit, logs) = host.stop_with_logs();
    assert!(exit.success(), "{logs}");
}
