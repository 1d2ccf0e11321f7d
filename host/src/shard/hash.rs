//! The 64-bit FNV-1a hash Kubernetes' server-side sharded list and watch
//! (KEP-5866, `shardRange()`) computes over an object's uid or namespace:
//! hashing the same bytes the same way means that the day the API server
//! filters for us, no object moves to another shard.

use crate::object::KObject;

const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a, 64 bits, over `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(OFFSET_BASIS, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

/// What an object's shard is decided by.
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
pub enum ShardKey {
    /// `metadata.uid`: objects spread evenly (the KEP's first key).
    #[default]
    Uid,
    /// `metadata.namespace`: a namespace's objects stay together, for
    /// plugins that reason about a namespace at a time. Cluster-scoped
    /// objects hash the empty namespace, so they all fall in one shard.
    Namespace,
}

impl ShardKey {
    /// The field path as the API server's `shardRange()` names it.
    pub fn field_path(self) -> &'static str {
        match self {
            Self::Uid => "object.metadata.uid",
            Self::Namespace => "object.metadata.namespace",
        }
    }

    /// The hash that places `obj`. With `follow_owner`, an object with a
    /// controller owner is placed by its owner's uid (so a ReplicaSet and
    /// its Pods are handled by one replica), as the sharding prior art
    /// does; it only applies to `Uid`.
    pub fn hash(self, obj: &KObject, follow_owner: bool) -> u64 {
        match self {
            Self::Uid => {
                let meta = obj.meta();
                let owner = follow_owner
                    .then(|| {
                        meta.owner_references
                            .iter()
                            .find(|o| o.controller == Some(true) && !o.uid.is_empty())
                    })
                    .flatten();
                fnv1a64(owner.map_or(meta.uid.as_bytes(), |o| o.uid.as_bytes()))
            }
            Self::Namespace => fnv1a64(obj.namespace().unwrap_or_default().as_bytes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_matches_the_reference_vectors() {
        // From the FNV reference (Fowler, Noll, Vo; draft-eastlake-fnv).
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    fn pod(uid: &str, ns: &str, owner: Option<&str>) -> KObject {
        let mut v = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": ns, "uid": uid}});
        if let Some(o) = owner {
            v["metadata"]["ownerReferences"] = serde_json::json!([
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "other", "controller": false},
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": o, "controller": true}]);
        }
        KObject::from_value(v, crate::object::StripOptions::default()).unwrap()
    }

    #[test]
    fn objects_hash_their_uid_their_namespace_or_their_controllers_uid() {
        let p = pod("u-1", "shop", Some("rs-uid"));
        assert_eq!(ShardKey::Uid.hash(&p, false), fnv1a64(b"u-1"));
        assert_eq!(ShardKey::Uid.hash(&p, true), fnv1a64(b"rs-uid"));
        assert_eq!(ShardKey::Namespace.hash(&p, true), fnv1a64(b"shop"));
        // No controller owner: its own uid.
        let q = pod("u-2", "shop", None);
        assert_eq!(ShardKey::Uid.hash(&q, true), fnv1a64(b"u-2"));
    }
}
