//! One kube-runtime `watcher` per informer: streaming initial lists where
//! the server supports them (paged lists otherwise), bookmarks, exponential
//! backoff on errors and 429s, and a relist on 410 Gone whose difference
//! the informer turns into deltas. A watch silent for a while is probed with
//! a one-item list: a server that does not answer is reported as a stall
//! (a frozen API server otherwise looks exactly like a quiet resource).
//! A list with an item that cannot be decoded is void (its missing object
//! would read as deleted): reported, not finished, and made again after
//! backoff by a fresh watcher.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::Client;
use kube::api::ListParams;
use kube::runtime::WatchStreamExt;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher;
use serde::{Deserialize, Serialize};

use super::raw::RawObject;
use crate::informer::{InformerSpec, Source, SourceError, WatchEvent};
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
    /// Items of the list in progress so far (`None` outside a list).
    listing: Option<usize>,
    /// A list was voided: the next poll waits out `list_backoff`, then
    /// lists again with a fresh watcher.
    relist: bool,
    /// The watcher's own policy (0.8 s doubling to 30 s, jittered), kept
    /// across the fresh watchers of voided lists and reset by a list that
    /// completes.
    list_backoff: watcher::DefaultBackoff,
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

/// `namespace/name` (or `name`) of an object, if its name was readable.
fn object_name(obj: &RawObject) -> Option<String> {
    use kube::core::Resource as _;
    let meta = obj.meta();
    let name = meta.name.as_deref()?;
    Some(match meta.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_owned(),
    })
}

impl Run {
    fn decode(&self, obj: &RawObject) -> Result<KObject, ObjectError> {
        // List items usually carry no apiVersion/kind; the informer knows them.
        let types = (self.types.0.as_str(), self.types.1.as_str());
        KObject::from_json_text(obj.text(), Some(types), self.strip)
    }

    /// A watch event's object; one that cannot be decoded is reported and
    /// skipped (the cache keeps the object's previous state).
    fn convert(&self, obj: &RawObject) -> Result<KObject, SourceError> {
        self.decode(obj).map_err(|e| {
            SourceError::Other(format!(
                "{}: malformed object {} skipped: {e}",
                self.informer,
                object_name(obj).unwrap_or_else(|| "(name unreadable)".into())
            ))
        })
    }

    /// Voids the list in progress: no `InitDone` will end it, and the next
    /// poll lists again after backoff.
    fn void_list(&mut self, object: Option<String>, cause: ObjectError) -> SourceError {
        let position = self.listing.take().unwrap_or_default();
        self.relist = true;
        SourceError::ListItemUndecodable {
            informer: self.informer.clone(),
            position,
            object,
            cause: Arc::new(cause),
        }
    }

    async fn next(mut self) -> Option<(Result<WatchEvent, SourceError>, Self)> {
        if std::mem::take(&mut self.relist) {
            let delay = self.list_backoff.next().unwrap_or(Duration::from_secs(30));
            tracing::debug!(informer = %self.informer, ?delay, "listing again after a voided list");
            tokio::time::sleep(delay).await;
            self.inner = start(&self.api, &self.config, self.streaming);
            self.heard = Instant::now();
        }
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
                // A streaming list's event that is not even a watch event
                // (kube's watcher would go on with the list without it).
                Err(watcher::Error::WatchFailed(kube::Error::SerdeError(e)))
                    if self.listing.is_some() =>
                {
                    self.listing = self.listing.map(|n| n + 1);
                    let err = self.void_list(None, ObjectError::Json(e));
                    return Some((Err(err), self));
                }
                Err(err) => return Some((Err(source_error(err)), self)),
            };
            let out = match event {
                watcher::Event::Init => {
                    self.listing = Some(0);
                    Ok(WatchEvent::Init)
                }
                watcher::Event::InitDone => {
                    if self.streaming && self.auto {
                        self.learned.store(STREAMING_WORKS, Ordering::Relaxed);
                    }
                    self.listing = None;
                    self.list_backoff.reset();
                    Ok(WatchEvent::InitDone)
                }
                watcher::Event::InitApply(o) => {
                    self.listing = self.listing.map(|n| n + 1);
                    match self.decode(&o) {
                        Ok(obj) => Ok(WatchEvent::InitApply(obj)),
                        Err(e) => Err(self.void_list(object_name(&o), e)),
                    }
                }
                watcher::Event::Apply(o) => self.convert(&o).map(WatchEvent::Apply),
                watcher::Event::Delete(o) => self.convert(&o).map(WatchEvent::Delete),
            };
            return Some((out, self));
        }
    }
}

impl Source for KubeSource {
    fn watch(&self, spec: &InformerSpec) -> BoxStream<'static, Result<WatchEvent, SourceError>> {
        let api = super::dynamic_api(&self.client, &spec.kind, spec.namespace.as_deref());
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
            listing: None,
            relist: false,
            list_backoff: watcher::DefaultBackoff::default(),
        };
        futures::stream::unfold(run, Run::next).boxed()
    }
}
