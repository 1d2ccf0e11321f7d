//! The names the book uses exist in the code. The book's generated
//! references already hold the code's names, so each name a page uses is
//! looked up there:
//!
//! | name | where a page uses it | the code's list |
//! |---|---|---|
//! | a metric `kubewasm_...` | anywhere but program code blocks | reference/metrics.md |
//! | a long flag `--foo` | a `kubewasm` command: in shell and text blocks, in inline code | reference/cli.md (the subcommand's flags and the global ones) |
//! | a host config key | YAML blocks of config.md and those with `kind: HostConfig` | reference/schemas/host-config.schema.json |
//! | a Plugin field | `spec.x`/`status.x` in plugin-objects.md and in sections on Plugin objects; YAML blocks with `kind: Plugin` or `NamespacedPlugin`; the fields of its Status table | reference/schemas/plugin.schema.json and namespacedplugin.schema.json |
//! | a status reason | the `reason(s)` column of a table, `Ready=False/Reason` | reference/status-reasons.md |
//!
//! (paths under docs/book/src). Each unknown name is reported with its
//! page, line and where the code's list is.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

use crate::markdown::{self, Block, Page};

/// Where the references are, relative to the repository.
pub const METRICS: &str = "docs/book/src/reference/metrics.md";
pub const CLI: &str = "docs/book/src/reference/cli.md";
pub const HOST_CONFIG: &str = "docs/book/src/reference/schemas/host-config.schema.json";
pub const PLUGIN: &str = "docs/book/src/reference/schemas/plugin.schema.json";
pub const NAMESPACED_PLUGIN: &str = "docs/book/src/reference/schemas/namespacedplugin.schema.json";
pub const REASONS: &str = "docs/book/src/reference/status-reasons.md";
/// The command line's definition, for its hidden commands (the reference
/// lists only those a user runs).
pub const CLI_SOURCE: &str = "host/src/cli/mod.rs";

/// A name a page uses that the code's list lacks.
#[derive(Debug, PartialEq)]
pub struct Unknown {
    /// The page, relative to the repository.
    pub page: String,
    pub line: usize,
    pub name: String,
    /// What is wrong, naming the code's list.
    pub why: String,
}

impl std::fmt::Display for Unknown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: {}: {}",
            self.page, self.line, self.name, self.why
        )
    }
}

/// The book's pages (every `.md` under docs/book/src), each with its text,
/// shown relative to the repository.
pub fn book_pages(root: &Path) -> Vec<(String, String)> {
    crate::docs::pages(root)
        .into_iter()
        .filter(|p| p.starts_with(root.join("docs/book/src")))
        .map(|p| {
            let text = read(&p);
            (shown(root, &p), text)
        })
        .collect()
}

fn shown(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn json(root: &Path, rel: &str) -> Value {
    let text = read(&root.join(rel));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Code blocks of these languages hold a program's identifiers
/// (`kubewasm_sdk::...`, `import kubewasm_fake`), not metrics.
const PROGRAM_LANGS: [&str; 8] = ["rust", "python", "py", "js", "javascript", "go", "c", "wit"];

// ---------------------------------------------------------------- metrics

/// The metrics of reference/metrics.md: each series it lists and, for a
/// counter (`_total`) or a histogram (`_bucket`, `_count`, `_sum`), the
/// family's name a page may use for them all.
pub struct Metrics(BTreeSet<String>);

impl Metrics {
    pub fn parse(reference: &str) -> Self {
        let mut names = BTreeSet::new();
        let page = markdown::read(reference);
        for table in markdown::tables(&page.prose) {
            let Some(col) = table.column(&["metric"]) else {
                continue;
            };
            for row in &table.rows {
                for series in markdown::ticked(row.cells.get(col).copied().unwrap_or("")) {
                    names.insert(series.to_owned());
                    for suffix in ["_total", "_bucket", "_count", "_sum"] {
                        if let Some(family) = series.strip_suffix(suffix) {
                            names.insert(family.to_owned());
                        }
                    }
                }
            }
        }
        Self(names)
    }

    pub fn knows(&self, name: &str) -> bool {
        self.0.contains(name)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The metric names of a line: `kubewasm_[a-z0-9_]+` standing alone, not
/// part of a longer identifier (`..._kubewasm_rbac`), a path
/// (`sdk/kubewasm_fake.py`), a Rust path (`kubewasm_sdk::`) or a dotted
/// name (`kubewasm_fake.install`).
pub fn metric_names(line: &str) -> Vec<&str> {
    let b = line.as_bytes();
    let mut found = Vec::new();
    for (at, _) in line.match_indices("kubewasm_") {
        if at > 0 && (b[at - 1].is_ascii_alphanumeric() || b"_/.-".contains(&b[at - 1])) {
            continue;
        }
        let len = b[at..]
            .iter()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || **c == b'_')
            .count();
        let end = at + len;
        let rest = &line[end..];
        let dotted = rest.starts_with("::")
            || (rest.starts_with('.')
                && rest[1..].starts_with(|c: char| c.is_ascii_alphanumeric()))
            || rest.starts_with(|c: char| c.is_ascii_uppercase());
        if !dotted && len > "kubewasm_".len() {
            found.push(&line[at..end]);
        }
    }
    found
}

/// Every metric a page names that reference/metrics.md does not list.
pub fn unknown_metrics(root: &Path) -> Vec<Unknown> {
    let metrics = Metrics::parse(&read(&root.join(METRICS)));
    assert!(metrics.len() > 20, "{METRICS} lists no metrics");
    let mut unknown = Vec::new();
    let mut checked = 0;
    for (page, text) in book_pages(root) {
        if page == METRICS {
            continue;
        }
        let parsed = markdown::read(&text);
        let lines = parsed.prose.iter().copied().chain(
            parsed
                .blocks
                .iter()
                .filter(|b| !PROGRAM_LANGS.contains(&b.lang))
                .flat_map(|b| b.lines.iter().copied()),
        );
        for (line, text) in lines {
            for name in metric_names(text) {
                checked += 1;
                if !metrics.knows(name) {
                    unknown.push(Unknown {
                        page: page.clone(),
                        line,
                        name: name.to_owned(),
                        why: format!("no such metric in {METRICS} (generated from the registry)"),
                    });
                }
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} metric names found in the book"
    );
    unknown
}

// ---------------------------------------------------------------- flags

/// The command line of reference/cli.md: the global flags and each
/// subcommand's, each flag with whether it takes a value as the next word.
#[derive(Debug, Default)]
pub struct Cli {
    pub global: BTreeMap<String, bool>,
    pub commands: BTreeMap<String, BTreeMap<String, bool>>,
    /// Hidden subcommands (`#[command(name = "__compile", hide = true)]`):
    /// a page may name one (the compiler child a process list shows), not
    /// its flags, which no page should tell a user to pass.
    pub hidden: BTreeSet<String>,
}

impl Cli {
    /// Reads the tables of the page: those before `## Commands` are the
    /// global options, those under `## kubewasm NAME` NAME's (`## kubewasm
    /// help run` is `help`'s page for `run`: no flags of its own).
    pub fn parse(reference: &str) -> Self {
        let mut cli = Cli::default();
        let mut section: Option<Option<String>> = Some(None);
        for line in reference.lines() {
            if let Some(heading) = line.strip_prefix("## ") {
                let words: Vec<&str> = heading.split_whitespace().collect();
                section = match words.as_slice() {
                    ["kubewasm", name] => {
                        cli.commands.entry((*name).to_owned()).or_default();
                        Some(Some((*name).to_owned()))
                    }
                    _ => None,
                };
                continue;
            }
            let Some(first) = line.strip_prefix("| `").and_then(|l| l.split('`').next()) else {
                continue;
            };
            let flags = match &section {
                Some(None) => &mut cli.global,
                Some(Some(name)) => cli.commands.entry(name.clone()).or_default(),
                None => continue,
            };
            // `-o, --output <OUTPUT>`, `--cache-dir, --out <DIR>`,
            // `--metrics-auth[=<X>]` (a value only after `=`).
            let takes_value = first.contains(" <");
            for word in first.split([',', ' ']) {
                if let Some(name) = word.strip_prefix("--") {
                    let name = name.split('[').next().unwrap_or(name);
                    flags.insert(name.to_owned(), takes_value);
                }
            }
        }
        cli
    }

    /// What is wrong with the words after `kubewasm` of one command: a
    /// subcommand the CLI lacks, a flag neither it nor the global options
    /// have. A placeholder for a subcommand (`COMMAND`, `<cmd>`) is not
    /// checked.
    pub fn check(&self, words: &[String]) -> Vec<(String, String)> {
        if words.first().is_some_and(|w| self.hidden.contains(w)) {
            return Vec::new();
        }
        let mut wrong = Vec::new();
        let mut command: Option<&String> = None;
        let mut skip_value = false;
        for word in words {
            if skip_value {
                skip_value = false;
                continue;
            }
            if word == "--" {
                break;
            }
            if let Some(flag) = flag_of(word) {
                // clap's own, which the reference does not list.
                if flag == "help" || (command.is_none() && flag == "version") {
                    continue;
                }
                let known = command
                    .and_then(|c| self.commands.get(c))
                    .and_then(|flags| flags.get(&flag))
                    .or_else(|| self.global.get(&flag));
                match known {
                    Some(takes) => skip_value = command.is_none() && *takes && !word.contains('='),
                    None => wrong.push((
                        format!("--{flag}"),
                        match command {
                            Some(c) => format!(
                                "`kubewasm {c}` has no such flag in {CLI} (generated from clap)"
                            ),
                            None => format!("no such global flag in {CLI} (generated from clap)"),
                        },
                    )),
                }
                continue;
            }
            if command.is_some() || word.starts_with('-') {
                continue;
            }
            let name = word.trim_matches(|c| "[]()".contains(c));
            if self.commands.contains_key(name) {
                command = self.commands.get_key_value(name).map(|(k, _)| k);
                continue;
            }
            let placeholder = name.starts_with('<')
                || name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c == '_' || c == '-');
            if !placeholder {
                wrong.push((
                    format!("kubewasm {name}"),
                    format!("no such command in {CLI} (generated from clap)"),
                ));
            }
            break;
        }
        wrong
    }
}

/// The long flag a word of a command is, without its dashes and value
/// (`[--context NAME]` gives `context`, `--metrics-auth=false` and
/// `--leader-elect[=true]` their names).
fn flag_of(word: &str) -> Option<String> {
    let word = word.trim_start_matches(['[', '(', '"', '\'']);
    let name = word.strip_prefix("--")?;
    let name: String = name
        .chars()
        .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
        .collect();
    (!name.is_empty() && name.starts_with(|c: char| c.is_ascii_lowercase())).then_some(name)
}

/// The `kubewasm` commands of a shell line: the words after `kubewasm` of
/// each command it runs. Commands split at `&&`, `||`, `;` and at a pipe
/// ` | ` outside brackets (`[--local DIR | --kubeconfig FILE]` and
/// `rust|js` are a synopsis' alternatives); a `#` after a space starts a
/// comment; leading `VAR=value` words and `sudo`/`exec`/`time`/`env` are
/// skipped; the command is `kubewasm` or a path to it (`target/debug/kubewasm`).
pub fn commands(line: &str) -> Vec<Vec<String>> {
    let line = match line.find(" #") {
        Some(at) => &line[..at],
        None => line,
    };
    let mut segments = Vec::new();
    let mut current = String::new();
    let mut depth = 0i32;
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let prev = i.checked_sub(1).map(|p| chars[p]);
        match c {
            '[' | '(' => depth += 1,
            ']' | ')' => depth -= 1,
            _ => {}
        }
        let split = match (c, next) {
            ('&', Some('&')) | ('|', Some('|')) => Some(2),
            (';', _) => Some(1),
            ('|', _)
                if depth <= 0
                    && prev.is_some_and(char::is_whitespace)
                    && next.is_some_and(char::is_whitespace) =>
            {
                Some(1)
            }
            ('$', Some('(')) | ('`', _) => Some(1),
            _ => None,
        };
        match split {
            Some(n) => {
                segments.push(std::mem::take(&mut current));
                i += n;
            }
            None => {
                current.push(c);
                i += 1;
            }
        }
    }
    segments.push(current);
    segments
        .iter()
        .filter_map(|segment| {
            let mut words = segment.split_whitespace().peekable();
            while let Some(w) = words.peek() {
                let assignment = w.split_once('=').is_some_and(|(k, _)| {
                    !k.is_empty()
                        && k.chars()
                            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                });
                if assignment || ["sudo", "exec", "time", "env", "$"].contains(w) {
                    words.next();
                } else {
                    break;
                }
            }
            let program = words.next()?.trim_matches(['"', '\'', '(', '[']);
            let is_kubewasm = program == "kubewasm" || program.ends_with("/kubewasm");
            is_kubewasm.then(|| words.map(str::to_owned).collect())
        })
        .collect()
}

/// The shell lines of a code block that run commands, with their line,
/// backslash continuations joined: every line of a `sh`/`bash`/`shell`/
/// `text` block or one without a language (a `# ` comment's text too: a
/// command shown in a comment is a claim as well), only the `$ ` lines of
/// a `console` block (the rest is output).
pub fn shell_lines(block: &Block) -> Vec<(usize, String)> {
    let console = block.lang == "console";
    if !(console || ["sh", "bash", "shell", "text", ""].contains(&block.lang)) {
        return Vec::new();
    }
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut continued = false;
    for (number, line) in &block.lines {
        let trimmed = line.trim();
        let (body, more) = match trimmed.strip_suffix('\\') {
            Some(body) => (body.trim_end(), true),
            None => (trimmed, false),
        };
        if continued {
            if let Some((_, last)) = out.last_mut() {
                last.push(' ');
                last.push_str(body);
            }
        } else if console {
            if let Some(command) = body.strip_prefix("$ ") {
                out.push((*number, command.to_owned()));
            } else {
                continued = false;
                continue;
            }
        } else {
            let body = body.strip_prefix("$ ").unwrap_or(body);
            let body = body.trim_start_matches('#').trim_start();
            out.push((*number, body.to_owned()));
        }
        continued = more;
    }
    out
}

/// The names of the hidden subcommands of the CLI's source: each
/// `#[command(name = "NAME", hide = true)]`.
pub fn hidden_commands(source: &str) -> BTreeSet<String> {
    source
        .lines()
        .filter_map(|l| l.trim().strip_prefix("#[command(name = \""))
        .filter_map(|rest| rest.split_once('"'))
        .filter(|(_, rest)| rest.contains("hide = true"))
        .map(|(name, _)| name.to_owned())
        .collect()
}

/// Every flag or subcommand of a `kubewasm` command a page shows that
/// reference/cli.md does not list.
pub fn unknown_flags(root: &Path) -> Vec<Unknown> {
    let mut cli = Cli::parse(&read(&root.join(CLI)));
    cli.hidden = hidden_commands(&read(&root.join(CLI_SOURCE)));
    let mut checked = 0;
    assert!(
        cli.commands.contains_key("run") && !cli.global.is_empty(),
        "{CLI} lists no commands"
    );
    let mut unknown = Vec::new();
    for (page, text) in book_pages(root) {
        if page == CLI {
            continue;
        }
        let parsed = markdown::read(&text);
        let spans = markdown::code_spans(&parsed.prose);
        let lines = parsed
            .blocks
            .iter()
            .flat_map(shell_lines)
            .chain(spans.into_iter().map(|s| (s.line, s.text)));
        for (line, text) in lines {
            for words in commands(&text) {
                checked += 1;
                for (name, why) in cli.check(&words) {
                    unknown.push(Unknown {
                        page: page.clone(),
                        line,
                        name,
                        why,
                    });
                }
            }
        }
    }
    assert!(
        checked > 30,
        "only {checked} kubewasm commands found in the book"
    );
    unknown
}

// ---------------------------------------------------------------- schemas

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

/// The reasons of reference/status-reasons.md, each with the conditions
/// that carry it (`Ready=False`, ...), and the condition types.
#[derive(Debug, Default)]
pub struct Reasons {
    pub reasons: BTreeMap<String, BTreeSet<String>>,
    pub conditions: BTreeSet<String>,
}

impl Reasons {
    pub fn parse(reference: &str) -> Self {
        let mut out = Reasons::default();
        let page = markdown::read(reference);
        for table in markdown::tables(&page.prose) {
            let (Some(reason), Some(conditions)) =
                (table.column(&["reason"]), table.column(&["conditions"]))
            else {
                continue;
            };
            for row in &table.rows {
                let Some(name) = row
                    .cells
                    .get(reason)
                    .and_then(|c| markdown::ticked(c).first().copied())
                else {
                    continue;
                };
                let carried: BTreeSet<String> =
                    markdown::ticked(row.cells.get(conditions).copied().unwrap_or(""))
                        .into_iter()
                        .map(str::to_owned)
                        .collect();
                for c in &carried {
                    if let Some((condition, _)) = c.split_once('=') {
                        out.conditions.insert(condition.to_owned());
                    }
                }
                out.reasons.insert(name.to_owned(), carried);
            }
        }
        out
    }

    /// The reasons a `Ready=False` condition may carry: why a Plugin is not
    /// Ready.
    pub fn not_ready(&self) -> BTreeSet<&str> {
        self.reasons
            .iter()
            .filter(|(_, c)| c.contains("Ready=False"))
            .map(|(r, _)| r.as_str())
            .collect()
    }
}

/// The reason-looking names of a page, with their lines: the backticked
/// CamelCase words of a table's `reason` or `reasons` column, and the
/// reason of a `Condition=Status/Reason` (`Serving=True/PreviousVersion`).
pub fn reason_names(page: &Page, conditions: &BTreeSet<String>) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for table in markdown::tables(&page.prose) {
        let Some(col) = table.column(&["reason", "reasons"]) else {
            continue;
        };
        for row in &table.rows {
            for word in markdown::ticked(row.cells.get(col).copied().unwrap_or("")) {
                let camel = word.starts_with(|c: char| c.is_ascii_uppercase())
                    && word.chars().all(|c| c.is_ascii_alphanumeric());
                if camel {
                    out.push((row.line, word.to_owned()));
                }
            }
        }
    }
    for (line, text) in &page.prose {
        for condition in conditions {
            for status in ["True", "False"] {
                let prefix = format!("{condition}={status}/");
                for (at, _) in text.match_indices(&prefix) {
                    let rest = &text[at + prefix.len()..];
                    let name: String = rest
                        .chars()
                        .take_while(char::is_ascii_alphanumeric)
                        .collect();
                    if !name.is_empty() {
                        out.push((*line, name));
                    }
                }
            }
        }
    }
    out
}

/// Every reason-looking name of a page's reason tables (or written as
/// `Condition=Status/Reason`) that is neither a reason nor a condition of
/// reference/status-reasons.md (a reasons column may name a condition:
/// "as `Ready`'s refusals").
pub fn unknown_reasons(root: &Path) -> Vec<Unknown> {
    let reasons = Reasons::parse(&read(&root.join(REASONS)));
    assert!(reasons.reasons.len() > 10, "{REASONS} lists no reasons");
    let mut unknown = Vec::new();
    let mut checked = 0;
    for (page, text) in book_pages(root) {
        if page == REASONS {
            continue;
        }
        let parsed = markdown::read(&text);
        for (line, name) in reason_names(&parsed, &reasons.conditions) {
            checked += 1;
            if !reasons.reasons.contains_key(&name) && !reasons.conditions.contains(&name) {
                unknown.push(Unknown {
                    page: page.clone(),
                    line,
                    name,
                    why: format!("no such status reason in {REASONS} (generated from host/src/objects/reasons.rs)"),
                });
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} status reasons found in the book's reason tables"
    );
    unknown
}

/// The reasons a page that lists them does not name (in backticks,
/// anywhere on it): plugin-objects.md documents every reason, and
/// troubleshooting.md every reason a Plugin is not Ready for. Each is
/// reported at the page's first table of reasons (else its line 1).
pub fn missing_reasons(root: &Path) -> Vec<Unknown> {
    let reasons = Reasons::parse(&read(&root.join(REASONS)));
    let all: BTreeSet<&str> = reasons.reasons.keys().map(String::as_str).collect();
    let not_ready = reasons.not_ready();
    let mut missing = Vec::new();
    for (page, expected, what) in [
        ("docs/book/src/plugin-objects.md", &all, "a status reason"),
        (
            "docs/book/src/troubleshooting.md",
            &not_ready,
            "a reason of Ready=False",
        ),
    ] {
        let text = read(&root.join(page));
        let parsed = markdown::read(&text);
        let line = markdown::tables(&parsed.prose)
            .iter()
            .find(|t| t.column(&["reason", "reasons"]).is_some())
            .map_or(1, |t| t.line);
        // A reason is named in backticks, or as `Serving=True/Reason`.
        let named: BTreeSet<String> = markdown::code_spans(&parsed.prose)
            .into_iter()
            .map(|s| s.text)
            .chain(
                reason_names(&parsed, &reasons.conditions)
                    .into_iter()
                    .map(|(_, n)| n),
            )
            .collect();
        for reason in expected {
            if !named.contains(*reason) {
                missing.push(Unknown {
                    page: page.to_owned(),
                    line,
                    name: (*reason).to_owned(),
                    why: format!("{what} ({REASONS}) this page does not name"),
                });
            }
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_stand_alone() {
        assert_eq!(
            metric_names(
                "`kubewasm_actions_total{outcome=\"failed\"}` and rate(kubewasm_plugin_call_duration_seconds_bucket[5m])."
            ),
            [
                "kubewasm_actions_total",
                "kubewasm_plugin_call_duration_seconds_bucket"
            ]
        );
        assert_eq!(metric_names("see kubewasm_leader."), ["kubewasm_leader"]);
        for legit in [
            "`sdk/kubewasm_fake.py`",
            "`kubewasm_fake.install(WIT_DIR)`",
            "use kubewasm_sdk::prelude::*;",
            "(`committed_rbac_is_what_kubewasm_rbac_generates`)",
            "`sdk/fake/kubewasm_fake.h`",
        ] {
            assert!(metric_names(legit).is_empty(), "{legit}");
        }
    }

    #[test]
    fn metrics_take_a_counters_or_a_histograms_family_name() {
        let metrics = Metrics::parse(
            "| metric | type |\n|---|---|\n| `kubewasm_actions_total` | counter |\n| `kubewasm_x_seconds_bucket`<br>`kubewasm_x_seconds_sum` | histogram |\n",
        );
        for name in [
            "kubewasm_actions_total",
            "kubewasm_actions",
            "kubewasm_x_seconds",
            "kubewasm_x_seconds_sum",
        ] {
            assert!(metrics.knows(name), "{name}");
        }
        for name in [
            "kubewasm_action_total",
            "kubewasm_x_seconds_total",
            "kubewasm_x_seconds_count",
        ] {
            assert!(!metrics.knows(name), "{name}");
        }
    }

    const CLI_PAGE: &str = "\
Options of every command:

| argument | meaning |
|---|---|
| `--log-format <LOG_FORMAT>` | format |

## Commands

## kubewasm run

| argument | meaning |
|---|---|
| `--plugins <PLUGINS>` | folder |
| `--metrics-auth[=<METRICS_AUTH>]` | auth |
| `--dry-run` | dry |

## kubewasm status

| argument | meaning |
|---|---|
| `-o, --output <OUTPUT>` | format |

## kubewasm help

## kubewasm help run

| argument | meaning |
|---|---|
| `<NAME>` | x |
";

    fn check(cli: &Cli, line: &str) -> Vec<String> {
        commands(line)
            .iter()
            .flat_map(|words| cli.check(words))
            .map(|(name, _)| name)
            .collect()
    }

    #[test]
    fn flags_are_those_of_their_command() {
        let cli = Cli::parse(CLI_PAGE);
        assert_eq!(cli.global.keys().collect::<Vec<_>>(), ["log-format"]);
        assert_eq!(cli.commands["run"].len(), 3);
        assert_eq!(
            cli.commands["status"].keys().collect::<Vec<_>>(),
            ["output"]
        );
        assert!(cli.commands["help"].is_empty());
        for good in [
            "kubewasm run --plugins DIR [--metrics-auth=false] --dry-run",
            "kubewasm --log-format json run --plugins x",
            "KUBEWASM_X=1 target/debug/kubewasm status --output json | jq --raw-output .x",
            "kubewasm run --plugins DIR [--dry-run | --log-format text]",
            "kubewasm help run",
            "kubewasm COMMAND --help",
            "cargo test -p kubewasm --lib reference",
            "kubectl -n kubewasm get pods --watch",
        ] {
            assert!(
                check(&cli, good).is_empty(),
                "{good}: {:?}",
                check(&cli, good)
            );
        }
        assert_eq!(check(&cli, "kubewasm run --plugin DIR"), ["--plugin"]);
        assert_eq!(check(&cli, "kubewasm status --plugins DIR"), ["--plugins"]);
        assert_eq!(check(&cli, "make && kubewasm --dry-run run"), ["--dry-run"]);
        assert_eq!(
            check(&cli, "kubewasm serve --plugins x"),
            ["kubewasm serve"]
        );
        assert_eq!(
            check(&cli, "x; kubewasm run --nope # --comment"),
            ["--nope"]
        );
        assert_eq!(check(&cli, "kubewasm __compile"), ["kubewasm __compile"]);
        let hidden = hidden_commands(
            "    #[command(name = \"__compile\", hide = true)]\n    #[command(name = \"shown\")]\n",
        );
        assert_eq!(hidden.iter().collect::<Vec<_>>(), ["__compile"]);
        let cli = Cli { hidden, ..cli };
        assert!(check(&cli, "kubewasm __compile").is_empty());
    }

    #[test]
    fn shell_lines_join_continuations_and_skip_console_output() {
        let page = markdown::read(
            "```console\n$ kubewasm run \\\n  --plugins x\nkubewasm run --output-line\n```\n```sh\n# kubewasm status --x\nkubewasm run\n```\n```yaml\nkubewasm: run --x\n```\n",
        );
        let lines: Vec<(usize, String)> = page.blocks.iter().flat_map(shell_lines).collect();
        assert_eq!(
            lines,
            [
                (2, "kubewasm run --plugins x".to_owned()),
                (7, "kubewasm status --x".to_owned()),
                (8, "kubewasm run".to_owned()),
            ]
        );
    }

    fn schema() -> Value {
        serde_json::json!({
            "additionalProperties": false,
            "definitions": {
                "Limits": {"type": "object", "additionalProperties": false, "properties": {"memory": {"type": "string"}}},
            },
            "properties": {
                "kind": {"const": "HostConfig"},
                "limits": {"anyOf": [{"$ref": "#/definitions/Limits"}, {"type": "null"}]},
                "sensitiveFields": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
                "config": {"type": "object"},
                "access": {"type": "array", "items": {"type": "object", "properties": {"kinds": {"type": "array"}}}},
                "status": {"properties": {"replicas": {"type": "array", "items": {"properties": {"reason": {"type": "string"}}}}}},
            },
        })
    }

    #[test]
    fn unknown_keys_are_found_through_refs_maps_and_arrays() {
        let schema = schema();
        let doc: Value = serde_yaml_ng::from_str(
            "kind: HostConfig\nlimits: {memory: 1Gi, memroy: 2Gi}\nsensitiveFields: {ConfigMap: [/data]}\nconfig: {anything: {goes: 1}}\naccess: [{kinds: [x], verbs: [read]}]\nleaderElection: true\n",
        )
        .unwrap();
        let mut unknown = unknown_keys(&doc, &schema, &schema, "");
        unknown.sort();
        assert_eq!(unknown, ["access.verbs", "leaderElection", "limits.memroy"]);
    }

    #[test]
    fn field_paths_are_walked_through_arrays() {
        let schema = schema();
        assert_eq!(
            field_paths(
                "in `status.replicas`, status.replicas[].reason; host/src/objects/status.rs; status.md; spec.x."
            ),
            ["spec.x", "status.replicas", "status.replicas[].reason"]
        );
        assert!(has_path(&schema, &schema, "status.replicas"));
        assert!(has_path(&schema, &schema, "status.replicas[].reason"));
        assert!(has_path(&schema, &schema, "limits.memory"));
        assert!(!has_path(&schema, &schema, "status.digest"));
        assert!(!has_path(&schema, &schema, "limits.memory.x"));
    }

    const REASONS_PAGE: &str = "\
| reason | conditions | meaning |
|---|---|---|
| `Serving` | `Ready=True`, `Reconciling=False` | ok |
| `PullFailed` | `Ready=False`, `Reconciling=True` | pull |
| `PreviousVersion` | `Serving=True` | earlier |
";

    #[test]
    fn reasons_are_read_from_tables_and_condition_notation() {
        let reasons = Reasons::parse(REASONS_PAGE);
        assert_eq!(reasons.reasons.len(), 3);
        assert_eq!(
            reasons.conditions.iter().collect::<Vec<_>>(),
            ["Ready", "Reconciling", "Serving"]
        );
        assert_eq!(reasons.not_ready(), BTreeSet::from(["PullFailed"]));
        let page = markdown::read(
            "| condition | reasons |\n|---|---|\n| `Ready` | `Serving`; False: `PullFaild`, as `Ready`'s refusals, `a-b` |\n\nSo `Serving=True/PreviousVersionServing` and `Ready=False` (`Stalled`).\n",
        );
        let found: Vec<String> = reason_names(&page, &reasons.conditions)
            .into_iter()
            .map(|(_, n)| n)
            .filter(|n| !reasons.reasons.contains_key(n) && !reasons.conditions.contains(n))
            .collect();
        assert_eq!(found, ["PullFaild", "PreviousVersionServing"]);
    }
}
