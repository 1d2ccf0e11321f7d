//! The live feed of the web view (`--ui`): one record per delta a plugin
//! handled (or failed) and per action it emitted.
//!
//! With no page open the dispatcher and the executor pay one relaxed load
//! of [`Feed::enabled`] per delta and build nothing. With pages open,
//! records go to a broadcast channel; each page's stream filters them
//! (plugin, kind, namespace) and keeps only the newest [`Window::cap`]
//! rows per flush, counting the rest as dropped, so a page at 5k deltas/s
//! receives at most ten small batches a second.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::broadcast;

/// Records buffered per page between its reads; a page that falls further
/// behind loses the oldest (counted as dropped).
const CHANNEL: usize = 4096;

/// One row of the feed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FeedRecord {
    /// Unix time, milliseconds.
    pub t: u64,
    /// `delta` (a handler call) or `action` (a write the call emitted).
    pub row: &'static str,
    pub plugin: Arc<str>,
    /// The object's kind (`ConfigMap`).
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    /// The delta type (`added`, ...) or the action's verb (`patch`, ...).
    pub what: &'static str,
    /// Deltas: `ok`, `retry`, `dead`. Actions: `applied`, `dry_run`,
    /// `failed`, `conflict`, `fenced`.
    pub outcome: &'static str,
    /// The handler call, or the action with its retries, in microseconds.
    pub us: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl FeedRecord {
    /// Now, as [`FeedRecord::t`].
    pub fn now_ms() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }

    pub fn micros(d: Duration) -> u64 {
        u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
    }
}

/// The feed: a subscriber count read on the hot path, and the channel.
#[derive(Debug)]
pub struct Feed {
    watchers: Arc<AtomicUsize>,
    tx: broadcast::Sender<Arc<FeedRecord>>,
}

impl Default for Feed {
    fn default() -> Self {
        Self {
            watchers: Arc::new(AtomicUsize::new(0)),
            tx: broadcast::channel(CHANNEL).0,
        }
    }
}

impl Feed {
    /// Whether any page watches: check it before building a record.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.watchers.load(Ordering::Relaxed) > 0
    }

    /// Hands `record` to the pages open now.
    pub fn publish(&self, record: FeedRecord) {
        // No receiver left (a page closed in between): nothing to do.
        let _ = self.tx.send(Arc::new(record));
    }

    /// A page's subscription; counted until dropped.
    pub fn subscribe(&self) -> FeedSubscription {
        self.watchers.fetch_add(1, Ordering::Relaxed);
        FeedSubscription {
            rx: self.tx.subscribe(),
            watchers: self.watchers.clone(),
        }
    }

    /// Pages open now.
    pub fn watchers(&self) -> usize {
        self.watchers.load(Ordering::Relaxed)
    }
}

/// One page's end of the feed.
#[derive(Debug)]
pub struct FeedSubscription {
    pub rx: broadcast::Receiver<Arc<FeedRecord>>,
    watchers: Arc<AtomicUsize>,
}

impl Drop for FeedSubscription {
    fn drop(&mut self) {
        self.watchers.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Which rows a page wants; empty fields match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub plugin: Option<String>,
    /// Matched without regard to case (`configmap` finds `ConfigMap`).
    pub kind: Option<String>,
    pub namespace: Option<String>,
}

impl Filter {
    pub fn matches(&self, r: &FeedRecord) -> bool {
        self.plugin.as_deref().is_none_or(|p| p == &*r.plugin)
            && self
                .kind
                .as_deref()
                .is_none_or(|k| k.eq_ignore_ascii_case(&r.kind))
            && self
                .namespace
                .as_deref()
                .is_none_or(|n| Some(n) == r.namespace.as_deref())
    }
}

/// What a page receives per flush: the newest rows that matched, and
/// how many matched in all (the rest were dropped to keep the page light).
#[derive(Debug, Default, Serialize)]
pub struct Batch {
    pub rows: Vec<Arc<FeedRecord>>,
    pub matched: u64,
    pub dropped: u64,
}

/// A page's rows between two flushes.
#[derive(Debug)]
pub struct Window {
    filter: Filter,
    cap: usize,
    rows: VecDeque<Arc<FeedRecord>>,
    matched: u64,
    dropped: u64,
}

impl Window {
    pub fn new(filter: Filter, cap: usize) -> Self {
        Self {
            filter,
            cap: cap.max(1),
            rows: VecDeque::new(),
            matched: 0,
            dropped: 0,
        }
    }

    pub fn offer(&mut self, r: Arc<FeedRecord>) {
        if !self.filter.matches(&r) {
            return;
        }
        self.matched += 1;
        if self.rows.len() == self.cap {
            self.rows.pop_front();
            self.dropped += 1;
        }
        self.rows.push_back(r);
    }

    /// Rows the channel lost before this page read them (it lagged).
    pub fn lost(&mut self, n: u64) {
        self.matched += n;
        self.dropped += n;
    }

    /// The batch to send, if anything happened since the last one.
    pub fn flush(&mut self) -> Option<Batch> {
        if self.matched == 0 {
            return None;
        }
        let batch = Batch {
            rows: self.rows.drain(..).collect(),
            matched: self.matched,
            dropped: self.dropped,
        };
        self.matched = 0;
        self.dropped = 0;
        Some(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(plugin: &str, kind: &str, ns: Option<&str>, name: &str) -> FeedRecord {
        FeedRecord {
            t: 1,
            row: "delta",
            plugin: Arc::from(plugin),
            kind: kind.into(),
            namespace: ns.map(str::to_owned),
            name: name.into(),
            what: "added",
            outcome: "ok",
            us: 3,
            error: None,
        }
    }

    #[test]
    fn the_count_follows_subscriptions_and_only_pages_receive() {
        let feed = Feed::default();
        assert!(!feed.enabled());
        feed.publish(rec("p", "ConfigMap", None, "lost"));
        let mut a = feed.subscribe();
        let b = feed.subscribe();
        assert_eq!(feed.watchers(), 2);
        assert!(feed.enabled());
        feed.publish(rec("p", "ConfigMap", None, "seen"));
        assert_eq!(a.rx.try_recv().unwrap().name, "seen");
        drop(b);
        drop(a);
        assert!(!feed.enabled());
    }

    #[test]
    fn a_window_filters_keeps_the_newest_rows_and_counts_the_rest() {
        let mut w = Window::new(
            Filter {
                plugin: Some("p".into()),
                kind: Some("configmap".into()),
                namespace: Some("a".into()),
            },
            2,
        );
        assert!(w.flush().is_none());
        w.offer(Arc::new(rec("q", "ConfigMap", Some("a"), "other plugin")));
        w.offer(Arc::new(rec("p", "Secret", Some("a"), "other kind")));
        w.offer(Arc::new(rec("p", "ConfigMap", Some("b"), "other ns")));
        assert!(w.flush().is_none());
        for n in ["1", "2", "3"] {
            w.offer(Arc::new(rec("p", "ConfigMap", Some("a"), n)));
        }
        w.lost(4);
        let b = w.flush().unwrap();
        let names: Vec<&str> = b.rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["2", "3"]);
        assert_eq!((b.matched, b.dropped), (7, 5));
        assert!(w.flush().is_none());
    }
}
