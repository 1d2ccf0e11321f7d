//! An object's identity within one kind.

use std::sync::Arc;

/// `namespace/name` (or `name`): an object's identity within one kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub namespace: Option<Arc<str>>,
    pub name: Arc<str>,
}

impl ObjectKey {
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        Self {
            namespace: namespace.filter(|n| !n.is_empty()).map(Arc::from),
            name: Arc::from(name),
        }
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}
