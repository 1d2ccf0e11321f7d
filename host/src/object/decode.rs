//! Building an object from a decoded value or from JSON text.

use sonic_rs::JsonValueTrait;

use serde_json::Value;

use super::meta::{RawMeta, push_member, strip_metadata};
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
    /// it, in one lazy scan and without a tree: the top-level members are
    /// copied as text, metadata's `managedFields` (and the last-applied
    /// annotation, as `strip` says) dropped on the way, and only what is
    /// left of the metadata is decoded. `types` (apiVersion, kind) fills in
    /// what list items leave out.
    pub fn from_json_text(
        text: &str,
        types: Option<(&str, &str)>,
        strip: StripOptions,
    ) -> Result<Self, ObjectError> {
        // The members, comma-separated, without the braces.
        let mut body = String::with_capacity(text.len());
        let mut api_version: Option<String> = None;
        let mut kind: Option<String> = None;
        let mut meta_text: Option<String> = None;
        for entry in sonic_rs::to_object_iter(text) {
            let (key, value) = entry?;
            match &*key {
                // Present but not a string: malformed, whatever `types` says
                // (filling it in would write the member twice).
                "apiVersion" => {
                    let v = value.as_str().ok_or(ObjectError::Missing("apiVersion"))?;
                    api_version = Some(v.to_owned());
                }
                "kind" => {
                    kind = Some(
                        value
                            .as_str()
                            .ok_or(ObjectError::Missing("kind"))?
                            .to_owned(),
                    )
                }
                "metadata" => {
                    let m = strip_metadata(value.as_raw_str(), strip)?;
                    push_member(&mut body, "metadata", &m)?;
                    meta_text = Some(m);
                    continue;
                }
                _ => {}
            }
            push_member(&mut body, &key, value.as_raw_str())?;
        }
        // List items carry no apiVersion and kind: the list's type is theirs.
        let mut json = String::with_capacity(body.len() + 64);
        json.push('{');
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
        if json.len() > 1 && !body.is_empty() {
            json.push(',');
        }
        json.push_str(&body);
        json.push('}');
        let api_version = api_version.ok_or(ObjectError::Missing("apiVersion"))?;
        let kind = kind.ok_or(ObjectError::Missing("kind"))?;
        let meta_text = meta_text.ok_or(ObjectError::Missing("metadata"))?;
        let raw: RawMeta = serde_json::from_str(&meta_text)?;
        let json = json.into_boxed_str();
        let meta = raw.into_meta(&api_version, &kind, &json)?;
        Ok(Self { json, meta })
    }

    pub fn from_json(text: &str, strip: StripOptions) -> Result<Self, ObjectError> {
        Self::from_value(serde_json::from_str(text)?, strip)
    }
}
