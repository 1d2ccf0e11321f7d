//! Leader election on a `coordination.k8s.io/v1` Lease, and the leadership
//! gate the dispatcher and the executor read.
//!
//! Followers keep their informers synced and their plugins loaded, but
//! deliver nothing and execute nothing. Each time this replica becomes
//! leader a new *term* starts: every plugin is resubscribed (the cache is
//! replayed to it as initial deltas, the path a hot swap takes) and only
//! deliveries of the current term reach it. Losing the lease, or failing to
//! renew it within the renew deadline, closes the gate at once: queued
//! deltas are dropped and actions are refused, before the lease could pass
//! to another replica (the renew deadline is shorter than the lease).

pub mod elector;
pub mod members;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::shard::{MAX_SHARDS, ShardSet};

pub use elector::{Elector, KubeLeases, LeaseBackend, LeaseError, ShardBalance};
pub use members::{FairShare, KubeMembers, Members};

/// One moment of leadership: whether this replica may act, in which term
/// (incremented on every gain, and on every change of the shards held
/// while acting), and for which shards' objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaderState {
    pub leading: bool,
    pub term: u64,
    /// Unsharded (the default): every object is the leader's.
    pub shards: ShardSet,
}

impl LeaderState {
    /// Whether this replica writes what is the host's as a whole (the
    /// Plugin objects' status and Events): the leader, or, sharded, the
    /// holder of shard 0, so that one replica writes it, never several.
    pub fn coordinates(&self) -> bool {
        self.leading && (!self.shards.is_sharded() || self.shards.holds(0))
    }
}

/// The leadership gate, shared by the elector (which moves it) and the
/// dispatcher, the executor and metrics (which read it).
#[derive(Debug, Clone)]
pub struct Leadership {
    tx: Arc<watch::Sender<LeaderState>>,
    /// Per shard, since when this replica has held it without another
    /// holder in between (see [`Holding`]).
    since: Arc<parking_lot::Mutex<Holding>>,
    /// How far the replica that handed over a Lease just taken had
    /// followed the API server, per informer (see
    /// [`expect_handover`](Self::expect_handover)).
    handover: Arc<parking_lot::Mutex<HandoverMarks>>,
}

/// Per informer (its spec as displayed), a resourceVersion.
pub type HandoverMarks = std::collections::BTreeMap<String, u64>;

/// Per shard, the term since which this replica has held it with no other
/// holder in between (meaningful while held or suspended): a delete queued
/// in an earlier term of a shard held since then still belongs to this
/// replica. A shard is *suspended* when its renewals missed the renew
/// deadline: the gate is closed for it (fencing by time), but no other
/// replica has been seen to hold it, so if this replica renews the same
/// Lease record again (still its holder, same acquire time) nobody acted
/// in between and the deletes it set aside go on.
#[derive(Debug)]
struct Holding {
    since: [u64; MAX_SHARDS as usize],
    suspended: u64,
    /// Unsharded, the same for the one Lease: the term since which it has
    /// been held with no other holder in between, and whether it is
    /// suspended.
    whole_since: u64,
    whole_suspended: bool,
}

impl Default for Holding {
    fn default() -> Self {
        Self {
            since: [0; MAX_SHARDS as usize],
            suspended: 0,
            whole_since: 0,
            whole_suspended: false,
        }
    }
}

impl Leadership {
    /// Always leading (no election: `--leader-elect=false`).
    pub fn always() -> Self {
        Self::with(LeaderState {
            leading: true,
            term: 0,
            shards: ShardSet::unsharded(),
        })
    }

    /// A follower until an elector makes it lead.
    pub fn follower() -> Self {
        Self::with(LeaderState::default())
    }

    /// A replica of a sharded deployment, holding no shard yet.
    pub fn sharded(shards: ShardSet) -> Self {
        Self::with(LeaderState {
            shards: ShardSet { held: 0, ..shards },
            ..LeaderState::default()
        })
    }

    fn with(state: LeaderState) -> Self {
        Self {
            tx: Arc::new(watch::channel(state).0),
            since: Arc::new(parking_lot::Mutex::new(Holding::default())),
            handover: Arc::default(),
        }
    }

    /// The term since which shard `index` has been held without a break;
    /// `None` when it is not held now (or unsharded).
    pub fn held_since(&self, index: u32) -> Option<u64> {
        // The state first, then `since`, never both at once (hold takes
        // them in the other order).
        let state = self.state();
        if !(state.leading && state.shards.is_sharded() && state.shards.holds(index)) {
            return None;
        }
        self.since.lock().since.get(index as usize).copied()
    }

    /// The term since which suspended shard `index` had been held when its
    /// renewals missed the deadline; `None` unless it is suspended (not
    /// held now, and no other holder seen since).
    pub fn suspended_since(&self, index: u32) -> Option<u64> {
        let state = self.state();
        if !state.shards.is_sharded() || state.shards.holds(index) {
            return None;
        }
        let h = self.since.lock();
        let bit = 1u64.checked_shl(index)?;
        (h.suspended & bit != 0)
            .then(|| h.since.get(index as usize).copied())
            .flatten()
    }

    /// A Lease about to be taken was handed over by a replica whose
    /// informers had followed the API server as far as `marks`: this
    /// replica replays only once its own have come as far, so a plugin is
    /// never handed an older state than the last holder handed it.
    pub fn expect_handover(&self, marks: HandoverMarks) {
        let mut h = self.handover.lock();
        for (spec, mark) in marks {
            let m = h.entry(spec).or_default();
            *m = (*m).max(mark);
        }
    }

    /// The marks to wait for before the next replay (taken: each once).
    pub fn take_handover(&self) -> HandoverMarks {
        std::mem::take(&mut *self.handover.lock())
    }

    /// The shards suspended now (see [`Holding`]), as a mask.
    pub fn suspended(&self) -> u64 {
        self.since.lock().suspended
    }

    pub fn state(&self) -> LeaderState {
        *self.tx.borrow()
    }

    pub fn is_leader(&self) -> bool {
        self.tx.borrow().leading
    }

    /// Changes of the state (for the `kubewasm_leader` gauge, the replay on
    /// gain, the drop on loss).
    pub fn subscribe(&self) -> watch::Receiver<LeaderState> {
        self.tx.subscribe()
    }

    /// Opens the gate for a new term; returns it.
    pub fn gain(&self) -> u64 {
        self.gain_whole(false)
    }

    /// Closes the gate (no-op when already closed).
    pub fn lose(&self) {
        self.lose_whole(false);
    }

    /// Unsharded, [`lose`](Self::lose) because the renewals missed the
    /// renew deadline: the Lease is suspended (see [`Holding`]).
    pub fn suspend_whole(&self) {
        self.lose_whole(true);
    }

    /// Unsharded, [`gain`](Self::gain) by renewing its own Lease record
    /// again: a suspended Lease keeps its `held_since`, so the deletes set
    /// aside go on.
    pub fn resume_whole(&self) -> u64 {
        self.gain_whole(true)
    }

    /// Unsharded, another holder was seen: what was set aside is not this
    /// replica's any more.
    pub fn forfeit_whole(&self) {
        self.since.lock().whole_suspended = false;
    }

    /// Unsharded, the term since which the Lease has been held with no
    /// other holder in between; `None` when not leading (or sharded).
    pub fn held_since_whole(&self) -> Option<u64> {
        let state = self.state();
        (state.leading && !state.shards.is_sharded()).then(|| self.since.lock().whole_since)
    }

    /// Unsharded, the term since which a suspended Lease had been held;
    /// `None` unless suspended.
    pub fn suspended_since_whole(&self) -> Option<u64> {
        let state = self.state();
        if state.leading || state.shards.is_sharded() {
            return None;
        }
        let h = self.since.lock();
        h.whole_suspended.then_some(h.whole_since)
    }

    fn gain_whole(&self, resume: bool) -> u64 {
        let mut term = 0;
        self.tx.send_modify(|s| {
            s.leading = true;
            s.term += 1;
            term = s.term;
            // Before the watch tells anyone of the new state.
            let mut h = self.since.lock();
            if !(resume && h.whole_suspended) {
                h.whole_since = s.term;
            }
            h.whole_suspended = false;
        });
        term
    }

    fn lose_whole(&self, suspend: bool) {
        self.tx.send_if_modified(|s| {
            let was = std::mem::replace(&mut s.leading, false);
            self.since.lock().whole_suspended = suspend && was;
            was
        });
    }

    /// Takes or gives up shard `index`. Any change while this replica still
    /// holds a shard starts a new term: what was queued under the old set
    /// is dropped, actions of the old term are refused, and the cache is
    /// replayed under the new set (the gain path). Giving up the last shard
    /// closes the gate. Returns the term after the change.
    pub fn hold(&self, index: u32, held: bool) -> u64 {
        self.change(index, held, Change::Plain)
    }

    /// Gives up shard `index` because its renewals missed the renew
    /// deadline, keeping what [`resume`](Self::resume) needs: as
    /// `hold(index, false)` otherwise.
    pub fn suspend(&self, index: u32) -> u64 {
        self.change(index, false, Change::Suspend)
    }

    /// Takes shard `index` again by renewing its own Lease record (no other
    /// holder in between): a suspended shard keeps its `held_since`, so
    /// what it set aside goes on; otherwise as `hold(index, true)`.
    pub fn resume(&self, index: u32) -> u64 {
        self.change(index, true, Change::Resume)
    }

    /// Another holder was seen (or the Lease released): a suspended
    /// shard's set-aside deletes are no longer this replica's.
    pub fn forfeit(&self, index: u32) {
        if let Some(bit) = 1u64.checked_shl(index) {
            self.since.lock().suspended &= !bit;
        }
    }

    fn change(&self, index: u32, held: bool, how: Change) -> u64 {
        let Some(bit) = 1u64.checked_shl(index).filter(|_| index < MAX_SHARDS) else {
            return self.state().term;
        };
        let mut term = 0;
        self.tx.send_if_modified(|s| {
            term = s.term;
            let next = s.shards.with(index, held);
            if next == s.shards {
                return false;
            }
            let gained = held && !s.shards.holds(index);
            s.shards = next;
            s.leading = next.held != 0;
            if s.leading {
                s.term += 1;
                term = s.term;
            }
            // Before the watch tells anyone of the new state.
            let mut h = self.since.lock();
            let resumed = how == Change::Resume && h.suspended & bit != 0;
            if gained
                && !resumed
                && let Some(t) = h.since.get_mut(index as usize)
            {
                *t = s.term;
            }
            if how == Change::Suspend {
                h.suspended |= bit;
            } else {
                h.suspended &= !bit;
            }
            true
        });
        term
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Plain,
    Suspend,
    Resume,
}

/// Durations and names of the election (client-go's defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionOptions {
    /// Lease holder identity: `<Pod name>_<suffix>` (unique per process).
    pub identity: String,
    pub lease_name: String,
    pub namespace: String,
    /// How long followers wait after the last renewal they saw.
    pub lease_duration: Duration,
    /// How long the leader keeps acting without a successful renewal.
    pub renew_deadline: Duration,
    /// How often the leader renews and a follower tries to acquire.
    pub retry_period: Duration,
    /// Sharded: one Lease per shard (`<lease_name>-shard-<i>`) instead of
    /// one for everything.
    pub shards: Option<ShardOptions>,
}

/// How many shards and how objects are placed in them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardOptions {
    pub count: u32,
    pub key: crate::shard::ShardKey,
    pub follow_owner: bool,
    pub cache: crate::shard::ShardCache,
}

impl ShardOptions {
    /// The set of a replica holding none of them yet.
    pub fn set(&self) -> ShardSet {
        ShardSet::sharded(self.count, self.key, self.follow_owner)
    }
}

pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);
pub const DEFAULT_LEASE_NAME: &str = "kubewasm";

/// A bad combination of election durations; names the flags.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElectionConfigError {
    #[error(
        "--leader-elect-renew-deadline ({renew:?}) must be shorter than --leader-elect-lease-duration ({lease:?}): the leader stops acting at the renew deadline, before a follower may take the lease"
    )]
    RenewNotBeforeLease { renew: Duration, lease: Duration },
    #[error(
        "--leader-elect-retry-period ({retry:?}) must be shorter than --leader-elect-renew-deadline ({renew:?}): the leader needs at least one renewal attempt per deadline"
    )]
    RetryNotBeforeRenew { retry: Duration, renew: Duration },
    #[error(
        "--leader-elect-lease-duration ({0:?}) must be at least 1s: a Lease counts whole seconds"
    )]
    LeaseTooShort(Duration),
    #[error("--leader-elect-retry-period must be greater than zero")]
    ZeroRetry,
    #[error("--leader-elect-lease-name and --leader-elect-namespace must not be empty")]
    EmptyName,
    #[error("--shards must be between 1 and {max} (found {0})", max = crate::shard::MAX_SHARDS)]
    ShardCount(u32),
    #[error(
        "--shard-cache=held cannot be combined with --shard-follow-owner: the API server selects a shard's objects by their own uid, not their owner's (drop one of them)"
    )]
    HeldCacheFollowsOwner,
}

impl ElectionOptions {
    /// Checks renew deadline < lease duration and retry period < renew
    /// deadline (client-go's rules).
    pub fn validate(&self) -> Result<(), ElectionConfigError> {
        if self.lease_duration < Duration::from_secs(1) {
            return Err(ElectionConfigError::LeaseTooShort(self.lease_duration));
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(ElectionConfigError::RenewNotBeforeLease {
                renew: self.renew_deadline,
                lease: self.lease_duration,
            });
        }
        if self.retry_period.is_zero() {
            return Err(ElectionConfigError::ZeroRetry);
        }
        if self.retry_period >= self.renew_deadline {
            return Err(ElectionConfigError::RetryNotBeforeRenew {
                retry: self.retry_period,
                renew: self.renew_deadline,
            });
        }
        if self.lease_name.is_empty() || self.namespace.is_empty() {
            return Err(ElectionConfigError::EmptyName);
        }
        if let Some(s) = &self.shards
            && !(1..=crate::shard::MAX_SHARDS).contains(&s.count)
        {
            return Err(ElectionConfigError::ShardCount(s.count));
        }
        if let Some(s) = &self.shards
            && s.cache == crate::shard::ShardCache::Held
            && s.follow_owner
        {
            return Err(ElectionConfigError::HeldCacheFollowsOwner);
        }
        Ok(())
    }

    /// The Lease of shard `index`.
    pub fn shard_lease_name(&self, index: u32) -> String {
        format!("{}-shard-{index}", self.lease_name)
    }

    /// `lease_duration` as the Lease's whole seconds, rounded up.
    pub fn lease_seconds(&self) -> i32 {
        let s = self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        i32::try_from(s).unwrap_or(i32::MAX).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(lease: u64, renew: u64, retry: u64) -> ElectionOptions {
        ElectionOptions {
            identity: "a".into(),
            lease_name: "kubewasm".into(),
            namespace: "default".into(),
            lease_duration: Duration::from_millis(lease),
            renew_deadline: Duration::from_millis(renew),
            retry_period: Duration::from_millis(retry),
            shards: None,
        }
    }

    #[test]
    fn durations_are_validated_naming_the_flag() {
        assert_eq!(opts(15_000, 10_000, 2_000).validate(), Ok(()));
        let e = opts(4_000, 4_000, 500).validate().unwrap_err().to_string();
        assert!(e.contains("--leader-elect-renew-deadline"), "{e}");
        let e = opts(4_000, 3_000, 3_000)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("--leader-elect-retry-period"), "{e}");
        assert!(matches!(
            opts(500, 300, 100).validate(),
            Err(ElectionConfigError::LeaseTooShort(_))
        ));
        assert_eq!(opts(4_500, 3_000, 500).lease_seconds(), 5);
    }

    #[test]
    fn terms_advance_on_gain_and_loss_is_idempotent() {
        let l = Leadership::follower();
        let mut rx = l.subscribe();
        assert!(!l.is_leader());
        assert_eq!(l.gain(), 1);
        assert!(rx.has_changed().unwrap());
        rx.borrow_and_update();
        l.lose();
        assert!(rx.has_changed().unwrap());
        rx.borrow_and_update();
        l.lose();
        assert!(!rx.has_changed().unwrap());
        assert_eq!(
            l.gain(),
            2,
            "a regained lease starts a new term (a new replay)"
        );
        assert_eq!(Leadership::always().state().term, 0);
    }

    #[test]
    fn every_change_of_the_shards_held_while_acting_is_a_new_term() {
        use crate::shard::ShardKey;
        let l = Leadership::sharded(ShardSet::sharded(3, ShardKey::Uid, false));
        assert!(!l.is_leader());
        assert_eq!(l.hold(1, true), 1);
        assert!(l.is_leader());
        assert_eq!(l.hold(1, true), 1, "holding it again changes nothing");
        assert_eq!(l.hold(2, true), 2, "a second shard: a replay under both");
        assert_eq!(l.state().shards.indexes().collect::<Vec<_>>(), [1, 2]);
        assert_eq!(l.hold(1, false), 3, "one given up, one kept: a new term");
        assert!(l.is_leader());
        let term = l.hold(2, false);
        assert!(!l.is_leader(), "the last one given up closes the gate");
        assert_eq!(term, 3);
        assert_eq!(l.hold(0, true), 4);
        assert_eq!(l.hold(5, true), 4, "past the count: ignored");
        assert!(
            l.state().coordinates(),
            "shard 0's holder writes the host's status"
        );
        l.hold(1, true);
        l.hold(0, false);
        assert!(l.is_leader() && !l.state().coordinates());
        assert!(Leadership::always().state().coordinates());
    }
}
