//! The example plugins' logic, driven through the real host (runtime,
//! informers, cache, dispatcher) over a fixture cluster, with the actions
//! they emit recorded and asserted exactly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use kubewasm_tests::e2e::eventually;
use kubewasm_tests::{Harness, describe, idle, install, write_cluster};

/// Bound on waiting for a condition.
const WAIT: std::time::Duration = std::time::Duration::from_secs(60);

async fn run(h: &Harness) -> Vec<String> {
    let (app, sink) = h.start_recording().await;
    idle(&app).await;
    let summary = app.summary();
    app.shutdown().await;
    for (name, p) in &summary.plugins {
        assert_eq!(p.dead, 0, "{name} had dead deltas: {summary}");
    }
    sink.take()
        .iter()
        .map(|(plugin, a)| format!("{plugin}: {}", describe(a)))
        .collect()
}

const NAMESPACES: &str = "
apiVersion: v1
kind: Namespace
metadata:
  name: team-a
  labels: {kubewasm.io/defaults: enabled, env: prod}
---
apiVersion: v1
kind: Namespace
metadata:
  name: team-b
  labels: {env: prod}
---
apiVersion: v1
kind: Namespace
metadata:
  name: team-c
  labels: {env: dev}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_defaults_applies_policy_and_quota_to_matching_namespaces_only() {
    let h = Harness::new();
    write_cluster(h.cluster.path(), &[("namespaces.yaml", NAMESPACES)]);
    install(
        h.plugins.path(),
        "namespace-defaults",
        "namespace_defaults",
        Some(&format!(
            "config:\n  quota:\n    hard: {{pods: \"10\"}}\n{}",
            kubewasm_tests::example_access("namespace-defaults")
        )),
    );
    let actions = run(&h).await;
    assert_eq!(
        actions,
        vec![
            r#"namespace-defaults: apply force=true networkpolicies.networking.k8s.io team-a/default-deny {"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"labels":{"app.kubernetes.io/managed-by":"kubewasm","kubewasm.io/plugin":"namespace-defaults"},"name":"default-deny","namespace":"team-a"},"spec":{"podSelector":{},"policyTypes":["Ingress","Egress"]}}"#,
            r#"namespace-defaults: apply force=true resourcequotas team-a/default-quota {"apiVersion":"v1","kind":"ResourceQuota","metadata":{"labels":{"app.kubernetes.io/managed-by":"kubewasm","kubewasm.io/plugin":"namespace-defaults"},"name":"default-quota","namespace":"team-a"},"spec":{"hard":{"pods":"10"}}}"#,
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_defaults_removes_only_what_it_created_when_a_namespace_stops_matching() {
    let h = Harness::new();
    write_cluster(h.cluster.path(), &[("namespaces.yaml", NAMESPACES)]);
    install(
        h.plugins.path(),
        "namespace-defaults",
        "namespace_defaults",
        Some(&kubewasm_tests::example_access("namespace-defaults")),
    );
    // The plugin's own objects land in the cluster (actions applied for real).
    let app = h.start().await;
    idle(&app).await;
    let np = kubewasm::kind::Gvk::new("networking.k8s.io", "v1", "NetworkPolicy");
    assert!(
        app.local()
            .unwrap()
            .get(&np, Some("team-a"), "default-deny")
            .is_some()
    );
    // A quota someone else made, with the same name, in team-b.
    write_cluster(
        h.cluster.path(),
        &[(
            "team-b-quota.yaml",
            "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: default-quota, namespace: team-b}\nspec: {hard: {pods: '1'}}\n",
        )],
    );
    // team-a stops matching; team-b never matched.
    let relabelled =
        NAMESPACES.replace("{kubewasm.io/defaults: enabled, env: prod}", "{env: prod}");
    write_cluster(h.cluster.path(), &[("namespaces.yaml", &relabelled)]);
    app.local().unwrap().rescan().unwrap();
    idle(&app).await;
    assert!(
        app.local()
            .unwrap()
            .get(&np, Some("team-a"), "default-deny")
            .is_none(),
        "its own policy is removed"
    );
    let rq = kubewasm::kind::Gvk::new("", "v1", "ResourceQuota");
    assert!(
        app.local()
            .unwrap()
            .get(&rq, Some("team-a"), "default-quota")
            .is_none()
    );
    assert!(
        app.local()
            .unwrap()
            .get(&rq, Some("team-b"), "default-quota")
            .is_some(),
        "a quota it did not create stays"
    );
    app.shutdown().await;
}

const WORKLOAD: &str = "
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop, uid: d-1}
spec: {replicas: 1, selector: {matchLabels: {app: web}}, template: {metadata: {labels: {app: web}}, spec: {containers: [{name: app, image: nginx}]}}}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web-abc
  namespace: shop
  ownerReferences: [{apiVersion: apps/v1, kind: Deployment, name: web, uid: d-1, controller: true}]
spec: {replicas: 1, selector: {matchLabels: {app: web}}}
";

fn pod(name: &str, owner: Option<&str>, restarts: i64) -> String {
    let owners = owner.map_or(String::new(), |o| {
        format!("  ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: {o}, uid: rs-1, controller: true}}]\n")
    });
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: shop\n{owners}spec: {{containers: [{{name: app, image: nginx}}, {{name: side, image: envoy}}]}}\nstatus:\n  phase: Running\n  containerStatuses: [{{name: app, restartCount: 0}}, {{name: side, restartCount: {restarts}}}]\n"
    )
}

/// crashloop-watcher as "crashloop", threshold 5, with its example access.
fn install_crashloop(h: &Harness) {
    install(
        h.plugins.path(),
        "crashloop",
        "crashloop_watcher",
        Some(&format!(
            "config: {{threshold: 5}}\n{}",
            kubewasm_tests::example_access("crashloop-watcher")
        )),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashloop_watcher_records_an_event_and_annotates_the_owning_deployment() {
    let h = Harness::new();
    write_cluster(
        h.cluster.path(),
        &[
            ("workload.yaml", WORKLOAD),
            ("pods/web-abc-1.yaml", &pod("web-abc-1", Some("web-abc"), 7)),
            ("pods/web-abc-2.yaml", &pod("web-abc-2", Some("web-abc"), 1)),
            ("pods/orphan.yaml", &pod("orphan", None, 9)),
            // Its ReplicaSet never appears: retried, then reported alone.
            ("pods/stray.yaml", &pod("stray", Some("web-old"), 8)),
        ],
    );
    install_crashloop(&h);
    let (app, sink) = h.start_recording().await;
    idle(&app).await;
    let mut actions: Vec<String> = sink.take().iter().map(|(_, a)| describe(a)).collect();
    // Uids are assigned by the local cluster: look them up.
    let uid = |name: &str| {
        app.local()
            .unwrap()
            .get(
                &kubewasm::kind::Gvk::new("", "v1", "Pod"),
                Some("shop"),
                name,
            )
            .unwrap()["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    actions.sort();
    assert_eq!(
        actions,
        vec![
            format!(r#"event Warning CrashLooping pods shop/orphan uid={} "container side restarted 9 times (threshold 5)""#, uid("orphan")),
            format!(r#"event Warning CrashLooping pods shop/stray uid={} "container side restarted 8 times (threshold 5)""#, uid("stray")),
            format!(r#"event Warning CrashLooping pods shop/web-abc-1 uid={} "container side restarted 7 times (threshold 5)""#, uid("web-abc-1")),
            r#"patch Merge deployments.apps shop/web {"metadata":{"annotations":{"kubewasm.io/crashloop-pod":"web-abc-1","kubewasm.io/crashloop-restarts":"7"}}}"#.to_owned(),
        ]
    );
    // Only the stray Pod waited for an owner: attempts 1-3 retried, the 4th
    // reported; the orphan (no owner reference) was not retried.
    let summary = app.summary();
    assert_eq!(summary.plugins["crashloop"].retries, 3, "{summary}");
    assert_eq!(summary.plugins["crashloop"].dead, 0, "{summary}");
    // A live update crossing the threshold fires once; further restarts do not.
    write_cluster(
        h.cluster.path(),
        &[("pods/web-abc-2.yaml", &pod("web-abc-2", Some("web-abc"), 5))],
    );
    app.local().unwrap().rescan().unwrap();
    idle(&app).await;
    write_cluster(
        h.cluster.path(),
        &[("pods/web-abc-2.yaml", &pod("web-abc-2", Some("web-abc"), 6))],
    );
    app.local().unwrap().rescan().unwrap();
    idle(&app).await;
    let mut later: Vec<String> = sink.take().iter().map(|(_, a)| describe(a)).collect();
    // The Event is recorded after the call's patch, off its path.
    later.sort();
    assert_eq!(
        later,
        vec![
            format!(r#"event Warning CrashLooping pods shop/web-abc-2 uid={} "container side restarted 5 times (threshold 5)""#, uid("web-abc-2")),
            r#"patch Merge deployments.apps shop/web {"metadata":{"annotations":{"kubewasm.io/crashloop-pod":"web-abc-2","kubewasm.io/crashloop-restarts":"5"}}}"#.to_owned(),
        ]
    );
    app.shutdown().await;
}

/// Each kind has its own watch, so a Pod's delta can come before its new
/// owners reach the cache (as in the e2e run): the delta is retried, and
/// the owners that arrive meanwhile are found. The backoff is long (1-2 s,
/// then 2-4 s, then 4-8 s) so the owners are written between attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashloop_watcher_waits_for_owners_that_reach_the_cache_after_the_pod() {
    let h = Harness::new();
    write_cluster(
        h.cluster.path(),
        &[("pods/web-abc-1.yaml", &pod("web-abc-1", Some("web-abc"), 7))],
    );
    install_crashloop(&h);
    let mut options = h.options();
    options.dispatch.base_backoff = std::time::Duration::from_secs(1);
    let (app, sink) = h.start_recording_with(&options).await;
    eventually("the first attempt's retry", WAIT, || async {
        (app.summary().plugins.get("crashloop")?.retries >= 1).then_some(())
    })
    .await;
    assert!(sink.take().is_empty(), "a retried attempt emits nothing");
    write_cluster(h.cluster.path(), &[("workload.yaml", WORKLOAD)]);
    app.local().unwrap().rescan().unwrap();
    idle(&app).await;
    let mut actions: Vec<String> = sink.take().iter().map(|(_, a)| describe(a)).collect();
    actions.sort();
    assert_eq!(actions.len(), 2, "{actions:?}");
    assert!(actions[0].starts_with("event Warning CrashLooping pods shop/web-abc-1 "));
    assert_eq!(
        actions[1],
        r#"patch Merge deployments.apps shop/web {"metadata":{"annotations":{"kubewasm.io/crashloop-pod":"web-abc-1","kubewasm.io/crashloop-restarts":"7"}}}"#
    );
    let summary = app.summary();
    assert!(
        (1..=3).contains(&summary.plugins["crashloop"].retries),
        "{summary}"
    );
    assert_eq!(summary.plugins["crashloop"].dead, 0, "{summary}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_replicator_copies_to_matching_namespaces_exactly() {
    kubewasm_tests::check_replicator_copies_exactly(|h| {
        install(
            h.plugins.path(),
            "replicator",
            "config_replicator",
            Some(kubewasm_tests::REPLICATOR_SIDECAR),
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_replicator_follows_its_source_through_update_new_namespace_and_delete() {
    kubewasm_tests::check_replicator_follows_source(|h| {
        install(
            h.plugins.path(),
            "replicator",
            "config_replicator",
            Some(kubewasm_tests::REPLICATOR_SIDECAR),
        );
    })
    .await;
}

/// A copy of its own whose source is gone (deleted while no replica led)
/// is deleted when the copies are replayed; copies of live sources are
/// kept, and so are other replicators' orphans and unmarked ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_replicator_deletes_its_own_orphan_copies_found_in_the_replay_and_no_others() {
    let h = Harness::new();
    write_cluster(
        h.cluster.path(),
        &[(
            "cluster.yaml",
            &format!(
                "{}{}",
                kubewasm_tests::REPLICATOR_CLUSTER,
                kubewasm_tests::REPLICATOR_ORPHANS
            ),
        )],
    );
    install(
        h.plugins.path(),
        "replicator",
        "config_replicator",
        Some(kubewasm_tests::REPLICATOR_SIDECAR),
    );
    let app = h.start().await;
    idle(&app).await;
    let cm = kubewasm::kind::Gvk::new("", "v1", "ConfigMap");
    let local = app.local().unwrap();
    assert!(
        local.get(&cm, Some("team-a"), "gone").is_none(),
        "the orphan stays"
    );
    for name in ["others", "unmarked"] {
        assert!(
            local.get(&cm, Some("team-a"), name).is_some(),
            "{name} was swept"
        );
    }
    assert!(local.get(&cm, Some("team-a"), "ca-bundle").is_some());
    assert!(local.get(&cm, Some("team-b"), "ca-bundle").is_some());
    app.shutdown().await;
}

/// Two replicators with different source selectors in one cluster: each
/// copies its own source and sweeps only its own copies, so both sets of
/// copies live side by side and each goes with its own source only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicators_with_different_selectors_leave_each_others_copies() {
    let h = Harness::new();
    let second_source = "
---
apiVersion: v1
kind: ConfigMap
metadata: {name: proxy-settings, namespace: platform, labels: {team-config: 'true'}}
data: {proxy: squid}
";
    let cluster = format!("{}{second_source}", kubewasm_tests::REPLICATOR_CLUSTER);
    write_cluster(h.cluster.path(), &[("cluster.yaml", &cluster)]);
    install(
        h.plugins.path(),
        "replicator",
        "config_replicator",
        Some(kubewasm_tests::REPLICATOR_SIDECAR),
    );
    install(
        h.plugins.path(),
        "team-replicator",
        "config_replicator",
        Some(
            &kubewasm_tests::REPLICATOR_SIDECAR
                .replace("config: {", "config: {sourceSelector: team-config=true, "),
        ),
    );
    let app = h.start().await;
    idle(&app).await;
    let cm = kubewasm::kind::Gvk::new("", "v1", "ConfigMap");
    let local = app.local().unwrap();
    let by = |ns: &str, name: &str| {
        local.get(&cm, Some(ns), name).map(|v| {
            v["metadata"]["annotations"]["kubewasm.io/replicated-by"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
    };
    for ns in ["team-a", "team-b"] {
        assert_eq!(by(ns, "ca-bundle").as_deref(), Some("replicator"), "{ns}");
        assert_eq!(
            by(ns, "proxy-settings").as_deref(),
            Some("team-replicator"),
            "{ns}"
        );
    }
    // The first source goes: only its copies go with it.
    let without = cluster
        .split("---")
        .filter(|d| !d.contains("ca-bundle"))
        .collect::<Vec<_>>()
        .join("---");
    write_cluster(h.cluster.path(), &[("cluster.yaml", &without)]);
    local.rescan().unwrap();
    idle(&app).await;
    for ns in ["team-a", "team-b"] {
        assert_eq!(by(ns, "ca-bundle"), None, "{ns}");
        assert_eq!(
            by(ns, "proxy-settings").as_deref(),
            Some("team-replicator"),
            "{ns}"
        );
    }
    let summary = app.summary();
    app.shutdown().await;
    for (name, p) in &summary.plugins {
        assert_eq!(p.dead, 0, "{name} had dead deltas: {summary}");
    }
}
