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
            Self::Ok | Self::RegisterError | Self::Echo => "",
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    mode: Mode,
}

struct Testkit {
    mode: Mode,
    /// What `oom` allocates, kept so nothing is freed.
    hoard: Vec<Vec<u8>>,
}

impl Plugin for Testkit {
    fn new(config: &str) -> Result<Self, String> {
        let config: Config = parse_config(config)?;
        if config.mode == Mode::RegisterError {
            return Err("refused by config".to_owned());
        }
        Ok(Self {
            mode: config.mode,
            hoard: Vec::new(),
        })
    }

    fn registration(&self) -> Registration {
        let deltas = [DeltaType::Added, DeltaType::Updated, DeltaType::Deleted];
        Registration::new()
            .subscribe(Subscription::kind::<Pod>().deltas(deltas))
            .subscribe(Subscription::kind::<ConfigMap>().deltas(deltas))
            .writes::<Pod>()
            .writes::<ConfigMap>()
    }

    fn handle(&mut self, delta: Delta) -> Result<(), HandlerError> {
        let (meta, _) = delta.parts()?;
        if self.mode == Mode::Echo {
            return echo(&delta, meta);
        }
        let prefix = self.mode.prefix();
        if prefix.is_empty() || !meta.name.starts_with(prefix) {
            return Ok(());
        }
        match self.mode {
            Mode::Trap => trap(),
            Mode::Spin => spin(),
            Mode::Oom => loop {
                // 1 MiB at a time, every byte written, until allocation fails
                // (which aborts: a trap).
                self.hoard.push(vec![0xa5; 1 << 20]);
            },
            Mode::Retry => Err(retry(format!("asked to retry {}", meta.key()))),
            Mode::Permanent => Err(permanent(format!("asked to fail {}", meta.key()))),
            Mode::Ok | Mode::RegisterError | Mode::Echo => Ok(()),
        }
    }
}

/// Logs the delta; for all but `deleted`, annotates the object with its
/// delta type.
fn echo(delta: &Delta, meta: &ObjectMeta) -> Result<(), HandlerError> {
    let namespace = meta.namespace.as_deref().unwrap_or("");
    let initial = delta.initial.to_string();
    log::info(
        "echo",
        &[
            ("kind", &delta.kind.kind),
            ("namespace", namespace),
            ("name", &meta.name),
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
    actions::annotate(&target, &[("kubewasm.io/seen", delta.delta_type.as_str())])
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
