//! The simulated API server (`kubewasm::sim`, behind `kubewasm test` and
//! `run --local`) against the real one: the same actions, through the
//! host's own sink on one side and each simulation on the other (the
//! test runner's cluster, the embedded local cluster), and the same
//! transcript of answers (the error class the executor sees) and
//! resulting objects (their volatile fields reduced to what a plugin can
//! rely on: a resourceVersion kept or moved, a deletionTimestamp there or
//! not). API server only (`ControlPlane::shared()`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kube::api::{Api, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kubewasm::actions::executor::{ActionError, ActionSink};
use kubewasm::actions::{Action, PatchType, Preconditions, Propagation, Target};
use kubewasm::kind::{KindInfo, KindRegistry};
use kubewasm::object::StripOptions;
use kubewasm::runtime::harness::Harness;
use kubewasm::source::kube::KubeSink;
use kubewasm::source::local::LocalCluster;
use kubewasm::testing::cluster::SimCluster;
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::{eventually, namespace};
use serde_json::{Value, json};

const GROUP: &str = "sim.kubewasm.test";
const BOGUS_UID: &str = "00000000-0000-0000-0000-000000000000";

fn configmaps() -> KindInfo {
    KindInfo::new("", "v1", "ConfigMap", "configmaps", true)
}
fn deployments() -> KindInfo {
    KindInfo::new("apps", "v1", "Deployment", "deployments", true)
}
fn pods() -> KindInfo {
    KindInfo::new("", "v1", "Pod", "pods", true)
}
/// A custom resource with a status subresource.
fn widgets() -> KindInfo {
    KindInfo::new(GROUP, "v1", "Widget", "widgets", true)
}
/// A custom resource without one: its status is a field like any other.
fn gadgets() -> KindInfo {
    KindInfo::new(GROUP, "v1", "Gadget", "gadgets", true)
}

fn crd(kind: &KindInfo, status: bool) -> Value {
    let mut version = json!({"name": "v1", "served": true, "storage": true,
        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}});
    if status {
        version["subresources"] = json!({"status": {}});
    }
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{}.{GROUP}", kind.plural)},
        "spec": {"group": GROUP, "scope": "Namespaced",
            "names": {"kind": kind.gvk.kind, "plural": kind.plural, "singular": kind.gvk.kind.to_lowercase(), "listKind": format!("{}List", kind.gvk.kind)},
            "versions": [version]}})
}

fn target(kind: &KindInfo, ns: &str, name: &str) -> Target {
    Target::new(kind.clone(), Some(ns.into()), name)
}

fn object(kind: &KindInfo, ns: &str, name: &str, body: Value) -> Value {
    let mut o = json!({"apiVersion": kind.gvk.api_version(), "kind": kind.gvk.kind,
        "metadata": {"name": name, "namespace": ns}});
    json_patch::merge(&mut o, &body);
    o
}

fn apply(kind: &KindInfo, ns: &str, name: &str, body: Value) -> Action {
    Action::Apply {
        target: target(kind, ns, name),
        object: object(kind, ns, name, body),
        force: true,
        status: false,
    }
}

fn apply_status(kind: &KindInfo, ns: &str, name: &str, body: Value) -> Action {
    Action::Apply {
        target: target(kind, ns, name),
        object: object(kind, ns, name, body),
        force: true,
        status: true,
    }
}

fn merge(kind: &KindInfo, ns: &str, name: &str, patch: Value) -> Action {
    Action::Patch {
        target: target(kind, ns, name),
        patch_type: PatchType::Merge,
        patch,
    }
}

fn json_patch(kind: &KindInfo, ns: &str, name: &str, ops: Value) -> Action {
    Action::Patch {
        target: target(kind, ns, name),
        patch_type: PatchType::Json,
        patch: ops,
    }
}

fn delete(kind: &KindInfo, ns: &str, name: &str) -> Action {
    Action::Delete {
        target: target(kind, ns, name),
        propagation: Propagation::Background,
    }
}

fn deployment(replicas: i64) -> Value {
    json!({"spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "d"}},
        "template": {"metadata": {"labels": {"app": "d"}},
            "spec": {"containers": [{"name": "c", "image": "example.com/c:1"}]}}}})
}

enum Side {
    Real {
        sink: Box<KubeSink>,
        client: kube::Client,
    },
    Sim(Arc<SimCluster>),
    /// The embedded cluster over a folder (kept while it runs).
    Local {
        cluster: Arc<LocalCluster>,
        _folder: tempfile::TempDir,
    },
}

impl Side {
    async fn run(&self, action: &Action) -> Result<(), ActionError> {
        match self {
            Side::Real { sink, .. } => sink.execute("sim-test", action).await,
            Side::Sim(c) => {
                c.begin_call(std::slice::from_ref(action));
                c.execute("sim-test", action).await
            }
            Side::Local { cluster: c, .. } => c.execute("sim-test", action).await,
        }
    }

    async fn get(&self, kind: &KindInfo, ns: &str, name: &str) -> Option<Value> {
        match self {
            Side::Real { client, .. } => {
                let gvk = GroupVersionKind::gvk(&kind.gvk.group, &kind.gvk.version, &kind.gvk.kind);
                let ar = ApiResource::from_gvk_with_plural(&gvk, &kind.plural);
                Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar)
                    .get_opt(name)
                    .await
                    .unwrap()
                    .map(|o| serde_json::to_value(o).unwrap())
            }
            Side::Sim(c) => c
                .objects()
                .into_iter()
                .find(|((gvk, key), _)| {
                    *gvk == kind.gvk && key.namespace.as_deref() == Some(ns) && &*key.name == name
                })
                .map(|(_, v)| v),
            Side::Local { cluster: c, .. } => c.get(&kind.gvk, Some(ns), name),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Side::Real { .. } => "server",
            Side::Sim(_) => "simulation",
            Side::Local { .. } => "local cluster",
        }
    }
}

/// What a scenario saw, line by line, to compare across sides.
struct Transcript<'a> {
    side: &'a Side,
    lines: Vec<String>,
    /// The last resourceVersion seen per object.
    rvs: std::collections::BTreeMap<String, String>,
}

impl<'a> Transcript<'a> {
    fn new(side: &'a Side) -> Self {
        Self {
            side,
            lines: Vec::new(),
            rvs: Default::default(),
        }
    }

    /// Runs `action`; notes its answer's class (and prints the message).
    async fn run(&mut self, label: &str, action: Action) -> Result<(), ActionError> {
        let r = self.side.run(&action).await;
        let class = match &r {
            Ok(()) => "ok",
            Err(e) => {
                eprintln!("[{}] {label}: {e}", self.side.name());
                e.class()
            }
        };
        self.lines.push(format!("{label}: {class}"));
        r
    }

    /// Notes what a plugin can tell of the object now: whether it exists,
    /// whether its resourceVersion moved since last noted, its generation,
    /// deletion fields, and the `fields` (JSON pointers) asked.
    async fn look(&mut self, kind: &KindInfo, ns: &str, name: &str, fields: &[&str]) {
        let key = format!("{} {name}", kind.plural);
        let Some(v) = self.side.get(kind, ns, name).await else {
            self.lines.push(format!("  {key}: gone"));
            self.rvs.remove(&key);
            return;
        };
        eprintln!("[{}] {key}: {v}", self.side.name());
        let rv = v["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let moved = match self.rvs.insert(key.clone(), rv.clone()) {
            None => "new",
            Some(old) if old == rv => "kept",
            Some(_) => "moved",
        };
        let m = &v["metadata"];
        let mut line = format!(
            "  {key}: rv {moved}, generation {}, deletionTimestamp {}, grace {}, finalizers {}",
            m["generation"],
            m["deletionTimestamp"].is_string(),
            m["deletionGracePeriodSeconds"],
            m["finalizers"]
        );
        for f in fields {
            // An empty status is how the server stores none.
            let value = match v.pointer(f) {
                None | Some(Value::Null) => Value::Null,
                Some(Value::Object(m)) if m.is_empty() => Value::Null,
                Some(x) => x.clone(),
            };
            line.push_str(&format!(", {f} {value}"));
        }
        self.lines.push(line);
    }
}

async fn body_preconditions(side: &Side, ns: &str) -> Vec<String> {
    let cm = configmaps();
    let mut t = Transcript::new(side);
    let _ = t
        .run(
            "apply creating with a resourceVersion in the body",
            apply(
                &cm,
                ns,
                "new-rv",
                json!({"metadata": {"resourceVersion": "12345"}, "data": {"v": "0"}}),
            ),
        )
        .await;
    t.look(&cm, ns, "new-rv", &[]).await;
    let _ = t
        .run(
            "apply creating with a uid in the body",
            apply(
                &cm,
                ns,
                "new-uid",
                json!({"metadata": {"uid": BOGUS_UID}, "data": {"v": "0"}}),
            ),
        )
        .await;
    t.look(&cm, ns, "new-uid", &[]).await;
    t.run("apply", apply(&cm, ns, "a", json!({"data": {"v": "0"}})))
        .await
        .unwrap();
    t.look(&cm, ns, "a", &[]).await;
    let stored = side.get(&cm, ns, "a").await.unwrap();
    let (uid, rv) = (
        stored["metadata"]["uid"].as_str().unwrap().to_owned(),
        stored["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_owned(),
    );
    let _ = t
        .run(
            "apply with a stale resourceVersion in the body",
            apply(
                &cm,
                ns,
                "a",
                json!({"metadata": {"resourceVersion": "1"}, "data": {"v": "1"}}),
            ),
        )
        .await;
    let _ = t
        .run(
            "apply with another uid in the body",
            apply(
                &cm,
                ns,
                "a",
                json!({"metadata": {"uid": BOGUS_UID}, "data": {"v": "1"}}),
            ),
        )
        .await;
    let _ = t
        .run(
            "merge patch with a stale resourceVersion in the body",
            merge(
                &cm,
                ns,
                "a",
                json!({"metadata": {"resourceVersion": "1"}, "data": {"v": "1"}}),
            ),
        )
        .await;
    let _ = t
        .run(
            "merge patch with another uid in the body",
            merge(
                &cm,
                ns,
                "a",
                json!({"metadata": {"uid": BOGUS_UID}, "data": {"v": "1"}}),
            ),
        )
        .await;
    let mut guarded = merge(&cm, ns, "a", json!({"data": {"v": "1"}}));
    if let Action::Patch { target, .. } = &mut guarded {
        target.preconditions = Preconditions {
            uid: Some(BOGUS_UID.into()),
            resource_version: None,
        };
    }
    let _ = t
        .run("merge patch with a uid precondition that fails", guarded)
        .await;
    let _ = t
        .run(
            "JSON patch whose test fails",
            json_patch(
                &cm,
                ns,
                "a",
                json!([{"op": "test", "path": "/data/v", "value": "9"},
                    {"op": "replace", "path": "/data/v", "value": "1"}]),
            ),
        )
        .await;
    let _ = t
        .run(
            "JSON patch adding a stale resourceVersion",
            json_patch(
                &cm,
                ns,
                "a",
                json!([{"op": "add", "path": "/metadata/resourceVersion", "value": "1"},
                    {"op": "replace", "path": "/data/v", "value": "1"}]),
            ),
        )
        .await;
    let _ = t
        .run(
            "JSON patch replacing the uid",
            json_patch(
                &cm,
                ns,
                "a",
                json!([{"op": "replace", "path": "/metadata/uid", "value": BOGUS_UID}]),
            ),
        )
        .await;
    t.look(&cm, ns, "a", &["/data/v"]).await;
    t.run(
        "apply with the current uid and resourceVersion in the body",
        apply(
            &cm,
            ns,
            "a",
            json!({"metadata": {"uid": uid, "resourceVersion": rv}, "data": {"v": "2"}}),
        ),
    )
    .await
    .unwrap();
    t.look(&cm, ns, "a", &["/data/v"]).await;
    let now = side.get(&cm, ns, "a").await.unwrap();
    assert_eq!(now["metadata"]["uid"], uid.as_str(), "{}", side.name());
    let rv = now["metadata"]["resourceVersion"].clone();
    t.run(
        "merge patch with the current resourceVersion in the body",
        merge(
            &cm,
            ns,
            "a",
            json!({"metadata": {"resourceVersion": rv}, "data": {"v": "3"}}),
        ),
    )
    .await
    .unwrap();
    t.look(&cm, ns, "a", &["/data/v"]).await;
    t.lines
}

async fn unchanged_writes(side: &Side, ns: &str) -> Vec<String> {
    let (cm, deploy) = (configmaps(), deployments());
    let mut t = Transcript::new(side);
    t.run("apply", apply(&cm, ns, "n", json!({"data": {"v": "0"}})))
        .await
        .unwrap();
    t.look(&cm, ns, "n", &[]).await;
    t.run(
        "the same apply",
        apply(&cm, ns, "n", json!({"data": {"v": "0"}})),
    )
    .await
    .unwrap();
    t.look(&cm, ns, "n", &[]).await;
    t.run(
        "a merge patch that changes nothing",
        merge(&cm, ns, "n", json!({"data": {"v": "0"}})),
    )
    .await
    .unwrap();
    t.look(&cm, ns, "n", &[]).await;
    t.run(
        "a JSON patch that changes nothing",
        json_patch(
            &cm,
            ns,
            "n",
            json!([{"op": "replace", "path": "/data/v", "value": "0"}]),
        ),
    )
    .await
    .unwrap();
    t.look(&cm, ns, "n", &[]).await;
    t.run(
        "a label",
        merge(&cm, ns, "n", json!({"metadata": {"labels": {"a": "b"}}})),
    )
    .await
    .unwrap();
    t.look(&cm, ns, "n", &[]).await;
    t.run("apply a Deployment", apply(&deploy, ns, "d", deployment(1)))
        .await
        .unwrap();
    t.look(&deploy, ns, "d", &[]).await;
    t.run(
        "a label on it",
        merge(
            &deploy,
            ns,
            "d",
            json!({"metadata": {"labels": {"a": "b"}}}),
        ),
    )
    .await
    .unwrap();
    t.look(&deploy, ns, "d", &[]).await;
    t.run(
        "its spec",
        merge(&deploy, ns, "d", json!({"spec": {"replicas": 2}})),
    )
    .await
    .unwrap();
    t.look(&deploy, ns, "d", &["/spec/replicas"]).await;
    t.lines
}

async fn status_subresource(side: &Side, ns: &str) -> Vec<String> {
    let (cm, deploy, widget, gadget) = (configmaps(), deployments(), widgets(), gadgets());
    let mut t = Transcript::new(side);
    let mut body = deployment(1);
    body["status"] = json!({"replicas": 3, "observedGeneration": 7});
    t.run(
        "apply a Deployment with a status",
        apply(&deploy, ns, "s", body),
    )
    .await
    .unwrap();
    t.look(&deploy, ns, "s", &["/status"]).await;
    t.run(
        "merge patch of its status through the main resource",
        merge(&deploy, ns, "s", json!({"status": {"replicas": 4}})),
    )
    .await
    .unwrap();
    t.look(&deploy, ns, "s", &["/status"]).await;
    let mut body = deployment(9);
    body["status"] = json!({"replicas": 5, "observedGeneration": 1});
    t.run(
        "apply to its status subresource, with a spec",
        apply_status(&deploy, ns, "s", body),
    )
    .await
    .unwrap();
    t.look(&deploy, ns, "s", &["/status", "/spec/replicas"])
        .await;
    t.run(
        "apply a ConfigMap",
        apply(&cm, ns, "c", json!({"data": {"v": "0"}})),
    )
    .await
    .unwrap();
    let _ = t
        .run(
            "apply to a ConfigMap's status",
            apply_status(&cm, ns, "c", json!({"status": {"a": "b"}})),
        )
        .await;
    t.run(
        "apply a Widget with a status",
        apply(
            &widget,
            ns,
            "w",
            json!({"spec": {"size": 1}, "status": {"phase": "x"}}),
        ),
    )
    .await
    .unwrap();
    t.look(&widget, ns, "w", &["/status"]).await;
    t.run(
        "apply to its status, with a spec and a label",
        apply_status(
            &widget,
            ns,
            "w",
            json!({"metadata": {"labels": {"a": "b"}}, "spec": {"size": 5}, "status": {"phase": "y"}}),
        ),
    )
    .await
    .unwrap();
    t.look(&widget, ns, "w", &["/status", "/spec", "/metadata/labels"])
        .await;
    t.run(
        "apply a Gadget with a status",
        apply(
            &gadget,
            ns,
            "g",
            json!({"spec": {"size": 1}, "status": {"phase": "x"}}),
        ),
    )
    .await
    .unwrap();
    t.look(&gadget, ns, "g", &["/status"]).await;
    t.run(
        "merge patch of its status",
        merge(&gadget, ns, "g", json!({"status": {"phase": "y"}})),
    )
    .await
    .unwrap();
    t.look(&gadget, ns, "g", &["/status"]).await;
    let _ = t
        .run(
            "apply to a Gadget's status",
            apply_status(&gadget, ns, "g", json!({"status": {"phase": "z"}})),
        )
        .await;
    t.lines
}

async fn deletion(side: &Side, ns: &str) -> Vec<String> {
    let (cm, deploy, pod) = (configmaps(), deployments(), pods());
    let mut t = Transcript::new(side);
    t.run(
        "apply with a finalizer",
        apply(
            &cm,
            ns,
            "f",
            json!({"metadata": {"finalizers": ["example.com/f"]}, "data": {"v": "0"}}),
        ),
    )
    .await
    .unwrap();
    t.look(&cm, ns, "f", &[]).await;
    t.run("delete", delete(&cm, ns, "f")).await.unwrap();
    t.look(&cm, ns, "f", &[]).await;
    let _ = t
        .run(
            "merge patch removing the deletionTimestamp",
            merge(
                &cm,
                ns,
                "f",
                json!({"metadata": {"deletionTimestamp": null}, "data": {"v": "1"}}),
            ),
        )
        .await;
    t.look(&cm, ns, "f", &["/data/v"]).await;
    let e = t
        .run(
            "a new finalizer",
            merge(
                &cm,
                ns,
                "f",
                json!({"metadata": {"finalizers": ["example.com/f", "example.com/g"]}}),
            ),
        )
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("no new finalizers can be added if the object is being deleted"),
        "{}: {e}",
        side.name()
    );
    let _ = t.run("delete again", delete(&cm, ns, "f")).await;
    t.look(&cm, ns, "f", &[]).await;
    t.run(
        "the last finalizer removed",
        merge(&cm, ns, "f", json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    t.look(&cm, ns, "f", &[]).await;

    let mut body = deployment(1);
    body["metadata"] = json!({"finalizers": ["example.com/f"]});
    t.run(
        "apply a Deployment with a finalizer",
        apply(&deploy, ns, "d", body),
    )
    .await
    .unwrap();
    t.run("delete it", delete(&deploy, ns, "d")).await.unwrap();
    t.look(&deploy, ns, "d", &[]).await;

    let spec = |node: Option<&str>| {
        let mut s = json!({"spec": {"containers": [{"name": "c", "image": "example.com/c:1"}]}});
        if let Some(n) = node {
            s["spec"]["nodeName"] = json!(n);
        }
        s
    };
    t.run(
        "apply an unscheduled Pod",
        apply(&pod, ns, "p0", spec(None)),
    )
    .await
    .unwrap();
    t.run("delete it", delete(&pod, ns, "p0")).await.unwrap();
    t.look(&pod, ns, "p0", &[]).await;
    t.run(
        "apply a Pod bound to a node",
        apply(&pod, ns, "p1", spec(Some("ghost"))),
    )
    .await
    .unwrap();
    t.run("delete it", delete(&pod, ns, "p1")).await.unwrap();
    t.look(&pod, ns, "p1", &[]).await;
    t.run(
        "a label on it",
        merge(&pod, ns, "p1", json!({"metadata": {"labels": {"a": "b"}}})),
    )
    .await
    .unwrap();
    t.look(&pod, ns, "p1", &["/metadata/labels"]).await;
    t.lines
}

async fn sides(ns: &str) -> (Side, Side, Side) {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    namespace(&client, ns, json!({})).await;
    let crds = Api::<DynamicObject>::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let kinds = KindRegistry::builtin();
    let folder = tempfile::tempdir().unwrap();
    for (kind, status) in [(widgets(), true), (gadgets(), false)] {
        let crd = crd(&kind, status);
        kinds.learn_crd(&crd);
        // The local cluster learns its CRDs from its manifests.
        std::fs::write(
            folder.path().join(format!("{}-crd.yaml", kind.plural)),
            serde_yaml_ng::to_string(&crd).unwrap(),
        )
        .unwrap();
        let _ = crds
            .create(
                &PostParams::default(),
                &serde_json::from_value(crd).unwrap(),
            )
            .await;
        let gvk = GroupVersionKind::gvk(GROUP, "v1", &kind.gvk.kind);
        let ar = ApiResource::from_gvk_with_plural(&gvk, &kind.plural);
        let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar);
        eventually("the CRD served", Duration::from_secs(60), || {
            let api = api.clone();
            async move { api.list(&Default::default()).await.ok() }
        })
        .await;
    }
    let sim = SimCluster::new(
        kinds,
        Harness::new(SystemTime::now(), 1),
        Duration::from_secs(10),
    );
    let local = LocalCluster::new(
        folder.path().to_owned(),
        KindRegistry::builtin(),
        StripOptions::default(),
    )
    .unwrap();
    (
        Side::Real {
            sink: Box::new(KubeSink::new(client.clone())),
            client,
        },
        Side::Sim(sim),
        Side::Local {
            cluster: local,
            _folder: folder,
        },
    )
}

macro_rules! agree {
    ($name:ident, $scenario:ident, $ns:literal) => {
        #[tokio::test]
        async fn $name() {
            let (real, sim, local) = sides($ns).await;
            let server = $scenario(&real, $ns).await;
            eprintln!("server:\n{}", server.join("\n"));
            pretty_eq(
                "the test runner's cluster",
                &server,
                &$scenario(&sim, $ns).await,
            );
            pretty_eq("the local cluster", &server, &$scenario(&local, $ns).await);
        }
    };
}

fn pretty_eq(which: &str, server: &[String], simulated: &[String]) {
    if server != simulated {
        let mut out = String::new();
        for i in 0..server.len().max(simulated.len()) {
            let (a, b) = (server.get(i), simulated.get(i));
            if a == b {
                out.push_str(&format!("  {}\n", a.map_or("", String::as_str)));
            } else {
                out.push_str(&format!(
                    "- {}\n+ {}\n",
                    a.map_or("", String::as_str),
                    b.map_or("", String::as_str)
                ));
            }
        }
        panic!("{which} (+) differs from the server (-):\n{out}");
    }
}

agree!(
    preconditions_in_bodies_are_checked_as_the_server_checks_them,
    body_preconditions,
    "sim-preconditions"
);
agree!(
    writes_that_change_nothing_keep_the_resource_version,
    unchanged_writes,
    "sim-unchanged"
);
agree!(
    status_goes_through_the_status_subresource_where_a_kind_has_one,
    status_subresource,
    "sim-status"
);
agree!(
    deletion_marks_holds_and_finishes_as_the_server_does,
    deletion,
    "sim-deletion"
);
