//! The fake host (`kubewasm_sdk::fake`), natively: cache reads, actions,
//! registration checks, the clock, and label selectors against the same
//! apimachinery golden cases as the host's parser.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use kubewasm_sdk::fake::FakeHost;
use kubewasm_sdk::prelude::*;
use kubewasm_sdk::serde_json::{self, Value, json};

fn cm(ns: &str, name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "data": {"k": "v"},
    })
}

/// The fake answers the host's imports from the objects put in: lists
/// sorted by namespace and name and filtered by the host's selector
/// grammar, typed fields, metadata, and a snapshot per handle.
#[test]
fn cache_reads_and_objects() {
    let host = FakeHost::new();
    host.put(cm("b", "two", json!({"app": "web", "tier": "db"})))
        .put(cm("a", "one", json!({"app": "web"})))
        .put(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {
                "name": "a",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "managedFields": [{"manager": "kubectl"}],
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u", "controller": true}],
                "finalizers": ["x/y"],
                "generation": 3,
            },
            "spec": {"n": 1, "f": 1.5, "list": [1, 2]},
        }));
    let names = |objs: Vec<Object>| objs.iter().map(Object::key).collect::<Vec<_>>();
    assert_eq!(
        names(cache::list::<ConfigMap>(None, None).unwrap()),
        ["a/one", "b/two"]
    );
    assert_eq!(
        names(cache::list::<ConfigMap>(None, Some("tier notin (db)")).unwrap()),
        ["a/one"]
    );
    assert_eq!(
        names(cache::list::<ConfigMap>(Some("b"), Some("app")).unwrap()),
        ["b/two"]
    );
    assert!(matches!(
        cache::list::<ConfigMap>(None, Some("a in b")),
        Err(HandlerError::Permanent(m)) if m.contains("invalid selector")
    ));
    let one = cache::get::<ConfigMap>(Some("a"), "one").unwrap().unwrap();
    assert_eq!(one.uid(), "uid-a-one");
    assert_eq!(one.resource_version(), "1");
    assert_eq!(one.label("app").as_deref(), Some("web"));
    assert_eq!(one.field_str("/data/k").as_deref(), Some("v"));
    assert!(
        cache::get::<ConfigMap>(Some("a"), "none")
            .unwrap()
            .is_none()
    );
    let ns = cache::get_kind(&KindRef::resource("namespaces"), None, "a")
        .unwrap()
        .unwrap();
    assert_eq!(ns.namespace(), None);
    assert_eq!(ns.generation(), Some(3));
    assert_eq!(ns.field("/spec/n"), Some(FieldValue::Integer(1)));
    assert_eq!(ns.field("/spec/f"), Some(FieldValue::Float(1.5)));
    assert_eq!(
        ns.field("/spec/list"),
        Some(FieldValue::Json("[1,2]".into()))
    );
    assert_eq!(ns.field("spec"), None);
    assert_eq!(ns.controller().unwrap().name, "n");
    assert!(ns.has_finalizer("x/y"));
    let json = ns.to_json();
    assert!(
        !json.contains("managedFields") && !json.contains("annotations"),
        "{json}"
    );
    assert_eq!(ns.meta().owner_references.len(), 1);
    // A handle is a snapshot: a later put does not change it.
    host.put(cm("a", "one", json!({"app": "api"})));
    assert_eq!(one.label("app").as_deref(), Some("web"));
    assert_eq!(
        cache::get::<ConfigMap>(Some("a"), "one")
            .unwrap()
            .unwrap()
            .resource_version(),
        "2"
    );
    drop((one, ns));
    assert_eq!(host.live_handles(), 0);
}

struct Annotator {
    name: String,
}

impl Plugin for Annotator {
    fn new(ctx: &Context) -> Result<Self, String> {
        #[derive(serde::Deserialize)]
        struct Config {
            fail: Option<bool>,
        }
        let c: Config = ctx.parse_config()?;
        if c.fail == Some(true) {
            return Err("refused".into());
        }
        Ok(Self {
            name: ctx.name.clone(),
        })
    }
    fn registration(&self) -> Registration {
        Registration::new()
            .subscribe(
                Subscription::kind::<ConfigMap>()
                    .labels("app=web")
                    .deltas([DeltaType::Added]),
            )
            .subscribe(Subscription::kind::<ConfigMap>().deltas(DeltaType::OBJECT))
            .subscribe(Subscription::kind::<Pod>().cache_only())
            .writes::<ConfigMap>()
            .index(Index::new::<Pod>("node", "/spec/nodeName"))
    }
    fn handle(&mut self, delta: Delta) -> Result<Handled, HandlerError> {
        log::info("seen", &[("key", &delta.key())]);
        if delta.delta_type == DeltaType::Deleted {
            actions::delete(
                &ObjectRef::for_delta::<ConfigMap>(&delta),
                Propagation::Background,
                &Preconditions::uid(&delta.uid),
            )?;
            return Err(retry("try later"));
        }
        let obj = delta.object()?;
        actions::annotate_object(obj, &[("by", &self.name)])?;
        actions::event_about(obj, EventType::Normal, "Annotated", "done")?;
        Ok(requeue_after(Duration::from_secs(30)))
    }
}

/// Loading enforces the registration; handle keeps the actions of a call
/// that succeeds only; subscriptions are picked as the host picks them.
#[test]
fn load_handle_and_registration_checks() {
    let host = FakeHost::new();
    assert_eq!(
        host.load::<Annotator>("ann", r#"{"fail": true}"#).err(),
        Some("refused".into())
    );
    let mut p: Annotator = host.load("ann", "").unwrap();
    let d = host.added(cm("a", "web", json!({"app": "web"})));
    assert_eq!(d.subscription, 0);
    assert_eq!(host.handle(&mut p, d), Ok(Handled::RequeueAfter(30_000)));
    assert_eq!(
        host.take_action_lines(),
        [
            r#"patch ConfigMap a/web merge {"metadata":{"annotations":{"by":"ann"}}} uid=uid-a-web"#,
            "event ConfigMap a/web Normal Annotated: done uid=uid-a-web",
        ]
    );
    let d = host.updated(cm("a", "web", json!({"app": "api"})));
    assert_eq!((d.subscription, d.resource_version.as_str()), (1, "2"));
    assert_eq!(d.old_object.as_ref().unwrap().label("app").unwrap(), "web");
    drop(d);
    let d = host.deleted(cm("a", "web", json!({})));
    assert_eq!(host.handle(&mut p, d), Err(retry("try later")));
    assert!(
        host.actions().is_empty(),
        "a failed call's actions are dropped"
    );
    assert!(cache::list::<ConfigMap>(None, None).unwrap().is_empty());
    assert_eq!(
        host.take_logs()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["info seen key=a/web", "info seen key=a/web"]
    );
    // Reads and writes outside the registration are refused.
    assert!(matches!(
        cache::list::<Namespace>(None, None),
        Err(HandlerError::Permanent(m)) if m.contains("not subscribed")
    ));
    assert!(cache::list::<Pod>(None, None).unwrap().is_empty());
    assert!(matches!(
        actions::delete(&ObjectRef::of::<Pod>(Some("a"), "p"), Propagation::Background, &Preconditions::none()),
        Err(HandlerError::Permanent(m)) if m.contains("not among the registration's writes")
    ));
    assert!(matches!(
        actions::apply_json(&json!({"kind": "ConfigMap"}), true, &Preconditions::none()),
        Err(HandlerError::Permanent(m)) if m.contains("apiVersion, kind and metadata.name")
    ));
    // Declared indexes only.
    host.put(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"}, "spec": {"nodeName": "n1"}}));
    assert_eq!(cache::by_index("node", "n1").unwrap()[0].name(), "p");
    assert!(cache::by_index("owner", "x").is_err());
    assert_eq!(host.synced(2).subscription, 2);
    assert_eq!(host.live_handles(), 0);
}

#[test]
fn clock_and_log_level() {
    let host = FakeHost::new();
    assert_eq!(clock::now_rfc3339(), "2026-01-01T00:00:00Z");
    host.set_time("2024-02-29T23:59:59Z");
    assert_eq!(clock::now().seconds, 1_709_251_199);
    host.advance(Duration::from_millis(1500));
    assert_eq!(clock::now_rfc3339(), "2024-03-01T00:00:00Z");
    assert_eq!(clock::now().nanoseconds, 500_000_000);
    host.set_log_level(kubewasm_sdk::log::Level::Info);
    assert!(!kubewasm_sdk::log::enabled(kubewasm_sdk::log::Level::Debug));
    log::debug("hidden", &[]);
    log::warn("shown", &[("a", "b")]);
    assert_eq!(host.logs().len(), 1);
}

#[test]
#[should_panic(expected = "no fake host on this thread")]
fn host_calls_without_a_fake_say_what_to_do() {
    let _ = cache::list::<ConfigMap>(None, None);
}

/// The same golden cases the host's parser passes (what apimachinery's
/// `labels.Parse` gives), through the native `LabelSelector`.
#[test]
fn selectors_agree_with_apimachinery_golden() {
    let golden = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../host/src/informer/selector_golden.jsonl"
    ))
    .unwrap();
    let mut lines = golden.lines().filter(|l| !l.starts_with('#'));
    let header: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let sets: Vec<Vec<(String, String)>> = header["label_sets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|set| {
            set.as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect()
        })
        .collect();
    let mut count = 0;
    for line in lines {
        let case: Vec<Option<String>> = serde_json::from_str(line).unwrap();
        let (Some(text), canonical) = (&case[0], &case[1]) else {
            panic!("bad golden line {line}");
        };
        match (LabelSelector::parse(text), canonical) {
            (Ok(sel), Some(want)) => {
                assert_eq!(&sel.to_string(), want, "{text:?}");
                let got: String = sets
                    .iter()
                    .map(|set| if sel.matches(set) { '1' } else { '0' })
                    .collect();
                assert_eq!(Some(&got), case[2].as_ref(), "{text:?} matches");
            }
            (Err(_), None) => {}
            (got, _) => panic!("{text:?}: got {got:?}, apimachinery gives {canonical:?}"),
        }
        count += 1;
    }
    assert!(count > 1000, "{count} golden cases");
}

/// Selector text over 1 MiB, more than a request to the API server
/// carries, is refused as the host refuses it (the host's message), and
/// text at the limit parses.
#[test]
fn selectors_over_a_request_s_limit_are_refused_as_by_the_host() {
    let mut at_cap = "a,".repeat(1 << 19);
    at_cap.pop();
    at_cap.push('b');
    assert_eq!(at_cap.len(), 1 << 20);
    assert!(LabelSelector::parse(&at_cap).is_ok());
    at_cap.push('c');
    let e = format!("{:?}", LabelSelector::parse(&at_cap).unwrap_err());
    assert!(e.contains("it is 1048577 bytes, over the 1048576"), "{e}");
    assert!(e.contains("(1048577 bytes)"), "quoted by an excerpt: {e}");
    assert!(
        e.len() < 1500,
        "the error copies the selector: {} bytes",
        e.len()
    );
}
