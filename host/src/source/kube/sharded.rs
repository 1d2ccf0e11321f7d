//! Sharded list and watch (Kubernetes 1.36's alpha `ShardedListAndWatch`,
//! KEP-5866): with `shardCache: held` every list and watch request of an
//! informer carries `shardSelector`, so that an API server that serves it
//! sends a replica only its shards' objects. One that does not (the
//! feature gate off, or a server before 1.36) ignores the parameter and
//! sends everything; the informer filters by the same hash either way.
//! Which one it is shows in a list response (`metadata.shardInfo`, the
//! selector echoed back), and is logged once per informer and selector.
//! The informer's own requests cannot tell: its initial list streams as a
//! watch (no list object), and its probe lists metadata only, whose list
//! Kubernetes 1.36 returns without `shardInfo` even when it filtered. So
//! the first request of each selector is preceded by one list of a single
//! whole object, asked only to read that answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http::Request;
use kube::client::Body;

/// A client whose requests ask for `selector`'s objects only; `informer`
/// names the informer in the log line that says who filters.
pub(super) fn narrowed(client: &kube::Client, selector: String, informer: String) -> kube::Client {
    let inner = client.clone();
    let asked = Arc::new(AtomicBool::new(false));
    let selector: Arc<str> = Arc::from(selector);
    let informer: Arc<str> = Arc::from(informer);
    let service = tower::service_fn(move |mut request: Request<Body>| {
        let (inner, asked, selector, informer) = (
            inner.clone(),
            asked.clone(),
            selector.clone(),
            informer.clone(),
        );
        async move {
            if !asked.swap(true, Ordering::Relaxed) {
                let answered = who_filters(&inner, request.uri(), &selector).await;
                match answered {
                    Ok(true) => {
                        tracing::info!(informer = %informer, selector = %selector, "the API server lists and watches only the shards held (shardInfo in its list)")
                    }
                    Ok(false) => {
                        tracing::info!(informer = %informer, selector = %selector, "the API server ignores shardSelector (no shardInfo in its list: sharded list and watch needs Kubernetes 1.36 with the ShardedListAndWatch feature gate): this replica filters what it receives")
                    }
                    Err(e) => {
                        // Asked again with the next request.
                        asked.store(false, Ordering::Relaxed);
                        tracing::debug!(informer = %informer, error = %e, "could not tell whether the API server serves shardSelector");
                    }
                }
            }
            with_selector(&mut request, &selector)?;
            inner.send(request).await
        }
    });
    kube::Client::new(service, client.default_namespace().to_owned())
}

/// Whether the API server filters by `selector` the collection `uri`
/// names: one whole object of it listed, as JSON, and its list's
/// `shardInfo` read.
async fn who_filters(
    inner: &kube::Client,
    uri: &http::Uri,
    selector: &str,
) -> Result<bool, kube::Error> {
    let response = inner.send(detection(uri, selector)?).await?;
    if !response.status().is_success() {
        return Err(kube::Error::Service(
            format!(
                "the list asking for shardInfo was answered {}",
                response.status()
            )
            .into(),
        ));
    }
    let bytes = response.into_body().collect_bytes().await?;
    Ok(served(&bytes))
}

/// A list of one whole object (JSON, not metadata only) of the collection
/// `uri` names, with `selector`.
fn detection(uri: &http::Uri, selector: &str) -> Result<Request<Body>, kube::Error> {
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("limit", "1")
        .append_pair("shardSelector", selector)
        .finish();
    Request::get(format!("{}?{query}", uri.path()))
        .header(http::header::ACCEPT, "application/json")
        .body(Body::empty())
        .map_err(|e| kube::Error::Service(Box::new(e)))
}

/// Adds `shardSelector` to the request's query (lists and watches alike).
fn with_selector(request: &mut Request<Body>, selector: &str) -> Result<(), kube::Error> {
    let uri = request.uri();
    let query = uri.query().unwrap_or("");
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
    Ok(())
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

    const SEL: &str = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')";

    /// The query of `uri` as (key, value) pairs, decoded.
    fn query(uri: &http::Uri) -> Vec<(String, String)> {
        form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect()
    }

    fn pairs(limit: &str) -> [(String, String); 2] {
        [
            ("limit".to_owned(), limit.to_owned()),
            ("shardSelector".to_owned(), SEL.to_owned()),
        ]
    }

    #[test]
    fn the_selector_is_added_to_lists_and_watches() {
        let mut list = Request::get("https://h/api/v1/configmaps?limit=500")
            .body(Body::empty())
            .unwrap();
        with_selector(&mut list, SEL).unwrap();
        assert_eq!(query(list.uri()), pairs("500"));
        let mut watch = Request::get("https://h/api/v1/configmaps?watch=true&resourceVersion=5")
            .body(Body::empty())
            .unwrap();
        with_selector(&mut watch, SEL).unwrap();
        assert!(watch.uri().query().unwrap().contains("shardSelector="));
    }

    #[test]
    fn who_filters_is_asked_with_one_whole_object_of_the_same_collection() {
        let watch: http::Uri =
            "https://h/api/v1/namespaces/a/configmaps?watch=true&sendInitialEvents=true"
                .parse()
                .unwrap();
        let asked = detection(&watch, SEL).unwrap();
        assert_eq!(asked.method(), http::Method::GET);
        assert_eq!(asked.uri().path(), "/api/v1/namespaces/a/configmaps");
        assert_eq!(query(asked.uri()), pairs("1"));
        // Not metadata only: Kubernetes 1.36 drops shardInfo from those.
        assert_eq!(asked.headers()[http::header::ACCEPT], "application/json");
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
