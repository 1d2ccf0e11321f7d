//! An object's metadata, decoded once per version, and what the cache
//! strips from it.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::pairs::Pairs;
use super::{LAST_APPLIED, ObjectError};

/// One `metadata.ownerReferences` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct OwnerRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    #[serde(default)]
    pub controller: Option<bool>,
    #[serde(default)]
    pub block_owner_deletion: Option<bool>,
}

/// The decoded metadata of an object.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Meta {
    pub api_version: Box<str>,
    pub kind: Box<str>,
    pub namespace: Option<Box<str>>,
    pub name: Box<str>,
    pub uid: Box<str>,
    pub resource_version: Box<str>,
    pub generation: Option<i64>,
    /// Spans of the object's text: read through `KObject::labels`.
    pub labels: Pairs,
    /// Spans of the object's text: read through `KObject::annotations`.
    pub annotations: Pairs,
    pub owner_references: Vec<OwnerRef>,
    pub creation_timestamp: Option<Box<str>>,
    pub deletion_timestamp: Option<Box<str>>,
}

/// Which bulky, rarely read parts of an object the cache drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StripOptions {
    pub managed_fields: bool,
    pub last_applied: bool,
}

impl Default for StripOptions {
    fn default() -> Self {
        Self {
            managed_fields: true,
            last_applied: true,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RawMeta {
    #[serde(default)]
    pub(super) namespace: Option<String>,
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) uid: Option<String>,
    #[serde(default)]
    pub(super) resource_version: Option<String>,
    #[serde(default)]
    pub(super) generation: Option<i64>,
    #[serde(default)]
    pub(super) owner_references: Option<Vec<OwnerRef>>,
    #[serde(default)]
    pub(super) creation_timestamp: Option<String>,
    #[serde(default)]
    pub(super) deletion_timestamp: Option<String>,
}

impl RawMeta {
    /// The metadata of the object whose whole text is `text`: labels and
    /// annotations are located in it (spans, not copies).
    pub(super) fn into_meta(
        self,
        api_version: &str,
        kind: &str,
        text: &str,
    ) -> Result<Meta, ObjectError> {
        let map = |field: &'static str, what: &'static str| -> Result<Pairs, ObjectError> {
            let raw = match sonic_rs::get_from_str(text, ["metadata", field]) {
                Ok(v) => Some(v),
                Err(e) if e.is_not_found() => None,
                Err(e) => return Err(e.into()),
            };
            // `get_from_str` hands back a copy for some inputs; a span needs
            // the text itself, found at the same place.
            Pairs::locate(text, raw.as_ref().map(|v| v.as_raw_str()), what)
        };
        let name = self.name.ok_or(ObjectError::Missing("metadata.name"))?;
        Ok(Meta {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: self.namespace.filter(|n| !n.is_empty()).map(Into::into),
            name: name.into(),
            uid: self.uid.unwrap_or_default().into(),
            resource_version: self.resource_version.unwrap_or_default().into(),
            generation: self.generation,
            labels: map("labels", "metadata.labels")?,
            annotations: map("annotations", "metadata.annotations")?,
            owner_references: self.owner_references.unwrap_or_default(),
            creation_timestamp: self.creation_timestamp.map(Into::into),
            deletion_timestamp: self.deletion_timestamp.map(Into::into),
        })
    }
}

/// Appends `"key":raw` to a comma-separated member list. `key` is written
/// as a JSON string (escaped); `raw` is JSON text already.
pub(super) fn push_member(out: &mut String, key: &str, raw: &str) -> Result<(), ObjectError> {
    if !out.is_empty() && !out.ends_with('{') {
        out.push(',');
    }
    // Keys are plain in practice: written as they are, escaped otherwise.
    if key.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(key);
        out.push('"');
    } else {
        out.push_str(&serde_json::to_string(key)?);
    }
    out.push(':');
    out.push_str(raw);
    Ok(())
}

/// The annotations' text without the last-applied annotation, or `None`
/// when nothing is left (an empty annotations object goes too, as
/// `from_value` drops it).
pub(super) fn without_last_applied(raw: &str) -> Result<Option<Cow<'_, str>>, ObjectError> {
    let empty = raw
        .get(1..)
        .is_some_and(|r| r.trim_start().starts_with('}'));
    if !raw.contains(LAST_APPLIED) && !empty {
        return Ok(Some(Cow::Borrowed(raw)));
    }
    let mut ann = String::with_capacity(raw.len());
    for a in sonic_rs::to_object_iter(raw) {
        let (k, v) = a?;
        if k != LAST_APPLIED {
            push_member(&mut ann, &k, v.as_raw_str())?;
        }
    }
    Ok((!ann.is_empty()).then(|| Cow::Owned(format!("{{{ann}}}"))))
}
