//! The committed schemas (`host/openapi/*.json`, one per group-version the
//! target API server serves), embedded in the binary and parsed on first
//! use of a group-version: validation of a ConfigMap never parses apps/v1.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::Value;

use crate::kind::Gvk;

/// The Kubernetes release the schemas were read from (the test harness's
/// kube-apiserver).
pub const KUBERNETES_VERSION: &str = "1.35.8";

/// One component schema, reduced to what validation reads (see
/// `reduce.rs` for what is kept). `$ref`s name another component of the
/// same document.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Schema {
    #[serde(rename = "$ref")]
    pub reference: Option<String>,
    #[serde(rename = "type")]
    pub ty: Option<String>,
    pub format: Option<String>,
    #[serde(default)]
    pub required: Vec<String>,
    #[serde(default)]
    pub properties: BTreeMap<String, Schema>,
    pub items: Option<Box<Schema>>,
    pub additional_properties: Option<Box<Schema>>,
    #[serde(default)]
    pub one_of: Vec<Schema>,
    #[serde(default, rename = "enum")]
    pub enumeration: Vec<Value>,
    pub default: Option<Value>,
    #[serde(default, rename = "x-kubernetes-int-or-string")]
    pub int_or_string: bool,
    #[serde(default, rename = "x-kubernetes-preserve-unknown-fields")]
    pub preserve_unknown_fields: bool,
    #[serde(default, rename = "x-kubernetes-embedded-resource")]
    pub embedded_resource: bool,
    #[serde(rename = "x-kubernetes-list-type")]
    pub list_type: Option<String>,
    #[serde(default, rename = "x-kubernetes-list-map-keys")]
    pub list_map_keys: Vec<String>,
    #[serde(rename = "x-kubernetes-map-type")]
    pub map_type: Option<String>,
}

/// A group-version's document: its kinds (to their component) and the
/// components they reach.
#[derive(Debug, Deserialize)]
pub struct Document {
    pub kinds: BTreeMap<String, String>,
    pub schemas: BTreeMap<String, Schema>,
}

impl Document {
    /// The component named `name` (a `$ref`'s target).
    pub fn component(&self, name: &str) -> Option<&Schema> {
        self.schemas.get(name)
    }

    /// `schema` with its `$ref` followed (once: components are never bare
    /// references), and the component's name when it was one.
    pub fn resolve<'a>(&'a self, schema: &'a Schema) -> (&'a Schema, Option<&'a str>) {
        match schema.reference.as_deref() {
            Some(name) => match self.schemas.get_key_value(name) {
                Some((name, target)) => (target, Some(name.as_str())),
                None => (schema, None),
            },
            None => (schema, None),
        }
    }

    /// The top-level schema of `kind` and its component name.
    pub fn kind(&self, kind: &str) -> Option<(&str, &Schema)> {
        let name = self.kinds.get(kind)?;
        Some((name.as_str(), self.schemas.get(name)?))
    }
}

/// The committed file name of a group-version (`core_v1.json`,
/// `apps_v1.json`, `networking.k8s.io_v1.json`).
pub fn file_name(group: &str, version: &str) -> String {
    let group = if group.is_empty() { "core" } else { group };
    format!("{group}_{version}.json")
}

/// Every committed document, as `(group, version, text)`: each group-version
/// the target release serves (the generator writes one file for each).
pub const EMBEDDED: &[(&str, &str, &str)] = &[
    ("", "v1", include_str!("../../openapi/core_v1.json")),
    (
        "admissionregistration.k8s.io",
        "v1",
        include_str!("../../openapi/admissionregistration.k8s.io_v1.json"),
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        include_str!("../../openapi/apiextensions.k8s.io_v1.json"),
    ),
    (
        "apiregistration.k8s.io",
        "v1",
        include_str!("../../openapi/apiregistration.k8s.io_v1.json"),
    ),
    ("apps", "v1", include_str!("../../openapi/apps_v1.json")),
    (
        "authentication.k8s.io",
        "v1",
        include_str!("../../openapi/authentication.k8s.io_v1.json"),
    ),
    (
        "authorization.k8s.io",
        "v1",
        include_str!("../../openapi/authorization.k8s.io_v1.json"),
    ),
    (
        "autoscaling",
        "v1",
        include_str!("../../openapi/autoscaling_v1.json"),
    ),
    (
        "autoscaling",
        "v2",
        include_str!("../../openapi/autoscaling_v2.json"),
    ),
    ("batch", "v1", include_str!("../../openapi/batch_v1.json")),
    (
        "certificates.k8s.io",
        "v1",
        include_str!("../../openapi/certificates.k8s.io_v1.json"),
    ),
    (
        "coordination.k8s.io",
        "v1",
        include_str!("../../openapi/coordination.k8s.io_v1.json"),
    ),
    (
        "discovery.k8s.io",
        "v1",
        include_str!("../../openapi/discovery.k8s.io_v1.json"),
    ),
    (
        "events.k8s.io",
        "v1",
        include_str!("../../openapi/events.k8s.io_v1.json"),
    ),
    (
        "flowcontrol.apiserver.k8s.io",
        "v1",
        include_str!("../../openapi/flowcontrol.apiserver.k8s.io_v1.json"),
    ),
    (
        "networking.k8s.io",
        "v1",
        include_str!("../../openapi/networking.k8s.io_v1.json"),
    ),
    (
        "node.k8s.io",
        "v1",
        include_str!("../../openapi/node.k8s.io_v1.json"),
    ),
    ("policy", "v1", include_str!("../../openapi/policy_v1.json")),
    (
        "rbac.authorization.k8s.io",
        "v1",
        include_str!("../../openapi/rbac.authorization.k8s.io_v1.json"),
    ),
    (
        "resource.k8s.io",
        "v1",
        include_str!("../../openapi/resource.k8s.io_v1.json"),
    ),
    (
        "scheduling.k8s.io",
        "v1",
        include_str!("../../openapi/scheduling.k8s.io_v1.json"),
    ),
    (
        "storage.k8s.io",
        "v1",
        include_str!("../../openapi/storage.k8s.io_v1.json"),
    ),
];

/// The parsed document of each embedded group-version, parsed on first use.
fn parsed() -> &'static [OnceLock<Option<Document>>] {
    static PARSED: OnceLock<Vec<OnceLock<Option<Document>>>> = OnceLock::new();
    PARSED.get_or_init(|| EMBEDDED.iter().map(|_| OnceLock::new()).collect())
}

/// The document of `group`/`version`, if the target release serves it. A
/// committed file that does not parse counts as absent (a unit test parses
/// them all, so that cannot ship).
pub fn document(group: &str, version: &str) -> Option<&'static Document> {
    let index = EMBEDDED
        .iter()
        .position(|(g, v, _)| *g == group && *v == version)?;
    parsed()
        .get(index)?
        .get_or_init(|| serde_json::from_str(EMBEDDED[index].2).ok())
        .as_ref()
}

/// The document and the kind's top-level schema for `gvk`: `None` for kinds
/// the target release does not build in (custom resources, newer kinds).
pub fn lookup(gvk: &Gvk) -> Option<(&'static Document, &'static str, &'static Schema)> {
    let doc = document(&gvk.group, &gvk.version)?;
    let (name, schema) = doc.kind(&gvk.kind)?;
    Some((doc, name, schema))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_committed_document_parses_and_its_references_resolve() {
        for (group, version, _) in EMBEDDED {
            let doc = document(group, version)
                .unwrap_or_else(|| panic!("{} does not parse", file_name(group, version)));
            assert!(!doc.kinds.is_empty(), "{group}/{version} has no kinds");
            for name in doc.kinds.values() {
                assert!(doc.schemas.contains_key(name), "{group}/{version}: {name}");
            }
            fn refs<'a>(s: &'a Schema, out: &mut Vec<&'a str>) {
                out.extend(s.reference.as_deref());
                s.properties.values().for_each(|p| refs(p, out));
                s.items.iter().for_each(|p| refs(p, out));
                s.additional_properties.iter().for_each(|p| refs(p, out));
                s.one_of.iter().for_each(|p| refs(p, out));
            }
            let mut all = Vec::new();
            doc.schemas.values().for_each(|s| refs(s, &mut all));
            for r in all {
                assert!(
                    doc.schemas.contains_key(r),
                    "{group}/{version}: dangling {r}"
                );
            }
        }
    }

    #[test]
    fn kinds_are_found_by_their_group_version_kind() {
        let (_, name, schema) = lookup(&Gvk::new("apps", "v1", "Deployment")).unwrap();
        assert_eq!(name, "io.k8s.api.apps.v1.Deployment");
        assert!(schema.properties.contains_key("spec"));
        assert!(lookup(&Gvk::new("", "v1", "ConfigMap")).is_some());
        assert!(lookup(&Gvk::new("example.com", "v1", "Widget")).is_none());
        assert!(lookup(&Gvk::new("apps", "v1", "Nope")).is_none());
    }
}
