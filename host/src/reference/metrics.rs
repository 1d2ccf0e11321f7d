//! The metrics reference: the host's registry encoded with every family
//! present (one series of each: an informer, a plugin with its caps, rate
//! and actions, a cache sample), then read back family by family from the
//! OpenMetrics text: name, type, unit, help, labels and the series names a
//! query uses.

use std::collections::BTreeSet;
use std::fmt::Write;
use std::sync::Arc;

use crate::dispatch::PluginStats;
use crate::telemetry::metrics::{CacheSample, HostView, LeaderFlag, Metrics, PluginFigures};

struct OnePlugin(Arc<PluginStats>);

impl HostView for OnePlugin {
    fn not_ready(&self) -> Vec<String> {
        Vec::new()
    }
    fn plugins(&self) -> Vec<(String, Arc<dyn PluginFigures>)> {
        vec![("p".into(), self.0.clone())]
    }
    fn caches(&self) -> Vec<CacheSample> {
        vec![CacheSample {
            kind: "k".into(),
            objects: 1,
            bytes: 1,
        }]
    }
    fn shard_objects(&self) -> Vec<u64> {
        vec![1]
    }
    fn shard_queue_depth(&self) -> Vec<u64> {
        vec![0]
    }
}

/// The registry's text with a series in every family.
fn encoded() -> String {
    let view: crate::telemetry::metrics::ViewSlot = Arc::default();
    // Sharded, so the shard families have a series.
    let leader = LeaderFlag::default();
    leader.set_shards(1, 1);
    let m = Metrics::new(view.clone(), leader);
    let _ = m.informer("k");
    let _ = m.plugin("p", &["k".into()]);
    let _ = m.plugin_caps("p");
    let _ = m.action_rate("p", 1);
    m.plugin_reloaded("p");
    m.plugin_load_failed("p");
    m.plugin_fast_tier("p", Some(true));
    m.plugin_tiered_up("p");
    let _ = m.wire_counters();
    *view.write() = Some(Arc::new(OnePlugin(Arc::default())));
    let text = m.encode().unwrap_or_default();
    // The families only some builds serve, as those builds encode them.
    let (name, help) = crate::telemetry::metrics::ALLOCATOR_ALLOCATED;
    if text.contains(&format!("# TYPE {name}_bytes ")) {
        return text;
    }
    let body = text.trim_end().strip_suffix("# EOF").unwrap_or(&text);
    format!(
        "{body}# HELP {name}_bytes {help}\n# TYPE {name}_bytes gauge\n# UNIT {name}_bytes bytes\n{name}_bytes 0\n# EOF\n"
    )
}

#[derive(Default)]
struct Family {
    name: String,
    kind: String,
    unit: String,
    help: String,
    labels: BTreeSet<String>,
    series: BTreeSet<String>,
}

/// The page.
pub fn markdown() -> String {
    let mut families: Vec<Family> = Vec::new();
    for line in encoded().lines() {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (what, name, value) = (
                parts.next().unwrap_or(""),
                parts.next().unwrap_or(""),
                parts.next().unwrap_or(""),
            );
            if families.last().is_none_or(|f| f.name != name) && what != "EOF" {
                families.push(Family {
                    name: name.to_owned(),
                    ..Family::default()
                });
            }
            let Some(f) = families.last_mut() else {
                continue;
            };
            match what {
                "HELP" => f.help = value.to_owned(),
                "TYPE" => f.kind = value.to_owned(),
                "UNIT" => f.unit = value.to_owned(),
                _ => {}
            }
        } else if let Some(f) = families.last_mut() {
            let series = line.split([' ', '{']).next().unwrap_or("");
            f.series.insert(series.to_owned());
            if let Some((_, labels)) = line.split_once('{') {
                let labels = labels.split('}').next().unwrap_or("");
                for pair in labels.split(',') {
                    if let Some((key, _)) = pair.split_once('=')
                        && key != "le"
                    {
                        f.labels.insert(key.to_owned());
                    }
                }
            }
        }
    }
    let mut out = super::page_head(
        "Metrics",
        "the registry (host/src/telemetry/metrics.rs)",
        "cargo test -p kubewasm --lib reference",
    );
    let _ = writeln!(
        out,
        "Every metric `GET /metrics` serves, in the OpenMetrics text format, read from the \
         host's registry ([Health, readiness and metrics](../metrics.md) says how to scrape \
         them and what each means). A family appears once its first series exists: \
         an informer's, a plugin's and a cache's families with the first informer, plugin \
         and cache.\n"
    );
    let _ = writeln!(out, "| metric | type | labels | help |");
    let _ = writeln!(out, "|---|---|---|---|");
    for f in &families {
        let series: Vec<String> = f.series.iter().map(|s| format!("`{s}`")).collect();
        let labels: Vec<String> = f.labels.iter().map(|l| format!("`{l}`")).collect();
        let kind = if f.unit.is_empty() {
            f.kind.clone()
        } else {
            format!("{} ({})", f.kind, f.unit)
        };
        let _ = writeln!(
            out,
            "| {} | {kind} | {} | {} |",
            series.join("<br>"),
            labels.join(", "),
            f.help.replace('|', "\\|"),
        );
    }
    out
}
