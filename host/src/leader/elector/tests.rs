use std::sync::atomic::Ordering;

use super::memory::{Conn, Store};
use super::*;

fn opts(identity: &str) -> ElectionOptions {
    ElectionOptions {
        identity: identity.into(),
        lease_name: "kubewasm".into(),
        namespace: "test".into(),
        lease_duration: Duration::from_secs(4),
        renew_deadline: Duration::from_secs(3),
        retry_period: Duration::from_millis(500),
        shards: None,
    }
}

struct Replica {
    conn: Arc<Conn>,
    leadership: Leadership,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

fn replica(store: &Arc<Store>, identity: &str) -> Replica {
    replica_with(store, identity, Leadership::follower(), |e| e)
}

/// A replica whose elector `configure` finishes (a shard, its high waters)
/// before it runs, with `leadership` as its gate.
fn replica_with(
    store: &Arc<Store>,
    identity: &str,
    leadership: Leadership,
    configure: impl FnOnce(Elector) -> Elector,
) -> Replica {
    let conn = Conn::new(store.clone());
    let cancel = CancellationToken::new();
    let elector = configure(Elector::new(
        conn.clone(),
        opts(identity),
        leadership.clone(),
    ));
    let task = tokio::spawn(elector.run(cancel.clone()));
    Replica {
        conn,
        leadership,
        cancel,
        task,
    }
}

impl Replica {
    /// Waits (in paused time) until it leads, at most `limit`; how long
    /// that took.
    async fn leads(&self, what: &str, limit: Duration) -> Duration {
        until(what, limit, || self.leadership.is_leader()).await
    }

    /// Cancels its elector and waits for it to end (a leader releases);
    /// its gate, to look at afterwards.
    async fn stop(self) -> Leadership {
        self.cancel.cancel();
        self.task.await.unwrap();
        self.leadership
    }
}

/// Polls (in paused time) until `cond`, returning how long it took.
async fn until(what: &str, limit: Duration, cond: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "{what} not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

#[tokio::test(start_paused = true)]
async fn exactly_one_of_two_leads_and_keeps_leading() {
    let store = Arc::new(Store::default());
    let a = replica(&store, "a");
    a.leads("a leads", Duration::from_secs(1)).await;
    let b = replica(&store, "b");
    // Many renewals later, still exactly one leader: the holder.
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(a.leadership.is_leader());
        assert!(!b.leadership.is_leader());
        assert_eq!(store.holder().as_deref(), Some("a"));
    }
    assert_eq!(a.leadership.state().term, 1, "no flapping");
    tokio::join!(a.stop(), b.stop());
}

#[tokio::test(start_paused = true)]
async fn a_cut_off_leader_stops_acting_before_the_follower_may_start() {
    let store = Arc::new(Store::default());
    let a = replica(&store, "a");
    a.leads("a leads", Duration::from_secs(1)).await;
    let b = replica(&store, "b");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cut_at = Instant::now();
    a.conn.cut.store(true, Ordering::SeqCst);
    let mut a_rx = a.leadership.subscribe();
    let mut b_rx = b.leadership.subscribe();
    let a_stopped = async {
        a_rx.wait_for(|s| !s.leading).await.unwrap();
        Instant::now()
    };
    let b_started = async {
        b_rx.wait_for(|s| s.leading).await.unwrap();
        Instant::now()
    };
    let (a_stopped, b_started) = tokio::join!(a_stopped, b_started);
    // a stops within the renew deadline of its last renewal...
    assert!(
        a_stopped - cut_at <= Duration::from_secs(3),
        "{:?}",
        a_stopped - cut_at
    );
    // ...and b starts only once a's lease ran out on b's clock, after a stopped.
    assert!(b_started > a_stopped + Duration::from_millis(500));
    assert!(b_started - cut_at <= Duration::from_secs(4) + Duration::from_secs(1));
    assert_eq!(store.holder().as_deref(), Some("b"));
    // Reconnected, a stays a follower of b, ready to lead again.
    a.conn.cut.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!a.leadership.is_leader());
    b.stop().await;
    a.leads("a leads again", Duration::from_secs(2)).await;
    assert_eq!(a.leadership.state().term, 2, "a new term: a new replay");
    a.stop().await;
}

/// Always may take, never gives up.
struct Greedy(Arc<tokio::sync::Mutex<()>>);

impl ShardBalance for Greedy {
    fn may_take(&self) -> bool {
        true
    }
    fn should_give_up(&self, _: u32) -> bool {
        false
    }
    fn turn(&self) -> Arc<tokio::sync::Mutex<()>> {
        self.0.clone()
    }
}

/// A shard holder cut off past its renew deadline is suspended, not
/// lost: reconnected before anyone took its Lease, it renews its own
/// record and resumes with its `held_since` kept (what it set aside
/// goes on); had another replica held it, the suspension is forfeited.
#[tokio::test(start_paused = true)]
async fn a_shard_renewed_again_by_its_holder_resumes_and_one_taken_over_is_forfeited() {
    use crate::shard::{ShardKey, ShardSet};
    let store = Arc::new(Store::default());
    let balance: Arc<dyn ShardBalance> = Arc::new(Greedy(Arc::default()));
    let a = replica_with(
        &store,
        "a",
        Leadership::sharded(ShardSet::sharded(2, ShardKey::Uid, false)),
        |e| e.for_shard(0, balance),
    );
    let (conn, leadership) = (&a.conn, &a.leadership);
    until("a holds shard 0", Duration::from_secs(1), || {
        leadership.held_since(0).is_some()
    })
    .await;
    let since = leadership.held_since(0);
    conn.cut.store(true, Ordering::SeqCst);
    until("suspended", Duration::from_secs(4), || {
        leadership.suspended_since(0).is_some()
    })
    .await;
    assert_eq!(leadership.suspended_since(0), since);
    conn.cut.store(false, Ordering::SeqCst);
    until("held again", Duration::from_secs(2), || {
        leadership.held_since(0).is_some()
    })
    .await;
    assert_eq!(
        leadership.held_since(0),
        since,
        "nobody held it in between: held since the first term"
    );
    assert!(leadership.state().term > since.unwrap_or(0), "a new term");

    // Cut off again, and this time another replica takes the Lease.
    conn.cut.store(true, Ordering::SeqCst);
    until("suspended again", Duration::from_secs(4), || {
        leadership.suspended_since(0).is_some()
    })
    .await;
    let b = replica(&store, "b");
    until("b holds the Lease", Duration::from_secs(10), || {
        store.holder().as_deref() == Some("b")
    })
    .await;
    conn.cut.store(false, Ordering::SeqCst);
    until("the suspension forfeited", Duration::from_secs(3), || {
        leadership.suspended_since(0).is_none()
    })
    .await;
    b.stop().await;
    until("a holds shard 0 anew", Duration::from_secs(3), || {
        leadership.held_since(0).is_some()
    })
    .await;
    assert_eq!(
        leadership.held_since(0),
        Some(leadership.state().term),
        "taken from another holder: held since this term only"
    );
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn release_on_shutdown_hands_over_within_a_retry_period() {
    let store = Arc::new(Store::default());
    let a = replica(&store, "a");
    a.leads("a leads", Duration::from_secs(1)).await;
    let b = replica(&store, "b");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let a = a.stop().await;
    assert!(!a.is_leader());
    assert_ne!(store.holder().as_deref(), Some("a"), "released");
    let took = b.leads("b leads", Duration::from_secs(4)).await;
    assert!(
        took <= Duration::from_millis(600),
        "took {took:?}: a released lease is taken at the next retry, not after the lease duration"
    );
    b.stop().await;
}

/// Unsharded, a leader cut off past its renew deadline is suspended:
/// reconnected before anyone took the Lease, it renews its own record
/// and resumes, held since its first term.
#[tokio::test(start_paused = true)]
async fn an_unsharded_leader_renewed_again_by_itself_resumes() {
    let store = Arc::new(Store::default());
    let a = replica(&store, "a");
    a.leads("a leads", Duration::from_secs(1)).await;
    let since = a.leadership.held_since_whole();
    assert_eq!(since, Some(1));
    a.conn.cut.store(true, Ordering::SeqCst);
    until("suspended", Duration::from_secs(4), || {
        a.leadership.suspended_since_whole().is_some()
    })
    .await;
    a.conn.cut.store(false, Ordering::SeqCst);
    a.leads("leading again", Duration::from_secs(2)).await;
    assert_eq!(a.leadership.state().term, 2, "a new term");
    assert_eq!(a.leadership.held_since_whole(), since, "nobody in between");
    a.stop().await;
}

/// A replica releasing the Lease writes how far its informers had
/// followed the API server; the next holder is told to wait for it.
#[tokio::test(start_paused = true)]
async fn a_released_lease_carries_the_last_holders_high_waters_to_the_next() {
    let store = Arc::new(Store::default());
    let marks = super::super::HandoverMarks::from([("configmaps".to_owned(), 42)]);
    let a = replica_with(&store, "a", Leadership::follower(), |e| {
        e.with_high_waters(Arc::new({
            let marks = marks.clone();
            move || marks.clone()
        }))
    });
    a.leads("a leads", Duration::from_secs(1)).await;
    let b = replica(&store, "b");
    assert!(
        b.leadership.take_handover().is_empty(),
        "nothing handed over yet"
    );
    a.stop().await;
    b.leads("b leads", Duration::from_secs(2)).await;
    assert_eq!(b.leadership.take_handover(), marks);
    assert!(b.leadership.take_handover().is_empty(), "taken once");
    b.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_lease_taken_by_another_closes_the_gate_at_the_next_renewal() {
    let store = Arc::new(Store::default());
    let a = replica(&store, "a");
    a.leads("a leads", Duration::from_secs(1)).await;
    // Someone else forcibly takes it (an operator, a split brain).
    let intruder = Conn::new(store.clone());
    let mut l = intruder.get().await.unwrap().unwrap();
    if let Some(s) = l.spec.as_mut() {
        s.holder_identity = Some("z".into());
    }
    assert_eq!(intruder.replace(l).await.unwrap(), Written::Done);
    let took = until("a follows", Duration::from_secs(2), || {
        !a.leadership.is_leader()
    })
    .await;
    assert!(took <= Duration::from_millis(600), "{took:?}");
    a.stop().await;
}
