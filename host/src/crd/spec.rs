//! What a Plugin object asks for: the module's source and what its sidecar
//! says for a plugin in the folder (config, limits, access, grants). The
//! schema (with its CEL rules) is generated from these types, so a bad spec
//! is refused at `kubectl apply` naming the field; what CEL cannot check
//! (sizes, durations, kinds) is checked by the same parser as a sidecar,
//! through [`PluginSpec::manifest`], and reported on the object's status.

use std::path::Path;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::runtime::access::Verb;
use crate::runtime::manifest::{Manifest, ManifestError};

/// Where the module comes from: exactly one of the three.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("[has(self.oci), has(self.configMap), has(self.file)].filter(x, x).size() == 1").message("module needs exactly one of oci, configMap or file"))]
pub struct ModuleSource {
    /// An OCI artifact in the CNCF Wasm layout (`kubewasm push` makes one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<OciModule>,
    /// A key of a ConfigMap's `binaryData` (Rust, C and Go plugins fit;
    /// the ConfigMap holds 1 MiB in all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapModule>,
    /// A `.wasm` file in the host's plugin folder, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^[A-Za-z0-9][A-Za-z0-9._-]*[.]wasm$')").message("file is the name of a .wasm file in the host's plugin folder, without a path"))]
    #[schemars(length(max = 253))]
    pub file: Option<String>,
}

/// An OCI reference, pinned by digest or resolved once from a tag.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OciModule {
    /// `registry/repository@sha256:<64 hex>`, the same with a tag before
    /// the digest (`repository:tag@sha256:...`, as `kubewasm push` prints
    /// it: the digest pins, the tag is for people), or
    /// `registry/repository:tag` (resolved once; the manifest digest it
    /// resolved to is written to status).
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?/[a-z0-9._/-]+(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$') && self.matches('(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[a-f0-9]{64})$')").message("reference must be registry/repository@sha256:<64 hex digits>, registry/repository:tag@sha256:<64 hex digits> (the digest pins, the tag is kept for people) or registry/repository:tag"))]
    #[schemars(length(max = 512))]
    pub reference: String,
    /// A Secret of type `kubernetes.io/dockerconfigjson` with the
    /// registry's credentials (its namespace defaults to the host's, or the
    /// NamespacedPlugin's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_secret: Option<ObjectName>,
    /// Public keys (cosign's `cosign.pub`, PEM) one of which must verify
    /// the module's cosign signature, on top of any key the host config
    /// requires for the reference (both must hold).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub verify_keys: Vec<KeyRef>,
}

/// A public key in a ConfigMap (keys are not secret).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KeyRef {
    /// The ConfigMap's name.
    pub config_map: String,
    /// Defaults to the host's namespace (a NamespacedPlugin's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The `data` key holding the PEM.
    pub key: String,
}

/// A namespaced object by name.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectName {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// A module in a ConfigMap.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapModule {
    pub name: String,
    /// Defaults to the host's namespace (a NamespacedPlugin's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The `binaryData` key holding the component.
    pub key: String,
}

/// The sidecar's `limits`, same keys and units (`64Mi`, `1s`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LimitsSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<IntOrString>,
    /// A duration (`250ms`, `1s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 256))]
    pub concurrency: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub handles: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub actions_per_call: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub actions_per_second: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_bytes_per_call: Option<IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_bytes_per_call: Option<IntOrString>,
}

/// One entry of the sidecar's `access`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.namespaces) && has(self.namespaceSelector))").message("an access rule takes namespaces or namespaceSelector, not both"))]
#[x_kube(validation = Rule::new("!has(self.namespaceSelector) || !self.verbs.exists(v, v == 'read')").message("namespaceSelector cannot grant read (a watch cannot select namespaces by label): list the namespaces instead"))]
pub struct AccessSpec {
    /// Plural resource names, group-qualified outside the core group
    /// (`configmaps`, `deployments.apps`).
    #[schemars(length(min = 1, max = 64))]
    pub kinds: Vec<String>,
    #[schemars(length(min = 1, max = 6))]
    pub verbs: Vec<Verb>,
    /// Omitted or `["*"]`: every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
}

/// The sidecar's `grants`: what of the outside world the plugin may see,
/// within the host config's ceiling.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GrantsSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stdio: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub dirs: Vec<DirGrantSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkSpec>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DirGrantSpec {
    pub host: String,
    pub guest: String,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkSpec {
    /// `host:port` destinations (`*` port: any).
    pub allow: Vec<String>,
}

/// Why a spec that passed the schema cannot be run.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("the spec cannot be written as a sidecar: {0}")]
    Encode(#[from] serde_json::Error),
    #[error(
        "a NamespacedPlugin's access is confined to its namespace {namespace}: access[{rule}] {what}; remove it or use a Plugin"
    )]
    Confined {
        namespace: String,
        rule: usize,
        what: String,
    },
}

/// The parts of a spec that a sidecar also holds, as one value: what
/// [`PluginSpec`] and [`crate::crd::NamespacedPluginSpec`] share.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PluginParts {
    pub module: ModuleSource,
    /// Passed to the plugin's `register` as JSON (any value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value")]
    pub config: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsSpec>,
    /// What the plugin may read and write; absent: read its subscriptions,
    /// write nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub access: Option<Vec<AccessSpec>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grants: Option<GrantsSpec>,
}

/// Any JSON value, kept as written.
fn any_value(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

impl PluginParts {
    /// The sidecar this spec amounts to, parsed and checked by the same
    /// code as a sidecar file (units, durations, verbs, ranges), so both
    /// refuse the same things with the same words. `what` names the object
    /// in errors (`plugins.kubewasm.io/replicator`).
    pub fn manifest(&self, what: &str) -> Result<Manifest, SpecError> {
        let mut sidecar = serde_json::Map::new();
        if let Some(config) = &self.config {
            sidecar.insert("config".into(), config.clone());
        }
        if let Some(limits) = &self.limits {
            sidecar.insert("limits".into(), serde_json::to_value(limits)?);
        }
        if let Some(access) = &self.access {
            sidecar.insert("access".into(), serde_json::to_value(access)?);
        }
        if let Some(grants) = &self.grants {
            sidecar.insert("grants".into(), serde_json::to_value(grants)?);
        }
        let text = serde_json::to_string(&serde_json::Value::Object(sidecar))?;
        Ok(Manifest::parse(Path::new(what), &text)?)
    }

    /// The first field naming an object outside `namespace`, which a
    /// NamespacedPlugin there may not reference (its CEL rules refuse any
    /// namespace at all; the host does not rely on them): the module's
    /// ConfigMap, the pull Secret, a verification key's ConfigMap.
    pub fn reference_outside(&self, namespace: &str) -> Option<String> {
        let other = |ns: &Option<String>| ns.as_deref().is_some_and(|n| n != namespace);
        let module = &self.module;
        if module
            .config_map
            .as_ref()
            .is_some_and(|c| other(&c.namespace))
        {
            return Some("module.configMap.namespace".into());
        }
        let oci = module.oci.as_ref()?;
        if oci
            .pull_secret
            .as_ref()
            .is_some_and(|s| other(&s.namespace))
        {
            return Some("module.oci.pullSecret.namespace".into());
        }
        oci.verify_keys
            .iter()
            .position(|k| other(&k.namespace))
            .map(|i| format!("module.oci.verifyKeys[{i}].namespace"))
    }

    /// This spec with its access confined to `namespace`, as a
    /// NamespacedPlugin's is whatever it asks: a rule naming no namespace
    /// (or `*`) is narrowed to it; a rule naming another namespace or
    /// selecting namespaces by label is refused.
    pub fn confined_to(&self, namespace: &str) -> Result<Self, SpecError> {
        let mut out = self.clone();
        for (rule, access) in out.access.iter_mut().flatten().enumerate() {
            let refuse = |what: String| SpecError::Confined {
                namespace: namespace.to_owned(),
                rule,
                what,
            };
            if access.namespace_selector.is_some() {
                return Err(refuse("selects namespaces by label".into()));
            }
            match &access.namespaces {
                None => {}
                Some(list) => {
                    if let Some(other) = list.iter().find(|n| *n != namespace && *n != "*") {
                        return Err(refuse(format!("names namespace {other}")));
                    }
                }
            }
            access.namespaces = Some(vec![namespace.to_owned()]);
        }
        Ok(out)
    }
}
