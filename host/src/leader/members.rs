//! The replicas of a sharded deployment, counted from one Lease per
//! replica (`<lease>-member-<hash of its identity>`, labelled
//! `kubewasm.io/members-of: <lease>`), and the fair share of shards each
//! may hold.
//!
//! A replica renews its own member Lease every retry period and counts the
//! member Leases that changed within a lease duration, on its own clock (as
//! the elector judges a holder: no trust in other replicas' clocks). A
//! crashed replica's Lease stops changing and stops counting; one left
//! unchanged for ten lease durations is deleted by whoever sees it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{ElectionOptions, Leadership, LeaseError, ShardBalance};

/// The label that groups a deployment's member Leases.
pub const MEMBERS_OF: &str = "kubewasm.io/members-of";

/// A member Lease as listed: its name and resourceVersion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub resource_version: String,
}

/// Writes this replica's member Lease and lists every member's.
pub trait MemberBackend: Send + Sync + 'static {
    /// Creates or renews the member Lease `lease` (server-side apply).
    fn renew(&self, lease: Lease) -> BoxFuture<'_, Result<(), LeaseError>>;
    fn list(&self) -> BoxFuture<'_, Result<Vec<Member>, LeaseError>>;
    fn delete(&self, name: &str) -> BoxFuture<'_, Result<(), LeaseError>>;
}

/// Member Leases on the API server (verbs: list, patch, delete).
#[derive(Clone)]
pub struct KubeMembers {
    api: Api<Lease>,
    group: String,
}

impl KubeMembers {
    pub fn new(client: kube::Client, namespace: &str, group: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            group: group.to_owned(),
        }
    }
}

impl MemberBackend for KubeMembers {
    fn renew(&self, lease: Lease) -> BoxFuture<'_, Result<(), LeaseError>> {
        Box::pin(async move {
            let name = lease.metadata.name.clone().unwrap_or_default();
            let mut lease = lease;
            lease.metadata.managed_fields = None;
            let body = serde_json::json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": lease.metadata,
                "spec": lease.spec,
            });
            self.api
                .patch(
                    &name,
                    &PatchParams::apply("kubewasm-members").force(),
                    &Patch::Apply(body),
                )
                .await?;
            Ok(())
        })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<Member>, LeaseError>> {
        Box::pin(async move {
            let selector = format!("{MEMBERS_OF}={}", self.group);
            let list = self
                .api
                .list_metadata(&ListParams::default().labels(&selector))
                .await?;
            Ok(list
                .items
                .into_iter()
                .map(|l| Member {
                    name: l.metadata.name.unwrap_or_default(),
                    resource_version: l.metadata.resource_version.unwrap_or_default(),
                })
                .collect())
        })
    }

    fn delete(&self, name: &str) -> BoxFuture<'_, Result<(), LeaseError>> {
        let name = name.to_owned();
        Box::pin(async move {
            match self.api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
                Err(e) => Err(e.into()),
            }
        })
    }
}

/// This replica's member Lease name in the group `lease_name`.
pub fn member_lease_name(lease_name: &str, identity: &str) -> String {
    format!(
        "{lease_name}-member-{:016x}",
        crate::shard::fnv1a64(identity.as_bytes())
    )
}

/// Keeps this replica's member Lease and the count of live members.
pub struct Members {
    backend: Arc<dyn MemberBackend>,
    opts: ElectionOptions,
    own: String,
    /// Each member Lease's resourceVersion and when it was first seen.
    seen: HashMap<String, (String, Instant)>,
    live: watch::Sender<u32>,
}

impl Members {
    pub fn new(backend: Arc<dyn MemberBackend>, opts: ElectionOptions) -> Self {
        let own = member_lease_name(&opts.lease_name, &opts.identity);
        Self {
            backend,
            opts,
            own,
            seen: HashMap::new(),
            live: watch::channel(1).0,
        }
    }

    /// The count of live replicas (this one included), as last counted.
    pub fn live(&self) -> watch::Receiver<u32> {
        self.live.subscribe()
    }

    fn own_lease(&self) -> Lease {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        Lease {
            metadata: ObjectMeta {
                name: Some(self.own.clone()),
                namespace: Some(self.opts.namespace.clone()),
                labels: Some(
                    [
                        (MEMBERS_OF.to_owned(), self.opts.lease_name.clone()),
                        (
                            "app.kubernetes.io/managed-by".to_owned(),
                            "kubewasm".to_owned(),
                        ),
                    ]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.opts.identity.clone()),
                lease_duration_seconds: Some(self.opts.lease_seconds()),
                renew_time: Some(now),
                ..LeaseSpec::default()
            }),
        }
    }

    /// One round: renew, list, count. Errors leave the last count.
    pub async fn round(&mut self) -> Result<u32, LeaseError> {
        self.backend.renew(self.own_lease()).await?;
        let members = self.backend.list().await?;
        let now = Instant::now();
        let mut live = 0u32;
        let mut gone = Vec::new();
        let names: std::collections::HashSet<&str> =
            members.iter().map(|m| m.name.as_str()).collect();
        self.seen.retain(|n, _| names.contains(n.as_str()));
        for m in &members {
            let at = match self.seen.get(&m.name) {
                Some((rv, at)) if *rv == m.resource_version => *at,
                _ => {
                    self.seen
                        .insert(m.name.clone(), (m.resource_version.clone(), now));
                    now
                }
            };
            let quiet = now.saturating_duration_since(at);
            if m.name == self.own || quiet < self.opts.lease_duration {
                live += 1;
            } else if quiet > self.opts.lease_duration * 10 {
                gone.push(m.name.clone());
            }
        }
        for name in gone {
            tracing::info!(
                member = name,
                "deleting the member lease of a replica gone for ten lease durations"
            );
            if let Err(e) = self.backend.delete(&name).await {
                tracing::warn!(member = name, error = %e, "cannot delete a stale member lease");
            }
        }
        let live = live.max(1);
        self.live
            .send_if_modified(|n| std::mem::replace(n, live) != live);
        Ok(live)
    }

    /// Renews and counts every retry period until `cancel`, then deletes
    /// this replica's member Lease (the others count one fewer at once).
    pub async fn run(mut self, cancel: CancellationToken) {
        loop {
            if let Err(e) = self.round().await {
                tracing::warn!(member = self.own, error = %e, "cannot renew or list the member leases; retrying");
            }
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(self.opts.retry_period) => {}
            }
        }
        if let Err(e) = self.backend.delete(&self.own).await {
            tracing::warn!(member = self.own, error = %e, "cannot delete the member lease on shutdown; it stops counting after a lease duration");
        }
    }
}

/// Each replica holds at most `ceil(shards / live replicas)` shards: it
/// campaigns for a free one only below that, and gives up its highest
/// one above it (one per renewal, so shards move one at a time). For its
/// first lease duration a replica takes one shard at most: replicas that
/// start together see each other's member Leases before any takes more,
/// instead of one taking every shard and handing them on.
pub struct FairShare {
    leadership: Leadership,
    live: watch::Receiver<u32>,
    settled_at: Instant,
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl FairShare {
    pub fn new(leadership: Leadership, live: watch::Receiver<u32>, settle: Duration) -> Self {
        Self {
            leadership,
            live,
            settled_at: Instant::now() + settle,
            turn: Arc::default(),
        }
    }

    fn share(&self) -> (u32, u32) {
        let shards = self.leadership.state().shards;
        let live = (*self.live.borrow()).max(1);
        let share = shards.count.div_ceil(live);
        let share = if Instant::now() < self.settled_at {
            share.min(1)
        } else {
            share
        };
        (shards.held_count(), share)
    }
}

impl ShardBalance for FairShare {
    fn turn(&self) -> Arc<tokio::sync::Mutex<()>> {
        self.turn.clone()
    }

    fn may_take(&self) -> bool {
        let (held, share) = self.share();
        held < share
    }

    fn should_give_up(&self, index: u32) -> bool {
        let (held, share) = self.share();
        held > share
            && self
                .leadership
                .state()
                .shards
                .indexes()
                .last()
                .is_some_and(|last| last == index)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use parking_lot::Mutex;

    use super::*;
    use crate::leader::Elector;
    use crate::leader::elector::memory::{Conn, Store};
    use crate::shard::{ShardKey, ShardSet};

    fn opts(identity: &str, lease: &str) -> ElectionOptions {
        ElectionOptions {
            identity: identity.into(),
            lease_name: lease.into(),
            namespace: "test".into(),
            lease_duration: Duration::from_secs(4),
            renew_deadline: Duration::from_secs(3),
            retry_period: Duration::from_millis(500),
            shards: None,
        }
    }

    /// Member Leases in memory: name -> resourceVersion.
    #[derive(Default)]
    struct Memory {
        leases: Mutex<HashMap<String, u64>>,
        version: Mutex<u64>,
    }

    impl MemberBackend for Memory {
        fn renew(&self, lease: Lease) -> BoxFuture<'_, Result<(), LeaseError>> {
            let mut v = self.version.lock();
            *v += 1;
            self.leases
                .lock()
                .insert(lease.metadata.name.unwrap_or_default(), *v);
            Box::pin(async { Ok(()) })
        }

        fn list(&self) -> BoxFuture<'_, Result<Vec<Member>, LeaseError>> {
            let members = self
                .leases
                .lock()
                .iter()
                .map(|(name, rv)| Member {
                    name: name.clone(),
                    resource_version: rv.to_string(),
                })
                .collect();
            Box::pin(async { Ok(members) })
        }

        fn delete(&self, name: &str) -> BoxFuture<'_, Result<(), LeaseError>> {
            self.leases.lock().remove(name);
            Box::pin(async { Ok(()) })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn members_count_while_they_renew_and_are_deleted_long_after_they_stop() {
        let store = Arc::new(Memory::default());
        let mut a = Members::new(store.clone(), opts("a", "kw"));
        let mut b = Members::new(store.clone(), opts("b", "kw"));
        assert_eq!(a.round().await.unwrap(), 1);
        assert_eq!(b.round().await.unwrap(), 2);
        assert_eq!(a.round().await.unwrap(), 2);
        // b stops renewing: a counts it for a lease duration, then not.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(a.round().await.unwrap(), 2);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(a.round().await.unwrap(), 1);
        assert_eq!(*a.live().borrow(), 1);
        let b_name = member_lease_name("kw", "b");
        assert!(store.leases.lock().contains_key(&b_name), "kept a while");
        tokio::time::sleep(Duration::from_secs(40)).await;
        a.round().await.unwrap();
        assert!(
            !store.leases.lock().contains_key(&b_name),
            "deleted at last"
        );
        // Back: it counts again at once.
        b.round().await.unwrap();
        assert_eq!(a.round().await.unwrap(), 2);
    }

    struct Replica {
        leadership: Leadership,
        conns: Vec<Arc<Conn>>,
        cancel: CancellationToken,
    }

    fn replica(stores: &[Arc<Store>], identity: &str, live: &watch::Receiver<u32>) -> Replica {
        let count = stores.len() as u32;
        let leadership = Leadership::sharded(ShardSet::sharded(count, ShardKey::Uid, false));
        let balance: Arc<dyn ShardBalance> = Arc::new(FairShare::new(
            leadership.clone(),
            live.clone(),
            Duration::from_secs(4),
        ));
        let cancel = CancellationToken::new();
        let mut conns = Vec::new();
        for (i, store) in stores.iter().enumerate() {
            let conn = Conn::new(store.clone());
            conns.push(conn.clone());
            let elector = Elector::new(
                conn,
                opts(identity, &format!("kubewasm-shard-{i}")),
                leadership.clone(),
            )
            .for_shard(i as u32, balance.clone());
            tokio::spawn(elector.run(cancel.clone()));
        }
        Replica {
            leadership,
            conns,
            cancel,
        }
    }

    /// No shard is acted on by two replicas at once.
    fn disjoint(replicas: &[&Replica]) -> bool {
        let mut seen = 0u64;
        for r in replicas {
            let s = r.leadership.state();
            if s.leading {
                if seen & s.shards.held != 0 {
                    return false;
                }
                seen |= s.shards.held;
            }
        }
        true
    }

    fn held(r: &Replica) -> u32 {
        let s = r.leadership.state();
        if s.leading { s.shards.held_count() } else { 0 }
    }

    /// Polls until `cond`, checking at every step that no shard has two
    /// acting replicas.
    async fn until(what: &str, replicas: &[&Replica], cond: impl Fn() -> bool) {
        let start = Instant::now();
        while !cond() {
            assert!(disjoint(replicas), "{what}: a shard acted on twice");
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{what} not within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(disjoint(replicas), "{what}: a shard acted on twice");
    }

    #[tokio::test(start_paused = true)]
    async fn a_replica_alone_takes_one_shard_at_once_and_the_rest_after_settling() {
        let stores: Vec<Arc<Store>> = (0..3).map(|_| Arc::new(Store::default())).collect();
        let (_live_tx, live) = watch::channel(1u32);
        let a = replica(&stores, "a", &live);
        until("a holds one", &[&a], || held(&a) == 1).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            held(&a),
            1,
            "no second shard within the first lease duration"
        );
        until("a holds all", &[&a], || held(&a) == 3).await;
        a.cancel.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn shards_spread_over_the_replicas_move_when_one_dies_and_come_back_when_it_returns() {
        let stores: Vec<Arc<Store>> = (0..3).map(|_| Arc::new(Store::default())).collect();
        let (live_tx, live) = watch::channel(3u32);
        let a = replica(&stores, "a", &live);
        let b = replica(&stores, "b", &live);
        let c = replica(&stores, "c", &live);
        let all = [&a, &b, &c];
        until("one shard each", &all, || all.iter().all(|r| held(r) == 1)).await;
        // Steady: nothing moves over many renewals.
        let terms: Vec<u64> = all.iter().map(|r| r.leadership.state().term).collect();
        tokio::time::sleep(Duration::from_secs(20)).await;
        let after: Vec<u64> = all.iter().map(|r| r.leadership.state().term).collect();
        assert_eq!(terms, after, "no shard moved while nothing changed");

        // c dies (cut off from every Lease); the members count two.
        for conn in &c.conns {
            conn.cut.store(true, Ordering::SeqCst);
        }
        live_tx.send(2).unwrap();
        until("c's shard taken over", &all, || {
            held(&a) + held(&b) == 3 && held(&c) == 0
        })
        .await;
        assert!(held(&a).max(held(&b)) == 2);

        // c is gone for good; d joins: the replica with two gives one up.
        c.cancel.cancel();
        live_tx.send(3).unwrap();
        let d = replica(&stores, "d", &live);
        let now = [&a, &b, &c, &d];
        until("d takes the shard given up", &now, || {
            held(&a) == 1 && held(&b) == 1 && held(&d) == 1
        })
        .await;
        // Scale down to one: it ends up with every shard.
        // (A replica's first lease duration: one shard at most.)
        a.cancel.cancel();
        d.cancel.cancel();
        live_tx.send(1).unwrap();
        until("b holds all three", &now, || held(&b) == 3).await;
        b.cancel.cancel();
    }
}
