//! The reference model of delivery: a small sequential specification of
//! what one plugin version may show as handled, run over the log of
//! handled deltas a real dispatcher produced (the sink's record, in order).
//! Per version, leadership term and object:
//!
//! - nothing is acted on in a term other than the one its call was made
//!   in (an action admitted just before a loss may still be sent, as with
//!   any lease: the term is what fences it);
//! - a live delta (`added`, `updated`) shows a state newer than every state
//!   handled before it (each state at most once, in order); a look-again
//!   (`resync`, `requeue`) shows the last handled state or a newer one;
//! - an `updated`'s `old` is exactly the state handled last (when one was);
//! - a delete is handled at most once (its state: a recreated object's
//!   delete is another state, and may follow without its add, which a
//!   pending delete absorbs), and after it only an `added` or another
//!   incarnation's delete may follow.
//!
//! Whether every object ends on its last state is checked by the test
//! itself (it needs the final states), as is at most one requeue per key.

use std::collections::HashMap;

/// One handled delta, as the sink recorded it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Delivery {
    pub version: u32,
    pub term: u64,
    pub name: String,
    pub what: &'static str,
    pub rv: u32,
    /// An update's old state's resourceVersion.
    pub old: Option<u32>,
    /// The leadership term when the action ran.
    pub acted_term: u64,
}

/// What the model knows of one object in one version and term.
#[derive(Debug, Default)]
struct Object {
    /// The state handled last, unless deleted since.
    last: Option<u32>,
    /// The highest state handled (deletes included).
    high: u32,
    /// A delete was handled and no add since.
    deleted: bool,
    /// The deletes handled, by state.
    deletes: Vec<u32>,
}

/// Checks `log` against the model; the first violation, described.
pub(super) fn check(log: &[Delivery]) -> Result<(), String> {
    let mut objects: HashMap<(u32, u64, &str), Object> = HashMap::new();
    for (i, d) in log.iter().enumerate() {
        let at = || format!("delivery {i} ({d:?})");
        if d.acted_term != d.term {
            return Err(format!(
                "{}: acted on in term {} for a call of term {}",
                at(),
                d.acted_term,
                d.term
            ));
        }
        let o = objects
            .entry((d.version, d.term, d.name.as_str()))
            .or_default();
        match d.what {
            "added" | "updated" => {
                if o.deleted && d.what != "added" {
                    return Err(format!("{}: an update after the delete", at()));
                }
                if d.rv <= o.high && o.high > 0 {
                    return Err(format!(
                        "{}: state {} handled again or out of order (handled up to {})",
                        at(),
                        d.rv,
                        o.high
                    ));
                }
                if d.what == "updated"
                    && let Some(last) = o.last
                    && d.old != Some(last)
                {
                    return Err(format!(
                        "{}: old is {:?}, the state handled last is {last}",
                        at(),
                        d.old
                    ));
                }
                o.last = Some(d.rv);
                o.high = d.rv;
                o.deleted = false;
            }
            "resync" | "requeue" => {
                if o.deleted {
                    return Err(format!("{}: a look again after the delete", at()));
                }
                if d.rv < o.high {
                    return Err(format!(
                        "{}: state {} older than one handled ({})",
                        at(),
                        d.rv,
                        o.high
                    ));
                }
                o.last = Some(d.rv);
                o.high = d.rv;
            }
            "deleted" => {
                if o.deletes.contains(&d.rv) {
                    return Err(format!("{}: a delete handled twice", at()));
                }
                o.deletes.push(d.rv);
                o.last = None;
                o.high = o.high.max(d.rv);
                o.deleted = true;
            }
            other => return Err(format!("{}: unknown delta {other}", at())),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(what: &'static str, rv: u32, old: Option<u32>) -> Delivery {
        Delivery {
            version: 1,
            term: 0,
            name: "k".into(),
            what,
            rv,
            old,
            acted_term: 0,
        }
    }

    /// The model refuses each violation it names (it can fail).
    #[test]
    fn the_model_refuses_what_it_forbids() {
        let ok = [
            d("added", 1, None),
            d("updated", 3, Some(1)),
            d("resync", 3, None),
            d("requeue", 3, None),
            d("updated", 5, Some(3)),
            d("deleted", 6, None),
            d("added", 8, None),
        ];
        assert_eq!(check(&ok), Ok(()));
        for (bad, says) in [
            (vec![d("added", 1, None), d("updated", 1, Some(1))], "again"),
            (
                vec![d("added", 1, None), d("updated", 3, Some(2))],
                "old is",
            ),
            (vec![d("added", 3, None), d("resync", 2, None)], "older"),
            (
                vec![
                    d("added", 1, None),
                    d("deleted", 2, None),
                    d("deleted", 2, None),
                ],
                "twice",
            ),
            (
                vec![
                    d("added", 1, None),
                    d("deleted", 2, None),
                    d("updated", 3, Some(1)),
                ],
                "after the delete",
            ),
            (
                vec![Delivery {
                    acted_term: 1,
                    ..d("added", 1, None)
                }],
                "acted on in term 1",
            ),
        ] {
            let e = check(&bad).unwrap_err();
            assert!(e.contains(says), "{says}: {e}");
        }
        // Another version or term starts afresh: its replay may show a
        // state the previous one handled.
        let replay = [
            d("added", 3, None),
            Delivery {
                term: 1,
                acted_term: 1,
                ..d("added", 3, None)
            },
            Delivery {
                version: 2,
                ..d("added", 3, None)
            },
        ];
        assert_eq!(check(&replay), Ok(()));
    }
}
