//! A plugin instance as an actor: a dedicated thread owns the wasmtime Store
//! and serves requests from a channel, so one plugin's slow or stuck call
//! never blocks another's, and a broken instance is replaced in place.

use std::sync::Arc;
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use wasmtime::Store;
use wasmtime::component::Resource;

use super::bindings::{v0_1, v0_2};
use super::engine::EPOCH_TICK;
use super::host::{HostState, PluginScope};
use super::limits::CallCaps;
use super::{Pre, Prepared, Registration};
use crate::actions::Action;
use crate::informer::DeltaType;
use crate::kind::Gvk;
use crate::object::ObjectHandle;
use crate::telemetry::events::PluginLimitExceeded;

/// Why a call did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("plugin asked to retry: {0}")]
    Retry(String),
    #[error("plugin failed permanently: {0}")]
    Permanent(String),
    #[error("plugin trapped: {0}")]
    Trap(String),
    #[error("plugin exceeded its {0:?} deadline and was interrupted")]
    Timeout(Duration),
    #[error("plugin ran out of memory: {0}")]
    OutOfMemory(String),
    #[error("plugin instance is unavailable: {0}")]
    Unavailable(String),
    /// A per-plugin cap of the sidecar's `limits` (handles, actions or log
    /// bytes): the message names the key.
    #[error("plugin exceeded {0}")]
    Limit(String),
}

impl CallError {
    /// Whether retrying the same delta may succeed.
    pub fn retryable(&self) -> bool {
        !matches!(self, CallError::Permanent(_))
    }

    /// Whether the instance was torn down (a trap of any kind).
    pub fn is_trap(&self) -> bool {
        matches!(
            self,
            CallError::Trap(_) | CallError::Timeout(_) | CallError::OutOfMemory(_)
        )
    }
}

/// One delta as a plugin call receives it.
#[derive(Debug, Clone)]
pub struct CallDelta {
    pub dtype: DeltaType,
    pub subscription: u32,
    pub kind: Gvk,
    pub object: Option<ObjectHandle>,
    pub old: Option<ObjectHandle>,
    pub initial: bool,
    pub final_state_unknown: bool,
    /// The handler asked to see the object again (a `Resync`-typed delta
    /// of its current state; WIT 0.2 calls it `requeue`).
    pub requeued: bool,
    /// 1 on the first attempt, 2 on the first retry...
    pub attempt: u32,
    /// Why the previous attempt failed.
    pub last_failure: Option<LastFailure>,
}

impl CallDelta {
    /// A first-attempt delta.
    pub fn new(dtype: DeltaType, subscription: u32, kind: Gvk) -> Self {
        Self {
            dtype,
            subscription,
            kind,
            object: None,
            old: None,
            initial: false,
            final_state_unknown: false,
            requeued: false,
            attempt: 1,
            last_failure: None,
        }
    }
}

/// Why a delta's previous attempt failed, as the next attempt tells the
/// plugin (WIT 0.2's `failure`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LastFailure {
    /// The handler asked to retry.
    Retry(String),
    /// The call trapped, timed out or went over a limit.
    Trapped(String),
    /// An action hit a conflict (field ownership or a precondition).
    Conflict(String),
    /// An action failed.
    ActionFailed(String),
}

/// What a successful call leaves: its actions, and when the handler wants
/// to see the object again.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Handled {
    pub actions: Vec<Action>,
    pub requeue_after: Option<Duration>,
}

enum Request {
    Register {
        config: String,
        reply: oneshot::Sender<Result<Registration, CallError>>,
    },
    SetScope(Arc<PluginScope>),
    Handle {
        delta: CallDelta,
        reply: oneshot::Sender<CallOutcome>,
    },
    /// Several deltas (of different objects) in one hand-off: the thread
    /// switch costs more than a no-op call, so a backlog is drained in batches.
    HandleBatch {
        deltas: Vec<CallDelta>,
        /// Cancelled: the rest of the batch is not run (the version is
        /// stopping; the dispatcher requeues it for the next version).
        stop: Option<tokio_util::sync::CancellationToken>,
        reply: oneshot::Sender<Vec<CallOutcome>>,
    },
}

/// A call's result and duration.
pub type CallOutcome = (Result<Handled, CallError>, Duration);

/// Handle on one instance's thread. Dropping it ends the thread after the
/// call in progress.
#[derive(Debug)]
pub struct Actor {
    tx: std_mpsc::Sender<Request>,
    name: Arc<str>,
}

struct Instance {
    store: Store<HostState>,
    plugin: Bound,
}

/// An instance's exports, in the contract it was built for.
enum Bound {
    V0_1(v0_1::Plugin),
    V0_2(v0_2::Plugin),
}

struct ActorThread {
    prepared: Arc<Prepared>,
    instance: Option<Instance>,
    config: Option<String>,
    scope: Option<Arc<PluginScope>>,
}

/// The 0.2 delta record: scalars and handles, nothing else lowered.
fn delta_v0_2(
    delta: &CallDelta,
    object: Option<Resource<ObjectHandle>>,
    old_object: Option<Resource<ObjectHandle>>,
) -> v0_2::kubewasm::plugin::types::Delta {
    use v0_2::kubewasm::plugin::types as t;
    let delta_type = match delta.dtype {
        _ if delta.requeued => t::DeltaType::Requeue,
        DeltaType::Added => t::DeltaType::Added,
        DeltaType::Updated => t::DeltaType::Updated,
        DeltaType::Deleted => t::DeltaType::Deleted,
        DeltaType::Resync => t::DeltaType::Resync,
        DeltaType::Synced => t::DeltaType::Synced,
    };
    let meta = delta.object.as_ref().map(|o| o.meta());
    t::Delta {
        delta_type,
        subscription: delta.subscription,
        namespace: meta.and_then(|m| m.namespace.as_ref().map(|n| n.to_string())),
        name: meta.map(|m| m.name.to_string()).unwrap_or_default(),
        uid: meta.map(|m| m.uid.to_string()).unwrap_or_default(),
        resource_version: meta
            .map(|m| m.resource_version.to_string())
            .unwrap_or_default(),
        object,
        old_object,
        initial: delta.initial,
        final_state_unknown: delta.final_state_unknown,
        attempt: delta.attempt,
        last_failure: delta.last_failure.clone().map(|f| match f {
            LastFailure::Retry(m) => t::Failure::Retry(m),
            LastFailure::Trapped(m) => t::Failure::Trapped(m),
            LastFailure::Conflict(m) => t::Failure::Conflict(m),
            LastFailure::ActionFailed(m) => t::Failure::ActionFailed(m),
        }),
    }
}

/// The 0.1 delta record: the whole metadata, lowered eagerly.
fn delta_v0_1(
    delta: &CallDelta,
    object: Option<Resource<ObjectHandle>>,
    old_object: Option<Resource<ObjectHandle>>,
) -> v0_1::kubewasm::plugin::types::Delta {
    use v0_1::kubewasm::plugin::types as t;
    t::Delta {
        delta_type: super::v0_1::delta_type(delta.dtype),
        subscription: delta.subscription,
        kind: t::GroupVersionKind {
            group: delta.kind.group.clone(),
            version: delta.kind.version.clone(),
            kind: delta.kind.kind.clone(),
        },
        meta: delta
            .object
            .as_ref()
            .map(|o| super::v0_1::wit_meta(o.meta())),
        object,
        old_object,
        initial: delta.initial,
        final_state_unknown: delta.final_state_unknown,
    }
}

fn classify(store: &Store<HostState>, err: wasmtime::Error, timeout: Duration) -> CallError {
    let data = store.data();
    if data.limiter.exceeded {
        return CallError::OutOfMemory(format!("{err:#}"));
    }
    if let Some(cap) = &data.cap_hit {
        return CallError::Limit(cap.to_string());
    }
    match err.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::Interrupt) => CallError::Timeout(timeout),
        // A wait cut at the deadline may end in any trap of the guest's.
        _ if data.wait_cut => CallError::Timeout(timeout),
        _ => CallError::Trap(format!("{err:#}")),
    }
}

/// Fails a call that went over a cap (whatever the guest returned), counts
/// it and logs it.
fn enforce_caps<T>(
    prepared: &Prepared,
    store: &mut Store<HostState>,
    result: Result<T, CallError>,
) -> Result<T, CallError> {
    let Some(hit) = store.data_mut().cap_hit.take() else {
        return result;
    };
    PluginLimitExceeded {
        plugin: &prepared.name,
        cap: hit.cap,
        message: &hit.to_string(),
    }
    .emit(prepared.cap_counters.get(hit.cap));
    store.data_mut().actions.clear();
    Err(CallError::Limit(hit.to_string()))
}

/// Logs what the guest printed during a call (bounded, attributed to the
/// plugin); a trap's error also carries the output's last line, which is
/// where a panic message or an exception ends up.
fn with_output<T>(
    plugin: &str,
    store: &Store<HostState>,
    result: Result<T, CallError>,
) -> Result<T, CallError> {
    let Some(captured) = store
        .data()
        .output
        .as_ref()
        .and_then(|o| o.flush_to_log(plugin))
    else {
        return result;
    };
    let last = captured
        .cause()
        .map(|l| l.chars().take(512).collect::<String>());
    match (result, last) {
        (Err(CallError::Trap(m)), Some(line)) => {
            Err(CallError::Trap(format!("{m} (guest output: {line})")))
        }
        (r, _) => r,
    }
}

impl ActorThread {
    fn instantiate(&mut self) -> Result<&mut Instance, CallError> {
        if self.instance.is_none() {
            let p = &self.prepared;
            let (wasi, output) = p.wasi_ctx().map_err(CallError::Unavailable)?;
            let mut state = HostState::new(
                p.name.clone(),
                &p.version,
                wasi,
                usize::try_from(p.manifest.limits.memory).unwrap_or(usize::MAX),
            );
            state.output = output;
            state.caps = CallCaps::from_limits(&p.manifest.limits);
            p.instantiations
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut store = Store::new(p.engine.engine(), state);
            store.limiter(|s| &mut s.limiter);
            if p.engine.epoch_deadlines() {
                store.set_epoch_deadline(self.deadline_ticks());
                store.epoch_deadline_trap();
            }
            let plugin = match &p.pre {
                Pre::V0_1(pre) => pre.instantiate(&mut store).map(Bound::V0_1),
                Pre::V0_2(pre) => pre.instantiate(&mut store).map(Bound::V0_2),
            }
            .map_err(|e| self.classify(&store, e))?;
            let mut inst = Instance { store, plugin };
            // A replacement instance must be initialised like the first.
            if let Some(config) = self.config.clone() {
                Self::call_register(
                    &mut inst,
                    p,
                    &config,
                    self.deadline_ticks(),
                    p.engine.epoch_deadlines(),
                )
                .map_err(|e| {
                    CallError::Unavailable(format!("re-registration after a trap failed: {e}"))
                })?;
                inst.store.data_mut().scope = self.scope.clone();
            }
            self.instance = Some(inst);
        }
        self.instance
            .as_mut()
            .ok_or_else(|| CallError::Unavailable("no instance".into()))
    }

    fn deadline_ticks(&self) -> u64 {
        let t = self.prepared.manifest.limits.timeout.as_millis() / EPOCH_TICK.as_millis();
        u64::try_from(t).unwrap_or(u64::MAX).max(1)
    }

    fn classify(&self, store: &Store<HostState>, err: wasmtime::Error) -> CallError {
        classify(store, err, self.prepared.manifest.limits.timeout)
    }

    fn call_register(
        inst: &mut Instance,
        prepared: &Prepared,
        config: &str,
        ticks: u64,
        epochs: bool,
    ) -> Result<Registration, CallError> {
        if epochs {
            inst.store.set_epoch_deadline(ticks);
        }
        let timeout = EPOCH_TICK.saturating_mul(u32::try_from(ticks).unwrap_or(u32::MAX));
        inst.store.data_mut().begin_call();
        inst.store.data_mut().deadline = Some(Instant::now() + timeout);
        let result = match &inst.plugin {
            Bound::V0_1(p) => p
                .kubewasm_plugin_handler()
                .call_register(&mut inst.store, config)
                .map(|r| r.map(Registration::from_v0_1)),
            Bound::V0_2(p) => {
                let context = v0_2::exports::kubewasm::plugin::handler::Context {
                    name: prepared.name.to_string(),
                    version: prepared.version.to_string(),
                    config: config.to_owned(),
                };
                p.kubewasm_plugin_handler()
                    .call_register(&mut inst.store, &context)
                    .map(|r| r.map(Registration::from_v0_2))
            }
        };
        inst.store.data_mut().deadline = None;
        match result {
            Ok(_) if inst.store.data().wait_cut => Err(CallError::Timeout(timeout)),
            Ok(Ok(reg)) => Ok(reg),
            Ok(Err(msg)) => Err(CallError::Permanent(msg)),
            Err(e) => Err(CallError::Trap(format!("{e:#}"))),
        }
    }

    fn register(&mut self, config: String) -> Result<Registration, CallError> {
        let ticks = self.deadline_ticks();
        let epochs = self.prepared.engine.epoch_deadlines();
        let name = self.prepared.name.clone();
        let prepared = self.prepared.clone();
        let inst = self.instantiate()?;
        let result = Self::call_register(inst, &prepared, &config, ticks, epochs);
        let result = with_output(&name, &inst.store, result);
        match &result {
            Ok(_) => self.config = Some(config),
            Err(_) => self.instance = None,
        }
        result
    }

    fn handle(&mut self, delta: CallDelta) -> Result<Handled, CallError> {
        let ticks = self.deadline_ticks();
        let epochs = self.prepared.engine.epoch_deadlines();
        let timeout = self.prepared.manifest.limits.timeout;
        let name = self.prepared.name.clone();
        let prepared = self.prepared.clone();
        let inst = self.instantiate()?;
        let store = &mut inst.store;
        store.data_mut().begin_call();
        store.data_mut().deadline = Some(Instant::now() + timeout);
        if epochs {
            store.set_epoch_deadline(ticks);
        }
        let push = |store: &mut Store<HostState>,
                    o: Option<ObjectHandle>|
         -> Result<Option<Resource<ObjectHandle>>, CallError> {
            o.map(|o| store.data_mut().push_object(o))
                .transpose()
                .map_err(|e| CallError::Unavailable(format!("{e:#}")))
        };
        let pushed = push(store, delta.object.clone())
            .and_then(|o| Ok((o, push(store, delta.old.clone())?)));
        let (object, old_object) = match pushed {
            Ok(v) => v,
            Err(e) => {
                // Over limits.handles before the call: the leaked handles
                // go with the instance.
                let e = enforce_caps(&prepared, store, Err(e));
                self.instance = None;
                return e;
            }
        };
        use v0_2::exports::kubewasm::plugin::handler::Handled as H2;
        let result = match &inst.plugin {
            Bound::V0_1(p) => p
                .kubewasm_plugin_handler()
                .call_handle(&mut inst.store, &delta_v0_1(&delta, object, old_object))
                .map(|r| {
                    r.map(|()| None).map_err(|e| match e {
                        v0_1::exports::kubewasm::plugin::handler::HandlerError::Retry(m) => {
                            CallError::Retry(m)
                        }
                        v0_1::exports::kubewasm::plugin::handler::HandlerError::Permanent(m) => {
                            CallError::Permanent(m)
                        }
                    })
                }),
            Bound::V0_2(p) => p
                .kubewasm_plugin_handler()
                .call_handle(&mut inst.store, &delta_v0_2(&delta, object, old_object))
                .map(|r| {
                    r.map(|h| match h {
                        H2::Done => None,
                        H2::RequeueAfter(ms) => Some(Duration::from_millis(ms)),
                    })
                    .map_err(|e| match e {
                        v0_2::exports::kubewasm::plugin::handler::HandlerError::Retry(m) => {
                            CallError::Retry(m)
                        }
                        v0_2::exports::kubewasm::plugin::handler::HandlerError::Permanent(m) => {
                            CallError::Permanent(m)
                        }
                    })
                }),
        };
        // The instance may be in any state after a trap (or a wait cut
        // short under it): replace it.
        let cut = inst.store.data().wait_cut;
        let trapped = result.is_err() || cut;
        let result = match result {
            Ok(_) if cut => Err(CallError::Timeout(timeout)),
            Ok(r) => Ok(r),
            Err(e) => Err(classify(&inst.store, e, timeout)),
        };
        let result = with_output(&name, &inst.store, result);
        let result = enforce_caps(&prepared, &mut inst.store, result);
        inst.store.data_mut().deadline = None;
        let result = match result {
            Ok(Ok(requeue_after)) => Ok(Handled {
                actions: std::mem::take(&mut inst.store.data_mut().actions),
                requeue_after,
            }),
            Ok(Err(e)) => Err(e),
            Err(err) => Err(err),
        };
        if trapped {
            self.instance = None;
        }
        result
    }

    fn run(mut self, rx: std_mpsc::Receiver<Request>) {
        while let Ok(req) = rx.recv() {
            match req {
                Request::Register { config, reply } => {
                    let _ = reply.send(self.register(config));
                }
                Request::SetScope(scope) => {
                    if let Some(inst) = self.instance.as_mut() {
                        inst.store.data_mut().scope = Some(scope.clone());
                    }
                    self.scope = Some(scope);
                }
                Request::Handle { delta, reply } => {
                    let start = Instant::now();
                    let result = self.handle(delta);
                    let _ = reply.send((result, start.elapsed()));
                }
                Request::HandleBatch {
                    deltas,
                    stop,
                    reply,
                } => {
                    let mut out = Vec::with_capacity(deltas.len());
                    for delta in deltas {
                        if stop.as_ref().is_some_and(|s| s.is_cancelled()) {
                            break;
                        }
                        let start = Instant::now();
                        let result = self.handle(delta);
                        let broken = matches!(&result, Err(e) if e.is_trap() || matches!(e, CallError::Unavailable(_)));
                        out.push((result, start.elapsed()));
                        // The rest is not run on a fresh instance: the
                        // dispatcher requeues it and may quarantine the plugin.
                        if broken {
                            break;
                        }
                    }
                    let _ = reply.send(out);
                }
            }
        }
    }
}

impl Actor {
    /// Starts the instance thread; instantiation happens on the thread.
    pub fn spawn(prepared: Arc<Prepared>, index: usize) -> Result<Self, CallError> {
        let (tx, rx) = std_mpsc::channel();
        let name = prepared.name.clone();
        let thread = ActorThread {
            prepared,
            instance: None,
            config: None,
            scope: None,
        };
        std::thread::Builder::new()
            .name(format!("plugin-{name}-{index}"))
            .spawn(move || thread.run(rx))
            .map_err(|e| CallError::Unavailable(format!("cannot start plugin thread: {e}")))?;
        Ok(Self { tx, name })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    fn gone(&self) -> CallError {
        CallError::Unavailable(format!("plugin {} thread has stopped", self.name))
    }

    pub async fn register(&self, config: String) -> Result<Registration, CallError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Request::Register { config, reply })
            .map_err(|_| self.gone())?;
        rx.await.map_err(|_| self.gone())?
    }

    pub fn set_scope(&self, scope: Arc<PluginScope>) {
        let _ = self.tx.send(Request::SetScope(scope));
    }

    /// Runs one handler call; returns what it left and the call's duration.
    pub async fn handle(&self, delta: CallDelta) -> CallOutcome {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(Request::Handle { delta, reply }).is_err() {
            return (Err(self.gone()), Duration::ZERO);
        }
        rx.await
            .unwrap_or_else(|_| (Err(self.gone()), Duration::ZERO))
    }

    /// Runs several calls in order in one hand-off: one outcome per delta
    /// run, in order; the batch stops after a call that broke the instance.
    pub async fn handle_batch(&self, deltas: Vec<CallDelta>) -> Vec<CallOutcome> {
        self.batch(deltas, None).await
    }

    /// [`handle_batch`](Self::handle_batch) that runs no further delta once
    /// `stop` is cancelled (the outcomes are then fewer than the deltas).
    pub async fn handle_batch_until(
        &self,
        deltas: Vec<CallDelta>,
        stop: tokio_util::sync::CancellationToken,
    ) -> Vec<CallOutcome> {
        self.batch(deltas, Some(stop)).await
    }

    async fn batch(
        &self,
        deltas: Vec<CallDelta>,
        stop: Option<tokio_util::sync::CancellationToken>,
    ) -> Vec<CallOutcome> {
        let n = deltas.len();
        let (reply, rx) = oneshot::channel();
        if self
            .tx
            .send(Request::HandleBatch {
                deltas,
                stop,
                reply,
            })
            .is_err()
        {
            return (0..n).map(|_| (Err(self.gone()), Duration::ZERO)).collect();
        }
        rx.await
            .unwrap_or_else(|_| (0..n).map(|_| (Err(self.gone()), Duration::ZERO)).collect())
    }

    /// Blocking variant for benchmarks and tools without a runtime.
    pub fn handle_blocking(&self, delta: CallDelta) -> CallOutcome {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(Request::Handle { delta, reply }).is_err() {
            return (Err(self.gone()), Duration::ZERO);
        }
        rx.blocking_recv()
            .unwrap_or_else(|_| (Err(self.gone()), Duration::ZERO))
    }
}
