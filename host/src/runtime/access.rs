//! The operator's access list in a plugin's sidecar, and the checks made
//! against it. The sidecar is written by whoever installs the plugin, not by
//! the plugin: a registration that asks for more than it grants does not
//! load, and every cache read and action is checked against the effective
//! access (what the sidecar grants, within what the registration declared).
//!
//! Kinds are written as RBAC names them (`configmaps`, `deployments.apps`):
//! a grant is matched by API group and plural, never by version, so it reads
//! the same in the sidecar and in the RBAC `kubewasm rbac` derives from it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Deserialize;

use crate::informer::selector::LabelSelector;
use crate::kind::KindInfo;

/// What a rule allows on its kinds.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Deserialize,
    serde::Serialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    /// Subscribe and read the cache (get, list, watch).
    Read,
    /// Server-side apply (`apply`).
    Apply,
    /// Merge or JSON patches (`patch`).
    Patch,
    Delete,
    /// Server-side apply on the status subresource (`apply-status`).
    Status,
    /// Record events.k8s.io Events regarding objects of the kind, in the
    /// object's namespace (`default` for a cluster-scoped object).
    Events,
}

impl Verb {
    pub const ALL: [Verb; 6] = [
        Verb::Read,
        Verb::Apply,
        Verb::Patch,
        Verb::Delete,
        Verb::Status,
        Verb::Events,
    ];
    /// The verbs a registration's `writes` entry stands for.
    pub const WRITES: [Verb; 4] = [Verb::Apply, Verb::Patch, Verb::Delete, Verb::Status];

    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Read => "read",
            Verb::Apply => "apply",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::Status => "status",
            Verb::Events => "events",
        }
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of `access:` as written in the sidecar.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AccessRule {
    /// Plural resource names, group-qualified outside the core group
    /// (`configmaps`, `deployments.apps`, `widgets.example.com`).
    pub kinds: Vec<String>,
    pub verbs: Vec<Verb>,
    /// Namespaces the verbs apply in; omitted or `["*"]`: all (and
    /// cluster-scoped kinds, which only such a rule can grant).
    #[serde(default)]
    pub namespaces: Option<Vec<String>>,
    /// Namespaces whose labels match, evaluated per action against the
    /// plugin's own Namespace cache (it must subscribe to namespaces).
    /// Cannot carry `read`: neither a watch nor RBAC can select namespaces
    /// by label.
    #[serde(default)]
    pub namespace_selector: Option<NamespaceSelector>,
}

/// A Kubernetes-style label selector on namespaces.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NamespaceSelector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub match_expressions: Vec<SelectorRequirement>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SelectorRequirement {
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    #[serde(default)]
    pub values: Vec<String>,
}

impl NamespaceSelector {
    /// The same selector in the string grammar (`a=b,c in (d,e),!f`).
    pub fn to_selector_string(&self) -> Result<String, String> {
        let mut parts: Vec<String> = self
            .match_labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        for r in &self.match_expressions {
            let values = r.values.join(",");
            parts.push(match r.operator.as_str() {
                "In" | "NotIn" if r.values.is_empty() => {
                    return Err(format!(
                        "matchExpressions {}: {} needs values",
                        r.key, r.operator
                    ));
                }
                "In" => format!("{} in ({values})", r.key),
                "NotIn" => format!("{} notin ({values})", r.key),
                "Exists" => r.key.clone(),
                "DoesNotExist" => format!("!{}", r.key),
                other => {
                    return Err(format!(
                        "matchExpressions {}: unknown operator {other:?} (In, NotIn, Exists, DoesNotExist)",
                        r.key
                    ));
                }
            });
        }
        Ok(parts.join(","))
    }
}

/// Where a rule applies.
#[derive(Debug, Clone, PartialEq)]
pub enum Namespaces {
    All,
    List(BTreeSet<String>),
    /// The selector and its text (for messages).
    Selector(LabelSelector, String),
}

impl fmt::Display for Namespaces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Namespaces::All => f.write_str("every namespace"),
            Namespaces::List(l) => {
                let l: Vec<&str> = l.iter().map(String::as_str).collect();
                write!(f, "namespaces [{}]", l.join(", "))
            }
            Namespaces::Selector(_, s) => write!(f, "namespaces matching {s:?}"),
        }
    }
}

/// A kind as a grant names it: API group and plural.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GrantKind {
    pub group: String,
    pub plural: String,
}

impl GrantKind {
    pub fn parse(s: &str) -> Result<Self, String> {
        let valid = !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            && !s.starts_with('.')
            && !s.ends_with('.')
            && !s.contains("..");
        if !valid {
            return Err(format!(
                "access kind {s:?} is not a resource name: write the lowercase plural, with its API group outside the core group (configmaps, deployments.apps, widgets.example.com)"
            ));
        }
        let (plural, group) = match s.split_once('.') {
            Some((p, g)) => (p, g),
            None => (s, ""),
        };
        if group.split('.').next().is_some_and(is_version) {
            return Err(format!(
                "access kind {s:?} names a version: grants hold for every version, write {plural}.{}",
                group.split_once('.').map_or("", |(_, g)| g)
            ));
        }
        Ok(Self {
            group: group.to_owned(),
            plural: plural.to_owned(),
        })
    }

    pub fn of(info: &KindInfo) -> Self {
        Self {
            group: info.gvk.group.clone(),
            plural: info.plural.clone(),
        }
    }
}

impl fmt::Display for GrantKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.plural)
        } else {
            write!(f, "{}.{}", self.plural, self.group)
        }
    }
}

fn is_version(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('v') else {
        return false;
    };
    rest.starts_with(|c: char| c.is_ascii_digit())
        && rest
            .chars()
            .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
}

/// One rule, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub kinds: BTreeSet<GrantKind>,
    pub verbs: BTreeSet<Verb>,
    pub namespaces: Namespaces,
}

impl AccessRule {
    /// Validates the rule as written; the error names the rule's place.
    pub fn compile(&self, index: usize) -> Result<Rule, String> {
        let at = |m: String| format!("access[{index}]: {m}");
        if self.kinds.is_empty() {
            return Err(at(
                "kinds is empty: list the resources the rule grants".into()
            ));
        }
        if self.verbs.is_empty() {
            return Err(at(
                "verbs is empty: list some of read, apply, patch, delete, status, events".into(),
            ));
        }
        let kinds = self
            .kinds
            .iter()
            .map(|k| GrantKind::parse(k))
            .collect::<Result<BTreeSet<_>, _>>()
            .map_err(at)?;
        let verbs: BTreeSet<Verb> = self.verbs.iter().copied().collect();
        let namespaces = match (&self.namespaces, &self.namespace_selector) {
            (Some(_), Some(_)) => {
                return Err(at(
                    "give namespaces or namespaceSelector, not both (two rules grant both)".into(),
                ));
            }
            (None, None) => Namespaces::All,
            (Some(list), None) if list.iter().any(|n| n == "*") => {
                if list.len() > 1 {
                    return Err(at("namespaces: \"*\" means all; list nothing else".into()));
                }
                Namespaces::All
            }
            (Some(list), None) => {
                if list.is_empty() {
                    return Err(at(
                        "namespaces is empty: list namespaces, or omit it for all".into(),
                    ));
                }
                for n in list {
                    crate::names::dns1123_label("namespace", n).map_err(|e| at(e.to_string()))?;
                }
                Namespaces::List(list.iter().cloned().collect())
            }
            (None, Some(sel)) => {
                if verbs.contains(&Verb::Read) {
                    return Err(at(
                        "a namespaceSelector cannot grant read (neither a watch nor RBAC selects namespaces by label): list the namespaces, or grant read in a rule without namespaceSelector".into(),
                    ));
                }
                let text = sel.to_selector_string().map_err(at)?;
                if text.is_empty() {
                    return Err(at(
                        "namespaceSelector selects every namespace: omit it instead".into(),
                    ));
                }
                let parsed = LabelSelector::parse(&text).map_err(|e| at(e.to_string()))?;
                Namespaces::Selector(parsed, text)
            }
        };
        Ok(Rule {
            kinds,
            verbs,
            namespaces,
        })
    }
}

/// A refusal; the message names the kind, the verb, where, and how to grant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Denied(pub String);

/// What the sidecar grants one plugin (`None` rules: no access list).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Grant {
    pub plugin: String,
    pub rules: Option<Vec<Rule>>,
}

/// Answers whether namespace `ns` matches a selector (the plugin's
/// Namespace cache); `None` when there is no such cache.
pub type NamespaceMatcher<'a> = &'a dyn Fn(&LabelSelector, &str) -> Option<bool>;

/// What a registration reads, resolved: the kind and the namespace of the
/// subscription (`None`: every namespace, or a cluster-scoped kind).
#[derive(Debug, Clone)]
pub struct ReadRequest<'a> {
    pub kind: &'a KindInfo,
    pub namespace: Option<&'a str>,
}

/// Where a read is allowed after the grant narrowed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadScope {
    /// As the subscription asked.
    AsAsked,
    /// The subscription asked for every namespace; the grant allows these.
    Narrowed(BTreeSet<String>),
}

fn snippet(plugin: &str, kind: &str, verb: Verb, namespace: Option<&str>) -> String {
    let ns = namespace
        .map(|n| format!(", namespaces: [{n}]"))
        .unwrap_or_default();
    format!(
        "add to the access list in its sidecar {plugin}.yaml: `access: [{{kinds: [{kind}], verbs: [{verb}]{ns}}}]`"
    )
}

/// The access list that grants a whole registration, for a plugin that
/// has none: every subscribed kind read, every write kind every write verb.
fn full_snippet(plugin: &str, reads: &[ReadRequest<'_>], writes: &[KindInfo]) -> String {
    let names = |kinds: &mut dyn Iterator<Item = &KindInfo>| {
        let set: BTreeSet<String> = kinds.map(|k| GrantKind::of(k).to_string()).collect();
        set.into_iter().collect::<Vec<_>>().join(", ")
    };
    let read = names(&mut reads.iter().map(|r| r.kind));
    let write = names(&mut writes.iter());
    let mut rules = Vec::new();
    if !read.is_empty() {
        rules.push(format!("{{kinds: [{read}], verbs: [read]}}"));
    }
    rules.push(format!(
        "{{kinds: [{write}], verbs: [apply, patch, delete, status]}}"
    ));
    format!(
        "add an access list to its sidecar {plugin}.yaml, e.g. `access: [{}]`, keeping only the verbs it needs and adding `namespaces: [...]` to confine it",
        rules.join(", ")
    )
}

impl Grant {
    pub fn new(plugin: &str, rules: Option<Vec<Rule>>) -> Self {
        Self {
            plugin: plugin.to_owned(),
            rules,
        }
    }

    fn rules_for<'a>(&'a self, kind: &GrantKind, verb: Verb) -> impl Iterator<Item = &'a Rule> {
        self.rules
            .iter()
            .flatten()
            .filter(move |r| r.verbs.contains(&verb) && r.kinds.contains(kind))
    }

    /// Whether the rules name a namespaceSelector (which needs the plugin
    /// to subscribe to namespaces).
    pub fn uses_selector(&self) -> bool {
        self.rules
            .iter()
            .flatten()
            .any(|r| matches!(r.namespaces, Namespaces::Selector(..)))
    }

    /// Checks a registration at load: each subscription needs `read`, each
    /// declared write kind at least one write verb. Returns, per
    /// subscription, where it may read.
    pub fn check_registration(
        &self,
        reads: &[ReadRequest<'_>],
        writes: &[KindInfo],
    ) -> Result<Vec<ReadScope>, Denied> {
        let plugin = &self.plugin;
        let mut scopes = Vec::with_capacity(reads.len());
        for r in reads {
            let gk = GrantKind::of(r.kind);
            if self.rules.is_none() {
                // No access list: the plugin reads what it subscribes to.
                scopes.push(ReadScope::AsAsked);
                continue;
            }
            let rules: Vec<&Rule> = self.rules_for(&gk, Verb::Read).collect();
            if rules.is_empty() {
                return Err(Denied(format!(
                    "plugin {plugin} subscribes to {gk}, but its sidecar does not grant read on {gk}: {}",
                    snippet(plugin, &gk.to_string(), Verb::Read, r.namespace)
                )));
            }
            if rules.iter().any(|r| r.namespaces == Namespaces::All) {
                scopes.push(ReadScope::AsAsked);
                continue;
            }
            if !r.kind.namespaced {
                return Err(Denied(format!(
                    "plugin {plugin} subscribes to {gk}, which is cluster-scoped, but its sidecar grants read on {gk} only in some namespaces: grant it in a rule without namespaces"
                )));
            }
            let granted: BTreeSet<String> = rules
                .iter()
                .filter_map(|r| match &r.namespaces {
                    Namespaces::List(l) => Some(l.iter().cloned()),
                    _ => None,
                })
                .flatten()
                .collect();
            match r.namespace {
                Some(ns) if granted.contains(ns) => scopes.push(ReadScope::AsAsked),
                Some(ns) => {
                    return Err(Denied(format!(
                        "plugin {plugin} subscribes to {gk} in namespace {ns}, but its sidecar grants read on {gk} only in {}: {}",
                        Namespaces::List(granted),
                        snippet(plugin, &gk.to_string(), Verb::Read, Some(ns))
                    )));
                }
                None => scopes.push(ReadScope::Narrowed(granted)),
            }
        }
        for w in writes {
            let gk = GrantKind::of(w);
            let granted = Verb::WRITES
                .iter()
                .any(|v| self.rules_for(&gk, *v).next().is_some());
            if !granted {
                if self.rules.is_none() {
                    return Err(Denied(format!(
                        "plugin {plugin} declares writes of {gk} (verbs apply, patch, delete or status), but its sidecar has no access list, so it may write nothing: {}",
                        full_snippet(plugin, reads, writes)
                    )));
                }
                return Err(Denied(format!(
                    "plugin {plugin} declares writes of {gk} (verbs apply, patch, delete or status), but its sidecar grants none of them on it: {}",
                    snippet(plugin, &gk.to_string(), Verb::Apply, None)
                )));
            }
        }
        if self.uses_selector()
            && !reads
                .iter()
                .any(|r| r.kind.gvk.group.is_empty() && r.kind.plural == "namespaces")
        {
            return Err(Denied(format!(
                "plugin {plugin}'s sidecar grants by namespaceSelector, which the host evaluates against the plugin's Namespace cache, but the plugin does not subscribe to namespaces: list the namespaces instead"
            )));
        }
        Ok(scopes)
    }

    /// Whether `verb` on an object of `kind` in `namespace` is granted.
    /// Reads are only checked for their namespace (the registration check
    /// already required `read` on every subscribed kind).
    pub fn check(
        &self,
        kind: &KindInfo,
        verb: Verb,
        namespace: Option<&str>,
        matcher: NamespaceMatcher<'_>,
    ) -> Result<(), Denied> {
        let plugin = &self.plugin;
        let gk = GrantKind::of(kind);
        let Some(rules) = &self.rules else {
            if verb == Verb::Read {
                return Ok(());
            }
            return Err(Denied(format!(
                "plugin {plugin} may not {verb} {gk}: its sidecar has no access list, so it may only read what it subscribes to; {}",
                snippet(plugin, &gk.to_string(), verb, namespace)
            )));
        };
        let matching: Vec<&Rule> = rules
            .iter()
            .filter(|r| r.verbs.contains(&verb) && r.kinds.contains(&gk))
            .collect();
        if matching.is_empty() {
            return Err(Denied(format!(
                "plugin {plugin} may not {verb} {gk}: its sidecar grants no {verb} on {gk}; {}",
                snippet(plugin, &gk.to_string(), verb, namespace)
            )));
        }
        let admitted = matching.iter().any(|r| match (&r.namespaces, namespace) {
            (Namespaces::All, _) => true,
            (_, None) => false,
            (Namespaces::List(l), Some(ns)) => l.contains(ns),
            (Namespaces::Selector(sel, _), Some(ns)) => matcher(sel, ns).unwrap_or(false),
        });
        if admitted {
            return Ok(());
        }
        let where_: Vec<String> = matching.iter().map(|r| r.namespaces.to_string()).collect();
        Err(Denied(match namespace {
            Some(ns) => format!(
                "plugin {plugin} may not {verb} {gk} in namespace {ns}: its sidecar grants {verb} on {gk} only in {}",
                where_.join(" and ")
            ),
            None => format!(
                "plugin {plugin} may not {verb} {gk}: it is cluster-scoped and its sidecar grants {verb} on {gk} only in {}; grant it in a rule without namespaces",
                where_.join(" and ")
            ),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(yaml: &str) -> Vec<Rule> {
        let raw: Vec<AccessRule> = serde_yaml_ng::from_str(yaml).unwrap();
        raw.iter()
            .enumerate()
            .map(|(i, r)| r.compile(i))
            .collect::<Result<_, _>>()
            .unwrap()
    }

    fn compile_err(yaml: &str) -> String {
        let raw: Vec<AccessRule> = serde_yaml_ng::from_str(yaml).unwrap();
        raw.iter()
            .enumerate()
            .map(|(i, r)| r.compile(i))
            .collect::<Result<Vec<_>, _>>()
            .unwrap_err()
    }

    fn cm() -> KindInfo {
        KindInfo::new("", "v1", "ConfigMap", "configmaps", true)
    }
    fn deploy() -> KindInfo {
        KindInfo::new("apps", "v1", "Deployment", "deployments", true)
    }
    fn ns_kind() -> KindInfo {
        KindInfo::new("", "v1", "Namespace", "namespaces", false)
    }
    fn no_cache(_: &LabelSelector, _: &str) -> Option<bool> {
        None
    }

    #[test]
    fn grant_kinds_parse_as_rbac_names() {
        assert_eq!(
            GrantKind::parse("deployments.apps").unwrap(),
            GrantKind {
                group: "apps".into(),
                plural: "deployments".into()
            }
        );
        assert_eq!(GrantKind::parse("configmaps").unwrap().group, "");
        assert!(
            GrantKind::parse("Deployment")
                .unwrap_err()
                .contains("plural")
        );
        let e = GrantKind::parse("widgets.v1.example.com").unwrap_err();
        assert!(e.contains("widgets.example.com"), "{e}");
    }

    #[test]
    fn rules_are_validated_with_their_place() {
        for (yaml, want) in [
            ("[{kinds: [], verbs: [read]}]", "access[0]: kinds is empty"),
            ("[{kinds: [pods], verbs: []}]", "verbs is empty"),
            (
                "[{kinds: [pods], verbs: [read]}, {kinds: [pods], verbs: [apply], namespaces: [a], namespaceSelector: {matchLabels: {a: b}}}]",
                "access[1]: give namespaces or namespaceSelector",
            ),
            (
                "[{kinds: [pods], verbs: [read], namespaceSelector: {matchLabels: {a: b}}}]",
                "cannot grant read",
            ),
            (
                "[{kinds: [pods], verbs: [apply], namespaces: [Bad_NS]}]",
                "namespace",
            ),
            (
                "[{kinds: [pods], verbs: [apply], namespaces: ['*', a]}]",
                "means all",
            ),
            (
                "[{kinds: [pods], verbs: [apply], namespaceSelector: {}}]",
                "every namespace",
            ),
            (
                "[{kinds: [pods], verbs: [apply], namespaceSelector: {matchExpressions: [{key: a, operator: Like}]}}]",
                "unknown operator",
            ),
        ] {
            let e = compile_err(yaml);
            assert!(e.contains(want), "{yaml}: {e}");
        }
        let raw: Result<Vec<AccessRule>, _> =
            serde_yaml_ng::from_str("[{kinds: [pods], verbs: [write]}]");
        assert!(
            raw.unwrap_err()
                .to_string()
                .contains("unknown variant `write`")
        );
        let r = rules("[{kinds: [pods], verbs: [apply], namespaces: ['*']}]");
        assert_eq!(r[0].namespaces, Namespaces::All);
    }

    #[test]
    fn registration_asking_more_than_granted_is_refused_naming_kind_and_verb() {
        let g = Grant::new(
            "p",
            Some(rules(
                "[{kinds: [configmaps], verbs: [read, apply], namespaces: [team-a, team-b]}]",
            )),
        );
        // A write kind without any write verb.
        let e = g
            .check_registration(
                &[ReadRequest {
                    kind: &cm(),
                    namespace: Some("team-a"),
                }],
                &[deploy()],
            )
            .unwrap_err()
            .0;
        assert!(
            e.contains("deployments.apps") && e.contains("apply") && e.contains("p.yaml"),
            "{e}"
        );
        // A subscription to an ungranted kind.
        let e = g
            .check_registration(
                &[ReadRequest {
                    kind: &deploy(),
                    namespace: None,
                }],
                &[],
            )
            .unwrap_err()
            .0;
        assert!(e.contains("deployments.apps") && e.contains("read"), "{e}");
        // A subscription in a namespace outside the grant.
        let e = g
            .check_registration(
                &[ReadRequest {
                    kind: &cm(),
                    namespace: Some("team-c"),
                }],
                &[],
            )
            .unwrap_err()
            .0;
        assert!(
            e.contains("team-c") && e.contains("[team-a, team-b]") && e.contains("read"),
            "{e}"
        );
        // Every namespace is narrowed to the granted ones.
        let scopes = g
            .check_registration(
                &[ReadRequest {
                    kind: &cm(),
                    namespace: None,
                }],
                &[cm()],
            )
            .unwrap();
        assert_eq!(
            scopes,
            vec![ReadScope::Narrowed(
                ["team-a".to_owned(), "team-b".to_owned()].into()
            )]
        );
    }

    #[test]
    fn no_access_list_reads_subscriptions_and_writes_nothing() {
        let g = Grant::new("p", None);
        let scopes = g
            .check_registration(
                &[ReadRequest {
                    kind: &cm(),
                    namespace: None,
                }],
                &[],
            )
            .unwrap();
        assert_eq!(scopes, vec![ReadScope::AsAsked]);
        let e = g.check_registration(&[], &[cm()]).unwrap_err().0;
        assert!(
            e.contains("no access list") && e.contains("access:") && e.contains("configmaps"),
            "{e}"
        );
        // The suggestion grants the whole registration: reads and writes.
        let e = g
            .check_registration(
                &[ReadRequest {
                    kind: &deploy(),
                    namespace: None,
                }],
                &[cm()],
            )
            .unwrap_err()
            .0;
        assert!(
            e.contains("{kinds: [deployments.apps], verbs: [read]}")
                && e.contains("{kinds: [configmaps], verbs: [apply, patch, delete, status]}"),
            "{e}"
        );
        g.check(&cm(), Verb::Read, Some("x"), &no_cache).unwrap();
        let e = g
            .check(&cm(), Verb::Events, Some("x"), &no_cache)
            .unwrap_err()
            .0;
        assert!(
            e.contains("no access list") && e.contains("verbs: [events]") && e.contains("p.yaml"),
            "{e}"
        );
    }

    #[test]
    fn actions_are_checked_per_verb_and_namespace() {
        let g = Grant::new(
            "p",
            Some(rules(
                "[{kinds: [configmaps], verbs: [read, apply], namespaces: [team-a]},\n\
                  {kinds: [configmaps], verbs: [delete]},\n\
                  {kinds: [namespaces], verbs: [read, events]},\n\
                  {kinds: [configmaps], verbs: [patch], namespaceSelector: {matchLabels: {tenant: 'yes'}}}]",
            )),
        );
        g.check(&cm(), Verb::Apply, Some("team-a"), &no_cache)
            .unwrap();
        let e = g
            .check(&cm(), Verb::Apply, Some("team-b"), &no_cache)
            .unwrap_err()
            .0;
        assert!(
            e.contains("apply configmaps in namespace team-b") && e.contains("[team-a]"),
            "{e}"
        );
        g.check(&cm(), Verb::Delete, Some("anywhere"), &no_cache)
            .unwrap();
        let e = g
            .check(&cm(), Verb::Status, Some("team-a"), &no_cache)
            .unwrap_err()
            .0;
        assert!(e.contains("grants no status on configmaps"), "{e}");
        g.check(&ns_kind(), Verb::Events, None, &no_cache).unwrap();
        // The selector is evaluated against the Namespace cache.
        let tenant = |_: &LabelSelector, ns: &str| Some(ns == "tenant-1");
        g.check(&cm(), Verb::Patch, Some("tenant-1"), &tenant)
            .unwrap();
        let e = g
            .check(&cm(), Verb::Patch, Some("other"), &tenant)
            .unwrap_err()
            .0;
        assert!(e.contains("matching \"tenant=yes\""), "{e}");
        // No cache: refused.
        assert!(
            g.check(&cm(), Verb::Patch, Some("tenant-1"), &no_cache)
                .is_err()
        );
    }

    #[test]
    fn cluster_scoped_kinds_need_a_rule_without_namespaces() {
        let g = Grant::new(
            "p",
            Some(rules(
                "[{kinds: [namespaces], verbs: [read, apply], namespaces: [a]}]",
            )),
        );
        let e = g
            .check(&ns_kind(), Verb::Apply, None, &no_cache)
            .unwrap_err()
            .0;
        assert!(e.contains("cluster-scoped"), "{e}");
        let e = g
            .check_registration(
                &[ReadRequest {
                    kind: &ns_kind(),
                    namespace: None,
                }],
                &[],
            )
            .unwrap_err()
            .0;
        assert!(e.contains("cluster-scoped"), "{e}");
    }

    #[test]
    fn selector_grants_need_the_namespace_cache() {
        let g = Grant::new(
            "p",
            Some(rules(
                "[{kinds: [configmaps], verbs: [read]}, {kinds: [configmaps], verbs: [apply], namespaceSelector: {matchLabels: {a: b}}}]",
            )),
        );
        let cmk = cm();
        let read_cm = ReadRequest {
            kind: &cmk,
            namespace: None,
        };
        let e = g
            .check_registration(std::slice::from_ref(&read_cm), &[cm()])
            .unwrap_err()
            .0;
        assert!(e.contains("subscribe to namespaces"), "{e}");
        let nsk = ns_kind();
        let g2 = Grant::new(
            "p",
            Some(rules(
                "[{kinds: [configmaps, namespaces], verbs: [read]}, {kinds: [configmaps], verbs: [apply], namespaceSelector: {matchLabels: {a: b}}}]",
            )),
        );
        g2.check_registration(
            &[
                read_cm,
                ReadRequest {
                    kind: &nsk,
                    namespace: None,
                },
            ],
            &[cm()],
        )
        .unwrap();
    }
}
