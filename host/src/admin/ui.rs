//! The live web view (`kubewasm run --ui`), served on its own listener
//! (`--ui-addr`, default `127.0.0.1:9091`: reach it with `kubectl
//! port-forward`), never on the metrics listener: read-only, one page whose
//! assets are compiled into the binary (no download at run time), kept
//! current by server-sent events. Only loopback and listed Host names are
//! answered, and the data only to its own origin (see [`guard`]); objects
//! are shown with their sensitive fields redacted (see [`crate::redact`]).
//!
//! - `GET /ui`: the page (`/ui/app.js`, `/ui/app.css` beside it); `/`
//!   redirects to it.
//! - `GET /ui/events?plugin=&kind=&namespace=`: the event stream. A
//!   `state` event every second (plugins, informers, dead letters) and a
//!   `feed` event at most every 100 ms with the newest [`FEED_ROWS`] rows
//!   that match the filter and the count of those dropped (see
//!   [`crate::telemetry::feed`]). The stream ends when the listener stops.
//! - `GET /ui/api/state`: the `state` event's data, once.
//! - `GET /ui/api/objects?informer=&namespace=&selector=&limit=&after=`: a
//!   page of one informer's cached objects (keys only), in key order.
//! - `GET /ui/api/object?informer=&namespace=&name=`: one cached object,
//!   redacted.

pub mod guard;

pub use guard::AllowedHosts;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use futures::Stream;
use futures::future::BoxFuture;
use serde::Serialize;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::dispatch::DeadLetterRecord;
use crate::informer::selector::LabelSelector;
use crate::informer::{CacheView, UndecodableObject};
use crate::object::ObjectKey;
use crate::telemetry::Telemetry;
use crate::telemetry::feed::{FeedSubscription, Filter, Window};

/// Rows a page receives per flush at most.
pub const FEED_ROWS: usize = 20;
/// How often a page's feed rows are flushed.
pub const FEED_FLUSH: Duration = Duration::from_millis(100);
/// How often a page's plugin and informer tables are refreshed.
pub const STATE_EVERY: Duration = Duration::from_secs(1);
/// Objects per page of the cache browser, by default and at most.
pub const LIST_DEFAULT: usize = 200;
pub const LIST_MAX: usize = 1000;

/// The web view's default listen address: loopback only.
pub const DEFAULT_ADDR: &str = "127.0.0.1:9091";

const INDEX: &str = include_str!("ui/index.html");
const APP_JS: &str = include_str!("ui/app.js");
const APP_CSS: &str = include_str!("ui/app.css");

/// Where the web view listens: `HOST:PORT`, or `:PORT` on 127.0.0.1
/// (unlike `--metrics-addr`, whose `:PORT` is every interface: binding the
/// web view elsewhere than loopback is a choice to write out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UiAddr(String);

impl UiAddr {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for UiAddr {
    fn default() -> Self {
        Self(DEFAULT_ADDR.to_owned())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid web view address {0:?}: expected HOST:PORT or :PORT (127.0.0.1)")]
pub struct UiAddrError(String);

impl std::str::FromStr for UiAddr {
    type Err = UiAddrError;

    fn from_str(s: &str) -> Result<Self, UiAddrError> {
        let s = s.trim();
        let (host, port) = s
            .rsplit_once(':')
            .ok_or_else(|| UiAddrError(s.to_owned()))?;
        port.parse::<u16>().map_err(|_| UiAddrError(s.to_owned()))?;
        if host.is_empty() {
            return Ok(Self(format!("127.0.0.1:{port}")));
        }
        Ok(Self(s.to_owned()))
    }
}

impl<'de> serde::Deserialize<'de> for UiAddr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One plugin as the page shows it.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginRow {
    pub name: String,
    /// From the component's `producers` section, when it says.
    pub language: Option<String>,
    /// 12 hex digits of the running component's SHA-256.
    pub version: Option<String>,
    /// `loading`, `serving`, `unhealthy` (its last calls failed) or
    /// `broken` (no version runs: see `error`).
    pub state: &'static str,
    /// Why the plugin's current file did not load (a previous version
    /// may still serve), or why its informer is refused.
    pub error: Option<String>,
    pub subscriptions: Vec<String>,
    pub delivered: u64,
    /// Deltas handled per second since the last `state` event.
    pub rate: f64,
    pub call_p50_us: Option<f64>,
    pub call_p99_us: Option<f64>,
    pub errors: u64,
    pub retries: u64,
    pub queue: u64,
    /// Keys waiting on a timer (backing off, or a requeue not due yet).
    pub delayed: u64,
    pub dead_letters: u64,
}

/// One informer as the page shows it.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InformerRow {
    /// What the cache browser names it by (the informer's description).
    pub id: String,
    /// The resource (`configmaps`, `deployments.apps`).
    pub kind: String,
    /// `all namespaces` or `namespace N`, with the selectors.
    pub scope: String,
    pub objects: u64,
    pub bytes: u64,
    pub synced: bool,
    /// The resourceVersion of the last object the informer applied.
    pub resource_version: Option<String>,
    pub watch_restarts: u64,
    pub relists: u64,
    pub plugins: Vec<String>,
    pub forbidden: Option<String>,
    /// Objects the informer could not decode now, with why: the cache
    /// holds their last decoded state, if any.
    pub undecodable: Vec<UndecodableObject>,
}

/// What the page reads from the running host.
pub trait UiSource: Send + Sync + 'static {
    /// Every plugin file and running plugin.
    fn plugins(&self) -> BoxFuture<'_, Vec<PluginRow>>;
    fn informers(&self) -> Vec<InformerRow>;
    /// The read-only view of the informer [`InformerRow::id`] names.
    fn cache(&self, id: &str) -> Option<CacheView>;
    /// Every plugin's dead letters, by plugin name, oldest failure first.
    fn dead_letters(&self) -> Vec<DeadLetterRecord>;
}

/// Every plugin's dead letters (`GET /dead-letters`, the page's table), by
/// plugin name, oldest failure first; empty before a host is attached.
pub fn dead_letters(t: &Telemetry) -> Vec<DeadLetterRecord> {
    source(t).map(|s| s.dead_letters()).unwrap_or_default()
}

/// Lets the web view (and `/dead-letters`) read the running host; the
/// handle keeps it for the admin listeners, which start before the host.
pub fn attach(t: &Telemetry, source: Arc<dyn UiSource>) {
    t.attach_admin(source);
}

/// What [`attach`] attached, if anything yet.
pub(crate) fn source(t: &Telemetry) -> Option<Arc<dyn UiSource>> {
    t.admin::<Arc<dyn UiSource>>()
}

/// The `state` event.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UiState {
    pub plugins: Vec<PluginRow>,
    pub informers: Vec<InformerRow>,
    pub dead_letters: Vec<DeadLetterRecord>,
    /// Why the host is not ready (empty when it is).
    pub not_ready: Vec<String>,
    /// Which replica leads (absent without leader election): a follower's
    /// page says it is one and names the leader.
    pub leadership: Option<crate::telemetry::LeaseView>,
    /// A sharded replica's shards (absent unsharded): which of how many it
    /// acts for.
    pub shards: Option<ShardsView>,
    /// What `/readyz` notes besides readiness (Plugin objects this replica
    /// cannot serve).
    pub notes: Vec<String>,
    /// Pages open now.
    pub pages: usize,
}

/// The shards a replica of a sharded host acts for.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardsView {
    pub count: u32,
    pub held: Vec<u32>,
}

fn shards(t: &Telemetry) -> Option<ShardsView> {
    let (count, held) = t.leader().shards();
    (count > 0).then(|| ShardsView {
        count,
        held: (0..count.min(64))
            .filter(|i| held & (1 << i) != 0)
            .collect(),
    })
}

/// Builds the `state` event; `last` holds the plugins' delivered counts
/// at the previous one, for their rates.
async fn state(t: &Telemetry, last: &mut Option<(Instant, HashMap<String, u64>)>) -> UiState {
    let mut out = UiState {
        dead_letters: dead_letters(t),
        not_ready: t.readiness().err().unwrap_or_default(),
        leadership: t.leader().lease(),
        shards: shards(t),
        notes: t.notes(),
        pages: t.feed().watchers(),
        ..UiState::default()
    };
    let Some(source) = source(t) else {
        return out;
    };
    out.plugins = source.plugins().await;
    out.informers = source.informers();
    let now = Instant::now();
    if let Some((at, counts)) = last.as_ref() {
        let secs = now.duration_since(*at).as_secs_f64().max(1e-3);
        for p in &mut out.plugins {
            if let Some(before) = counts.get(&p.name) {
                p.rate = p.delivered.saturating_sub(*before) as f64 / secs;
            }
        }
    }
    *last = Some((
        now,
        out.plugins
            .iter()
            .map(|p| (p.name.clone(), p.delivered))
            .collect(),
    ));
    out
}

#[derive(Clone)]
struct Ui {
    telemetry: Telemetry,
    /// Cancelled when the listener stops: every open stream ends.
    stop: CancellationToken,
}

/// The web view's routes; streams end when `stop` is cancelled; only
/// the Host names `hosts` allows are answered.
pub fn router(telemetry: Telemetry, stop: CancellationToken, hosts: AllowedHosts) -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::temporary("/ui") }))
        .route("/ui", get(index))
        .route("/ui/", get(index))
        .route("/ui/app.js", get(app_js))
        .route("/ui/app.css", get(app_css))
        .route("/ui/events", get(events))
        .route("/ui/api/state", get(state_once))
        .route("/ui/api/objects", get(objects))
        .route("/ui/api/object", get(object))
        .with_state(Ui { telemetry, stop })
        .layer(axum::middleware::from_fn_with_state(hosts, guard::guard))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

async fn app_css() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

/// Query parameters by name (the last of repeated ones), empty ones left out.
fn params(query: Option<String>) -> HashMap<String, String> {
    form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .filter(|(_, v)| !v.trim().is_empty())
        .map(|(k, v)| (k.into_owned(), v.trim().to_owned()))
        .collect()
}

fn json(status: StatusCode, body: &impl Serialize) -> Response {
    match serde_json::to_string(body) {
        Ok(text) => (status, [(header::CONTENT_TYPE, "application/json")], text).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the answer: {e}\n"),
        )
            .into_response(),
    }
}

fn bad_request(message: String) -> Response {
    refused((StatusCode::BAD_REQUEST, message))
}

async fn state_once(State(ui): State<Ui>) -> Response {
    json(StatusCode::OK, &state(&ui.telemetry, &mut None).await)
}

/// One page's stream: its feed subscription, filter and timers.
struct Client {
    telemetry: Telemetry,
    feed: FeedSubscription,
    window: Window,
    flush: tokio::time::Interval,
    tick: tokio::time::Interval,
    last: Option<(Instant, HashMap<String, u64>)>,
    stop: CancellationToken,
}

impl Client {
    /// The next event, or `None` once the listener stops.
    async fn next(&mut self) -> Option<Event> {
        loop {
            tokio::select! {
                biased;
                () = self.stop.cancelled() => return None,
                _ = self.tick.tick() => {
                    let s = state(&self.telemetry, &mut self.last).await;
                    return Some(event("state", &s));
                }
                _ = self.flush.tick() => {
                    if let Some(batch) = self.window.flush(self.feed.take_unsampled()) {
                        return Some(event("feed", &batch));
                    }
                }
                r = self.feed.rx.recv() => match r {
                    Ok(rec) => self.window.offer(rec),
                    Err(RecvError::Lagged(n)) => self.window.lost(n),
                    Err(RecvError::Closed) => return None,
                },
            }
        }
    }
}

fn event(name: &str, data: &impl Serialize) -> Event {
    let data = serde_json::to_string(data).unwrap_or_else(|e| {
        tracing::warn!(event = name, error = %e, "cannot encode a UI event");
        "null".to_owned()
    });
    Event::default().event(name).data(data)
}

/// A page's event stream (see the module doc); also what the pipeline
/// benchmark attaches to measure an open page.
pub fn stream(
    telemetry: Telemetry,
    filter: Filter,
    stop: CancellationToken,
) -> impl Stream<Item = Event> + Send + 'static {
    let mut flush = tokio::time::interval(FEED_FLUSH);
    flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tick = tokio::time::interval(STATE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let client = Client {
        feed: telemetry.feed().subscribe(),
        telemetry,
        window: Window::new(filter, FEED_ROWS),
        flush,
        tick,
        last: None,
        stop,
    };
    futures::stream::unfold(client, |mut c| async move {
        let e = c.next().await?;
        Some((e, c))
    })
}

async fn events(State(ui): State<Ui>, RawQuery(q): RawQuery) -> Response {
    let mut p = params(q);
    let filter = Filter {
        plugin: p.remove("plugin"),
        kind: p.remove("kind"),
        namespace: p.remove("namespace"),
    };
    tracing::debug!(?filter, "UI page connected");
    let events =
        futures::StreamExt::map(stream(ui.telemetry, filter, ui.stop), Ok::<_, Infallible>);
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// One entry of the cache browser's list.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
    name: String,
    resource_version: String,
}

/// A page of the list.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Listed {
    items: Vec<Entry>,
    /// Objects matching the filter in all.
    matched: usize,
    /// Objects in the informer's cache.
    cached: usize,
    /// Pass as `after` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

/// `namespace/name`, or `name` for cluster-scoped objects: the list's
/// order and its cursor.
fn cursor(key: &ObjectKey) -> String {
    match &key.namespace {
        Some(ns) => format!("{ns}/{}", key.name),
        None => key.name.to_string(),
    }
}

/// Why a cache browser request has no answer: a status and a message.
type Refusal = (StatusCode, String);

fn refused((status, message): Refusal) -> Response {
    json(status, &serde_json::json!({ "error": message }))
}

fn cache_of(ui: &Ui, p: &HashMap<String, String>) -> Result<CacheView, Refusal> {
    let Some(id) = p.get("informer") else {
        return Err((
            StatusCode::BAD_REQUEST,
            "pass informer=ID (an informer's id)".into(),
        ));
    };
    source(&ui.telemetry)
        .and_then(|s| s.cache(id))
        .ok_or_else(|| {
            (
                StatusCode::NOT_FOUND,
                format!("no informer {id:?} runs now"),
            )
        })
}

async fn objects(State(ui): State<Ui>, RawQuery(q): RawQuery) -> Response {
    let p = params(q);
    let cache = match cache_of(&ui, &p) {
        Ok(c) => c,
        Err(r) => return refused(r),
    };
    let selector = match LabelSelector::parse(p.get("selector").map_or("", String::as_str)) {
        Ok(s) => s,
        Err(e) => return bad_request(format!("label selector: {e}")),
    };
    let limit = match p.get("limit").map(|l| l.parse::<usize>()) {
        None => LIST_DEFAULT,
        Some(Ok(n)) => n.clamp(1, LIST_MAX),
        Some(Err(_)) => return bad_request("limit must be a number".into()),
    };
    let snapshot = cache.snapshot();
    let mut keys: Vec<(String, String)> = snapshot
        .list(p.get("namespace").map(String::as_str), &selector)
        .iter()
        .map(|o| (cursor(&o.key()), o.meta().resource_version.to_string()))
        .collect();
    keys.sort_unstable();
    let matched = keys.len();
    let start = p.get("after").map_or(0, |a| {
        keys.partition_point(|(k, _)| k.as_str() <= a.as_str())
    });
    let page: Vec<_> = keys.into_iter().skip(start).take(limit + 1).collect();
    let next = (page.len() > limit).then(|| page[limit - 1].0.clone());
    let items = page
        .into_iter()
        .take(limit)
        .map(|(k, rv)| {
            let (namespace, name) = match k.split_once('/') {
                Some((ns, n)) => (Some(ns.to_owned()), n.to_owned()),
                None => (None, k),
            };
            Entry {
                namespace,
                name,
                resource_version: rv,
            }
        })
        .collect();
    json(
        StatusCode::OK,
        &Listed {
            items,
            matched,
            cached: snapshot.len(),
            next,
        },
    )
}

async fn object(State(ui): State<Ui>, RawQuery(q): RawQuery) -> Response {
    let p = params(q);
    let cache = match cache_of(&ui, &p) {
        Ok(c) => c,
        Err(r) => return refused(r),
    };
    let Some(name) = p.get("name") else {
        return bad_request("pass name=NAME (and namespace=NS)".into());
    };
    let key = ObjectKey::new(p.get("namespace").map(String::as_str), name);
    match cache.snapshot().get(&key) {
        Some(o) => (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, "application/json"),
                (header::CACHE_CONTROL, "no-store"),
            ],
            ui.telemetry.redactor().object_json(&o).into_owned(),
        )
            .into_response(),
        None => json(
            StatusCode::NOT_FOUND,
            &serde_json::json!({ "error": format!("{} is not in the cache", cursor(&key)) }),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sharded_replicas_page_names_the_shards_it_acts_for() {
        let t = Telemetry::new(crate::telemetry::Identity::from_env());
        assert!(shards(&t).is_none(), "unsharded: no shards on the page");
        t.leader().set_shards(3, 0b101);
        let view = shards(&t).unwrap();
        assert_eq!((view.count, view.held), (3, vec![0, 2]));
        let json = serde_json::to_value(shards(&t)).unwrap();
        assert_eq!(json, serde_json::json!({"count": 3, "held": [0, 2]}));
    }
}
