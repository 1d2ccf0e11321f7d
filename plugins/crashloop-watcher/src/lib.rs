//! crashloop-watcher: when a Pod container's restart count crosses a
//! threshold, record a Warning Event on the Pod and annotate the owning
//! Deployment, found through the cache (Pod -> ReplicaSet -> Deployment).

use std::cell::Cell;

use kubewasm_sdk::prelude::*;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default = "default_threshold")]
    threshold: i64,
}

fn default_threshold() -> i64 {
    5
}

thread_local! {
    static THRESHOLD: Cell<i64> = const { Cell::new(5) };
}

/// Restart counts per container, from `containerStatuses` then
/// `initContainerStatuses`, read through the host (no JSON parsing).
fn restarts(obj: &Object) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for list in ["/status/containerStatuses", "/status/initContainerStatuses"] {
        for i in 0.. {
            let base = format!("{list}/{i}");
            let Some(name) = field_str(obj, &format!("{base}/name")) else {
                break;
            };
            out.push((
                name,
                field_i64(obj, &format!("{base}/restartCount")).unwrap_or(0),
            ));
        }
    }
    out
}

struct CrashloopWatcher;

impl Plugin for CrashloopWatcher {
    fn register(config: String) -> Result<Registration, String> {
        let cfg: Config = serde_json::from_str(&config).map_err(|e| format!("bad config: {e}"))?;
        if cfg.threshold < 1 {
            return Err("threshold must be at least 1".into());
        }
        THRESHOLD.with(|t| t.set(cfg.threshold));
        let mut pods = subscribe::<Pod>(&[DeltaType::Added, DeltaType::Updated, DeltaType::Resync]);
        pods.fields = vec![
            "/status/containerStatuses".into(),
            "/status/initContainerStatuses".into(),
        ];
        Ok(Registration {
            subscriptions: vec![pods, read_only::<ReplicaSet>(), read_only::<Deployment>()],
            writes: vec![kind::<Deployment>()],
            indexes: vec![],
        })
    }

    fn handle(delta: Delta) -> Result<(), HandlerError> {
        let (Some(meta), Some(obj)) = (&delta.meta, &delta.object) else {
            return Ok(());
        };
        let threshold = THRESHOLD.with(Cell::get);
        let old: Vec<(String, i64)> = delta.old_object.as_ref().map(restarts).unwrap_or_default();
        // Only the first container crossing in this delta is reported.
        let crossed = restarts(obj).into_iter().find(|(name, n)| {
            let before = old.iter().find(|(o, _)| o == name).map(|(_, n)| *n);
            *n >= threshold && before.is_none_or(|b| b < threshold)
        });
        let Some((container, count)) = crossed else {
            return Ok(());
        };
        let note = format!("container {container} restarted {count} times (threshold {threshold})");
        actions::record_event(
            &object_ref::<Pod>(meta),
            EventType::Warning,
            "CrashLooping",
            &note,
        )
        .map_err(kubewasm_sdk::action_error)?;
        let Some(deploy) = owning_deployment(meta)? else {
            log::info(
                "crash-looping pod has no Deployment in the cache",
                &[("pod", &meta.name)],
            );
            return Ok(());
        };
        let patch = serde_json::json!({"metadata": {"annotations": {
            "kubewasm.io/crashloop-pod": meta.name,
            "kubewasm.io/crashloop-restarts": count.to_string(),
        }}});
        actions::patch(
            &object_ref::<Deployment>(&deploy),
            PatchType::Merge,
            &patch.to_string(),
        )
        .map_err(kubewasm_sdk::action_error)
    }
}

/// Pod -> controlling ReplicaSet -> controlling Deployment, via the cache.
fn owning_deployment(pod: &ObjectMeta) -> Result<Option<ObjectMeta>, HandlerError> {
    let Some(rs_ref) = controller_of(pod).filter(|o| o.kind == "ReplicaSet") else {
        return Ok(None);
    };
    let cached = |e: CacheError| retry(format!("cache read failed: {e:?}"));
    let Some(rs) = cache::get(
        &kind::<ReplicaSet>(),
        pod.namespace.as_deref(),
        &rs_ref.name,
    )
    .map_err(cached)?
    else {
        return Ok(None);
    };
    let rs_meta = rs.meta();
    let Some(d_ref) = controller_of(&rs_meta).filter(|o| o.kind == "Deployment") else {
        return Ok(None);
    };
    let deploy =
        cache::get(&kind::<Deployment>(), pod.namespace.as_deref(), &d_ref.name).map_err(cached)?;
    Ok(deploy.map(|d| d.meta()))
}

kubewasm_sdk::export_plugin!(CrashloopWatcher);
