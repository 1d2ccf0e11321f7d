//! Runs one fixture case: the cluster built from its cache, a fresh
//! registered instance, then each step's deliveries through the real
//! runtime, the actions through the host's executor into the simulated
//! cluster, and the dispatcher's decisions (retry with backoff, requeue,
//! dead) on a virtual clock.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use super::cluster::{Id, SimCluster};
use super::diff::{self, Ignore};
use super::fixture::{Call, CallResult, DeltaKind, Fixture, ObjectOrRef, Step};
use super::outcome;
use super::plugin::{Instance, PluginUnderTest};
use crate::actions::executor::{ActionSink, AttemptWait, Executor, ExecutorOptions};
use crate::dispatch::MAX_REQUEUE_AFTER;
use crate::dispatch::retry::{Failure, RetryPolicy};
use crate::informer::DeltaType;
use crate::kind::{KindRef, KindRegistry};
use crate::object::{KObject, ObjectHandle, ObjectKey, StripOptions};
use crate::runtime::{CallDelta, LoadError};

/// How one case went.
#[derive(Debug)]
pub struct CaseReport {
    pub name: String,
    pub status: Status,
    pub time: Duration,
    /// Handler calls made.
    pub calls: usize,
    pub seed: u64,
    /// Per step, the calls observed (for `--update`); `None` for steps not
    /// run.
    pub observed: Vec<Option<Vec<Call>>>,
    /// Steps whose expectation is missing or not met.
    pub stale: Vec<usize>,
}

#[derive(Debug)]
pub enum Status {
    Passed,
    /// What did not match, one entry per step (or the load).
    Failed(Vec<String>),
    /// The fixture cannot be run as written.
    Error(String),
}

/// A fixture problem found while running: the field, and what to do.
pub(super) struct Bad {
    pub(super) field: String,
    pub(super) message: String,
}

fn bad(field: impl Into<String>, message: impl Into<String>) -> Bad {
    Bad {
        field: field.into(),
        message: message.into(),
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
pub(super) struct CaseRun<'a> {
    pub(super) instance: Instance,
    pub(super) cluster: Arc<SimCluster>,
    executor: Executor,
    rt: &'a tokio::runtime::Runtime,
    harness: crate::runtime::harness::Harness,
    plugin: String,
    policy: RetryPolicy,
    pending: Vec<Pending>,
    seq: u64,
    calls: usize,
}

/// Runs case `index` of `fixture` (read from `file`).
pub fn run_case(
    plugin: &mut PluginUnderTest,
    rt: &tokio::runtime::Runtime,
    file: &Path,
    fixture: &Fixture,
    index: usize,
    seed: u64,
) -> CaseReport {
    let case = &fixture.cases[index];
    let start = Instant::now();
    let mut report = CaseReport {
        name: case.name.clone(),
        status: Status::Passed,
        time: Duration::ZERO,
        calls: 0,
        seed,
        observed: vec![None; case.steps.len()],
        stale: Vec::new(),
    };
    report.status = match run(plugin, rt, file, fixture, index, seed, &mut report) {
        Ok(failures) if failures.is_empty() => Status::Passed,
        Ok(failures) => Status::Failed(failures),
        Err(b) => Status::Error(format!(
            "{}: case {} ({:?}): {}: {}",
            file.display(),
            index + 1,
            case.name,
            b.field,
            b.message
        )),
    };
    report.time = start.elapsed();
    report
}

fn run(
    plugin: &mut PluginUnderTest,
    rt: &tokio::runtime::Runtime,
    file: &Path,
    fixture: &Fixture,
    index: usize,
    seed: u64,
    report: &mut CaseReport,
) -> Result<Vec<String>, Bad> {
    let case = &fixture.cases[index];
    let at = |field: &str| format!("cases[{index}].{field}");
    let base = file.parent().unwrap_or(Path::new("."));
    let clock_text = case
        .clock
        .as_deref()
        .or(fixture.clock.as_deref())
        .unwrap_or(super::fixture::DEFAULT_CLOCK);
    let clock = super::fixture::parse_clock(clock_text).map_err(|m| bad(at("clock"), m))?;
    // Everything random from here on (retry jitter, the executor's backoff,
    // WASI random of instances created now) follows the seed.
    fastrand::seed(seed);
    let harness = plugin.harness.clone();
    harness.set_now(clock);
    harness.set_seed(seed);
    harness.take_logs();

    let kinds = KindRegistry::builtin();
    let objects = cache_objects(base, fixture, index)?;
    for (_, o) in &objects {
        if o["kind"] == "CustomResourceDefinition" {
            kinds.learn_crd(o);
        }
    }
    let cluster = SimCluster::new(
        kinds.clone(),
        harness.clone(),
        ExecutorOptions::default().timeout,
    );
    for (field, o) in objects {
        cluster.put(o).map_err(|m| bad(field, m))?;
    }
    cluster.set_case_failures(case.failures.clone());

    let sidecar = case
        .sidecar
        .as_ref()
        .or(fixture.sidecar.as_ref())
        .map(|s| base.join(s));
    if let Some(s) = &sidecar
        && !s.is_file()
    {
        let field = if case.sidecar.is_some() {
            at("sidecar")
        } else {
            "sidecar".to_owned()
        };
        return Err(bad(
            field,
            format!(
                "{} does not exist (give a path relative to the fixture)",
                s.display()
            ),
        ));
    }
    let config = case
        .config
        .as_ref()
        .or(fixture.config.as_ref())
        .map(Value::to_string);
    let started = plugin
        .prepared(sidecar.as_deref())
        .and_then(|p| plugin.start(p, config, kinds));
    let instance = match (started, &case.refused) {
        (Err(e), Some(want)) if e.to_string().contains(want.as_str()) => return Ok(Vec::new()),
        (Err(e), Some(want)) => {
            return Ok(vec![format!(
                "the host refused to load the plugin, but not with {want:?}: {e}"
            )]);
        }
        (Err(e), None) => {
            return Ok(vec![format!(
                "the host refuses to load the plugin: {e}{}",
                hint(&e)
            )]);
        }
        (Ok(_), Some(want)) => {
            return Ok(vec![format!(
                "the plugin loaded, but the case expects the host to refuse it with {want:?}"
            )]);
        }
        (Ok(i), None) => i,
    };
    // What register logged is not a call's.
    harness.take_logs();
    let limits = &instance.prepared.manifest.limits;
    let policy = crate::dispatch::DispatchOptions {
        max_attempts: limits.max_attempts,
        ..Default::default()
    }
    .policy();
    // A dry-run case's cluster answers actions without applying them, as
    // a recording's API server did (`kubewasm record`).
    cluster.set_dry_run(fixture.dry_run || case.dry_run);
    let sink: Arc<dyn ActionSink> = cluster.clone();
    let mut run = CaseRun::new(
        instance,
        cluster,
        sink,
        rt,
        harness,
        plugin.name.clone(),
        policy,
    );
    let volatile: Vec<String> = fixture
        .volatile
        .iter()
        .chain(&case.volatile)
        .cloned()
        .collect();
    let mut failures = Vec::new();
    for (j, step) in case.steps.iter().enumerate() {
        let observed = run
            .step(step)
            .map_err(|b| bad(at(&format!("steps[{j}].{}", b.field)), b.message))?;
        let title = match &step.name {
            Some(n) => format!("step {} ({n})", j + 1),
            None => format!("step {}", j + 1),
        };
        match &step.expect {
            None => {
                failures.push(format!(
                    "{title}: no `expect`; it made {} call(s). Run with --update to record them, then review the diff",
                    observed.len()
                ));
                report.stale.push(j);
            }
            Some(expected) => {
                let ignore = Ignore {
                    volatile: &volatile,
                    logs: case.logs,
                };
                if let Some(d) = diff::compare(expected, &observed, ignore) {
                    failures.push(format!("{title}: {d}"));
                    report.stale.push(j);
                }
            }
        }
        report.observed[j] = Some(recordable(observed, step.expect.as_deref(), case.logs));
    }
    report.calls = run.calls;
    Ok(failures)
}

/// The observed calls as `--update` writes them: the time only where the
/// expectation checks it, logs where the case or the expectation asks.
fn recordable(mut observed: Vec<Call>, expected: Option<&[Call]>, logs: bool) -> Vec<Call> {
    let expected = expected.unwrap_or_default();
    let any_logs = logs || expected.iter().any(|c| c.logs.is_some());
    for (i, call) in observed.iter_mut().enumerate() {
        if expected.get(i).is_none_or(|e| e.at.is_none()) {
            call.at = None;
        }
        if !any_logs {
            call.logs = None;
        }
    }
    observed
}

/// What to do about a refused load, when the fixture can fix it.
fn hint(e: &LoadError) -> &'static str {
    match e {
        LoadError::NotGranted(_) => {
            " (the sidecar's `access` must grant what the plugin registers; or expect it with `refused:`)"
        }
        LoadError::UnknownKind(_) => "",
        _ => " (expect it with `refused:` if that is the point of the case)",
    }
}

/// The case's objects, each with the field it came from: the manifests and
/// objects of the file's cache, then the case's.
fn cache_objects(
    base: &Path,
    fixture: &Fixture,
    index: usize,
) -> Result<Vec<(String, Value)>, Bad> {
    let mut out = Vec::new();
    let case_prefix = format!("cases[{index}].cache");
    for (prefix, cache) in [
        ("cache", &fixture.cache),
        (case_prefix.as_str(), &fixture.cases[index].cache),
    ] {
        if let Some(m) = &cache.manifests {
            let path = base.join(m);
            for (file, objects) in
                read_manifests(&path).map_err(|e| bad(format!("{prefix}.manifests"), e))?
            {
                for o in objects {
                    out.push((format!("{prefix}.manifests ({})", file.display()), o));
                }
            }
        }
        for (k, o) in cache.objects.iter().enumerate() {
            out.push((format!("{prefix}.objects[{k}]"), o.clone()));
        }
    }
    Ok(out)
}

/// The manifests of a folder (recursively, `.yaml`, `.yml`, `.json`, dot
/// files skipped) or of one file, as the embedded cluster reads them.
fn read_manifests(path: &Path) -> Result<Vec<(PathBuf, Vec<Value>)>, String> {
    let mut files = Vec::new();
    if path.is_dir() {
        crate::source::local::files::walk(path, &mut files)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        files.sort();
    } else if path.is_file() {
        files.push(path.to_owned());
    } else {
        return Err(format!(
            "{} does not exist (give a folder or file relative to the fixture)",
            path.display()
        ));
    }
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f)
                .map_err(|e| format!("cannot read {}: {e}", f.display()))?;
            let objects = crate::source::local::parse_manifests(&f, &text)
                .map_err(|e| format!("{}: {e}", f.display()))?;
            Ok((f, objects))
        })
        .collect()
}

fn kobject(v: Value) -> Result<ObjectHandle, String> {
    KObject::from_value(v, StripOptions::default())
        .map(Arc::new)
        .map_err(|e| e.to_string())
}

impl<'a> CaseRun<'a> {
    /// A run of `instance` over `cluster` (its caches' source), its
    /// actions executed into `sink`; syncs the caches.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
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
    pub(super) fn harness_now(&self) -> SystemTime {
        self.harness.now()
    }

    /// When the earliest pending retry or requeue is due.
    pub(super) fn next_due(&self) -> Option<SystemTime> {
        self.pending.iter().map(|p| p.due).min()
    }

    /// Runs one step; returns the calls it made.
    pub(super) fn step(&mut self, step: &Step) -> Result<Vec<Call>, Bad> {
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
        let mut calls = Vec::new();
        for (pair, key, delta) in deliveries {
            calls.push(self.call(pair, key, delta));
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
        let mut out = Vec::new();
        for (pair, (_, filter)) in self.instance.pairs.iter().enumerate() {
            if step.subscription.is_some_and(|s| s != filter.index) || filter.kind != new.gvk() {
                continue;
            }
            let sees_new = self.instance.pair_selects(pair, &new);
            let saw_old = old
                .as_ref()
                .is_some_and(|o| self.instance.pair_selects(pair, o));
            // As the API server's watch for this cache reports it: an
            // update into its selection is an add, out of it a delete.
            let (dtype, obj, old) = match dtype {
                DeltaType::Updated if sees_new && !saw_old => (DeltaType::Added, new.clone(), None),
                DeltaType::Updated if !sees_new && saw_old => {
                    (DeltaType::Deleted, new.clone(), None)
                }
                DeltaType::Updated if !sees_new => continue,
                DeltaType::Updated => (dtype, new.clone(), old.clone()),
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
                    initial: step.initial,
                    final_state_unknown: step.final_state_unknown,
                    ..CallDelta::new(dtype, filter.index, filter.kind.clone())
                },
            ));
        }
        Ok(out)
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

/// `KIND [NAMESPACE/]NAME` as an id.
pub fn parse_ref(kinds: &KindRegistry, text: &str) -> Result<Id, String> {
    let usage = || {
        format!(
            "{text:?} is not a reference: write `KIND NAMESPACE/NAME` (`configmaps team-a/settings`) or `KIND NAME` for cluster-scoped objects"
        )
    };
    let (kind, name) = text.trim().split_once(' ').ok_or_else(usage)?;
    let info = kinds
        .resolve(&KindRef::Resource(kind.to_owned()))
        .map_err(|e| format!("{text:?}: {e}"))?;
    let (ns, name) = match name.trim().split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, name.trim()),
    };
    match (info.namespaced, ns) {
        (true, None) => Err(format!(
            "{text:?}: {} is namespaced: write {kind} NAMESPACE/{name}",
            info.resource_name()
        )),
        (false, Some(_)) => Err(format!(
            "{text:?}: {} is cluster-scoped: drop the namespace",
            info.resource_name()
        )),
        _ => Ok((info.gvk, ObjectKey::new(ns, name))),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::kind::Gvk;

    #[test]
    fn references_name_a_kind_and_an_object_as_kubectl_would() {
        let kinds = KindRegistry::builtin();
        let (gvk, key) = parse_ref(&kinds, "configmaps team-a/settings").unwrap();
        assert_eq!(gvk, Gvk::new("", "v1", "ConfigMap"));
        assert_eq!(key, ObjectKey::new(Some("team-a"), "settings"));
        assert_eq!(
            parse_ref(&kinds, "ConfigMap team-a/settings").unwrap().0,
            gvk
        );
        let (gvk, key) = parse_ref(&kinds, "deployments.apps shop/web").unwrap();
        assert_eq!(gvk, Gvk::new("apps", "v1", "Deployment"));
        assert_eq!(key.to_string(), "shop/web");
        assert_eq!(
            parse_ref(&kinds, "namespaces team-a").unwrap().1,
            ObjectKey::new(None, "team-a")
        );
        for (text, says) in [
            ("configmaps settings", "is namespaced"),
            ("namespaces a/b", "is cluster-scoped"),
            ("settings", "is not a reference"),
            ("widgets a/b", "widgets"),
        ] {
            let e = parse_ref(&kinds, text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
