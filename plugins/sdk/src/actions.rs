//! Typed writes. Each call is validated by the host at once (the kind must
//! be declared in the registration's `writes` and granted by the sidecar,
//! the JSON well formed) and buffered; the host executes the buffer in
//! order after `handle` returns `Ok`. A refused action is a bug in the
//! plugin or its sidecar, so every error here is
//! [`HandlerError::Permanent`].
//!
//! Every write takes [`Preconditions`] that the server checks (uid,
//! resourceVersion; [`Preconditions::none()`] for none): one that does not
//! hold fails the write as a conflict, which the next attempt's delta
//! reports as [`Failure::Conflict`](crate::Failure::Conflict). The
//! `*_object` variants target an [`Object`] you read and guard the write
//! with its uid.

use k8s_openapi::Resource;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::bindings::kubewasm::plugin::actions as raw;
use crate::{
    ActionError, Delta, EventRecord, EventType, HandlerError, JsonPatch, Object, ObjectRef,
    PatchType, Preconditions, Propagation, permanent,
};

fn refused(e: ActionError) -> HandlerError {
    match e {
        ActionError::NotDeclared(m) => {
            permanent(format!("action refused, not declared in writes: {m}"))
        }
        ActionError::Invalid(m) => permanent(format!("action refused as invalid: {m}")),
        ActionError::Forbidden(m) => permanent(format!("action refused, not granted: {m}")),
    }
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

impl Default for Preconditions {
    fn default() -> Self {
        Self::none()
    }
}

impl Preconditions {
    /// No precondition: the write happens whatever the object's state.
    pub const fn none() -> Self {
        Self {
            uid: None,
            resource_version: None,
        }
    }

    /// The object must have this uid (it was not deleted and recreated
    /// under the same name). An empty uid sets no precondition.
    pub fn uid(uid: impl Into<String>) -> Self {
        Self::none().with_uid(uid)
    }

    /// The object must be at this resourceVersion (nobody wrote it since it
    /// was read). An empty one sets no precondition.
    pub fn resource_version(resource_version: impl Into<String>) -> Self {
        Self::none().with_resource_version(resource_version)
    }

    /// Adds (or replaces) the uid precondition; empty clears it.
    pub fn with_uid(mut self, uid: impl Into<String>) -> Self {
        self.uid = non_empty(uid.into());
        self
    }

    /// Adds (or replaces) the resourceVersion precondition; empty clears it.
    pub fn with_resource_version(mut self, resource_version: impl Into<String>) -> Self {
        self.resource_version = non_empty(resource_version.into());
        self
    }

    /// The object's uid and resourceVersion, as read (two host calls): the
    /// write happens only if nobody changed the object since.
    pub fn of(object: &Object) -> Self {
        Self::uid(object.uid()).with_resource_version(object.resource_version())
    }

    /// The delta object's uid and resourceVersion (from the delta's
    /// scalars, no host call).
    pub fn of_delta(delta: &Delta) -> Self {
        Self::uid(delta.uid.clone()).with_resource_version(delta.resource_version.clone())
    }

    /// Keeps the uid precondition only.
    pub fn uid_only(mut self) -> Self {
        self.resource_version = None;
        self
    }

    /// Whether no precondition is set.
    pub fn is_none(&self) -> bool {
        self.uid.is_none() && self.resource_version.is_none()
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

/// Server-side applies a typed object (a k8s-openapi value) as field
/// manager `kubewasm/<plugin>`; `force` takes over conflicting fields.
pub fn apply<K: Resource + Serialize>(
    object: &K,
    force: bool,
    preconditions: &Preconditions,
) -> Result<(), HandlerError> {
    raw::apply(&to_apply_json(object)?, force, preconditions).map_err(refused)
}

/// Server-side applies a JSON object (it must carry `apiVersion`, `kind`,
/// `metadata.name` and, if namespaced, `metadata.namespace`).
pub fn apply_json(
    object: &Value,
    force: bool,
    preconditions: &Preconditions,
) -> Result<(), HandlerError> {
    raw::apply(&object.to_string(), force, preconditions).map_err(refused)
}

/// Server-side applies a typed object to the status subresource.
pub fn apply_status<K: Resource + Serialize>(
    object: &K,
    preconditions: &Preconditions,
) -> Result<(), HandlerError> {
    raw::apply_status(&to_apply_json(object)?, preconditions).map_err(refused)
}

/// Server-side applies a JSON object to the status subresource.
pub fn apply_status_json(
    object: &Value,
    preconditions: &Preconditions,
) -> Result<(), HandlerError> {
    raw::apply_status(&object.to_string(), preconditions).map_err(refused)
}

/// A patch given as JSON text.
pub fn patch(
    target: &ObjectRef,
    patch_type: PatchType,
    patch: &str,
    preconditions: &Preconditions,
) -> Result<(), HandlerError> {
    raw::patch(target, patch_type, patch, preconditions).map_err(refused)
}

/// An RFC 7386 JSON merge patch.
pub fn patch_merge(
    target: &ObjectRef,
    patch: &Value,
    preconditions: &Preconditions,
) -> Result<(), HandlerError> {
    raw::patch(target, PatchType::Merge, &patch.to_string(), preconditions).map_err(refused)
}

/// An RFC 6902 JSON patch, built with [`JsonPatch`].
pub fn patch_json(
    target: &ObjectRef,
    patch: &JsonPatch,
    preconditions: &Preconditions,
) -> Result<(), HandlerError> {
    raw::patch(target, PatchType::Json, &patch.to_string(), preconditions).map_err(refused)
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
pub fn annotate(
    target: &ObjectRef,
    annotations: &[(&str, &str)],
    preconditions: &Preconditions,
) -> Result<(), HandlerError> {
    patch_merge(target, &annotations_patch(annotations), preconditions)
}

/// [`annotate`] on `object` itself (its kind, namespace and name), guarded
/// by its uid.
pub fn annotate_object(object: &Object, annotations: &[(&str, &str)]) -> Result<(), HandlerError> {
    annotate(
        &ObjectRef::from_object(object),
        annotations,
        &Preconditions::uid(object.uid()),
    )
}

/// Deletes an object; one already gone is not an error.
pub fn delete(
    target: &ObjectRef,
    propagation: Propagation,
    preconditions: &Preconditions,
) -> Result<(), HandlerError> {
    raw::delete(target, propagation, preconditions).map_err(refused)
}

/// [`delete`] of `object` itself, guarded by its uid (a namesake created
/// since is left alone).
pub fn delete_object(object: &Object, propagation: Propagation) -> Result<(), HandlerError> {
    delete(
        &ObjectRef::from_object(object),
        propagation,
        &Preconditions::uid(object.uid()),
    )
}

impl EventRecord {
    /// An Event about `regarding`, without its uid.
    pub fn new(
        regarding: ObjectRef,
        event_type: EventType,
        reason: impl Into<String>,
        note: impl Into<String>,
    ) -> Self {
        Self {
            regarding,
            regarding_uid: None,
            event_type,
            reason: reason.into(),
            note: note.into(),
        }
    }

    /// Sets the regarding object's uid; empty clears it.
    pub fn with_regarding_uid(mut self, uid: impl Into<String>) -> Self {
        self.regarding_uid = non_empty(uid.into());
        self
    }
}

/// Records an events.k8s.io/v1 Event (reported by controller `kubewasm`,
/// action the plugin's name; repeats fold into one with a series count).
/// Events need no `writes` declaration, only the sidecar's `events` grant.
pub fn record_event(event: &EventRecord) -> Result<(), HandlerError> {
    raw::record_event(event).map_err(refused)
}

/// Records an Event about `regarding` (no regarding uid): `reason` is
/// UpperCamelCase (`ReplicaCreated`), `note` human-readable (1 KiB kept).
pub fn event(
    regarding: &ObjectRef,
    event_type: EventType,
    reason: &str,
    note: &str,
) -> Result<(), HandlerError> {
    record_event(&EventRecord::new(
        regarding.clone(),
        event_type,
        reason,
        note,
    ))
}

/// Records an Event about `object` (its kind, namespace, name and uid).
pub fn event_about(
    object: &Object,
    event_type: EventType,
    reason: &str,
    note: &str,
) -> Result<(), HandlerError> {
    record_event(
        &EventRecord::new(ObjectRef::from_object(object), event_type, reason, note)
            .with_regarding_uid(object.uid()),
    )
}

/// The JSON patch adding `finalizer` to an object whose finalizers are
/// `current`: `add /metadata/finalizers/-` (or `add /metadata/finalizers`
/// with `[finalizer]` when there are none). `None` when it is already
/// there. Send it with a resourceVersion precondition (as
/// [`add_finalizer`] does): the host makes the server check it, and a
/// concurrent write then fails the patch as a conflict, which the next
/// attempt's delta reports; a JSON patch `test` would fail as invalid (422)
/// instead.
pub fn add_finalizer_patch(current: &[String], finalizer: &str) -> Option<JsonPatch> {
    if current.iter().any(|f| f == finalizer) {
        return None;
    }
    let patch = JsonPatch::new();
    Some(if current.is_empty() {
        patch.add("/metadata/finalizers", Value::from(vec![finalizer]))
    } else {
        patch.add("/metadata/finalizers/-", finalizer)
    })
}

/// The JSON patch removing `finalizer` from an object whose finalizers are
/// `current`: one `remove /metadata/finalizers/<i>` per occurrence, highest
/// index first. `None` when it is not there. Indexes are only safe with a
/// resourceVersion precondition (as [`remove_finalizer`] sends it).
pub fn remove_finalizer_patch(current: &[String], finalizer: &str) -> Option<JsonPatch> {
    let mut at = current
        .iter()
        .enumerate()
        .filter(|(_, f)| *f == finalizer)
        .map(|(i, _)| i)
        .peekable();
    at.peek()?;
    let indexes: Vec<usize> = at.collect();
    let patch = JsonPatch::new();
    Some(
        indexes
            .into_iter()
            .rev()
            .fold(patch, |p, i| p.remove(&format!("/metadata/finalizers/{i}"))),
    )
}

fn finalizer_patch(
    object: &Object,
    build: fn(&[String], &str) -> Option<JsonPatch>,
    finalizer: &str,
) -> Result<bool, HandlerError> {
    let resource_version = object.resource_version();
    let Some(patch) = build(&object.finalizers(), finalizer) else {
        return Ok(false);
    };
    patch_json(
        &ObjectRef::from_object(object),
        &patch,
        &Preconditions::uid(object.uid()).with_resource_version(resource_version),
    )?;
    Ok(true)
}

/// Adds `finalizer` to `object` unless it is already there: one JSON patch
/// ([`add_finalizer_patch`]) with uid and resourceVersion preconditions, so a concurrent write
/// fails it as a conflict instead of losing either change. Returns whether
/// a patch was queued.
pub fn add_finalizer(object: &Object, finalizer: &str) -> Result<bool, HandlerError> {
    finalizer_patch(object, add_finalizer_patch, finalizer)
}

/// Removes `finalizer` from `object` if it is there: one JSON patch
/// ([`remove_finalizer_patch`]: `remove` by index, which the
/// resourceVersion precondition makes safe) with uid and resourceVersion
/// preconditions. Returns whether a patch was queued.
pub fn remove_finalizer(object: &Object, finalizer: &str) -> Result<bool, HandlerError> {
    finalizer_patch(object, remove_finalizer_patch, finalizer)
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
        assert_eq!(e, permanent("action refused, not declared in writes: pods"));
        let e = refused(ActionError::Forbidden("may not delete pods".into()));
        assert_eq!(
            e,
            permanent("action refused, not granted: may not delete pods")
        );
    }

    #[test]
    fn preconditions() {
        assert!(Preconditions::none().is_none());
        assert_eq!(Preconditions::default(), Preconditions::none());
        let p = Preconditions::uid("u-1").with_resource_version("7");
        assert_eq!(
            (p.uid.as_deref(), p.resource_version.as_deref()),
            (Some("u-1"), Some("7"))
        );
        assert_eq!(p.clone().uid_only(), Preconditions::uid("u-1"));
        assert!(Preconditions::uid("").is_none());
        assert_eq!(
            Preconditions::resource_version("9")
                .resource_version
                .as_deref(),
            Some("9")
        );
        assert_eq!(p.with_uid("").uid, None);
    }

    #[test]
    fn events() {
        let r = ObjectRef::of::<k8s_openapi::api::core::v1::Pod>(Some("ns"), "p");
        let e = EventRecord::new(r.clone(), EventType::Warning, "CrashLooping", "n")
            .with_regarding_uid("u");
        assert_eq!(e.regarding, r);
        assert_eq!(e.regarding_uid.as_deref(), Some("u"));
        assert_eq!((e.reason.as_str(), e.note.as_str()), ("CrashLooping", "n"));
        assert_eq!(e.with_regarding_uid("").regarding_uid, None);
    }

    #[test]
    fn finalizer_patches() {
        let none: Vec<String> = Vec::new();
        let some = vec!["a".to_owned(), "x/y".to_owned(), "a".to_owned()];
        assert_eq!(
            add_finalizer_patch(&none, "x/y").map(|p| p.to_string()),
            Some(r#"[{"op":"add","path":"/metadata/finalizers","value":["x/y"]}]"#.to_owned())
        );
        assert_eq!(add_finalizer_patch(&some, "x/y"), None);
        assert_eq!(
            add_finalizer_patch(&some, "b").map(|p| p.to_string()),
            Some(r#"[{"op":"add","path":"/metadata/finalizers/-","value":"b"}]"#.to_owned())
        );
        assert_eq!(remove_finalizer_patch(&some, "b"), None);
        assert_eq!(remove_finalizer_patch(&none, "b"), None);
        assert_eq!(
            remove_finalizer_patch(&some, "a").map(|p| p.to_string()),
            Some(
                r#"[{"op":"remove","path":"/metadata/finalizers/2"},{"op":"remove","path":"/metadata/finalizers/0"}]"#
                    .to_owned()
            )
        );
    }
}
