//! The election loop: client-go's `LeaderElector` on kube's Lease API.
//!
//! Why not kube-lease-manager 0.13 (it builds on kube 5): it counts every
//! duration in whole seconds (no sub-second retry period); it has no renew
//! deadline (a leader whose renewals fail keeps reporting itself leader
//! while it backs off, so it cannot fence itself by time); and a follower
//! sleeps until the lease it last saw would expire, so a lease released on
//! shutdown is only taken after a whole lease duration, not at once. This
//! module is client-go's algorithm instead: updates guarded by
//! resourceVersion (a conflict means another replica won), followers that
//! judge expiry on their own clock from when they last saw the record
//! change (no clock skew between nodes matters), a leader that stops acting
//! at the renew deadline, and a release that clears the holder.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{ElectionOptions, Leadership};

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("cannot read or write the Lease: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot reach the Lease: {0}")]
    Unavailable(String),
}

/// Whether a write took effect or lost a race to another replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    Done,
    /// Already exists (create) or changed since read (update).
    Lost,
}

/// Reads and writes the one Lease; the API server in production, memory in
/// tests.
pub trait LeaseBackend: Send + Sync + 'static {
    fn get(&self) -> BoxFuture<'_, Result<Option<Lease>, LeaseError>>;
    fn create(&self, lease: Lease) -> BoxFuture<'_, Result<Written, LeaseError>>;
    /// Replaces the Lease if its resourceVersion is still the one read.
    fn replace(&self, lease: Lease) -> BoxFuture<'_, Result<Written, LeaseError>>;
}

/// The Lease on the API server (verbs: get, create, update).
#[derive(Clone)]
pub struct KubeLeases {
    api: Api<Lease>,
    name: String,
    /// The ServiceAccount the Lease is created owned by, if any.
    owner: Option<String>,
}

impl std::fmt::Debug for KubeLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeLeases")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl KubeLeases {
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            owner: None,
        }
    }

    /// Creates the Lease owned by the ServiceAccount `name` of its
    /// namespace (the host's, `POD_SERVICE_ACCOUNT` in a Pod), so that
    /// deleting the installation (`helm uninstall`, `kubectl delete -k`)
    /// takes the Lease with it: the garbage collector deletes it once its
    /// owner is gone, even when a replica still draining recreated it
    /// after the uninstall. Without `get` on that ServiceAccount the Lease
    /// is created without an owner.
    #[must_use]
    pub fn owned_by_service_account(mut self, name: Option<String>) -> Self {
        self.owner = name.filter(|n| !n.is_empty());
        self
    }

    /// The owner reference of [`Self::owned_by_service_account`].
    async fn owner_reference(&self) -> Option<OwnerReference> {
        let name = self.owner.as_deref()?;
        let client = self.api.clone().into_client();
        let namespace = self.api.namespace()?;
        match Api::<ServiceAccount>::namespaced(client, namespace)
            .get(name)
            .await
        {
            Ok(sa) => Some(OwnerReference {
                api_version: "v1".into(),
                kind: "ServiceAccount".into(),
                name: name.to_owned(),
                uid: sa.metadata.uid?,
                ..OwnerReference::default()
            }),
            Err(e) => {
                tracing::warn!(service_account = name, error = %e, "cannot read the host's ServiceAccount: the Lease is created without an owner and outlives an uninstall (grant get on it: kubewasm rbac)");
                None
            }
        }
    }
}

fn lost_race(e: kube::Error) -> Result<Written, LeaseError> {
    match e {
        kube::Error::Api(s) if s.is_conflict() || s.is_already_exists() => Ok(Written::Lost),
        e => Err(e.into()),
    }
}

impl LeaseBackend for KubeLeases {
    fn get(&self) -> BoxFuture<'_, Result<Option<Lease>, LeaseError>> {
        Box::pin(async move { Ok(self.api.get_opt(&self.name).await?) })
    }

    fn create(&self, mut lease: Lease) -> BoxFuture<'_, Result<Written, LeaseError>> {
        Box::pin(async move {
            if let Some(owner) = self.owner_reference().await {
                lease.metadata.owner_references = Some(vec![owner]);
            }
            match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Written::Done),
                Err(e) => lost_race(e),
            }
        })
    }

    fn replace(&self, lease: Lease) -> BoxFuture<'_, Result<Written, LeaseError>> {
        Box::pin(async move {
            match self
                .api
                .replace(&self.name, &PostParams::default(), &lease)
                .await
            {
                Ok(_) => Ok(Written::Done),
                Err(e) => lost_race(e),
            }
        })
    }
}

/// Why a term ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Shutdown,
    DeadlinePassed,
    TakenOver,
    /// A shard handed over to balance the replicas' shares.
    GaveUp,
}

/// Campaigns for the Lease and moves the [`Leadership`] gate.
pub struct Elector {
    backend: Arc<dyn LeaseBackend>,
    opts: ElectionOptions,
    leadership: Leadership,
    /// The record's resourceVersion and when this replica first saw it:
    /// another holder's lease runs from then, on this replica's clock.
    observed: Option<(String, Instant)>,
    holder: Option<String>,
    /// Where the Lease as last read goes (`/readyz`, the web view).
    view: Option<crate::telemetry::LeaderFlag>,
    /// The shard this Lease fences, and when to take or give it up; `None`
    /// for the one Lease of an unsharded deployment.
    shard: Option<(u32, Arc<dyn ShardBalance>)>,
    /// The Lease as last read was this replica's own record (it is still
    /// the holder, so nobody else has held it since it took it).
    own_record: bool,
    /// How far this replica's informers have followed the API server,
    /// written on the Lease it releases (see [`HANDOVER_ANNOTATION`]).
    high_waters: Option<Arc<dyn Fn() -> super::HandoverMarks + Send + Sync>>,
}

/// The annotation a replica releasing a Lease writes its informers' high
/// waters in (JSON: informer -> resourceVersion), for the next holder to
/// wait for before it replays.
pub const HANDOVER_ANNOTATION: &str = "kubewasm.io/handover-versions";

/// When a replica of a sharded deployment takes one more shard or gives
/// one up, so that the shards spread over the replicas.
pub trait ShardBalance: Send + Sync {
    /// Whether this replica may take one more shard now.
    fn may_take(&self) -> bool;
    /// Whether this replica should give up shard `index` now (it holds more
    /// than its share, and this is the one to go).
    fn should_give_up(&self, index: u32) -> bool;
    /// Held by a shard elector from its share check until its gate moved.
    fn turn(&self) -> Arc<tokio::sync::Mutex<()>>;
}

impl std::fmt::Debug for Elector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elector")
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

impl Elector {
    pub fn new(
        backend: Arc<dyn LeaseBackend>,
        opts: ElectionOptions,
        leadership: Leadership,
    ) -> Self {
        Self {
            backend,
            opts,
            leadership,
            observed: None,
            holder: None,
            view: None,
            shard: None,
            own_record: false,
            high_waters: None,
        }
    }

    /// Fences shard `index`: gaining and losing the Lease takes and gives
    /// up that shard in the [`Leadership`] gate, and `balance` says when to
    /// campaign and when to hand the shard over.
    #[must_use]
    pub fn for_shard(mut self, index: u32, balance: Arc<dyn ShardBalance>) -> Self {
        self.shard = Some((index, balance));
        self
    }

    fn gain(&self) -> u64 {
        match &self.shard {
            // Renewing its own record: a shard suspended at the renew
            // deadline resumes, what it set aside goes on.
            Some((i, _)) if self.own_record => self.leadership.resume(*i),
            Some((i, _)) => self.leadership.hold(*i, true),
            None if self.own_record => self.leadership.resume_whole(),
            None => self.leadership.gain(),
        }
    }

    /// Closes the gate: a shard whose renewals missed the deadline is only
    /// suspended (see [`Leadership::suspend`]).
    fn lose(&self, ended: Ended) {
        match &self.shard {
            Some((i, _)) if ended == Ended::DeadlinePassed => {
                self.leadership.suspend(*i);
            }
            Some((i, _)) => {
                self.leadership.hold(*i, false);
            }
            None if ended == Ended::DeadlinePassed => self.leadership.suspend_whole(),
            None => self.leadership.lose(),
        }
    }

    /// Records whether the Lease just read is this replica's own record; a
    /// suspended shard whose Lease is not is forfeited.
    fn read_own(&mut self, own: bool) {
        self.own_record = own;
        if !own {
            match &self.shard {
                Some((i, _)) => self.leadership.forfeit(*i),
                None => self.leadership.forfeit_whole(),
            }
        }
    }

    fn may_take(&self) -> bool {
        self.shard.as_ref().is_none_or(|(_, b)| b.may_take())
    }

    fn should_give_up(&self) -> bool {
        self.shard
            .as_ref()
            .is_some_and(|(i, b)| b.should_give_up(*i))
    }

    /// Writes how far `high_waters` says this replica's informers have
    /// followed the API server on every Lease it releases, and has the
    /// next holder wait for it (see [`HANDOVER_ANNOTATION`]).
    #[must_use]
    pub fn with_high_waters(
        mut self,
        high_waters: Arc<dyn Fn() -> super::HandoverMarks + Send + Sync>,
    ) -> Self {
        self.high_waters = Some(high_waters);
        self
    }

    /// Records every reading of the Lease in `flag`, for `/readyz` and the
    /// web view.
    #[must_use]
    pub fn with_view(mut self, flag: crate::telemetry::LeaderFlag) -> Self {
        self.view = Some(flag);
        self
    }

    /// Records the Lease as read or written: `holder` since `acquired`.
    fn saw(&self, holder: Option<String>, acquired: Option<&MicroTime>, transitions: Option<i32>) {
        if let Some(flag) = &self.view {
            flag.observe(crate::telemetry::LeaseView {
                lease: self.lease(),
                identity: self.opts.identity.clone(),
                leading: false,
                holder,
                // As the API server writes a MicroTime, so every reader
                // (the Lease, `kubewasm status`) shows the same instant.
                since: acquired
                    .and_then(|t| serde_json::to_value(t).ok())
                    .and_then(|v| v.as_str().map(str::to_owned)),
                transitions,
            });
        }
    }

    fn lease(&self) -> String {
        format!("{}/{}", self.opts.namespace, self.opts.lease_name)
    }

    /// Follows, leads, follows again, ... until `cancel`; then, if leading,
    /// closes the gate and releases the Lease so a follower takes over at
    /// once. Cancel only once in-flight work has drained.
    pub async fn run(mut self, cancel: CancellationToken) {
        let identity = self.opts.identity.clone();
        let lease = self.lease();
        tracing::info!(identity, lease, "campaigning for the lease");
        loop {
            let (acquired, term) = loop {
                // A replica's shard electors take turns from the share
                // check to the gate: two free shards are never both taken
                // on one look at the share.
                let turn = match &self.shard {
                    Some((_, b)) => Some(b.turn().lock_owned().await),
                    None => None,
                };
                let sent = Instant::now();
                let may_take = self.may_take();
                match self.try_acquire_or_renew(may_take).await {
                    Ok(true) => break (sent, self.gain()),
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(identity, lease, error = %e, "cannot read or update the lease; retrying");
                    }
                }
                drop(turn);
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(self.opts.retry_period) => {}
                }
            };
            if self.own_record && self.shard.is_some() {
                tracing::info!(
                    identity,
                    lease,
                    term,
                    "holds the shard again: still the Lease's holder, nobody held it in between (deletes set aside meanwhile go on)"
                );
            } else if self.own_record {
                tracing::info!(
                    identity,
                    lease,
                    term,
                    "leads again: still the Lease's holder, nobody led in between (deletes set aside meanwhile go on)"
                );
            } else {
                tracing::info!(identity, lease, term, "became leader");
            }
            let ended = self.lead(acquired, &cancel).await;
            // Fencing by time: the gate closes before anyone else may hold
            // the lease (renew deadline < lease duration).
            self.lose(ended);
            match ended {
                Ended::GaveUp => {
                    tracing::info!(
                        identity,
                        lease,
                        term,
                        "gave up the shard: another replica holds fewer than its share"
                    );
                    // Closed above before the release, so the next holder
                    // never acts beside this replica.
                    self.release().await;
                }
                Ended::Shutdown => {
                    tracing::info!(identity, lease, term, "stopped leading: shutting down");
                    self.release().await;
                    return;
                }
                Ended::DeadlinePassed => tracing::warn!(
                    identity,
                    lease,
                    term,
                    renew_deadline = ?self.opts.renew_deadline,
                    "lost leadership: the lease was not renewed within the renew deadline"
                ),
                Ended::TakenOver => tracing::warn!(
                    identity,
                    lease,
                    term,
                    holder = self.holder.as_deref().unwrap_or(""),
                    "lost leadership: the lease has another holder"
                ),
            }
        }
    }

    /// Renews every retry period until the renew deadline passes without a
    /// successful renewal, the lease changes hands, or `cancel`.
    async fn lead(&mut self, acquired: Instant, cancel: &CancellationToken) -> Ended {
        let mut renewed = acquired;
        let (identity, lease) = (self.opts.identity.clone(), self.lease());
        let (retry, deadline) = (self.opts.retry_period, self.opts.renew_deadline);
        loop {
            let attempt = async {
                tokio::time::sleep(retry).await;
                let sent = Instant::now();
                (sent, self.try_acquire_or_renew(true).await)
            };
            tokio::select! {
                biased;
                () = cancel.cancelled() => return Ended::Shutdown,
                () = tokio::time::sleep_until(renewed + deadline) => return Ended::DeadlinePassed,
                (sent, result) = attempt => match result {
                    Ok(true) if self.should_give_up() => return Ended::GaveUp,
                    Ok(true) => renewed = sent,
                    Ok(false) => return Ended::TakenOver,
                    Err(e) => tracing::warn!(identity, lease, error = %e, "cannot renew the lease; retrying until the renew deadline"),
                },
            }
        }
    }

    /// One round of client-go's `tryAcquireOrRenew`: take the lease if it
    /// is free, expired or ours; `Ok(false)` if another replica holds it
    /// or won the race. Without `may_take`, the lease is only read (a
    /// replica that holds its share of the shards leaves a free one to
    /// others).
    async fn try_acquire_or_renew(&mut self, may_take: bool) -> Result<bool, LeaseError> {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let me = self.opts.identity.clone();
        let seconds = self.opts.lease_seconds();
        let Some(mut lease) = self.backend.get().await? else {
            self.read_own(false);
            if !may_take {
                return Ok(false);
            }
            let acquired = now.clone();
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.opts.lease_name.clone()),
                    namespace: Some(self.opts.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            let created = self.backend.create(lease).await? == Written::Done;
            if created {
                self.saw(Some(self.opts.identity.clone()), Some(&acquired), Some(0));
            }
            return Ok(created);
        };
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        let seen_at = match &self.observed {
            Some((seen, at)) if *seen == rv => *at,
            _ => {
                let at = Instant::now();
                self.observed = Some((rv, at));
                at
            }
        };
        let spec = lease.spec.take().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let mine = holder.as_deref() == Some(me.as_str());
        self.read_own(mine);
        if let Some(h) = &holder
            && !mine
        {
            let held = u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0);
            if Instant::now() < seen_at + Duration::from_secs(held) {
                self.holder = Some(h.clone());
                self.saw(
                    Some(h.clone()),
                    spec.acquire_time.as_ref(),
                    spec.lease_transitions,
                );
                return Ok(false);
            }
        }
        if !mine && !may_take {
            self.holder = holder;
            return Ok(false);
        }
        let transitions = spec.lease_transitions.unwrap_or(0);
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(me),
            lease_duration_seconds: Some(seconds),
            acquire_time: if mine {
                spec.acquire_time.clone()
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(if mine {
                transitions
            } else {
                transitions.saturating_add(1)
            }),
            ..spec
        });
        let acquired = lease.spec.as_ref().and_then(|s| s.acquire_time.clone());
        let transitions = lease.spec.as_ref().and_then(|s| s.lease_transitions);
        let handed: Option<super::HandoverMarks> = (!mine)
            .then(|| {
                lease
                    .metadata
                    .annotations
                    .as_ref()?
                    .get(HANDOVER_ANNOTATION)
                    .and_then(|v| serde_json::from_str(v).ok())
            })
            .flatten();
        let written = self.backend.replace(lease).await?;
        if written == Written::Done
            && let Some(marks) = handed
        {
            self.leadership.expect_handover(marks);
        }
        if written == Written::Lost {
            self.holder = None;
        }
        if written == Written::Done {
            self.saw(
                Some(self.opts.identity.clone()),
                acquired.as_ref(),
                transitions,
            );
        }
        Ok(written == Written::Done)
    }

    /// Clears the holder (and shortens the lease to 1s, as client-go does)
    /// if this replica still holds it.
    async fn release(&mut self) {
        let (identity, lease) = (self.opts.identity.clone(), self.lease());
        let result = async {
            let Some(mut l) = self.backend.get().await? else {
                return Ok(false);
            };
            let spec = l.spec.take().unwrap_or_default();
            if spec.holder_identity.as_deref() != Some(identity.as_str()) {
                return Ok(false);
            }
            let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
            if let Some(marks) = self.high_waters.as_ref().map(|f| f())
                && let Ok(json) = serde_json::to_string(&marks)
            {
                l.metadata
                    .annotations
                    .get_or_insert_default()
                    .insert(HANDOVER_ANNOTATION.to_owned(), json);
            }
            l.spec = Some(LeaseSpec {
                holder_identity: None,
                lease_duration_seconds: Some(1),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                ..spec
            });
            Ok::<_, LeaseError>(self.backend.replace(l).await? == Written::Done)
        }
        .await;
        match result {
            Ok(true) => {
                self.saw(None, None, None);
                tracing::info!(identity, lease, "released the lease");
            }
            Ok(false) => {
                tracing::info!(identity, lease, "lease not released: no longer its holder")
            }
            Err(e) => {
                tracing::warn!(identity, lease, error = %e, "cannot release the lease; a follower takes over when it expires");
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod memory;

#[cfg(test)]
mod tests;
