//! What the runtime and languages benchmarks share: a fixed source, the
//! names picked on the command line, and the compile/cached-load timing.

use std::time::{Duration, Instant};

use futures::StreamExt;
use kubewasm::informer::{InformerSpec, Source, SourceError, WatchEvent};
use kubewasm::object::{KObject, StripOptions};
use kubewasm::runtime::{CompileSource, EngineOptions, Manifest, Prepared, Runtime};

/// A source that lists these objects once and then stays silent.
pub struct Fixed(pub Vec<KObject>);

impl Source for Fixed {
    fn watch(
        &self,
        spec: &InformerSpec,
    ) -> futures::stream::BoxStream<'static, Result<WatchEvent, SourceError>> {
        let objs: Vec<_> = self
            .0
            .iter()
            .filter(|o| o.gvk() == spec.kind.gvk)
            .map(|o| {
                Ok(WatchEvent::InitApply(
                    KObject::from_json(o.json(), StripOptions::default()).unwrap(),
                ))
            })
            .collect();
        let mut evs = vec![Ok(WatchEvent::Init)];
        evs.extend(objs);
        evs.push(Ok(WatchEvent::InitDone));
        Box::pin(futures::stream::iter(evs).chain(futures::stream::pending()))
    }
}

/// The names given after `--` (`cargo bench ... -- a b`): whether `name`
/// is to run (all run when none is given).
pub fn selected() -> impl Fn(&str) -> bool {
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    move |name| only.is_empty() || only.iter().any(|o| o == name)
}

/// A component prepared twice over one empty compile cache: the first
/// compiles, the second loads what the first cached.
pub struct Compiled {
    pub prepared: Prepared,
    pub cold: Duration,
    pub cached: Duration,
    /// The compile cache, kept as long as what was loaded from it.
    _cache: tempfile::TempDir,
}

pub fn compile_then_load(name: &str, bytes: &[u8]) -> Compiled {
    let dir = tempfile::tempdir().unwrap();
    let opts = EngineOptions {
        epoch_deadlines: true,
        cache_dir: Some(dir.path().to_owned()),
    };
    let t0 = Instant::now();
    let cold = Runtime::new(opts.clone())
        .unwrap()
        .prepare(name, bytes, Manifest::default())
        .unwrap();
    let cold_t = t0.elapsed();
    drop(cold);
    let t1 = Instant::now();
    let prepared = Runtime::new(opts)
        .unwrap()
        .prepare(name, bytes, Manifest::default())
        .unwrap();
    let cached = t1.elapsed();
    assert_eq!(prepared.compile_source, CompileSource::Cached);
    Compiled {
        prepared,
        cold: cold_t,
        cached,
        _cache: dir,
    }
}
