//! How a failed write is sorted into what the executor does with it, as
//! the API defines its status codes.

use std::time::Duration;

use crate::actions::Action;
use crate::actions::executor::ActionError;

/// A request the API server (or the way to it) did not carry out.
#[derive(Debug)]
pub struct Failed {
    pub error: kube::Error,
    /// The response's `Retry-After` header (kube's error keeps only the
    /// body, and the API server's own 429s carry the wait only there).
    pub retry_after: Option<Duration>,
}

impl From<kube::Error> for Failed {
    fn from(error: kube::Error) -> Self {
        Self {
            error,
            retry_after: None,
        }
    }
}

/// A 422 without causes: how the API server answers a JSON patch that
/// does not apply (see `KubeSink::why_json_patch_failed`).
pub(super) fn is_bare_422(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s)
        if s.code == 422 && s.details.as_ref().is_none_or(|d| d.causes.is_empty()))
}

/// A uid precondition of an apply or a patch travels in the body's
/// metadata, where the server checks it as an immutable field: a mismatch
/// comes back as 422 on `metadata.uid`. That is the precondition failing,
/// the 409 a failed precondition is everywhere else.
fn uid_precondition_failed(action: &Action, error: &kube::Error) -> Option<String> {
    let (Action::Apply { target, .. } | Action::Patch { target, .. }) = action else {
        return None;
    };
    let uid = target.preconditions.uid.as_deref()?;
    match error {
        kube::Error::Api(s)
            if s.code == 422
                && s.message.contains("metadata.uid")
                && s.message.contains("immutable") =>
        {
            Some(format!(
                "precondition failed: the object's uid is not {uid} (it was deleted and recreated since the plugin read it): {}",
                s.message
            ))
        }
        _ => None,
    }
}

/// The server's message when its 500 is the one server-side apply answers
/// a body that does not fit the kind's schema with
/// ([`ActionError::apply_body_untyped`]); the same body as a create or
/// update gets 400 or 422.
fn apply_body_untyped<'a>(action: &Action, error: &'a kube::Error) -> Option<&'a str> {
    match (action, error) {
        (Action::Apply { .. }, kube::Error::Api(s))
            if s.code == 500 && s.message.contains("failed to create typed patch object") =>
        {
            Some(&s.message)
        }
        _ => None,
    }
}

/// [`classify_request`] for `action`'s own request (named `what`), with a
/// failed uid precondition read as the conflict it is, and an apply body
/// the schema refuses as the invalid request it is.
pub fn classify_failed(action: &Action, what: &str, failed: Failed) -> ActionError {
    if let Some(why) = uid_precondition_failed(action, &failed.error) {
        return ActionError::Conflict(format!("{what}: {why}"));
    }
    if let Some(message) = apply_body_untyped(action, &failed.error) {
        return ActionError::apply_body_untyped(what, message);
    }
    classify_request(what, failed)
}

/// Sorts an error of `action` (named by its RBAC verb and target) into what
/// the executor does with it.
pub fn classify(action: &Action, error: kube::Error) -> ActionError {
    let what = format!("{} {}", action.verb(), action.target());
    classify_failed(action, &what, Failed::from(error))
}

/// Sorts a failed request, named `what` (`patch deployments.apps shop/web`),
/// as the API defines its status codes:
///
/// | answer | error |
/// | --- | --- |
/// | 401 | [`Unauthorized`](ActionError::Unauthorized) |
/// | 403 | [`Forbidden`](ActionError::Forbidden) |
/// | 404 | [`NotFound`](ActionError::NotFound) |
/// | 409 | [`Conflict`](ActionError::Conflict) |
/// | 429, 5xx | [`Throttled`](ActionError::Throttled), with `Retry-After` (the header, else `details.retryAfterSeconds`) |
/// | 408, no answer (transport, TLS) | [`Transient`](ActionError::Transient) |
/// | other 4xx; a request that cannot be built or encoded | [`Invalid`](ActionError::Invalid) |
///
/// (A failed JSON-patch `test` and a failed uid precondition, both 422,
/// are told apart by the sink and become conflicts before this.)
pub fn classify_request(what: &str, failed: Failed) -> ActionError {
    match failed.error {
        kube::Error::Api(s) => {
            let msg = ActionError::server_words(what, &s.message, &s.reason);
            match s.code {
                401 => ActionError::Unauthorized(msg),
                403 => ActionError::Forbidden(msg),
                404 => ActionError::NotFound(msg),
                409 => ActionError::Conflict(msg),
                408 => ActionError::Transient(msg),
                429 | 500..=599 => ActionError::Throttled {
                    message: msg,
                    retry_after: failed.retry_after.or_else(|| {
                        s.details
                            .as_ref()
                            .map(|d| d.retry_after_seconds)
                            .filter(|&n| n > 0)
                            .map(|n| Duration::from_secs(n.into()))
                    }),
                },
                400..=499 => ActionError::Invalid(msg),
                _ => ActionError::Transient(msg),
            }
        }
        kube::Error::SerdeError(e) => ActionError::Invalid(format!("{what}: {e}")),
        kube::Error::BuildRequest(e) => ActionError::Invalid(format!("{what}: {e}")),
        other => ActionError::Transient(format!("{what}: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kube::core::Status;
    use kube::core::response::{StatusCause, StatusDetails};

    use kube::api::{Patch, PatchParams};
    use serde_json::{Value, json};

    use super::*;
    use crate::actions::{PatchType, Preconditions, Propagation, Target};
    use crate::kind::KindInfo;

    fn target(uid: Option<&str>) -> Target {
        Target {
            preconditions: Preconditions {
                uid: uid.map(str::to_owned),
                resource_version: None,
            },
            ..Target::new(
                KindInfo::new("apps", "v1", "Deployment", "deployments", true),
                Some("shop".into()),
                "web",
            )
        }
    }

    fn merge(uid: Option<&str>) -> Action {
        Action::Patch {
            target: target(uid),
            patch_type: PatchType::Merge,
            patch: json!({}),
        }
    }

    fn api(code: u16, reason: &str, message: &str, details: Option<StatusDetails>) -> kube::Error {
        let mut s = Status::failure(message, reason).with_code(code);
        s.details = details;
        kube::Error::Api(s.boxed())
    }

    fn details(retry_after_seconds: u32, causes: Vec<StatusCause>) -> Option<StatusDetails> {
        Some(StatusDetails {
            name: "web".into(),
            group: "apps".into(),
            kind: "deployments".into(),
            uid: String::new(),
            causes,
            retry_after_seconds,
        })
    }

    #[test]
    fn status_codes_are_classified_as_the_api_defines_them() {
        let a = merge(None);
        let c = |code, reason| classify(&a, api(code, reason, "m", None));
        assert!(
            matches!(c(401, "Unauthorized"), ActionError::Unauthorized(m) if m == "patch deployments.apps shop/web: m (Unauthorized)")
        );
        assert!(matches!(c(403, "Forbidden"), ActionError::Forbidden(_)));
        assert!(matches!(c(404, "NotFound"), ActionError::NotFound(_)));
        assert!(matches!(c(409, "Conflict"), ActionError::Conflict(_)));
        for code in [400, 405, 410, 413, 415, 422] {
            assert!(
                matches!(c(code, "Invalid"), ActionError::Invalid(_)),
                "{code}"
            );
        }
        assert!(matches!(c(408, "Timeout"), ActionError::Transient(_)));
        for code in [429, 500, 502, 503, 504] {
            let e = c(code, "");
            assert!(
                matches!(
                    &e,
                    ActionError::Throttled {
                        retry_after: None,
                        ..
                    }
                ),
                "{code}: {e:?}"
            );
            assert!(e.transient() && !e.permanent(), "{code}");
        }
    }

    #[test]
    fn the_retry_after_comes_from_the_header_else_the_status_details() {
        let what = "patch deployments.apps shop/web";
        let from_body = classify_request(
            what,
            Failed::from(api(429, "TooManyRequests", "slow down", details(7, vec![]))),
        );
        assert_eq!(from_body.retry_after(), Some(Duration::from_secs(7)));
        let from_header = classify_request(
            what,
            Failed {
                error: api(503, "ServiceUnavailable", "x", details(7, vec![])),
                retry_after: Some(Duration::from_secs(2)),
            },
        );
        assert_eq!(from_header.retry_after(), Some(Duration::from_secs(2)));
        // The API server's own plain-text 429 (no Status): the header only.
        let plain = classify_request(
            what,
            Failed {
                error: kube::Error::Api(
                    Status::failure("Too many requests, please try again later.", "")
                        .with_code(429)
                        .boxed(),
                ),
                retry_after: Some(Duration::from_secs(1)),
            },
        );
        assert!(
            matches!(&plain, ActionError::Throttled { message, retry_after: Some(d) }
                if message == "patch deployments.apps shop/web: Too many requests, please try again later." && *d == Duration::from_secs(1)),
            "{plain:?}"
        );
    }

    #[test]
    fn a_uid_precondition_refused_as_an_immutable_field_is_a_conflict() {
        let immutable = || {
            api(
                422,
                "Invalid",
                "Deployment.apps \"web\" is invalid: metadata.uid: Invalid value: \"u1\": field is immutable",
                details(
                    0,
                    vec![StatusCause {
                        reason: "FieldValueInvalid".into(),
                        message: "Invalid value: \"u1\": field is immutable".into(),
                        field: "metadata.uid".into(),
                    }],
                ),
            )
        };
        let e = classify(&merge(Some("u1")), immutable());
        assert!(
            matches!(&e, ActionError::Conflict(m) if m.contains("precondition failed") && m.contains("u1")),
            "{e:?}"
        );
        // Without a uid precondition it is what it says: invalid.
        assert!(matches!(
            classify(&merge(None), immutable()),
            ActionError::Invalid(_)
        ));
        // A delete's uid precondition comes back as a 409 already.
        let delete = Action::Delete {
            target: target(Some("u1")),
            propagation: Propagation::Background,
        };
        assert!(matches!(
            classify(&delete, api(409, "Conflict", "the UID in the precondition (u1) does not match", None)),
            ActionError::Conflict(m) if m.starts_with("delete deployments.apps shop/web: ")
        ));
    }

    #[test]
    fn an_apply_body_the_schema_refuses_is_invalid_not_a_server_fault() {
        let apply = Action::Apply {
            target: target(None),
            object: json!({}),
            force: true,
            status: false,
        };
        // As kube-apiserver 1.35 answers an apply with a number for a string.
        let untyped = || {
            api(
                500,
                "",
                "failed to create typed patch object (shop/web; apps/v1, Kind=Deployment): .spec.replicas: expected numeric (int or float), got string",
                None,
            )
        };
        let e = classify(&apply, untyped());
        assert!(
            matches!(&e, ActionError::Invalid(m) if m.contains("does not fit the kind's schema")),
            "{e:?}"
        );
        assert!(e.permanent());
        // Any other 500, or the same words on another verb, stays a server
        // fault, retried.
        assert!(matches!(
            classify(
                &apply,
                api(500, "InternalError", "etcdserver: request timed out", None)
            ),
            ActionError::Throttled { .. }
        ));
        assert!(matches!(
            classify(&merge(None), untyped()),
            ActionError::Throttled { .. }
        ));
    }

    #[test]
    fn requests_that_cannot_be_built_are_invalid_and_transport_errors_transient() {
        let a = merge(None);
        let serde = serde_json::from_str::<Value>("{").unwrap_err();
        assert!(matches!(
            classify(&a, kube::Error::SerdeError(serde)),
            ActionError::Invalid(_)
        ));
        let build = kube::core::Request::new("/api/v1/namespaces/shop/configmaps")
            .patch("", &PatchParams::default(), &Patch::Merge(json!({})))
            .unwrap_err();
        assert!(matches!(
            classify(&a, kube::Error::BuildRequest(build)),
            ActionError::Invalid(_)
        ));
        let transport = kube::Error::Service("connection refused".into());
        assert!(matches!(
            classify(&a, transport),
            ActionError::Transient(m) if m.contains("connection refused")
        ));
    }

    #[test]
    fn a_bare_422_is_told_from_one_with_causes() {
        assert!(is_bare_422(&api(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
            None
        )));
        assert!(is_bare_422(&api(422, "Invalid", "x", details(0, vec![]))));
        assert!(!is_bare_422(&api(
            422,
            "Invalid",
            "x",
            details(
                0,
                vec![StatusCause {
                    reason: "FieldValueInvalid".into(),
                    message: "m".into(),
                    field: "spec.replicas".into(),
                }]
            )
        )));
        assert!(!is_bare_422(&api(409, "Conflict", "x", None)));
    }
}
