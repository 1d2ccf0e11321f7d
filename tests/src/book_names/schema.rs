//! Host config keys and Plugin fields: the JSON Schemas under reference/schemas.

use super::*;

/// The keys of `value` that `schema` (with its `definitions` in `root`)
/// does not describe, as dotted paths from `path`. An object schema with
/// `properties` knows those keys (and any other when its
/// `additionalProperties` is a schema or `true`); one with neither, or
/// `x-kubernetes-preserve-unknown-fields`, takes anything (a plugin's
/// `config`).
pub fn unknown_keys(value: &Value, schema: &Value, root: &Value, path: &str) -> Vec<String> {
    let mut out = Vec::new();
    walk(value, schema, root, path, &mut out);
    out
}

fn walk(value: &Value, schema: &Value, root: &Value, path: &str, out: &mut Vec<String>) {
    let schemas = alternatives(schema, root);
    match value {
        Value::Object(map) => {
            if schemas.iter().any(|s| takes_anything(s)) {
                return;
            }
            for (key, inner) in map {
                let at = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                let property = schemas
                    .iter()
                    .find_map(|s| s.get("properties").and_then(|p| p.get(key)));
                let additional = schemas
                    .iter()
                    .find_map(|s| match s.get("additionalProperties") {
                        Some(Value::Bool(true)) => Some(&Value::Bool(true)),
                        Some(other @ Value::Object(_)) => Some(other),
                        _ => None,
                    });
                match property.or(additional) {
                    Some(sub) => walk(inner, sub, root, &at, out),
                    None => out.push(at),
                }
            }
        }
        Value::Array(items) => {
            let item = schemas.iter().find_map(|s| s.get("items"));
            if let Some(item) = item {
                for inner in items {
                    walk(inner, item, root, path, out);
                }
            }
        }
        _ => {}
    }
}

/// A schema and what it stands for: its `$ref` followed, each of its
/// `anyOf`/`oneOf`/`allOf` (an `Option<T>` is `T` or null).
fn alternatives<'a>(schema: &'a Value, root: &'a Value) -> Vec<&'a Value> {
    let mut out = Vec::new();
    let mut todo = vec![schema];
    while let Some(s) = todo.pop() {
        if let Some(reference) = s.get("$ref").and_then(Value::as_str) {
            let name = reference.rsplit('/').next().unwrap_or("");
            if let Some(target) = root.get("definitions").and_then(|d| d.get(name)) {
                todo.push(target);
            }
        }
        for key in ["anyOf", "oneOf", "allOf"] {
            if let Some(list) = s.get(key).and_then(Value::as_array) {
                todo.extend(list);
            }
        }
        out.push(s);
    }
    out
}

fn takes_anything(schema: &Value) -> bool {
    schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
        || (schema.get("properties").is_none()
            && schema.get("additionalProperties").is_none()
            && schema.get("type").and_then(Value::as_str) == Some("object"))
}

/// Whether the dotted `path` (`spec.module.oci.reference`,
/// `status.replicas`) names a field of `schema`: arrays are walked into
/// (`status.conditions.reason`), a `[]` suffix is read as the array.
pub fn has_path(schema: &Value, root: &Value, path: &str) -> bool {
    let mut at = vec![schema];
    for segment in path.split('.') {
        let segment = segment.trim_end_matches("[]");
        let mut next = Vec::new();
        for s in at.iter().flat_map(|s| alternatives(s, root)) {
            let objects = std::iter::once(s)
                .chain(s.get("items"))
                .flat_map(|s| alternatives(s, root));
            for o in objects {
                if let Some(p) = o.get("properties").and_then(|p| p.get(segment)) {
                    next.push(p);
                }
            }
        }
        if next.is_empty() {
            return false;
        }
        at = next;
    }
    true
}

/// The YAML documents of a block, each with the block's line of its first
/// line (documents split at `---`), as JSON; a document that does not parse
/// is left out (an excerpt with `...`; the names in it cannot be told).
fn documents(block: &Block) -> Vec<(usize, Value)> {
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    let mut text = String::new();
    let mut flush = |start: Option<usize>, text: &mut String| {
        if let Some(line) = start
            && let Ok(value) = serde_yaml_ng::from_str::<Value>(text)
            && value.is_object()
        {
            out.push((line, value));
        }
        text.clear();
    };
    for (number, line) in &block.lines {
        if line.trim_end() == "---" {
            flush(start.take(), &mut text);
            continue;
        }
        start.get_or_insert(*number);
        text.push_str(line);
        text.push('\n');
    }
    flush(start, &mut text);
    out
}

/// The line of a block where the last key of `path` is written, else the
/// document's first line.
fn line_of(block: &Block, from: usize, path: &str) -> usize {
    let key = path.rsplit('.').next().unwrap_or(path);
    block
        .lines
        .iter()
        .filter(|(n, _)| *n >= from)
        .find(|(_, l)| {
            l.split(['{', ',', ' ', '-']).any(|w| {
                w.strip_suffix(':').is_some_and(|k| k == key) || w.starts_with(&format!("{key}:"))
            })
        })
        .map_or(from, |(n, _)| *n)
}

/// Every key of a host config a page shows (the YAML blocks of config.md
/// and any with `kind: HostConfig`) that the host config's schema lacks.
pub fn unknown_config_keys(root: &Path) -> Vec<Unknown> {
    let schema = json(root, HOST_CONFIG);
    let mut unknown = Vec::new();
    let mut seen = 0;
    for (page, text) in book_pages(root) {
        let parsed = markdown::read(&text);
        for block in parsed.blocks.iter().filter(|b| b.lang == "yaml") {
            for (line, doc) in documents(block) {
                let host_config = doc.get("kind") == Some(&Value::from("HostConfig"))
                    || (page.ends_with("src/config.md") && doc.get("kind").is_none());
                if !host_config {
                    continue;
                }
                seen += 1;
                for key in unknown_keys(&doc, &schema, &schema, "") {
                    unknown.push(Unknown {
                        page: page.clone(),
                        line: line_of(block, line, &key),
                        name: key,
                        why: format!("no such host config key in {HOST_CONFIG} (generated from config::RunSettings)"),
                    });
                }
            }
        }
    }
    assert!(
        seen > 0,
        "no host config example found in the book (config.md's yaml block)"
    );
    unknown
}

// ---------------------------------------------------------------- Plugin fields

/// The `spec.x.y` and `status.x.y` paths of a line (not a file such as
/// `status.rs`, nor a Pod's `spec.nodeName` on a page about Pods: only the
/// lines [`unknown_plugin_fields`] reads are asked).
pub fn field_paths(line: &str) -> Vec<String> {
    let b = line.as_bytes();
    let mut found = Vec::new();
    for root in ["spec.", "status."] {
        for (at, _) in line.match_indices(root) {
            if at > 0 && (b[at - 1].is_ascii_alphanumeric() || b"_./-".contains(&b[at - 1])) {
                continue;
            }
            let len = b[at..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || b"._[]".contains(c))
                .count();
            let path = line[at..at + len].trim_end_matches('.');
            if path.len() > root.len() && !path.ends_with(".rs") && !path.ends_with(".md") {
                found.push(path.to_owned());
            }
        }
    }
    found
}

/// Every Plugin field a page names that the CRDs' schemas lack: the
/// `spec.`/`status.` paths of plugin-objects.md and of the sections of
/// other pages whose heading speaks of Plugin objects, the keys of YAML
/// blocks of `kind: Plugin` or `NamespacedPlugin` (but `metadata`, the
/// API server's), and the fields of plugin-objects.md's Status table.
pub fn unknown_plugin_fields(root: &Path) -> Vec<Unknown> {
    let plugin = json(root, PLUGIN);
    let namespaced = json(root, NAMESPACED_PLUGIN);
    let why = |what: &str| {
        format!(
            "no such field of {what} in {PLUGIN} (generated from the CRD's types, as deploy/base/crds.yaml)"
        )
    };
    let mut unknown = Vec::new();
    let mut checked = 0;
    for (page, text) in book_pages(root) {
        let parsed = markdown::read(&text);
        let about_plugins = page.ends_with("src/plugin-objects.md");
        let sections = markdown::sections(&parsed.prose);
        for ((line, text), section) in parsed.prose.iter().zip(&sections) {
            let in_section =
                section.is_some_and(|s| s.to_ascii_lowercase().contains("plugin object"));
            if !(about_plugins || in_section) {
                continue;
            }
            for path in field_paths(text) {
                checked += 1;
                if !has_path(&plugin, &plugin, &path) {
                    unknown.push(Unknown {
                        page: page.clone(),
                        line: *line,
                        name: path,
                        why: why("a Plugin"),
                    });
                }
            }
        }
        for block in parsed.blocks.iter().filter(|b| b.lang == "yaml") {
            for (line, mut doc) in documents(block) {
                let schema = match doc.get("kind").and_then(Value::as_str) {
                    Some("Plugin") => &plugin,
                    Some("NamespacedPlugin") => &namespaced,
                    _ => continue,
                };
                if let Some(map) = doc.as_object_mut() {
                    map.remove("metadata");
                }
                checked += 1;
                for key in unknown_keys(&doc, schema, schema, "") {
                    unknown.push(Unknown {
                        page: page.clone(),
                        line: line_of(block, line, &key),
                        name: key,
                        why: why(doc["kind"].as_str().unwrap_or("a Plugin")),
                    });
                }
            }
        }
        if about_plugins {
            for (line, field) in status_table_fields(&parsed) {
                checked += 1;
                let path = format!("status.{field}");
                if !has_path(&plugin, &plugin, &path) {
                    unknown.push(Unknown {
                        page: page.clone(),
                        line,
                        name: path,
                        why: why("a Plugin's status"),
                    });
                }
            }
        }
    }
    assert!(
        checked > 10,
        "only {checked} Plugin fields and manifests found in the book"
    );
    unknown
}

/// The fields a table under a `Status` heading lists in its `field` column.
fn status_table_fields(page: &Page) -> Vec<(usize, String)> {
    let sections = markdown::sections(&page.prose);
    let mut out = Vec::new();
    for table in markdown::tables(&page.prose) {
        let Some(first) = table.rows.first() else {
            continue;
        };
        let under_status = page
            .prose
            .iter()
            .position(|(n, _)| *n == first.line)
            .and_then(|i| sections[i])
            .is_some_and(|s| s == "Status");
        let Some(col) = table.column(&["field"]).filter(|_| under_status) else {
            continue;
        };
        for row in &table.rows {
            for field in markdown::ticked(row.cells.get(col).copied().unwrap_or("")) {
                out.push((row.line, field.to_owned()));
            }
        }
    }
    out
}

// ---------------------------------------------------------------- reasons
