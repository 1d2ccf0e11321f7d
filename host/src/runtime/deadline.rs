//! Call deadlines inside host calls. Epoch interruption stops guest code,
//! but not a guest blocked in a WASI call: a 30 s sleep would run 30 s
//! past a 1 s deadline. The monotonic clock's `subscribe-duration` and
//! `subscribe-instant` are shadowed here so that every wait ends at the
//! call's deadline at the latest; a call whose wait was cut fails as a
//! timeout whatever the guest does next.
//!
//! `wasi:io/poll`'s `poll` and `pollable.block` are shadowed too, so a wait
//! on any pollable (a socket, a stream) also ends at the deadline, and so
//! are the streams' own blocking methods (`blocking-read`, `blocking-skip`,
//! `blocking-write-and-flush`, `blocking-write-zeroes-and-flush`,
//! `blocking-flush`, `blocking-splice`): one cut at the deadline answers
//! `closed`, and the call fails as a timeout.

use std::time::Duration;

use wasmtime::StoreContextMut;
use wasmtime::component::ResourceTable;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::WasiView;
use wasmtime_wasi::clocks::WasiClocksCtxView;
use wasmtime_wasi::p2::bindings::sync::io::streams as sync_streams;
use wasmtime_wasi::p2::{
    DynInputStream, DynOutputStream, DynPollable, Pollable, StreamError, StreamResult, subscribe,
};

use super::host::HostState;

/// The `wasi:clocks` version wasmtime-wasi 48 defines (guests built for
/// older 0.2.x versions resolve to it).
pub const CLOCKS_INSTANCE: &str = "wasi:clocks/monotonic-clock@0.2.12";
/// Likewise for `wasi:io/poll`.
pub const POLL_INSTANCE: &str = "wasi:io/poll@0.2.12";
/// Likewise for `wasi:io/streams`.
pub const STREAMS_INSTANCE: &str = "wasi:io/streams@0.2.12";

/// A wait that ends at a fixed instant.
struct Sleep(tokio::time::Instant);

#[wasmtime_wasi::async_trait]
impl Pollable for Sleep {
    async fn ready(&mut self) {
        tokio::time::sleep_until(self.0).await;
    }
}

/// The wait the guest asked for, cut at the call's deadline (which the
/// call then fails with).
fn wait(
    mut store: StoreContextMut<'_, HostState>,
    asked: Duration,
) -> wasmtime::Result<Resource<DynPollable>> {
    let state = store.data_mut();
    let left = state
        .deadline
        .map(|d| d.saturating_duration_since(std::time::Instant::now()));
    let granted = match left {
        Some(left) if left < asked => {
            state.wait_cut = true;
            left
        }
        _ => asked,
    };
    let table = state.ctx().table;
    // Far beyond what an Instant can hold: a wait cut by nothing is endless
    // (as wasmtime-wasi's own clock does), here a year.
    let until = tokio::time::Instant::now()
        .checked_add(granted)
        .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(365 * 86_400));
    let sleep = table.push(Sleep(until))?;
    subscribe(table, sleep)
}

/// Shadows the clock's waits in `linker` (after wasmtime-wasi is linked).
pub fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut clock = linker.instance(CLOCKS_INSTANCE)?;
    clock.func_wrap(
        "subscribe-duration",
        |store: StoreContextMut<'_, HostState>, (nanos,): (u64,)| {
            Ok((wait(store, Duration::from_nanos(nanos))?,))
        },
    )?;
    clock.func_wrap(
        "subscribe-instant",
        |mut store: StoreContextMut<'_, HostState>, (when,): (u64,)| {
            let now = {
                use wasmtime_wasi::p2::bindings::clocks::monotonic_clock::Host as _;
                let view = store.data_mut().ctx();
                WasiClocksCtxView {
                    ctx: view.ctx.clocks(),
                    table: view.table,
                }
                .now()?
            };
            Ok((wait(store, Duration::from_nanos(when.saturating_sub(now)))?,))
        },
    )?;
    let mut poll = linker.instance(POLL_INSTANCE)?;
    poll.func_wrap(
        "poll",
        |mut store: StoreContextMut<'_, HostState>, (list,): (Vec<Resource<DynPollable>>,)| {
            use wasmtime_wasi::p2::bindings::io::poll::Host as _;
            let left = remaining(&store);
            let table = store.data_mut().ctx().table;
            let ready = match left {
                None => wasmtime_wasi::runtime::in_tokio(table.poll(list))?,
                Some(left) => {
                    // The timer is made inside the runtime the wait runs on.
                    match wasmtime_wasi::runtime::in_tokio(async {
                        tokio::time::timeout(left, table.poll(list)).await
                    }) {
                        Ok(ready) => ready?,
                        Err(_) => {
                            // Nothing ready by the deadline: the call fails
                            // as a timeout whatever the guest makes of this.
                            store.data_mut().wait_cut = true;
                            Vec::new()
                        }
                    }
                }
            };
            Ok((ready,))
        },
    )?;
    poll.func_wrap(
        "[method]pollable.block",
        |mut store: StoreContextMut<'_, HostState>, (p,): (Resource<DynPollable>,)| {
            use wasmtime_wasi::p2::bindings::io::poll::HostPollable as _;
            let left = remaining(&store);
            let table = store.data_mut().ctx().table;
            match left {
                None => wasmtime_wasi::runtime::in_tokio(table.block(p))?,
                Some(left) => {
                    if wasmtime_wasi::runtime::in_tokio(async {
                        tokio::time::timeout(left, table.block(p)).await
                    })
                    .is_err()
                    {
                        store.data_mut().wait_cut = true;
                    }
                }
            }
            Ok(())
        },
    )?;
    add_streams(linker)?;
    linker.allow_shadowing(false);
    Ok(())
}

/// Runs a stream's blocking method `op`, cut at the call's deadline.
fn bounded<T>(
    mut store: StoreContextMut<'_, HostState>,
    op: impl AsyncFnOnce(&mut ResourceTable) -> StreamResult<T>,
) -> wasmtime::Result<(Result<T, sync_streams::StreamError>,)> {
    let left = remaining(&store);
    let (result, cut) = {
        let table = store.data_mut().ctx().table;
        match left {
            None => (wasmtime_wasi::runtime::in_tokio(op(table)), false),
            Some(left) => {
                match wasmtime_wasi::runtime::in_tokio(async {
                    tokio::time::timeout(left, op(table)).await
                }) {
                    Ok(r) => (r, false),
                    Err(_) => (Err(StreamError::Closed), true),
                }
            }
        }
    };
    if cut {
        store.data_mut().wait_cut = true;
    }
    match result {
        Ok(v) => Ok((Ok(v),)),
        Err(e) => {
            let table = store.data_mut().ctx().table;
            Ok((Err(sync_streams::Host::convert_stream_error(table, e)?),))
        }
    }
}

fn add_streams(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    use wasmtime_wasi::p2::bindings::io::streams::{HostInputStream, HostOutputStream};
    let mut streams = linker.instance(STREAMS_INSTANCE)?;
    streams.func_wrap(
        "[method]input-stream.blocking-read",
        |store: StoreContextMut<'_, HostState>, (s, len): (Resource<DynInputStream>, u64)| {
            bounded(store, async move |t| {
                HostInputStream::blocking_read(t, s, len).await
            })
        },
    )?;
    streams.func_wrap(
        "[method]input-stream.blocking-skip",
        |store: StoreContextMut<'_, HostState>, (s, len): (Resource<DynInputStream>, u64)| {
            bounded(store, async move |t| {
                HostInputStream::blocking_skip(t, s, len).await
            })
        },
    )?;
    streams.func_wrap(
        "[method]output-stream.blocking-write-and-flush",
        |store: StoreContextMut<'_, HostState>,
         (s, bytes): (Resource<DynOutputStream>, Vec<u8>)| {
            bounded(store, async move |t| {
                HostOutputStream::blocking_write_and_flush(t, s, bytes).await
            })
        },
    )?;
    streams.func_wrap(
        "[method]output-stream.blocking-write-zeroes-and-flush",
        |store: StoreContextMut<'_, HostState>, (s, len): (Resource<DynOutputStream>, u64)| {
            bounded(store, async move |t| {
                HostOutputStream::blocking_write_zeroes_and_flush(t, s, len).await
            })
        },
    )?;
    streams.func_wrap(
        "[method]output-stream.blocking-flush",
        |store: StoreContextMut<'_, HostState>, (s,): (Resource<DynOutputStream>,)| {
            bounded(store, async move |t| {
                HostOutputStream::blocking_flush(t, s).await
            })
        },
    )?;
    streams.func_wrap(
        "[method]output-stream.blocking-splice",
        |store: StoreContextMut<'_, HostState>,
         (dst, src, len): (Resource<DynOutputStream>, Resource<DynInputStream>, u64)| {
            bounded(store, async move |t| {
                HostOutputStream::blocking_splice(t, dst, src, len).await
            })
        },
    )?;
    Ok(())
}

/// Time left before the current call's deadline (`None`: no call running).
fn remaining(store: &StoreContextMut<'_, HostState>) -> Option<Duration> {
    store
        .data()
        .deadline
        .map(|d| d.saturating_duration_since(std::time::Instant::now()))
}
