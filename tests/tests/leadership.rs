//! The leadership gate through the real pipeline (local cluster, recorder
//! plugin, actions recorded): a follower delivers and executes nothing, a
//! gain replays the cache as initial deltas and goes live, a loss drops
//! everything and a new gain replays again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kubewasm::actions::Action;
use kubewasm::actions::executor::{Executor, ExecutorOptions, RecordingSink};
use kubewasm::dispatch::{Activity, DispatchOptions};
use kubewasm::leader::Leadership;
use kubewasm::manager::PluginHost;
use kubewasm::runtime::{EngineOptions, Manifest, Runtime};
use kubewasm::source::local::LocalCluster;
use kubewasm_tests::e2e::{eventually, recorder_sidecar};
use kubewasm_tests::{Harness, LocalInformers, wasm, write_cluster};
use serde_json::Value;

fn cm(name: &str, v: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: app}}\ndata: {{v: \"{v}\"}}\n"
    )
}

/// `added a initial`, `updated a`, `synced`, ... from the recorder's Events.
fn deltas(actions: Vec<(String, Action)>) -> Vec<String> {
    actions
        .into_iter()
        .filter_map(|(_, a)| match a {
            Action::Event { note, .. } => {
                let n: Value = serde_json::from_str(&note).ok()?;
                let mut s = format!("{} {}", n["type"].as_str()?, n["name"].as_str()?);
                if n["initial"].as_bool()? {
                    s.push_str(" initial");
                }
                Some(s.trim().to_owned())
            }
            _ => None,
        })
        .collect()
}

struct Pipeline {
    cluster: Arc<LocalCluster>,
    host: Arc<PluginHost>,
    activity: Arc<Activity>,
    executor: Arc<Executor>,
    sink: Arc<RecordingSink>,
    leadership: Leadership,
}

impl Pipeline {
    async fn start(h: &Harness) -> Self {
        let LocalInformers {
            kinds,
            cluster,
            activity,
            telemetry,
            informers,
        } = h.local_informers();
        let sink = Arc::new(RecordingSink::default());
        let leadership = Leadership::follower();
        let executor = Arc::new(
            Executor::new(sink.clone(), ExecutorOptions::default(), telemetry.clone())
                .with_leadership(leadership.clone())
                // The recorder's Events are recorded off the call's path:
                // `settled` waits for them too.
                .with_activity(activity.clone()),
        );
        let runtime = Runtime::new(EngineOptions {
            epoch_deadlines: true,
            cache_dir: Some(h.cache.path().to_owned()),
            ..Default::default()
        })
        .unwrap();
        let host = Arc::new(
            PluginHost::new(
                runtime,
                informers,
                kinds,
                executor.clone(),
                activity.clone(),
                DispatchOptions::default(),
                telemetry.clone(),
            )
            .with_leadership(leadership.clone()),
        );
        let manifest = Manifest::parse(
            Path::new("recorder.yaml"),
            &recorder_sidecar("app", &["configmaps"]),
        )
        .unwrap();
        host.install("recorder", wasm("recorder"), manifest)
            .await
            .unwrap();
        Self {
            cluster,
            host,
            activity,
            executor,
            sink,
            leadership,
        }
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

    /// Changes the cluster and waits until the informer has fanned the
    /// change out and everything is settled again.
    async fn change(&self, h: &Harness, files: &[(&str, &str)]) {
        let before = self.activity.emitted.load(Ordering::SeqCst);
        write_cluster(h.cluster.path(), files);
        self.cluster.rescan().unwrap();
        eventually(
            "the change to reach the informer",
            Duration::from_secs(60),
            || async { (self.activity.emitted.load(Ordering::SeqCst) > before).then_some(()) },
        )
        .await;
        self.settled().await;
    }
}

#[tokio::test]
async fn followers_stay_silent_and_each_gain_replays_the_cache_then_goes_live() {
    let h = Harness::new();
    write_cluster(
        h.cluster.path(),
        &[("app/a.yaml", &cm("a", "1")), ("app/b.yaml", &cm("b", "1"))],
    );
    let p = Pipeline::start(&h).await;

    // Follower: synced and warm, but nothing delivered, nothing executed.
    p.settled().await;
    p.change(&h, &[("app/a.yaml", &cm("a", "2"))]).await;
    let stats = p.host.stats()["recorder"].clone();
    assert_eq!(stats.delivered.load(Ordering::Relaxed), 0);
    assert!(p.sink.take().is_empty());

    // Gain: the cache is replayed as initial deltas, then live deltas flow.
    p.leadership.gain();
    p.host.replay_all().await;
    p.settled().await;
    let mut replay = deltas(p.sink.take());
    assert_eq!(replay.pop().as_deref(), Some("synced"), "{replay:?}");
    replay.sort();
    assert_eq!(replay, ["added a initial", "added b initial"]);
    p.change(&h, &[("app/c.yaml", &cm("c", "1"))]).await;
    assert_eq!(deltas(p.sink.take()), ["added c"]);

    // Loss: changes are neither delivered nor acted on.
    p.leadership.lose();
    p.change(&h, &[("app/b.yaml", &cm("b", "2"))]).await;
    assert!(p.sink.take().is_empty());
    let fenced_before = p.executor.stats.fenced.load(Ordering::Relaxed);

    // Regained: a full replay again (the missed change included), then live.
    p.leadership.gain();
    p.host.replay_all().await;
    p.settled().await;
    let mut replay = deltas(p.sink.take());
    assert_eq!(replay.pop().as_deref(), Some("synced"), "{replay:?}");
    replay.sort();
    assert_eq!(
        replay,
        ["added a initial", "added b initial", "added c initial"]
    );
    assert_eq!(
        p.executor.stats.fenced.load(Ordering::Relaxed),
        fenced_before,
        "nothing of the lost term reached the executor"
    );
    p.host.shutdown().await;
}
