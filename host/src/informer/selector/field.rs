//! [`FieldSelector`]: apimachinery's `fields.ParseSelector`, and the
//! fields a server supports per kind.

use std::fmt;

use crate::kind::KindInfo;
use crate::object::{FieldValue, KObject};

use super::MAX_SELECTOR_BYTES;
use crate::names::excerpt;

/// Why a field selector does not parse. Each message starts with the API
/// server's own text for the same mistake (apimachinery's `ParseSelector`),
/// then says how to write it.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum FieldSelectorError {
    /// A term with no `=`, `==` or `!=`.
    #[error(
        "invalid selector: '{selector}'; can't understand '{term}' \
         (write each comma-separated term as FIELD=VALUE, FIELD==VALUE or FIELD!=VALUE)"
    )]
    Term { selector: String, term: String },
    /// Longer than a request to the API server can carry.
    #[error(
        "invalid field selector: it is {bytes} bytes, over the {max} a request to the API \
         server can carry; select on fewer fields"
    )]
    TooLong { bytes: usize, max: usize },
    /// A backslash in a value before anything but `\`, `,` or `=`, or at its end.
    #[error(
        "invalid field selector: invalid escape sequence: {sequence} (in '{term}': \
         a value escapes only a backslash, comma or equals sign, as \\\\, \\, and \\=; \
         write a literal backslash as \\\\)"
    )]
    InvalidEscape { term: String, sequence: String },
    /// A `,` or `=` in a value that is not escaped. The server prints the
    /// character's code point, so this does too, then the character.
    #[error(
        "invalid field selector: unescaped character in value: {} ('{character}' in '{term}': \
         write it as \\{character} in a value)",
        u32::from(*character)
    )]
    Unescaped { term: String, character: char },
}

/// A field selector term's operator; `==` parses as `=`, as in apimachinery
/// (`hasTerm` and `notHasTerm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldOp {
    Equals,
    NotEquals,
}

/// One term: the field as written (no trimming, no validation: the server
/// refuses unknown fields later, per kind) and the unescaped value.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldRequirement {
    field: String,
    op: FieldOp,
    value: String,
}

impl fmt::Display for FieldRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            FieldOp::Equals => "=",
            FieldOp::NotEquals => "!=",
        };
        write!(f, "{}{op}{}", self.field, escape_field_value(&self.value))
    }
}

/// A field selector (`metadata.name=x,status.phase!=Running`): a port of
/// apimachinery's `fields.ParseSelector` (`pkg/fields/selector.go`,
/// v0.35.8), so a subscription is accepted or refused exactly as the API
/// server would, and the local cluster filters as a real one does.
///
/// The grammar: comma-separated terms, each `FIELD=VALUE`, `FIELD==VALUE` or
/// `FIELD!=VALUE`, split at the first operator; nothing is trimmed; empty
/// terms are skipped. In a value `\`, `,` and `=` must be escaped (`\\`,
/// `\,`, `\=`) and no other escape exists; the field is taken as written.
/// Terms are kept in the order of their sorted text, as the server keeps
/// them, and a term with an empty field and an empty value means nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    reqs: Vec<FieldRequirement>,
}

/// apimachinery's `EscapeValue`: `\`, `,` and `=` get a backslash.
fn escape_field_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// apimachinery's `splitTerms`: splits at commas not escaped by a
/// backslash; the terms keep their backslashes.
fn split_terms(selector: &str) -> Vec<&str> {
    if selector.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::with_capacity(1);
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in selector.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&selector[start..i]);
            start = i + 1;
        }
    }
    terms.push(&selector[start..]);
    terms
}

/// apimachinery's `splitTerm`: the first place an operator starts (`!=`,
/// then `==`, then `=`) splits the term; the field cannot escape anything.
fn split_term(term: &str) -> Option<(&str, FieldOp, &str)> {
    const OPERATORS: [(&str, FieldOp); 3] = [
        ("!=", FieldOp::NotEquals),
        ("==", FieldOp::Equals),
        ("=", FieldOp::Equals),
    ];
    term.char_indices().find_map(|(i, _)| {
        OPERATORS.iter().find_map(|(text, op)| {
            term[i..]
                .strip_prefix(text)
                .map(|rhs| (&term[..i], *op, rhs))
        })
    })
}

/// apimachinery's `UnescapeValue`, its errors turned into ours for `term`.
fn unescape_value(value: &str, term: &str) -> Result<String, FieldSelectorError> {
    let mut out = String::with_capacity(value.len());
    let mut in_slash = false;
    for c in value.chars() {
        if in_slash {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(FieldSelectorError::InvalidEscape {
                    term: excerpt(term),
                    sequence: format!("\\{c}"),
                });
            }
            out.push(c);
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if matches!(c, ',' | '=') {
            return Err(FieldSelectorError::Unescaped {
                term: excerpt(term),
                character: c,
            });
        } else {
            out.push(c);
        }
    }
    if in_slash {
        return Err(FieldSelectorError::InvalidEscape {
            term: excerpt(term),
            sequence: "\\".to_owned(),
        });
    }
    Ok(out)
}

/// The JSON pointer of a dotted field label (`spec.nodeName` ->
/// `/spec/nodeName`); a `~` or `/` in a segment is escaped, so it names
/// that key and nothing deeper.
fn field_pointer(field: &str) -> String {
    let mut pointer = String::with_capacity(field.len() + 1);
    for segment in field.split('.') {
        pointer.push('/');
        pointer.push_str(&segment.replace('~', "~0").replace('/', "~1"));
    }
    pointer
}

impl FieldSelector {
    /// Parses `selector` as the API server's `fields.ParseSelector` does.
    /// Empty text, or only commas, is the selector that matches everything.
    /// When several terms are wrong, the error names the first in sorted
    /// order, the one the server names.
    pub fn parse(selector: &str) -> Result<Self, FieldSelectorError> {
        if selector.len() > MAX_SELECTOR_BYTES {
            return Err(FieldSelectorError::TooLong {
                bytes: selector.len(),
                max: MAX_SELECTOR_BYTES,
            });
        }
        let mut terms = split_terms(selector);
        terms.sort_unstable();
        let mut reqs = Vec::with_capacity(terms.len());
        for term in terms.into_iter().filter(|t| !t.is_empty()) {
            let (field, op, raw) = split_term(term).ok_or_else(|| FieldSelectorError::Term {
                selector: excerpt(selector),
                term: excerpt(term),
            })?;
            let value = unescape_value(raw, term)?;
            // ParseSelector's identity transform drops a term whose field
            // and value are both empty (`=`, `!=`): it selects everything.
            if field.is_empty() && value.is_empty() {
                continue;
            }
            reqs.push(FieldRequirement {
                field: field.to_owned(),
                op,
                value,
            });
        }
        Ok(Self { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// The terms as apimachinery's `Requirements()` gives them: field,
    /// operator and unescaped value, in parsed order.
    pub fn requirements(&self) -> impl Iterator<Item = (&str, FieldOp, &str)> {
        self.reqs
            .iter()
            .map(|r| (r.field.as_str(), r.op, r.value.as_str()))
    }

    /// Refuses a field the API server does not support for `kind`, as the
    /// server does (`field label not supported`). Kinds that are not built
    /// in (CRDs) support `metadata.name`, `metadata.namespace` and their
    /// CRD's `selectableFields`, which the registry does not know: every
    /// field passes for them.
    pub fn check_supported(&self, kind: &KindInfo) -> Result<(), String> {
        if !crate::kind::is_builtin(&kind.gvk) {
            return Ok(());
        }
        let supported = supported_fields(kind);
        for r in &self.reqs {
            if !supported.contains(&r.field.as_str()) {
                return Err(format!(
                    "field label not supported for {}: {:?} (the API server supports {})",
                    kind.resource_name(),
                    r.field,
                    supported.join(", ")
                ));
            }
        }
        Ok(())
    }

    /// Whether an object matches, its fields read at the dotted paths the
    /// terms name (a missing field, `null`, an object or an array reads as
    /// the empty string, as a field the server's field set lacks does).
    pub fn matches(&self, obj: &KObject) -> bool {
        self.matches_fields(|field| server_field(obj, field))
    }

    /// Whether a field set matches, given as a lookup (apimachinery's
    /// `Fields.Get`: a missing field is the empty string).
    pub fn matches_fields<V: AsRef<str>>(&self, field: impl Fn(&str) -> Option<V>) -> bool {
        self.reqs.iter().all(|r| {
            let actual = field(&r.field);
            let actual = actual.as_ref().map_or("", AsRef::as_ref);
            (actual == r.value) == (r.op == FieldOp::Equals)
        })
    }
}

/// The value the API server's field set gives `field` of `obj` (its
/// registry's `GetAttrs`): most fields are the object's own, but a few are
/// computed or defaulted, and a selector on them must read what the server
/// reads, or a simulation selects other objects than a cluster (a Node
/// without `spec.unschedulable` is `false` there, a Job's
/// `status.successful` is its `status.succeeded`).
pub fn server_field(obj: &KObject, field: &str) -> Option<String> {
    let text = |pointer: &str| match obj.field(pointer)? {
        FieldValue::Text(s) => Some(s),
        other => other.as_index_key(),
    };
    // The kind as decoded with the object's metadata: no scan of the text.
    let meta = obj.meta();
    let group = meta.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let or =
        |pointer: &str, default: &str| Some(text(pointer).unwrap_or_else(|| default.to_owned()));
    match (group, &*meta.kind, field) {
        // PodToSelectableFields: a Pod's host network as a boolean, false
        // unless set; its IP the first of `status.podIPs`.
        ("", "Pod", "spec.hostNetwork") => or("/spec/hostNetwork", "false"),
        ("", "Pod", "status.podIP") => or("/status/podIPs/0/ip", ""),
        // NodeToSelectableFields, JobToSelectableFields,
        // ControllerToSelectableFields (ReplicationController): formatted
        // from the typed field, so an absent one reads as its zero value.
        ("", "Node", "spec.unschedulable") => or("/spec/unschedulable", "false"),
        ("batch", "Job", "status.successful") => or("/status/succeeded", "0"),
        ("", "ReplicationController", "status.replicas") => or("/status/replicas", "0"),
        // EventToSelectableFields: `source` is the reporting component.
        ("", "Event", "source") => or("/source/component", ""),
        _ => text(&field_pointer(field)),
    }
}

/// The canonical text, apimachinery's `String()`: the terms in parsed order
/// (`==` printed as `=`) with their values escaped. What the host sends to
/// the API server and shows as the informer's selector.
impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.reqs.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// The field labels a Kubernetes 1.35 API server accepts in a field
/// selector for a built-in kind: `metadata.name` and `metadata.namespace`
/// (the generic set, also for most cluster-scoped kinds) plus the kind's
/// own; the cluster-scoped kinds with their own set have no
/// `metadata.namespace`. Checked against a real server by
/// `tests/tests/e2e/kinds.rs`.
pub fn supported_fields(kind: &KindInfo) -> Vec<&'static str> {
    let mut fields = vec!["metadata.name"];
    let own: &[&str] = match (kind.gvk.group.as_str(), kind.plural.as_str()) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        ],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("", "secrets") => &["type"],
        ("", "namespaces") => &["status.phase"],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "replicationcontrollers") => &["status.replicas"],
        ("", "services") => &["spec.clusterIP", "spec.type"],
        ("batch", "jobs") => &["status.successful"],
        ("certificates.k8s.io", "certificatesigningrequests") => &["spec.signerName"],
        ("resource.k8s.io", "resourceslices") => &["spec.nodeName", "spec.driver"],
        _ => &[],
    };
    if kind.namespaced || own.is_empty() {
        fields.push("metadata.namespace");
    }
    fields.extend(own);
    fields
}
