//! `kubewasm status`: which replica leads and what each replica serves, read
//! from the cluster (the Lease and the Plugin objects' status), so an
//! operator need not find the leader's Pod to know.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use kubewasm::crd::{NamespacedPlugin, Plugin, PluginStatus};
use serde::Serialize;

#[derive(clap::Args, Debug)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub(crate) host: HostLeaseArgs,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "text")]
    output: Output,
}

/// Where a running host is: its cluster, namespace and Lease (`status`,
/// `shards`).
#[derive(clap::Args, Debug)]
pub(crate) struct HostLeaseArgs {
    /// Kubeconfig of the cluster (unset: KUBECONFIG, the pod's service account, ~/.kube/config).
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// Context of the kubeconfig to use (default: its current context).
    #[arg(long)]
    pub(crate) context: Option<String>,
    /// Namespace the host runs in (its Leases and Pods).
    #[arg(long, short = 'n', default_value = "kubewasm")]
    pub(crate) namespace: String,
    /// Name of the leader-election Lease (a sharded host's are `<name>-shard-<i>`).
    #[arg(long, default_value = "kubewasm")]
    pub(crate) lease_name: String,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Output {
    Text,
    Json,
}

/// What `kubewasm status` prints (`-o json` as is).
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    lease: String,
    leader: Option<Leader>,
    plugins: Vec<PluginRow>,
    /// Per replica (its Pod's name): plugin -> the version it serves, or
    /// why none.
    replicas: BTreeMap<String, BTreeMap<String, String>>,
    /// The cluster does not serve plugins.kubewasm.io.
    crds_missing: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Leader {
    /// The Lease's holder identity (`<pod>_<suffix>`).
    identity: String,
    /// The holder's Pod, when one of that name runs in the namespace.
    pod: Option<String>,
    since: Option<String>,
    renewed: Option<String>,
    lease_duration_seconds: Option<i32>,
    transitions: Option<i32>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct PluginRow {
    /// `plugin/NAME` or `NAMESPACE/namespacedplugin/NAME`.
    name: String,
    ready: String,
    reason: String,
    message: String,
    version: Option<String>,
    observed_generation: Option<i64>,
    generation: Option<i64>,
}

pub(crate) async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let output = args.output;
    let args = args.host;
    let client = kubewasm::source::kube::KubeTarget::new(args.kubeconfig, args.context)
        .client()
        .await?;
    let lease = Api::<Lease>::namespaced(client.clone(), &args.namespace)
        .get_opt(&args.lease_name)
        .await?;
    let pods: Vec<String> = match Api::<Pod>::namespaced(client.clone(), &args.namespace)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect(),
        // Without list on Pods the leader is named by its identity only.
        Err(_) => Vec::new(),
    };
    let mut report = Report {
        lease: format!("{}/{}", args.namespace, args.lease_name),
        leader: lease.and_then(|l| leader(l, &pods)),
        ..Report::default()
    };
    let mut rows = Vec::new();
    match Api::<Plugin>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => {
            for p in list {
                let name = format!("plugin/{}", p.metadata.name.clone().unwrap_or_default());
                rows.push((name, p.metadata.generation, p.status));
            }
        }
        // The CRDs are not installed: plugins come from the folder only.
        Err(kube::Error::Api(e)) if e.code == 404 => report.crds_missing = true,
        Err(e) => return Err(e.into()),
    }
    // NamespacedPlugins are optional: a cluster may serve only Plugins.
    if let Ok(list) = Api::<NamespacedPlugin>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        for p in list {
            let name = format!(
                "{}/namespacedplugin/{}",
                p.metadata.namespace.clone().unwrap_or_default(),
                p.metadata.name.clone().unwrap_or_default()
            );
            rows.push((name, p.metadata.generation, p.status));
        }
    }
    for (name, generation, status) in rows {
        add(&mut report, name, generation, status.unwrap_or_default());
    }
    let mut out = std::io::stdout().lock();
    match output {
        Output::Json => writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?,
        Output::Text => write!(out, "{}", text(&report))?,
    }
    Ok(())
}

fn leader(lease: Lease, pods: &[String]) -> Option<Leader> {
    let spec = lease.spec?;
    let identity = spec.holder_identity.filter(|h| !h.is_empty())?;
    // `<pod>_<suffix>` (the host's holder identity): the Pod is the part
    // before the last `_`, if a Pod of that name runs.
    let pod = identity
        .rsplit_once('_')
        .map(|(pod, _)| pod.to_owned())
        .filter(|p| pods.contains(p));
    Some(Leader {
        identity,
        pod,
        since: spec.acquire_time.as_ref().and_then(api_time),
        renewed: spec.renew_time.as_ref().and_then(api_time),
        lease_duration_seconds: spec.lease_duration_seconds,
        transitions: spec.lease_transitions,
    })
}

/// A MicroTime as the API server writes it (six digits of fraction), as
/// the hosts' `/readyz` text shows it.
fn api_time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime) -> Option<String> {
    serde_json::to_value(t).ok()?.as_str().map(str::to_owned)
}

fn add(report: &mut Report, name: String, generation: Option<i64>, status: PluginStatus) {
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
    for r in &status.replicas {
        let served = match (&r.version, r.loaded, &r.reason) {
            (Some(v), true, _) => v.clone(),
            (Some(v), false, Some(reason)) => format!("{v} (the current spec: {reason})"),
            (Some(v), false, None) => format!("{v} (not the current spec yet)"),
            (None, _, Some(reason)) => format!("nothing ({reason})"),
            (None, _, None) => "nothing".to_owned(),
        };
        report
            .replicas
            .entry(r.name.clone())
            .or_default()
            .insert(name.clone(), served);
    }
    report.plugins.push(PluginRow {
        name,
        ready: ready.map_or("Unknown".to_owned(), |c| c.status.clone()),
        reason: ready.map(|c| c.reason.clone()).unwrap_or_default(),
        message: ready.map(|c| c.message.clone()).unwrap_or_default(),
        version: status.version,
        observed_generation: status.observed_generation,
        generation,
    });
}

fn text(report: &Report) -> String {
    let mut out = String::new();
    match &report.leader {
        Some(l) => {
            let who = l.pod.as_deref().unwrap_or(&l.identity);
            out.push_str(&format!("Leader: {who}"));
            if let Some(since) = &l.since {
                out.push_str(&format!(" since {since}"));
            }
            out.push_str(&format!(" (Lease {}", report.lease));
            if let Some(renewed) = &l.renewed {
                out.push_str(&format!(", renewed {renewed}"));
            }
            if let Some(t) = l.transitions {
                out.push_str(&format!(", {t} transitions"));
            }
            out.push_str(")\n");
        }
        None => out.push_str(&format!(
            "Leader: none (Lease {} is missing or free: no replica delivers now)\n",
            report.lease
        )),
    }
    let leader_pod = report.leader.as_ref().and_then(|l| l.pod.clone());
    if !report.replicas.is_empty() {
        out.push_str("\nReplicas:\n");
        for (replica, plugins) in &report.replicas {
            let role = if Some(replica) == leader_pod.as_ref() {
                " (leader)"
            } else {
                ""
            };
            out.push_str(&format!("  {replica}{role}\n"));
            for (plugin, served) in plugins {
                out.push_str(&format!("    {plugin}: {served}\n"));
            }
        }
    }
    out.push_str("\nPlugins:\n");
    if report.crds_missing {
        out.push_str("  the cluster does not serve plugins.kubewasm.io (install the CRDs: kubewasm crds); plugins come from the hosts' folders only\n");
    } else if report.plugins.is_empty() {
        out.push_str("  none\n");
    }
    let width = report
        .plugins
        .iter()
        .map(|p| p.name.len())
        .max()
        .unwrap_or(0);
    for p in &report.plugins {
        let stale = match (p.observed_generation, p.generation) {
            (Some(o), Some(g)) if o != g => format!(" [generation {g} not observed yet: {o}]"),
            (None, Some(_)) => " [no status yet]".to_owned(),
            _ => String::new(),
        };
        out.push_str(&format!(
            "  {:width$}  Ready={} {} version={}{stale}\n",
            p.name,
            p.ready,
            p.reason,
            p.version.as_deref().unwrap_or("-"),
        ));
        if p.ready != "True" && !p.message.is_empty() {
            out.push_str(&format!("  {:width$}    {}\n", "", p.message));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubewasm::crd::{Condition, ReplicaStatus};

    fn replica(
        name: &str,
        version: Option<&str>,
        loaded: bool,
        reason: Option<&str>,
    ) -> ReplicaStatus {
        ReplicaStatus {
            name: name.into(),
            observed_generation: Some(2),
            version: version.map(str::to_owned),
            loaded,
            reason: reason.map(str::to_owned),
            message: None,
        }
    }

    #[test]
    fn names_the_leader_and_what_each_replica_serves() {
        let lease: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kubewasm", "namespace": "kubewasm"},
            "spec": {"holderIdentity": "kubewasm-a_x1", "acquireTime": "2026-01-01T00:00:00.000000Z",
                     "leaseTransitions": 2}
        }))
        .unwrap();
        let mut report = Report {
            lease: "kubewasm/kubewasm".into(),
            leader: leader(lease, &["kubewasm-a".into(), "kubewasm-b".into()]),
            ..Report::default()
        };
        let status = PluginStatus {
            observed_generation: Some(2),
            version: Some("aaaaaaaaaaaa".into()),
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: "False".into(),
                reason: "ReplicasBehind".into(),
                message: "replica kubewasm-b serves version bbbbbbbbbbbb".into(),
                observed_generation: Some(2),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
            }],
            replicas: vec![
                replica("kubewasm-a", Some("aaaaaaaaaaaa"), true, None),
                replica(
                    "kubewasm-b",
                    Some("bbbbbbbbbbbb"),
                    false,
                    Some("PullFailed"),
                ),
            ],
            ..PluginStatus::default()
        };
        add(&mut report, "plugin/p".into(), Some(2), status);
        let text = text(&report);
        assert!(
            text.starts_with("Leader: kubewasm-a since 2026-01-01T00:00:00.000000Z (Lease kubewasm/kubewasm, 2 transitions)"),
            "{text}"
        );
        assert!(
            text.contains("  kubewasm-a (leader)\n    plugin/p: aaaaaaaaaaaa\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "  kubewasm-b\n    plugin/p: bbbbbbbbbbbb (the current spec: PullFailed)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("plugin/p  Ready=False ReplicasBehind version=aaaaaaaaaaaa"),
            "{text}"
        );
        assert!(
            text.contains("replica kubewasm-b serves version bbbbbbbbbbbb"),
            "{text}"
        );
    }

    #[test]
    fn says_when_no_replica_leads() {
        let report = Report {
            lease: "kubewasm/kubewasm".into(),
            ..Report::default()
        };
        assert!(
            text(&report).starts_with("Leader: none (Lease kubewasm/kubewasm is missing or free")
        );
    }
}
