//! namespace-defaults: when a Namespace matching a label selector appears,
//! apply a default-deny NetworkPolicy and a ResourceQuota into it; when it
//! stops matching, delete only those two objects, and only if they carry
//! this plugin's labels.

use std::cell::RefCell;
use std::collections::BTreeMap;

use kubewasm_sdk::k8s_openapi::api::core::v1::ResourceQuotaSpec;
use kubewasm_sdk::k8s_openapi::api::networking::v1::NetworkPolicySpec;
use kubewasm_sdk::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kubewasm_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta as KMeta,
};
use kubewasm_sdk::prelude::*;
use kubewasm_sdk::selector::Selector;
use serde::Deserialize;

const POLICY: &str = "default-deny";
const QUOTA: &str = "default-quota";

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Config {
    #[serde(default = "default_selector")]
    namespace_selector: String,
    #[serde(default)]
    quota: Quota,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Quota {
    hard: BTreeMap<String, String>,
}

impl Default for Quota {
    fn default() -> Self {
        let hard = [
            ("pods", "50"),
            ("requests.cpu", "4"),
            ("requests.memory", "8Gi"),
            ("limits.cpu", "8"),
            ("limits.memory", "16Gi"),
        ];
        Self {
            hard: hard
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }
}

fn default_selector() -> String {
    "kubewasm.io/defaults=enabled".to_owned()
}

struct State {
    selector: Selector,
    hard: BTreeMap<String, String>,
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

fn labels() -> BTreeMap<String, String> {
    [
        ("app.kubernetes.io/managed-by", "kubewasm"),
        ("kubewasm.io/plugin", "namespace-defaults"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect()
}

fn owned_by_us(obj: &Object) -> bool {
    let m = obj.meta();
    label(&m, "app.kubernetes.io/managed-by") == Some("kubewasm")
        && label(&m, "kubewasm.io/plugin") == Some("namespace-defaults")
}

struct NamespaceDefaults;

impl Plugin for NamespaceDefaults {
    fn register(config: String) -> Result<Registration, String> {
        let cfg: Config = serde_json::from_str(&config).map_err(|e| format!("bad config: {e}"))?;
        let selector = Selector::parse(&cfg.namespace_selector)?;
        STATE.with(|s| {
            *s.borrow_mut() = Some(State {
                selector,
                hard: cfg.quota.hard,
            })
        });
        let mut ns =
            subscribe::<Namespace>(&[DeltaType::Added, DeltaType::Updated, DeltaType::Resync]);
        ns.fields = vec![
            "/metadata/labels".into(),
            "/metadata/deletionTimestamp".into(),
        ];
        Ok(Registration {
            subscriptions: vec![
                ns,
                read_only::<NetworkPolicy>(),
                read_only::<ResourceQuota>(),
            ],
            writes: vec![kind::<NetworkPolicy>(), kind::<ResourceQuota>()],
            indexes: vec![],
        })
    }

    fn handle(delta: Delta) -> Result<(), HandlerError> {
        let Some(meta) = delta.meta else {
            return Ok(());
        };
        STATE.with(|s| {
            let s = s.borrow();
            let state = s.as_ref().ok_or_else(|| permanent("not registered"))?;
            let terminating = meta.deletion_timestamp.is_some();
            let matches = state.selector.matches(&meta.labels) && !terminating;
            match delta.delta_type {
                DeltaType::Added | DeltaType::Updated | DeltaType::Resync if matches => {
                    ensure(&meta.name, state)
                }
                DeltaType::Updated if !terminating => remove(&meta.name),
                _ => Ok(()),
            }
        })
    }
}

fn ensure(ns: &str, state: &State) -> Result<(), HandlerError> {
    let meta = |name: &str| KMeta {
        name: Some(name.to_owned()),
        namespace: Some(ns.to_owned()),
        labels: Some(labels()),
        ..KMeta::default()
    };
    let policy = NetworkPolicy {
        metadata: meta(POLICY),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector::default()),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ..NetworkPolicySpec::default()
        }),
    };
    let quota = ResourceQuota {
        metadata: meta(QUOTA),
        spec: Some(ResourceQuotaSpec {
            hard: Some(
                state
                    .hard
                    .iter()
                    .map(|(k, v)| (k.clone(), Quantity(v.clone())))
                    .collect(),
            ),
            ..ResourceQuotaSpec::default()
        }),
        ..ResourceQuota::default()
    };
    apply(&policy, true)?;
    apply(&quota, true)?;
    log::info("namespace defaults applied", &[("namespace", ns)]);
    Ok(())
}

fn remove(ns: &str) -> Result<(), HandlerError> {
    for (k, name) in [
        (kind::<NetworkPolicy>(), POLICY),
        (kind::<ResourceQuota>(), QUOTA),
    ] {
        let found = cache::get(&k, Some(ns), name).map_err(|e| permanent(format!("{e:?}")))?;
        if let Some(obj) = found.filter(owned_by_us) {
            let target = ObjectRef {
                kind: k,
                namespace: Some(ns.to_owned()),
                name: name.to_owned(),
                uid: Some(obj.meta().uid),
            };
            actions::delete(&target, Propagation::Background)
                .map_err(kubewasm_sdk::action_error)?;
        }
    }
    Ok(())
}

kubewasm_sdk::export_plugin!(NamespaceDefaults);
