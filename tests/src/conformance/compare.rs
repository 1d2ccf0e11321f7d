//! What the suite compares between the simulation and the server: each
//! action's answer by its kind (the messages are the server's words on one
//! side and the simulation's on the other), and each resulting object
//! field by field once what only one world can have (uids,
//! resourceVersions, timestamps, managed fields) is set aside.

use kubewasm::actions::executor::ActionError;
use serde_json::Value;

use super::translate::Translation;

/// An answer as the suite compares it: `ok`, or the refusal's class
/// ([`ActionError::class`]).
pub fn answer(result: &Result<(), ActionError>) -> &'static str {
    result.as_ref().err().map_or("ok", ActionError::class)
}

/// `object` with what differs by world alone set aside: uid,
/// resourceVersion, creationTimestamp, managedFields and selfLink dropped,
/// a deletionTimestamp kept as set or not. `real` objects come back
/// through `t` (namespaces without their suffix, owner uids as simulated).
pub fn comparable(object: &Value, real: Option<&Translation>) -> Value {
    let mut out = object.clone();
    let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) else {
        return out;
    };
    for volatile in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
        "selfLink",
    ] {
        meta.remove(volatile);
    }
    if meta.contains_key("deletionTimestamp") {
        meta.insert("deletionTimestamp".into(), Value::from("<set>"));
    }
    if let Some(t) = real {
        if let Some(ns) = meta.get("namespace").and_then(Value::as_str) {
            let ns = t.namespace_back(ns);
            meta.insert("namespace".into(), Value::from(ns));
        }
        if object["kind"] == "Namespace"
            && let Some(name) = meta.get("name").and_then(Value::as_str)
        {
            let name = t.namespace_back(name);
            meta.insert("name".into(), Value::from(name));
        }
        if let Some(owners) = meta
            .get_mut("ownerReferences")
            .and_then(Value::as_array_mut)
        {
            for owner in owners {
                if let Some(uid) = owner["uid"].as_str() {
                    owner["uid"] = Value::from(t.uid_back(uid));
                }
            }
        }
    }
    out
}

/// The paths where `sim` and `real` differ (`/data/a: sim "1", server
/// "2"`), skipping the pointers in `volatile` and everything under them,
/// and what only the server has (its defaults).
pub fn differences(sim: &Value, real: &Value, volatile: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    walk("", sim, real, volatile, &mut out);
    out
}

fn walk(path: &str, sim: &Value, real: &Value, volatile: &[String], out: &mut Vec<String>) {
    if volatile
        .iter()
        .any(|v| path == v || path.starts_with(&format!("{v}/")))
    {
        return;
    }
    match (sim, real) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let p = format!("{path}/{}", k.replace('~', "~0").replace('/', "~1"));
                walk(
                    &p,
                    a.get(k).unwrap_or(&Value::Null),
                    b.get(k).unwrap_or(&Value::Null),
                    volatile,
                    out,
                );
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                walk(&format!("{path}/{i}"), x, y, volatile, out);
            }
        }
        _ if sim == real => {}
        // What the server defaults (a Deployment's strategy, a Pod's DNS
        // policy) the simulation leaves unset: defaulting is not simulated.
        (Value::Null, _) => {}
        _ => out.push(format!(
            "{}: simulation {}, server {}",
            if path.is_empty() { "/" } else { path },
            sim,
            real
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn volatile_metadata_is_set_aside_and_the_rest_compared() {
        let mut t = Translation::new("-c1");
        t.learn_namespaces(&json!({"metadata": {"namespace": "demo"}}));
        let sim = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": "demo", "uid": "a", "resourceVersion": "3",
                         "creationTimestamp": "2026-01-01T00:00:00Z", "deletionTimestamp": "2026-01-01T00:00:09Z"},
            "data": {"a": "1"}});
        let real = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": "demo-c1", "uid": "b", "resourceVersion": "9001",
                         "creationTimestamp": "2026-11-29T07:00:00Z", "deletionTimestamp": "2026-11-29T07:00:01Z",
                         "managedFields": [{}]},
            "data": {"a": "2"}});
        let d = differences(&comparable(&sim, None), &comparable(&real, Some(&t)), &[]);
        assert_eq!(d, [r#"/data/a: simulation "1", server "2""#]);
        assert!(
            differences(
                &comparable(&sim, None),
                &comparable(&real, Some(&t)),
                &["/data".into()]
            )
            .is_empty()
        );
    }

    #[test]
    fn answers_are_compared_by_kind() {
        assert_eq!(answer(&Ok(())), "ok");
        assert_eq!(answer(&Err(ActionError::Conflict("x".into()))), "conflict");
        assert_eq!(answer(&Err(ActionError::Invalid("x".into()))), "invalid");
        assert_eq!(answer(&Err(ActionError::NotFound("x".into()))), "not_found");
    }
}
