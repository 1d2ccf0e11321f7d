//! The embedded cluster behaves as the API server does for a controller:
//! the real `kubewasm` binary over a folder of manifests, with the
//! `lifecycle` test plugin (plugins/testing/lifecycle) owning a finalizer,
//! holding a uid across a recreation, and writing an object in a loop
//! while the test edits its file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kubewasm::source::local::parse_manifests;
use kubewasm_tests::host_child::HostChild;
use kubewasm_tests::{install, run_local, write_cluster};
use serde_json::Value;

const ACCESS: &str = "access:\n  - {kinds: [configmaps], verbs: [read, patch, delete]}\n";

/// How long any one condition may take (the host is a debug build, and
/// the suites share two cores).
const PATIENCE: Duration = Duration::from_secs(120);

/// `kubewasm run --local` over a folder, its log in a file, stopped on
/// drop.
struct LocalHost {
    /// First: stopped before its folders go.
    host: HostChild,
    cluster: PathBuf,
    _dirs: tempfile::TempDir,
}

impl LocalHost {
    fn start(files: &[(&str, &str)], config: &str) -> Self {
        let dirs = tempfile::tempdir().unwrap();
        let cluster = dirs.path().join("cluster");
        let plugins = dirs.path().join("plugins");
        std::fs::create_dir_all(&cluster).unwrap();
        std::fs::create_dir_all(&plugins).unwrap();
        write_cluster(&cluster, files);
        install(
            &plugins,
            "lifecycle",
            "lifecycle",
            Some(&format!("config: {config}\n{ACCESS}")),
        );
        let log = dirs.path().join("host.log");
        // Retries after a conflict come at once: the loop of writes the
        // race test needs goes on.
        let host_config = dirs.path().join("host.yaml");
        std::fs::write(
            &host_config,
            "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\ndispatch: {baseBackoff: 5ms}\n",
        )
        .unwrap();
        let host = HostChild::spawn(
            run_local(&cluster, &plugins, &dirs.path().join("cache"))
                .arg("--config")
                .arg(&host_config)
                .args(["--metrics-addr", "off"]),
            log,
        );
        Self {
            host,
            cluster,
            _dirs: dirs,
        }
    }

    fn logs(&self) -> String {
        self.host.logs()
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.cluster.join(rel)
    }

    /// The plugin's `lifecycle {...}` lines of kind `event`, in order.
    fn lines(&self, event: &str) -> Vec<Value> {
        self.logs()
            .lines()
            .filter_map(|l| {
                let at = l.find("lifecycle {")? + "lifecycle ".len();
                let v: Value = serde_json::Deserializer::from_str(&l[at..])
                    .into_iter()
                    .next()?
                    .ok()?;
                (v["event"] == event).then_some(v)
            })
            .collect()
    }

    /// Polls `check` until it gives a value (the host's log on timeout).
    fn until<T>(&self, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        let start = Instant::now();
        loop {
            if let Some(v) = check() {
                return v;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "timed out waiting for {what}; host log:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The one ConfigMap of a manifest file, as it is on disk now.
    fn object(&self, rel: &str) -> Option<Value> {
        let text = std::fs::read_to_string(self.path(rel)).ok()?;
        parse_manifests(Path::new(rel), &text)
            .ok()?
            .into_iter()
            .next()
    }
}

fn cm(name: &str, data: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: d}}\ndata: {data}\n"
    )
}

fn holds_finalizer(v: &Value) -> bool {
    v["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|f| f == "test.kubewasm.io/cleanup"))
}

fn manifests(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(manifests(&p));
        } else if p.extension().is_some_and(|x| x == "yaml") {
            out.push(p.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    out.sort();
    out
}

/// A controller owning a finalizer: its object, deleted by removing its
/// file or by the plugin itself, stays terminating (deletionTimestamp,
/// grace 0) until the plugin removes the finalizer, then goes; the
/// removed file is never written back.
#[test]
fn a_finalizer_holds_a_deleted_object_until_its_controller_lets_go() {
    let host = LocalHost::start(
        &[
            ("d/fin-a.yaml", &cm("fin-a", "{k: v}")),
            ("d/fin-b.yaml", &cm("fin-b", "{k: v}")),
        ],
        "{}",
    );
    for file in ["d/fin-a.yaml", "d/fin-b.yaml"] {
        host.until(&format!("the finalizer in {file}"), || {
            host.object(file).filter(holds_finalizer)
        });
    }
    // The file removed: a graceful deletion.
    std::fs::remove_file(host.path("d/fin-a.yaml")).unwrap();
    let gone = host.until("fin-a gone", || {
        host.lines("gone")
            .into_iter()
            .find(|l| l["name"] == "fin-a")
    });
    let finalizing = host
        .lines("finalizing")
        .into_iter()
        .find(|l| l["name"] == "fin-a")
        .expect("the plugin saw fin-a terminating before it went");
    assert_eq!(finalizing["terminating"], true);
    assert_eq!(finalizing["uid"], gone["uid"]);
    assert_eq!(gone["finalizers"], serde_json::json!([]), "{gone}");
    // The plugin's write removing the finalizer did not bring the file back.
    assert!(!host.path("d/fin-a.yaml").exists());
    // Deleted by the plugin (it was asked to, in the file): the same, and
    // the host removes the document it wrote the deletionTimestamp into.
    let text = std::fs::read_to_string(host.path("d/fin-b.yaml")).unwrap();
    let edited = text.replace("k: v", "k: v\n  delete: 'yes'");
    assert_ne!(edited, text);
    std::fs::write(host.path("d/fin-b.yaml"), edited).unwrap();
    host.until("fin-b gone", || {
        host.lines("gone")
            .into_iter()
            .find(|l| l["name"] == "fin-b")
    });
    let b: Vec<Value> = host
        .lines("delta")
        .into_iter()
        .filter(|l| l["name"] == "fin-b")
        .collect();
    let terminating = b
        .iter()
        .position(|l| l["terminating"] == true)
        .expect("fin-b seen terminating");
    assert!(
        b[..terminating].iter().all(|l| l["terminating"] == false),
        "{b:?}"
    );
    assert_eq!(b.last().unwrap()["type"], "deleted", "{b:?}");
    host.until("fin-b's file removed", || {
        (!host.path("d/fin-b.yaml").exists()).then_some(())
    });
    assert_eq!(manifests(&host.cluster), Vec::<String>::new());
}

/// An object deleted and created again under its name is another object:
/// a new uid, so a write guarded by the old uid fails with a conflict and
/// the new object stays.
#[test]
fn a_recreated_object_gets_a_new_uid_and_the_old_uid_precondition_fails() {
    let host = LocalHost::start(&[("d/stale-a.yaml", &cm("stale-a", "{k: v}"))], "{}");
    let first = host.until("stale-a seen", || {
        host.lines("delta")
            .into_iter()
            .find(|l| l["name"] == "stale-a")
    });
    std::fs::remove_file(host.path("d/stale-a.yaml")).unwrap();
    host.until("stale-a deleted", || {
        host.lines("delta")
            .into_iter()
            .find(|l| l["name"] == "stale-a" && l["type"] == "deleted")
    });
    write_cluster(
        &host.cluster,
        &[("d/stale-a.yaml", &cm("stale-a", "{k: v}"))],
    );
    let refused = host.until("the stale delete refused", || {
        host.lines("stale-uid-refused").into_iter().next()
    });
    assert_ne!(refused["uid"], first["uid"], "{refused}");
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "UID in precondition: {}",
            first["uid"].as_str().unwrap()
        )),
        "{message}"
    );
    // The new object is still there, not terminating.
    let deltas = host.lines("delta");
    let last = deltas.iter().rfind(|l| l["name"] == "stale-a").unwrap();
    assert_eq!(last["uid"], refused["uid"]);
    assert_eq!(last["terminating"], false);
    assert!(host.path("d/stale-a.yaml").exists());
}

/// Edits the file of an object the plugin writes in a loop, until an edit
/// lands while the host writes the file (its log says `at-swap`): each
/// edit is read from the file as it is, gets one more key, and is saved
/// as an editor saves (a temporary file renamed over it) the moment the
/// host opens the file, which it does first when it writes. Every edit
/// survives (none is missing from the last), and the plugin's last write
/// says it saw them all.
fn race(resource_versions: bool) {
    use notify::event::{AccessKind, EventKind};
    use notify::{RecursiveMode, Watcher};

    let host = LocalHost::start(
        &[("d/race-a.yaml", &cm("race-a", "{seed: '0'}"))],
        &format!("{{resourceVersions: {resource_versions}}}"),
    );
    let file = host.path("d/race-a.yaml");
    host.until("the plugin writing", || {
        host.object("d/race-a.yaml")
            .filter(|v| v["metadata"]["annotations"]["kubewasm.io/writes"].is_string())
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let mut watcher = notify::recommended_watcher(move |e| {
        let _ = tx.send(e);
    })
    .unwrap();
    watcher
        .watch(&host.path("d"), RecursiveMode::NonRecursive)
        .unwrap();
    let opened = |e: &notify::Result<notify::Event>| {
        e.as_ref().is_ok_and(|e| {
            matches!(e.kind, EventKind::Access(AccessKind::Open(_))) && e.paths.contains(&file)
        })
    };
    let save = |text: &str| {
        let tmp = host.path("d/.race-a.yaml.edit");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &file).unwrap();
    };
    let writes = |v: &Value| -> u64 {
        v["metadata"]["annotations"]["kubewasm.io/writes"]
            .as_str()
            .and_then(|w| w.parse().ok())
            .unwrap_or(0)
    };
    let start = Instant::now();
    let mut edits = 0;
    let mut log = LogTail::default();
    let mut hit = false;
    while !hit {
        assert!(
            start.elapsed() < PATIENCE,
            "no edit landed during a write in {edits} edits; host log:\n{}",
            host.logs()
        );
        // Read as it is now (the host may have just written it).
        let Some(mut v) = host.object("d/race-a.yaml") else {
            continue;
        };
        let key = format!("edit-{edits}");
        let before = writes(&v);
        v["data"][&key] = Value::from("x");
        let text = serde_yaml_ng::to_string(&v).unwrap();
        while rx.try_recv().is_ok() {}
        loop {
            let left = PATIENCE.saturating_sub(start.elapsed());
            match rx.recv_timeout(left) {
                Ok(e) if opened(&e) => break,
                Ok(_) => {}
                Err(e) => panic!(
                    "the host stopped opening the file ({e}); log:\n{}",
                    host.logs()
                ),
            }
        }
        save(&text);
        edits += 1;
        // The host takes the edit: what it writes next has it. (A lost
        // edit never comes back, and this times out; the next edit is
        // read from the file only then, so it cannot bring one back.)
        host.until(&format!("the host writing over {key}"), || {
            host.object("d/race-a.yaml")
                .filter(|v| v["data"].get(&key).is_some() && writes(v) > before)
        });
        hit = log.read(host.host.log_path()).contains("at-swap");
    }
    drop(watcher);
    let mut v = host.object("d/race-a.yaml").unwrap();
    v["data"]["stop"] = Value::from("yes");
    save(&serde_yaml_ng::to_string(&v).unwrap());
    let mut keys: Vec<String> = (0..edits).map(|i| format!("edit-{i}")).collect();
    keys.extend(["seed".to_owned(), "stop".to_owned()]);
    keys.sort();
    let expected = keys.join(",");
    let done = host.until("the plugin's last write", || {
        host.object("d/race-a.yaml").filter(|v| {
            v["data"].get("stop").is_some()
                && v["metadata"]["annotations"]["kubewasm.io/saw"] == expected.as_str()
        })
    });
    let mut on_disk: Vec<&String> = done["data"].as_object().unwrap().keys().collect();
    on_disk.sort();
    assert_eq!(on_disk, keys.iter().collect::<Vec<_>>(), "no edit lost");
    let stopped = host.lines("race-stopped");
    assert_eq!(stopped.last().unwrap()["saw"], expected.as_str());
    let logs = host.logs();
    // With the delta's resourceVersion as a precondition a write over an
    // edit fails as the server's 409 does; without, none ever conflicts.
    assert_eq!(
        logs.contains("conflict on patch configmaps d/race-a"),
        resource_versions,
        "{logs}"
    );
    eprintln!(
        "{edits} edits in {:?}: {} found at the swap, {} before the write",
        start.elapsed(),
        logs.matches("at-swap").count(),
        logs.matches("before-write").count()
    );
}

/// The part of a log file not read yet.
#[derive(Default)]
struct LogTail {
    read: u64,
}

impl LogTail {
    fn read(&mut self, path: &Path) -> String {
        use std::io::{Read, Seek, SeekFrom};
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(path) {
            f.seek(SeekFrom::Start(self.read)).unwrap();
            f.read_to_string(&mut text).unwrap();
        }
        // A line cut mid-way is read again whole next time.
        let complete = text.rfind('\n').map_or(0, |i| i + 1);
        text.truncate(complete);
        self.read += complete as u64;
        text
    }
}

#[test]
fn an_edit_saved_while_the_host_writes_is_kept_and_a_patch_is_redone_over_it() {
    race(false);
}

#[test]
fn an_edit_saved_while_the_host_writes_is_kept_and_a_stale_write_conflicts() {
    race(true);
}
