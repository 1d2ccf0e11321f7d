//! One plugin's recording: its caches listed from the real cluster (the
//! fixture's `cache`), then every watch event in arrival order as a step
//! (the cache changed, then delivered as `kubewasm test` delivers a
//! step's delta), and each retry or requeue that came due as a `pending`
//! step, driven through the same runner a replay uses, on a virtual clock
//! that follows the wall clock (each step's `advance`). Its actions go to
//! the API server as server-side dry runs; each refusal is kept as the
//! step's `failures`, each call as its `expect`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::capture::Capture;
use super::watch::{self, Seen};
use super::{RecordError, Stop, scrub};
use crate::actions::executor::{ActionSink, ExecutorOptions};
use crate::informer::InformerSpec;
use crate::kind::KindRegistry;
use crate::object::{KObject, StripOptions};
use crate::redact::Redactor;
use crate::source::kube::KubeSink;
use crate::testing::cluster::{Id, SimCluster};
use crate::testing::fixture::{
    Cache, Call, CallResult, Case, DeltaKind, Fixture, ObjectOrRef, Step,
};
use crate::testing::plugin::PluginUnderTest;
use crate::testing::runner::CaseRun;

/// What the recording of one plugin wrote.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub plugin: String,
    pub file: PathBuf,
    /// Objects of the initial cache.
    pub objects: usize,
    pub steps: usize,
    pub calls: usize,
    /// Steps whose calls emitted actions, and the actions.
    pub steps_with_actions: usize,
    pub actions: usize,
    /// Actions the API server refused (kept as `failures`).
    pub refusals: usize,
}

/// What every plugin's recording shares.
pub(super) struct Context<'a> {
    pub main: tokio::runtime::Handle,
    pub client: kube::Client,
    pub server: String,
    pub out: PathBuf,
    pub stop: Stop,
    pub seed: Option<u64>,
    pub cancel: &'a CancellationToken,
}

/// The recording in progress.
struct Tape<'r, 'a> {
    run: CaseRun<'r>,
    capture: Arc<Capture>,
    redactor: Redactor,
    kinds: KindRegistry,
    plugin: String,
    sidecar: Option<PathBuf>,
    /// The informer specs watched, by the index their events carry.
    specs: Vec<InformerSpec>,
    /// Specs being relisted, with the objects listed so far.
    relisting: HashMap<usize, HashSet<Id>>,
    steps: Vec<Step>,
    clock0: SystemTime,
    synced: Instant,
    ctx: &'a Context<'a>,
}

/// Records `plugin` until the context's stop (or its cancel) and writes
/// its fixture.
pub(super) fn record(plugin: &mut PluginUnderTest, ctx: &Context) -> Result<Recorded, RecordError> {
    let name = plugin.name.clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RecordError::Runtime)?;
    let seed = ctx.seed.unwrap_or_else(|| fastrand::u64(..));
    // Whole seconds: the fixture's clock is written in RFC 3339 seconds.
    let clock0 = UNIX_EPOCH
        + Duration::from_secs(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs(),
        );
    // As the runner starts a case: the seed, the clock, no logs.
    fastrand::seed(seed);
    let harness = plugin.harness.clone();
    harness.set_now(clock0);
    harness.set_seed(seed);
    harness.take_logs();
    let kinds = KindRegistry::builtin();
    let path = plugin.path.clone();
    let load = |source| RecordError::Load {
        path: path.clone(),
        source,
    };
    let prepared = plugin.prepared(None).map_err(load)?;
    let instance = plugin.start(prepared, None, kinds.clone()).map_err(load)?;
    harness.take_logs();
    let policy = crate::dispatch::DispatchOptions {
        max_attempts: instance.prepared.manifest.limits.max_attempts,
        ..Default::default()
    }
    .policy();

    let mut specs: Vec<InformerSpec> = Vec::new();
    for (spec, _) in &instance.pairs {
        if !specs.contains(spec) {
            specs.push(spec.clone());
        }
    }
    let watches = ctx.cancel.child_token();
    let _stop_watches = watches.clone().drop_guard();
    let mut rx = watch::start(&ctx.main, &ctx.client, &specs, &watches);

    let cluster = SimCluster::new(
        kinds.clone(),
        harness.clone(),
        ExecutorOptions::default().timeout,
    );
    // The initial lists: the cache the plugin starts from.
    let mut listed: BTreeMap<Id, Value> = BTreeMap::new();
    let mut done = vec![false; specs.len()];
    while done.iter().any(|d| !d) {
        let next = rt.block_on(async {
            tokio::select! {
                () = ctx.cancel.cancelled() => None,
                n = rx.recv() => n,
            }
        });
        let Some((i, seen)) = next else {
            return Err(RecordError::Interrupted {
                plugin: name.clone(),
            });
        };
        match seen {
            Seen::Listed(mut v) | Seen::Applied(mut v) => {
                scrub::strip(&mut v);
                if let Ok(id) = cluster.id_of(&v) {
                    listed.insert(id, v);
                }
            }
            Seen::Deleted(v) => {
                if let Ok(id) = cluster.id_of(&v) {
                    listed.remove(&id);
                }
            }
            Seen::ListDone => done[i] = true,
            Seen::Listing => {}
            Seen::Failed(message) => {
                return Err(RecordError::Watch {
                    plugin: name.clone(),
                    message,
                });
            }
        }
    }
    let redactor = Redactor::default();
    let mut objects = Vec::with_capacity(listed.len());
    for v in listed.into_values() {
        objects.push(scrub::object(&redactor, &v));
        cluster.put(v).map_err(|message| RecordError::Step {
            plugin: name.clone(),
            message,
        })?;
    }
    let sink: Arc<dyn ActionSink> = Arc::new(KubeSink::new(ctx.client.clone()).server_dry_run());
    let capture = Capture::new(sink, cluster.clone());
    let run = CaseRun::new(
        instance,
        cluster,
        capture.clone(),
        &rt,
        harness,
        name.clone(),
        policy,
    );
    let informers = specs.len();
    let mut tape = Tape {
        run,
        capture,
        redactor,
        kinds,
        plugin: name.clone(),
        sidecar: crate::runtime::Manifest::sidecar_path(&path),
        specs,
        relisting: HashMap::new(),
        steps: Vec::new(),
        clock0,
        synced: Instant::now(),
        ctx,
    };
    tracing::info!(plugin = %name, objects = objects.len(), informers, "caches listed; recording");
    tape.record(
        Step {
            name: Some("the initial list".into()),
            initial_list: true,
            ..Step::default()
        },
        None,
    )?;
    tape.follow(&rt, &mut rx)?;
    drop(_stop_watches);
    tape.write(objects, seed)
}

impl Tape<'_, '_> {
    /// Steps from the watch events and due retries until the stop.
    fn follow(
        &mut self,
        rt: &tokio::runtime::Runtime,
        rx: &mut tokio::sync::mpsc::UnboundedReceiver<(usize, Seen)>,
    ) -> Result<(), RecordError> {
        let deadline = match self.ctx.stop {
            Stop::After(d) => Some(self.synced + d),
            Stop::UntilIdle { .. } => None,
        };
        let mut last = Instant::now();
        loop {
            if self.ctx.cancel.is_cancelled() {
                return Ok(());
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(());
            }
            let virtual_now = self.virtual_now();
            if let Some(due) = self.run.next_due()
                && due <= virtual_now
            {
                self.record(
                    Step {
                        pending: true,
                        ..Step::default()
                    },
                    None,
                )?;
                last = Instant::now();
                continue;
            }
            let mut wait = Duration::from_secs(1);
            if let Stop::UntilIdle { quiet } = self.ctx.stop {
                let idle = now.duration_since(last);
                if idle >= quiet {
                    return Ok(());
                }
                wait = wait.min(quiet - idle);
            }
            if let Some(d) = deadline {
                wait = wait.min(d.duration_since(now));
            }
            if let Some(due) = self.run.next_due() {
                wait = wait.min(due.duration_since(virtual_now).unwrap_or_default());
            }
            let got = rt.block_on(async {
                tokio::select! {
                    () = self.ctx.cancel.cancelled() => None,
                    r = tokio::time::timeout(wait, rx.recv()) => Some(r),
                }
            });
            let seen = match got {
                None | Some(Ok(None)) => return Ok(()),
                Some(Err(_)) => continue,
                Some(Ok(Some(seen))) => seen,
            };
            if self.seen(seen.0, seen.1)? {
                last = Instant::now();
            }
        }
    }

    /// The wall clock as the plugin's virtual clock reads it (to the ms).
    fn virtual_now(&self) -> SystemTime {
        let elapsed = self.synced.elapsed();
        self.clock0 + Duration::from_millis(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
    }

    /// One event of spec `spec`'s watch as a step; false when it changes
    /// nothing the cache does not already hold. A relist (the watch could
    /// not resume) is an update of what changed, and a delete, its final
    /// state unknown, of what the list no longer holds.
    fn seen(&mut self, spec: usize, seen: Seen) -> Result<bool, RecordError> {
        let (mut object, deleted) = match seen {
            Seen::Listed(v) | Seen::Applied(v) => (v, false),
            Seen::Deleted(v) => (v, true),
            Seen::Listing => {
                self.relisting.insert(spec, HashSet::new());
                return Ok(false);
            }
            Seen::ListDone => return self.relisted(spec),
            Seen::Failed(message) => {
                tracing::warn!(plugin = %self.plugin, error = %message, "watch failed; retrying");
                return Ok(false);
            }
        };
        scrub::strip(&mut object);
        let cluster = &self.run.cluster;
        let Ok(id) = cluster.id_of(&object) else {
            return Ok(false);
        };
        if !deleted && let Some(listed) = self.relisting.get_mut(&spec) {
            listed.insert(id.clone());
        }
        let stored = cluster.get(&id);
        // Another object under the same key (a relist after a delete and a
        // create the watch missed): the host's informer delivers the old
        // one's delete (its final state unknown) then the new one's add,
        // never an update from one object to another; so does the
        // recording, or the delete path would go untested.
        if !deleted
            && let Some(Value::Object(old)) = &stored
            && recreated(old, &object)
        {
            self.deliver(DeltaKind::Deleted, old.clone(), true)?;
            let Value::Object(map) = object else {
                return Ok(true);
            };
            self.deliver(DeltaKind::Added, map, false)?;
            return Ok(true);
        }
        let delta = match (&stored, deleted) {
            (None, true) => return Ok(false),
            (Some(_), true) => DeltaKind::Deleted,
            (Some(old), false)
                if old["metadata"]["resourceVersion"] == object["metadata"]["resourceVersion"] =>
            {
                return Ok(false);
            }
            (Some(_), false) => DeltaKind::Updated,
            (None, false) => DeltaKind::Added,
        };
        let Value::Object(map) = object else {
            return Ok(false);
        };
        self.deliver(delta, map, false)?;
        Ok(true)
    }

    /// The end of spec `spec`'s relist: what its cache held and the list
    /// did not is deleted, final state unknown.
    fn relisted(&mut self, spec: usize) -> Result<bool, RecordError> {
        let Some(listed) = self.relisting.remove(&spec) else {
            return Ok(false);
        };
        let instance = &self.run.instance;
        let Some(pair) = instance
            .pairs
            .iter()
            .position(|(s, _)| *s == self.specs[spec])
        else {
            return Ok(false);
        };
        let gone: Vec<_> = self
            .run
            .cluster
            .objects()
            .into_iter()
            .filter(|(id, v)| {
                !listed.contains(id)
                    && KObject::from_value(v.clone(), StripOptions::default())
                        .is_ok_and(|o| instance.pair_selects(pair, &o))
            })
            .collect();
        let any = !gone.is_empty();
        for (_, v) in gone {
            if let Value::Object(map) = v {
                self.deliver(DeltaKind::Deleted, map, true)?;
            }
        }
        Ok(any)
    }

    /// Records a delta step of `object`, after the wall-clock time since
    /// the last step.
    fn deliver(
        &mut self,
        delta: DeltaKind,
        object: serde_json::Map<String, Value>,
        final_state_unknown: bool,
    ) -> Result<(), RecordError> {
        let advance = self
            .virtual_now()
            .duration_since(self.run.harness_now())
            .ok()
            .filter(|d| !d.is_zero());
        let written = scrub::object(&self.redactor, &Value::Object(object.clone()));
        self.record(
            Step {
                advance,
                delta: Some(delta),
                object: Some(ObjectOrRef::Object(object)),
                final_state_unknown,
                ..Step::default()
            },
            Some(written),
        )
    }

    /// Runs `step` and keeps it as written: `object` (redacted) in place of
    /// the one delivered, the server's refusals as its `failures`, its calls
    /// as its `expect`.
    fn record(&mut self, mut step: Step, written: Option<Value>) -> Result<(), RecordError> {
        let calls = self.run.step(&step).map_err(|b| RecordError::Step {
            plugin: self.plugin.clone(),
            message: format!("{}: {}", b.field, b.message),
        })?;
        step.failures = self.capture.take_failures();
        let mut calls: Vec<Call> = calls
            .into_iter()
            .map(|mut c| {
                c.at = None;
                c.logs = None;
                c.result = loosen(c.result);
                c
            })
            .collect();
        scrub::calls(&self.redactor, &self.kinds, &mut calls);
        if let Some(Value::Object(map)) = written {
            step.object = Some(ObjectOrRef::Object(map));
        }
        step.expect = Some(calls);
        self.steps.push(step);
        Ok(())
    }

    fn write(self, objects: Vec<Value>, seed: u64) -> Result<Recorded, RecordError> {
        let expects = || self.steps.iter().flat_map(|s| s.expect.iter().flatten());
        let recorded = Recorded {
            plugin: self.plugin.clone(),
            file: self.ctx.out.join(format!("{}.yaml", self.plugin)),
            objects: objects.len(),
            steps: self.steps.len(),
            calls: expects().count(),
            steps_with_actions: self
                .steps
                .iter()
                .filter(|s| s.expect.iter().flatten().any(|c| !c.actions.is_empty()))
                .count(),
            actions: expects().map(|c| c.actions.len()).sum(),
            refusals: self.steps.iter().map(|s| s.failures.len()).sum(),
        };
        let fixture = Fixture {
            cache: Cache {
                manifests: None,
                objects,
            },
            // The sidecar it ran with, whichever .wasm the replay is given.
            sidecar: self
                .sidecar
                .as_deref()
                .and_then(|s| super::relative(&self.ctx.out, s)),
            dry_run: true,
            cases: vec![Case {
                name: "recorded".into(),
                clock: Some(humantime::format_rfc3339_seconds(self.clock0).to_string()),
                seed: Some(seed),
                steps: self.steps,
                ..Case::default()
            }],
            ..Fixture::default()
        };
        let body = serde_yaml_ng::to_string(&fixture).map_err(|e| RecordError::Write {
            path: recorded.file.clone(),
            source: std::io::Error::other(e),
        })?;
        let text = format!(
            "# Recorded by `kubewasm record` from {} at {} ({} steps, {} calls, {} actions).\n\
             # Secret values are {}; actions were server-side dry runs (dryRun: true).\n\
             # Replay: kubewasm test {}.wasm {}.yaml\n{body}",
            self.ctx.server,
            humantime::format_rfc3339_seconds(self.clock0),
            recorded.steps,
            recorded.calls,
            recorded.actions,
            scrub::MARKER,
            self.plugin,
            self.plugin,
        );
        super::write_atomically(&recorded.file, &text)?;
        Ok(recorded)
    }
}

/// A failed call's message up to the server's reason (` (Conflict)`), which
/// the replay's simulated answer words its own way.
fn loosen(result: CallResult) -> CallResult {
    let cut = |m: Option<String>| {
        m.map(|m| match m.rfind(" (") {
            Some(at) if m.ends_with(')') => m[..at].to_owned(),
            _ => m,
        })
    };
    match result {
        CallResult::Conflict(m) => CallResult::Conflict(cut(m)),
        CallResult::ActionFailed(m) => CallResult::ActionFailed(cut(m)),
        other => other,
    }
}

/// True when `new` is another object than `old` under the same key
/// ([`crate::object::recreated`], on JSON).
fn recreated(old: &serde_json::Map<String, Value>, new: &Value) -> bool {
    fn uid(meta: Option<&Value>) -> &str {
        meta.and_then(|m| m.get("uid"))
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
    crate::object::recreated(uid(old.get("metadata")), uid(new.get("metadata")))
}
