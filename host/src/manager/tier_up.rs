//! Tier-up: a plugin version served by the fast compile tier (see
//! [`crate::runtime::tier`]) gets its optimized code compiled in the
//! background (in the compiler child, at the lowest CPU priority, one
//! plugin at a time) and swapped in through the ordinary hot swap, so
//! nothing is lost across it; the compile cache keeps the optimized
//! artifact (and drops the fast one), so the next start maps optimized code
//! directly. If the plugin is replaced or unloaded first, the tier-up is
//! abandoned (its child killed); if the optimized compile fails, the fast
//! tier keeps serving.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Load, PluginHost, PluginVersion};
use crate::runtime::{Content, Manifest, Prepared};
use crate::telemetry::Metrics;

/// The tier-ups under way.
#[derive(Debug)]
pub(super) struct TierUps {
    /// Each plugin's pending tier-up (with an id, to tell it from a later
    /// one).
    pending: parking_lot::Mutex<HashMap<String, (u64, CancellationToken)>>,
    next: std::sync::atomic::AtomicU64,
    /// One optimized compile at a time: Cranelift takes hundreds of MB and
    /// every core it gets for a JavaScript or Python component, and the
    /// plugins wait for nothing meanwhile.
    slot: Arc<Semaphore>,
    /// The tier-up tasks, awaited at shutdown.
    tasks: TaskTracker,
}

impl Default for TierUps {
    fn default() -> Self {
        Self {
            pending: parking_lot::Mutex::default(),
            next: std::sync::atomic::AtomicU64::new(0),
            slot: Arc::new(Semaphore::new(1)),
            tasks: TaskTracker::new(),
        }
    }
}

impl TierUps {
    /// Registers a tier-up of `name` (cancelling any earlier one); returns
    /// its id and token.
    fn begin(&self, name: &str) -> (u64, CancellationToken) {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let token = CancellationToken::new();
        if let Some((_, old)) = self
            .pending
            .lock()
            .insert(name.to_owned(), (id, token.clone()))
        {
            old.cancel();
        }
        (id, token)
    }

    /// Forgets tier-up `id` of `name` if it is still the pending one.
    fn end(&self, name: &str, id: u64) {
        let mut pending = self.pending.lock();
        if pending.get(name).is_some_and(|(i, _)| *i == id) {
            pending.remove(name);
        }
    }

    /// Abandons `name`'s tier-up, if any (replaced or unloaded).
    pub(super) fn cancel(&self, name: &str) {
        if let Some((_, token)) = self.pending.lock().remove(name) {
            token.cancel();
        }
    }

    /// Abandons every tier-up and waits for their tasks (shutting down):
    /// a compile is dropped, which kills its child; a swap already under
    /// way finishes.
    pub(super) async fn stop(&self) {
        for (_, (_, token)) in self.pending.lock().drain() {
            token.cancel();
        }
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Whether a tier-up of `name` is pending.
    pub(super) fn is_pending(&self, name: &str) -> bool {
        self.pending.lock().contains_key(name)
    }
}

impl PluginHost {
    /// Compiles the optimized code of `fast` (a fast-tier version of plugin
    /// `name`, loaded from `content` and `manifest`) in the background and
    /// swaps it in if `fast` still serves then.
    pub(super) fn spawn_tier_up(
        self: &Arc<Self>,
        name: &str,
        fast: &Arc<PluginVersion>,
        content: Content,
        manifest: Manifest,
    ) {
        let (id, cancel) = self.tier_ups.begin(name);
        let (host, fast) = (Arc::downgrade(self), Arc::downgrade(fast));
        let (runtime, slot) = (self.runtime.clone(), self.tier_ups.slot.clone());
        let name = name.to_owned();
        tracing::info!(
            plugin = %name,
            tier = "fast",
            "fast-tier code serves the plugin; compiling its optimized code in the background"
        );
        self.tier_ups.tasks.spawn(async move {
            let compile = async {
                // Never closed.
                let _slot = slot.acquire_owned().await.ok();
                let started = Instant::now();
                let prepared = runtime.prepare_optimized(&name, content, manifest).await;
                (prepared, started.elapsed())
            };
            // Cancelling drops the compile, which kills its child.
            let (prepared, compile_time) = tokio::select! {
                done = compile => done,
                () = cancel.cancelled() => {
                    tracing::debug!(plugin = %name, "tier-up abandoned: the plugin was replaced or unloaded");
                    return;
                }
            };
            let Some(host) = host.upgrade() else {
                return;
            };
            match prepared {
                Ok(prepared) => {
                    host.swap_to_optimized(&name, &fast, prepared, compile_time)
                        .await;
                }
                Err(e) if e.is_cancelled() => {}
                Err(e) => {
                    tracing::warn!(plugin = %name, error = %e, "cannot compile the plugin's optimized code; the fast tier keeps serving it");
                }
            }
            host.tier_ups.end(&name, id);
        });
    }

    /// Swaps `prepared` (optimized code) in for `fast` if `fast` still
    /// serves plugin `name`.
    async fn swap_to_optimized(
        &self,
        name: &str,
        fast: &Weak<PluginVersion>,
        prepared: Prepared,
        compile_time: Duration,
    ) {
        let swap = self.swap_lock(name);
        let _swapping = swap.lock().await;
        let serving = self.plugins.lock().await.get(name).cloned();
        if !serving.is_some_and(|v| std::ptr::eq(Arc::as_ptr(&v), fast.as_ptr())) {
            tracing::debug!(
                plugin = name,
                "the plugin was replaced or unloaded while its optimized code compiled; dropped"
            );
            return;
        }
        let digest = prepared.digest.clone();
        match self.swap_in(name, Load::Prepared(Arc::new(prepared))).await {
            Ok(version) => {
                self.runtime.forget_fast_artifact(&digest);
                TieredUp {
                    plugin: name,
                    version: version.version(),
                    compile_time,
                }
                .emit(self.telemetry.metrics());
            }
            Err(e) => {
                tracing::warn!(plugin = name, error = %e, "the plugin's optimized code did not start; the fast tier keeps serving it");
            }
        }
    }

    /// Whether plugin `name` has a tier-up under way (its fast-tier version
    /// serves while its optimized code compiles).
    pub fn tier_up_pending(&self, name: &str) -> bool {
        self.tier_ups.is_pending(name)
    }
}

/// A fast-tier version was replaced by its optimized code (the tier-up's
/// telemetry event, beside it).
#[derive(Debug)]
struct TieredUp<'a> {
    plugin: &'a str,
    version: &'a str,
    /// The background compile's wall time (at nice 19).
    compile_time: Duration,
}

impl TieredUp<'_> {
    fn emit(self, metrics: &Metrics) {
        tracing::info!(
            plugin = self.plugin,
            version = self.version,
            compile_ms = self.compile_time.as_millis() as u64,
            tier = "optimized",
            "plugin tiered up: its optimized code serves now"
        );
        metrics.plugin_tiered_up(self.plugin);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_tier_up_cancels_the_earlier_one_which_cannot_forget_it() {
        let t = TierUps::default();
        let (first, first_token) = t.begin("p");
        let (second, second_token) = t.begin("p");
        assert!(first_token.is_cancelled() && !second_token.is_cancelled());
        t.end("p", first);
        assert!(t.is_pending("p"), "the earlier one ended the later one");
        t.end("p", second);
        assert!(!t.is_pending("p"));
    }

    #[tokio::test]
    async fn cancel_and_stop_end_pending_tier_ups_and_stop_waits_for_their_tasks() {
        let t = TierUps::default();
        let (_, a) = t.begin("a");
        let (_, b) = t.begin("b");
        t.cancel("a");
        assert!(a.is_cancelled() && !b.is_cancelled() && !t.is_pending("a"));
        t.cancel("missing");
        let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (token, flag) = (b.clone(), ended.clone());
        t.tasks.spawn(async move {
            token.cancelled().await;
            tokio::task::yield_now().await;
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        t.stop().await;
        assert!(b.is_cancelled() && !t.is_pending("b"));
        assert!(
            ended.load(std::sync::atomic::Ordering::SeqCst),
            "stop returned before the tier-up task ended"
        );
    }
}
