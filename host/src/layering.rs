//! The host's layers, checked: a test reads every source file of the crate
//! and fails when a module imports against the data path (see "Layers" in
//! the architecture notes). Telemetry is a leaf everyone may use; the
//! informer and its cache never reach the dispatcher, the runtime or the
//! plugin lifecycle; the runtime never reaches a source or the executor;
//! the executor never reaches the runtime.
//!
//! A rule between top-level modules also holds for whatever the importing
//! side reaches through others, so no cycle can run through telemetry
//! again. Imports are read from the text (`use crate::x::…`, `crate::x::…` paths
//! and `use crate::{x, y}` groups), comments stripped: no compiler needed,
//! so the test runs with the unit tests and names the file and the path.
//!
//! The binary's files (`main.rs` and its `cli/` folder) are skipped: they
//! are the entry layer, which may import every layer, and they reach the
//! library as `kubewasm::`, so a `crate::` path there names the binary's
//! own modules, not the library's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module (a top-level module of the crate, or a file or folder under
/// one, as `actions::executor`) and what it may never import.
struct Rule {
    /// The importing side: files whose module path starts with this.
    from: &'static str,
    /// Module paths it must not import (a path matches this and below).
    never: &'static [&'static str],
    why: &'static str,
}

const RULES: &[Rule] = &[
    Rule {
        from: "shard",
        never: &[
            "informer", "dispatch", "runtime", "actions", "source", "manager", "reload", "leader",
            "admin", "app",
        ],
        why: "shard placement is rules over an object only: the leader and the dispatcher use it, never the reverse",
    },
    Rule {
        from: "telemetry",
        never: &[
            "informer", "dispatch", "runtime", "actions", "source", "manager", "reload", "admin",
        ],
        why: "telemetry is a leaf: components define their events beside themselves and are read through its traits",
    },
    Rule {
        from: "informer",
        never: &["dispatch", "runtime", "manager", "reload"],
        why: "the informer and its cache never import dispatch, the runtime or the plugin lifecycle",
    },
    Rule {
        from: "runtime",
        never: &["source", "actions::executor"],
        why: "the runtime never imports a source or the executor",
    },
    Rule {
        from: "actions",
        never: &["runtime"],
        why: "the executor never imports the runtime",
    },
    Rule {
        from: "sim",
        never: &[
            "source", "testing", "runtime", "dispatch", "informer", "manager", "reload",
        ],
        why: "the simulated API server is the rules only: the simulations that store and watch call it, never the reverse",
    },
];

/// Imports against the rules not fixed yet, as `file: crate::path`: each
/// is a debt, and the test fails when one is gone too, so the list only
/// shrinks.
const ALLOWED: &[&str] = &[];

/// `host/src/a/b.rs` -> `a::b`; `a/mod.rs` -> `a`; `lib.rs` -> ``.
fn module_of(rel: &Path) -> String {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.last_mut() {
        *last = last.trim_end_matches(".rs").to_owned();
        if last == "mod" || last == "lib" || last == "main" {
            parts.pop();
        }
    }
    parts.join("::")
}

/// The binary crate's files under `src/` (relative paths): the entry layer.
const BINARY: &[&str] = &["main.rs", "cli"];

/// The library's `.rs` files under `src`, the binary's left out.
fn library_files(src: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.retain(|f| {
        f.strip_prefix(src)
            .ok()
            .and_then(|rel| rel.iter().next())
            .is_none_or(|first| !BINARY.iter().any(|b| first == *b))
    });
    files
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The text without `//` comments (doc links are not imports).
fn strip_comments(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The leading `a::b::c` of `s` (stopping before a `::{` group).
fn ident_path(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(s.len());
    s[..end].trim_end_matches(':')
}

/// The items of a `{…}` group (`s` starts after its `{`), split at its
/// top-level commas, and the text after its `}`.
fn group_items(s: &str) -> (Vec<&str>, &str) {
    let mut depth = 1;
    let mut items = Vec::new();
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 1 => {
                items.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
        if depth == 0 {
            items.push(s[start..i].trim());
            return (items, &s[i + 1..]);
        }
    }
    (items, "")
}

/// The paths one use-tree (or path) at the start of `s` names, each with
/// `prefix` before it.
fn expand(prefix: &str, s: &str, out: &mut BTreeSet<String>) {
    if let Some(group) = s.strip_prefix('{') {
        for item in group_items(group).0 {
            expand(prefix, item, out);
        }
        return;
    }
    let head = ident_path(s);
    let path = if prefix.is_empty() {
        head.to_owned()
    } else if head.is_empty() {
        prefix.to_owned()
    } else {
        format!("{prefix}::{head}")
    };
    let after = &s[head.len()..];
    if let Some(group) = after.strip_prefix("::{") {
        for item in group_items(group).0 {
            expand(&path, item, out);
        }
    } else if !path.is_empty() && path != "self" {
        out.insert(path.trim_end_matches("::self").to_owned());
    }
}

/// Every `crate::` path in the text, use-tree groups expanded.
fn crate_paths(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().next_back();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        expand("", rest, &mut out);
    }
    out
}

fn under(path: &str, module: &str) -> bool {
    path == module || path.starts_with(&format!("{module}::"))
}

/// The top-level modules each top-level module imports.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files = library_files(src);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let Ok(rel) = f.strip_prefix(src) else {
            continue;
        };
        let module = module_of(rel);
        let top = module.split("::").next().unwrap_or_default().to_owned();
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        let deps = graph.entry(top.clone()).or_default();
        for p in crate_paths(&strip_comments(&text)) {
            let dep = p.split("::").next().unwrap_or_default();
            if dep != top && !dep.is_empty() {
                deps.insert(dep.to_owned());
            }
        }
    }
    graph
}

/// Every top-level module `from` reaches through its imports.
fn reach(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_owned()];
    while let Some(m) = todo.pop() {
        for d in graph.get(&m).into_iter().flatten() {
            if seen.insert(d.clone()) {
                todo.push(d.clone());
            }
        }
    }
    seen
}

/// Every import against a rule: `file: crate::path` and why not.
fn violations(src: &Path) -> Vec<(String, &'static str)> {
    let mut files = library_files(src);
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let Ok(rel) = f.strip_prefix(src) else {
            continue;
        };
        let module = module_of(rel);
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        let paths = crate_paths(&strip_comments(&text));
        for rule in RULES.iter().filter(|r| under(&module, r.from)) {
            for p in &paths {
                if rule.never.iter().any(|n| under(p, n)) {
                    out.push((format!("{}: crate::{p}", rel.display()), rule.why));
                }
            }
        }
    }
    out
}

#[test]
fn no_module_imports_against_the_data_path() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src);
    let new: Vec<String> = found
        .iter()
        .filter(|(v, _)| !ALLOWED.contains(&v.as_str()))
        .map(|(v, why)| format!("{v} ({why})"))
        .collect();
    assert!(
        new.is_empty(),
        "imports against the layers ({}):\n{}",
        new.len(),
        new.join("\n")
    );
    let fixed: Vec<&str> = ALLOWED
        .iter()
        .copied()
        .filter(|a| !found.iter().any(|(v, _)| v == a))
        .collect();
    assert!(
        fixed.is_empty(),
        "fixed, now remove from ALLOWED: {fixed:?}"
    );
}

/// Not even through another module: a rule between top-level modules holds
/// for everything the importing side reaches (so no cycle runs through
/// telemetry again).
#[test]
fn no_module_reaches_against_the_data_path_through_another() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    let mut found = Vec::new();
    for rule in RULES.iter().filter(|r| !r.from.contains("::")) {
        let reached = reach(&graph, rule.from);
        for n in rule.never.iter().filter(|n| !n.contains("::")) {
            if reached.contains(*n) {
                found.push(format!("{} reaches {n} ({})", rule.from, rule.why));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The import cycles between top-level modules: each a set of two or more
/// modules that all reach one another (strongly connected components).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for m in graph.keys() {
        if out.iter().any(|c| c.contains(m)) {
            continue;
        }
        let from_m = reach(graph, m);
        if !from_m.contains(m) {
            continue;
        }
        let cycle: BTreeSet<String> = from_m
            .into_iter()
            .filter(|d| reach(graph, d).contains(m))
            .collect();
        out.push(cycle);
    }
    out
}

/// No two top-level modules import each other, even through others: the
/// folder layout is the architecture only if it reads as a tree of layers.
#[test]
fn top_level_modules_form_no_import_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = cycles(&module_graph(&src));
    assert!(
        found.is_empty(),
        "import cycles between top-level modules: {found:?}"
    );
}

#[test]
fn a_cycle_is_found_through_a_third_module() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", &["b"][..]),
        ("b", &["c"][..]),
        ("c", &["a", "d"][..]),
        ("d", &[][..]),
    ]
    .into_iter()
    .map(|(m, ds)| (m.to_owned(), ds.iter().map(|d| (*d).to_owned()).collect()))
    .collect();
    let found = cycles(&graph);
    let want: BTreeSet<String> = ["a", "b", "c"].into_iter().map(str::to_owned).collect();
    assert_eq!(found, vec![want]);
}

#[test]
fn the_parser_reads_paths_groups_and_skips_comments() {
    let text = "use crate::dispatch::PluginStats;\nuse crate::{informer::CacheView, object::ObjectKey};\n\
                use crate::actions::{self, Action, executor::{Executor, ActionError}};\n\
                let x = crate::runtime::limits::Cap::ALL; // crate::source::x\n\
                /// [`crate::manager::PluginHost`]\nmacro_rules! m { () => { $crate::reload::x } }";
    let paths = crate_paths(&strip_comments(text));
    let got: Vec<&str> = paths.iter().map(String::as_str).collect();
    assert_eq!(
        got,
        [
            "actions",
            "actions::Action",
            "actions::executor::ActionError",
            "actions::executor::Executor",
            "dispatch::PluginStats",
            "informer::CacheView",
            "object::ObjectKey",
            "runtime::limits::Cap::ALL"
        ]
    );
    assert_eq!(
        module_of(Path::new("actions/executor.rs")),
        "actions::executor"
    );
    assert_eq!(module_of(Path::new("telemetry/mod.rs")), "telemetry");
    assert!(under("actions::executor::X", "actions::executor"));
    assert!(!under("actionsx", "actions"));
}

/// The binary's files are left out, the library's kept.
#[test]
fn the_binarys_files_are_left_out() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = library_files(&src);
    let rel = |f: &PathBuf| {
        f.strip_prefix(&src)
            .map(Path::to_path_buf)
            .unwrap_or_default()
    };
    assert!(files.iter().any(|f| rel(f) == Path::new("lib.rs")));
    assert!(files.iter().any(|f| rel(f) == Path::new("layering.rs")));
    assert!(src.join("cli/mod.rs").exists() && src.join("main.rs").exists());
    assert!(
        !files
            .iter()
            .any(|f| rel(f) == Path::new("main.rs") || rel(f).starts_with("cli")),
        "the binary's files are read as the library's"
    );
}
