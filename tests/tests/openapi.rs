//! The schemas of built-in kinds (`kubewasm::openapi`) against the real
//! API server (kube-apiserver v1.35.8, API server and etcd only):
//!
//! - `schemas_are_the_served_ones`: the committed `host/openapi/*.json`
//!   are what the server serves at `/openapi/v3`, reduced; with
//!   `KUBEWASM_REGENERATE=1` it writes them instead (the generator).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use http::Request;
use kubewasm::openapi::{reduce, schema};
use kubewasm::reference::check_or_write;
use kubewasm_tests::controlplane::ControlPlane;
use serde_json::Value;

/// GET `path` from the server as JSON.
async fn get_json(client: &kube::Client, path: &str) -> Value {
    let req = Request::get(path).body(Vec::new()).unwrap();
    let text = client.request_text(req).await.unwrap();
    serde_json::from_str(&text).unwrap()
}

#[tokio::test]
async fn schemas_are_the_served_ones() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let index = get_json(&client, "/openapi/v3").await;
    let served: Vec<String> = index["paths"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|p| *p == "api/v1" || (p.starts_with("apis/") && p.matches('/').count() == 2))
        .cloned()
        .collect();
    let mut committed: BTreeSet<(String, String)> = schema::EMBEDDED
        .iter()
        .map(|(g, v, _)| (g.to_string(), v.to_string()))
        .collect();
    let mut problems = Vec::new();
    for path in served {
        let (group, version) = match path.split('/').collect::<Vec<_>>().as_slice() {
            ["api", v] => (String::new(), v.to_string()),
            ["apis", g, v] => (g.to_string(), v.to_string()),
            _ => continue,
        };
        // Custom resources other tests install are not built in.
        if group.ends_with("kubewasm.io") {
            continue;
        }
        let document = get_json(&client, &format!("/openapi/v3/{path}")).await;
        let text = reduce::reduce(&group, &version, &document).unwrap();
        let file = format!("host/openapi/{}", schema::file_name(&group, &version));
        if let Err(e) = check_or_write(&file, text.as_bytes(), reduce::REGENERATE) {
            problems.push(e);
        }
        if !committed.remove(&(group.clone(), version.clone())) {
            problems.push(format!(
                "{file}: the server serves {path}; add it to schema::EMBEDDED"
            ));
        }
    }
    for (group, version) in committed {
        problems.push(format!(
            "{group}/{version} is committed but no longer served: remove it"
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
