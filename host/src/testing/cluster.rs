//! The simulated cluster a fixture case runs against: objects in memory,
//! changed by the case's deltas and by the plugin's actions (the executor's
//! sink), and the failures the fixture asks for. The actions go through
//! the simulated API server ([`crate::sim`], shared with the embedded
//! local cluster): preconditions, the status subresource, the server's
//! metadata, deletion, unchanged writes. What they changed is kept for
//! the watch echoes the case delivers back to the plugin.
//!
//! The garbage collector ([`crate::sim::gc`]) runs right after each
//! action that is not a dry run, on the objects the actions change (a
//! fixture's own `deleted` steps are the world's script: what a collector
//! did after them is in the fixture's later steps).
//!
//! Simplifications, as the embedded local cluster's: server-side apply is
//! a JSON merge of the applied object (no field ownership: simulate a
//! conflict with a `failures` entry), no admission.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::fixture::{Failure, SimulatedError, Verb};
use super::mirror::{After, Mirror};
use crate::actions::executor::{ActionError, ActionSink};
use crate::actions::{Action, Target};
use crate::kind::{Gvk, KindRegistry};
use crate::object::ObjectKey;
use crate::runtime::harness::Harness;
use crate::sim;

/// An object's identity in the cluster.
pub type Id = sim::gc::Id;

/// The garbage collector's work items run after one action, at most
/// (against a cycle of owner references).
const GC_BUDGET: usize = 10_000;

fn actives(rules: Vec<Failure>) -> Vec<Active> {
    rules
        .into_iter()
        .map(|rule| Active {
            left: rule.times,
            rule,
        })
        .collect()
}

/// A failure rule with what is left of it.
#[derive(Debug)]
struct Active {
    rule: Failure,
    /// Attempts it still fails (`None`: all).
    left: Option<u32>,
}

/// What the cluster holds.
#[derive(Debug, Default, Clone)]
struct Store {
    objects: BTreeMap<Id, Value>,
    rv: u64,
    /// Deletions per id, mixed into a recreated object's uid.
    incarnations: BTreeMap<Id, u64>,
    /// What the actions changed, for the watch echoes.
    changes: Vec<Change>,
    /// The garbage collector's index and work.
    gc: sim::gc::Collector,
}

#[derive(Debug, Default)]
struct State {
    store: Store,
    /// A dry-run call's view: the store as the call's earlier actions
    /// left it (a server-side dry run of the whole call), dropped when
    /// the next call begins.
    scratch: Option<Store>,
    /// The case's rules, spent across its steps.
    case_failures: Vec<Active>,
    /// The current step's rules, matched before the case's.
    step_failures: Vec<Active>,
    /// Answer actions without applying them (a recording's server-side
    /// dry run).
    dry_run: bool,
    /// The actions of the call being executed, and the position of the
    /// one executing (the executor runs them in order, retrying in place).
    call: Vec<Action>,
    cursor: usize,
}

/// The cluster of one case.
pub struct SimCluster {
    kinds: KindRegistry,
    harness: Harness,
    /// The executor's attempt timeout: a simulated timeout costs this much
    /// virtual time.
    timeout: Duration,
    state: Mutex<State>,
    /// Another cluster told of what this one stores and answers.
    mirror: Mutex<Option<Arc<dyn Mirror>>>,
}

impl std::fmt::Debug for SimCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimCluster").finish_non_exhaustive()
    }
}

impl SimCluster {
    pub fn new(kinds: KindRegistry, harness: Harness, timeout: Duration) -> Arc<Self> {
        Arc::new(Self {
            kinds,
            harness,
            timeout,
            state: Mutex::new(State::default()),
            mirror: Mutex::new(None),
        })
    }

    /// The id of `object` (namespaced kinds without a namespace are in
    /// `default`, as the API server puts them), or why it has none.
    pub fn id_of(&self, object: &Value) -> Result<Id, String> {
        let field = |p: &str| object.pointer(p).and_then(Value::as_str);
        let (Some(api_version), Some(kind), Some(name)) = (
            field("/apiVersion"),
            field("/kind"),
            field("/metadata/name"),
        ) else {
            return Err("an object needs apiVersion, kind and metadata.name".into());
        };
        let gvk = Gvk::from_api_version(api_version, kind);
        let info = self.kinds.by_gvk(&gvk).ok_or_else(|| {
            format!(
                "{} {name}: unknown kind {gvk}; add its CustomResourceDefinition to the cache",
                kind
            )
        })?;
        let ns = if info.namespaced {
            Some(field("/metadata/namespace").unwrap_or("default"))
        } else {
            None
        };
        crate::names::validate_object(kind, ns, name).map_err(|e| e.to_string())?;
        Ok((gvk, ObjectKey::new(ns, name)))
    }

    pub fn get(&self, id: &Id) -> Option<Value> {
        self.state.lock().store.objects.get(id).cloned()
    }

    /// Every object, by kind, namespace and name.
    pub fn objects(&self) -> Vec<(Id, Value)> {
        self.state
            .lock()
            .store
            .objects
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Stores `object` as given (an informer's view of an event: what the
    /// fixture says the object is), filling in what the server would have
    /// set; returns its id and the stored object.
    pub fn put(&self, mut object: Value) -> Result<(Id, Value), String> {
        let id = self.id_of(&object)?;
        let mut state = self.state.lock();
        let existing = state.store.objects.get(&id).cloned();
        if let Some(ns) = &id.1.namespace {
            object["metadata"]["namespace"] = json!(&**ns);
        }
        let meta = object["metadata"]
            .as_object_mut()
            .ok_or("metadata is not a map")?;
        let old_meta = existing.as_ref().map(|e| &e["metadata"]);
        if !meta.contains_key("uid") {
            let uid = match old_meta.and_then(|m| m.get("uid")) {
                Some(u) => u.clone(),
                None => json!(uid_for(&state.store, &id)),
            };
            meta.insert("uid".into(), uid);
        }
        if !meta.contains_key("creationTimestamp") {
            let created = old_meta
                .and_then(|m| m.get("creationTimestamp").cloned())
                .unwrap_or_else(|| json!(self.timestamp()));
            meta.insert("creationTimestamp".into(), created);
        }
        if !meta.contains_key("generation") && sim::meta::has_generation(&id.0) {
            let generation = old_meta
                .and_then(|m| m["generation"].as_i64())
                .map_or(1, |g| {
                    g + i64::from(
                        existing.as_ref().and_then(|e| e.get("spec")) != object.get("spec"),
                    )
                });
            if let Some(meta) = object["metadata"].as_object_mut() {
                meta.insert("generation".into(), json!(generation));
            }
        }
        let given_rv = object["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|rv| rv.parse::<u64>().ok());
        match given_rv {
            // Later writes count on from the highest version seen.
            Some(rv) => state.store.rv = state.store.rv.max(rv),
            None => {
                state.store.rv += 1;
                object["metadata"]["resourceVersion"] = json!(state.store.rv.to_string());
            }
        }
        state.store.gc.stored(&id, existing.as_ref(), &object);
        state.store.objects.insert(id.clone(), object.clone());
        drop(state);
        if let Some(m) = self.mirror() {
            m.put(&object);
        }
        Ok((id, object))
    }

    /// Removes an object (a `deleted` delta); returns its last state.
    pub fn remove(&self, id: &Id) -> Option<Value> {
        let gone = {
            let mut state = self.state.lock();
            let gone = state.store.objects.remove(id)?;
            state.store.gc.removed(id, &gone);
            *state.store.incarnations.entry(id.clone()).or_default() += 1;
            gone
        };
        if let Some(m) = self.mirror() {
            m.removed(&gone);
        }
        Some(gone)
    }

    /// Tells `mirror` of every object stored or removed as the case says
    /// and of every action's answer from now on.
    pub fn set_mirror(&self, mirror: Arc<dyn Mirror>) {
        *self.mirror.lock() = Some(mirror);
    }

    fn mirror(&self) -> Option<Arc<dyn Mirror>> {
        self.mirror.lock().clone()
    }

    /// The case's failure rules, in force for all its steps: a rule's
    /// `times` counts attempts across them.
    pub fn set_case_failures(&self, rules: Vec<Failure>) {
        self.state.lock().case_failures = actives(rules);
    }

    /// The current step's failure rules (matched before the case's), in
    /// force until the next call of this.
    pub fn set_step_failures(&self, rules: Vec<Failure>) {
        self.state.lock().step_failures = actives(rules);
    }

    /// Answers actions as it would, without applying them: the cluster
    /// stays as the steps make it (`dryRun: true`, what `kubewasm record`
    /// writes: its actions went to the API server as a dry run).
    pub fn set_dry_run(&self, on: bool) {
        self.state.lock().dry_run = on;
    }

    /// The actions of the call about to be executed.
    pub fn begin_call(&self, actions: &[Action]) {
        let mut state = self.state.lock();
        state.call = actions.to_vec();
        state.cursor = 0;
        state.scratch = None;
    }

    /// Whether `action` concerns what an earlier action of this call
    /// changed in its dry run: the same object, or an object in a
    /// Namespace it created or changed. A real server's dry run of it
    /// would not see that change, so a recording asks the simulation
    /// ([`Self::dry_run`]) instead.
    pub fn follows_the_call(&self, action: &Action) -> bool {
        let state = self.state.lock();
        let Some(scratch) = &state.scratch else {
            return false;
        };
        let target = action.target();
        let id = target_id(target);
        scratch.changes.iter().any(|c| {
            c.id == id
                || (c.id.0.group.is_empty()
                    && c.id.0.kind == "Namespace"
                    && target.namespace.as_deref() == Some(&*c.id.1.name))
        })
    }

    /// Answers `action` as a server-side dry run of the call so far
    /// would: against the store as the call's earlier dry-run actions
    /// left it, which this one then changes in turn (the store itself is
    /// untouched). Failure rules are not consulted.
    pub fn dry_run(&self, plugin: &str, action: &Action) -> Result<(), ActionError> {
        let mut state = self.state.lock();
        self.dry_run_locked(&mut state, plugin, action)
    }

    fn dry_run_locked(
        &self,
        state: &mut State,
        plugin: &str,
        action: &Action,
    ) -> Result<(), ActionError> {
        let State { store, scratch, .. } = state;
        let scratch = scratch.get_or_insert_with(|| Store {
            changes: Vec::new(),
            ..store.clone()
        });
        let result = self.apply(scratch, plugin, action);
        // A server's dry run leaves the collector nothing to do.
        scratch.gc.clear();
        result
    }

    /// Runs the garbage collector's work, as the cluster's collector
    /// would right after the write: its writes go through the same path
    /// (stored, versioned, echoed to the plugin) and are not mirrored (a
    /// real cluster's own collector makes them).
    fn collect(&self, store: &mut Store) {
        let mut budget = GC_BUDGET;
        while let Some(work) = store.gc.next_work() {
            if budget == 0 {
                tracing::warn!(
                    "the simulated garbage collector did not settle (a cycle of owner references?); the rest is dropped"
                );
                store.gc.clear();
                return;
            }
            budget -= 1;
            let objects = &store.objects;
            let actions = store
                .gc
                .plan(&self.kinds, &work, &|id| objects.get(id).cloned());
            for action in actions {
                if let Err(e) = self.apply(store, sim::gc::ACTOR, &action) {
                    tracing::debug!(action = %action.target(), error = %e, "simulated garbage collection write refused");
                }
            }
        }
    }

    fn timestamp(&self) -> String {
        humantime::format_rfc3339_seconds(self.harness.now()).to_string()
    }

    /// The simulated answer for `action`, if a failure rule takes it.
    fn simulated(&self, state: &mut State, action: &Action) -> Option<ActionError> {
        // Its position: the first action from the cursor equal to it (a
        // retried action is the one at the cursor).
        let from = state.cursor.min(state.call.len());
        if let Some(i) = state.call[from..].iter().position(|a| a == action) {
            state.cursor = from + i;
        } else if let Some(i) = state.call.iter().position(|a| a == action) {
            // An Event runs after the call's other actions, wherever it
            // was emitted.
            state.cursor = i;
        }
        let position = u32::try_from(state.cursor + 1).unwrap_or(u32::MAX);
        let verb = Verb::of(action);
        let target = action.target();
        let kinds = &self.kinds;
        let State {
            step_failures,
            case_failures,
            ..
        } = &mut *state;
        let active = step_failures.iter_mut().chain(case_failures).find(|a| {
            a.left != Some(0)
                && a.rule.action.is_none_or(|n| n == position)
                && a.rule.verb.is_none_or(|v| v == verb)
                && a.rule
                    .target
                    .as_deref()
                    .is_none_or(|t| target_matches(kinds, t, target))
        })?;
        if let Some(left) = &mut active.left {
            *left -= 1;
        }
        let rule = &active.rule;
        Some(self.error(rule.error, rule.message.clone(), rule.retry_after, action))
    }

    /// The API server's answer (as the kube sink words it: `VERB TARGET:
    /// message (Reason)`).
    fn error(
        &self,
        error: SimulatedError,
        message: Option<String>,
        retry_after: Option<Duration>,
        action: &Action,
    ) -> ActionError {
        let target = action.target();
        let (plural, name) = (target.kind.plural.as_str(), target.name.as_str());
        let what = format!("{} {target}", action.verb());
        let say = |default: String, reason: &str| {
            format!("{what}: {} ({reason})", message.clone().unwrap_or(default))
        };
        match error {
            SimulatedError::Conflict => ActionError::Conflict(say(
                format!(
                    "Operation cannot be fulfilled on {plural} {name:?}: the object has been modified; please apply your changes to the latest version and try again"
                ),
                "Conflict",
            )),
            SimulatedError::Unauthorized => {
                ActionError::Unauthorized(say("Unauthorized".into(), "Unauthorized"))
            }
            SimulatedError::Forbidden => ActionError::Forbidden(say(
                format!(
                    "{plural} {name:?} is forbidden: User \"system:serviceaccount:kubewasm:kubewasm\" cannot {} resource {plural:?} in API group {:?}{}",
                    action.verb(),
                    target.kind.gvk.group,
                    target
                        .namespace
                        .as_deref()
                        .map(|n| format!(" in the namespace {n:?}"))
                        .unwrap_or_default()
                ),
                "Forbidden",
            )),
            SimulatedError::NotFound => {
                ActionError::NotFound(say(format!("{plural} {name:?} not found"), "NotFound"))
            }
            SimulatedError::Invalid => ActionError::Invalid(say(
                format!("{} {name:?} is invalid", target.kind.gvk.kind),
                "Invalid",
            )),
            SimulatedError::Throttled => ActionError::Throttled {
                message: say(
                    "Too many requests, please try again later.".into(),
                    "TooManyRequests",
                ),
                retry_after,
            },
            SimulatedError::ServerError => ActionError::Throttled {
                message: say("Internal error occurred".into(), "InternalError"),
                retry_after,
            },
            SimulatedError::Timeout => {
                // The executor gave up waiting: that much time passed.
                self.harness.advance(self.timeout);
                ActionError::TimedOut(self.timeout)
            }
        }
    }

    /// Carries out an action the server accepted, through the simulated
    /// API server's write path; what it changed is kept for the watch
    /// echoes ([`Self::take_changes`]). `plugin` is who writes (its field
    /// manager records what it owns).
    fn apply(&self, store: &mut Store, plugin: &str, action: &Action) -> Result<(), ActionError> {
        let target = action.target();
        let id = target_id(target);
        let current = store.objects.get(&id).cloned();
        let manager = sim::gc::field_manager(plugin);
        let ctx = sim::Context {
            kinds: &self.kinds,
            now: self.harness.now(),
            // The collector runs after each action ([`Self::collect`]).
            garbage_collector: true,
            validator: &sim::OpenApi,
            manager: &manager,
        };
        let uid = uid_for(store, &id);
        let outcome = sim::write(&ctx, action, current.as_ref(), &mut || Ok(uid.clone()))?;
        let (mut value, deleted) = match outcome {
            sim::Outcome::Unchanged => return Ok(()),
            sim::Outcome::Put(v) => (v, false),
            sim::Outcome::Gone(v) => (v, true),
        };
        store.rv += 1;
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), json!(store.rv.to_string()));
        }
        if deleted {
            store.objects.remove(&id);
            store.gc.removed(&id, &value);
            *store.incarnations.entry(id.clone()).or_default() += 1;
        } else {
            store.gc.stored(&id, current.as_ref(), &value);
            store.objects.insert(id.clone(), value.clone());
        }
        store.gc.follow(&id, current.as_ref(), &value, deleted);
        store.changes.push(Change {
            id,
            old: current,
            new: value,
            deleted,
        });
        Ok(())
    }

    /// The changes the actions made since the last call of this, in the
    /// order the server made them: what its watch would send.
    pub fn take_changes(&self) -> Vec<Change> {
        std::mem::take(&mut self.state.lock().store.changes)
    }
}

/// One change an action made, as a watch reports it.
#[derive(Debug, Clone)]
pub struct Change {
    pub id: Id,
    /// The state before (`None`: created).
    pub old: Option<Value>,
    /// The state after (for a delete, the last state).
    pub new: Value,
    pub deleted: bool,
}

impl ActionSink for SimCluster {
    fn execute<'a>(
        &'a self,
        plugin: &'a str,
        action: &'a Action,
    ) -> BoxFuture<'a, Result<(), ActionError>> {
        let (result, mirrored, after) = {
            let mut state = self.state.lock();
            let before = state.store.changes.len();
            let mut injected = false;
            let result = match self.simulated(&mut state, action) {
                Some(e) => {
                    injected = true;
                    Err(e)
                }
                None if state.dry_run => self.dry_run_locked(&mut state, plugin, action),
                None => {
                    let result = self.apply(&mut state.store, plugin, action);
                    self.collect(&mut state.store);
                    result
                }
            };
            // A failure the fixture injects never reached a server, and a
            // dry run changed nothing: neither is the mirror's to repeat.
            let mirrored = !injected && !state.dry_run && !action.is_event();
            let mut after = After::default();
            if mirrored {
                after.target = state
                    .store
                    .objects
                    .get(&target_id(action.target()))
                    .cloned();
                after.changed = state
                    .store
                    .changes
                    .get(before..)
                    .unwrap_or_default()
                    .to_vec();
                if after.changed.iter().any(|c| c.deleted) {
                    after.world = state.store.objects.values().cloned().collect();
                }
            }
            (result, mirrored, after)
        };
        Box::pin(async move {
            if let Some(m) = self.mirror().filter(|_| mirrored) {
                m.action(action, &result, after).await;
            }
            result
        })
    }
}

/// The id of the object an action targets.
fn target_id(target: &Target) -> Id {
    (
        target.kind.gvk.clone(),
        ObjectKey::new(target.namespace.as_deref(), &target.name),
    )
}

/// A uid as the server makes them (a UUID), derived from the object's kind,
/// name and how often it was deleted: stable across runs, new for a
/// recreated object.
fn uid_for(store: &Store, id: &Id) -> String {
    let inc = store.incarnations.get(id).copied().unwrap_or(0);
    let h = Sha256::digest(format!("{}|{}|{inc}", id.0, id.1).as_bytes());
    let x: String = h.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &x[0..8],
        &x[8..12],
        &x[12..16],
        &x[16..20],
        &x[20..32]
    )
}

/// Whether `text` (`configmaps team-a/x`, `ConfigMap team-a/x`) names
/// `target`.
pub fn target_matches(kinds: &KindRegistry, text: &str, target: &Target) -> bool {
    let Some((kind, name)) = text.split_once(' ') else {
        return false;
    };
    let (ns, name) = match name.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, name),
    };
    let kind_ok = kinds
        .resolve(&crate::kind::KindRef::Resource(kind.to_owned()))
        .is_ok_and(|k| k.gvk == target.kind.gvk);
    kind_ok && ns == target.namespace.as_deref() && name == target.name
}

#[cfg(test)]
mod tests;
