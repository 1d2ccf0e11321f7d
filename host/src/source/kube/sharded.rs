//! Sharded list and watch (Kubernetes 1.36's alpha `ShardedListAndWatch`,
//! KEP-5866): with `shardCache: held` every list and watch request of an
//! informer carries `shardSelector`, so that an API server that serves it
//! sends a replica only its shards' objects. One that does not (the
//! feature gate off, or a server before 1.36) ignores the parameter and
//! sends everything; the informer filters by the same hash either way.
//! Which one it is shows in the list response (`metadata.shardInfo`, the
//! selector echoed back), and is logged once per informer and answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use http::{Request, Response};
use kube::client::Body;

const UNKNOWN: u8 = 0;
const SERVER: u8 = 1;
const CLIENT: u8 = 2;

/// A client whose requests ask for `selector`'s objects only; `informer`
/// names the informer in the log line that says who filters.
pub(super) fn narrowed(client: &kube::Client, selector: String, informer: String) -> kube::Client {
    let inner = client.clone();
    let seen = Arc::new(AtomicU8::new(UNKNOWN));
    let selector: Arc<str> = Arc::from(selector);
    let informer: Arc<str> = Arc::from(informer);
    let service = tower::service_fn(move |mut request: Request<Body>| {
        let (inner, seen, selector, informer) = (
            inner.clone(),
            seen.clone(),
            selector.clone(),
            informer.clone(),
        );
        async move {
            let list = with_selector(&mut request, &selector)?;
            let response = inner.send(request).await?;
            if !list || !response.status().is_success() {
                return Ok::<_, kube::Error>(response);
            }
            let (parts, body) = response.into_parts();
            let bytes = body.collect_bytes().await?;
            let by = if served(&bytes) { SERVER } else { CLIENT };
            if seen.swap(by, Ordering::Relaxed) != by {
                if by == SERVER {
                    tracing::info!(informer = %informer, selector = %selector, "the API server lists and watches only the shards held (shardInfo in its list)");
                } else {
                    tracing::info!(informer = %informer, selector = %selector, "the API server ignores shardSelector (no shardInfo in its list: sharded list and watch needs Kubernetes 1.36 with the ShardedListAndWatch feature gate): this replica filters what it receives");
                }
            }
            Ok(Response::from_parts(parts, Body::from(bytes)))
        }
    });
    kube::Client::new(service, client.default_namespace().to_owned())
}

/// Adds `shardSelector` to the request's query; returns whether it is a
/// list (not a watch), whose answer tells who filters.
fn with_selector(request: &mut Request<Body>, selector: &str) -> Result<bool, kube::Error> {
    let uri = request.uri();
    let query = uri.query().unwrap_or("");
    let watch = form_urlencoded::parse(query.as_bytes()).any(|(k, v)| k == "watch" && v != "false");
    let mut q = form_urlencoded::Serializer::new(query.to_owned());
    q.append_pair("shardSelector", selector);
    let path_and_query = format!("{}?{}", uri.path(), q.finish());
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(
        path_and_query
            .parse()
            .map_err(|e: http::uri::InvalidUri| kube::Error::Service(Box::new(e)))?,
    );
    *request.uri_mut() =
        http::Uri::from_parts(parts).map_err(|e| kube::Error::Service(Box::new(e)))?;
    Ok(request.method() == http::Method::GET && !watch)
}

/// Whether a list response says the server applied a shard selector.
fn served(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct List {
        #[serde(default)]
        metadata: Meta,
    }
    #[derive(serde::Deserialize, Default)]
    struct Meta {
        #[serde(default, rename = "shardInfo")]
        shard_info: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<List>(body).is_ok_and(|l| l.metadata.shard_info.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selector_is_added_to_lists_and_watches() {
        let sel = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')";
        let mut list = Request::get("https://h/api/v1/configmaps?limit=500")
            .body(Body::empty())
            .unwrap();
        assert!(with_selector(&mut list, sel).unwrap());
        let q = list.uri().query().unwrap();
        let pairs: Vec<(String, String)> = form_urlencoded::parse(q.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("limit".to_owned(), "500".to_owned()),
                ("shardSelector".to_owned(), sel.to_owned())
            ]
        );
        let mut watch = Request::get("https://h/api/v1/configmaps?watch=true&resourceVersion=5")
            .body(Body::empty())
            .unwrap();
        assert!(!with_selector(&mut watch, sel).unwrap(), "a watch");
        assert!(watch.uri().query().unwrap().contains("shardSelector="));
    }

    #[test]
    fn shard_info_in_a_list_says_the_server_filtered() {
        assert!(served(
            br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"5","shardInfo":{"selector":"shardRange(object.metadata.uid, '0x0', '0x8000000000000000')"}},"items":[{"metadata":{"name":"a"}}]}"#
        ));
        assert!(!served(
            br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"5"},"items":[]}"#
        ));
        assert!(!served(b"not json"));
    }
}
