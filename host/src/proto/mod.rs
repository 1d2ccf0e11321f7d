//! Protobuf to JSON for built-in kinds: the bytes the API server sends for
//! `Accept: application/vnd.kubernetes.protobuf` turned into exactly the
//! JSON text it would have sent for `application/json`, so the cache and
//! plugins keep seeing the JSON they see today while the wire carries the
//! smaller, cheaper protobuf.
//!
//! The transcoder walks the wire format with a table generated from the Go
//! types of the Kubernetes version we target (schema.txt, written by
//! `protoprobe schema` in tests/controlplane): field numbers from their
//! protobuf tags, JSON names, omitempty and inline from their json tags,
//! and a handful of types with their own MarshalJSON (times, quantities,
//! IntOrString, embedded JSON, the apiextensions schema unions) written by
//! hand. No protobuf library is linked: the table is 270 KB of text read
//! once, and the walk writes JSON straight from the wire bytes without
//! building messages. Custom resources have no protobuf form and stay JSON;
//! [`supports`] says which kinds this reads.
//!
//! Held to apimachinery's own serializers by tests/tests/proto_corpus.rs.

mod custom;
mod envelope;
mod error;
mod json;
mod schema;
mod transcode;
mod watch;
mod wire;

#[cfg(test)]
pub(crate) mod test_msg;
#[cfg(test)]
mod tests;

pub use envelope::MAGIC;
pub use error::{ProtoError, Result};
pub use watch::{WatchEvent, split_frame, watch_event};

use crate::kind::Gvk;
use schema::{Ty, schema};
use transcode::{TypeMeta, Writer};

/// A transcoded protobuf object.
#[derive(Debug, Clone, PartialEq)]
pub enum Transcoded {
    Object(Object),
    List(List),
}

/// One object: its kind, from the envelope, and its compact JSON text,
/// `kind` and `apiVersion` included.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    pub api_version: String,
    pub kind: String,
    pub text: String,
}

/// A list (`PodList`): its metadata and its items, each item's compact JSON
/// text as the server writes list items (without `kind` and `apiVersion`;
/// [`List::item_kind`] names them).
#[derive(Debug, Clone, PartialEq)]
pub struct List {
    pub api_version: String,
    /// The list's kind, `PodList`.
    pub kind: String,
    /// The list's `metadata` (resourceVersion, continue, ...), as JSON.
    pub metadata: String,
    pub items: Vec<String>,
}

impl List {
    /// The items' kind: the list's without its `List` suffix.
    pub fn item_kind(&self) -> &str {
        self.kind.strip_suffix("List").unwrap_or(&self.kind)
    }

    /// The whole list as the server's JSON: `{"kind":..,"apiVersion":..,
    /// "metadata":..,"items":[..]}` (`items` is `null` when empty, as Go
    /// writes a nil slice).
    pub fn to_json(&self) -> String {
        let mut out =
            Vec::with_capacity(self.items.iter().map(|i| i.len() + 1).sum::<usize>() + 128);
        out.extend_from_slice(b"{\"kind\":");
        json::string(&mut out, self.kind.as_bytes());
        out.extend_from_slice(b",\"apiVersion\":");
        json::string(&mut out, self.api_version.as_bytes());
        out.extend_from_slice(b",\"metadata\":");
        out.extend_from_slice(self.metadata.as_bytes());
        out.extend_from_slice(b",\"items\":");
        if self.items.is_empty() {
            out.extend_from_slice(b"null");
        } else {
            for (i, item) in self.items.iter().enumerate() {
                out.push(if i == 0 { b'[' } else { b',' });
                out.extend_from_slice(item.as_bytes());
            }
            out.push(b']');
        }
        out.push(b'}');
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// Whether objects of `gvk` can be transcoded: a built-in kind (or its
/// list) of the Kubernetes version the table was generated from.
pub fn supports(gvk: &Gvk) -> bool {
    schema().is_ok_and(|s| s.kind(&gvk.api_version(), &gvk.kind).is_some())
}

/// Whether the table holds kinds of `api_version` (`v1`, `apps/v1`): a
/// built-in group version, whose lists and watches can be asked for in
/// protobuf (a kind of it newer than the table fails to transcode).
pub fn knows_api_version(api_version: &str) -> bool {
    static VERSIONS: std::sync::OnceLock<std::collections::HashSet<String>> =
        std::sync::OnceLock::new();
    VERSIONS
        .get_or_init(|| match schema() {
            Ok(s) => s
                .kinds
                .keys()
                .filter_map(|k| k.rsplit_once('/').map(|(v, _)| v.to_owned()))
                .collect(),
            Err(_) => std::collections::HashSet::new(),
        })
        .contains(api_version)
}

/// Reads an enveloped protobuf object (`k8s\0` + `runtime.Unknown`) and
/// writes the JSON the API server would have served for it.
pub fn transcode(bytes: &[u8]) -> Result<Transcoded> {
    let schema = schema()?;
    let env = envelope::read(bytes)?;
    let unsupported = || ProtoError::Unsupported {
        api_version: env.api_version.to_owned(),
        kind: env.kind.to_owned(),
    };
    let id = schema
        .kind(env.api_version, env.kind)
        .ok_or_else(unsupported)?;
    if let Some(list) = list_shape(schema, id) {
        return transcode_list(schema, &env, list);
    }
    let mut writer = Writer::new(schema, env.raw.len() * 2 + 64);
    writer.message(
        id,
        env.raw,
        Some(TypeMeta {
            api_version: env.api_version,
            kind: env.kind,
        }),
    )?;
    Ok(Transcoded::Object(Object {
        api_version: env.api_version.to_owned(),
        kind: env.kind.to_owned(),
        text: into_text(writer.out),
    }))
}

/// The field numbers and messages of a list's `metadata` and `items`.
struct ListShape {
    metadata: (u32, schema::MessageId),
    items: (u32, schema::MessageId),
}

fn list_shape(schema: &schema::Schema, id: schema::MessageId) -> Option<ListShape> {
    let fields = &schema.messages[id].fields;
    let find = |key: &str| fields.iter().find(|f| &*f.key == key);
    let metadata = find("\"metadata\":")?;
    let items = find("\"items\":")?;
    match (&metadata.ty, &items.ty) {
        (Ty::Message(meta), Ty::Slice(item))
            if schema.messages[*meta].name.ends_with(".ListMeta") =>
        {
            let Ty::Message(item) = **item else {
                return None;
            };
            Some(ListShape {
                metadata: (metadata.number?, *meta),
                items: (items.number?, item),
            })
        }
        _ => None,
    }
}

fn transcode_list(
    schema: &schema::Schema,
    env: &envelope::Envelope<'_>,
    shape: ListShape,
) -> Result<Transcoded> {
    let mut fields = Vec::new();
    wire::fields(env.raw, &mut fields).map_err(ProtoError::wire)?;
    let mut writer = Writer::new(schema, 256);
    let meta = match wire::last(&fields, shape.metadata.0) {
        Some(v) => v
            .bytes()
            .map_err(|r| ProtoError::wire(r).within("metadata"))?,
        None => &[],
    };
    writer
        .message(shape.metadata.1, meta, None)
        .map_err(|e| e.within("metadata"))?;
    let metadata = into_text(std::mem::take(&mut writer.out));
    let mut items = Vec::new();
    for (i, (_, value)) in fields
        .iter()
        .filter(|(n, _)| *n == shape.items.0)
        .enumerate()
    {
        let bytes = value
            .bytes()
            .map_err(|r| ProtoError::wire(r).within(&format!("items[{i}]")))?;
        writer.out = Vec::with_capacity(bytes.len() * 2 + 64);
        writer
            .message(shape.items.1, bytes, None)
            .map_err(|e| e.within(&format!("items[{i}]")))?;
        items.push(into_text(std::mem::take(&mut writer.out)));
    }
    Ok(Transcoded::List(List {
        api_version: env.api_version.to_owned(),
        kind: env.kind.to_owned(),
        metadata,
        items,
    }))
}

/// The writer only writes UTF-8 (strings are escaped from their valid
/// parts, embedded JSON was parsed as UTF-8), so this never replaces.
/// Spare capacity is given back: the text is what a cache keeps.
fn into_text(mut out: Vec<u8>) -> String {
    out.shrink_to_fit();
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}
