//! What the host reports on a Plugin object: which module it serves, and
//! conditions in the Kubernetes style, following the kstatus conventions
//! (`Ready`, `Reconciling`, `Stalled`, `observedGeneration`), so
//! `kubectl wait --for=condition=Ready`, `kubectl get plugins` and the
//! tools that read status as kstatus does (Flux, kpt, cli-utils) tell a
//! refused upgrade from a healthy one; per replica where replicas differ.

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The status subresource of `Plugin` and `NamespacedPlugin`; the leader
/// writes it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginStatus {
    /// The `metadata.generation` this status describes: until it equals
    /// the object's generation, the host has not looked at the latest spec
    /// and nothing else here speaks of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `sha256:<hex>` of the module's bytes being served (what the compile
    /// cache keys on; for OCI, the module layer's digest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_digest: Option<String>,
    /// For an OCI module: the digest of the manifest being served, the one
    /// a spec pins with `@sha256:...` or a tag resolved to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_digest: Option<String>,
    /// For an OCI module: the reference pinned by the manifest's digest
    /// (`registry/repository@sha256:...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_reference: Option<String>,
    /// The version the plugin sees in `register` (12 hex digits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Each replica's load state, where replicas differ (a follower that
    /// could not pull, a replica still on the previous version).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "replicas_schema")]
    pub replicas: Vec<ReplicaStatus>,
}

/// One host replica's view of the plugin.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    /// The host's identity (its Pod name).
    pub name: String,
    /// The `metadata.generation` whose spec this replica last reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The version it serves, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Whether it serves the spec of `observedGeneration` (not an earlier
    /// one).
    pub loaded: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The condition types the host sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionType {
    /// The spec of the object's current generation serves on the leader
    /// and on every other ready replica. False while it loads, when it was
    /// refused (even if an earlier version keeps serving), and while a
    /// replica is behind.
    Ready,
    /// Some version serves (the spec's, or an earlier spec's after a
    /// refused update): deltas are delivered.
    Serving,
    /// The host is working towards the spec (fetching, compiling, retrying
    /// a registry or API server that failed, waiting on a replica): kstatus
    /// reads True as InProgress.
    Reconciling,
    /// The spec cannot be served without a change (a signature refused, a
    /// module that is no plugin, access not granted, a namespace not
    /// allowed): kstatus reads True as Failed.
    Stalled,
    /// The spec's module was fetched, verified, compiled and registered on
    /// the leader.
    Loaded,
    /// Something is wrong but an older version may still serve: the
    /// reason says which (kept beside `Stalled` and `Reconciling` for
    /// readers of the first status layout).
    Degraded,
}

impl ConditionType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "Ready",
            Self::Serving => "Serving",
            Self::Reconciling => "Reconciling",
            Self::Stalled => "Stalled",
            Self::Loaded => "Loaded",
            Self::Degraded => "Degraded",
        }
    }
}

/// Each replica applies its own entry (its own field manager), so the list
/// is a map keyed by `name` and entries of other replicas are kept.
fn replicas_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<Vec<ReplicaStatus>>();
    schema.insert("x-kubernetes-list-type".into(), "map".into());
    schema.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::json!(["name"]),
    );
    schema
}

/// metav1.Condition's list, keyed by `type` as the API conventions ask, so
/// server-side apply merges conditions one by one.
fn conditions_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<Vec<Condition>>();
    schema.insert("x-kubernetes-list-type".into(), "map".into());
    schema.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::json!(["type"]),
    );
    schema
}
