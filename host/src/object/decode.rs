//! Building an object from a decoded value or from JSON text.

use std::borrow::Cow;

use serde_json::Value;

use super::meta::{Meta, OwnerRef, RawMeta, push_member, without_last_applied};
use super::pairs::Pairs;
use super::parts::{Field, ObjectParts, Top, decode_str};
use super::{KObject, LAST_APPLIED, ObjectError, StripOptions};

impl KObject {
    /// Builds an object from a decoded value, dropping what `strip` says.
    pub fn from_value(mut value: Value, strip: StripOptions) -> Result<Self, ObjectError> {
        let api_version = value["apiVersion"]
            .as_str()
            .ok_or(ObjectError::Missing("apiVersion"))?
            .to_owned();
        let kind = value["kind"]
            .as_str()
            .ok_or(ObjectError::Missing("kind"))?
            .to_owned();
        let metadata = value
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .ok_or(ObjectError::Missing("metadata"))?;
        if strip.managed_fields {
            metadata.remove("managedFields");
        }
        if strip.last_applied
            && let Some(Value::Object(ann)) = metadata.get_mut("annotations")
        {
            ann.remove(LAST_APPLIED);
            if ann.is_empty() {
                metadata.remove("annotations");
            }
        }
        let raw: RawMeta = serde_json::from_value(Value::Object(metadata.clone()))?;
        let json = serde_json::to_string(&value)?.into_boxed_str();
        let meta = raw.into_meta(&api_version, &kind, &json)?;
        Ok(Self { json, meta })
    }

    /// Builds an object from the JSON text of one object as a server sent
    /// it: split into members in serde_json's one pass, then put together
    /// as [`Self::from_parts`] does.
    pub fn from_json_text(
        text: &str,
        types: Option<(&str, &str)>,
        strip: StripOptions,
    ) -> Result<Self, ObjectError> {
        let parts: ObjectParts = serde_json::from_str(text)?;
        Self::from_parts(&parts, types, strip)
    }

    /// Builds an object from its members as the watch event's or list's
    /// one deserialisation split them, without a tree and without another
    /// scan of the text: the members are copied in order, metadata's
    /// `managedFields` (and the last-applied annotation, as `strip` says)
    /// left out, and only the metadata scalars the cache keeps decoded.
    /// `types` (apiVersion, kind) fills in what list items leave out.
    pub fn from_parts(
        parts: &ObjectParts,
        types: Option<(&str, &str)>,
        strip: StripOptions,
    ) -> Result<Self, ObjectError> {
        // Present but not a string: malformed, whatever `types` says
        // (filling it in would write the member twice).
        let type_field = |which, what| -> Result<Option<String>, ObjectError> {
            match parts.top_value(which) {
                None => Ok(None),
                Some(raw) => match decode_str(raw) {
                    Ok(Some(v)) => Ok(Some(v)),
                    _ => Err(ObjectError::Missing(what)),
                },
            }
        };
        let mut api_version = type_field(Top::ApiVersion, "apiVersion")?;
        let mut kind = type_field(Top::Kind, "kind")?;
        if !parts.has_metadata() {
            return Err(ObjectError::Missing("metadata"));
        }
        let mut json = String::with_capacity(parts.text_len() + 64);
        json.push('{');
        // List items carry no apiVersion and kind: the list's type is theirs.
        if let Some((v, k)) = types {
            if api_version.is_none() {
                push_member(&mut json, "apiVersion", &serde_json::to_string(v)?)?;
                api_version = Some(v.to_owned());
            }
            if kind.is_none() {
                push_member(&mut json, "kind", &serde_json::to_string(k)?)?;
                kind = Some(k.to_owned());
            }
        }
        let mut labels = None;
        let mut annotations = None;
        for (key, value, tag) in parts.top() {
            if json.len() > 1 {
                json.push(',');
            }
            json.push_str(key);
            json.push(':');
            if tag != Some(Top::Metadata) {
                json.push_str(value);
                continue;
            }
            json.push('{');
            let mut first = true;
            for (key, value, field) in parts.meta() {
                let value = match field {
                    Some(Field::ManagedFields) if strip.managed_fields => continue,
                    Some(Field::Annotations) if strip.last_applied => {
                        match without_last_applied(value)? {
                            Some(kept) => kept,
                            None => continue,
                        }
                    }
                    _ => Cow::Borrowed(value),
                };
                if !first {
                    json.push(',');
                }
                first = false;
                json.push_str(key);
                json.push(':');
                let at = json.len()..json.len() + value.len();
                json.push_str(&value);
                match field {
                    Some(Field::Labels) => labels = Some(at),
                    Some(Field::Annotations) => annotations = Some(at),
                    _ => {}
                }
            }
            json.push('}');
        }
        json.push('}');
        let api_version = api_version.ok_or(ObjectError::Missing("apiVersion"))?;
        let kind = kind.ok_or(ObjectError::Missing("kind"))?;
        let json = json.into_boxed_str();
        let span = |at: Option<std::ops::Range<usize>>| at.and_then(|r| json.get(r));
        let text =
            |f| -> Result<Option<Box<str>>, ObjectError> { Ok(parts.meta_str(f)?.map(Into::into)) };
        let name = text(Field::Name)?.ok_or(ObjectError::Missing("metadata.name"))?;
        let decode = |f| parts.meta_value(f).unwrap_or("null");
        let meta = Meta {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: text(Field::Namespace)?.filter(|n| !n.is_empty()),
            name,
            uid: text(Field::Uid)?.unwrap_or_default(),
            resource_version: text(Field::ResourceVersion)?.unwrap_or_default(),
            generation: serde_json::from_str(decode(Field::Generation))?,
            labels: Pairs::locate(&json, span(labels), "metadata.labels")?,
            annotations: Pairs::locate(&json, span(annotations), "metadata.annotations")?,
            owner_references: serde_json::from_str::<Option<Vec<OwnerRef>>>(decode(
                Field::OwnerReferences,
            ))?
            .unwrap_or_default(),
            creation_timestamp: text(Field::CreationTimestamp)?,
            deletion_timestamp: text(Field::DeletionTimestamp)?,
        };
        Ok(Self { json, meta })
    }

    pub fn from_json(text: &str, strip: StripOptions) -> Result<Self, ObjectError> {
        Self::from_value(serde_json::from_str(text)?, strip)
    }
}
