//! {{name}}: a kubewasm plugin. It subscribes to ConfigMap `added` deltas
//! and annotates each ConfigMap with `kubewasm.io/hello: {{name}}`.

wit_bindgen::generate!({ path: "wit", world: "plugin" });

use exports::kubewasm::plugin::handler::{Guest, HandlerError, Registration, Subscription};
use kubewasm::plugin::actions::{self, ObjectRef, PatchType};
use kubewasm::plugin::log::{self, Level};
use kubewasm::plugin::types::{Delta, DeltaType, GroupVersionKind, KindRef};

const NAME: &str = "{{name}}";

fn config_map() -> KindRef {
    KindRef::Gvk(GroupVersionKind {
        group: String::new(),
        version: "v1".to_owned(),
        kind: "ConfigMap".to_owned(),
    })
}

struct Plugin;

impl Guest for Plugin {
    fn register(_config: String) -> Result<Registration, String> {
        Ok(Registration {
            subscriptions: vec![Subscription {
                kind: config_map(),
                namespace: None,
                label_selector: None,
                field_selector: None,
                deltas: vec![DeltaType::Added],
                fields: Vec::new(),
                resync_seconds: None,
            }],
            writes: vec![config_map()],
            indexes: Vec::new(),
        })
    }

    fn handle(delta: Delta) -> Result<(), HandlerError> {
        let Some(meta) = delta.meta else {
            return Ok(());
        };
        log::write(
            Level::Info,
            "hello",
            &[("name".to_owned(), meta.name.clone())],
        );
        let target = ObjectRef {
            kind: config_map(),
            namespace: meta.namespace,
            name: meta.name,
            uid: Some(meta.uid).filter(|u| !u.is_empty()),
        };
        let patch = format!(r#"{{"metadata":{{"annotations":{{"kubewasm.io/hello":"{NAME}"}}}}}}"#);
        actions::patch(&target, PatchType::Merge, &patch)
            .map_err(|e| HandlerError::Permanent(format!("patch refused: {e:?}")))
    }
}

export!(Plugin);
