//! The Prometheus metrics of the host. Two kinds of series:
//!
//! - counters the host increments where something happens, through label
//!   handles resolved once (per informer, per plugin version), so the hot
//!   path pays one atomic add and never a label lookup;
//! - figures that already exist as atomics (per-plugin stats, latency
//!   histograms, cache sizes, queue lengths) and are read only when
//!   `/metrics` is scraped, by a collector over the running host.

use std::sync::Arc;

pub use super::lease::LeaderFlag;

use parking_lot::RwLock;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

type L1 = [(&'static str, String); 1];
type L2 = [(&'static str, String); 2];
type L3 = [(&'static str, String); 3];

/// Content type of [`Metrics::encode`]'s output (OpenMetrics text, which
/// Prometheus scrapes natively).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds (seconds) of the duration histograms' buckets.
pub const DURATION_BUCKETS: [f64; 20] = [
    0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005,
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The delta types in label order (`type` label values; the informer
/// counts a delta by its slot here, see [`InformerCounters::delta_at`]).
pub const DELTA_TYPES: [&str; 5] = ["added", "updated", "deleted", "resync", "synced"];

/// Action verbs (`verb` label values, the RBAC verb an action needs).
pub const VERBS: [&str; 3] = ["patch", "delete", "create"];
/// Action outcomes (`outcome` label values), in [`Outcome`] order.
/// `fenced`: not executed because this replica stopped leading or the
/// plugin version was stopping; `conflict`: refused because the object
/// changed (409, a failed precondition or JSON-patch `test`); `skipped`:
/// not run because an earlier action of the same call failed.
pub const OUTCOMES: [&str; 6] = [
    "applied", "failed", "dry_run", "fenced", "conflict", "skipped",
];

/// How an action ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Applied = 0,
    Failed = 1,
    DryRun = 2,
    Fenced = 3,
    /// Refused because the object is not what the plugin saw (409: a
    /// server-side apply conflict or a failed precondition; a failed
    /// JSON-patch `test`).
    Conflict = 4,
    /// Not run: an earlier action of the same call failed.
    Skipped = 5,
}

/// One kind's cache, summed over its informers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSample {
    /// The resource as kubectl names it (`pods`, `deployments.apps`).
    pub kind: String,
    pub objects: u64,
    pub bytes: u64,
}

/// What the collector and the readiness check read from the running host.
pub trait HostView: Send + Sync + 'static {
    /// Why the host is not ready (every informer synced, every plugin file
    /// loaded or reported broken); empty when it is.
    fn not_ready(&self) -> Vec<String>;
    /// Per-plugin figures, by plugin name (they survive version swaps).
    fn plugins(&self) -> Vec<(String, Arc<dyn PluginFigures>)>;
    /// Cache sizes per kind.
    fn caches(&self) -> Vec<CacheSample>;
    /// Sharded: the cached objects in each shard (summed over informers);
    /// empty unsharded.
    fn shard_objects(&self) -> Vec<u64> {
        Vec::new()
    }
    /// Sharded: the deltas waiting in every plugin's queue, per shard;
    /// empty unsharded.
    fn shard_queue_depth(&self) -> Vec<u64> {
        Vec::new()
    }
}

/// One plugin's figures that already exist as atomics where they happen
/// (the dispatcher's stats implement it), read only at scrape time.
pub trait PluginFigures: Send + Sync {
    /// Handler calls that failed (returned an error or trapped).
    fn failed_calls(&self) -> u64;
    /// Deltas queued again after a failed call.
    fn retries(&self) -> u64;
    /// Keys given up on or parked.
    fn dead(&self) -> u64;
    /// Deltas a stopping version handed to its successor.
    fn handed_over(&self) -> u64;
    /// Dead letters recorded now.
    fn dead_letters_listed(&self) -> u64;
    /// Stop graces that ran out with calls in flight.
    fn fenced_stops(&self) -> u64;
    /// Updates not delivered because no declared field changed.
    fn filtered(&self) -> u64;
    /// Deltas merged into a pending delta of the same object.
    fn coalesced(&self) -> u64;
    /// Deltas waiting, ready or backing off.
    fn queue_depth(&self) -> u64;
    /// Keys waiting on a timer.
    fn delayed_depth(&self) -> u64;
    /// Requeues not due yet.
    fn requeues_pending(&self) -> u64;
    /// Durations of handler calls.
    fn call_time(&self) -> &dyn DurationHistogram;
    /// From a delta received to its call returning.
    fn latency(&self) -> &dyn DurationHistogram;
}

/// A histogram of durations, read into [`DURATION_BUCKETS`].
pub trait DurationHistogram {
    /// Samples at or below each bound (nanoseconds), then `+Inf`, and the
    /// total.
    fn bucket_counts(&self, bounds_ns: &[u64]) -> (Vec<u64>, u64);
    /// The sum of the samples.
    fn sum(&self) -> std::time::Duration;
}

pub(crate) type ViewSlot = Arc<RwLock<Option<Arc<dyn HostView>>>>;

/// Pre-resolved counters of one informer.
#[derive(Debug, Clone)]
pub struct InformerCounters {
    deltas: [Counter; 5],
    pub watch_restarts: Counter,
    pub relists: Counter,
    pub watch_stalls: Counter,
    /// Objects the informer could not decode now (its share of the kind's
    /// gauge; the informer keeps it equal to the objects it lists).
    pub undecodable: Gauge,
    /// List items and watch events whose object could not be decoded.
    pub decode_failures: Counter,
}

impl InformerCounters {
    /// Counts one delta of the type at `slot` of [`DELTA_TYPES`] (the
    /// informer's `delta` picks the slot).
    #[inline]
    pub fn delta_at(&self, slot: usize) {
        if let Some(c) = self.deltas.get(slot) {
            c.inc();
        }
    }
}

/// Pre-resolved counters of the API server's list and watch responses,
/// by the encoding they came in. The default is unregistered: counts
/// nobody reads (a client built outside a running host).
#[derive(Debug, Clone, Default)]
pub struct WireCounters {
    pub protobuf: Counter,
    pub json: Counter,
}

/// Pre-resolved action counters of one plugin: `[verb][outcome]`.
#[derive(Debug, Clone)]
pub struct ActionCounters {
    by_outcome: [[Counter; 6]; 3],
    retries: [Counter; 3],
    /// Events dropped because the Event queue was full.
    pub events_dropped: Counter,
}

/// `verb`'s slot in [`VERBS`] (`Action::verb` yields only those).
fn verb_slot(verb: &str) -> usize {
    VERBS.iter().position(|v| *v == verb).unwrap_or(0)
}

impl ActionCounters {
    pub fn outcome(&self, verb: &str, outcome: Outcome) -> &Counter {
        &self.by_outcome[verb_slot(verb)][outcome as usize]
    }

    pub fn retry(&self, verb: &str) -> &Counter {
        &self.retries[verb_slot(verb)]
    }
}

/// Pre-resolved counters of one plugin version.
#[derive(Debug, Clone)]
pub struct PluginCounters {
    /// Deltas handled successfully, by subscription index.
    pub delivered: Vec<Counter>,
    pub actions: ActionCounters,
}

impl PluginCounters {
    #[inline]
    pub fn delivered(&self, subscription: u32) {
        if let Some(c) = self.delivered.get(subscription as usize) {
            c.inc();
        }
    }
}

/// The registry and the families the host increments.
pub struct Metrics {
    registry: Registry,
    informer_deltas: Family<L2, Counter>,
    watch_restarts: Family<L1, Counter>,
    relists: Family<L1, Counter>,
    watch_stalls: Family<L1, Counter>,
    undecodable: Family<L1, Gauge>,
    decode_failures: Family<L1, Counter>,
    delivered: Family<L2, Counter>,
    actions: Family<L3, Counter>,
    action_retries: Family<L2, Counter>,
    events_dropped: Family<L1, Counter>,
    reloads: Family<L1, Counter>,
    load_failures: Family<L1, Counter>,
    limit_exceeded: Family<L2, Counter>,
    throttled: Family<L1, Counter>,
    throttle_seconds: Family<L1, Counter<f64>>,
    fast_tier: Family<L1, Gauge>,
    tier_ups: Family<L1, Counter>,
    wire_responses: Family<L1, Counter>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    pub(crate) fn new(view: ViewSlot, leader: LeaderFlag) -> Self {
        let mut registry = Registry::default();
        let informer_deltas = Family::<L2, Counter>::default();
        registry.register(
            "kubewasm_informer_deltas",
            "Deltas the informers produced from watch events and lists, by kind and delta type",
            informer_deltas.clone(),
        );
        let watch_restarts = Family::<L1, Counter>::default();
        registry.register(
            "kubewasm_informer_watch_restarts",
            "Watch streams that failed and were restarted with backoff, by kind",
            watch_restarts.clone(),
        );
        let relists = Family::<L1, Counter>::default();
        registry.register(
            "kubewasm_informer_relists",
            "Lists after an informer's initial one (410 Gone, a watch that could not resume), by kind",
            relists.clone(),
        );
        let watch_stalls = Family::<L1, Counter>::default();
        registry.register(
            "kubewasm_informer_watch_stalls",
            "Silences of an informer's watch during which the API server did not answer a probe list, by kind",
            watch_stalls.clone(),
        );
        let undecodable = Family::<L1, Gauge>::default();
        registry.register(
            "kubewasm_informer_undecodable_objects",
            "Objects the informers cannot decode now (the cache holds their last decoded state, if any, until they decode again or are deleted), by kind (summed over that kind's informers)",
            undecodable.clone(),
        );
        let decode_failures = Family::<L1, Counter>::default();
        registry.register(
            "kubewasm_informer_decode_failures",
            "List items and watch events whose object could not be decoded, by kind",
            decode_failures.clone(),
        );
        let delivered = Family::<L2, Counter>::default();
        registry.register(
            "kubewasm_plugin_deltas_delivered",
            "Deltas a plugin handled successfully, by plugin and kind",
            delivered.clone(),
        );
        let actions = Family::<L3, Counter>::default();
        registry.register(
            "kubewasm_actions",
            "Actions plugins emitted, by plugin, verb and outcome (applied, failed, conflict, skipped, fenced, dry_run)",
            actions.clone(),
        );
        let action_retries = Family::<L2, Counter>::default();
        registry.register(
            "kubewasm_action_retries",
            "Action requests the executor sent again after a transient failure (429, 5xx, 408, no answer, a timeout; never a conflict), by plugin and verb",
            action_retries.clone(),
        );
        let events_dropped = Family::<L1, Counter>::default();
        registry.register(
            "kubewasm_events_dropped",
            "Events a plugin emitted that were not recorded because the Event queue was full (or the host was shutting down), by plugin",
            events_dropped.clone(),
        );
        let reloads = Family::<L1, Counter>::default();
        registry.register(
            "kubewasm_plugin_reloads",
            "New versions of a running plugin swapped in, by plugin",
            reloads.clone(),
        );
        let load_failures = Family::<L1, Counter>::default();
        registry.register(
            "kubewasm_plugin_load_failures",
            "Plugin files that could not be loaded (the previous version, if any, keeps serving), by plugin",
            load_failures.clone(),
        );
        let limit_exceeded = Family::<L2, Counter>::default();
        registry.register(
            "kubewasm_plugin_limit_exceeded",
            "Handler calls failed because they went over a cap of the plugin's limits (handles, actions_per_call, log_bytes_per_call, action_bytes_per_call), by plugin and limit",
            limit_exceeded.clone(),
        );
        let throttled = Family::<L1, Counter>::default();
        registry.register(
            "kubewasm_plugin_actions_throttled",
            "Actions that waited for the plugin's limits.actionsPerSecond, by plugin",
            throttled.clone(),
        );
        let throttle_seconds = Family::<L1, Counter<f64>>::default();
        registry.register(
            "kubewasm_plugin_action_throttle_seconds",
            "Seconds actions waited for the plugin's limits.actionsPerSecond, by plugin",
            throttle_seconds.clone(),
        );
        let fast_tier = Family::<L1, Gauge>::default();
        registry.register(
            "kubewasm_plugin_fast_tier",
            "1 while a plugin is served by fast-tier (Winch) code, its optimized (Cranelift) code compiling; 0 once optimized code serves, by plugin",
            fast_tier.clone(),
        );
        let tier_ups = Family::<L1, Counter>::default();
        registry.register(
            "kubewasm_plugin_tier_ups",
            "Fast-tier plugin versions replaced by their optimized code, by plugin",
            tier_ups.clone(),
        );
        let wire_responses = Family::<L1, Counter>::default();
        registry.register(
            "kubewasm_source_wire_responses",
            "List and watch responses of the API server the informers read, by encoding on the wire (protobuf, json)",
            wire_responses.clone(),
        );
        registry.register(
            "kubewasm_build",
            "Build of this kubewasm binary",
            Info::new([("version", env!("CARGO_PKG_VERSION").to_owned())]),
        );
        registry.register_collector(Box::new(HostCollector { view, leader }));
        Self {
            registry,
            informer_deltas,
            watch_restarts,
            relists,
            watch_stalls,
            undecodable,
            decode_failures,
            delivered,
            actions,
            action_retries,
            events_dropped,
            reloads,
            load_failures,
            limit_exceeded,
            throttled,
            throttle_seconds,
            fast_tier,
            tier_ups,
            wire_responses,
        }
    }

    /// Handles for the list and watch responses of the API-server source,
    /// by encoding.
    pub fn wire_counters(&self) -> WireCounters {
        let of = |encoding: &str| {
            self.wire_responses
                .get_or_create_owned(&[("encoding", encoding.to_owned())])
        };
        WireCounters {
            protobuf: of("protobuf"),
            json: of("json"),
        }
    }

    /// Plugin `plugin`'s actions throttled and the seconds they waited
    /// (the action rate counts with them: `Metrics::action_rate`).
    pub fn throttle_counters(&self, plugin: &str) -> (Counter, Counter<f64>) {
        let label = [("plugin", plugin.to_owned())];
        (
            self.throttled.get_or_create_owned(&label),
            self.throttle_seconds.get_or_create_owned(&label),
        )
    }

    /// Plugin `plugin`'s calls failed on the cap labelled `limit` (the
    /// runtime's caps count with them: `Metrics::plugin_caps`).
    pub fn limit_exceeded(&self, plugin: &str, limit: &str) -> Counter {
        self.limit_exceeded
            .get_or_create_owned(&[("plugin", plugin.to_owned()), ("limit", limit.to_owned())])
    }

    /// Handles for one informer of `kind` (several informers of one kind
    /// share the series).
    pub fn informer(&self, kind: &str) -> InformerCounters {
        let kind = kind.to_owned();
        InformerCounters {
            deltas: DELTA_TYPES.map(|t| {
                self.informer_deltas
                    .get_or_create_owned(&[("kind", kind.clone()), ("type", t.to_owned())])
            }),
            watch_restarts: self
                .watch_restarts
                .get_or_create_owned(&[("kind", kind.clone())]),
            relists: self.relists.get_or_create_owned(&[("kind", kind.clone())]),
            watch_stalls: self
                .watch_stalls
                .get_or_create_owned(&[("kind", kind.clone())]),
            undecodable: self
                .undecodable
                .get_or_create_owned(&[("kind", kind.clone())]),
            decode_failures: self.decode_failures.get_or_create_owned(&[("kind", kind)]),
        }
    }

    /// Handles for plugin `plugin`'s actions.
    pub fn actions(&self, plugin: &str) -> ActionCounters {
        let series = |verb: &str, outcome: &str| {
            self.actions.get_or_create_owned(&[
                ("plugin", plugin.to_owned()),
                ("verb", verb.to_owned()),
                ("outcome", outcome.to_owned()),
            ])
        };
        ActionCounters {
            by_outcome: VERBS.map(|v| OUTCOMES.map(|o| series(v, o))),
            retries: VERBS.map(|v| {
                self.action_retries
                    .get_or_create_owned(&[("plugin", plugin.to_owned()), ("verb", v.to_owned())])
            }),
            events_dropped: self
                .events_dropped
                .get_or_create_owned(&[("plugin", plugin.to_owned())]),
        }
    }

    /// Handles for a plugin version whose subscriptions are, in order, of
    /// `kinds`.
    pub fn plugin(&self, plugin: &str, kinds: &[String]) -> PluginCounters {
        PluginCounters {
            delivered: kinds
                .iter()
                .map(|k| {
                    self.delivered
                        .get_or_create_owned(&[("plugin", plugin.to_owned()), ("kind", k.clone())])
                })
                .collect(),
            actions: self.actions(plugin),
        }
    }

    pub fn plugin_reloaded(&self, plugin: &str) {
        self.reloads
            .get_or_create(&[("plugin", plugin.to_owned())])
            .inc();
    }

    /// Whether fast-tier code serves `plugin` now (`None`: unloaded, its
    /// series goes).
    pub fn plugin_fast_tier(&self, plugin: &str, fast: Option<bool>) {
        let labels = [("plugin", plugin.to_owned())];
        match fast {
            Some(fast) => {
                self.fast_tier.get_or_create(&labels).set(i64::from(fast));
            }
            None => {
                self.fast_tier.remove(&labels);
            }
        }
    }

    pub fn plugin_tiered_up(&self, plugin: &str) {
        self.tier_ups
            .get_or_create(&[("plugin", plugin.to_owned())])
            .inc();
    }

    pub fn plugin_load_failed(&self, plugin: &str) {
        self.load_failures
            .get_or_create(&[("plugin", plugin.to_owned())])
            .inc();
    }

    /// Every series in the OpenMetrics text format ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::with_capacity(8 * 1024);
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// Reads the running host at scrape time.
struct HostCollector {
    view: ViewSlot,
    leader: LeaderFlag,
}

impl std::fmt::Debug for HostCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostCollector").finish_non_exhaustive()
    }
}

/// The allocator's live-heap gauge (name without its `_bytes` unit, help):
/// served only by builds with the `jemalloc` feature, listed by the
/// metrics reference whatever the build.
pub const ALLOCATOR_ALLOCATED: (&str, &str) = (
    "kubewasm_allocator_allocated",
    "Bytes the allocator (jemalloc) has handed out and not had back: the live heap, without freed pages it still holds (stats.allocated, read after an epoch advance; builds with the jemalloc feature only)",
);

/// jemalloc's `stats.allocated` after advancing its epoch (the statistics
/// are cached until then); `None` if jemalloc refuses either call.
#[cfg(feature = "jemalloc")]
fn allocated_bytes() -> Option<u64> {
    tikv_jemalloc_ctl::epoch::advance().ok()?;
    tikv_jemalloc_ctl::stats::allocated::read()
        .ok()
        .and_then(|b| u64::try_from(b).ok())
}

/// Per-bucket counts for [`DURATION_BUCKETS`] plus `+Inf`, with the total
/// and the sum in seconds. A sample counts under the first bound at or
/// above the upper edge of its internal bucket (about 9 % wide), so a
/// bucket's count is never more than the samples truly at or below it.
pub fn histogram_buckets(h: &dyn DurationHistogram) -> (Vec<(f64, u64)>, u64, f64) {
    let bounds_ns: Vec<u64> = DURATION_BUCKETS
        .iter()
        .map(|s| (s * 1e9).round() as u64)
        .collect();
    let (counts, total) = h.bucket_counts(&bounds_ns);
    let buckets = DURATION_BUCKETS
        .iter()
        .copied()
        .chain(std::iter::once(f64::INFINITY))
        .zip(counts)
        .collect();
    (buckets, total, h.sum().as_secs_f64())
}

fn counter_rows<'a>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl Iterator<Item = (&'a str, u64)>,
) -> std::fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (plugin, v) in rows {
        m.encode_family(&[("plugin", plugin)])?
            .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
    }
    Ok(())
}

/// A gauge family with one series per shard (`shard` = its index).
fn shard_gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    values: impl Iterator<Item = u64>,
) -> std::fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (i, v) in values.enumerate() {
        let shard = i.to_string();
        m.encode_family(&[("shard", shard.as_str())])?
            .encode_gauge(&v)?;
    }
    Ok(())
}

impl Collector for HostCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        {
            let mut m = enc.encode_descriptor(
                "kubewasm_leader",
                "1 when this replica leads (always 1 without leader election)",
                None,
                MetricType::Gauge,
            )?;
            m.encode_gauge(&i64::from(self.leader.is_leader()))?;
        }
        let (count, held) = self.leader.shards();
        if count > 0 {
            shard_gauge(
                &mut enc,
                "kubewasm_shard_held",
                "1 for each shard this replica acts for (run --shards N), 0 for the others",
                (0..count.min(64)).map(|i| u64::from(held & (1 << i) != 0)),
            )?;
            let mut m = enc.encode_descriptor(
                "kubewasm_shard_deltas",
                "Deltas this replica queued for its plugins, per shard (run --shards N); their rate is the shard's deltas/s here",
                None,
                MetricType::Counter,
            )?;
            for i in 0..count.min(64) {
                let shard = i.to_string();
                m.encode_family(&[("shard", shard.as_str())])?
                    .encode_counter::<NoLabelSet, _, u64>(&self.leader.shard_deltas(i), None)?;
            }
        }
        #[cfg(feature = "jemalloc")]
        if let Some(bytes) = allocated_bytes() {
            let mut m = enc.encode_descriptor(
                ALLOCATOR_ALLOCATED.0,
                ALLOCATOR_ALLOCATED.1,
                Some(&Unit::Bytes),
                MetricType::Gauge,
            )?;
            m.encode_gauge(&bytes)?;
        }
        let Some(view) = self.view.read().clone() else {
            return Ok(());
        };
        let depth = view.shard_queue_depth();
        if !depth.is_empty() {
            shard_gauge(
                &mut enc,
                "kubewasm_shard_queue_depth",
                "Deltas waiting in every plugin's queue, per shard (run --shards N)",
                depth.into_iter(),
            )?;
        }
        let per_shard = view.shard_objects();
        if !per_shard.is_empty() {
            shard_gauge(
                &mut enc,
                "kubewasm_shard_objects",
                "Cached objects in each shard (run --shards N), summed over informers: how the objects spread",
                per_shard.into_iter(),
            )?;
        }
        let plugins = view.plugins();
        let load = |f: fn(&dyn PluginFigures) -> u64| {
            plugins
                .iter()
                .map(move |(name, s)| (name.as_str(), f(&**s)))
                .collect::<Vec<_>>()
        };
        counter_rows(
            &mut enc,
            "kubewasm_plugin_handler_errors",
            "Handler calls that failed (returned an error or trapped), by plugin",
            load(|s| s.failed_calls()).into_iter(),
        )?;
        counter_rows(
            &mut enc,
            "kubewasm_plugin_retries",
            "Deltas queued again after a failed call, by plugin",
            load(|s| s.retries()).into_iter(),
        )?;
        counter_rows(
            &mut enc,
            "kubewasm_plugin_dead_letters",
            "Keys given up on (a permanent failure) or parked (past their attempt budget or backoff cap, still retried), by plugin",
            load(|s| s.dead()).into_iter(),
        )?;
        counter_rows(
            &mut enc,
            "kubewasm_plugin_deltas_handed_over",
            "Deltas a stopping plugin version handed to its successor (deletes it had not handled, dead deletes), by plugin",
            load(|s| s.handed_over()).into_iter(),
        )?;
        {
            let mut m = enc.encode_descriptor(
                "kubewasm_plugin_dead_letters_listed",
                "Dead letters currently recorded (GET /dead-letters), by plugin",
                None,
                MetricType::Gauge,
            )?;
            for (name, s) in &plugins {
                m.encode_family(&[("plugin", name.as_str())])?
                    .encode_gauge(&s.dead_letters_listed())?;
            }
        }
        counter_rows(
            &mut enc,
            "kubewasm_plugin_fenced_stops",
            "Times a plugin version's stop grace ran out with calls in flight, which were fenced (their remaining actions refused), by plugin",
            load(|s| s.fenced_stops()).into_iter(),
        )?;
        counter_rows(
            &mut enc,
            "kubewasm_plugin_deltas_filtered",
            "Updates not delivered because no field the plugin declared changed, by plugin",
            load(|s| s.filtered()).into_iter(),
        )?;
        counter_rows(
            &mut enc,
            "kubewasm_plugin_deltas_coalesced",
            "Deltas merged into a pending delta of the same object, by plugin",
            load(|s| s.coalesced()).into_iter(),
        )?;
        for (metric, help, read) in [
            (
                "kubewasm_plugin_queue_depth",
                "Deltas waiting in a plugin's queue, ready or backing off (not counting calls in flight), by plugin",
                (|s: &dyn PluginFigures| s.queue_depth()) as fn(&dyn PluginFigures) -> u64,
            ),
            (
                "kubewasm_plugin_delayed_keys",
                "Keys of a plugin waiting on a timer: backing off after a failure, or with a requeue pending, by plugin",
                |s: &dyn PluginFigures| s.delayed_depth(),
            ),
            (
                "kubewasm_plugin_requeues_pending",
                "Requeues a plugin asked for that are not due yet (at most one per object), by plugin",
                |s: &dyn PluginFigures| s.requeues_pending(),
            ),
        ] {
            let mut m = enc.encode_descriptor(metric, help, None, MetricType::Gauge)?;
            for (name, s) in &plugins {
                m.encode_family(&[("plugin", name.as_str())])?
                    .encode_gauge(&read(&**s))?;
            }
        }
        for (name, help, pick) in [
            (
                "kubewasm_plugin_call_duration",
                "Duration of plugin handler calls, by plugin",
                (|s: &dyn PluginFigures| s.call_time())
                    as fn(&dyn PluginFigures) -> &dyn DurationHistogram,
            ),
            (
                "kubewasm_plugin_delivery_latency",
                "From the informer receiving a delta to the plugin's call returning (queueing, coalescing and retries included), by plugin",
                |s: &dyn PluginFigures| s.latency(),
            ),
        ] {
            let mut m =
                enc.encode_descriptor(name, help, Some(&Unit::Seconds), MetricType::Histogram)?;
            for (plugin, s) in &plugins {
                let (buckets, count, sum) = histogram_buckets(pick(&**s));
                m.encode_family(&[("plugin", plugin.as_str())])?
                    .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
            }
        }
        let caches = view.caches();
        {
            let mut m = enc.encode_descriptor(
                "kubewasm_cache_objects",
                "Objects in the lister cache, by kind (summed over that kind's informers)",
                None,
                MetricType::Gauge,
            )?;
            for c in &caches {
                m.encode_family(&[("kind", c.kind.as_str())])?
                    .encode_gauge(&c.objects)?;
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "kubewasm_cache",
                "Approximate heap bytes of the cached objects, by kind",
                Some(&Unit::Bytes),
                MetricType::Gauge,
            )?;
            for c in &caches {
                m.encode_family(&[("kind", c.kind.as_str())])?
                    .encode_gauge(&c.bytes)?;
            }
        }
        Ok(())
    }
}
