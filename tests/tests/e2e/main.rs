//! End-to-end: the real `kubewasm` binary against a real kube-apiserver and
//! etcd (tests/controlplane). One control plane per run; every test in its
//! own namespace. The recorder plugin writes each delta it sees as an Event,
//! which the tests read back from the server.
//!
//! This file holds the fixtures the tests share; `deltas` checks what the
//! recorder sees (the initial list, live deltas, hot swaps), `example_plugins`
//! the example plugins and the five languages acting on the server, `kinds`
//! CRDs, unwatchable kinds and the built-in kind and field-selector tables,
//! `rbac` a host under a narrower identity, `faults` a restarted, frozen,
//! compacted or refusing API server, and `operations` probes, metrics and
//! SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::*;
use kubewasm_tests::install;
use serde_json::{Value, json};

mod deltas;
mod example_plugins;
mod faults;
mod kinds;
mod operations;
mod rbac;

const WAIT: Duration = Duration::from_secs(60);

fn cm(ns: &str, name: &str, labels: Value, data: Value) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": labels}, "data": data}))
    .unwrap()
}

async fn create_cm(api: &Api<ConfigMap>, ns: &str, name: &str, v: &str) -> String {
    api.create(
        &PostParams::default(),
        &cm(ns, name, json!({}), json!({"v": v})),
    )
    .await
    .unwrap()
    .metadata
    .resource_version
    .unwrap()
}

async fn set_cm(api: &Api<ConfigMap>, name: &str, v: &str) -> String {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": v}})),
    )
    .await
    .unwrap()
    .metadata
    .resource_version
    .unwrap()
}

/// The recorder's deltas of one version, once they include `until`.
async fn wait_seen(client: &kube::Client, ns: &str, until: impl Fn(&[Seen]) -> bool) -> Vec<Seen> {
    eventually("the recorder's deltas", WAIT, || async {
        let seen = recorded(client, ns).await;
        until(&seen).then_some(seen)
    })
    .await
}

/// The recorder over the ConfigMaps of `ns`, started against `cp` and
/// waited for until its initial list is done; what it saw by then.
async fn recorder_synced(
    cp: &ControlPlane,
    client: &kube::Client,
    ns: &str,
) -> (HostProcess, Vec<Seen>) {
    let host = HostProcess::start(
        cp.admin_kubeconfig(),
        &[(
            "recorder",
            "recorder",
            Some(&recorder_sidecar(ns, &["configmaps"])),
        )],
    );
    let seen = wait_seen(client, ns, |s| s.iter().any(|x| x.delta == "synced")).await;
    (host, seen)
}

/// Namespace `ns` with ConfigMaps `c0`..`c7`, and the API of its
/// ConfigMaps: where the fault tests start.
async fn eight_configmaps(client: &kube::Client, ns: &str) -> Api<ConfigMap> {
    namespace(client, ns, json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    for i in 0..8 {
        create_cm(&api, ns, &format!("c{i}"), "0").await;
    }
    api
}
