//! The real API server as a mirror of a fixture's run
//! ([`kubewasm::testing::mirror::Mirror`]): each case's objects put into
//! it under the case's [`Translation`], each action the plugin emits sent
//! to it through the host's own sink, and the answers and resulting
//! objects compared with the simulation's. What differs is kept as the
//! suite's findings, naming the fixture, the case, the action and the
//! field.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;
use kubewasm::actions::Action;
use kubewasm::actions::executor::{ActionError, ActionSink};
use kubewasm::source::kube::KubeSink;
use kubewasm::testing::mirror::Mirror;
use serde_json::{Value, json};

use super::compare::{answer, comparable, differences};
use super::real;
use super::translate::{ObjectId, Translation, id_of};

/// One case's world on the server.
struct Case {
    name: String,
    t: Translation,
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
        };
    }

    fn put(&self, object: &Value) {
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
        after: Option<Value>,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let mut t = std::mem::take(&mut self.case.lock().unwrap().t);
            let real_action = self.translated(action, &t);
            let id = target_id(action);
            let work = async {
                if let Some(after) = &after {
                    t.learn_namespaces(after);
                }
                let answer_real = self.sink.execute("conformance", &real_action).await;
                let real_after = real::get(&self.client, &id, &t).await;
                (answer_real, real_after)
            };
            // On the mirror's runtime: the runner's has no IO driver.
            let (answer_real, real_after) = self.block(work);
            self.compared.fetch_add(1, Ordering::SeqCst);
            let what = format!("{} {}", action.operation(), action.target());
            if answer(sim) != answer(&answer_real) {
                self.find(format!(
                    "{what}: simulation {} ({sim:?}), server {} ({answer_real:?})",
                    answer(sim),
                    answer(&answer_real)
                ));
            }
            match (&after, real_after) {
                (_, Err(e)) => self.find(format!("{what}: cannot read the server's object: {e}")),
                (Some(sim_obj), Ok(Some(real_obj))) => {
                    let d = differences(
                        &comparable(sim_obj, None),
                        &comparable(&real_obj, Some(&t)),
                        &[],
                    );
                    if !d.is_empty() {
                        self.find(format!("{what}: the objects differ:\n  {}", d.join("\n  ")));
                    }
                    t.pair(sim_obj, &real_obj);
                }
                (None, Ok(None)) => {}
                (Some(_), Ok(None)) => self.find(format!(
                    "{what}: the server has no object, the simulation has one"
                )),
                (None, Ok(Some(_))) => self.find(format!(
                    "{what}: the server has an object, the simulation none"
                )),
            }
            self.case.lock().unwrap().t = t;
        })
    }
}
