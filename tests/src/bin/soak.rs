//! The soak run (a benchmark, not a test; `bash scripts/soak.sh`): the
//! release host against the real API server (tests/controlplane) with the
//! example plugins, under steady ConfigMap churn, config-replicator swapped
//! for a new version every few minutes. Samples the host's RSS and prints
//! its slope, then checks that nothing was lost (every copy equals its
//! source once the churn stops).
//!
//!   soak [--minutes 30] [--rate 200] [--swap-every-s 300] [--sample-every-s 10]
// A report tool: its figures go to stdout.
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::{HostProcess, copies_match_sources, http_get, namespace};
use kubewasm_tests::{install, repo_root};
use serde_json::json;

const SOURCES: &str = "soak-src";
const TENANTS: [&str; 2] = ["soak-tenant-1", "soak-tenant-2"];
/// Source ConfigMaps cycled through by the churn.
const NAMES: u64 = 200;

struct Args {
    minutes: u64,
    rate: u64,
    swap_every: Duration,
    sample_every: Duration,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        minutes: 30,
        rate: 200,
        swap_every: Duration::from_secs(300),
        sample_every: Duration::from_secs(10),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value: u64 = it
            .next()
            .with_context(|| format!("{flag} needs a value"))?
            .parse()
            .with_context(|| format!("{flag} needs a whole number"))?;
        match flag.as_str() {
            "--minutes" => a.minutes = value,
            "--rate" => a.rate = value.max(1),
            "--swap-every-s" => a.swap_every = Duration::from_secs(value.max(1)),
            "--sample-every-s" => a.sample_every = Duration::from_secs(value.max(1)),
            other => bail!("unknown flag {other} (see the file's header)"),
        }
    }
    Ok(a)
}

fn rss_mib(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("the host (pid {pid}) is gone"))?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("no VmRSS")?;
    Ok(kib / 1024.0)
}

/// The sum of every series of metric `name` (all label sets) in a
/// Prometheus text body.
fn metric_sum(body: &str, name: &str) -> f64 {
    body.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Least-squares slope of (seconds, MiB), in MiB per hour.
fn slope_per_hour(samples: &[(f64, f64)]) -> f64 {
    let n = samples.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let mx = samples.iter().map(|s| s.0).sum::<f64>() / n;
    let my = samples.iter().map(|s| s.1).sum::<f64>() / n;
    let cov: f64 = samples.iter().map(|s| (s.0 - mx) * (s.1 - my)).sum();
    let var: f64 = samples.iter().map(|s| (s.0 - mx).powi(2)).sum();
    if var == 0.0 { 0.0 } else { cov / var * 3600.0 }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = args()?;
    let cp = ControlPlane::builder().start().await?;
    let client = cp.admin_client().await;
    namespace(&client, SOURCES, json!({})).await;
    for t in TENANTS {
        namespace(&client, t, json!({"tenant": "yes"})).await;
    }
    let sidecars = |n: u8| {
        // Two spellings of one selector: each swap is a new version with
        // the same behaviour. 200 changes/s are 400 copies/s: over the
        // default action rate.
        let config = if n.is_multiple_of(2) {
            "config: {namespaceSelector: tenant=yes}\n"
        } else {
            "config: {namespaceSelector: \"tenant in (yes)\"}\n"
        };
        format!(
            "{config}limits: {{actionsPerSecond: 2000}}\n{}",
            kubewasm_tests::REPLICATOR_ACCESS
        )
    };
    let base = repo_root().join("deploy/examples/plugin-folder/plugins");
    let read = |f: &str| std::fs::read_to_string(base.join(f)).ok();
    let host = HostProcess::start_with(cp.admin_kubeconfig(), |dir| {
        install(
            dir,
            "config-replicator",
            "config_replicator",
            Some(&sidecars(0)),
        );
        install(
            dir,
            "namespace-defaults",
            "namespace_defaults",
            read("namespace-defaults.yaml").as_deref(),
        );
        install(
            dir,
            "crashloop-watcher",
            "crashloop_watcher",
            read("crashloop-watcher.yaml").as_deref(),
        );
    });
    host.wait_log("cache synced", Duration::from_secs(120))
        .await;
    let metrics = host.metrics_addr(Duration::from_secs(30)).await;
    eprintln!(
        "soak: {} min at {} changes/s, a swap every {:?}, RSS every {:?}, host pid {}",
        args.minutes,
        args.rate,
        args.swap_every,
        args.sample_every,
        host.pid()
    );

    // Churn: writers in parallel, each paced to its share of the rate.
    let stop = Arc::new(AtomicBool::new(false));
    let changes = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let writers = 8u64;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (client, stop, changes, errors) = (
            client.clone(),
            stop.clone(),
            changes.clone(),
            errors.clone(),
        );
        let period = Duration::from_secs_f64(writers as f64 / args.rate as f64);
        tasks.push(tokio::spawn(async move {
            let api: Api<ConfigMap> = Api::namespaced(client, SOURCES);
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut i = w;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                i = i
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let name = format!("src-{}", (i >> 33) % NAMES);
                let r = if (i >> 20) % 5 == 0 {
                    api.delete(&name, &DeleteParams::default())
                        .await
                        .map(|_| ())
                } else {
                    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": name, "labels": {"kubewasm.io/replicate": "true"}},
                        "data": {"v": format!("{i:x}")}});
                    api.patch(
                        &name,
                        &PatchParams::apply("soak").force(),
                        &Patch::Apply(&cm),
                    )
                    .await
                    .map(|_| ())
                };
                match r {
                    Ok(()) => changes.fetch_add(1, Ordering::Relaxed),
                    Err(kube::Error::Api(e)) if e.code == 404 => 0,
                    Err(_) => errors.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }

    let started = Instant::now();
    let end = Duration::from_secs(args.minutes * 60);
    let mut samples = Vec::new();
    let mut cache_samples = Vec::new();
    let mut swaps = 0u8;
    let mut next_swap = args.swap_every;
    let mut sample = tokio::time::interval(args.sample_every);
    while started.elapsed() < end {
        sample.tick().await;
        let t = started.elapsed().as_secs_f64();
        let rss = rss_mib(host.pid())?;
        samples.push((t, rss));
        // What the host itself counts: the cache's bytes and the queued
        // deltas, to tell a growing cache or backlog from other growth.
        let body = tokio::task::spawn_blocking(move || http_get(metrics, "/metrics"))
            .await?
            .map(|(_, _, body)| body)
            .unwrap_or_default();
        let cache = metric_sum(&body, "kubewasm_cache_bytes") / 1024.0 / 1024.0;
        let queued = metric_sum(&body, "kubewasm_plugin_queue_depth");
        cache_samples.push((t, cache));
        println!(
            "t={t:>6.0}s rss={rss:>7.1} MiB cache={cache:>6.2} MiB queued={queued:>5.0} changes={} errors={}",
            changes.load(Ordering::Relaxed),
            errors.load(Ordering::Relaxed)
        );
        if started.elapsed() >= next_swap {
            swaps += 1;
            next_swap += args.swap_every;
            std::fs::write(
                host.plugins.path().join("config-replicator.yaml"),
                sidecars(swaps),
            )?;
            println!("t={t:>6.0}s swap {swaps}: config-replicator's sidecar rewritten");
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await?;
    }
    let made = changes.load(Ordering::Relaxed);
    let churned = started.elapsed();

    // Nothing lost: the copies converge on the sources.
    let converge = Instant::now();
    loop {
        if copies_match_sources(&client, SOURCES, "kubewasm.io/replicate=true", &TENANTS)
            .await?
            .is_some()
        {
            break;
        }
        if converge.elapsed() > Duration::from_secs(600) {
            bail!("the copies did not converge on their sources within 10 min: something was lost");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let converged_in = converge.elapsed();
    let warm: Vec<(f64, f64)> = samples.iter().copied().filter(|s| s.0 >= 120.0).collect();
    let max = samples.iter().map(|s| s.1).fold(0.0, f64::max);
    println!("\n| measure | value |\n|---|---|");
    println!("| duration | {:.1} min |", churned.as_secs_f64() / 60.0);
    println!(
        "| changes made (rate) | {made} ({:.0}/s, asked {}/s) |",
        made as f64 / churned.as_secs_f64(),
        args.rate
    );
    println!(
        "| write errors seen by the churn | {} |",
        errors.load(Ordering::Relaxed)
    );
    println!("| swaps | {swaps} |");
    println!(
        "| RSS first / last / max | {:.1} / {:.1} / {max:.1} MiB |",
        samples.first().map_or(0.0, |s| s.1),
        samples.last().map_or(0.0, |s| s.1)
    );
    println!(
        "| RSS slope after 2 min (least squares) | {:+.2} MiB/hour over {} samples |",
        slope_per_hour(&warm),
        warm.len()
    );
    let warm_cache: Vec<(f64, f64)> = cache_samples
        .iter()
        .copied()
        .filter(|s| s.0 >= 120.0)
        .collect();
    println!(
        "| cache bytes first / last (slope after 2 min) | {:.2} / {:.2} MiB ({:+.2} MiB/hour) |",
        cache_samples.first().map_or(0.0, |s| s.1),
        cache_samples.last().map_or(0.0, |s| s.1),
        slope_per_hour(&warm_cache)
    );
    println!("| copies equal sources after the churn stopped | yes, in {converged_in:.1?} |");
    let (status, _logs) = host.stop_with_logs();
    println!("| host exit on SIGTERM | {status} |");
    Ok(())
}
