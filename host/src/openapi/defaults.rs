//! The Pod spec defaults the API server fills in (`SetDefaults_PodSpec`,
//! `SetDefaults_Container`), for comparing a stored Pod with its update:
//! an object copied from a cluster carries them, the patch a plugin sends
//! usually does not, and the server defaults the new object before it
//! compares. Only what a comparison needs; not a defaulting pass.

use serde_json::{Map, Value, json};

/// Fills the defaults `spec` (a PodSpec) leaves out.
pub fn pod_spec(spec: &mut Value) {
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    let defaults = [
        ("restartPolicy", json!("Always")),
        ("dnsPolicy", json!("ClusterFirst")),
        ("schedulerName", json!("default-scheduler")),
        ("securityContext", json!({})),
        ("enableServiceLinks", json!(true)),
        ("terminationGracePeriodSeconds", json!(30)),
    ];
    fill(spec, defaults);
    containers_mut(spec).for_each(container);
}

/// A PodSpec's containers and init containers, each as a map.
pub fn containers_mut(
    spec: &mut Map<String, Value>,
) -> impl Iterator<Item = &mut Map<String, Value>> {
    spec.iter_mut()
        .filter(|(k, _)| *k == "containers" || *k == "initContainers")
        .filter_map(|(_, v)| v.as_array_mut())
        .flatten()
        .filter_map(Value::as_object_mut)
}

fn container(c: &mut Map<String, Value>) {
    let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
    // `:latest` or no tag (and no digest) pulls always.
    let tag = image.rsplit('/').next().unwrap_or(image);
    let pull = if !image.contains('@') && (!tag.contains(':') || tag.ends_with(":latest")) {
        "Always"
    } else {
        "IfNotPresent"
    };
    fill(
        c,
        [
            ("terminationMessagePath", json!("/dev/termination-log")),
            ("terminationMessagePolicy", json!("File")),
            ("imagePullPolicy", json!(pull)),
            ("resources", json!({})),
        ],
    );
    for port in c
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(port) = port.as_object_mut() {
            fill(port, [("protocol", json!("TCP"))]);
        }
    }
}

fn fill<const N: usize>(map: &mut Map<String, Value>, defaults: [(&str, Value); N]) {
    for (key, value) in defaults {
        let absent = map.get(key).is_none_or(Value::is_null);
        if absent {
            map.insert(key.to_owned(), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_what_is_absent_and_keeps_what_is_set() {
        let mut spec = json!({"restartPolicy": "Never", "containers": [
            {"name": "a", "image": "x"}, {"name": "b", "image": "r/x:v1", "ports": [{"containerPort": 80}]}
        ]});
        pod_spec(&mut spec);
        assert_eq!(spec["restartPolicy"], "Never");
        assert_eq!(spec["dnsPolicy"], "ClusterFirst");
        assert_eq!(spec["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(spec["containers"][1]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(spec["containers"][1]["ports"][0]["protocol"], "TCP");
    }
}
