//! One kube-runtime `watcher` per informer: streaming initial lists where
//! the server supports them (paged lists otherwise), bookmarks, exponential
//! backoff on errors and 429s, and a relist on 410 Gone whose difference
//! the informer turns into deltas. A watch silent for a while is probed with
//! a one-item list: a server that does not answer is reported as a stall
//! (a frozen API server otherwise looks exactly like a quiet resource).
//! An object that cannot be decoded costs that object, not the list or the
//! watch: it is handed on as [`WatchEvent::Undecodable`] with the key read
//! from its metadata alone, so that the informer keeps the cached state of
//! a listed one (its absence from the list would read as a deletion) and
//! removes a deleted one.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::Client;
use kube::api::ListParams;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use serde::{Deserialize, Serialize};

use super::raw::RawObject;
use crate::informer::{
    InformerSpec, Source, SourceError, Undecodable, UndecodableEvent, WatchEvent,
};
use crate::object::{KObject, ObjectError, StripOptions};

/// How informers fetch their initial state.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum InitialList {
    /// Streaming (watch-list) first; on a server that refuses it, paged
    /// lists from then on, for every informer of this source.
    #[default]
    Auto,
    /// Always `sendInitialEvents=true` (fails on servers without WatchList).
    Stream,
    /// Always a paged list followed by a watch.
    Paged,
}

/// A watch silent this long is probed (a quiet resource answers at once).
pub const DEFAULT_STALL_AFTER: Duration = Duration::from_secs(30);
/// The probe's own deadline, at most.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

const UNKNOWN: u8 = 0;
const STREAMING_WORKS: u8 = 1;
const STREAMING_REFUSED: u8 = 2;

/// The API-server source.
#[derive(Clone)]
pub struct KubeSource {
    client: Client,
    strip: StripOptions,
    initial_list: InitialList,
    page_size: u32,
    /// What `Auto` learned about the server, shared by all informers.
    streaming: Arc<AtomicU8>,
    stall_after: Duration,
}

impl std::fmt::Debug for KubeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeSource")
            .field("initial_list", &self.initial_list)
            .finish_non_exhaustive()
    }
}

impl KubeSource {
    pub fn new(
        client: Client,
        strip: StripOptions,
        initial_list: InitialList,
        page_size: u32,
    ) -> Self {
        Self {
            client,
            strip,
            initial_list,
            page_size: page_size.max(1),
            streaming: Arc::new(AtomicU8::new(UNKNOWN)),
            stall_after: DEFAULT_STALL_AFTER,
        }
    }

    /// Probes a watch after `after` of silence (default
    /// [`DEFAULT_STALL_AFTER`]); the probe waits at most a third of it.
    #[must_use]
    pub fn with_stall_after(mut self, after: Duration) -> Self {
        self.stall_after = after.max(Duration::from_millis(10));
        self
    }

    fn wants_streaming(&self) -> bool {
        match self.initial_list {
            InitialList::Stream => true,
            InitialList::Paged => false,
            InitialList::Auto => self.streaming.load(Ordering::Relaxed) != STREAMING_REFUSED,
        }
    }
}

/// The per-informer state of the converted stream.
struct Run {
    inner: BoxStream<'static, Result<watcher::Event<RawObject>, watcher::Error>>,
    api: kube::Api<RawObject>,
    config: watcher::Config,
    streaming: bool,
    auto: bool,
    learned: Arc<AtomicU8>,
    /// apiVersion and kind, which list items leave out.
    types: (String, String),
    strip: StripOptions,
    informer: String,
    stall_after: Duration,
    /// When the watch last produced something (or a probe answered).
    heard: Instant,
    /// A stall was reported and not yet ended.
    stalled: bool,
    /// A list is in progress (between `Init` and `InitDone`).
    listing: bool,
    /// The kind is namespaced: an object without a namespace has no key
    /// the informer could hold.
    namespaced: bool,
}

fn start(
    api: &kube::Api<RawObject>,
    config: &watcher::Config,
    streaming: bool,
) -> BoxStream<'static, Result<watcher::Event<RawObject>, watcher::Error>> {
    let config = if streaming {
        config.clone().streaming_lists()
    } else {
        config.clone()
    };
    watcher(api.clone(), config).default_backoff().boxed()
}

/// True when the server rejected `sendInitialEvents` (WatchList disabled or
/// unknown): 400/422 on the initial watch.
fn streaming_refused(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::InitialListFailed(kube::Error::Api(s)) => {
            (s.code == 422 || s.code == 400)
                && (s.message.contains("sendInitialEvents")
                    || s.message.contains("resourceVersionMatch")
                    || s.message.contains("WatchList"))
        }
        watcher::Error::WatchError(s) => {
            (s.code == 422 || s.code == 400) && s.message.contains("sendInitialEvents")
        }
        _ => false,
    }
}

fn source_error(err: watcher::Error) -> SourceError {
    let status = match &err {
        watcher::Error::InitialListFailed(kube::Error::Api(s)) => Some(("list", s.as_ref())),
        watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => Some(("watch", s.as_ref())),
        watcher::Error::WatchError(s) => Some(("watch", s.as_ref())),
        _ => None,
    };
    match status {
        Some((verb, s)) if s.code == 403 => SourceError::Forbidden {
            verb,
            message: s.message.clone(),
        },
        _ => SourceError::Other(err.to_string()),
    }
}

/// Lists one item, within a third of the stall window (at most
/// [`PROBE_TIMEOUT`]).
async fn probe(api: &kube::Api<RawObject>, stall_after: Duration) -> Result<(), String> {
    let limit = (stall_after / 3).min(PROBE_TIMEOUT);
    match tokio::time::timeout(limit, api.list_metadata(&ListParams::default().limit(1))).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("probe list failed: {e}")),
        Err(_) => Err(format!("probe list unanswered after {limit:?}")),
    }
}

impl Run {
    fn decode(&self, obj: &RawObject) -> Result<KObject, ObjectError> {
        // List items usually carry no apiVersion/kind; the informer knows them.
        let types = (self.types.0.as_str(), self.types.1.as_str());
        KObject::from_parts(obj.parts(), Some(types), self.strip)
    }

    /// `obj` decoded, or what the informer needs of one that is not.
    fn convert(
        &self,
        obj: &RawObject,
        event: UndecodableEvent,
        decoded: fn(KObject) -> WatchEvent,
    ) -> WatchEvent {
        match self.decode(obj) {
            Ok(o) => decoded(o),
            Err(e) => WatchEvent::Undecodable(Undecodable {
                event,
                key: obj
                    .key()
                    .filter(|k| !self.namespaced || k.namespace.is_some()),
                error: Arc::new(e),
            }),
        }
    }

    async fn next(mut self) -> Option<(Result<WatchEvent, SourceError>, Self)> {
        loop {
            let item = match tokio::time::timeout(self.stall_after, self.inner.next()).await {
                Ok(item) => {
                    self.heard = Instant::now();
                    self.stalled = false;
                    item?
                }
                Err(_silence) => match probe(&self.api.clone(), self.stall_after).await {
                    Ok(()) => {
                        self.heard = Instant::now();
                        if std::mem::take(&mut self.stalled) {
                            return Some((Ok(WatchEvent::Progress), self));
                        }
                        continue;
                    }
                    Err(cause) => {
                        self.stalled = true;
                        let silent = self.heard.elapsed();
                        return Some((Err(SourceError::Stalled { silent, cause }), self));
                    }
                },
            };
            let event = match item {
                Ok(ev) => ev,
                Err(err) if self.streaming && self.auto && streaming_refused(&err) => {
                    tracing::info!(informer = %self.informer, error = %err, "server refuses streaming lists; using paged lists");
                    self.learned.store(STREAMING_REFUSED, Ordering::Relaxed);
                    self.streaming = false;
                    self.inner = start(&self.api, &self.config, false);
                    continue;
                }
                // A streaming list's event that is not even a watch event:
                // an item of the list whose name is unknown (kube's watcher
                // goes on with the list without it).
                Err(watcher::Error::WatchFailed(kube::Error::SerdeError(e))) if self.listing => {
                    let lost = Undecodable {
                        event: UndecodableEvent::InitApply,
                        key: None,
                        error: Arc::new(ObjectError::Json(e)),
                    };
                    return Some((Ok(WatchEvent::Undecodable(lost)), self));
                }
                Err(err) => return Some((Err(source_error(err)), self)),
            };
            let out = match event {
                watcher::Event::Init => {
                    self.listing = true;
                    WatchEvent::Init
                }
                watcher::Event::InitDone => {
                    if self.streaming && self.auto {
                        self.learned.store(STREAMING_WORKS, Ordering::Relaxed);
                    }
                    self.listing = false;
                    WatchEvent::InitDone
                }
                watcher::Event::InitApply(o) => {
                    self.convert(&o, UndecodableEvent::InitApply, WatchEvent::InitApply)
                }
                watcher::Event::Apply(o) => {
                    self.convert(&o, UndecodableEvent::Apply, WatchEvent::Apply)
                }
                watcher::Event::Delete(o) => {
                    self.convert(&o, UndecodableEvent::Delete, WatchEvent::Delete)
                }
            };
            return Some((Ok(out), self));
        }
    }
}

impl Source for KubeSource {
    fn watch(&self, spec: &InformerSpec) -> BoxStream<'static, Result<WatchEvent, SourceError>> {
        self.watch_with(&self.client, spec)
    }

    fn watch_shards(
        &self,
        spec: &InformerSpec,
        shards: &crate::shard::ShardSet,
    ) -> BoxStream<'static, Result<WatchEvent, SourceError>> {
        match shards.selector() {
            Some(selector) => {
                let client = super::sharded::narrowed(&self.client, selector, spec.to_string());
                self.watch_with(&client, spec)
            }
            // No shard held: nothing to cache, and nothing to ask for.
            None => futures::stream::iter([Ok(WatchEvent::Init), Ok(WatchEvent::InitDone)])
                .chain(futures::stream::pending())
                .boxed(),
        }
    }
}

impl KubeSource {
    fn watch_with(
        &self,
        client: &Client,
        spec: &InformerSpec,
    ) -> BoxStream<'static, Result<WatchEvent, SourceError>> {
        let api = super::dynamic_api(client, &spec.kind, spec.namespace.as_deref());
        let mut config = watcher::Config::default().page_size(self.page_size);
        if let Some(l) = &spec.label_selector {
            config = config.labels(l);
        }
        if let Some(f) = &spec.field_selector {
            config = config.fields(f);
        }
        let streaming = self.wants_streaming();
        let run = Run {
            inner: start(&api, &config, streaming),
            api,
            config,
            streaming,
            auto: self.initial_list == InitialList::Auto,
            learned: self.streaming.clone(),
            types: (spec.kind.gvk.api_version(), spec.kind.gvk.kind.clone()),
            strip: self.strip,
            informer: spec.to_string(),
            stall_after: self.stall_after,
            heard: Instant::now(),
            stalled: false,
            listing: false,
            namespaced: spec.kind.namespaced,
        };
        futures::stream::unfold(run, Run::next).boxed()
    }
}
