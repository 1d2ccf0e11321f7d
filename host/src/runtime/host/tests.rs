#![allow(clippy::unwrap_used)]

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;
use wasmtime_wasi::WasiCtx;

use super::*;
use crate::actions::{Preconditions, Propagation};
use crate::kind::{Gvk, KindRef, KindRegistry};

/// Records each new span's name and fields.
#[derive(Clone, Default)]
struct Spans(Arc<parking_lot::Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Spans {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                self.0.push_str(&format!(" {}={v:?}", f.name()));
            }
        }
        let mut fields = Fields(attrs.metadata().name().to_owned());
        attrs.record(&mut fields);
        self.0.lock().push(fields.0);
    }
}

/// A trace shows each guest call into the host, named for the plugin
/// and what it asked, without its arguments' bulk.
#[test]
fn host_functions_open_a_span_with_the_plugin_and_the_object() {
    use tracing_subscriber::layer::SubscriberExt;
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry()
        .with(spans.clone())
        .with(tracing_subscriber::filter::LevelFilter::TRACE);
    tracing::subscriber::with_default(subscriber, || {
        let wasi = wasmtime_wasi::WasiCtx::builder().build();
        let mut h = HostState::new(Arc::from("labeler"), "v1", wasi, 1 << 20);
        let _ = h.cache_by_index("by-owner", "web");
        let _ = h.delete_action(
            ObjRef {
                kind: KindRef::Gvk(Gvk::from_api_version("v1", "ConfigMap")),
                namespace: Some("default".into()),
                name: "web".into(),
                uid: None,
            },
            Propagation::Background,
            Preconditions::default(),
        );
    });
    let spans = spans.0.lock().clone();
    assert_eq!(
        spans[0],
        r#"cache_by_index plugin=labeler index="by-owner" value="web""#
    );
    assert!(
        spans[1].starts_with("delete_action plugin=labeler kind=")
            && spans[1].ends_with(r#" namespace="default" name=web"#),
        "{spans:?}"
    );
}

fn widgets_crd(versions: &[&str]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| serde_json::json!({"name": v}))
        .collect();
    serde_json::json!({"spec": {"group": "example.com", "scope": "Namespaced",
        "names": {"kind": "Widget", "plural": "widgets"}, "versions": versions}})
}

/// The memo of resolved kinds never answers for a registry that has
/// changed: a kind learned, a preferred version moved, another registry.
#[test]
fn resolved_kinds_follow_the_registry() {
    let kinds = KindRegistry::builtin();
    let scope = |kinds: &KindRegistry| PluginScope {
        kinds: kinds.clone(),
        reads: HashMap::new(),
        indexes: HashMap::new(),
        writes: HashSet::new(),
        grant: super::super::Manifest::default().grant("t"),
    };
    let mut host = HostState::new("t".into(), "v", WasiCtx::builder().build(), 1 << 20);
    let widgets = KindRef::Resource("widgets".into());
    let pods = KindRef::Resource("pods".into());
    assert!(host.resolve(&scope(&kinds), &widgets).is_err());
    assert!(host.resolve(&scope(&kinds), &pods).unwrap().namespaced);

    kinds.learn_crd(&widgets_crd(&["v1", "v2"]));
    let got = host.resolve(&scope(&kinds), &widgets).unwrap();
    assert_eq!(got.gvk, Gvk::new("example.com", "v1", "Widget"));
    kinds.set_preferred("example.com", "v2");
    let got = host.resolve(&scope(&kinds), &widgets).unwrap();
    assert_eq!(got.gvk, Gvk::new("example.com", "v2", "Widget"));

    // Another registry (nothing known) at whatever generation.
    let empty = KindRegistry::default();
    assert!(host.resolve(&scope(&empty), &pods).is_err());
}
