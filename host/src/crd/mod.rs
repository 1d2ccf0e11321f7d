//! Plugins as Kubernetes objects (`kubewasm.io/v1alpha1`): `Plugin`,
//! cluster-scoped, for the operator, and `NamespacedPlugin`, a tenant's,
//! whose access is confined to its own namespace (as Kubewarden keeps
//! `AdmissionPolicy` beside `ClusterAdmissionPolicy`). Their CRDs are
//! generated from the types here (`kubewasm crds` prints them;
//! deploy/base/crds.yaml is that output, and a test fails when it is stale).

mod spec;
mod status;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use serde::{Deserialize, Serialize};

pub use spec::{
    AccessSpec, ConfigMapModule, DirGrantSpec, GrantsSpec, KeyRef, LimitsSpec, ModuleSource,
    NetworkSpec, ObjectName, OciModule, PluginParts, SpecError,
};
pub use status::{Condition, ConditionType, PluginStatus, ReplicaStatus};

/// A plugin the operator runs cluster-wide.
// kube's printcolumn(...) repeats `type_ =`, which clippy takes for a
// duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kubewasm.io",
    version = "v1alpha1",
    kind = "Plugin",
    status = "PluginStatus",
    category = "kubewasm",
    shortname = "wplug",
    printcolumn(
        name = "Version",
        type_ = "string",
        description = "The version serving (the spec's, or an earlier spec's after a refused update)",
        json_path = ".status.version"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "Manifest",
        type_ = "string",
        priority = 1,
        description = "The OCI manifest digest serving: the one the spec pins, or its tag resolved to",
        json_path = ".status.manifestDigest"
    ),
    printcolumn(
        name = "Content",
        type_ = "string",
        priority = 1,
        description = "The sha256 of the module's bytes serving",
        json_path = ".status.contentDigest"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct PluginSpec {
    #[serde(flatten)]
    pub parts: PluginParts,
}

/// A tenant's plugin: it runs only if the host config lets its namespace
/// run plugins, and whatever it asks, it reads and writes only there.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kubewasm.io",
    version = "v1alpha1",
    kind = "NamespacedPlugin",
    namespaced,
    status = "PluginStatus",
    category = "kubewasm",
    shortname = "wnplug",
    printcolumn(
        name = "Version",
        type_ = "string",
        description = "The version serving (the spec's, or an earlier spec's after a refused update)",
        json_path = ".status.version"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "Manifest",
        type_ = "string",
        priority = 1,
        description = "The OCI manifest digest serving: the one the spec pins, or its tag resolved to",
        json_path = ".status.manifestDigest"
    ),
    printcolumn(
        name = "Content",
        type_ = "string",
        priority = 1,
        description = "The sha256 of the module's bytes serving",
        json_path = ".status.contentDigest"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("!has(self.module.file)").message("a NamespacedPlugin cannot load a file from the host's plugin folder: use oci or configMap"))]
#[x_kube(validation = Rule::new("!has(self.grants) || !has(self.grants.dirs) || size(self.grants.dirs) == 0").message("a NamespacedPlugin cannot be granted host directories"))]
// CEL cannot read the object's own namespace, so no namespace may be
// named at all: everything a tenant references is in its namespace.
#[x_kube(validation = Rule::new("!has(self.module.configMap) || !has(self.module.configMap.namespace)").message("a NamespacedPlugin's module ConfigMap is in its own namespace: remove module.configMap.namespace"))]
#[x_kube(validation = Rule::new("!has(self.module.oci) || !has(self.module.oci.pullSecret) || !has(self.module.oci.pullSecret.namespace)").message("a NamespacedPlugin's pull Secret is in its own namespace: remove module.oci.pullSecret.namespace"))]
#[x_kube(validation = Rule::new("!has(self.module.oci) || !has(self.module.oci.verifyKeys) || self.module.oci.verifyKeys.all(k, !has(k.namespace))").message("a NamespacedPlugin's verification keys are in its own namespace: remove module.oci.verifyKeys[].namespace"))]
pub struct NamespacedPluginSpec {
    #[serde(flatten)]
    pub parts: PluginParts,
}

/// The CRDs of both kinds, as the API server takes them.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        unobserved_by_default(Plugin::crd()),
        unobserved_by_default(NamespacedPlugin::crd()),
    ]
}

/// An object the host has not written status for yet reads
/// `status.observedGeneration: -1` (a default the API server applies when
/// status is absent): kstatus and the tools built on it read an object
/// with no observedGeneration and no conditions as Current, so a Plugin
/// created a moment ago would look served before any host looked at it.
fn unobserved_by_default(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSON;
    for version in &mut crd.spec.versions {
        if let Some(status) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("status"))
        {
            status.default = Some(JSON(serde_json::json!({"observedGeneration": -1})));
        }
    }
    crd
}

/// [`crds`] as one YAML stream, as `kubewasm crds` prints it and
/// deploy/base/crds.yaml holds it.
pub fn crds_yaml() -> Result<String, serde_yaml_ng::Error> {
    let mut out = String::from(
        "# Generated by `kubewasm crds` from host/src/crd; do not edit (a test checks it).\n",
    );
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(&crd)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
