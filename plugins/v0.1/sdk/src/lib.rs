#![doc = include_str!("../README.md")]

pub mod actions;
pub mod cache;
pub mod clock;
mod error;
mod kinds;
pub mod log;
mod meta;
mod object;
mod registration;
pub mod selector;

/// The raw bindings generated from `wit/v0.1.0/plugin.wit`
/// (`kubewasm:plugin@0.1.0`, world `plugin`). Everything a plugin usually
/// needs is re-exported at the crate root with helpers around it; reach in
/// here only for what the helpers do not cover.
#[allow(missing_docs, unsafe_code, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../../wit/v0.1.0",
        world: "plugin",
        pub_export_macro: true,
        export_macro_name: "__export_guest",
        default_bindings_module: "kubewasm_sdk::bindings",
        additional_derives: [PartialEq],
        additional_derives_ignore: ["delta"],
    });
}

pub use bindings::exports::kubewasm::plugin::handler::{
    HandlerError, Index, Registration, Subscription,
};
pub use bindings::kubewasm::plugin::actions::{
    ActionError, EventType, ObjectRef, PatchType, Propagation,
};
pub use bindings::kubewasm::plugin::cache::CacheError;
pub use bindings::kubewasm::plugin::types::{
    Delta, DeltaType, FieldValue, GroupVersionKind, KindRef, Object, ObjectMeta, OwnerReference,
};
pub use error::{ResultExt, permanent, retry};
pub use k8s_openapi;
pub use kinds::kind_ref;
pub use meta::{annotation, controller_owner, label};
pub use serde_json;

/// A kubewasm plugin.
///
/// The host instantiates the component once per loaded version and calls
/// [`Plugin::new`] with the plugin's configuration, then
/// [`Plugin::registration`], then [`Plugin::handle`] once per delta, one at
/// a time. The value built by `new` lives as long as that instance, so it is
/// where parsed configuration (and any state) belongs.
///
/// Export the implementation with [`export_plugin!`].
pub trait Plugin: Sized + 'static {
    /// Builds the plugin from the `config` section of its sidecar file, as
    /// JSON (`{}` when absent; see [`parse_config`]). An error refuses this
    /// version and the host keeps the previous one serving.
    fn new(config: &str) -> Result<Self, String>;

    /// What the plugin subscribes to, may write and indexes. Called once,
    /// right after [`Plugin::new`].
    fn registration(&self) -> Registration;

    /// Handles one delta. Actions emitted through [`actions`] run after this
    /// returns `Ok`, in order, and are dropped when it returns an error:
    /// [`HandlerError::Retry`] for transient conditions (retried with
    /// backoff), [`HandlerError::Permanent`] for input that will never work.
    fn handle(&mut self, delta: Delta) -> Result<(), HandlerError>;
}

/// Decodes a plugin's configuration JSON into `T`. An empty string or
/// `null` counts as `{}`, so a `T` whose fields all have defaults accepts a
/// missing config.
pub fn parse_config<T: serde::de::DeserializeOwned>(config: &str) -> Result<T, String> {
    let value = if config.trim().is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_str(config).map_err(|e| format!("invalid config: {e}"))?
    };
    let value = match value {
        serde_json::Value::Null => serde_json::Value::Object(serde_json::Map::new()),
        v => v,
    };
    serde_json::from_value(value).map_err(|e| format!("invalid config: {e}"))
}

/// Exports a [`Plugin`] implementation as the component's `handler`.
///
/// ```ignore
/// kubewasm_sdk::export_plugin!(MyPlugin);
/// ```
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        #[allow(unsafe_code)]
        const _: () = {
            ::std::thread_local! {
                static KUBEWASM_PLUGIN: ::core::cell::RefCell<::core::option::Option<$plugin>> =
                    const { ::core::cell::RefCell::new(::core::option::Option::None) };
            }
            struct KubewasmGuest;
            impl $crate::__private::Guest for KubewasmGuest {
                fn register(
                    config: ::std::string::String,
                ) -> ::core::result::Result<$crate::Registration, ::std::string::String> {
                    $crate::__private::register(&KUBEWASM_PLUGIN, &config)
                }
                fn handle(
                    delta: $crate::Delta,
                ) -> ::core::result::Result<(), $crate::HandlerError> {
                    $crate::__private::handle(&KUBEWASM_PLUGIN, delta)
                }
            }
    $crate::bindings::__export_guest!(KubewasmGuest with_types_in $crate::bindings);
        };
    };
}

/// Support for [`export_plugin!`]; not a public API.
#[doc(hidden)]
pub mod __private {
    use std::cell::RefCell;
    use std::thread::LocalKey;

    pub use crate::bindings::exports::kubewasm::plugin::handler::Guest;
    use crate::{Delta, HandlerError, Plugin, Registration};

    /// The instance's plugin value, set by `register`.
    pub type Slot<P> = LocalKey<RefCell<Option<P>>>;

    pub fn register<P: Plugin>(
        slot: &'static Slot<P>,
        config: &str,
    ) -> Result<Registration, String> {
        let plugin = P::new(config)?;
        let registration = plugin.registration();
        slot.with(|s| *s.borrow_mut() = Some(plugin));
        Ok(registration)
    }

    pub fn handle<P: Plugin>(slot: &'static Slot<P>, delta: Delta) -> Result<(), HandlerError> {
        slot.with(|s| match s.borrow_mut().as_mut() {
            Some(plugin) => plugin.handle(delta),
            None => Err(HandlerError::Permanent(
                "handle called before register".to_owned(),
            )),
        })
    }
}

/// Everything a plugin usually needs: `use kubewasm_sdk::prelude::*;`.
pub mod prelude {
    pub use crate::selector::Selector;
    pub use crate::{
        Delta, DeltaType, EventType, FieldValue, GroupVersionKind, HandlerError, Index, KindRef,
        Object, ObjectMeta, ObjectRef, OwnerReference, PatchType, Plugin, Propagation,
        Registration, ResultExt, Subscription, actions, annotation, cache, clock, controller_owner,
        kind_ref, label, log, parse_config, permanent, retry,
    };
    pub use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
    pub use k8s_openapi::api::core::v1::{
        ConfigMap, Namespace, Node, Pod, ResourceQuota, Secret, Service,
    };
    pub use k8s_openapi::api::networking::v1::NetworkPolicy;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[derive(serde::Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Cfg {
        #[serde(default)]
        n: u32,
    }

    #[test]
    fn config_defaults_for_empty_and_null() {
        for empty in ["", "  ", "null", "{}"] {
            assert_eq!(
                parse_config::<Cfg>(empty).unwrap(),
                Cfg { n: 0 },
                "{empty:?}"
            );
        }
        assert_eq!(parse_config::<Cfg>(r#"{"n": 3}"#).unwrap(), Cfg { n: 3 });
        let err = parse_config::<Cfg>(r#"{"m": 3}"#).unwrap_err();
        assert!(err.starts_with("invalid config:"), "{err}");
        assert!(parse_config::<Cfg>("{").is_err());
    }

    struct Counter(u32);
    impl Plugin for Counter {
        fn new(config: &str) -> Result<Self, String> {
            let cfg: Cfg = parse_config(config)?;
            Ok(Self(cfg.n))
        }
        fn registration(&self) -> Registration {
            Registration::new().writes::<k8s_openapi::api::core::v1::Pod>()
        }
        fn handle(&mut self, _delta: Delta) -> Result<(), HandlerError> {
            self.0 += 1;
            if self.0 > 2 {
                Err(retry("enough"))
            } else {
                Ok(())
            }
        }
    }

    thread_local! {
        static SLOT: std::cell::RefCell<Option<Counter>> = const { std::cell::RefCell::new(None) };
    }

    fn synced() -> Delta {
        Delta {
            delta_type: DeltaType::Synced,
            subscription: 0,
            kind: GroupVersionKind::of::<k8s_openapi::api::core::v1::Pod>(),
            meta: None,
            object: None,
            old_object: None,
            initial: false,
            final_state_unknown: false,
        }
    }

    #[test]
    fn register_then_handle_keeps_state() {
        assert_eq!(
            __private::handle(&SLOT, synced()),
            Err(permanent("handle called before register"))
        );
        assert!(__private::register(&SLOT, "{\"x\":1}").is_err());
        let reg = __private::register(&SLOT, "{\"n\":1}").unwrap();
        assert_eq!(
            reg.writes,
            vec![kind_ref::<k8s_openapi::api::core::v1::Pod>()]
        );
        assert_eq!(__private::handle(&SLOT, synced()), Ok(()));
        assert_eq!(__private::handle(&SLOT, synced()), Err(retry("enough")));
    }
}
