//! `kubewasm shards`: which replica holds which shard of a sharded host
//! (`run --shards N`), read from the shard Leases and the member Leases, so
//! an operator sees the split without finding each replica's Pod.

use std::io::Write;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::ListParams;
use serde::Serialize;

use super::status::{HostLeaseArgs, Output};

#[derive(clap::Args, Debug)]
pub(crate) struct ShardsArgs {
    #[command(flatten)]
    host: HostLeaseArgs,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "text")]
    output: Output,
}

/// What `kubewasm shards` prints (`-o json` as is).
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    lease: String,
    shards: Vec<ShardRow>,
    /// Replicas whose member Lease was renewed within its duration.
    live_replicas: usize,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ShardRow {
    index: u32,
    /// `[start, end)` over the 64-bit FNV-1a hash space.
    range: String,
    holder: Option<String>,
    since: Option<String>,
    renewed: Option<String>,
    transitions: Option<i32>,
}

pub(crate) async fn shards(args: ShardsArgs) -> anyhow::Result<()> {
    let output = args.output;
    let args = args.host;
    let client = kubewasm::source::kube::KubeTarget::new(args.kubeconfig, args.context)
        .client()
        .await?;
    let leases = Api::<Lease>::namespaced(client, &args.namespace)
        .list(&ListParams::default())
        .await?;
    let prefix = format!("{}-shard-", args.lease_name);
    let mut found: Vec<(u32, Lease)> = leases
        .items
        .iter()
        .filter_map(|l| {
            let i = l
                .metadata
                .name
                .as_deref()?
                .strip_prefix(&prefix)?
                .parse()
                .ok()?;
            Some((i, l.clone()))
        })
        .collect();
    found.sort_by_key(|(i, _)| *i);
    let count = found.last().map_or(0, |(i, _)| i + 1);
    let now = k8s_openapi::jiff::Timestamp::now();
    let live_replicas = leases
        .items
        .iter()
        .filter(|l| {
            l.metadata
                .labels
                .as_ref()
                .and_then(|m| m.get(kubewasm::leader::members::MEMBERS_OF))
                == Some(&args.lease_name)
        })
        .filter(|l| {
            let Some(spec) = &l.spec else { return false };
            let (Some(renewed), Some(secs)) = (&spec.renew_time, spec.lease_duration_seconds)
            else {
                return false;
            };
            renewed
                .0
                .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(secs.into()))
                .is_ok_and(|until| until > now)
        })
        .count();
    let shards = found
        .into_iter()
        .map(|(index, l)| {
            let (start, end) = kubewasm::shard::bounds(index, count);
            let spec = l.spec.unwrap_or_default();
            ShardRow {
                index,
                range: format!("[0x{start:016x}, 0x{end:016x})"),
                holder: spec.holder_identity.filter(|h| !h.is_empty()),
                since: spec.acquire_time.map(|t| t.0.to_string()),
                renewed: spec.renew_time.map(|t| t.0.to_string()),
                transitions: spec.lease_transitions,
            }
        })
        .collect();
    let report = Report {
        lease: format!("{}/{}", args.namespace, args.lease_name),
        shards,
        live_replicas,
    };
    let mut out = std::io::stdout().lock();
    match output {
        Output::Json => writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?,
        Output::Text => write!(out, "{}", text(&report))?,
    }
    Ok(())
}

fn text(r: &Report) -> String {
    if r.shards.is_empty() {
        return format!(
            "no shard Leases for {}: the host runs unsharded (kubewasm status shows its leader)\n",
            r.lease
        );
    }
    let held = r.shards.iter().filter(|s| s.holder.is_some()).count();
    let mut out = format!(
        "{} shards of {}: {held} held; {} live replicas\n",
        r.shards.len(),
        r.lease,
        r.live_replicas
    );
    out.push_str("SHARD  RANGE                                     HOLDER  SINCE  TRANSITIONS\n");
    for s in &r.shards {
        out.push_str(&format!(
            "{:<6} {}  {}  {}  {}\n",
            s.index,
            s.range,
            s.holder.as_deref().unwrap_or("-"),
            s.since.as_deref().unwrap_or("-"),
            s.transitions.map_or("-".to_owned(), |t| t.to_string())
        ));
    }
    out
}
