//! The errors the API server answers a write it refuses with, as it words
//! them: field causes (apimachinery's `field.Error`), a 422 `Invalid`
//! status listing them, and the per-verb answers to a body that does not
//! decode. [`Refusal::status`] is the `metav1.Status` a simulated server
//! returns.

use std::fmt;

use kube::core::Status;
use kube::core::response::{StatusCause, StatusDetails, StatusSummary};
use serde_json::Value;

use super::decode::{Expected, Mismatch, Step};
use crate::kind::Gvk;

/// The write that carried the object: the server words a body it cannot
/// decode differently for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// POST: the body is the object.
    Create,
    /// PUT: the body is the object.
    Update,
    /// PATCH with `application/apply-patch+yaml` (server-side apply).
    Apply,
    /// PATCH with a merge, strategic-merge or JSON patch: the patched
    /// object is what is decoded.
    Patch,
}

/// A cause's type (apimachinery's `field.ErrorType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CauseType {
    Required,
    Invalid,
    Forbidden,
    NotSupported,
    TooLong,
    /// A custom resource's value of the wrong type.
    TypeInvalid,
    TooMany,
}

impl CauseType {
    /// The cause's `reason` in a Status.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Required => "FieldValueRequired",
            Self::Invalid => "FieldValueInvalid",
            Self::Forbidden => "FieldValueForbidden",
            Self::NotSupported => "FieldValueNotSupported",
            Self::TooLong => "FieldValueTooLong",
            Self::TypeInvalid => "FieldValueTypeInvalid",
            Self::TooMany => "FieldValueTooMany",
        }
    }
}

/// One refused field, as apimachinery's `field.Error`.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    pub kind: CauseType,
    /// `spec.containers[0].image`
    pub field: String,
    /// The value shown by `Invalid` and `NotSupported` causes.
    pub value: Option<Value>,
    /// What follows the type (`field is immutable`); may be empty.
    pub detail: String,
}

impl Cause {
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(CauseType::Required, field, None, detail)
    }

    pub fn invalid(field: impl Into<String>, value: Value, detail: impl Into<String>) -> Self {
        Self::new(CauseType::Invalid, field, Some(value), detail)
    }

    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(CauseType::Forbidden, field, None, detail)
    }

    fn new(
        kind: CauseType,
        field: impl Into<String>,
        value: Option<Value>,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            field: field.into(),
            value,
            detail: detail.into(),
        }
    }

    /// `field.Error.ErrorBody()`: the cause's `message` in a Status.
    pub fn message(&self) -> String {
        let head = match self.kind {
            CauseType::Required => "Required value".to_owned(),
            CauseType::Forbidden => "Forbidden".to_owned(),
            CauseType::TooLong => "Too long".to_owned(),
            CauseType::Invalid | CauseType::TypeInvalid => {
                format!("Invalid value: {}", go_value(self.value.as_ref()))
            }
            CauseType::TooMany => format!("Too many: {}", go_value(self.value.as_ref())),
            CauseType::NotSupported => {
                format!("Unsupported value: {}", go_value(self.value.as_ref()))
            }
        };
        if self.detail.is_empty() {
            head
        } else {
            format!("{head}: {}", self.detail)
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message())
    }
}

/// How apimachinery shows a refused value: strings quoted, numbers and
/// booleans bare, anything else as JSON (`null` when absent).
pub fn go_value(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => "null".into(),
        Some(v) => v.to_string(),
    }
}

/// A path as field validation prints it: `spec.containers[0].image`, map
/// keys as `data[foo]`.
pub fn field_path(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Field(f) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(f);
            }
            Step::Key(k) => out.push_str(&format!("[{k}]")),
            Step::Item(i, _) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// The object a refusal is about, as the Status names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub gvk: Gvk,
    pub namespace: String,
    pub name: String,
}

impl Subject {
    /// The subject of `object`, of kind `gvk`.
    pub fn of(gvk: &Gvk, object: &Value) -> Self {
        let meta = |f: &str| {
            object
                .pointer(&format!("/metadata/{f}"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        Self {
            gvk: gvk.clone(),
            namespace: meta("namespace"),
            name: meta("name"),
        }
    }

    /// `Deployment.apps`, `ConfigMap`: the qualified kind of messages.
    pub fn qualified_kind(&self) -> String {
        if self.gvk.group.is_empty() {
            self.gvk.kind.clone()
        } else {
            format!("{}.{}", self.gvk.kind, self.gvk.group)
        }
    }
}

/// A 422 `Invalid`: what field validation refused.
#[derive(Debug, Clone, PartialEq)]
pub struct Invalid {
    pub subject: Subject,
    pub causes: Vec<Cause>,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:?} is invalid: {}",
            self.subject.qualified_kind(),
            self.subject.name,
            aggregate(self.causes.iter().map(Cause::to_string))
        )
    }
}

/// utilerrors' aggregate: one message alone, several as `[a, b]`, repeats
/// shown once.
fn aggregate(messages: impl Iterator<Item = String>) -> String {
    let mut seen: Vec<String> = Vec::new();
    for m in messages {
        if !seen.contains(&m) {
            seen.push(m);
        }
    }
    match seen.as_slice() {
        [one] => one.clone(),
        all => format!("[{}]", all.join(", ")),
    }
}

/// A body that does not decode into the kind's type.
#[derive(Debug, Clone, PartialEq)]
pub struct Undecodable {
    pub subject: Subject,
    /// Every refused value, in key order (encoding/json names the first in
    /// the body's order; a parsed object has lost that order).
    pub mismatches: Vec<Mismatch>,
    /// The object whose decoding failed, for a patch's message.
    pub object: Value,
    /// The write that carried it (the answer depends on it).
    pub write: Write,
}

impl Undecodable {
    /// encoding/json's error for the first mismatch (create, update, patch).
    pub fn go_message(&self) -> String {
        self.mismatches.first().map(go_error).unwrap_or_default()
    }

    /// The server's answer.
    fn status(&self) -> Status {
        let kind = &self.subject.gvk.kind;
        match self.write {
            Write::Create | Write::Update => failure(
                400,
                "BadRequest",
                format!(
                    "{kind} in version {:?} cannot be handled as a {kind}: {}",
                    self.subject.gvk.version,
                    self.go_message()
                ),
                None,
            ),
            Write::Apply => failure(500, "", self.apply_message(), None),
            Write::Patch => {
                let cause = Cause::invalid(
                    "patch",
                    Value::String(self.object.to_string()),
                    self.go_message(),
                );
                let message = format!(" \"\" is invalid: {cause}");
                let details = details(String::new(), String::new(), String::new(), &[cause]);
                failure(422, "Invalid", message, Some(details))
            }
        }
    }

    /// structured-merge-diff's errors, as a server-side apply answers them.
    pub fn apply_message(&self) -> String {
        let gv = format!("{}/{}", self.subject.gvk.group, self.subject.gvk.version);
        let at = format!(
            "({}/{}; {gv}, Kind={})",
            self.subject.namespace, self.subject.name, self.subject.gvk.kind
        );
        let typed: Vec<String> = self
            .mismatches
            .iter()
            .filter_map(|m| smd_error(m).map(|e| format!("{}: {e}", m.smd_path())))
            .collect();
        match typed.as_slice() {
            [] => {
                // Only conversion errors: they come after the typed patch.
                let why = self
                    .mismatches
                    .first()
                    .map(convert_error)
                    .unwrap_or_default();
                format!(
                    "failed to convert new object {at} to proper version: unable to convert unstructured object to {gv}, Kind={}: {why}",
                    self.subject.gvk.kind
                )
            }
            [one] => format!("failed to create typed patch object {at}: {one}"),
            all => format!(
                "failed to create typed patch object {at}: errors:\n  {}",
                all.join("\n  ")
            ),
        }
    }
}

/// The quantity regular expression apimachinery quotes.
const QUANTITY: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// encoding/json's message for a mismatch (`json: cannot unmarshal string
/// into Go struct field DeploymentSpec.spec.replicas of type int32`).
fn go_error(m: &Mismatch) -> String {
    let what = match &m.got {
        Value::String(_) => "string".to_owned(),
        Value::Bool(_) => "bool".to_owned(),
        Value::Array(_) => "array".to_owned(),
        Value::Object(_) => "object".to_owned(),
        Value::Null => "null".to_owned(),
        Value::Number(n) => match m.expected {
            Expected::Integer { .. } | Expected::IntOrString => format!("number {n}"),
            _ => "number".to_owned(),
        },
    };
    let into = |ty: &str| {
        format!(
            "json: cannot unmarshal {what} into Go struct field {}.{} of type {ty}",
            m.go_struct,
            m.go_path()
        )
    };
    match &m.expected {
        Expected::String => into("string"),
        Expected::Integer { go, .. } => into(go),
        Expected::Number => into("float64"),
        Expected::Boolean => into("bool"),
        Expected::List { go } | Expected::Map { go } => into(go),
        Expected::IntOrString => {
            format!("json: cannot unmarshal {what} into Go value of type int32")
        }
        Expected::Quantity => QUANTITY.to_owned(),
        Expected::Base64 { at } => format!("illegal base64 data at input byte {at}"),
        Expected::Declared => format!("unknown field {:?}", m.go_path()),
    }
}

/// structured-merge-diff's message, or `None` for what it accepts and a
/// later conversion refuses (a fraction in an integer, a bad quantity or
/// base64 text).
fn smd_error(m: &Mismatch) -> Option<String> {
    let got = &m.got;
    Some(match &m.expected {
        Expected::String => format!(
            "expected string, got &value.valueUnstructured{{Value:{}}}",
            go_sharp(got)
        ),
        Expected::Integer { .. } | Expected::Number if got.is_number() => return None,
        Expected::Integer { .. } | Expected::Number => {
            format!("expected numeric (int or float), got {}", go_type_name(got))
        }
        Expected::Boolean => format!("expected boolean, got &{{{}}}", go_plain(got)),
        Expected::List { .. } => format!("expected list, got &{{{}}}", go_plain(got)),
        Expected::Map { .. } => format!("expected map, got &{{{}}}", go_plain(got)),
        Expected::Declared => "field not declared in schema".to_owned(),
        Expected::IntOrString | Expected::Quantity | Expected::Base64 { .. } => return None,
    })
}

/// The conversion error of an apply (after the typed patch).
fn convert_error(m: &Mismatch) -> String {
    match &m.expected {
        Expected::Integer { go, .. } => format!("cannot convert float64 to {go}"),
        Expected::Base64 { at } => {
            format!("error decoding from json: illegal base64 data at input byte {at}")
        }
        Expected::Quantity => QUANTITY.to_owned(),
        _ => go_error(m),
    }
}

/// Go's `%T` of a decoded JSON value.
fn go_type_name(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "string",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
        Value::Null => "<nil>",
    }
}

/// Go's `%#v` of a decoded JSON value.
fn go_sharp(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".into(),
        Value::Array(items) => format!(
            "[]interface {{}}{{{}}}",
            items.iter().map(go_sharp).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(map) => format!(
            "map[string]interface {{}}{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{k:?}:{}", go_sharp(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

/// Go's `%v` of a decoded JSON value.
fn go_plain(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::String(s) => s.clone(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(go_plain).collect::<Vec<_>>().join(" ")
        ),
        Value::Object(map) => format!(
            "map[{}]",
            map.iter()
                .map(|(k, v)| format!("{k}:{}", go_plain(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        other => other.to_string(),
    }
}

/// Why the simulated server refuses a write.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    /// Field validation refused it: 422 `Invalid` with its causes.
    #[error("{0}")]
    Invalid(Box<Invalid>),
    /// The body does not decode into the kind's type.
    #[error("{} cannot be handled as a {}: {}", .0.subject.qualified_kind(), .0.subject.gvk.kind, .0.go_message())]
    Undecodable(Box<Undecodable>),
}

impl Refusal {
    /// The causes a 422 lists (none for a body that does not decode).
    pub fn causes(&self) -> &[Cause] {
        match self {
            Self::Invalid(i) => &i.causes,
            Self::Undecodable(_) => &[],
        }
    }

    /// The fields refused, as the server's causes name them (for a body
    /// that does not decode: the fields field validation would name).
    pub fn fields(&self) -> Vec<String> {
        match self {
            Self::Invalid(i) => i.causes.iter().map(|c| c.field.clone()).collect(),
            Self::Undecodable(u) => u.mismatches.iter().map(Mismatch::field_path).collect(),
        }
    }

    /// The `metav1.Status` the API server answers with.
    pub fn status(&self) -> Status {
        match self {
            Self::Invalid(invalid) => {
                let subject = &invalid.subject;
                let details = details(
                    subject.name.clone(),
                    subject.gvk.group.clone(),
                    subject.gvk.kind.clone(),
                    &invalid.causes,
                );
                failure(422, "Invalid", invalid.to_string(), Some(details))
            }
            Self::Undecodable(u) => u.status(),
        }
    }
}

fn details(name: String, group: String, kind: String, causes: &[Cause]) -> StatusDetails {
    StatusDetails {
        name,
        group,
        kind,
        uid: String::new(),
        causes: causes.iter().map(status_cause).collect(),
        retry_after_seconds: 0,
    }
}

fn status_cause(cause: &Cause) -> StatusCause {
    StatusCause {
        reason: cause.kind.reason().to_owned(),
        message: cause.message(),
        field: cause.field.clone(),
    }
}

fn failure(code: u16, reason: &str, message: String, details: Option<StatusDetails>) -> Status {
    Status {
        status: Some(StatusSummary::Failure),
        code,
        message,
        metadata: None,
        reason: reason.to_owned(),
        details,
    }
}
