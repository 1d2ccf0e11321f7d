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
use super::internal_events::PluginLimitExceeded;
use super::limits::CallCaps;
use super::{Pre, Prepared, Registration};
use crate::actions::Action;
use crate::informer::DeltaType;
use crate::kind::Gvk;
use crate::object::ObjectHandle;

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

    /// Whether the instance is gone after this call: torn down by a trap
    /// of any kind, or unavailable.
    pub fn breaks_instance(&self) -> bool {
        self.is_trap() || matches!(self, CallError::Unavailable(_))
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

/// Work run on an instance's thread, with its caller.
type Job = Box<dyn FnOnce(&mut Caller) + Send>;

/// A call's result and duration.
pub type CallOutcome = (Result<Handled, CallError>, Duration);

/// Handle on one instance's thread. Dropping it ends the thread after the
/// job in progress.
#[derive(Debug)]
pub struct Actor {
    tx: std_mpsc::Sender<Job>,
    name: Arc<str>,
    scope: Arc<ScopeSlot>,
}

/// The scope the next call runs with: set by the manager once the
/// version's subscriptions are resolved, read by the caller on its thread
/// (which may be running the dispatcher's worker by then).
#[derive(Debug, Default)]
struct ScopeSlot {
    scope: parking_lot::Mutex<Option<Arc<PluginScope>>>,
    changed: std::sync::atomic::AtomicBool,
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

/// One plugin instance and what it needs to call it, to replace it after a
/// trap and to re-register the replacement. Calls are synchronous: whoever
/// holds the caller (the instance's thread, running the dispatcher's worker)
/// runs them inline, so a delta costs no thread hand-off.
pub struct Caller {
    prepared: Arc<Prepared>,
    instance: Option<Instance>,
    config: Option<String>,
    scope: Option<Arc<PluginScope>>,
    slot: Arc<ScopeSlot>,
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("plugin", &self.prepared.name)
            .finish()
    }
}

/// The 0.2 delta record: scalars and handles, nothing else lowered; its
/// strings borrow the cached object's.
fn delta_v0_2<'a>(
    delta: &'a CallDelta,
    object: Option<Resource<ObjectHandle>>,
    old_object: Option<Resource<ObjectHandle>>,
) -> v0_2::kubewasm::plugin::types::Delta<'a> {
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
        namespace: meta.and_then(|m| m.namespace.as_deref()),
        name: meta.map_or("", |m| &m.name),
        uid: meta.map_or("", |m| &m.uid),
        resource_version: meta.map_or("", |m| &m.resource_version),
        object,
        old_object,
        initial: delta.initial,
        final_state_unknown: delta.final_state_unknown,
        attempt: delta.attempt,
        last_failure: delta.last_failure.as_ref().map(|f| match f {
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
        meta: delta.object.as_ref().map(|o| super::v0_1::wit_meta(o)),
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
    if let Some(over) = data.limiter.caps.explain(&format!("{err:#}")) {
        return CallError::Limit(over);
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
    if let Some(h) = &store.data().harness {
        for line in captured.text.lines().filter(|l| !l.trim().is_empty()) {
            h.log(super::harness::LogLine {
                level: "OUTPUT",
                message: line.to_owned(),
                fields: Vec::new(),
            });
        }
    }
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

impl Caller {
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
            state.harness = p.harness.clone();
            state.caps = CallCaps::from_limits(&p.manifest.limits);
            state.limiter.caps = p.store_caps;
            state.lookup = super::network::LookupPolicy::new(&p.manifest.grants.network);
            p.instantiations
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let memory = usize::try_from(p.manifest.limits.memory).unwrap_or(usize::MAX);
            let mut store = Store::new(p.engine.engine(), state);
            store.limiter(|s| &mut s.limiter);
            // What one host call may copy out of the guest (strings, lists:
            // wasmtime counts the host's size of each element). A guest
            // could otherwise pass one string a million times in a list and
            // make the host copy each; no honest call passes more than the
            // plugin's memory holds.
            store.set_hostcall_fuel(memory);
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
                    name: &prepared.name,
                    version: &prepared.version,
                    config,
                };
                p.kubewasm_plugin_handler()
                    .call_register(&mut inst.store, context)
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

    /// Instantiates (if needed) and registers with `config`: the
    /// registration is what the plugin subscribes to.
    pub fn register(&mut self, config: String) -> Result<Registration, CallError> {
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

    /// Runs one handler call; returns what it left and the call's duration.
    pub fn handle(&mut self, delta: &CallDelta) -> CallOutcome {
        let start = Instant::now();
        let result = self.call(delta, start);
        (result, start.elapsed())
    }

    fn call(&mut self, delta: &CallDelta, start: Instant) -> Result<Handled, CallError> {
        if self
            .slot
            .changed
            .swap(false, std::sync::atomic::Ordering::Acquire)
        {
            let scope = self.slot.scope.lock().clone();
            if let Some(inst) = self.instance.as_mut() {
                inst.store.data_mut().scope = scope.clone();
            }
            self.scope = scope;
        }
        let ticks = self.deadline_ticks();
        let epochs = self.prepared.engine.epoch_deadlines();
        let timeout = self.prepared.manifest.limits.timeout;
        let name = self.prepared.name.clone();
        let prepared = self.prepared.clone();
        let inst = self.instantiate()?;
        let store = &mut inst.store;
        store.data_mut().begin_call();
        store.data_mut().deadline = Some(start + timeout);
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
                .call_handle(&mut inst.store, &delta_v0_1(delta, object, old_object))
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
                .call_handle(&mut inst.store, delta_v0_2(delta, object, old_object))
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

    fn run(mut self, rx: std_mpsc::Receiver<Job>) {
        while let Ok(job) = rx.recv() {
            job(&mut self);
        }
    }
}

impl Actor {
    /// Starts the instance thread; instantiation happens on the thread.
    pub fn spawn(prepared: Arc<Prepared>, index: usize) -> Result<Self, CallError> {
        let (tx, rx) = std_mpsc::channel();
        let name = prepared.name.clone();
        let slot = Arc::new(ScopeSlot::default());
        let caller = Caller {
            prepared,
            instance: None,
            config: None,
            scope: None,
            slot: slot.clone(),
        };
        std::thread::Builder::new()
            .name(format!("plugin-{name}-{index}"))
            .spawn(move || caller.run(rx))
            .map_err(|e| CallError::Unavailable(format!("cannot start plugin thread: {e}")))?;
        Ok(Self {
            tx,
            name,
            scope: slot,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    fn gone(&self) -> CallError {
        CallError::Unavailable(format!("plugin {} thread has stopped", self.name))
    }

    fn submit<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Caller) -> R + Send + 'static,
    ) -> Result<oneshot::Receiver<R>, CallError> {
        let (reply, rx) = oneshot::channel();
        let job: Job = Box::new(move |caller| {
            let _ = reply.send(f(caller));
        });
        self.tx.send(job).map_err(|_| self.gone())?;
        Ok(rx)
    }

    /// Runs `f` on the instance's thread with its caller, after the jobs
    /// before it. The dispatcher's worker runs its whole loop this way, so
    /// its calls are inline; an error means the thread has stopped.
    pub async fn serve<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Caller) -> R + Send + 'static,
    ) -> Result<R, CallError> {
        self.submit(f)?.await.map_err(|_| self.gone())
    }

    /// [`serve`](Self::serve) for benchmarks and tools without a runtime.
    pub fn serve_blocking<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Caller) -> R + Send + 'static,
    ) -> Result<R, CallError> {
        self.submit(f)?.blocking_recv().map_err(|_| self.gone())
    }

    pub async fn register(&self, config: String) -> Result<Registration, CallError> {
        self.serve(move |c| c.register(config)).await?
    }

    /// The scope (kinds, reads, indexes, writes, grant) the calls from now
    /// on run with.
    pub fn set_scope(&self, scope: Arc<PluginScope>) {
        *self.scope.scope.lock() = Some(scope);
        self.scope
            .changed
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Runs one handler call on the instance's thread; returns what it left
    /// and the call's duration.
    pub async fn handle(&self, delta: CallDelta) -> CallOutcome {
        self.serve(move |c| c.handle(&delta))
            .await
            .unwrap_or_else(|e| (Err(e), Duration::ZERO))
    }

    /// Blocking variant for benchmarks and tools without a runtime.
    pub fn handle_blocking(&self, delta: CallDelta) -> CallOutcome {
        self.serve_blocking(move |c| c.handle(&delta))
            .unwrap_or_else(|e| (Err(e), Duration::ZERO))
    }
}
