//! What one plugin may do, in RBAC terms: the resources it reads (its
//! subscriptions, which are also all its cache can read), the resources it
//! writes and with which verbs, and where it records Events: for a plugin
//! of the folder, its registration within the access list of its sidecar;
//! for a Plugin object, whose module is not loaded here, everything its
//! access list grants ([`granted`]). Kinds are resolved offline: the
//! built-in kind table, CRD manifests passed with `--crd`, else the name as
//! the plugin wrote it.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Deserialize;

use super::RbacError;
use super::load::LoadedPlugin;
use super::policy::Reason;
use crate::kind::{KindError, KindInfo, KindRef, KindRegistry};
use crate::runtime::Manifest;
use crate::runtime::access::{GrantKind, Namespaces, ReadRequest, ReadScope, Rule, Verb};

/// Whether a resource is namespaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    Namespaced,
    Cluster,
    /// Not known offline (no CRD given): granted cluster-wide, which covers
    /// either scope.
    Unknown,
}

/// An RBAC resource: API group and plural name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    pub group: String,
    pub plural: String,
    pub scope: Scope,
    /// `false` for kinds that have no status subresource.
    pub status: bool,
    /// How the name was found when neither the built-in table nor a CRD knew
    /// it; shown next to the rule so that a reader can check it.
    pub note: Option<String>,
}

/// One subscription, narrowed to what the sidecar grants (or, for a
/// Plugin object, one read its access list grants).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    pub resource: Resource,
    /// `None`: every namespace (or a cluster-scoped kind).
    pub namespace: Option<String>,
    /// [`Reason::Subscribes`], [`Reason::ReadsCache`] (a subscription with
    /// no delta types) or [`Reason::MayRead`] (granted, module not loaded).
    pub why: Reason,
}

/// Where a grant applies, in RBAC terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Where {
    All,
    List(Vec<String>),
    /// A namespaceSelector (its text): RBAC cannot select namespaces by
    /// label, so the rule is cluster-wide and the host enforces the rest.
    Selector(String),
}

impl From<&Namespaces> for Where {
    fn from(n: &Namespaces) -> Self {
        match n {
            Namespaces::All => Where::All,
            Namespaces::List(l) => Where::List(l.iter().cloned().collect()),
            Namespaces::Selector(_, text) => Where::Selector(text.clone()),
        }
    }
}

/// A declared write kind and the write verbs one sidecar rule grants on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub resource: Resource,
    /// Among apply, patch, delete and status.
    pub verbs: BTreeSet<Verb>,
    pub at: Where,
}

/// What one plugin may do: its registration within its sidecar's grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub plugin: String,
    pub reads: Vec<Read>,
    pub writes: Vec<Write>,
    /// Where it may record events.k8s.io Events (the `events` verb): in
    /// the namespaces of the objects they regard, `default` for
    /// cluster-scoped ones.
    pub events: Vec<Where>,
}

/// What `plugin` may do: the one place that decides it, with the same
/// check the host makes at load ([`crate::runtime::access::Grant`]): the
/// registration asks, the sidecar's access list grants. Without an access
/// list a plugin reads what it subscribes to and writes nothing.
pub fn access(plugin: &LoadedPlugin, kinds: &KindRegistry) -> Result<Access, RbacError> {
    let r = &plugin.registration;
    let fail = |message: String| RbacError::Kind {
        plugin: plugin.name.clone(),
        message,
    };
    let resolve = |k: &KindRef| resolve(kinds, k).map_err(fail);
    let mut subs = Vec::with_capacity(r.subscriptions.len());
    for s in &r.subscriptions {
        let mut resource = resolve(&s.kind)?;
        // The host refuses a namespace on a cluster-scoped kind, so a
        // namespaced subscription proves the kind namespaced.
        if s.namespace.is_some() && resource.scope == Scope::Unknown {
            resource.scope = Scope::Namespaced;
        }
        subs.push((resource, s));
    }
    let mut write_resources = Vec::with_capacity(r.writes.len());
    for w in &r.writes {
        let mut resource = resolve(w)?;
        if resource.scope == Scope::Unknown
            && subs
                .iter()
                .any(|(rd, s)| s.namespace.is_some() && same(rd, &resource))
        {
            resource.scope = Scope::Namespaced;
        }
        write_resources.push(resource);
    }

    let grant = plugin.manifest.grant(&plugin.name);
    let infos: Vec<KindInfo> = subs.iter().map(|(res, _)| info_of(res)).collect();
    let requests: Vec<ReadRequest<'_>> = infos
        .iter()
        .zip(&subs)
        .map(|(kind, (_, s))| ReadRequest {
            kind,
            namespace: s.namespace.as_deref(),
        })
        .collect();
    let write_infos: Vec<KindInfo> = write_resources.iter().map(info_of).collect();
    let scopes = grant
        .check_registration(&requests, &write_infos)
        .map_err(|d| fail(d.0))?;

    let mut reads = Vec::with_capacity(subs.len());
    for ((resource, s), scope) in subs.into_iter().zip(scopes) {
        let why = if s.deltas.is_empty() {
            Reason::ReadsCache
        } else {
            Reason::Subscribes
        };
        match scope {
            ReadScope::AsAsked => reads.push(Read {
                resource,
                namespace: s.namespace.clone(),
                why,
            }),
            ReadScope::Narrowed(namespaces) => {
                for ns in namespaces {
                    reads.push(Read {
                        resource: Resource {
                            scope: Scope::Namespaced,
                            ..resource.clone()
                        },
                        namespace: Some(ns),
                        why,
                    });
                }
            }
        }
    }
    let rules = grant.rules.as_deref().unwrap_or_default();
    let mut writes = Vec::new();
    for resource in write_resources {
        let gk = GrantKind {
            group: resource.group.clone(),
            plural: resource.plural.clone(),
        };
        for rule in rules.iter().filter(|rule| rule.kinds.contains(&gk)) {
            let verbs: BTreeSet<Verb> = rule
                .verbs
                .iter()
                .copied()
                .filter(|v| Verb::WRITES.contains(v))
                .collect();
            if !verbs.is_empty() {
                writes.push(Write {
                    resource: resource.clone(),
                    verbs,
                    at: Where::from(&rule.namespaces),
                });
            }
        }
    }
    Ok(Access {
        plugin: plugin.name.clone(),
        reads,
        writes,
        events: events(rules, kinds),
    })
}

/// Where the `events` verb of `rules` lets a plugin record Events.
fn events(rules: &[Rule], kinds: &KindRegistry) -> Vec<Where> {
    let mut events = Vec::new();
    for rule in rules.iter().filter(|r| r.verbs.contains(&Verb::Events)) {
        match &rule.namespaces {
            // Events regarding cluster-scoped objects go to `default`: a
            // rule for such kinds only needs that namespace.
            Namespaces::All => {
                let cluster_only = rule.kinds.iter().all(|k| {
                    resolve(kinds, &KindRef::Resource(k.to_string()))
                        .is_ok_and(|res| res.scope == Scope::Cluster)
                });
                events.push(if cluster_only {
                    Where::List(vec!["default".into()])
                } else {
                    Where::All
                });
            }
            other => events.push(Where::from(other)),
        }
    }
    events
}

/// What the plugin of a Plugin object (`plugin` names it) may do: every
/// read and write its access list grants, as the host's grant check
/// ([`crate::runtime::access::Grant::check`]) would allow them. Its module
/// is not loaded, so this covers whatever it registers within its grant. A
/// cluster-scoped kind in a rule limited to namespaces is left out: the
/// host never allows it there. Without an access list the plugin reads
/// what its module subscribes to, which only the module says: nothing is
/// derived (the caller notes it).
pub fn granted(
    plugin: &str,
    manifest: &Manifest,
    kinds: &KindRegistry,
) -> Result<Access, RbacError> {
    let fail = |message: String| RbacError::Kind {
        plugin: plugin.to_owned(),
        message,
    };
    let rules = manifest.rules.as_deref().unwrap_or_default();
    let mut reads = Vec::new();
    let mut writes = Vec::new();
    for rule in rules {
        for kind in &rule.kinds {
            let mut resource =
                resolve(kinds, &KindRef::Resource(kind.to_string())).map_err(fail)?;
            if rule.namespaces != Namespaces::All {
                match resource.scope {
                    Scope::Cluster => continue,
                    // Named by namespace: the host treats it as namespaced.
                    Scope::Unknown => resource.scope = Scope::Namespaced,
                    Scope::Namespaced => {}
                }
            }
            if rule.verbs.contains(&Verb::Read) {
                match &rule.namespaces {
                    Namespaces::List(list) => {
                        reads.extend(list.iter().map(|ns| Read {
                            resource: resource.clone(),
                            namespace: Some(ns.clone()),
                            why: Reason::MayRead,
                        }));
                    }
                    // A selector cannot grant read (the sidecar parser
                    // refuses it).
                    Namespaces::Selector(..) => {}
                    Namespaces::All => reads.push(Read {
                        resource: resource.clone(),
                        namespace: None,
                        why: Reason::MayRead,
                    }),
                }
            }
            let verbs: BTreeSet<Verb> = rule
                .verbs
                .iter()
                .copied()
                .filter(|v| Verb::WRITES.contains(v))
                .collect();
            if !verbs.is_empty() {
                writes.push(Write {
                    resource,
                    verbs,
                    at: Where::from(&rule.namespaces),
                });
            }
        }
    }
    Ok(Access {
        plugin: plugin.to_owned(),
        reads,
        writes,
        events: events(rules, kinds),
    })
}

/// A resource as the grant check sees it (group, plural, scope; an unknown
/// scope counts as namespaced, which a namespace list can narrow).
fn info_of(r: &Resource) -> KindInfo {
    KindInfo::new(
        &r.group,
        "v1",
        &r.plural,
        &r.plural,
        r.scope != Scope::Cluster,
    )
}

fn same(a: &Resource, b: &Resource) -> bool {
    a.group == b.group && a.plural == b.plural
}

/// Kinds of the built-in table that have no status subresource.
fn has_status(group: &str, plural: &str) -> bool {
    !matches!(
        (group, plural),
        (
            "",
            "configmaps" | "secrets" | "serviceaccounts" | "endpoints" | "events" | "limitranges"
        ) | ("events.k8s.io", "events")
            | ("rbac.authorization.k8s.io", _)
            | ("networking.k8s.io", "networkpolicies")
            | ("coordination.k8s.io", "leases")
    )
}

/// kubectl's guess of a plural from a kind (`UnsafeGuessKindToResource`).
fn guess_plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    if lower.ends_with('s') {
        format!("{lower}es")
    } else if let Some(stem) = lower.strip_suffix('y') {
        format!("{stem}ies")
    } else {
        format!("{lower}s")
    }
}

fn is_version(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('v') else {
        return false;
    };
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    if digits == 0 {
        return false;
    }
    let tail = &rest[digits..];
    tail.is_empty()
        || ["alpha", "beta"].iter().any(|p| {
            tail.strip_prefix(p)
                .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        })
}

/// Resolves a kind offline; the error names the kind and what to do.
pub fn resolve(kinds: &KindRegistry, kind: &KindRef) -> Result<Resource, String> {
    match kinds.resolve(kind) {
        Ok(info) => Ok(Resource {
            status: has_status(&info.gvk.group, &info.plural),
            group: info.gvk.group,
            plural: info.plural,
            scope: if info.namespaced {
                Scope::Namespaced
            } else {
                Scope::Cluster
            },
            note: None,
        }),
        Err(e @ KindError::Ambiguous { .. }) => Err(e.to_string()),
        Err(KindError::Unknown(_)) => match kind {
            KindRef::Gvk(gvk) => Ok(Resource {
                group: gvk.group.clone(),
                plural: guess_plural(&gvk.kind),
                scope: Scope::Unknown,
                status: true,
                note: Some(format!(
                    "plural guessed from kind {gvk}; pass its CRD with --crd to be exact"
                )),
            }),
            KindRef::Resource(name) => {
                let Some((first, rest)) = name.split_once('.') else {
                    return Err(format!(
                        "cannot resolve kind {name:?} offline: it is not a built-in kind and names no API group. \
                         Write it with its group in the registration (`{name}.example.com` style, or a group/version/kind), \
                         or pass its CustomResourceDefinition with --crd FILE"
                    ));
                };
                let group = match rest.split_once('.') {
                    Some((v, g)) if is_version(v) => g,
                    _ => rest,
                };
                // `Widget.example.com` names a kind, `widgets.example.com` a resource.
                let (plural, how) = if first.chars().any(|c| c.is_ascii_uppercase()) {
                    (guess_plural(first), "plural guessed from the kind")
                } else {
                    (first.to_owned(), "taken as written")
                };
                Ok(Resource {
                    group: group.to_owned(),
                    plural,
                    scope: Scope::Unknown,
                    status: true,
                    note: Some(format!(
                        "{name:?} is not built in: {how}; pass its CRD with --crd to be exact"
                    )),
                })
            }
        },
    }
}

/// Teaches `kinds` the CustomResourceDefinitions in `path` (a YAML/JSON
/// file, possibly multi-document, or a folder of them).
pub fn learn_crds(kinds: &KindRegistry, path: &Path) -> Result<(), RbacError> {
    let read_err = |source| RbacError::Read {
        path: path.to_owned(),
        source,
    };
    if path.is_dir() {
        let mut files: Vec<_> = std::fs::read_dir(path)
            .map_err(read_err)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension()
                    .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
            })
            .collect();
        files.sort();
        for f in files {
            learn_crds(kinds, &f)?;
        }
        return Ok(());
    }
    let text = std::fs::read_to_string(path).map_err(read_err)?;
    let crd_err = |message: String| RbacError::Crd {
        path: path.to_owned(),
        message,
    };
    let mut found = 0;
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let value = serde_json::Value::deserialize(doc).map_err(|e| crd_err(e.to_string()))?;
        if value.is_null() {
            continue;
        }
        if value["kind"] != "CustomResourceDefinition" {
            continue;
        }
        let spec = &value["spec"];
        if spec["group"].as_str().is_none()
            || spec["names"]["plural"].as_str().is_none()
            || spec["names"]["kind"].as_str().is_none()
        {
            return Err(crd_err(
                "spec.group, spec.names.kind and spec.names.plural are required".into(),
            ));
        }
        kinds.learn_crd(&value);
        found += 1;
    }
    if found == 0 {
        return Err(crd_err("it holds no kind: CustomResourceDefinition".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::Gvk;

    #[test]
    fn resolves_built_in_kinds_with_scope_and_status() {
        let kinds = KindRegistry::builtin();
        let d = resolve(&kinds, &KindRef::Resource("deployments.apps".into())).unwrap();
        assert_eq!(
            (d.group.as_str(), d.plural.as_str()),
            ("apps", "deployments")
        );
        assert_eq!(d.scope, Scope::Namespaced);
        assert!(d.status && d.note.is_none());
        let ns = resolve(&kinds, &KindRef::Gvk(Gvk::new("", "v1", "Namespace"))).unwrap();
        assert_eq!(ns.scope, Scope::Cluster);
        let cm = resolve(&kinds, &KindRef::Resource("configmaps".into())).unwrap();
        assert!(!cm.status, "configmaps have no status subresource");
    }

    #[test]
    fn unknown_kinds_resolve_as_written_or_fail_with_a_hint() {
        let kinds = KindRegistry::builtin();
        let w = resolve(&kinds, &KindRef::Resource("widgets.v1.example.com".into())).unwrap();
        assert_eq!(
            (w.group.as_str(), w.plural.as_str()),
            ("example.com", "widgets")
        );
        assert_eq!(w.scope, Scope::Unknown);
        let w = resolve(&kinds, &KindRef::Resource("widgets.example.com".into())).unwrap();
        assert_eq!(
            (w.group.as_str(), w.plural.as_str()),
            ("example.com", "widgets")
        );
        let p = resolve(
            &kinds,
            &KindRef::Gvk(Gvk::new("example.com", "v1", "Policy")),
        )
        .unwrap();
        assert_eq!(p.plural, "policies");
        assert!(p.note.unwrap().contains("--crd"));
        let err = resolve(&kinds, &KindRef::Resource("widgets".into())).unwrap_err();
        assert!(
            err.contains("\"widgets\"") && err.contains("--crd") && err.contains("group"),
            "{err}"
        );
    }

    #[test]
    fn crds_teach_plural_and_scope() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("crd.yaml");
        std::fs::write(
            &path,
            "---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: gadgets.example.com}\n\
             spec:\n  group: example.com\n  scope: Cluster\n  names: {kind: Gadget, plural: gadgets}\n  versions: [{name: v1, served: true, storage: true}]\n",
        )
        .unwrap();
        let kinds = KindRegistry::builtin();
        learn_crds(&kinds, dir.path()).unwrap();
        let g = resolve(
            &kinds,
            &KindRef::Gvk(Gvk::new("example.com", "v1", "Gadget")),
        )
        .unwrap();
        assert_eq!(g.plural, "gadgets");
        assert_eq!(g.scope, Scope::Cluster);
        assert!(g.note.is_none());
        std::fs::write(&path, "kind: ConfigMap\n").unwrap();
        let err = learn_crds(&KindRegistry::builtin(), &path).unwrap_err();
        assert!(
            err.to_string().contains("CustomResourceDefinition"),
            "{err}"
        );
    }

    fn plugin(sidecar: &str) -> LoadedPlugin {
        use crate::runtime::{Manifest, Registration, SubscriptionSpec};
        let sub = |kind: &str, deltas: bool| SubscriptionSpec {
            kind: KindRef::Resource(kind.into()),
            namespace: None,
            label_selector: None,
            field_selector: None,
            deltas: if deltas {
                vec![crate::informer::DeltaType::Added]
            } else {
                vec![]
            },
            fields: vec![],
            resync: crate::runtime::Resync::Off,
        };
        LoadedPlugin {
            name: "p".into(),
            registration: Registration {
                subscriptions: vec![sub("configmaps", true), sub("namespaces", false)],
                writes: vec![KindRef::Resource("configmaps".into())],
                indexes: vec![],
            },
            manifest: Manifest::parse(Path::new("p.yaml"), sidecar).unwrap(),
        }
    }

    #[test]
    fn the_grant_narrows_what_the_registration_asks() {
        let kinds = KindRegistry::builtin();
        let a = access(
            &plugin(
                "access:\n  - {kinds: [namespaces], verbs: [read, events]}\n  - {kinds: [configmaps], verbs: [read, apply], namespaces: [team-a, team-b]}\n",
            ),
            &kinds,
        )
        .unwrap();
        let reads: Vec<(String, Option<String>)> = a
            .reads
            .iter()
            .map(|r| (r.resource.plural.clone(), r.namespace.clone()))
            .collect();
        assert_eq!(
            reads,
            vec![
                ("configmaps".into(), Some("team-a".into())),
                ("configmaps".into(), Some("team-b".into())),
                ("namespaces".into(), None),
            ]
        );
        assert_eq!(a.writes.len(), 1);
        assert_eq!(
            a.writes[0].verbs.iter().copied().collect::<Vec<_>>(),
            vec![Verb::Apply]
        );
        assert_eq!(
            a.writes[0].at,
            Where::List(vec!["team-a".into(), "team-b".into()])
        );
        // Events regarding a cluster-scoped kind land in `default`.
        assert_eq!(a.events, vec![Where::List(vec!["default".into()])]);

        // Asking for more than granted: the same refusal as the host's.
        let err = access(
            &plugin("access:\n  - {kinds: [configmaps, namespaces], verbs: [read]}\n"),
            &kinds,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("configmaps") && err.contains("apply"), "{err}");
        // No access list: reads only, and a declared write is refused.
        let err = access(&plugin(""), &kinds).unwrap_err().to_string();
        assert!(err.contains("no access list"), "{err}");
    }

    /// A Plugin object's access: every read and write its rules grant,
    /// where they grant it; a cluster-scoped kind only from a rule for
    /// every namespace (as the host checks), an unknown kind named by
    /// namespace taken as namespaced; no access list, nothing.
    #[test]
    fn a_plugin_objects_access_is_what_its_rules_grant() {
        let kinds = KindRegistry::builtin();
        let manifest = Manifest::parse(
            Path::new("spec"),
            "access:\n  - {kinds: [configmaps, namespaces], verbs: [read, apply, events], namespaces: [a, b]}\n  - {kinds: [deployments.apps, namespaces], verbs: [read, status]}\n  - {kinds: [widgets.example.com], verbs: [delete], namespaceSelector: {matchLabels: {team: x}}}\n",
        )
        .unwrap();
        let a = granted("plugins.kubewasm.io/p", &manifest, &kinds).unwrap();
        assert_eq!(a.plugin, "plugins.kubewasm.io/p");
        let reads: Vec<(String, Option<String>, Reason)> = a
            .reads
            .iter()
            .map(|r| (r.resource.plural.clone(), r.namespace.clone(), r.why))
            .collect();
        assert_eq!(
            reads,
            vec![
                ("configmaps".into(), Some("a".into()), Reason::MayRead),
                ("configmaps".into(), Some("b".into()), Reason::MayRead),
                ("namespaces".into(), None, Reason::MayRead),
                ("deployments".into(), None, Reason::MayRead),
            ]
        );
        let writes: Vec<(String, Vec<Verb>, Where, Scope)> = a
            .writes
            .iter()
            .map(|w| {
                (
                    w.resource.plural.clone(),
                    w.verbs.iter().copied().collect(),
                    w.at.clone(),
                    w.resource.scope,
                )
            })
            .collect();
        assert_eq!(
            writes,
            vec![
                (
                    "configmaps".into(),
                    vec![Verb::Apply],
                    Where::List(vec!["a".into(), "b".into()]),
                    Scope::Namespaced
                ),
                (
                    "namespaces".into(),
                    vec![Verb::Status],
                    Where::All,
                    Scope::Cluster
                ),
                (
                    "deployments".into(),
                    vec![Verb::Status],
                    Where::All,
                    Scope::Namespaced
                ),
                (
                    "widgets".into(),
                    vec![Verb::Delete],
                    Where::Selector("team=x".into()),
                    Scope::Namespaced
                ),
            ]
        );
        assert_eq!(a.events, vec![Where::List(vec!["a".into(), "b".into()])]);

        let none = granted(
            "plugins.kubewasm.io/q",
            &Manifest::parse(Path::new("spec"), "config: {}\n").unwrap(),
            &kinds,
        )
        .unwrap();
        assert!(none.reads.is_empty() && none.writes.is_empty() && none.events.is_empty());
    }

    #[test]
    fn versions_are_recognised() {
        for v in ["v1", "v1beta1", "v2alpha3"] {
            assert!(is_version(v), "{v}");
        }
        for v in ["v", "example", "v1gamma", "vbeta1", "v1beta"] {
            assert!(!is_version(v), "{v}");
        }
    }
}
