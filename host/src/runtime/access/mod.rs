//! The operator's access list in a plugin's sidecar, and the checks made
//! against it. The sidecar is written by whoever installs the plugin, not by
//! the plugin: a registration that asks for more than it grants does not
//! load, and every cache read and action is checked against the effective
//! access (what the sidecar grants, within what the registration declared).
//!
//! Kinds are written as RBAC names them (`configmaps`, `deployments.apps`):
//! a grant is matched by API group and plural, never by version, so it reads
//! the same in the sidecar and in the RBAC `kubewasm rbac` derives from it.
//!
//! This file holds the verbs; a kind as a grant names it is `kind.rs`'s,
//! the rules as written and their validation `rule.rs`'s, and what a
//! sidecar grants one plugin and the checks made against it `grant.rs`'s.

mod grant;
mod kind;
mod rule;
#[cfg(test)]
mod tests;

use std::fmt;

use serde::Deserialize;

pub use grant::{Denied, Grant, NamespaceMatcher, ReadRequest, ReadScope};
pub use kind::GrantKind;
pub use rule::{AccessRule, NamespaceSelector, Namespaces, Rule, SelectorRequirement};

/// What a rule allows on its kinds.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Deserialize,
    serde::Serialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    /// Subscribe and read the cache (get, list, watch).
    Read,
    /// Server-side apply (`apply`).
    Apply,
    /// Merge or JSON patches (`patch`).
    Patch,
    Delete,
    /// Server-side apply on the status subresource (`apply-status`).
    Status,
    /// Record events.k8s.io Events regarding objects of the kind, in the
    /// object's namespace (`default` for a cluster-scoped object).
    Events,
}

impl Verb {
    pub const ALL: [Verb; 6] = [
        Verb::Read,
        Verb::Apply,
        Verb::Patch,
        Verb::Delete,
        Verb::Status,
        Verb::Events,
    ];
    /// The verbs a registration's `writes` entry stands for.
    pub const WRITES: [Verb; 4] = [Verb::Apply, Verb::Patch, Verb::Delete, Verb::Status];

    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Read => "read",
            Verb::Apply => "apply",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::Status => "status",
            Verb::Events => "events",
        }
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
