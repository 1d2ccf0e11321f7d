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

/// This process's lease holder identity: `<POD_NAME>_<suffix>`, else
/// `<host name>_<suffix>`, the suffix unique per process (as client-go's
/// `hostname_uuid`). A container the kubelet restarts keeps its Pod's name
/// but is a new holder: it does not mistake the dead process's lease for
/// its own and waits it out like any other candidate.
pub fn holder_identity() -> String {
    format!("{}_{}", Identity::from_env().instance(), process_suffix())
}

/// Eight hex digits from the start time and the process id: distinct for
/// the processes one Pod or machine runs in turn.
fn process_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let mixed = (nanos as u64) ^ (u64::from(std::process::id()) << 32);
    format!("{:08x}", (mixed ^ (mixed >> 29)) as u32)
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

    #[test]
    fn holder_identities_differ_per_process_start() {
        let a = holder_identity();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = holder_identity();
        assert_ne!(a, b);
        let (name, suffix) = a.rsplit_once('_').unwrap();
        assert!(!name.is_empty() && suffix.len() == 8, "{a}");
    }
}
