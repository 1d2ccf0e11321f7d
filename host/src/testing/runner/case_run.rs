//! [`CaseRun`]: one case (or one plugin's recording) while it runs, its
//! deliveries, calls and pending retries on a virtual clock.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;

use crate::actions::executor::{ActionSink, AttemptWait, Executor, ExecutorOptions};
use crate::dispatch::MAX_REQUEUE_AFTER;
use crate::dispatch::retry::{Failure, RetryPolicy};
use crate::informer::DeltaType;
use crate::object::ObjectKey;
use crate::runtime::CallDelta;
use crate::testing::cluster::{Change, Id, SimCluster};
use crate::testing::fixture::{Call, CallResult, DeltaKind, ObjectOrRef, Step};
use crate::testing::outcome;
use crate::testing::plugin::Instance;

use super::cache::kobject;
use super::{Bad, bad, parse_ref};

/// How many calls the watch echoes of a plugin's own writes make in one
/// step at most: a plugin that triggers itself shows its loop as this many
/// calls (the rest wait for `pending: true` steps), and a fixture cannot
/// hang on it.
pub(in crate::testing) const ECHO_CALLS_PER_STEP: usize = 8;

/// One delivery: the pair (subscription and cache), the object's key, the
/// delta.
type Delivery = (usize, ObjectKey, CallDelta);

/// Queues an echo, coalesced with one already queued for the same key as
/// the dispatcher coalesces an object's pending deltas (the latest state,
/// the first old one; an add stays an add, a delete wins); returns how
/// many calls it adds (0 when coalesced).
fn coalesce(queue: &mut VecDeque<Delivery>, echo: Delivery) -> usize {
    let (pair, key, delta) = echo;
    let queued = queue
        .iter_mut()
        .find(|(p, k, d)| *p == pair && *k == key && d.subscription == delta.subscription);
    match queued {
        Some((_, _, first)) => {
            let dtype = match (first.dtype, delta.dtype) {
                (_, DeltaType::Deleted) => DeltaType::Deleted,
                (DeltaType::Added, _) => DeltaType::Added,
                (_, later) => later,
            };
            first.old = if dtype == DeltaType::Updated {
                first.old.take()
            } else {
                None
            };
            first.dtype = dtype;
            first.object = delta.object;
            0
        }
        None => {
            queue.push_back((pair, key, delta));
            1
        }
    }
}

/// One pending retry or requeue of a key.
struct Pending {
    seq: u64,
    due: SystemTime,
    pair: usize,
    key: ObjectKey,
    delta: CallDelta,
}

/// The state of one case while it runs (and of one plugin's recording:
/// `kubewasm record` drives the plugin through the same steps, with the
/// real API server's dry run behind the executor).
pub(in crate::testing) struct CaseRun<'a> {
    pub(in crate::testing) instance: Instance,
    pub(in crate::testing) cluster: Arc<SimCluster>,
    executor: Executor,
    rt: &'a tokio::runtime::Runtime,
    harness: crate::runtime::harness::Harness,
    plugin: String,
    policy: RetryPolicy,
    pending: Vec<Pending>,
    seq: u64,
    pub(super) calls: usize,
}

impl<'a> CaseRun<'a> {
    /// A run of `instance` over `cluster` (its caches' source), its
    /// actions executed into `sink`; syncs the caches.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::testing) fn new(
        instance: Instance,
        cluster: Arc<SimCluster>,
        sink: Arc<dyn ActionSink>,
        rt: &'a tokio::runtime::Runtime,
        harness: crate::runtime::harness::Harness,
        plugin: String,
        policy: RetryPolicy,
    ) -> Self {
        let executor = {
            let _entered = rt.enter();
            let advance = harness.clone();
            Executor::new(
                sink,
                ExecutorOptions {
                    attempt_wait: AttemptWait::Virtual(Arc::new(move |d| advance.advance(d))),
                    ..ExecutorOptions::default()
                },
                instance.telemetry.clone(),
            )
        };
        instance.sync(&cluster);
        Self {
            instance,
            cluster,
            executor,
            rt,
            harness,
            plugin,
            policy,
            pending: Vec::new(),
            seq: 0,
            calls: 0,
        }
    }

    /// The virtual clock.
    pub(in crate::testing) fn harness_now(&self) -> SystemTime {
        self.harness.now()
    }

    /// When the earliest pending retry or requeue is due.
    pub(in crate::testing) fn next_due(&self) -> Option<SystemTime> {
        self.pending.iter().map(|p| p.due).min()
    }

    /// Runs one step; returns the calls it made.
    pub(in crate::testing) fn step(&mut self, step: &Step) -> Result<Vec<Call>, Bad> {
        if let Some(d) = step.advance {
            self.harness.advance(d);
        }
        self.cluster.set_step_failures(step.failures.clone());
        let deliveries = if step.initial_list {
            self.initial_list()
        } else if step.pending {
            self.next_pending()
        } else {
            self.delta(step)?
        };
        let mut queue: VecDeque<Delivery> = deliveries.into();
        let mut calls = Vec::new();
        let mut echoed = 0;
        while let Some((pair, key, delta)) = queue.pop_front() {
            calls.push(self.call(pair, key, delta));
            // What the call's actions changed comes back as the server's
            // watch would send it, to every subscription that sees it.
            for change in self.cluster.take_changes() {
                for echo in self.echoes(change)? {
                    if echoed < ECHO_CALLS_PER_STEP {
                        echoed += coalesce(&mut queue, echo);
                    } else {
                        // Past the bound (a plugin that triggers itself):
                        // the next `pending: true` step delivers it.
                        let (pair, key, delta) = echo;
                        self.schedule(self.harness.now(), pair, key, delta);
                    }
                }
            }
        }
        // The step's rules go; the case's keep what they spent.
        self.cluster.set_step_failures(Vec::new());
        Ok(calls)
    }

    /// Every cached object as initial `added` deltas, pair by pair, then
    /// `synced` where asked.
    fn initial_list(&self) -> Vec<(usize, ObjectKey, CallDelta)> {
        let mut out = Vec::new();
        for (pair, (_, filter)) in self.instance.pairs.iter().enumerate() {
            if filter.deltas.contains(&DeltaType::Added) {
                for obj in self.instance.cached_all(pair) {
                    out.push((
                        pair,
                        obj.key(),
                        CallDelta {
                            object: Some(obj),
                            initial: true,
                            ..CallDelta::new(DeltaType::Added, filter.index, filter.kind.clone())
                        },
                    ));
                }
            }
            if filter.deltas.contains(&DeltaType::Synced) {
                out.push((
                    pair,
                    ObjectKey::new(None, ""),
                    CallDelta::new(DeltaType::Synced, filter.index, filter.kind.clone()),
                ));
            }
        }
        out
    }

    /// The earliest pending retry or requeue, the clock moved to it, with
    /// the object's current cached state (none when it is gone or was
    /// recreated: its delete and add are deltas of their own).
    fn next_pending(&mut self) -> Vec<(usize, ObjectKey, CallDelta)> {
        let Some(at) = self
            .pending
            .iter()
            .enumerate()
            .min_by_key(|(_, p)| (p.due, p.seq))
            .map(|(i, _)| i)
        else {
            return Vec::new();
        };
        let Pending {
            due,
            pair,
            key,
            mut delta,
            ..
        } = self.pending.remove(at);
        let now = self.harness.now();
        if let Ok(wait) = due.duration_since(now) {
            self.harness.advance(wait);
        }
        let refresh = (delta.attempt > 1 || delta.requeued)
            && matches!(
                delta.dtype,
                DeltaType::Added | DeltaType::Updated | DeltaType::Resync
            );
        if refresh {
            let Some(current) = self.instance.cached(pair, &key) else {
                return Vec::new();
            };
            let same = delta
                .object
                .as_ref()
                .is_none_or(|o| o.meta().uid == current.meta().uid);
            if !same {
                return Vec::new();
            }
            delta.object = Some(current);
        }
        vec![(pair, key, delta)]
    }

    /// A step's delta: the cluster changed, then delivered to each pair
    /// whose cache sees the object and whose subscription wants it.
    fn delta(&mut self, step: &Step) -> Result<Vec<(usize, ObjectKey, CallDelta)>, Bad> {
        let Some(kind) = step.delta else {
            return Ok(Vec::new());
        };
        if kind == DeltaKind::Synced {
            let index = step.subscription.unwrap_or(0);
            let out: Vec<_> = self
                .instance
                .pairs
                .iter()
                .enumerate()
                .filter(|(_, (_, f))| f.index == index && f.deltas.contains(&DeltaType::Synced))
                .map(|(pair, (_, f))| {
                    (
                        pair,
                        ObjectKey::new(None, ""),
                        CallDelta::new(DeltaType::Synced, f.index, f.kind.clone()),
                    )
                })
                .collect();
            if index as usize >= self.instance.registration.subscriptions.len() {
                return Err(bad(
                    "subscription",
                    format!(
                        "the plugin registers {} subscription(s); give an index below that",
                        self.instance.registration.subscriptions.len()
                    ),
                ));
            }
            return Ok(out);
        }
        let given = step
            .object
            .as_ref()
            .ok_or_else(|| bad("object", "missing"))?;
        let (id, value) = self.resolve(given, "object")?;
        let before = self.cluster.get(&id);
        let (new, old) = match kind {
            DeltaKind::Deleted => {
                let last = self.cluster.remove(&id);
                let value = match (given, last) {
                    (ObjectOrRef::Ref(r), None) => {
                        return Err(bad(
                            "object",
                            format!("{r} is not in the cache: it cannot be deleted"),
                        ));
                    }
                    (ObjectOrRef::Ref(_), Some(last)) => last,
                    (ObjectOrRef::Object(_), last) => with_server_fields(value, last.as_ref()),
                };
                (value, None)
            }
            DeltaKind::Updated => {
                let old = match &step.old {
                    Some(o) => self.resolve(o, "old")?.1,
                    None => before.clone().ok_or_else(|| {
                        bad(
                            "object",
                            "an `updated` object must be in the cache before the step (or give `old`)",
                        )
                    })?,
                };
                let stored = self.store(given, value)?;
                (stored, Some(old))
            }
            _ => (self.store(given, value)?, None),
        };
        self.instance.sync(&self.cluster);
        let new = kobject(new).map_err(|m| bad("object", m))?;
        let old = old.map(kobject).transpose().map_err(|m| bad("old", m))?;
        let dtype = match kind {
            DeltaKind::Added => DeltaType::Added,
            DeltaKind::Updated => DeltaType::Updated,
            DeltaKind::Deleted => DeltaType::Deleted,
            DeltaKind::Resync => DeltaType::Resync,
            DeltaKind::Synced => DeltaType::Synced,
        };
        Ok(self.route(
            dtype,
            &new,
            old.as_ref(),
            step.subscription,
            (step.initial, step.final_state_unknown),
        ))
    }

    /// A change's deliveries: each pair whose cache sees it and whose
    /// subscription wants it (`subscription`: only that one), as the API
    /// server's watch for that cache reports it: an update into its
    /// selection is an add, out of it a delete. `flags`: the delta's
    /// `initial` and `final_state_unknown`.
    fn route(
        &self,
        dtype: DeltaType,
        new: &crate::object::ObjectHandle,
        old: Option<&crate::object::ObjectHandle>,
        subscription: Option<u32>,
        (initial, final_state_unknown): (bool, bool),
    ) -> Vec<Delivery> {
        let mut out = Vec::new();
        for (pair, (_, filter)) in self.instance.pairs.iter().enumerate() {
            if subscription.is_some_and(|s| s != filter.index) || filter.kind != new.gvk() {
                continue;
            }
            let sees_new = self.instance.pair_selects(pair, new);
            let saw_old = old.is_some_and(|o| self.instance.pair_selects(pair, o));
            let (dtype, obj, old) = match dtype {
                DeltaType::Updated if sees_new && !saw_old => (DeltaType::Added, new.clone(), None),
                DeltaType::Updated if !sees_new && saw_old => {
                    (DeltaType::Deleted, new.clone(), None)
                }
                DeltaType::Updated if !sees_new => continue,
                DeltaType::Updated => (dtype, new.clone(), old.cloned()),
                _ if !sees_new => continue,
                _ => (dtype, new.clone(), None),
            };
            if !filter.wants(dtype, old.as_deref(), Some(&obj)) {
                continue;
            }
            out.push((
                pair,
                obj.key(),
                CallDelta {
                    object: Some(obj),
                    old,
                    initial,
                    final_state_unknown,
                    ..CallDelta::new(dtype, filter.index, filter.kind.clone())
                },
            ));
        }
        out
    }

    /// The watch events of one change an action made (its echo).
    fn echoes(&self, change: Change) -> Result<Vec<Delivery>, Bad> {
        let dtype = match (&change.old, change.deleted) {
            (_, true) => DeltaType::Deleted,
            (None, false) => DeltaType::Added,
            (Some(_), false) => DeltaType::Updated,
        };
        let new = kobject(change.new).map_err(|m| bad("object", m))?;
        let old = change
            .old
            .map(kobject)
            .transpose()
            .map_err(|m| bad("object", m))?;
        Ok(self.route(dtype, &new, old.as_ref(), None, (false, false)))
    }

    /// Stores an inline object (a reference is the cached object as is).
    fn store(&self, given: &ObjectOrRef, value: Value) -> Result<Value, Bad> {
        match given {
            ObjectOrRef::Ref(_) => Ok(value),
            ObjectOrRef::Object(_) => self
                .cluster
                .put(value)
                .map(|(_, v)| v)
                .map_err(|m| bad("object", m)),
        }
    }

    /// The id and value of an inline object, or of the cached object a
    /// reference names.
    fn resolve(&self, given: &ObjectOrRef, field: &str) -> Result<(Id, Value), Bad> {
        match given {
            ObjectOrRef::Object(map) => {
                let v = Value::Object(map.clone());
                let id = self.cluster.id_of(&v).map_err(|m| bad(field, m))?;
                Ok((id, v))
            }
            ObjectOrRef::Ref(text) => {
                let id = parse_ref(&self.instance.kinds, text).map_err(|m| bad(field, m))?;
                let v = self.cluster.get(&id).ok_or_else(|| {
                    bad(
                        field,
                        format!(
                            "{text} is not in the cache at this step: add it under `cache.objects`, or give the object inline"
                        ),
                    )
                })?;
                Ok((id, v))
            }
        }
    }

    /// Makes one call, executes its actions, decides what follows.
    fn call(&mut self, pair: usize, key: ObjectKey, delta: CallDelta) -> Call {
        // A newer delta replaces the key's pending retry or requeue.
        self.pending.retain(|p| !(p.pair == pair && p.key == key));
        self.calls += 1;
        let same_kind = self
            .instance
            .registration
            .subscriptions
            .iter()
            .filter(|s| {
                self.instance
                    .kinds
                    .resolve(&s.kind)
                    .is_ok_and(|k| k.gvk == delta.kind)
            })
            .count()
            > 1;
        let description = outcome::describe(&delta, &self.instance.kinds, same_kind);
        let at = humantime::format_rfc3339_millis(self.harness.now()).to_string();
        let (result, _) = self.instance.actor.handle_blocking(delta.clone());
        let logs: Vec<String> = self
            .harness
            .take_logs()
            .iter()
            .map(ToString::to_string)
            .collect();
        let (result, actions, events, failure) = match result {
            Ok(handled) => {
                let (actions, events) = outcome::entries(&handled.actions);
                self.cluster.begin_call(&handled.actions);
                let executed = self.rt.block_on(async {
                    let r = self
                        .executor
                        .execute_all(&self.plugin, handled.actions)
                        .await;
                    self.executor.events_idle().await;
                    r
                });
                self.instance.sync(&self.cluster);
                match executed {
                    Ok(()) => {
                        if let Some(after) = handled.requeue_after {
                            let due = self.harness.now() + after.min(MAX_REQUEUE_AFTER);
                            let requeue = CallDelta {
                                object: delta.object.clone(),
                                requeued: true,
                                ..CallDelta::new(
                                    DeltaType::Resync,
                                    delta.subscription,
                                    delta.kind.clone(),
                                )
                            };
                            self.schedule(due, pair, key.clone(), requeue);
                        }
                        let result = match handled.requeue_after {
                            Some(d) => CallResult::RequeueAfter(d),
                            None => CallResult::Ok,
                        };
                        (result, actions, events, None)
                    }
                    Err(f) => (
                        outcome::actions_failed(&f),
                        actions,
                        events,
                        Some(Failure::Actions(f)),
                    ),
                }
            }
            Err(e) => (
                outcome::call_failed(&e),
                Vec::new(),
                Vec::new(),
                Some(Failure::Call(e)),
            ),
        };
        if let Some(failure) = failure
            && failure.retryable()
        {
            let at_least = match &failure {
                Failure::Actions(f) => f.error.retry_after(),
                Failure::Call(_) => None,
            };
            let wait = self.policy.decide(delta.attempt, at_least).wait;
            let retry = CallDelta {
                attempt: delta.attempt + 1,
                last_failure: Some(failure.last_failure()),
                ..delta
            };
            self.schedule(self.harness.now() + wait, pair, key, retry);
        }
        Call {
            call: Some(description),
            at: Some(at),
            result,
            actions,
            events,
            logs: Some(logs),
        }
    }

    fn schedule(&mut self, due: SystemTime, pair: usize, key: ObjectKey, delta: CallDelta) {
        self.seq += 1;
        self.pending.retain(|p| !(p.pair == pair && p.key == key));
        self.pending.push(Pending {
            seq: self.seq,
            due,
            pair,
            key,
            delta,
        });
    }
}

/// An inline deleted object keeps what the cluster had set (its uid,
/// resourceVersion...) where it does not say.
fn with_server_fields(mut value: Value, last: Option<&Value>) -> Value {
    let Some(last) = last else {
        return value;
    };
    for f in ["uid", "resourceVersion", "creationTimestamp", "generation"] {
        if value["metadata"].get(f).is_none()
            && let Some(v) = last["metadata"].get(f)
            && let Some(meta) = value["metadata"].as_object_mut()
        {
            meta.insert(f.into(), v.clone());
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::Gvk;

    fn echo(dtype: DeltaType, key: &str) -> Delivery {
        (
            0,
            ObjectKey::new(Some("a"), key),
            CallDelta::new(dtype, 0, Gvk::new("", "v1", "ConfigMap")),
        )
    }

    /// Two watch events of one object before its call are one delta, as
    /// the dispatcher coalesces them: an add stays an add, a delete wins.
    #[test]
    fn echoes_of_one_object_are_coalesced() {
        let mut queue = VecDeque::new();
        assert_eq!(coalesce(&mut queue, echo(DeltaType::Added, "x")), 1);
        assert_eq!(coalesce(&mut queue, echo(DeltaType::Updated, "x")), 0);
        assert_eq!(queue.len(), 1);
        assert_eq!(queue[0].2.dtype, DeltaType::Added);
        assert_eq!(coalesce(&mut queue, echo(DeltaType::Updated, "y")), 1);
        assert_eq!(coalesce(&mut queue, echo(DeltaType::Deleted, "y")), 0);
        assert_eq!(queue[1].2.dtype, DeltaType::Deleted);
        assert_eq!(queue.len(), 2);
    }
}
