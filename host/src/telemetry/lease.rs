//! Which replica leads, as this replica last read its Lease: what
//! `/readyz`'s text and the web view say, so an operator who lands on a
//! follower (a port-forward picks any Pod) sees that it is one and which
//! replica leads.

use serde::Serialize;

/// The Lease as this replica last read or wrote it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseView {
    /// `namespace/name` of the Lease.
    pub lease: String,
    /// This replica's holder identity (`<pod>_<suffix>`).
    pub identity: String,
    /// Whether this replica leads now.
    pub leading: bool,
    /// The holder the Lease names, if any (none while it is free).
    pub holder: Option<String>,
    /// When the holder acquired it (RFC 3339).
    pub since: Option<String>,
    /// How many times it changed hands.
    pub transitions: Option<i32>,
}

impl LeaseView {
    /// One line for `/readyz` and logs.
    pub fn line(&self) -> String {
        let since = self
            .since
            .as_deref()
            .map(|s| format!(" since {s}"))
            .unwrap_or_default();
        match (&self.holder, self.leading) {
            (_, true) => format!(
                "leader: this replica ({}) leads{since}, Lease {}",
                self.identity, self.lease
            ),
            (Some(holder), false) => format!(
                "follower: {holder} leads{since} (Lease {}); this replica ({}) delivers nothing and executes nothing until it takes over",
                self.lease, self.identity
            ),
            (None, false) => format!(
                "follower: no replica holds Lease {} now; this replica ({}) is campaigning",
                self.lease, self.identity
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_names_the_leader() {
        let mut view = LeaseView {
            lease: "kubewasm/kubewasm".into(),
            identity: "kubewasm-b_2".into(),
            leading: false,
            holder: Some("kubewasm-a_1".into()),
            since: Some("2026-01-01T00:00:00Z".into()),
            transitions: Some(3),
        };
        let line = view.line();
        assert!(
            line.starts_with("follower: kubewasm-a_1 leads since 2026-01-01T00:00:00Z"),
            "{line}"
        );
        view.leading = true;
        assert!(
            view.line()
                .starts_with("leader: this replica (kubewasm-b_2) leads")
        );
        view.leading = false;
        view.holder = None;
        assert!(
            view.line()
                .contains("no replica holds Lease kubewasm/kubewasm")
        );
    }
}
