//! Delivery guarantees through the real pipeline (local cluster,
//! config-replicator, actions applied into the cluster through a sink that
//! fails on cue): a failed action fails its call and the call's later
//! actions wait for the retry; conflicts and refusals are not retried
//! blindly; a delta out of attempts is a dead letter, handed to the next
//! plugin version; a swap hands the old version's retrying deletes over.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::future::BoxFuture;
use kubewasm::actions::Action;
use kubewasm::actions::executor::{ActionError, ActionSink, Executor, ExecutorOptions};
use kubewasm::dispatch::{Activity, DispatchOptions, PluginStats};
use kubewasm::manager::PluginHost;
use kubewasm::runtime::{EngineOptions, Manifest, Runtime};
use kubewasm::source::local::LocalCluster;
use kubewasm_tests::e2e::eventually;
use kubewasm_tests::{Harness, LocalInformers, wasm, write_cluster};

/// What the sink does to the actions a rule matches.
#[derive(Debug, Clone)]
enum Fault {
    Fail(ActionError),
    /// Never answers (the executor's timeout ends the attempt).
    Hang,
}

struct Rule {
    /// A substring of the action as displayed (`apply ConfigMap b/cfg`).
    matches: String,
    fault: Fault,
    /// How many more times it applies; `None`: until removed.
    times: Option<u32>,
}

/// Applies actions into the local cluster, except those a rule fails;
/// logs every attempt as `<action> -> ok|<error>`.
struct FaultySink {
    cluster: Arc<LocalCluster>,
    rules: std::sync::Mutex<Vec<Rule>>,
    log: std::sync::Mutex<Vec<String>>,
}

impl FaultySink {
    fn fail(&self, matches: &str, fault: Fault, times: Option<u32>) {
        self.rules.lock().unwrap().push(Rule {
            matches: matches.to_owned(),
            fault,
            times,
        });
    }

    fn heal(&self) {
        self.rules.lock().unwrap().clear();
    }

    /// The attempts logged whose action contains `needle`.
    fn attempts(&self, needle: &str) -> Vec<String> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .cloned()
            .collect()
    }
}

impl ActionSink for FaultySink {
    fn execute<'a>(
        &'a self,
        plugin: &'a str,
        action: &'a Action,
    ) -> BoxFuture<'a, Result<(), ActionError>> {
        let shown = match action {
            Action::Apply { target, .. } => format!("apply {target}"),
            Action::Delete { target, .. } => format!("delete {target}"),
            other => other.to_string(),
        };
        let fault = {
            let mut rules = self.rules.lock().unwrap();
            let hit = rules
                .iter_mut()
                .find(|r| shown.contains(&r.matches) && r.times.is_none_or(|t| t > 0));
            hit.map(|r| {
                if let Some(t) = &mut r.times {
                    *t -= 1;
                }
                r.fault.clone()
            })
        };
        Box::pin(async move {
            let result = match fault {
                Some(Fault::Fail(e)) => Err(e),
                Some(Fault::Hang) => {
                    self.log.lock().unwrap().push(format!("{shown} -> hang"));
                    std::future::pending::<Result<(), ActionError>>().await
                }
                None => self.cluster.execute(plugin, action).await,
            };
            let outcome = match &result {
                Ok(()) => "ok".to_owned(),
                Err(e) => e.to_string(),
            };
            self.log
                .lock()
                .unwrap()
                .push(format!("{shown} -> {outcome}"));
            result
        })
    }
}

fn namespace(name: &str) -> String {
    format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}}}\n")
}

fn source() -> String {
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: src, labels: {kubewasm.io/replicate: \"true\"}}\ndata: {k: v}\n".to_owned()
}

struct Pipeline {
    cluster: Arc<LocalCluster>,
    host: Arc<PluginHost>,
    activity: Arc<Activity>,
    executor: Arc<Executor>,
    sink: Arc<FaultySink>,
}

impl Pipeline {
    /// Namespaces `src`, `a`, `b`, `c`, the source `src/cfg`, and the
    /// config-replicator, not started (see [`install`](Self::install)).
    fn new(h: &Harness, executor: ExecutorOptions, dispatch: DispatchOptions) -> Self {
        let mut files: Vec<(String, String)> = ["src", "a", "b", "c"]
            .iter()
            .map(|n| (format!("ns-{n}.yaml"), namespace(n)))
            .collect();
        files.push(("src/cfg.yaml".into(), source()));
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(p, t)| (p.as_str(), t.as_str()))
            .collect();
        write_cluster(h.cluster.path(), &refs);
        let LocalInformers {
            kinds,
            cluster,
            activity,
            telemetry,
            informers,
        } = h.local_informers();
        let sink = Arc::new(FaultySink {
            cluster: cluster.clone(),
            rules: std::sync::Mutex::new(Vec::new()),
            log: std::sync::Mutex::new(Vec::new()),
        });
        let executor = Arc::new(Executor::new(sink.clone(), executor, telemetry.clone()));
        let runtime = Runtime::new(EngineOptions {
            epoch_deadlines: true,
            cache_dir: Some(h.cache.path().to_owned()),
            ..Default::default()
        })
        .unwrap();
        let host = Arc::new(PluginHost::new(
            runtime,
            informers,
            kinds,
            executor.clone(),
            activity.clone(),
            dispatch,
            telemetry.clone(),
        ));
        Self {
            cluster,
            host,
            activity,
            executor,
            sink,
        }
    }

    /// Installs (or replaces) the config-replicator.
    async fn install(&self) {
        let sidecar = format!("config: {{}}\n{}", kubewasm_tests::REPLICATOR_ACCESS);
        let manifest = Manifest::parse(Path::new("replicator.yaml"), &sidecar).unwrap();
        self.host
            .install("replicator", wasm("config_replicator"), manifest)
            .await
            .unwrap();
    }

    fn stats(&self) -> Arc<PluginStats> {
        self.host.stats()["replicator"].clone()
    }

    /// Every informer synced and every delta emitted so far settled.
    async fn settled(&self) {
        eventually(
            "the pipeline to settle",
            Duration::from_secs(60),
            || async {
                let done = self.host.informers().all_synced()
                    && self.activity.is_idle()
                    && self.host.all_idle().await;
                done.then_some(())
            },
        )
        .await;
    }

    /// The namespaces holding a copy of `src/cfg`, from the cluster's files.
    fn copies(&self, h: &Harness) -> Vec<String> {
        self.copies_of(h, "cfg")
    }

    /// The namespaces holding a copy of `src/<name>`.
    fn copies_of(&self, h: &Harness, name: &str) -> Vec<String> {
        ["a", "b", "c"]
            .iter()
            .filter(|ns| {
                h.cluster
                    .path()
                    .join(ns)
                    .join(format!("configmaps-{name}.yaml"))
                    .exists()
            })
            .map(|ns| (*ns).to_owned())
            .collect()
    }

    /// Deletes the source ConfigMap; returns once the informer has fanned
    /// the delete out.
    async fn delete_source(&self, h: &Harness) {
        self.edit(|| {
            std::fs::remove_file(h.cluster.path().join("src/cfg.yaml")).unwrap();
        })
        .await;
    }

    /// Edits the cluster's files; returns once the informer has fanned
    /// the change out.
    async fn edit(&self, change: impl FnOnce()) {
        let before = self.activity.emitted.load(Ordering::SeqCst);
        change();
        self.cluster.rescan().unwrap();
        eventually(
            "the change to reach the informer",
            Duration::from_secs(30),
            || async { (self.activity.emitted.load(Ordering::SeqCst) > before).then_some(()) },
        )
        .await;
    }
}

fn fast_executor(max_attempts: u32) -> ExecutorOptions {
    ExecutorOptions {
        dry_run: false,
        max_attempts,
        base_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(20),
        timeout: Duration::from_millis(300),
        ..ExecutorOptions::default()
    }
}

fn dispatch(max_attempts: u32, base_backoff: Duration) -> DispatchOptions {
    DispatchOptions {
        max_attempts: Some(max_attempts),
        base_backoff,
        max_backoff: base_backoff * 4,
        ..DispatchOptions::default()
    }
}

#[tokio::test]
async fn a_failed_action_fails_the_call_and_its_later_actions_wait_for_the_retry() {
    let h = Harness::new();
    // No retry inside the executor: the failure reaches the dispatcher.
    let p = Pipeline::new(&h, fast_executor(1), dispatch(5, Duration::from_millis(20)));
    p.sink.fail(
        "apply configmaps b/cfg",
        Fault::Fail(ActionError::Transient("503 injected".into())),
        Some(1),
    );
    p.install().await;
    p.settled().await;
    assert_eq!(
        p.sink.attempts("apply configmaps"),
        [
            "apply configmaps a/cfg -> ok",
            "apply configmaps b/cfg -> transient failure: 503 injected",
            // Not c: the call failed at b. The retry runs the call again.
            "apply configmaps a/cfg -> ok",
            "apply configmaps b/cfg -> ok",
            "apply configmaps c/cfg -> ok",
        ]
    );
    assert_eq!(p.copies(&h), ["a", "b", "c"]);
    assert_eq!(p.executor.stats.skipped.load(Ordering::Relaxed), 1);
    let stats = p.stats();
    assert_eq!(stats.retries.load(Ordering::Relaxed), 1);
    assert_eq!(stats.dead.load(Ordering::Relaxed), 0);
    assert_eq!(
        stats.failed_calls.load(Ordering::Relaxed),
        0,
        "an action failure is not a handler error"
    );
    p.host.shutdown().await;
}

#[tokio::test]
async fn an_action_that_times_out_is_retried_within_the_executor() {
    let h = Harness::new();
    let p = Pipeline::new(&h, fast_executor(3), dispatch(5, Duration::from_millis(20)));
    p.sink.fail("apply configmaps b/cfg", Fault::Hang, Some(2));
    p.install().await;
    p.settled().await;
    assert_eq!(
        p.sink.attempts("apply configmaps b/cfg"),
        [
            "apply configmaps b/cfg -> hang",
            "apply configmaps b/cfg -> hang",
            "apply configmaps b/cfg -> ok",
        ]
    );
    assert_eq!(p.executor.stats.retried.load(Ordering::Relaxed), 2);
    assert_eq!(p.copies(&h), ["a", "b", "c"]);
    assert_eq!(p.stats().retries.load(Ordering::Relaxed), 0);
    p.host.shutdown().await;
}

#[tokio::test]
async fn a_conflict_is_handed_back_and_a_key_past_its_budget_is_parked_and_still_retried() {
    let h = Harness::new();
    // The executor would retry a transient failure 4 times; a conflict
    // gets one attempt per delivery: the plugin decides again.
    let p = Pipeline::new(&h, fast_executor(4), dispatch(3, Duration::from_millis(20)));
    p.sink.fail(
        "apply configmaps b/cfg",
        Fault::Fail(ActionError::Conflict(
            "Apply failed with 1 conflict: conflict with \"kubectl-edit\": .data.k".into(),
        )),
        None,
    );
    p.install().await;
    p.settled().await;
    // Parked after its third failed attempt (the budget), and still retried
    // at the backoff cap: a fourth comes without anything changing.
    let mut attempts = p.sink.attempts("b/cfg");
    for _ in 0..500 {
        if attempts.len() >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        attempts = p.sink.attempts("b/cfg");
    }
    assert!(
        attempts.len() >= 4 && attempts.iter().all(|a| a.contains("conflict")),
        "one attempt per delivery, then retried while parked: {attempts:?}"
    );
    assert!(p.sink.attempts("c/cfg").is_empty());
    let stats = p.stats();
    assert_eq!(stats.dead.load(Ordering::Relaxed), 1, "parked once");
    let dead = stats.dead_letters.lock().records();
    assert_eq!(dead.len(), 1, "{dead:?}");
    let d = &dead[0];
    assert_eq!(
        (
            d.plugin.as_str(),
            d.kind.as_str(),
            d.namespace.as_deref(),
            d.name.as_str(),
            d.delta.as_str(),
            d.attempts
        ),
        ("replicator", "v1/ConfigMap", Some("src"), "cfg", "added", 3)
    );
    assert!(d.parked, "{d:?}");
    assert!(
        d.last_error.contains("conflict") && d.last_error.contains("kubectl-edit"),
        "{}",
        d.last_error
    );

    // A new version: the parked delta's object is in its replay.
    p.sink.heal();
    p.install().await;
    p.settled().await;
    assert_eq!(p.copies(&h), ["a", "b", "c"]);
    assert!(stats.dead_letters.lock().is_empty());
    p.host.shutdown().await;
}

#[tokio::test]
async fn a_refused_delete_is_dead_at_once_and_the_next_version_retries_it() {
    let h = Harness::new();
    let p = Pipeline::new(&h, fast_executor(4), dispatch(5, Duration::from_millis(20)));
    p.install().await;
    p.settled().await;
    assert_eq!(p.copies(&h), ["a", "b", "c"]);

    // Refused as invalid: the one permanent refusal (a 403 is retried:
    // tokens rotate and RBAC propagates).
    p.sink.fail(
        "delete configmaps b/cfg",
        Fault::Fail(ActionError::Invalid("injected 422".into())),
        None,
    );
    p.delete_source(&h).await;
    p.settled().await;
    assert_eq!(p.sink.attempts("delete configmaps b/cfg").len(), 1);
    assert_eq!(p.copies(&h), ["b", "c"]);
    let stats = p.stats();
    let dead = stats.dead_letters.lock().records();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!((dead[0].delta.as_str(), dead[0].attempts), ("deleted", 1));

    // The source is gone from the cache: only the dead letter can bring
    // its delete to the next version.
    p.sink.heal();
    p.install().await;
    p.settled().await;
    assert_eq!(p.copies(&h), Vec::<String>::new());
    assert!(stats.dead_letters.lock().is_empty());
    assert_eq!(stats.handed_over.load(Ordering::Relaxed), 1);
    p.host.shutdown().await;
}

#[tokio::test]
async fn a_swap_hands_the_retrying_delete_to_the_new_version() {
    let h = Harness::new();
    let p = Pipeline::new(
        &h,
        fast_executor(1),
        dispatch(100, Duration::from_millis(200)),
    );
    p.install().await;
    p.settled().await;
    assert_eq!(p.copies(&h), ["a", "b", "c"]);

    p.sink.fail(
        "delete configmaps b/cfg",
        Fault::Fail(ActionError::Transient("injected 503".into())),
        None,
    );
    p.delete_source(&h).await;
    eventually(
        "the delete to be retrying",
        Duration::from_secs(30),
        || async { (p.sink.attempts("delete configmaps b/cfg").len() >= 2).then_some(()) },
    )
    .await;
    p.sink.heal();
    // Replaced while its delta waits for a retry: without a hand-over the
    // new version never hears of the delete (the source is not in its
    // replay) and the copies in b and c stay for good.
    p.install().await;
    p.settled().await;
    assert_eq!(p.copies(&h), Vec::<String>::new());
    assert!(p.stats().handed_over.load(Ordering::Relaxed) >= 1);
    assert!(p.stats().dead_letters.lock().is_empty());
    p.host.shutdown().await;
}

#[tokio::test]
async fn a_swap_hands_over_the_delete_still_queued_behind_a_busy_call() {
    let h = Harness::new();
    write_cluster(
        h.cluster.path(),
        &[(
            "src/other.yaml",
            &source().replace("name: cfg", "name: other"),
        )],
    );
    // One attempt of up to 6 s per action: the plugin's one worker (the
    // default concurrency) stays busy.
    let p = Pipeline::new(
        &h,
        ExecutorOptions {
            timeout: Duration::from_secs(6),
            ..fast_executor(1)
        },
        dispatch(5, Duration::from_millis(20)),
    );
    p.install().await;
    p.settled().await;
    assert_eq!(p.copies(&h), ["a", "b", "c"]);
    assert_eq!(p.copies_of(&h, "other"), ["a", "b", "c"]);

    // A change of cfg whose apply into b hangs; meanwhile other is deleted,
    // and its delete waits in the queue behind the busy call.
    p.sink.fail("apply configmaps b/cfg", Fault::Hang, Some(1));
    p.edit(|| {
        write_cluster(
            h.cluster.path(),
            &[("src/cfg.yaml", &source().replace("k: v", "k: v2"))],
        );
    })
    .await;
    eventually(
        "the apply into b to hang",
        Duration::from_secs(30),
        || async { (!p.sink.attempts("b/cfg -> hang").is_empty()).then_some(()) },
    )
    .await;
    p.edit(|| {
        std::fs::remove_file(h.cluster.path().join("src/other.yaml")).unwrap();
    })
    .await;
    assert!(
        p.sink.attempts("delete").is_empty(),
        "the delete ran before the swap: {:?}",
        p.sink.attempts("")
    );
    // Replaced while busy: the old version stops after the hanging call;
    // the new one handles the queued delete (other is not in its replay)
    // and replays cfg.
    p.install().await;
    p.settled().await;
    assert_eq!(p.copies_of(&h, "other"), Vec::<String>::new());
    assert_eq!(p.copies(&h), ["a", "b", "c"]);
    let copy = std::fs::read_to_string(h.cluster.path().join("b/configmaps-cfg.yaml")).unwrap();
    assert!(copy.contains("v2"), "{copy}");
    assert!(p.stats().handed_over.load(Ordering::Relaxed) >= 1);
    p.host.shutdown().await;
}

/// A WIT 0.2 subscription that sets no resync period gets the host's
/// (`dispatch.defaultResync`), a 0.1 one never resyncs: `realistic`
/// patches its Pod on every delta (resyncs included), so each resync is
/// one more patch; `realistic_v0_1`, the same logic on 0.1 with no period,
/// stays at the one patch of its initial list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_2_subscription_without_a_period_resyncs_at_the_host_default_and_0_1_never() {
    let h = Harness::new();
    write_cluster(
        h.cluster.path(),
        &[(
            "cluster.yaml",
            "apiVersion: v1\nkind: Node\nmetadata: {name: n1, labels: {topology.kubernetes.io/zone: z1}}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: web}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p1, namespace: web, uid: u-p1}\nspec: {nodeName: n1, containers: [{name: app, image: nginx}]}\nstatus: {phase: Running}\n",
        )],
    );
    let sidecar =
        "access:\n  - {kinds: [nodes, pods], verbs: [read]}\n  - {kinds: [pods], verbs: [patch]}\n";
    kubewasm_tests::install(h.plugins.path(), "new", "realistic", Some(sidecar));
    kubewasm_tests::install(h.plugins.path(), "old", "realistic_v0_1", Some(sidecar));
    let mut opts = h.options();
    opts.dispatch.default_resync = Some(Duration::from_millis(300));
    let (_app, sink) = h.start_recording_with(&opts).await;
    let counts = std::sync::Mutex::new(std::collections::HashMap::<String, usize>::new());
    let count = |plugin: &str| {
        let mut counts = counts.lock().unwrap();
        for (by, _) in sink.take() {
            *counts.entry(by).or_default() += 1;
        }
        counts.get(plugin).copied().unwrap_or(0)
    };
    eventually(
        "the 0.2 plugin's initial patch and three resyncs",
        Duration::from_secs(60),
        || async { (count("new") >= 4).then_some(()) },
    )
    .await;
    assert_eq!(count("old"), 1, "the 0.1 plugin resynced");
}
