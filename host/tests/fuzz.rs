//! Fuzz targets (bolero) for the parsers that take operator or plugin
//! input: label and field selectors, the host config, sidecars, JSON
//! pointer field access and the local cluster's manifest loader.
//!
//! Under `cargo test` each target first replays its committed corpus
//! (`tests/__fuzz__/fuzz__<target>/corpus/`, small real inputs, plus
//! `crashes/`: every input that once failed, kept as a regression test),
//! then runs random inputs for a bounded time: 3 s by default,
//! `BOLERO_RANDOM_TEST_TIME_MS` to change it. With nightly and
//! cargo-bolero, `cargo bolero test -p kubewasm --test fuzz <target>`
//! runs the same target under libFuzzer, growing the corpus.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use bolero::check;
use kubewasm::config::{Environment, RunSettings};
use kubewasm::informer::selector::{FieldSelector, LabelSelector};
use kubewasm::object::{FieldValue, KObject, StripOptions};
use kubewasm::runtime::Manifest;
use kubewasm::runtime::limits::Ceiling;
use serde_json::Value;

/// Random-input time per target under `cargo test`.
const TIME: Duration = Duration::from_secs(3);

fn text(input: &[u8]) -> Option<&str> {
    std::str::from_utf8(input).ok()
}

/// The input read as tokens of a grammar, one per byte: random bytes then
/// make near-valid selectors, pointers and YAML instead of noise.
fn tokens(input: &[u8], alphabet: &[&str]) -> String {
    input
        .iter()
        .map(|b| alphabet[usize::from(*b) % alphabet.len()])
        .collect()
}

/// Each interpretation of one input: the raw text (if UTF-8) and tokens.
fn inputs(input: &[u8], alphabet: &[&str]) -> Vec<String> {
    let mut out = vec![tokens(input, alphabet)];
    out.extend(text(input).map(str::to_owned));
    out
}

const SELECTOR: &[&str] = &[
    "app",
    "tier",
    "a",
    "x",
    "1",
    "-",
    ".",
    "_",
    "/",
    "example.com/",
    "=",
    "==",
    "!=",
    "!",
    ",",
    " ",
    " in ",
    " notin ",
    "(",
    ")",
    ", ",
    "",
    "k8s.io/name",
    "é",
    "\\",
    "\"",
    "metadata.name",
    "spec.nodeName",
    "status.phase",
];

const POINTER: &[&str] = &[
    "/spec/containers",
    "/metadata/labels",
    "/metadata/annotations",
    "/",
    "/metadata",
    "/spec",
    "/containers",
    "/0",
    "/1",
    "/01",
    "/-",
    "/+1",
    "/00",
    "/name",
    "/labels",
    "/a~1b",
    "~0",
    "~1",
    "~",
    "~2",
    "/x~1y",
    "/ports",
    "/containerPort",
    "/",
    "/status",
    "/conditions",
    "/type",
    "/priority",
    "/weight",
    "/hostNetwork",
    "/tolerations",
    "/18446744073709551616",
    "/\"",
    "/é",
];

const YAML: &[&str] = &[
    "\n",
    "  ",
    "- ",
    ": ",
    "{",
    "}",
    "[",
    "]",
    ", ",
    "---\n",
    "apiVersion: kubewasm.io/v1alpha1\n",
    "kind: HostConfig\n",
    "apiVersion: v1\n",
    "kind: Pod\n",
    "kind: List\n",
    "items:",
    "metadata:",
    "name: ",
    "namespace: ",
    "config:",
    "limits:",
    "grants:",
    "memory",
    "timeout",
    "concurrency",
    "maxAttempts",
    "handles",
    "actionsPerCall",
    "logBytesPerCall",
    "actionBytesPerCall",
    "poll",
    "pageSize",
    "dispatch",
    "baseBackoff",
    "maxBackoff",
    "leaderElect",
    "shutdownGrace",
    "metricsAddr",
    "env",
    "stdio",
    "dirs",
    "network",
    "0",
    "1",
    "64Mi",
    "1Gi",
    "99999999999999999999",
    "0s",
    "1s",
    "10ms",
    "1000000000y",
    "true",
    "null",
    "~",
    "\"",
    "'",
    "..",
    "/",
    "a",
    "web-0",
    "Web",
    "kube-system",
    "&a ",
    "*a",
    "!!str ",
    "#",
    "-1",
    ".inf",
];

/// A Pod to read fields of when the input carries no document.
const POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-0","namespace":"shop","labels":{"app":"web","a/b":"c~d"},"annotations":{"x~1y":"1"}},"spec":{"containers":[{"name":"app","image":"nginx:1.27","ports":[{"containerPort":80}]},{"name":"side","image":"envoy"}],"nodeName":"n1","priority":-3,"weight":1.5,"hostNetwork":false,"tolerations":null,"0":"zero","":{"":"empty"}},"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}"#;

#[test]
fn fuzz_label_selector() {
    check!().with_test_time(TIME).for_each(|input: &[u8]| {
        for s in inputs(input, SELECTOR) {
            if let Ok(sel) = LabelSelector::parse(&s) {
                let obj = KObject::from_json(POD, StripOptions::default()).unwrap();
                // Evaluating a parsed selector never fails.
                let _ = sel.matches(&obj);
                let _ = sel.is_empty();
            }
        }
    });
}

#[test]
fn fuzz_field_selector() {
    check!().with_test_time(TIME).for_each(|input: &[u8]| {
        for s in inputs(input, SELECTOR) {
            if let Ok(sel) = FieldSelector::parse(&s) {
                let obj = KObject::from_json(POD, StripOptions::default()).unwrap();
                let _ = sel.matches(&obj);
            }
        }
    });
}

#[test]
fn fuzz_host_config() {
    check!().with_test_time(TIME).for_each(|input: &[u8]| {
        for s in inputs(input, YAML) {
            if let Ok(settings) = RunSettings::parse(&s, Path::new("/etc/kubewasm/config.yaml")) {
                // Accepted settings either convert or fail with an error: no panic.
                let _ = settings
                    .clone()
                    .into_options_in(false, &Environment::default());
                let _ = settings.into_options_in(true, &Environment::default());
            }
        }
    });
}

#[test]
fn fuzz_sidecar() {
    check!().with_test_time(TIME).for_each(|input: &[u8]| {
        for (path, s) in inputs(input, YAML)
            .into_iter()
            .flat_map(|s| [("p.yaml", s.clone()), ("p.json", s)])
        {
            if let Ok(m) = Manifest::parse(Path::new(path), &s) {
                let _ = m.config_json();
                // Within the ceiling, the call deadline is representable.
                if Ceiling::default().check(&m.limits).is_ok() {
                    assert!(
                        std::time::Instant::now()
                            .checked_add(m.limits.timeout)
                            .is_some()
                    );
                }
            }
        }
    });
}

/// `field` (a lazy scan of the text) agrees with serde_json's RFC 6901
/// `pointer` on the parsed document: same presence, same scalars.
#[test]
fn fuzz_json_pointer() {
    check!().with_test_time(TIME).for_each(|input: &[u8]| {
        for s in inputs(input, POINTER) {
            check_pointer(&s);
        }
    });
}

fn check_pointer(s: &str) {
    // First line: the pointer; the rest, if any: the document.
    let (pointer, doc) = s.split_once('\n').unwrap_or((s, ""));
    let obj = match serde_json::from_str::<Value>(doc) {
        Ok(v) => match KObject::from_value(v, StripOptions::default()) {
            Ok(o) => o,
            Err(_) => return,
        },
        Err(_) => KObject::from_json(POD, StripOptions::default()).unwrap(),
    };
    let value: Value = obj.to_value().unwrap();
    let expected = if pointer.is_empty() {
        Some(&value)
    } else {
        value.pointer(pointer)
    };
    let got = obj.field(pointer);
    assert_eq!(
        got.is_some(),
        expected.is_some(),
        "pointer {pointer:?}: field gave {got:?}, serde_json {expected:?}"
    );
    match (got, expected) {
        (Some(FieldValue::Text(t)), Some(Value::String(e))) => assert_eq!(&t, e),
        (Some(FieldValue::Boolean(b)), Some(Value::Bool(e))) => assert_eq!(b, *e),
        (Some(FieldValue::Null), Some(Value::Null)) => {}
        (Some(FieldValue::Integer(i)), Some(Value::Number(n))) => {
            assert_eq!(Some(i), n.as_i64(), "{pointer:?}");
        }
        (Some(FieldValue::Float(f)), Some(Value::Number(n))) => {
            assert_eq!(Some(f), n.as_f64(), "{pointer:?}");
        }
        (Some(FieldValue::Json(j)), Some(e @ (Value::Array(_) | Value::Object(_)))) => {
            assert_eq!(serde_json::from_str::<Value>(&j).unwrap(), *e);
        }
        (None, None) => {}
        (got, expected) => {
            panic!("pointer {pointer:?}: field gave {got:?}, serde_json {expected:?}")
        }
    }
}

/// The local cluster's loader over one manifest file: never panics, and
/// whatever it loads has a name the API server would accept.
#[test]
fn fuzz_local_manifests() {
    check!()
        .with_test_time(TIME)
        .with_max_len(2048)
        .for_each(|input: &[u8]| {
            for s in inputs(input, YAML) {
                check_local(&s);
            }
        });
}

fn check_local(s: &str) {
    let _ = kubewasm::source::local::parse_manifests(Path::new("objects.json"), s);
    let docs = kubewasm::source::local::parse_manifests(Path::new("objects.yaml"), s);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("objects.yaml"), s).unwrap();
    let kinds = kubewasm::kind::KindRegistry::builtin();
    let cluster = kubewasm::source::local::LocalCluster::new(
        dir.path().to_owned(),
        kinds.clone(),
        StripOptions::default(),
    )
    .unwrap();
    for v in docs.unwrap_or_default() {
        let (Some(av), Some(kind), Some(name)) = (
            v["apiVersion"].as_str(),
            v["kind"].as_str(),
            v["metadata"]["name"].as_str(),
        ) else {
            continue;
        };
        let gvk = kubewasm::kind::Gvk::from_api_version(av, kind);
        let ns = kinds
            .by_gvk(&gvk)
            .is_none_or(|k| k.namespaced)
            .then(|| v["metadata"]["namespace"].as_str().unwrap_or("default"));
        if cluster.get(&gvk, ns, name).is_some() {
            kubewasm::names::validate_object(&gvk.kind, ns, name).unwrap();
        }
    }
}
