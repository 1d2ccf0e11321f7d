//! Plugins as objects on the real single-node cluster (tests/controlplane
//! --node): the 2-replica Deployment of deploy/ (its single-node overlay)
//! loads plugins from `Plugin` objects whose modules come from an OCI
//! registry (Debian's docker-registry on 127.0.0.1 under a test CA, reached
//! from the host-network Pods), under a host config that requires cosign
//! signatures below `<registry>/signed` and lets one tenant namespace run
//! its own plugins.
//!
//! One scenario, in the order an operator meets it: the Rust, JavaScript
//! and Python config-replicators pushed and applied (the time from apply to
//! the first copy is printed per language); the JavaScript one swapped to a
//! new digest and config under churn (no Pod restarted or replaced, the new
//! version's first copy timed, nothing lost); an unsigned and a tampered
//! module refused with the reason on status while the signed version keeps
//! serving; tenants refused outside their namespace; `kubectl get plugins`;
//! then the registry stopped while both hosts restart: they serve from
//! their digest caches.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kubewasm::oci::Credentials;
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::{churn, copies_match_sources, eventually, eventually_seen, namespace};
use kubewasm_tests::incluster::{
    NS, SELECTOR, apply_all, build_and_import_image, container_memory, host_logs,
    single_node_host_config_docs, wait_available,
};
use kubewasm_tests::objects::{api, assert_refused_update, wait_condition_for};
use kubewasm_tests::registry::{Registry, test_key};
use kubewasm_tests::{language_artifacts, plugin_artifacts, with_custom_section};
use serde_json::{Value, json};

/// Image import, Pod start, pulling and compiling a 12-18 MB component in
/// a Pod limited to one CPU on a loaded machine.
const TIMEOUT: Duration = Duration::from_secs(300);
/// Where the sources of every replicator live.
const SOURCES: &str = "sources";

/// One config-replicator as a Plugin: its sources carry `<lang>-source`,
/// its copies go to namespaces labelled `to-<lang>=yes`.
struct Replicator {
    lang: &'static str,
    artifact: std::path::PathBuf,
}

impl Replicator {
    fn name(&self) -> String {
        format!("{}-replicator", self.lang)
    }
    fn source_label(&self) -> String {
        format!("{}-source", self.lang)
    }
    fn tenant(&self) -> String {
        format!("tenant-{}", self.lang)
    }
    fn spec(&self, reference: &str, namespace_selector: &str) -> Value {
        json!({
            "module": {"oci": {"reference": reference}},
            "config": {
                "sourceSelector": format!("{}=true", self.source_label()),
                "namespaceSelector": namespace_selector,
            },
            "access": [
                {"kinds": ["configmaps", "namespaces"], "verbs": ["read"]},
                {"kinds": ["configmaps"], "verbs": ["apply", "delete"]},
            ],
        })
    }
}

fn cluster() -> &'static ControlPlane {
    static CP: std::sync::OnceLock<ControlPlane> = std::sync::OnceLock::new();
    CP.get_or_init(|| {
        ControlPlane::builder()
            .node(true)
            .start_blocking()
            .unwrap_or_else(|e| panic!("starting the single-node cluster: {e:#}"))
    })
}

/// The single-node overlay with the host config of
/// deploy/examples/host-config (the ConfigMap kubewasm-config, mounted at
/// /etc/kubewasm): its signature rule for `<registry>/signed` (the example
/// names registry.example.com), this registry's CA and the test key, and
/// `team-a` as the one tenant namespace.
async fn deploy(cp: &ControlPlane, client: &kube::Client, registry: &Registry) {
    let took = build_and_import_image(cp);
    eprintln!("image built and imported in {took:?}");
    let ca = registry.ca_pem();
    let key = test_key("team").public_key().to_pem();
    let docs = single_node_host_config_docs(
        cp,
        |config| {
            assert!(
                config.contains("prefix: registry.example.com/signed")
                    && config.contains("tenantNamespaces: [team-a]"),
                "{config}"
            );
            config.replace("registry.example.com", registry.host())
        },
        &[("registry-ca.crt", &ca), ("cosign.pub", key.as_bytes())],
    );
    let applied = Instant::now();
    apply_all(client, &docs).await;
    wait_available(client, 2, TIMEOUT).await;
    eprintln!("applied to 2 Ready replicas in {:?}", applied.elapsed());
}

/// Waits until Plugin (or NamespacedPlugin) `name` has condition `kind`
/// at (`status`, `reason`) for `generation`; returns its status.
async fn wait_condition(
    objects: &Api<DynamicObject>,
    client: &kube::Client,
    name: &str,
    generation: i64,
    condition: (&str, &str, &str),
) -> Value {
    wait_condition_for(objects, name, generation, condition, TIMEOUT, || {
        host_logs(client)
    })
    .await
}

/// The host log lines of both replicas about plugin `name` (pull,
/// signature, compile, start, load, tier-up), each as seconds after
/// `applied` with its timing fields: where the apply → first delta time
/// goes; and other plugins' compiles and tier-ups after the apply, which
/// compete for the replica's CPU. The test and the host-network Pods read
/// the same clock.
async fn load_timeline(client: &kube::Client, name: &str, applied: SystemTime) -> String {
    const FIELDS: [&str; 6] = [
        "tier",
        "compile_ms",
        "start_ms",
        "elapsed_ms",
        "bytes",
        "module_cached",
    ];
    let mut out = String::new();
    for line in host_logs(client).await.lines() {
        if let Some(pod) = line.strip_prefix("--- ") {
            out.push_str(&format!("  {pod}\n"));
            continue;
        }
        let Ok(entry) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let fields = &entry["fields"];
        let about = |k: &str| fields[k].as_str().is_some_and(|v| v.contains(name));
        let since = entry["timestamp"]
            .as_str()
            .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
            .and_then(|t| t.duration_since(applied).ok());
        // Another plugin's compile or tier-up after the apply competes
        // for the replica's CPU: shown, named.
        let other = fields["plugin"]
            .as_str()
            .filter(|p| !p.contains(name) && since.is_some())
            .filter(|_| fields["tier"].is_string());
        if !(about("plugin") || about("reference") || other.is_some()) {
            continue;
        }
        let at = since.map_or_else(|| "?".to_owned(), |d| format!("{:.2}", d.as_secs_f64()));
        let whose = other.map(|p| format!("[{p}] ")).unwrap_or_default();
        let timing: Vec<String> = FIELDS
            .iter()
            .filter(|k| !fields[**k].is_null())
            .map(|k| format!("{k}={}", fields[*k]))
            .collect();
        out.push_str(&format!(
            "    {at:>7} s  {whose}{}  {}\n",
            fields["message"].as_str().unwrap_or_default(),
            timing.join(" ")
        ));
    }
    out
}

/// Both replicas report `name` loaded, the status naming `module` (the
/// sha256 of the module's bytes, as `kubectl get plugins` shows it).
async fn wait_replicas_loaded(objects: &Api<DynamicObject>, name: &str, module: &str) {
    eventually_seen(
        &format!("both replicas load {name} at {module}"),
        TIMEOUT,
        || async {
            let obj = objects.get(name).await.map_err(|e| e.to_string())?;
            let status = obj.data.get("status").cloned().unwrap_or_default();
            let replicas = status["replicas"].as_array().cloned().unwrap_or_default();
            (status["contentDigest"] == module
                && replicas.len() == 2
                && replicas.iter().all(|r| r["loaded"] == true))
            .then_some(())
            .ok_or_else(|| format!("status: {status}"))
        },
    )
    .await;
}

/// `sha256:<hex>` of `bytes`.
fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    let hex: String = sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// Waits until ConfigMap `ns/name` exists; returns when it was seen.
async fn wait_copy(client: &kube::Client, ns: &str, name: &str) -> Instant {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    eventually(&format!("copy {ns}/{name}"), TIMEOUT, || async {
        cms.get_opt(name).await.ok()?.map(|_| Instant::now())
    })
    .await
}

/// Each kubewasm Pod's uid and its container's restart count.
async fn pods(client: &kube::Client) -> BTreeMap<String, (String, i32)> {
    Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels(SELECTOR))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| {
            let restarts = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|c| c.first())
                .map_or(0, |c| c.restart_count);
            (
                p.metadata.name.unwrap(),
                (p.metadata.uid.unwrap(), restarts),
            )
        })
        .collect()
}

/// A source ConfigMap in [`SOURCES`] carrying `labels` (each `=true`).
async fn source(client: &kube::Client, name: &str, labels: &[String]) {
    let labels: BTreeMap<&str, &str> = labels.iter().map(|l| (l.as_str(), "true")).collect();
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "data": {"ca.crt": format!("PEM of {name}")},
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), SOURCES)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
}

fn plugin(kind: &str, name: &str, namespace: Option<&str>, spec: Value) -> DynamicObject {
    let mut metadata = json!({"name": name});
    if let Some(ns) = namespace {
        metadata["namespace"] = json!(ns);
    }
    serde_json::from_value(json!({
        "apiVersion": "kubewasm.io/v1alpha1", "kind": kind,
        "metadata": metadata, "spec": spec,
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_objects_from_a_registry_serve_swap_and_survive_on_the_real_node() {
    let cp = cluster();
    let client = cp.admin_client().await;
    let mut registry = Registry::start().await;
    deploy(cp, &client, &registry).await;
    let pusher = registry.oci_client();
    let anonymous = &Credentials::Anonymous;
    let plugins = api(&client, "Plugin", None);
    let replicators = [
        Replicator {
            lang: "rust",
            artifact: plugin_artifacts().join("config_replicator.wasm"),
        },
        Replicator {
            lang: "js",
            artifact: language_artifacts().join("js-config-replicator.wasm"),
        },
        Replicator {
            lang: "python",
            artifact: language_artifacts().join("python-config-replicator.wasm"),
        },
    ];
    namespace(&client, SOURCES, json!({})).await;
    for r in &replicators {
        namespace(
            &client,
            &r.tenant(),
            json!({format!("to-{}", r.lang): "yes"}),
        )
        .await;
    }
    let labels: Vec<String> = replicators.iter().map(Replicator::source_label).collect();
    source(&client, "ca-bundle", &labels).await;

    // Each language: pushed, pinned by digest, applied; timed from the
    // apply to its first copy (pull, verify, compile, sync, first delta).
    let mut digests = BTreeMap::new();
    for r in &replicators {
        let wasm = std::fs::read(&r.artifact).unwrap();
        let pushed = pusher
            .push(
                &wasm,
                &format!("{}/plugins/{}:v1", registry.host(), r.name()),
                anonymous,
            )
            .await
            .unwrap();
        let pinned = format!("{}/plugins/{}@{}", registry.host(), r.name(), pushed.digest);
        let (applied, applied_at) = (Instant::now(), SystemTime::now());
        plugins
            .create(
                &PostParams::default(),
                &plugin(
                    "Plugin",
                    &r.name(),
                    None,
                    r.spec(&pinned, &format!("to-{}=yes", r.lang)),
                ),
            )
            .await
            .unwrap();
        let first = wait_copy(&client, &r.tenant(), "ca-bundle").await;
        eprintln!(
            "{}: {} KiB module applied to first delta served: {:?}",
            r.lang,
            wasm.len() / 1024,
            first - applied
        );
        wait_condition(
            &plugins,
            &client,
            &r.name(),
            1,
            ("Ready", "True", "Serving"),
        )
        .await;
        wait_replicas_loaded(&plugins, &r.name(), &sha256(&wasm)).await;
        eprintln!(
            "{}: where the time went, per replica (seconds after the apply):\n{}",
            r.lang,
            load_timeline(&client, &r.name(), applied_at).await
        );
        digests.insert(r.lang, (pinned, sha256(&wasm)));
    }
    for (pod, working_set, rss) in container_memory(&client).await {
        eprintln!(
            "{pod} serving the three replicators: working set {:.1} MiB, RSS {:.1} MiB",
            working_set as f64 / 1048576.0,
            rss as f64 / 1048576.0
        );
    }

    // The JavaScript replicator swapped to a new digest and a wider
    // namespace selector under churn: no Pod restarts or is replaced,
    // nothing is lost.
    let js = &replicators[1];
    namespace(&client, "tenant-js-2", json!({"js-v2": "yes"})).await;
    let mut label = json!({"js-v2": "yes"});
    label["to-js"] = json!("yes");
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .patch(
            &js.tenant(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": label}})),
        )
        .await
        .unwrap();
    let before = pods(&client).await;
    let stop = Arc::new(AtomicBool::new(false));
    let churner = tokio::spawn({
        let (client, stop, label) = (client.clone(), stop.clone(), js.source_label());
        async move { churn(client, SOURCES, &label, &stop).await }
    });
    let v2 = with_custom_section(
        &std::fs::read(&js.artifact).unwrap(),
        "kubewasm-test-version",
        b"2",
    );
    let pushed = pusher
        .push(
            &v2,
            &format!("{}/plugins/{}:v2", registry.host(), js.name()),
            anonymous,
        )
        .await
        .unwrap();
    let pinned_v2 = format!(
        "{}/plugins/{}@{}",
        registry.host(),
        js.name(),
        pushed.digest
    );
    let applied = Instant::now();
    plugins
        .patch(
            &js.name(),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": js.spec(&pinned_v2, "js-v2=yes")})),
        )
        .await
        .unwrap();
    let first = wait_copy(&client, "tenant-js-2", "ca-bundle").await;
    eprintln!(
        "js: new digest and config applied to first delta served by them: {:?}",
        first - applied
    );
    let status = wait_condition(
        &plugins,
        &client,
        &js.name(),
        2,
        ("Ready", "True", "Serving"),
    )
    .await;
    assert_eq!(status["resolvedReference"], pinned_v2, "{status}");
    let js_v2 = sha256(&v2);
    wait_replicas_loaded(&plugins, &js.name(), &js_v2).await;
    // Churn goes on past the swap, then stops; the copies converge.
    eventually("churn past the swap", TIMEOUT, || async {
        let n = Api::<ConfigMap>::namespaced(client.clone(), "tenant-js-2")
            .list(&ListParams::default().labels("kubewasm.io/replica"))
            .await
            .ok()?
            .items
            .len();
        (n > 3).then_some(())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let changes = churner.await.unwrap();
    eprintln!("js swap: {changes} source changes under churn");
    let js_tenants = [js.tenant(), "tenant-js-2".to_owned()];
    let js_tenants: Vec<&str> = js_tenants.iter().map(String::as_str).collect();
    let js_sources = format!("{}=true", js.source_label());
    eventually("the js copies equal their sources", TIMEOUT, || async {
        copies_match_sources(&client, SOURCES, &js_sources, &js_tenants)
            .await
            .ok()
            .flatten()
    })
    .await;
    assert_eq!(
        pods(&client).await,
        before,
        "a Pod restarted or was replaced by the swap"
    );

    // Signatures under <registry>/signed: an unsigned module is refused;
    // a signed one serves; a tampered one (a new module under the signed
    // one's copied signature) is refused while the signed one serves on.
    let team = test_key("team");
    let wasm = std::fs::read(&js.artifact).unwrap();
    let signed_repo = format!("{}/signed/js", registry.host());
    let unsigned = pusher
        .push(
            &std::fs::read(&replicators[2].artifact).unwrap(),
            &format!("{}/signed/python:v1", registry.host()),
            anonymous,
        )
        .await
        .unwrap();
    plugins
        .create(
            &PostParams::default(),
            &plugin(
                "Plugin",
                "unsigned",
                None,
                replicators[2].spec(
                    &format!("{}/signed/python@{}", registry.host(), unsigned.digest),
                    "to-python=yes",
                ),
            ),
        )
        .await
        .unwrap();
    let status = wait_condition(
        &plugins,
        &client,
        "unsigned",
        1,
        ("Ready", "False", "SignatureRefused"),
    )
    .await;
    assert!(status.to_string().contains("signed/python"), "{status}");
    let good = pusher
        .push(&wasm, &format!("{signed_repo}:v1"), anonymous)
        .await
        .unwrap();
    pusher
        .push_signature(&format!("{signed_repo}:v1"), &good.digest, &team, anonymous)
        .await
        .unwrap();
    namespace(&client, "tenant-signed", json!({"to-signed": "yes"})).await;
    plugins
        .create(
            &PostParams::default(),
            &plugin(
                "Plugin",
                "signed",
                None,
                js.spec(&format!("{signed_repo}@{}", good.digest), "to-signed=yes"),
            ),
        )
        .await
        .unwrap();
    wait_condition(&plugins, &client, "signed", 1, ("Ready", "True", "Serving")).await;
    wait_copy(&client, "tenant-signed", "ca-bundle").await;
    let tampered = pusher
        .push(&v2, &format!("{signed_repo}:v2"), anonymous)
        .await
        .unwrap();
    let sig_tag = |digest: &str| format!("{}.sig", digest.replace(':', "-"));
    let (media_type, signature) = registry.manifest("signed/js", &sig_tag(&good.digest)).await;
    registry
        .put_manifest(
            "signed/js",
            &sig_tag(&tampered.digest),
            &media_type,
            &signature,
        )
        .await;
    plugins
        .patch(
            "signed",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"module": {"oci": {"reference": format!("{signed_repo}@{}", tampered.digest)}}}}),
            ),
        )
        .await
        .unwrap();
    let status = wait_condition(
        &plugins,
        &client,
        "signed",
        2,
        ("Degraded", "True", "SignatureRefused"),
    )
    .await;
    assert_refused_update(&status);
    assert_eq!(status["contentDigest"], sha256(&wasm), "{status}");
    source(&client, "while-tampered", &[js.source_label()]).await;
    wait_copy(&client, "tenant-signed", "while-tampered").await;

    // Tenants: team-a may run its own plugins, only within team-a; team-b
    // may not run any.
    namespace(&client, "team-a", json!({})).await;
    namespace(&client, "team-b", json!({})).await;
    let tenant_spec = |ns: &str| {
        json!({
            "module": {"oci": {"reference": digests["rust"].0}},
            "config": {"sourceSelector": "x=true", "namespaceSelector": "x=yes"},
            "access": [{"kinds": ["configmaps"], "verbs": ["read"], "namespaces": [ns]}],
        })
    };
    let team_a = api(&client, "NamespacedPlugin", Some("team-a"));
    team_a
        .create(
            &PostParams::default(),
            &plugin(
                "NamespacedPlugin",
                "greedy",
                Some("team-a"),
                tenant_spec(SOURCES),
            ),
        )
        .await
        .unwrap();
    let status = wait_condition(
        &team_a,
        &client,
        "greedy",
        1,
        ("Ready", "False", "NotGranted"),
    )
    .await;
    assert!(status.to_string().contains(SOURCES), "{status}");
    let team_b = api(&client, "NamespacedPlugin", Some("team-b"));
    team_b
        .create(
            &PostParams::default(),
            &plugin(
                "NamespacedPlugin",
                "elsewhere",
                Some("team-b"),
                tenant_spec("team-b"),
            ),
        )
        .await
        .unwrap();
    wait_condition(
        &team_b,
        &client,
        "elsewhere",
        1,
        ("Ready", "False", "NamespaceNotAllowed"),
    )
    .await;

    // What an operator sees: kubectl's own get, default and wide.
    let table = cp.kubectl_get(&["plugins"]).unwrap();
    eprintln!("kubectl get plugins:\n{table}");
    let rows = table_rows(&table);
    assert_eq!(
        rows[0],
        ["NAME", "VERSION", "READY", "REASON", "AGE"],
        "{table}"
    );
    let row = |name: &str| {
        rows.iter()
            .find(|r| r[0] == name)
            .unwrap_or_else(|| panic!("no row {name} in:\n{table}"))
    };
    assert_eq!(row("js-replicator")[2..4], ["True", "Serving"], "{table}");
    assert_eq!(row("rust-replicator")[2..4], ["True", "Serving"], "{table}");
    // The tampered update is refused (Ready False, as kubectl wait and
    // kstatus read it) while the signed version keeps serving: its version
    // stays in the VERSION column.
    assert_eq!(
        row("signed")[2..4],
        ["False", "SignatureRefused"],
        "{table}"
    );
    assert_ne!(row("signed")[1], "", "{table}");
    assert_eq!(
        row("unsigned")[1..4],
        ["", "False", "SignatureRefused"],
        "{table}"
    );
    let wide = cp.kubectl_get(&["plugins", "-o", "wide"]).unwrap();
    eprintln!("kubectl get plugins -o wide:\n{wide}");
    let rows = table_rows(&wide);
    assert_eq!(
        rows[0],
        [
            "NAME", "VERSION", "READY", "REASON", "MANIFEST", "CONTENT", "AGE"
        ],
        "{wide}"
    );
    let wide_row = |name: &str| {
        rows.iter()
            .find(|r| r[0] == name)
            .unwrap_or_else(|| panic!("no row {name} in:\n{wide}"))
    };
    // The manifest digest the spec pins and the module's content digest,
    // each in its own column.
    let rust_manifest = digests["rust"].0.rsplit('@').next().unwrap();
    assert_eq!(
        wide_row("rust-replicator")[4..6],
        [rust_manifest, digests["rust"].1.as_str()],
        "{wide}"
    );
    assert_eq!(wide_row("js-replicator")[5], js_v2.as_str(), "{wide}");
    assert_eq!(wide_row("signed")[5], sha256(&wasm).as_str(), "{wide}");
    let tenants = cp
        .kubectl_get(&["namespacedplugins", "-A", "-o", "wide"])
        .unwrap();
    eprintln!("kubectl get namespacedplugins -A -o wide:\n{tenants}");
    let rows = table_rows(&tenants);
    assert!(
        rows.iter()
            .any(|r| r[..2] == ["team-a", "greedy"] && r[4] == "NotGranted"),
        "{tenants}"
    );
    assert!(
        rows.iter()
            .any(|r| r[..2] == ["team-b", "elsewhere"] && r[4] == "NamespaceNotAllowed"),
        "{tenants}"
    );

    // The registry goes down and both hosts restart (their containers
    // killed, as an OOM kill or a node agent would): each serves every
    // plugin from its digest cache.
    registry.stop();
    let before = pods(&client).await;
    for pod in Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels(SELECTOR))
        .await
        .unwrap()
        .items
    {
        let id = pod.status.unwrap().container_statuses.unwrap()[0]
            .container_id
            .clone()
            .unwrap();
        cp.kill_container(&id).unwrap();
    }
    eventually("both containers restarted", TIMEOUT, || async {
        let now = pods(&client).await;
        (now.len() == 2
            && now.iter().all(|(pod, (uid, restarts))| {
                before
                    .get(pod)
                    .is_some_and(|(u, r)| u == uid && restarts > r)
            }))
        .then_some(())
    })
    .await;
    wait_available(&client, 2, TIMEOUT).await;
    source(&client, "after-restart", &labels).await;
    for r in &replicators {
        wait_copy(&client, &r.tenant(), "after-restart").await;
    }
    wait_copy(&client, "tenant-js-2", "after-restart").await;
    for r in &replicators {
        let digest = if r.lang == "js" {
            &js_v2
        } else {
            &digests[r.lang].1
        };
        wait_replicas_loaded(&plugins, &r.name(), digest).await;
    }
    // Each restarted host says where its modules came from.
    let logs = host_logs(&client).await;
    assert!(
        logs.matches("OCI module served from the digest cache")
            .count()
            >= 2 * replicators.len(),
        "both restarted hosts should serve the three replicators from their caches:\n{logs}"
    );
}

/// A kubectl table's rows as cells, cut at the header's column starts
/// (an empty cell, such as the digest of a module never served, stays
/// in its column).
fn table_rows(table: &str) -> Vec<Vec<String>> {
    let mut lines = table.lines();
    let header = lines.next().unwrap_or_default();
    let mut starts: Vec<usize> = header
        .char_indices()
        .filter(|&(i, c)| c != ' ' && (i == 0 || header.as_bytes()[i - 1] == b' '))
        .map(|(i, _)| i)
        .collect();
    starts.push(usize::MAX);
    std::iter::once(header)
        .chain(lines)
        .map(|line| {
            starts
                .windows(2)
                .map(|w| {
                    let end = w[1].min(line.len());
                    line.get(w[0].min(end)..end).unwrap_or("").trim().to_owned()
                })
                .collect()
        })
        .collect()
}
