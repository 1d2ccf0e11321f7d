//! The live feed of the web view (`--ui`): one record per delta a plugin
//! handled (or failed) and per action it emitted.
//!
//! With no page open the dispatcher and the executor pay one relaxed load
//! per delta ([`Feed::admit`]) and build nothing. With pages open, at most
//! [`BUDGET`] records are built per [`WINDOW`] (2,000 a second, for every
//! page together); past that a delta costs two atomic adds and is counted
//! as not sampled, so an open page costs the hot path a bounded amount
//! whatever the rate. Records go to a broadcast channel; each page's
//! stream filters them (plugin, kind, namespace) and keeps only the newest
//! [`Window::cap`] rows per flush, counting the rest as dropped, so a page
//! at 5k deltas/s receives at most ten small batches a second.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::broadcast;

/// Records buffered per page between its reads; a page that falls further
/// behind loses the oldest (counted as dropped).
const CHANNEL: usize = 4096;

/// Records built per window at most, for all pages together.
pub const BUDGET: u64 = 200;
/// The sampling window.
pub const WINDOW: Duration = Duration::from_millis(100);

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

/// The feed: a subscriber count read on the hot path, the source-side
/// budget, and the channel.
#[derive(Debug)]
pub struct Feed {
    watchers: Arc<AtomicUsize>,
    tx: broadcast::Sender<Arc<FeedRecord>>,
    started: Instant,
    /// The current window's number, and records admitted in it.
    window: AtomicU64,
    admitted: AtomicU64,
    /// Records not built because the window's budget was spent.
    unsampled: Arc<AtomicU64>,
}

impl Default for Feed {
    fn default() -> Self {
        Self {
            watchers: Arc::new(AtomicUsize::new(0)),
            tx: broadcast::channel(CHANNEL).0,
            started: Instant::now(),
            window: AtomicU64::new(0),
            admitted: AtomicU64::new(0),
            unsampled: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl Feed {
    /// Whether any page watches.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.watchers.load(Ordering::Relaxed) > 0
    }

    /// Whether to build a record now: a page watches and this window's
    /// budget is not spent. Check it before building one; with no page
    /// open it is one relaxed load.
    #[inline]
    pub fn admit(&self) -> bool {
        self.enabled() && self.within_budget()
    }

    fn within_budget(&self) -> bool {
        let window = (self.started.elapsed().as_millis() / WINDOW.as_millis()) as u64;
        // Racy at a window's edge by design: a few records more or less.
        if self.window.load(Ordering::Relaxed) != window {
            self.window.store(window, Ordering::Relaxed);
            self.admitted.store(0, Ordering::Relaxed);
        }
        if self.admitted.fetch_add(1, Ordering::Relaxed) < BUDGET {
            return true;
        }
        self.unsampled.fetch_add(1, Ordering::Relaxed);
        false
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
            unsampled: self.unsampled.clone(),
            seen_unsampled: self.unsampled.load(Ordering::Relaxed),
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
    unsampled: Arc<AtomicU64>,
    seen_unsampled: u64,
}

impl FeedSubscription {
    /// Records not built at the source (over the budget) since the last
    /// call: of every plugin, kind and namespace, not only this page's.
    pub fn take_unsampled(&mut self) -> u64 {
        let now = self.unsampled.load(Ordering::Relaxed);
        let n = now.saturating_sub(self.seen_unsampled);
        self.seen_unsampled = now;
        n
    }
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
    /// Records of any plugin not built at the source since the last batch
    /// (the feed's budget was spent).
    pub unsampled: u64,
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

    /// The batch to send, if anything happened since the last one;
    /// `unsampled` is what the source left out meanwhile.
    pub fn flush(&mut self, unsampled: u64) -> Option<Batch> {
        if self.matched == 0 && unsampled == 0 {
            return None;
        }
        let batch = Batch {
            rows: self.rows.drain(..).collect(),
            matched: self.matched,
            dropped: self.dropped,
            unsampled,
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
        assert!(w.flush(0).is_none());
        w.offer(Arc::new(rec("q", "ConfigMap", Some("a"), "other plugin")));
        w.offer(Arc::new(rec("p", "Secret", Some("a"), "other kind")));
        w.offer(Arc::new(rec("p", "ConfigMap", Some("b"), "other ns")));
        assert!(w.flush(0).is_none());
        for n in ["1", "2", "3"] {
            w.offer(Arc::new(rec("p", "ConfigMap", Some("a"), n)));
        }
        w.lost(4);
        let b = w.flush(0).unwrap();
        let names: Vec<&str> = b.rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["2", "3"]);
        assert_eq!((b.matched, b.dropped), (7, 5));
        assert!(w.flush(0).is_none());
        assert_eq!(w.flush(9).unwrap().unsampled, 9);
    }

    /// Past the window's budget nothing is built; what was left out is
    /// counted for the pages; with no page open nothing is admitted.
    #[test]
    fn the_source_builds_at_most_the_budget_per_window() {
        let feed = Feed::default();
        assert!(!feed.admit());
        let mut page = feed.subscribe();
        // Five budgets' worth of calls in far less than a window: the
        // budget binds (a window edge in between admits one budget more).
        let admitted = (0..BUDGET * 5).filter(|_| feed.admit()).count() as u64;
        let unsampled = page.take_unsampled();
        assert_eq!(admitted + unsampled, BUDGET * 5);
        assert!(unsampled > 0, "the budget never bound: {admitted} admitted");
        assert_eq!(page.take_unsampled(), 0);
        drop(page);
        assert!(!feed.admit());
    }
}
