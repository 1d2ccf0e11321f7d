//! The Pod this host runs in, from the downward API (`POD_NAME`,
//! `POD_NAMESPACE`), with fallbacks for runs outside a cluster.

/// Where a Pod's service account namespace is mounted.
pub const SERVICE_ACCOUNT_NAMESPACE_FILE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// `POD_NAME` from the downward API, when set and not empty.
pub fn pod_name() -> Option<String> {
    non_empty(std::env::var("POD_NAME").ok())
}

/// `POD_NAMESPACE` from the downward API, else the service account's
/// namespace file, when either is set and not empty.
pub fn pod_namespace() -> Option<String> {
    non_empty(std::env::var("POD_NAMESPACE").ok()).or_else(|| {
        non_empty(
            std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE_FILE)
                .ok()
                .map(|s| s.trim().to_owned()),
        )
    })
}

/// This replica's name: `POD_NAME`, else `HOSTNAME_PID` (unique per
/// process, so two hosts on one machine never share an identity).
pub fn instance() -> String {
    pod_name().unwrap_or_else(|| {
        let host = non_empty(std::env::var("HOSTNAME").ok())
            .or_else(|| {
                non_empty(
                    std::fs::read_to_string("/etc/hostname")
                        .ok()
                        .map(|s| s.trim().to_owned()),
                )
            })
            .unwrap_or_else(|| "kubewasm".to_owned());
        format!("{host}_{}", std::process::id())
    })
}

fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.trim().is_empty())
}
