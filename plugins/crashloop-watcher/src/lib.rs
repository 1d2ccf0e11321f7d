//! crashloop-watcher: when a Pod container's restart count crosses a
//! threshold, records a Warning Event on the Pod and annotates the owning
//! Deployment, found through the cache (Pod -> ReplicaSet -> Deployment).
//! See README.md for the config and the exact actions.

use kubewasm_sdk::prelude::*;
use serde::Deserialize;

/// Container status lists, in the order they are searched.
const STATUS_LISTS: [&str; 2] = ["/status/containerStatuses", "/status/initContainerStatuses"];
/// Containers read per host call (one `fields` call covers most pods).
const BATCH: usize = 8;
/// Attempts a delta gets while an owner it names is missing from the cache.
/// Each kind has its own watch, so a Pod's delta can arrive before its new
/// ReplicaSet's or Deployment's: a missing owner is retried (the host backs
/// off 100-200, 200-400, then 400-800 ms by default) before the Event is
/// recorded alone. Each retry reads the Pod as the cache holds it then.
const OWNER_ATTEMPTS: u32 = 4;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default = "default_threshold")]
    threshold: i64,
}

fn default_threshold() -> i64 {
    5
}

struct CrashloopWatcher {
    threshold: i64,
}

/// `(container name, restart count)` of every container status, regular
/// containers first, read through the host (no JSON parsing). A missing
/// `restartCount` counts as 0.
fn restarts(pod: &Object) -> Result<Vec<(String, i64)>, HandlerError> {
    let mut out = Vec::new();
    for list in STATUS_LISTS {
        let mut i = 0;
        'list: loop {
            let pointers: Vec<String> = (i..i + BATCH)
                .flat_map(|i| {
                    [
                        format!("{list}/{i}/name"),
                        format!("{list}/{i}/restartCount"),
                    ]
                })
                .collect();
            let values = pod.fields(&pointers);
            for [name, count] in values.as_chunks::<2>().0 {
                let Some(name) = name else {
                    break 'list;
                };
                let name = name
                    .as_str()
                    .ok_or_else(|| permanent(format!("{list}/{i}/name is not a string")))?;
                let count = match count {
                    None => 0,
                    Some(count) => count.as_i64().ok_or_else(|| {
                        permanent(format!("{list}/{i}/restartCount is not an integer"))
                    })?,
                };
                out.push((name.to_owned(), count));
                i += 1;
            }
            if values.len() < pointers.len() {
                break; // a short answer: never loop on it
            }
        }
    }
    Ok(out)
}

impl Plugin for CrashloopWatcher {
    fn new(ctx: &Context) -> Result<Self, String> {
        let config: Config = ctx.parse_config()?;
        if config.threshold < 1 {
            return Err("invalid config: threshold must be at least 1".to_owned());
        }
        Ok(Self {
            threshold: config.threshold,
        })
    }

    fn registration(&self) -> Registration {
        Registration::new()
            .subscribe(
                Subscription::kind::<Pod>()
                    .deltas([DeltaType::Added, DeltaType::Updated, DeltaType::Resync])
                    .fields(STATUS_LISTS),
            )
            .subscribe(Subscription::kind::<ReplicaSet>().cache_only())
            .subscribe(Subscription::kind::<Deployment>().cache_only())
            .writes::<Deployment>()
    }

    fn handle(&mut self, delta: Delta) -> Result<Handled, HandlerError> {
        // Subscription 0 is the Pods; the others are cache only.
        if delta.subscription != 0 || delta.delta_type == DeltaType::Synced {
            return Ok(Done);
        }
        let pod = delta.object()?;
        let threshold = self.threshold;
        let now = restarts(pod)?;
        if now.iter().all(|(_, n)| *n < threshold) {
            return Ok(Done);
        }
        // The old state only matters for updates (a container missing from
        // it counts as 0 restarts); without one, reaching the threshold is
        // enough.
        let before = match &delta.old_object {
            Some(old) => Some(restarts(old)?),
            None => None,
        };
        let was_below = |name: &str| {
            before.as_ref().is_none_or(|b| {
                b.iter()
                    .find(|(o, _)| o == name)
                    .is_none_or(|(_, n)| *n < threshold)
            })
        };
        // Only the first container (in status order) crossing in this delta
        // is reported: one Event and one annotation per delta.
        let crossed = now
            .into_iter()
            .find(|(name, n)| *n >= threshold && was_below(name));
        let Some((container, count)) = crossed else {
            return Ok(Done);
        };
        // The owner is looked up first: a retry for a lagging owner must
        // not have emitted the Event (actions run only when `handle` is ok).
        let owner = owning_deployment(pod, delta.namespace.as_deref())?;
        if let Err(Missing::Cached(kind, name)) = &owner
            && delta.attempt < OWNER_ATTEMPTS
        {
            return Err(retry(format!(
                "{kind} {}/{name} named by the owner chain is not in the cache yet",
                delta.namespace.as_deref().unwrap_or_default()
            )));
        }
        let note = format!("container {container} restarted {count} times (threshold {threshold})");
        actions::record_event(
            &EventRecord::new(
                ObjectRef::for_delta::<Pod>(&delta),
                EventType::Warning,
                "CrashLooping",
                note,
            )
            .with_regarding_uid(&delta.uid),
        )?;
        match owner {
            Ok(deployment) => actions::annotate(
                &ObjectRef::for_object::<Deployment>(&deployment),
                &[
                    ("kubewasm.io/crashloop-pod", &delta.name),
                    ("kubewasm.io/crashloop-restarts", &count.to_string()),
                ],
                &Preconditions::uid(deployment.uid()),
            )?,
            Err(missing) => {
                log::info(
                    "crash-looping pod has no owning Deployment in the cache",
                    &[
                        ("pod", &delta.key()),
                        ("missing", missing.link()),
                        ("attempt", &delta.attempt.to_string()),
                    ],
                );
            }
        }
        Ok(Done)
    }
}

/// The link of the owner chain that is missing.
enum Missing {
    /// The object has no controller reference of the expected kind: a fact
    /// of the object, not worth waiting for.
    Reference(&'static str),
    /// The reference names an object (kind, name) the cache does not hold
    /// (yet).
    Cached(&'static str, String),
}

impl Missing {
    /// The link's name, as logged and documented.
    fn link(&self) -> &'static str {
        match self {
            Self::Reference(link) | Self::Cached(link, _) => link,
        }
    }
}

/// Pod -> controlling ReplicaSet -> controlling Deployment, via the cache
/// (in the Pod's `namespace`); the inner error names the missing link.
fn owning_deployment(
    pod: &Object,
    namespace: Option<&str>,
) -> Result<Result<Object, Missing>, HandlerError> {
    let Some(rs_ref) = controller_owner(pod).filter(OwnerReference::is::<ReplicaSet>) else {
        return Ok(Err(Missing::Reference("controller ReplicaSet reference")));
    };
    let Some(rs) = cache::get::<ReplicaSet>(namespace, &rs_ref.name)? else {
        return Ok(Err(Missing::Cached("ReplicaSet", rs_ref.name)));
    };
    let Some(d_ref) = controller_owner(&rs).filter(OwnerReference::is::<Deployment>) else {
        return Ok(Err(Missing::Reference("controller Deployment reference")));
    };
    Ok(cache::get::<Deployment>(namespace, &d_ref.name)?
        .ok_or(Missing::Cached("Deployment", d_ref.name)))
}

kubewasm_sdk::export_plugin!(CrashloopWatcher);
