//! What a sidecar grants one plugin, and the checks made against it: a
//! registration at load (narrowing subscriptions to the granted
//! namespaces), each read and action while it runs; a refusal says how to
//! grant what was missing.

use std::collections::BTreeSet;

use super::Verb;
use super::kind::GrantKind;
use super::rule::{Namespaces, Rule};
use crate::informer::selector::LabelSelector;
use crate::kind::KindInfo;

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
        .map(|n| format!(", namespaces: [{}]", crate::names::excerpt(n)))
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
                "plugin {plugin} may not {verb} {gk} in namespace {}: its sidecar grants {verb} on {gk} only in {}",
                crate::names::excerpt(ns),
                where_.join(" and ")
            ),
            None => format!(
                "plugin {plugin} may not {verb} {gk}: it is cluster-scoped and its sidecar grants {verb} on {gk} only in {}; grant it in a rule without namespaces",
                where_.join(" and ")
            ),
        }))
    }
}
