//! What can go wrong reading a protobuf object: each error says where in the
//! object (the JSON path written so far) and keeps its cause.

/// A protobuf object the transcoder could not turn into JSON.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    /// The bytes do not start with `k8s\0`: not the API server's protobuf.
    #[error("not a Kubernetes protobuf object: the `k8s\\0` magic is missing")]
    Magic,
    /// The envelope (`runtime.Unknown`) or a message inside it is not
    /// valid protobuf.
    #[error("malformed protobuf at {path}: {reason}")]
    Wire { path: String, reason: &'static str },
    /// The envelope names a kind the generated table does not hold (a
    /// custom resource, or a kind newer than the table).
    #[error("no protobuf schema for {api_version}/{kind} (only built-in kinds are transcoded)")]
    Unsupported { api_version: String, kind: String },
    /// The envelope says its object is compressed or not protobuf.
    #[error("envelope holds {what} {value:?}, which the transcoder does not read")]
    Encoding { what: &'static str, value: String },
    /// An embedded JSON value (RawExtension, FieldsV1, apiextensions JSON)
    /// is not JSON: Go's encoder refuses it too.
    #[error("embedded JSON at {path} is invalid")]
    EmbeddedJson {
        path: String,
        #[source]
        cause: serde_json::Error,
    },
    /// A value Go's encoder refuses (an IntOrString of unknown type, a
    /// time outside years 0-9999, a float that is not finite).
    #[error("value at {path} has no JSON form: {reason}")]
    Value { path: String, reason: String },
    /// The generated table itself is malformed (a build from a bad edit of
    /// schema.txt): every transcode fails with this.
    #[error("proto schema table, line {line}: {reason}")]
    Schema { line: usize, reason: String },
}

/// Results of this module.
pub type Result<T, E = ProtoError> = std::result::Result<T, E>;

impl ProtoError {
    pub(crate) fn wire(reason: &'static str) -> Self {
        ProtoError::Wire {
            path: String::new(),
            reason,
        }
    }

    /// The same error one level further out: `segment` is a field's JSON
    /// name, or `[3]` / `["key"]` for an item or a map entry. Built while
    /// the error unwinds, so the happy path keeps no path at all.
    pub(crate) fn within(mut self, segment: &str) -> Self {
        if let ProtoError::Wire { path, .. }
        | ProtoError::EmbeddedJson { path, .. }
        | ProtoError::Value { path, .. } = &mut self
        {
            let dot = if path.is_empty() || path.starts_with('[') {
                ""
            } else {
                "."
            };
            *path = format!("{segment}{dot}{path}");
        }
        self
    }
}
