//! A [`Source`] that replays what a unit test sends, then stays open: the
//! informers' and the dispatcher's tests drive the watch with it.

use futures::stream::BoxStream;
use parking_lot::Mutex;
use tokio::sync::mpsc;

use super::{InformerSpec, Source, SourceError, WatchEvent};

/// What a test sends: the watch's events, one receiver for the first watch.
pub(crate) type Script = mpsc::UnboundedReceiver<Result<WatchEvent, SourceError>>;

/// Hands `script` to the first watch; a later watch (or none, with `None`)
/// never answers.
pub(crate) struct Scripted(Mutex<Option<Script>>);

impl Scripted {
    pub(crate) fn new(script: Option<Script>) -> Self {
        Self(Mutex::new(script))
    }
}

impl Source for Scripted {
    fn watch(&self, _spec: &InformerSpec) -> BoxStream<'static, Result<WatchEvent, SourceError>> {
        let Some(mut rx) = self.0.lock().take() else {
            return Box::pin(futures::stream::pending());
        };
        Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
    }
}
