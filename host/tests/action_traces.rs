//! What a trace and the metrics listener show of actions the executor runs
//! against a mock API server: one `action` span per action, its outcome
//! recorded when it ends, one `api_write` span inside it per request with
//! the answer's HTTP status, and the action counted in the registry the
//! caller passed, the one `/metrics` serves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use kubewasm::actions::executor::{ActionError, Executor, ExecutorOptions};
use kubewasm::actions::{Action, Propagation, Target};
use kubewasm::admin::probe;
use kubewasm::admin::server::MetricsServer;
use kubewasm::kind::KindInfo;
use kubewasm::source::kube::KubeSink;
use kubewasm::telemetry::{Identity, Telemetry};
use parking_lot::Mutex;
use serde_json::json;
use tracing::span;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A span as it closed: its name, its parent's, and its fields with the
/// values last recorded.
#[derive(Debug, Clone)]
struct Closed {
    name: &'static str,
    parent: Option<&'static str>,
    fields: BTreeMap<&'static str, String>,
}

impl Closed {
    fn has(&self, expected: &[(&str, &str)]) -> bool {
        expected
            .iter()
            .all(|(k, v)| self.fields.get(k).map(String::as_str) == Some(*v))
    }
}

/// Records every span's fields, those recorded after it opened included.
#[derive(Clone, Default)]
struct Spans {
    open: Arc<Mutex<HashMap<span::Id, Closed>>>,
    closed: Arc<Mutex<Vec<Closed>>>,
}

struct Fields<'a>(&'a mut BTreeMap<&'static str, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_str(&mut self, f: &tracing::field::Field, v: &str) {
        self.0.insert(f.name(), v.to_owned());
    }
    fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
        self.0.insert(f.name(), format!("{v:?}"));
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Spans {
    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let parent = ctx.span(id).and_then(|s| s.parent()).map(|p| p.name());
        let name = attrs.metadata().name();
        self.open.lock().insert(
            id.clone(),
            Closed {
                name,
                parent,
                fields,
            },
        );
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, _: Context<'_, S>) {
        if let Some(span) = self.open.lock().get_mut(id) {
            values.record(&mut Fields(&mut span.fields));
        }
    }

    fn on_close(&self, id: span::Id, _: Context<'_, S>) {
        if let Some(span) = self.open.lock().remove(&id) {
            self.closed.lock().push(span);
        }
    }
}

fn deployment() -> Target {
    Target::new(
        KindInfo::new("apps", "v1", "Deployment", "deployments", true),
        Some("shop".into()),
        "web",
    )
}

/// An apply retried once after a 503 and a delete refused with 403, each
/// traced with its values, and counted in the registry `/metrics` serves.
#[tokio::test]
async fn each_action_and_each_api_write_is_a_span_and_the_served_registry_counts_them() {
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry()
        .with(spans.clone())
        .with(tracing_subscriber::filter::LevelFilter::DEBUG);
    let _traced = tracing::subscriber::set_default(subscriber);

    let telemetry = Telemetry::new(Identity::new(None, None, None));
    let listener = MetricsServer::start(&"127.0.0.1:0".parse().unwrap(), telemetry.clone())
        .await
        .unwrap()
        .unwrap();
    let (client, mut server) = mock_client();
    let executor = Executor::new(
        Arc::new(KubeSink::new(client)),
        ExecutorOptions {
            base_backoff: Duration::from_millis(5),
            max_backoff: Duration::from_millis(20),
            ..ExecutorOptions::default()
        },
        telemetry.clone(),
    );
    let script = tokio::spawn(async move {
        for reply in [
            status(503, "ServiceUnavailable", "etcd leader changed"),
            json_response(
                200,
                &json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "shop"}}),
            ),
            status(403, "Forbidden", "no"),
        ] {
            let (_, send) = next(&mut server).await;
            send.send_response(reply);
        }
        server
    });
    let apply = Action::Apply {
        target: deployment(),
        object: json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"}}),
        force: false,
        status: false,
    };
    let delete = Action::Delete {
        target: deployment(),
        propagation: Propagation::Background,
    };
    executor.execute("shop-plugin", &apply).await.unwrap();
    assert!(matches!(
        executor.execute("shop-plugin", &delete).await,
        Err(ActionError::Forbidden(_))
    ));
    drop(script.await.unwrap());

    let closed = spans.closed.lock().clone();
    let object = [
        ("plugin", "shop-plugin"),
        ("kind", "Deployment"),
        ("namespace", "shop"),
        ("name", "web"),
    ];
    let action = |op: &str| {
        closed
            .iter()
            .find(|s| s.name == "action" && s.has(&[("op", op)]))
            .unwrap_or_else(|| panic!("no action span for {op}: {closed:#?}"))
    };
    let applied = action("apply");
    assert!(applied.has(&object), "{applied:?}");
    assert!(
        applied.has(&[("verb", "patch"), ("attempts", "2"), ("outcome", "applied")]),
        "{applied:?}"
    );
    assert!(!applied.fields.contains_key("error"), "{applied:?}");
    let deleted = action("delete");
    assert!(deleted.has(&object), "{deleted:?}");
    assert!(
        deleted.has(&[
            ("verb", "delete"),
            ("attempts", "1"),
            ("outcome", "failed"),
            ("error", "forbidden"),
        ]),
        "{deleted:?}"
    );

    let writes: Vec<_> = closed.iter().filter(|s| s.name == "api_write").collect();
    let target = [
        ("kind", "Deployment"),
        ("namespace", "shop"),
        ("name", "web"),
        ("dry_run", "false"),
    ];
    assert_eq!(writes.len(), 3, "{writes:#?}");
    for (write, (verb, status)) in
        writes
            .iter()
            .zip([("apply", "503"), ("apply", "200"), ("delete", "403")])
    {
        assert_eq!(write.parent, Some("action"), "{write:?}");
        assert!(write.has(&target), "{write:?}");
        assert!(
            write.has(&[("verb", verb), ("status", status)]),
            "{write:?}"
        );
    }

    // Counted where the caller asked: the registry its listener serves.
    let addr = listener.local_addr().to_string();
    let (code, text) = tokio::task::spawn_blocking(move || {
        probe::get(&addr, "/metrics", Duration::from_secs(5)).unwrap()
    })
    .await
    .unwrap();
    assert_eq!(code, 200);
    for series in [
        r#"kubewasm_actions_total{plugin="shop-plugin",verb="patch",outcome="applied"} 1"#,
        r#"kubewasm_actions_total{plugin="shop-plugin",verb="delete",outcome="failed"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == series), "{series} in {text}");
    }
    listener.stop().await;
}
