//! testkit: misbehaves on purpose, as its config says, for the host's
//! isolation tests. `{"mode": M}` with M one of: ok, trap, spin, oom, retry,
//! permanent, register-error, echo. Misbehaviour applies to objects whose
//! name starts with the mode's name (`trap-1`, `spin-x`, ...); `echo`
//! annotates every object it sees with the delta type.
use std::cell::RefCell;

use kubewasm_sdk::prelude::*;

thread_local! {
    static MODE: RefCell<String> = const { RefCell::new(String::new()) };
    static HOARD: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

struct Testkit;

impl Plugin for Testkit {
    fn register(config: String) -> Result<Registration, String> {
        let v: serde_json::Value = serde_json::from_str(&config).map_err(|e| e.to_string())?;
        let mode = v["mode"].as_str().unwrap_or("ok").to_owned();
        if mode == "register-error" {
            return Err("refused by config".into());
        }
        MODE.with(|m| *m.borrow_mut() = mode);
        let all = [DeltaType::Added, DeltaType::Updated, DeltaType::Deleted];
        Ok(Registration {
            subscriptions: vec![subscribe::<Pod>(&all), subscribe::<ConfigMap>(&all)],
            writes: vec![kind::<Pod>(), kind::<ConfigMap>()],
            indexes: vec![],
        })
    }

    fn handle(delta: Delta) -> Result<(), HandlerError> {
        let Some(meta) = &delta.meta else {
            return Ok(());
        };
        let mode = MODE.with(|m| m.borrow().clone());
        if mode == "echo" {
            let dtype = match delta.delta_type {
                DeltaType::Added => "added",
                DeltaType::Updated => "updated",
                DeltaType::Deleted => "deleted",
                DeltaType::Resync => "resync",
                DeltaType::Synced => "synced",
            }
            .to_owned();
            log::info("echo", &[("name", &meta.name), ("delta", &dtype)]);
            if delta.delta_type == DeltaType::Deleted {
                return Ok(());
            }
            let r = if delta.kind.kind == "Pod" {
                object_ref::<Pod>(meta)
            } else {
                object_ref::<ConfigMap>(meta)
            };
            let patch =
                serde_json::json!({"metadata": {"annotations": {"kubewasm.io/seen": dtype}}});
            return actions::patch(&r, PatchType::Merge, &patch.to_string())
                .map_err(kubewasm_sdk::action_error);
        }
        if mode == "ok" || !meta.name.starts_with(mode.as_str()) {
            return Ok(());
        }
        match mode.as_str() {
            "trap" => core::arch::wasm32::unreachable(),
            "spin" => {
                let mut x: u64 = 0;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            "oom" => loop {
                let mut chunk = vec![0u8; 1 << 20];
                chunk[0] = 1;
                HOARD.with(|h| h.borrow_mut().push(chunk));
            },
            "retry" => Err(retry("asked to retry")),
            "permanent" => Err(permanent("asked to fail")),
            _ => Ok(()),
        }
    }
}

kubewasm_sdk::export_plugin!(Testkit);
