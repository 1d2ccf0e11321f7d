//! The running host as the admin listeners see it: readiness from the informers and
//! the plugin folder, scrape-time figures from the plugins' stats and the
//! caches, and the web view's tables and cache browser. Read only when
//! probed, scraped or shown.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::future::BoxFuture;

use crate::dispatch::DeadLetterRecord;
use crate::informer::{CacheView, Informer};
use crate::manager::PluginHost;
use crate::reload::PluginDir;

use super::ui::{InformerRow, PluginRow, UiSource};
use crate::telemetry::metrics::{CacheSample, HostView, PluginFigures};

/// A [`HostView`] over a plugin host and its folder.
#[derive(Debug)]
pub struct AppView {
    host: Arc<PluginHost>,
    dir: Arc<PluginDir>,
}

impl AppView {
    pub fn new(host: Arc<PluginHost>, dir: Arc<PluginDir>) -> Self {
        Self { host, dir }
    }
}

impl HostView for AppView {
    fn not_ready(&self) -> Vec<String> {
        let mut reasons = self.dir.not_ready();
        let mut unsynced: Vec<String> = Vec::new();
        for i in self.host.informers().informers() {
            match i.forbidden() {
                // Refused by RBAC: its plugins are broken until granted.
                Some(f) => {
                    let why = crate::informer::internal_events::forbidden_reason(i.spec(), f.verb);
                    let plugins = i.subscriber_names();
                    if plugins.is_empty() {
                        unsynced.push(format!("informer {}: {why}", i.spec()));
                    }
                    for p in plugins {
                        unsynced.push(format!("plugin {p} is broken: {why}"));
                    }
                }
                None if !i.has_synced() => {
                    unsynced.push(format!("informer {}: not synced", i.spec()));
                }
                None => {}
            }
        }
        unsynced.sort();
        reasons.extend(unsynced);
        reasons
    }

    fn plugins(&self) -> Vec<(String, Arc<dyn PluginFigures>)> {
        self.host
            .stats()
            .into_iter()
            .map(|(name, s)| (name, s as Arc<dyn PluginFigures>))
            .collect()
    }

    fn caches(&self) -> Vec<CacheSample> {
        let mut by_kind: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for informer in self.host.informers().informers() {
            let e = by_kind
                .entry(informer.spec().kind.resource_name())
                .or_default();
            e.0 += informer.store().len() as u64;
            e.1 += informer.store().object_bytes() as u64;
        }
        by_kind
            .into_iter()
            .map(|(kind, (objects, bytes))| CacheSample {
                kind,
                objects,
                bytes,
            })
            .collect()
    }

    fn shard_queue_depth(&self) -> Vec<u64> {
        let shards = self.host.leadership().state().shards;
        if !shards.is_sharded() {
            return Vec::new();
        }
        let mut out = vec![0u64; shards.count as usize];
        for (_, stats) in self.host.stats() {
            for (o, n) in out.iter_mut().zip(stats.queue_depth_by_shard(&shards)) {
                *o += n;
            }
        }
        out
    }

    fn shard_objects(&self) -> Vec<u64> {
        let shards = self.host.leadership().state().shards;
        if !shards.is_sharded() {
            return Vec::new();
        }
        let mut counts = vec![0u64; shards.count as usize];
        for informer in self.host.informers().informers() {
            for obj in informer.store().snapshot().iter() {
                if let Some(n) = shards
                    .shard_of_object(obj)
                    .and_then(|i| counts.get_mut(i as usize))
                {
                    *n += 1;
                }
            }
        }
        counts
    }
}

/// One informer's row of the web view.
fn informer_row(i: &Informer) -> InformerRow {
    let spec = i.spec();
    let mut scope = match &spec.namespace {
        Some(ns) => format!("namespace {ns}"),
        None if spec.kind.namespaced => "all namespaces".to_owned(),
        None => "cluster".to_owned(),
    };
    if let Some(l) = &spec.label_selector {
        scope.push_str(&format!(", labels {l}"));
    }
    if let Some(f) = &spec.field_selector {
        scope.push_str(&format!(", fields {f}"));
    }
    InformerRow {
        id: spec.to_string(),
        kind: spec.kind.resource_name(),
        scope,
        objects: i.store().len() as u64,
        bytes: i.store().object_bytes() as u64,
        synced: i.has_synced(),
        resource_version: i.last_resource_version(),
        watch_restarts: i.watch_restarts(),
        relists: i.relists(),
        plugins: i.subscriber_names(),
        forbidden: i.forbidden().map(|f| f.message),
        undecodable: i.undecodable(),
    }
}

fn micros(d: Option<std::time::Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64() * 1e6)
}

impl AppView {
    /// Plugins broken by an informer the API server refuses, with why.
    fn refused(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for i in self.host.informers().informers() {
            if let Some(f) = i.forbidden() {
                let why = crate::informer::internal_events::forbidden_reason(i.spec(), f.verb);
                for p in i.subscriber_names() {
                    out.entry(p).or_insert_with(|| why.clone());
                }
            }
        }
        out
    }
}

impl UiSource for AppView {
    fn dead_letters(&self) -> Vec<DeadLetterRecord> {
        self.host
            .stats()
            .into_values()
            .flat_map(|s| s.dead_letters.lock().records())
            .collect()
    }

    fn plugins(&self) -> BoxFuture<'_, Vec<PluginRow>> {
        Box::pin(async move {
            let versions: BTreeMap<String, _> = self
                .host
                .versions()
                .await
                .into_iter()
                .map(|v| (v.name.to_string(), v))
                .collect();
            let files = self.dir.file_states();
            let failures = self.dir.failures();
            let refused = self.refused();
            let stats = self.host.stats();
            let names: BTreeSet<&String> = versions.keys().chain(files.keys()).collect();
            names
                .into_iter()
                .map(|name| {
                    let running = versions.get(name);
                    let s = stats.get(name);
                    let failing =
                        s.is_some_and(|s| s.consecutive_traps.load(Ordering::Relaxed) > 0);
                    let state = match (running, files.get(name).copied()) {
                        (Some(_), _) if refused.contains_key(name) => "broken",
                        (Some(_), _) if failing => "unhealthy",
                        (Some(_), _) => "serving",
                        (None, Some("broken")) => "broken",
                        (None, _) => "loading",
                    };
                    let mut row = PluginRow {
                        name: name.clone(),
                        state,
                        error: refused.get(name).or(failures.get(name)).cloned(),
                        ..PluginRow::default()
                    };
                    if let Some(v) = running {
                        row.version = Some(v.version().to_owned());
                        row.language = v.language().map(str::to_owned);
                        row.subscriptions = v.subscription_specs();
                    }
                    if let Some(s) = s {
                        row.delivered = s.delivered.load(Ordering::Relaxed);
                        row.errors = s.failed_calls.load(Ordering::Relaxed);
                        row.retries = s.retries.load(Ordering::Relaxed);
                        row.queue = s.queue_depth();
                        row.delayed = s.delayed_depth();
                        row.dead_letters = s.dead_letters.lock().len() as u64;
                        row.call_p50_us = micros(s.call_time.quantile(0.5));
                        row.call_p99_us = micros(s.call_time.quantile(0.99));
                    }
                    row
                })
                .collect()
        })
    }

    fn informers(&self) -> Vec<InformerRow> {
        let mut rows: Vec<InformerRow> = self
            .host
            .informers()
            .informers()
            .iter()
            .map(|i| informer_row(i))
            .collect();
        rows.sort_by(|a, b| a.id.cmp(&b.id));
        rows
    }

    fn cache(&self, id: &str) -> Option<CacheView> {
        self.host
            .informers()
            .informers()
            .into_iter()
            .find(|i| i.spec().to_string() == id)
            .map(|i| i.view())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::mpsc;
    use tokio_util::sync::CancellationToken;

    use super::informer_row;
    use crate::activity::Activity;
    use crate::informer::scripted::Scripted;
    use crate::informer::{InformerSet, InformerSpec, Undecodable, UndecodableEvent, WatchEvent};
    use crate::kind::KindInfo;
    use crate::object::{KObject, ObjectError, ObjectKey, StripOptions};
    use crate::telemetry::{Identity, Telemetry};

    #[tokio::test]
    async fn an_informers_row_names_the_objects_it_cannot_decode() {
        let (events, script) = mpsc::unbounded_channel();
        let set = InformerSet::new(
            Arc::new(Scripted::new(Some(script))),
            Arc::new(Activity::default()),
            CancellationToken::new(),
            Telemetry::new(Identity::from_env()),
        );
        let spec = InformerSpec {
            kind: KindInfo::new("", "v1", "ConfigMap", "configmaps", true),
            namespace: Some("team".into()),
            label_selector: None,
            field_selector: None,
        };
        let (tx, mut deltas) = mpsc::unbounded_channel();
        let handle = set.subscribe(spec, tx);
        let good = KObject::from_value(
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "good", "namespace": "team", "resourceVersion": "1"}}),
            StripOptions::default(),
        )
        .unwrap();
        events.send(Ok(WatchEvent::Init)).unwrap();
        events
            .send(Ok(WatchEvent::Undecodable(Undecodable {
                event: UndecodableEvent::InitApply,
                key: Some(ObjectKey::new(Some("team"), "bad")),
                error: Arc::new(ObjectError::NotAnObject("metadata.labels")),
            })))
            .unwrap();
        events.send(Ok(WatchEvent::InitApply(good))).unwrap();
        events.send(Ok(WatchEvent::InitDone)).unwrap();
        // Added good, then Synced: the list was applied.
        for _ in 0..2 {
            deltas.recv().await.unwrap();
        }
        let row = informer_row(&handle.informer);
        assert!(row.synced);
        assert_eq!(row.objects, 1);
        let shown = serde_json::to_value(&row).unwrap();
        assert_eq!(
            shown["undecodable"],
            serde_json::json!([{"object": "team/bad",
                "error": "object's metadata.labels is not a JSON object"}]),
            "{shown}"
        );
        set.unsubscribe(&handle);
        set.shutdown().await;
    }
}
