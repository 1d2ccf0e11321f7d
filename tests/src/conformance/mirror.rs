//! The real API server as a mirror of a fixture's run
//! ([`kubewasm::testing::mirror::Mirror`]): each case's objects put into
//! it under the case's [`Translation`], each action the plugin emits sent
//! to it through the host's own sink, and the answers and resulting
//! objects compared with the simulation's. What differs is kept as the
//! suite's findings, naming the fixture, the case, the action and the
//! field.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;
use kubewasm::actions::Action;
use kubewasm::actions::executor::{ActionError, ActionSink};
use kubewasm::source::kube::KubeSink;
use kubewasm::testing::mirror::{After, Change, Mirror};
use serde_json::{Value, json};

use super::compare::{answer, comparable, differences};
use super::real;
use super::translate::{ObjectId, Translation, id_of};

/// One case's world on the server.
struct Case {
    name: String,
    t: Translation,
    /// Every object the case put or an action touched, as the
    /// simulation names it.
    known: BTreeSet<ObjectId>,
}

pub struct RealMirror {
    client: kube::Client,
    sink: KubeSink,
    rt: tokio::runtime::Handle,
    run: String,
    cases: AtomicUsize,
    case: Mutex<Case>,
    findings: Mutex<Vec<String>>,
    /// Actions compared.
    pub compared: AtomicUsize,
}

impl RealMirror {
    /// A mirror into `client`'s server; `rt` runs its requests; `run`
    /// keeps this run's namespaces apart from earlier runs' on a shared
    /// server.
    pub fn new(client: kube::Client, rt: tokio::runtime::Handle, run: &str) -> Self {
        Self {
            sink: KubeSink::new(client.clone()),
            client,
            rt,
            run: run.to_owned(),
            cases: AtomicUsize::new(0),
            case: Mutex::new(Case {
                name: String::new(),
                t: Translation::new(""),
                known: BTreeSet::new(),
            }),
            findings: Mutex::new(Vec::new()),
            compared: AtomicUsize::new(0),
        }
    }

    /// What differed so far.
    pub fn findings(&self) -> Vec<String> {
        self.findings.lock().unwrap().clone()
    }

    fn find(&self, what: String) {
        let case = self.case.lock().unwrap().name.clone();
        self.findings
            .lock()
            .unwrap()
            .push(format!("{case}: {what}"));
    }

    /// One object in both worlds (`None`: none there): what differs is a
    /// finding about `about`; a pair is learned for the translation.
    fn compare(&self, t: &mut Translation, about: &str, sim: Option<&Value>, real: Option<Value>) {
        match (sim, real) {
            (None, None) => {}
            (Some(_), None) => self.find(format!(
                "{about}: the server has no object, the simulation has one"
            )),
            (None, Some(_)) => self.find(format!(
                "{about}: the server has an object, the simulation none"
            )),
            (Some(s), Some(r)) => {
                let d = differences(&comparable(s, None), &comparable(&r, Some(t)), &[]);
                if !d.is_empty() {
                    self.find(format!(
                        "{about}: the objects differ:\n  {}",
                        d.join("\n  ")
                    ));
                }
                t.pair(s, &r);
            }
        }
    }

    /// Runs `fut` on the mirror's runtime from any thread, async or not.
    fn block<T: Send>(&self, fut: impl std::future::Future<Output = T> + Send) -> T {
        std::thread::scope(|s| s.spawn(|| self.rt.block_on(fut)).join())
            .unwrap_or_else(|_| panic!("the mirror's request panicked"))
    }

    /// Makes sure the namespace the server's copy of `object` lives in
    /// exists (a case's cache may list a namespaced object before its
    /// Namespace, or not list the Namespace at all).
    async fn namespace_for(&self, object: &Value, t: &Translation) -> Result<(), String> {
        let Some(ns) = object["metadata"]["namespace"].as_str() else {
            return Ok(());
        };
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        // Only when missing: applied again by the same manager, the bare
        // Namespace would take away the labels the case gave it.
        let id = id_of(&namespace).ok_or("a namespace without a name")?;
        if real::get(&self.client, &id, t).await?.is_some() {
            return Ok(());
        }
        real::put(&self.client, &namespace, t).await.map(|_| ())
    }

    /// The action as the server must get it.
    fn translated(&self, action: &Action, t: &Translation) -> Action {
        let mut a = action.clone();
        let id = target_id(action);
        let target = match &mut a {
            Action::Apply { target, object, .. } => {
                *object = t.object(object, Some(&id));
                target
            }
            Action::Patch {
                target,
                patch_type,
                patch,
            } => {
                *patch = match patch_type {
                    kubewasm::actions::PatchType::Json => t.json_patch(patch, &id),
                    _ => t.object(patch, Some(&id)),
                };
                target
            }
            Action::Delete { target, .. } => target,
            Action::Event { regarding, .. } => regarding,
        };
        if let Some(ns) = &target.namespace {
            target.namespace = Some(t.namespace(ns));
        }
        if target.kind.gvk.kind == "Namespace" && target.kind.gvk.group.is_empty() {
            target.name = t.namespace(&target.name);
        }
        if let Some(uid) = &target.preconditions.uid {
            target.preconditions.uid = Some(t.uid(uid));
        }
        if let Some(rv) = &target.preconditions.resource_version {
            target.preconditions.resource_version = Some(t.resource_version(&id, rv));
        }
        a
    }
}

/// The simulation's identity of an action's target.
fn target_id(action: &Action) -> ObjectId {
    let target = action.target();
    (
        format!("{}/{}", target.kind.gvk.api_version(), target.kind.gvk.kind),
        target.namespace.clone(),
        target.name.clone(),
    )
}

impl Mirror for RealMirror {
    fn begin_case(&self, file: &Path, case: &str) {
        let n = self.cases.fetch_add(1, Ordering::SeqCst);
        let shown = file.file_name().map_or_else(
            || file.display().to_string(),
            |f| f.to_string_lossy().into_owned(),
        );
        *self.case.lock().unwrap() = Case {
            name: format!("{shown} :: {case}"),
            t: Translation::new(format!("-{}-{n}", self.run)),
            known: BTreeSet::new(),
        };
    }

    fn put(&self, object: &Value) {
        if let Some(id) = id_of(object) {
            self.case.lock().unwrap().known.insert(id);
        }
        let mut t = std::mem::take(&mut self.case.lock().unwrap().t);
        t.learn_namespaces(object);
        let put = self.block(async {
            self.namespace_for(object, &t).await?;
            real::put(&self.client, object, &t).await
        });
        match put {
            Ok(real) => t.pair(object, &real),
            Err(e) => self.find(format!("the server refuses an object of the case: {e}")),
        }
        self.case.lock().unwrap().t = t;
    }

    fn removed(&self, object: &Value) {
        let t = std::mem::take(&mut self.case.lock().unwrap().t);
        if let Some(id) = id_of(object)
            && let Err(e) = self.block(real::delete(&self.client, &id, &t))
        {
            self.find(format!(
                "the server cannot delete an object the case deletes: {e}"
            ));
        }
        self.case.lock().unwrap().t = t;
    }

    fn action<'a>(
        &'a self,
        action: &'a Action,
        sim: &'a Result<(), ActionError>,
        after: After,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let mut t = std::mem::take(&mut self.case.lock().unwrap().t);
            let real_action = self.translated(action, &t);
            let id = target_id(action);
            let work = async {
                if let Some(after) = &after.target {
                    t.learn_namespaces(after);
                }
                let before = real::get(&self.client, &id, &t).await;
                let answer_real = self.sink.execute("conformance", &real_action).await;
                let real_after = real::get(&self.client, &id, &t).await;
                (before, answer_real, real_after)
            };
            // On the mirror's runtime: the runner's has no IO driver.
            let (real_before, answer_real, real_after) = self.block(work);
            self.compared.fetch_add(1, Ordering::SeqCst);
            let what = format!("{} {}", action.operation(), action.target());
            if answer(sim) != answer(&answer_real) {
                self.find(format!(
                    "{what}: simulation {} ({sim:?}), server {} ({answer_real:?})",
                    answer(sim),
                    answer(&answer_real)
                ));
            }
            // A write the simulation echoes must store a new version on
            // the server (its watch reports it), one it does not must not.
            let sim_wrote = after.changed.iter().any(|c| change_id(c) == id);
            let version = |v: &Result<Option<Value>, String>| {
                v.as_ref()
                    .ok()
                    .map(|o| o.as_ref().map(|o| o["metadata"]["resourceVersion"].clone()))
            };
            if let (Some(before), Some(now)) = (version(&real_before), version(&real_after))
                && (before != now) != sim_wrote
            {
                self.find(format!(
                    "{what}: the simulation {} a new version, the server {}",
                    if sim_wrote { "stores" } else { "stores no" },
                    if sim_wrote { "none" } else { "one" },
                ));
            }
            // The collector wrote the target again after the action (an
            // orphan or foreground deletion it finished): compared with
            // the rest of the world once the real collector has settled.
            let collected = after.changed.iter().filter(|c| change_id(c) == id).count() > 1;
            match real_after {
                _ if collected => {}
                Err(e) => self.find(format!("{what}: cannot read the server's object: {e}")),
                Ok(real_obj) => self.compare(&mut t, &what, after.target.as_ref(), real_obj),
            }
            let known: Vec<ObjectId> = {
                let mut case = self.case.lock().unwrap();
                case.known.insert(id.clone());
                case.known.extend(after.changed.iter().map(change_id));
                case.known.iter().cloned().collect()
            };
            if !after.world.is_empty() {
                // Something was deleted: every object of the case, once
                // the real collector has nothing left to do, as the
                // simulated one left it.
                let real_world = self.block(settled(&self.client, &known, &t));
                let sim_world: Vec<(ObjectId, &Value)> = after
                    .world
                    .iter()
                    .filter_map(|v| Some((id_of(v)?, v)))
                    .collect();
                match real_world {
                    Err(e) => self.find(format!("{what}: {e}")),
                    Ok(real_world) => {
                        for (oid, real_obj) in real_world {
                            let sim_obj =
                                sim_world.iter().find(|(i, _)| *i == oid).map(|(_, v)| *v);
                            let about =
                                format!("{what}: after the garbage collector, {} {}", oid.0, oid.2);
                            self.compare(&mut t, &about, sim_obj, real_obj);
                        }
                    }
                }
            }
            self.case.lock().unwrap().t = t;
        })
    }
}

/// How long the real garbage collector may take to reach the simulated
/// collector's result.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(30);

/// The simulation's identity of a changed object.
fn change_id(c: &Change) -> ObjectId {
    (
        format!("{}/{}", c.id.0.api_version(), c.id.0.kind),
        c.id.1.namespace.as_deref().map(str::to_owned),
        c.id.1.name.to_string(),
    )
}

/// The server's objects `ids` once its garbage collector has nothing
/// left to do among them (polled until [`SETTLE`]): no live object with
/// an owner reference to an object that is gone, no `orphan` finalizer, and a
/// `foregroundDeletion` finalizer only on an owner that a dependent still
/// blocks and whose dependents are all being deleted.
async fn settled(
    client: &kube::Client,
    ids: &[ObjectId],
    t: &Translation,
) -> Result<Vec<(ObjectId, Option<Value>)>, String> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let mut world = Vec::with_capacity(ids.len());
        for id in ids {
            world.push((id.clone(), real::get(client, id, t).await?));
        }
        let live: Vec<&Value> = world.iter().filter_map(|(_, v)| v.as_ref()).collect();
        let uids: BTreeSet<&str> = live
            .iter()
            .filter_map(|v| v["metadata"]["uid"].as_str())
            .collect();
        let refs = |v: &Value| -> Vec<(String, bool)> {
            v["metadata"]["ownerReferences"]
                .as_array()
                .map(|r| {
                    r.iter()
                        .map(|r| {
                            (
                                r["uid"].as_str().unwrap_or_default().to_owned(),
                                r["blockOwnerDeletion"] == true,
                            )
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        let finalizers = |v: &Value| -> Vec<String> {
            v["metadata"]["finalizers"]
                .as_array()
                .map(|f| {
                    f.iter()
                        .filter_map(|f| f.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let pending = live.iter().find_map(|v| {
            let name = v["metadata"]["name"].as_str().unwrap_or_default();
            // (A dependent being deleted keeps its references.)
            let terminating = !v["metadata"]["deletionTimestamp"].is_null();
            if !terminating && refs(v).iter().any(|(u, _)| !uids.contains(u.as_str())) {
                return Some(format!("{name} still refers to an owner that is gone"));
            }
            let fins = finalizers(v);
            if fins.iter().any(|f| f == "orphan") {
                return Some(format!("{name} still has the orphan finalizer"));
            }
            let uid = v["metadata"]["uid"].as_str().unwrap_or_default();
            let blocked = live
                .iter()
                .any(|d| refs(d).iter().any(|(u, block)| u == uid && *block));
            if fins.iter().any(|f| f == "foregroundDeletion") {
                if !blocked {
                    return Some(format!("{name} still has the foregroundDeletion finalizer"));
                }
                // The collector deletes every dependent of an owner
                // deleted in the foreground.
                let waiting = live.iter().any(|d| {
                    d["metadata"]["deletionTimestamp"].is_null()
                        && refs(d).iter().any(|(u, _)| u == uid)
                });
                if waiting {
                    return Some(format!("{name} still has dependents not being deleted"));
                }
            }
            None
        });
        match pending {
            None => return Ok(world),
            Some(p) if tokio::time::Instant::now() >= deadline => {
                return Err(format!(
                    "the server's garbage collector did not settle in {SETTLE:?}: {p}"
                ));
            }
            Some(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
        }
    }
}
