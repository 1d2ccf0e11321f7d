//! {{name}}: a kubewasm plugin. It subscribes to ConfigMap `added` deltas
//! and annotates each ConfigMap with `kubewasm.io/hello: <plugin name>`.
//! `sdk/` is the kubewasm Rust SDK (`sdk/README.md` is its reference).

use kubewasm_sdk::prelude::*;

struct Hello {
    /// The name the host loaded this plugin under.
    name: String,
}

impl Plugin for Hello {
    fn new(ctx: &Context) -> Result<Self, String> {
        Ok(Self {
            name: ctx.name.clone(),
        })
    }

    fn registration(&self) -> Registration {
        Registration::new()
            .subscribe(Subscription::kind::<ConfigMap>().deltas([DeltaType::Added]))
            .writes::<ConfigMap>()
    }

    fn handle(&mut self, delta: Delta) -> Result<Handled, HandlerError> {
        log::info("hello", &[("name", &delta.name)]);
        // One merge patch, only if the ConfigMap is still the one this delta
        // is about (its uid): a namesake created since is left alone.
        actions::annotate(
            &ObjectRef::for_delta::<ConfigMap>(&delta),
            &[("kubewasm.io/hello", &self.name)],
            &Preconditions::uid(&delta.uid),
        )?;
        Ok(Done)
    }
}

kubewasm_sdk::export_plugin!(Hello);

/// A unit test through the SDK's fake host (`cargo test`): no WebAssembly,
/// no host. `FakeHost` stands in for the host: put objects into its cache,
/// load the plugin, hand it deltas, then check the actions it emitted
/// (`take_action_lines`, `take_actions`) and what it logged (`take_logs`).
#[cfg(test)]
mod tests {
    use kubewasm_sdk::fake::FakeHost;
    use kubewasm_sdk::serde_json::json;

    use super::*;

    #[test]
    fn annotates_each_config_map() {
        let host = FakeHost::new();
        let mut plugin: Hello = host.load("{{name}}", "{}").expect("loads");
        let delta = host.added(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "greeting", "namespace": "demo"},
        }));
        assert_eq!(host.handle(&mut plugin, delta), Ok(Done));
        assert_eq!(
            host.take_action_lines(),
            [r#"patch ConfigMap demo/greeting merge {"metadata":{"annotations":{"kubewasm.io/hello":"{{name}}"}}} uid=uid-demo-greeting"#]
        );
        let logs: Vec<String> = host.take_logs().iter().map(ToString::to_string).collect();
        assert_eq!(logs, ["info hello name=greeting"]);
    }
}
