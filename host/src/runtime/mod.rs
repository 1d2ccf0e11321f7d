//! The plugin runtime: one shared wasmtime Engine per compile tier,
//! components checked against our WIT world, pre-instantiated, and run as
//! actors.

pub mod access;
pub mod actor;
pub mod artifact_key;
pub mod bindings;
pub mod cache;
mod common;
pub mod compiler;
pub mod deadline;
pub mod engine;
pub mod grants;
pub mod harness;
pub mod host;
pub mod internal_events;
pub mod language;
pub mod limits;
pub mod manifest;
pub mod network;
pub mod stdio;
pub mod tenants;
pub mod tier;
pub mod v0_1;
pub mod v0_2;

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::{HasSelf, Linker};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder};

use crate::informer::DeltaType;
use crate::kind::KindRef;
pub use actor::{Actor, CallDelta, CallError, CallOutcome, Caller, Handled, LastFailure};
use bindings::{Contract, HANDLER_INTERFACE};
pub use compiler::{CompileError, Compiler, Priority};
pub use engine::{CompileSource, Content, EngineOptions, Obtained, WasmEngine};
use host::HostState;
pub use manifest::Manifest;
use tier::Tiered;
pub use tier::{FastFirst, FastFirstCompile, Tier};

/// Why a plugin file could not be loaded. Each names the cause and what to do.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("the file is empty or truncated (is it still being written?)")]
    Truncated,
    #[error("not a WebAssembly file (no \\0asm header)")]
    NotWasm,
    #[error(
        "this is a core WebAssembly module, not a component: build for wasm32-wasip2, or make it one with `kubewasm componentize` (C, Go)"
    )]
    CoreModule,
    #[error("the component is invalid or truncated: {0}")]
    Invalid(String),
    #[error(
        "the component was built for WIT kubewasm:plugin@{found}, this host runs @0.1.x and @0.2.x: rebuild it against wit/v0.2.0"
    )]
    WrongVersion { found: String },
    #[error(
        "the component does not export {HANDLER_INTERFACE}@0.1.x or @0.2.x: it was not built for the kubewasm plugin world (exports: {exports})"
    )]
    NotAPlugin { exports: String },
    #[error("the component needs imports this host does not provide: {0}")]
    Imports(String),
    #[error("the plugin's register call failed: {0}")]
    Register(String),
    #[error("the plugin's registration is invalid: {0}")]
    BadRegistration(String),
    #[error(
        "the plugin's registration names {0}, which the cluster does not serve: install its CRD (or fix the name); the host retries this plugin when the cluster's kinds change"
    )]
    UnknownKind(String),
    #[error("the plugin asks for more than its sidecar grants: {0}")]
    NotGranted(String),
    #[error("{0}")]
    Manifest(#[from] manifest::ManifestError),
    #[error("cannot start the plugin: {0}")]
    Start(String),
    #[error("{0}")]
    OverCeiling(String),
    /// A tenant namespace's quota (plugins, memory) is spent.
    #[error("{0}")]
    OverQuota(String),
    /// Compiling failed for a reason other than the component itself.
    #[error("{0}")]
    Compile(CompileError),
    /// Another source (the plugin folder, a Plugin object) serves or loads
    /// a plugin of this name: one name, one source, so neither silently
    /// replaces the other's plugin.
    #[error(
        "the plugin name {name} is taken by {holder}, which keeps serving it: rename one of them (or remove {holder}); this one loads once the name is free"
    )]
    NameTaken { name: String, holder: String },
}

impl From<CompileError> for LoadError {
    /// The component's own faults keep the errors they always had; the
    /// compiler's are their own.
    fn from(e: CompileError) -> Self {
        match e {
            CompileError::Truncated => LoadError::Truncated,
            CompileError::Invalid { message } => LoadError::Invalid(message),
            other => LoadError::Compile(other),
        }
    }
}

impl LoadError {
    /// The host is shutting down: not the plugin's fault.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, LoadError::Compile(CompileError::Cancelled))
    }
}

/// The shared engines and linkers.
#[derive(Clone)]
pub struct Runtime {
    engine: WasmEngine,
    linker: Arc<Linker<HostState>>,
    /// The fast tier, built when a plugin first needs it.
    fast: Arc<parking_lot::Mutex<Option<Tiered>>>,
    /// What no sidecar's limits and grants may exceed.
    ceiling: Arc<limits::Ceiling>,
    /// The memory the loaded plugin versions reserve, against the
    /// ceiling's `totalMemory`.
    budget: Arc<limits::MemoryBudget>,
    /// Tenants' (NamespacedPlugins') own ceiling and quotas: they never
    /// draw on `ceiling` or `budget`.
    tenants: Arc<tenants::TenantPolicy>,
    telemetry: Option<crate::telemetry::Telemetry>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("engine", &self.engine)
            .finish()
    }
}

/// A component pre-instantiated for the contract it was built for.
pub enum Pre {
    V0_1(bindings::v0_1::PluginPre<HostState>),
    V0_2(bindings::v0_2::PluginPre<HostState>),
}

/// A compiled, type-checked, pre-instantiated plugin version.
pub struct Prepared {
    pub name: Arc<str>,
    /// The first 12 hex digits of the component's SHA-256: what the plugin
    /// and its Events are told its version is.
    pub version: Arc<str>,
    /// The source language, when the component's producers say.
    pub language: Option<Arc<str>>,
    pub engine: WasmEngine,
    pub pre: Pre,
    pub manifest: Manifest,
    pub compile_source: CompileSource,
    /// Which compiler made the code (`engine` is that tier's).
    pub tier: Tier,
    /// The component's SHA-256 (hex).
    pub digest: Arc<str>,
    pub compile_time: Duration,
    /// Instances created so far (first ones and replacements after traps).
    pub instantiations: std::sync::atomic::AtomicU64,
    /// Calls failed on each cap of the sidecar's limits.
    pub cap_counters: limits::CapCounters,
    /// What each instance's store may create (the host's ceiling).
    pub store_caps: limits::StoreCaps,
    /// The granted directories, opened at admission: each instance gets
    /// these, never their paths again (see [`grants::HeldDir`]).
    pub dirs: Vec<grants::HeldDir>,
    /// A test harness's clock, log capture and seed (`kubewasm test`);
    /// `None` in the host.
    pub harness: Option<harness::Harness>,
    /// Keeps the compiled artifact this version maps from eviction.
    _pin: Option<cache::Pin>,
    /// This version's share of the host's memory budget.
    _reservation: limits::Reservation,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Prepared {
    /// Runs this version's instances under `harness` (created from now on).
    #[must_use]
    pub fn with_harness(mut self, harness: harness::Harness) -> Self {
        self.harness = Some(harness);
        self
    }

    /// The WASI context: nothing unless the manifest grants it (the grants
    /// were checked against the host's ceiling at load, and its directories
    /// opened then: each instance gets those opened directories). Without
    /// a stdio grant, stdout and stderr go to a bounded capture the actor
    /// logs.
    pub fn wasi_ctx(&self) -> Result<(WasiCtx, Option<stdio::GuestOutput>), String> {
        let grants = &self.manifest.grants;
        let mut b = WasiCtxBuilder::new();
        for var in &grants.env {
            if let Ok(value) = std::env::var(var) {
                b.env(var, &value);
            }
        }
        let mut output = None;
        if grants.stdio {
            b.inherit_stdout().inherit_stderr();
        } else {
            let capture = stdio::GuestOutput::default();
            b.stdout(capture.clone()).stderr(capture.clone());
            output = Some(capture);
        }
        if !grants.network.allow.is_empty() {
            network::NetworkPolicy::resolve(&self.name, &grants.network).install(&mut b);
        }
        for dir in &self.dirs {
            dir.preopen(&mut b).map_err(|e| e.to_string())?;
        }
        if let Some(h) = &self.harness {
            use rand::SeedableRng;
            let seed = h.seed();
            b.wall_clock(h.wall_clock())
                .secure_random(rand::rngs::StdRng::seed_from_u64(seed))
                .insecure_random(rand::rngs::StdRng::seed_from_u64(!seed))
                .insecure_random_seed(u128::from(seed));
        }
        Ok((b.build(), output))
    }
}

/// A sidecar admitted under its ceiling ([`Runtime::admit`]).
#[derive(Debug)]
pub struct Admitted {
    /// The manifest, its directory grants named by their canonical paths.
    pub manifest: Manifest,
    /// Its memory x concurrency, reserved in the host's (or its tenant
    /// namespace's) budget.
    pub reservation: limits::Reservation,
    /// Its granted directories, opened.
    pub dirs: Vec<grants::HeldDir>,
}

/// What the plugin asked for at registration.
#[derive(Debug, Clone, PartialEq)]
pub struct Registration {
    pub subscriptions: Vec<SubscriptionSpec>,
    pub writes: Vec<KindRef>,
    pub indexes: Vec<IndexSpec>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SubscriptionSpec {
    pub kind: KindRef,
    pub namespace: Option<String>,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub deltas: Vec<DeltaType>,
    pub fields: Vec<String>,
    pub resync: Resync,
}

/// How often a subscription replays its cached objects as `resync` deltas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resync {
    /// Never (0.1 without a period; 0.2's `some(0)`).
    Off,
    /// The host's default period (0.2 without a period):
    /// `dispatch.defaultResync`, [`DEFAULT_RESYNC`] unless set.
    HostDefault,
    Every(Duration),
}

impl Resync {
    /// The period, given the host's default (`None`: no resync).
    pub fn period(self, host_default: Option<Duration>) -> Option<Duration> {
        match self {
            Resync::Off => None,
            Resync::HostDefault => host_default,
            Resync::Every(d) => Some(d),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct IndexSpec {
    pub name: String,
    pub kind: KindRef,
    pub pointer: String,
}

/// The resync period of a 0.2 subscription that does not set one, unless
/// the host config's `dispatch.defaultResync` says otherwise (0.1
/// subscriptions without one never resync): controller-runtime's default
/// sync period.
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(10 * 3600);

fn nonempty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.trim().is_empty())
}

impl Registration {
    fn from_v0_1(r: bindings::v0_1::exports::kubewasm::plugin::handler::Registration) -> Self {
        Self {
            subscriptions: r
                .subscriptions
                .into_iter()
                .map(|s| SubscriptionSpec {
                    kind: v0_1::kind_ref(&s.kind),
                    namespace: nonempty(s.namespace),
                    label_selector: nonempty(s.label_selector),
                    field_selector: nonempty(s.field_selector),
                    deltas: s.deltas.into_iter().map(v0_1::from_delta_type).collect(),
                    fields: s.fields,
                    resync: match s.resync_seconds {
                        None | Some(0) => Resync::Off,
                        Some(s) => Resync::Every(Duration::from_secs(s.into())),
                    },
                })
                .collect(),
            writes: r.writes.iter().map(v0_1::kind_ref).collect(),
            indexes: r
                .indexes
                .into_iter()
                .map(|i| IndexSpec {
                    name: i.name,
                    kind: v0_1::kind_ref(&i.kind),
                    pointer: i.pointer,
                })
                .collect(),
        }
    }

    fn from_v0_2(r: bindings::v0_2::exports::kubewasm::plugin::handler::Registration) -> Self {
        Self {
            subscriptions: r
                .subscriptions
                .into_iter()
                .map(|s| SubscriptionSpec {
                    kind: v0_2::kind_ref(&s.kind),
                    namespace: nonempty(s.namespace),
                    label_selector: nonempty(s.label_selector),
                    field_selector: nonempty(s.field_selector),
                    deltas: s
                        .deltas
                        .into_iter()
                        .filter_map(v0_2::from_delta_type)
                        .collect(),
                    fields: s.fields,
                    resync: match s.resync_seconds {
                        None => Resync::HostDefault,
                        Some(0) => Resync::Off,
                        Some(s) => Resync::Every(Duration::from_secs(s.into())),
                    },
                })
                .collect(),
            writes: r.writes.iter().map(v0_2::kind_ref).collect(),
            indexes: r
                .indexes
                .into_iter()
                .map(|i| IndexSpec {
                    name: i.name,
                    kind: v0_2::kind_ref(&i.kind),
                    pointer: i.pointer,
                })
                .collect(),
        }
    }
}

const COMPONENT_LAYER: [u8; 4] = [0x0d, 0x00, 0x01, 0x00];
const CORE_VERSION: [u8; 4] = [0x01, 0x00, 0x00, 0x00];

impl Runtime {
    pub fn new(options: EngineOptions) -> Result<Self, engine::EngineError> {
        let engine = WasmEngine::new(options)?;
        let linker = host_linker(&engine)?;
        let mut runtime = Self {
            engine,
            linker: Arc::new(linker),
            fast: Arc::default(),
            ceiling: Arc::default(),
            budget: Arc::default(),
            tenants: Arc::default(),
            telemetry: None,
        };
        runtime.install_ceiling(limits::Ceiling::default());
        Ok(runtime)
    }

    /// Sets the tenants' ceiling and quotas (a manifest with
    /// [`Manifest::tenant`] set is admitted against them alone).
    #[must_use]
    pub fn with_tenants(mut self, policy: tenants::TenantPolicy) -> Self {
        self.tenants = Arc::new(policy);
        self
    }

    /// The tenants' ceiling and quotas in force.
    pub fn tenants(&self) -> &Arc<tenants::TenantPolicy> {
        &self.tenants
    }

    /// The ceiling a plugin with `manifest` is held to: the tenants' for a
    /// tenant's, else the host's.
    fn ceiling_for(&self, manifest: &Manifest) -> &limits::Ceiling {
        match manifest.tenant {
            Some(_) => self.tenants.ceiling(),
            None => &self.ceiling,
        }
    }

    /// Checks `manifest`'s limits against its ceiling ([`Self::ceiling_for`]).
    fn check_limits(&self, manifest: &Manifest) -> Result<(), LoadError> {
        self.ceiling_for(manifest)
            .check(&manifest.limits)
            .map_err(|e| match manifest.tenant {
                Some(_) => LoadError::OverCeiling(tenants::as_tenants(&e)),
                None => LoadError::OverCeiling(e),
            })
    }

    /// Sets the host-wide ceiling on sidecar limits and grants (and a fresh
    /// memory budget under it).
    #[must_use]
    pub fn with_ceiling(mut self, ceiling: limits::Ceiling) -> Self {
        self.install_ceiling(ceiling);
        self
    }

    fn install_ceiling(&mut self, mut ceiling: limits::Ceiling) {
        // The engine's own files are never granted.
        let cache = self.engine.cache().map(|c| c.dir().to_owned());
        let key = self.engine.artifact_key_file();
        ceiling
            .grants
            .protect(cache.into_iter().chain(key).map(|p| grants::absolute(&p)));
        self.budget = Arc::new(limits::MemoryBudget::new(ceiling.total_memory));
        self.ceiling = Arc::new(ceiling);
    }

    /// The ceiling in force.
    pub fn ceiling(&self) -> &limits::Ceiling {
        &self.ceiling
    }

    /// Counts calls failed on a cap in `telemetry`'s metrics.
    #[must_use]
    pub fn with_telemetry(mut self, telemetry: crate::telemetry::Telemetry) -> Self {
        self.telemetry = Some(telemetry);
        self
    }

    /// Abandons compiles (killing compiler children) once `shutdown` is
    /// cancelled.
    #[must_use]
    pub fn with_shutdown(mut self, shutdown: tokio_util::sync::CancellationToken) -> Self {
        self.engine = self.engine.with_shutdown(shutdown);
        self
    }

    pub fn engine(&self) -> &WasmEngine {
        &self.engine
    }

    /// Whether the compile cache holds an artifact of the content whose
    /// digest is `digest` (it loads in well under a millisecond, unless it
    /// turns out corrupt).
    pub fn is_compiled(&self, digest: &str) -> bool {
        self.engine.cache().is_some_and(|c| c.contains(digest))
    }

    /// Checks, compiles (or loads from cache) and pre-instantiates a
    /// plugin on the calling thread, compiling in this process (always
    /// optimized code).
    pub fn prepare(
        &self,
        name: &str,
        bytes: &[u8],
        manifest: Manifest,
    ) -> Result<Prepared, LoadError> {
        let admitted = self.admit(name, manifest)?;
        self.check_file(bytes, &admitted.manifest)?;
        let language = language::detect(bytes);
        let start = Instant::now();
        let obtained = self.engine.obtain_blocking(name, bytes)?;
        self.finish(name, obtained, start.elapsed(), admitted, language)
    }

    /// [`prepare`](Self::prepare) off the async threads, compiling with
    /// the configured compiler (a child process for `run`). A component
    /// whose optimized code is not cached may come back compiled by the
    /// fast tier (see [`tier`]; its [`Prepared::tier`] says).
    pub async fn prepare_async(
        &self,
        name: &str,
        content: impl Into<Content>,
        manifest: Manifest,
    ) -> Result<Prepared, LoadError> {
        self.prepare_tiered(name, content.into(), manifest, false)
            .await
    }

    /// [`prepare_async`](Self::prepare_async) with optimized code always,
    /// compiled in the background (a tier-up: the fast tier serves
    /// meanwhile).
    pub async fn prepare_optimized(
        &self,
        name: &str,
        content: impl Into<Content>,
        manifest: Manifest,
    ) -> Result<Prepared, LoadError> {
        self.prepare_tiered(name, content.into(), manifest, true)
            .await
    }

    async fn prepare_tiered(
        &self,
        name: &str,
        content: Content,
        manifest: Manifest,
        tier_up: bool,
    ) -> Result<Prepared, LoadError> {
        let admitted = self.admit(name, manifest)?;
        self.check_file(content.bytes(), &admitted.manifest)?;
        let language = language::detect(content.bytes());
        let start = Instant::now();
        let obtained = if tier_up {
            self.engine
                .obtain_with(name, content, Priority::Background)
                .await?
        } else {
            self.obtain_first(name, content).await?
        };
        let compile_time = start.elapsed();
        let (runtime, name) = (self.clone(), name.to_owned());
        tokio::task::spawn_blocking(move || {
            runtime.finish(&name, obtained, compile_time, admitted, language)
        })
        .await
        .map_err(|e| LoadError::Start(e.to_string()))?
    }

    /// `base`'s component under another sidecar (`kubewasm test` runs
    /// cases with their own): the sidecar admitted and the component
    /// pre-instantiated again; nothing is read or compiled.
    pub fn prepare_like(&self, base: &Prepared, manifest: Manifest) -> Result<Prepared, LoadError> {
        let Admitted {
            manifest,
            reservation,
            dirs,
        } = self.admit(&base.name, manifest)?;
        let component = match &base.pre {
            Pre::V0_1(p) => p.instance_pre().component().clone(),
            Pre::V0_2(p) => p.instance_pre().component().clone(),
        };
        let tiered = self.tiered(base.tier)?;
        let (_, pre) = Self::pre(&tiered, &component)?;
        let store_caps = self.ceiling_for(&manifest).store_caps();
        Ok(Prepared {
            name: base.name.clone(),
            version: base.version.clone(),
            language: base.language.clone(),
            engine: tiered.engine.clone(),
            pre,
            manifest,
            compile_source: base.compile_source,
            tier: base.tier,
            digest: base.digest.clone(),
            compile_time: Duration::ZERO,
            instantiations: std::sync::atomic::AtomicU64::new(0),
            cap_counters: limits::CapCounters::default(),
            store_caps,
            dirs,
            harness: base.harness.clone(),
            _pin: None,
            _reservation: reservation,
        })
    }

    /// The sidecar checked against the host's ceiling before anything is
    /// compiled: its limits, its grants (directory grants come back
    /// opened, and the manifest names their canonical paths), and its
    /// memory x concurrency reserved in the host's memory budget.
    pub fn admit(&self, name: &str, mut manifest: Manifest) -> Result<Admitted, LoadError> {
        if let Some(namespace) = manifest.tenant.clone() {
            self.check_limits(&manifest)?;
            let dirs = self
                .tenants
                .ceiling()
                .grants
                .check(&manifest.grants)
                .map_err(|e| LoadError::OverCeiling(tenants::as_tenants(&e)))?;
            manifest.grants.dirs = dirs.iter().map(grants::HeldDir::grant).collect();
            let reservation = self
                .tenants
                .admit(&namespace, name, &manifest.limits)
                .map_err(|e| match e {
                    tenants::Refused::Ceiling(e) => LoadError::OverCeiling(e),
                    tenants::Refused::Quota(e) => LoadError::OverQuota(e),
                })?;
            return Ok(Admitted {
                manifest,
                reservation,
                dirs,
            });
        }
        self.ceiling
            .check(&manifest.limits)
            .map_err(LoadError::OverCeiling)?;
        let dirs = self
            .ceiling
            .grants
            .check(&manifest.grants)
            .map_err(LoadError::OverCeiling)?;
        manifest.grants.dirs = dirs.iter().map(grants::HeldDir::grant).collect();
        let reservation = self
            .budget
            .reserve(name, limits::plugin_memory(&manifest.limits))
            .map_err(LoadError::OverCeiling)?;
        Ok(Admitted {
            manifest,
            reservation,
            dirs,
        })
    }

    /// What can be refused before compiling: the sidecar's limits and the
    /// file's header.
    pub fn check_file(&self, bytes: &[u8], manifest: &Manifest) -> Result<(), LoadError> {
        self.check_limits(manifest)?;
        if bytes.len() < 8 {
            return Err(LoadError::Truncated);
        }
        if &bytes[0..4] != b"\0asm" {
            return Err(LoadError::NotWasm);
        }
        if bytes[4..8] == CORE_VERSION {
            return Err(LoadError::CoreModule);
        }
        if bytes[4..8] != COMPONENT_LAYER {
            return Err(LoadError::Invalid(format!(
                "unknown WebAssembly encoding version {:02x?}",
                &bytes[4..8]
            )));
        }
        Ok(())
    }

    /// Checks that a compiled component is a plugin this host runs (what
    /// `kubewasm compile` asks before shipping its artifact).
    pub fn check(&self, component: &wasmtime::component::Component) -> Result<Contract, LoadError> {
        Self::pre(&self.optimized(), component).map(|(contract, _)| contract)
    }

    /// The first version of the handler interface the component exports
    /// that the host knows.
    fn contract(
        engine: &WasmEngine,
        component: &wasmtime::component::Component,
    ) -> Result<Contract, LoadError> {
        let ty = component.component_type();
        let exports: Vec<String> = ty
            .exports(engine.engine())
            .map(|(n, _)| n.to_owned())
            .collect();
        let handler_prefix = format!("{HANDLER_INTERFACE}@");
        let found: Vec<&str> = exports
            .iter()
            .filter_map(|e| e.strip_prefix(&handler_prefix))
            .collect();
        let Some(contract) = found.iter().find_map(|v| Contract::for_version(v)) else {
            if let Some(other) = found.first() {
                return Err(LoadError::WrongVersion {
                    found: (*other).to_owned(),
                });
            }
            return Err(LoadError::NotAPlugin {
                exports: if exports.is_empty() {
                    "none".into()
                } else {
                    exports.join(", ")
                },
            });
        };
        Ok(contract)
    }

    /// The component pre-instantiated for its contract on its tier's
    /// linker: every import linked, the exports typed.
    fn pre(
        tiered: &Tiered,
        component: &wasmtime::component::Component,
    ) -> Result<(Contract, Pre), LoadError> {
        let contract = Self::contract(&tiered.engine, component)?;
        let pre = tiered
            .linker
            .instantiate_pre(component)
            .map_err(|e| LoadError::Imports(format!("{e:#}")))?;
        let imports = |e: wasmtime::Error| LoadError::Imports(format!("{e:#}"));
        let pre = match contract {
            Contract::V0_1 => Pre::V0_1(bindings::v0_1::PluginPre::new(pre).map_err(imports)?),
            Contract::V0_2 => Pre::V0_2(bindings::v0_2::PluginPre::new(pre).map_err(imports)?),
        };
        Ok((contract, pre))
    }

    /// Type-checks and pre-instantiates an obtained component on the tier
    /// that compiled it.
    fn finish(
        &self,
        name: &str,
        obtained: Obtained,
        compile_time: Duration,
        admitted: Admitted,
        language: Option<String>,
    ) -> Result<Prepared, LoadError> {
        let Admitted {
            manifest,
            reservation,
            dirs,
        } = admitted;
        let Obtained {
            component,
            source: compile_source,
            tier,
            digest,
            pin,
        } = obtained;
        let tiered = self.tiered(tier)?;
        let (contract, pre) = Self::pre(&tiered, &component)?;
        let version = digest.get(..12).unwrap_or(&digest).to_owned();
        tracing::debug!(
            plugin = name,
            version,
            contract = contract.version(),
            %tier,
            "component checked"
        );
        let store_caps = self.ceiling_for(&manifest).store_caps();
        Ok(Prepared {
            name: Arc::from(name),
            version: Arc::from(version),
            language: language.map(Arc::from),
            engine: tiered.engine.clone(),
            pre,
            manifest,
            compile_source,
            tier,
            digest: Arc::from(digest),
            compile_time,
            instantiations: std::sync::atomic::AtomicU64::new(0),
            cap_counters: self
                .telemetry
                .as_ref()
                .map(|t| t.metrics().plugin_caps(name))
                .unwrap_or_default(),
            store_caps,
            dirs,
            harness: None,
            _pin: pin,
            _reservation: reservation,
        })
    }
}

/// The host's imports (WASI, the plugin worlds, deadlines, the guarded name
/// lookup) for `engine`'s components.
fn host_linker(engine: &WasmEngine) -> Result<Linker<HostState>, engine::EngineError> {
    let config = |e: wasmtime::Error| engine::EngineError::Config(format!("{e:#}"));
    let mut linker = Linker::<HostState>::new(engine.engine());
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(config)?;
    bindings::v0_1::Plugin::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
        .map_err(config)?;
    bindings::v0_2::Plugin::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
        .map_err(config)?;
    deadline::add_to_linker(&mut linker).map_err(config)?;
    // wasmtime-wasi's name lookup allows every name or none: a guest
    // may look up only the names its grant lists.
    linker.allow_shadowing(true);
    wasmtime_wasi::p2::bindings::sockets::ip_name_lookup::add_to_linker::<
        HostState,
        network::GuardedLookup,
    >(&mut linker, HostState::lookup_view)
    .map_err(config)?;
    linker.allow_shadowing(false);
    Ok(linker)
}
