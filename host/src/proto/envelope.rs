//! The envelope the API server wraps protobuf objects in: the magic
//! `k8s\0`, then a `runtime.Unknown` whose TypeMeta names the object's
//! kind (the object's own message leaves TypeMeta out) and whose raw
//! bytes are the object's message.

use super::error::{ProtoError, Result};
use super::wire::{self, Value};

/// What precedes every protobuf object the API server sends.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// An envelope's parts, borrowed from its bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Envelope<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub raw: &'a [u8],
}

fn text<'a>(value: Option<Value<'a>>, what: &'static str) -> Result<&'a str> {
    match value {
        None => Ok(""),
        Some(v) => {
            let bytes = v.bytes().map_err(|r| ProtoError::wire(r).within(what))?;
            std::str::from_utf8(bytes).map_err(|_| ProtoError::wire("not UTF-8").within(what))
        }
    }
}

/// Reads the magic and the `runtime.Unknown` after it.
pub(crate) fn read(bytes: &[u8]) -> Result<Envelope<'_>> {
    let body = bytes.strip_prefix(MAGIC).ok_or(ProtoError::Magic)?;
    let mut fields = Vec::with_capacity(4);
    wire::fields(body, &mut fields).map_err(|r| ProtoError::wire(r).within("envelope"))?;
    let mut type_meta = Vec::with_capacity(2);
    if let Some(tm) = wire::last(&fields, 1) {
        let tm = tm
            .bytes()
            .map_err(|r| ProtoError::wire(r).within("typeMeta"))?;
        wire::fields(tm, &mut type_meta).map_err(|r| ProtoError::wire(r).within("typeMeta"))?;
    }
    let encoding = text(wire::last(&fields, 3), "contentEncoding")?;
    if !encoding.is_empty() {
        return Err(ProtoError::Encoding {
            what: "contentEncoding",
            value: encoding.to_owned(),
        });
    }
    let content_type = text(wire::last(&fields, 4), "contentType")?;
    if !(content_type.is_empty() || content_type == "application/vnd.kubernetes.protobuf") {
        return Err(ProtoError::Encoding {
            what: "contentType",
            value: content_type.to_owned(),
        });
    }
    let raw = match wire::last(&fields, 2) {
        Some(v) => v.bytes().map_err(|r| ProtoError::wire(r).within("raw"))?,
        None => &[],
    };
    Ok(Envelope {
        api_version: text(wire::last(&type_meta, 1), "apiVersion")?,
        kind: text(wire::last(&type_meta, 2), "kind")?,
        raw,
    })
}
