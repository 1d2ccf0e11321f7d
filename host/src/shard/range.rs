//! How `count` shards split the 64-bit hash space, and the API server's
//! `shardSelector` that asks for one shard's part.
//!
//! Shard `i` of `n` holds the hashes in `[ceil(i * 2^64 / n),
//! ceil((i + 1) * 2^64 / n))`: the KEP's half-open ranges, equal to a hash
//! or two. With these bounds the shard of a hash is `(hash * n) >> 64`, one
//! multiplication, and agrees with the ranges at every boundary (a floor
//! would not, when `n` is not a power of two).

use super::ShardKey;

/// The most shards a deployment may have: a replica's set of held shards
/// is one 64-bit mask.
pub const MAX_SHARDS: u32 = 64;

/// Which shard of `count` a hash falls in.
pub fn shard_of(hash: u64, count: u32) -> u32 {
    // count <= 64, so the product fits in 128 bits and the result in u32.
    ((u128::from(hash) * u128::from(count.max(1))) >> 64) as u32
}

/// Shard `index` of `count` as `[start, end)` over the hash space; `end`
/// is 2^64 for the last shard.
pub fn bounds(index: u32, count: u32) -> (u128, u128) {
    let edge = |i: u32| -> u128 {
        let n = u128::from(count.max(1));
        (u128::from(i) << 64).div_ceil(n)
    };
    (edge(index), edge(index + 1))
}

/// The `shardSelector` query parameter that asks the API server for shard
/// `index` of `count` (Kubernetes 1.36's alpha `ShardedListAndWatch`):
/// `shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')`.
pub fn selector(key: ShardKey, index: u32, count: u32) -> String {
    let (start, end) = bounds(index, count);
    format!(
        "shardRange({}, '0x{start:016x}', '0x{end:016x}')",
        key.field_path()
    )
}

/// The shards a replica holds: a mask over `count` shards, and how an
/// object is placed. `count` 0 is an unsharded deployment, where the one
/// replica that acts holds everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShardSet {
    pub count: u32,
    pub held: u64,
    pub key: ShardKey,
    /// Place an object by its controller owner's uid (`ShardKey::hash`).
    pub follow_owner: bool,
}

impl ShardSet {
    pub fn unsharded() -> Self {
        Self::default()
    }

    pub fn sharded(count: u32, key: ShardKey, follow_owner: bool) -> Self {
        Self {
            count: count.min(MAX_SHARDS),
            held: 0,
            key,
            follow_owner,
        }
    }

    /// Whether `obj` is this replica's to handle.
    pub fn owns_object(&self, obj: &crate::object::KObject) -> bool {
        self.shard_of_object(obj).is_none_or(|i| self.holds(i))
    }

    /// The shard `obj` is in; `None` unsharded.
    pub fn shard_of_object(&self, obj: &crate::object::KObject) -> Option<u32> {
        self.is_sharded()
            .then(|| shard_of(self.key.hash(obj, self.follow_owner), self.count))
    }

    /// How many shards this replica holds.
    pub fn held_count(&self) -> u32 {
        self.held.count_ones()
    }

    pub fn is_sharded(&self) -> bool {
        self.count > 0
    }

    pub fn holds(&self, index: u32) -> bool {
        index < 64 && self.held & (1 << index) != 0
    }

    /// Whether an object of `hash` is this replica's to handle.
    pub fn owns(&self, hash: u64) -> bool {
        !self.is_sharded() || self.holds(shard_of(hash, self.count))
    }

    /// The held shards' indexes, lowest first.
    pub fn indexes(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.count).filter(|i| self.holds(*i))
    }

    /// The `shardSelector` that asks the API server for every held shard's
    /// objects: one `shardRange()` per run of adjacent shards, joined by
    /// `||`; `None` when none is held (or unsharded).
    pub fn selector(&self) -> Option<String> {
        let mut runs: Vec<(u128, u128)> = Vec::new();
        for i in self.indexes() {
            let (start, end) = bounds(i, self.count);
            match runs.last_mut() {
                Some(last) if last.1 == start => last.1 = end,
                _ => runs.push((start, end)),
            }
        }
        let ranges: Vec<String> = runs
            .into_iter()
            .map(|(start, end)| {
                format!(
                    "shardRange({}, '0x{start:016x}', '0x{end:016x}')",
                    self.key.field_path()
                )
            })
            .collect();
        (!ranges.is_empty()).then(|| ranges.join(" || "))
    }

    pub fn with(mut self, index: u32, held: bool) -> Self {
        if index < self.count {
            if held {
                self.held |= 1 << index;
            } else {
                self.held &= !(1 << index);
            }
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ranges_are_the_keps_for_powers_of_two() {
        assert_eq!(
            selector(ShardKey::Uid, 0, 2),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
        );
        assert_eq!(
            selector(ShardKey::Uid, 1, 2),
            "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"
        );
        assert_eq!(
            selector(ShardKey::Namespace, 2, 4),
            "shardRange(object.metadata.namespace, '0x8000000000000000', '0xc000000000000000')"
        );
        assert_eq!(bounds(0, 1), (0, 1 << 64));
    }

    proptest! {
        #[test]
        fn every_hash_is_in_exactly_the_range_of_its_shard(hash: u64, count in 1u32..=MAX_SHARDS) {
            let i = shard_of(hash, count);
            prop_assert!(i < count);
            let (start, end) = bounds(i, count);
            prop_assert!(start <= u128::from(hash) && u128::from(hash) < end);
        }

        #[test]
        fn boundaries_belong_to_the_shard_they_start(index in 0u32..MAX_SHARDS, count in 1u32..=MAX_SHARDS) {
            prop_assume!(index < count);
            let (start, end) = bounds(index, count);
            prop_assert_eq!(shard_of(start as u64, count), index);
            prop_assert_eq!(shard_of((end - 1) as u64, count), index);
        }
    }

    #[test]
    fn the_ranges_tile_the_space_and_split_it_evenly() {
        for count in 1..=MAX_SHARDS {
            let mut next = 0u128;
            for i in 0..count {
                let (start, end) = bounds(i, count);
                assert_eq!(start, next, "{i}/{count}");
                let width = end - start;
                let even = (1u128 << 64) / u128::from(count);
                assert!(width == even || width == even + 1, "{i}/{count}: {width}");
                next = end;
            }
            assert_eq!(next, 1 << 64);
        }
    }

    #[test]
    fn a_set_owns_the_hashes_of_the_shards_it_holds() {
        let set = ShardSet::sharded(3, ShardKey::Uid, false).with(1, true);
        let (start, end) = bounds(1, 3);
        assert!(set.owns(start as u64));
        assert!(set.owns((end - 1) as u64));
        assert!(!set.owns((end) as u64));
        assert!(!set.owns(0));
        assert_eq!(set.indexes().collect::<Vec<_>>(), [1]);
        assert!(ShardSet::unsharded().owns(12345));
        assert!(
            !ShardSet::sharded(3, ShardKey::Uid, false).owns(0),
            "holding nothing owns nothing"
        );
        assert_eq!(set.with(1, false).held, 0);
        assert_eq!(set.with(7, true), set, "an index past the count is ignored");
    }

    #[test]
    fn a_sets_selector_joins_its_runs_of_adjacent_shards() {
        let set = ShardSet::sharded(4, ShardKey::Uid, false);
        assert_eq!(set.selector(), None, "nothing held");
        assert_eq!(ShardSet::unsharded().selector(), None);
        assert_eq!(
            set.with(1, true).selector().unwrap(),
            selector(ShardKey::Uid, 1, 4)
        );
        assert_eq!(
            set.with(1, true).with(2, true).selector().unwrap(),
            "shardRange(object.metadata.uid, '0x4000000000000000', '0xc000000000000000')"
        );
        assert_eq!(
            set.with(0, true).with(3, true).selector().unwrap(),
            format!(
                "{} || {}",
                selector(ShardKey::Uid, 0, 4),
                selector(ShardKey::Uid, 3, 4)
            )
        );
        assert_eq!(
            (0..4).fold(set, |s, i| s.with(i, true)).selector().unwrap(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x10000000000000000')"
        );
    }
}
