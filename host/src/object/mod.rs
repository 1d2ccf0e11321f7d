//! The host's representation of one API object: compact JSON text plus the
//! decoded metadata every handler needs.
//!
//! Why this shape: parsing a 4 KB Pod into a tree costs ~20 us, far more than
//! a component call. The host therefore keeps the object as compact JSON (the
//! smallest faithful form, and what `to-json` hands out without re-encoding),
//! decodes `metadata` once per object version (shared by every plugin), and
//! answers field reads with a lazy JSON-pointer scan that skips everything not
//! on the path.
//!
//! The metadata and what the cache strips are `meta.rs`'s; building an
//! object from a value or text `decode.rs`'s; splitting the text into
//! members within the watch event's one deserialisation `parts.rs`'s;
//! field reads `field.rs`'s; an object's identity within its kind
//! `key.rs`'s.

use std::sync::Arc;

use serde_json::Value;

use crate::kind::Gvk;

mod decode;
mod field;
mod key;
mod meta;
mod pairs;
mod parts;
#[cfg(test)]
mod tests;

pub use field::FieldValue;
pub use key::ObjectKey;
pub use meta::{Meta, OwnerRef, StripOptions};
pub use pairs::Pairs;
pub use parts::{Field, ObjectParts};

/// True when an object of uid `new` is another object than one of uid
/// `old` under the same key (deleted and created again): both carry a uid
/// and they differ. Objects without a uid, as some tests build, are never
/// told apart. The informer's test, and a recording's.
pub fn recreated(old_uid: &str, new_uid: &str) -> bool {
    !old_uid.is_empty() && !new_uid.is_empty() && old_uid != new_uid
}

/// The annotation `kubectl apply` keeps a full copy of the object in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error("object is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("object has no {0}")]
    Missing(&'static str),
    #[error("object is not valid JSON: {0}")]
    Scan(#[from] sonic_rs::Error),
    #[error("object's {0} is not a JSON object")]
    NotAnObject(&'static str),
    #[error("object's {what} maps {key:?} to a value that is not a string (invalid type: {found})")]
    NotAString {
        what: &'static str,
        key: String,
        found: &'static str,
    },
}

/// An immutable object version, shared between the cache, queues and plugins.
#[derive(Debug, PartialEq, Eq)]
pub struct KObject {
    json: Box<str>,
    meta: Meta,
}

/// Objects are shared, never copied.
pub type ObjectHandle = Arc<KObject>;

impl KObject {
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    pub fn json(&self) -> &str {
        &self.json
    }

    /// `metadata.labels`, in the text's order.
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.meta.labels.iter(&self.json)
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.meta.labels.get(&self.json, key)
    }

    /// `metadata.annotations`, in the text's order.
    pub fn annotations(&self) -> impl Iterator<Item = (&str, &str)> {
        self.meta.annotations.iter(&self.json)
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.meta.annotations.get(&self.json, key)
    }

    pub fn to_value(&self) -> Result<Value, ObjectError> {
        Ok(serde_json::from_str(&self.json)?)
    }

    pub fn gvk(&self) -> Gvk {
        Gvk::from_api_version(&self.meta.api_version, &self.meta.kind)
    }

    pub fn namespace(&self) -> Option<&str> {
        self.meta.namespace.as_deref()
    }

    pub fn name(&self) -> &str {
        &self.meta.name
    }

    /// `namespace/name`, or `name` for cluster-scoped objects.
    pub fn key(&self) -> ObjectKey {
        ObjectKey::new(self.namespace(), self.name())
    }

    /// Approximate heap bytes held by this object (for the cache's
    /// bytes-per-object figure).
    pub fn heap_bytes(&self) -> usize {
        let m = &self.meta;
        std::mem::size_of::<Self>()
            + self.json.len()
            + m.api_version.len()
            + m.kind.len()
            + m.namespace.as_ref().map_or(0, |s| s.len())
            + m.name.len()
            + m.uid.len()
            + m.resource_version.len()
            + m.labels.heap_bytes()
            + m.annotations.heap_bytes()
            + m.owner_references.capacity() * std::mem::size_of::<OwnerRef>()
            + m.owner_references
                .iter()
                .map(|o| o.api_version.len() + o.kind.len() + o.name.len() + o.uid.len())
                .sum::<usize>()
            + m.creation_timestamp.as_ref().map_or(0, |s| s.len())
            + m.deletion_timestamp.as_ref().map_or(0, |s| s.len())
    }
}
