//! The dispatcher's stats as the metrics read them at scrape time.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{LatencyHistogram, PluginStats};
use crate::telemetry::metrics::{DurationHistogram, PluginFigures};

impl PluginFigures for PluginStats {
    fn failed_calls(&self) -> u64 {
        self.failed_calls.load(Ordering::Relaxed)
    }
    fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }
    fn dead(&self) -> u64 {
        self.dead.load(Ordering::Relaxed)
    }
    fn handed_over(&self) -> u64 {
        self.handed_over.load(Ordering::Relaxed)
    }
    fn dead_letters_listed(&self) -> u64 {
        self.dead_letters.lock().len() as u64
    }
    fn fenced_stops(&self) -> u64 {
        self.fenced_stops.load(Ordering::Relaxed)
    }
    fn filtered(&self) -> u64 {
        self.filtered.load(Ordering::Relaxed)
    }
    fn coalesced(&self) -> u64 {
        self.coalesced.load(Ordering::Relaxed)
    }
    fn queue_depth(&self) -> u64 {
        PluginStats::queue_depth(self)
    }
    fn delayed_depth(&self) -> u64 {
        PluginStats::delayed_depth(self)
    }
    fn requeues_pending(&self) -> u64 {
        PluginStats::requeues_pending(self)
    }
    fn call_time(&self) -> &dyn DurationHistogram {
        &self.call_time
    }
    fn latency(&self) -> &dyn DurationHistogram {
        &self.latency
    }
}

impl DurationHistogram for LatencyHistogram {
    fn bucket_counts(&self, bounds_ns: &[u64]) -> (Vec<u64>, u64) {
        LatencyHistogram::bucket_counts(self, bounds_ns)
    }
    fn sum(&self) -> Duration {
        LatencyHistogram::sum(self)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use super::super::PluginStats;
    use crate::informer::DeltaType;
    use crate::telemetry::metrics::{
        CacheSample, HostView, LeaderFlag, Metrics, Outcome, PluginFigures, ViewSlot,
    };

    struct Fake {
        stats: Arc<PluginStats>,
        shard_objects: Vec<u64>,
    }

    impl HostView for Fake {
        fn not_ready(&self) -> Vec<String> {
            Vec::new()
        }
        fn plugins(&self) -> Vec<(String, Arc<dyn PluginFigures>)> {
            vec![("replicator".into(), self.stats.clone())]
        }
        fn caches(&self) -> Vec<CacheSample> {
            vec![CacheSample {
                kind: "configmaps".into(),
                objects: 3,
                bytes: 4096,
            }]
        }
        fn shard_objects(&self) -> Vec<u64> {
            self.shard_objects.clone()
        }
        fn shard_queue_depth(&self) -> Vec<u64> {
            self.shard_objects.iter().map(|n| n * 10).collect()
        }
    }

    fn line<'a>(text: &'a str, prefix: &str) -> &'a str {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line starting with {prefix:?} in:\n{text}"))
    }

    #[test]
    fn counters_gauges_and_histograms_encode_with_prometheus_names() {
        let view: ViewSlot = Arc::default();
        let leader = LeaderFlag::default();
        let m = Metrics::new(view.clone(), leader.clone());
        // Before a host is attached: the families the host increments, the
        // leader gauge and the build info.
        let text = m.encode().unwrap();
        assert!(text.contains("kubewasm_leader 1\n"), "{text}");
        assert!(!text.contains("kubewasm_shard_held"), "unsharded: {text}");
        leader.set_shards(3, 0b010);
        leader.count_shard_delta(1);
        leader.count_shard_delta(1);
        let sharded = m.encode().unwrap();
        assert!(
            sharded.contains("kubewasm_shard_deltas_total{shard=\"1\"} 2\n"),
            "{sharded}"
        );
        assert!(
            sharded.contains("kubewasm_shard_deltas_total{shard=\"0\"} 0\n"),
            "{sharded}"
        );
        for (shard, held) in [(0, 0), (1, 1), (2, 0)] {
            assert!(
                sharded.contains(&format!(
                    "kubewasm_shard_held{{shard=\"{shard}\"}} {held}\n"
                )),
                "{sharded}"
            );
        }
        leader.set_shards(0, 0);
        assert!(
            text.contains(&format!(
                "kubewasm_build_info{{version=\"{}\"}} 1",
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));

        let inf = m.informer("configmaps");
        inf.delta(DeltaType::Added);
        inf.delta(DeltaType::Added);
        inf.delta(DeltaType::Synced);
        inf.relists.inc();
        // A second informer of the same kind shares the series.
        m.informer("configmaps").delta(DeltaType::Added);
        let p = m.plugin("replicator", &["configmaps".into(), "namespaces".into()]);
        p.delivered(1);
        p.delivered(7); // out of range: ignored, not a panic
        p.actions.outcome("patch", Outcome::Applied).inc();
        p.actions.outcome("create", Outcome::Failed).inc();
        p.actions.retry("patch").inc();
        m.plugin_reloaded("replicator");
        m.plugin_load_failed("broken");
        m.plugin_fast_tier("replicator", Some(true));
        m.plugin_fast_tier("python", Some(true));
        m.plugin_fast_tier("python", Some(false));
        m.plugin_tiered_up("python");
        m.plugin_fast_tier("gone", Some(true));
        m.plugin_fast_tier("gone", None);

        let stats = Arc::new(PluginStats::default());
        stats.failed_calls.store(4, Ordering::Relaxed);
        stats.retries.store(3, Ordering::Relaxed);
        stats.dead.store(1, Ordering::Relaxed);
        stats.call_time.record(Duration::from_micros(3));
        stats.call_time.record(Duration::from_micros(30));
        stats.call_time.record(Duration::from_millis(2));
        stats.call_time.record(Duration::from_secs(20));
        *view.write() = Some(Arc::new(Fake {
            stats: stats.clone(),
            shard_objects: vec![2, 1],
        }));
        leader.set(false);

        let text = m.encode().unwrap();
        for expected in [
            "kubewasm_informer_deltas_total{kind=\"configmaps\",type=\"added\"} 3",
            "kubewasm_informer_deltas_total{kind=\"configmaps\",type=\"synced\"} 1",
            "kubewasm_informer_deltas_total{kind=\"configmaps\",type=\"deleted\"} 0",
            "kubewasm_informer_relists_total{kind=\"configmaps\"} 1",
            "kubewasm_informer_watch_restarts_total{kind=\"configmaps\"} 0",
            "kubewasm_plugin_deltas_delivered_total{plugin=\"replicator\",kind=\"namespaces\"} 1",
            "kubewasm_plugin_deltas_delivered_total{plugin=\"replicator\",kind=\"configmaps\"} 0",
            "kubewasm_actions_total{plugin=\"replicator\",verb=\"patch\",outcome=\"applied\"} 1",
            "kubewasm_actions_total{plugin=\"replicator\",verb=\"create\",outcome=\"failed\"} 1",
            "kubewasm_action_retries_total{plugin=\"replicator\",verb=\"patch\"} 1",
            "kubewasm_plugin_reloads_total{plugin=\"replicator\"} 1",
            "kubewasm_plugin_load_failures_total{plugin=\"broken\"} 1",
            "kubewasm_plugin_fast_tier{plugin=\"replicator\"} 1",
            "kubewasm_plugin_fast_tier{plugin=\"python\"} 0",
            "kubewasm_plugin_tier_ups_total{plugin=\"python\"} 1",
            "kubewasm_plugin_handler_errors_total{plugin=\"replicator\"} 4",
            "kubewasm_plugin_retries_total{plugin=\"replicator\"} 3",
            "kubewasm_plugin_dead_letters_total{plugin=\"replicator\"} 1",
            "kubewasm_plugin_dead_letters_listed{plugin=\"replicator\"} 0",
            "kubewasm_plugin_deltas_handed_over_total{plugin=\"replicator\"} 0",
            "kubewasm_plugin_queue_depth{plugin=\"replicator\"} 0",
            "kubewasm_cache_objects{kind=\"configmaps\"} 3",
            "kubewasm_cache_bytes{kind=\"configmaps\"} 4096",
            "kubewasm_shard_objects{shard=\"0\"} 2",
            "kubewasm_shard_objects{shard=\"1\"} 1",
            "kubewasm_shard_queue_depth{shard=\"0\"} 20",
            "kubewasm_leader 0",
            "# TYPE kubewasm_plugin_call_duration_seconds histogram",
            "kubewasm_plugin_call_duration_seconds_count{plugin=\"replicator\"} 4",
            "kubewasm_plugin_call_duration_seconds_bucket{le=\"0.000005\",plugin=\"replicator\"} 1",
            "kubewasm_plugin_call_duration_seconds_bucket{le=\"0.00005\",plugin=\"replicator\"} 2",
            "kubewasm_plugin_call_duration_seconds_bucket{le=\"0.0025\",plugin=\"replicator\"} 3",
            "kubewasm_plugin_call_duration_seconds_bucket{le=\"10.0\",plugin=\"replicator\"} 3",
            "kubewasm_plugin_call_duration_seconds_bucket{le=\"+Inf\",plugin=\"replicator\"} 4",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
        }
        assert!(
            !text.contains("kubewasm_plugin_fast_tier{plugin=\"gone\"}"),
            "an unloaded plugin's tier stays: {text}"
        );
        let sum: f64 = line(
            &text,
            "kubewasm_plugin_call_duration_seconds_sum{plugin=\"replicator\"}",
        )
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
        assert!((sum - 20.002_033).abs() < 1e-6, "{sum}");
    }
}
