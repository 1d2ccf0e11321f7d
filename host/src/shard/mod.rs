//! Shards: splitting the objects among replicas so that more than one
//! replica acts at a time.
//!
//! An object belongs to one of `count` shards by a hash of its uid (or its
//! namespace), the way Kubernetes' server-side sharded list and watch
//! (KEP-5866) places it, so that moving the filter to the API server later
//! moves no object. Each shard is fenced by its own Lease
//! (`<lease>-shard-<i>`); a replica acts only for the objects of the shards
//! it holds.

mod hash;
mod range;

pub use hash::{ShardKey, fnv1a64};
pub use range::{MAX_SHARDS, ShardSet, bounds, selector, shard_of};

/// What a sharded replica's informers cache.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum ShardCache {
    /// Every object, whichever shard it is in: a plugin's cache reads may
    /// cross shards (the default).
    #[default]
    All,
    /// Only the objects of the shards this replica holds (and of one whose
    /// Lease renewal it missed, until another replica takes it): the API
    /// server is asked for them alone (`shardSelector`), and filtered on
    /// the replica too where it does not serve that. Re-listed whenever the
    /// shards held change. For plugins whose reads stay within the objects
    /// they are handed.
    Held,
}
