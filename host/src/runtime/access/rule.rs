//! The access list's rules: as written in the sidecar, and validated into
//! kinds, verbs and where they apply (every namespace, a list, or a
//! namespace selector).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Deserialize;

use super::Verb;
use super::kind::GrantKind;
use crate::informer::selector::LabelSelector;

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
