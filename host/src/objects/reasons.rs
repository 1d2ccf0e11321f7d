//! Every reason a Plugin object's conditions carry: one constant each, with
//! the conditions it appears on and what it means (its doc comment). A
//! refusal's reason is a [`Reason`], which only this module makes, so the
//! code cannot give a reason this list lacks; the book's reference page
//! (docs/book/src/reference/status-reasons.md) is generated from [`ALL`]
//! by `crate::reference`, and the book's names are checked against it.

use crate::crd::ConditionType::{self, Degraded, Loaded, Ready, Reconciling, Serving, Stalled};

/// A condition reason: a short CamelCase word for `kubectl get`, one of
/// this module's constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reason(&'static str);

impl Reason {
    pub fn as_str(self) -> &'static str {
        self.0
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// A reason as the reference lists it.
#[derive(Debug)]
pub struct Entry {
    pub reason: Reason,
    /// Each condition that carries it, with its status (`true`: `True`).
    pub conditions: &'static [(ConditionType, bool)],
    /// Its doc comment.
    pub meaning: &'static str,
}

/// The conditions of a refusal the host retries by itself
/// ([`super::clears_by_itself`]): kstatus reads it as InProgress.
const RETRIED: &[(ConditionType, bool)] = &[
    (Ready, false),
    (Reconciling, true),
    (Stalled, false),
    (Loaded, false),
    (Degraded, true),
];

/// The conditions of a refusal that needs a change to clear: kstatus
/// reads it as Failed.
const REFUSED: &[(ConditionType, bool)] = &[
    (Ready, false),
    (Reconciling, false),
    (Stalled, true),
    (Loaded, false),
    (Degraded, true),
];

/// Each reason's constant and its [`Entry`] in [`ALL`], from one list, so
/// a constant cannot miss the reference.
macro_rules! reasons {
    ($($(#[doc = $doc:literal])+ $name:ident = $value:literal on $conditions:expr;)+) => {
        $($(#[doc = $doc])+ pub const $name: Reason = Reason($value);)+

        /// Every reason, in the reference's order.
        pub const ALL: &[Entry] = &[$(Entry {
            reason: $name,
            conditions: $conditions,
            meaning: concat!($($doc),+),
        }),+];
    };
}

reasons! {
    /// The current spec's module serves on the leader and on every other
    /// ready replica.
    SERVING = "Serving" on &[(Ready, true), (Reconciling, false), (Stalled, false)];
    /// The current spec's module was fetched, verified, compiled and
    /// registered on the leader.
    LOADED = "Loaded" on &[(Loaded, true)];
    /// Nothing was refused.
    AS_EXPECTED = "AsExpected" on &[(Degraded, false)];
    /// The current spec's version serves.
    SPEC_VERSION = "SpecVersion" on &[(Serving, true)];
    /// An earlier spec's version keeps serving while the current spec
    /// loads, or after it was refused.
    PREVIOUS_VERSION = "PreviousVersion" on &[(Serving, true)];
    /// No version of the plugin serves: no delta is delivered.
    NOTHING_SERVES = "NothingServes" on &[(Serving, false)];
    /// The leader serves the current spec, but a ready replica has not
    /// loaded it (yet, or was refused it: its `status.replicas` entry says
    /// why).
    REPLICAS_BEHIND = "ReplicasBehind" on &[(Ready, false), (Reconciling, true), (Stalled, false)];
    /// The current spec's module is being fetched, verified and compiled.
    RECONCILING = "Reconciling" on &[(Ready, false)];
    /// The current spec's module is being fetched, verified and compiled
    /// (also a replica's reason while it loads).
    LOADING = "Loading" on &[(Reconciling, true), (Stalled, false), (Loaded, false)];
    /// The registry refused the pull or could not be reached, answered more
    /// than a cap allows, or took longer than the pull deadline; retried.
    PULL_FAILED = "PullFailed" on RETRIED;
    /// The module could not be read (a ConfigMap key or a file of the
    /// plugin folder missing, or no cluster to read it from); retried.
    FETCH_FAILED = "FetchFailed" on RETRIED;
    /// The API server could not be asked about a tenant's ServiceAccount;
    /// retried.
    TENANT_CHECK_FAILED = "TenantCheckFailed" on RETRIED;
    /// The module's cosign signature is missing or no key of the matching
    /// rule (or of the object's `oci.verifyKeys`) verifies it.
    SIGNATURE_REFUSED = "SignatureRefused" on REFUSED;
    /// The module is not a plugin component (not Wasm, a core module, the
    /// wrong WIT version or imports).
    NOT_A_PLUGIN = "NotAPlugin" on REFUSED;
    /// The module did not compile.
    COMPILE_FAILED = "CompileFailed" on REFUSED;
    /// The plugin refused its config in `register`, or registered something
    /// invalid.
    REGISTER_FAILED = "RegisterFailed" on REFUSED;
    /// The plugin's instance could not be started.
    START_FAILED = "StartFailed" on REFUSED;
    /// The spec does not parse as a sidecar would, or a NamespacedPlugin
    /// lists no access.
    INVALID_SPEC = "InvalidSpec" on REFUSED;
    /// The spec asks for more than the host's ceiling (a tenant's: the
    /// tenants' ceiling) or than its `access` grants.
    NOT_GRANTED = "NotGranted" on REFUSED;
    /// A tenant namespace's quota is spent.
    QUOTA_EXCEEDED = "QuotaExceeded" on REFUSED;
    /// The plugin's registration names a kind the cluster does not serve.
    UNKNOWN_KIND = "UnknownKind" on REFUSED;
    /// Another source (the plugin folder, another object) holds the
    /// plugin's name.
    NAME_TAKEN = "NameTaken" on REFUSED;
    /// A NamespacedPlugin's namespace is not listed by the host config's
    /// `pluginObjects.tenantNamespaces`.
    NAMESPACE_NOT_ALLOWED = "NamespaceNotAllowed" on REFUSED;
    /// A NamespacedPlugin references an object of another namespace.
    OUTSIDE_NAMESPACE = "OutsideNamespace" on REFUSED;
    /// The ServiceAccount a tenant's plugins act as does not exist.
    TENANT_ACCOUNT_MISSING = "TenantAccountMissing" on REFUSED;
    /// The tenant's ServiceAccount may not read what its plugin reads or
    /// names.
    TENANT_FORBIDDEN = "TenantForbidden" on REFUSED;
}

impl Entry {
    /// Whether it is the reason of a refused spec (Degraded).
    pub fn refusal(&self) -> bool {
        self.conditions.contains(&(Degraded, true))
    }

    /// Its meaning on one line.
    pub fn meaning(&self) -> String {
        self.meaning
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeSet;

    use super::*;
    use crate::crd::ReplicaStatus;
    use crate::objects::status::{Outcome, Served, status_for};

    /// (condition, status, reason) of every condition `status_for` writes
    /// over every outcome: served everywhere, a replica behind, loading and
    /// each refusal, with and without an earlier version serving.
    fn written() -> BTreeSet<(String, bool, String)> {
        let served = Served {
            version: "v".into(),
            content_digest: "sha256:c".into(),
            manifest_digest: None,
            resolved_reference: None,
        };
        let behind = ReplicaStatus {
            name: "other".into(),
            observed_generation: Some(1),
            version: None,
            loaded: false,
            reason: None,
            message: None,
        };
        let mut outcomes = vec![
            (Outcome::Serving(served.clone()), vec![]),
            (Outcome::Serving(served.clone()), vec![behind]),
            (Outcome::Loading { serving: None }, vec![]),
            (
                Outcome::Loading {
                    serving: Some(served.clone()),
                },
                vec![],
            ),
        ];
        for entry in ALL.iter().filter(|e| e.refusal()) {
            for serving in [None, Some(served.clone())] {
                outcomes.push((
                    Outcome::Refused {
                        reason: entry.reason,
                        message: "why".into(),
                        serving,
                    },
                    vec![],
                ));
            }
        }
        outcomes
            .iter()
            .flat_map(|(outcome, others)| status_for(outcome, Some(2), None, others).conditions)
            .map(|c| (c.type_, c.status == "True", c.reason))
            .collect()
    }

    /// The table says what the code writes: every (condition, status,
    /// reason) it lists is written for some outcome, and every one written
    /// is listed, so the reference page cannot drift from `status_for`.
    #[test]
    fn the_list_is_what_status_for_writes() {
        let listed: BTreeSet<(String, bool, String)> = ALL
            .iter()
            .flat_map(|e| {
                e.conditions
                    .iter()
                    .map(|(c, ok)| (c.as_str().to_owned(), *ok, e.reason.as_str().to_owned()))
            })
            .collect();
        let written = written();
        let unlisted: Vec<_> = written.difference(&listed).collect();
        let unwritten: Vec<_> = listed.difference(&written).collect();
        assert!(
            unlisted.is_empty() && unwritten.is_empty(),
            "written but not listed in reasons.rs: {unlisted:?}\nlisted but never written: {unwritten:?}"
        );
    }

    #[test]
    fn names_are_unique_camel_case_and_explained() {
        let mut seen = BTreeSet::new();
        for e in ALL {
            let name = e.reason.as_str();
            assert!(seen.insert(name), "{name} listed twice");
            assert!(
                name.starts_with(|c: char| c.is_ascii_uppercase())
                    && name.chars().all(|c| c.is_ascii_alphanumeric()),
                "{name}"
            );
            assert!(!e.meaning().is_empty(), "{name} has no doc comment");
        }
    }
}
