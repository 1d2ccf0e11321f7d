//! The encoding on the wire: a tower layer on kube's client that asks the
//! API server for protobuf on the list and watch requests of built-in
//! group versions (what client-go sends) and hands kube the JSON the server
//! would have sent, transcoded by [`crate::proto`]. Protobuf is smaller and
//! cheaper for the server to encode; kube's watcher above the layer keeps
//! all its semantics (paged and streaming lists, bookmarks, relists on 410
//! Gone, backoff) because it reads the same JSON.
//!
//! The response's Content-Type decides: protobuf is transcoded (a list or
//! an object whole, a watch frame by frame as it arrives, into the
//! newline-delimited events kube reads); anything else passes untouched
//! (custom resources have no protobuf form: the server answers JSON). A
//! body that does not transcode (a kind or field newer than the table) is
//! an error kube surfaces, so its watcher retries, and its resource is
//! asked for in JSON from then on: nothing is lost, and it is logged once.

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use http::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, HeaderValue};
use http::{Method, Request, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use tower::{BoxError, Layer, Service};

use crate::proto::{self, ProtoError, Transcoded};
use crate::telemetry::WireCounters;

/// The Accept header client-go sends for built-in kinds: protobuf, and
/// JSON where the server has no protobuf form.
pub const ACCEPT_PROTOBUF: &str = "application/vnd.kubernetes.protobuf, application/json";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// The largest watch frame read (client-go's streaming decoder's cap); a
/// larger length prefix is a broken stream, not an object.
pub const MAX_FRAME: usize = 16 * 1024 * 1024;

/// The encoding informers ask the API server for.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Wire {
    /// Protobuf for built-in kinds, transcoded to the JSON the server
    /// would have sent; JSON for custom resources, and for a resource
    /// whose protobuf once failed to transcode.
    #[default]
    Auto,
    /// JSON for everything.
    Json,
}

/// A protobuf response the layer could not hand on.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error(
        "cannot transcode the protobuf {what} of {resource}: {source} (asking for {resource} in JSON from now on)"
    )]
    Transcode {
        resource: String,
        what: &'static str,
        #[source]
        source: ProtoError,
    },
    #[error(
        "a protobuf watch frame of {resource} announces {size} bytes, over the {MAX_FRAME}-byte limit"
    )]
    FrameTooLarge { resource: String, size: usize },
    #[error("cannot read the protobuf response of {resource}: {source}")]
    Body {
        resource: String,
        #[source]
        source: BoxError,
    },
}

/// What the layer's services share: the mode, the resources fallen back
/// to JSON, the counters.
#[derive(Debug, Default)]
struct State {
    wire: Wire,
    /// `v1/pods`, `apps/v1/deployments`: asked for in JSON only.
    json_only: RwLock<HashSet<String>>,
    counters: WireCounters,
}

impl State {
    fn asks_protobuf(&self, api_version: &str, resource: &str) -> bool {
        self.wire == Wire::Auto
            && proto::knows_api_version(api_version)
            && !self.json_only.read().contains(resource)
    }

    /// Marks `resource` JSON-only; logs the first time.
    fn fall_back(&self, resource: &str, error: &WireError) {
        if self.json_only.write().insert(resource.to_owned()) {
            tracing::warn!(
                resource,
                error = %error,
                "protobuf not transcoded; reading this resource in JSON from now on"
            );
        }
    }
}

/// The layer: one per client, its fallbacks shared by the client's clones.
#[derive(Debug, Clone)]
pub struct WireLayer {
    state: Arc<State>,
}

impl WireLayer {
    pub fn new(wire: Wire, counters: WireCounters) -> Self {
        Self {
            state: Arc::new(State {
                wire,
                json_only: RwLock::default(),
                counters,
            }),
        }
    }

    /// Whether `resource` (`v1/pods`) fell back to JSON.
    pub fn is_json_only(&self, resource: &str) -> bool {
        self.state.json_only.read().contains(resource)
    }
}

impl<S> Layer<S> for WireLayer {
    type Service = WireService<S>;

    fn layer(&self, inner: S) -> WireService<S> {
        WireService {
            inner,
            state: self.state.clone(),
        }
    }
}

/// The service [`WireLayer`] wraps kube's stack in.
#[derive(Debug, Clone)]
pub struct WireService<S> {
    inner: S,
    state: Arc<State>,
}

/// The group version and the key of a list or watch request's resource
/// (`v1`, `v1/pods`), from its path; `None` for anything else (a single
/// object, a subresource, discovery).
fn collection(path: &str) -> Option<(String, String)> {
    let mut segments = path.trim_matches('/').split('/');
    let api_version = match segments.next()? {
        "api" => segments.next()?.to_owned(),
        "apis" => {
            let group = segments.next()?;
            format!("{group}/{}", segments.next()?)
        }
        _ => return None,
    };
    let rest: Vec<&str> = segments.collect();
    let resource = match rest.as_slice() {
        [resource] | ["namespaces", _, resource] => *resource,
        _ => return None,
    };
    if resource.is_empty() || api_version.ends_with('/') {
        return None;
    }
    let key = format!("{api_version}/{resource}");
    Some((api_version, key))
}

impl<S, B, Req> Service<Request<Req>> for WireService<S>
where
    S: Service<Request<Req>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: HttpBody<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<WireBody<B>>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<Req>) -> Self::Future {
        let target = if req.method() == Method::GET {
            collection(req.uri().path())
        } else {
            None
        };
        if let Some((api_version, resource)) = &target {
            // An Accept already there (kube's metadata-only lists) stays.
            if !req.headers().contains_key(ACCEPT)
                && self.state.asks_protobuf(api_version, resource)
            {
                req.headers_mut()
                    .insert(ACCEPT, HeaderValue::from_static(ACCEPT_PROTOBUF));
            }
        }
        let call = self.inner.call(req);
        let state = self.state.clone();
        Box::pin(async move {
            let res = call.await.map_err(Into::into)?;
            match target {
                Some((_, resource)) => respond(res, resource, state).await,
                None => Ok(res.map(WireBody::Plain)),
            }
        })
    }
}

/// What a response's Content-Type says it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Protobuf,
    ProtobufWatch,
    /// JSON, or anything else: passed on untouched.
    Other,
}

fn encoding(headers: &HeaderMap) -> Encoding {
    let Some(value) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return Encoding::Other;
    };
    let mut parts = value.split(';').map(str::trim);
    if !parts
        .next()
        .is_some_and(|mime| mime.eq_ignore_ascii_case(PROTOBUF))
    {
        return Encoding::Other;
    }
    if parts.any(|p| p.replace(' ', "").eq_ignore_ascii_case("stream=watch")) {
        Encoding::ProtobufWatch
    } else {
        Encoding::Protobuf
    }
}

/// The body's new type: JSON, of unknown length.
fn json_headers(headers: &mut HeaderMap) {
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.remove(CONTENT_LENGTH);
}

async fn respond<B>(
    res: Response<B>,
    resource: String,
    state: Arc<State>,
) -> Result<Response<WireBody<B>>, BoxError>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    match encoding(res.headers()) {
        Encoding::Other => {
            state.counters.json.inc();
            Ok(res.map(WireBody::Plain))
        }
        Encoding::Protobuf => {
            state.counters.protobuf.inc();
            let (mut parts, body) = res.into_parts();
            // A list is paged (bounded), an error a Status: read whole.
            let bytes = body
                .collect()
                .await
                .map_err(|e| WireError::Body {
                    resource: resource.clone(),
                    source: e.into(),
                })?
                .to_bytes();
            let json = match proto::transcode(&bytes) {
                Ok(Transcoded::List(list)) => list.to_json(),
                Ok(Transcoded::Object(object)) => object.text,
                Err(source) => {
                    let error = WireError::Transcode {
                        resource: resource.clone(),
                        what: "response",
                        source,
                    };
                    state.fall_back(&resource, &error);
                    return Err(error.into());
                }
            };
            json_headers(&mut parts.headers);
            Ok(Response::from_parts(
                parts,
                WireBody::Full(Some(Bytes::from(json))),
            ))
        }
        Encoding::ProtobufWatch => {
            state.counters.protobuf.inc();
            let (mut parts, body) = res.into_parts();
            json_headers(&mut parts.headers);
            let frames = Frames {
                inner: body,
                buf: BytesMut::new(),
                resource,
                state,
                failed: None,
                ended: false,
            };
            Ok(Response::from_parts(
                parts,
                WireBody::Watch(Box::new(frames)),
            ))
        }
    }
}

/// A response body as kube reads it: untouched, transcoded whole, or a
/// watch transcoded frame by frame.
pub enum WireBody<B> {
    /// Not asked for, or not protobuf.
    Plain(B),
    /// A list, an object or an error Status, transcoded (taken once read).
    Full(Option<Bytes>),
    /// A watch stream.
    Watch(Box<Frames<B>>),
}

impl<B> HttpBody for WireBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            WireBody::Plain(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
            WireBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            WireBody::Watch(frames) => frames.poll(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            WireBody::Plain(body) => body.is_end_stream(),
            WireBody::Full(bytes) => bytes.is_none(),
            WireBody::Watch(frames) => frames.ended,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            WireBody::Plain(body) => body.size_hint(),
            WireBody::Full(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            WireBody::Full(None) => SizeHint::with_exact(0),
            WireBody::Watch(_) => SizeHint::default(),
        }
    }
}

/// A protobuf watch read as kube's newline-delimited JSON events: frames
/// (a 4-byte big-endian length, a `metav1.WatchEvent`) are transcoded as
/// they complete; a partial one waits in `buf` for the next chunk.
pub struct Frames<B> {
    inner: B,
    buf: BytesMut,
    resource: String,
    state: Arc<State>,
    /// A frame that failed after good ones: its error waits until they
    /// are handed on.
    failed: Option<WireError>,
    ended: bool,
}

impl<B> Frames<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    /// The JSON events of every whole frame in the buffer, one line each;
    /// an error once the events before it are handed on.
    fn drain(&mut self) -> Result<Option<Bytes>, WireError> {
        if let Some(error) = self.failed.take() {
            return Err(error);
        }
        let mut out = Vec::new();
        if let Err(error) = self.frames(&mut out) {
            if out.is_empty() {
                return Err(error);
            }
            self.failed = Some(error);
        }
        Ok((!out.is_empty()).then(|| Bytes::from(out)))
    }

    /// Writes the events of the buffer's whole frames to `out`.
    fn frames(&mut self, out: &mut Vec<u8>) -> Result<(), WireError> {
        while let Some(prefix) = self.buf.first_chunk::<4>() {
            let size = usize::try_from(u32::from_be_bytes(*prefix)).unwrap_or(usize::MAX);
            if size > MAX_FRAME {
                return Err(WireError::FrameTooLarge {
                    resource: self.resource.clone(),
                    size,
                });
            }
            let Some(whole) = size.checked_add(4).filter(|n| *n <= self.buf.len()) else {
                self.buf.reserve(size + 4 - self.buf.len());
                break;
            };
            let frame = self.buf.split_to(whole);
            let event = proto::watch_event(&frame[4..]).map_err(|source| WireError::Transcode {
                resource: self.resource.clone(),
                what: "watch event",
                source,
            })?;
            out.extend_from_slice(b"{\"type\":");
            out.extend_from_slice(
                serde_json::Value::String(event.event_type)
                    .to_string()
                    .as_bytes(),
            );
            out.extend_from_slice(b",\"object\":");
            match event.object {
                Transcoded::Object(o) => out.extend_from_slice(o.text.as_bytes()),
                Transcoded::List(l) => out.extend_from_slice(l.to_json().as_bytes()),
            }
            out.extend_from_slice(b"}\n");
        }
        Ok(())
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        loop {
            if self.ended {
                return Poll::Ready(None);
            }
            match self.drain() {
                Ok(Some(lines)) => return Poll::Ready(Some(Ok(Frame::data(lines)))),
                Ok(None) => {}
                Err(error) => {
                    // The stream ends with the error; kube's watcher
                    // watches again from its last resourceVersion, in
                    // JSON when the frame did not transcode.
                    self.ended = true;
                    if matches!(error, WireError::Transcode { .. }) {
                        self.state.fall_back(&self.resource, &error);
                    }
                    return Poll::Ready(Some(Err(error.into())));
                }
            }
            match ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                // Passed on as is: kube tells a resumable end (EOF) by it.
                Some(Err(error)) => return Poll::Ready(Some(Err(error.into()))),
                None => {
                    self.ended = true;
                    if !self.buf.is_empty() {
                        tracing::debug!(
                            resource = %self.resource,
                            bytes = self.buf.len(),
                            "watch stream ended inside a frame"
                        );
                    }
                    return Poll::Ready(None);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
