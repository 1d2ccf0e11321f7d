//! WIT 0.1.0's imports over the host core, and its delta record: the whole
//! metadata lowered into every call, as 0.1 plugins expect.

use wasmtime::component::Resource;

use super::bindings::v0_1::kubewasm::plugin::{actions, cache, clock, log, types};
use super::host::{HostState, ObjRef, ReadError, WriteError};
use crate::actions::{EventType, PatchType, Preconditions, Propagation};
use crate::informer::DeltaType;
use crate::kind::{Gvk, KindRef};
use crate::object::{FieldValue, KObject, Meta, ObjectHandle};

pub fn delta_type(t: DeltaType) -> types::DeltaType {
    match t {
        DeltaType::Added => types::DeltaType::Added,
        DeltaType::Updated => types::DeltaType::Updated,
        DeltaType::Deleted => types::DeltaType::Deleted,
        DeltaType::Resync => types::DeltaType::Resync,
        DeltaType::Synced => types::DeltaType::Synced,
    }
}

pub fn from_delta_type(t: types::DeltaType) -> DeltaType {
    match t {
        types::DeltaType::Added => DeltaType::Added,
        types::DeltaType::Updated => DeltaType::Updated,
        types::DeltaType::Deleted => DeltaType::Deleted,
        types::DeltaType::Resync => DeltaType::Resync,
        types::DeltaType::Synced => DeltaType::Synced,
    }
}

pub fn wit_meta(o: &KObject) -> types::ObjectMeta {
    let m: &Meta = o.meta();
    let pairs = |v: &mut dyn Iterator<Item = (&str, &str)>| {
        v.map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
    };
    types::ObjectMeta {
        api_version: m.api_version.to_string(),
        kind: m.kind.to_string(),
        namespace: m.namespace.as_ref().map(|s| s.to_string()),
        name: m.name.to_string(),
        uid: m.uid.to_string(),
        resource_version: m.resource_version.to_string(),
        generation: m.generation,
        labels: pairs(&mut o.labels()),
        annotations: pairs(&mut o.annotations()),
        owner_references: m
            .owner_references
            .iter()
            .map(|o| types::OwnerReference {
                api_version: o.api_version.clone(),
                kind: o.kind.clone(),
                name: o.name.clone(),
                uid: o.uid.clone(),
                controller: o.controller.unwrap_or(false),
            })
            .collect(),
        creation_timestamp: m.creation_timestamp.as_ref().map(|s| s.to_string()),
        deletion_timestamp: m.deletion_timestamp.as_ref().map(|s| s.to_string()),
    }
}

/// 0.1 has no `forbidden`: a refused read reads as not subscribed, as it
/// always did.
fn read_error(e: ReadError) -> cache::CacheError {
    match e {
        ReadError::NotSubscribed(m) | ReadError::Forbidden(m) => {
            cache::CacheError::NotSubscribed(m)
        }
        ReadError::UnknownIndex(m) => cache::CacheError::UnknownIndex(m),
        ReadError::InvalidSelector(m) => cache::CacheError::InvalidSelector(m),
    }
}

/// 0.1 has no `forbidden`: a refused write reads as not declared.
fn write_error(e: WriteError) -> actions::ActionError {
    match e {
        WriteError::NotDeclared(m) | WriteError::Forbidden(m) => {
            actions::ActionError::NotDeclared(m)
        }
        WriteError::Invalid(m) => actions::ActionError::Invalid(m),
    }
}

/// 0.1's object-ref uid: an Event's regarding uid. 0.1 documented it as a
/// precondition too but never sent one; 0.1 plugins keep that behaviour
/// (0.2 has real preconditions).
fn obj_ref(r: actions::ObjectRef) -> ObjRef {
    ObjRef {
        kind: kind_ref(&r.kind),
        namespace: r.namespace,
        name: r.name,
        uid: r.uid,
    }
}

impl types::Host for HostState {}

impl types::HostObject for HostState {
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
        let o = self.object(&obj)?;
        Ok(pointers.iter().map(|p| o.field(p).map(wit_field)).collect())
    }

    fn to_json(&mut self, obj: Resource<ObjectHandle>) -> wasmtime::Result<String> {
        Ok(self.object(&obj)?.json().to_owned())
    }

    fn drop(&mut self, obj: Resource<ObjectHandle>) -> wasmtime::Result<()> {
        self.drop_handle(obj)
    }
}

impl actions::Host for HostState {
    fn apply(
        &mut self,
        object_json: String,
        force: bool,
    ) -> wasmtime::Result<Result<(), actions::ActionError>> {
        Ok(self
            .apply_action(&object_json, force, false, Preconditions::default())
            .map_err(write_error))
    }

    fn apply_status(
        &mut self,
        object_json: String,
    ) -> wasmtime::Result<Result<(), actions::ActionError>> {
        Ok(self
            .apply_action(&object_json, true, true, Preconditions::default())
            .map_err(write_error))
    }

    fn patch(
        &mut self,
        target: actions::ObjectRef,
        patch_type: actions::PatchType,
        patch: String,
    ) -> wasmtime::Result<Result<(), actions::ActionError>> {
        let patch_type = match patch_type {
            actions::PatchType::Merge => PatchType::Merge,
            actions::PatchType::Json => PatchType::Json,
        };
        Ok(self
            .patch_action(
                obj_ref(target),
                patch_type,
                &patch,
                Preconditions::default(),
            )
            .map_err(write_error))
    }

    fn delete(
        &mut self,
        target: actions::ObjectRef,
        propagation: actions::Propagation,
    ) -> wasmtime::Result<Result<(), actions::ActionError>> {
        let propagation = match propagation {
            actions::Propagation::Background => Propagation::Background,
            actions::Propagation::Foreground => Propagation::Foreground,
            actions::Propagation::Orphan => Propagation::Orphan,
        };
        Ok(self
            .delete_action(obj_ref(target), propagation, Preconditions::default())
            .map_err(write_error))
    }

    fn record_event(
        &mut self,
        regarding: actions::ObjectRef,
        event_type: actions::EventType,
        reason: String,
        note: String,
    ) -> wasmtime::Result<Result<(), actions::ActionError>> {
        let event_type = match event_type {
            actions::EventType::Normal => EventType::Normal,
            actions::EventType::Warning => EventType::Warning,
        };
        Ok(self
            .event_action(obj_ref(regarding), event_type, reason, note)
            .map_err(write_error))
    }
}

super::common::same_in_every_version!();
