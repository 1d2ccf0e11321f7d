//! The objects an informer could not decode, as they stand now: what the
//! `kubewasm_informer_undecodable_objects` gauge counts and the web view
//! names. An entry goes when its object decodes again, is deleted, or is
//! missing from (or decodes in) the next list.

use std::collections::BTreeMap;

use prometheus_client::metrics::gauge::Gauge;
use serde::Serialize;

use super::Undecodable;
use crate::object::ObjectKey;

/// One object an informer could not decode, as the web view shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UndecodableObject {
    /// `namespace/name` (or `name`); `None` when even that is unreadable.
    pub object: Option<String>,
    /// Why it could not be decoded.
    pub error: String,
}

/// The informer's undecodable objects, keeping its share of the per-kind
/// gauge equal to how many it holds (several informers of a kind add up).
#[derive(Debug)]
pub(super) struct Undecodables {
    by_key: BTreeMap<ObjectKey, String>,
    /// Items of the last complete list whose name was unreadable too:
    /// nothing tells them apart, so each list replaces them.
    nameless: Vec<String>,
    gauge: Gauge,
}

impl Undecodables {
    pub(super) fn new(gauge: Gauge) -> Self {
        Self {
            by_key: BTreeMap::new(),
            nameless: Vec::new(),
            gauge,
        }
    }

    fn len(&self) -> usize {
        self.by_key.len() + self.nameless.len()
    }

    /// Runs `change`, then moves the gauge by how much the count changed.
    fn counted(&mut self, change: impl FnOnce(&mut Self)) {
        let before = self.len();
        change(self);
        let after = self.len();
        if after > before {
            self.gauge.inc_by(to_i64(after - before));
        } else if before > after {
            self.gauge.dec_by(to_i64(before - after));
        }
    }

    /// An object of a watch event that could not be decoded.
    pub(super) fn insert(&mut self, key: ObjectKey, error: String) {
        self.counted(|s| {
            s.by_key.insert(key, error);
        });
    }

    /// The object decoded, or went. `key` is built only when some object
    /// is listed: every applied object passes here.
    pub(super) fn remove(&mut self, key: impl FnOnce() -> ObjectKey) {
        if self.by_key.is_empty() {
            return;
        }
        let key = key();
        if self.by_key.contains_key(&key) {
            self.counted(|s| {
                s.by_key.remove(&key);
            });
        }
    }

    /// A complete list's undecodable items, instead of what was known: an
    /// object the list decoded or did not return is not undecodable now.
    pub(super) fn replace(&mut self, failed: &[Undecodable]) {
        self.counted(|s| {
            s.by_key.clear();
            s.nameless.clear();
            for u in failed {
                match &u.key {
                    Some(key) => {
                        s.by_key.insert(key.clone(), u.error.to_string());
                    }
                    None => s.nameless.push(u.error.to_string()),
                }
            }
        });
    }

    /// Forgets everything (the informer stopped).
    pub(super) fn clear(&mut self) {
        self.counted(|s| {
            s.by_key.clear();
            s.nameless.clear();
        });
    }

    /// Named objects in key order, then the nameless ones.
    pub(super) fn list(&self) -> Vec<UndecodableObject> {
        self.by_key
            .iter()
            .map(|(key, error)| UndecodableObject {
                object: Some(key.to_string()),
                error: error.clone(),
            })
            .chain(self.nameless.iter().map(|error| UndecodableObject {
                object: None,
                error: error.clone(),
            }))
            .collect()
    }
}

impl Drop for Undecodables {
    /// An informer that goes takes its share of the gauge with it.
    fn drop(&mut self) {
        self.clear();
    }
}

fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
