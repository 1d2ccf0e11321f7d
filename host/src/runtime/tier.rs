//! Tiered compilation. Cranelift's optimized code is what plugins should
//! run, but compiling a JavaScript or Python component with it takes 4-20 s
//! of CPU (the 19 MB Python config-replicator: 19 s on this 2-core machine);
//! Winch, wasmtime's baseline compiler, compiles the same in a fifth of the
//! time (3.5 s) into code that handles a delta 1.0-1.7x slower. So a
//! plugin whose optimized artifact is not in the compile cache is first
//! compiled by Winch and served at once; the manager then compiles the
//! optimized code in the background and swaps it in (see
//! [`crate::manager`]), and the compile cache keeps it, so the next start
//! maps optimized code directly. Each tier has its own engine (the
//! compiler is an engine setting), so its artifacts have their own engine
//! key in the cache.

use std::str::FromStr;
use std::sync::Arc;

use serde::Deserialize;
use wasmtime::component::Linker;

use super::compiler::CompileError;
use super::engine::{self, Content, Obtained, WasmEngine};
use super::host::HostState;
use super::{LoadError, Runtime, host_linker};

/// Which compiler made the code a plugin version runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Tier {
    /// Cranelift, optimizing for speed: what every plugin ends up running.
    #[default]
    Optimized,
    /// Winch, a single-pass baseline compiler: quick to compile, slower
    /// code; serves until the optimized code is swapped in.
    Fast,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Optimized => "optimized",
            Tier::Fast => "fast",
        }
    }

    /// The wasmtime compiler of this tier.
    pub(crate) fn strategy(self) -> wasmtime::Strategy {
        match self {
            Tier::Optimized => wasmtime::Strategy::Cranelift,
            Tier::Fast => wasmtime::Strategy::Winch,
        }
    }
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tier name other than `optimized` or `fast`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown compile tier {0:?}: expected optimized or fast")]
pub struct UnknownTier(String);

impl FromStr for Tier {
    type Err = UnknownTier;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "optimized" => Ok(Tier::Optimized),
            "fast" => Ok(Tier::Fast),
            other => Err(UnknownTier(other.to_owned())),
        }
    }
}

/// The host setting `fastFirstCompile` (flag `--fast-first-compile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum FastFirstCompile {
    /// Components of 1 MiB or more whose optimized artifact is not cached
    /// are served by the fast tier first.
    #[default]
    Auto,
    /// Every plugin waits for its optimized code.
    Off,
}

/// The size from which `auto` serves a component by the fast tier first:
/// below it (every Rust plugin so far, 0.1-0.7 MB) the optimized compile
/// takes well under a second, not worth a second compile and a swap; the
/// JavaScript (1.8 MB), Go (3.6 MB) and Python (19 MB) config-replicators
/// are above it.
pub const FAST_FIRST_MIN_BYTES: u64 = 1 << 20;

/// When a plugin not yet compiled is served by the fast tier first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FastFirst {
    Off,
    /// For components of `min_bytes` or more.
    Auto {
        min_bytes: u64,
    },
}

impl Default for FastFirst {
    fn default() -> Self {
        FastFirstCompile::default().into()
    }
}

impl From<FastFirstCompile> for FastFirst {
    fn from(setting: FastFirstCompile) -> Self {
        match setting {
            FastFirstCompile::Auto => FastFirst::Auto {
                min_bytes: FAST_FIRST_MIN_BYTES,
            },
            FastFirstCompile::Off => FastFirst::Off,
        }
    }
}

impl FastFirst {
    /// Whether a component of `size` bytes is served by the fast tier while
    /// its optimized code compiles (asked only when that code is not in
    /// the compile cache).
    pub fn applies(self, size: usize) -> bool {
        match self {
            FastFirst::Off => false,
            FastFirst::Auto { min_bytes } => size as u64 >= min_bytes,
        }
    }
}

/// A tier's engine and the linker of the host's imports for it.
#[derive(Clone)]
pub(super) struct Tiered {
    pub(super) engine: WasmEngine,
    pub(super) linker: Arc<Linker<HostState>>,
}

/// The tiers of the runtime: the optimized one always there, the fast one
/// built when a plugin first needs it.
impl Runtime {
    pub(super) fn optimized(&self) -> Tiered {
        Tiered {
            engine: self.engine.clone(),
            linker: self.linker.clone(),
        }
    }

    /// The fast tier's engine and linker, built on first use.
    pub(super) fn fast_tier(&self) -> Result<Tiered, engine::EngineError> {
        let mut slot = self.fast.lock();
        if let Some(t) = slot.as_ref() {
            return Ok(t.clone());
        }
        let engine = self.engine.sibling(Tier::Fast)?;
        let linker = Arc::new(host_linker(&engine)?);
        let tiered = Tiered { engine, linker };
        *slot = Some(tiered.clone());
        Ok(tiered)
    }

    /// Deletes the fast tier's cached artifact of `digest` (optimized code
    /// serves it now).
    pub fn forget_fast_artifact(&self, digest: &str) {
        if let Some(fast) = self.fast.lock().as_ref() {
            fast.engine.forget(digest);
        }
    }

    /// The component of `content` for its first version: optimized code if
    /// cached or if the fast tier does not apply; else the fast tier's
    /// (cached or compiled), or optimized code if the fast tier cannot
    /// compile it (Winch lacks a proposal the component uses, say).
    pub(super) async fn obtain_first(
        &self,
        name: &str,
        content: Content,
    ) -> Result<Obtained, CompileError> {
        if !self.engine.fast_first().applies(content.bytes().len()) {
            return self.engine.obtain(name, content).await;
        }
        let (content, _, hit) = self.engine.lookup(content).await?;
        if let Some(hit) = hit {
            return Ok(hit);
        }
        match self.fast_tier() {
            Ok(fast) => match fast.engine.obtain(name, content.clone()).await {
                Ok(obtained) => return Ok(obtained),
                Err(CompileError::Cancelled) => return Err(CompileError::Cancelled),
                Err(e) => {
                    tracing::warn!(plugin = name, error = %e, "the fast tier cannot compile the plugin; waiting for optimized code");
                }
            },
            Err(e) => {
                tracing::warn!(plugin = name, error = %e, "cannot start the fast tier's engine; waiting for optimized code");
            }
        }
        self.engine.obtain(name, content).await
    }

    /// The engine and linker of `tier` (the fast tier's exists once it
    /// compiled or loaded something).
    pub(super) fn tiered(&self, tier: Tier) -> Result<Tiered, LoadError> {
        match tier {
            Tier::Optimized => Ok(self.optimized()),
            Tier::Fast => self
                .fast_tier()
                .map_err(|e| LoadError::Start(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_serves_large_components_fast_first_and_off_none() {
        let auto = FastFirst::from(FastFirstCompile::Auto);
        assert!(!auto.applies(146_116), "a Rust plugin waits for Cranelift");
        assert!(auto.applies(1_889_764), "the JavaScript replicator");
        assert!(auto.applies(19_190_429), "the Python replicator");
        assert!(auto.applies(FAST_FIRST_MIN_BYTES as usize));
        assert!(!FastFirst::Off.applies(19_190_429));
        assert!(FastFirst::Auto { min_bytes: 0 }.applies(8));
        assert_eq!(FastFirst::default(), auto);
    }

    #[test]
    fn tiers_round_trip_through_their_names() {
        for tier in [Tier::Optimized, Tier::Fast] {
            assert_eq!(tier.as_str().parse::<Tier>(), Ok(tier));
        }
        let e = "winch".parse::<Tier>().unwrap_err();
        assert!(e.to_string().contains("optimized or fast"), "{e}");
    }

    #[test]
    fn the_setting_reads_as_camel_case() {
        let auto: FastFirstCompile = serde_yaml_ng::from_str("auto").unwrap();
        let off: FastFirstCompile = serde_yaml_ng::from_str("off").unwrap();
        assert_eq!((auto, off), (FastFirstCompile::Auto, FastFirstCompile::Off));
        assert!(serde_yaml_ng::from_str::<FastFirstCompile>("always").is_err());
    }
}

#[cfg(test)]
mod runtime_tests {
    use super::*;
    use crate::runtime::{CompileSource, EngineOptions, Manifest};

    /// The smallest valid component: just the header.
    const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";

    /// A component whose core module makes a tail call (`return_call`),
    /// which Cranelift compiles and Winch does not support.
    const TAIL_CALL_COMPONENT: &[u8] = &[
        0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00, // component header
        0x01, 0x1a, // core module section, 26 bytes
        0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // module header
        0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type 0: [] -> []
        0x03, 0x02, 0x01, 0x00, // func 0: type 0
        0x0a, 0x06, 0x01, 0x04, 0x00, 0x12, 0x00, 0x0b, // body: return_call 0
    ];

    fn runtime(cache: &std::path::Path, fast_first: FastFirst) -> Runtime {
        Runtime::new(EngineOptions {
            epoch_deadlines: false,
            cache_dir: Some(cache.to_owned()),
            fast_first,
            ..EngineOptions::default()
        })
        .unwrap()
    }

    async fn first(runtime: &Runtime, bytes: &[u8]) -> (Tier, CompileSource, String) {
        let obtained = runtime
            .obtain_first("p", Content::from(bytes.to_vec()))
            .await
            .unwrap();
        (obtained.tier, obtained.source, obtained.digest)
    }

    #[tokio::test]
    async fn code_not_yet_compiled_is_the_fast_tiers_until_optimized_code_is_cached() {
        use CompileSource::{Cached, Compiled};
        let cache = tempfile::tempdir().unwrap();
        let rt = runtime(cache.path(), FastFirst::Auto { min_bytes: 0 });
        let (tier, source, digest) = first(&rt, EMPTY_COMPONENT).await;
        assert_eq!((tier, source), (Tier::Fast, Compiled));
        // A restart before the tier-up maps the fast tier's artifact.
        let again = first(&rt, EMPTY_COMPONENT).await;
        assert_eq!((again.0, again.1), (Tier::Fast, Cached));
        let fast_artifact = rt
            .fast
            .lock()
            .as_ref()
            .unwrap()
            .engine
            .cache()
            .unwrap()
            .artifact(&digest);
        let optimized_artifact = rt.engine.cache().unwrap().artifact(&digest);
        assert_ne!(fast_artifact, optimized_artifact);
        assert!(fast_artifact.exists() && !optimized_artifact.exists());
        // The tier-up's compile caches optimized code, which the next load
        // maps; the fast artifact can go.
        let optimized = rt
            .prepare_tiered(
                "p",
                EMPTY_COMPONENT.to_vec().into(),
                Manifest::default(),
                true,
            )
            .await;
        assert!(
            matches!(optimized, Err(LoadError::NotAPlugin { .. })),
            "{optimized:?}"
        );
        assert!(optimized_artifact.exists());
        rt.forget_fast_artifact(&digest);
        assert!(!fast_artifact.exists());
        assert_eq!(
            (
                first(&rt, EMPTY_COMPONENT).await.0,
                first(&rt, EMPTY_COMPONENT).await.1
            ),
            (Tier::Optimized, Cached)
        );
    }

    #[tokio::test]
    async fn small_components_and_fast_first_off_wait_for_optimized_code() {
        let cache = tempfile::tempdir().unwrap();
        let small = runtime(cache.path(), FastFirst::Auto { min_bytes: 9 });
        assert_eq!(first(&small, EMPTY_COMPONENT).await.0, Tier::Optimized);
        let cache = tempfile::tempdir().unwrap();
        let off = runtime(cache.path(), FastFirst::Off);
        assert_eq!(first(&off, EMPTY_COMPONENT).await.0, Tier::Optimized);
        assert!(off.fast.lock().is_none(), "no fast engine was built");
    }

    #[tokio::test]
    async fn what_the_fast_tier_cannot_compile_waits_for_optimized_code() {
        let cache = tempfile::tempdir().unwrap();
        let rt = runtime(cache.path(), FastFirst::Auto { min_bytes: 0 });
        let fast = rt.fast_tier().unwrap();
        assert!(
            fast.engine
                .obtain("p", TAIL_CALL_COMPONENT.to_vec())
                .await
                .is_err(),
            "Winch compiled a tail call"
        );
        let (tier, source, _) = first(&rt, TAIL_CALL_COMPONENT).await;
        assert_eq!((tier, source), (Tier::Optimized, CompileSource::Compiled));
    }
}
