//! What a recording leaves out of the objects it keeps and writes: the
//! server's bookkeeping no plugin reads (managedFields and kubectl's
//! last-applied copy, which the host's cache strips too), and, in what is
//! written, a Secret's values (replaced by [`MARKER`], keys kept), in the
//! cache, the deltas and the actions alike.

use serde_json::Value;

use crate::kind::{KindRef, KindRegistry};
use crate::object::LAST_APPLIED;
use crate::redact::Redactor;
use crate::testing::fixture::{ActionEntry, Call, PatchKind};

pub use crate::redact::MARKER;

/// Drops managedFields and the last-applied annotation, as the host's
/// cache does by default (`StripOptions::default()`).
pub fn strip(object: &mut Value) {
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    meta.remove("managedFields");
    let empty = meta
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
        .map(|a| {
            a.remove(LAST_APPLIED);
            a.is_empty()
        });
    if empty == Some(true) {
        meta.remove("annotations");
    }
}

/// An object as written: its sensitive values hidden.
pub fn object(redactor: &Redactor, object: &Value) -> Value {
    let mut out = object.clone();
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    redactor.redact(api_version, kind, &mut out);
    out
}

/// Hides what the calls' actions carry of a Secret's values.
pub fn calls(redactor: &Redactor, kinds: &KindRegistry, calls: &mut [Call]) {
    for call in calls {
        for action in &mut call.actions {
            match action {
                ActionEntry::Apply(a) => a.object = object(redactor, &a.object),
                ActionEntry::ApplyStatus(a) => a.object = object(redactor, &a.object),
                ActionEntry::Patch(p) => {
                    let Some(resource) = p.target.split_whitespace().next() else {
                        continue;
                    };
                    let Ok(info) = kinds.resolve(&KindRef::Resource(resource.to_owned())) else {
                        continue;
                    };
                    let (api_version, kind) = (info.gvk.api_version(), info.gvk.kind.clone());
                    match p.patch_type {
                        PatchKind::Merge => redactor.redact(&api_version, &kind, &mut p.patch),
                        PatchKind::Json => redactor.json_patch(&api_version, &kind, &mut p.patch),
                    }
                }
                ActionEntry::Delete(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::testing::fixture::{Apply, CallResult, Patch, Preconditions};
    use serde_json::json;

    #[test]
    fn secret_values_are_hidden_in_objects_applies_and_patches() {
        let r = Redactor::default();
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "a"},
            "data": {"token": "c2VjcmV0"}, "stringData": {"pw": "hunter2"}});
        let hidden = object(&r, &secret);
        let text = hidden.to_string();
        assert!(
            !text.contains("c2VjcmV0") && !text.contains("hunter2"),
            "{text}"
        );
        assert_eq!(hidden["data"]["token"], MARKER);
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}});
        assert_eq!(object(&r, &cm), cm);

        let mut calls = vec![Call {
            call: None,
            at: None,
            result: CallResult::Ok,
            actions: vec![
                ActionEntry::Apply(Apply {
                    force: true,
                    preconditions: Preconditions::default(),
                    object: secret.clone(),
                }),
                ActionEntry::Patch(Patch {
                    target: "secrets a/s".into(),
                    patch_type: PatchKind::Merge,
                    preconditions: Preconditions::default(),
                    patch: json!({"data": {"token": "c2VjcmV0"}}),
                }),
            ],
            events: Vec::new(),
            logs: None,
        }];
        calls_for_test(&r, &mut calls);
        let text = serde_json::to_string(&calls).unwrap();
        assert!(
            !text.contains("c2VjcmV0") && !text.contains("hunter2"),
            "{text}"
        );
    }

    fn calls_for_test(r: &Redactor, c: &mut [Call]) {
        calls(r, &KindRegistry::builtin(), c);
    }

    #[test]
    fn bookkeeping_is_stripped() {
        let mut o = json!({"metadata": {"name": "x", "managedFields": [{}],
            "annotations": {LAST_APPLIED: "{}"}}});
        strip(&mut o);
        assert_eq!(o, json!({"metadata": {"name": "x"}}));
    }
}
