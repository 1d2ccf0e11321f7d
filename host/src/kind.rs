//! Kinds and their REST mapping: what client-go's RESTMapper does, for the
//! names a plugin may use (`Pod`, `pods`, `deployments.apps`, a full GVK).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use parking_lot::RwLock;
use serde::{Deserialize, Serialize};

/// Something that can (re)learn the kinds a cluster serves into the
/// registry (the API server's discovery; nothing for the local cluster).
/// Here, not in the kube backend, so that the core names no backend.
pub trait KindDiscovery: Send + Sync + 'static {
    /// Learns the served kinds again; returns how many it knows.
    fn refresh(&self) -> futures::future::BoxFuture<'_, Result<usize, String>>;
}

/// A group/version/kind; the core group is `""`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Gvk {
    pub group: String,
    pub version: String,
    pub kind: String,
}

impl Gvk {
    pub fn new(group: &str, version: &str, kind: &str) -> Self {
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
        }
    }

    /// Parses an `apiVersion` (`v1`, `apps/v1`) plus a kind.
    pub fn from_api_version(api_version: &str, kind: &str) -> Self {
        match api_version.split_once('/') {
            Some((group, version)) => Self::new(group, version, kind),
            None => Self::new("", api_version, kind),
        }
    }

    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl fmt::Display for Gvk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}/{}", self.version, self.kind)
        } else {
            write!(f, "{}/{}/{}", self.group, self.version, self.kind)
        }
    }
}

/// A served kind: its GVK, plural resource name and scope.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KindInfo {
    pub gvk: Gvk,
    pub plural: String,
    pub namespaced: bool,
}

impl KindInfo {
    pub fn new(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        Self {
            gvk: Gvk::new(group, version, kind),
            plural: plural.to_owned(),
            namespaced,
        }
    }

    /// `deployments.apps` / `pods`: the name kubectl and RBAC use.
    pub fn resource_name(&self) -> String {
        if self.gvk.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.gvk.group)
        }
    }
}

/// How a plugin names a kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KindRef {
    Gvk(Gvk),
    /// `pods`, `deployments.apps`, `widgets.v1.example.com`, or a bare kind
    /// name (`Pod`) as a convenience.
    Resource(String),
}

impl fmt::Display for KindRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KindRef::Gvk(gvk) => gvk.fmt(f),
            KindRef::Resource(name) => f.write_str(name),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KindError {
    #[error(
        "unknown kind {0}: the cluster serves no such resource (check the group, version and spelling, or install its CRD)"
    )]
    Unknown(String),
    #[error("kind {name} is ambiguous: it matches {candidates}; name it with its group")]
    Ambiguous { name: String, candidates: String },
}

/// A served kind an informer cannot run on (no `list` or `watch`).
#[derive(Debug, thiserror::Error)]
#[error(
    "{resource} cannot be subscribed to: the API server does not serve `{missing}` on it (its verbs: {verbs}); an informer needs list and watch"
)]
pub struct NotWatchable {
    pub resource: String,
    pub missing: &'static str,
    pub verbs: String,
}

/// (group, version, kind, plural, namespaced) of the built-in kinds of
/// Kubernetes 1.35.
const BUILTIN: &[(&str, &str, &str, &str, bool)] = &[
    ("", "v1", "Binding", "bindings", true),
    ("", "v1", "ComponentStatus", "componentstatuses", false),
    ("", "v1", "ConfigMap", "configmaps", true),
    ("", "v1", "Endpoints", "endpoints", true),
    ("", "v1", "Event", "events", true),
    ("", "v1", "LimitRange", "limitranges", true),
    ("", "v1", "Namespace", "namespaces", false),
    ("", "v1", "Node", "nodes", false),
    (
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        true,
    ),
    ("", "v1", "PersistentVolume", "persistentvolumes", false),
    ("", "v1", "Pod", "pods", true),
    ("", "v1", "PodTemplate", "podtemplates", true),
    (
        "",
        "v1",
        "ReplicationController",
        "replicationcontrollers",
        true,
    ),
    ("", "v1", "ResourceQuota", "resourcequotas", true),
    ("", "v1", "Secret", "secrets", true),
    ("", "v1", "ServiceAccount", "serviceaccounts", true),
    ("", "v1", "Service", "services", true),
    (
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        false,
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        false,
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        false,
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        false,
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
    ),
    (
        "apiregistration.k8s.io",
        "v1",
        "APIService",
        "apiservices",
        false,
    ),
    (
        "apps",
        "v1",
        "ControllerRevision",
        "controllerrevisions",
        true,
    ),
    ("apps", "v1", "DaemonSet", "daemonsets", true),
    ("apps", "v1", "Deployment", "deployments", true),
    ("apps", "v1", "ReplicaSet", "replicasets", true),
    ("apps", "v1", "StatefulSet", "statefulsets", true),
    (
        "authentication.k8s.io",
        "v1",
        "SelfSubjectReview",
        "selfsubjectreviews",
        false,
    ),
    (
        "authentication.k8s.io",
        "v1",
        "TokenReview",
        "tokenreviews",
        false,
    ),
    (
        "authorization.k8s.io",
        "v1",
        "LocalSubjectAccessReview",
        "localsubjectaccessreviews",
        true,
    ),
    (
        "authorization.k8s.io",
        "v1",
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
        false,
    ),
    (
        "authorization.k8s.io",
        "v1",
        "SelfSubjectRulesReview",
        "selfsubjectrulesreviews",
        false,
    ),
    (
        "authorization.k8s.io",
        "v1",
        "SubjectAccessReview",
        "subjectaccessreviews",
        false,
    ),
    (
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        true,
    ),
    ("batch", "v1", "CronJob", "cronjobs", true),
    ("batch", "v1", "Job", "jobs", true),
    (
        "certificates.k8s.io",
        "v1",
        "CertificateSigningRequest",
        "certificatesigningrequests",
        false,
    ),
    ("coordination.k8s.io", "v1", "Lease", "leases", true),
    (
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "endpointslices",
        true,
    ),
    ("events.k8s.io", "v1", "Event", "events", true),
    (
        "flowcontrol.apiserver.k8s.io",
        "v1",
        "FlowSchema",
        "flowschemas",
        false,
    ),
    (
        "flowcontrol.apiserver.k8s.io",
        "v1",
        "PriorityLevelConfiguration",
        "prioritylevelconfigurations",
        false,
    ),
    ("networking.k8s.io", "v1", "IPAddress", "ipaddresses", false),
    (
        "networking.k8s.io",
        "v1",
        "IngressClass",
        "ingressclasses",
        false,
    ),
    ("networking.k8s.io", "v1", "Ingress", "ingresses", true),
    (
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        true,
    ),
    (
        "networking.k8s.io",
        "v1",
        "ServiceCIDR",
        "servicecidrs",
        false,
    ),
    ("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", false),
    (
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        true,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        true,
    ),
    ("rbac.authorization.k8s.io", "v1", "Role", "roles", true),
    (
        "resource.k8s.io",
        "v1",
        "DeviceClass",
        "deviceclasses",
        false,
    ),
    (
        "resource.k8s.io",
        "v1",
        "ResourceClaim",
        "resourceclaims",
        true,
    ),
    (
        "resource.k8s.io",
        "v1",
        "ResourceClaimTemplate",
        "resourceclaimtemplates",
        true,
    ),
    (
        "resource.k8s.io",
        "v1",
        "ResourceSlice",
        "resourceslices",
        false,
    ),
    (
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        false,
    ),
    ("storage.k8s.io", "v1", "CSIDriver", "csidrivers", false),
    ("storage.k8s.io", "v1", "CSINode", "csinodes", false),
    (
        "storage.k8s.io",
        "v1",
        "CSIStorageCapacity",
        "csistoragecapacities",
        true,
    ),
    (
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        false,
    ),
    (
        "storage.k8s.io",
        "v1",
        "VolumeAttachment",
        "volumeattachments",
        false,
    ),
    (
        "storage.k8s.io",
        "v1",
        "VolumeAttributesClass",
        "volumeattributesclasses",
        false,
    ),
];

/// Whether `gvk`'s group and kind are built into Kubernetes (any version).
pub fn is_builtin(gvk: &Gvk) -> bool {
    BUILTIN
        .iter()
        .any(|(g, _, k, _, _)| *g == gvk.group && *k == gvk.kind)
}

/// The kinds a cluster serves, filled from discovery (or, for the local
/// cluster, from a built-in table plus what its manifests and CRDs declare).
#[derive(Debug, Clone, Default)]
pub struct KindRegistry {
    inner: Arc<RwLock<BTreeMap<Gvk, KindInfo>>>,
    /// Group -> preferred version (from discovery), used when a resource
    /// name matches several versions of one group.
    preferred: Arc<RwLock<BTreeMap<String, String>>>,
    /// Bumped whenever a kind is learned or a preferred version changes:
    /// plugins refused for an unknown kind are retried when it moves (a CRD
    /// was installed), and memos of resolved kinds are dropped.
    generation: Arc<std::sync::atomic::AtomicU64>,
    /// The verbs discovery reported per kind; kinds learned otherwise
    /// (the local cluster, CRD objects) have none recorded.
    verbs: Arc<RwLock<BTreeMap<Gvk, Vec<String>>>>,
    /// The custom resource versions whose CRD enables the status
    /// subresource (the simulated API server routes their status).
    crd_status: Arc<RwLock<std::collections::BTreeSet<Gvk>>>,
    /// The structural schema (`openAPIV3Schema`) of each custom resource
    /// version learned from a CRD object: the simulated API server
    /// validates, prunes and merges applies with it.
    crd_schemas: Arc<RwLock<BTreeMap<Gvk, Arc<serde_json::Value>>>>,
}

impl KindRegistry {
    /// Every kind a Kubernetes 1.35 API server serves by default (GA and
    /// default-on beta APIs, one version each: the preferred one), so the
    /// local cluster and offline `kubewasm rbac` resolve what a real
    /// cluster would. Checked against a real v1.35 server's discovery by
    /// `tests/tests/e2e/kinds.rs`.
    pub fn builtin() -> Self {
        let reg = Self::default();
        for (group, version, kind, plural, namespaced) in BUILTIN {
            reg.insert(KindInfo::new(group, version, kind, plural, *namespaced));
        }
        reg
    }

    /// Every kind known, in group/version/kind order.
    pub fn all(&self) -> Vec<KindInfo> {
        self.inner.read().values().cloned().collect()
    }

    /// Records a group's preferred version (discovery's `preferredVersion`).
    /// A change moves [`Self::generation`]: resource names may now resolve
    /// to another version.
    pub fn set_preferred(&self, group: &str, version: &str) {
        let old = self
            .preferred
            .write()
            .insert(group.to_owned(), version.to_owned());
        if old.as_deref() != Some(version) {
            self.generation
                .fetch_add(1, std::sync::atomic::Ordering::Release);
        }
    }

    /// Whether two handles share one registry.
    pub fn same(&self, other: &KindRegistry) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub fn len(&self) -> usize {
        self.inner.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.inner.read().is_empty()
    }

    pub fn insert(&self, info: KindInfo) {
        let new = self.inner.write().insert(info.gvk.clone(), info).is_none();
        if new {
            self.generation
                .fetch_add(1, std::sync::atomic::Ordering::Release);
        }
    }

    /// Changes whenever a kind is learned (see [`Self::insert`]).
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Records the verbs the server serves on a kind (discovery).
    pub fn set_verbs(&self, gvk: &Gvk, verbs: Vec<String>) {
        self.verbs.write().insert(gvk.clone(), verbs);
    }

    /// An error unless an informer can run on `info`: the server must serve
    /// both `list` and `watch` on it (a 405 would otherwise stall the
    /// subscription, and every other of its plugin's, forever). Kinds with
    /// no recorded verbs pass.
    pub fn check_watchable(&self, info: &KindInfo) -> Result<(), NotWatchable> {
        let verbs = self.verbs.read();
        let Some(served) = verbs.get(&info.gvk) else {
            return Ok(());
        };
        for verb in ["list", "watch"] {
            if !served.iter().any(|v| v == verb) {
                return Err(NotWatchable {
                    resource: info.resource_name(),
                    missing: verb,
                    verbs: if served.is_empty() {
                        "none".to_owned()
                    } else {
                        served.join(", ")
                    },
                });
            }
        }
        Ok(())
    }

    pub fn by_gvk(&self, gvk: &Gvk) -> Option<KindInfo> {
        self.inner.read().get(gvk).cloned()
    }

    /// Learns a kind from a CustomResourceDefinition object, for every
    /// served version.
    pub fn learn_crd(&self, crd: &serde_json::Value) {
        let spec = &crd["spec"];
        let (Some(group), Some(kind), Some(plural)) = (
            spec["group"].as_str(),
            spec["names"]["kind"].as_str(),
            spec["names"]["plural"].as_str(),
        ) else {
            return;
        };
        let namespaced = spec["scope"].as_str() != Some("Cluster");
        for version in spec["versions"].as_array().into_iter().flatten() {
            if let Some(v) = version["name"].as_str() {
                self.insert(KindInfo::new(group, v, kind, plural, namespaced));
                let gvk = Gvk::new(group, v, kind);
                match version.pointer("/schema/openAPIV3Schema") {
                    Some(schema) => self
                        .crd_schemas
                        .write()
                        .insert(gvk.clone(), Arc::new(schema.clone())),
                    None => self.crd_schemas.write().remove(&gvk),
                };
                if version.pointer("/subresources/status").is_some() {
                    self.crd_status.write().insert(gvk);
                } else {
                    self.crd_status.write().remove(&gvk);
                }
            }
        }
    }

    /// The structural schema of a custom resource version learned from
    /// its CRD object.
    pub fn crd_schema(&self, gvk: &Gvk) -> Option<Arc<serde_json::Value>> {
        self.crd_schemas.read().get(gvk).cloned()
    }

    /// Whether a CRD learned here enables the status subresource of `gvk`.
    pub fn crd_has_status(&self, gvk: &Gvk) -> bool {
        self.crd_status.read().contains(gvk)
    }

    /// Resolves a plugin's kind reference, as client-go's RESTMapper would.
    pub fn resolve(&self, kind: &KindRef) -> Result<KindInfo, KindError> {
        let map = self.inner.read();
        match kind {
            KindRef::Gvk(gvk) => map
                .get(gvk)
                .cloned()
                .ok_or_else(|| KindError::Unknown(crate::names::excerpt_of(gvk))),
            KindRef::Resource(name) => {
                let (resource, rest) = match name.split_once('.') {
                    Some((r, rest)) => (r, Some(rest)),
                    None => (name.as_str(), None),
                };
                // No served resource is longer than a DNS subdomain: a
                // longer name (a plugin can pass 16 MiB) is unknown
                // without a lowercase copy of it.
                if resource.len() > crate::names::SUBDOMAIN_MAX {
                    return Err(KindError::Unknown(crate::names::excerpt(name)));
                }
                let lower = resource.to_ascii_lowercase();
                let mut found: Vec<&KindInfo> = map
                    .values()
                    .filter(|info| {
                        let name_ok =
                            info.plural == lower || info.gvk.kind.to_ascii_lowercase() == lower;
                        let group_ok = match rest {
                            None => true,
                            // `deployments.apps` or `widgets.v1.example.com`
                            Some(rest) => {
                                rest == info.gvk.group
                                    || rest == format!("{}.{}", info.gvk.version, info.gvk.group)
                            }
                        };
                        name_ok && group_ok
                    })
                    .collect();
                // Prefer the core group, then events.k8s.io-style duplicates
                // resolve like kubectl: the first group alphabetically loses
                // to the core group only.
                if found.len() > 1 {
                    if let Some(core) = found.iter().find(|i| i.gvk.group.is_empty()) {
                        return Ok((*core).clone());
                    }
                    // Within one group, the preferred version first (then
                    // the alphabetical first, as before discovery).
                    let preferred = self.preferred.read();
                    found.sort_by_key(|i| {
                        let pref = preferred.get(&i.gvk.group) == Some(&i.gvk.version);
                        (i.gvk.group.clone(), !pref, i.gvk.version.clone())
                    });
                    found.dedup_by(|a, b| a.gvk.group == b.gvk.group && a.plural == b.plural);
                    if found.len() > 1 {
                        let groups: std::collections::BTreeSet<&str> =
                            found.iter().map(|i| i.gvk.group.as_str()).collect();
                        if groups.len() > 1 {
                            return Err(KindError::Ambiguous {
                                name: name.clone(),
                                candidates: found
                                    .iter()
                                    .map(|i| i.resource_name())
                                    .collect::<Vec<_>>()
                                    .join(", "),
                            });
                        }
                    }
                }
                found
                    .first()
                    .map(|i| (*i).clone())
                    .ok_or_else(|| KindError::Unknown(crate::names::excerpt(name)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_resource_names_like_kubectl() {
        let reg = KindRegistry::builtin();
        let pods = reg.resolve(&KindRef::Resource("pods".into())).unwrap();
        assert_eq!(pods.gvk, Gvk::new("", "v1", "Pod"));
        assert!(pods.namespaced);
        let deploy = reg
            .resolve(&KindRef::Resource("deployments.apps".into()))
            .unwrap();
        assert_eq!(deploy.gvk.group, "apps");
        let ns = reg.resolve(&KindRef::Resource("Namespace".into())).unwrap();
        assert!(!ns.namespaced);
        // events exist in core and events.k8s.io: the core group wins.
        let ev = reg.resolve(&KindRef::Resource("events".into())).unwrap();
        assert_eq!(ev.gvk.group, "");
        let ev2 = reg
            .resolve(&KindRef::Resource("events.events.k8s.io".into()))
            .unwrap();
        assert_eq!(ev2.gvk.group, "events.k8s.io");
        assert!(matches!(
            reg.resolve(&KindRef::Resource("widgets".into())),
            Err(KindError::Unknown(_))
        ));
    }

    #[test]
    fn learns_crds() {
        let reg = KindRegistry::builtin();
        reg.learn_crd(
            &serde_json::json!({"spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets"},
            "versions": [{"name": "v1"}]}}),
        );
        let w = reg
            .resolve(&KindRef::Resource("widgets.v1.example.com".into()))
            .unwrap();
        assert_eq!(w.gvk, Gvk::new("example.com", "v1", "Widget"));
    }

    #[test]
    fn a_kind_without_list_or_watch_is_not_watchable() {
        let reg = KindRegistry::builtin();
        let review = KindInfo::new(
            "authentication.k8s.io",
            "v1",
            "TokenReview",
            "tokenreviews",
            false,
        );
        reg.insert(review.clone());
        reg.set_verbs(&review.gvk, vec!["create".into()]);
        let err = reg.check_watchable(&review).unwrap_err().to_string();
        assert!(
            err.contains("tokenreviews.authentication.k8s.io")
                && err.contains("`list`")
                && err.contains("its verbs: create"),
            "{err}"
        );
        let pods = reg.resolve(&KindRef::Resource("pods".into())).unwrap();
        reg.set_verbs(&pods.gvk, vec!["get".into(), "list".into()]);
        assert!(
            reg.check_watchable(&pods)
                .unwrap_err()
                .to_string()
                .contains("`watch`")
        );
        reg.set_verbs(&pods.gvk, vec!["get".into(), "list".into(), "watch".into()]);
        assert!(reg.check_watchable(&pods).is_ok());
        // Nothing recorded (the local cluster): allowed.
        let cms = reg
            .resolve(&KindRef::Resource("configmaps".into()))
            .unwrap();
        assert!(reg.check_watchable(&cms).is_ok());
    }
}
