//! The fixture file: what `kubewasm test` reads (and `--update` writes
//! back). Its types are the format: serde reads them (unknown keys are
//! errors), schemars makes the JSON Schema editors check them with, and
//! the observed outcome of a call is written with the same types, so a
//! recording from a real cluster (cache snapshot, deltas received, actions
//! emitted, results) is a fixture too.

use std::path::{Path, PathBuf};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// The clock a case starts at unless it says otherwise.
pub const DEFAULT_CLOCK: &str = "2026-01-01T00:00:00Z";

/// A fixture file: test cases for one plugin, run with
/// `kubewasm test PLUGIN.wasm FIXTURE...`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(title = "kubewasm test fixture")]
pub struct Fixture {
    /// Objects every case's cache starts with (each case adds its own).
    #[serde(default, skip_serializing_if = "Cache::is_empty")]
    pub cache: Cache,
    /// JSON pointers ignored in every case's comparisons (see `Case.volatile`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volatile: Vec<String>,
    /// The sidecar of every case that names none (relative to this file);
    /// else `--sidecar`, else the plugin's own (`NAME.yaml` beside it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sidecar: Option<PathBuf>,
    /// The plugin config of every case that gives none (replaces the
    /// sidecar's `config`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Value>,
    /// The clock of every case that gives none (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<String>,
    /// Every case's actions are answered (failures, preconditions, not
    /// found) but not applied: the cluster changes only by the steps'
    /// deltas. What `kubewasm record` writes, since its actions went to the
    /// API server as a server-side dry run and later deltas never saw them.
    #[serde(default, skip_serializing_if = "is_false")]
    pub dry_run: bool,
    pub cases: Vec<Case>,
}

/// One test: a fresh plugin instance, a simulated cluster, steps.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Case {
    /// Unique in the file; `--filter` matches it.
    pub name: String,
    /// The sidecar (limits, access, grants, config) the plugin runs with,
    /// relative to this file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sidecar: Option<PathBuf>,
    /// The plugin's config (what `register` receives), replacing the
    /// sidecar's `config`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Value>,
    /// When the virtual clock starts (RFC 3339, default
    /// `2026-01-01T00:00:00Z`). It moves only by `advance`, retry backoffs
    /// and requeues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<String>,
    /// Seed of everything random (retry jitter, WASI random); `--seed`
    /// overrides it; unset, a random seed is used and printed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The simulated cluster the plugin's caches are served from, added to
    /// the file's `cache`.
    #[serde(default, skip_serializing_if = "Cache::is_empty")]
    pub cache: Cache,
    /// JSON pointers ignored when comparing actions and Events, into each
    /// entry as written here (`/apply/object/metadata/annotations/stamp`,
    /// `/note`); a `*` segment matches any key or index.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volatile: Vec<String>,
    /// Simulated API server answers for every step's actions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<Failure>,
    /// This case's actions are answered but not applied (see the file's
    /// `dryRun`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub dry_run: bool,
    /// Compare the log lines of every call (`--update` records them).
    #[serde(default, skip_serializing_if = "is_false")]
    pub logs: bool,
    /// The host must refuse to load the plugin with an error containing
    /// this text (an access list that does not grant what it registers, a
    /// bad config); no step runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<Step>,
}

/// Objects in the simulated cluster. Missing `uid`, `resourceVersion`,
/// `creationTimestamp` and `generation` are filled in as the API server
/// would (uids derived from the object's kind and name).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Cache {
    /// A folder (or file) of YAML/JSON manifests, relative to this file,
    /// read as `kubewasm run --local` reads one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifests: Option<PathBuf>,
    /// Objects, after the manifests (one with the same kind, namespace and
    /// name replaces the manifest's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "objects_schema")]
    pub objects: Vec<Value>,
}

fn is_false(b: &bool) -> bool {
    !b
}

impl Cache {
    fn is_empty(&self) -> bool {
        self.manifests.is_none() && self.objects.is_empty()
    }
}

/// What a step delivers, and what it must lead to. A step delivers one of:
/// a `delta`, the `initialList`, or the next `pending` retry or requeue.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Step {
    /// A note for readers, shown when the step fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Moves the clock forward first (`30s`, `5m`).
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<String>")]
    pub advance: Option<Duration>,
    /// Deliver a delta of this type. The cluster changes first, as an
    /// informer applies an event before emitting it: `added`/`updated`
    /// store `object`, `deleted` removes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<DeltaKind>,
    /// Deliver every cached object the plugin's subscriptions see, as
    /// initial `added` deltas (subscription by subscription, objects by
    /// namespace and name), then `synced` to each subscription asking for it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub initial_list: bool,
    /// Deliver the next pending retry or requeue (the earliest due), the
    /// clock jumping to when it is due; the object is its current cached
    /// state, as the host's level-triggered retries deliver it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub pending: bool,
    /// The delta's object: inline, or a reference to a cached object
    /// (`configmaps team-a/settings`, `ConfigMap team-a/settings`,
    /// `namespaces team-a`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<ObjectOrRef>,
    /// The old object of an `updated` delta (default: the cached state
    /// before the update).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old: Option<ObjectOrRef>,
    /// Deliver only to this subscription (its index in the registration);
    /// default: every subscription whose cache sees the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscription: Option<u32>,
    /// Mark an `added` delta as part of an initial list.
    #[serde(default, skip_serializing_if = "is_false")]
    pub initial: bool,
    /// Mark a `deleted` delta as discovered by a relist.
    #[serde(default, skip_serializing_if = "is_false")]
    pub final_state_unknown: bool,
    /// Simulated API server answers for this step's actions (after the
    /// case's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<Failure>,
    /// The calls this step makes, in order (none: the plugin is not called,
    /// e.g. its subscription filters the delta out). Missing: the step
    /// fails until `--update` records what the plugin does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<Vec<Call>>,
}

/// The type of a delivered delta.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum DeltaKind {
    Added,
    Updated,
    Deleted,
    Resync,
    Synced,
}

/// An object inline, or a reference to a cached one.
#[derive(Debug, Clone, PartialEq)]
pub enum ObjectOrRef {
    /// `KIND [NAMESPACE/]NAME`, KIND a resource (`configmaps`,
    /// `deployments.apps`) or a kind (`ConfigMap`).
    Ref(String),
    Object(serde_json::Map<String, Value>),
}

impl<'de> Deserialize<'de> for ObjectOrRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(ObjectOrRef::Ref(s)),
            Value::Object(o) => Ok(ObjectOrRef::Object(o)),
            other => Err(serde::de::Error::custom(format!(
                "expected an object (a map with apiVersion, kind and metadata) or a reference such as \"configmaps team-a/settings\", found {other}"
            ))),
        }
    }
}

impl Serialize for ObjectOrRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ObjectOrRef::Ref(r) => s.serialize_str(r),
            ObjectOrRef::Object(o) => o.serialize(s),
        }
    }
}

impl JsonSchema for ObjectOrRef {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ObjectOrRef".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "An object inline (apiVersion, kind, metadata...), or a reference to a cached object: `KIND [NAMESPACE/]NAME` (`configmaps team-a/settings`, `ConfigMap team-a/settings`).",
            "anyOf": [
                {"type": "string", "pattern": "^\\S+ \\S+$"},
                {"type": "object", "required": ["apiVersion", "kind", "metadata"]}
            ]
        })
    }
}

fn objects_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {"type": "object", "required": ["apiVersion", "kind", "metadata"]}
    })
}

fn any_value(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!(true)
}

/// A simulated answer of the API server to the actions it matches. Every
/// selector given must match; none: every action.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Failure {
    /// The action's position in its call, from 1 (as the host's messages
    /// count: "action 1 of 2").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub action: Option<u32>,
    /// The action's verb.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verb: Option<Verb>,
    /// The action's target: `configmaps team-a/settings` (a kind works too:
    /// `ConfigMap team-a/settings`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// What the server answers.
    pub error: SimulatedError,
    /// How many attempts fail before the server accepts (the executor
    /// retries throttling, server errors and timeouts itself); default:
    /// every attempt in the steps it applies to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub times: Option<u32>,
    /// The server's message (default: the API server's usual wording).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A `Retry-After` for `throttled` and `serverError`.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<String>")]
    pub retry_after: Option<Duration>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Verb {
    Apply,
    ApplyStatus,
    Patch,
    Delete,
    Event,
}

impl Verb {
    /// The verb a failure rule names `action` by.
    pub fn of(action: &crate::actions::Action) -> Verb {
        use crate::actions::Action;
        match action {
            Action::Apply { status: false, .. } => Verb::Apply,
            Action::Apply { status: true, .. } => Verb::ApplyStatus,
            Action::Patch { .. } => Verb::Patch,
            Action::Delete { .. } => Verb::Delete,
            Action::Event { .. } => Verb::Event,
        }
    }
}

/// A simulated API server answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SimulatedError {
    /// 409: handed back to the plugin (`conflict`), retried with backoff.
    Conflict,
    /// 401.
    Unauthorized,
    /// 403: retried with backoff.
    Forbidden,
    /// 404: success for a delete, else retried with backoff.
    NotFound,
    /// 422: invalid, never retried (the delta is dead).
    Invalid,
    /// 429: retried by the executor, then with backoff.
    Throttled,
    /// 500: retried by the executor, then with backoff.
    ServerError,
    /// No answer within the executor's timeout.
    Timeout,
}

/// One handler call: what it was given (`call`), how it ended, what it
/// emitted.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Call {
    /// The delta, in a few words (`added configmaps platform/ca-bundle`,
    /// `requeue ...`, `... (attempt 2, after conflict)`); checked when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    /// When the call was made on the virtual clock (RFC 3339, ms);
    /// checked when given, and then kept up to date by `--update`. Retry
    /// times depend on the seed: pin `seed` where they are checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    pub result: CallResult,
    /// The writes it emitted, in order (none when left out).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<ActionEntry>,
    /// The Events it emitted, in order (none when left out).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<EventEntry>,
    /// Its log lines (`INFO message key="value"`, `OUTPUT` for printed
    /// lines); checked when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<Vec<String>>,
}

/// How a call ended, after its actions ran. A message given here must be
/// contained in the actual one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallResult {
    /// Done, its actions all executed.
    Ok,
    /// Done; the host delivers the object again after this long.
    RequeueAfter(Duration),
    /// The handler asked to be retried; the host retries with backoff.
    Retry(Option<String>),
    /// The handler gave up; the delta is dead.
    Permanent(Option<String>),
    /// An action hit a conflict; the next attempt says so.
    Conflict(Option<String>),
    /// An action failed (retried with backoff unless invalid).
    ActionFailed(Option<String>),
    /// The call trapped, timed out or went over a limit; retried.
    Trapped(Option<String>),
}

const RESULT_KINDS: &str = "ok, requeueAfter, retry, permanent, conflict, actionFailed or trapped";

impl CallResult {
    /// The kind's name, as written.
    pub fn kind(&self) -> &'static str {
        match self {
            CallResult::Ok => "ok",
            CallResult::RequeueAfter(_) => "requeueAfter",
            CallResult::Retry(_) => "retry",
            CallResult::Permanent(_) => "permanent",
            CallResult::Conflict(_) => "conflict",
            CallResult::ActionFailed(_) => "actionFailed",
            CallResult::Trapped(_) => "trapped",
        }
    }

    pub fn message(&self) -> Option<&str> {
        match self {
            CallResult::Ok | CallResult::RequeueAfter(_) => None,
            CallResult::Retry(m)
            | CallResult::Permanent(m)
            | CallResult::Conflict(m)
            | CallResult::ActionFailed(m)
            | CallResult::Trapped(m) => m.as_deref(),
        }
    }

    /// Whether `observed` satisfies this expectation: the same kind and
    /// duration, and this message (when given) contained in its message.
    pub fn accepts(&self, observed: &CallResult) -> bool {
        match (self, observed) {
            (CallResult::RequeueAfter(a), CallResult::RequeueAfter(b)) => a == b,
            _ if self.kind() != observed.kind() => false,
            _ => match (self.message(), observed.message()) {
                (None, _) => true,
                (Some(want), Some(got)) => got.contains(want),
                (Some(_), None) => false,
            },
        }
    }

    fn with_message(kind: &str, m: Option<String>) -> Option<Self> {
        Some(match kind {
            "retry" => CallResult::Retry(m),
            "permanent" => CallResult::Permanent(m),
            "conflict" => CallResult::Conflict(m),
            "actionFailed" => CallResult::ActionFailed(m),
            "trapped" => CallResult::Trapped(m),
            _ => return None,
        })
    }
}

impl Serialize for CallResult {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            CallResult::Ok => s.serialize_str("ok"),
            CallResult::RequeueAfter(d) => {
                let mut map = serde_json::Map::new();
                map.insert(
                    "requeueAfter".into(),
                    Value::String(humantime::format_duration(*d).to_string()),
                );
                map.serialize(s)
            }
            other => match other.message() {
                None => s.serialize_str(other.kind()),
                Some(m) => {
                    let mut map = serde_json::Map::new();
                    map.insert(other.kind().into(), Value::String(m.to_owned()));
                    map.serialize(s)
                }
            },
        }
    }
}

impl<'de> Deserialize<'de> for CallResult {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let bad = |found: &dyn std::fmt::Display| {
            D::Error::custom(format!(
                "expected one of {RESULT_KINDS} (`requeueAfter: 30s`; a message to look for as `retry: text`), found {found}"
            ))
        };
        match Value::deserialize(d)? {
            Value::String(s) if s == "ok" => Ok(CallResult::Ok),
            Value::String(s) => CallResult::with_message(&s, None).ok_or_else(|| bad(&s)),
            Value::Object(map) if map.len() == 1 => {
                let Some((k, v)) = map.into_iter().next() else {
                    return Err(bad(&"an empty map"));
                };
                if k == "requeueAfter" {
                    let text = v.as_str().ok_or_else(|| {
                        D::Error::custom("requeueAfter: expected a duration such as 30s or 1m")
                    })?;
                    let d = humantime::parse_duration(text).map_err(|e| {
                        D::Error::custom(format!("requeueAfter: {text:?} is not a duration: {e}"))
                    })?;
                    return Ok(CallResult::RequeueAfter(d));
                }
                let message = match v {
                    Value::Null => None,
                    Value::String(s) => Some(s),
                    other => {
                        return Err(D::Error::custom(format!(
                            "{k}: expected a message (text), found {other}"
                        )));
                    }
                };
                CallResult::with_message(&k, message).ok_or_else(|| bad(&k))
            }
            other => Err(bad(&other)),
        }
    }
}

impl JsonSchema for CallResult {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "CallResult".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let with_message = |k: &str, what: &str| {
            serde_json::json!({
                "type": "object",
                "description": what,
                "properties": {k: {"type": ["string", "null"]}},
                "required": [k],
                "additionalProperties": false
            })
        };
        schemars::json_schema!({
            "description": "How the call ended, after its actions ran. A message given must be contained in the actual one.",
            "anyOf": [
                {"enum": ["ok", "retry", "permanent", "conflict", "actionFailed", "trapped"]},
                {
                    "type": "object",
                    "description": "Done; the host delivers the object again after this long.",
                    "properties": {"requeueAfter": {"type": "string"}},
                    "required": ["requeueAfter"],
                    "additionalProperties": false
                },
                with_message("retry", "The handler asked to be retried."),
                with_message("permanent", "The handler gave up; the delta is dead."),
                with_message("conflict", "An action hit a conflict; the next attempt says so."),
                with_message("actionFailed", "An action failed (retried unless invalid)."),
                with_message("trapped", "The call trapped, timed out or went over a limit.")
            ]
        })
    }
}

/// A write a call emitted: a map with one key, the verb.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[schemars(rename_all = "camelCase")]
pub enum ActionEntry {
    /// Server-side apply.
    Apply(Apply),
    /// Server-side apply of the status subresource.
    ApplyStatus(ApplyStatus),
    Patch(Patch),
    Delete(Delete),
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Apply {
    #[serde(default = "yes")]
    pub force: bool,
    #[serde(default, skip_serializing_if = "Preconditions::is_empty")]
    pub preconditions: Preconditions,
    #[schemars(schema_with = "any_value")]
    pub object: Value,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ApplyStatus {
    #[serde(default, skip_serializing_if = "Preconditions::is_empty")]
    pub preconditions: Preconditions,
    #[schemars(schema_with = "any_value")]
    pub object: Value,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Patch {
    /// `configmaps team-a/settings`.
    pub target: String,
    #[serde(rename = "type")]
    pub patch_type: PatchKind,
    #[serde(default, skip_serializing_if = "Preconditions::is_empty")]
    pub preconditions: Preconditions,
    #[schemars(schema_with = "any_value")]
    pub patch: Value,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Delete {
    /// `configmaps team-a/settings`.
    pub target: String,
    #[serde(default)]
    pub propagation: PropagationKind,
    #[serde(default, skip_serializing_if = "Preconditions::is_empty")]
    pub preconditions: Preconditions,
}

impl ActionEntry {
    fn verb(&self) -> &'static str {
        match self {
            ActionEntry::Apply(_) => "apply",
            ActionEntry::ApplyStatus(_) => "applyStatus",
            ActionEntry::Patch(_) => "patch",
            ActionEntry::Delete(_) => "delete",
        }
    }
}

impl Serialize for ActionEntry {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(1))?;
        match self {
            ActionEntry::Apply(a) => map.serialize_entry(self.verb(), a)?,
            ActionEntry::ApplyStatus(a) => map.serialize_entry(self.verb(), a)?,
            ActionEntry::Patch(p) => map.serialize_entry(self.verb(), p)?,
            ActionEntry::Delete(d) => map.serialize_entry(self.verb(), d)?,
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for ActionEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        const VERBS: &str = "apply, applyStatus, patch or delete";
        let Value::Object(map) = Value::deserialize(d)? else {
            return Err(D::Error::custom(format!(
                "expected a map with one key, the verb ({VERBS})"
            )));
        };
        if map.len() != 1 {
            return Err(D::Error::custom(format!(
                "expected one key, the verb ({VERBS}), found {}",
                map.keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let Some((verb, body)) = map.into_iter().next() else {
            return Err(D::Error::custom("empty action"));
        };
        let inner = |e: serde_json::Error| D::Error::custom(format!("{verb}: {e}"));
        Ok(match verb.as_str() {
            "apply" => ActionEntry::Apply(serde_json::from_value(body).map_err(inner)?),
            "applyStatus" => ActionEntry::ApplyStatus(serde_json::from_value(body).map_err(inner)?),
            "patch" => ActionEntry::Patch(serde_json::from_value(body).map_err(inner)?),
            "delete" => ActionEntry::Delete(serde_json::from_value(body).map_err(inner)?),
            other => {
                return Err(D::Error::custom(format!(
                    "unknown action {other:?}: expected {VERBS}"
                )));
            }
        })
    }
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Preconditions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
}

impl Preconditions {
    pub fn is_empty(&self) -> bool {
        self.uid.is_none() && self.resource_version.is_none()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PatchKind {
    /// RFC 7386 JSON merge patch.
    Merge,
    /// RFC 6902 JSON patch.
    Json,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PropagationKind {
    #[default]
    Background,
    Foreground,
    Orphan,
}

/// An Event a call emitted.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EventEntry {
    /// `pods shop/web-1`.
    pub regarding: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regarding_uid: Option<String>,
    #[serde(rename = "type")]
    pub event_type: EventKind,
    pub reason: String,
    pub note: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum EventKind {
    Normal,
    Warning,
}

/// Why a fixture cannot be run: the file, the case and the field, and
/// what to do.
#[derive(Debug, thiserror::Error)]
#[error("{}: {}{field}: {message}", file.display(), case.as_ref().map(|(i, n)| format!("case {} ({n:?}): ", i + 1)).unwrap_or_default())]
pub struct FixtureError {
    pub file: PathBuf,
    /// Index and name of the case.
    pub case: Option<(usize, String)>,
    /// Where in the file (`cases[1].steps[0].object`).
    pub field: String,
    pub message: String,
}

/// The hint every parse error ends with.
const SCHEMA_HINT: &str = "(the format: docs/fixture.schema.json, or `kubewasm test --schema`)";

impl Fixture {
    /// Reads and checks a fixture file.
    pub fn load(path: &Path) -> Result<Self, FixtureError> {
        let text = std::fs::read_to_string(path).map_err(|e| FixtureError {
            file: path.to_owned(),
            case: None,
            field: "(file)".into(),
            message: format!("cannot read: {e} (pass an existing fixture file)"),
        })?;
        let fixture = Self::parse(path, &text)?;
        fixture.check(path)?;
        Ok(fixture)
    }

    /// Parses `text`; an error names the field (and the case it is in).
    pub fn parse(path: &Path, text: &str) -> Result<Self, FixtureError> {
        let de = serde_yaml_ng::Deserializer::from_str(text);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let field = e.path().to_string();
            let case = case_of(&field, text);
            // serde_yaml_ng's message ends with the position, and may
            // start with (part of) the path, which is already named.
            let message = e.into_inner().to_string();
            let message = match message.split_once(": ") {
                Some((head, rest))
                    if !head.contains(' ') && (head.contains('[') || head.contains('.')) =>
                {
                    rest.to_owned()
                }
                _ => message,
            };
            FixtureError {
                file: path.to_owned(),
                case,
                field: if field == "." {
                    "(document)".into()
                } else {
                    field
                },
                message: format!("{message} {SCHEMA_HINT}"),
            }
        })
    }

    /// What the types cannot say: one delivery per step, the fields each
    /// needs, unique case names, parseable clocks and pointers.
    fn check(&self, path: &Path) -> Result<(), FixtureError> {
        let err = |case: Option<(usize, &Case)>, field: String, message: String| FixtureError {
            file: path.to_owned(),
            case: case.map(|(i, c)| (i, c.name.clone())),
            field,
            message,
        };
        if self.cases.is_empty() {
            return Err(err(
                None,
                "cases".into(),
                "no case: add at least one under `cases:`".into(),
            ));
        }
        if let Some(c) = &self.clock {
            parse_clock(c).map_err(|m| err(None, "clock".into(), m))?;
        }
        for p in &self.volatile {
            check_pointer(p).map_err(|m| err(None, "volatile".into(), m))?;
        }
        let mut names = std::collections::HashSet::new();
        for (i, case) in self.cases.iter().enumerate() {
            let at = |f: &str| format!("cases[{i}].{f}");
            let e = |f: &str, m: String| err(Some((i, case)), at(f), m);
            if case.name.trim().is_empty() {
                return Err(e("name", "empty: give the case a name".into()));
            }
            if !names.insert(case.name.as_str()) {
                return Err(e(
                    "name",
                    "another case has this name: names must be unique in a file".into(),
                ));
            }
            if let Some(c) = &case.clock {
                parse_clock(c).map_err(|m| e("clock", m))?;
            }
            for (j, p) in case.volatile.iter().enumerate() {
                check_pointer(p).map_err(|m| e(&format!("volatile[{j}]"), m))?;
            }
            if case.refused.is_some() && !case.steps.is_empty() {
                return Err(e(
                    "steps",
                    "a case with `refused` runs no step: drop the steps or `refused`".into(),
                ));
            }
            if case.refused.is_none() && case.steps.is_empty() {
                return Err(e(
                    "steps",
                    "no step: add a step (`- delta: added` with an `object`, `- initialList: true` or `- pending: true`)".into(),
                ));
            }
            for (j, step) in case.steps.iter().enumerate() {
                step.check()
                    .map_err(|(f, m)| e(&format!("steps[{j}].{f}"), m))?;
            }
        }
        Ok(())
    }
}

impl Step {
    /// (field, message) of the first thing wrong.
    fn check(&self) -> Result<(), (&'static str, String)> {
        let deliveries = usize::from(self.delta.is_some())
            + usize::from(self.initial_list)
            + usize::from(self.pending);
        if deliveries != 1 {
            return Err((
                "delta",
                format!(
                    "a step delivers exactly one of `delta`, `initialList: true` and `pending: true` (found {deliveries})"
                ),
            ));
        }
        let Some(kind) = self.delta else {
            for (field, set) in [
                ("object", self.object.is_some()),
                ("old", self.old.is_some()),
                ("subscription", self.subscription.is_some()),
                ("initial", self.initial),
                ("finalStateUnknown", self.final_state_unknown),
            ] {
                if set {
                    return Err((
                        field,
                        format!("`{field}` belongs to a `delta` step; drop it"),
                    ));
                }
            }
            return Ok(());
        };
        match kind {
            DeltaKind::Synced => {
                if self.object.is_some() {
                    return Err(("object", "a `synced` delta carries no object".into()));
                }
                if self.subscription.is_none() {
                    return Err((
                        "subscription",
                        "a `synced` delta is for one subscription: give its index".into(),
                    ));
                }
            }
            _ if self.object.is_none() => {
                return Err((
                    "object",
                    "the delta's object is missing: inline, or a cached one as `configmaps team-a/settings`".into(),
                ));
            }
            _ => {}
        }
        if self.old.is_some() && kind != DeltaKind::Updated {
            return Err(("old", "only an `updated` delta has an old object".into()));
        }
        if self.initial && kind != DeltaKind::Added {
            return Err(("initial", "only an `added` delta can be initial".into()));
        }
        if self.final_state_unknown && kind != DeltaKind::Deleted {
            return Err((
                "finalStateUnknown",
                "only a `deleted` delta can have an unknown final state".into(),
            ));
        }
        Ok(())
    }
}

/// The case a serde path (`cases[2].steps[0]...`) is in, with its name as
/// far as the text can be read.
fn case_of(path: &str, text: &str) -> Option<(usize, String)> {
    let rest = path.strip_prefix("cases[")?;
    let index: usize = rest.split(']').next()?.parse().ok()?;
    let name = serde_yaml_ng::from_str::<Value>(text)
        .ok()
        .and_then(|v| v["cases"][index]["name"].as_str().map(str::to_owned))
        .unwrap_or_default();
    Some((index, name))
}

/// An RFC 3339 instant (`2026-01-01T00:00:00Z`).
pub fn parse_clock(text: &str) -> Result<std::time::SystemTime, String> {
    humantime::parse_rfc3339_weak(text)
        .map_err(|e| format!("{text:?} is not an RFC 3339 time ({e}); write e.g. {DEFAULT_CLOCK}"))
}

fn check_pointer(p: &str) -> Result<(), String> {
    if p.starts_with('/') {
        Ok(())
    } else {
        Err(format!(
            "{p:?} is not a JSON pointer: start it with '/' (e.g. /apply/object/metadata/annotations/stamp)"
        ))
    }
}

/// The fixture format's JSON Schema.
pub fn schema() -> Value {
    let schema = schemars::schema_for!(Fixture);
    schema.to_value()
}

/// The schema as `kubewasm test --schema` prints it and
/// docs/fixture.schema.json holds it.
pub fn schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&schema()).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse(text: &str) -> Result<Fixture, FixtureError> {
        let f = Fixture::parse(Path::new("f.yaml"), text)?;
        f.check(Path::new("f.yaml"))?;
        Ok(f)
    }

    #[test]
    fn a_full_case_parses() {
        let f = parse(
            r#"
cache:
  objects:
    - {apiVersion: v1, kind: Namespace, metadata: {name: a}}
cases:
  - name: one
    clock: 2026-02-01T10:00:00Z
    volatile: [/apply/object/metadata/annotations/stamp]
    steps:
      - delta: added
        object: {apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: a}}
        failures:
          - {action: 1, error: conflict, times: 1}
        expect:
          - call: added configmaps a/c
            result: {requeueAfter: 30s}
            actions:
              - apply:
                  object: {apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: b}}
              - delete: {target: configmaps b/old, preconditions: {uid: u1}}
            events:
              - {regarding: configmaps a/c, type: Normal, reason: Copied, note: ok}
      - pending: true
        expect:
          - result: {conflict: modified}
          - result: retry
"#,
        )
        .unwrap();
        let case = &f.cases[0];
        assert_eq!(case.steps.len(), 2);
        let calls = case.steps[0].expect.as_ref().unwrap();
        assert_eq!(
            calls[0].result,
            CallResult::RequeueAfter(Duration::from_secs(30))
        );
        match &calls[0].actions[0] {
            ActionEntry::Apply(a) => assert!(a.force),
            other => panic!("{other:?}"),
        }
        match &calls[0].actions[1] {
            ActionEntry::Delete(d) => {
                assert_eq!(d.propagation, PropagationKind::Background);
            }
            other => panic!("{other:?}"),
        }
        let later = case.steps[1].expect.as_ref().unwrap();
        assert_eq!(
            later[0].result,
            CallResult::Conflict(Some("modified".into()))
        );
        assert_eq!(later[1].result, CallResult::Retry(None));
    }

    #[test]
    fn errors_name_the_file_the_case_and_the_field() {
        let e = parse(
            "cases:\n  - name: first\n    steps: [{pending: true}]\n  - name: second\n    steps:\n      - delta: added\n        object: configmaps a/b\n        expect:\n          - result: retyr\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("f.yaml: case 2 (\"second\"): cases[1].steps[0].expect[0].result: expected one of ok,"), "{e}");
        assert!(e.contains("found retyr"), "{e}");
        assert!(e.contains("kubewasm test --schema"), "{e}");

        let e =
            parse("cases:\n  - name: x\n    steps:\n      - delta: added\n        objetc: {}\n")
                .unwrap_err()
                .to_string();
        assert!(e.contains("cases[0].steps[0].objetc"), "{e}");
        assert!(e.contains("unknown field `objetc`"), "{e}");

        let e = parse("cases:\n  - name: x\n    steps:\n      - delta: added\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("case 1 (\"x\"): cases[0].steps[0].object: the delta's object is missing"),
            "{e}"
        );

        let e =
            parse("cases:\n  - name: x\n    steps:\n      - {pending: true, initialList: true}\n")
                .unwrap_err()
                .to_string();
        assert!(e.contains("exactly one of"), "{e}");

        let e = parse("cases:\n  - name: x\n    clock: yesterday\n    steps: [{pending: true}]\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cases[0].clock: \"yesterday\" is not an RFC 3339 time"),
            "{e}"
        );
    }

    /// What a recorder writes reads back the same: the types serialize to
    /// the format they parse.
    #[test]
    fn a_fixture_written_from_the_types_parses_back() {
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../plugins/config-replicator/tests/replicate.yaml"),
        )
        .unwrap();
        let f = parse(&text).unwrap();
        let written = serde_yaml_ng::to_string(&f).unwrap();
        let again = parse(&written).unwrap();
        assert_eq!(
            serde_json::to_value(&again).unwrap(),
            serde_json::to_value(&f).unwrap()
        );
        assert_eq!(again.cases.len(), 7);
        assert!(!written.contains("initialList: false"), "{written}");
        assert!(
            written.contains(
                "    failures:\n    - action: 2\n      error: conflict\n      times: 1\n"
            ),
            "{written}"
        );
    }

    /// docs/fixture.schema.json is what `kubewasm test --schema` prints.
    #[test]
    fn the_committed_schema_is_the_generated_one() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/fixture.schema.json");
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == schema_text(),
            "{} is stale: run `cargo run -p kubewasm -- test --schema > docs/fixture.schema.json`",
            path.display()
        );
    }

    #[test]
    fn the_schema_describes_steps_results_and_actions() {
        let text = schema_text();
        for needle in [
            "\"title\": \"kubewasm test fixture\"",
            "initialList",
            "requeueAfter",
            "applyStatus",
            "serverError",
            "volatile",
        ] {
            assert!(text.contains(needle), "{needle}");
        }
    }

    #[test]
    fn results_round_trip_and_match_messages_by_containment() {
        for (text, r) in [
            ("ok", CallResult::Ok),
            ("retry", CallResult::Retry(None)),
            ("{retry: boom}", CallResult::Retry(Some("boom".into()))),
            (
                "{requeueAfter: 1m 30s}",
                CallResult::RequeueAfter(Duration::from_secs(90)),
            ),
            ("{trapped: null}", CallResult::Trapped(None)),
        ] {
            let parsed: CallResult = serde_yaml_ng::from_str(text).unwrap();
            assert_eq!(parsed, r, "{text}");
            let again: CallResult =
                serde_yaml_ng::from_str(&serde_yaml_ng::to_string(&parsed).unwrap()).unwrap();
            assert_eq!(again, r, "{text}");
        }
        let got = CallResult::Conflict(Some("action 1 of 2 failed: conflict: modified".into()));
        assert!(CallResult::Conflict(None).accepts(&got));
        assert!(CallResult::Conflict(Some("modified".into())).accepts(&got));
        assert!(!CallResult::Conflict(Some("gone".into())).accepts(&got));
        assert!(!CallResult::Retry(None).accepts(&got));
        assert!(!CallResult::RequeueAfter(Duration::from_secs(1)).accepts(&CallResult::Ok));
    }
}
