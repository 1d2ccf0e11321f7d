//! WIT 0.2.0's imports over the host core: lazy object accessors (a
//! handler pays only for what it reads), preconditions, Events, and label
//! selectors parsed and matched by the host for every guest language.

use wasmtime::component::Resource;

use super::bindings::v0_2::kubewasm::plugin::{actions, cache, clock, log, selectors, types};
use super::host::{HostState, ObjRef, ReadError, WriteError};
use crate::actions::{EventType, PatchType, Preconditions, Propagation};
use crate::informer::DeltaType;
use crate::informer::selector::LabelSelector;
use crate::kind::{Gvk, KindRef};
use crate::object::{FieldValue, Meta, ObjectHandle, OwnerRef};

pub fn from_delta_type(t: types::DeltaType) -> Option<DeltaType> {
    Some(match t {
        types::DeltaType::Added => DeltaType::Added,
        types::DeltaType::Updated => DeltaType::Updated,
        types::DeltaType::Deleted => DeltaType::Deleted,
        types::DeltaType::Resync => DeltaType::Resync,
        types::DeltaType::Synced => DeltaType::Synced,
        // Not an informer delta: requeues come when the handler asks.
        types::DeltaType::Requeue => return None,
    })
}

fn owner(o: &OwnerRef) -> types::OwnerReference {
    types::OwnerReference {
        api_version: o.api_version.clone(),
        kind: o.kind.clone(),
        name: o.name.clone(),
        uid: o.uid.clone(),
        controller: o.controller.unwrap_or(false),
        block_owner_deletion: o.block_owner_deletion.unwrap_or(false),
    }
}

fn pairs<'a>(v: impl Iterator<Item = (&'a str, &'a str)>) -> Vec<(String, String)> {
    v.map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
}

/// `metadata.finalizers`, read from the object's JSON (rarely asked for, so
/// not kept decoded in the cache).
fn finalizers(o: &ObjectHandle) -> Vec<String> {
    match o.field("/metadata/finalizers") {
        Some(FieldValue::Json(text)) => serde_json::from_str(&text).unwrap_or_default(),
        _ => Vec::new(),
    }
}

fn wit_meta(o: &ObjectHandle) -> types::ObjectMeta {
    let m: &Meta = o.meta();
    types::ObjectMeta {
        api_version: m.api_version.to_string(),
        kind: m.kind.to_string(),
        namespace: m.namespace.as_ref().map(|s| s.to_string()),
        name: m.name.to_string(),
        uid: m.uid.to_string(),
        resource_version: m.resource_version.to_string(),
        generation: m.generation,
        labels: pairs(o.labels()),
        annotations: pairs(o.annotations()),
        owner_references: m.owner_references.iter().map(owner).collect(),
        finalizers: finalizers(o),
        creation_timestamp: m.creation_timestamp.as_ref().map(|s| s.to_string()),
        deletion_timestamp: m.deletion_timestamp.as_ref().map(|s| s.to_string()),
    }
}

fn read_error(e: ReadError) -> cache::CacheError {
    match e {
        ReadError::NotSubscribed(m) => cache::CacheError::NotSubscribed(m),
        ReadError::Forbidden(m) => cache::CacheError::Forbidden(m),
        ReadError::UnknownIndex(m) => cache::CacheError::UnknownIndex(m),
        ReadError::InvalidSelector(m) => cache::CacheError::InvalidSelector(m),
    }
}

fn write_error(e: WriteError) -> actions::ActionError {
    match e {
        WriteError::NotDeclared(m) => actions::ActionError::NotDeclared(m),
        WriteError::Forbidden(m) => actions::ActionError::Forbidden(m),
        WriteError::Invalid(m) => actions::ActionError::Invalid(m),
    }
}

fn obj_ref(r: actions::ObjectRef, uid: Option<String>) -> ObjRef {
    ObjRef {
        kind: kind_ref(&r.kind),
        namespace: r.namespace,
        name: r.name,
        uid,
    }
}

fn preconditions(p: actions::Preconditions) -> Preconditions {
    let nonempty = |s: Option<String>| s.filter(|s| !s.is_empty());
    Preconditions {
        uid: nonempty(p.uid),
        resource_version: nonempty(p.resource_version),
    }
}

impl types::Host for HostState {}

impl types::HostObject for HostState {
    fn kind(&mut self, obj: Resource<ObjectHandle>) -> wasmtime::Result<types::GroupVersionKind> {
        let g = self.object(&obj)?.gvk();
        Ok(types::GroupVersionKind {
            group: g.group,
            version: g.version,
            kind: g.kind,
        })
    }

    fn namespace(&mut self, obj: Resource<ObjectHandle>) -> wasmtime::Result<Option<String>> {
        Ok(self.object(&obj)?.namespace().map(str::to_owned))
    }

    fn name(&mut self, obj: Resource<ObjectHandle>) -> wasmtime::Result<String> {
        Ok(self.object(&obj)?.name().to_owned())
    }

    fn uid(&mut self, obj: Resource<ObjectHandle>) -> wasmtime::Result<String> {
        Ok(self.object(&obj)?.meta().uid.to_string())
    }

    fn resource_version(&mut self, obj: Resource<ObjectHandle>) -> wasmtime::Result<String> {
        Ok(self.object(&obj)?.meta().resource_version.to_string())
    }

    fn generation(&mut self, obj: Resource<ObjectHandle>) -> wasmtime::Result<Option<i64>> {
        Ok(self.object(&obj)?.meta().generation)
    }

    fn label(
        &mut self,
        obj: Resource<ObjectHandle>,
        key: String,
    ) -> wasmtime::Result<Option<String>> {
        Ok(self.object(&obj)?.label(&key).map(str::to_owned))
    }

    fn labels(&mut self, obj: Resource<ObjectHandle>) -> wasmtime::Result<Vec<(String, String)>> {
        Ok(pairs(self.object(&obj)?.labels()))
    }

    fn annotation(
        &mut self,
        obj: Resource<ObjectHandle>,
        key: String,
    ) -> wasmtime::Result<Option<String>> {
        Ok(self.object(&obj)?.annotation(&key).map(str::to_owned))
    }

    fn annotations(
        &mut self,
        obj: Resource<ObjectHandle>,
    ) -> wasmtime::Result<Vec<(String, String)>> {
        Ok(pairs(self.object(&obj)?.annotations()))
    }

    fn owner_references(
        &mut self,
        obj: Resource<ObjectHandle>,
    ) -> wasmtime::Result<Vec<types::OwnerReference>> {
        Ok(self
            .object(&obj)?
            .meta()
            .owner_references
            .iter()
            .map(owner)
            .collect())
    }

    fn controller(
        &mut self,
        obj: Resource<ObjectHandle>,
    ) -> wasmtime::Result<Option<types::OwnerReference>> {
        Ok(self
            .object(&obj)?
            .meta()
            .owner_references
            .iter()
            .find(|o| o.controller == Some(true))
            .map(owner))
    }

    fn finalizers(&mut self, obj: Resource<ObjectHandle>) -> wasmtime::Result<Vec<String>> {
        Ok(finalizers(self.object(&obj)?))
    }

    fn deletion_timestamp(
        &mut self,
        obj: Resource<ObjectHandle>,
    ) -> wasmtime::Result<Option<String>> {
        Ok(self
            .object(&obj)?
            .meta()
            .deletion_timestamp
            .as_ref()
            .map(|s| s.to_string()))
    }

    fn meta(&mut self, obj: Resource<ObjectHandle>) -> wasmtime::Result<types::ObjectMeta> {
        Ok(wit_meta(self.object(&obj)?))
    }

    fn field(
        &mut self,
        obj: Resource<ObjectHandle>,
        pointer: String,
    ) -> wasmtime::Result<Option<types::FieldValue>> {
        Ok(self.object(&obj)?.field(&pointer).map(wit_field))
    }

    fn fields(
        &mut self,
        obj: Resource<ObjectHandle>,
        pointers: Vec<String>,
    ) -> wasmtime::Result<Vec<Option<types::FieldValue>>> {
        // What does not fit the guest's memory could not be returned to it
        // anyway: trap before the host builds it.
        let budget = self.limiter.limit;
        let o = self.object(&obj)?;
        let values = o.fields_within(&pointers, budget).map_err(|bytes| {
            wasmtime::format_err!(
                "object.fields: reading {} pointers takes {bytes} bytes, more than the plugin's memory limit ({budget} bytes)",
                pointers.len()
            )
        })?;
        Ok(values.into_iter().map(|v| v.map(wit_field)).collect())
    }

    fn to_json(&mut self, obj: Resource<ObjectHandle>) -> wasmtime::Result<String> {
        Ok(self.object(&obj)?.json().to_owned())
    }

    fn drop(&mut self, obj: Resource<ObjectHandle>) -> wasmtime::Result<()> {
        self.drop_handle(obj)
    }
}

impl selectors::Host for HostState {}

impl selectors::HostLabelSelector for HostState {
    fn parse(&mut self, text: String) -> wasmtime::Result<Result<Resource<LabelSelector>, String>> {
        match LabelSelector::parse(&text) {
            Ok(s) => Ok(Ok(self.push_handle(s)?)),
            Err(e) => Ok(Err(e.to_string())),
        }
    }

    fn matches(
        &mut self,
        selector: Resource<LabelSelector>,
        labels: Vec<(String, String)>,
    ) -> wasmtime::Result<bool> {
        let s = self.handle_value(&selector)?;
        Ok(s.matches_labels(|k| {
            labels
                .iter()
                .find(|(lk, _)| lk == k)
                .map(|(_, v)| v.as_str())
        }))
    }

    fn matches_object(
        &mut self,
        selector: Resource<LabelSelector>,
        obj: Resource<ObjectHandle>,
    ) -> wasmtime::Result<bool> {
        let o = self.object(&obj)?;
        let s = self.handle_value(&selector)?;
        Ok(s.matches(o))
    }

    fn to_string(&mut self, selector: Resource<LabelSelector>) -> wasmtime::Result<String> {
        Ok(self.handle_value(&selector)?.to_string())
    }

    fn drop(&mut self, selector: Resource<LabelSelector>) -> wasmtime::Result<()> {
        self.drop_handle(selector)
    }
}

impl actions::Host for HostState {
    fn apply(
        &mut self,
        object_json: String,
        force: bool,
        pre: actions::Preconditions,
    ) -> wasmtime::Result<Result<(), actions::ActionError>> {
        Ok(self
            .apply_action(&object_json, force, false, preconditions(pre))
            .map_err(write_error))
    }

    fn apply_status(
        &mut self,
        object_json: String,
        pre: actions::Preconditions,
    ) -> wasmtime::Result<Result<(), actions::ActionError>> {
        Ok(self
            .apply_action(&object_json, true, true, preconditions(pre))
            .map_err(write_error))
    }

    fn patch(
        &mut self,
        target: actions::ObjectRef,
        patch_type: actions::PatchType,
        patch: String,
        pre: actions::Preconditions,
    ) -> wasmtime::Result<Result<(), actions::ActionError>> {
        let patch_type = match patch_type {
            actions::PatchType::Merge => PatchType::Merge,
            actions::PatchType::Json => PatchType::Json,
        };
        Ok(self
            .patch_action(
                obj_ref(target, None),
                patch_type,
                &patch,
                preconditions(pre),
            )
            .map_err(write_error))
    }

    fn delete(
        &mut self,
        target: actions::ObjectRef,
        propagation: actions::Propagation,
        pre: actions::Preconditions,
    ) -> wasmtime::Result<Result<(), actions::ActionError>> {
        let propagation = match propagation {
            actions::Propagation::Background => Propagation::Background,
            actions::Propagation::Foreground => Propagation::Foreground,
            actions::Propagation::Orphan => Propagation::Orphan,
        };
        Ok(self
            .delete_action(obj_ref(target, None), propagation, preconditions(pre))
            .map_err(write_error))
    }

    fn record_event(
        &mut self,
        event: actions::Event,
    ) -> wasmtime::Result<Result<(), actions::ActionError>> {
        let event_type = match event.event_type {
            actions::EventType::Normal => EventType::Normal,
            actions::EventType::Warning => EventType::Warning,
        };
        let regarding = obj_ref(
            event.regarding,
            event.regarding_uid.filter(|u| !u.is_empty()),
        );
        Ok(self
            .event_action(regarding, event_type, event.reason, event.note)
            .map_err(write_error))
    }
}

super::common::same_in_every_version!();
