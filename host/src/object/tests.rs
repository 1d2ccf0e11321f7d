use serde_json::Value;

use crate::kind::Gvk;

use super::field::raw_at;
use super::*;
use serde_json::json;

/// Both ways in (a decoded value, the server's text) give the same
/// object: the same metadata, the same JSON value.
fn same_both_ways(value: &Value, types: Option<(&str, &str)>) {
    let text = serde_json::to_string(value).unwrap();
    let mut full = value.clone();
    if let Some((v, k)) = types {
        full["apiVersion"] = json!(v);
        full["kind"] = json!(k);
    }
    for strip in [
        StripOptions::default(),
        StripOptions {
            managed_fields: false,
            last_applied: false,
        },
    ] {
        let a = KObject::from_value(full.clone(), strip).unwrap();
        let b = KObject::from_json_text(&text, types, strip).unwrap();
        assert_eq!(a.meta, b.meta, "{text}");
        assert_eq!(a.to_value().unwrap(), b.to_value().unwrap(), "{text}");
    }
}

#[test]
fn server_text_decodes_like_a_value() {
    same_both_ways(
        &json!({"apiVersion": "v1", "kind": "Pod",
          "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
            "labels": {"app": "web", "q\"uote": "x"},
            "annotations": {LAST_APPLIED: "{\"kind\":\"Pod\"}", "keep": "yes"},
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": "rs1", "controller": true}]},
          "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"phase": "Running"}}),
        None,
    );
    // The last-applied annotation alone: the annotations go with it.
    same_both_ways(
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "a", "annotations": {LAST_APPLIED: "{}"}}, "data": {"k": "v"}}),
        None,
    );
    // A list item: no apiVersion or kind, the list's are used.
    same_both_ways(
        &json!({"metadata": {"name": "n", "resourceVersion": "3"}, "spec": {}}),
        Some(("v1", "Namespace")),
    );
}

#[test]
fn server_text_that_is_not_an_object_is_refused() {
    for (text, want) in [
        (
            r#"{"apiVersion":"v1","kind":"Pod","metadata":[1]}"#,
            "metadata",
        ),
        (r#"{"apiVersion":"v1","kind":"Pod"}"#, "metadata"),
        (
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"}"#,
            "JSON",
        ),
        (r#"{"kind":"Pod","metadata":{"name":"a"}}"#, "apiVersion"),
    ] {
        let err = KObject::from_json_text(text, None, StripOptions::default())
            .expect_err(text)
            .to_string();
        assert!(err.contains(want), "{text}: {err}");
    }
    // A list's type fills in a missing apiVersion, never a malformed one.
    let text = r#"{"apiVersion":1,"kind":"Pod","metadata":{"name":"a"}}"#;
    let err = KObject::from_json_text(text, Some(("v1", "Pod")), StripOptions::default())
        .expect_err(text)
        .to_string();
    assert!(err.contains("apiVersion"), "{err}");
}

/// Every object of the corpus (../shared/corpus, or KUBEWASM_CORPUS)
/// with an identity, as a value; `None` (and a message saying nothing
/// was checked) where there is no corpus.
fn corpus_values() -> Option<Vec<Value>> {
    let corpus = std::env::var("KUBEWASM_CORPUS").map_or_else(
        |_| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/corpus"),
        std::path::PathBuf::from,
    );
    let Ok(kinds) = std::fs::read_dir(corpus.join("objects")) else {
        eprintln!(
            "no corpus at {}: set KUBEWASM_CORPUS; skipping the corpus check (nothing checked)",
            corpus.display()
        );
        return None;
    };
    let mut out = Vec::new();
    for kind in kinds.flatten() {
        for file in std::fs::read_dir(kind.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let Ok(text) = std::fs::read_to_string(file.path()) else {
                continue;
            };
            let Ok(value) = serde_json::from_str::<Value>(&text) else {
                continue;
            };
            if value["metadata"]["name"].is_string() && value["kind"].is_string() {
                out.push(value);
            }
        }
    }
    assert!(out.len() > 1000, "only {} corpus objects read", out.len());
    Some(out)
}

/// Every object of the corpus decodes from its text exactly as from its
/// value.
#[test]
fn corpus_objects_decode_from_text_like_from_a_value() {
    for value in corpus_values().into_iter().flatten() {
        same_both_ways(&value, None);
    }
}

/// Pointers to the nodes of every corpus object (and to an absent
/// member and index below each container; up to 60 per object) read what serde_json's
/// `Value::pointer` reads, alone and in one pass with its neighbours.
#[test]
fn corpus_fields_read_what_serde_json_pointer_reads() {
    let mut checked = 0usize;
    for value in corpus_values().into_iter().flatten() {
        let Ok(obj) = KObject::from_value(value, StripOptions::default()) else {
            continue;
        };
        let stored: Value = serde_json::from_str(obj.json()).unwrap();
        let all = crate::pointer::every_pointer(&stored, true);
        // Bounded for a debug build: up to ~60 evenly spread pointers.
        let step = all.len().div_ceil(60);
        let all: Vec<String> = all.into_iter().step_by(step).collect();
        let want: Vec<Option<Value>> = all.iter().map(|p| stored.pointer(p).cloned()).collect();
        let parse = |raw: &str| serde_json::from_str::<Value>(raw).unwrap();
        for (p, w) in all.iter().zip(&want) {
            let got = raw_at(obj.json(), p).map(|r| parse(&r));
            assert_eq!(got.as_ref(), w.as_ref(), "{p}");
        }
        // Windows of neighbours in one pass (shared parents, prefixes).
        for window in all.chunks(3) {
            let paths: Vec<Vec<String>> = window
                .iter()
                .map(|p| crate::pointer::segments(p).unwrap())
                .collect();
            let got = crate::pointer::raw_at_many(obj.json(), &paths);
            for (raw, p) in got.iter().zip(window) {
                assert_eq!(
                    raw.map(parse),
                    stored.pointer(p).cloned(),
                    "{p} in {window:?}"
                );
            }
        }
        checked += all.len();
    }
    eprintln!("{checked} pointers checked");
}

fn pod() -> KObject {
    KObject::from_value(
        json!({"apiVersion": "v1", "kind": "Pod",
          "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
            "labels": {"app": "web"},
            "annotations": {LAST_APPLIED: "{...}", "keep": "yes"},
            "managedFields": [{"manager": "kubectl"}],
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": "rs1", "controller": true}]},
          "spec": {"nodeName": "node-a", "containers": [{"name": "app", "image": "nginx"}, {"name": "side", "image": "envoy"}]},
          "status": {"phase": "Running", "containerStatuses": [{"name": "app", "restartCount": 3, "ready": true}]}}),
        StripOptions::default(),
    )
    .unwrap()
}

#[test]
fn strips_and_decodes_metadata() {
    let p = pod();
    assert!(!p.json().contains("managedFields"));
    assert!(!p.json().contains(LAST_APPLIED));
    assert_eq!(p.annotation("keep"), Some("yes"));
    assert_eq!(p.label("app"), Some("web"));
    assert_eq!(p.meta().owner_references[0].uid, "rs1");
    assert_eq!(p.key().to_string(), "shop/web-1");
    assert_eq!(p.gvk(), Gvk::new("", "v1", "Pod"));
}

#[test]
fn reads_fields_by_pointer() {
    let p = pod();
    assert_eq!(
        p.field("/spec/nodeName"),
        Some(FieldValue::Text("node-a".into()))
    );
    assert_eq!(
        p.field("/status/containerStatuses/0/restartCount"),
        Some(FieldValue::Integer(3))
    );
    assert_eq!(
        p.field("/status/containerStatuses/0/ready"),
        Some(FieldValue::Boolean(true))
    );
    assert_eq!(p.field("/spec/missing"), None);
    assert_eq!(p.field("bad"), None);
    assert!(matches!(
        p.field("/spec/containers"),
        Some(FieldValue::Json(_))
    ));
    assert_eq!(
        p.index_values("/spec/containers/*/image"),
        vec!["nginx".to_owned(), "envoy".to_owned()]
    );
    assert_eq!(
        p.index_values("/metadata/ownerReferences/*/uid"),
        vec!["rs1".to_owned()]
    );
    assert_eq!(p.index_values("/spec/nodeName"), vec!["node-a".to_owned()]);
}

#[test]
fn escaped_and_numeric_keys() {
    let o = KObject::from_value(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c",
          "labels": {"a/b": "x"}}, "data": {"0": "zero"}}),
        StripOptions::default(),
    )
    .unwrap();
    assert_eq!(
        o.field("/metadata/labels/a~1b"),
        Some(FieldValue::Text("x".into()))
    );
    assert_eq!(o.field("/data/0"), Some(FieldValue::Text("zero".into())));
}

/// `fields_within` refuses, before building anything, pointers whose
/// segments or values whose text would exceed the budget, and names
/// the size.
#[test]
fn fields_within_refuses_what_exceeds_the_budget() {
    let o = pod();
    let whole = o.json().len();
    let pointers = vec![""; 1000];
    assert_eq!(o.fields_within(&pointers, 999 * whole), Err(1000 * whole));
    let fit = o.fields_within(&pointers, 1000 * whole).unwrap();
    assert_eq!(fit.len(), 1000);
    // 1000 pointers of 100 empty segments: 2.4 MB of segments to build.
    let deep = vec!["/".repeat(100); 1000];
    assert!(o.fields_within(&deep, 1 << 20).is_err());
    assert_eq!(o.fields_within(&deep, 4 << 20).map(|v| v.len()), Ok(1000));
    assert_eq!(
        o.fields_within(&["/kind", "/nope"], 512),
        Ok(vec![Some(FieldValue::Text("Pod".into())), None])
    );
}

/// `fields` (one scan for key-only pointers) answers exactly what
/// `field` answers pointer by pointer, missing, escaped, indexed and
/// repeated pointers included.
#[test]
fn fields_in_one_scan_equal_field_by_field() {
    let p = pod();
    let o = KObject::from_value(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c",
          "labels": {"a/b": "x", "t~": "y"}}, "data": {"0": "zero", "01": "one"}}),
        StripOptions::default(),
    )
    .unwrap();
    let sets: &[&[&str]] = &[
        &["/spec/nodeName", "/status/phase"],
        &["/status/phase", "/spec/nodeName", "/spec/nodeName"],
        &["/spec/missing", "/status/phase", "/nope/deeper"],
        &["/spec/nodeName/x", "/metadata/name"],
        &[
            "/spec/containers",
            "/status/containerStatuses/0/restartCount",
            "/metadata/labels/app",
        ],
        &["", "/kind", "bad", "/metadata/uid"],
        &[
            "/metadata/labels/a~1b",
            "/metadata/labels/t~0",
            "/data/0",
            "/data/01",
        ],
        &["/spec", "/spec/containers/1/image"],
    ];
    for set in sets {
        for obj in [&p, &o] {
            let one_by_one: Vec<_> = set.iter().map(|ptr| obj.field(ptr)).collect();
            assert_eq!(obj.fields(set), one_by_one, "{set:?}");
        }
    }
    assert_eq!(
        p.fields(&["/spec/nodeName", "/status/phase"]),
        vec![
            Some(FieldValue::Text("node-a".into())),
            Some(FieldValue::Text("Running".into()))
        ]
    );
}

/// Found by the `fuzz_json_pointer` target: `/01` read item 1 of an
/// array, where RFC 6901 (and serde_json) find nothing.
#[test]
fn array_indexes_have_no_leading_zero_or_sign() {
    let p = pod();
    assert!(p.field("/spec/containers/1").is_some());
    assert!(p.field("/spec/containers/0").is_some());
    for bad in [
        "/spec/containers/01",
        "/spec/containers/00",
        "/spec/containers/+1",
    ] {
        assert_eq!(p.field(bad), None, "{bad}");
    }
    // As object keys they are plain strings.
    let o = KObject::from_value(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
          "data": {"01": "one"}}),
        StripOptions::default(),
    )
    .unwrap();
    assert_eq!(o.field("/data/01"), Some(FieldValue::Text("one".into())));
}

#[test]
fn rejects_objects_without_identity() {
    assert!(matches!(
        KObject::from_value(
            json!({"kind": "Pod", "metadata": {"name": "x"}}),
            StripOptions::default()
        ),
        Err(ObjectError::Missing("apiVersion"))
    ));
    assert!(matches!(
        KObject::from_value(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}}),
            StripOptions::default()
        ),
        Err(ObjectError::Missing("metadata.name"))
    ));
}
