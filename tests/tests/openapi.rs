//! The validator of built-in kinds (`kubewasm::openapi`) against the real
//! API server (kube-apiserver v1.35.8, API server and etcd only):
//!
//! - `schemas_are_the_served_ones`: the committed `host/openapi/*.json`
//!   are what the server serves at `/openapi/v3`, reduced; with
//!   `KUBEWASM_REGENERATE=1` it writes them instead (the generator).
//! - `refusals_match_the_api_server`: each bad write of the table goes to
//!   the server and to the validator; both must refuse it with the same
//!   status code, reason and causes (field and reason), and where the
//!   case says so, the same message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use http::Request;
use kubewasm::kind::Gvk;
use kubewasm::openapi::{self, Write, reduce, schema};
use kubewasm::reference::check_or_write;
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::namespace;
use serde_json::{Value, json};

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

/// What a case compares besides the code and reason.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Compare {
    /// The message and the causes (field, reason, message) exactly.
    Exact,
    /// The causes' fields and reasons (the server's message quotes its
    /// internal Go types, or the order of its errors is random).
    Fields,
}

/// One write: what is set up first, and the request.
struct Case {
    what: &'static str,
    gvk: Gvk,
    plural: &'static str,
    name: &'static str,
    /// Created (POST) before the write, then read back as the stored object.
    before: Option<Value>,
    /// Deleted after `before` is created (the write meets a terminating object).
    terminating: bool,
    write: Write,
    /// The write goes to the status subresource.
    status: bool,
    body: Value,
    compare: Compare,
}

fn case(
    what: &'static str,
    gvk: (&str, &str, &str),
    plural: &'static str,
    name: &'static str,
) -> Case {
    Case {
        what,
        gvk: Gvk::new(gvk.0, gvk.1, gvk.2),
        plural,
        name,
        before: None,
        terminating: false,
        write: Write::Create,
        status: false,
        body: Value::Null,
        compare: Compare::Exact,
    }
}

impl Case {
    fn create(mut self, body: Value) -> Self {
        self.write = Write::Create;
        self.body = body;
        self
    }
    fn apply(mut self, body: Value) -> Self {
        self.write = Write::Apply;
        self.body = body;
        self
    }
    fn patch(mut self, before: Value, patch: Value) -> Self {
        self.write = Write::Patch;
        self.before = Some(before);
        self.body = patch;
        self
    }
    fn update(mut self, before: Value, body: Value) -> Self {
        self.write = Write::Update;
        self.before = Some(before);
        self.body = body;
        self
    }
    fn status(mut self) -> Self {
        self.status = true;
        self
    }
    fn terminating(mut self) -> Self {
        self.terminating = true;
        self
    }
    fn fields(mut self) -> Self {
        self.compare = Compare::Fields;
        self
    }
}

const NS: &str = "openapi-conformance";

fn cm(name: &str, extra: Value) -> Value {
    let mut v = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}});
    merge(&mut v, &extra);
    v
}

fn pod_spec(containers: Value) -> Value {
    json!({"containers": containers})
}

fn deployment(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": name, "namespace": NS}, "spec": spec})
}

fn good_deployment_spec() -> Value {
    json!({"selector": {"matchLabels": {"app": "a"}},
           "template": {"metadata": {"labels": {"app": "a"}},
                        "spec": pod_spec(json!([{"name": "c", "image": "i"}]))}})
}

fn pod(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec})
}

/// RFC 7386 merge patch.
fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            let t = target.as_object_mut().unwrap();
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

fn cases() -> Vec<Case> {
    let core = |k| ("", "v1", k);
    let apps = |k| ("apps", "v1", k);
    let batch = |k| ("batch", "v1", k);
    vec![
        // Decoding: wrong types, bad quantities and base64 (create: 400).
        case("a ConfigMap's data value is a number", core("ConfigMap"), "configmaps", "d1")
            .create(cm("d1", json!({"data": {"foo": 1}}))),
        case("replicas is a string", apps("Deployment"), "deployments", "d2").create({
            let mut d = deployment("d2", good_deployment_spec());
            d["spec"]["replicas"] = json!("3");
            d
        }),
        case("a containerPort is a string", apps("Deployment"), "deployments", "d3").create({
            let mut d = deployment("d3", good_deployment_spec());
            d["spec"]["template"]["spec"]["containers"][0]["ports"] = json!([{"containerPort": "x"}]);
            d
        }),
        case("a fraction in an int64", core("Pod"), "pods", "d4").create(pod(
            "d4",
            json!({"containers": [{"name": "c", "image": "i"}], "activeDeadlineSeconds": 1.5}),
        )),
        case("tolerations is an object", core("Pod"), "pods", "d5").create(pod(
            "d5",
            json!({"containers": [{"name": "c", "image": "i"}], "tolerations": {"a": 1}}),
        )),
        case("securityContext is a string", core("Pod"), "pods", "d6").create(pod(
            "d6",
            json!({"containers": [{"name": "c", "image": "i"}], "securityContext": "x"}),
        )),
        case("a quantity that does not parse", core("Pod"), "pods", "d7").create(pod(
            "d7",
            json!({"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": "abc"}}}]}),
        )),
        case("a Secret's data is not base64", core("Secret"), "secrets", "d8").create(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "d8", "namespace": NS},
                   "data": {"a": "abc!"}}),
        ),
        case("a boolean is a string", core("Pod"), "pods", "d9").create(pod(
            "d9",
            json!({"containers": [{"name": "c", "image": "i", "stdin": "yes"}]}),
        )),
        // Decoding in a server-side apply (500).
        case("apply: a ConfigMap's data value is a number", core("ConfigMap"), "configmaps", "a1")
            .apply(cm("a1", json!({"data": {"foo": 1}}))),
        case("apply: an undeclared field", core("ConfigMap"), "configmaps", "a2")
            .apply(cm("a2", json!({"bogus": 1, "data": {"a": "b"}}))),
        case("apply: a boolean is a string", core("Pod"), "pods", "a3").apply(pod(
            "a3",
            json!({"containers": [{"name": "c", "image": "i", "stdin": "yes"}]}),
        )),
        case("apply: a hostPort is a string", core("Pod"), "pods", "a4").apply(pod(
            "a4",
            json!({"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80, "hostPort": "1"}]}]}),
        )),
        case("apply: a fraction in an int64", core("Pod"), "pods", "a5").apply(pod(
            "a5",
            json!({"containers": [{"name": "c", "image": "i"}], "activeDeadlineSeconds": 1.5}),
        )),
        case("apply: a Secret's data is not base64", core("Secret"), "secrets", "a6").apply(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a6", "namespace": NS},
                   "data": {"a": "b!c"}}),
        ),
        case("apply: a list item of the wrong type", core("Pod"), "pods", "a7").apply(pod(
            "a7",
            json!({"containers": [{"name": "c", "image": "i", "args": [1]}]}),
        )),
        // Decoding of a patched object (422 on `patch`).
        case("patch: a ConfigMap's data value is a number", core("ConfigMap"), "configmaps", "p1")
            .patch(cm("p1", json!({})), json!({"data": {"foo": 1}}))
            .fields(),
        // Field validation (422).
        case("a Deployment without selector and template", apps("Deployment"), "deployments", "v1")
            .create(deployment("v1", json!({"replicas": 1}))),
        case("containers without name and image", core("Pod"), "pods", "v2").create(pod(
            "v2",
            pod_spec(json!([{"image": "i"}, {"name": "b"}])),
        )),
        case("a template's container without image", apps("Deployment"), "deployments", "v3").create({
            let mut d = deployment("v3", good_deployment_spec());
            d["spec"]["template"]["spec"]["containers"] = json!([{"name": "c"}]);
            d
        }),
        case("a name that is not a DNS subdomain", core("ConfigMap"), "configmaps", "Bad_Name")
            .create(cm("Bad_Name", json!({}))),
        case("no name", core("ConfigMap"), "configmaps", "")
            .create(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": NS}})),
        case("a Namespace name that is not a DNS label", core("Namespace"), "namespaces", "a.b")
            .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a.b"}})),
        case("a Service name that starts with a digit", core("Service"), "services", "1svc").create(
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "1svc", "namespace": NS},
                   "spec": {"ports": [{"port": 80}]}}),
        ),
        case("a finalizer without a domain", core("ConfigMap"), "configmaps", "v4")
            .create(cm("v4", json!({"metadata": {"finalizers": ["bad"]}}))),
        case("a label value with a space", core("ConfigMap"), "configmaps", "v5")
            .create(cm("v5", json!({"metadata": {"labels": {"a": "b c"}}}))),
        case("a label key with two slashes", core("ConfigMap"), "configmaps", "v6")
            .create(cm("v6", json!({"metadata": {"labels": {"a/b/c": "d"}}}))),
        case("a Job whose Pods have no restartPolicy", batch("Job"), "jobs", "v7").create(
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "v7", "namespace": NS},
                   "spec": {"template": {"spec": pod_spec(json!([{"name": "c", "image": "i"}]))}}}),
        ),
        case("a Job whose Pods say restart Always", batch("Job"), "jobs", "v12").create(
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "v12", "namespace": NS},
                   "spec": {"template": {"spec": {"restartPolicy": "Always",
                            "containers": [{"name": "c", "image": "i"}]}}}}),
        ),
        case("a label key that starts with a dash", core("ConfigMap"), "configmaps", "v13")
            .create(cm("v13", json!({"metadata": {"labels": {"-a": "b"}}}))),
        case("a label key whose prefix is no subdomain", core("ConfigMap"), "configmaps", "v14")
            .create(cm("v14", json!({"metadata": {"labels": {"A_b/c": "d"}}}))),
        case("an annotation key with two slashes", core("ConfigMap"), "configmaps", "v15")
            .create(cm("v15", json!({"metadata": {"annotations": {"a/b/c": "d"}}}))),
        case("a Namespace name with an underscore", core("Namespace"), "namespaces", "a_b")
            .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a_b"}})),
        case("a StatefulSet name with a dot", apps("StatefulSet"), "statefulsets", "a.b").create(
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "a.b", "namespace": NS},
                   "spec": {"serviceName": "a", "selector": {"matchLabels": {"app": "a"}},
                            "template": {"metadata": {"labels": {"app": "a"}},
                                         "spec": pod_spec(json!([{"name": "c", "image": "i"}]))}}}),
        ),
        case("a Service port without port", core("Service"), "services", "v16").create(
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "v16", "namespace": NS},
                   "spec": {"ports": [{"targetPort": 80}]}}),
        ),
        case("an Ingress path without pathType", ("networking.k8s.io", "v1", "Ingress"), "ingresses", "v17")
            .create(json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {"name": "v17", "namespace": NS},
                "spec": {"rules": [{"http": {"paths": [{"path": "/",
                    "backend": {"service": {"name": "s", "port": {"number": 80}}}}]}}]}})),
        case("a Job name longer than a label value", batch("Job"), "jobs", "j234567890123456789012345678901234567890123456789012345678901234")
            .create(json!({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "j234567890123456789012345678901234567890123456789012345678901234", "namespace": NS},
                "spec": {"template": {"spec": {"restartPolicy": "Never",
                         "containers": [{"name": "c", "image": "i"}]}}}})),
        case("a container port without containerPort", core("Pod"), "pods", "v18").create(pod(
            "v18",
            json!({"containers": [{"name": "c", "image": "i", "ports": [{"name": "x"}]}]}),
        )),
        case("a priority as a string", core("Pod"), "pods", "d10").create(pod(
            "d10",
            json!({"containers": [{"name": "c", "image": "i"}], "priority": "5"}),
        )),
        case("an empty selector", apps("Deployment"), "deployments", "v8").create({
            let mut d = deployment("v8", good_deployment_spec());
            d["spec"]["selector"] = json!({});
            d
        }),
        case("a selector that does not select the template", apps("Deployment"), "deployments", "v9")
            .create({
                let mut d = deployment("v9", good_deployment_spec());
                d["spec"]["selector"] = json!({"matchLabels": {"app": "b"}});
                d
            }),
        case("a Deployment whose Pods restart Never", apps("Deployment"), "deployments", "v10").create({
            let mut d = deployment("v10", good_deployment_spec());
            d["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
            d
        }),
        case("an env var without name", core("Pod"), "pods", "v11").create(pod(
            "v11",
            json!({"containers": [{"name": "c", "image": "i", "env": [{"value": "x"}]}]}),
        )),
        // Updates (merge patches of stored objects).
        case("data of an immutable ConfigMap", core("ConfigMap"), "configmaps", "u1").patch(
            cm("u1", json!({"immutable": true, "data": {"a": "b"}})),
            json!({"data": {"a": "c"}}),
        ),
        case("an immutable ConfigMap made mutable", core("ConfigMap"), "configmaps", "u2").patch(
            cm("u2", json!({"immutable": true, "data": {"a": "b"}})),
            json!({"immutable": false}),
        ),
        case("a Secret's type", core("Secret"), "secrets", "u3").patch(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "u3", "namespace": NS}}),
            json!({"type": "example.com/other"}),
        ),
        case("a uid", core("ConfigMap"), "configmaps", "u4")
            .patch(cm("u4", json!({})), json!({"metadata": {"uid": "abc"}})),
        case("a finalizer added to a terminating object", core("ConfigMap"), "configmaps", "u5")
            .patch(
                cm("u5", json!({"metadata": {"finalizers": ["example.com/a"]}})),
                json!({"metadata": {"finalizers": ["example.com/a", "example.com/b"]}}),
            )
            .terminating(),
        case("deletionGracePeriodSeconds of a terminating object", core("ConfigMap"), "configmaps", "u6")
            .patch(
                cm("u6", json!({"metadata": {"finalizers": ["example.com/a"]}})),
                json!({"metadata": {"deletionGracePeriodSeconds": 5}}),
            )
            .terminating(),
        case("a Service's clusterIP", core("Service"), "services", "u7").patch(
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "u7", "namespace": NS},
                   "spec": {"ports": [{"port": 80}]}}),
            json!({"spec": {"clusterIP": "10.0.0.99"}}),
        ),
        case("a Deployment's selector", apps("Deployment"), "deployments", "u8").patch(
            {
                let mut d = deployment("u8", good_deployment_spec());
                d["spec"]["template"]["metadata"]["labels"]["tier"] = json!("web");
                d
            },
            json!({"spec": {"selector": {"matchLabels": {"tier": "web"}}}}),
        ),
        case("PUT: a ConfigMap's data value is a number", core("ConfigMap"), "configmaps", "u13")
            .update(cm("u13", json!({})), cm("u13", json!({"data": {"foo": 1}}))),
        case("PUT: data of an immutable ConfigMap", core("ConfigMap"), "configmaps", "u14").update(
            cm("u14", json!({"immutable": true, "data": {"a": "b"}})),
            cm("u14", json!({"immutable": true, "data": {"a": "c"}})),
        ),
        case("status: a count is a string", apps("Deployment"), "deployments", "u15")
            .patch(deployment("u15", good_deployment_spec()), json!({"status": {"replicas": "3"}}))
            .status()
            .fields(),
        case("status: a uid", apps("Deployment"), "deployments", "u16")
            .patch(deployment("u16", good_deployment_spec()), json!({"metadata": {"uid": "abc"}}))
            .status(),
        case("a Job's template", batch("Job"), "jobs", "u9")
            .patch(
                json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "u9", "namespace": NS},
                       "spec": {"template": {"spec": {"restartPolicy": "Never",
                                "containers": [{"name": "c", "image": "i"}]}}}}),
                json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "j"}]}}}}),
            )
            .fields(),
        case("a Pod's restartPolicy", core("Pod"), "pods", "u10")
            .patch(
                pod("u10", pod_spec(json!([{"name": "c", "image": "i"}]))),
                json!({"spec": {"restartPolicy": "Never"}}),
            )
            .fields(),
        case("a claim's access modes", core("PersistentVolumeClaim"), "persistentvolumeclaims", "u11")
            .patch(
                json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                       "metadata": {"name": "u11", "namespace": NS},
                       "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
                json!({"spec": {"accessModes": ["ReadWriteMany"]}}),
            )
            .fields(),
        case("a StatefulSet's serviceName", apps("StatefulSet"), "statefulsets", "u12")
            .patch(
                json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                       "metadata": {"name": "u12", "namespace": NS},
                       "spec": {"serviceName": "a", "selector": {"matchLabels": {"app": "a"}},
                                "template": {"metadata": {"labels": {"app": "a"}},
                                             "spec": pod_spec(json!([{"name": "c", "image": "i"}]))}}}),
                json!({"spec": {"serviceName": "b"}}),
            )
            .fields(),
    ]
}

/// The writes both accept: unknown fields outside an apply, allowed updates.
fn accepted() -> Vec<Case> {
    let core = |k| ("", "v1", k);
    vec![
        case(
            "an undeclared field in a create",
            core("ConfigMap"),
            "configmaps",
            "ok1",
        )
        .create(cm("ok1", json!({"bogus": 1, "data": {"a": "b"}}))),
        case("a Pod's image", core("Pod"), "pods", "ok2").patch(
            pod("ok2", pod_spec(json!([{"name": "c", "image": "i"}]))),
            json!({"spec": {"containers": [{"name": "c", "image": "j"}]}}),
        ),
        case(
            "a mutable ConfigMap's data",
            core("ConfigMap"),
            "configmaps",
            "ok3",
        )
        .patch(
            cm("ok3", json!({"data": {"a": "b"}})),
            json!({"data": {"a": "c"}}),
        ),
        case(
            "a finalizer removed from a terminating object",
            core("ConfigMap"),
            "configmaps",
            "ok4",
        )
        .patch(
            cm(
                "ok4",
                json!({"metadata": {"finalizers": ["example.com/a", "example.com/b"]}}),
            ),
            json!({"metadata": {"finalizers": ["example.com/a"]}}),
        )
        .terminating(),
        case(
            "an int-or-string as a string and a number quantity",
            ("apps", "v1", "Deployment"),
            "deployments",
            "ok5",
        )
        .create({
            let mut d = deployment("ok5", good_deployment_spec());
            d["spec"]["strategy"] =
                json!({"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}});
            d["spec"]["template"]["spec"]["containers"][0]["resources"] =
                json!({"limits": {"cpu": 1.5, "memory": "1Gi"}});
            d
        }),
    ]
}

fn collection(gvk: &Gvk, plural: &str) -> String {
    let base = if gvk.group.is_empty() {
        format!("/api/{}", gvk.version)
    } else {
        format!("/apis/{}/{}", gvk.group, gvk.version)
    };
    if plural == "namespaces" {
        format!("{base}/{plural}")
    } else {
        format!("{base}/namespaces/{NS}/{plural}")
    }
}

/// Sends `body` with `method` and `content_type`; the status code and the
/// answer as JSON.
async fn send(
    client: &kube::Client,
    method: &str,
    uri: &str,
    content_type: &str,
    body: &Value,
) -> (u16, Value) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("Content-Type", content_type)
        .body(kube::client::Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap();
    let resp = client.send(req).await.unwrap();
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect_bytes().await.unwrap();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// The server's answer to `case`, and the stored object before the write.
async fn server(client: &kube::Client, case: &Case) -> (u16, Value, Option<Value>) {
    let coll = collection(&case.gvk, case.plural);
    let stored_at = format!("{coll}/{}", case.name);
    let one = if case.status {
        format!("{stored_at}/status")
    } else {
        stored_at.clone()
    };
    let mut stored = None;
    if let Some(before) = &case.before {
        let (code, made) = send(client, "POST", &coll, "application/json", before).await;
        assert!(code < 300, "{}: setting up: {made}", case.what);
        if case.terminating {
            let (code, gone) =
                send(client, "DELETE", &stored_at, "application/json", &json!({})).await;
            assert!(code < 300, "{}: deleting: {gone}", case.what);
        }
        stored = Some(get_json(client, &stored_at).await);
    }
    let (code, answer) = match case.write {
        Write::Create => send(client, "POST", &coll, "application/json", &case.body).await,
        Write::Update => send(client, "PUT", &one, "application/json", &case.body).await,
        Write::Apply => {
            let uri = format!("{one}?fieldManager=conformance");
            send(
                client,
                "PATCH",
                &uri,
                "application/apply-patch+yaml",
                &case.body,
            )
            .await
        }
        Write::Patch => {
            send(
                client,
                "PATCH",
                &one,
                "application/merge-patch+json",
                &case.body,
            )
            .await
        }
    };
    (code, answer, stored)
}

/// The validator's answer to `case` (given the stored object).
fn validator(case: &Case, stored: Option<&Value>) -> Result<(), openapi::Refusal> {
    match (case.write, stored) {
        (Write::Patch | Write::Update, Some(old)) => {
            let mut new = old.clone();
            if case.write == Write::Patch {
                merge(&mut new, &case.body);
            } else {
                new = case.body.clone();
            }
            if case.status {
                openapi::validate_status_update(&case.gvk, old, &new, case.write)
            } else {
                openapi::validate_update(&case.gvk, old, &new, case.write)
            }
        }
        _ => openapi::validate_create(&case.gvk, &case.body, case.write),
    }
}

fn cause_set(causes: &Value, with_message: bool) -> BTreeSet<String> {
    causes
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let mut s = format!(
                "{} ({})",
                c["field"].as_str().unwrap_or(""),
                c["reason"].as_str().unwrap_or("")
            );
            if with_message {
                s.push_str(&format!(": {}", c["message"].as_str().unwrap_or("")));
            }
            s
        })
        .collect()
}

#[tokio::test]
async fn refusals_match_the_api_server() {
    let cp = ControlPlane::shared();
    let _logs = cp.logs_on_failure();
    let client = cp.admin_client().await;
    namespace(&client, NS, json!({})).await;
    let mut problems = Vec::new();
    let mut report = Vec::new();
    for case in cases() {
        let (code, answer, stored) = server(&client, &case).await;
        let Err(refusal) = validator(&case, stored.as_ref()) else {
            problems.push(format!(
                "{}: the validator accepts what the server answers {code}: {answer}",
                case.what
            ));
            continue;
        };
        let ours = serde_json::to_value(refusal.status()).unwrap();
        report.push(format!(
            "{} -> {code} {}",
            case.what,
            answer["message"].as_str().unwrap_or("")
        ));
        let exact = case.compare == Compare::Exact;
        let theirs_causes = cause_set(&answer["details"]["causes"], exact);
        let ours_causes = cause_set(&ours["details"]["causes"], exact);
        let same = code == ours["code"].as_u64().unwrap_or(0) as u16
            && answer["reason"] == ours["reason"]
            && theirs_causes == ours_causes
            && (!exact || answer["message"] == ours["message"]);
        if !same {
            problems.push(format!(
                "{} ({:?}):\n  server:    {code} {} {}\n             {theirs_causes:?}\n  validator: {} {} {}\n             {ours_causes:?}",
                case.what,
                case.write,
                answer["reason"],
                answer["message"],
                ours["code"],
                ours["reason"],
                ours["message"],
            ));
        }
    }
    for case in accepted() {
        let (code, answer, stored) = server(&client, &case).await;
        if code >= 300 {
            problems.push(format!("{}: the server refuses it: {answer}", case.what));
        }
        if let Err(refusal) = validator(&case, stored.as_ref()) {
            problems.push(format!(
                "{}: the validator refuses it: {refusal}",
                case.what
            ));
        }
    }
    eprintln!("{}", report.join("\n"));
    assert!(
        problems.is_empty(),
        "{} disagreements:\n{}",
        problems.len(),
        problems.join("\n")
    );
}
