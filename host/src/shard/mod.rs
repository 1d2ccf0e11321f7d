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
