//! Plugin objects as `kubewasm rbac` input: manifests as a user would
//! `kubectl apply` them (YAML files of one or more documents, folders of
//! them, `kind: List` as `kubectl get -o yaml` prints), or the objects a
//! cluster holds. Each becomes the manifest the host loads it with (a
//! NamespacedPlugin's access confined to its namespace first, as the host
//! does), so the RBAC follows what the host grants. A spec the host (or
//! `kubectl apply`) would refuse is an error naming the object and the
//! field: RBAC derived without it would be wrong either way.

use std::path::{Path, PathBuf};

use kube::{Api, ResourceExt};
use serde::Deserialize;
use serde_json::Value;

use super::RbacError;
use crate::crd::{NamespacedPlugin, Plugin, PluginParts};
use crate::runtime::Manifest;
use crate::source::kube::KubeTarget;

const API_VERSION: &str = "kubewasm.io/v1alpha1";

/// Which of the two kinds, and a tenant's namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    Cluster,
    Tenant { namespace: String },
}

/// One Plugin or NamespacedPlugin, as read.
#[derive(Debug, Clone)]
pub struct PluginObject {
    /// As the host names the object in logs and status
    /// (`plugins.kubewasm.io/x`, `namespacedplugins.kubewasm.io/x in ns`).
    pub display: String,
    /// The plugin's name in the host (`x`, `ns/x`).
    pub plugin: String,
    /// Where it was read: a file, or `the cluster`.
    pub from: String,
    pub scope: Scope,
    pub parts: PluginParts,
}

impl PluginObject {
    fn new(scope: Scope, name: &str, from: String, parts: PluginParts) -> Self {
        let (display, plugin) = match &scope {
            Scope::Cluster => (format!("plugins.kubewasm.io/{name}"), name.to_owned()),
            Scope::Tenant { namespace } => (
                format!("namespacedplugins.kubewasm.io/{name} in {namespace}"),
                format!("{namespace}/{name}"),
            ),
        };
        Self {
            display,
            plugin,
            from,
            scope,
            parts,
        }
    }

    fn error(&self, message: impl Into<String>) -> RbacError {
        RbacError::Object {
            object: self.display.clone(),
            from: self.from.clone(),
            message: message.into(),
        }
    }

    /// The manifest the host loads the object with: its spec as a sidecar,
    /// a NamespacedPlugin's confined to its namespace; the host's refusals
    /// of a spec are errors here.
    pub fn manifest(&self) -> Result<Manifest, RbacError> {
        self.check()?;
        let parts = match &self.scope {
            Scope::Cluster => self.parts.clone(),
            Scope::Tenant { namespace } => self
                .parts
                .confined_to(namespace)
                .map_err(|e| self.error(format!("spec: {e}")))?,
        };
        parts
            .manifest("spec")
            .map_err(|e| self.error(e.to_string()))
    }

    /// (plugin, resource, name) of the objects its spec names (module
    /// ConfigMap, pull Secret, verification keys), which a tenant reads as
    /// its ServiceAccount.
    pub fn references(&self) -> Vec<(String, &'static str, String)> {
        let m = &self.parts.module;
        let mut out = Vec::new();
        let mut add = |resource: &'static str, name: &str| {
            out.push((self.display.clone(), resource, name.to_owned()));
        };
        if let Some(cm) = &m.config_map {
            add("configmaps", &cm.name);
        }
        if let Some(oci) = &m.oci {
            if let Some(secret) = &oci.pull_secret {
                add("secrets", &secret.name);
            }
            for key in &oci.verify_keys {
                add("configmaps", &key.config_map);
            }
        }
        out
    }

    /// What the CRD's CEL rules refuse at `kubectl apply` and the host at
    /// load, beyond what the sidecar parser checks.
    fn check(&self) -> Result<(), RbacError> {
        let m = &self.parts.module;
        let sources = [m.oci.is_some(), m.config_map.is_some(), m.file.is_some()];
        if sources.iter().filter(|s| **s).count() != 1 {
            return Err(self.error("spec.module needs exactly one of oci, configMap or file"));
        }
        if matches!(self.scope, Scope::Tenant { .. }) {
            if m.file.is_some() {
                return Err(self.error(
                    "spec.module.file: a NamespacedPlugin cannot load a file from the host's plugin folder: use oci or configMap",
                ));
            }
            if self
                .parts
                .grants
                .as_ref()
                .is_some_and(|g| !g.dirs.is_empty())
            {
                return Err(self.error(
                    "spec.grants.dirs: a NamespacedPlugin cannot be granted host directories",
                ));
            }
            if let Scope::Tenant { namespace } = &self.scope
                && let Some(field) = self.parts.reference_outside(namespace)
            {
                return Err(self.error(format!(
                    "spec.{field}: a NamespacedPlugin references objects of its own namespace only"
                )));
            }
            if self.parts.access.is_none() {
                return Err(self.error(
                    "spec.access is missing: a NamespacedPlugin lists its access (what it may read and write in its namespace), and the host refuses one without",
                ));
            }
        }
        Ok(())
    }
}

/// The Plugin and NamespacedPlugin manifests in `paths` (files, or folders
/// of `.yaml`, `.yml` and `.json` files), in order. Other kinds are skipped
/// with a line in `notes`.
pub fn read(paths: &[PathBuf], notes: &mut Vec<String>) -> Result<Vec<PluginObject>, RbacError> {
    let mut out = Vec::new();
    for path in paths {
        read_path(path, &mut out, notes)?;
    }
    Ok(out)
}

fn read_path(
    path: &Path,
    out: &mut Vec<PluginObject>,
    notes: &mut Vec<String>,
) -> Result<(), RbacError> {
    let read_err = |source| RbacError::Read {
        path: path.to_owned(),
        source,
    };
    if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(read_err)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension()
                    .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
            })
            .collect();
        files.sort();
        for f in files {
            read_path(&f, out, notes)?;
        }
        return Ok(());
    }
    let text = std::fs::read_to_string(path).map_err(read_err)?;
    let from = path.display().to_string();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let value = Value::deserialize(doc).map_err(|e| RbacError::Manifests {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        match value["kind"].as_str() {
            _ if value.is_null() => {}
            Some("List") => {
                for item in value["items"].as_array().into_iter().flatten() {
                    document(item, &from, out, notes)?;
                }
            }
            _ => document(&value, &from, out, notes)?,
        }
    }
    Ok(())
}

/// One document: a Plugin or NamespacedPlugin, checked as `kubectl apply`
/// would (unknown fields included), else a note.
fn document(
    value: &Value,
    from: &str,
    out: &mut Vec<PluginObject>,
    notes: &mut Vec<String>,
) -> Result<(), RbacError> {
    let kind = value["kind"].as_str().unwrap_or("");
    let name = value["metadata"]["name"].as_str().unwrap_or("");
    let ours = value["apiVersion"]
        .as_str()
        .is_some_and(|v| v.starts_with("kubewasm.io/"));
    if !ours || !matches!(kind, "Plugin" | "NamespacedPlugin") {
        let kind = if kind.is_empty() {
            "a document without kind"
        } else {
            kind
        };
        notes.push(format!(
            "{from}: {kind} {name} ignored: only Plugin and NamespacedPlugin objects ({API_VERSION}) grant plugins access"
        ));
        return Ok(());
    }
    let named = if name.is_empty() { "(no name)" } else { name };
    let fail = |message: String| RbacError::Object {
        object: format!("{kind} {named}"),
        from: from.to_owned(),
        message,
    };
    if value["apiVersion"] != API_VERSION {
        return Err(fail(format!(
            "apiVersion {} is not one this kubewasm serves ({API_VERSION})",
            value["apiVersion"]
        )));
    }
    if name.is_empty() {
        return Err(fail("metadata.name is missing".into()));
    }
    let scope = if kind == "Plugin" {
        Scope::Cluster
    } else {
        match value["metadata"]["namespace"].as_str() {
            Some(namespace) if !namespace.is_empty() => Scope::Tenant {
                namespace: namespace.to_owned(),
            },
            _ => {
                return Err(fail(
                    "metadata.namespace is missing: a NamespacedPlugin's RBAC is a Role in its own namespace, so the manifest names it".into(),
                ));
            }
        }
    };
    let spec = &value["spec"];
    if !spec.is_object() {
        return Err(fail("spec is missing".into()));
    }
    let parts: PluginParts =
        serde_json::from_value(spec.clone()).map_err(|e| fail(format!("spec: {e}")))?;
    let typed = serde_json::to_value(&parts).map_err(|e| fail(format!("spec: {e}")))?;
    if let Some(field) = unknown_field(spec, &typed, "spec") {
        return Err(fail(format!(
            "{field} is not a field of the {kind} spec (kubectl apply refuses it): check its spelling"
        )));
    }
    out.push(PluginObject::new(scope, name, from.to_owned(), parts));
    Ok(())
}

/// The first key of `original` that the typed spec dropped (an unknown
/// field), as a path; `config` is any value, kept whole. A dropped key whose
/// value is empty (`false`, `[]`, `{}`, `null`) is a default the typed spec
/// does not write, not an unknown field.
fn unknown_field(original: &Value, typed: &Value, at: &str) -> Option<String> {
    match (original, typed) {
        (Value::Object(o), Value::Object(t)) => o.iter().find_map(|(key, value)| {
            let here = format!("{at}.{key}");
            match t.get(key) {
                None if !is_empty(value) => Some(here),
                None => None,
                Some(_) if at == "spec" && key == "config" => None,
                Some(kept) => unknown_field(value, kept, &here),
            }
        }),
        (Value::Array(o), Value::Array(t)) => o
            .iter()
            .zip(t)
            .enumerate()
            .find_map(|(i, (value, kept))| unknown_field(value, kept, &format!("{at}[{i}]"))),
        _ => None,
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// The Plugin and NamespacedPlugin objects of the cluster `target` names.
pub async fn list(target: &KubeTarget) -> Result<Vec<PluginObject>, RbacError> {
    let client = target
        .client()
        .await
        .map_err(|e| RbacError::Cluster(e.to_string()))?;
    let from = "the cluster".to_owned();
    let unserved = |e: kube::Error| {
        RbacError::Cluster(format!(
            "cannot list Plugin objects: {e} (are the CRDs of deploy/base/crds.yaml installed, and may you list plugins.kubewasm.io and namespacedplugins.kubewasm.io?)"
        ))
    };
    let params = kube::api::ListParams::default();
    let mut out = Vec::new();
    for p in Api::<Plugin>::all(client.clone())
        .list(&params)
        .await
        .map_err(unserved)?
    {
        out.push(PluginObject::new(
            Scope::Cluster,
            &p.name_any(),
            from.clone(),
            p.spec.parts,
        ));
    }
    for p in Api::<NamespacedPlugin>::all(client)
        .list(&params)
        .await
        .map_err(unserved)?
    {
        let namespace = p.namespace().unwrap_or_default();
        out.push(PluginObject::new(
            Scope::Tenant { namespace },
            &p.name_any(),
            from.clone(),
            p.spec.parts,
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn read_text(text: &str) -> (Result<Vec<PluginObject>, RbacError>, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("objects.yaml");
        std::fs::write(&path, text).unwrap();
        let mut notes = Vec::new();
        (read(&[dir.path().to_owned()], &mut notes), notes)
    }

    fn error(text: &str) -> String {
        let (objects, _) = read_text(text);
        match objects {
            Err(e) => e.to_string(),
            Ok(objects) => objects
                .iter()
                .map(|o| o.manifest().map(|_| ()))
                .collect::<Result<Vec<_>, _>>()
                .unwrap_err()
                .to_string(),
        }
    }

    const MODULE: &str = "module: {configMap: {name: m, key: p.wasm}}";

    #[test]
    fn documents_lists_and_folders_are_read_other_kinds_noted() {
        let (objects, notes) = read_text(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings}}\n---\n\
             apiVersion: kubewasm.io/v1alpha1\nkind: Plugin\nmetadata: {{name: a}}\nspec: {{{MODULE}, grants: {{stdio: false, env: []}}}}\n---\n\
             apiVersion: v1\nkind: List\nitems:\n  - apiVersion: kubewasm.io/v1alpha1\n    kind: NamespacedPlugin\n    metadata: {{name: b, namespace: team}}\n    spec:\n      {MODULE}\n      access: [{{kinds: [configmaps], verbs: [read]}}]\n"
        ));
        let objects = objects.unwrap();
        let names: Vec<(&str, &str)> = objects
            .iter()
            .map(|o| (o.display.as_str(), o.plugin.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("plugins.kubewasm.io/a", "a"),
                ("namespacedplugins.kubewasm.io/b in team", "team/b")
            ]
        );
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("ConfigMap settings ignored"), "{notes:?}");
        // The tenant's access is confined to its namespace.
        let tenant = objects[1].manifest().unwrap();
        let rules = tenant.rules.unwrap();
        assert_eq!(
            rules[0].namespaces,
            crate::runtime::access::Namespaces::List(["team".to_owned()].into())
        );
    }

    #[test]
    fn invalid_specs_are_errors_naming_the_object_and_the_field() {
        let plugin = |spec: &str| {
            format!(
                "apiVersion: kubewasm.io/v1alpha1\nkind: Plugin\nmetadata: {{name: p}}\nspec: {spec}\n"
            )
        };
        let tenant = |spec: &str| {
            format!(
                "apiVersion: kubewasm.io/v1alpha1\nkind: NamespacedPlugin\nmetadata: {{name: t, namespace: team}}\nspec: {spec}\n"
            )
        };
        for (text, needles) in [
            (
                plugin(&format!("{{{MODULE}, acess: [{{kinds: [pods], verbs: [read]}}]}}")),
                vec!["Plugin p", "objects.yaml", "spec.acess"],
            ),
            (
                plugin(&format!(
                    "{{{MODULE}, access: [{{kinds: [pods], verbs: [read], namespace: [a]}}]}}"
                )),
                vec!["spec.access[0].namespace"],
            ),
            (
                plugin(&format!("{{{MODULE}, access: [{{kinds: [pods], verbs: [fly]}}]}}")),
                vec!["Plugin p", "spec: ", "fly"],
            ),
            (
                plugin(&format!("{{{MODULE}, limits: {{memory: lots}}}}")),
                vec!["plugins.kubewasm.io/p", "lots"],
            ),
            (
                plugin("{module: {file: a.wasm, configMap: {name: m, key: k}}}"),
                vec!["plugins.kubewasm.io/p", "spec.module needs exactly one"],
            ),
            (
                tenant(&format!("{{{MODULE}}}")),
                vec!["namespacedplugins.kubewasm.io/t in team", "spec.access is missing"],
            ),
            (
                tenant(&format!(
                    "{{{MODULE}, access: [{{kinds: [pods], verbs: [read], namespaces: [other]}}]}}"
                )),
                vec!["namespacedplugins.kubewasm.io/t in team", "access[0] names namespace other"],
            ),
            (
                tenant("{module: {file: a.wasm}, access: []}"),
                vec!["spec.module.file"],
            ),
            (
                "apiVersion: kubewasm.io/v1alpha1\nkind: NamespacedPlugin\nmetadata: {name: t}\nspec: {}\n".to_owned(),
                vec!["NamespacedPlugin t", "metadata.namespace"],
            ),
            (
                "apiVersion: kubewasm.io/v2\nkind: Plugin\nmetadata: {name: p}\nspec: {}\n"
                    .to_owned(),
                vec!["Plugin p", "kubewasm.io/v2"],
            ),
        ] {
            let err = error(&text);
            for n in needles {
                assert!(err.contains(n), "{n:?} not in {err:?}\n{text}");
            }
        }
    }
}
