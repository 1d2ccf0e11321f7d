//! Dead letters: keys a plugin failed to handle for good (a permanent
//! failure: the plugin said so, or the API server refused an action as
//! invalid) or that are parked (past their attempt budget or backoff cap,
//! still retried at the cap interval). One record per object and
//! subscription pair (a newer failure replaces an older one), bounded per
//! plugin; a later success for the object clears its record; a new plugin
//! version takes the permanent deletes again (see
//! [`Dispatcher::hand_over`](super::Dispatcher::hand_over)). Listed by
//! `GET /dead-letters` and `kubewasm dead-letters`.

use std::collections::HashMap;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::Key;
use super::queue::Item;
use crate::informer::{DeltaType, InformerSpec};
use crate::runtime::CallDelta;

/// Most records kept per plugin; past it the oldest record is dropped
/// (and counted in [`DeadLetters::evicted`]).
pub const MAX_DEAD_LETTERS: usize = 1000;

/// One dead letter as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetterRecord {
    pub plugin: String,
    /// Index of the subscription in the plugin's registration.
    pub subscription: u32,
    /// `group/version/Kind` (`v1/Kind` for the core group).
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    /// `added`, `updated`, `deleted`, `resync`, `requeue` or `synced`.
    pub delta: String,
    pub attempts: u32,
    pub last_error: String,
    /// RFC 3339, UTC.
    pub first_failed: String,
    pub last_failed: String,
    /// Still retried (at the backoff cap): past its attempt budget or its
    /// cap, not given up. False for a permanent failure.
    #[serde(default)]
    pub parked: bool,
}

#[derive(Debug)]
struct Letter {
    record: DeadLetterRecord,
    item: Item,
    /// The informer its subscription pair reads: where a new version finds
    /// the pair again.
    spec: Option<InformerSpec>,
    at: SystemTime,
}

/// A dead letter taken for a new version.
#[derive(Debug)]
pub struct Taken {
    pub key: Key,
    pub item: Item,
    pub spec: Option<InformerSpec>,
    pub parked: bool,
}

/// One plugin's dead letters (all its versions).
#[derive(Debug, Default)]
pub struct DeadLetters {
    by_key: HashMap<Key, Letter>,
    /// Records dropped because the plugin had [`MAX_DEAD_LETTERS`].
    pub evicted: u64,
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

pub fn delta_name(d: DeltaType) -> &'static str {
    match d {
        DeltaType::Added => "added",
        DeltaType::Updated => "updated",
        DeltaType::Deleted => "deleted",
        DeltaType::Resync => "resync",
        DeltaType::Synced => "synced",
    }
}

/// A delta's name as logs and records show it (`requeue` for a requeue).
pub fn call_delta_name(d: &CallDelta) -> &'static str {
    if d.requeued {
        "requeue"
    } else {
        delta_name(d.dtype)
    }
}

impl DeadLetters {
    /// Records `item` as dead (or parked) with `error`.
    pub fn add(
        &mut self,
        plugin: &str,
        key: Key,
        item: Item,
        error: String,
        spec: Option<InformerSpec>,
        parked: bool,
    ) {
        let now = SystemTime::now();
        let gvk = &item.delta.kind;
        let kind = if gvk.group.is_empty() {
            format!("{}/{}", gvk.version, gvk.kind)
        } else {
            format!("{}/{}/{}", gvk.group, gvk.version, gvk.kind)
        };
        let record = DeadLetterRecord {
            plugin: plugin.to_owned(),
            subscription: key.0,
            kind,
            namespace: key.1.namespace.as_deref().map(str::to_owned),
            name: key.1.name.to_string(),
            delta: call_delta_name(&item.delta).to_owned(),
            attempts: item.attempts,
            last_error: error,
            first_failed: rfc3339(item.first_failed.unwrap_or(now)),
            last_failed: rfc3339(now),
            parked,
        };
        if self.by_key.len() >= MAX_DEAD_LETTERS
            && !self.by_key.contains_key(&key)
            && let Some(oldest) = self
                .by_key
                .iter()
                .min_by_key(|(_, l)| l.at)
                .map(|(k, _)| k.clone())
        {
            self.by_key.remove(&oldest);
            self.evicted += 1;
        }
        self.by_key.insert(
            key,
            Letter {
                record,
                item,
                spec,
                at: now,
            },
        );
    }

    /// A later delta of the object was handled: its dead letter is moot.
    pub fn resolve(&mut self, key: &Key) -> bool {
        !self.by_key.is_empty() && self.by_key.remove(key).is_some()
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// The records, oldest failure first.
    pub fn records(&self) -> Vec<DeadLetterRecord> {
        let mut letters: Vec<&Letter> = self.by_key.values().collect();
        letters.sort_by_key(|l| l.at);
        letters.iter().map(|l| l.record.clone()).collect()
    }

    /// Takes every dead letter, to hand to a new plugin version.
    pub fn take(&mut self) -> Vec<Taken> {
        let mut letters: Vec<(Key, Letter)> = self.by_key.drain().collect();
        letters.sort_by_key(|(_, l)| l.at);
        letters
            .into_iter()
            .map(|(key, l)| Taken {
                key,
                item: l.item,
                spec: l.spec,
                parked: l.record.parked,
            })
            .collect()
    }
}
