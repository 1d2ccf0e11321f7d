//! kubewasm as a Deployment on the real single-node cluster: building and
//! importing the image, rendering and applying the single-node overlay of
//! deploy/, and reading the replicas back (Lease holder, listener address,
//! memory as the kubelet measures it). Shared by the cluster and failover
//! suites.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::{Discovery, Scope};
use serde_json::Value;

use crate::controlplane::ControlPlane;
use crate::e2e::poll_seen;
use crate::manifests::{docs, kustomize};
use crate::repo_root;

/// The namespace, Deployment, Lease and ServiceAccount name of deploy/.
pub const NS: &str = "kubewasm";
/// The label selecting the host's Pods.
pub const SELECTOR: &str = "app.kubernetes.io/name=kubewasm";

/// Runs a command to success and returns its stdout, or fails the test
/// with its output.
pub fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    String::from_utf8_lossy(&succeeded(out, what).stdout).into_owned()
}

/// `out` if its command succeeded, else fails the test naming `what`, with
/// its output.
pub fn succeeded(out: std::process::Output, what: &str) -> std::process::Output {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Builds the image from the Containerfile's offline stage
/// (`scripts/image.sh`) and imports it into the node's containerd.
/// Returns how long that took. The image carries the debug build every
/// other test runs (`IMAGE_BINARY`, with its libraries), not the static
/// release one: the same layout, user and entrypoint, without a second
/// build of the whole dependency tree for the musl target.
pub fn build_and_import_image(cp: &ControlPlane) -> Duration {
    let started = Instant::now();
    let archive = cp.dir().join("kubewasm-image.tar");
    run(
        Command::new("bash")
            .arg(repo_root().join("scripts/image.sh"))
            .arg(&archive)
            .env("IMAGE_ARCHIVE", "docker-archive")
            .env("IMAGE_BINARY", crate::e2e::kubewasm_bin()),
        "scripts/image.sh",
    );
    cp.load_image(&archive).unwrap();
    started.elapsed()
}

/// `deploy/examples/single-node` rendered for this cluster (the API
/// server's port filled in), with the example plugins' .wasm files put in
/// place by `scripts/deploy-plugins.sh`.
pub fn single_node_docs(cp: &ControlPlane) -> Vec<Value> {
    deploy_plugins();
    render_for(cp, &repo_root().join("deploy/examples/single-node"))
}

/// `deploy/examples/host-config` on top of the single-node overlay (in a
/// copy of deploy/, its `resources:` pointed at `../single-node`), rendered
/// for this cluster: the example's config.yaml as `edit` changes it, and
/// the files it names, which are the operator's (`files`: the registry CA,
/// signature keys), next to it in the host config's ConfigMap.
pub fn single_node_host_config_docs(
    cp: &ControlPlane,
    edit: impl FnOnce(&str) -> String,
    files: &[(&str, &[u8])],
) -> Vec<Value> {
    deploy_plugins();
    let copy = tempfile::tempdir().unwrap();
    run(
        Command::new("cp")
            .arg("-r")
            .arg(repo_root().join("deploy"))
            .arg(copy.path()),
        "copying deploy/",
    );
    let overlay = copy.path().join("deploy/examples/host-config");
    let kustomization = overlay.join("kustomization.yaml");
    let text = std::fs::read_to_string(&kustomization).unwrap();
    assert!(text.contains("\n  - ../../base\n"), "{text}");
    std::fs::write(
        &kustomization,
        text.replace("\n  - ../../base\n", "\n  - ../single-node\n"),
    )
    .unwrap();
    let config = overlay.join("config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, edit(&text)).unwrap();
    for (name, bytes) in files {
        std::fs::write(overlay.join(name), bytes).unwrap();
    }
    render_for(cp, &overlay)
}

/// `scripts/deploy-plugins.sh`: the example plugins' .wasm files into
/// deploy/examples/plugin-folder (from `KUBEWASM_PLUGIN_ARTIFACTS` when set).
fn deploy_plugins() {
    run(
        Command::new("bash").arg(repo_root().join("scripts/deploy-plugins.sh")),
        "scripts/deploy-plugins.sh",
    );
}

/// An overlay rendered with this cluster's API server port.
fn render_for(cp: &ControlPlane, overlay: &Path) -> Vec<Value> {
    let rendered = kustomize(overlay).replace("APISERVER_PORT", &format!("\"{}\"", cp.port()));
    let docs = docs(&rendered);
    assert!(docs.iter().any(|d| d["kind"] == "Deployment"));
    docs
}

/// Applies every document server-side, as `kubectl apply --server-side`.
pub async fn apply_all(client: &kube::Client, docs: &[Value]) {
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let pp = PatchParams::apply("kubewasm-e2e").force();
    for doc in docs {
        let gvk = kube::core::GroupVersionKind::try_from(
            &serde_json::from_value::<kube::core::TypeMeta>(doc.clone()).unwrap(),
        )
        .unwrap();
        let (ar, caps) = discovery
            .resolve_gvk(&gvk)
            .unwrap_or_else(|| panic!("unknown kind {gvk:?}"));
        let name = doc["metadata"]["name"].as_str().unwrap();
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => Api::namespaced_with(
                client.clone(),
                doc["metadata"]["namespace"].as_str().unwrap_or("default"),
                &ar,
            ),
            Scope::Cluster => Api::all_with(client.clone(), &ar),
        };
        api.patch(name, &pp, &Patch::Apply(doc))
            .await
            .unwrap_or_else(|e| panic!("applying {gvk:?} {name}: {e}"));
    }
}

/// The Deployment `kubewasm` reports `n` available replicas (and no more
/// Pods than that exist, terminating ones included). On a timeout the
/// failure says what it last saw: the Deployment's counts, each Pod's
/// phase and containers (waiting or terminated reasons, restarts), the
/// namespace's warning Events and every host container's log, the
/// previous one's too after a restart.
pub async fn wait_available(client: &kube::Client, n: i32, timeout: Duration) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let Err(seen) = poll_seen(timeout, || available(&deployments, &pods, n)).await else {
        return;
    };
    panic!(
        "timed out after {timeout:?} waiting for {n} available kubewasm replicas; last seen:\n{seen}\n\
         warning Events in {NS}:\n{}\nhost logs:\n{}",
        warning_events(client).await,
        pod_logs(client, true).await
    );
}

/// `Ok` once `n` replicas are available, else what was seen.
async fn available(deployments: &Api<Deployment>, pods: &Api<Pod>, n: i32) -> Result<(), String> {
    let d = deployments
        .get("kubewasm")
        .await
        .map_err(|e| format!("Deployment: {e}"))?;
    let status = d.status.unwrap_or_default();
    let counts = format!(
        "Deployment: replicas {:?}, updated {:?}, ready {:?}, available {:?}",
        status.replicas, status.updated_replicas, status.ready_replicas, status.available_replicas
    );
    let ready = status.available_replicas == Some(n) && status.updated_replicas == Some(n);
    let all = pods
        .list(&ListParams::default().labels(SELECTOR))
        .await
        .map_err(|e| format!("{counts}\nPods: {e}"))?
        .items;
    // Each Pod's own Ready condition, as the kubelet last reported it (the
    // Deployment's count may lag a container kill).
    let each = all.iter().all(|p| {
        p.metadata.deletion_timestamp.is_none()
            && p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|c| {
                    c.iter()
                        .all(|c| c.ready && c.state.as_ref().is_some_and(|s| s.running.is_some()))
                })
    });
    if ready && each && usize::try_from(n).is_ok_and(|n| all.len() == n) {
        return Ok(());
    }
    let mut seen = counts;
    for p in &all {
        seen.push('\n');
        seen.push_str(&describe_pod(p));
    }
    Err(seen)
}

/// One line per Pod: phase, deletion, and each container's readiness,
/// state and restarts.
fn describe_pod(p: &Pod) -> String {
    let name = p.metadata.name.as_deref().unwrap_or("?");
    let status = p.status.clone().unwrap_or_default();
    let mut line = format!("Pod {name}: phase {:?}", status.phase);
    if p.metadata.deletion_timestamp.is_some() {
        line.push_str(", terminating");
    }
    for c in status.container_statuses.unwrap_or_default() {
        let state = match c.state.unwrap_or_default() {
            s if s.running.is_some() => "running".to_owned(),
            s if s.waiting.is_some() => {
                let w = s.waiting.unwrap_or_default();
                format!(
                    "waiting ({}: {})",
                    w.reason.unwrap_or_default(),
                    w.message.unwrap_or_default()
                )
            }
            s => s.terminated.map_or_else(
                || "unknown".to_owned(),
                |t| {
                    format!(
                        "terminated ({}, exit {}: {})",
                        t.reason.unwrap_or_default(),
                        t.exit_code,
                        t.message.unwrap_or_default()
                    )
                },
            ),
        };
        line.push_str(&format!(
            "; container {}: ready {}, {state}, restarts {}",
            c.name, c.ready, c.restart_count
        ));
    }
    line
}

/// The namespace's Events of type Warning, one line each (probe failures,
/// kills, scheduling), oldest first.
async fn warning_events(client: &kube::Client) -> String {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), NS);
    match events
        .list(&ListParams::default().fields("type=Warning"))
        .await
    {
        Ok(list) => list
            .items
            .iter()
            .map(|e| {
                format!(
                    "{} {}: {} ({}x)\n",
                    e.involved_object.name.as_deref().unwrap_or("?"),
                    e.reason.as_deref().unwrap_or("?"),
                    e.message.as_deref().unwrap_or(""),
                    e.count.unwrap_or(1)
                )
            })
            .collect(),
        Err(e) => format!("(Events unavailable: {e})"),
    }
}

/// The current logs of every kubewasm container (for a failing test's
/// message), each under its Pod's name.
pub async fn host_logs(client: &kube::Client) -> String {
    pod_logs(client, false).await
}

/// Each host Pod's current log, and with `previous` the log before its
/// last restart where it restarted (what it printed before it was killed
/// or exited).
async fn pod_logs(client: &kube::Client, previous: bool) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut out = String::new();
    let Ok(list) = pods.list(&ListParams::default().labels(SELECTOR)).await else {
        return out;
    };
    for pod in list.items {
        let restarted = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.restart_count > 0));
        let name = pod.metadata.name.unwrap_or_default();
        let logs = pods
            .logs(&name, &kube::api::LogParams::default())
            .await
            .unwrap_or_else(|e| format!("(logs unavailable: {e})"));
        out.push_str(&format!("--- {name}:\n{logs}\n"));
        if previous && restarted {
            let params = kube::api::LogParams {
                previous: true,
                ..Default::default()
            };
            let logs = pods
                .logs(&name, &params)
                .await
                .unwrap_or_else(|e| format!("(previous logs unavailable: {e})"));
            out.push_str(&format!("--- {name} (previous container):\n{logs}\n"));
        }
    }
    out
}

/// The Lease's holder identity, if any: `<Pod name>_<per-process suffix>`
/// (see [`holder_pod`]).
pub async fn lease_holder(client: &kube::Client) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), NS)
        .get("kubewasm")
        .await
        .ok()?
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

/// The Pod of a holder identity.
pub fn holder_pod(identity: &str) -> &str {
    identity.rsplit_once('_').map_or(identity, |(pod, _)| pod)
}

/// The listener address a Pod recorded in its emptyDir: the test runs on
/// the node, so it reads the kubelet's volume directly.
pub fn metrics_addr(cp: &ControlPlane, pod_uid: &str) -> Option<std::net::SocketAddr> {
    let file: PathBuf = cp.dir().join(format!(
        "node/kubelet/pods/{pod_uid}/volumes/kubernetes.io~empty-dir/compile-cache/metrics-addr"
    ));
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// Memory of each kubewasm container, read from its memory cgroup as the
/// kubelet's cAdvisor reads it (the test runs on the node; the API
/// server's node proxy refuses the node's loopback address):
/// `(pod, working set bytes, RSS bytes)`, working set being usage less
/// inactive page cache, what `kubectl top` shows.
pub async fn container_memory(client: &kube::Client) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    for pod in Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels(SELECTOR))
        .await
        .unwrap()
        .items
    {
        let name = pod.metadata.name.clone().unwrap();
        let uid = pod.metadata.uid.clone().unwrap();
        let Some(id) = pod
            .status
            .and_then(|s| s.container_statuses)
            .and_then(|c| c.into_iter().next())
            .and_then(|c| c.container_id)
        else {
            continue;
        };
        let id = id.trim_start_matches("containerd://").to_owned();
        let pod_dir = format!("pod{uid}");
        let dir = find_dir(Path::new(MEMORY_CGROUPS), &pod_dir)
            .map(|d| d.join(&id))
            .filter(|d| d.is_dir())
            .unwrap_or_else(|| {
                panic!("no memory cgroup for {name}'s container {id} under {MEMORY_CGROUPS}")
            });
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
        let stat = read("memory.stat");
        let field = |k: &str| {
            stat.lines()
                .find_map(|l| {
                    l.strip_prefix(k)?
                        .strip_prefix(' ')?
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
                .unwrap_or_else(|| panic!("no {k} in {}/memory.stat", dir.display()))
        };
        let usage: u64 = read("memory.usage_in_bytes").trim().parse().unwrap();
        out.push((
            name,
            usage.saturating_sub(field("total_inactive_file")),
            field("total_rss"),
        ));
    }
    out
}

/// The kubelet's cgroup root (tests/controlplane's `cgroupRoot`) in the
/// cgroup v1 memory hierarchy.
const MEMORY_CGROUPS: &str = "/sys/fs/cgroup/memory/kubewasm";

fn find_dir(root: &Path, name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(root).ok()?.flatten() {
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        if entry.file_name() == name {
            return Some(path);
        }
        if let Some(found) = find_dir(&path, name) {
            return Some(found);
        }
    }
    None
}
