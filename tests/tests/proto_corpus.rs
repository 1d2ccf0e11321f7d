//! The protobuf transcoder (kubewasm::proto) against apimachinery's own
//! serializers: for every corpus object of a built-in kind, the Go side
//! (`tests/controlplane/protoprobe`, built by `tests/controlplane/build.sh`)
//! decodes the JSON with the scheme and writes its protobuf encoding and the
//! JSON encoding of that protobuf decoded back (what an API server, which
//! stores built-in kinds as protobuf, serves); the transcoded protobuf must
//! equal that JSON byte for byte once keys are in canonical order. Lists
//! too: a PodList and a ServiceList of corpus objects.
//!
//! The corpus is read in place from `KUBEWASM_CORPUS` (default
//! `../shared/corpus` beside the repository), never copied; without it the
//! corpus tests say so and check nothing. Also here: the generated table
//! (host/src/proto/schema.txt) is what the probe writes now, and a printed
//! (not asserted) throughput figure, `--ignored`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

use base64::Engine as _;
use kubewasm::kind::Gvk;
use kubewasm::proto::{self, Transcoded};
use serde_json::Value;
use serde_json::value::RawValue;

/// Disagreements printed in full (the count is always given).
const SHOWN: usize = 20;

/// One corpus object: where it came from, and its text.
struct CorpusObject {
    file: String,
    value: Value,
}

impl CorpusObject {
    fn name(&self) -> String {
        let meta = &self.value["metadata"];
        format!(
            "{} {}/{}",
            self.value["kind"].as_str().unwrap_or("?"),
            meta["namespace"].as_str().unwrap_or(""),
            meta["name"].as_str().unwrap_or("?")
        )
    }

    fn gvk(&self) -> Option<Gvk> {
        Some(Gvk::from_api_version(
            self.value["apiVersion"].as_str()?,
            self.value["kind"].as_str()?,
        ))
    }
}

/// Every object of the corpus (`objects/` and `extra/objects/`), sorted by
/// file; `None` (and a message saying nothing was checked) without one.
fn corpus() -> Option<Vec<CorpusObject>> {
    let root = std::env::var_os("KUBEWASM_CORPUS").map_or_else(
        || kubewasm_tests::repo_root().join("../shared/corpus"),
        PathBuf::from,
    );
    if !root.join("objects").is_dir() {
        eprintln!(
            "no corpus at {}: set KUBEWASM_CORPUS; skipping the protobuf corpus check (nothing checked)",
            root.display()
        );
        return None;
    }
    let mut files = Vec::new();
    for dir in [root.join("objects"), root.join("extra/objects")] {
        for kind in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            for file in std::fs::read_dir(kind.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                files.push(file.path());
            }
        }
    }
    files.sort();
    let out: Vec<CorpusObject> = files
        .iter()
        .filter_map(|path| {
            let value: Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
            value["kind"].is_string().then(|| CorpusObject {
                file: path
                    .strip_prefix(&root)
                    .unwrap_or(path)
                    .display()
                    .to_string(),
                value,
            })
        })
        .collect();
    assert!(out.len() > 1000, "only {} corpus objects read", out.len());
    Some(out)
}

/// What the probe says about one object.
#[derive(serde::Deserialize)]
struct Answer {
    ok: bool,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    error: String,
    #[serde(default)]
    proto: String,
    #[serde(default)]
    json: String,
    #[serde(default)]
    direct: String,
}

/// Runs the probe once over `objects` and returns one answer per object.
fn encode_with_apimachinery(objects: &[&Value]) -> Vec<Answer> {
    let input: String = objects.iter().map(|o| format!("{o}\n")).collect();
    let answers = run_probe(&[], input);
    assert_eq!(answers.len(), objects.len(), "one probe answer per object");
    answers
}

/// Runs the probe with `args`, `input` on its stdin, and reads its answers.
fn run_probe(args: &[&str], input: String) -> Vec<Answer> {
    kubewasm_tests::probe::ask("protoprobe", args, input)
}

/// The JSON text with every object's keys in sorted order; everything else
/// (numbers, string escapes) exactly as written.
fn canonical(text: &str) -> String {
    fn walk(raw: &RawValue, out: &mut String) {
        let text = raw.get();
        if text.starts_with('{') {
            let map: BTreeMap<String, &RawValue> = serde_json::from_str(text).unwrap();
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(k).unwrap());
                out.push(':');
                walk(v, out);
            }
            out.push('}');
        } else if text.starts_with('[') {
            let items: Vec<&RawValue> = serde_json::from_str(text).unwrap();
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                walk(v, out);
            }
            out.push(']');
        } else {
            out.push_str(text);
        }
    }
    let raw: &RawValue = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let mut out = String::with_capacity(text.len());
    walk(raw, &mut out);
    out
}

/// The first path where two JSON texts differ, with both sides there.
fn first_difference(ours: &str, theirs: &str) -> String {
    fn walk(a: &Value, b: &Value, path: &mut String) -> Option<String> {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for k in keys {
                    let len = path.len();
                    path.push('.');
                    path.push_str(k);
                    match (x.get(k), y.get(k)) {
                        (Some(p), Some(q)) => {
                            if let Some(d) = walk(p, q, path) {
                                return Some(d);
                            }
                        }
                        (p, q) => return Some(format!("{path}: ours {p:?}, apimachinery's {q:?}")),
                    }
                    path.truncate(len);
                }
                None
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                for (i, (p, q)) in x.iter().zip(y).enumerate() {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    if let Some(d) = walk(p, q, path) {
                        return Some(d);
                    }
                    path.truncate(len);
                }
                None
            }
            (a, b) if a == b => None,
            (a, b) => Some(format!("{path}: ours {a}, apimachinery's {b}")),
        }
    }
    let (a, b): (Value, Value) = (
        serde_json::from_str(ours).unwrap(),
        serde_json::from_str(theirs).unwrap(),
    );
    walk(&a, &b, &mut String::new()).unwrap_or_else(|| {
        // Same values, different text (an escape, a number's format).
        let at = ours
            .bytes()
            .zip(theirs.bytes())
            .take_while(|(x, y)| x == y)
            .count();
        let around = |s: &str| {
            s.get(at.saturating_sub(30)..(at + 30).min(s.len()))
                .unwrap_or("")
                .to_owned()
        };
        format!(
            "same values, text differs at byte {at}: ours …{}…, apimachinery's …{}…",
            around(ours),
            around(theirs)
        )
    })
}

/// Transcodes `proto` (base64 from the probe) to JSON text: the object's,
/// or a list's whole.
fn transcoded_json(proto: &str) -> Result<String, proto::ProtoError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(proto)
        .unwrap();
    Ok(match proto::transcode(&bytes)? {
        Transcoded::Object(o) => o.text,
        Transcoded::List(l) => l.to_json(),
    })
}

#[derive(Default)]
struct Tally {
    agree: usize,
    identical: usize,
    kinds: BTreeSet<String>,
    failures: Vec<String>,
}

impl Tally {
    fn check(&mut self, file: &str, name: &str, kind: &str, answer: &Answer) {
        match transcoded_json(&answer.proto) {
            Err(e) => self
                .failures
                .push(format!("{file} ({name}): transcoding failed: {e}")),
            Ok(ours) if canonical(&ours) == canonical(&answer.json) => {
                self.agree += 1;
                self.identical += usize::from(ours == answer.json);
                self.kinds.insert(kind.to_owned());
            }
            Ok(ours) => self.failures.push(format!(
                "{file} ({name}): {}",
                first_difference(&ours, &answer.json)
            )),
        }
    }

    fn assert_clean(&self, what: &str) {
        for f in self.failures.iter().take(SHOWN) {
            eprintln!("disagreement: {f}");
        }
        assert!(
            self.failures.is_empty(),
            "{} {what} transcoded differently from apimachinery's JSON (first {SHOWN} above)",
            self.failures.len()
        );
    }
}

#[test]
fn corpus_objects_transcode_as_apimachinery_writes_them() {
    let Some(corpus) = corpus() else { return };
    let (built_in, custom): (Vec<&CorpusObject>, Vec<&CorpusObject>) = corpus
        .iter()
        .partition(|o| o.gvk().is_some_and(|g| proto::supports(&g)));
    let answers = encode_with_apimachinery(&built_in.iter().map(|o| &o.value).collect::<Vec<_>>());
    let mut tally = Tally::default();
    let mut refused = BTreeMap::<String, usize>::new();
    let mut lossy = Vec::new();
    for (object, answer) in built_in.iter().zip(&answers) {
        if !answer.ok {
            // apimachinery cannot decode it (a value of the wrong type):
            // neither could a server have stored it.
            *refused
                .entry(answer.error.chars().take(90).collect())
                .or_default() += 1;
            continue;
        }
        if canonical(&answer.direct) != canonical(&answer.json) {
            lossy.push(format!(
                "{} ({}): {}",
                object.file,
                object.name(),
                first_difference(&answer.json, &answer.direct)
                    .replace("ours", "through protobuf")
                    .replace("apimachinery's", "straight from JSON")
            ));
        }
        let kind = object.gvk().map(|g| g.to_string()).unwrap_or_default();
        tally.check(&object.file, &object.name(), &kind, answer);
    }
    println!(
        "proto corpus: {} of {} objects of {} built-in kinds agree with apimachinery ({} byte-identical \
         before key ordering); {} objects of custom or unknown kinds skipped; {} refused by \
         apimachinery's JSON decoder; {} whose JSON changes through protobuf (what protobuf does not \
         carry: an empty list as against none, the TypeMeta of an embedded object)",
        tally.agree,
        answers.len() - refused.values().sum::<usize>(),
        tally.kinds.len(),
        tally.identical,
        custom.len(),
        refused.values().sum::<usize>(),
        lossy.len(),
    );
    for l in &lossy {
        println!("  changed through protobuf: {l}");
    }
    for (error, n) in &refused {
        println!("  refused x{n}: {error}");
    }
    tally.assert_clean("corpus objects");
    assert!(tally.agree > 1000, "only {} objects compared", tally.agree);
}

#[test]
fn corpus_lists_transcode_as_apimachinery_writes_them() {
    let Some(corpus) = corpus() else { return };
    let mut lists = Vec::new();
    for (api_version, kind) in [("v1", "Pod"), ("v1", "Service"), ("apps/v1", "Deployment")] {
        let candidates: Vec<&Value> = corpus
            .iter()
            .filter(|o| o.value["apiVersion"] == api_version && o.value["kind"] == kind)
            .map(|o| &o.value)
            .take(60)
            .collect();
        // Only objects apimachinery decodes (a few corpus objects carry
        // values such as the string "null" for a time).
        let answers = encode_with_apimachinery(&candidates);
        let items: Vec<Value> = candidates
            .into_iter()
            .zip(answers)
            .filter(|(_, a)| a.ok)
            .map(|(o, _)| o.clone())
            .take(25)
            .collect();
        assert!(items.len() > 2, "only {} corpus {kind}s", items.len());
        lists.push(serde_json::json!({
            "apiVersion": api_version,
            "kind": format!("{kind}List"),
            "metadata": {"resourceVersion": "123456", "continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ"},
            "items": items,
        }));
    }
    lists.push(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {}, "items": []}));
    let answers = encode_with_apimachinery(&lists.iter().collect::<Vec<_>>());
    let mut tally = Tally::default();
    for (list, answer) in lists.iter().zip(&answers) {
        let kind = list["kind"].as_str().unwrap();
        assert!(answer.ok, "{kind}: {}", answer.error);
        tally.check("(built from the corpus)", kind, kind, answer);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&answer.proto)
            .unwrap();
        let Transcoded::List(transcoded) = proto::transcode(&bytes).unwrap() else {
            panic!("{kind} is not transcoded as a list");
        };
        assert_eq!(
            transcoded.items.len(),
            list["items"].as_array().unwrap().len(),
            "{kind}"
        );
    }
    println!(
        "proto lists: {} of {} lists agree",
        tally.agree,
        lists.len()
    );
    tally.assert_clean("lists");
}

/// Random objects of every kind the table holds (apimachinery's round-trip
/// fuzzer, seed `PROTO_FUZZ_SEED`, `PROTO_FUZZ_N` per kind): the kinds and
/// values the corpus lacks (apiextensions schemas, MicroTime, floats,
/// bytes, every union), and strings of any Unicode.
#[test]
fn fuzzed_objects_of_every_kind_transcode_as_apimachinery_writes_them() {
    let env =
        |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_owned());
    let (seed, n) = (env("PROTO_FUZZ_SEED", "20261129"), env("PROTO_FUZZ_N", "8"));
    let answers = run_probe(&["fuzz", &seed, &n], String::new());
    let mut tally = Tally::default();
    let mut refused = 0;
    for (i, answer) in answers.iter().enumerate() {
        if !answer.ok {
            refused += 1;
            eprintln!(
                "apimachinery refused a fuzzed {}: {}",
                answer.kind, answer.error
            );
            continue;
        }
        tally.check(
            &format!("fuzz seed {seed} #{i}"),
            &answer.kind,
            &answer.kind,
            answer,
        );
    }
    println!(
        "proto fuzz (seed {seed}, {n} per kind): {} of {} objects of {} kinds agree ({} byte-identical \
         before key ordering); {refused} refused by apimachinery",
        tally.agree,
        answers.len() - refused,
        tally.kinds.len(),
        tally.identical,
    );
    tally.assert_clean("fuzzed objects");
    let kinds = answers
        .iter()
        .map(|a| a.kind.as_str())
        .collect::<BTreeSet<_>>();
    assert!(kinds.len() > 300, "only {} kinds fuzzed", kinds.len());
}

/// host/src/proto/schema.txt is what the probe generates from the Go types
/// go.mod pins; `KUBEWASM_REGENERATE=1` rewrites it.
#[test]
fn schema_is_current() {
    let out = Command::new(kubewasm_tests::probe::path("protoprobe"))
        .arg("schema")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "protoprobe schema: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    kubewasm::reference::check_or_write(
        "host/src/proto/schema.txt",
        &out.stdout,
        "cargo test -p kubewasm-tests --test proto_corpus schema_is_current",
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Transcoding throughput on the corpus Pods against serde_json parsing
/// the same JSON into a `Value`: printed, not asserted. Meaningful in a
/// release build: `cargo test --release -p kubewasm-tests --test
/// proto_corpus -- --ignored --nocapture throughput`.
#[test]
#[ignore = "a measurement: run it in a release build"]
fn throughput() {
    let Some(corpus) = corpus() else { return };
    let pods: Vec<&Value> = corpus
        .iter()
        .filter(|o| o.value["apiVersion"] == "v1" && o.value["kind"] == "Pod")
        .map(|o| &o.value)
        .collect();
    let answers = encode_with_apimachinery(&pods);
    let encoded: Vec<(Vec<u8>, String)> = answers
        .iter()
        .filter(|a| a.ok)
        .map(|a| {
            (
                base64::engine::general_purpose::STANDARD
                    .decode(&a.proto)
                    .unwrap(),
                a.json.clone(),
            )
        })
        .collect();
    let proto_bytes: usize = encoded.iter().map(|(p, _)| p.len()).sum();
    let json_bytes: usize = encoded.iter().map(|(_, j)| j.len()).sum();
    let rounds = 20;
    let time = |f: &dyn Fn()| {
        let start = std::time::Instant::now();
        for _ in 0..rounds {
            f();
        }
        start.elapsed().as_secs_f64()
    };
    let transcode = time(&|| {
        for (p, _) in &encoded {
            std::hint::black_box(proto::transcode(p).unwrap());
        }
    });
    let parse = time(&|| {
        for (_, j) in &encoded {
            std::hint::black_box(serde_json::from_str::<Value>(j).unwrap());
        }
    });
    let validate = time(&|| {
        for (_, j) in &encoded {
            std::hint::black_box(serde_json::from_str::<serde::de::IgnoredAny>(j).unwrap());
        }
    });
    let n = (encoded.len() * rounds) as f64;
    println!(
        "{} corpus Pods, {:.0} B protobuf / {:.0} B JSON on average ({}):",
        encoded.len(),
        proto_bytes as f64 / encoded.len() as f64,
        json_bytes as f64 / encoded.len() as f64,
        if cfg!(debug_assertions) {
            "DEBUG build: not representative"
        } else {
            "release build"
        }
    );
    for (what, secs, bytes) in [
        ("transcode protobuf -> JSON text", transcode, proto_bytes),
        ("serde_json parse to Value", parse, json_bytes),
        ("serde_json validate (IgnoredAny)", validate, json_bytes),
    ] {
        println!(
            "  {what:34} {:>9.0} objects/s {:>7.1} MB/s of input {:>6.2} us/object",
            n / secs,
            (bytes * rounds) as f64 / secs / 1e6,
            secs / n * 1e6
        );
    }
}
