//! Typed writes. Each call is validated by the host at once (the kind must
//! be declared in the registration's `writes`, the JSON well formed) and
//! buffered; the host executes the buffer in order after `handle` returns
//! `Ok`. A refused action is a bug in the plugin, so every error here is
//! [`HandlerError::Permanent`].

use k8s_openapi::Resource;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::bindings::kubewasm::plugin::actions as raw;
use crate::{ActionError, EventType, HandlerError, ObjectRef, PatchType, Propagation, permanent};

fn refused(e: ActionError) -> HandlerError {
    match e {
        ActionError::NotDeclared(m) => permanent(format!(
            "action refused, not declared in writes or not granted: {m}"
        )),
        ActionError::Invalid(m) => permanent(format!("action refused as invalid: {m}")),
    }
}

/// The JSON [`apply`] sends for `object`: its serde form with `apiVersion`
/// and `kind` set from `K`.
pub fn to_apply_json<K: Resource + Serialize>(object: &K) -> Result<String, HandlerError> {
    let mut value = serde_json::to_value(object)
        .map_err(|e| permanent(format!("cannot encode {}: {e}", K::KIND)))?;
    let Value::Object(map) = &mut value else {
        return Err(permanent(format!(
            "{} does not encode as a JSON object",
            K::KIND
        )));
    };
    map.insert("apiVersion".to_owned(), Value::from(K::API_VERSION));
    map.insert("kind".to_owned(), Value::from(K::KIND));
    Ok(value.to_string())
}

/// Server-side applies a typed object (a k8s-openapi value);
/// `force` takes over conflicting fields.
pub fn apply<K: Resource + Serialize>(object: &K, force: bool) -> Result<(), HandlerError> {
    raw::apply(&to_apply_json(object)?, force).map_err(refused)
}

/// Server-side applies a JSON object (it must carry `apiVersion`, `kind`,
/// `metadata.name` and, if namespaced, `metadata.namespace`).
pub fn apply_json(object: &Value, force: bool) -> Result<(), HandlerError> {
    raw::apply(&object.to_string(), force).map_err(refused)
}

/// Server-side applies a typed object to the status subresource.
pub fn apply_status<K: Resource + Serialize>(object: &K) -> Result<(), HandlerError> {
    raw::apply_status(&to_apply_json(object)?).map_err(refused)
}

/// A patch given as JSON text.
pub fn patch(target: &ObjectRef, patch_type: PatchType, patch: &str) -> Result<(), HandlerError> {
    raw::patch(target, patch_type, patch).map_err(refused)
}

/// An RFC 7386 JSON merge patch.
pub fn patch_merge(target: &ObjectRef, patch: &Value) -> Result<(), HandlerError> {
    raw::patch(target, PatchType::Merge, &patch.to_string()).map_err(refused)
}

/// An RFC 6902 JSON patch (`patch` is the array of operations).
pub fn patch_json(target: &ObjectRef, patch: &Value) -> Result<(), HandlerError> {
    raw::patch(target, PatchType::Json, &patch.to_string()).map_err(refused)
}

/// The merge patch setting these annotations:
/// `{"metadata":{"annotations":{k: v, ...}}}` (keys sorted).
pub fn annotations_patch(annotations: &[(&str, &str)]) -> Value {
    let map: Map<String, Value> = annotations
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Value::from(*v)))
        .collect();
    let mut meta = Map::new();
    meta.insert("annotations".to_owned(), Value::Object(map));
    let mut root = Map::new();
    root.insert("metadata".to_owned(), Value::Object(meta));
    Value::Object(root)
}

/// Sets annotations on `target` with one merge patch
/// ([`annotations_patch`]).
pub fn annotate(target: &ObjectRef, annotations: &[(&str, &str)]) -> Result<(), HandlerError> {
    patch_merge(target, &annotations_patch(annotations))
}

/// Deletes an object; one already gone is not an error.
pub fn delete(target: &ObjectRef, propagation: Propagation) -> Result<(), HandlerError> {
    raw::delete(target, propagation).map_err(refused)
}

/// Records an events.k8s.io/v1 Event about `regarding` (reported by
/// controller `kubewasm`, action the plugin's name).
pub fn event(
    regarding: &ObjectRef,
    event_type: EventType,
    reason: &str,
    note: &str,
) -> Result<(), HandlerError> {
    raw::record_event(regarding, event_type, reason, note).map_err(refused)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    #[test]
    fn apply_json_has_api_version_and_kind() {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some("c".into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([("k".to_owned(), "v".to_owned())])),
            ..ConfigMap::default()
        };
        assert_eq!(
            to_apply_json(&cm).ok().as_deref(),
            Some(
                r#"{"apiVersion":"v1","data":{"k":"v"},"kind":"ConfigMap","metadata":{"name":"c","namespace":"ns"}}"#
            )
        );
    }

    #[test]
    fn annotation_patch_is_sorted() {
        assert_eq!(
            annotations_patch(&[("b", "2"), ("a", "1")]).to_string(),
            r#"{"metadata":{"annotations":{"a":"1","b":"2"}}}"#
        );
    }

    #[test]
    fn refusals_are_permanent() {
        let e = refused(ActionError::NotDeclared("pods".into()));
        assert_eq!(
            e,
            permanent("action refused, not declared in writes or not granted: pods")
        );
    }
}
