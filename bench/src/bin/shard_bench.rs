//! shard-bench: what shards buy. R `kubewasm run --shards S` processes
//! (each its own identity, like R Pods) serve the `heavy` plugin
//! (plugins/testing/heavy: a fixed CPU cost per delta, an optional wait
//! standing in for a slow API, one apply per delta) over N ConfigMaps on a
//! real API server, and the deltas and actions a second all replicas
//! together get through are measured, for each replica count asked.
//!
//! One run: the replicas start and take their shards (fair share); once
//! every shard is held and every object handled (the warm-up: compile,
//! sync, the first replay), the plugin's sidecar is rewritten to send its
//! results to a fresh namespace, so every replica hot-swaps the plugin and
//! replays the objects of its shards to the new version: the time from the
//! rewrite until N more deltas were handed to the plugin (and N more
//! actions executed), summed over the replicas, is the measurement. With
//! `--takeover`, one shard holder is then killed (SIGKILL) and the time
//! until another holds its shard is measured too.
//!
//! Prints one table row per run and appends one JSON line per run to
//! `--out`. scripts/shard-capacity.sh runs the whole set.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, ServiceAccount};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use kubewasm_bench::client_from_kubeconfig;
use serde_json::json;

#[derive(Parser, Debug)]
#[command(about = "Capacity of kubewasm shards: deltas and actions a second per replica count")]
struct Args {
    /// Kubeconfig of the API server.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// The kubewasm binary (a release build).
    #[arg(long)]
    kubewasm: PathBuf,
    /// The plugin: heavy.wasm (ConfigMaps) or realistic.wasm (Pods), from
    /// plugins/target/wasm32-wasip2/release.
    #[arg(long)]
    plugin: PathBuf,
    /// Objects to serve: ConfigMaps for heavy, Pods (on 10 Nodes) for
    /// realistic.
    #[arg(long, default_value_t = 3000)]
    objects: usize,
    /// Shards (`--shards` of every replica).
    #[arg(long, default_value_t = 3)]
    shards: u32,
    /// Replica counts to measure, one run each.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    replicas: Vec<usize>,
    /// Rounds of the plugin's fixed CPU work per delta.
    #[arg(long, default_value_t = 200_000)]
    work: u64,
    /// The plugin's wait per delta, in microseconds (a slow API).
    #[arg(long, default_value_t = 0)]
    wait_micros: u64,
    /// The plugin's `limits.actionsPerSecond` (default: the host's
    /// default ceiling). The sidecar's own default, 100, would measure the
    /// limit rather than the host; the runs print the actions that waited
    /// for it.
    #[arg(long, default_value_t = 10_000)]
    actions_per_second: u32,
    /// Run the hosts with --dry-run: actions are logged, not sent.
    #[arg(long)]
    dry_run: bool,
    /// Kill a shard holder after the measurement and time the takeover.
    #[arg(long)]
    takeover: bool,
    /// The runs' name in the output.
    #[arg(long, default_value = "heavy")]
    label: String,
    /// JSON lines appended here, one per run.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Where the replicas' logs and plugin folders go.
    #[arg(long, default_value = "target/bench/shards")]
    work_dir: PathBuf,
}

const LEASE: &str = "4s";

/// One replica: its process and where it said its metrics listen.
struct Replica {
    name: String,
    child: Child,
    addr_file: PathBuf,
}

impl Replica {
    fn scrape(&self, plugin: &str) -> Option<Counts> {
        let body = kubewasm_bench::scrape_metrics(&self.addr_file)?;
        Some(Counts::parse(&body, plugin))
    }

    fn stop(mut self) {
        // SIGTERM: the replica releases its Leases.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// The heavy plugin's delivered deltas and executed actions, as counted.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    deltas: f64,
    actions: f64,
    /// Actions that waited for the plugin's `limits.actionsPerSecond`.
    throttled: f64,
}

impl Counts {
    fn parse(text: &str, plugin: &str) -> Self {
        let label = format!("plugin=\"{plugin}\"");
        let sum = |name: &str| -> f64 {
            text.lines()
                .filter(|l| l.starts_with(name) && l.contains(&label))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        Self {
            deltas: sum("kubewasm_plugin_deltas_delivered_total{"),
            actions: sum("kubewasm_actions_total{"),
            throttled: sum("kubewasm_plugin_actions_throttled_total{"),
        }
    }
}

/// The plugin's name: its file's stem (`heavy`, `realistic`).
fn plugin_name(args: &Args) -> String {
    args.plugin
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn realistic(args: &Args) -> bool {
    plugin_name(args) == "realistic"
}

/// The sidecar of one version: `output` differs between versions, so
/// the rewrite is a new version everywhere.
fn sidecar(args: &Args, input: &str, output: &str) -> String {
    if realistic(args) {
        return format!(
            "# results: {output}\nlimits: {{actionsPerSecond: {}}}\naccess:\n  - {{kinds: [pods, nodes], verbs: [read]}}\n  - {{kinds: [pods], verbs: [patch]}}\n",
            args.actions_per_second
        );
    }
    format!(
        "config: {}\nlimits: {{actionsPerSecond: {}}}\naccess:\n  - {{kinds: [configmaps], verbs: [read], namespaces: [{input}]}}\n  - {{kinds: [configmaps], verbs: [apply], namespaces: [{output}]}}\n",
        json!({"namespace": input, "output": output, "work": args.work, "waitMicros": args.wait_micros}),
        args.actions_per_second
    )
}

/// Writes `text` to `path` whole (a rename), as an operator's tool would.
fn write_whole(path: &Path, text: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("yaml.tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// A create answered 409: it is there from an earlier run.
fn already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

async fn ensure_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
    }))?;
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if already_exists(&e) => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating namespace {name}")),
    }
}

/// `in-0` ... `in-{n-1}` in `ns`, created when missing, 32 at a time:
/// ConfigMaps, or Pods bound to ten Nodes (each with a zone) when `pods`.
async fn ensure_objects(
    client: &kube::Client,
    ns: &str,
    n: usize,
    pods: bool,
) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = if pods {
        Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<Pod>(&()))
    } else {
        Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<ConfigMap>(&()))
    };
    let have = api.list_metadata(&ListParams::default()).await?.items.len();
    if have >= n {
        return Ok(());
    }
    if pods {
        let nodes: Api<DynamicObject> =
            Api::all_with(client.clone(), &ApiResource::erase::<Node>(&()));
        for i in 0..10 {
            let node: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": format!("node-{i}"),
                    "labels": {"topology.kubernetes.io/zone": format!("zone-{}", i % 3)}},
            }))?;
            match nodes.create(&PostParams::default(), &node).await {
                Ok(_) => {}
                Err(e) if already_exists(&e) => {}
                Err(e) => return Err(e).context("creating a Node"),
            }
        }
        // The plain API server has no controller to make it.
        let sa: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"},
        }))?;
        let sas: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            ns,
            &ApiResource::erase::<ServiceAccount>(&()),
        );
        match sas.create(&PostParams::default(), &sa).await {
            Ok(_) => {}
            Err(e) if already_exists(&e) => {}
            Err(e) => return Err(e).context("creating the default ServiceAccount"),
        }
    }
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                let cm: DynamicObject = serde_json::from_value(if pods {
                    json!({
                        "apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": format!("in-{i}"), "labels": {"app": format!("app-{}", i % 17)}},
                        "spec": {"nodeName": format!("node-{}", i % 10),
                            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
                    })
                } else {
                    json!({
                        "apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("in-{i}")},
                        "data": {"v": "0", "team": format!("team-{}", i % 17)},
                    })
                })?;
                match api.create(&PostParams::default(), &cm).await {
                    Ok(_) => Ok(()),
                    Err(e) if already_exists(&e) => Ok(()),
                    Err(e) => Err(e.into()),
                }
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Each shard's holder identity (`None`: not held).
async fn holders(leases: &Api<Lease>, shards: u32) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for i in 0..shards {
        let h = leases
            .get_opt(&format!("kubewasm-shard-{i}"))
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)
            .filter(|h| !h.is_empty());
        out.push(h);
    }
    out
}

fn total(replicas: &[Replica], plugin: &str) -> (Counts, Vec<Counts>) {
    let each: Vec<Counts> = replicas
        .iter()
        .map(|r| r.scrape(plugin).unwrap_or_default())
        .collect();
    let sum = each.iter().fold(Counts::default(), |a, c| Counts {
        deltas: a.deltas + c.deltas,
        actions: a.actions + c.actions,
        throttled: a.throttled + c.throttled,
    });
    (sum, each)
}

/// Polls every 50 ms until `done`, at most `limit`.
async fn until<T>(
    what: &str,
    limit: Duration,
    mut done: impl AsyncFnMut() -> Option<T>,
) -> anyhow::Result<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = done().await {
            return Ok(v);
        }
        if start.elapsed() > limit {
            bail!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn one_run(
    args: &Args,
    client: &kube::Client,
    input: &str,
    replicas_n: usize,
) -> anyhow::Result<serde_json::Value> {
    let tag = format!("{}-{}r-{}", args.label, replicas_n, std::process::id());
    let (run_ns, out_a, out_b) = (
        format!("cap-{tag}"),
        format!("cap-{tag}-a"),
        format!("cap-{tag}-b"),
    );
    for ns in [&run_ns, &out_a, &out_b] {
        ensure_namespace(client, ns).await?;
    }
    let dir = args.work_dir.join(&tag);
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins)?;
    let plugin = plugin_name(args);
    std::fs::copy(&args.plugin, plugins.join(format!("{plugin}.wasm")))
        .with_context(|| format!("copying {}", args.plugin.display()))?;
    let sidecar_path = plugins.join(format!("{plugin}.yaml"));
    write_whole(&sidecar_path, &sidecar(args, input, &out_a))?;
    let cache = args.work_dir.join("compile-cache");

    let mut replicas = Vec::new();
    for i in 0..replicas_n {
        let name = format!("rep-{i}");
        let addr_file = dir.join(format!("{name}.metrics-addr"));
        let log = std::fs::File::create(dir.join(format!("{name}.log")))?;
        let mut cmd = Command::new(&args.kubewasm);
        cmd.args(["--log-format", "text", "run", "--kubeconfig"])
            .arg(&args.kubeconfig)
            .arg("--plugins")
            .arg(&plugins)
            .arg("--cache-dir")
            .arg(&cache)
            .args(["--shards", &args.shards.to_string()])
            .args(["--leader-elect-namespace", &run_ns])
            .args(["--leader-elect-lease-duration", LEASE])
            .args(["--leader-elect-renew-deadline", "3s"])
            .args(["--leader-elect-retry-period", "500ms"])
            .args(["--metrics-addr", "127.0.0.1:0", "--metrics-addr-file"])
            .arg(&addr_file)
            .env("POD_NAME", &name)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log);
        if args.dry_run {
            cmd.arg("--dry-run");
        }
        replicas.push(Replica {
            child: cmd.spawn().context("starting kubewasm")?,
            name,
            addr_file,
        });
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), &run_ns);
    let n = args.objects as f64;
    let warm = Instant::now();
    // Held, every object handled, and quiet for 2 s (realistic's own
    // patches come back once as updates).
    let mut last: Option<(f64, f64, Instant)> = None;
    until(
        "every shard held and every object handled once",
        Duration::from_secs(900),
        async || {
            let held = holders(&leases, args.shards)
                .await
                .iter()
                .all(Option::is_some);
            let (c, _) = total(&replicas, &plugin);
            if !(held && c.deltas >= n && c.actions >= n) {
                return None;
            }
            match last {
                Some((d, a, since)) if d == c.deltas && a == c.actions => {
                    (since.elapsed() >= Duration::from_secs(2)).then_some(())
                }
                _ => {
                    last = Some((c.deltas, c.actions, Instant::now()));
                    None
                }
            }
        },
    )
    .await?;
    let warm = warm.elapsed();
    let held_by: BTreeMap<String, usize> = holders(&leases, args.shards)
        .await
        .into_iter()
        .flatten()
        .fold(BTreeMap::new(), |mut m, h| {
            *m.entry(h.rsplit_once('_').map_or(h.clone(), |(p, _)| p.to_owned()))
                .or_default() += 1;
            m
        });

    // The measurement: a new version everywhere, which replays every shard.
    let (c0, each0) = total(&replicas, &plugin);
    let t0 = Instant::now();
    write_whole(&sidecar_path, &sidecar(args, input, &out_b))?;
    let mut deltas_done = None;
    let actions_done = until(
        "N more deltas and actions",
        Duration::from_secs(900),
        async || {
            let (c, _) = total(&replicas, &plugin);
            if deltas_done.is_none() && c.deltas - c0.deltas >= n {
                deltas_done = Some(t0.elapsed());
            }
            (deltas_done.is_some() && c.actions - c0.actions >= n).then(|| t0.elapsed())
        },
    )
    .await?;
    let deltas_done = deltas_done.unwrap_or(actions_done);
    let (c1, each1) = total(&replicas, &plugin);
    let throttled = c1.throttled - c0.throttled;
    let per_replica: Vec<f64> = each1
        .iter()
        .zip(&each0)
        .map(|(a, b)| a.deltas - b.deltas)
        .collect();

    let takeover = if args.takeover && replicas_n >= 2 {
        let before = holders(&leases, args.shards).await;
        let victim_id = before[0].clone().unwrap_or_default();
        let victim = victim_id
            .rsplit_once('_')
            .map_or(victim_id.as_str(), |(p, _)| p);
        let idx = replicas
            .iter()
            .position(|r| r.name == victim)
            .with_context(|| format!("shard 0's holder {victim_id} is none of the replicas"))?;
        let mut killed = replicas.remove(idx);
        let t = Instant::now();
        killed.child.kill()?;
        let _ = killed.child.wait();
        let took = until("shard 0 taken over", Duration::from_secs(120), async || {
            let h = holders(&leases, args.shards).await;
            h[0].as_ref()
                .filter(|h| **h != victim_id)
                .map(|_| t.elapsed())
        })
        .await?;
        Some(took)
    } else {
        None
    };
    for r in replicas {
        r.stop();
    }
    for ns in [&run_ns, &out_a, &out_b] {
        let _ = Api::<Namespace>::all(client.clone())
            .delete(ns, &Default::default())
            .await;
    }
    let deltas_per_s = n / deltas_done.as_secs_f64();
    let actions_per_s = n / actions_done.as_secs_f64();
    println!(
        "{:<10} {:>3} replicas {:>3} shards: {:>9.0} deltas/s {:>9.0} actions/s  throttled {:.0}  per replica {:?}  shards held {:?}  warm-up {:.1} s{}",
        args.label,
        replicas_n,
        args.shards,
        deltas_per_s,
        actions_per_s,
        throttled,
        per_replica,
        held_by.values().collect::<Vec<_>>(),
        warm.as_secs_f64(),
        takeover.map_or(String::new(), |t| format!(
            "  takeover {:.2} s",
            t.as_secs_f64()
        ))
    );
    Ok(json!({
        "label": args.label,
        "replicas": replicas_n,
        "shards": args.shards,
        "objects": args.objects,
        "work": args.work,
        "waitMicros": args.wait_micros,
        "dryRun": args.dry_run,
        "deltasPerSecond": deltas_per_s,
        "actionsPerSecond": actions_per_s,
        "actionsThrottled": throttled,
        "actionsPerSecondLimit": args.actions_per_second,
        "deltasPerReplica": per_replica,
        "shardsPerReplica": held_by,
        "warmUpSeconds": warm.as_secs_f64(),
        "takeoverSeconds": takeover.map(|t| t.as_secs_f64()),
    }))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if !args.plugin.is_file() {
        bail!(
            "{} is missing: build the plugins first (bash plugins/build.sh)",
            args.plugin.display()
        );
    }
    std::fs::create_dir_all(&args.work_dir)?;
    let client = client_from_kubeconfig(&args.kubeconfig).await?;
    let pods = realistic(&args);
    let input = format!(
        "cap-in-{}-{}",
        if pods { "pods" } else { "configmaps" },
        args.objects
    );
    ensure_namespace(&client, &input).await?;
    let made = Instant::now();
    ensure_objects(&client, &input, args.objects, pods).await?;
    eprintln!(
        "{} {} in {input} ({:.1} s)",
        args.objects,
        if pods { "Pods" } else { "ConfigMaps" },
        made.elapsed().as_secs_f64()
    );
    for &r in &args.replicas {
        let line = one_run(&args, &client, &input, r).await?;
        if let Some(out) = &args.out {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(out)
                .with_context(|| format!("opening {}", out.display()))?;
            writeln!(f, "{line}")?;
        }
    }
    Ok(())
}
