//! Long flags of `kubewasm` commands: the flags reference/cli.md lists per subcommand.

use super::*;

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
