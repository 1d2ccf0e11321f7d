//! The recording's view of the cluster: a list and watch per informer spec
//! of the plugin (kind, namespace, selectors), as the host's informers
//! would open them, its events merged into one channel in arrival order.

use futures::StreamExt;
use kube::core::DynamicObject;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::informer::InformerSpec;

/// What a watch reported.
#[derive(Debug)]
pub enum Seen {
    /// A (re)list begins (after the first: the watch could not resume).
    Listing,
    /// An object of the (re)list.
    Listed(Value),
    /// The spec's (re)list is complete.
    ListDone,
    Applied(Value),
    Deleted(Value),
    /// The list or watch failed (it is retried with backoff).
    Failed(String),
}

/// Starts one watch per spec on `rt`; they stop when `stop` is cancelled.
pub fn start(
    rt: &tokio::runtime::Handle,
    client: &kube::Client,
    specs: &[InformerSpec],
    stop: &CancellationToken,
) -> mpsc::UnboundedReceiver<(usize, Seen)> {
    let (tx, rx) = mpsc::unbounded_channel();
    for (i, spec) in specs.iter().enumerate() {
        let api = crate::source::kube::dynamic_api::<DynamicObject>(
            client,
            &spec.kind,
            spec.namespace.as_deref(),
        );
        let mut config = watcher::Config::default();
        if let Some(l) = &spec.label_selector {
            config = config.labels(l);
        }
        if let Some(f) = &spec.field_selector {
            config = config.fields(f);
        }
        let tx = tx.clone();
        let stop = stop.clone();
        let what = spec.to_string();
        let (api_version, kind) = (spec.kind.gvk.api_version(), spec.kind.gvk.kind.clone());
        rt.spawn(async move {
            let mut events = watcher(api, config).default_backoff().boxed();
            loop {
                let next = tokio::select! {
                    () = stop.cancelled() => return,
                    n = events.next() => n,
                };
                let Some(next) = next else { return };
                let seen = match next {
                    Ok(watcher::Event::Init) => Ok(Seen::Listing),
                    Ok(watcher::Event::InitApply(o)) => {
                        to_value(o, &api_version, &kind).map(Seen::Listed)
                    }
                    Ok(watcher::Event::InitDone) => Ok(Seen::ListDone),
                    Ok(watcher::Event::Apply(o)) => {
                        to_value(o, &api_version, &kind).map(Seen::Applied)
                    }
                    Ok(watcher::Event::Delete(o)) => {
                        to_value(o, &api_version, &kind).map(Seen::Deleted)
                    }
                    Err(e) => Err(format!("cannot list and watch {what}: {e}")),
                };
                let seen = seen.unwrap_or_else(Seen::Failed);
                if tx.send((i, seen)).is_err() {
                    return;
                }
            }
        });
    }
    rx
}

/// The object as JSON, with the apiVersion and kind a list's items leave
/// out.
fn to_value(o: DynamicObject, api_version: &str, kind: &str) -> Result<Value, String> {
    let mut v =
        serde_json::to_value(o).map_err(|e| format!("cannot read an object of the watch: {e}"))?;
    if let Some(map) = v.as_object_mut() {
        map.entry("apiVersion")
            .or_insert_with(|| Value::from(api_version));
        map.entry("kind").or_insert_with(|| Value::from(kind));
    }
    Ok(v)
}
