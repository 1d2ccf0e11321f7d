//! Typed reads of [`Object`]s and [`Delta`]s. An [`Object`] is a handle:
//! each of its methods is one host call that copies only what it returns.

use k8s_openapi::Resource;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{
    Delta, FieldValue, GroupVersionKind, HandlerError, Object, ObjectMeta, ResultExt, permanent,
};

impl FieldValue {
    /// The text, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::Text(s) => Some(s),
            _ => None,
        }
    }

    /// The text, if this is a string.
    pub fn into_string(self) -> Option<String> {
        match self {
            Self::Text(s) => Some(s),
            _ => None,
        }
    }

    /// The number, if this is an integer.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Self::Integer(i) => Some(*i),
            _ => None,
        }
    }

    /// The number, if this is an integer or a float.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            #[allow(clippy::cast_precision_loss)]
            Self::Integer(i) => Some(*i as f64),
            Self::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// The value, if this is a boolean.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Self::Boolean(b) => Some(*b),
            _ => None,
        }
    }

    /// The value as JSON (arrays and objects are parsed: costs a parse).
    pub fn to_json(&self) -> Result<Value, serde_json::Error> {
        Ok(match self {
            Self::Null => Value::Null,
            Self::Boolean(b) => Value::Bool(*b),
            Self::Integer(i) => Value::from(*i),
            Self::Float(f) => Value::from(*f),
            Self::Text(s) => Value::String(s.clone()),
            Self::Json(text) => serde_json::from_str(text)?,
        })
    }
}

/// Conveniences over the host's accessors (each is one host call unless
/// it says otherwise).
impl Object {
    /// The string at `pointer`; `None` when absent or not a string.
    pub fn field_str(&self, pointer: &str) -> Option<String> {
        self.field(pointer).and_then(FieldValue::into_string)
    }

    /// The integer at `pointer`; `None` when absent or not an integer.
    pub fn field_i64(&self, pointer: &str) -> Option<i64> {
        self.field(pointer).as_ref().and_then(FieldValue::as_i64)
    }

    /// The boolean at `pointer`; `None` when absent or not a boolean.
    pub fn field_bool(&self, pointer: &str) -> Option<bool> {
        self.field(pointer).as_ref().and_then(FieldValue::as_bool)
    }

    /// The value at `pointer` as JSON; `Ok(None)` when absent. Arrays and
    /// objects cost a parse of that subtree only.
    pub fn field_json(&self, pointer: &str) -> Result<Option<Value>, HandlerError> {
        self.field(pointer)
            .map(|v| v.to_json())
            .transpose()
            .permanent(&format!("field {pointer} is not valid JSON"))
    }

    /// Decodes the whole object into a typed value (`obj.parse::<Pod>()`);
    /// costs a full JSON parse. A mismatch is a permanent error.
    pub fn parse<K: DeserializeOwned>(&self) -> Result<K, HandlerError> {
        serde_json::from_str(&self.to_json()).permanent("cannot decode object")
    }

    /// Whether the object is of `K`'s group and kind (any version).
    pub fn is<K: Resource>(&self) -> bool {
        self.kind().is::<K>()
    }

    /// `namespace/name`, or `name` for cluster-scoped objects (two host
    /// calls).
    pub fn key(&self) -> String {
        crate::meta::key(self.namespace().as_deref(), &self.name())
    }

    /// Whether the object is being finalized (has a deletion timestamp).
    pub fn is_terminating(&self) -> bool {
        self.deletion_timestamp().is_some()
    }

    /// Whether `finalizer` is among the object's finalizers.
    pub fn has_finalizer(&self, finalizer: &str) -> bool {
        self.finalizers().iter().any(|f| f == finalizer)
    }
}

impl Delta {
    /// The delta's object, for a delta that must carry one (every type but
    /// `synced`); a permanent error when missing.
    pub fn object(&self) -> Result<&Object, HandlerError> {
        self.object.as_ref().ok_or_else(|| {
            let key = self.key();
            permanent(if key.is_empty() {
                format!("{} delta carries no object", self.delta_type)
            } else {
                format!("{} delta for {key} carries no object", self.delta_type)
            })
        })
    }

    /// `namespace/name` from the delta's scalars (no host call); `name`
    /// for cluster-scoped objects, `""` for `synced`.
    pub fn key(&self) -> String {
        crate::meta::key(self.namespace.as_deref(), &self.name)
    }

    /// The object's group/version/kind (one host call); `None` for
    /// `synced` deltas. To tell subscriptions apart for free, match on
    /// [`Delta::subscription`] instead.
    pub fn kind(&self) -> Option<GroupVersionKind> {
        self.object.as_ref().map(Object::kind)
    }

    /// Whether the delta's object is of `K`'s group and kind (one host
    /// call; `false` for `synced`).
    pub fn is<K: Resource>(&self) -> bool {
        self.object.as_ref().is_some_and(Object::is::<K>)
    }

    /// The previous state's whole metadata (`updated` deltas only; one
    /// host call that copies every label, annotation and owner).
    pub fn old_meta(&self) -> Option<ObjectMeta> {
        self.old_object.as_ref().map(Object::meta)
    }

    /// Whether this delta was handled before and failed
    /// ([`Delta::attempt`] > 1; [`Delta::last_failure`] says why).
    pub fn retried(&self) -> bool {
        self.attempt > 1
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{DeltaType, Failure};

    #[test]
    fn field_values() {
        assert_eq!(FieldValue::Text("a".into()).as_str(), Some("a"));
        assert_eq!(FieldValue::Integer(3).as_str(), None);
        assert_eq!(FieldValue::Integer(3).as_i64(), Some(3));
        assert_eq!(FieldValue::Integer(3).as_f64(), Some(3.0));
        assert_eq!(FieldValue::Float(0.5).as_f64(), Some(0.5));
        assert_eq!(FieldValue::Boolean(true).as_bool(), Some(true));
        assert_eq!(FieldValue::Null.to_json().ok(), Some(Value::Null));
        assert_eq!(
            FieldValue::Json(r#"{"a":[1]}"#.into()).to_json().ok(),
            Some(json!({"a": [1]}))
        );
        assert!(FieldValue::Json("{".into()).to_json().is_err());
    }

    #[test]
    fn a_synced_delta_has_no_object() {
        let mut d = Delta {
            delta_type: DeltaType::Synced,
            subscription: 0,
            namespace: None,
            name: String::new(),
            uid: String::new(),
            resource_version: String::new(),
            object: None,
            old_object: None,
            initial: false,
            final_state_unknown: false,
            attempt: 1,
            last_failure: None,
        };
        let e = d.object().err().map(|e| e.message().to_owned());
        assert_eq!(e.as_deref(), Some("synced delta carries no object"));
        assert!(!d.is::<k8s_openapi::api::core::v1::Pod>());
        assert!(d.kind().is_none() && d.old_meta().is_none() && !d.retried());
        d.namespace = Some("ns".into());
        d.name = "n".into();
        assert_eq!(d.key(), "ns/n");
        d.attempt = 2;
        d.last_failure = Some(Failure::Retry("later".into()));
        assert!(d.retried());
    }
}
