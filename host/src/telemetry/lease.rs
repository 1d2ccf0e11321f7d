//! Which replica leads, as this replica last read its Lease: what
//! `/readyz`'s text and the web view say, so an operator who lands on a
//! follower (a port-forward picks any Pod) sees that it is one and which
//! replica leads. [`LeaderFlag`] holds it with whether this replica leads
//! (the `kubewasm_leader` gauge) and, sharded, which shards it holds.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde::Serialize;

/// The Lease as this replica last read or wrote it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseView {
    /// `namespace/name` of the Lease.
    pub lease: String,
    /// This replica's holder identity (`<pod>_<suffix>`).
    pub identity: String,
    /// Whether this replica leads now.
    pub leading: bool,
    /// The holder the Lease names, if any (none while it is free).
    pub holder: Option<String>,
    /// When the holder acquired it (RFC 3339).
    pub since: Option<String>,
    /// How many times it changed hands.
    pub transitions: Option<i32>,
}

impl LeaseView {
    /// One line for `/readyz` and logs.
    pub fn line(&self) -> String {
        let since = self
            .since
            .as_deref()
            .map(|s| format!(" since {s}"))
            .unwrap_or_default();
        match (&self.holder, self.leading) {
            (_, true) => format!(
                "leader: this replica ({}) leads{since}, Lease {}",
                self.identity, self.lease
            ),
            (Some(holder), false) => format!(
                "follower: {holder} leads{since} (Lease {}); this replica ({}) delivers nothing and executes nothing until it takes over",
                self.lease, self.identity
            ),
            (None, false) => format!(
                "follower: no replica holds Lease {} now; this replica ({}) is campaigning",
                self.lease, self.identity
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_names_the_leader() {
        let mut view = LeaseView {
            lease: "kubewasm/kubewasm".into(),
            identity: "kubewasm-b_2".into(),
            leading: false,
            holder: Some("kubewasm-a_1".into()),
            since: Some("2026-01-01T00:00:00Z".into()),
            transitions: Some(3),
        };
        let line = view.line();
        assert!(
            line.starts_with("follower: kubewasm-a_1 leads since 2026-01-01T00:00:00Z"),
            "{line}"
        );
        view.leading = true;
        assert!(
            view.line()
                .starts_with("leader: this replica (kubewasm-b_2) leads")
        );
        view.leading = false;
        view.holder = None;
        assert!(
            view.line()
                .contains("no replica holds Lease kubewasm/kubewasm")
        );
    }
}

/// Whether this replica leads (the `kubewasm_leader` gauge), and the
/// Lease as last read. True unless leader election says otherwise: without
/// election every replica acts.
#[derive(Debug, Clone)]
pub struct LeaderFlag {
    leading: Arc<AtomicBool>,
    lease: Arc<parking_lot::RwLock<Option<LeaseView>>>,
    /// Sharded (`run --shards N`): N, and the mask of the shards held.
    shards: Arc<parking_lot::RwLock<(u32, u64)>>,
    /// Deltas queued for plugins, per shard.
    shard_deltas: Arc<[AtomicU64; 64]>,
}

impl Default for LeaderFlag {
    fn default() -> Self {
        Self {
            leading: Arc::new(AtomicBool::new(true)),
            lease: Arc::default(),
            shards: Arc::default(),
            shard_deltas: Arc::new(std::array::from_fn(|_| AtomicU64::new(0))),
        }
    }
}

impl LeaderFlag {
    pub fn set(&self, leading: bool) {
        self.leading.store(leading, Ordering::Relaxed);
    }

    pub fn is_leader(&self) -> bool {
        self.leading.load(Ordering::Relaxed)
    }

    /// Records the shards this replica acts for: `held` is a mask over
    /// `count` shards (0 shards: unsharded).
    pub fn set_shards(&self, count: u32, held: u64) {
        *self.shards.write() = (count, held);
    }

    /// `(count, held mask)`; count 0 when unsharded.
    pub fn shards(&self) -> (u32, u64) {
        *self.shards.read()
    }

    /// One delta of shard `shard` queued for a plugin.
    pub fn count_shard_delta(&self, shard: u32) {
        if let Some(c) = self.shard_deltas.get(shard as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn shard_deltas(&self, shard: u32) -> u64 {
        self.shard_deltas
            .get(shard as usize)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Records the Lease as the elector last read or wrote it.
    pub fn observe(&self, view: LeaseView) {
        *self.lease.write() = Some(view);
    }

    /// The Lease as last observed, with `leading` as of now; `None`
    /// without leader election.
    pub fn lease(&self) -> Option<LeaseView> {
        let mut view = self.lease.read().clone()?;
        view.leading = self.is_leader();
        Some(view)
    }
}
