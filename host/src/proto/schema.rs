//! The generated field table (schema.txt) read into the shapes the
//! transcoder walks. Protobuf descriptors give field numbers and wire types,
//! but not what the JSON encoding follows: JSON names (`$ref`,
//! `x-kubernetes-...`), omitempty versus always written, pointer versus
//! value (absent means `null` or a zero value), inline structs and the types
//! with their own MarshalJSON. The Go types carry all of it (their protobuf
//! tags are what go-to-protobuf wrote the .proto files from), so the table
//! comes from them: `protoprobe schema` (tests/controlplane/protoprobe).

use std::collections::HashMap;
use std::sync::OnceLock;

use super::error::{ProtoError, Result};

/// The table as committed. tests/tests/proto_corpus.rs fails when it
/// differs from what the probe generates, and rewrites it with
/// `KUBEWASM_REGENERATE=1 cargo test -p kubewasm-tests --test proto_corpus
/// schema_is_current`.
pub(crate) const TEXT: &str = include_str!("schema.txt");

/// A table error: the line and what is wrong with it.
type ParseResult<T> = std::result::Result<T, (usize, String)>;

/// Index of a message in [`Schema::messages`].
pub(crate) type MessageId = usize;

/// A Go type as encoding/json writes it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ty {
    String,
    Bool,
    Int32,
    Int64,
    Float64,
    /// `[]byte`: base64, `null` when nil.
    Bytes,
    Ptr(Box<Ty>),
    Slice(Box<Ty>),
    /// A named slice protobuf wraps in a message of its own (`Verbs`,
    /// `ExtraValue`): the items are that message's repeated field 1.
    Wrapped(Box<Ty>),
    Map(Box<Ty>, Box<Ty>),
    Message(MessageId),
    Custom(Custom),
    /// A Go kind the table names but the transcoder has no encoding for;
    /// an error only when such a field holds a value.
    Other(String),
}

/// The types whose MarshalJSON the transcoder reproduces.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Custom {
    Time,
    MicroTime,
    Quantity,
    IntOrString,
    /// RawExtension and FieldsV1: their bytes are JSON, embedded.
    RawJson,
    /// apiextensions JSON: embedded, `null` when empty.
    ApiextJson,
    /// `JSONSchemaPropsOrArray` and friends, with their package's
    /// `JSONSchemaProps`.
    PropsOrArray(MessageId),
    PropsOrBool(MessageId),
    PropsOrStringArray(MessageId),
}

/// One Go struct field.
#[derive(Debug, Clone)]
pub(crate) struct Field {
    /// The protobuf field number; `None` for the inline TypeMeta, which
    /// protobuf carries in the envelope.
    pub number: Option<u32>,
    /// `"name":`, ready to write.
    pub key: Box<str>,
    pub omitempty: bool,
    pub omitzero: bool,
    pub inline: bool,
    pub ty: Ty,
}

#[derive(Debug, Clone)]
pub(crate) struct Message {
    pub name: Box<str>,
    pub fields: Vec<Field>,
    /// Field number to 1 + its index in `fields` (0: not a field), so a
    /// wire field finds its table field without a search.
    pub slots: Vec<u16>,
}

/// Every message of the table and the kinds that name them.
#[derive(Debug)]
pub(crate) struct Schema {
    pub messages: Vec<Message>,
    /// `apiVersion/Kind` (`v1/Pod`, `apps/v1/DeploymentList`) to message.
    pub kinds: HashMap<Box<str>, MessageId>,
}

/// The committed table, read once.
pub(crate) fn schema() -> Result<&'static Schema> {
    static SCHEMA: OnceLock<ParseResult<Schema>> = OnceLock::new();
    SCHEMA
        .get_or_init(|| Schema::parse(TEXT))
        .as_ref()
        .map_err(|(line, reason)| ProtoError::Schema {
            line: *line,
            reason: reason.clone(),
        })
}

const JSONSCHEMAPROPS_SUFFIXES: [&str; 3] = [
    "JSONSchemaPropsOrArray",
    "JSONSchemaPropsOrBool",
    "JSONSchemaPropsOrStringArray",
];

impl Schema {
    /// Reads the table; an error names the line.
    pub(crate) fn parse(text: &str) -> ParseResult<Schema> {
        // Names first, so fields can point at messages defined later.
        let mut ids: HashMap<&str, MessageId> = HashMap::new();
        let mut customs: HashMap<&str, usize> = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            if let Some(name) = line.strip_prefix("M ") {
                ids.insert(name, ids.len());
            } else if let Some(name) = line.strip_prefix("C ") {
                customs.insert(name, n + 1);
            }
        }
        let mut schema = Schema {
            messages: Vec::with_capacity(ids.len()),
            kinds: HashMap::new(),
        };
        let resolve = |name: &str, line: usize| -> ParseResult<Ty> {
            if let Some(id) = ids.get(name) {
                return Ok(Ty::Message(*id));
            }
            if !customs.contains_key(name) {
                return Err((line, format!("type {name} is neither a message nor custom")));
            }
            let (package, short) = name.rsplit_once('.').unwrap_or(("", name));
            let props = || {
                ids.get(format!("{package}.JSONSchemaProps").as_str())
                    .copied()
                    .ok_or((line, format!("{name} without JSONSchemaProps beside it")))
            };
            let custom = match short {
                "Time" => Custom::Time,
                "MicroTime" => Custom::MicroTime,
                "Quantity" => Custom::Quantity,
                "IntOrString" => Custom::IntOrString,
                "RawExtension" | "FieldsV1" => Custom::RawJson,
                "JSON" => Custom::ApiextJson,
                s if s == JSONSCHEMAPROPS_SUFFIXES[0] => Custom::PropsOrArray(props()?),
                s if s == JSONSCHEMAPROPS_SUFFIXES[1] => Custom::PropsOrBool(props()?),
                s if s == JSONSCHEMAPROPS_SUFFIXES[2] => Custom::PropsOrStringArray(props()?),
                _ => return Ok(Ty::Other(name.to_owned())),
            };
            Ok(Ty::Custom(custom))
        };
        for (n, line) in text.lines().enumerate() {
            let n = n + 1;
            if let Some(rest) = line.strip_prefix("K ") {
                let (kind, message) = rest
                    .split_once(' ')
                    .ok_or((n, "K without a message".into()))?;
                let id = *ids
                    .get(message)
                    .ok_or((n, format!("kind of unknown message {message}")))?;
                schema.kinds.insert(kind.into(), id);
            } else if let Some(name) = line.strip_prefix("M ") {
                schema.messages.push(Message {
                    name: name.into(),
                    fields: Vec::new(),
                    slots: Vec::new(),
                });
            } else if let Some(rest) = line.strip_prefix("  ") {
                let mut parts = rest.split(' ');
                let (Some(number), Some(json), Some(flags), Some(ty), None) = (
                    parts.next(),
                    parts.next(),
                    parts.next(),
                    parts.next(),
                    parts.next(),
                ) else {
                    return Err((n, "a field needs four words".into()));
                };
                let number = match number {
                    "-" => None,
                    s => Some(s.parse().map_err(|_| (n, format!("field number {s:?}")))?),
                };
                let ty = parse_ty(ty, &mut |name| resolve(name, n))?;
                let message = schema
                    .messages
                    .last_mut()
                    .ok_or((n, "a field before any message".into()))?;
                message.fields.push(Field {
                    number,
                    key: format!("\"{json}\":").into(),
                    omitempty: flags.contains('o'),
                    omitzero: flags.contains('z'),
                    inline: flags.contains('i'),
                    ty,
                });
            } else if !(line.starts_with('#') || line.starts_with("C ") || line.is_empty()) {
                return Err((n, format!("unreadable line {line:?}")));
            }
        }
        for message in &mut schema.messages {
            for (i, field) in message.fields.iter().enumerate() {
                let Some(number) = field.number else { continue };
                let number = usize::try_from(number).unwrap_or(usize::MAX);
                if number > 4096 {
                    return Err((
                        0,
                        format!("{}: field number {number} too large", message.name),
                    ));
                }
                if message.slots.len() <= number {
                    message.slots.resize(number + 1, 0);
                }
                message.slots[number] = u16::try_from(i + 1).unwrap_or(0);
            }
        }
        Ok(schema)
    }

    /// The message a kind's object is, by `apiVersion` and `kind`.
    pub(crate) fn kind(&self, api_version: &str, kind: &str) -> Option<MessageId> {
        self.kinds
            .get(format!("{api_version}/{kind}").as_str())
            .copied()
    }
}

/// Reads a type expression: `*T`, `[]T`, `@T`, `map[K]V`, `!Name`, a
/// message name or a scalar kind.
fn parse_ty(s: &str, resolve: &mut dyn FnMut(&str) -> ParseResult<Ty>) -> ParseResult<Ty> {
    Ok(if let Some(rest) = s.strip_prefix('*') {
        Ty::Ptr(Box::new(parse_ty(rest, resolve)?))
    } else if let Some(rest) = s.strip_prefix("[]") {
        Ty::Slice(Box::new(parse_ty(rest, resolve)?))
    } else if let Some(rest) = s.strip_prefix('@') {
        Ty::Wrapped(Box::new(parse_ty(rest, resolve)?))
    } else if let Some(rest) = s.strip_prefix("map[") {
        // Keys are scalars or names: no brackets inside.
        let (key, value) = rest.split_once(']').unwrap_or((rest, ""));
        Ty::Map(
            Box::new(parse_ty(key, resolve)?),
            Box::new(parse_ty(value, resolve)?),
        )
    } else if let Some(name) = s.strip_prefix('!') {
        resolve(name)?
    } else {
        match s {
            "string" => Ty::String,
            "bool" => Ty::Bool,
            "int32" => Ty::Int32,
            "int64" => Ty::Int64,
            "float64" => Ty::Float64,
            "bytes" => Ty::Bytes,
            name if name.contains('.') => resolve(name)?,
            other => Ty::Other(other.to_owned()),
        }
    })
}
