//! testkit: misbehaves on purpose, as its config says, for the host's
//! isolation tests. See README.md for the modes.

use kubewasm_sdk::prelude::*;
use serde::Deserialize;

#[derive(Deserialize, Clone, Copy, PartialEq, Eq, Debug, Default)]
#[serde(rename_all = "kebab-case")]
enum Mode {
    #[default]
    Ok,
    Trap,
    Spin,
    Oom,
    Retry,
    Permanent,
    RegisterError,
    Echo,
    Panic,
    Flood,
    TwoCaches,
    Leak,
    Actions,
    Log,
    Sleep,
    Probe,
    Connect,
    /// Connects to the first `connect` address and reads until the peer
    /// answers (the tests' peer never does): a guest blocked in a socket
    /// read, which only the call's deadline ends.
    Stall,
    /// WIT 0.2's reconcile outcomes: a first attempt fails with `retry`,
    /// the second records what it was told and asks to be requeued.
    Reconcile,
    /// A write with a resourceVersion precondition that goes stale: the
    /// first attempt waits until the object changes, then writes with the
    /// delta's (now old) resourceVersion; later attempts write with theirs.
    Conflict,
    /// Logs every delta and asks to be requeued after `count` ms; refuses
    /// deletes while `failDeletes` is set.
    Requeue,
}

impl Mode {
    /// The name prefix of the objects this mode misbehaves on.
    fn prefix(self) -> &'static str {
        match self {
            Self::Trap => "trap",
            Self::Spin => "spin",
            Self::Oom => "oom",
            Self::Retry => "retry",
            Self::Permanent => "permanent",
            Self::Panic => "panic",
            Self::Flood => "flood",
            Self::Leak => "leak",
            Self::Actions => "actions",
            Self::Log => "log",
            Self::Sleep => "sleep",
            Self::Reconcile => "reconcile",
            Self::Conflict => "conflict",
            Self::Requeue => "requeue",
            Self::Ok
            | Self::RegisterError
            | Self::Echo
            | Self::TwoCaches
            | Self::Probe
            | Self::Connect
            | Self::Stall => "",
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    mode: Mode,
    /// How many handles, actions or log records the `leak`, `actions` and
    /// `log` modes make per call; seconds for `sleep`.
    #[serde(default = "default_count")]
    count: u32,
    /// `connect` mode: the `host:port` addresses to open a TCP connection to.
    #[serde(default)]
    connect: Vec<String>,
    /// `requeue` mode: the configmaps subscription's resync period in
    /// seconds (unset: the host's default).
    #[serde(default)]
    resync: Option<u32>,
    /// `requeue` mode: deletes fail with `retry`.
    #[serde(default, rename = "failDeletes")]
    fail_deletes: bool,
    /// `requeue` mode: a label put on every log line, to tell versions apart.
    #[serde(default)]
    tag: String,
}

fn default_count() -> u32 {
    100
}

struct Testkit {
    /// The name and version the host gave at register.
    name: String,
    version: String,
    mode: Mode,
    count: u32,
    connect: Vec<String>,
    resync: Option<u32>,
    fail_deletes: bool,
    tag: String,
    /// What `oom` allocates, kept so nothing is freed.
    hoard: Vec<Vec<u8>>,
}

impl Plugin for Testkit {
    fn new(ctx: &Context) -> Result<Self, String> {
        let config: Config = ctx.parse_config()?;
        if config.mode == Mode::RegisterError {
            return Err("refused by config".to_owned());
        }
        Ok(Self {
            name: ctx.name.clone(),
            version: ctx.version.clone(),
            mode: config.mode,
            count: config.count,
            connect: config.connect,
            resync: config.resync,
            fail_deletes: config.fail_deletes,
            tag: config.tag,
            hoard: Vec::new(),
        })
    }

    fn registration(&self) -> Registration {
        let deltas = [DeltaType::Added, DeltaType::Updated, DeltaType::Deleted];
        if self.mode == Mode::TwoCaches {
            return Registration::new()
                .subscribe(Subscription::kind::<Pod>().deltas([DeltaType::Added]))
                .subscribe(
                    Subscription::kind::<ConfigMap>()
                        .namespace("one")
                        .cache_only(),
                )
                .subscribe(
                    Subscription::kind::<ConfigMap>()
                        .namespace("two")
                        .cache_only(),
                )
                .index(Index::new::<ConfigMap>("by-app", "/data/app"))
                .writes::<Pod>();
        }
        if self.mode == Mode::Requeue {
            let mut configmaps = Subscription::kind::<ConfigMap>().deltas([
                DeltaType::Added,
                DeltaType::Updated,
                DeltaType::Deleted,
                DeltaType::Resync,
            ]);
            if let Some(seconds) = self.resync {
                configmaps = configmaps.resync_every(seconds);
            }
            return Registration::new().subscribe(configmaps);
        }
        Registration::new()
            .subscribe(Subscription::kind::<Pod>().deltas(deltas))
            .subscribe(Subscription::kind::<ConfigMap>().deltas(deltas))
            .writes::<Pod>()
            .writes::<ConfigMap>()
    }

    fn handle(&mut self, delta: Delta) -> Result<Handled, HandlerError> {
        if self.mode == Mode::Reconcile && delta.name.starts_with("reconcile") {
            return self.reconcile(&delta);
        }
        if self.mode == Mode::Requeue {
            return self.requeue(&delta);
        }
        if self.mode == Mode::Conflict && delta.name.starts_with("conflict") {
            return conflict(&delta, &self.connect).map(|()| Done);
        }
        self.handle_delta(&delta).map(|()| Done)
    }
}

impl Testkit {
    /// `reconcile` mode: an `added` or `updated` delta fails its first
    /// attempt with `retry`; its second attempt records a Normal Event
    /// `Reconciled` whose note is
    /// `{"type","attempt","lastFailure","plugin","version"}` and asks to be
    /// requeued after `count` milliseconds; the `requeue` delta records the
    /// same Event and is done.
    fn reconcile(&self, delta: &Delta) -> Result<Handled, HandlerError> {
        let requeue = delta.delta_type == DeltaType::Requeue;
        if !requeue && !matches!(delta.delta_type, DeltaType::Added | DeltaType::Updated) {
            return Ok(Done);
        }
        if !requeue && delta.attempt == 1 {
            return Err(retry(format!("first attempt at {}", delta.key())));
        }
        let Some(target) = ObjectRef::from_delta(delta) else {
            return Ok(Done);
        };
        let note = kubewasm_sdk::serde_json::json!({
            "type": delta.delta_type.as_str(),
            "attempt": delta.attempt,
            "lastFailure": delta.last_failure.as_ref().map(ToString::to_string),
            "plugin": self.name,
            "version": self.version,
        });
        actions::record_event(
            &EventRecord::new(target, EventType::Normal, "Reconciled", note.to_string())
                .with_regarding_uid(&delta.uid),
        )?;
        Ok(if requeue {
            Done
        } else {
            requeue_after(std::time::Duration::from_millis(self.count.into()))
        })
    }

    /// `requeue` mode: logs `testkit-requeue {"tag","type","namespace",
    /// "name","attempt","initial","lastFailure"}` for every delta of an
    /// object named `requeue*`; a delete then fails with `retry` while
    /// `failDeletes` is set, every other delta asks to be requeued after
    /// `count` milliseconds.
    fn requeue(&self, delta: &Delta) -> Result<Handled, HandlerError> {
        if delta.delta_type == DeltaType::Synced || !delta.name.starts_with("requeue") {
            return Ok(Done);
        }
        let line = kubewasm_sdk::serde_json::json!({
            "tag": self.tag,
            "type": delta.delta_type.as_str(),
            "namespace": delta.namespace,
            "name": delta.name,
            "attempt": delta.attempt,
            "initial": delta.initial,
            "lastFailure": delta.last_failure.as_ref().map(Failure::kind),
        });
        log::info(&format!("testkit-requeue {line}"), &[]);
        if delta.delta_type == DeltaType::Deleted {
            if self.fail_deletes {
                return Err(retry(format!(
                    "refusing the delete of {} (failDeletes)",
                    delta.key()
                )));
            }
            return Ok(Done);
        }
        Ok(requeue_after(std::time::Duration::from_millis(
            self.count.into(),
        )))
    }

    fn handle_delta(&mut self, delta: &Delta) -> Result<(), HandlerError> {
        let object = delta.object()?;
        if self.mode == Mode::Echo {
            return echo(delta, object);
        }
        if self.mode == Mode::TwoCaches {
            return two_caches(delta);
        }
        if self.mode == Mode::Probe {
            return probe(delta);
        }
        if self.mode == Mode::Connect {
            return connect(delta, &self.connect);
        }
        if self.mode == Mode::Stall {
            return stall(delta, &self.connect);
        }
        let prefix = self.mode.prefix();
        if prefix.is_empty() || !delta.name.starts_with(prefix) {
            return Ok(());
        }
        match self.mode {
            // Handled before this.
            Mode::Reconcile | Mode::Conflict | Mode::Requeue => Ok(()),
            Mode::Trap => trap(),
            Mode::Spin => spin(),
            Mode::Oom => loop {
                // 1 MiB at a time, every byte written, until allocation fails
                // (which aborts: a trap).
                self.hoard.push(vec![0xa5; 1 << 20]);
            },
            Mode::Retry => Err(retry(format!("asked to retry {}", delta.key()))),
            Mode::Permanent => Err(permanent(format!("asked to fail {}", delta.key()))),
            Mode::Panic => panic!("testkit panicked on purpose on {}", delta.key()),
            Mode::Flood => {
                use std::io::Write;
                let line = [b'f'; 1023];
                let mut err = std::io::stderr().lock();
                for _ in 0..200 {
                    let _ = err.write_all(&line);
                    let _ = err.write_all(b"\n");
                }
                Ok(())
            }
            Mode::Leak => {
                // Handles the guest never drops.
                for _ in 0..self.count {
                    std::mem::forget(cache::get::<Pod>(delta.namespace.as_deref(), &delta.name)?);
                }
                Ok(())
            }
            Mode::Actions => {
                let Some(target) = ObjectRef::from_delta(delta) else {
                    return Ok(());
                };
                let uid = Preconditions::uid(&delta.uid);
                for i in 0..self.count {
                    actions::annotate(&target, &[("kubewasm.io/n", &i.to_string())], &uid)?;
                }
                Ok(())
            }
            Mode::Log => {
                let line = "l".repeat(1023);
                for _ in 0..self.count {
                    log::info(&line, &[]);
                }
                Ok(())
            }
            Mode::Sleep => {
                std::thread::sleep(std::time::Duration::from_secs(self.count.into()));
                Ok(())
            }
            Mode::Ok
            | Mode::RegisterError
            | Mode::Echo
            | Mode::TwoCaches
            | Mode::Probe
            | Mode::Connect
            | Mode::Stall => Ok(()),
        }
    }
}

/// The annotation the `conflict` mode writes.
const HANDLED: &str = "kubewasm.io/handled";

/// `conflict` mode, for an `added` or `updated` object: done when its
/// annotation `kubewasm.io/handled` already starts with `v=<data.v> `.
/// Otherwise a first attempt (of an object never handled) logs
/// `testkit-conflict waiting <ns>/<name> rv=<rv>` and waits for the test:
/// it connects to the first `connect` address and reads until the peer
/// sends a byte (a call's cache is a snapshot, so it cannot watch the
/// object change); then it merge-patches the annotation `v=<its data.v>
/// attempt=1 last=none` with the delta's uid and resourceVersion as
/// preconditions, which the test has made stale meanwhile. Any other
/// attempt writes `v=<data.v> attempt=<n> last=<failure kind or none>`
/// with its delta's preconditions.
fn conflict(delta: &Delta, connect: &[String]) -> Result<(), HandlerError> {
    if !matches!(delta.delta_type, DeltaType::Added | DeltaType::Updated) {
        return Ok(());
    }
    let object = delta.object()?;
    let v = object.field_str("/data/v").unwrap_or_default();
    let handled = object.annotation(HANDLED);
    if handled
        .as_deref()
        .is_some_and(|h| h.starts_with(&format!("v={v} ")))
    {
        return Ok(());
    }
    let Some(target) = ObjectRef::from_delta(delta) else {
        return Ok(());
    };
    if delta.attempt == 1 && handled.is_none() {
        log::info(
            &format!(
                "testkit-conflict waiting {} rv={}",
                delta.key(),
                delta.resource_version
            ),
            &[],
        );
        let Some(addr) = connect.first() else {
            return Err(permanent("conflict mode needs a connect address"));
        };
        let addr: std::net::SocketAddrV4 = addr
            .parse()
            .map_err(|e| permanent(format!("{addr}: {e}")))?;
        blocking_read_one(addr).map_err(retry)?;
    }
    let last = delta.last_failure.as_ref().map_or("none", Failure::kind);
    let value = format!("v={v} attempt={} last={last}", delta.attempt);
    actions::annotate(
        &target,
        &[(HANDLED, &value)],
        &Preconditions::of_delta(delta),
    )
}

/// Logs the delta; for all but `deleted`, annotates the object with its
/// delta type.
fn echo(delta: &Delta, object: &Object) -> Result<(), HandlerError> {
    let namespace = delta.namespace.as_deref().unwrap_or("");
    let initial = delta.initial.to_string();
    let kind = object.kind().kind;
    log::info(
        "echo",
        &[
            ("kind", &kind),
            ("namespace", namespace),
            ("name", &delta.name),
            ("delta", delta.delta_type.as_str()),
            ("initial", &initial),
        ],
    );
    if delta.delta_type == DeltaType::Deleted {
        return Ok(());
    }
    let Some(target) = ObjectRef::from_delta(delta) else {
        return Ok(());
    };
    actions::annotate(
        &target,
        &[("kubewasm.io/seen", delta.delta_type.as_str())],
        &Preconditions::uid(&delta.uid),
    )
}

/// Reads the ConfigMaps named like the pod in namespaces `one` and `two`
/// (two subscriptions to one kind) and through the `by-app` index; records
/// what it found as an annotation on the pod.
fn two_caches(delta: &Delta) -> Result<(), HandlerError> {
    let one = cache::get::<ConfigMap>(Some("one"), &delta.name)?.is_some();
    let two = cache::get::<ConfigMap>(Some("two"), &delta.name)?.is_some();
    let listed = cache::list::<ConfigMap>(None, None)?.len();
    let indexed = cache::by_index("by-app", &delta.name)?.len();
    let found = format!("one={one},two={two},listed={listed},indexed={indexed}");
    let Some(target) = ObjectRef::from_delta(delta) else {
        return Ok(());
    };
    actions::annotate(
        &target,
        &[("kubewasm.io/found", &found)],
        &Preconditions::uid(&delta.uid),
    )
}

/// Tries, for each added pod, what the sidecar may refuse: a cache read of
/// ConfigMap `x` in namespace `probe`, its delete, and an Event regarding
/// the pod; records each outcome (`ok` or the host's error) as an
/// annotation on the pod.
fn probe(delta: &Delta) -> Result<(), HandlerError> {
    if delta.delta_type != DeltaType::Added {
        return Ok(());
    }
    let outcome = |r: Result<(), HandlerError>| match r {
        Ok(()) => "ok".to_owned(),
        Err(e) => e.message().to_owned(),
    };
    let read = outcome(cache::get::<ConfigMap>(Some("probe"), "x").map(|_| ()));
    let delete = outcome(actions::delete(
        &ObjectRef::new(KindRef::resource("configmaps"), Some("probe"), "x"),
        Propagation::Background,
        &Preconditions::none(),
    ));
    let Some(target) = ObjectRef::from_delta(delta) else {
        return Ok(());
    };
    let event = outcome(actions::record_event(
        &EventRecord::new(target.clone(), EventType::Normal, "Probed", "testkit probe")
            .with_regarding_uid(&delta.uid),
    ));
    actions::annotate(
        &target,
        &[
            ("kubewasm.io/read", &read),
            ("kubewasm.io/delete", &delete),
            ("kubewasm.io/event", &event),
        ],
        &Preconditions::uid(&delta.uid),
    )
}

/// For each added pod, opens a TCP connection to each configured address
/// (through WASI sockets, as the sidecar's network grant allows) and records
/// `ok` or the error per address as an annotation `kubewasm.io/connect`.
fn connect(delta: &Delta, addrs: &[String]) -> Result<(), HandlerError> {
    if delta.delta_type != DeltaType::Added {
        return Ok(());
    }
    let outcomes: Vec<String> = addrs
        .iter()
        .map(|a| match std::net::TcpStream::connect(a.as_str()) {
            Ok(_) => format!("{a}=ok"),
            Err(e) => format!("{a}=error: {}", e.kind()),
        })
        .collect();
    let Some(target) = ObjectRef::from_delta(delta) else {
        return Ok(());
    };
    actions::annotate(
        &target,
        &[("kubewasm.io/connect", &outcomes.join(";"))],
        &Preconditions::uid(&delta.uid),
    )
}

fn stall(delta: &Delta, addrs: &[String]) -> Result<(), HandlerError> {
    if delta.delta_type != DeltaType::Added {
        return Ok(());
    }
    let Some(addr) = addrs.first() else {
        return Err(HandlerError::Permanent(
            "stall mode needs a connect address".into(),
        ));
    };
    let addr: std::net::SocketAddrV4 = addr
        .parse()
        .map_err(|e| HandlerError::Permanent(format!("{addr}: {e}")))?;
    let n = blocking_read_one(addr).map_err(HandlerError::Retry)?;
    Err(HandlerError::Retry(format!(
        "the peer answered {n} byte(s)"
    )))
}

/// Connects with raw WASI sockets and blocks in the stream's own
/// `blocking-read` (what a guest without a poll loop does).
#[cfg(target_arch = "wasm32")]
fn blocking_read_one(addr: std::net::SocketAddrV4) -> Result<usize, String> {
    use wasip2::sockets::network::{IpAddressFamily, IpSocketAddress, Ipv4SocketAddress};
    let network = wasip2::sockets::instance_network::instance_network();
    let socket = wasip2::sockets::tcp_create_socket::create_tcp_socket(IpAddressFamily::Ipv4)
        .map_err(|e| format!("socket: {e:?}"))?;
    let [a, b, c, d] = addr.ip().octets();
    let remote = IpSocketAddress::Ipv4(Ipv4SocketAddress {
        port: addr.port(),
        address: (a, b, c, d),
    });
    socket
        .start_connect(&network, remote)
        .map_err(|e| format!("connect {addr}: {e:?}"))?;
    let (input, _output) = loop {
        match socket.finish_connect() {
            Ok(streams) => break streams,
            Err(wasip2::sockets::network::ErrorCode::WouldBlock) => socket.subscribe().block(),
            Err(e) => return Err(format!("connect {addr}: {e:?}")),
        }
    };
    let bytes = input
        .blocking_read(1)
        .map_err(|e| format!("read {addr}: {e:?}"))?;
    Ok(bytes.len())
}

#[cfg(not(target_arch = "wasm32"))]
fn blocking_read_one(_addr: std::net::SocketAddrV4) -> Result<usize, String> {
    Err("stall mode runs only as a component".into())
}

#[cfg(target_arch = "wasm32")]
fn trap() -> ! {
    core::arch::wasm32::unreachable()
}

#[cfg(not(target_arch = "wasm32"))]
fn trap() -> ! {
    std::process::abort()
}

fn spin() -> ! {
    let mut x: u64 = 0;
    loop {
        x = std::hint::black_box(x.wrapping_add(1));
    }
}

kubewasm_sdk::export_plugin!(Testkit);
