//! {{name}}: a kubewasm plugin. It subscribes to ConfigMap `added` deltas
//! and annotates each ConfigMap with `kubewasm.io/hello: <plugin name>`.

wit_bindgen::generate!({ path: "wit", world: "plugin" });

use std::sync::OnceLock;

use exports::kubewasm::plugin::handler::{
    Context, Guest, Handled, HandlerError, Registration, Subscription,
};
use kubewasm::plugin::actions::{self, ObjectRef, PatchType, Preconditions};
use kubewasm::plugin::log::{self, Level};
use kubewasm::plugin::types::{Delta, DeltaType, GroupVersionKind, KindRef};

/// The name the host loaded this plugin under (from `register`).
static NAME: OnceLock<String> = OnceLock::new();

fn config_map() -> KindRef {
    KindRef::Gvk(GroupVersionKind {
        group: String::new(),
        version: "v1".to_owned(),
        kind: "ConfigMap".to_owned(),
    })
}

struct Plugin;

impl Guest for Plugin {
    fn register(context: Context) -> Result<Registration, String> {
        let _ = NAME.set(context.name);
        Ok(Registration {
            subscriptions: vec![Subscription {
                kind: config_map(),
                namespace: None,
                label_selector: None,
                field_selector: None,
                deltas: vec![DeltaType::Added],
                fields: Vec::new(),
                // The host's default resync period.
                resync_seconds: None,
            }],
            writes: vec![config_map()],
            indexes: Vec::new(),
        })
    }

    fn handle(delta: Delta) -> Result<Handled, HandlerError> {
        log::write(
            Level::Info,
            "hello",
            &[("name".to_owned(), delta.name.clone())],
        );
        let name = NAME.get().map_or("{{name}}", String::as_str);
        let target = ObjectRef {
            kind: config_map(),
            namespace: delta.namespace,
            name: delta.name,
        };
        let patch = format!(r#"{{"metadata":{{"annotations":{{"kubewasm.io/hello":"{name}"}}}}}}"#);
        // Only the object this delta is about: not a namesake created since.
        let only_this = Preconditions {
            uid: Some(delta.uid),
            resource_version: None,
        };
        actions::patch(&target, PatchType::Merge, &patch, &only_this)
            .map_err(|e| HandlerError::Permanent(format!("patch refused: {e:?}")))?;
        Ok(Handled::Done)
    }
}

export!(Plugin);
