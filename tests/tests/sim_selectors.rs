//! Field selectors as the simulations read them (`FieldSelector::matches`,
//! behind `kubewasm test` and `run --local`) against the real API server:
//! the same objects, listed by the server with each selector, and matched
//! by the host; the same names must come back. The cases are the fields
//! the server computes or defaults (a Node's `spec.unschedulable`, a Job's
//! `status.successful`, a Pod's `spec.hostNetwork` and `status.podIP`, a
//! ReplicationController's `status.replicas`, an Event's `source`). API
//! server only (`ControlPlane::shared()`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kubewasm::informer::selector::FieldSelector;
use kubewasm::object::{KObject, StripOptions};
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::namespace;
use serde_json::{Value, json};

const NS: &str = "sim-selectors";
const LABEL: &str = "kubewasm.test/sim-selectors=yes";

fn api(
    client: &kube::Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// Creates `object` (and its `status` through the subresource).
async fn create(api: &Api<DynamicObject>, mut object: Value) {
    object["metadata"]["labels"] = json!({"kubewasm.test/sim-selectors": "yes"});
    let status = object.as_object_mut().unwrap().remove("status");
    let name = object["metadata"]["name"].as_str().unwrap().to_owned();
    let obj: DynamicObject = serde_json::from_value(object.clone()).unwrap();
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("create {name}: {e}"),
    }
    if let Some(status) = status {
        let mut doc = object;
        doc["status"] = status;
        api.patch_status(
            &name,
            &PatchParams::apply("sim-selectors").force(),
            &Patch::Apply(&doc),
        )
        .await
        .unwrap();
    }
}

/// The names the server lists with `selector`, and those the host's
/// matcher selects among the same objects as the server serves them.
async fn both(api: &Api<DynamicObject>, selector: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let served = api
        .list(&ListParams::default().labels(LABEL).fields(selector))
        .await
        .unwrap_or_else(|e| panic!("list with {selector}: {e}"));
    let server = served
        .items
        .iter()
        .map(|o| o.metadata.name.clone().unwrap())
        .collect();
    let all = api
        .list(&ListParams::default().labels(LABEL))
        .await
        .unwrap();
    let sel = FieldSelector::parse(selector).unwrap();
    let host = all
        .items
        .iter()
        .filter(|o| {
            let mut v = serde_json::to_value(o).unwrap();
            // A list's items leave out apiVersion and kind; the informer's
            // objects carry them.
            v["apiVersion"] = json!(all.types.api_version.clone());
            v["kind"] = json!(all.types.kind.trim_end_matches("List"));
            sel.matches(&KObject::from_value(v, StripOptions::default()).unwrap())
        })
        .map(|o| o.metadata.name.clone().unwrap())
        .collect();
    (server, host)
}

#[tokio::test]
async fn the_simulations_select_what_the_server_selects() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    namespace(&client, NS, json!({})).await;
    let nodes = api(&client, "", "v1", "Node", "nodes", None);
    create(
        &nodes,
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "sim-sel-ready"}}),
    )
    .await;
    create(
        &nodes,
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "sim-sel-cordoned"},
        "spec": {"unschedulable": true}}),
    )
    .await;
    let jobs = api(&client, "batch", "v1", "Job", "jobs", Some(NS));
    let job = |name: &str| {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox"}]}}}})
    };
    create(&jobs, job("fresh")).await;
    let mut done = job("done");
    done["status"] = json!({"succeeded": 2});
    create(&jobs, done).await;
    let pods = api(&client, "", "v1", "Pod", "pods", Some(NS));
    let pod = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    };
    create(&pods, pod("plain")).await;
    let mut host = pod("host");
    host["spec"]["hostNetwork"] = json!(true);
    host["status"] = json!({"podIP": "10.0.0.7", "podIPs": [{"ip": "10.0.0.7"}]});
    create(&pods, host).await;
    let rcs = api(
        &client,
        "",
        "v1",
        "ReplicationController",
        "replicationcontrollers",
        Some(NS),
    );
    create(&rcs, json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "rc"},
        "spec": {"replicas": 0, "selector": {"app": "x"}, "template": {"metadata": {"labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}})).await;
    let events = api(&client, "", "v1", "Event", "events", Some(NS));
    create(
        &events,
        json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "ev"},
        "involvedObject": {"kind": "Pod", "name": "plain", "namespace": NS},
        "reason": "Test", "source": {"component": "kubelet"}, "type": "Normal"}),
    )
    .await;

    let cases: [(&Api<DynamicObject>, &str); 12] = [
        (&nodes, "spec.unschedulable=false"),
        (&nodes, "spec.unschedulable=true"),
        (&nodes, "spec.unschedulable!=true"),
        (&jobs, "status.successful=0"),
        (&jobs, "status.successful=2"),
        (&pods, "spec.hostNetwork=false"),
        (&pods, "spec.hostNetwork=true"),
        (&pods, "status.podIP=10.0.0.7"),
        (&pods, "status.podIP="),
        (&rcs, "status.replicas=0"),
        (&events, "source=kubelet"),
        (&events, "source!=kubelet"),
    ];
    let mut differ = Vec::new();
    for (api, selector) in cases {
        let (server, host) = both(api, selector).await;
        if server != host {
            differ.push(format!(
                "{selector}: server {server:?}, simulation {host:?}"
            ));
        }
    }
    assert!(
        differ.is_empty(),
        "the simulations select otherwise:\n{}",
        differ.join("\n")
    );
}
