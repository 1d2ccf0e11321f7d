//! Failover of the kubewasm Deployment on the real single-node cluster
//! (tests/controlplane --node), under churn: the leader's container killed
//! abruptly (SIGKILL through containerd) and the leader Pod deleted
//! (SIGTERM, drain, lease released), five times each.
//!
//! After every handover, nothing is lost: every copy config-replicator
//! keeps equals its source and no copy outlives its source, and the new
//! leader's recorder plugin saw exactly the ConfigMaps the server holds.
//! Nothing is done twice by two leaders at once: the API server's audit log
//! names the Pod behind every write (a bound token carries it), and the
//! writes of the two replicas never interleave.
//!
//! The lease is shortened (5 s, renew 3 s, retry 1 s) so that five abrupt
//! trials fit in the suite; client-go's defaults (15 s, 10 s, 2 s) scale
//! the takeover time, not the behaviour.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use kubewasm_tests::controlplane::{AuditWrite, ControlPlane};
use kubewasm_tests::e2e::{
    churn, copies_match_sources, eventually, namespace, recorded, recorder_sidecar, seen_view,
};
use kubewasm_tests::incluster::{
    NS, apply_all, build_and_import_image, container_memory, holder_pod, lease_holder,
    single_node_docs, wait_available,
};
use kubewasm_tests::plugin_artifacts;
use serde_json::json;

/// Image build, Pod start and sync, plugin compile, kubelet restart backoff.
const TIMEOUT: Duration = Duration::from_secs(300);
/// The lease the replicas run with here.
const LEASE: Duration = Duration::from_secs(5);
const TRIALS: usize = 5;
/// Sources of config-replicator and the recorder's namespace.
const SOURCES: &str = "churn";
const TENANTS: [&str; 2] = ["churn-tenant-1", "churn-tenant-2"];
const SA: &str = "system:serviceaccount:kubewasm:kubewasm";

fn cluster() -> &'static ControlPlane {
    static CP: OnceLock<ControlPlane> = OnceLock::new();
    CP.get_or_init(|| {
        ControlPlane::builder()
            .node(true)
            .audit(true)
            .start_blocking()
            .unwrap_or_else(|e| panic!("starting the single-node cluster: {e:#}"))
    })
}

/// The two tests share one Deployment: one at a time, deployed once.
static DEPLOYED: tokio::sync::Mutex<bool> = tokio::sync::Mutex::const_new(false);

/// The single-node overlay plus the recorder plugin (in its own
/// ConfigMap, projected into /plugins like deploy/examples/add-plugin)
/// watching the churn namespace, and the shorter lease.
async fn deploy(cp: &ControlPlane, client: &kube::Client) {
    let took = build_and_import_image(cp);
    eprintln!("image built and imported in {took:?}");
    namespace(client, SOURCES, json!({})).await;
    for t in TENANTS {
        namespace(client, t, json!({"tenant": "yes"})).await;
    }
    let mut docs = single_node_docs(cp);
    let deployment = docs.iter_mut().find(|d| d["kind"] == "Deployment").unwrap();
    let container = &mut deployment["spec"]["template"]["spec"]["containers"][0];
    for arg in [
        format!("--leader-elect-lease-duration={}s", LEASE.as_secs()),
        "--leader-elect-renew-deadline=3s".to_owned(),
        "--leader-elect-retry-period=1s".to_owned(),
    ] {
        container["args"].as_array_mut().unwrap().push(json!(arg));
    }
    let volumes = deployment["spec"]["template"]["spec"]["volumes"]
        .as_array_mut()
        .unwrap();
    let plugins = volumes.iter_mut().find(|v| v["name"] == "plugins").unwrap();
    assert_eq!(
        plugins["configMap"]["name"], "kubewasm-plugins",
        "{plugins}"
    );
    *plugins = json!({
        "name": "plugins",
        "projected": {"sources": [
            {"configMap": {"name": "kubewasm-plugins"}},
            {"configMap": {"name": "kubewasm-plugins-recorder"}},
        ]}
    });
    let wasm = std::fs::read(plugin_artifacts().join("recorder.wasm")).unwrap();
    let recorder = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("kubewasm-plugins-recorder".into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        binary_data: Some(BTreeMap::from([(
            "recorder.wasm".to_owned(),
            ByteString(wasm),
        )])),
        data: Some(BTreeMap::from([(
            "recorder.yaml".to_owned(),
            recorder_sidecar(SOURCES, &["configmaps"]),
        )])),
        ..Default::default()
    };
    let mut recorder = serde_json::to_value(recorder).unwrap();
    recorder["apiVersion"] = json!("v1");
    recorder["kind"] = json!("ConfigMap");
    docs.push(recorder);
    let applied = Instant::now();
    apply_all(client, &docs).await;
    wait_available(client, 2, TIMEOUT).await;
    eprintln!("applied to 2 Ready replicas in {:?}", applied.elapsed());
    for (pod, working_set, rss) in container_memory(client).await {
        eprintln!(
            "{pod} after sync: working set {:.1} MiB, RSS {:.1} MiB",
            working_set as f64 / 1048576.0,
            rss as f64 / 1048576.0
        );
    }
}

/// Nothing lost: the copies equal their sources in every tenant (and none
/// outlives its source), and the leader's recorder saw exactly what the
/// server holds in the churn namespace.
async fn converged(client: &kube::Client, leader: &str) -> Option<()> {
    copies_match_sources(client, SOURCES, "kubewasm.io/replicate=true", &TENANTS)
        .await
        .ok()??;
    let server =
        kubewasm_tests::e2e::configmap_versions(&Api::namespaced(client.clone(), SOURCES)).await;
    let seen = recorded(client, SOURCES).await;
    let leaders_version = seen
        .iter()
        .filter(|s| s.instance.starts_with(&format!("{leader}/")))
        .max_by_key(|s| &s.version)?
        .version
        .clone();
    let view = seen_view(seen.iter().filter(|s| s.version == leaders_version));
    (view == server).then_some(())
}

/// The writes the host's replicas made (the Lease's own renewals aside):
/// how many times the writing Pod changed, in the order the server
/// received them, and which Pods wrote.
fn write_runs(writes: &[AuditWrite], since: k8s_openapi::jiff::Timestamp) -> (usize, Vec<String>) {
    let mut mine: Vec<&AuditWrite> = writes
        .iter()
        .filter(|w| w.user == SA && w.at >= since)
        .filter(|w| !w.resource.starts_with("coordination.k8s.io/leases"))
        .collect();
    mine.sort_by_key(|w| w.at);
    let mut runs = 0;
    let mut last: Option<&str> = None;
    let mut writers: Vec<String> = Vec::new();
    for w in mine {
        let pod = w.pod.as_deref().unwrap_or("?");
        if last != Some(pod) {
            runs += 1;
            last = Some(pod);
        }
        if !writers.iter().any(|p| p == pod) {
            writers.push(pod.to_owned());
        }
    }
    (runs, writers)
}

enum Handover {
    /// SIGKILL the leader's container (the kubelet restarts it).
    Abrupt,
    /// Delete the leader's Pod (SIGTERM; the ReplicaSet replaces it).
    Graceful,
}

/// `TRIALS` handovers of one kind under churn; returns the takeover times.
async fn trials(how: Handover) -> Vec<Duration> {
    let cp = cluster();
    let _logs = cp.logs_on_failure();
    let client = cp.admin_client().await;
    let mut deployed = DEPLOYED.lock().await;
    if !*deployed {
        deploy(cp, &client).await;
        *deployed = true;
    }
    let since = k8s_openapi::jiff::Timestamp::now();
    let mut takeovers = Vec::new();
    for trial in 1..=TRIALS {
        wait_available(&client, 2, TIMEOUT).await;
        let old = eventually("a lease holder", TIMEOUT, || lease_holder(&client)).await;
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let churner = tokio::spawn({
            let (client, stop) = (client.clone(), stop.clone());
            async move { churn(client, SOURCES, "kubewasm.io/replicate", &stop).await }
        });
        // Churn runs before, during and after the handover.
        let pods_api: Api<Pod> = Api::namespaced(client.clone(), NS);
        eventually("churn under way", TIMEOUT, || async {
            let n = Api::<ConfigMap>::namespaced(client.clone(), SOURCES)
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .len();
            (n > 5).then_some(())
        })
        .await;
        let started = Instant::now();
        match how {
            Handover::Abrupt => {
                let pod = pods_api.get(holder_pod(&old)).await.unwrap();
                let id = pod.status.unwrap().container_statuses.unwrap()[0]
                    .container_id
                    .clone()
                    .unwrap();
                cp.kill_container(&id).unwrap();
            }
            Handover::Graceful => {
                pods_api
                    .delete(holder_pod(&old), &DeleteParams::default())
                    .await
                    .unwrap();
            }
        }
        let new = eventually("a new lease holder", TIMEOUT, || async {
            lease_holder(&client).await.filter(|h| *h != old)
        })
        .await;
        let took = started.elapsed();
        takeovers.push(took);
        // Pacing, not synchronisation: two more seconds of churn.
        tokio::time::sleep(Duration::from_secs(2)).await;
        stop.store(true, Ordering::Relaxed);
        let changes = churner.await.unwrap();
        eventually(
            &format!("trial {trial}: copies and the new leader's view equal the server's"),
            TIMEOUT,
            || converged(&client, holder_pod(&new)),
        )
        .await;
        eprintln!("trial {trial}: {old} -> {new} in {took:?} ({changes} changes)");
    }
    // Two leaders never wrote at once: each handover changes the writing
    // Pod once at most (an abrupt trial's restarted container keeps its
    // Pod's name, so a Pod may write again in a later term).
    let (runs, writers) = write_runs(&cp.audit_writes().unwrap(), since);
    assert!(
        writers.len() >= 2,
        "both replicas should have led and written: {writers:?}"
    );
    assert!(
        runs <= TRIALS + 1,
        "{runs} alternations of the writing Pod over {TRIALS} handovers: two leaders wrote at once ({writers:?})"
    );
    takeovers
}

fn report(what: &str, mut times: Vec<Duration>) {
    times.sort();
    eprintln!(
        "{what} over {} trials: min {:?}, median {:?}, max {:?}",
        times.len(),
        times[0],
        times[times.len() / 2],
        times[times.len() - 1]
    );
}

#[tokio::test]
async fn abrupt_failover_under_churn_loses_nothing_and_never_doubles() {
    let times = trials(Handover::Abrupt).await;
    // The follower takes over once the dead leader's lease expires.
    for t in &times {
        assert!(
            *t < LEASE + Duration::from_secs(3),
            "takeover took {t:?} with a {LEASE:?} lease"
        );
    }
    report("abrupt failover (SIGKILL of the leader's container)", times);
}

#[tokio::test]
async fn graceful_handover_on_pod_delete_loses_nothing_and_never_doubles() {
    let times = trials(Handover::Graceful).await;
    // The leader releases its lease on SIGTERM: no lease expiry to wait for.
    for t in &times {
        assert!(
            *t < LEASE,
            "handover took {t:?}: the lease was not released"
        );
    }
    report("graceful handover (leader Pod deleted)", times);
}
