//! The `kubewasm` command: parse the command line and hand each command
//! to its handler in [`cli`].

use std::io::Write;

use anyhow::Context;
use clap::Parser;

mod cli;

use cli::{
    Cli, Command, child_compile, compile, componentize, crds, dead_letters, migrate, new_project,
    probe, pull, push, rbac, record, run, shards, status, test,
};

// musl's malloc is slow under many threads: the static image uses jemalloc.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its first allocation: a background thread
/// returns pages freed for a second (dirty) straight to the system, so RSS
/// follows what the host holds instead of its peaks. jemalloc reads the
/// symbol as a `const char *`: a reference to an array is that pointer.
#[cfg(feature = "jemalloc")]
#[allow(unsafe_code)] // exporting a symbol by name is what jemalloc asks for
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static JEMALLOC_CONF: &[u8; 60] =
    b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Command::Test(args) = cli.command {
        kubewasm::telemetry::logging::init_with(cli.log_format, "error");
        return test(args);
    }
    kubewasm::telemetry::logging::init(cli.log_format);
    let command = match cli.command {
        Command::ChildCompile(args) => return child_compile(args),
        other => other,
    };
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .and_then(|rt| match command {
            Command::Run(args) => rt.block_on(run(*args)),
            Command::Probe(args) => probe(args),
            Command::DeadLetters(args) => dead_letters(args),
            Command::New(args) => new_project(args),
            Command::Componentize(args) => componentize(args),
            Command::Rbac(args) => rt.block_on(rbac(args)),
            Command::Status(args) => rt.block_on(status(args)),
            Command::Shards(args) => rt.block_on(shards(args)),
            Command::Crds => crds(),
            Command::Migrate(args) => migrate(args),
            Command::Compile(args) => {
                // Progress lines of slow compiles need a runtime to tick on.
                let _entered = rt.enter();
                compile(args)
            }
            Command::Push(args) => rt.block_on(push(args)),
            Command::Pull(args) => rt.block_on(pull(args)),
            Command::Record(args) => record(&rt, args),
            Command::ChildCompile(_) | Command::Test(_) => Ok(()),
        });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // The cause chain, not a backtrace: these are the user's errors
            // to act on (and symbolising a backtrace takes seconds).
            let _ = writeln!(std::io::stderr().lock(), "Error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The command line's reference pages, generated from [`Cli`]: the book's
/// markdown page and the man pages (docs/man/, `man -l
/// docs/man/kubewasm-run.1`). Committed, and checked here: a flag added or
/// changed without regenerating them fails;
/// `KUBEWASM_REGENERATE=1 cargo test -p kubewasm --bin kubewasm reference`
/// rewrites them.
#[cfg(test)]
mod reference {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use clap::CommandFactory;
    use kubewasm::reference::{REGENERATE, check_or_write, cli, repo_root};

    const HOW: &str = "cargo test -p kubewasm --bin kubewasm reference";

    #[test]
    fn cli_page_is_current() {
        let page = cli::markdown(&super::Cli::command());
        for expected in [
            "## kubewasm run",
            "`--plugins <PLUGINS>`",
            "`KUBEWASM_PLUGINS`",
        ] {
            assert!(page.contains(expected), "{expected} missing:\n{page}");
        }
        assert!(!page.contains("__compile"), "a hidden command is listed");
        check_or_write("docs/book/src/reference/cli.md", page.as_bytes(), HOW).unwrap();
    }

    /// The flags in the book's hand-written tables (which say more than
    /// `--help`) exist, and every flag of `run` is in its chapter: a flag
    /// renamed, removed or added fails here until the prose follows.
    #[test]
    fn the_books_flag_tables_follow_the_cli() {
        let cli = super::Cli::command();
        let globals: Vec<String> = cli
            .get_arguments()
            .filter_map(|a| a.get_long().map(str::to_owned))
            .collect();
        for (chapter, section, command, complete) in [
            ("running.md", "", "run", true),
            ("commands.md", "## `kubewasm rbac`", "rbac", false),
        ] {
            let text =
                std::fs::read_to_string(repo_root().join("docs/book/src").join(chapter)).unwrap();
            let text = match section {
                "" => text.as_str(),
                _ => text.split(section).nth(1).unwrap(),
            };
            let text = text.split("\n## ").next().unwrap();
            let sub = cli.find_subcommand(command).unwrap();
            let flags: Vec<String> = sub
                .get_arguments()
                .filter(|a| !a.is_hide_set())
                .filter_map(|a| a.get_long().map(str::to_owned))
                .collect();
            let documented: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("| `--"))
                .map(|l| {
                    l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                        .next()
                        .unwrap()
                })
                .collect();
            assert!(!documented.is_empty(), "{chapter}: no flag table");
            for flag in &documented {
                assert!(
                    flags.iter().chain(&globals).any(|f| f == flag),
                    "{chapter} documents --{flag}, which `kubewasm {command}` does not have"
                );
            }
            if complete {
                for flag in &flags {
                    assert!(
                        text.contains(&format!("`--{flag}")),
                        "`kubewasm {command} --{flag}` is not in {chapter}: add a row to its table"
                    );
                }
            }
        }
    }

    /// The `kubewasm ...` command lines of the book (in `sh` blocks, with
    /// their indented continuation lines, and in code spans) name commands
    /// and flags that exist.
    #[test]
    fn the_books_command_lines_use_real_flags() {
        let cli = super::Cli::command();
        let longs = |cmd: &clap::Command| -> Vec<String> {
            cmd.get_arguments()
                .flat_map(|a| {
                    a.get_long()
                        .into_iter()
                        .chain(a.get_all_aliases().unwrap_or_default())
                        .map(str::to_owned)
                })
                .chain(["help".to_owned(), "version".to_owned()])
                .collect()
        };
        let globals = longs(&cli);
        let mut pages = Vec::new();
        for dir in ["docs/book/src", "docs/book/src/reference", "docs"] {
            for entry in std::fs::read_dir(repo_root().join(dir)).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "md") && !path.ends_with("cli.md") {
                    pages.push(path);
                }
            }
        }
        pages.push(repo_root().join("README.md"));
        let mut checked = 0;
        for page in &pages {
            for line in command_lines(&std::fs::read_to_string(page).unwrap()) {
                let mut words = line.split_whitespace().skip(1);
                let name = words.next().unwrap_or("");
                let sub = cli
                    .find_subcommand(name)
                    .unwrap_or_else(|| panic!("{}: `{line}`: no command {name}", page.display()));
                let known = longs(sub);
                for word in line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
                    if let Some(flag) = word.strip_prefix("--").filter(|f| !f.is_empty()) {
                        assert!(
                            known.iter().chain(&globals).any(|k| k == flag),
                            "{}: `{line}`: kubewasm {name} has no --{flag}",
                            page.display()
                        );
                    }
                }
                checked += 1;
            }
        }
        assert!(checked > 20, "only {checked} command lines found");
    }

    /// `kubewasm ...` lines of `sh` blocks (joined with their indented
    /// continuations) and code spans that start with `kubewasm `.
    fn command_lines(text: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let (mut shell, mut fenced, mut continuing) = (false, false, false);
        for line in text.lines() {
            if let Some(info) = line.strip_prefix("```") {
                fenced = !fenced;
                shell = fenced && ["sh", "bash", "console"].contains(&info.trim());
                continuing = false;
                continue;
            }
            let trimmed = line.trim();
            if shell {
                if let Some(rest) = trimmed.strip_prefix("kubewasm ") {
                    out.push(format!("kubewasm {rest}"));
                    continuing = true;
                } else if continuing && line.starts_with(' ') && !trimmed.is_empty() {
                    if let Some(last) = out.last_mut() {
                        last.push(' ');
                        last.push_str(trimmed);
                    }
                } else {
                    continuing = false;
                }
            } else if !fenced {
                for (i, span) in line.split('`').enumerate() {
                    if i % 2 == 1 && span.starts_with("kubewasm ") {
                        out.push(span.to_owned());
                    }
                }
            }
        }
        out
    }

    #[test]
    fn man_pages_are_current() {
        let out = tempfile::tempdir().unwrap();
        clap_mangen::generate_to(super::Cli::command(), out.path()).unwrap();
        let mut generated: Vec<(String, Vec<u8>)> = std::fs::read_dir(out.path())
            .unwrap()
            .map(|e| {
                let path = e.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read(&path).unwrap())
            })
            // The compiler child is the binary's own business.
            .filter(|(name, _)| !name.contains("__compile"))
            .collect();
        generated.sort();
        let names: Vec<&str> = generated.iter().map(|(n, _)| n.as_str()).collect();
        assert!(
            names.contains(&"kubewasm.1") && names.contains(&"kubewasm-run.1"),
            "{names:?}"
        );
        let dir = repo_root().join("docs/man");
        let regenerate = std::env::var_os(REGENERATE).is_some();
        for entry in std::fs::read_dir(&dir).into_iter().flatten() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !names.contains(&name.as_str()) {
                assert!(
                    regenerate,
                    "docs/man/{name} is no command's page: run `{REGENERATE}=1 {HOW}`"
                );
                std::fs::remove_file(&path).unwrap();
            }
        }
        for (name, text) in &generated {
            check_or_write(&format!("docs/man/{name}"), text, HOW).unwrap();
        }
    }
}
