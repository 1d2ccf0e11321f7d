//! Informers read built-in kinds as protobuf on the wire (`wire: auto`)
//! and cache exactly what they cache reading JSON (`wire: json`): the
//! host's own KubeSource against a real API server, every object's cached
//! text compared, across streaming and paged initial lists and a watch
//! update after the sync. Custom resources stay JSON, as the server
//! answers them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubewasm::informer::{InformerSpec, Source, SourceError, WatchEvent};
use kubewasm::kind::{Gvk, KindRegistry};
use kubewasm::object::StripOptions;
use kubewasm::source::kube::{Discovery, InitialList, KubeSource, KubeTarget, Wire};
use kubewasm::telemetry::WireCounters;
use kubewasm_tests::controlplane::ControlPlane;
use serde_json::json;

const NS: &str = "wire";

async fn create<K>(api: &Api<K>, value: serde_json::Value)
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let object: K = serde_json::from_value(value).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();
}

/// A handful of objects of each kind: Pods, ConfigMaps with binary data,
/// a Service, a Deployment, and a custom resource with its CRD.
async fn populate(admin: &kube::Client) {
    create(
        &Api::<Namespace>::all(admin.clone()),
        json!({"metadata": {"name": NS}}),
    )
    .await;
    let pods = Api::<Pod>::namespaced(admin.clone(), NS);
    for i in 0..5 {
        create(
            &pods,
            json!({
                "metadata": {"name": format!("pod-{i}"), "labels": {"app": "web", "i": i.to_string()},
                             "annotations": {"note": "ü \u{2028} <&>"}},
                "spec": {"containers": [{
                    "name": "c", "image": "registry.k8s.io/pause:3.10",
                    "ports": [{"containerPort": 8080, "name": "http"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                    "env": [{"name": "X", "value": "1"}]
                }]}
            }),
        )
        .await;
    }
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), NS);
    for i in 0..3 {
        create(
            &cms,
            json!({
                "metadata": {"name": format!("cm-{i}")},
                "data": {"text": "line\nnext", "empty": ""},
                "binaryData": {"bin": "AP8KgA=="}
            }),
        )
        .await;
    }
    create(
        &Api::<Service>::namespaced(admin.clone(), NS),
        json!({
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]}
        }),
    )
    .await;
    create(
        &Api::<Deployment>::namespaced(admin.clone(), NS),
        json!({
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
                }
            }
        }),
    )
    .await;
    create(
        &Api::<CustomResourceDefinition>::all(admin.clone()),
        json!({
            "metadata": {"name": "widgets.wire.example.com"},
            "spec": {
                "group": "wire.example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}}]
            }
        }),
    )
    .await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("wire.example.com", "v1", "Widget"),
        "widgets",
    );
    let widgets = Api::<DynamicObject>::namespaced_with(admin.clone(), NS, &ar);
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "wire.example.com/v1", "kind": "Widget",
        "metadata": {"name": "w"}, "spec": {"size": 3, "tags": ["a", "b"]}
    }))
    .unwrap();
    // The CRD is served moments after it is established.
    for attempt in 0.. {
        match widgets.create(&PostParams::default(), &widget).await {
            Ok(_) => break,
            Err(e) if attempt < 100 => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("creating the widget: {e}"),
        }
    }
}

type Events = BoxStream<'static, Result<WatchEvent, SourceError>>;

/// The informer's stream of one kind in `NS`, and its initial list's
/// cached texts by object name.
async fn sync(source: &KubeSource, spec: &InformerSpec) -> (Events, BTreeMap<String, String>) {
    let mut events = source.watch(spec);
    let mut cached = BTreeMap::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(30), events.next())
            .await
            .expect("the initial list ends")
            .expect("the stream goes on")
            .unwrap_or_else(|e| panic!("{spec}: {e}"));
        match event {
            WatchEvent::Init => cached.clear(),
            WatchEvent::InitApply(o) => {
                cached.insert(o.key().to_string(), o.json().to_owned());
            }
            WatchEvent::InitDone => return (events, cached),
            other => panic!("{spec}: unexpected {other:?}"),
        }
    }
}

/// The next applied object named `key` in `events`, as cached.
async fn next_apply(events: &mut Events, key: &str) -> String {
    loop {
        let event = tokio::time::timeout(Duration::from_secs(30), events.next())
            .await
            .expect("a watch event")
            .expect("the stream goes on")
            .unwrap();
        match event {
            WatchEvent::Apply(o) if o.key().to_string() == key => return o.json().to_owned(),
            WatchEvent::Apply(_) => {}
            WatchEvent::Progress => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

struct Run {
    source: KubeSource,
    counters: WireCounters,
}

/// The host's API-server source over `kubeconfig`'s cluster, reading in
/// `wire`, with discovery's kinds; lists paged by `page_size`.
async fn source(
    kubeconfig: &std::path::Path,
    wire: Wire,
    initial_list: InitialList,
    page_size: u32,
) -> (Run, KindRegistry) {
    let mut target = KubeTarget::new(Some(kubeconfig.to_owned()), None);
    target.wire = wire;
    let counters = WireCounters::default();
    let client = target.client_counted(counters.clone()).await.unwrap();
    let kinds = KindRegistry::default();
    Discovery::new(client.clone(), kinds.clone())
        .run()
        .await
        .unwrap();
    // Everything kept: managedFields are transcoded too.
    let strip = StripOptions {
        managed_fields: false,
        last_applied: false,
    };
    let source = KubeSource::new(client, strip, initial_list, page_size);
    (Run { source, counters }, kinds)
}

fn spec(kinds: &KindRegistry, group: &str, version: &str, kind: &str) -> InformerSpec {
    InformerSpec {
        kind: kinds
            .by_gvk(&Gvk::new(group, version, kind))
            .unwrap_or_else(|| panic!("{group}/{version} {kind} not discovered")),
        namespace: Some(NS.into()),
        label_selector: None,
        field_selector: None,
    }
}

const KINDS: [(&str, &str, &str); 5] = [
    ("", "v1", "Pod"),
    ("", "v1", "ConfigMap"),
    ("", "v1", "Service"),
    ("apps", "v1", "Deployment"),
    ("wire.example.com", "v1", "Widget"),
];

#[tokio::test]
async fn protobuf_and_json_informers_cache_the_same_text() {
    let cp = ControlPlane::start().await.unwrap();
    let _logs = cp.logs_on_failure();
    let admin = cp.admin_client().await;
    populate(&admin).await;

    // The server answers a custom resource's list in JSON even when
    // protobuf is asked for first.
    let req = http::Request::get(format!("/apis/wire.example.com/v1/namespaces/{NS}/widgets"))
        .header(
            http::header::ACCEPT,
            kubewasm::source::kube::wire::ACCEPT_PROTOBUF,
        )
        .body(kube::client::Body::empty())
        .unwrap();
    let res = admin.send(req).await.unwrap();
    let content_type = res.headers()[http::header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("application/json"),
        "{content_type}"
    );

    for initial_list in [InitialList::Stream, InitialList::Paged] {
        let (auto, kinds) = source(cp.admin_kubeconfig(), Wire::Auto, initial_list, 2).await;
        let (json, _) = source(cp.admin_kubeconfig(), Wire::Json, initial_list, 2).await;
        for (group, version, kind) in KINDS {
            let spec = spec(&kinds, group, version, kind);
            let before = auto.counters.protobuf.get();
            let (_, from_protobuf) = sync(&auto.source, &spec).await;
            let (_, from_json) = sync(&json.source, &spec).await;
            assert!(!from_json.is_empty(), "{spec}: nothing listed");
            assert_eq!(from_protobuf, from_json, "{spec} ({initial_list:?})");
            let protobuf = auto.counters.protobuf.get() - before;
            if group.ends_with("example.com") {
                assert_eq!(protobuf, 0, "{spec}: a custom resource came in protobuf");
            } else {
                assert!(
                    protobuf > 0,
                    "{spec}: no protobuf response ({initial_list:?})"
                );
            }
        }
        assert_eq!(json.counters.protobuf.get(), 0);
        assert!(json.counters.json.get() > 0);
    }

    // A watch update after the sync arrives transcoded, as JSON has it.
    let (auto, kinds) = source(cp.admin_kubeconfig(), Wire::Auto, InitialList::Auto, 2).await;
    let (json, _) = source(cp.admin_kubeconfig(), Wire::Json, InitialList::Auto, 2).await;
    let pods = spec(&kinds, "", "v1", "Pod");
    let (mut from_protobuf, _) = sync(&auto.source, &pods).await;
    let (mut from_json, _) = sync(&json.source, &pods).await;
    let watches = auto.counters.protobuf.get();
    Api::<Pod>::namespaced(admin.clone(), NS)
        .patch(
            "pod-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"updated": "yes"}}})),
        )
        .await
        .unwrap();
    let key = format!("{NS}/pod-0");
    let updated = next_apply(&mut from_protobuf, &key).await;
    assert!(updated.contains(r#""updated":"yes""#), "{updated}");
    assert_eq!(updated, next_apply(&mut from_json, &key).await);
    // The watch itself was protobuf (counted when it started).
    assert!(watches > 0);
}

/// By hand, against a cluster of many Pods (e.g. bench's loader's):
/// `KUBEWASM_WIRE_KUBECONFIG=K cargo test -p kubewasm-tests --test wire
/// -- --ignored`. Every Pod's cached text, read in protobuf and in JSON
/// (paged lists of every namespace), must be the same.
#[tokio::test]
#[ignore = "needs KUBEWASM_WIRE_KUBECONFIG: a cluster to compare on"]
async fn protobuf_and_json_agree_on_every_pod_of_a_cluster() {
    let kubeconfig = std::path::PathBuf::from(
        std::env::var_os("KUBEWASM_WIRE_KUBECONFIG").expect("KUBEWASM_WIRE_KUBECONFIG"),
    );
    let mut cached = Vec::new();
    for wire in [Wire::Auto, Wire::Json] {
        let (Run { source, counters }, kinds) =
            source(&kubeconfig, wire, InitialList::Paged, 500).await;
        let mut pods = spec(&kinds, "", "v1", "Pod");
        pods.namespace = None;
        let (_, texts) = sync(&source, &pods).await;
        eprintln!(
            "{wire:?}: {} Pods, responses protobuf {} json {}",
            texts.len(),
            counters.protobuf.get(),
            counters.json.get()
        );
        cached.push(texts);
    }
    assert_eq!(cached[0].len(), cached[1].len());
    for (key, text) in &cached[0] {
        assert_eq!(Some(text), cached[1].get(key), "{key}");
    }
}
