//! wrong-version: a noop built against `kubewasm:plugin@0.0.9` (wit/ holds
//! a copy of the v0.1.0 contract with only the version changed), so the
//! host can show its "built for another WIT version" refusal.

#[allow(missing_docs, unsafe_code, clippy::all)]
mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "plugin",
    });

    use super::Noop;
    export!(Noop);
}

use bindings::exports::kubewasm::plugin::handler::{
    Guest, HandlerError, Registration, Subscription,
};
use bindings::kubewasm::plugin::types::{Delta, DeltaType, GroupVersionKind, KindRef};

struct Noop;

impl Guest for Noop {
    fn register(_config: String) -> Result<Registration, String> {
        let pods = Subscription {
            kind: KindRef::Gvk(GroupVersionKind {
                group: String::new(),
                version: "v1".to_owned(),
                kind: "Pod".to_owned(),
            }),
            namespace: None,
            label_selector: None,
            field_selector: None,
            deltas: vec![
                DeltaType::Added,
                DeltaType::Updated,
                DeltaType::Deleted,
                DeltaType::Resync,
                DeltaType::Synced,
            ],
            fields: Vec::new(),
            resync_seconds: None,
        };
        Ok(Registration {
            subscriptions: vec![pods],
            writes: Vec::new(),
            indexes: Vec::new(),
        })
    }

    fn handle(_delta: Delta) -> Result<(), HandlerError> {
        Ok(())
    }
}
