//! namespace-defaults: gives every Namespace matching a label selector a
//! default-deny NetworkPolicy and a ResourceQuota, and removes exactly those
//! two objects (when it created them) once the Namespace stops matching.
//! See README.md for the config and the exact actions.

use std::collections::BTreeMap;

use kubewasm_sdk::k8s_openapi::api::core::v1::ResourceQuotaSpec;
use kubewasm_sdk::k8s_openapi::api::networking::v1::NetworkPolicySpec;
use kubewasm_sdk::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kubewasm_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector as PodSelector, ObjectMeta as Metadata,
};
use kubewasm_sdk::prelude::*;
use kubewasm_sdk::serde_json::Value;
use serde::Deserialize;

const POLICY: &str = "default-deny";
const QUOTA: &str = "default-quota";
/// The labels on everything this plugin creates, and how it recognises them.
const OWN_LABELS: [(&str, &str); 2] = [
    ("app.kubernetes.io/managed-by", "kubewasm"),
    ("kubewasm.io/plugin", "namespace-defaults"),
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Config {
    #[serde(default = "default_selector")]
    namespace_selector: String,
    #[serde(default)]
    quota: QuotaConfig,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QuotaConfig {
    /// Quantities as strings (`"8Gi"`) or plain numbers (`50`).
    #[serde(default = "default_hard")]
    hard: BTreeMap<String, Value>,
}

impl Default for QuotaConfig {
    fn default() -> Self {
        Self {
            hard: default_hard(),
        }
    }
}

fn default_selector() -> String {
    "kubewasm.io/defaults=enabled".to_owned()
}

fn default_hard() -> BTreeMap<String, Value> {
    [
        ("pods", "50"),
        ("requests.cpu", "4"),
        ("requests.memory", "8Gi"),
        ("limits.cpu", "8"),
        ("limits.memory", "16Gi"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), Value::from(v)))
    .collect()
}

struct NamespaceDefaults {
    selector: LabelSelector,
    hard: BTreeMap<String, Quantity>,
}

impl Plugin for NamespaceDefaults {
    fn new(ctx: &Context) -> Result<Self, String> {
        let config: Config = ctx.parse_config()?;
        let selector = LabelSelector::parse(&config.namespace_selector)
            .map_err(|e| format!("invalid config: namespaceSelector: {e}"))?;
        if config.quota.hard.is_empty() {
            return Err("invalid config: quota.hard is empty".to_owned());
        }
        let hard = config
            .quota
            .hard
            .into_iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k, Quantity(s))),
                Value::Number(n) => Ok((k, Quantity(n.to_string()))),
                other => Err(format!(
                    "invalid config: quota.hard.{k} is {other}, not a quantity"
                )),
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { selector, hard })
    }

    fn registration(&self) -> Registration {
        Registration::new()
            .subscribe(
                Subscription::kind::<Namespace>()
                    .deltas([DeltaType::Added, DeltaType::Updated, DeltaType::Resync])
                    .fields(["/metadata/labels", "/metadata/deletionTimestamp"]),
            )
            .subscribe(Subscription::kind::<NetworkPolicy>().cache_only())
            .subscribe(Subscription::kind::<ResourceQuota>().cache_only())
            .writes::<NetworkPolicy>()
            .writes::<ResourceQuota>()
    }

    fn handle(&mut self, delta: Delta) -> Result<Handled, HandlerError> {
        // Subscription 0 is the Namespaces; the others are cache only.
        if delta.subscription != 0 || delta.delta_type == DeltaType::Synced {
            return Ok(Done);
        }
        let ns = delta.object()?;
        if ns.is_terminating() {
            return Ok(Done);
        }
        match (delta.delta_type, self.selector.matches_object(ns)) {
            (DeltaType::Added | DeltaType::Updated | DeltaType::Resync, true) => {
                self.ensure(&delta.name)?;
            }
            (DeltaType::Updated, false) => remove(&delta.name)?,
            _ => {}
        }
        Ok(Done)
    }
}

impl NamespaceDefaults {
    /// Applies the policy, then the quota.
    fn ensure(&self, ns: &str) -> Result<(), HandlerError> {
        let metadata = |name: &str| Metadata {
            name: Some(name.to_owned()),
            namespace: Some(ns.to_owned()),
            labels: Some(
                OWN_LABELS
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..Metadata::default()
        };
        let policy = NetworkPolicy {
            metadata: metadata(POLICY),
            spec: Some(NetworkPolicySpec {
                pod_selector: Some(PodSelector::default()),
                policy_types: Some(vec!["Ingress".to_owned(), "Egress".to_owned()]),
                ..NetworkPolicySpec::default()
            }),
        };
        let quota = ResourceQuota {
            metadata: metadata(QUOTA),
            spec: Some(ResourceQuotaSpec {
                hard: Some(self.hard.clone()),
                ..ResourceQuotaSpec::default()
            }),
            ..ResourceQuota::default()
        };
        actions::apply(&policy, true, &Preconditions::none())?;
        actions::apply(&quota, true, &Preconditions::none())?;
        log::info("namespace defaults applied", &[("namespace", ns)]);
        Ok(())
    }
}

/// Deletes the policy, then the quota, each only if the cache holds it with
/// this plugin's labels (so nothing someone else made is removed).
fn remove(ns: &str) -> Result<(), HandlerError> {
    for (kind, name) in [
        (kind_ref::<NetworkPolicy>(), POLICY),
        (kind_ref::<ResourceQuota>(), QUOTA),
    ] {
        let Some(found) = cache::get_kind(&kind, Some(ns), name)? else {
            continue;
        };
        if OWN_LABELS
            .iter()
            .all(|(k, v)| found.label(k).as_deref() == Some(*v))
        {
            actions::delete(
                &ObjectRef::new(kind, Some(ns), name),
                Propagation::Background,
                &Preconditions::uid(found.uid()),
            )?;
            log::info(
                "namespace default removed",
                &[("namespace", ns), ("name", name)],
            );
        }
    }
    Ok(())
}

kubewasm_sdk::export_plugin!(NamespaceDefaults);
