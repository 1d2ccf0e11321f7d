//! A plugin artifact's precompiled layers (`kubewasm push --precompiled`,
//! [`super::artifact::PRECOMPILED_MEDIA_TYPE`]): which one a host takes
//! (the one for its engine key, under its artifact key, of the module
//! pulled, within a size cap, unless its compile cache already holds the
//! artifact), and the download. Any other is never downloaded. Its bytes
//! are not trusted here: the compile cache verifies their MAC before a
//! byte is mapped ([`crate::runtime::cache::CompileCache::adopt`]).

use super::registry::Session;
use super::{Error, OciClient, artifact, cache};

/// Which precompiled layer a host can use: the one for its engine key,
/// under its artifact key's id. Any other is not downloaded.
#[derive(Clone)]
pub struct PrecompiledWanted {
    pub engine_key: String,
    pub key_id: String,
    /// Largest layer downloaded: refused from the manifest's size, and cut
    /// off if the registry sends more.
    pub max_bytes: u64,
    /// Whether the compile cache already holds the artifact of a module
    /// (content digest, hex): then the layer is not downloaded.
    pub cached: std::sync::Arc<dyn Fn(&str) -> bool + Send + Sync>,
}

impl std::fmt::Debug for PrecompiledWanted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrecompiledWanted")
            .field("engine_key", &self.engine_key)
            .field("key_id", &self.key_id)
            .field("max_bytes", &self.max_bytes)
            .finish_non_exhaustive()
    }
}

/// What became of an artifact's precompiled layers in a pull. Only
/// [`PrecompiledPull::Fetched`] carries bytes, and those are not yet
/// trusted: their MAC is the compile cache's to verify.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrecompiledPull {
    /// The pull did not ask for one, or was served from the cache.
    NotAsked,
    /// The artifact has no precompiled layer.
    Absent,
    /// The compile cache holds the module's artifact already.
    AlreadyCompiled,
    /// Its precompiled layers are for other engines.
    OtherEngine { found: Vec<String> },
    /// The one for this engine is under another artifact key.
    OtherKey { found: String },
    /// The one for this engine names another module layer.
    OtherModule { found: String },
    /// The one for this engine is over the size limit.
    TooLarge { size: u64, limit: u64 },
    /// Its download failed (the registry, or bytes that do not hash to
    /// its digest): an excerpt of why.
    Failed { reason: String },
    /// Downloaded, its digest checked.
    Fetched { engine_key: String, bytes: Vec<u8> },
}

impl std::fmt::Display for PrecompiledPull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotAsked => f.write_str("not asked for"),
            Self::Absent => f.write_str("the artifact has no precompiled layer"),
            Self::AlreadyCompiled => f.write_str("the compile cache holds its artifact already"),
            Self::OtherEngine { found } => write!(
                f,
                "its precompiled layers are for other engine keys ({}): push it with `kubewasm push --precompiled` from this release, on a machine with this host's CPU features",
                found.join(", ")
            ),
            Self::OtherKey { found } => write!(
                f,
                "its precompiled layer is signed with another artifact key (key id {found}): push it with the --artifact-key this host runs with"
            ),
            Self::OtherModule { found } => write!(
                f,
                "its precompiled layer was compiled from another module ({found}), not from this artifact's"
            ),
            Self::TooLarge { size, limit } => write!(
                f,
                "its precompiled layer is {size} bytes, over the limit of {limit}; not downloaded"
            ),
            Self::Failed { reason } => {
                write!(f, "its precompiled layer was not downloaded: {reason}")
            }
            Self::Fetched { bytes, .. } => write!(f, "downloaded ({} bytes)", bytes.len()),
        }
    }
}

/// A precompiled layer to push: a compile cache artifact of the module.
#[derive(Debug, Clone)]
pub struct PrecompiledLayer {
    /// The artifact, MAC header included.
    pub bytes: Vec<u8>,
    /// The engine key it was compiled for.
    pub engine_key: String,
    /// The id of the artifact key its MAC is under.
    pub key_id: String,
}

/// Which of an artifact's precompiled layers a host takes.
#[derive(Debug, PartialEq, Eq)]
enum PrecompiledChoice<'a> {
    Download(&'a artifact::Precompiled),
    Skip(PrecompiledPull),
}

/// The layer of `layers` for `wanted`'s engine and key, compiled from
/// `wasm_digest`, unless the compile cache holds that module's artifact;
/// else why none is taken.
fn choose_precompiled<'a>(
    wanted: &PrecompiledWanted,
    wasm_digest: &str,
    layers: &'a [artifact::Precompiled],
) -> PrecompiledChoice<'a> {
    use PrecompiledChoice::Skip;
    if layers.is_empty() {
        return Skip(PrecompiledPull::Absent);
    }
    let Some(layer) = layers.iter().find(|l| l.engine_key == wanted.engine_key) else {
        return Skip(PrecompiledPull::OtherEngine {
            found: layers.iter().map(|l| l.engine_key.clone()).collect(),
        });
    };
    if layer.key_id != wanted.key_id {
        return Skip(PrecompiledPull::OtherKey {
            found: crate::names::excerpt(&layer.key_id),
        });
    }
    if layer.wasm_digest != wasm_digest {
        return Skip(PrecompiledPull::OtherModule {
            found: crate::names::excerpt(&layer.wasm_digest),
        });
    }
    if layer.layer.size > wanted.max_bytes {
        return Skip(PrecompiledPull::TooLarge {
            size: layer.layer.size,
            limit: wanted.max_bytes,
        });
    }
    let hex = wasm_digest.strip_prefix("sha256:").unwrap_or(wasm_digest);
    if (wanted.cached)(hex) {
        return Skip(PrecompiledPull::AlreadyCompiled);
    }
    PrecompiledChoice::Download(layer)
}

impl OciClient {
    /// The precompiled layer this host asked for, downloaded, or why not:
    /// one for another engine, under another key, of another module, too
    /// large, or whose module the compile cache holds already is never
    /// downloaded. Its failures fail nothing: the module is compiled.
    pub(super) async fn precompiled(
        &self,
        session: &mut Session<'_>,
        reference: &str,
        wasm_digest: &str,
        layers: &[artifact::Precompiled],
        until: tokio::time::Instant,
    ) -> PrecompiledPull {
        let Some(wanted) = &self.options.precompiled else {
            return PrecompiledPull::NotAsked;
        };
        let layer = match choose_precompiled(wanted, wasm_digest, layers) {
            PrecompiledChoice::Download(layer) => layer,
            PrecompiledChoice::Skip(why) => return why,
        };
        if cache::sha256_hex(&layer.layer.digest).is_none() {
            return PrecompiledPull::Failed {
                reason: format!(
                    "its digest {:?} is not sha256",
                    crate::names::excerpt(&layer.layer.digest)
                ),
            };
        }
        // At most half of what remains of the pull's deadline: a registry
        // slow to serve the layer costs a compile, never the module's pull.
        let now = tokio::time::Instant::now();
        let by = now + until.saturating_duration_since(now) / 2;
        let download = self.download_capped(session, reference, &layer.layer, wanted.max_bytes);
        match tokio::time::timeout_at(by, download).await {
            Ok(Ok(bytes)) => PrecompiledPull::Fetched {
                engine_key: layer.engine_key.clone(),
                bytes,
            },
            Ok(Err(Error::TooLarge { size, limit, .. })) => {
                PrecompiledPull::TooLarge { size, limit }
            }
            Ok(Err(e)) => PrecompiledPull::Failed {
                reason: crate::names::excerpt(&e.to_string()),
            },
            Err(_) => PrecompiledPull::Failed {
                reason: "not downloaded within half of what remained of the pull's deadline"
                    .to_owned(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn wanted(cached: bool) -> PrecompiledWanted {
        PrecompiledWanted {
            engine_key: "e1".into(),
            key_id: "k1".into(),
            max_bytes: 1000,
            cached: std::sync::Arc::new(move |_| cached),
        }
    }

    fn layer(
        engine_key: &str,
        key_id: &str,
        wasm_digest: &str,
        size: u64,
    ) -> artifact::Precompiled {
        artifact::Precompiled::from_layer(&artifact::precompiled_layer(
            size,
            "sha256:cd",
            engine_key,
            wasm_digest,
            key_id,
        ))
        .unwrap()
    }

    /// Only the layer for this engine, under this key, of this module,
    /// within the cap and not compiled already is downloaded; each other
    /// case says why (the host then compiles).
    #[test]
    fn only_the_precompiled_layer_for_this_engine_and_key_is_downloaded() {
        use PrecompiledChoice::{Download, Skip};
        let ours = layer("e1", "k1", "sha256:ab", 500);
        let other = layer("e2", "k1", "sha256:ab", 500);
        let layers = [other.clone(), ours.clone()];
        assert_eq!(
            choose_precompiled(&wanted(false), "sha256:ab", &layers),
            Download(&ours)
        );
        assert_eq!(
            choose_precompiled(&wanted(false), "sha256:ab", &[]),
            Skip(PrecompiledPull::Absent)
        );
        assert_eq!(
            choose_precompiled(&wanted(false), "sha256:ab", &[other]),
            Skip(PrecompiledPull::OtherEngine {
                found: vec!["e2".into()]
            })
        );
        assert_eq!(
            choose_precompiled(
                &wanted(false),
                "sha256:ab",
                &[layer("e1", "k2", "sha256:ab", 5)]
            ),
            Skip(PrecompiledPull::OtherKey { found: "k2".into() })
        );
        assert_eq!(
            choose_precompiled(
                &wanted(false),
                "sha256:ab",
                &[layer("e1", "k1", "sha256:ff", 5)]
            ),
            Skip(PrecompiledPull::OtherModule {
                found: "sha256:ff".into()
            })
        );
        assert_eq!(
            choose_precompiled(
                &wanted(false),
                "sha256:ab",
                &[layer("e1", "k1", "sha256:ab", 1001)]
            ),
            Skip(PrecompiledPull::TooLarge {
                size: 1001,
                limit: 1000
            })
        );
        assert_eq!(
            choose_precompiled(&wanted(true), "sha256:ab", &layers),
            Skip(PrecompiledPull::AlreadyCompiled)
        );
        // Each reason reads as a sentence naming the fix.
        let text = PrecompiledPull::OtherKey { found: "k2".into() }.to_string();
        assert!(
            text.contains("k2") && text.contains("--artifact-key"),
            "{text}"
        );
    }
}
