//! The embedded cluster against what the API server does: `folder` how it
//! reads and writes its folder, `api_server` the server's semantics
//! (finalizers, graceful and cascading deletion, uids, generation and
//! resourceVersion, conflicting edits).

use super::*;
use crate::actions::{PatchType, Target};

mod api_server;
mod folder;

/// The embedded cluster over `dir` (the built-in kinds, nothing stripped)
/// and the ConfigMap kind the tests watch and write.
fn configmap_cluster(dir: &std::path::Path) -> (Arc<LocalCluster>, crate::kind::KindInfo) {
    let kinds = KindRegistry::builtin();
    let cluster =
        LocalCluster::new(dir.to_owned(), kinds.clone(), StripOptions::default()).unwrap();
    let kind = kinds
        .resolve(&crate::kind::KindRef::Resource("configmaps".into()))
        .unwrap();
    (cluster, kind)
}

/// A cluster over a temporary folder with a watch on every ConfigMap,
/// for the API-server behaviour tests.
struct Fixture {
    dir: tempfile::TempDir,
    cluster: Arc<LocalCluster>,
    kind: Arc<crate::kind::KindInfo>,
    watch: BoxStream<'static, Result<WatchEvent, SourceError>>,
}

impl Fixture {
    fn new(files: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for (rel, text) in files {
            let p = dir.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let (cluster, kind) = configmap_cluster(dir.path());
        let kind = Arc::new(kind);
        let watch = cluster.watch(&InformerSpec {
            kind: (*kind).clone(),
            namespace: None,
            label_selector: None,
            field_selector: None,
        });
        let mut f = Self {
            dir,
            cluster,
            kind,
            watch,
        };
        f.events();
        f
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn text(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.path(rel)).ok()
    }

    fn target(&self, name: &str) -> Target {
        Target::new(self.kind.clone(), Some("d".into()), name)
    }

    fn run(&self, action: Action) -> Result<(), ActionError> {
        self.cluster.apply_action("p", &action)
    }

    fn patch(&self, name: &str, patch: Value) -> Result<(), ActionError> {
        self.run(Action::Patch {
            target: self.target(name),
            patch_type: PatchType::Merge,
            patch,
        })
    }

    fn delete(&self, target: Target) -> Result<(), ActionError> {
        self.run(Action::Delete {
            target,
            propagation: Propagation::Background,
        })
    }

    fn get(&self, name: &str) -> Option<Value> {
        self.cluster
            .get(&Gvk::new("", "v1", "ConfigMap"), Some("d"), name)
    }

    fn meta(&self, name: &str, field: &str) -> Value {
        self.get(name).unwrap()["metadata"][field].clone()
    }

    /// The watch events so far: `apply NAME`, `apply NAME terminating`,
    /// `delete NAME`.
    fn events(&mut self) -> Vec<String> {
        use futures::{FutureExt, StreamExt};
        let mut out = Vec::new();
        while let Some(Some(e)) = self.watch.next().now_or_never() {
            match e.unwrap() {
                WatchEvent::Apply(o) | WatchEvent::InitApply(o) => out.push(format!(
                    "apply {}{}",
                    o.name(),
                    if o.meta().deletion_timestamp.is_some() {
                        " terminating"
                    } else {
                        ""
                    }
                )),
                WatchEvent::Delete(o) => out.push(format!("delete {}", o.name())),
                _ => {}
            }
        }
        out
    }
}

fn cm(name: &str, extra: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: d\n{extra}")
}

const HELD: &str = "  finalizers: [example.com/cleanup]\n";

fn owned(name: &str, owners: &[(&str, bool)], extra: &str) -> String {
    let refs: Vec<String> = owners
        .iter()
        .map(|(uid, block)| {
            format!("{{apiVersion: v1, kind: ConfigMap, name: o, uid: {uid}, blockOwnerDeletion: {block}}}")
        })
        .collect();
    cm(
        name,
        &format!("  ownerReferences: [{}]\n{extra}", refs.join(", ")),
    )
}
