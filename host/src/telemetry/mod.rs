//! Telemetry: log setup, Prometheus metrics, typed events, health and
//! readiness, the replica's identity, and the web view's feed; objects the
//! host shows are redacted with the handle's [`Redactor`]. A leaf: it
//! imports nothing of the data path, whose components define their events
//! beside themselves and are read at scrape time through
//! [`metrics::HostView`]; the listeners that serve all this are in
//! `admin/`.
//!
//! One [`Telemetry`] handle (cheap to clone) is shared by every part of a
//! running host. Every part takes it from its caller (there is no
//! `Default`): a part that built its own would count into a registry
//! nobody scrapes, and its series would silently be missing from
//! `/metrics`. Tests and benchmarks build theirs with [`Telemetry::new`].

pub mod events;
pub mod feed;
pub mod identity;
pub mod lease;
pub mod logging;
pub mod metrics;

use std::any::Any;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

pub use identity::Identity;
pub use lease::LeaseView;

use crate::redact::Redactor;
pub use metrics::{
    ActionCounters, CacheSample, HostView, InformerCounters, LeaderFlag, Metrics, PluginCounters,
    WireCounters,
};

struct Inner {
    metrics: Metrics,
    view: metrics::ViewSlot,
    leader: LeaderFlag,
    identity: Identity,
    feed: feed::Feed,
    /// What the entry layer's admin listeners read (the web view's
    /// source), kept here because they start before the host it reads.
    admin: RwLock<Option<Arc<dyn Any + Send + Sync>>>,
    redactor: RwLock<Redactor>,
    /// Core tasks that ended unexpectedly.
    dead: Mutex<Vec<String>>,
    /// What `/readyz` says besides readiness, by subject (a Plugin object
    /// that this replica cannot serve).
    notes: Mutex<std::collections::BTreeMap<String, String>>,
}

/// The shared telemetry handle of one host.
#[derive(Clone)]
pub struct Telemetry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("identity", &self.inner.identity)
            .finish_non_exhaustive()
    }
}

impl Telemetry {
    pub fn new(identity: Identity) -> Self {
        let view: metrics::ViewSlot = Arc::new(RwLock::new(None));
        let leader = LeaderFlag::default();
        Self {
            inner: Arc::new(Inner {
                metrics: Metrics::new(view.clone(), leader.clone()),
                view,
                leader,
                identity,
                feed: feed::Feed::default(),
                admin: RwLock::new(None),
                redactor: RwLock::new(Redactor::default()),
                dead: Mutex::new(Vec::new()),
                notes: Mutex::default(),
            }),
        }
    }

    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The `kubewasm_leader` flag: leader election sets it; 1 by default.
    pub fn leader(&self) -> &LeaderFlag {
        &self.inner.leader
    }

    pub fn identity(&self) -> &Identity {
        &self.inner.identity
    }

    /// Lets readiness and the scrape-time collector read the running host.
    pub fn attach(&self, view: Arc<dyn HostView>) {
        *self.inner.view.write() = Some(view);
    }

    /// Keeps what the admin listeners read (`admin::ui::attach`);
    /// telemetry does not know its type.
    pub fn attach_admin<T: Any + Send + Sync>(&self, value: T) {
        *self.inner.admin.write() = Some(Arc::new(value));
    }

    /// What [`Self::attach_admin`] kept, if it is a `T`.
    pub fn admin<T: Any + Send + Sync + Clone>(&self) -> Option<T> {
        self.inner
            .admin
            .read()
            .as_ref()
            .and_then(|v| v.downcast_ref::<T>())
            .cloned()
    }

    /// What hides sensitive fields of the objects the host shows (the
    /// web view; whatever else prints objects should use it too): Secrets
    /// by default.
    pub fn redactor(&self) -> Redactor {
        self.inner.redactor.read().clone()
    }

    /// Sets the redactor (the host config's `sensitiveFields`).
    pub fn set_redactor(&self, redactor: Redactor) {
        *self.inner.redactor.write() = redactor;
    }

    /// The web view's live feed of handled deltas and actions.
    pub fn feed(&self) -> &feed::Feed {
        &self.inner.feed
    }

    /// `Ok` when ready to serve: a host is attached, every informer has
    /// synced, every plugin file is loaded or reported broken. Otherwise
    /// what is not ready, one reason per entry.
    pub fn readiness(&self) -> Result<(), Vec<String>> {
        let view = self.inner.view.read().clone();
        let reasons = match view {
            None => vec!["starting: connecting to the cluster".to_owned()],
            Some(v) => v.not_ready(),
        };
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(reasons)
        }
    }

    /// Sets (or, with `None`, clears) what `/readyz`'s text says about
    /// `subject` without making the replica unready: a Plugin object it
    /// cannot serve says so there, while the others serve on.
    pub fn note(&self, subject: &str, text: Option<String>) {
        let mut notes = self.inner.notes.lock();
        match text {
            Some(t) => notes.insert(subject.to_owned(), t),
            None => notes.remove(subject),
        };
    }

    /// The note about `subject`, if any.
    pub fn notes_of(&self, subject: &str) -> Option<String> {
        self.inner.notes.lock().get(subject).cloned()
    }

    /// Every note, ordered by subject.
    pub fn notes(&self) -> Vec<String> {
        self.inner.notes.lock().values().cloned().collect()
    }

    /// `Ok` while every core task runs (or ended because it was asked to).
    pub fn liveness(&self) -> Result<(), Vec<String>> {
        let dead = self.inner.dead.lock();
        if dead.is_empty() {
            Ok(())
        } else {
            Err(dead.clone())
        }
    }

    /// A guard for a core task: call [`TaskGuard::done`] when it ends as
    /// asked, [`TaskGuard::failed`] when it ends by itself; a panic while
    /// it is held also counts. A failed task fails liveness for good. (A
    /// guard dropped without either, as when the runtime drops its tasks at
    /// exit, reports nothing.)
    pub fn task(&self, name: impl Into<String>) -> TaskGuard {
        TaskGuard {
            telemetry: self.clone(),
            name: Some(name.into()),
        }
    }

    fn task_died(&self, name: &str, why: &str, panicked: bool) {
        events::TaskDied {
            task: name,
            why,
            panicked,
        }
        .emit();
        self.inner.dead.lock().push(format!("{name}: {why}"));
    }
}

/// See [`Telemetry::task`].
#[derive(Debug)]
pub struct TaskGuard {
    telemetry: Telemetry,
    name: Option<String>,
}

impl TaskGuard {
    /// The task ended as asked (cancelled, or its work is over).
    pub fn done(mut self) {
        self.name = None;
    }

    /// The task ended by itself, which it never should.
    pub fn failed(mut self, why: &str) {
        if let Some(name) = self.name.take() {
            self.telemetry.task_died(&name, why, false);
        }
    }
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        if let Some(name) = self.name.take()
            && std::thread::panicking()
        {
            self.telemetry.task_died(&name, "panicked", true);
        }
    }
}

/// What a plugin version's dispatcher counts with.
#[derive(Debug, Clone)]
pub struct PluginTelemetry {
    pub counters: PluginCounters,
    pub telemetry: Telemetry,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_that_fails_or_panics_fails_liveness() {
        let t = Telemetry::new(Identity::new(None, None, None));
        assert!(t.liveness().is_ok());
        t.task("asked").done();
        drop(t.task("dropped with the runtime"));
        assert!(t.liveness().is_ok());
        t.task("informer pods").failed("watch stream ended");
        let t2 = t.clone();
        let joined = std::thread::spawn(move || {
            let _g = t2.task("worker of p");
            panic!("boom");
        })
        .join();
        assert!(joined.is_err());
        assert_eq!(
            t.liveness().unwrap_err(),
            ["informer pods: watch stream ended", "worker of p: panicked"]
        );
        assert_eq!(
            t.readiness().unwrap_err(),
            ["starting: connecting to the cluster"]
        );
    }
}
