//! Watch streams in protobuf (`application/vnd.kubernetes.protobuf;
//! stream=watch`): frames of a 4-byte big-endian length and a
//! `metav1.WatchEvent` message (no envelope of its own), whose `object` is
//! a RawExtension holding one enveloped object, as [`super::transcode`]
//! reads it. The informers' wire layer (source/kube/wire) reads watches
//! with it.

use super::error::{ProtoError, Result};
use super::wire;
use super::{Transcoded, transcode};

/// One watch event: its type (`ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`,
/// `ERROR`) and its object as JSON (a `v1/Status` for `ERROR`).
#[derive(Debug, Clone, PartialEq)]
pub struct WatchEvent {
    pub event_type: String,
    pub object: Transcoded,
}

/// Splits the first whole frame off `buf`: its payload and the rest.
/// `None` while the frame is still incomplete.
pub fn split_frame(buf: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = buf.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// Reads one frame's payload: a `metav1.WatchEvent`.
pub fn watch_event(payload: &[u8]) -> Result<WatchEvent> {
    let mut fields = Vec::with_capacity(2);
    wire::fields(payload, &mut fields).map_err(|r| ProtoError::wire(r).within("watchEvent"))?;
    let event_type = match wire::last(&fields, 1) {
        Some(v) => {
            let bytes = v.bytes().map_err(|r| ProtoError::wire(r).within("type"))?;
            String::from_utf8(bytes.to_vec())
                .map_err(|_| ProtoError::wire("not UTF-8").within("type"))?
        }
        None => String::new(),
    };
    let mut raw_ext = Vec::with_capacity(1);
    if let Some(v) = wire::last(&fields, 2) {
        let bytes = v
            .bytes()
            .map_err(|r| ProtoError::wire(r).within("object"))?;
        wire::fields(bytes, &mut raw_ext).map_err(|r| ProtoError::wire(r).within("object"))?;
    }
    let raw = match wire::last(&raw_ext, 1) {
        Some(v) => v
            .bytes()
            .map_err(|r| ProtoError::wire(r).within("object.raw"))?,
        None => &[],
    };
    Ok(WatchEvent {
        event_type,
        object: transcode(raw)?,
    })
}
