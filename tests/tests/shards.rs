//! Shards end to end on the real API server (tests/controlplane): two real
//! `kubewasm` processes with `--shards 2`, each with its own identity. The
//! recorder plugin writes every delta it is handed as an Event naming the
//! replica, so the Events show which replica handled which object, and
//! when. The placement is checked against the shard each object's uid
//! hashes into (FNV-1a, as the API server's sharded watch computes it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kubewasm::shard::{fnv1a64, shard_of};
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::*;
use kubewasm_tests::install;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(90);
const LEASE: Duration = Duration::from_secs(4);
const RETRY: Duration = Duration::from_millis(500);
const OBJECTS: usize = 40;

fn replica(cp: &ControlPlane, ns: &str, name: &str) -> HostProcess {
    replica_of(cp, ns, name, 2)
}

fn replica_of(cp: &ControlPlane, ns: &str, name: &str, shards: u32) -> HostProcess {
    replica_with(cp, ns, name, shards, &[])
}

fn replica_with(
    cp: &ControlPlane,
    ns: &str,
    name: &str,
    shards: u32,
    extra: &[&str],
) -> HostProcess {
    let sidecar = recorder_sidecar(ns, &["configmaps"]);
    let shards = shards.to_string();
    let mut args = vec![
        "--shards",
        &shards,
        "--leader-elect-namespace",
        ns,
        "--leader-elect-lease-duration",
        "4s",
        "--leader-elect-renew-deadline",
        "3s",
        "--leader-elect-retry-period",
        "500ms",
    ];
    args.extend_from_slice(extra);
    HostProcess::start_args(cp.admin_kubeconfig(), &args, &[("POD_NAME", name)], |dir| {
        install(dir, "recorder", "recorder", Some(&sidecar))
    })
}

async fn written(client: &kube::Client, ns: &str) -> Vec<Written> {
    recorder_written(client, ns).await
}

/// Sets ConfigMap `name`'s `data.v` to `v` (one change to deliver).
async fn set_value(api: &Api<ConfigMap>, name: &str, v: impl ToString) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": v.to_string()}})),
    )
    .await
    .unwrap();
}

/// The holder of shard `i`'s Lease (its replica name), and since when.
async fn holder(leases: &Api<Lease>, i: u32) -> Option<(String, Timestamp)> {
    let spec = leases
        .get_opt(&format!("kubewasm-shard-{i}"))
        .await
        .unwrap()?
        .spec?;
    let h = spec.holder_identity.filter(|h| !h.is_empty())?;
    let name = h
        .rsplit_once('_')
        .map_or(h.clone(), |(pod, _)| pod.to_owned());
    Some((name, spec.acquire_time?.0))
}

/// Waits until each of two replicas holds one of the two shards; their
/// names by shard.
async fn one_shard_each(leases: &Api<Lease>) -> [String; 2] {
    eventually("each replica holds one shard", WAIT, || async {
        let h0 = holder(leases, 0).await?;
        let h1 = holder(leases, 1).await?;
        (h0.0 != h1.0).then_some([h0.0, h1.0])
    })
    .await
}

/// ConfigMaps `<prefix>0` ... in `ns`, `data.v` 0.
async fn create_configmaps(api: &Api<ConfigMap>, ns: &str, prefix: &str, n: usize) {
    for i in 0..n {
        let cm: ConfigMap = serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{prefix}{i}"), "namespace": ns}, "data": {"v": "0"}}))
        .unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
}

/// Each ConfigMap's shard of 2, from its uid.
async fn shards_of(api: &Api<ConfigMap>) -> BTreeMap<String, u32> {
    shards_of_n(api, 2).await
}

/// Each ConfigMap's shard of `n`, from its uid.
async fn shards_of_n(api: &Api<ConfigMap>, n: u32) -> BTreeMap<String, u32> {
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| {
            let uid = c.metadata.uid?;
            Some((c.metadata.name?, shard_of(fnv1a64(uid.as_bytes()), n)))
        })
        .collect()
}

#[tokio::test]
async fn two_replicas_split_the_objects_by_uid_and_the_survivor_takes_a_killed_ones_shard() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "e2e-shards";
    namespace(&client, ns, json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    create_configmaps(&api, ns, "c", OBJECTS).await;
    let placed = shards_of(&api).await;
    let in_shard = |s: u32| placed.values().filter(|p| **p == s).count();
    assert!(
        in_shard(0) > 0 && in_shard(1) > 0,
        "40 uids all in one shard: {placed:?}"
    );

    let a = replica(cp, ns, "shards-a");
    let b = replica(cp, ns, "shards-b");
    // One shard each: the fair share of two shards over two replicas.
    let holders = one_shard_each(&leases).await;
    // `kubewasm shards` shows the same split, and both replicas live.
    let shown = eventually("kubewasm shards counts two live replicas", WAIT, || async {
        let out = std::process::Command::new(kubewasm_bin())
            .arg("shards")
            .arg("--kubeconfig")
            .arg(cp.admin_kubeconfig())
            .args(["-n", ns, "-o", "json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        (v["liveReplicas"] == 2).then_some(v)
    })
    .await;
    let rows = shown["shards"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{shown:#}");
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row["index"], i);
        assert!(
            row["holder"].as_str().unwrap().starts_with(&holders[i]),
            "{shown:#}"
        );
    }
    assert_eq!(
        rows[1]["range"],
        "[0x8000000000000000, 0x10000000000000000)"
    );
    // Every object handed (initial list) to the holder of its shard alone.
    let ws = eventually(
        "every object handed to its shard's holder",
        WAIT,
        || async {
            let ws = written(&client, ns).await;
            let names: BTreeSet<&str> = ws
                .iter()
                .filter(|w| w.delta == "added")
                .map(|w| w.name.as_str())
                .collect();
            (names.len() == OBJECTS).then_some(ws)
        },
    )
    .await;
    for w in ws.iter().filter(|w| w.delta != "synced") {
        let shard = placed[&w.name];
        assert!(
            w.instance.starts_with(&holders[shard as usize]),
            "{} (shard {shard}) handled by {}, not its shard's holder {}",
            w.name,
            w.instance,
            holders[shard as usize]
        );
    }
    // Both replicas acted, each on its own part only.
    for h in &holders {
        assert!(
            ws.iter()
                .any(|w| w.instance.starts_with(h.as_str()) && w.delta == "added")
        );
    }

    // Churn, and kill shard 1's holder in the middle of it.
    let (victim, survivor) = if holders[1] == "shards-a" {
        (a, b)
    } else {
        (b, a)
    };
    let survivor_id = holders[0].clone();
    let churn = {
        let api = api.clone();
        tokio::spawn(async move {
            for round in 1..=5 {
                for i in 0..OBJECTS / 2 {
                    set_value(&api, &format!("c{i}"), round).await;
                }
                if round == 2 {
                    for i in 30..34 {
                        api.delete(&format!("c{i}"), &DeleteParams::default())
                            .await
                            .unwrap();
                    }
                }
                tokio::time::sleep(Duration::from_millis(400)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(600)).await;
    let killed = Instant::now();
    victim.kill();
    let killed_at = Timestamp::now();
    let (took, acquired) = eventually("the survivor holds both shards", WAIT, || async {
        let (h1, since) = holder(&leases, 1).await?;
        let (h0, _) = holder(&leases, 0).await?;
        (h1 == survivor_id && h0 == survivor_id).then(|| (killed.elapsed(), since))
    })
    .await;
    eprintln!(
        "shard takeover: the survivor held the killed replica's shard {took:?} after SIGKILL"
    );
    assert!(
        took <= LEASE + RETRY * 4,
        "takeover took {took:?} (lease {LEASE:?})"
    );
    churn.await.unwrap();

    // The survivor's view, from its replay and live deltas, is the
    // server's for every object, whichever shard it began in.
    let server = configmap_versions(&api).await;
    let ws = eventually("the survivor's view equals the server", WAIT, || async {
        let ws = written(&client, ns).await;
        let mine = ws.iter().filter(|w| w.instance.starts_with(&survivor_id));
        let view = replay_view(mine.map(|w| (w.delta.as_str(), w.name.as_str(), w.rv.as_str())));
        (view == server).then_some(ws)
    })
    .await;
    // Nothing of shard 1 acted on by both at once: the victim's writes all
    // precede its death, the survivor's on shard 1 follow its acquisition.
    for w in &ws {
        if w.delta == "synced" {
            continue;
        }
        if !w.instance.starts_with(&survivor_id) {
            assert!(
                w.at <= killed_at,
                "the killed replica wrote after its death: {w:?}"
            );
        } else if placed.get(&w.name) == Some(&1) && w.at > killed_at {
            assert!(
                w.at >= acquired,
                "the survivor acted on shard 1 before holding it ({acquired}): {w:?}"
            );
        }
    }
    assert!(survivor.stop().success());
}

/// Every shard's holder's view (its recorder's deltas, replayed) of the
/// objects of the shards it holds equals the server's: nothing lost, and a
/// deleted object gone from it too. `placed` is each object's shard, taken
/// while all existed (a uid never changes).
async fn every_shard_holder_sees_the_server(
    client: &kube::Client,
    api: &Api<ConfigMap>,
    leases: &Api<Lease>,
    ns: &str,
    placed: &BTreeMap<String, u32>,
) -> bool {
    let server = configmap_versions(api).await;
    let ws = written(client, ns).await;
    for i in 0..3 {
        let Some((h, _)) = holder(leases, i).await else {
            return false;
        };
        let mine = ws.iter().filter(|w| w.instance.starts_with(&h));
        let view = replay_view(mine.map(|w| (w.delta.as_str(), w.name.as_str(), w.rv.as_str())));
        let of = |m: &BTreeMap<String, String>| -> BTreeMap<String, String> {
            m.iter()
                .filter(|(name, _)| placed.get(*name) == Some(&i))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        if of(&view) != of(&server) {
            return false;
        }
    }
    true
}

#[tokio::test]
async fn three_replicas_scale_down_to_one_and_back_and_every_shard_holder_sees_every_object() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "e2e-shards-scale";
    namespace(&client, ns, json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    create_configmaps(&api, ns, "s", 60).await;
    let placed = shards_of_n(&api, 3).await;
    let churn = |round: u32| {
        let api = api.clone();
        async move {
            for i in (round as usize % 3..60).step_by(3) {
                set_value(&api, &format!("s{i}"), round).await;
            }
        }
    };
    let names = ["scale-a", "scale-b", "scale-c"];
    let mut replicas: Vec<HostProcess> = names.iter().map(|n| replica_of(cp, ns, n, 3)).collect();
    let distinct_holders = |want: usize| {
        let leases = leases.clone();
        async move {
            let mut hs = BTreeSet::new();
            for i in 0..3 {
                hs.insert(holder(&leases, i).await?.0);
            }
            (hs.len() == want).then_some(())
        }
    };
    eventually("three replicas, one shard each", WAIT, || {
        distinct_holders(3)
    })
    .await;
    churn(1).await;
    eventually(
        "every holder sees the server (3 replicas)",
        WAIT,
        || async {
            every_shard_holder_sees_the_server(&client, &api, &leases, ns, &placed)
                .await
                .then_some(())
        },
    )
    .await;

    // Scale to one: two replicas stop (SIGTERM: they release their
    // shards and their member Leases), while objects change.
    let last = replicas.remove(0);
    for r in replicas.drain(..) {
        assert!(r.stop().success());
    }
    churn(2).await;
    api.delete("s59", &DeleteParams::default()).await.unwrap();
    eventually("one replica holds all three", WAIT, || distinct_holders(1)).await;
    eventually("the one replica sees the server", WAIT, || async {
        every_shard_holder_sees_the_server(&client, &api, &leases, ns, &placed)
            .await
            .then_some(())
    })
    .await;

    // Back to three: the lone replica hands shards over until each
    // holds one.
    replicas.push(last);
    for n in ["scale-d", "scale-e"] {
        replicas.push(replica_of(cp, ns, n, 3));
    }
    churn(3).await;
    eventually("three holders again", WAIT, || distinct_holders(3)).await;
    churn(4).await;
    eventually("every holder sees the server (back to 3)", WAIT, || async {
        every_shard_holder_sees_the_server(&client, &api, &leases, ns, &placed)
            .await
            .then_some(())
    })
    .await;
    for r in replicas {
        assert!(r.stop().success());
    }
}

/// A replica's `kubewasm_shard_objects` per shard of 2: the objects its
/// informers cache in each.
async fn cached_per_shard(host: &HostProcess) -> Option<[u64; 2]> {
    let addr = host.metrics_addr(WAIT).await;
    let (_, _, body) = http_get(addr, "/metrics").ok()?;
    let n = |i: u32| sample(&body, &format!("kubewasm_shard_objects{{shard=\"{i}\"}}"));
    Some([n(0)? as u64, n(1)? as u64])
}

/// `--shard-cache held`: each replica caches only the objects of the shard
/// it holds (the API server here, 1.35, ignores `shardSelector`, so the
/// replica filters what it receives, and says so); once a replica dies,
/// the survivor lists the shard it takes and its recorder's view (replay
/// and live deltas) is the server's for every object.
#[tokio::test]
async fn held_shard_caches_hold_only_their_shards_and_list_the_one_taken_over() {
    held_shard_caches(ControlPlane::shared(), "e2e-shards-held", Filters::Replica).await;
}

/// The same on Kubernetes 1.36 with its `ShardedListAndWatch` gate on: the
/// API server takes the selector the replicas send (a malformed one is
/// refused, and nothing would sync), answers with `shardInfo`, and the
/// replicas say the server filters.
#[tokio::test]
async fn on_kubernetes_1_36_the_api_server_lists_and_watches_only_the_shards_held() {
    let cp = ControlPlane::builder()
        .kubernetes_1_36()
        .apiserver_arg("--feature-gates=ShardedListAndWatch=true")
        .start()
        .await
        .unwrap();
    let _logs = cp.logs_on_failure();
    held_shard_caches(&cp, "e2e-shards-served", Filters::Server).await;
}

/// The API server's `apiserver_watch_shards_total` for ConfigMaps: the
/// watches it serves filtered by a shard selector (Kubernetes 1.36).
async fn sharded_watches(client: &kube::Client) -> u64 {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(request).await.unwrap();
    text.lines()
        .filter(|l| {
            l.starts_with("apiserver_watch_shards_total{") && l.contains("resource=\"configmaps\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Who filters the objects of shards not held, as a replica logs it.
#[derive(Clone, Copy)]
enum Filters {
    Replica,
    Server,
}

/// Two replicas with `--shard-cache held`, one shard each: each caches only
/// its shard's objects and says who filtered; after a kill the survivor
/// lists the shard it takes over and its view equals the server's.
async fn held_shard_caches(cp: &ControlPlane, ns: &str, filters: Filters) {
    let client = cp.admin_client().await;
    namespace(&client, ns, json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    create_configmaps(&api, ns, "h", OBJECTS).await;
    let placed = shards_of(&api).await;
    let in_shard = |s: u32| placed.values().filter(|p| **p == s).count() as u64;
    assert!(in_shard(0) > 0 && in_shard(1) > 0, "{placed:?}");
    let held = ["--shard-cache", "held"];
    let a = replica_with(cp, ns, "held-a", 2, &held);
    let b = replica_with(cp, ns, "held-b", 2, &held);
    let holders = one_shard_each(&leases).await;
    let (of0, of1) = if holders[0] == "held-a" {
        (&a, &b)
    } else {
        (&b, &a)
    };
    // Each caches its own shard's objects and none of the other's.
    for (host, shard) in [(of0, 0usize), (of1, 1)] {
        let mut want = [0u64; 2];
        want[shard] = in_shard(shard as u32);
        eventually(
            &format!("the holder of shard {shard} caches its objects only"),
            WAIT,
            || async { (cached_per_shard(host).await? == want).then_some(()) },
        )
        .await;
        let said = match filters {
            Filters::Replica => "the API server ignores shardSelector",
            Filters::Server => "the API server lists and watches only the shards held",
        };
        host.wait_log(said, WAIT).await;
    }
    if let Filters::Server = filters {
        // The server's own count of the watches it filters by shard: one
        // per replica.
        eventually(
            "the API server to count both replicas' sharded watches",
            WAIT,
            || async { (sharded_watches(&client).await >= 2).then_some(()) },
        )
        .await;
    }

    // Churn, then kill shard 1's holder: the survivor takes the shard,
    // lists its objects and hands them over.
    for i in 0..OBJECTS / 2 {
        set_value(&api, &format!("h{i}"), 1).await;
    }
    api.delete("h39", &DeleteParams::default()).await.unwrap();
    let (victim, survivor) = if holders[1] == "held-a" {
        (a, b)
    } else {
        (b, a)
    };
    let survivor_id = holders[0].clone();
    victim.kill();
    eventually("the survivor holds both shards", WAIT, || async {
        let (h1, _) = holder(&leases, 1).await?;
        let (h0, _) = holder(&leases, 0).await?;
        (h1 == survivor_id && h0 == survivor_id).then_some(())
    })
    .await;
    for i in OBJECTS / 2..OBJECTS - 1 {
        set_value(&api, &format!("h{i}"), 2).await;
    }
    let server = configmap_versions(&api).await;
    let on_server = |s: u32| server.keys().filter(|n| placed.get(*n) == Some(&s)).count() as u64;
    eventually("the survivor caches both shards", WAIT, || async {
        (cached_per_shard(&survivor).await? == [on_server(0), on_server(1)]).then_some(())
    })
    .await;
    eventually("the survivor's view equals the server", WAIT, || async {
        let ws = written(&client, ns).await;
        let mine = ws.iter().filter(|w| w.instance.starts_with(&survivor_id));
        let view = replay_view(mine.map(|w| (w.delta.as_str(), w.name.as_str(), w.rv.as_str())));
        (view == server).then_some(())
    })
    .await;
    assert!(survivor.stop().success());
}
