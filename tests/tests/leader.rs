//! Leader election end to end: two real `kubewasm` processes with
//! `--leader-elect` against the real API server (tests/controlplane), each
//! with its own identity (`POD_NAME`). The recorder plugin writes every delta
//! it is handed as an Event whose `reportingInstance` names the replica, so
//! the Events show who acted and when.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::*;
use kubewasm_tests::install;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);
/// Short durations so failover is quick: lease 4s, renew deadline 3s.
const LEASE: Duration = Duration::from_secs(4);
const RETRY: Duration = Duration::from_millis(500);

fn replica(cp: &ControlPlane, ns: &str, name: &str) -> HostProcess {
    replica_with(cp, ns, name, &[])
}

/// [`replica`] with more flags.
fn replica_with(cp: &ControlPlane, ns: &str, name: &str, more: &[&str]) -> HostProcess {
    let sidecar = recorder_sidecar(ns, &["configmaps"]);
    let mut args = vec![
        "--leader-elect",
        "--leader-elect-namespace",
        ns,
        "--leader-elect-lease-duration",
        "4s",
        "--leader-elect-renew-deadline",
        "3s",
        "--leader-elect-retry-period",
        "500ms",
    ];
    args.extend_from_slice(more);
    HostProcess::start_args(cp.admin_kubeconfig(), &args, &[("POD_NAME", name)], |dir| {
        install(dir, "recorder", "recorder", Some(&sidecar))
    })
}

async fn written(client: &kube::Client, ns: &str) -> Vec<Written> {
    recorder_written(client, ns).await
}

/// The plugin's belief (name -> rv) from one replica's deltas, in order.
fn view<'a>(ws: impl Iterator<Item = &'a Written>) -> BTreeMap<String, String> {
    replay_view(ws.map(|w| (w.delta.as_str(), w.name.as_str(), w.rv.as_str())))
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("kubewasm")
        .await
        .unwrap()
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty())
        // `<POD_NAME>_<per-process suffix>`: the replica's name.
        .map(|h| {
            h.rsplit_once('_')
                .map_or(h.clone(), |(pod, _)| pod.to_owned())
        })
}

async fn create_cms(api: &Api<ConfigMap>, ns: &str, names: impl Iterator<Item = String>) {
    for name in names {
        let cm: ConfigMap = serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns}, "data": {"v": "0"}}))
        .unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
}

/// Waits until `host`'s identity holds the Lease and its recorder has
/// handed over the initial list (its `synced` Event exists).
async fn wait_leading(client: &kube::Client, leases: &Api<Lease>, ns: &str, id: &str) {
    eventually(&format!("{id} leads and has synced"), WAIT, || async {
        let leads = holder(leases).await.as_deref() == Some(id);
        let synced = written(client, ns)
            .await
            .iter()
            .any(|w| w.instance.starts_with(id) && w.delta == "synced");
        (leads && synced).then_some(())
    })
    .await;
}

#[tokio::test]
async fn one_of_two_replicas_leads_and_a_killed_leader_fails_over_within_the_lease() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "e2e-lease-kill";
    namespace(&client, ns, json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    create_cms(&api, ns, (0..8).map(|i| format!("c{i}"))).await;

    let a = replica(cp, ns, "lease-kill-a");
    let b = replica(cp, ns, "lease-kill-b");
    let first = eventually("a lease holder", WAIT, || holder(&leases)).await;
    let (leader, follower, fid) = match first.as_str() {
        "lease-kill-a" => (a, b, "lease-kill-b"),
        "lease-kill-b" => (b, a, "lease-kill-a"),
        other => panic!("unexpected holder {other}"),
    };
    wait_leading(&client, &leases, ns, &first).await;
    // The follower is up and warm (its cache synced) but holds nothing.
    follower.wait_log("cache synced", WAIT).await;
    follower.wait_log("campaigning for the lease", WAIT).await;
    // Several retry periods later: still the one holder, and only it acted.
    tokio::time::sleep(RETRY * 6).await;
    assert_eq!(holder(&leases).await.as_deref(), Some(first.as_str()));
    let before = written(&client, ns).await;
    assert!(!before.is_empty());
    assert!(
        before.iter().all(|w| w.instance.starts_with(&first)),
        "a follower acted: {before:#?}"
    );
    assert!(!follower.logs().contains("became leader"));

    // Churn, and kill the leader in the middle of it.
    let churn = {
        let api = api.clone();
        tokio::spawn(async move {
            for round in 0..6 {
                for i in 0..4 {
                    api.patch(
                        &format!("c{i}"),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"data": {"v": round.to_string()}})),
                    )
                    .await
                    .unwrap();
                }
                if round == 2 {
                    api.delete("c7", &DeleteParams::default()).await.unwrap();
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            create_cms(&api, "e2e-lease-kill", (0..2).map(|i| format!("n{i}"))).await;
        })
    };
    tokio::time::sleep(Duration::from_millis(700)).await;
    let killed = Instant::now();
    leader.kill();
    // Once it has been reaped, it can write nothing more.
    let killed_at = Timestamp::now();
    let took = eventually("the follower holds the lease", WAIT, || async {
        (holder(&leases).await.as_deref() == Some(fid)).then(|| killed.elapsed())
    })
    .await;
    eprintln!("abrupt failover: the follower held the lease {took:?} after SIGKILL");
    // The follower waits out the lease from the last renewal it saw (at
    // most one retry period before the kill), then takes it.
    assert!(
        took <= LEASE + RETRY * 3,
        "takeover took {took:?} (lease {LEASE:?})"
    );
    assert!(took >= LEASE - RETRY * 2, "took over early: {took:?}");
    churn.await.unwrap();

    // The new leader's view, from its replay and live deltas, is the server's.
    let server = configmap_versions(&api).await;
    let ws = eventually("the new leader's view equals the server", WAIT, || async {
        let ws = written(&client, ns).await;
        let mine = ws.iter().filter(|w| w.instance.starts_with(fid));
        (view(mine) == server).then_some(ws)
    })
    .await;
    let lease = leases.get("kubewasm").await.unwrap().spec.unwrap();
    let acquired = lease.acquire_time.unwrap().0;
    for w in &ws {
        if w.instance.starts_with(&first) {
            assert!(
                w.at <= killed_at,
                "the old leader wrote after its death: {w:?}"
            );
        } else {
            assert!(w.instance.starts_with(fid), "{w:?}");
            assert!(
                w.at >= acquired,
                "the new leader wrote before it held the lease ({acquired}): {w:?}"
            );
        }
    }
    // It started with a full replay of its cache.
    let replay: Vec<&Written> = ws
        .iter()
        .filter(|w| w.instance.starts_with(fid))
        .take_while(|w| w.delta != "synced")
        .collect();
    assert!(replay.iter().all(|w| w.delta == "added"), "{replay:#?}");
    assert!(replay.len() >= 7, "{replay:#?}");
    assert!(follower.logs().contains("became leader"));
    assert!(follower.stop().success());
}

#[tokio::test]
async fn sigterm_drains_releases_the_lease_and_the_follower_takes_over_at_once() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "e2e-lease-term";
    namespace(&client, ns, json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    create_cms(&api, ns, (0..4).map(|i| format!("c{i}"))).await;

    let a = replica(cp, ns, "lease-term-a");
    wait_leading(&client, &leases, ns, "lease-term-a").await;
    let b = replica(cp, ns, "lease-term-b");
    b.wait_log("cache synced", WAIT).await;
    b.wait_log("campaigning for the lease", WAIT).await;
    tokio::time::sleep(RETRY * 3).await;
    assert_eq!(holder(&leases).await.as_deref(), Some("lease-term-a"));

    let (status, log) = a.stop_with_logs();
    let exited = Instant::now();
    let exited_at = Timestamp::now();
    assert!(status.success(), "the leader exits 0 on SIGTERM: {log}");
    assert!(log.contains("released the lease"), "{log}");
    let took = eventually("the follower holds the lease", WAIT, || async {
        (holder(&leases).await.as_deref() == Some("lease-term-b")).then(|| exited.elapsed())
    })
    .await;
    eprintln!("graceful handover: the follower held the lease {took:?} after the leader exited");
    assert!(
        took < Duration::from_secs(2),
        "a released lease must be taken at once, not after the lease duration: {took:?}"
    );

    // The new leader acts; the old one wrote nothing after it exited.
    create_cms(&api, ns, std::iter::once("after".to_owned())).await;
    let server = configmap_versions(&api).await;
    let ws = eventually("the new leader's view equals the server", WAIT, || async {
        let ws = written(&client, ns).await;
        let mine = ws.iter().filter(|w| w.instance.starts_with("lease-term-b"));
        (view(mine) == server).then_some(ws)
    })
    .await;
    for w in ws.iter().filter(|w| w.instance.starts_with("lease-term-a")) {
        assert!(w.at <= exited_at, "{w:?}");
    }
    assert!(b.stop().success());
}

/// The web view's address from its log line.
fn ui_addr(logs: &str) -> std::net::SocketAddr {
    let url = logs
        .lines()
        .find_map(|l| l.split("web view serving url=").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no web view address in:\n{logs}"));
    url.trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// An operator who lands on either replica (a port-forward picks any
/// Pod) learns which one leads: the follower's `/readyz` text and web
/// view say it is a follower and name the leader, the leader's say it
/// leads, and `kubewasm status` reads the same from the Lease.
#[tokio::test]
async fn which_replica_leads_is_in_sight_on_readyz_the_web_view_and_kubewasm_status() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "e2e-lease-sight";
    namespace(&client, ns, json!({})).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let start = |name: &str| replica_with(cp, ns, name, &["--ui", "--ui-addr", "127.0.0.1:0"]);
    let a = start("sight-a");
    let b = start("sight-b");
    let first = eventually("a lease holder", WAIT, || holder(&leases)).await;
    let (leader, follower) = if first == "sight-a" {
        (&a, &b)
    } else {
        (&b, &a)
    };
    let identity = leases.get("kubewasm").await.unwrap().spec.unwrap();
    let identity = identity.holder_identity.unwrap();
    // As the API server writes it (six digits of fraction).
    let since = serde_json::to_value(
        leases
            .get("kubewasm")
            .await
            .unwrap()
            .spec
            .unwrap()
            .acquire_time
            .unwrap(),
    )
    .unwrap()
    .as_str()
    .unwrap()
    .to_owned();

    // /readyz: ready on both, and the text says who leads since when.
    let follower_metrics = follower.metrics_addr(WAIT).await;
    let text = eventually("the follower's /readyz names the leader", WAIT, || async {
        let (code, _, body) = http_get(follower_metrics, "/readyz").ok()?;
        (code == 200 && body.contains("follower:")).then_some(body)
    })
    .await;
    assert!(
        text.starts_with("ok\n")
            && text.contains(&format!("follower: {identity} leads since {since}")),
        "{text}"
    );
    let leader_metrics = leader.metrics_addr(WAIT).await;
    let text = eventually("the leader's /readyz says it leads", WAIT, || async {
        let (code, _, body) = http_get(leader_metrics, "/readyz").ok()?;
        (code == 200 && body.contains("leader:")).then_some(body)
    })
    .await;
    assert!(
        text.contains(&format!(
            "leader: this replica ({identity}) leads since {since}"
        )),
        "{text} (the Lease: {identity} since {since})"
    );

    // The web view's state: the follower's names the leader.
    follower.wait_log("web view serving", WAIT).await;
    let ui = ui_addr(&follower.logs());
    let state: Value = eventually("the follower's web view state", WAIT, || async {
        let (code, _, body) = http_get(ui, "/ui/api/state").ok()?;
        let v: Value = serde_json::from_str(&body).ok()?;
        (code == 200 && !v["leadership"].is_null()).then_some(v)
    })
    .await;
    assert_eq!(state["leadership"]["leading"], false, "{state}");
    assert_eq!(state["leadership"]["holder"], identity.as_str(), "{state}");
    assert_eq!(state["leadership"]["since"], since.as_str(), "{state}");
    leader.wait_log("web view serving", WAIT).await;
    let ui = ui_addr(&leader.logs());
    let (_, _, body) = http_get(ui, "/ui/api/state").unwrap();
    let state: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(state["leadership"]["leading"], true, "{state}");

    // `kubewasm status`, from the cluster alone.
    let out = succeeded(
        std::process::Command::new(kubewasm_bin())
            .args(["status", "--namespace", ns, "--kubeconfig"])
            .arg(cp.admin_kubeconfig())
            .output()
            .unwrap(),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with(&format!(
            "Leader: {identity} since {since} (Lease {ns}/kubewasm"
        )),
        "{text}"
    );
    let out = succeeded(
        std::process::Command::new(kubewasm_bin())
            .args(["status", "-o", "json", "--namespace", ns, "--kubeconfig"])
            .arg(cp.admin_kubeconfig())
            .output()
            .unwrap(),
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["leader"]["identity"], identity.as_str(), "{json}");
    assert!(a.stop().success());
    assert!(b.stop().success());
}
