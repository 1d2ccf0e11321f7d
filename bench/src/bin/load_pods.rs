//! Pod loader for the initial-sync benchmark: makes the API server hold N Pods
//! of real-world shapes.
//!
//! Shapes are the real Pods of the corpus (`DIR/objects/Pod/*.json` and
//! `DIR/extra/objects/Pod/*.json`, read in place). Each keeps `spec`, labels
//! and annotations; everything the server sets (uid, resourceVersion,
//! creationTimestamp, managedFields, generation, selfLink, deletion fields,
//! ownerReferences, finalizers, generateName) is dropped, the status is kept
//! aside. Pod `i` is `<prefix>-<i>` in namespace `<prefix>-ns-<i % namespaces>`,
//! labelled `kubewasm-bench/loader=true`, created with a POST (field manager
//! `kubewasm-bench-loader`) and then given the corpus status with a merge
//! patch of the `status` subresource, so the served objects carry a status and
//! managedFields entries for both.
//!
//! Every shape is first checked against the server (a dry-run create; for a
//! shape with a status, a probe Pod and a dry-run status patch, see
//! `validate_shapes`); only the accepted shapes are used, cycled through (in
//! corpus file order) to reach N. Two "null"-string artifacts of some corpus
//! dumps are undone first (`repair_spec`, `repair_status`). Re-runs are
//! idempotent: the loader Pods present are counted and only the missing
//! indexes created (loader Pods of the same prefix beyond N are deleted).
//! `--delete` removes the loader Pods (deletecollection per namespace,
//! gracePeriodSeconds=0) and the loader namespaces; a namespace left
//! Terminating for lack of a namespace controller (no controller-manager) is
//! finalized by the loader once it is empty, so the next load can reuse it.
//!
//! stdout: one line at the end,
//! `LOADED {"pods":N,"namespaces":K,"shapes":S,"served_bytes_avg":B,"seconds":T,...}`
//! (or `DELETED {...}` with `--delete`); progress and diagnostics go to stderr.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::ExitCode,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Parser;
use futures::{StreamExt as _, TryStreamExt as _, stream};
use k8s_openapi::api::core::v1::{Namespace, NamespaceSpec, Pod};
use kube::{
    Api, Client,
    api::{
        ApiResource, DeleteParams, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams,
        PostParams,
    },
};
use kubewasm_bench::{client_from_kubeconfig, describe_kube_error, truncate};
use serde_json::{Map, Value, json};

const FIELD_MANAGER: &str = "kubewasm-bench-loader";
const LOADER_LABEL_KEY: &str = "kubewasm-bench/loader";
const LOADER_LABEL: &str = "kubewasm-bench/loader=true";
/// Validation probes carry `kubewasm-bench/loader=probe`.
const PROBE_LABEL: &str = "kubewasm-bench/loader=probe";
/// Everything the loader created (loader Pods and probes).
const ANY_LOADER_LABEL: &str = "kubewasm-bench/loader";
/// Pods whose served size is measured after loading.
const SAMPLE_SIZE: usize = 200;
/// Page size of the loader's own LIST calls.
const LIST_PAGE: u32 = 500;
/// Rejection reasons printed in full.
const REASONS_SHOWN: usize = 5;

/// Creates N Pods of real-world shapes (from the Pods of a corpus) in the API
/// server, or removes them with --delete.
#[derive(Debug, Parser)]
#[command(name = "load-pods")]
struct Args {
    /// Kubeconfig file to connect with (its current context).
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Number of loader Pods the server should hold afterwards.
    #[arg(long, required_unless_present = "delete")]
    count: Option<usize>,
    /// Corpus directory with objects/Pod/*.json and extra/objects/Pod/*.json.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/corpus"))]
    corpus: PathBuf,
    /// Namespaces to spread the Pods over.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    namespaces: u32,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    concurrency: u32,
    /// Prefix of the Pod and namespace names.
    #[arg(long, default_value = "bench")]
    prefix: String,
    /// Remove all loader Pods and namespaces of this prefix instead of loading.
    #[arg(long, conflicts_with = "count")]
    delete: bool,
    /// List every rejected corpus shape with the server's reason (default:
    /// the first few).
    #[arg(long)]
    show_rejections: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let result = if args.delete {
        delete(&args).await
    } else {
        load(&args).await
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("load-pods: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------
// Shapes
// ---------------------------------------------------------------------------

/// One corpus Pod, ready to be instantiated.
#[derive(Debug)]
struct Shape {
    /// Corpus file name, for messages.
    file: String,
    /// `apiVersion`, `kind`, `metadata` (labels incl. the loader label,
    /// annotations) and `spec`; name and namespace are set per Pod.
    body: Value,
    /// Merge patch `{"status": ...}` with the corpus status (without
    /// `qosClass`, which the server computes at create and keeps immutable),
    /// applied to the `status` subresource after the create.
    status_patch: Option<Value>,
    /// Whether "null"-string artifacts of the corpus were undone.
    repaired: bool,
}

impl Shape {
    /// The Pod to POST; `loader` is the value of the `kubewasm-bench/loader`
    /// label (`true` for loader Pods, `probe` for validation probes).
    fn instantiate(
        &self,
        name: &str,
        namespace: &str,
        loader: &str,
    ) -> anyhow::Result<DynamicObject> {
        let mut body = self.body.clone();
        if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("name".into(), Value::String(name.into()));
            meta.insert("namespace".into(), Value::String(namespace.into()));
            if let Some(labels) = meta.get_mut("labels").and_then(Value::as_object_mut) {
                labels.insert(LOADER_LABEL_KEY.into(), Value::String(loader.into()));
            }
        }
        serde_json::from_value(body).with_context(|| format!("shape {}", self.file))
    }
}

fn load_shapes(corpus: &Path) -> anyhow::Result<Vec<Shape>> {
    let mut files = Vec::new();
    for sub in ["objects/Pod", "extra/objects/Pod"] {
        let dir = corpus.join(sub);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => return Err(err).with_context(|| format!("reading {}", dir.display())),
        };
        let mut in_dir = Vec::new();
        for entry in entries {
            let path = entry
                .with_context(|| format!("reading {}", dir.display()))?
                .path();
            if path.extension().is_some_and(|ext| ext == "json") {
                in_dir.push(path);
            }
        }
        in_dir.sort();
        files.extend(in_dir);
    }
    if files.is_empty() {
        bail!(
            "no Pods in the corpus at {} (expected objects/Pod/*.json or extra/objects/Pod/*.json); \
             set --corpus to the corpus directory",
            corpus.display()
        );
    }

    let mut shapes = Vec::with_capacity(files.len());
    for path in files {
        let text = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let obj: Value =
            serde_json::from_slice(&text).with_context(|| format!("parsing {}", path.display()))?;
        let file = path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        match shape_from_corpus(obj) {
            Some(shape) => shapes.push(Shape { file, ..shape }),
            None => eprintln!("load-pods: skipping {file}: not a Pod with a spec"),
        }
    }
    let repaired = shapes.iter().filter(|shape| shape.repaired).count();
    eprintln!(
        "load-pods: read {} corpus Pods from {} ({repaired} with \"null\"-string artifacts repaired)",
        shapes.len(),
        corpus.display()
    );
    Ok(shapes)
}

/// Keeps spec, labels and annotations (all server-set metadata dropped) and
/// sets the status aside.
fn shape_from_corpus(obj: Value) -> Option<Shape> {
    let Value::Object(mut obj) = obj else {
        return None;
    };
    if obj.get("kind").and_then(Value::as_str) != Some("Pod") {
        return None;
    }
    let mut spec = obj.remove("spec").filter(Value::is_object)?;
    let mut repaired = repair_spec(&mut spec);
    let status_patch = match obj.remove("status") {
        Some(Value::Object(mut status)) => {
            status.remove("qosClass");
            repaired |= repair_status(&mut status);
            (!status.is_empty()).then(|| json!({ "status": status }))
        }
        _ => None,
    };
    let old_meta = obj.remove("metadata");
    let field = |key: &str| {
        old_meta
            .as_ref()
            .and_then(|m| m.get(key))
            .and_then(Value::as_object)
            .cloned()
    };

    let mut labels = field("labels").unwrap_or_default();
    labels.insert(LOADER_LABEL_KEY.into(), Value::String("true".into()));
    let mut meta = Map::new();
    meta.insert("labels".into(), Value::Object(labels));
    if let Some(annotations) = field("annotations").filter(|a| !a.is_empty()) {
        meta.insert("annotations".into(), Value::Object(annotations));
    }
    Some(Shape {
        file: String::new(),
        body: json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}),
        status_patch,
        repaired,
    })
}

// Some dumps in the corpus (rancher/support-bundle-kit) render absent values
// as the string "null", which the server rejects. Two such spots are undone
// here, back to what the server had served: `spec.volumes[*].hostPath.type`
// (unset) and `status.conditions[*].lastProbeTime`/`lastTransitionTime`
// (null). Everything else that the server rejects is left to validation.

fn is_null_string(value: &Value) -> bool {
    value.as_str() == Some("null")
}

fn repair_spec(spec: &mut Value) -> bool {
    let mut repaired = false;
    let volumes = spec.get_mut("volumes").and_then(Value::as_array_mut);
    for volume in volumes.into_iter().flatten() {
        if let Some(host_path) = volume.get_mut("hostPath").and_then(Value::as_object_mut)
            && host_path.get("type").is_some_and(is_null_string)
        {
            host_path.remove("type");
            repaired = true;
        }
    }
    repaired
}

fn repair_status(status: &mut Map<String, Value>) -> bool {
    let mut repaired = false;
    let conditions = status.get_mut("conditions").and_then(Value::as_array_mut);
    for condition in conditions.into_iter().flatten() {
        let Some(condition) = condition.as_object_mut() else {
            continue;
        };
        for key in ["lastProbeTime", "lastTransitionTime"] {
            if let Some(value) = condition.get_mut(key)
                && is_null_string(value)
            {
                *value = Value::Null;
                repaired = true;
            }
        }
    }
    repaired
}

// ---------------------------------------------------------------------------
// Names
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Names {
    prefix: String,
    namespaces: usize,
}

impl Names {
    fn pod(&self, i: usize) -> String {
        format!("{}-{i}", self.prefix)
    }

    fn namespace_of(&self, i: usize) -> String {
        self.namespace(i % self.namespaces)
    }

    fn namespace(&self, k: usize) -> String {
        format!("{}-ns-{k}", self.prefix)
    }

    fn is_own_namespace(&self, ns: &str) -> bool {
        ns.strip_prefix(&self.prefix)
            .and_then(|rest| rest.strip_prefix("-ns-"))
            .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
    }

    /// The index of a loader Pod of this prefix (`<prefix>-<i>`).
    fn pod_index(&self, name: &str) -> Option<usize> {
        let digits = name.strip_prefix(&self.prefix)?.strip_prefix('-')?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()
    }
}

/// Delete without grace period: Pods that no kubelet runs and that carry no
/// finalizers are removed at once.
fn delete_now() -> DeleteParams {
    DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    }
}

fn pod_resource() -> ApiResource {
    ApiResource::erase::<Pod>(&())
}

fn pods_in(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &pod_resource())
}

// ---------------------------------------------------------------------------
// Load
// ---------------------------------------------------------------------------

async fn load(args: &Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let count = args.count.context("--count is required")?;
    let concurrency = args.concurrency as usize;
    let names = Names {
        prefix: args.prefix.clone(),
        namespaces: args.namespaces as usize,
    };

    let shapes = load_shapes(&args.corpus)?;
    let client = client_from_kubeconfig(&args.kubeconfig).await?;

    // Namespaces first (the dry runs need one too).
    let used_namespaces = names.namespaces.min(count.max(1));
    ensure_namespaces(&client, &names, used_namespaces, concurrency).await?;

    let accepted =
        validate_shapes(&client, &names, &shapes, concurrency, args.show_rejections).await?;
    if accepted.is_empty() {
        bail!("the API server rejected every corpus Pod shape");
    }

    // What is there already.
    let existing = list_loader_pods(&client, &names).await?;
    let mut present = BTreeSet::new();
    let mut extra = Vec::new();
    for (ns, name) in existing {
        match names.pod_index(&name) {
            Some(i) if i < count && ns == names.namespace_of(i) => {
                present.insert(i);
            }
            Some(_) => extra.push((ns, name)),
            None => {}
        }
    }
    let missing: Vec<usize> = (0..count).filter(|i| !present.contains(i)).collect();
    eprintln!(
        "load-pods: {} of {count} loader Pods present, creating {}, deleting {} beyond the count",
        present.len(),
        missing.len(),
        extra.len()
    );

    let create_started = Instant::now();
    let created = create_pods(&client, &names, &accepted, &missing, concurrency).await?;
    let create_seconds = create_started.elapsed().as_secs_f64();
    if created > 0 {
        eprintln!(
            "load-pods: created {created} Pods in {create_seconds:.1} s ({:.0} Pods/s, POST + status patch each)",
            created as f64 / create_seconds
        );
    }

    let deleted = delete_pods(&client, &extra, concurrency).await?;
    let served_bytes_avg = served_bytes_avg(&client, &names, count, concurrency).await?;

    println!(
        "LOADED {}",
        json!({
            "pods": count,
            "namespaces": used_namespaces,
            "shapes": accepted.len(),
            "served_bytes_avg": served_bytes_avg,
            "seconds": round3(started.elapsed().as_secs_f64()),
            "created": created,
            "deleted": deleted,
            "create_seconds": round3(create_seconds),
        })
    );
    Ok(())
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

async fn ensure_namespaces(
    client: &Client,
    names: &Names,
    count: usize,
    concurrency: usize,
) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    stream::iter(0..count)
        .map(|k| {
            let api = api.clone();
            let pp = pp.clone();
            let name = names.namespace(k);
            async move {
                let ns = Namespace {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        labels: Some(BTreeMap::from([(LOADER_LABEL_KEY.into(), "true".into())])),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                match api.create(&pp, &ns).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(status)) if status.is_already_exists() => {
                        let current = api
                            .get(&name)
                            .await
                            .with_context(|| format!("reading namespace {name}"))?;
                        if current.metadata.deletion_timestamp.is_some() {
                            bail!(
                                "namespace {name} is being deleted (Terminating); wait for it to go \
                                 (`load-pods --delete` finishes it where no namespace controller runs) \
                                 or use another --prefix"
                            );
                        }
                        Ok(())
                    }
                    Err(err) => Err(anyhow::anyhow!(
                        "creating namespace {name}: {}",
                        describe_kube_error(&err)
                    )),
                }
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<()>()
        .await
}

/// Checks every shape against the API server; returns the accepted ones in
/// corpus order.
///
/// A shape without a status is checked with a server-side dry-run create. A
/// status cannot be checked that way (a status update needs a stored object,
/// and the create ignores the status), so a shape with a status is created
/// for real as a probe Pod (`<prefix>-probe-<k>`, labelled
/// `kubewasm-bench/loader=probe`, in `<prefix>-ns-0`; the create runs the
/// same validation and admission as the dry run), its status patch is tried
/// as a dry run on it, and the probe is deleted again.
async fn validate_shapes<'a>(
    client: &Client,
    names: &Names,
    shapes: &'a [Shape],
    concurrency: usize,
    show_all: bool,
) -> anyhow::Result<Vec<&'a Shape>> {
    let started = Instant::now();
    let namespace = names.namespace(0);
    let api = pods_in(client, &namespace);
    delete_probes(&api, &namespace).await?;

    let result = probe_shapes(&api, names, shapes, concurrency).await;
    delete_probes(&api, &namespace).await?;
    let mut results = result?;
    results.sort_by_key(|(k, _)| *k);

    let mut accepted = Vec::new();
    let mut rejected = Vec::new();
    for (k, result) in results {
        match result {
            Ok(()) => accepted.push(&shapes[k]),
            Err(reason) => rejected.push((&shapes[k].file, reason)),
        }
    }
    eprintln!(
        "load-pods: the server accepted {} of {} corpus Pod shapes ({:.1} s)",
        accepted.len(),
        shapes.len(),
        started.elapsed().as_secs_f64()
    );
    let shown = if show_all {
        rejected.len()
    } else {
        REASONS_SHOWN
    };
    for (file, reason) in rejected.iter().take(shown) {
        eprintln!("load-pods:   rejected {file}: {reason}");
    }
    if rejected.len() > shown {
        eprintln!(
            "load-pods:   ... and {} more rejected (--show-rejections lists all)",
            rejected.len() - shown
        );
    }
    Ok(accepted)
}

/// `(shape index, Ok or the rejection reason)` for every shape.
async fn probe_shapes(
    api: &Api<DynamicObject>,
    names: &Names,
    shapes: &[Shape],
    concurrency: usize,
) -> anyhow::Result<Vec<(usize, Result<(), String>)>> {
    let namespace = names.namespace(0);
    let dry_run = PostParams {
        dry_run: true,
        field_manager: Some(FIELD_MANAGER.into()),
    };
    let real = PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.into()),
    };
    let patch_dry_run = PatchParams {
        dry_run: true,
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    stream::iter(shapes.iter().enumerate())
        .map(|(k, shape)| {
            let name = format!("{}-probe-{k}", names.prefix);
            let (namespace, dry_run, real, patch_dry_run) = (
                namespace.clone(),
                dry_run.clone(),
                real.clone(),
                patch_dry_run.clone(),
            );
            async move {
                let obj = match shape.instantiate(&name, &namespace, "probe") {
                    Ok(obj) => obj,
                    Err(err) => return Ok((k, Err(format!("{err:#}")))),
                };
                let what = format!("probing shape {}", shape.file);
                let rejected = |err: kube::Error| match err {
                    kube::Error::Api(status) => Ok(truncate(&status.message, 400)),
                    err => Err(anyhow::anyhow!("{what}: {}", describe_kube_error(&err))),
                };
                // Without a status the dry-run create is the whole check; with
                // one, the real create checks the same and gives the status
                // patch its object.
                let Some(patch) = &shape.status_patch else {
                    return match api.create(&dry_run, &obj).await {
                        Ok(_) => Ok((k, Ok(()))),
                        Err(err) => Ok((k, Err(rejected(err)?))),
                    };
                };
                if let Err(err) = api.create(&real, &obj).await {
                    return Ok((k, Err(rejected(err)?)));
                }
                let result = api
                    .patch_status(&name, &patch_dry_run, &Patch::Merge(patch))
                    .await;
                // Best effort; what is left goes with the final deletecollection.
                let _ = api.delete(&name, &delete_now()).await;
                match result {
                    Ok(_) => Ok((k, Ok(()))),
                    Err(err) => Ok((k, Err(format!("status: {}", rejected(err)?)))),
                }
            }
        })
        .buffer_unordered(concurrency)
        .try_collect()
        .await
}

/// Removes the validation probes (also those of an interrupted run).
async fn delete_probes(api: &Api<DynamicObject>, namespace: &str) -> anyhow::Result<()> {
    let dp = delete_now();
    api.delete_collection(&dp, &ListParams::default().labels(PROBE_LABEL))
        .await
        .map_err(|err| {
            anyhow::anyhow!(
                "deleting the validation probes in {namespace}: {}",
                describe_kube_error(&err)
            )
        })?;
    Ok(())
}

/// (namespace, name) of every Pod labelled as a loader Pod whose namespace
/// belongs to this prefix; metadata-only LIST pages.
async fn list_loader_pods(client: &Client, names: &Names) -> anyhow::Result<Vec<(String, String)>> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &pod_resource());
    let mut lp = ListParams::default().labels(LOADER_LABEL).limit(LIST_PAGE);
    let mut out = Vec::new();
    loop {
        let page = api
            .list_metadata(&lp)
            .await
            .map_err(|err| anyhow::anyhow!("listing loader Pods: {}", describe_kube_error(&err)))?;
        for item in page.items {
            let (Some(ns), Some(name)) = (item.metadata.namespace, item.metadata.name) else {
                continue;
            };
            if names.is_own_namespace(&ns) {
                out.push((ns, name));
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => lp.continue_token = Some(token),
            None => break,
        }
    }
    Ok(out)
}

/// Prints progress to stderr every few seconds until dropped.
struct Progress {
    task: tokio::task::JoinHandle<()>,
}

impl Progress {
    fn start(what: &'static str, total: usize, done: Arc<AtomicUsize>) -> Self {
        let started = Instant::now();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(3));
            tick.tick().await;
            loop {
                tick.tick().await;
                let n = done.load(Ordering::Relaxed);
                let secs = started.elapsed().as_secs_f64();
                eprintln!(
                    "load-pods: {what} {n}/{total} ({:.0}/s, {secs:.0} s)",
                    n as f64 / secs
                );
            }
        });
        Self { task }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn create_pods(
    client: &Client,
    names: &Names,
    shapes: &[&Shape],
    indexes: &[usize],
    concurrency: usize,
) -> anyhow::Result<usize> {
    if indexes.is_empty() {
        return Ok(0);
    }
    let done = Arc::new(AtomicUsize::new(0));
    let _progress = Progress::start("created", indexes.len(), done.clone());
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let patch_params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let failures: Vec<String> = stream::iter(indexes.iter().copied())
        .map(|i| {
            let shape = shapes[i % shapes.len()];
            let name = names.pod(i);
            let namespace = names.namespace_of(i);
            let api = pods_in(client, &namespace);
            let (pp, patch_params, done) = (pp.clone(), patch_params.clone(), done.clone());
            async move {
                let result = create_one(&api, shape, &name, &namespace, &pp, &patch_params).await;
                done.fetch_add(1, Ordering::Relaxed);
                result
                    .err()
                    .map(|err| format!("{namespace}/{name} ({}): {err}", shape.file))
            }
        })
        .buffer_unordered(concurrency)
        .filter_map(futures::future::ready)
        .collect()
        .await;
    if !failures.is_empty() {
        for failure in failures.iter().take(REASONS_SHOWN) {
            eprintln!("load-pods:   failed {failure}");
        }
        bail!(
            "{} of {} Pods failed; re-run to create the missing ones",
            failures.len(),
            indexes.len()
        );
    }
    Ok(indexes.len())
}

async fn create_one(
    api: &Api<DynamicObject>,
    shape: &Shape,
    name: &str,
    namespace: &str,
    pp: &PostParams,
    patch_params: &PatchParams,
) -> Result<(), String> {
    let obj = shape
        .instantiate(name, namespace, "true")
        .map_err(|err| format!("{err:#}"))?;
    match api.create(pp, &obj).await {
        Ok(_) => {}
        // A concurrent or interrupted earlier run; the status is set again below.
        Err(kube::Error::Api(status)) if status.is_already_exists() => {}
        Err(err) => return Err(format!("create: {}", describe_kube_error(&err))),
    }
    if let Some(patch) = &shape.status_patch
        && let Err(err) = api
            .patch_status(name, patch_params, &Patch::Merge(patch))
            .await
    {
        // Without its status the Pod is not the shape; remove it so that a
        // re-run creates it again.
        let dp = delete_now();
        let _ = api.delete(name, &dp).await;
        return Err(format!("status: {}", describe_kube_error(&err)));
    }
    Ok(())
}

/// Deletes individual Pods (gracePeriodSeconds=0); returns how many.
async fn delete_pods(
    client: &Client,
    pods: &[(String, String)],
    concurrency: usize,
) -> anyhow::Result<usize> {
    let dp = delete_now();
    stream::iter(pods)
        .map(|(ns, name)| {
            let api = pods_in(client, ns);
            let dp = dp.clone();
            async move {
                match api.delete(name, &dp).await {
                    Ok(_) => Ok(1),
                    Err(kube::Error::Api(status)) if status.is_not_found() => Ok(0),
                    Err(err) => Err(anyhow::anyhow!(
                        "deleting Pod {ns}/{name}: {}",
                        describe_kube_error(&err)
                    )),
                }
            }
        })
        .buffer_unordered(concurrency)
        .try_fold(0, |sum, n| futures::future::ready(Ok(sum + n)))
        .await
}

/// Average compact JSON size of up to [`SAMPLE_SIZE`] loader Pods (spread over
/// the index range) as the server serves them, managedFields included.
async fn served_bytes_avg(
    client: &Client,
    names: &Names,
    count: usize,
    concurrency: usize,
) -> anyhow::Result<u64> {
    let sample: BTreeSet<usize> = (0..SAMPLE_SIZE.min(count))
        .map(|k| k * count / SAMPLE_SIZE.min(count))
        .collect();
    if sample.is_empty() {
        return Ok(0);
    }
    let sizes: Vec<usize> = stream::iter(sample.iter().copied())
        .map(|i| {
            let path = format!(
                "/api/v1/namespaces/{}/pods/{}",
                names.namespace_of(i),
                names.pod(i)
            );
            async move {
                let request = http::Request::get(&path)
                    .header(http::header::ACCEPT, "application/json")
                    .body(Vec::new())
                    .with_context(|| format!("building GET {path}"))?;
                let text = client
                    .request_text(request)
                    .await
                    .map_err(|err| anyhow::anyhow!("GET {path}: {}", describe_kube_error(&err)))?;
                let value: Value =
                    serde_json::from_str(&text).with_context(|| format!("parsing GET {path}"))?;
                Ok::<_, anyhow::Error>(serde_json::to_vec(&value)?.len())
            }
        })
        .buffer_unordered(concurrency)
        .try_collect()
        .await?;
    let total: usize = sizes.iter().sum();
    Ok((total as f64 / sizes.len() as f64).round() as u64)
}

// ---------------------------------------------------------------------------
// Delete
// ---------------------------------------------------------------------------

async fn delete(args: &Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let concurrency = args.concurrency as usize;
    let names = Names {
        prefix: args.prefix.clone(),
        namespaces: args.namespaces as usize,
    };
    let client = client_from_kubeconfig(&args.kubeconfig).await?;

    // Our namespaces: the labelled ones of this prefix, plus any holding
    // loader Pods of this prefix.
    let ns_api: Api<Namespace> = Api::all(client.clone());
    let labelled = ns_api
        .list_metadata(&ListParams::default().labels(LOADER_LABEL))
        .await
        .map_err(|err| anyhow::anyhow!("listing namespaces: {}", describe_kube_error(&err)))?;
    let mut namespaces: BTreeSet<String> = labelled
        .items
        .into_iter()
        .filter_map(|ns| ns.metadata.name)
        .filter(|name| names.is_own_namespace(name))
        .collect();
    namespaces.extend(
        list_loader_pods(&client, &names)
            .await?
            .into_iter()
            .map(|(ns, _)| ns),
    );

    // Pods first: deletecollection per namespace, no grace period. Pods that
    // no kubelet runs and that carry no finalizers go at once.
    let dp = delete_now();
    let lp = ListParams::default().labels(ANY_LOADER_LABEL);
    let pods_deleted: usize = stream::iter(namespaces.iter())
        .map(|ns| {
            let api = pods_in(&client, ns);
            let (dp, lp) = (dp.clone(), lp.clone());
            async move {
                match api.delete_collection(&dp, &lp).await {
                    Ok(either) => Ok(either.left().map_or(0, |list| list.items.len())),
                    Err(err) => Err(anyhow::anyhow!(
                        "deleting the loader Pods in {ns}: {}",
                        describe_kube_error(&err)
                    )),
                }
            }
        })
        .buffer_unordered(concurrency)
        .try_fold(0, |sum, n| futures::future::ready(Ok(sum + n)))
        .await?;
    let left = list_loader_pods(&client, &names).await?;
    if !left.is_empty() {
        eprintln!(
            "load-pods: {} loader Pods still present after deletion (graceful termination by a kubelet?)",
            left.len()
        );
    }

    let namespaces_deleted = delete_namespaces(&client, &namespaces, concurrency).await?;
    println!(
        "DELETED {}",
        json!({
            "pods": pods_deleted,
            "namespaces": namespaces_deleted,
            "seconds": round3(started.elapsed().as_secs_f64()),
        })
    );
    Ok(())
}

/// Deletes the namespaces. Where no namespace controller runs (this test
/// control plane has no controller-manager) a deleted namespace would stay
/// Terminating forever and block the next load; so a namespace still present
/// after a few seconds whose status shows no namespace-controller conditions,
/// and that holds no loader Pods any more, is finalized by the loader itself
/// (`PUT .../finalize` with no finalizers), as the namespace controller would
/// once the namespace is empty.
async fn delete_namespaces(
    client: &Client,
    namespaces: &BTreeSet<String>,
    concurrency: usize,
) -> anyhow::Result<usize> {
    let api: Api<Namespace> = Api::all(client.clone());
    let dp = DeleteParams::default();
    stream::iter(namespaces.iter())
        .map(|name| {
            let (api, dp) = (api.clone(), dp.clone());
            async move {
                match api.delete(name, &dp).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
                    Err(err) => Err(anyhow::anyhow!(
                        "deleting namespace {name}: {}",
                        describe_kube_error(&err)
                    )),
                }
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<()>()
        .await?;

    let deadline = Instant::now() + Duration::from_secs(5);
    let mut remaining: Vec<Namespace>;
    loop {
        remaining = Vec::new();
        for name in namespaces {
            if let Some(ns) = api.get_opt(name).await.map_err(|err| {
                anyhow::anyhow!("reading namespace {name}: {}", describe_kube_error(&err))
            })? {
                remaining.push(ns);
            }
        }
        if remaining.is_empty() || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let mut left_to_controller = 0;
    for mut ns in remaining {
        let name = ns.metadata.name.clone().unwrap_or_default();
        let has_conditions = ns
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| !c.is_empty());
        let pods_left = pods_in(client, &name)
            .list_metadata(&ListParams::default().limit(1))
            .await
            .map_err(|err| {
                anyhow::anyhow!("listing Pods in {name}: {}", describe_kube_error(&err))
            })?
            .items
            .len();
        if has_conditions || pods_left > 0 {
            left_to_controller += 1;
            continue;
        }
        ns.spec = Some(NamespaceSpec {
            finalizers: Some(Vec::new()),
        });
        match api.replace_subresource("finalize", &name, &pp, &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_not_found() => {}
            Err(err) => bail!("finalizing namespace {name}: {}", describe_kube_error(&err)),
        }
    }
    if left_to_controller > 0 {
        eprintln!(
            "load-pods: {left_to_controller} namespaces still Terminating, left to the namespace controller"
        );
    }
    Ok(namespaces.len())
}
