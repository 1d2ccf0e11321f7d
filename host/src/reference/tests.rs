#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use serde_json::Value;

use super::{check_or_write, repo_root, schemas};

const HOW: &str = "cargo test -p kubewasm --lib reference";

#[test]
fn metrics_page_is_current() {
    let page = super::metrics::markdown();
    // Every family the host registers or collects, the collector's too.
    for family in [
        "kubewasm_informer_deltas_total",
        "kubewasm_actions_total",
        "kubewasm_plugin_limit_exceeded_total",
        "kubewasm_plugin_action_throttle_seconds_total",
        "kubewasm_build_info",
        "kubewasm_leader",
        "kubewasm_plugin_call_duration_seconds_bucket",
        "kubewasm_cache_bytes",
    ] {
        assert!(
            page.contains(&format!("`{family}`")),
            "{family} missing:\n{page}"
        );
    }
    check_or_write("docs/book/src/reference/metrics.md", page.as_bytes(), HOW).unwrap();
}

#[test]
fn status_reasons_page_is_current() {
    let page = super::status_reasons::markdown();
    for reason in [
        "`Serving`",
        "`PullFailed`",
        "`SignatureRefused`",
        "`TenantForbidden`",
    ] {
        assert!(page.contains(reason), "{reason} missing:\n{page}");
    }
    check_or_write(
        "docs/book/src/reference/status-reasons.md",
        page.as_bytes(),
        HOW,
    )
    .unwrap();
}

#[test]
fn schemas_are_current() {
    for (name, text) in schemas::all() {
        check_or_write(&format!("{}/{name}", schemas::DIR), text.as_bytes(), HOW).unwrap();
    }
}

fn properties<'a>(schema: &'a Value, root: &'a Value) -> Vec<&'a str> {
    // `Option<T>`: `T` or null.
    let schema = schema["anyOf"]
        .as_array()
        .and_then(|any| any.iter().find(|s| s.get("$ref").is_some()))
        .unwrap_or(schema);
    let schema = match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let name = r.rsplit('/').next().unwrap();
            &root["definitions"][name]
        }
        None => schema,
    };
    schema["properties"]
        .as_object()
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

/// The sidecar schema knows every key the example sidecars use, and the
/// sidecar parser takes each of them (so the schema describes what the
/// parser reads).
#[test]
fn sidecar_schema_covers_the_example_sidecars() {
    let schema = schemas::sidecar();
    let top = properties(&schema, &schema);
    assert_eq!(top, ["access", "config", "grants", "limits"], "{schema:#}");
    let limits = properties(&schema["properties"]["limits"], &schema);
    let dir = repo_root().join("examples/plugins");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        crate::runtime::manifest::Manifest::parse(&path, &text).unwrap();
        let value: Value = serde_yaml_ng::from_str(&text).unwrap();
        for (key, v) in value.as_object().unwrap() {
            assert!(top.contains(&key.as_str()), "{}: {key}", path.display());
            if key == "limits" {
                for k in v.as_object().unwrap().keys() {
                    assert!(
                        limits.contains(&k.as_str()),
                        "{}: limits.{k}",
                        path.display()
                    );
                }
            }
        }
        seen += 1;
    }
    assert!(seen >= 3);
}

/// The config example of the book parses as a host config, and the schema
/// names each of its keys.
#[test]
fn host_config_schema_covers_the_books_example() {
    let page = std::fs::read_to_string(repo_root().join("docs/book/src/config.md")).unwrap();
    let example = page
        .split("```yaml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .unwrap();
    crate::config::RunSettings::parse(example, Path::new("config.yaml")).unwrap();
    let schema = schemas::host_config();
    let top = properties(&schema, &schema);
    let value: Value = serde_yaml_ng::from_str(example).unwrap();
    for (key, v) in value.as_object().unwrap() {
        assert!(top.contains(&key.as_str()), "{key} not in {top:?}");
        if let Some(inner) = v.as_object()
            && key != "sensitiveFields"
        {
            let nested = properties(&schema["properties"][key.as_str()], &schema);
            for k in inner.keys() {
                assert!(nested.contains(&k.as_str()), "{key}.{k} not in {nested:?}");
            }
        }
    }
}
