//! The status reasons reference: every reason a Plugin object's conditions
//! carry ([`crate::objects::reasons::ALL`]), the conditions that carry it
//! and its meaning, from the doc comments of its constant.

use std::fmt::Write;

use crate::objects::reasons::ALL;

/// The page.
pub fn markdown() -> String {
    let mut out = super::page_head(
        "Status reasons",
        "the code (host/src/objects/reasons.rs)",
        "cargo test -p kubewasm --lib reference",
    );
    let _ = writeln!(
        out,
        "Every reason the conditions of a Plugin or NamespacedPlugin carry \
         ([Plugins as objects](../plugin-objects.md#status) says how to read them). \
         A refused spec's reason (`Degraded=True`) is also the reason of each replica's \
         `status.replicas` entry that refused it and, when no version serves on a replica, \
         of a Warning Event on the Plugin; a replica loading the spec says `Loading` there.\n"
    );
    let _ = writeln!(out, "| reason | conditions | meaning |");
    let _ = writeln!(out, "|---|---|---|");
    for entry in ALL {
        let conditions: Vec<String> = entry
            .conditions
            .iter()
            .map(|(c, ok)| {
                let status = if *ok { "True" } else { "False" };
                format!("`{}={status}`", c.as_str())
            })
            .collect();
        let _ = writeln!(
            out,
            "| `{}` | {} | {} |",
            entry.reason,
            conditions.join(", "),
            entry.meaning().replace('|', "\\|"),
        );
    }
    out
}
