//! Who this replica is, from the downward API (`POD_NAME`, `POD_NAMESPACE`)
//! or the host name outside a cluster: one place for the Events'
//! `reportingInstance` and a leader-election lease holder.

/// Environment variable carrying the pod name (downward API `metadata.name`).
pub const POD_NAME_ENV: &str = "POD_NAME";
/// Environment variable carrying the pod namespace (downward API `metadata.namespace`).
pub const POD_NAMESPACE_ENV: &str = "POD_NAMESPACE";

/// This replica's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pod_name: Option<String>,
    pod_namespace: Option<String>,
    hostname: Option<String>,
}

fn non_empty(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

impl Identity {
    /// An identity from explicit values (empty strings count as unset).
    pub fn new(
        pod_name: Option<String>,
        pod_namespace: Option<String>,
        hostname: Option<String>,
    ) -> Self {
        Self {
            pod_name: non_empty(pod_name),
            pod_namespace: non_empty(pod_namespace),
            hostname: non_empty(hostname),
        }
    }

    /// Reads `POD_NAME`, `POD_NAMESPACE` and the host name (`HOSTNAME`, else
    /// the kernel's).
    pub fn from_env() -> Self {
        let hostname = std::env::var("HOSTNAME")
            .ok()
            .filter(|h| !h.trim().is_empty())
            .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok());
        Self::new(
            std::env::var(POD_NAME_ENV).ok(),
            std::env::var(POD_NAMESPACE_ENV).ok(),
            hostname,
        )
    }

    /// The name this replica goes by: the pod name, else the host name,
    /// else `kubewasm`. Unique per replica in a Deployment.
    pub fn instance(&self) -> &str {
        self.pod_name
            .as_deref()
            .or(self.hostname.as_deref())
            .unwrap_or("kubewasm")
    }

    pub fn pod_name(&self) -> Option<&str> {
        self.pod_name.as_deref()
    }

    /// The pod's namespace when running in a cluster.
    pub fn pod_namespace(&self) -> Option<&str> {
        self.pod_namespace.as_deref()
    }
}

// Free functions for the leader election's defaults (holder identity
// unique per process, namespace from the service account file too).

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_name_wins_over_the_host_name_and_empty_values_are_unset() {
        let id = Identity::new(
            Some("kubewasm-7d9-abc".into()),
            Some("kubewasm-system".into()),
            Some("node-1".into()),
        );
        assert_eq!(id.instance(), "kubewasm-7d9-abc");
        assert_eq!(id.pod_namespace(), Some("kubewasm-system"));
        let id = Identity::new(Some(" ".into()), None, Some("node-1\n".into()));
        assert_eq!(id.instance(), "node-1");
        assert_eq!(id.pod_name(), None);
        assert_eq!(Identity::new(None, None, None).instance(), "kubewasm");
    }
}
