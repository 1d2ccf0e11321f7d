//! Reconcile by key against the real API server: a precondition conflict is
//! retried with the fresh object, resyncs do not multiply a requeue, a
//! subscription narrowed to three namespaces requeues, swaps and hands over
//! in each of them, and a 60 s API-server outage during churn loses and
//! dead-letters nothing.
//!
//! Each test prints one `RECONCILE-FIGURES ...` line (run with
//! `--nocapture`) with the figures the closing note quotes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::*;
use kubewasm_tests::install;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

fn figures(line: &str) {
    eprintln!("RECONCILE-FIGURES {line}");
}

fn cm(name: &str, labels: Value, data: Value) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels}, "data": data}))
    .unwrap()
}

async fn create(api: &Api<ConfigMap>, name: &str, v: &str) {
    api.create(
        &PostParams::default(),
        &cm(name, json!({}), json!({"v": v})),
    )
    .await
    .unwrap_or_else(|e| panic!("creating {name}: {e}"));
}

/// Writes a sidecar by rename, as a deployment would: the host sees one
/// finished file.
fn write_sidecar(dir: &Path, name: &str, text: &str) {
    let tmp = dir.join(format!(".{name}.yaml.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(tmp, dir.join(format!("{name}.yaml"))).unwrap();
}

/// The metrics and dead letters of a running host.
async fn scrape(addr: std::net::SocketAddr) -> String {
    http_get(addr, "/metrics").unwrap().2
}

fn metric(body: &str, series: &str) -> f64 {
    sample(body, series).unwrap_or_else(|| panic!("no {series} in:\n{body}"))
}

/// The sum of every sample of `name` whose labels include `plugin="p"`.
fn metric_sum(body: &str, name: &str, plugin: &str) -> f64 {
    let label = format!("plugin=\"{plugin}\"");
    body.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `GET /dead-letters`, parsed.
fn dead_letters(addr: std::net::SocketAddr) -> Vec<Value> {
    let (code, _, body) = http_get(addr, "/dead-letters").unwrap();
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// Asserts that plugin `plugin` has no dead letter, listed or counted.
fn assert_no_dead_letters(addr: std::net::SocketAddr, body: &str, plugin: &str) {
    let dead = dead_letters(addr);
    assert!(dead.is_empty(), "dead letters: {dead:#?}");
    for series in [
        format!("kubewasm_plugin_dead_letters_total{{plugin=\"{plugin}\"}}"),
        format!("kubewasm_plugin_dead_letters_listed{{plugin=\"{plugin}\"}}"),
    ] {
        assert_eq!(metric(body, &series), 0.0, "{series}");
    }
}

/// The wall-clock time a text log line was written (its first field).
fn logged_at(line: &str) -> SystemTime {
    let ts: k8s_openapi::jiff::Timestamp = line
        .split_whitespace()
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no timestamp at the start of {line:?}"));
    SystemTime::from(ts)
}

#[tokio::test]
async fn a_precondition_conflict_is_retried_with_the_fresh_object_and_succeeds() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "reconcile-409";
    namespace(&client, ns, json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    // The testkit's `conflict` mode: the first attempt blocks on a socket
    // until this test sends a byte, then writes with the delta's (by then
    // stale) resourceVersion as a precondition.
    let gate = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gate_addr = gate.local_addr().unwrap();
    // The host config lets sidecars point at loopback; the grant picks the
    // gate's port.
    let (_config, config_file) = host_config("grants:\n  network: ['127.0.0.0/8:*']\n");
    let config_arg = config_file.to_str().unwrap();
    let host = HostProcess::start_args(
        cp.admin_kubeconfig(),
        &["--config", config_arg],
        &[],
        |dir| {
            install(
                dir,
                "conflicter",
                "testkit",
                Some(&format!(
                    "config: {{mode: conflict, connect: ['{gate_addr}']}}\nlimits: {{timeout: 50s}}\naccess:\n  - {{kinds: [pods, configmaps], verbs: [read, patch], namespaces: [{ns}]}}\ngrants:\n  network: {{allow: ['{gate_addr}']}}\n"
                )),
            );
        },
    );
    let addr = host.metrics_addr(WAIT).await;
    create(&api, "conflict-a", "1").await;
    let (mut held, _) = tokio::time::timeout(WAIT, gate.accept())
        .await
        .unwrap_or_else(|_| panic!("the plugin never reached its gate; log:\n{}", host.logs()))
        .unwrap();
    assert!(
        host.logs()
            .contains(&format!("testkit-conflict waiting {ns}/conflict-a")),
        "{}",
        host.logs()
    );
    // The plugin holds the delta of v=1: change the object under it, and
    // let the host's cache see the change before the stale write goes out.
    api.patch(
        "conflict-a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "2"}})),
    )
    .await
    .unwrap();
    let updated = "kubewasm_informer_deltas_total{kind=\"configmaps\",type=\"updated\"}";
    eventually_seen("the host's cache to see the change", WAIT, || async {
        let body = scrape(addr).await;
        match sample(&body, updated) {
            Some(n) if n >= 1.0 => Ok(()),
            n => Err(format!("{updated} = {n:?}")),
        }
    })
    .await;
    tokio::io::AsyncWriteExt::write_all(&mut held, b"go")
        .await
        .unwrap();
    // Polled every 10 ms, for the time of the success.
    let deadline = Instant::now() + WAIT;
    let (handled, succeeded) = loop {
        let now = api.get("conflict-a").await.unwrap();
        let at = SystemTime::now();
        if let Some(h) = now
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kubewasm.io/handled"))
        {
            break (h.clone(), at);
        }
        assert!(
            Instant::now() < deadline,
            "conflict-a was never annotated within {WAIT:?}; it is {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let logs = host.logs();
    let conflict = logs.lines().find(|l| {
        l.contains("an action hit a conflict")
            && l.contains("conflict-a")
            && l.contains("attempt=1")
    });
    let attempts = handled
        .split_whitespace()
        .find_map(|f| f.strip_prefix("attempt="))
        .unwrap_or("?");
    let time_ms = conflict.map_or(-1, |l| {
        succeeded
            .duration_since(logged_at(l))
            .map_or(-1, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    });
    figures(&format!("409: attempts={attempts} time_ms={time_ms}"));
    // The write of attempt 1 (v=1, the stale resourceVersion) was refused;
    // attempt 2 saw v=2 and its resourceVersion, and landed.
    assert_eq!(
        handled, "v=2 attempt=2 last=conflict",
        "the second attempt sees the fresh object and is told of the conflict"
    );
    let conflict = conflict.unwrap_or_else(|| panic!("no conflict logged for attempt 1:\n{logs}"));
    assert!(
        conflict.contains("409") || conflict.contains("Conflict"),
        "the API server's answer is in the log line: {conflict}"
    );
    let body = scrape(addr).await;
    assert_eq!(
        metric(
            &body,
            "kubewasm_actions_total{plugin=\"conflicter\",verb=\"patch\",outcome=\"conflict\"}"
        ),
        1.0,
        "exactly one refused write"
    );
    assert_eq!(
        metric(
            &body,
            "kubewasm_plugin_retries_total{plugin=\"conflicter\"}"
        ),
        1.0
    );
    assert_no_dead_letters(addr, &body, "conflicter");
    assert_eq!(
        logs.matches("an action hit a conflict").count(),
        1,
        "one conflict only:\n{logs}"
    );
    assert!(host.stop().success());
}

#[tokio::test]
async fn ten_resyncs_with_requeue_after_leave_one_pending_requeue() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "reconcile-resync";
    namespace(&client, ns, json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    create(&api, "requeue-one", "1").await;
    // Every delta asks for a requeue in an hour; the cache resyncs every
    // second.
    let host = HostProcess::start_with(cp.admin_kubeconfig(), |dir| {
        install(
            dir,
            "requeuer",
            "testkit",
            Some(&format!(
                "config: {{mode: requeue, count: 3600000, resync: 1}}\naccess:\n  - {{kinds: [configmaps], verbs: [read], namespaces: [{ns}]}}\n"
            )),
        );
    });
    let addr = host.metrics_addr(WAIT).await;
    let resyncs = eventually_seen("10 resyncs of requeue-one", WAIT, || {
        let seen = requeue_lines(&host.logs());
        async move {
            let n = seen.iter().filter(|s| s.delta == "resync").count();
            if n >= 10 {
                Ok(n)
            } else {
                Err(format!("{seen:#?}"))
            }
        }
    })
    .await;
    let body = scrape(addr).await;
    let pending = metric(
        &body,
        "kubewasm_plugin_requeues_pending{plugin=\"requeuer\"}",
    );
    let seen = requeue_lines(&host.logs());
    figures(&format!(
        "requeues_pending_after_10_resyncs={pending} resyncs={resyncs}"
    ));
    assert_eq!(
        pending, 1.0,
        "one object, one pending requeue whatever the resyncs:\n{body}"
    );
    assert!(
        seen.iter()
            .all(|s| s.name == "requeue-one" && s.delta != "requeue"),
        "no requeue is due within the hour: {seen:#?}"
    );
    assert_eq!(
        seen.iter().filter(|s| s.delta == "added").count(),
        1,
        "{seen:#?}"
    );
    assert!(host.stop().success());
}

#[tokio::test]
async fn a_narrowed_subscription_requeues_swaps_and_hands_over_in_every_namespace() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let namespaces = ["reconcile-n1", "reconcile-n2", "reconcile-n3"];
    let mut objects = BTreeSet::new();
    for ns in namespaces {
        namespace(&client, ns, json!({})).await;
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        for name in ["requeue-a", "requeue-b"] {
            create(&api, name, "1").await;
            objects.insert((ns.to_owned(), name.to_owned()));
        }
    }
    let stuck = ("reconcile-n2", "requeue-stuck");
    let n2: Api<ConfigMap> = Api::namespaced(client.clone(), stuck.0);
    create(&n2, stuck.1, "1").await;
    // One cluster-wide subscription, confined by the grant to three
    // namespaces: three informers, three subscription pairs.
    let sidecar = |tag: &str, fail_deletes: bool| {
        format!(
            "config: {{mode: requeue, count: 2000, failDeletes: {fail_deletes}, tag: {tag}}}\naccess:\n  - {{kinds: [configmaps], verbs: [read], namespaces: [{}]}}\n",
            namespaces.join(", ")
        )
    };
    let host = HostProcess::start_with(cp.admin_kubeconfig(), |dir| {
        install(dir, "narrowed", "testkit", Some(&sidecar("v1", true)));
    });
    let addr = host.metrics_addr(WAIT).await;
    host.wait_log(
        "subscription narrowed to the namespaces its sidecar grants",
        WAIT,
    )
    .await;
    // Requeues come, again and again, for every object of every namespace.
    let mut all = objects.clone();
    all.insert((stuck.0.to_owned(), stuck.1.to_owned()));
    eventually_seen(
        "two requeues of each object in each namespace",
        WAIT,
        || {
            let seen = requeue_lines(&host.logs());
            let all = all.clone();
            async move {
                let missing: Vec<_> = all
                    .iter()
                    .filter(|(ns, name)| {
                        seen.iter()
                            .filter(|s| {
                                s.tag == "v1"
                                    && s.delta == "requeue"
                                    && &s.namespace == ns
                                    && &s.name == name
                            })
                            .count()
                            < 2
                    })
                    .collect();
                if missing.is_empty() {
                    Ok(())
                } else {
                    Err(format!("missing: {missing:?}"))
                }
            }
        },
    )
    .await;
    // One pending requeue per object, in every namespace.
    eventually_seen("a pending requeue for each of 7 objects", WAIT, || async {
        let body = scrape(addr).await;
        let n = metric(
            &body,
            "kubewasm_plugin_requeues_pending{plugin=\"narrowed\"}",
        );
        if n == 7.0 {
            Ok(())
        } else {
            Err(format!("{n}"))
        }
    })
    .await;

    // A delete the plugin refuses, failing in the second namespace.
    n2.delete(stuck.1, &DeleteParams::default()).await.unwrap();
    eventually_seen("v1's third failing attempt at the delete", WAIT, || {
        let seen = requeue_lines(&host.logs());
        async move {
            seen.iter()
                .any(|s| {
                    s.tag == "v1"
                        && s.delta == "deleted"
                        && s.namespace == stuck.0
                        && s.name == stuck.1
                        && s.attempt >= 3
                })
                .then_some(())
                .ok_or_else(|| format!("{:#?}", &seen[seen.len().saturating_sub(10)..]))
        }
    })
    .await;
    // Swap: the same component with another config is a new version.
    let swapped = Instant::now();
    write_sidecar(host.plugins.path(), "narrowed", &sidecar("v2", false));
    let v2 = eventually_seen(
        "v2's hand-over of the delete and its replay of every object",
        WAIT,
        || {
            let seen = requeue_lines(&host.logs());
            let objects = objects.clone();
            async move {
                let v2: Vec<RequeueLine> = seen.into_iter().filter(|s| s.tag == "v2").collect();
                let deleted = v2
                    .iter()
                    .any(|s| s.delta == "deleted" && s.namespace == stuck.0 && s.name == stuck.1);
                let replayed: BTreeSet<(String, String)> = v2
                    .iter()
                    .filter(|s| s.delta == "added" && s.initial)
                    .map(|s| (s.namespace.clone(), s.name.clone()))
                    .collect();
                if deleted && replayed == objects {
                    Ok(v2)
                } else {
                    Err(format!(
                        "delete handed over: {deleted}; replayed: {replayed:?}; v2 saw: {v2:#?}"
                    ))
                }
            }
        },
    )
    .await;
    let handed_over_ms = swapped.elapsed().as_millis();
    // The handed-over delete comes first, ahead of the replay of every
    // other object.
    assert_eq!(
        v2.first()
            .map(|s| (s.delta.as_str(), s.namespace.as_str(), s.name.as_str())),
        Some(("deleted", stuck.0, stuck.1)),
        "{v2:#?}"
    );
    // The delete once, and the gone object not replayed.
    let stuck_seen: Vec<&RequeueLine> = v2
        .iter()
        .filter(|s| s.namespace == stuck.0 && s.name == stuck.1)
        .collect();
    assert_eq!(
        stuck_seen
            .iter()
            .map(|s| s.delta.as_str())
            .collect::<Vec<_>>(),
        ["deleted"],
        "{v2:#?}"
    );
    // One version acts at a time: nothing of v1 after v2's first delta.
    let all_seen = requeue_lines(&host.logs());
    let v2_from = all_seen.iter().position(|s| s.tag == "v2").unwrap();
    assert!(
        all_seen[v2_from..].iter().all(|s| s.tag == "v2"),
        "v1 delivered after v2 had started: {all_seen:#?}"
    );
    // The new version's requeues run in every namespace too.
    eventually_seen("v2's requeues in every namespace", WAIT, || {
        let seen = requeue_lines(&host.logs());
        async move {
            let namespaces: BTreeSet<String> = seen
                .iter()
                .filter(|s| s.tag == "v2" && s.delta == "requeue")
                .map(|s| s.namespace.clone())
                .collect();
            if namespaces.len() == 3 {
                Ok(())
            } else {
                Err(format!("{namespaces:?}"))
            }
        }
    })
    .await;
    let body = scrape(addr).await;
    assert!(
        metric(
            &body,
            "kubewasm_plugin_deltas_handed_over_total{plugin=\"narrowed\"}"
        ) >= 1.0,
        "{body}"
    );
    assert_no_dead_letters(addr, &body, "narrowed");
    figures(&format!(
        "narrowed_3_namespaces: delete_handed_over_and_replayed_ms={handed_over_ms}"
    ));
    assert!(host.stop().success());
}

/// One step of the outage test's churn, numbered `i`: two creates, then an
/// update and a delete of sources that exist, in turn. `live` is what the
/// sources should be (name -> data.v).
async fn churn_step(api: &Api<ConfigMap>, live: &mut BTreeMap<String, String>, i: usize) {
    let source = json!({"kubewasm.io/replicate": "true"});
    let names: Vec<String> = live.keys().cloned().collect();
    match i % 4 {
        0 | 1 => {
            let name = format!("s{i}");
            api.create(
                &PostParams::default(),
                &cm(&name, source, json!({"v": i.to_string()})),
            )
            .await
            .unwrap_or_else(|e| panic!("creating {name}: {e}"));
            live.insert(name, i.to_string());
        }
        2 if !names.is_empty() => {
            let name = &names[i % names.len()];
            api.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"v": i.to_string()}})),
            )
            .await
            .unwrap_or_else(|e| panic!("updating {name}: {e}"));
            live.insert(name.clone(), i.to_string());
        }
        3 if !names.is_empty() => {
            let name = &names[(i / 4) % names.len()];
            api.delete(name, &DeleteParams::default())
                .await
                .unwrap_or_else(|e| panic!("deleting {name}: {e}"));
            live.remove(name);
        }
        _ => {}
    }
}

/// `steps` churn steps at 10 a second, numbered from `from`.
async fn churn(
    api: &Api<ConfigMap>,
    live: &mut BTreeMap<String, String>,
    from: usize,
    steps: usize,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    for i in from..from + steps {
        tick.tick().await;
        churn_step(api, live, i).await;
    }
}

#[tokio::test]
async fn a_60s_api_server_outage_during_churn_loses_nothing_and_dead_letters_nothing() {
    // Its own control plane, stopped for a minute; a stop of 2 s at most
    // (the default 30 s grace would add nothing but waiting).
    let cp = ControlPlane::builder()
        .stop_grace(Duration::from_secs(2))
        .start()
        .await
        .unwrap();
    let _logs = cp.logs_on_failure();
    let client = cp.admin_client().await;
    let src = "outage-src";
    let tenants = ["outage-t1", "outage-t2", "outage-t3"];
    namespace(&client, src, json!({})).await;
    for t in tenants {
        namespace(&client, t, json!({"tenant": "yes"})).await;
    }
    // config-replicator: each source change is one apply per tenant, each
    // delete one delete per tenant; at 20 actions a second, churn keeps
    // it busy, so the outage catches writes in flight and queued.
    // Beside it, the recorder: what one plugin version was shown, state by
    // state, read back from its Events.
    let host = HostProcess::start_with(cp.admin_kubeconfig(), |dir| {
        install(
            dir,
            "replicator",
            "config_replicator",
            Some(&format!(
                "config: {{namespaceSelector: tenant=yes}}\nlimits: {{actionsPerSecond: 20}}\n{}",
                kubewasm_tests::REPLICATOR_ACCESS
            )),
        );
        install(
            dir,
            "recorder",
            "recorder",
            Some(&recorder_sidecar(src, &["configmaps"])),
        );
    });
    let addr = host.metrics_addr(WAIT).await;
    eventually("the host ready", WAIT, || async {
        (http_get(addr, "/readyz").ok()?.0 == 200).then_some(())
    })
    .await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), src);
    let mut live = BTreeMap::new();
    churn(&api, &mut live, 0, 40).await;
    let before = scrape(addr).await;
    let backlog = metric(
        &before,
        "kubewasm_plugin_queue_depth{plugin=\"replicator\"}",
    );

    let outage = cp.outage(Duration::from_secs(60)).await.unwrap();
    assert!(
        outage.refused,
        "connections were refused while the API server was down: {outage:?}"
    );
    let client = cp.admin_client().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), src);
    churn(&api, &mut live, 40, 40).await;
    let churned = Instant::now();

    // Settled: every tenant holds exactly the sources, and the plugin has
    // nothing left to do. Most of the wait is the informers': their watch
    // retries back off during the outage (kube-runtime's 0.8 s doubling to
    // 30 s, plus up to 100 % jitter), and the restarted API server's fresh
    // watch cache answers the resumed watch with 410 Expired, so each
    // informer relists after one more backoff: up to about two minutes
    // after the server is back, 60-80 s in the runs so far.
    let expected: DataByName = live
        .iter()
        .map(|(name, v)| (name.clone(), Some([("v".to_owned(), v.clone())].into())))
        .collect();
    eventually_seen(
        "the copies to equal the sources, nothing queued",
        Duration::from_secs(180),
        || {
            let (client, expected) = (client.clone(), expected.clone());
            async move {
                let sources =
                    copies_match_sources(&client, src, "kubewasm.io/replicate=true", &tenants)
                        .await
                        .map_err(|e| e.to_string())?;
                let body = scrape(addr).await;
                let queued = metric(&body, "kubewasm_plugin_queue_depth{plugin=\"replicator\"}")
                    + metric(&body, "kubewasm_plugin_delayed_keys{plugin=\"replicator\"}");
                match sources {
                    Some(s) if s == expected && queued == 0.0 => Ok(()),
                    Some(s) if s != expected => {
                        Err(format!("sources {s:?} are not the churn's {expected:?}"))
                    }
                    Some(_) => Err(format!("copies match; still queued or delayed: {queued}")),
                    None => Err(format!(
                        "copies differ from the sources; queued or delayed: {queued}"
                    )),
                }
            }
        },
    )
    .await;
    let settle_ms = churned.elapsed().as_millis();
    // The recorder: nothing lost (its view is the server's) and, per
    // version, no state shown twice and each update's old the state shown
    // before it.
    let server = configmap_versions(&api).await;
    let seen = recorded_until_view_is(
        &client,
        src,
        "recorder",
        &server,
        "the recorder's view to equal the server's",
        Duration::from_secs(120),
    )
    .await;
    let mut shown: BTreeMap<(String, String), Vec<&Seen>> = BTreeMap::new();
    for s in seen
        .iter()
        .filter(|s| matches!(s.delta.as_str(), "added" | "updated" | "deleted"))
    {
        shown
            .entry((s.version.clone(), s.name.clone()))
            .or_default()
            .push(s);
    }
    let mut twice = Vec::new();
    let mut stale_old = Vec::new();
    for ((version, name), deltas) in &shown {
        let rv = |s: &Seen| s.rv.parse::<u64>().unwrap_or(0);
        for pair in deltas.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if b.delta != "deleted" && a.delta != "deleted" && rv(b) <= rv(a) {
                twice.push(format!(
                    "{version} {name}: {} then {}",
                    a.short(),
                    b.short()
                ));
            }
            if b.delta == "updated" && a.delta != "deleted" && b.old_rv != a.rv {
                stale_old.push(format!("{version} {name}: old {} after {}", b.old_rv, a.rv));
            }
        }
    }
    assert!(
        twice.is_empty(),
        "states shown twice or out of order: {twice:#?}"
    );
    assert!(
        stale_old.is_empty(),
        "an update's old was not the state shown before: {stale_old:#?}"
    );
    let body = scrape(addr).await;
    assert_no_dead_letters(addr, &body, "replicator");
    let logs = host.logs();
    assert!(
        !logs.contains("parked as a dead letter") && !logs.contains("goes to dead letters"),
        "no key was parked or given up on:\n{logs}"
    );
    let deltas = metric_sum(
        &body,
        "kubewasm_plugin_deltas_delivered_total",
        "replicator",
    );
    let retries = metric(
        &body,
        "kubewasm_plugin_retries_total{plugin=\"replicator\"}",
    );
    let action_retries = metric_sum(&body, "kubewasm_action_retries_total", "replicator");
    figures(&format!(
        "outage_60s: deltas={deltas} dead_letters=0 retries={retries} settle_ms={settle_ms} action_retries={action_retries} down_ms={} backlog_at_stop={backlog} sources={} recorder_deltas={} recorder_versions={}",
        outage.down.as_millis(),
        live.len(),
        seen.len(),
        seen.iter()
            .map(|s| &s.version)
            .collect::<BTreeSet<_>>()
            .len(),
    ));
    assert!(
        retries + action_retries > 0.0,
        "the outage caught writes in flight (else this test proves nothing): {body}"
    );
    assert!(host.stop().success());
}
