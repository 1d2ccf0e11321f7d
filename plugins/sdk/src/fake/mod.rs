//! A fake host for unit tests of a plugin with `cargo test`, natively: no
//! WebAssembly, no kubewasm binary, no cluster.
//!
//! Built for any target but `wasm32`, the SDK sends every host call (cache
//! reads, actions, label selectors, log, clock, the methods of [`Object`])
//! to the thread's [`FakeHost`] instead of the host: the test puts objects
//! in its cache, loads the plugin, hands it deltas, then asserts the
//! actions it emitted (in order) and the lines it logged.
//!
//! ```
//! use kubewasm_sdk::fake::FakeHost;
//! use kubewasm_sdk::prelude::*;
//! use kubewasm_sdk::serde_json::json;
//!
//! struct Hello;
//! impl Plugin for Hello {
//!     fn new(_ctx: &Context) -> Result<Self, String> {
//!         Ok(Hello)
//!     }
//!     fn registration(&self) -> Registration {
//!         Registration::new()
//!             .subscribe(Subscription::kind::<ConfigMap>().deltas([DeltaType::Added]))
//!             .writes::<ConfigMap>()
//!     }
//!     fn handle(&mut self, delta: Delta) -> Result<Handled, HandlerError> {
//!         actions::annotate(
//!             &ObjectRef::for_delta::<ConfigMap>(&delta),
//!             &[("kubewasm.io/hello", "hi")],
//!             &Preconditions::uid(&delta.uid),
//!         )?;
//!         Ok(Done)
//!     }
//! }
//!
//! let host = FakeHost::new();
//! let mut plugin: Hello = host.load("hello", "{}").unwrap();
//! let delta = host.added(json!({
//!     "apiVersion": "v1", "kind": "ConfigMap",
//!     "metadata": {"name": "greeting", "namespace": "demo"},
//! }));
//! assert_eq!(host.handle(&mut plugin, delta), Ok(Done));
//! assert_eq!(
//!     host.take_action_lines(),
//!     [r#"patch ConfigMap demo/greeting merge {"metadata":{"annotations":{"kubewasm.io/hello":"hi"}}} uid=uid-demo-greeting"#]
//! );
//! ```
//!
//! What it does as the host does: objects are snapshots behind handles;
//! `cache::list` sorts by namespace then name and filters with the host's
//! label-selector parser (a copy, checked against the same apimachinery
//! golden cases); `Object::to_json` strips managedFields and the
//! last-applied annotation; field values are typed as the host types them.
//! Once a plugin is [loaded](FakeHost::load) its registration is enforced:
//! reading a kind it did not subscribe to is `CacheError::NotSubscribed`,
//! writing one it did not declare is `ActionError::NotDeclared`, and
//! `cache::by_index` answers declared indexes only. Actions must be well
//! formed (`ActionError::Invalid`), and [`FakeHost::handle`] drops the
//! actions of a call that returns an error, as the host does. What it does
//! not do: check a sidecar's access list, execute actions (the cache
//! changes only when the test changes it), retry, or keep time moving.

mod selector;
mod state;
pub(crate) mod wit;

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;
use std::time::Duration;

use serde_json::Value;

use self::state::State;
use crate::log::Level;
use crate::{
    Context, Delta, DeltaType, EventRecord, EventType, Handled, HandlerError, KindRef, ObjectRef,
    PatchType, Plugin, Preconditions, Propagation, Registration,
};

/// The fake's clock starts here: 2026-01-01T00:00:00Z.
pub const DEFAULT_NOW: i64 = 1_767_225_600;

/// One action a plugin emitted, as the host would queue it.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// `actions::apply`: server-side apply of `object`.
    Apply {
        /// The applied object.
        object: Value,
        /// Whether conflicting fields are taken over.
        force: bool,
        /// Checked by the server before the write.
        preconditions: Preconditions,
    },
    /// `actions::apply_status`.
    ApplyStatus {
        /// The applied object (its status).
        object: Value,
        /// Checked by the server before the write.
        preconditions: Preconditions,
    },
    /// `actions::patch`.
    Patch {
        /// The patched object.
        target: ObjectRef,
        /// Merge (RFC 7386) or JSON (RFC 6902).
        patch_type: PatchType,
        /// The patch, parsed.
        patch: Value,
        /// Checked by the server before the write.
        preconditions: Preconditions,
    },
    /// `actions::delete`.
    Delete {
        /// The deleted object.
        target: ObjectRef,
        /// Background, foreground or orphan.
        propagation: Propagation,
        /// Checked by the server before the write.
        preconditions: Preconditions,
    },
    /// `actions::record_event`.
    Event(EventRecord),
}

fn kind_name(kind: &KindRef) -> &str {
    match kind {
        KindRef::Gvk(g) => &g.kind,
        KindRef::ResourceName(n) => n,
    }
}

fn target_key(t: &ObjectRef) -> String {
    crate::meta::key(t.namespace.as_deref(), &t.name)
}

fn write_preconditions(f: &mut fmt::Formatter<'_>, p: &Preconditions) -> fmt::Result {
    if let Some(uid) = &p.uid {
        write!(f, " uid={uid}")?;
    }
    if let Some(rv) = &p.resource_version {
        write!(f, " rv={rv}")?;
    }
    Ok(())
}

/// One line per action, the same in every language's fake:
/// `apply ConfigMap team-a/settings force`, `apply-status Widget ns/w`,
/// `patch ConfigMap demo/greeting merge {...} uid=U`,
/// `delete ConfigMap team-a/settings background uid=U`,
/// `event ConfigMap demo/greeting Normal Reason: note uid=U`; preconditions
/// (`uid=`, `rv=`) last. An apply's object is left out: match
/// [`Action::Apply`] for it.
impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Apply {
                object,
                force,
                preconditions,
            } => {
                let key = crate::meta::key(
                    state::namespace_of(object).as_deref(),
                    &state::meta_str(object, "name"),
                );
                write!(f, "apply {} {key}", state::gvk_of(object).kind)?;
                if *force {
                    f.write_str(" force")?;
                }
                write_preconditions(f, preconditions)
            }
            Action::ApplyStatus {
                object,
                preconditions,
            } => {
                let key = crate::meta::key(
                    state::namespace_of(object).as_deref(),
                    &state::meta_str(object, "name"),
                );
                write!(f, "apply-status {} {key}", state::gvk_of(object).kind)?;
                write_preconditions(f, preconditions)
            }
            Action::Patch {
                target,
                patch_type,
                patch,
                preconditions,
            } => {
                let t = match patch_type {
                    PatchType::Merge => "merge",
                    PatchType::Json => "json",
                };
                write!(
                    f,
                    "patch {} {} {t} {patch}",
                    kind_name(&target.kind),
                    target_key(target)
                )?;
                write_preconditions(f, preconditions)
            }
            Action::Delete {
                target,
                propagation,
                preconditions,
            } => {
                let p = match propagation {
                    Propagation::Background => "background",
                    Propagation::Foreground => "foreground",
                    Propagation::Orphan => "orphan",
                };
                write!(
                    f,
                    "delete {} {} {p}",
                    kind_name(&target.kind),
                    target_key(target)
                )?;
                write_preconditions(f, preconditions)
            }
            Action::Event(e) => {
                let t = match e.event_type {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                };
                write!(
                    f,
                    "event {} {} {t} {}: {}",
                    kind_name(&e.regarding.kind),
                    target_key(&e.regarding),
                    e.reason,
                    e.note
                )?;
                if let Some(uid) = &e.regarding_uid {
                    write!(f, " uid={uid}")?;
                }
                Ok(())
            }
        }
    }
}

/// One record a plugin logged.
#[derive(Debug, Clone, PartialEq)]
pub struct LogLine {
    /// Its level.
    pub level: Level,
    /// Its message.
    pub message: String,
    /// Its fields, in the order given.
    pub fields: Vec<(String, String)>,
}

/// `info copy deleted copy=team-a/settings source=default/settings`.
impl fmt::Display for LogLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.level {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        };
        write!(f, "{level} {}", self.message)?;
        for (k, v) in &self.fields {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}

/// The fake host of this thread. Creating one installs it (replacing any
/// other on the thread; tests run on threads of their own, so each test
/// has its own); dropping it uninstalls it.
pub struct FakeHost {
    state: Rc<RefCell<State>>,
}

impl Default for FakeHost {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for FakeHost {
    fn drop(&mut self) {
        state::uninstall(&self.state);
    }
}

impl FakeHost {
    /// An empty fake host, installed for this thread: no objects, no
    /// registration (nothing is enforced until [`FakeHost::load`]), every
    /// log level enabled, the clock at [`DEFAULT_NOW`].
    pub fn new() -> Self {
        let state = Rc::new(RefCell::new(State::new(crate::clock::Instant {
            seconds: DEFAULT_NOW,
            nanoseconds: 0,
        })));
        state::install(state.clone());
        Self { state }
    }

    // ---- the plugin ----

    /// Builds the plugin as the host does: `P::new` with a context named
    /// `name` (version `000000000000`) and `config` (JSON; `""` or `{}`
    /// for none), then `registration()`, which the fake keeps and enforces
    /// from then on.
    pub fn load<P: Plugin>(&self, name: &str, config: &str) -> Result<P, String> {
        let plugin = P::new(&Context::new(name, "000000000000", config))?;
        let registration = plugin.registration();
        self.state.borrow_mut().registration = Some(registration);
        Ok(plugin)
    }

    /// The registration of the plugin [loaded](FakeHost::load) last.
    pub fn registration(&self) -> Option<Registration> {
        self.state.borrow().registration.clone()
    }

    /// Calls `plugin.handle(delta)` as the host does: when it returns an
    /// error, the actions it emitted during the call are dropped.
    pub fn handle<P: Plugin>(&self, plugin: &mut P, delta: Delta) -> Result<Handled, HandlerError> {
        let mark = self.state.borrow().actions.len();
        let result = plugin.handle(delta);
        if result.is_err() {
            self.state.borrow_mut().actions.truncate(mark);
        }
        result
    }

    // ---- the cache ----

    /// Puts an object (JSON with apiVersion, kind, metadata.name and, if
    /// namespaced, metadata.namespace) into the cache, replacing one of the
    /// same kind, namespace and name. Fills in what the API server would:
    /// `metadata.uid` (`uid-NAMESPACE-NAME`, or the replaced object's),
    /// `metadata.resourceVersion` (the replaced object's plus one, or `1`)
    /// and `metadata.creationTimestamp` (the clock). Panics on an object
    /// without apiVersion, kind or name.
    pub fn put(&self, object: Value) -> &Self {
        self.store(object);
        self
    }

    /// Removes an object (matched by apiVersion's group, kind, namespace
    /// and name) from the cache; returns whether it was there.
    pub fn remove(&self, object: &Value) -> bool {
        let key = key_of(object);
        self.state.borrow_mut().cache.remove(&key).is_some()
    }

    /// Every cached object, by kind, namespace and name.
    pub fn objects(&self) -> Vec<Value> {
        self.state
            .borrow()
            .cache
            .values()
            .map(|o| (**o).clone())
            .collect()
    }

    fn store(&self, object: Value) -> Rc<Value> {
        let mut object = object;
        let key = key_of(&object);
        let mut s = self.state.borrow_mut();
        let before = s.cache.get(&key).cloned();
        let now = rfc3339(s.now.seconds);
        if let Some(m) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            let old = |k: &str| before.as_deref().and_then(|b| state::meta_opt(b, k));
            if !m.contains_key("uid") {
                let uid = old("uid").unwrap_or_else(|| match key.2.as_str() {
                    "" => format!("uid-{}", key.3),
                    ns => format!("uid-{ns}-{}", key.3),
                });
                m.insert("uid".to_owned(), Value::String(uid));
            }
            if !m.contains_key("resourceVersion") {
                let rv = old("resourceVersion")
                    .and_then(|rv| rv.parse::<u64>().ok())
                    .map_or(1, |rv| rv + 1);
                m.insert("resourceVersion".to_owned(), Value::String(rv.to_string()));
            }
            if !m.contains_key("creationTimestamp") {
                let ts = old("creationTimestamp").unwrap_or(now);
                m.insert("creationTimestamp".to_owned(), Value::String(ts));
            }
        }
        let object = Rc::new(object);
        s.cache.insert(key, object.clone());
        object
    }

    // ---- deltas ----

    fn delta(&self, delta_type: DeltaType, object: Rc<Value>, old: Option<Rc<Value>>) -> Delta {
        let mut s = self.state.borrow_mut();
        let gvk = state::gvk_of(&object);
        let namespace = state::namespace_of(&object);
        let labels = state::map_of(&object, "labels");
        let subscription = s.registration.as_ref().and_then(|reg| {
            let of_kind = |sub: &&crate::Subscription| state::names(&sub.kind, &gvk);
            let fits = |sub: &&crate::Subscription| {
                of_kind(sub)
                    && sub
                        .namespace
                        .as_ref()
                        .is_none_or(|ns| namespace.as_ref() == Some(ns))
                    && sub.label_selector.as_ref().is_none_or(|text| {
                        selector::Selector::parse(text).is_ok_and(|sel| {
                            sel.matches_labels(|k| {
                                labels.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
                            })
                        })
                    })
                    && (delta_type == DeltaType::Requeue || sub.deltas.contains(&delta_type))
            };
            let position = |pred: &dyn Fn(&&crate::Subscription) -> bool| {
                reg.subscriptions.iter().position(|s| pred(&s))
            };
            position(&fits).or_else(|| position(&of_kind))
        });
        Delta {
            delta_type,
            subscription: subscription
                .and_then(|i| u32::try_from(i).ok())
                .unwrap_or(0),
            namespace,
            name: state::meta_str(&object, "name"),
            uid: state::meta_str(&object, "uid"),
            resource_version: state::meta_str(&object, "resourceVersion"),
            old_object: old.map(|o| s.hand(o)),
            object: Some(s.hand(object)),
            initial: false,
            final_state_unknown: false,
            attempt: 1,
            last_failure: None,
        }
    }

    /// Puts `object` into the cache and returns its `added` delta (for the
    /// first subscription of its kind whose namespace, selector and delta
    /// types fit, else the first of its kind, else 0; the delta's fields
    /// are public: set `initial`, `attempt`, `last_failure` or
    /// `subscription` as a test needs).
    pub fn added(&self, object: Value) -> Delta {
        let object = self.store(object);
        self.delta(DeltaType::Added, object, None)
    }

    /// Replaces the cached object with `object` and returns the `updated`
    /// delta, the cached one as its old state. Panics when the object is
    /// not cached (put it first).
    pub fn updated(&self, object: Value) -> Delta {
        let key = key_of(&object);
        let old = self.state.borrow().cache.get(&key).cloned();
        let old = old.unwrap_or_else(|| {
            panic!(
                "FakeHost::updated: {}/{} is not in the cache: put it first",
                key.2, key.3
            )
        });
        let object = self.store(object);
        self.delta(DeltaType::Updated, object, Some(old))
    }

    /// Removes the object (matched by kind, namespace and name) from the
    /// cache and returns its `deleted` delta, carrying the cached state
    /// (or `object` itself when it was not cached).
    pub fn deleted(&self, object: Value) -> Delta {
        let key = key_of(&object);
        let cached = self.state.borrow_mut().cache.remove(&key);
        let last = cached.unwrap_or_else(|| Rc::new(object));
        self.delta(DeltaType::Deleted, last, None)
    }

    /// Puts `object` and returns its `resync` delta.
    pub fn resync(&self, object: Value) -> Delta {
        let object = self.store(object);
        self.delta(DeltaType::Resync, object, None)
    }

    /// Puts `object` and returns its `requeue` delta (what the host
    /// delivers after `requeue_after`).
    pub fn requeue(&self, object: Value) -> Delta {
        let object = self.store(object);
        self.delta(DeltaType::Requeue, object, None)
    }

    /// The `synced` delta of subscription `subscription`: no object.
    pub fn synced(&self, subscription: u32) -> Delta {
        Delta {
            delta_type: DeltaType::Synced,
            subscription,
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

    // ---- what the plugin did ----

    /// Every action accepted so far, in order.
    pub fn actions(&self) -> Vec<Action> {
        self.state.borrow().actions.clone()
    }

    /// The actions accepted so far, clearing them.
    pub fn take_actions(&self) -> Vec<Action> {
        std::mem::take(&mut self.state.borrow_mut().actions)
    }

    /// [`FakeHost::take_actions`], one line each (see [`Action`]'s
    /// `Display`).
    pub fn take_action_lines(&self) -> Vec<String> {
        self.take_actions()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// Every record logged so far (at the enabled levels).
    pub fn logs(&self) -> Vec<LogLine> {
        self.state.borrow().logs.clone()
    }

    /// The records logged so far, clearing them.
    pub fn take_logs(&self) -> Vec<LogLine> {
        std::mem::take(&mut self.state.borrow_mut().logs)
    }

    /// Records below `level` are neither enabled (`log::enabled`) nor kept
    /// (default: every level).
    pub fn set_log_level(&self, level: Level) {
        self.state.borrow_mut().log_level = level;
    }

    /// How many object handles the plugin holds (the host bounds them; a
    /// plugin that keeps handles across calls leaks).
    pub fn live_handles(&self) -> usize {
        self.state.borrow().live_handles()
    }

    // ---- the clock ----

    /// Sets the clock to `seconds` since the Unix epoch.
    pub fn set_clock(&self, seconds: i64) {
        self.state.borrow_mut().now = crate::clock::Instant {
            seconds,
            nanoseconds: 0,
        };
    }

    /// Sets the clock to an RFC 3339 UTC time (`2026-11-22T17:00:00Z`).
    /// Panics on another format.
    pub fn set_time(&self, rfc3339_utc: &str) {
        let seconds = parse_rfc3339(rfc3339_utc).unwrap_or_else(|| {
            panic!("FakeHost::set_time: {rfc3339_utc:?} is not YYYY-MM-DDTHH:MM:SSZ")
        });
        self.set_clock(seconds);
    }

    /// Moves the clock forward (as a test waits out a requeue).
    pub fn advance(&self, by: Duration) {
        let mut s = self.state.borrow_mut();
        let nanos = u64::from(s.now.nanoseconds) + u64::from(by.subsec_nanos());
        let secs = i64::try_from(by.as_secs()).unwrap_or(i64::MAX);
        s.now.seconds = s
            .now
            .seconds
            .saturating_add(secs)
            .saturating_add(i64::from(nanos >= 1_000_000_000));
        s.now.nanoseconds = u32::try_from(nanos % 1_000_000_000).unwrap_or(0);
    }
}

/// The cache key of an object given as JSON; panics without a kind or name.
fn key_of(object: &Value) -> state::Key {
    let gvk = state::gvk_of(object);
    let name = state::meta_str(object, "name");
    if gvk.kind.is_empty() || gvk.version.is_empty() || name.is_empty() {
        panic!("the fake host needs objects with apiVersion, kind and metadata.name, got {object}");
    }
    (
        gvk.group,
        gvk.kind,
        state::namespace_of(object).unwrap_or_default(),
        name,
    )
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `seconds` since the epoch as RFC 3339 UTC with seconds precision.
pub(crate) fn rfc3339(seconds: i64) -> String {
    let days = seconds.div_euclid(86_400);
    let secs = seconds.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

fn parse_rfc3339(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() != 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[19] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| text.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s)
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_round_trips() {
        for s in [0, 951_782_400, -86_400, 4_102_444_800, super::DEFAULT_NOW] {
            assert_eq!(super::parse_rfc3339(&super::rfc3339(s)), Some(s), "{s}");
        }
        assert_eq!(super::rfc3339(super::DEFAULT_NOW), "2026-01-01T00:00:00Z");
        assert_eq!(super::parse_rfc3339("2026-01-01 00:00:00"), None);
    }
}
