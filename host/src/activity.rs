//! Whether the host is idle: every delta an informer emitted has been
//! handled by every plugin it went to, and the work those calls left
//! behind (Events queued for recording) is done (`--until-idle`, tests).
//! Its own module because every end uses it: the informers count what they
//! emit, the dispatcher what it settles, the executor its queued Events,
//! and none should import another.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

/// Global counters that tell when every delta emitted has been handled
/// (`--until-idle`).
#[derive(Debug, Default)]
pub struct Activity {
    pub emitted: AtomicU64,
    pub settled: AtomicU64,
    /// Work a settled delta left behind: Events queued or being recorded.
    pub background: AtomicU64,
    pub changed: Notify,
}

impl Activity {
    pub fn emit(&self, n: u64) {
        self.emitted.fetch_add(n, Ordering::SeqCst);
    }

    pub fn settle(&self, n: u64) {
        self.settled.fetch_add(n, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    /// `n` more pieces of background work (before the delta that caused
    /// them settles, so the host is never idle in between).
    pub fn begin_background(&self, n: u64) {
        self.background.fetch_add(n, Ordering::SeqCst);
    }

    pub fn end_background(&self, n: u64) {
        self.background.fetch_sub(n, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    pub fn is_idle(&self) -> bool {
        self.settled.load(Ordering::SeqCst) >= self.emitted.load(Ordering::SeqCst)
            && self.background.load(Ordering::SeqCst) == 0
    }
}
