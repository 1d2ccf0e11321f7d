#![doc = include_str!("../README.md")]

pub mod actions;
pub mod cache;
pub mod clock;
mod error;
#[cfg(not(target_arch = "wasm32"))]
pub mod fake;
mod kinds;
mod label_selector;
pub mod log;
mod meta;
mod object;
mod owners;
pub mod patch;
mod registration;

use std::time::Duration;

/// The raw bindings generated from `wit/v0.2.0/plugin.wit`
/// (`kubewasm:plugin@0.2.0`, world `plugin`). Everything a plugin usually
/// needs is re-exported at the crate root with helpers around it; reach in
/// here only for what the helpers do not cover.
#[cfg(target_arch = "wasm32")]
#[allow(missing_docs, unsafe_code, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/v0.2.0",
        world: "plugin",
        pub_export_macro: true,
        export_macro_name: "__export_guest",
        default_bindings_module: "kubewasm_sdk::bindings",
        additional_derives: [PartialEq],
        additional_derives_ignore: ["delta"],
    });
}

/// The raw bindings of `wit/v0.2.0/plugin.wit`, built natively: the
/// imported interfaces are the [`fake`] host's (same types and functions),
/// so a plugin compiles unchanged for `cargo test` and its host calls reach
/// the test's [`fake::FakeHost`]; the `handler` export is generated as on
/// wasm32 (it never runs natively).
#[cfg(not(target_arch = "wasm32"))]
#[allow(missing_docs, unsafe_code, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/v0.2.0",
        world: "plugin",
        pub_export_macro: true,
        export_macro_name: "__export_guest",
        default_bindings_module: "kubewasm_sdk::bindings",
        additional_derives: [PartialEq],
        additional_derives_ignore: ["delta"],
        with: {
            "kubewasm:plugin/types@0.2.0": crate::fake::wit::types,
            "kubewasm:plugin/selectors@0.2.0": crate::fake::wit::selectors,
            "kubewasm:plugin/cache@0.2.0": crate::fake::wit::cache,
            "kubewasm:plugin/actions@0.2.0": crate::fake::wit::actions,
            "kubewasm:plugin/log@0.2.0": crate::fake::wit::log,
            "kubewasm:plugin/clock@0.2.0": crate::fake::wit::clock,
        },
    });

    /// The imported interfaces, as on wasm32.
    pub mod kubewasm {
        /// `kubewasm:plugin@0.2.0`.
        pub mod plugin {
            pub use crate::fake::wit::{actions, cache, clock, log, selectors, types};
        }
    }
}

/// `Ok(Done)`: the delta is handled, nothing more until the object changes.
pub use bindings::exports::kubewasm::plugin::handler::Handled::Done;
pub use bindings::exports::kubewasm::plugin::handler::{
    Context, Handled, HandlerError, Index, Registration, Subscription,
};
pub use bindings::kubewasm::plugin::actions::{
    ActionError, Event as EventRecord, EventType, ObjectRef, PatchType, Preconditions, Propagation,
};
pub use bindings::kubewasm::plugin::cache::CacheError;
pub use bindings::kubewasm::plugin::selectors::LabelSelector;
pub use bindings::kubewasm::plugin::types::{
    Delta, DeltaType, Failure, FieldValue, GroupVersionKind, KindRef, Object, ObjectMeta,
    OwnerReference,
};
pub use error::{ResultExt, permanent, retry};
pub use k8s_openapi;
/// The events.k8s.io/v1 Event kind (k8s-openapi's type):
/// `kind_ref::<Event>()`, `Subscription::kind::<Event>()`,
/// `cache::list::<Event>(..)`. Plugins record Events with
/// [`actions::event`] and friends, which need no `writes` declaration.
pub use k8s_openapi::api::events::v1::Event;
pub use kinds::{EVENT, StaticKind, kind_ref};
pub use meta::{annotation, label};
pub use owners::{
    controller_owner, controller_ref, find_owner, set_controller_reference, set_owner_reference,
};
pub use patch::JsonPatch;
pub use serde_json;

/// A kubewasm plugin.
///
/// The host instantiates the component once per loaded version and calls
/// [`Plugin::new`] with the plugin's [`Context`] (name, version, config),
/// then [`Plugin::registration`], then [`Plugin::handle`] once per delta,
/// one at a time. The value built by `new` lives as long as that instance,
/// so it is where parsed configuration (and any state) belongs.
///
/// Export the implementation with [`export_plugin!`].
pub trait Plugin: Sized + 'static {
    /// Builds the plugin from its context: `ctx.name` (the field manager is
    /// `kubewasm/<name>`), `ctx.version` (12 hex digits of the component's
    /// SHA-256) and `ctx.config`, the `config` section of its sidecar as
    /// JSON (`{}` when absent; decode it with [`parse_config`] or
    /// [`Context::parse_config`]). An error refuses this version and the
    /// host keeps the previous one serving.
    fn new(ctx: &Context) -> Result<Self, String>;

    /// What the plugin subscribes to, may write and indexes. Called once,
    /// right after [`Plugin::new`].
    fn registration(&self) -> Registration;

    /// Handles one delta. Actions emitted through [`actions`] run after this
    /// returns `Ok`, in order, and are dropped when it returns an error.
    ///
    /// `Ok(`[`Done`]`)` when finished, `Ok(`[`requeue_after`]`(d))` to see
    /// the object again (as a [`DeltaType::Requeue`] delta) after `d`;
    /// [`HandlerError::Retry`] for transient conditions (retried with
    /// backoff; the next attempt's [`Delta::attempt`] and
    /// [`Delta::last_failure`] say so), [`HandlerError::Permanent`] for
    /// input that will never work.
    fn handle(&mut self, delta: Delta) -> Result<Handled, HandlerError>;
}

/// Decodes a plugin's configuration JSON into `T`. An empty string or
/// `null` counts as `{}`, so a `T` whose fields all have defaults accepts a
/// missing config. Errors read `invalid config: ...`.
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

impl Context {
    /// A context as the host would pass it (for tests and tools).
    pub fn new(
        name: impl Into<String>,
        version: impl Into<String>,
        config: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            config: config.into(),
        }
    }

    /// Decodes [`Context::config`] into `T`, as [`parse_config`] does.
    pub fn parse_config<T: serde::de::DeserializeOwned>(&self) -> Result<T, String> {
        parse_config(&self.config)
    }

    /// The field manager the host applies and patches with:
    /// `kubewasm/<name>`.
    pub fn field_manager(&self) -> String {
        format!("kubewasm/{}", self.name)
    }
}

/// `Handled::RequeueAfter` in whole milliseconds (rounded down, saturating
/// at `u64::MAX`): deliver this object again as a [`DeltaType::Requeue`]
/// delta after `after`, unless a newer delta of it comes first.
/// `return Ok(requeue_after(Duration::from_secs(30)))`.
pub fn requeue_after(after: Duration) -> Handled {
    Handled::RequeueAfter(u64::try_from(after.as_millis()).unwrap_or(u64::MAX))
}

impl Handled {
    /// The requeue delay, if this asks for one.
    pub fn requeue_delay(&self) -> Option<Duration> {
        match self {
            Self::Done => None,
            Self::RequeueAfter(ms) => Some(Duration::from_millis(*ms)),
        }
    }
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
                    context: $crate::Context,
                ) -> ::core::result::Result<$crate::Registration, ::std::string::String> {
                    $crate::__private::register(&KUBEWASM_PLUGIN, &context)
                }
                fn handle(
                    delta: $crate::Delta,
                ) -> ::core::result::Result<$crate::Handled, $crate::HandlerError> {
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
    use crate::{Context, Delta, Handled, HandlerError, Plugin, Registration};

    /// The instance's plugin value, set by `register`.
    pub type Slot<P> = LocalKey<RefCell<Option<P>>>;

    pub fn register<P: Plugin>(
        slot: &'static Slot<P>,
        context: &Context,
    ) -> Result<Registration, String> {
        let plugin = P::new(context)?;
        let registration = plugin.registration();
        slot.with(|s| *s.borrow_mut() = Some(plugin));
        Ok(registration)
    }

    pub fn handle<P: Plugin>(
        slot: &'static Slot<P>,
        delta: Delta,
    ) -> Result<Handled, HandlerError> {
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
    pub use crate::{
        Context, Delta, DeltaType, Done, Event, EventRecord, EventType, Failure, FieldValue,
        GroupVersionKind, Handled, HandlerError, Index, JsonPatch, KindRef, LabelSelector, Object,
        ObjectMeta, ObjectRef, OwnerReference, PatchType, Plugin, Preconditions, Propagation,
        Registration, ResultExt, Subscription, actions, annotation, cache, clock, controller_owner,
        controller_ref, find_owner, kind_ref, label, log, parse_config, permanent, requeue_after,
        retry, set_controller_reference,
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
        let ctx = Context::new("p", "0123456789ab", r#"{"n": 4}"#);
        assert_eq!(ctx.parse_config::<Cfg>().unwrap(), Cfg { n: 4 });
        assert_eq!(ctx.field_manager(), "kubewasm/p");
    }

    #[test]
    fn requeue_durations() {
        assert_eq!(
            requeue_after(Duration::from_millis(1500)),
            Handled::RequeueAfter(1500)
        );
        assert_eq!(
            requeue_after(Duration::from_micros(1999)),
            Handled::RequeueAfter(1)
        );
        assert_eq!(
            requeue_after(Duration::MAX),
            Handled::RequeueAfter(u64::MAX)
        );
        assert_eq!(
            Handled::RequeueAfter(250).requeue_delay(),
            Some(Duration::from_millis(250))
        );
        assert_eq!(Done.requeue_delay(), None);
    }

    struct Counter {
        n: u32,
        name: String,
    }
    impl Plugin for Counter {
        fn new(ctx: &Context) -> Result<Self, String> {
            let cfg: Cfg = ctx.parse_config()?;
            Ok(Self {
                n: cfg.n,
                name: ctx.name.clone(),
            })
        }
        fn registration(&self) -> Registration {
            Registration::new().writes::<k8s_openapi::api::core::v1::Pod>()
        }
        fn handle(&mut self, _delta: Delta) -> Result<Handled, HandlerError> {
            self.n += 1;
            match self.n {
                2 => Ok(Done),
                3 => Ok(requeue_after(Duration::from_secs(1))),
                _ => Err(retry(format!("{} had enough", self.name))),
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
            namespace: None,
            name: String::new(),
            uid: String::new(),
            resource_version: String::new(),
            object: None,
            old_object: None,
            initial: false,
            final_state_unknown: false,
            attempt: 1,
            last_failure: None,
        }
    }

    #[test]
    fn register_then_handle_keeps_state() {
        assert_eq!(
            __private::handle(&SLOT, synced()),
            Err(permanent("handle called before register"))
        );
        assert!(__private::register(&SLOT, &Context::new("c", "v", "{\"x\":1}")).is_err());
        let reg = __private::register(&SLOT, &Context::new("c", "v", "{\"n\":1}")).unwrap();
        assert_eq!(
            reg.writes,
            vec![kind_ref::<k8s_openapi::api::core::v1::Pod>()]
        );
        assert_eq!(__private::handle(&SLOT, synced()), Ok(Done));
        assert_eq!(
            __private::handle(&SLOT, synced()),
            Ok(Handled::RequeueAfter(1000))
        );
        assert_eq!(
            __private::handle(&SLOT, synced()),
            Err(retry("c had enough"))
        );
    }
}
