//! The command line as a markdown page, walked from clap's `Command`: each
//! (visible) subcommand with its description, usage and a table of its
//! arguments (flags, values, defaults, environment variables, help).

use std::fmt::Write;

/// The page for `cmd` (the binary's top-level command).
pub fn markdown(cmd: &clap::Command) -> String {
    let mut cmd = cmd.clone();
    cmd.build();
    let name = cmd.get_name().to_owned();
    let mut out = super::page_head(
        "Command line",
        "the code (host/src/main.rs)",
        "cargo test -p kubewasm --bin kubewasm reference",
    );
    if let Some(about) = cmd.get_about() {
        let _ = writeln!(out, "{about}.\n");
    }
    let _ = writeln!(
        out,
        "Every command and flag of `{name}`, as `{name} help COMMAND` prints them; the \
         man pages (`docs/man/`, `man -l docs/man/{name}-run.1`) say the same.\n"
    );
    let global: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| a.is_global_set() && shown(a))
        .collect();
    if !global.is_empty() {
        let _ = writeln!(out, "Options of every command:\n");
        table(&mut out, &global);
    }
    let _ = writeln!(out, "## Commands\n");
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let _ = writeln!(
            out,
            "- [`{name} {}`](#{name}-{}): {}",
            sub.get_name(),
            sub.get_name(),
            sub.get_about().map(|a| a.to_string()).unwrap_or_default()
        );
    }
    out.push('\n');
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        command(&mut out, &name, sub);
    }
    out
}

fn command(out: &mut String, parent: &str, cmd: &clap::Command) {
    let path = format!("{parent} {}", cmd.get_name());
    let _ = writeln!(out, "## {path}\n");
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        let _ = writeln!(out, "{about}\n");
    }
    let mut usage = cmd.clone().bin_name(&path);
    let usage = usage.render_usage().to_string();
    let usage = usage.trim_start_matches("Usage: ");
    let _ = writeln!(out, "```text\n{usage}\n```\n");
    let args: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_global_set() && shown(a))
        .collect();
    if !args.is_empty() {
        table(out, &args);
    }
    if let Some(after) = cmd.get_after_long_help().or(cmd.get_after_help()) {
        let _ = writeln!(out, "{after}\n");
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        command(out, &path, sub);
    }
}

/// Arguments a user can pass (not `--help`, `--version` or hidden ones).
fn shown(arg: &clap::Arg) -> bool {
    !arg.is_hide_set()
        && !matches!(
            arg.get_action(),
            clap::ArgAction::Help
                | clap::ArgAction::HelpShort
                | clap::ArgAction::HelpLong
                | clap::ArgAction::Version
        )
}

fn table(out: &mut String, args: &[&clap::Arg]) {
    let _ = writeln!(out, "| argument | meaning | default | environment |");
    let _ = writeln!(out, "|---|---|---|---|");
    for arg in args {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            cell(&spelling(arg)),
            cell(&html_escaped(&meaning(arg))),
            arg.get_default_values()
                .iter()
                .map(|v| format!("`{}`", v.to_string_lossy()))
                .collect::<Vec<_>>()
                .join(", "),
            arg.get_env()
                .map(|e| format!("`{}`", e.to_string_lossy()))
                .unwrap_or_default(),
        );
    }
    out.push('\n');
}

/// `--name VALUE`, `-s, --name`, or `<NAME>...` for a positional.
fn spelling(arg: &clap::Arg) -> String {
    let values = arg
        .get_value_names()
        .map(|names| names.iter().map(|n| format!("<{n}>")).collect::<Vec<_>>())
        .unwrap_or_else(|| vec![format!("<{}>", arg.get_id().as_str().to_uppercase())]);
    let many = matches!(arg.get_action(), clap::ArgAction::Append)
        || arg.get_num_args().is_some_and(|n| n.max_values() > 1);
    let takes_value = arg.get_action().takes_values();
    if arg.is_positional() {
        let v = values.join(" ");
        return format!("`{v}{}`", if many { "..." } else { "" });
    }
    let mut names = Vec::new();
    if let Some(s) = arg.get_short() {
        names.push(format!("-{s}"));
    }
    if let Some(l) = arg.get_long() {
        names.push(format!("--{l}"));
    }
    for alias in arg.get_visible_aliases().unwrap_or_default() {
        names.push(format!("--{alias}"));
    }
    let mut s = names.join(", ");
    if takes_value {
        let optional = arg.get_num_args().is_some_and(|n| n.min_values() == 0);
        let v = values.join(" ");
        if optional {
            let _ = write!(s, "[={v}]");
        } else {
            let _ = write!(s, " {v}");
        }
        if many {
            s.push_str("...");
        }
    }
    format!("`{s}`")
}

fn meaning(arg: &clap::Arg) -> String {
    let mut text = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let possible: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    let is_bool = possible.len() == 2 && possible[0] == "`true`" && possible[1] == "`false`";
    if !possible.is_empty() && !is_bool {
        let _ = write!(text, " (one of {})", possible.join(", "));
    }
    if arg.is_required_set() {
        text.push_str(" Required.");
    }
    text
}

/// `<` and `>` outside code spans as entities, so that help text such as
/// `registry/<repository>` is not read as an HTML tag.
fn html_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_code = false;
    for c in text.chars() {
        match c {
            '`' => {
                in_code = !in_code;
                out.push(c);
            }
            '<' if !in_code => out.push_str("&lt;"),
            '>' if !in_code => out.push_str("&gt;"),
            _ => out.push(c),
        }
    }
    out
}

/// Text safe in a table cell: one line, `|` escaped.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}
