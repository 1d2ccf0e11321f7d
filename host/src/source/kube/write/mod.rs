//! Actions against the API server: server-side apply with the field manager
//! `kubewasm/<plugin>` (also on the status subresource), merge and JSON
//! patches, deletes with a propagation policy, and events.k8s.io/v1 Events
//! reported by the `kubewasm` controller. Each failure is classified as the
//! API defines its status codes ([`classify_request`]), keeping what the
//! executor and the dispatcher need: the real request, the server's
//! message, and its `Retry-After`. Each request is traced as one debug
//! span `api_write` (verb, kind, namespace and name, dry run), with the
//! answer's HTTP `status` (or the `error` that kept it from coming)
//! recorded when it ends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use kube::Client;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy};
use kube::core::{DynamicObject, Request, Status};
use serde_json::{Value, json};

use crate::actions::executor::{ActionError, ActionSink};
use crate::actions::{Action, EventType, PatchType, Propagation, Target};
use crate::kind::KindInfo;
use crate::telemetry::Identity;

use super::impersonate::{Impersonations, ServiceAccountRef, act_as, is_tenant_plugin, request_as};

mod classify;

use classify::is_bare_422;
pub use classify::{Failed, classify, classify_failed, classify_request};

/// The reporting controller of every Event kubewasm records.
pub const REPORTING_CONTROLLER: &str = "kubewasm";

pub use crate::actions::field_manager;

/// One write request, as its trace span names it.
#[derive(Debug, Clone, Copy)]
struct Write<'a> {
    /// `apply`, `patch`, `delete` or `create`.
    verb: &'static str,
    kind: &'a str,
    namespace: Option<&'a str>,
    name: &'a str,
    /// `status` for a write to the status subresource.
    subresource: Option<&'static str>,
}

impl<'a> Write<'a> {
    fn to(verb: &'static str, target: &'a Target) -> Self {
        Self {
            verb,
            kind: &target.kind.gvk.kind,
            namespace: target.namespace.as_deref(),
            name: &target.name,
            subresource: None,
        }
    }
}

/// The API-server action sink.
pub struct KubeSink {
    client: Client,
    /// Who reports Events: the pod name in a cluster, else the host name.
    instance: String,
    seq: AtomicU64,
    /// Recent Events by series key, to count repeats instead of creating
    /// objects.
    series: parking_lot::Mutex<std::collections::HashMap<SeriesKey, Series>>,
    /// Every write is sent with `dryRun=All`: the server checks and answers
    /// it (admission, validation, RBAC, preconditions, conflicts) and
    /// persists nothing (`kubewasm record`).
    server_dry_run: bool,
    /// Tenant plugins' writes go out as their ServiceAccount.
    impersonations: Impersonations,
}

impl std::fmt::Debug for KubeSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeSink")
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl KubeSink {
    /// Reports Events as this replica ([`Identity::from_env`]).
    pub fn new(client: Client) -> Self {
        Self::with_identity(client, &Identity::from_env())
    }

    /// Reports Events as `identity`'s instance (the pod name in a cluster).
    pub fn with_identity(client: Client, identity: &Identity) -> Self {
        Self {
            client,
            instance: identity.instance().to_owned(),
            // Added to an Event's time in its name: started at random so
            // that the names of two replicas' Events never meet (one
            // process's are unique by the count alone).
            seq: AtomicU64::new(u64::from(fastrand::u32(..)) << 20),
            series: parking_lot::Mutex::default(),
            server_dry_run: false,
            impersonations: Impersonations::default(),
        }
    }

    /// Sends each tenant plugin's writes (and the reads they lead to) as
    /// the ServiceAccount `impersonations` names for it; a tenant plugin
    /// it names none for is refused every write.
    #[must_use]
    pub fn with_impersonations(mut self, impersonations: Impersonations) -> Self {
        self.impersonations = impersonations;
        self
    }

    /// Who `plugin`'s requests go out as: the host (`None`), or a tenant's
    /// ServiceAccount; a tenant plugin with none is refused.
    fn account_of(&self, plugin: &str) -> Result<Option<ServiceAccountRef>, ActionError> {
        match self.impersonations.get(plugin) {
            Some(account) => Ok(Some(account)),
            None if is_tenant_plugin(plugin) => Err(ActionError::Forbidden(format!(
                "tenant plugin {plugin} has no ServiceAccount to act as (it is not, or no longer, loaded from its NamespacedPlugin): nothing is sent with the host's credentials"
            ))),
            None => Ok(None),
        }
    }

    /// Sends every write as a server-side dry run (`dryRun=All`): answered
    /// as the server would answer it, nothing persisted. Events are dry-run
    /// creates too, each a new Event (no series: nothing was stored to
    /// count on).
    #[must_use]
    pub fn server_dry_run(mut self) -> Self {
        self.server_dry_run = true;
        self
    }

    fn api(&self, target: &Target) -> kube::Api<DynamicObject> {
        super::dynamic_api(&self.client, &target.kind, target.namespace.as_deref())
    }

    fn request(&self, target: &Target) -> Request {
        Request::new(self.api(target).resource_url())
    }

    /// Reads the target object as `account` (the host when `None`).
    async fn read(
        &self,
        target: &Target,
        account: Option<&ServiceAccountRef>,
    ) -> Result<DynamicObject, kube::Error> {
        let request = self
            .request(target)
            .get(&target.name, &kube::api::GetParams::default())
            .map_err(kube::Error::BuildRequest)?;
        request_as(&self.client, account, request).await
    }

    /// Sends one write and reads its answer, keeping the `Retry-After`
    /// header of a refusal.
    #[tracing::instrument(
        name = "api_write",
        level = "debug",
        skip_all,
        fields(
            verb = write.verb,
            kind = write.kind,
            namespace = write.namespace,
            name = write.name,
            subresource = write.subresource,
            dry_run = self.server_dry_run,
            status = tracing::field::Empty,
            error = tracing::field::Empty,
        )
    )]
    async fn send(
        &self,
        write: Write<'_>,
        account: Option<&ServiceAccountRef>,
        request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    ) -> Result<(), Failed> {
        let span = tracing::Span::current();
        let mut request = request.map_err(|e| {
            span.record("error", "request not built");
            kube::Error::BuildRequest(e)
        })?;
        act_as(&mut request, account).inspect_err(|_| {
            span.record("error", "request not built");
        })?;
        let response = self
            .client
            .send(request.map(kube::client::Body::from))
            .await
            .inspect_err(|_| {
                span.record("error", "no answer");
            })?;
        let code = response.status().as_u16();
        span.record("status", code);
        if code < 400 {
            return Ok(());
        }
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = response.into_body().collect_bytes().await?;
        // Not every refusal is a `Status` (the API server's own 429 is
        // plain text): keep the text and the code, as kube does.
        let status = serde_json::from_slice::<Status>(&body).unwrap_or_else(|_| {
            Status::failure(String::from_utf8_lossy(&body).trim(), "").with_code(code)
        });
        Err(Failed {
            error: kube::Error::Api(status.boxed()),
            retry_after,
        })
    }

    async fn run(&self, plugin: &str, action: &Action) -> Result<(), ActionError> {
        let account = self.account_of(plugin)?;
        let account = account.as_ref();
        let what = || format!("{} {}", action.verb(), action.target());
        let fail = |f: Failed| classify_failed(action, &what(), f);
        match action {
            Action::Apply {
                target,
                object,
                force,
                status,
            } => {
                let mut params = PatchParams::apply(&field_manager(plugin));
                params.force = *force;
                params.dry_run = self.server_dry_run;
                let mut object = object.clone();
                target.preconditions.embed_in(&mut object);
                let patch = Patch::Apply(&object);
                let request = self.request(target);
                let mut write = Write::to("apply", target);
                let request = if *status {
                    write.subresource = Some("status");
                    request.patch_subresource("status", &target.name, &params, &patch)
                } else {
                    request.patch(&target.name, &params, &patch)
                };
                self.send(write, account, request).await.map_err(fail)
            }
            Action::Patch {
                target,
                patch_type,
                patch,
            } => {
                let params = PatchParams {
                    field_manager: Some(field_manager(plugin)),
                    dry_run: self.server_dry_run,
                    ..PatchParams::default()
                };
                match patch_type {
                    PatchType::Merge => {
                        let mut patch = patch.clone();
                        target.preconditions.embed_in(&mut patch);
                        let request = self.request(target).patch(
                            &target.name,
                            &params,
                            &Patch::Merge(&patch),
                        );
                        self.send(Write::to("patch", target), account, request)
                            .await
                            .map_err(fail)
                    }
                    PatchType::Json => {
                        let mut ops = target.preconditions.json_patch_ops();
                        ops.extend(patch.as_array().into_iter().flatten().cloned());
                        let ops: json_patch::Patch = serde_json::from_value(Value::Array(ops))
                            .map_err(|e| {
                                ActionError::Invalid(format!("{}: not a JSON patch: {e}", what()))
                            })?;
                        let request = self.request(target).patch(
                            &target.name,
                            &params,
                            &Patch::<()>::Json(ops.clone()),
                        );
                        match self
                            .send(Write::to("patch", target), account, request)
                            .await
                        {
                            Ok(()) => Ok(()),
                            Err(f) if is_bare_422(&f.error) => Err(self
                                .why_json_patch_failed(target, account, &what(), &ops, f)
                                .await),
                            Err(f) => Err(fail(f)),
                        }
                    }
                }
            }
            Action::Delete {
                target,
                propagation,
            } => {
                let p = &target.preconditions;
                let params = DeleteParams {
                    propagation_policy: Some(match propagation {
                        Propagation::Background => PropagationPolicy::Background,
                        Propagation::Foreground => PropagationPolicy::Foreground,
                        Propagation::Orphan => PropagationPolicy::Orphan,
                    }),
                    preconditions: (!p.is_empty()).then(|| Preconditions {
                        uid: p.uid.clone(),
                        resource_version: p.resource_version.clone(),
                    }),
                    dry_run: self.server_dry_run,
                    ..DeleteParams::default()
                };
                let request = self.request(target).delete(&target.name, &params);
                self.send(Write::to("delete", target), account, request)
                    .await
                    .map_err(fail)
            }
            Action::Event {
                regarding,
                event_type,
                reason,
                note,
                reporter,
            } => {
                let event = EventParts {
                    reporter,
                    regarding,
                    event_type: *event_type,
                    reason,
                    note,
                };
                self.record_event(plugin, account, event).await
            }
        }
    }

    /// The API server answers a JSON patch that does not apply to the
    /// object with a bare 422 ("the server rejected our request due to an
    /// error in our request", no causes: checked on v1.35), the same for a
    /// failed `test` as for a `remove` of a missing path. To tell them
    /// apart, the object is read and the operations replayed on it: a
    /// failed `test` means the object changed since the plugin read it (the
    /// SDK's optimistic lock on `/metadata/resourceVersion`), a conflict;
    /// another failure is an invalid patch, named precisely. When the
    /// object cannot be read, a patch with a `test` is taken as a conflict
    /// (a conflict taken for invalid would end the object's retries).
    async fn why_json_patch_failed(
        &self,
        target: &Target,
        account: Option<&ServiceAccountRef>,
        what: &str,
        ops: &json_patch::Patch,
        failed: Failed,
    ) -> ActionError {
        let server = match &failed.error {
            kube::Error::Api(s) => s.message.clone(),
            other => other.to_string(),
        };
        let has_test = ops
            .0
            .iter()
            .any(|op| matches!(op, json_patch::PatchOperation::Test(_)));
        let object = match self.read(target, account).await {
            Ok(o) => serde_json::to_value(o).map_err(kube::Error::SerdeError),
            Err(e) => Err(e),
        };
        match object {
            Ok(mut doc) => match json_patch::patch(&mut doc, ops) {
                Err(e) if matches!(e.kind, json_patch::PatchErrorKind::TestFailed) => {
                    ActionError::Conflict(format!(
                        "{what}: the JSON patch's test of {} failed (operation {} of {}): the object changed since the plugin read it (the server answered 422: {server})",
                        e.path,
                        e.operation + 1,
                        ops.0.len()
                    ))
                }
                Err(e) => ActionError::Invalid(format!(
                    "{what}: the JSON patch does not apply to the object: operation {} of {} failed at {}: {} (the server answered 422: {server})",
                    e.operation + 1,
                    ops.0.len(),
                    e.path,
                    e.kind
                )),
                // It applies now: the object changed in between.
                Ok(()) if has_test => ActionError::Conflict(format!(
                    "{what}: the JSON patch did not apply but applies to the object as it is now: it changed meanwhile (the server answered 422: {server})"
                )),
                Ok(()) => classify_request(what, failed),
            },
            Err(kube::Error::Api(s)) if s.code == 404 => {
                ActionError::NotFound(format!("{what}: {} ({})", s.message, s.reason))
            }
            Err(e) if has_test => ActionError::Conflict(format!(
                "{what}: the JSON patch with a test did not apply (the server answered 422: {server}); the object could not be read to tell which operation failed ({e}), so it is taken as a failed test"
            )),
            Err(_) => classify_request(what, failed),
        }
    }

    /// Creates an Event, or, when the same one (reporter, regarding object,
    /// type, reason and note) was recorded within [`SERIES_WINDOW`], counts
    /// the repeat in that Event's `series` instead of creating another
    /// object. client-go's and kube's recorders leave the note out of the
    /// key and so keep only the first note of a series; keeping it in, a
    /// changed note is never lost (client-go's core/v1 correlator counts
    /// identical Events the same way). Errors name the real request: the
    /// `create` of a new Event or the `patch` of a series.
    async fn record_event(
        &self,
        plugin: &str,
        account: Option<&ServiceAccountRef>,
        event: EventParts<'_>,
    ) -> Result<(), ActionError> {
        let EventParts {
            reporter,
            regarding,
            event_type,
            reason,
            note,
        } = event;
        let events = KindInfo::new("events.k8s.io", "v1", "Event", "events", true);
        let ns = regarding.namespace.as_deref().unwrap_or("default");
        let url = super::dynamic_api::<DynamicObject>(&self.client, &events, Some(ns))
            .resource_url()
            .to_owned();
        let request = Request::new(url);
        let key = SeriesKey {
            reporter: reporter.to_owned(),
            regarding: regarding.to_string(),
            uid: regarding.uid.clone(),
            event_type,
            reason: reason.to_owned(),
            note: note.to_owned(),
        };
        let now = SystemTime::now();
        let repeat = if self.server_dry_run {
            None
        } else {
            let mut series = self.series.lock();
            series.retain(|_, s| now.duration_since(s.last).unwrap_or_default() < SERIES_WINDOW);
            series.get(&key).map(|s| (s.name.clone(), s.count + 1))
        };
        let params = PatchParams {
            field_manager: Some(field_manager(plugin)),
            ..PatchParams::default()
        };
        if let Some((name, count)) = repeat {
            let what = format!("patch events.k8s.io/v1 events {ns}/{name}");
            let series = json!({"series": {
                "count": count,
                "lastObservedTime": humantime::format_rfc3339_micros(now).to_string(),
            }});
            let write = Write {
                verb: "patch",
                kind: "Event",
                namespace: Some(ns),
                name: &name,
                subresource: None,
            };
            match self
                .send(
                    write,
                    account,
                    request.patch(&name, &params, &Patch::Merge(&series)),
                )
                .await
            {
                Ok(()) => {
                    // Counted once recorded, so a retried patch does not
                    // count twice.
                    if let Some(s) = self.series.lock().get_mut(&key) {
                        s.count = s.count.max(count);
                        s.last = now;
                    }
                    return Ok(());
                }
                // The Event expired or was deleted: start a new one.
                Err(Failed {
                    error: kube::Error::Api(s),
                    ..
                }) if s.code == 404 => {
                    self.series.lock().remove(&key);
                }
                Err(f) => return Err(classify_request(&what, f)),
            }
        }
        let params = PostParams {
            field_manager: Some(field_manager(plugin)),
            dry_run: self.server_dry_run,
        };
        // A name already taken (an Event of another process created in the
        // same nanosecond) is taken again under a new one, once.
        let mut created = String::new();
        for attempt in 0..2 {
            let event = self.event(plugin, reporter, regarding, event_type, reason, note, now);
            let name = event["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let what =
                format!("create events.k8s.io/v1 events {ns}/{name} (regarding {regarding})");
            let body = serde_json::to_vec(&event)
                .map_err(|e| ActionError::Invalid(format!("{what}: {e}")))?;
            let write = Write {
                verb: "create",
                kind: "Event",
                namespace: Some(ns),
                name: &name,
                subresource: None,
            };
            match self
                .send(write, account, request.create(&params, body))
                .await
            {
                Ok(()) => {
                    created = name;
                    break;
                }
                Err(Failed {
                    error: kube::Error::Api(s),
                    ..
                }) if attempt == 0 && s.is_already_exists() => {}
                Err(f) => return Err(classify_request(&what, f)),
            }
        }
        if self.server_dry_run {
            return Ok(());
        }
        let mut series = self.series.lock();
        if series.len() >= SERIES_CAPACITY {
            // Full: forget the oldest half rather than grow.
            let mut lasts: Vec<SystemTime> = series.values().map(|s| s.last).collect();
            lasts.sort();
            let cut = lasts[lasts.len() / 2];
            series.retain(|_, s| s.last > cut);
        }
        series.insert(
            key,
            Series {
                name: created,
                count: 1,
                last: now,
            },
        );
        Ok(())
    }

    /// An events.k8s.io/v1 Event, named as client-go names them
    /// (`<regarding>.<hex nanos>`, the nanoseconds offset by this sink's
    /// count).
    #[allow(clippy::too_many_arguments)]
    fn event(
        &self,
        plugin: &str,
        reporter: &str,
        regarding: &Target,
        event_type: EventType,
        reason: &str,
        note: &str,
        now: SystemTime,
    ) -> serde_json::Value {
        let nanos = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
            .wrapping_add(u128::from(self.seq.fetch_add(1, Ordering::Relaxed)));
        let ns = regarding.namespace.as_deref().unwrap_or("default");
        let mut instance = format!("{}/{reporter}", self.instance);
        instance.truncate(128);
        let mut note = note.to_owned();
        if note.len() > 1024 {
            let mut cut = 1021;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
            note.push_str("...");
        }
        let mut action = plugin.to_owned();
        action.truncate(128);
        json!({
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {
                "name": format!("{}.{nanos:x}", regarding.name),
                "namespace": ns,
                "labels": {"kubewasm.io/plugin": plugin},
            },
            "eventTime": humantime::format_rfc3339_micros(now).to_string(),
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": instance,
            "action": action,
            "reason": reason,
            "type": match event_type { EventType::Normal => "Normal", EventType::Warning => "Warning" },
            "note": note,
            "regarding": {
                "apiVersion": regarding.kind.gvk.api_version(),
                "kind": regarding.kind.gvk.kind,
                "namespace": regarding.namespace,
                "name": regarding.name,
                "uid": regarding.uid,
            },
        })
    }
}

/// What an Event action records.
struct EventParts<'a> {
    reporter: &'a str,
    regarding: &'a Target,
    event_type: EventType,
    reason: &'a str,
    note: &'a str,
}

/// How long a repeated Event is counted in the first one's series (kube's
/// recorder: 6 minutes).
pub const SERIES_WINDOW: std::time::Duration = std::time::Duration::from_secs(6 * 60);
/// Series remembered at most (the oldest half is forgotten when full).
const SERIES_CAPACITY: usize = 4096;

/// What makes two Events the same series.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SeriesKey {
    reporter: String,
    regarding: String,
    uid: Option<String>,
    event_type: EventType,
    reason: String,
    note: String,
}

#[derive(Debug)]
struct Series {
    name: String,
    count: i64,
    last: SystemTime,
}

impl ActionSink for KubeSink {
    fn execute<'a>(
        &'a self,
        plugin: &'a str,
        action: &'a Action,
    ) -> BoxFuture<'a, Result<(), ActionError>> {
        Box::pin(self.run(plugin, action))
    }
}
