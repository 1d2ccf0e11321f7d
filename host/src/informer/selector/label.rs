//! [`LabelSelector`]: its requirements, how they match a label set and
//! the canonical text apimachinery prints.

use std::fmt;

use crate::object::KObject;

use super::MAX_SELECTOR_BYTES;
use super::parser::Parser;
use super::validation::{label_value_errors, parse_int, validate_label_key};
use crate::names::excerpt;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid selector {selector:?}: {reason}")]
pub struct SelectorError {
    pub selector: String,
    pub reason: String,
}

/// apimachinery's `selection.Operator`. `=` and `==` stay distinct because
/// the canonical text prints each as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Operator {
    In,
    NotIn,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    Exists,
    DoesNotExist,
}

/// One requirement, `Requirement` in apimachinery. Values are kept as
/// given; the parser hands them over sorted and deduplicated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Requirement {
    pub(super) key: String,
    pub(super) op: Operator,
    pub(super) values: Vec<String>,
}

/// A parsed label selector (`app=web,tier!=db,env in (a,b),!legacy,x>1`):
/// the AND of its requirements, sorted by key as apimachinery sorts them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    pub(super) reqs: Vec<Requirement>,
}

impl Requirement {
    /// apimachinery's `NewRequirement`: checks the key, the number of
    /// values the operator takes, integer values for `>`/`<` and every
    /// value; all problems are reported, in apimachinery's order.
    pub(super) fn new(key: &str, op: Operator, values: Vec<String>) -> Result<Self, String> {
        let mut errs = Vec::new();
        if let Err(e) = validate_label_key(key) {
            errs.push(e);
        }
        match op {
            Operator::In | Operator::NotIn if values.is_empty() => {
                errs.push("for 'in', 'notin' operators, values set can't be empty".to_owned());
            }
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals
                if values.len() != 1 =>
            {
                errs.push(format!(
                    "exact-match compatibility requires one single value, got {values:?}"
                ));
            }
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
                errs.push(format!(
                    "values set must be empty for exists and does not exist, got {values:?}"
                ));
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    errs.push(format!(
                        "for 'Gt', 'Lt' operators, exactly one value is required, got {values:?}"
                    ));
                }
                for v in values.iter().filter(|v| parse_int(v).is_none()) {
                    errs.push(format!(
                        "invalid value {v:?} for key {key:?}: for 'Gt', 'Lt' operators, the value must be an integer"
                    ));
                }
            }
            _ => {}
        }
        for v in &values {
            let problems = label_value_errors(v);
            if !problems.is_empty() {
                errs.push(format!(
                    "invalid label value {v:?} for key {key:?}: {}",
                    problems.join("; ")
                ));
            }
        }
        if errs.is_empty() {
            Ok(Self {
                key: key.to_owned(),
                op,
                values,
            })
        } else {
            Err(errs.join("; "))
        }
    }

    /// apimachinery's `Requirement.Matches`: `!=` and `notin` match an
    /// absent label; `>` and `<` need the label to be an integer.
    pub(super) fn matches<'l>(&self, label: &impl Fn(&str) -> Option<&'l str>) -> bool {
        let has = |v: &str| self.values.iter().any(|x| x == v);
        match self.op {
            Operator::In | Operator::Equals | Operator::DoubleEquals => {
                label(&self.key).is_some_and(has)
            }
            Operator::NotIn | Operator::NotEquals => label(&self.key).is_none_or(|v| !has(v)),
            Operator::Exists => label(&self.key).is_some(),
            Operator::DoesNotExist => label(&self.key).is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let (Some(actual), [bound]) = (label(&self.key).and_then(parse_int), &*self.values)
                else {
                    return false;
                };
                let Some(bound) = parse_int(bound) else {
                    return false;
                };
                if self.op == Operator::GreaterThan {
                    actual > bound
                } else {
                    actual < bound
                }
            }
        }
    }
}

/// apimachinery's `Requirement.String()`: `!k`, `k`, `k=v`, `k==v`,
/// `k!=v`, `k>v`, `k<v`, `k in (a,b)`, `k notin (a,b)`, values sorted.
impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.op == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let (before, after) = match self.op {
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
            Operator::Equals => ("=", ""),
            Operator::DoubleEquals => ("==", ""),
            Operator::NotEquals => ("!=", ""),
            Operator::GreaterThan => (">", ""),
            Operator::LessThan => ("<", ""),
            Operator::In => (" in (", ")"),
            Operator::NotIn => (" notin (", ")"),
        };
        let mut values: Vec<&str> = self.values.iter().map(String::as_str).collect();
        values.sort_unstable();
        write!(f, "{before}{}{after}", values.join(","))
    }
}

/// The canonical text apimachinery's `Selector.String()` prints:
/// requirements sorted by key, joined by `,` (`a in (x,y),!b,c=d`).
/// Parsing it gives the same selector back.
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, req) in self.reqs.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{req}")?;
        }
        Ok(())
    }
}

impl LabelSelector {
    /// Parses `selector` as the API server's `labels.Parse` does; the error
    /// names the offending token, key or value. Empty (or blank) text is the
    /// selector that matches everything.
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        if selector.len() > MAX_SELECTOR_BYTES {
            return Err(SelectorError {
                selector: excerpt(selector),
                reason: format!(
                    "it is {} bytes, over the {MAX_SELECTOR_BYTES} a request to the API server \
                     can carry; select on fewer values, or on a label the objects share",
                    selector.len()
                ),
            });
        }
        let mut reqs = Parser::new(selector)
            .parse()
            .map_err(|reason| SelectorError {
                selector: excerpt(selector),
                reason,
            })?;
        // Deterministic, as apimachinery's sort.Sort(ByKey); stable, so
        // requirements on one key keep their written order.
        reqs.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    pub fn matches(&self, object: &KObject) -> bool {
        self.matches_labels(|k| object.label(k))
    }

    /// Whether a label set matches, the set given as a lookup (`Meta`'s
    /// labels, a list of pairs a plugin sent, a map), so no caller has to
    /// copy its labels into one shape first.
    pub fn matches_labels<'l>(&self, label: impl Fn(&str) -> Option<&'l str>) -> bool {
        self.reqs.iter().all(|r| r.matches(&label))
    }
}
