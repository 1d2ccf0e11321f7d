//! The Rust SDK for kubewasm plugins.
//!
//! ```ignore
//! use kubewasm_sdk::prelude::*;
//! struct Hello;
//! impl Plugin for Hello {
//!     fn register(_config: String) -> Result<Registration, String> {
//!         Ok(Registration { subscriptions: vec![subscribe::<Pod>(&[DeltaType::Added])], writes: vec![], indexes: vec![] })
//!     }
//!     fn handle(delta: Delta) -> Result<(), HandlerError> {
//!         if let Some(meta) = &delta.meta { log::info("pod added", &[("name", &meta.name)]); }
//!         Ok(())
//!     }
//! }
//! kubewasm_sdk::export_plugin!(Hello);
//! ```

pub mod selector;

wit_bindgen::generate!({
    path: "../../wit/v0.1.0",
    world: "plugin",
    pub_export_macro: true,
    export_macro_name: "export_plugin",
    default_bindings_module: "kubewasm_sdk",
});

pub use exports::kubewasm::plugin::handler::{
    Guest as Plugin, HandlerError, Index, Registration, Subscription,
};
pub use k8s_openapi;
pub use kubewasm::plugin::actions::{
    self, ActionError, EventType, ObjectRef, PatchType, Propagation,
};
pub use kubewasm::plugin::cache::{self, CacheError};
pub use kubewasm::plugin::clock;
pub use kubewasm::plugin::types::{
    Delta, DeltaType, FieldValue, GroupVersionKind, KindRef, Object, ObjectMeta, OwnerReference,
};

/// Everything a plugin usually needs.
pub mod prelude {
    pub use super::log;
    pub use super::{
        ActionError, CacheError, Delta, DeltaType, EventType, FieldValue, HandlerError, Index,
        KindRef, Object, ObjectMeta, ObjectRef, OwnerReference, PatchType, Plugin, Propagation,
        Registration, Subscription, actions, annotation, apply, cache, controller_of, field_i64,
        field_str, kind, label, object_ref, parse, permanent, read_only, retry, subscribe,
    };
    pub use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    pub use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, ResourceQuota};
    pub use k8s_openapi::api::networking::v1::NetworkPolicy;
}

/// The kind reference of a k8s-openapi type.
pub fn kind<K: k8s_openapi::Resource>() -> KindRef {
    KindRef::Gvk(GroupVersionKind {
        group: K::GROUP.to_owned(),
        version: K::VERSION.to_owned(),
        kind: K::KIND.to_owned(),
    })
}

/// A subscription to every object of `K` for the given delta types.
pub fn subscribe<K: k8s_openapi::Resource>(deltas: &[DeltaType]) -> Subscription {
    Subscription {
        kind: kind::<K>(),
        namespace: None,
        label_selector: None,
        field_selector: None,
        deltas: deltas.to_vec(),
        fields: Vec::new(),
        resync_seconds: None,
    }
}

/// A subscription that only makes `K` readable through the cache.
pub fn read_only<K: k8s_openapi::Resource>() -> Subscription {
    subscribe::<K>(&[])
}

pub fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

pub fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// The managing controller among the owner references.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references.iter().find(|o| o.controller)
}

/// A reference to the object `meta` describes, as kind `K`.
pub fn object_ref<K: k8s_openapi::Resource>(meta: &ObjectMeta) -> ObjectRef {
    ObjectRef {
        kind: kind::<K>(),
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
        uid: Some(meta.uid.clone()).filter(|u| !u.is_empty()),
    }
}

pub fn field_str(obj: &Object, pointer: &str) -> Option<String> {
    match obj.field(pointer) {
        Some(FieldValue::Text(s)) => Some(s),
        _ => None,
    }
}

pub fn field_i64(obj: &Object, pointer: &str) -> Option<i64> {
    match obj.field(pointer) {
        Some(FieldValue::Integer(i)) => Some(i),
        _ => None,
    }
}

/// Decodes the whole object into a typed value (costs a JSON parse).
pub fn parse<K: serde::de::DeserializeOwned>(obj: &Object) -> Result<K, HandlerError> {
    serde_json::from_str(&obj.to_json())
        .map_err(|e| permanent(format!("cannot decode object: {e}")))
}

/// Server-side applies a typed object (apiVersion and kind come from its type).
pub fn apply<K: serde::Serialize>(obj: &K, force: bool) -> Result<(), HandlerError> {
    let json =
        serde_json::to_string(obj).map_err(|e| permanent(format!("cannot encode object: {e}")))?;
    actions::apply(&json, force).map_err(action_error)
}

pub fn permanent(msg: impl Into<String>) -> HandlerError {
    HandlerError::Permanent(msg.into())
}

pub fn retry(msg: impl Into<String>) -> HandlerError {
    HandlerError::Retry(msg.into())
}

/// An action refused by the host is a bug in the plugin: not retryable.
pub fn action_error(e: ActionError) -> HandlerError {
    match e {
        ActionError::NotDeclared(m) => permanent(format!("action not declared: {m}")),
        ActionError::Invalid(m) => permanent(format!("invalid action: {m}")),
    }
}

/// Structured logging into the host's log.
pub mod log {
    use super::kubewasm::plugin::log::{Level, write};

    fn emit(level: Level, msg: &str, fields: &[(&str, &str)]) {
        let fields: Vec<(String, String)> = fields
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        write(level, msg, &fields);
    }

    pub fn debug(msg: &str, fields: &[(&str, &str)]) {
        emit(Level::Debug, msg, fields);
    }

    pub fn info(msg: &str, fields: &[(&str, &str)]) {
        emit(Level::Info, msg, fields);
    }

    pub fn warn(msg: &str, fields: &[(&str, &str)]) {
        emit(Level::Warn, msg, fields);
    }

    pub fn error(msg: &str, fields: &[(&str, &str)]) {
        emit(Level::Error, msg, fields);
    }
}
