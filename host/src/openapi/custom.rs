//! Custom resources validated against their CustomResourceDefinition's
//! structural schema (`openAPIV3Schema`), as the API server does: on a
//! create, update, patch or status write, a value of the wrong type, a
//! missing required field, a value outside `enum`, `minimum`/`maximum`,
//! `minLength`/`maxLength` or `minItems`/`maxItems` is a 422 listing every
//! cause; fields the schema does not declare are pruned (unless
//! `x-kubernetes-preserve-unknown-fields`). A server-side apply whose body
//! does not fit the schema (a wrong type, an undeclared field) is refused
//! before that, as the server's structured merge refuses it (a 500 there).
//!
//! Not checked: CEL rules (`x-kubernetes-validations`: Kubernetes' CEL
//! environment, its libraries and cost limits, has no Rust
//! implementation), `format`s, `uniqueItems` and `multipleOf`.

use serde_json::Value;

use super::refusal::{Cause, CauseType, Invalid, Refusal, Subject};
use crate::kind::Gvk;

/// Why a server-side apply body cannot be typed against the schema (the
/// server's words after `failed to create typed patch object (...): `).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untyped(pub String);

/// The apply body `body` against `schema`: an error in the words of the
/// server's structured merge for the first field that does not fit.
pub fn check_apply(schema: &Value, body: &Value) -> Result<(), Untyped> {
    typed(schema, body, &mut String::new(), true)
}

fn typed(schema: &Value, value: &Value, path: &mut String, top: bool) -> Result<(), Untyped> {
    if value.is_null() || preserves(schema) && !schema.get("properties").is_some() {
        return Ok(());
    }
    let expected = schema.get("type").and_then(Value::as_str);
    let bad =
        |want: &str, got: &str, path: &str| Untyped(format!("{path}: expected {want}, got {got}"));
    match (expected, value) {
        (Some("object"), Value::Object(map)) => {
            for (k, v) in map {
                if top && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let len = path.len();
                path.push('.');
                path.push_str(k);
                match field_schema(schema, k) {
                    Some(s) => typed(s, v, path, false)?,
                    None if preserves(schema) => {}
                    None => return Err(Untyped(format!("{path}: field not declared in schema"))),
                }
                path.truncate(len);
            }
            Ok(())
        }
        (Some("object"), v) => Err(bad("map", go_kind(v), path)),
        (Some("array"), Value::Array(items)) => {
            let Some(item) = schema.get("items") else {
                return Ok(());
            };
            for (i, v) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                typed(item, v, path, false)?;
                path.truncate(len);
            }
            Ok(())
        }
        (Some("array"), v) => Err(bad("list", go_kind(v), path)),
        (Some("integer" | "number"), Value::Number(_)) => Ok(()),
        (Some("integer" | "number"), v) if !int_or_string(schema) => {
            Err(bad("numeric (int or float)", go_kind(v), path))
        }
        (Some("string"), Value::String(_)) => Ok(()),
        (Some("string"), v) if !int_or_string(schema) => Err(bad("string", go_kind(v), path)),
        (Some("boolean"), Value::Bool(_)) => Ok(()),
        (Some("boolean"), v) => Err(bad("boolean", go_kind(v), path)),
        _ => Ok(()),
    }
}

/// The schema of `object`'s field `key`: a declared property, else
/// `additionalProperties` when it is a schema.
fn field_schema<'a>(object: &'a Value, key: &str) -> Option<&'a Value> {
    object
        .get("properties")
        .and_then(|p| p.get(key))
        .or_else(|| object.get("additionalProperties").filter(|a| a.is_object()))
}

fn preserves(schema: &Value) -> bool {
    schema["x-kubernetes-preserve-unknown-fields"] == true
}

fn int_or_string(schema: &Value) -> bool {
    schema["x-kubernetes-int-or-string"] == true
}

/// The kind of a JSON value as the structured merge names it.
fn go_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "map",
    }
}

/// Drops what `schema` does not declare from `value` (the server's
/// pruning), keeping the object's `apiVersion`, `kind` and `metadata`.
pub fn prune(schema: &Value, value: &mut Value) {
    prune_at(schema, value, true);
}

fn prune_at(schema: &Value, value: &mut Value, top: bool) {
    match value {
        Value::Object(map) => {
            if preserves(schema) && schema.get("properties").is_none() {
                return;
            }
            let keep_unknown = preserves(schema);
            map.retain(|k, _| {
                keep_unknown
                    || (top && matches!(k.as_str(), "apiVersion" | "kind" | "metadata"))
                    || field_schema(schema, k).is_some()
            });
            for (k, v) in map.iter_mut() {
                if let Some(s) = field_schema(schema, k) {
                    prune_at(s, v, false);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                for v in items {
                    prune_at(item, v, false);
                }
            }
        }
        _ => {}
    }
}

/// Field validation of `object` (already pruned) against `schema`: every
/// cause (depth first; the server lists them in no fixed order), a 422
/// when there is any.
pub fn validate(gvk: &Gvk, schema: &Value, object: &Value) -> Result<(), Refusal> {
    let mut causes = Vec::new();
    walk(schema, object, "", true, &mut causes);
    if causes.is_empty() {
        return Ok(());
    }
    Err(Refusal::Invalid(Box::new(Invalid {
        subject: Subject::of(gvk, object),
        causes,
    })))
}

fn walk(schema: &Value, value: &Value, path: &str, top: bool, causes: &mut Vec<Cause>) {
    if value.is_null() {
        if schema["nullable"] != true
            && !top
            && let Some(ty) = schema.get("type").and_then(Value::as_str)
        {
            // A null where the schema wants a value.
            causes.push(type_cause(path, ty, value));
        }
        return;
    }
    let ty = schema.get("type").and_then(Value::as_str);
    let fits = match (ty, value) {
        (None, _) => true,
        (Some(_), _) if int_or_string(schema) => {
            value.is_string() || value.is_i64() || value.is_u64()
        }
        (Some("object"), Value::Object(_))
        | (Some("array"), Value::Array(_))
        | (Some("string"), Value::String(_))
        | (Some("boolean"), Value::Bool(_))
        | (Some("number"), Value::Number(_)) => true,
        (Some("integer"), Value::Number(n)) => n.is_i64() || n.is_u64(),
        _ => false,
    };
    if !fits {
        causes.push(type_cause(path, ty.unwrap_or_default(), value));
        return;
    }
    bounds(schema, value, path, causes);
    match value {
        Value::Object(map) => {
            for required in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if !map.contains_key(required) {
                    causes.push(Cause::required(join(path, required), ""));
                }
            }
            let fields = map.iter().filter(|(k, _)| {
                !(top && matches!(k.as_str(), "apiVersion" | "kind" | "metadata"))
            });
            for (k, v) in fields {
                if let Some(s) = field_schema(schema, k) {
                    walk(s, v, &join(path, k), false, causes);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    walk(item, v, &format!("{path}[{i}]"), false, causes);
                }
            }
        }
        _ => {}
    }
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

/// `spec.size: Invalid value: "string": spec.size in body must be of
/// type integer: "string"`.
fn type_cause(path: &str, ty: &str, value: &Value) -> Cause {
    let got = match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    Cause {
        kind: CauseType::TypeInvalid,
        field: path.to_owned(),
        value: Some(Value::from(got)),
        detail: format!("{path} in body must be of type {ty}: \"{got}\""),
    }
}

/// `enum`, `minimum`/`maximum` (exclusive too), `minLength`/`maxLength`,
/// `minItems`/`maxItems`, in the server's words.
fn bounds(schema: &Value, value: &Value, path: &str, causes: &mut Vec<Cause>) {
    let num = |k: &str| schema.get(k).and_then(Value::as_f64);
    if let Some(x) = value.as_f64() {
        let exclusive = |k: &str| schema[k] == true;
        if let Some(min) = num("minimum") {
            let (bad, words) = if exclusive("exclusiveMinimum") {
                (x <= min, "greater than")
            } else {
                (x < min, "greater than or equal to")
            };
            if bad {
                causes.push(Cause::invalid(
                    path,
                    value.clone(),
                    format!("{path} in body should be {words} {}", show(min)),
                ));
            }
        }
        if let Some(max) = num("maximum") {
            let (bad, words) = if exclusive("exclusiveMaximum") {
                (x >= max, "less than")
            } else {
                (x > max, "less than or equal to")
            };
            if bad {
                causes.push(Cause::invalid(
                    path,
                    value.clone(),
                    format!("{path} in body should be {words} {}", show(max)),
                ));
            }
        }
    }
    if let Some(s) = value.as_str() {
        // Go's regexp and this crate are both RE2: the same syntax and
        // matches. A pattern neither compiles is the CRD's problem (the
        // server refuses such a CRD): not checked here.
        if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
            && regex::Regex::new(pattern).is_ok_and(|re| !re.is_match(s))
        {
            causes.push(Cause::invalid(
                path,
                value.clone(),
                format!("{path} in body should match '{pattern}'"),
            ));
        }
        let len = s.chars().count() as f64;
        if let Some(min) = num("minLength").filter(|m| len < *m) {
            causes.push(Cause::invalid(
                path,
                value.clone(),
                format!("{path} in body should be at least {} chars long", show(min)),
            ));
        }
        if let Some(max) = num("maxLength").filter(|m| len > *m) {
            causes.push(Cause {
                kind: CauseType::TooLong,
                field: path.to_owned(),
                value: None,
                detail: format!("may not be more than {} bytes", show(max)),
            });
        }
    }
    if let Some(items) = value.as_array() {
        let len = items.len() as f64;
        if let Some(min) = num("minItems").filter(|m| len < *m) {
            causes.push(Cause::invalid(
                path,
                value.clone(),
                format!("{path} in body should have at least {} items", show(min)),
            ));
        }
        if let Some(max) = num("maxItems").filter(|m| len > *m) {
            causes.push(Cause {
                kind: CauseType::TooMany,
                field: path.to_owned(),
                value: Some(Value::from(items.len())),
                detail: format!("must have at most {} items", show(max)),
            });
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let list: Vec<String> = allowed
            .iter()
            .map(|a| super::refusal::go_value(Some(a)))
            .collect();
        causes.push(Cause {
            kind: CauseType::NotSupported,
            field: path.to_owned(),
            value: Some(value.clone()),
            detail: format!("supported values: {}", list.join(", ")),
        });
    }
}

/// A bound as Go prints it (`1`, not `1.0`).
fn show(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        x.to_string()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["size"], "properties": {
                "size": {"type": "integer", "minimum": 1},
                "color": {"type": "string", "enum": ["red", "blue"]},
                "label": {"type": "string", "pattern": "^[a-z]+$"},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}}})
    }

    fn widget(spec: Value) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "a", "namespace": "default"}, "spec": spec})
    }

    fn message(spec: Value) -> String {
        let gvk = Gvk::new("example.com", "v1", "Widget");
        let mut obj = widget(spec);
        prune(&schema(), &mut obj);
        validate(&gvk, &schema(), &obj)
            .map(|()| String::new())
            .unwrap_or_else(|r| r.status().message)
    }

    /// The server's words, as the harness's kube-apiserver answered the
    /// same writes.
    #[test]
    fn refusals_read_as_the_servers() {
        assert_eq!(
            message(json!({"size": "big"})),
            r#"Widget.example.com "a" is invalid: spec.size: Invalid value: "string": spec.size in body must be of type integer: "string""#
        );
        assert_eq!(
            message(json!({"color": "red"})),
            r#"Widget.example.com "a" is invalid: spec.size: Required value"#
        );
        // (The server lists several causes in no fixed order.)
        let both = message(json!({"size": 0, "color": "green"}));
        for cause in [
            "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1",
            r#"spec.color: Unsupported value: "green": supported values: "red", "blue""#,
        ] {
            assert!(both.contains(cause), "{both}");
        }
        assert_eq!(message(json!({"size": 2, "bogus": 1})), "");
        assert_eq!(
            message(json!({"size": 2, "label": "ABC"})),
            r#"Widget.example.com "a" is invalid: spec.label: Invalid value: "ABC": spec.label in body should match '^[a-z]+$'"#
        );
    }

    #[test]
    fn undeclared_fields_are_pruned_except_where_preserved() {
        let mut obj = widget(json!({"size": 2, "bogus": 1, "free": {"x": 1}}));
        obj["extra"] = json!(true);
        prune(&schema(), &mut obj);
        assert_eq!(obj["spec"], json!({"size": 2, "free": {"x": 1}}));
        assert!(obj.get("extra").is_none());
        assert_eq!(obj["metadata"]["name"], "a");
    }

    #[test]
    fn an_apply_body_must_fit_the_schema() {
        assert_eq!(
            check_apply(&schema(), &widget(json!({"size": "big"}))),
            Err(Untyped(
                ".spec.size: expected numeric (int or float), got string".into()
            ))
        );
        assert_eq!(
            check_apply(&schema(), &widget(json!({"size": 2, "bogus": 1}))),
            Err(Untyped(".spec.bogus: field not declared in schema".into()))
        );
        assert_eq!(
            check_apply(&schema(), &widget(json!({"size": 2, "free": {"x": 1}}))),
            Ok(())
        );
    }
}
