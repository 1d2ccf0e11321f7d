//! The structured merge of server-side apply (structured-merge-diff's
//! `Merge` and `RemoveItems`): an applied object merged into the stored
//! one by the kind's schema ([`super::fields::Ty`]), and the paths a
//! manager gave up removed.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::{Map, Value};

use super::fields::{Path, Shape, Step, Ty};

/// `config` merged into `live`: granular maps key by key (a `null` in the
/// config removes the key, as a JSON merge does), `map` and `set` lists
/// element by element, anything else (scalars, atomic lists and maps)
/// replaced by the config's.
pub fn merge(ty: Ty<'_>, live: Option<&Value>, config: &Value) -> Value {
    match (ty.shape(config), config) {
        (Shape::Map, Value::Object(entries)) => {
            let mut out = match live {
                Some(Value::Object(m)) => m.clone(),
                _ => Map::new(),
            };
            for (k, v) in entries {
                if v.is_null() {
                    out.remove(k);
                    continue;
                }
                let merged = merge(ty.field(k).0, out.get(k), v);
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (shape @ (Shape::Set | Shape::MapList(_)), Value::Array(items)) => {
            let lhs = match live {
                Some(l @ Value::Array(_)) if same_shape(ty.shape(l), shape) => l.as_array(),
                _ => None,
            };
            merge_list(ty, shape, lhs.map_or(&[], Vec::as_slice), items)
        }
        _ => config.clone(),
    }
}

fn same_shape(a: Shape<'_>, b: Shape<'_>) -> bool {
    matches!(
        (a, b),
        (Shape::Set, Shape::Set) | (Shape::MapList(_), Shape::MapList(_))
    )
}

/// A granular list's merge, in the server's order: the stored elements in
/// their order, each one the config also has merged with it where the
/// config's order allows, the config's new ones where they come in it.
fn merge_list(ty: Ty<'_>, shape: Shape<'_>, lhs: &[Value], rhs: &[Value]) -> Value {
    let (Some(lpes), Some(rpes)) = (ty.steps(shape, lhs), ty.steps(shape, rhs)) else {
        return Value::Array(rhs.to_vec());
    };
    let item = ty.item();
    let merge_item = |l: Option<&Value>, r: &Value| match shape {
        Shape::MapList(_) => merge(item, l, r),
        _ => r.clone(),
    };
    let lidx: BTreeMap<&Step, usize> = lpes.iter().enumerate().map(|(i, p)| (p, i)).collect();
    let ridx: BTreeMap<&Step, usize> = rpes.iter().enumerate().map(|(i, p)| (p, i)).collect();
    let mut shared: VecDeque<&Step> = rpes.iter().filter(|p| lidx.contains_key(p)).collect();
    let mut next_shared = shared.pop_front();
    let mut merged: BTreeSet<&Step> = BTreeSet::new();
    let mut out = Vec::with_capacity(lhs.len().max(rhs.len()));
    let (mut li, mut ri) = (0, 0);
    while li < lpes.len() || ri < rpes.len() {
        if li < lpes.len() && ri < rpes.len() {
            let pe = &lpes[li];
            if *pe == rpes[ri] {
                merged.insert(pe);
                out.push(merge_item(Some(&lhs[li]), &rhs[ri]));
                li += 1;
                ri += 1;
                next_shared = shared.pop_front();
                continue;
            }
            if ridx.contains_key(pe) && next_shared.is_some_and(|n| n != pe) {
                li += 1;
                continue;
            }
        }
        if li < lpes.len() {
            let pe = &lpes[li];
            if !ridx.contains_key(pe) {
                out.push(lhs[li].clone());
                li += 1;
                continue;
            }
            if merged.contains(pe) {
                li += 1;
                continue;
            }
        }
        if ri < rpes.len() {
            let pe = &rpes[ri];
            merged.insert(pe);
            out.push(merge_item(lidx.get(pe).map(|&i| &lhs[i]), &rhs[ri]));
            ri += 1;
            if next_shared == Some(pe) {
                next_shared = shared.pop_front();
            }
        }
    }
    Value::Array(out)
}

/// Removes what is at `path` in `value` (a key, or a list's element by
/// its step). A typed list or map the removal empties goes too, as the
/// server's Go types drop them; an untyped one stays, empty.
pub fn remove(ty: Ty<'_>, value: &mut Value, path: &[Step]) {
    let Some((step, rest)) = path.split_first() else {
        return;
    };
    let shape = ty.shape(value);
    match (shape, step, value) {
        (Shape::Map, Step::Field(k), Value::Object(map)) => {
            if rest.is_empty() {
                map.remove(k);
            } else if let Some(child) = map.get_mut(k) {
                let (child_ty, _) = ty.field(k);
                remove(child_ty, child, rest);
                if child_ty.drops_when_empty(child) {
                    map.remove(k);
                }
            }
        }
        (Shape::Set | Shape::MapList(_), Step::Key(_) | Step::Value(_), Value::Array(items)) => {
            let steps = ty.steps(shape, items).unwrap_or_default();
            let Some(i) = steps.iter().position(|s| s == step) else {
                return;
            };
            if rest.is_empty() {
                items.remove(i);
            } else if let Some(item) = items.get_mut(i) {
                remove(ty.item(), item, rest);
            }
        }
        _ => {}
    }
}

/// Removes each of `paths` (sorted, so a path comes before those under
/// it, which go with it) from `value`.
pub fn remove_all<'p>(ty: Ty<'_>, value: &mut Value, paths: impl IntoIterator<Item = &'p Path>) {
    let mut done: Vec<&Path> = Vec::new();
    for p in paths {
        if done.iter().any(|d| p.starts_with(d)) {
            continue;
        }
        remove(ty, value, p);
        done.push(p);
    }
}
