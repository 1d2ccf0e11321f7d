//! The running host as telemetry sees it: readiness from the informers and
//! the plugin folder, scrape-time figures from the plugins' stats and the
//! caches. Read only when probed or scraped.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::dispatch::PluginStats;
use crate::manager::PluginHost;
use crate::reload::PluginDir;

use super::metrics::{CacheSample, HostView};

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
                    let why = super::events::forbidden_reason(i.spec(), f.verb);
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

    fn plugins(&self) -> Vec<(String, Arc<PluginStats>)> {
        self.host.stats().into_iter().collect()
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
}
