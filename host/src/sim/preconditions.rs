//! Preconditions, as the API server checks them and as the host's sink
//! words its answers: a delete's options; the uid and resourceVersion in
//! an applied object, a merge patch or a JSON patch's result (where the
//! sink puts a plugin's preconditions, and where a plugin that copies
//! another object's metadata puts them by accident); a JSON patch's
//! `test` operations.
//!
//! Observed on a real v1.35 API server (`tests/tests/sim_server.rs`): a
//! stale resourceVersion in a body is 409; another uid in a body is 422
//! (`metadata.uid: field is immutable`), which the sink reads as the
//! conflict it is when the plugin gave the uid as a precondition; an apply
//! that would create the object with a uid in its body is 409 (`uid
//! mismatch ... no existing object was found`), with a resourceVersion it
//! creates the object; a failed `test` is 422, read as a conflict.

use serde_json::Value;

use crate::actions::Target;
use crate::actions::executor::ActionError;

fn meta_str<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get("metadata")?
        .get(field)?
        .as_str()
        .filter(|s| !s.is_empty())
}

/// A delete's preconditions (its options): a uid or resourceVersion that
/// is not the stored object's is a conflict, in the server's words.
pub fn check_options(what: &str, target: &Target, stored: &Value) -> Result<(), ActionError> {
    let p = &target.preconditions;
    let (uid, rv) = (
        meta_str(stored, "uid").unwrap_or(""),
        meta_str(stored, "resourceVersion").unwrap_or(""),
    );
    let cannot = |why: String| {
        ActionError::Conflict(format!(
            "{what}: Operation cannot be fulfilled on {} {:?}: {why} (Conflict)",
            target.kind.resource_name(),
            target.name
        ))
    };
    if let Some(want) = p.uid.as_deref()
        && want != uid
    {
        return Err(cannot(format!(
            "Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"
        )));
    }
    if let Some(want) = p.resource_version.as_deref()
        && want != rv
    {
        return Err(cannot(format!(
            "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {rv}"
        )));
    }
    Ok(())
}

/// The uid and resourceVersion a write's body carries (`body`: the applied
/// object, or the merge or JSON patch's result), checked against `stored`
/// (`None`: the write would create the object).
pub fn check_body(
    what: &str,
    target: &Target,
    stored: Option<&Value>,
    body: &Value,
) -> Result<(), ActionError> {
    let resource = target.kind.resource_name();
    let name = &target.name;
    let Some(stored) = stored else {
        // Creating: a uid cannot match anything; a resourceVersion is
        // ignored (the server creates the object).
        return match meta_str(body, "uid") {
            Some(uid) => Err(ActionError::Conflict(format!(
                "{what}: Operation cannot be fulfilled on {resource} {name:?}: uid mismatch: the provided object specified uid {uid}, and no existing object was found (Conflict)"
            ))),
            None => Ok(()),
        };
    };
    if let Some(rv) = meta_str(body, "resourceVersion")
        && Some(rv) != meta_str(stored, "resourceVersion")
    {
        return Err(ActionError::Conflict(format!(
            "{what}: Operation cannot be fulfilled on {resource} {name:?}: the object has been modified; please apply your changes to the latest version and try again (Conflict)"
        )));
    }
    if let Some(uid) = meta_str(body, "uid")
        && Some(uid) != meta_str(stored, "uid")
    {
        let invalid = format!(
            "{} {name:?} is invalid: metadata.uid: Invalid value: {uid:?}: field is immutable",
            target.kind.gvk.kind
        );
        // The sink reads the 422 as the failed precondition it is when the
        // plugin gave the uid as one.
        return Err(match target.preconditions.uid.as_deref() {
            Some(want) => ActionError::Conflict(format!(
                "{what}: precondition failed: the object's uid is not {want} (it was deleted and recreated since the plugin read it): {invalid}"
            )),
            None => ActionError::Invalid(format!("{what}: {invalid} (Invalid)")),
        });
    }
    Ok(())
}

/// `ops` applied to `stored`, after the operations that carry the target's
/// preconditions (as the sink sends them): a failed `test` is a conflict
/// (the object changed since the plugin read it), a patch that does not
/// apply is invalid.
pub fn json_patch(
    what: &str,
    target: &Target,
    stored: &Value,
    ops: &Value,
) -> Result<Value, ActionError> {
    let mut all = target.preconditions.json_patch_ops();
    match ops {
        Value::Array(list) => all.extend(list.iter().cloned()),
        other => {
            return Err(ActionError::Invalid(format!(
                "{what}: not a JSON patch (an array of operations): {other}"
            )));
        }
    }
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(all))
        .map_err(|e| ActionError::Invalid(format!("{what}: not a JSON patch: {e}")))?;
    let mut next = stored.clone();
    json_patch::patch(&mut next, &patch).map_err(|e| match e.kind {
        json_patch::PatchErrorKind::TestFailed => ActionError::Conflict(format!(
            "{what}: the JSON patch's test of {} failed (operation {} of {}): the object changed since the plugin read it",
            e.path,
            e.operation + 1,
            patch.0.len()
        )),
        _ => ActionError::Invalid(format!(
            "{what}: the JSON patch does not apply to the object: operation {} of {} failed at {}: {}",
            e.operation + 1,
            patch.0.len(),
            e.path,
            e.kind
        )),
    })?;
    Ok(next)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::actions::Preconditions;
    use crate::kind::KindInfo;

    fn target(uid: Option<&str>, rv: Option<&str>) -> Target {
        let mut t = Target::new(
            KindInfo::new("", "v1", "ConfigMap", "configmaps", true),
            Some("d".into()),
            "c",
        );
        t.preconditions = Preconditions {
            uid: uid.map(str::to_owned),
            resource_version: rv.map(str::to_owned),
        };
        t
    }

    fn stored() -> Value {
        json!({"metadata": {"name": "c", "uid": "u-1", "resourceVersion": "7"}, "data": {"k": "v"}})
    }

    #[test]
    fn a_deletes_options_are_checked_against_the_stored_object() {
        let s = stored();
        assert!(check_options("delete", &target(Some("u-1"), Some("7")), &s).is_ok());
        let e = check_options("delete", &target(Some("u-0"), None), &s).unwrap_err();
        assert!(
            matches!(&e, ActionError::Conflict(m) if m.contains("UID in precondition: u-0, UID in object meta: u-1")),
            "{e}"
        );
        assert!(
            check_options("delete", &target(None, Some("6")), &s)
                .unwrap_err()
                .is_conflict()
        );
    }

    #[test]
    fn a_stale_resource_version_in_a_body_is_a_conflict() {
        let e = check_body(
            "patch",
            &target(None, None),
            Some(&stored()),
            &json!({"metadata": {"resourceVersion": "6"}}),
        )
        .unwrap_err();
        assert!(
            matches!(&e, ActionError::Conflict(m) if m.contains("the object has been modified")),
            "{e}"
        );
        let same = json!({"metadata": {"resourceVersion": "7", "uid": "u-1"}});
        assert!(check_body("patch", &target(None, None), Some(&stored()), &same).is_ok());
    }

    #[test]
    fn another_uid_in_a_body_is_invalid_unless_the_plugin_gave_it_as_a_precondition() {
        let body = json!({"metadata": {"uid": "u-2"}});
        let e = check_body("patch", &target(None, None), Some(&stored()), &body).unwrap_err();
        assert!(
            matches!(&e, ActionError::Invalid(m) if m.contains("metadata.uid: Invalid value: \"u-2\": field is immutable")),
            "{e}"
        );
        let e =
            check_body("patch", &target(Some("u-2"), None), Some(&stored()), &body).unwrap_err();
        assert!(e.is_conflict(), "{e}");
    }

    #[test]
    fn creating_with_a_uid_is_a_conflict_and_with_a_resource_version_creates() {
        let e = check_body(
            "patch",
            &target(None, None),
            None,
            &json!({"metadata": {"uid": "u-2"}}),
        )
        .unwrap_err();
        assert!(
            matches!(&e, ActionError::Conflict(m) if m.contains("no existing object was found")),
            "{e}"
        );
        assert!(
            check_body(
                "patch",
                &target(None, None),
                None,
                &json!({"metadata": {"resourceVersion": "3"}})
            )
            .is_ok()
        );
    }

    #[test]
    fn json_patch_tests_are_evaluated_and_preconditions_go_first() {
        let s = stored();
        let failing = json!([{"op": "test", "path": "/data/k", "value": "w"}]);
        let e = json_patch("patch", &target(None, None), &s, &failing).unwrap_err();
        assert!(e.is_conflict(), "{e}");
        let ok = json!([{"op": "test", "path": "/data/k", "value": "v"},
            {"op": "replace", "path": "/data/k", "value": "w"}]);
        let next = json_patch("patch", &target(None, Some("6")), &s, &ok).unwrap();
        assert_eq!(next["data"]["k"], "w");
        // The precondition rides in the result, for check_body to refuse.
        assert_eq!(next["metadata"]["resourceVersion"], "6");
        let bad = json!([{"op": "remove", "path": "/data/missing"}]);
        assert!(matches!(
            json_patch("patch", &target(None, None), &s, &bad),
            Err(ActionError::Invalid(_))
        ));
    }
}
