//! The WIT imports of `kubewasm:plugin@0.2.0` for native builds, answered
//! by the thread's [`FakeHost`](super::FakeHost).
//!
//! On `wasm32` the bindings wit-bindgen generates call the host; built
//! natively they could only panic. So a native build maps each imported
//! interface (`with` in `wit_bindgen::generate!`) to these modules, which
//! declare the same types and functions with the same signatures and
//! answer from the fake: a plugin, the SDK's helpers and `bindings::*` all
//! compile unchanged, and a unit test drives the handler with `cargo test`.
//! The `handler` export is still generated (it never runs natively).

#![allow(clippy::must_use_candidate)]

use super::state;

/// `kubewasm:plugin/types`: kinds, metadata, field values, objects and
/// deltas.
pub mod types {
    use super::state;

    /// A fully qualified kind. The core group is the empty string.
    #[derive(Clone, PartialEq, Debug)]
    pub struct GroupVersionKind {
        /// `""` for the core group.
        pub group: String,
        /// `v1`.
        pub version: String,
        /// `ConfigMap`.
        pub kind: String,
    }

    /// A kind by group/version/kind or by kubectl resource name.
    #[derive(Clone, PartialEq, Debug)]
    pub enum KindRef {
        /// By group/version/kind.
        Gvk(GroupVersionKind),
        /// By resource name (`pods`, `deployments.apps`).
        ResourceName(String),
    }

    /// One entry of `metadata.ownerReferences`.
    #[derive(Clone, PartialEq, Debug)]
    pub struct OwnerReference {
        /// The owner's apiVersion.
        pub api_version: String,
        /// The owner's kind.
        pub kind: String,
        /// The owner's name.
        pub name: String,
        /// The owner's uid.
        pub uid: String,
        /// Whether this owner is the managing controller.
        pub controller: bool,
        /// Whether the owner cannot be deleted before this object is.
        pub block_owner_deletion: bool,
    }

    /// The whole metadata record.
    #[derive(Clone, PartialEq, Debug)]
    pub struct ObjectMeta {
        /// `apiVersion`.
        pub api_version: String,
        /// `kind`.
        pub kind: String,
        /// `None` for cluster-scoped objects.
        pub namespace: Option<String>,
        /// `metadata.name`.
        pub name: String,
        /// `metadata.uid`.
        pub uid: String,
        /// `metadata.resourceVersion`.
        pub resource_version: String,
        /// `metadata.generation`.
        pub generation: Option<i64>,
        /// Labels, sorted by key.
        pub labels: Vec<(String, String)>,
        /// Annotations, sorted by key.
        pub annotations: Vec<(String, String)>,
        /// `metadata.ownerReferences`.
        pub owner_references: Vec<OwnerReference>,
        /// `metadata.finalizers`.
        pub finalizers: Vec<String>,
        /// RFC 3339.
        pub creation_timestamp: Option<String>,
        /// RFC 3339; set while the object is being finalized.
        pub deletion_timestamp: Option<String>,
    }

    /// The value found at a JSON pointer.
    #[derive(Clone, PartialEq, Debug)]
    pub enum FieldValue {
        /// `null`.
        Null,
        /// `true` or `false`.
        Boolean(bool),
        /// A number that fits an `i64`.
        Integer(i64),
        /// Any other number.
        Float(f64),
        /// A string.
        Text(String),
        /// An array or object, as compact JSON text.
        Json(String),
    }

    /// A handle to an object the fake host holds (a delta's object or a
    /// cached one): a snapshot, as the host's is.
    #[derive(Debug)]
    pub struct Object {
        handle: u32,
    }

    impl Object {
        pub(crate) fn new(handle: u32) -> Self {
            Self { handle }
        }

        #[doc(hidden)]
        #[allow(unsafe_code, clippy::missing_safety_doc)]
        pub unsafe fn from_handle(handle: u32) -> Self {
            Self { handle }
        }

        #[doc(hidden)]
        pub fn take_handle(&self) -> u32 {
            self.handle
        }

        #[doc(hidden)]
        pub fn handle(&self) -> u32 {
            self.handle
        }

        /// The object's group, version and kind.
        pub fn kind(&self) -> GroupVersionKind {
            state::read(self.handle, state::gvk_of)
        }
        /// `None` for cluster-scoped objects.
        pub fn namespace(&self) -> Option<String> {
            state::read(self.handle, state::namespace_of)
        }
        /// `metadata.name`.
        pub fn name(&self) -> String {
            state::read(self.handle, |o| state::meta_str(o, "name"))
        }
        /// `metadata.uid`.
        pub fn uid(&self) -> String {
            state::read(self.handle, |o| state::meta_str(o, "uid"))
        }
        /// `metadata.resourceVersion`.
        pub fn resource_version(&self) -> String {
            state::read(self.handle, |o| state::meta_str(o, "resourceVersion"))
        }
        /// `metadata.generation`.
        pub fn generation(&self) -> Option<i64> {
            state::read(self.handle, |o| {
                o.pointer("/metadata/generation")
                    .and_then(serde_json::Value::as_i64)
            })
        }
        /// One label's value.
        pub fn label(&self, key: &str) -> Option<String> {
            state::read(self.handle, |o| state::map_get(o, "labels", key))
        }
        /// Every label, sorted by key.
        pub fn labels(&self) -> Vec<(String, String)> {
            state::read(self.handle, |o| state::map_of(o, "labels"))
        }
        /// One annotation's value.
        pub fn annotation(&self, key: &str) -> Option<String> {
            state::read(self.handle, |o| state::map_get(o, "annotations", key))
        }
        /// Every annotation, sorted by key.
        pub fn annotations(&self) -> Vec<(String, String)> {
            state::read(self.handle, |o| state::map_of(o, "annotations"))
        }
        /// `metadata.ownerReferences`.
        pub fn owner_references(&self) -> Vec<OwnerReference> {
            state::read(self.handle, state::owners_of)
        }
        /// The owner reference with `controller: true`, if any.
        pub fn controller(&self) -> Option<OwnerReference> {
            state::read(self.handle, |o| {
                state::owners_of(o).into_iter().find(|r| r.controller)
            })
        }
        /// `metadata.finalizers`.
        pub fn finalizers(&self) -> Vec<String> {
            state::read(self.handle, state::finalizers_of)
        }
        /// `metadata.deletionTimestamp`.
        pub fn deletion_timestamp(&self) -> Option<String> {
            state::read(self.handle, |o| state::meta_opt(o, "deletionTimestamp"))
        }
        /// The whole metadata record.
        pub fn meta(&self) -> ObjectMeta {
            state::read(self.handle, state::meta_of)
        }
        /// The value at an RFC 6901 JSON pointer.
        pub fn field(&self, pointer: &str) -> Option<FieldValue> {
            state::read(self.handle, |o| state::field_of(o, pointer))
        }
        /// Several pointers at once, in order.
        pub fn fields(&self, pointers: &[String]) -> Vec<Option<FieldValue>> {
            state::read(self.handle, |o| {
                pointers.iter().map(|p| state::field_of(o, p)).collect()
            })
        }
        /// The whole object as compact JSON (managedFields and the
        /// last-applied annotation stripped, as the host does).
        pub fn to_json(&self) -> String {
            state::read(self.handle, state::stripped_json)
        }
    }

    impl Drop for Object {
        fn drop(&mut self) {
            state::release(self.handle);
        }
    }

    /// What happened to an object.
    #[derive(Clone, Copy, Eq, Ord, PartialEq, PartialOrd, Debug)]
    pub enum DeltaType {
        /// The object appeared.
        Added,
        /// The object changed.
        Updated,
        /// The object is gone.
        Deleted,
        /// A periodic resync replayed the cached object.
        Resync,
        /// The subscription's initial list is complete.
        Synced,
        /// The plugin asked to see this object again.
        Requeue,
    }

    impl DeltaType {
        #[doc(hidden)]
        #[allow(unsafe_code, clippy::missing_safety_doc)]
        pub unsafe fn _lift(val: u8) -> DeltaType {
            match val {
                0 => DeltaType::Added,
                1 => DeltaType::Updated,
                2 => DeltaType::Deleted,
                3 => DeltaType::Resync,
                4 => DeltaType::Synced,
                _ => DeltaType::Requeue,
            }
        }
    }

    /// Why the previous attempt at a delta failed.
    #[derive(Clone, PartialEq, Debug)]
    pub enum Failure {
        /// The handler returned `retry`.
        Retry(String),
        /// The handler trapped, ran out of time or hit a limit.
        Trapped(String),
        /// An action was refused with a conflict.
        Conflict(String),
        /// An action failed.
        ActionFailed(String),
    }

    /// One event delivered to `handle`.
    #[derive(Debug)]
    pub struct Delta {
        /// What happened.
        pub delta_type: DeltaType,
        /// Index of the subscription this delta is for.
        pub subscription: u32,
        /// The object's namespace.
        pub namespace: Option<String>,
        /// The object's name (empty for `synced`).
        pub name: String,
        /// The object's uid (empty for `synced`).
        pub uid: String,
        /// The object's resourceVersion (empty for `synced`).
        pub resource_version: String,
        /// The object; `None` only for `synced`.
        pub object: Option<Object>,
        /// The previous state, for `updated` only.
        pub old_object: Option<Object>,
        /// Part of an initial list or a new version's replay.
        pub initial: bool,
        /// A delete found by a relist.
        pub final_state_unknown: bool,
        /// 1 the first time, 2 on the first retry...
        pub attempt: u32,
        /// Why the previous attempt failed.
        pub last_failure: Option<Failure>,
    }
}

/// `kubewasm:plugin/selectors`: label selectors with the API server's
/// grammar (the host's parser, copied).
pub mod selectors {
    use crate::fake::selector::Selector;

    /// `types.object`.
    pub type Object = super::types::Object;

    /// A parsed label selector.
    #[derive(Debug)]
    pub struct LabelSelector {
        selector: Selector,
    }

    impl LabelSelector {
        /// Parses `text`; the error names the offending part.
        pub fn parse(text: &str) -> Result<LabelSelector, String> {
            Selector::parse(text).map(|selector| LabelSelector { selector })
        }
        /// Whether a label set matches.
        pub fn matches(&self, labels: &[(String, String)]) -> bool {
            self.selector
                .matches_labels(|k| labels.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str()))
        }
        /// Whether an object's labels match.
        pub fn matches_object(&self, obj: &Object) -> bool {
            self.matches(&obj.labels())
        }
        /// The canonical text: requirements sorted by key.
        #[allow(clippy::inherent_to_string_shadow_display)]
        pub fn to_string(&self) -> String {
            self.selector.to_string()
        }
    }
}

/// `kubewasm:plugin/cache`: reads of the fake's objects.
pub mod cache {
    use super::state;

    /// `types.kind-ref`.
    pub type KindRef = super::types::KindRef;
    /// `types.object`.
    pub type Object = super::types::Object;

    /// Why a read was refused.
    #[derive(Clone, PartialEq, Debug)]
    pub enum CacheError {
        /// The kind is not among the plugin's subscriptions.
        NotSubscribed(String),
        /// No index of that name was declared at registration.
        UnknownIndex(String),
        /// The label selector does not parse.
        InvalidSelector(String),
        /// The access list does not grant the read.
        Forbidden(String),
    }

    impl std::fmt::Display for CacheError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{self:?}")
        }
    }

    impl std::error::Error for CacheError {}

    /// One object by kind, namespace and name.
    pub fn get(
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Object>, CacheError> {
        state::cache_get(kind, namespace, name)
    }

    /// Objects of a kind, sorted by namespace then name.
    pub fn list(
        kind: &KindRef,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<Object>, CacheError> {
        state::cache_list(kind, namespace, label_selector)
    }

    /// Objects whose declared index yields `value`.
    pub fn by_index(index: &str, value: &str) -> Result<Vec<Object>, CacheError> {
        state::cache_by_index(index, value)
    }
}

/// `kubewasm:plugin/actions`: writes, recorded by the fake in order.
pub mod actions {
    use super::state;

    /// `types.kind-ref`.
    pub type KindRef = super::types::KindRef;

    /// Which object an action targets.
    #[derive(Clone, PartialEq, Debug)]
    pub struct ObjectRef {
        /// The target's kind.
        pub kind: KindRef,
        /// `None` for cluster-scoped objects.
        pub namespace: Option<String>,
        /// The target's name.
        pub name: String,
    }

    /// Conditions the server checks before writing.
    #[derive(Clone, PartialEq, Debug)]
    pub struct Preconditions {
        /// The object must have this uid.
        pub uid: Option<String>,
        /// The object must be at this resourceVersion.
        pub resource_version: Option<String>,
    }

    /// A patch's format.
    #[derive(Clone, Copy, Eq, Ord, PartialEq, PartialOrd, Debug)]
    pub enum PatchType {
        /// RFC 7386 JSON merge patch.
        Merge,
        /// RFC 6902 JSON patch.
        Json,
    }

    /// Delete propagation policy.
    #[derive(Clone, Copy, Eq, Ord, PartialEq, PartialOrd, Debug)]
    pub enum Propagation {
        /// Dependents deleted in the background.
        Background,
        /// Dependents deleted first.
        Foreground,
        /// Dependents orphaned.
        Orphan,
    }

    /// An Event's type.
    #[derive(Clone, Copy, Eq, Ord, PartialEq, PartialOrd, Debug)]
    pub enum EventType {
        /// `Normal`.
        Normal,
        /// `Warning`.
        Warning,
    }

    /// An events.k8s.io/v1 Event.
    #[derive(Clone, PartialEq, Debug)]
    pub struct Event {
        /// What it is about.
        pub regarding: ObjectRef,
        /// The regarding object's uid, when known.
        pub regarding_uid: Option<String>,
        /// Normal or Warning.
        pub event_type: EventType,
        /// UpperCamelCase, short.
        pub reason: String,
        /// Human-readable.
        pub note: String,
    }

    /// Why an action was refused before it was queued.
    #[derive(Clone, PartialEq, Debug)]
    pub enum ActionError {
        /// The kind is not among the registration's `writes`.
        NotDeclared(String),
        /// The action is malformed.
        Invalid(String),
        /// The access list does not grant the write.
        Forbidden(String),
    }

    impl std::fmt::Display for ActionError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{self:?}")
        }
    }

    impl std::error::Error for ActionError {}

    /// Server-side apply of a full object.
    pub fn apply(
        object_json: &str,
        force: bool,
        preconditions: &Preconditions,
    ) -> Result<(), ActionError> {
        state::apply(object_json, Some(force), preconditions)
    }

    /// Server-side apply to the status subresource.
    pub fn apply_status(
        object_json: &str,
        preconditions: &Preconditions,
    ) -> Result<(), ActionError> {
        state::apply(object_json, None, preconditions)
    }

    /// Patch an object.
    pub fn patch(
        target: &ObjectRef,
        patch_type: PatchType,
        patch: &str,
        preconditions: &Preconditions,
    ) -> Result<(), ActionError> {
        state::patch(target, patch_type, patch, preconditions)
    }

    /// Delete an object.
    pub fn delete(
        target: &ObjectRef,
        propagation: Propagation,
        preconditions: &Preconditions,
    ) -> Result<(), ActionError> {
        state::delete(target, propagation, preconditions)
    }

    /// Record an Event.
    pub fn record_event(event: &Event) -> Result<(), ActionError> {
        state::record_event(event)
    }
}

/// `kubewasm:plugin/log`: records kept by the fake.
pub mod log {
    use super::state;

    /// A record's level.
    #[derive(Clone, Copy, Eq, Ord, PartialEq, PartialOrd, Debug)]
    pub enum Level {
        /// `trace`.
        Trace,
        /// `debug`.
        Debug,
        /// `info`.
        Info,
        /// `warn`.
        Warn,
        /// `error`.
        Error,
    }

    /// Whether a record at `level` would be written.
    pub fn enabled(level: Level) -> bool {
        state::log_enabled(level)
    }

    /// Write a record with structured fields.
    pub fn write(level: Level, message: &str, fields: &[(String, String)]) {
        state::log_write(level, message, fields);
    }
}

/// `kubewasm:plugin/clock`: the fake's settable clock.
pub mod clock {
    use super::state;

    /// Wall-clock time since the Unix epoch.
    #[derive(Clone, Copy, PartialEq, Debug)]
    pub struct Instant {
        /// Seconds.
        pub seconds: i64,
        /// Nanoseconds within the second.
        pub nanoseconds: u32,
    }

    /// Now, as the fake's clock says.
    pub fn now() -> Instant {
        state::now()
    }

    /// Now as RFC 3339 with seconds precision.
    pub fn now_rfc3339() -> String {
        crate::fake::rfc3339(state::now().seconds)
    }
}
