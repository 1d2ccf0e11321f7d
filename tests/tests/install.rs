//! The install path a stranger takes, on the real single-node cluster
//! (tests/controlplane --node), from a release that `scripts/release.sh`
//! writes: the book's quick start run as written (Helm from the packaged
//! chart, the roles of a plugin, a `Plugin` pulled from an OCI registry,
//! `kubectl wait`), status as kstatus and `kubectl wait` read it through a
//! refused and a stuck update, `kubewasm status`, a `helm upgrade` to a new
//! image under churn with the recorder plugin (nothing lost, nothing
//! delivered twice), both host Pods deleted while the registry is down
//! with the module cache on a PersistentVolumeClaim (every Plugin serves
//! again without the registry), and `helm uninstall` leaving nothing of
//! the release behind.
//!
//! The node's Pods use the host network (it has no Service network): the
//! chart's `hostNetwork` and `apiServer` values, which is what the quick
//! start's `values.yaml` is for.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kubewasm::oci::Credentials;
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::{
    Seen, churn, configmap_versions, eventually, eventually_seen, namespace, recorded, seen_view,
};
use kubewasm_tests::incluster::{NS, holder_pod, host_logs, lease_holder};
use kubewasm_tests::objects::{api, find_condition};
use kubewasm_tests::plugin_artifacts;
use kubewasm_tests::registry::Registry;
use kubewasm_tests::tools::compute_status;
use kubewasm_tests::walkthrough::{Workdir, node_values, release, sh_blocks};
use serde_json::{Value, json};

/// Image import, Pod start, pulling and compiling on a loaded machine.
const TIMEOUT: Duration = Duration::from_secs(300);
/// The release the quick start names.
const VERSION: &str = "0.1.0";
/// Where the recorder watches and the churn runs.
const CHURN: &str = "churn";

/// This node's values ([`node_values`]) and the module cache on the
/// PersistentVolume the test made.
fn values(cp: &ControlPlane, registry: &Registry) -> String {
    let mut values = node_values(cp, registry);
    values["cache"] = json!({"persistence": {
        "enabled": true,
        "storageClassName": "kubewasm-test-local",
        "accessModes": ["ReadWriteOnce"],
        "size": "1Gi",
    }});
    serde_yaml_ng::to_string(&values).unwrap()
}

/// A hostPath PersistentVolume for the chart's claim (the node has no
/// provisioner), owned by the image's user.
async fn cache_volume(cp: &ControlPlane, client: &kube::Client) -> PathBuf {
    let dir = cp.dir().join("kubewasm-cache-pv");
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(65532), Some(65532)).unwrap();
    let pv: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "kubewasm-cache"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "kubewasm-test-local",
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": dir.to_str().unwrap(), "type": "Directory"},
        }
    }))
    .unwrap();
    let ar = kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::PersistentVolume>(&());
    Api::<DynamicObject>::all_with(client.clone(), &ar)
        .patch(
            "kubewasm-cache",
            &PatchParams::apply("install-test").force(),
            &Patch::Apply(&pv),
        )
        .await
        .unwrap();
    dir
}

/// kstatus's verdict on one Plugin object.
async fn kstatus(plugins: &Api<DynamicObject>, name: &str) -> (String, Value) {
    let obj = plugins.get(name).await.unwrap();
    let mut value = serde_json::to_value(&obj).unwrap();
    value["apiVersion"] = json!("kubewasm.io/v1alpha1");
    value["kind"] = json!("Plugin");
    let computed = compute_status(&value);
    (
        computed["status"].as_str().unwrap_or_default().to_owned(),
        value,
    )
}

/// Waits until kstatus computes `want` for the Plugin `name`; returns the
/// object.
async fn wait_kstatus(plugins: &Api<DynamicObject>, name: &str, want: &str) -> Value {
    eventually_seen(
        &format!("kstatus computes {want} for plugin {name}"),
        TIMEOUT,
        || async {
            let (got, obj) = kstatus(plugins, name).await;
            if got == want {
                Ok(obj)
            } else {
                Err(format!("{got}: {}", obj["status"]))
            }
        },
    )
    .await
}

fn plugin_doc(name: &str, reference: &str, config: Value, access: Value) -> Value {
    json!({
        "apiVersion": "kubewasm.io/v1alpha1", "kind": "Plugin",
        "metadata": {"name": name},
        "spec": {"module": {"oci": {"reference": reference}}, "config": config, "access": access},
    })
}

fn recorder_doc(reference: &str) -> Value {
    plugin_doc(
        "recorder",
        reference,
        json!({"namespace": CHURN, "resources": ["configmaps"]}),
        json!([
            {"kinds": ["configmaps"], "verbs": ["read"], "namespaces": [CHURN]},
            {"kinds": ["configmaps"], "verbs": ["events"], "namespaces": [CHURN]},
        ]),
    )
}

/// Deltas delivered more than once: the same (object, resourceVersion,
/// delta) live (not the replay of a new leader's cache, which is initial
/// by design) twice, across every replica and version.
fn duplicated(seen: &[Seen]) -> Vec<String> {
    let mut once = BTreeSet::new();
    let mut twice = Vec::new();
    for s in seen.iter().filter(|s| !s.initial && s.delta != "synced") {
        if !once.insert((s.name.clone(), s.rv.clone(), s.delta.clone())) {
            twice.push(format!("{} {} {} by {}", s.delta, s.name, s.rv, s.instance));
        }
    }
    twice
}

/// Each host Pod's name, and whether it is Ready.
async fn host_pods(client: &kube::Client) -> BTreeMap<String, bool> {
    Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels("app.kubernetes.io/name=kubewasm"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let ready = p
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            (p.metadata.name.unwrap(), ready)
        })
        .collect()
}

#[tokio::test]
async fn a_release_installs_upgrades_and_uninstalls_with_helm() {
    let cp = ControlPlane::shared_node();
    let _logs = cp.logs_on_failure();
    let client = cp.admin_client().await;
    let mut registry = Registry::start().await;

    // The release, as an operator gets it; its image imported into the
    // node's containerd (the book's "The image").
    let work = Workdir::new(cp);
    let dist = work.path().join("dist");
    let started = Instant::now();
    let listing = release(&dist, VERSION);
    eprintln!(
        "scripts/release.sh {VERSION} in {:?}:\n{listing}",
        started.elapsed()
    );
    cp.load_image(&dist.join(format!("kubewasm-{VERSION}-image.oci.tar")))
        .unwrap();

    // What the quick start's plugin.yaml holds: a config-replicator from
    // the registry, by the tag-and-digest reference `kubewasm push`
    // prints.
    let pusher = registry.oci_client();
    let anonymous = &Credentials::Anonymous;
    let artifacts = plugin_artifacts();
    let replicator = pusher
        .push(
            &std::fs::read(artifacts.join("config_replicator.wasm")).unwrap(),
            &format!("{}/plugins/config-replicator:v1", registry.host()),
            anonymous,
        )
        .await
        .unwrap();
    assert!(
        replicator.pinned.contains(":v1@sha256:"),
        "{}",
        replicator.pinned
    );
    namespace(&client, "sources", json!({})).await;
    namespace(&client, "team-copies", json!({"copies": "yes"})).await;
    let plugin = plugin_doc(
        "config-replicator",
        &replicator.pinned,
        json!({"sourceSelector": "replicate=true", "namespaceSelector": "copies=yes"}),
        json!([
            {"kinds": ["configmaps", "namespaces"], "verbs": ["read"]},
            {"kinds": ["configmaps"], "verbs": ["apply", "delete"]},
        ]),
    );
    std::fs::write(
        work.path().join("plugin.yaml"),
        serde_yaml_ng::to_string(&plugin).unwrap(),
    )
    .unwrap();
    std::fs::write(work.path().join("values.yaml"), values(cp, &registry)).unwrap();
    let cache_dir = cache_volume(cp, &client).await;

    // The quick start, as written.
    let installed = Instant::now();
    let quick_start = sh_blocks("install.md", "## Quick start");
    assert!(
        quick_start.len() >= 2,
        "install.md's quick start: {quick_start:?}"
    );
    for (i, block) in quick_start.iter().enumerate() {
        let out = work.sh(block, &format!("quick start block {}", i + 1));
        eprintln!("quick start block {}:\n{block}\n---\n{out}", i + 1);
    }
    let sources: Api<ConfigMap> = Api::namespaced(client.clone(), "sources");
    sources
        .patch(
            "ca-bundle",
            &PatchParams::apply("install-test"),
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "ca-bundle", "labels": {"replicate": "true"}},
                "data": {"ca.crt": "x"},
            })),
        )
        .await
        .unwrap();
    let copies: Api<ConfigMap> = Api::namespaced(client.clone(), "team-copies");
    eventually("the first copy", TIMEOUT, || async {
        copies.get_opt("ca-bundle").await.ok()?.map(|_| ())
    })
    .await;
    eprintln!(
        "helm install -> first delta served (a copy made): {:?}",
        installed.elapsed()
    );

    let plugins = api(&client, "Plugin", None);
    // Ready on every replica: kstatus says Current, kubectl wait agrees.
    let current = wait_kstatus(&plugins, "config-replicator", "Current").await;
    let status = &current["status"];
    assert_eq!(
        status["manifestDigest"],
        replicator.digest.as_str(),
        "{status}"
    );
    assert_ne!(
        status["contentDigest"], status["manifestDigest"],
        "{status}"
    );
    let replicas = status["replicas"].as_array().unwrap();
    assert_eq!(replicas.len(), 2, "{status}");
    assert!(replicas.iter().all(|r| r["loaded"] == true), "{status}");

    // The recorder, for the upgrade under churn.
    namespace(&client, CHURN, json!({})).await;
    let recorder = pusher
        .push(
            &std::fs::read(artifacts.join("recorder.wasm")).unwrap(),
            &format!("{}/plugins/recorder:v1", registry.host()),
            anonymous,
        )
        .await
        .unwrap();
    std::fs::write(
        work.path().join("recorder.yaml"),
        serde_yaml_ng::to_string(&recorder_doc(&recorder.pinned)).unwrap(),
    )
    .unwrap();
    work.sh(
        "kubewasm rbac --objects recorder.yaml --plugins-only --namespace kubewasm \
           --name recorder --service-account kubewasm | kubectl apply -f -\n\
         kubectl apply -f recorder.yaml\n\
         kubectl wait --for=condition=Ready plugin/recorder --timeout=4m",
        "the recorder installed",
    );

    // A refused update: a module that is no plugin. Ready turns False
    // (kubectl wait fails), kstatus says Failed (Stalled: it needs a
    // change), the previous version keeps serving and says so.
    let not_a_plugin = pusher
        .push(
            &std::fs::read(artifacts.join("wrong_version.wasm")).unwrap(),
            &format!("{}/plugins/config-replicator:broken", registry.host()),
            anonymous,
        )
        .await
        .unwrap();
    let serving_version = status["version"].as_str().unwrap().to_owned();
    plugins
        .patch(
            "config-replicator",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"module": {"oci": {"reference": not_a_plugin.pinned}}}})),
        )
        .await
        .unwrap();
    let failed = wait_kstatus(&plugins, "config-replicator", "Failed").await;
    let status = &failed["status"];
    assert_eq!(status["version"], serving_version.as_str(), "{status}");
    assert_eq!(
        find_condition(status, "Serving").unwrap()["reason"],
        "PreviousVersion",
        "{status}"
    );
    let waited = work.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "plugin/config-replicator",
        "--timeout=10s",
    ]);
    assert!(
        !waited.status.success(),
        "kubectl wait must not succeed on a refused update: {}",
        String::from_utf8_lossy(&waited.stdout)
    );
    // It still serves: a new source is copied.
    sources
        .patch(
            "while-refused",
            &PatchParams::apply("install-test"),
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "while-refused", "labels": {"replicate": "true"}},
            })),
        )
        .await
        .unwrap();
    eventually("a copy while the update is refused", TIMEOUT, || async {
        copies.get_opt("while-refused").await.ok()?.map(|_| ())
    })
    .await;

    // A stuck update: the registry down, a new tag. InProgress
    // (Reconciling: retried), still not Ready.
    registry.stop();
    plugins
        .patch(
            "config-replicator",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"module": {"oci": {
                "reference": format!("{}/plugins/config-replicator:v2", registry.host())
            }}}})),
        )
        .await
        .unwrap();
    let stuck = eventually_seen(
        "kstatus computes InProgress with Reconciling PullFailed",
        TIMEOUT,
        || async {
            let (got, obj) = kstatus(&plugins, "config-replicator").await;
            let reconciling = find_condition(&obj["status"], "Reconciling")
                .map(|c| c["reason"].clone())
                .unwrap_or_default();
            if got == "InProgress" && reconciling == "PullFailed" {
                Ok(obj)
            } else {
                Err(format!("{got}: {}", obj["status"]))
            }
        },
    )
    .await;
    assert_eq!(
        find_condition(&stuck["status"], "Ready").unwrap()["status"],
        "False"
    );
    registry.resume().await;
    // Back to the pinned module: Current again.
    plugins
        .patch(
            "config-replicator",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"module": {"oci": {"reference": replicator.pinned}}}})),
        )
        .await
        .unwrap();
    wait_kstatus(&plugins, "config-replicator", "Current").await;
    let waited = work.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "plugin/config-replicator",
        "--timeout=60s",
    ]);
    assert!(waited.status.success(), "{waited:?}");

    // Which replica leads, and what each serves, from the cluster alone.
    let leader = holder_pod(&lease_holder(&client).await.unwrap()).to_owned();
    let text = work.sh("kubewasm status", "kubewasm status");
    eprintln!("kubewasm status:\n{text}");
    assert!(
        text.starts_with(&format!("Leader: {leader} since ")),
        "{text}"
    );
    assert!(text.contains(&format!("  {leader} (leader)\n")), "{text}");
    for pod in host_pods(&client).await.keys() {
        assert!(
            text.contains(&format!("  {pod}")) && text.contains("plugin/recorder: "),
            "{pod} in:\n{text}"
        );
    }

    // helm upgrade to a new image under churn: the recorder loses nothing
    // and delivers nothing twice.
    let dist2 = work.path().join("dist2");
    let upgrade_version = format!("{VERSION}-upgrade.1");
    release(&dist2, &upgrade_version);
    cp.load_image(&dist2.join(format!("kubewasm-{upgrade_version}-image.oci.tar")))
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let churning = {
        let (client, stop) = (client.clone(), stop.clone());
        tokio::spawn(async move { churn(client, CHURN, "churn", &stop).await })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before_pods: BTreeSet<String> = host_pods(&client).await.into_keys().collect();
    let upgraded = Instant::now();
    work.sh(
        &format!(
            "helm upgrade kubewasm dist2/kubewasm-{upgrade_version}.tgz --namespace kubewasm \
               -f values.yaml --wait --timeout 5m"
        ),
        "helm upgrade",
    );
    eprintln!("helm upgrade --wait took {:?}", upgraded.elapsed());
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    let writes = churning.await.unwrap();
    let after_pods: BTreeSet<String> = host_pods(&client).await.into_keys().collect();
    assert!(
        before_pods.is_disjoint(&after_pods),
        "every Pod replaced: {before_pods:?} -> {after_pods:?}"
    );
    let server = configmap_versions(&Api::namespaced(client.clone(), CHURN)).await;
    let new_leader = holder_pod(&lease_holder(&client).await.unwrap()).to_owned();
    let seen = eventually_seen(
        "the new leader's recorder view equals the server",
        TIMEOUT,
        || async {
            let seen = recorded(&client, CHURN).await;
            let mine: Vec<&Seen> = seen
                .iter()
                .filter(|s| s.instance.starts_with(&format!("{new_leader}/")))
                .collect();
            let view = seen_view(mine.iter().copied());
            if view == server {
                Ok(seen)
            } else {
                Err(format!(
                    "{} objects seen, {} on the server",
                    view.len(),
                    server.len()
                ))
            }
        },
    )
    .await;
    // Nothing lost across the handover: every state the server held
    // (each resourceVersion written) reached some replica.
    let delivered: BTreeSet<(&str, &str)> = seen
        .iter()
        .map(|s| (s.name.as_str(), s.rv.as_str()))
        .collect();
    let lost: Vec<_> = server
        .iter()
        .filter(|(n, rv)| !delivered.contains(&(n.as_str(), rv.as_str())))
        .collect();
    let twice = duplicated(&seen);
    eprintln!(
        "helm upgrade under churn: {writes} writes, {} deltas recorded, lost {}, duplicated {}",
        seen.len(),
        lost.len(),
        twice.len()
    );
    assert!(lost.is_empty(), "lost: {lost:?}");
    assert!(twice.is_empty(), "delivered twice: {twice:?}");

    // Both host Pods deleted while the registry is down: the cache on the
    // PersistentVolumeClaim serves every pinned module to the new Pods.
    registry.stop();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let gone: BTreeSet<String> = host_pods(&client).await.into_keys().collect();
    for pod in &gone {
        pods.delete(pod, &DeleteParams::default()).await.unwrap();
    }
    let replaced = eventually_seen("two new host Pods ready", TIMEOUT, || async {
        let now = host_pods(&client).await;
        if now.len() == 2 && now.values().all(|r| *r) && now.keys().all(|p| !gone.contains(p)) {
            return Ok(());
        }
        let out = work.kubectl(&["get", "pods", "-n", NS, "-o", "wide"]);
        let events = work.kubectl(&["get", "events", "-n", NS, "--sort-by=.lastTimestamp"]);
        Err(format!(
            "{now:?}\n{}\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&events.stdout)
                .lines()
                .rev()
                .take(15)
                .collect::<Vec<_>>()
                .join("\n"),
            host_logs(&client).await
        ))
    });
    replaced.await;
    let status = eventually_seen(
        "both Plugins Ready on the new Pods, served from the cache",
        TIMEOUT,
        || async {
            let mut all = Vec::new();
            for name in ["config-replicator", "recorder"] {
                let (got, obj) = kstatus(&plugins, name).await;
                let entries: BTreeSet<String> = obj["status"]["replicas"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .filter(|r| r["loaded"] == true)
                    .map(|r| r["name"].as_str().unwrap_or_default().to_owned())
                    .collect();
                let now: BTreeSet<String> = host_pods(&client).await.into_keys().collect();
                // status.replicas pruned of the deleted Pods, the new ones
                // loaded.
                if got != "Current" || entries != now {
                    let logs: Vec<String> = host_logs(&client)
                        .await
                        .lines()
                        .filter(|l| l.contains("objects") || l.contains("leader"))
                        .map(str::to_owned)
                        .collect();
                    return Err(format!(
                        "{name}: {got}, {}, Pods {now:?}\n{}",
                        obj["status"]["replicas"],
                        logs.join("\n")
                    ));
                }
                all.push(obj);
            }
            Ok(all)
        },
    )
    .await;
    let served: Vec<String> = status
        .iter()
        .map(|o| format!("{}: {}", o["metadata"]["name"], o["status"]["replicas"]))
        .collect();
    eprintln!(
        "after both Pods were replaced with the registry down, served from the cache: {}",
        served.join("; ")
    );
    sources
        .patch(
            "after-replacement",
            &PatchParams::apply("install-test"),
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "after-replacement", "labels": {"replicate": "true"}},
            })),
        )
        .await
        .unwrap();
    eventually("a copy after the replacement", TIMEOUT, || async {
        copies.get_opt("after-replacement").await.ok()?.map(|_| ())
    })
    .await;
    assert!(
        std::fs::read_dir(&cache_dir).unwrap().next().is_some(),
        "the cache lives on the volume"
    );

    // helm uninstall: nothing of the release is left (the Plugin objects
    // are the user's, deleted first; the CRDs stay, as Helm keeps a
    // chart's crds/, so that no Plugin is lost with them).
    for name in ["config-replicator", "recorder"] {
        plugins
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    work.sh(
        "helm uninstall kubewasm --namespace kubewasm --wait --timeout 3m",
        "helm uninstall",
    );
    eventually_seen("nothing of the release is left", TIMEOUT, || async {
        let out = work.kubectl(&[
            "get",
            "all,configmaps,secrets,serviceaccounts,roles,rolebindings,leases,persistentvolumeclaims,poddisruptionbudgets,networkpolicies",
            "-n",
            NS,
            "-l",
            "app.kubernetes.io/instance=kubewasm",
            "-o",
            "name",
        ]);
        let namespaced = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let out = work.kubectl(&[
            "get",
            "clusterroles,clusterrolebindings",
            "-l",
            "app.kubernetes.io/instance=kubewasm",
            "-o",
            "name",
        ]);
        let cluster = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let lease = Api::<Lease>::namespaced(client.clone(), NS)
            .get_opt("kubewasm")
            .await
            .map_err(|e| e.to_string())?;
        let pods = host_pods(&client).await;
        if namespaced.is_empty() && cluster.is_empty() && lease.is_none() && pods.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "namespaced: {namespaced:?}; cluster: {cluster:?}; lease: {}; pods: {pods:?}",
                lease.is_some()
            ))
        }
    })
    .await;
}
