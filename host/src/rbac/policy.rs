//! From what each plugin may do to RBAC rules: the verbs each access needs,
//! where (every namespace, or only the namespaces its sidecar grants),
//! merged per (apiGroup, resource), in a deterministic order.

use std::collections::{BTreeMap, BTreeSet};

use super::access::{Access, Resource, Scope, Where as AccessWhere};
use crate::runtime::access::Verb;

/// Reading through an informer: the initial list and the watch; `get` for
/// clients that read one object (kubectl convention for read access).
pub const READ_VERBS: &[&str] = &["get", "list", "watch"];
/// `apply` is a server-side apply (`patch`), which creates a missing object,
/// so the API server checks `create` too; the sidecar's `patch` and
/// `delete` are the RBAC verbs of the same names.
pub const APPLY_VERBS: &[&str] = &["create", "patch"];
/// `apply-status` is a server-side apply on the status subresource; the
/// host never sends `update` there.
pub const STATUS_VERBS: &[&str] = &["patch"];
/// The host creates an events.k8s.io Event per `record-event`, and counts a
/// repeat of the same Event in the first one's `series` with a merge patch
/// (as client-go's and kube's recorders do): both verbs, or every repeat is
/// refused.
pub const EVENT_VERBS: &[&str] = &["create", "patch"];
/// Leader election reads the Lease, creates it when missing (a rule of its
/// own: create cannot be limited to a name), and renews, takes over and
/// releases it with an update; patch is granted besides.
pub const LEASE_VERBS: &[&str] = &["get", "patch", "update"];
/// `--metrics-auth` asks the API server who a scraper's token is
/// (TokenReview) and whether it may get `/metrics` (SubjectAccessReview):
/// both are `create` on a review object that is never stored.
pub const REVIEW_VERBS: &[&str] = &["create"];
/// Every replica watches Plugin and NamespacedPlugin objects.
pub const OBJECT_VERBS: &[&str] = &["get", "list", "watch"];

/// Why a plugin needs a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    /// A subscription that delivers deltas.
    Subscribes,
    /// A cache-only subscription.
    ReadsCache,
    /// A read a Plugin object's access list grants (its module, not
    /// loaded, may subscribe to it).
    MayRead,
    Writes,
    WritesStatus,
    RecordsEvents,
    /// A tenant's module ConfigMap, pull Secret or key, read as it.
    References,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Subscribes => "subscribes",
            Reason::ReadsCache => "reads the cache",
            Reason::MayRead => "may read",
            Reason::Writes => "writes",
            Reason::WritesStatus => "writes status",
            Reason::RecordsEvents => "records events",
            Reason::References => "names it (module, pull Secret or key)",
        }
    }
}

/// One RBAC rule and who needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub group: String,
    /// The plural, or `plural/status`.
    pub resource: String,
    pub verbs: BTreeSet<&'static str>,
    /// Empty: any name.
    pub resource_names: Vec<String>,
    /// Plugin -> why it needs this rule.
    pub needed_by: BTreeMap<String, BTreeSet<Reason>>,
    /// Anything a reader should check (a plural guessed offline).
    pub notes: BTreeSet<String>,
    /// Why the host itself needs it (its Lease), if it does.
    pub host: Option<String>,
}

impl Rule {
    fn new(group: &str, resource: String) -> Self {
        Self {
            group: group.to_owned(),
            resource,
            verbs: BTreeSet::new(),
            resource_names: Vec::new(),
            needed_by: BTreeMap::new(),
            notes: BTreeSet::new(),
            host: None,
        }
    }
}

/// The RBAC of a folder of plugins plus the host's own.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Policy {
    /// Rules in every namespace: a ClusterRole (empty: none is needed).
    pub cluster: Vec<Rule>,
    /// Rules in one namespace: a Role each, for what sidecars grant in a
    /// list of namespaces.
    pub namespaced: BTreeMap<String, Vec<Rule>>,
    /// The host's namespace and its rules there (leader election).
    pub host_namespace: String,
    pub host: Vec<Rule>,
    /// The host's cluster-wide rules: token and access reviews for
    /// `--metrics-auth`.
    pub host_cluster: Vec<Rule>,
    /// Plugins as objects: watch both kinds, write their status, read
    /// module ConfigMaps (cluster-wide: a NamespacedPlugin's is in its own
    /// namespace).
    pub objects_cluster: Vec<Rule>,
    /// Plugins as objects, in the host's namespace: pull Secrets.
    pub objects_host: Vec<Rule>,
    /// Plugins as objects, in `default`: the Events about Plugins (the API
    /// server keeps a cluster-scoped object's Events there).
    pub objects_events: Vec<Rule>,
    /// Per tenant (namespace, ServiceAccount): what its plugins' requests,
    /// made as that ServiceAccount, need there: their reads (asked for it
    /// before they load), writes and Events, and the objects they name.
    pub tenants: BTreeMap<(String, String), Vec<Rule>>,
}

/// A tenant's plugins, as [`derive`] takes them.
#[derive(Debug, Clone)]
pub struct Tenant {
    pub namespace: String,
    pub service_account: String,
    pub accesses: Vec<Access>,
    /// (plugin, resource, name) of each object its specs reference:
    /// `configmaps` or `secrets`, read with `get`.
    pub references: Vec<(String, &'static str, String)>,
}

/// Where a grant applies: `None` is every namespace.
type Where = Option<String>;

#[derive(Default)]
struct Builder {
    rules: BTreeMap<Where, BTreeMap<(String, String), Rule>>,
}

impl Builder {
    fn grant(
        &mut self,
        at: &[Where],
        r: &Resource,
        sub: Option<&str>,
        verbs: &[&'static str],
        plugin: &str,
        why: Reason,
    ) {
        let resource = match sub {
            Some(s) => format!("{}/{s}", r.plural),
            None => r.plural.clone(),
        };
        for w in at {
            let rule = self
                .rules
                .entry(w.clone())
                .or_default()
                .entry((r.group.clone(), resource.clone()))
                .or_insert_with(|| Rule::new(&r.group, resource.clone()));
            rule.verbs.extend(verbs.iter().copied());
            rule.needed_by
                .entry(plugin.to_owned())
                .or_default()
                .insert(why);
            rule.notes.extend(r.note.iter().cloned());
        }
    }
}

/// Where a grant lands in RBAC: a cluster-scoped resource, every
/// namespace or a namespaceSelector (which RBAC cannot express) is the
/// ClusterRole; a namespace list is a Role per namespace.
fn places(resource: &Resource, at: &AccessWhere) -> Vec<Where> {
    match at {
        AccessWhere::List(l) if resource.scope != Scope::Cluster => {
            l.iter().cloned().map(Some).collect()
        }
        _ => vec![None],
    }
}

/// The resource with a note when a namespaceSelector was widened.
fn noted(resource: &Resource, at: &AccessWhere) -> Resource {
    let mut r = resource.clone();
    if let AccessWhere::Selector(sel) = at {
        r.note = Some(format!(
            "granted in namespaces matching {sel:?}: RBAC cannot select namespaces by label, the host enforces the selector"
        ));
    }
    r
}

/// The RBAC verbs of the sidecar's write verbs on the object itself.
fn object_verbs(verbs: &std::collections::BTreeSet<Verb>) -> Vec<&'static str> {
    let mut out = Vec::new();
    for v in verbs {
        match v {
            Verb::Apply => out.extend(APPLY_VERBS),
            Verb::Patch => out.push("patch"),
            Verb::Delete => out.push("delete"),
            _ => {}
        }
    }
    out
}

/// Derives the policy. `host_namespace` and `lease` name the host's Lease.
/// The policy for `accesses` (the host's own: the folder's plugins, the
/// Plugins', and the reads tenants' plugins make through the host's
/// cache), plus each tenant's own rules, bound to its ServiceAccount.
/// `accounts` are the ServiceAccount names tenants act as (the host may
/// impersonate these).
pub fn derive(
    accesses: &[Access],
    tenants: &[Tenant],
    accounts: &BTreeSet<String>,
    host_namespace: &str,
    lease: &str,
) -> Policy {
    let (cluster, namespaced) = rules_of(accesses);
    let mut policy = host_rules(host_namespace, lease, accounts);
    policy.cluster = cluster;
    policy.namespaced = namespaced;
    for t in tenants {
        // Confined to its namespace: its Role there holds everything (a
        // cluster-scoped kind is nothing a Role can grant, nor a tenant
        // read).
        let (_, namespaced) = rules_of(&t.accesses);
        let mut rules: Vec<Rule> = namespaced.into_values().flatten().collect();
        for (plugin, resource, name) in &t.references {
            let covers = |r: &Rule| {
                r.group.is_empty()
                    && r.resource == *resource
                    && r.verbs.contains("get")
                    && (r.resource_names.is_empty() || r.resource_names == [name.clone()])
            };
            let rule = match rules.iter_mut().find(|r| covers(r)) {
                Some(rule) => rule,
                None => {
                    let mut rule = Rule::new("", (*resource).to_owned());
                    rule.verbs.insert("get");
                    rule.resource_names = vec![name.clone()];
                    rules.push(rule);
                    let last = rules.len() - 1;
                    &mut rules[last]
                }
            };
            rule.needed_by
                .entry(plugin.clone())
                .or_default()
                .insert(Reason::References);
        }
        policy
            .tenants
            .entry((t.namespace.clone(), t.service_account.clone()))
            .or_default()
            .extend(rules);
    }
    policy
}

/// The rules `accesses` need: cluster-wide, and per namespace (what the
/// cluster-wide rules grant already left out).
fn rules_of(accesses: &[Access]) -> (Vec<Rule>, BTreeMap<String, Vec<Rule>>) {
    let mut b = Builder::default();
    for a in accesses {
        for r in &a.reads {
            let why = r.why;
            let at = if r.resource.scope == Scope::Cluster {
                None
            } else {
                r.namespace.clone()
            };
            b.grant(&[at], &r.resource, None, READ_VERBS, &a.plugin, why);
        }
        for w in &a.writes {
            let at = places(&w.resource, &w.at);
            let resource = noted(&w.resource, &w.at);
            let verbs = object_verbs(&w.verbs);
            if !verbs.is_empty() {
                b.grant(&at, &resource, None, &verbs, &a.plugin, Reason::Writes);
            }
            if w.verbs.contains(&Verb::Status) && w.resource.status {
                b.grant(
                    &at,
                    &resource,
                    Some("status"),
                    STATUS_VERBS,
                    &a.plugin,
                    Reason::WritesStatus,
                );
            }
        }
        for at in &a.events {
            let events = Resource {
                group: "events.k8s.io".into(),
                plural: "events".into(),
                scope: Scope::Namespaced,
                status: false,
                note: None,
            };
            b.grant(
                &places(&events, at),
                &noted(&events, at),
                None,
                EVENT_VERBS,
                &a.plugin,
                Reason::RecordsEvents,
            );
        }
    }

    let mut cluster = b.rules.remove(&None).unwrap_or_default();
    let mut namespaced = BTreeMap::new();
    for (w, rules) in b.rules {
        let Some(ns) = w else { continue };
        let mut kept = Vec::new();
        for (key, mut rule) in rules {
            // What the ClusterRole grants already needs no Role.
            if let Some(c) = cluster.get_mut(&key) {
                let before = rule.verbs.len();
                rule.verbs.retain(|v| !c.verbs.contains(v));
                if rule.verbs.len() < before {
                    for (p, why) in &rule.needed_by {
                        c.needed_by
                            .entry(p.clone())
                            .or_default()
                            .extend(why.iter().copied());
                    }
                }
            }
            if !rule.verbs.is_empty() {
                kept.push(rule);
            }
        }
        if !kept.is_empty() {
            namespaced.insert(ns, kept);
        }
    }
    (cluster.into_values().collect(), namespaced)
}

/// A sharded host's Leases (`run --shards N`): its shard Leases by name,
/// and its member Leases, whose names (a hash of each replica's identity)
/// are not known in advance, so list, patch and delete cannot be limited
/// to names (the Role is in the host's namespace only).
pub fn shard_rules(lease: &str, shards: u32) -> Vec<Rule> {
    let mut renew = Rule::new("coordination.k8s.io", "leases".into());
    renew.verbs.extend(LEASE_VERBS.iter().copied());
    renew.resource_names = (0..shards).map(|i| format!("{lease}-shard-{i}")).collect();
    renew.host = Some("shards: reads, renews and takes over its shard Leases".into());
    let mut members = Rule::new("coordination.k8s.io", "leases".into());
    members.verbs.extend(["list", "patch", "delete"]);
    members.host = Some(
        "shards: counts the replicas from their member Leases, renews its own (server-side apply) and deletes those of replicas long gone"
            .into(),
    );
    vec![renew, members]
}

/// The host reads its own ServiceAccount (by name) to create its Lease
/// owned by it, so that uninstalling takes the Lease along.
pub fn lease_owner_rule(service_account: &str) -> Rule {
    let mut rule = Rule::new("", "serviceaccounts".into());
    rule.verbs.insert("get");
    rule.resource_names = vec![service_account.to_owned()];
    rule.host = Some("leader election: creates the Lease owned by the host's ServiceAccount, so an uninstall deletes it too".into());
    rule
}

/// The host's own rules: its Lease, `--metrics-auth`'s reviews, and Plugin
/// objects (with the tenants' ServiceAccounts it acts as).
fn host_rules(host_namespace: &str, lease: &str, accounts: &BTreeSet<String>) -> Policy {
    let mut create = Rule::new("coordination.k8s.io", "leases".into());
    create.verbs.insert("create");
    create.host = Some("leader election: creates the Lease when it is missing (create cannot be limited to a name)".into());
    let mut renew = Rule::new("coordination.k8s.io", "leases".into());
    renew.verbs.extend(LEASE_VERBS.iter().copied());
    renew.resource_names = vec![lease.to_owned()];
    renew.host = Some("leader election: reads, renews and takes over its Lease".into());

    let mut tokens = Rule::new("authentication.k8s.io", "tokenreviews".into());
    tokens.verbs.extend(REVIEW_VERBS.iter().copied());
    tokens.host = Some(
        "--metrics-auth: asks who a request to /metrics or /dead-letters authenticates as".into(),
    );
    let mut access = Rule::new("authorization.k8s.io", "subjectaccessreviews".into());
    access.verbs.extend(REVIEW_VERBS.iter().copied());
    access.host =
        Some("--metrics-auth: asks whether that user may get /metrics or /dead-letters".into());

    let mut objects = Vec::new();
    for plural in ["plugins", "namespacedplugins"] {
        let mut read = Rule::new("kubewasm.io", plural.into());
        read.verbs.extend(OBJECT_VERBS.iter().copied());
        read.host = Some("plugins as objects: every replica loads what they name".into());
        let mut status = Rule::new("kubewasm.io", format!("{plural}/status"));
        status.verbs.insert("patch");
        status.host = Some("plugins as objects: the leader writes their status".into());
        objects.extend([read, status]);
    }
    // A Plugin's module ConfigMap may be in any namespace (a
    // NamespacedPlugin's is read as its tenant).
    let mut modules = Rule::new("", "configmaps".into());
    modules.verbs.insert("get");
    modules.host = Some(
        "plugins as objects: reads a module from the ConfigMap a Plugin names (configMap source)"
            .into(),
    );
    objects.push(modules);
    // Pull Secrets: only in the host's namespace (a tenant's pull Secret
    // needs a Role the operator grants in that namespace).
    let mut pull = Rule::new("", "secrets".into());
    pull.verbs.insert("get");
    pull.host = Some(
        "plugins as objects: reads the registry credentials a Plugin's oci.pullSecret names".into(),
    );
    let mut events = Rule::new("events.k8s.io", "events".into());
    events.verbs.extend(["create", "patch"]);
    events.host = Some(
        "plugins as objects: Events saying when a Plugin stops or starts being served on a replica (kubectl describe plugin)".into(),
    );
    // The leader's Ready counts the ready replicas, and prunes the status
    // entries of Pods that are gone.
    let mut pods = Rule::new("", "pods".into());
    pods.verbs.insert("list");
    pods.host = Some(
        "plugins as objects: the leader lists the host's Pods, so Ready waits for the ready replicas only and the entries of Pods that are gone leave status.replicas".into(),
    );

    // Tenants act as a ServiceAccount of their namespace: the host may
    // impersonate those names (and read them, to tell a missing one from
    // one without permissions), nothing else.
    let mut impersonate = Rule::new("", "serviceaccounts".into());
    impersonate.verbs.extend(["get", "impersonate"]);
    impersonate.resource_names = accounts.iter().cloned().collect();
    impersonate.host = Some(
        "plugins as objects: a NamespacedPlugin's requests go out as its namespace's ServiceAccount (impersonate); get tells a missing one apart"
            .into(),
    );
    objects.push(impersonate);

    Policy {
        cluster: Vec::new(),
        namespaced: BTreeMap::new(),
        host_namespace: host_namespace.to_owned(),
        host: vec![create, renew],
        host_cluster: vec![tokens, access],
        objects_cluster: objects,
        objects_host: vec![pull, pods],
        objects_events: vec![events],
        tenants: BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rbac::access::{Read, Write};

    fn res(group: &str, plural: &str, scope: Scope, status: bool) -> Resource {
        Resource {
            group: group.into(),
            plural: plural.into(),
            scope,
            status,
            note: None,
        }
    }

    fn read(r: Resource, ns: Option<&str>, delivers: bool) -> Read {
        Read {
            resource: r,
            namespace: ns.map(str::to_owned),
            why: if delivers {
                Reason::Subscribes
            } else {
                Reason::ReadsCache
            },
        }
    }

    fn write(r: Resource, verbs: &[Verb], at: AccessWhere) -> Write {
        Write {
            resource: r,
            verbs: verbs.iter().copied().collect(),
            at,
        }
    }

    fn summary(rules: &[Rule]) -> Vec<String> {
        rules
            .iter()
            .map(|r| {
                let who: Vec<String> = r.needed_by.keys().cloned().collect();
                format!(
                    "{}/{} [{}] {}",
                    r.group,
                    r.resource,
                    r.verbs.iter().copied().collect::<Vec<_>>().join(","),
                    who.join("+")
                )
            })
            .collect()
    }

    #[test]
    fn a_sharded_host_may_renew_its_shard_leases_by_name_and_keep_member_leases() {
        let rules = shard_rules("kw", 3);
        assert_eq!(
            rules[0].resource_names,
            ["kw-shard-0", "kw-shard-1", "kw-shard-2"]
        );
        assert_eq!(
            rules[0].verbs.iter().copied().collect::<Vec<_>>(),
            ["get", "patch", "update"]
        );
        assert!(rules[1].resource_names.is_empty());
        assert_eq!(
            rules[1].verbs.iter().copied().collect::<Vec<_>>(),
            ["delete", "list", "patch"]
        );
        // The names the host uses are the ones granted.
        let opts = crate::leader::ElectionOptions {
            identity: "x".into(),
            lease_name: "kw".into(),
            namespace: "ns".into(),
            lease_duration: std::time::Duration::from_secs(15),
            renew_deadline: std::time::Duration::from_secs(10),
            retry_period: std::time::Duration::from_secs(2),
            shards: None,
        };
        assert_eq!(opts.shard_lease_name(2), rules[0].resource_names[2]);
    }

    #[test]
    fn merges_reads_and_writes_per_resource_in_order() {
        let deploy = res("apps", "deployments", Scope::Namespaced, true);
        let pods = res("", "pods", Scope::Namespaced, true);
        let a = Access {
            plugin: "watcher".into(),
            reads: vec![
                read(pods.clone(), None, true),
                read(deploy.clone(), None, false),
            ],
            writes: vec![write(
                deploy.clone(),
                &[Verb::Apply, Verb::Delete, Verb::Status],
                AccessWhere::All,
            )],
            events: vec![AccessWhere::All],
        };
        let b = Access {
            plugin: "other".into(),
            reads: vec![read(pods, None, false)],
            writes: vec![],
            events: vec![],
        };
        let p = derive(&[a, b], &[], &BTreeSet::new(), "kubewasm", "kubewasm");
        assert_eq!(
            summary(&p.cluster),
            vec![
                "/pods [get,list,watch] other+watcher",
                "apps/deployments [create,delete,get,list,patch,watch] watcher",
                "apps/deployments/status [patch] watcher",
                "events.k8s.io/events [create,patch] watcher",
            ]
        );
        assert!(p.namespaced.is_empty());
        assert_eq!(p.host_namespace, "kubewasm");
        assert_eq!(p.host[1].resource_names, vec!["kubewasm".to_owned()]);
    }

    #[test]
    fn verbs_follow_the_grant_not_the_registration() {
        let deploy = res("apps", "deployments", Scope::Namespaced, true);
        // Only patch granted: no create, delete or status.
        let a = Access {
            plugin: "p".into(),
            reads: vec![read(deploy.clone(), None, true)],
            writes: vec![write(deploy, &[Verb::Patch], AccessWhere::All)],
            events: vec![],
        };
        let p = derive(&[a], &[], &BTreeSet::new(), "kubewasm", "kubewasm");
        assert_eq!(
            summary(&p.cluster),
            vec!["apps/deployments [get,list,patch,watch] p"]
        );
    }

    #[test]
    fn grants_confined_to_namespaces_become_roles_there() {
        let cm = res("", "configmaps", Scope::Namespaced, false);
        let ns = res("", "namespaces", Scope::Cluster, false);
        let local = Access {
            plugin: "local".into(),
            reads: vec![
                read(cm.clone(), Some("team-a"), true),
                read(cm.clone(), Some("team-b"), false),
            ],
            writes: vec![write(
                cm.clone(),
                &[Verb::Apply, Verb::Delete],
                AccessWhere::List(vec!["team-a".into(), "team-b".into()]),
            )],
            events: vec![AccessWhere::List(vec!["team-a".into()])],
        };
        let p = derive(
            std::slice::from_ref(&local),
            &[],
            &BTreeSet::new(),
            "kubewasm",
            "kubewasm",
        );
        assert!(p.cluster.is_empty(), "{:?}", p.cluster);
        assert_eq!(
            summary(&p.namespaced["team-a"]),
            vec![
                "/configmaps [create,delete,get,list,patch,watch] local",
                "events.k8s.io/events [create,patch] local",
            ]
        );
        assert_eq!(
            summary(&p.namespaced["team-b"]),
            vec!["/configmaps [create,delete,get,list,patch,watch] local"]
        );

        // A cluster-scoped write needs the ClusterRole whatever the rule
        // says; what it grants is not repeated in a Role; a selector is
        // cluster-wide with a note.
        let global = Access {
            plugin: "global".into(),
            reads: vec![read(cm.clone(), None, false), read(ns.clone(), None, true)],
            writes: vec![
                write(ns, &[Verb::Apply], AccessWhere::All),
                write(
                    cm,
                    &[Verb::Patch],
                    AccessWhere::Selector("tenant=yes".into()),
                ),
            ],
            events: vec![],
        };
        let p = derive(
            &[local, global],
            &[],
            &BTreeSet::new(),
            "kubewasm",
            "kubewasm",
        );
        assert_eq!(
            summary(&p.cluster),
            vec![
                "/configmaps [get,list,patch,watch] global+local",
                "/namespaces [create,get,list,patch,watch] global",
            ]
        );
        assert!(
            p.cluster[0].notes.iter().any(|n| n.contains("tenant=yes")),
            "{:?}",
            p.cluster[0].notes
        );
        assert_eq!(
            summary(&p.namespaced["team-a"]),
            vec![
                "/configmaps [create,delete] local",
                "events.k8s.io/events [create,patch] local",
            ]
        );
    }
}
