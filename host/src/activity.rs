//! Whether the host is idle: every delta an informer emitted has been
//! handled by every plugin it went to (`--until-idle`, tests). Its own
//! module because both ends use it: the informers count what they emit,
//! the dispatcher what it settles, and neither should import the other.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

/// Global counters that tell when every delta emitted has been handled
/// (`--until-idle`).
#[derive(Debug, Default)]
pub struct Activity {
    pub emitted: AtomicU64,
    pub settled: AtomicU64,
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

    pub fn is_idle(&self) -> bool {
        self.settled.load(Ordering::SeqCst) >= self.emitted.load(Ordering::SeqCst)
    }
}
