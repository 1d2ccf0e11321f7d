//! What the host reports on a Plugin object: which module it serves, and
//! conditions in the Kubernetes style (`Ready`, `Loaded`, `Degraded` with a
//! reason and message) so `kubectl wait --for=condition=Ready` and
//! `kubectl get plugins` work; per replica where followers differ.

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The status subresource of `Plugin` and `NamespacedPlugin`; the leader
/// writes it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `sha256:<hex>` of the module being served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// For an OCI module: the reference pinned by digest that a tag
    /// resolved to (`registry/repository@sha256:...`).
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
    /// The version it serves, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub loaded: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The condition types the host sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionType {
    /// Every replica serves the spec's module and config.
    Ready,
    /// The module was fetched, verified, compiled and registered.
    Loaded,
    /// Something is wrong but an older version may still serve (pull
    /// failed, signature refused, not granted, compile failed,
    /// quarantined): the reason says which.
    Degraded,
}

impl ConditionType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "Ready",
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
