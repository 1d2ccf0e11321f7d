//! What an informer hands its subscribers: one change of one object.

use crate::object::ObjectHandle;
use crate::telemetry::InformerCounters;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeltaType {
    Added,
    Updated,
    Deleted,
    Resync,
    Synced,
}

impl DeltaType {
    /// This type's slot in the metrics' `type` labels
    /// ([`crate::telemetry::metrics::DELTA_TYPES`]).
    pub fn metric_slot(self) -> usize {
        match self {
            DeltaType::Added => 0,
            DeltaType::Updated => 1,
            DeltaType::Deleted => 2,
            DeltaType::Resync => 3,
            DeltaType::Synced => 4,
        }
    }
}

impl InformerCounters {
    /// Counts one delta produced by the informer.
    #[inline]
    pub fn delta(&self, dtype: DeltaType) {
        self.delta_at(dtype.metric_slot());
    }
}

/// One change of one informer.
#[derive(Debug, Clone)]
pub struct Delta {
    pub dtype: DeltaType,
    /// New state (updates), last known state (deletes); `None` for `Synced`.
    pub object: Option<ObjectHandle>,
    pub old: Option<ObjectHandle>,
    pub initial: bool,
    pub final_state_unknown: bool,
    /// When the informer received it (for delivery latency).
    pub received: std::time::Instant,
    /// The informer's sequence number of this delta: every live delta gets
    /// the next one; the replay a new subscriber receives carries the
    /// number reached when it subscribed (its cut). A plugin swap uses it
    /// to tell what the old version saw before the new one subscribed.
    pub seq: u64,
}

impl Delta {
    pub(super) fn new(dtype: DeltaType, object: ObjectHandle) -> Self {
        Self {
            dtype,
            object: Some(object),
            old: None,
            initial: false,
            final_state_unknown: false,
            received: std::time::Instant::now(),
            seq: 0,
        }
    }

    pub fn synced() -> Self {
        Self {
            dtype: DeltaType::Synced,
            object: None,
            old: None,
            initial: false,
            final_state_unknown: false,
            received: std::time::Instant::now(),
            seq: 0,
        }
    }
}
