//! heavy: the shard capacity benchmark's plugin (scripts/shard-capacity.sh).
//! For every ConfigMap added or updated in one namespace it does a fixed
//! amount of CPU work (`work` rounds of a 64-bit mix over the object's name
//! and resourceVersion: the same instructions for every delta, whatever the
//! machine), then waits `waitMicros` (a stand-in for a slow API a handler
//! calls; zero by default), then applies one ConfigMap named after the
//! object into `output` with the result (one action per delta).
//!
//! Config: `{"namespace": "in", "output": "out", "work": 200000,
//! "waitMicros": 0}`.

use std::time::Duration;

use kubewasm_sdk::prelude::*;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Config {
    namespace: String,
    output: String,
    work: u64,
    #[serde(default)]
    wait_micros: u64,
}

struct Heavy {
    config: Config,
}

/// `rounds` of a 64-bit mix (splitmix64's finaliser) seeded by `text`: a
/// fixed number of dependent multiplies the optimiser cannot skip, since
/// the result is written out.
fn digest(text: &str, rounds: u64) -> u64 {
    let mut h = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    for i in 0..rounds {
        h = h.wrapping_add(0x9e37_79b9_7f4a_7c15 ^ i);
        h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^= h >> 31;
    }
    h
}

impl Plugin for Heavy {
    fn new(ctx: &Context) -> Result<Self, String> {
        Ok(Self {
            config: ctx.parse_config()?,
        })
    }

    fn registration(&self) -> Registration {
        Registration::new()
            .subscribe(
                Subscription::resource("configmaps")
                    .namespace(self.config.namespace.clone())
                    .deltas([DeltaType::Added, DeltaType::Updated]),
            )
            .writes::<ConfigMap>()
    }

    fn handle(&mut self, delta: Delta) -> Result<Handled, HandlerError> {
        let d = digest(
            &format!("{}@{}", delta.name, delta.resource_version),
            self.config.work,
        );
        if self.config.wait_micros > 0 {
            std::thread::sleep(Duration::from_micros(self.config.wait_micros));
        }
        let result = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": delta.name, "namespace": self.config.output},
            "data": {"digest": format!("{d:016x}"), "of": delta.resource_version},
        });
        actions::apply_json(&result, true, &Preconditions::none())?;
        Ok(Done)
    }
}

kubewasm_sdk::export_plugin!(Heavy);
