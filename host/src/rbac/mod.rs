//! `kubewasm rbac`: the least-privilege RBAC for a host's plugins. For a
//! folder of plugins it is derived from what each plugin declares at
//! registration, the way the host loads it (compile, instantiate,
//! `register`), within what its sidecar's access list grants, without a
//! cluster. For Plugin objects (manifests, or the objects a cluster holds)
//! it is what each access list grants, as the host would grant it: a
//! NamespacedPlugin's confined to its namespace, so a tenant's rules are a
//! Role there, never cluster-wide. Both merge into one set of roles.
//!
//! A plugin can only act inside its registration and its grant: the host
//! refuses the rest, so RBAC that covers both covers everything the host
//! will do for it.

pub mod access;
pub mod load;
pub mod objects;
pub mod policy;
pub mod render;

use std::path::PathBuf;

pub use access::{Access, Read, Resource, Scope, Where, Write};
pub use load::LoadedPlugin;
pub use objects::PluginObject;
pub use policy::{Policy, Rule};

use crate::kind::KindRegistry;
use crate::runtime::{EngineOptions, LoadError, Runtime};
use crate::source::kube::KubeTarget;

#[derive(Debug, thiserror::Error)]
pub enum RbacError {
    #[error(
        "cannot read plugin folder {path}: {source} (pass --plugins with the folder of NAME.wasm files)"
    )]
    Folder {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "no plugins in {0}: it holds no NAME.wasm file (for the example plugins run scripts/deploy-plugins.sh first)"
    )]
    Empty(PathBuf),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("plugin {plugin} ({path}) does not load: {source}")]
    Load {
        plugin: String,
        path: PathBuf,
        source: LoadError,
    },
    #[error("plugin {plugin}: {message}")]
    Kind { plugin: String, message: String },
    #[error("{path} is not a CustomResourceDefinition manifest: {message}")]
    Crd { path: PathBuf, message: String },
    #[error("cannot start the WebAssembly engine: {0}")]
    Engine(#[from] crate::runtime::engine::EngineError),
    #[error(
        "nothing to derive RBAC from: pass --plugins DIR (the plugin folder), --objects FILE (Plugin manifests) or --from-cluster, or --host-only for the host's own roles alone"
    )]
    NoSource,
    #[error(
        "--host-only renders the host's own roles alone: it takes no --plugins, --objects or --from-cluster, and needs the host's roles (not --plugins-only)"
    )]
    HostOnly,
    #[error("{path} is not a YAML or JSON manifest: {message}")]
    Manifests { path: PathBuf, message: String },
    #[error("{object} ({from}): {message}")]
    Object {
        object: String,
        from: String,
        message: String,
    },
    #[error("--from-cluster: {0}")]
    Cluster(String),
}

/// What `kubewasm rbac` is asked for.
#[derive(Debug, Clone)]
pub struct RbacOptions {
    /// The plugin folder (`NAME.wasm` plus optional sidecars), if any.
    pub plugins: Option<PathBuf>,
    /// Plugin and NamespacedPlugin manifests: YAML/JSON files (one or more
    /// documents each) or folders of them.
    pub objects: Vec<PathBuf>,
    /// Also the Plugin and NamespacedPlugin objects of this cluster.
    pub from_cluster: Option<KubeTarget>,
    /// Namespace the host runs in: its ServiceAccount and its Lease.
    pub namespace: String,
    /// Name of the roles and bindings.
    pub name: String,
    /// The host's ServiceAccount (in `namespace`) the roles are bound to.
    pub service_account: String,
    /// Also emit the host's own Role (its leader-election Lease); `false`
    /// for a further set of plugins bound to an existing ServiceAccount.
    pub host_role: bool,
    /// No plugins at all: the host's own roles alone (its Lease,
    /// `--metrics-auth`, Plugin objects), for a host whose plugins come as
    /// Plugin objects, each with its own RBAC.
    pub host_only: bool,
    /// Name of the leader-election Lease.
    pub lease_name: String,
    /// `run --shards N`: the shard and member Leases too.
    pub shards: Option<u32>,
    /// With the host's own roles, also the ClusterRole `--metrics-auth`
    /// needs (create TokenReviews and SubjectAccessReviews).
    pub metrics_auth: bool,
    /// CustomResourceDefinition manifests (files or folders of YAML/JSON)
    /// for kinds the built-in table does not know.
    pub crds: Vec<PathBuf>,
    /// Compile cache (as `run --cache-dir`); `None` compiles every time.
    pub cache_dir: Option<PathBuf>,
    /// The host config's `pluginObjects.tenantNamespaces`, when known
    /// (`--config`): a NamespacedPlugin elsewhere is never run by the host,
    /// so it grants nothing. `None`: every NamespacedPlugin counts.
    pub tenant_namespaces: Option<Vec<String>>,
    /// The ServiceAccount each tenant namespace acts as (the host config's
    /// `pluginObjects.tenants`): a NamespacedPlugin's writes and
    /// references are granted to it, not to the host.
    pub tenant_accounts: crate::objects::TenantAccounts,
}

impl RbacOptions {
    /// For the plugin folder `plugins` (add objects with the fields).
    pub fn new(plugins: PathBuf) -> Self {
        Self {
            plugins: Some(plugins),
            ..Self::default()
        }
    }
}

impl Default for RbacOptions {
    /// No plugins yet; the host's usual names, its roles and
    /// `--metrics-auth`'s, and the default compile cache.
    fn default() -> Self {
        Self {
            plugins: None,
            objects: Vec::new(),
            from_cluster: None,
            namespace: "kubewasm".into(),
            name: "kubewasm".into(),
            service_account: "kubewasm".into(),
            host_role: true,
            host_only: false,
            lease_name: "kubewasm".into(),
            shards: None,
            metrics_auth: true,
            crds: Vec::new(),
            cache_dir: crate::runtime::engine::default_cache_dir(),
            tenant_namespaces: None,
            tenant_accounts: crate::objects::TenantAccounts::default(),
        }
    }
}

/// What the plugins may do and the policy that covers it.
#[derive(Debug, Clone)]
pub struct Derived {
    /// The folder's plugins, by name.
    pub folder: Vec<Access>,
    /// The Plugin objects', in the order read (files, then the cluster).
    pub objects: Vec<Access>,
    pub policy: Policy,
    /// What a reader should know about the input (documents of other
    /// kinds skipped, a Plugin whose reads only its module knows): the CLI
    /// prints them on stderr.
    pub notes: Vec<String>,
}

/// Loads the folder, reads the objects and derives the policy.
pub async fn derive(opts: &RbacOptions) -> Result<Derived, RbacError> {
    let no_source =
        opts.plugins.is_none() && opts.objects.is_empty() && opts.from_cluster.is_none();
    if opts.host_only && !(no_source && opts.host_role) {
        return Err(RbacError::HostOnly);
    }
    if no_source && !opts.host_only {
        return Err(RbacError::NoSource);
    }
    let kinds = KindRegistry::builtin();
    for path in &opts.crds {
        access::learn_crds(&kinds, path)?;
    }
    // Objects first: a bad manifest fails before anything compiles.
    let mut notes = Vec::new();
    let mut found = objects::read(&opts.objects, &mut notes)?;
    if let Some(target) = &opts.from_cluster {
        found.extend(objects::list(target).await?);
    }
    if let Some(allowed) = &opts.tenant_namespaces {
        found.retain(|object| match &object.scope {
            objects::Scope::Tenant { namespace }
                if !crate::objects::tenant_allowed(allowed, namespace) =>
            {
                notes.push(format!(
                    "{} ({}) is never run by this host (pluginObjects.tenantNamespaces does not list {namespace}): not in this RBAC",
                    object.display, object.from
                ));
                false
            }
            _ => true,
        });
    }
    let mut manifests = Vec::with_capacity(found.len());
    for object in &found {
        manifests.push(object.manifest()?);
    }
    let mut folder = Vec::new();
    if let Some(dir) = &opts.plugins {
        let runtime = Runtime::new(EngineOptions {
            epoch_deadlines: true,
            cache_dir: opts.cache_dir.clone(),
            ..EngineOptions::default()
        })?;
        for p in load::load_folder(dir, &runtime).await? {
            folder.push(access::access(&p, &kinds)?);
        }
    }
    let mut from_objects = Vec::with_capacity(found.len());
    for (object, manifest) in found.iter().zip(&manifests) {
        if manifest.rules.is_none() {
            notes.push(format!(
                "{} ({}) lists no access: the host lets it read what its module subscribes to, which only the module says, so its reads are not in this RBAC; give it an access list (the host then grants exactly that)",
                object.display, object.from
            ));
        }
        if folder.iter().any(|a| a.plugin == object.plugin) {
            notes.push(format!(
                "{} ({}) and the folder's plugin {} share a name: the host serves only the one loaded first (the other is refused, NameTaken); both are in this RBAC",
                object.display, object.from, object.plugin
            ));
        }
        from_objects.push(access::granted(&object.display, manifest, &kinds)?);
    }
    // A tenant's plugin reads through the host's cache (the host's
    // informers list and watch for it), and writes and reads what it
    // names as its ServiceAccount: those are the tenant's rules.
    let mut host_side: Vec<Access> = folder.clone();
    let mut tenants: Vec<policy::Tenant> = Vec::new();
    for (object, access) in found.iter().zip(&from_objects) {
        let objects::Scope::Tenant { namespace } = &object.scope else {
            host_side.push(access.clone());
            continue;
        };
        host_side.push(Access {
            writes: Vec::new(),
            events: Vec::new(),
            ..access.clone()
        });
        let account = opts.tenant_accounts.account(namespace);
        let at = match tenants
            .iter()
            .position(|t| t.namespace == *namespace && t.service_account == account.name)
        {
            Some(at) => at,
            None => {
                tenants.push(policy::Tenant {
                    namespace: namespace.clone(),
                    service_account: account.name.clone(),
                    accesses: Vec::new(),
                    references: Vec::new(),
                });
                tenants.len() - 1
            }
        };
        let tenant = &mut tenants[at];
        tenant.accesses.push(access.clone());
        tenant.references.extend(object.references());
    }
    let mut policy = policy::derive(
        &host_side,
        &tenants,
        &opts.tenant_accounts.names(),
        &opts.namespace,
        &opts.lease_name,
    );
    policy
        .host
        .push(policy::lease_owner_rule(&opts.service_account));
    if let Some(shards) = opts.shards {
        policy
            .host
            .extend(policy::shard_rules(&opts.lease_name, shards));
    }
    Ok(Derived {
        folder,
        objects: from_objects,
        policy,
        notes,
    })
}

/// The YAML `kubewasm rbac` prints (the notes dropped).
pub async fn generate(opts: &RbacOptions) -> Result<String, RbacError> {
    let derived = derive(opts).await?;
    Ok(render::render(opts, &derived))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn docs(yaml: &str) -> Vec<serde_json::Value> {
        serde_yaml_ng::Deserializer::from_str(yaml)
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .filter(|v: &serde_json::Value| !v.is_null())
            .collect()
    }

    fn rules_text(doc: &serde_json::Value) -> Vec<String> {
        doc["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                format!(
                    "{}/{} {}",
                    r["apiGroups"][0].as_str().unwrap(),
                    r["resources"][0].as_str().unwrap(),
                    r["verbs"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_str().unwrap())
                        .collect::<Vec<_>>()
                        .join(",")
                )
            })
            .collect()
    }

    /// With the host config's tenant namespaces known, a NamespacedPlugin
    /// the host would never run grants nothing (and says why); one in a
    /// listed namespace gets its Role.
    #[tokio::test]
    async fn tenants_the_host_config_does_not_list_get_no_rules() {
        let dir = tempfile::tempdir().unwrap();
        let tenant = |ns: &str| {
            format!(
                "apiVersion: kubewasm.io/v1alpha1\nkind: NamespacedPlugin\nmetadata: {{name: mine, namespace: {ns}}}\nspec:\n  module: {{configMap: {{name: m, key: p.wasm}}}}\n  access:\n    - {{kinds: [configmaps], verbs: [read, apply]}}\n"
            )
        };
        std::fs::write(
            dir.path().join("t.yaml"),
            format!("{}---\n{}", tenant("team-a"), tenant("team-b")),
        )
        .unwrap();
        let opts = RbacOptions {
            objects: vec![dir.path().to_owned()],
            host_role: false,
            tenant_namespaces: Some(vec!["team-a".into()]),
            ..RbacOptions::default()
        };
        let derived = derive(&opts).await.unwrap();
        assert_eq!(derived.objects.len(), 1);
        assert_eq!(derived.notes.len(), 1, "{:?}", derived.notes);
        assert!(
            derived.notes[0].contains("team-b") && derived.notes[0].contains("never run"),
            "{:?}",
            derived.notes
        );
        let yaml = render::render(&opts, &derived);
        let roles: Vec<_> = docs(&yaml)
            .into_iter()
            .filter(|d| d["kind"] == "Role")
            .map(|d| {
                format!(
                    "{}/{}",
                    d["metadata"]["namespace"].as_str().unwrap(),
                    d["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect();
        // The host's (its cache reads there), and the tenant's own.
        assert_eq!(
            roles,
            ["team-a/kubewasm", "team-a/kubewasm-tenant"],
            "{yaml}"
        );
    }

    /// Objects alone (no folder, no module loaded): the Plugin's rules in
    /// the ClusterRole or a Role per namespace it lists, the tenant's in a
    /// Role in its namespace whatever it asks (alone, it needs no
    /// ClusterRole); rules merged as for the folder, naming every object
    /// that needs them.
    /// No plugins: the host's own roles alone (Lease, metrics
    /// authentication, Plugin objects), and no ClusterRole for plugins;
    /// with a plugin source or without the host's roles it is an error.
    #[tokio::test]
    async fn host_only_renders_the_hosts_own_roles_alone() {
        let opts = RbacOptions {
            host_only: true,
            ..RbacOptions::default()
        };
        let derived = derive(&opts).await.unwrap();
        let yaml = render::render(&opts, &derived);
        let names: Vec<String> = docs(&yaml)
            .iter()
            .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
            .map(|d| {
                format!(
                    "{}/{}",
                    d["kind"].as_str().unwrap(),
                    d["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                "Role/kubewasm-leader-election",
                "ClusterRole/kubewasm-metrics-auth",
                "ClusterRole/kubewasm-plugin-objects",
                "Role/kubewasm-plugin-objects",
                "Role/kubewasm-plugin-object-events"
            ],
            "{yaml}"
        );
        assert!(
            yaml.contains("kubewasm rbac --host-only --namespace"),
            "{yaml}"
        );
        for wrong in [
            RbacOptions {
                plugins: Some("plugins".into()),
                ..opts.clone()
            },
            RbacOptions {
                host_role: false,
                ..opts.clone()
            },
        ] {
            assert!(matches!(derive(&wrong).await, Err(RbacError::HostOnly)));
        }
    }

    #[tokio::test]
    async fn plugin_objects_alone_render_as_the_host_grants_them() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("ops.yaml"),
            "apiVersion: kubewasm.io/v1alpha1\nkind: Plugin\nmetadata: {name: ops}\nspec:\n  module: {oci: {reference: 'r.example/p:1'}}\n  access:\n    - {kinds: [deployments.apps], verbs: [read, patch]}\n    - {kinds: [configmaps], verbs: [read], namespaces: [team]}\n\
             ---\napiVersion: kubewasm.io/v1alpha1\nkind: Plugin\nmetadata: {name: blind}\nspec: {module: {file: b.wasm}}\n",
        )
        .unwrap();
        let tenant = dir.path().join("tenant.yaml");
        std::fs::write(
            &tenant,
            "apiVersion: kubewasm.io/v1alpha1\nkind: NamespacedPlugin\nmetadata: {name: mine, namespace: team}\nspec:\n  module: {configMap: {name: m, key: p.wasm}}\n  access:\n    - {kinds: [configmaps], verbs: [read, apply]}\n    - {kinds: [deployments.apps, namespaces], verbs: [read]}\n",
        )
        .unwrap();
        let opts = RbacOptions {
            objects: vec![dir.path().to_owned()],
            host_role: false,
            ..RbacOptions::default()
        };
        let derived = derive(&opts).await.unwrap();
        assert_eq!(derived.notes.len(), 1, "{:?}", derived.notes);
        assert!(
            derived.notes[0].contains("plugins.kubewasm.io/blind")
                && derived.notes[0].contains("lists no access"),
            "{:?}",
            derived.notes
        );
        let yaml = render::render(&opts, &derived);
        assert!(
            yaml.contains("kubewasm rbac --objects PATH --namespace")
                && yaml.contains("the access lists of the Plugin objects: plugins.kubewasm.io/ops, plugins.kubewasm.io/blind, namespacedplugins.kubewasm.io/mine in team."),
            "{yaml}"
        );
        let all = docs(&yaml);
        let kinds: Vec<(&str, &str)> = all
            .iter()
            .map(|d| {
                (
                    d["kind"].as_str().unwrap(),
                    d["metadata"]["namespace"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("ClusterRole", ""),
                ("ClusterRoleBinding", ""),
                ("Role", "team"),
                ("RoleBinding", "team"),
                ("ServiceAccount", "team"),
                ("Role", "team"),
                ("RoleBinding", "team"),
            ]
        );
        assert_eq!(
            rules_text(&all[0]),
            ["apps/deployments get,list,patch,watch"]
        );
        // The host's in team: configmaps read by both (the tenant's reads
        // go through the host's cache), one rule; the deployments read is
        // the ClusterRole's already, the namespaces read (cluster-scoped)
        // nowhere. The tenant's writes are not the host's.
        assert_eq!(
            rules_text(&all[2]),
            ["/configmaps get,list,watch"],
            "{yaml}"
        );
        let team = yaml.split("kind: Role\n").nth(1).unwrap();
        assert!(
            team.contains("namespacedplugins.kubewasm.io/mine in team (may read); plugins.kubewasm.io/ops (may read)"),
            "{team}"
        );
        // The tenant's own, bound to its ServiceAccount: its reads (asked
        // for it before it loads), its writes, and its module ConfigMap
        // (covered by the configmaps rule).
        assert_eq!(all[4]["metadata"]["name"], "kubewasm-tenant");
        assert_eq!(all[5]["metadata"]["name"], "kubewasm-tenant");
        assert_eq!(
            rules_text(&all[5]),
            [
                "/configmaps create,get,list,patch,watch",
                "apps/deployments get,list,watch"
            ],
            "{yaml}"
        );
        assert_eq!(
            all[6]["subjects"][0],
            serde_json::json!({"kind": "ServiceAccount", "name": "kubewasm-tenant", "namespace": "team"})
        );

        // The tenant alone: a Role in its namespace and nothing cluster-wide.
        let opts = RbacOptions {
            objects: vec![tenant],
            ..opts
        };
        let yaml = render::render(&opts, &derive(&opts).await.unwrap());
        let all = docs(&yaml);
        let kinds: Vec<(&str, &str)> = all
            .iter()
            .map(|d| {
                (
                    d["kind"].as_str().unwrap(),
                    d["metadata"]["namespace"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("Role", "team"),
                ("RoleBinding", "team"),
                ("ServiceAccount", "team"),
                ("Role", "team"),
                ("RoleBinding", "team")
            ],
            "{yaml}"
        );
        assert_eq!(
            rules_text(&all[0]),
            [
                "/configmaps get,list,watch",
                "apps/deployments get,list,watch"
            ]
        );
        assert_eq!(
            rules_text(&all[3]),
            [
                "/configmaps create,get,list,patch,watch",
                "apps/deployments get,list,watch"
            ]
        );
    }

    /// A tenant's pull Secret and keys are granted to its ServiceAccount by
    /// name, never to the host; the host may impersonate the accounts the
    /// host config names, nothing else.
    #[tokio::test]
    async fn a_tenants_references_are_its_accounts_and_the_host_only_impersonates() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("t.yaml"),
            "apiVersion: kubewasm.io/v1alpha1\nkind: NamespacedPlugin\nmetadata: {name: p, namespace: team-b}\nspec:\n  module: {oci: {reference: 'r.example/p:1', pullSecret: {name: regcred}, verifyKeys: [{configMap: keys, key: cosign.pub}]}}\n  access:\n    - {kinds: [pods], verbs: [read]}\n",
        )
        .unwrap();
        let opts = RbacOptions {
            objects: vec![dir.path().to_owned()],
            tenant_accounts: crate::objects::TenantAccounts::new(
                None,
                [("team-b".to_owned(), "plugins".to_owned())],
            ),
            ..RbacOptions::default()
        };
        let yaml = render::render(&opts, &derive(&opts).await.unwrap());
        let all = docs(&yaml);
        let tenant = all
            .iter()
            .find(|d| d["kind"] == "Role" && d["metadata"]["name"] == "kubewasm-tenant")
            .unwrap();
        assert_eq!(tenant["metadata"]["namespace"], "team-b");
        let rules = tenant["rules"].as_array().unwrap();
        let named: Vec<String> = rules
            .iter()
            .filter(|r| r.get("resourceNames").is_some())
            .map(|r| format!("{} {}", r["resources"][0], r["resourceNames"][0]))
            .collect();
        assert_eq!(
            named,
            [r#""secrets" "regcred""#, r#""configmaps" "keys""#],
            "{yaml}"
        );
        let binding = all
            .iter()
            .find(|d| d["kind"] == "RoleBinding" && d["metadata"]["name"] == "kubewasm-tenant")
            .unwrap();
        assert_eq!(binding["subjects"][0]["name"], "plugins");
        // No Secret of team-b for the host.
        assert!(
            !all.iter().any(|d| d["metadata"]["namespace"] == "team-b"
                && d["metadata"]["name"] == "kubewasm"
                && d.to_string().contains("secrets")),
            "{yaml}"
        );
        let objects = all
            .iter()
            .find(|d| {
                d["kind"] == "ClusterRole" && d["metadata"]["name"] == "kubewasm-plugin-objects"
            })
            .unwrap();
        let impersonate = objects["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resources"][0] == "serviceaccounts")
            .unwrap();
        assert_eq!(
            impersonate["verbs"],
            serde_json::json!(["get", "impersonate"])
        );
        // The default, for every other tenant namespace, and team-b's own.
        assert_eq!(
            impersonate["resourceNames"],
            serde_json::json!(["kubewasm-tenant", "plugins"])
        );
    }

    #[tokio::test]
    async fn nothing_to_derive_from_is_an_error_saying_what_to_pass() {
        let err = derive(&RbacOptions::default())
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--plugins")
                && err.contains("--objects")
                && err.contains("--from-cluster"),
            "{err}"
        );
    }
}
