//! Reading the folder (selectors, unreadable files, invalid names, the
//! watch) and what actions may write to it.

use super::*;

#[tokio::test]
async fn an_object_that_stops_matching_a_selector_is_deleted_from_that_watch() {
    use futures::{FutureExt, StreamExt};
    let dir = tempfile::tempdir().unwrap();
    let cm = |app: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c, namespace: d, labels: {{app: {app}}}}}\n"
        )
    };
    std::fs::write(dir.path().join("c.yaml"), cm("a")).unwrap();
    let (cluster, kind) = configmap_cluster(dir.path());
    cluster.rescan().unwrap();
    let spec = |sel: &str| InformerSpec {
        kind: kind.clone(),
        namespace: None,
        label_selector: Some(sel.into()),
        field_selector: None,
    };
    let mut a = cluster.watch(&spec("app=a"));
    let mut b = cluster.watch(&spec("app=b"));
    let mut all = cluster.watch(&spec(""));
    let describe = |e: WatchEvent| match e {
        WatchEvent::Init => "init".to_owned(),
        WatchEvent::InitDone => "init-done".to_owned(),
        WatchEvent::InitApply(o) => {
            format!("init-apply {}", o.label("app").unwrap_or(""))
        }
        WatchEvent::Apply(o) => format!("apply {}", o.label("app").unwrap_or("")),
        WatchEvent::Delete(o) => format!("delete {}", o.label("app").unwrap_or("")),
        WatchEvent::Undecodable(u) => format!("undecodable {:?}", u.key),
        WatchEvent::Progress => "progress".to_owned(),
    };
    let next = |s: &mut BoxStream<'static, Result<WatchEvent, SourceError>>| {
        let e = s
            .next()
            .now_or_never()
            .flatten()
            .map(|r| describe(r.unwrap()));
        e.unwrap_or_else(|| "nothing".into())
    };
    for (s, first) in [(&mut a, "init-apply a"), (&mut all, "init-apply a")] {
        assert_eq!(next(s), "init");
        assert_eq!(next(s), first);
        assert_eq!(next(s), "init-done");
    }
    assert_eq!(
        (next(&mut b), next(&mut b)),
        ("init".into(), "init-done".into())
    );
    // The label changes from a to b: a delete for `app=a` (with the
    // object as it is now), an add for `app=b`, an update for all.
    std::fs::write(dir.path().join("c.yaml"), cm("b")).unwrap();
    cluster.rescan().unwrap();
    assert_eq!(next(&mut a), "delete b");
    assert_eq!(next(&mut b), "apply b");
    assert_eq!(next(&mut all), "apply b");
    for s in [&mut a, &mut b, &mut all] {
        assert_eq!(next(s), "nothing");
    }
}

/// A file the cluster cannot read, parse or cache must not read as the
/// deletion of the objects it held: they keep their last good state
/// until it reads again.
#[tokio::test]
async fn a_file_that_cannot_be_read_keeps_its_objects_as_they_were() {
    use futures::{FutureExt, StreamExt};
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.yaml");
    let cm = |name: &str, app: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: d, labels: {{app: {app}}}}}\n"
        )
    };
    std::fs::write(&file, cm("c", "a")).unwrap();
    let (cluster, kind) = configmap_cluster(dir.path());
    let mut all = cluster.watch(&InformerSpec {
        kind,
        namespace: None,
        label_selector: None,
        field_selector: None,
    });
    let mut next = || match all.next().now_or_never().flatten() {
        None => "nothing".to_owned(),
        Some(Ok(WatchEvent::Init)) => "init".to_owned(),
        Some(Ok(WatchEvent::InitDone)) => "init-done".to_owned(),
        Some(Ok(WatchEvent::InitApply(o) | WatchEvent::Apply(o))) => {
            format!("apply {} {}", o.name(), o.label("app").unwrap_or(""))
        }
        Some(Ok(WatchEvent::Delete(o))) => format!("delete {}", o.name()),
        Some(other) => format!("{other:?}"),
    };
    assert_eq!(next(), "init");
    assert_eq!(next(), "apply c a");
    assert_eq!(next(), "init-done");
    let gvk = Gvk::new("", "v1", "ConfigMap");
    let app = |cluster: &LocalCluster| {
        cluster
            .get(&gvk, Some("d"), "c")
            .map(|v| v["metadata"]["labels"]["app"].clone())
    };
    for (what, text) in [
        ("not UTF-8", b"apiVersion: v1\nkind: \xff\n".to_vec()),
        ("not YAML", b"apiVersion: v1\nkind: [\n".to_vec()),
        (
            "a label value no informer can cache",
            cm("c", "7").into_bytes(),
        ),
        (
            "a document without a name",
            b"apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: d}\n".to_vec(),
        ),
    ] {
        std::fs::write(&file, text).unwrap();
        cluster.rescan().unwrap();
        assert_eq!(next(), "nothing", "{what}");
        assert_eq!(app(&cluster), Some(json!("a")), "{what}");
    }
    // Readable again: the change, then a real deletion, come through.
    std::fs::write(&file, cm("c", "b")).unwrap();
    cluster.rescan().unwrap();
    assert_eq!(next(), "apply c b");
    std::fs::remove_file(&file).unwrap();
    cluster.rescan().unwrap();
    assert_eq!(next(), "delete c");
    assert_eq!(next(), "nothing");
    assert!(cluster.is_empty());
}

#[tokio::test]
async fn actions_with_escaping_names_are_refused_and_write_nothing() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("a").join("b").join("cluster");
    std::fs::create_dir_all(&dir).unwrap();
    let (cluster, kind) = configmap_cluster(&dir);
    for (ns, name) in [
        ("../../x", "cm"),
        ("default", "../../../x"),
        ("default", "a/b"),
        ("..", "cm"),
    ] {
        let action = Action::Apply {
            target: Target {
                kind: kind.clone().into(),
                namespace: Some(ns.into()),
                name: name.into(),
                uid: None,
                preconditions: Default::default(),
            },
            object: json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": ns}, "data": {"k": "v"}}),
            force: true,
            status: false,
        };
        let err = cluster.execute("p", &action).await.unwrap_err();
        assert!(
            matches!(&err, ActionError::Invalid(m) if m.contains(&format!("{ns}/{name}"))),
            "{ns}/{name}: {err}"
        );
    }
    // Nothing was created anywhere under the root but the cluster folder.
    let mut files = Vec::new();
    files::walk(root.path(), &mut files).unwrap();
    assert!(files.is_empty(), "{files:?}");
    let mut entries = Vec::new();
    for e in walkdir(root.path()) {
        entries.push(e);
    }
    assert_eq!(
        entries,
        [root.path().join("a"), root.path().join("a/b"), dir.clone()]
    );
}

fn walkdir(p: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut items: Vec<PathBuf> = std::fs::read_dir(p)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    items.sort();
    for i in items {
        out.push(i.clone());
        if i.is_dir() {
            out.extend(walkdir(&i));
        }
    }
    out
}

#[test]
fn manifests_with_invalid_names_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("m.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok, namespace: default}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: ../escape, namespace: default}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: fine, namespace: ../../x}\n",
    )
    .unwrap();
    let cluster = LocalCluster::new(
        dir.path().to_owned(),
        KindRegistry::builtin(),
        StripOptions::default(),
    )
    .unwrap();
    assert_eq!(cluster.len(), 1);
    assert!(
        cluster
            .get(&Gvk::new("", "v1", "ConfigMap"), Some("default"), "ok")
            .is_some()
    );
}

/// A file removed after the cluster's first read but before its watch began
/// has no event of its own: the watch rescans once it is in place, as an
/// informer lists after it starts watching.
#[tokio::test]
async fn a_change_before_the_watch_begins_is_seen_when_it_begins() {
    let f = Fixture::new(&[("c.yaml", &cm("early", ""))]);
    assert!(f.get("early").is_some());
    std::fs::remove_file(f.path("c.yaml")).unwrap();
    let cancel = CancellationToken::new();
    let watching = tokio::spawn(f.cluster.clone().watch_files(cancel.clone()));
    let started = std::time::Instant::now();
    while f.get("early").is_some() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "the object of the removed file is still in the cluster"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    cancel.cancel();
    watching.await.unwrap().unwrap();
}
