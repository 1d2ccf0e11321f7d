//! The cluster deployment in deploy/: the committed RBAC is what
//! `kubewasm rbac` generates for the host alone and for the example plugins
//! (and grants exactly what they declared); the kustomize base and overlays
//! render with the security context, probes, host config and plugin
//! ConfigMap the Pods rely on. (A fresh clone applying: fresh_clone.rs.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use kubewasm::config::RunSettings;
use kubewasm_tests::e2e::{kubewasm_bin, succeeded};
use kubewasm_tests::manifests::{check_configmap_fits, decode_base64, docs, kustomize};
use kubewasm_tests::{plugin_artifacts, repo_root};
use serde_json::Value;

const REGENERATE: &str = "bash scripts/deploy-plugins.sh --rbac";

/// The plugin-folder overlay's plugins: (name in the folder, build artifact).
const FOLDER: &[(&str, &str)] = &[
    ("config-replicator", "config_replicator"),
    ("crashloop-watcher", "crashloop_watcher"),
    ("namespace-defaults", "namespace_defaults"),
];
const ADDED: &[(&str, &str)] = &[("recorder", "recorder")];
/// The plugin image's plugin (its JavaScript and Python builds register
/// what the Rust one does).
const IMAGE: &[(&str, &str)] = &[("config-replicator", "config_replicator")];
/// Where the plugin-folder overlay's sidecars are, relative to the root.
const FOLDER_SIDECARS: &str = "deploy/examples/plugin-folder/plugins";

/// Copies the built plugins into `to`, with the committed sidecars of `from`.
fn plugin_folder(from: &Path, to: &Path, plugins: &[(&str, &str)]) {
    std::fs::create_dir_all(to).unwrap();
    for (name, artifact) in plugins {
        std::fs::copy(
            plugin_artifacts().join(format!("{artifact}.wasm")),
            to.join(format!("{name}.wasm")),
        )
        .unwrap();
        let sidecar = from.join(format!("{name}.yaml"));
        if sidecar.exists() {
            std::fs::copy(&sidecar, to.join(format!("{name}.yaml"))).unwrap();
        }
    }
}

fn rbac(plugins: &Path, cache: &Path, extra: &[&str]) -> String {
    let out = Command::new(kubewasm_bin())
        .arg("rbac")
        .arg("--plugins")
        .arg(plugins)
        .arg("--cache-dir")
        .arg(cache)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubewasm rbac failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// `group/resource[names] -> verbs` of a role.
fn rules(role: &Value) -> BTreeMap<String, String> {
    role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let list = |k: &str| -> Vec<String> {
                r[k].as_array()
                    .map(|a| a.iter().map(|v| v.as_str().unwrap().to_owned()).collect())
                    .unwrap_or_default()
            };
            let (groups, resources, names) =
                (list("apiGroups"), list("resources"), list("resourceNames"));
            assert_eq!((groups.len(), resources.len()), (1, 1), "{r}");
            let key = if names.is_empty() {
                format!("{}/{}", groups[0], resources[0])
            } else {
                format!("{}/{}{names:?}", groups[0], resources[0])
            };
            (key, list("verbs").join(","))
        })
        .collect()
}

fn check_up_to_date(generated: &str, committed: &Path) {
    let current = std::fs::read_to_string(committed).unwrap_or_default();
    if current != generated {
        let line = current
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| current.lines().count().min(generated.lines().count()));
        panic!(
            "{} is out of date (first difference at line {}): regenerate it with `{REGENERATE}`\n--- generated ---\n{generated}",
            committed.display(),
            line + 1
        );
    }
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn committed_host_rbac_is_what_kubewasm_rbac_host_only_generates() {
    let out = Command::new(kubewasm_bin())
        .args(["rbac", "--host-only"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubewasm rbac --host-only failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let generated = String::from_utf8(out.stdout).unwrap();
    let d = docs(&generated);
    // The host's own roles, and nothing for plugins: they come as Plugin
    // objects, each with its own RBAC.
    let lease = find(&d, "Role", "kubewasm-leader-election");
    assert_eq!(lease["metadata"]["namespace"], "kubewasm");
    assert_eq!(
        rules(lease),
        map(&[
            ("coordination.k8s.io/leases", "create"),
            (
                "coordination.k8s.io/leases[\"kubewasm\"]",
                "get,patch,update"
            ),
            // The Lease is created owned by the host's ServiceAccount.
            ("/serviceaccounts[\"kubewasm\"]", "get"),
        ])
    );
    assert_eq!(
        find(&d, "RoleBinding", "kubewasm-leader-election")["subjects"][0]["name"],
        "kubewasm"
    );
    // --metrics-auth: the host reviews scrapers' tokens and access.
    assert_eq!(
        rules(find(&d, "ClusterRole", "kubewasm-metrics-auth")),
        map(&[
            ("authentication.k8s.io/tokenreviews", "create"),
            ("authorization.k8s.io/subjectaccessreviews", "create"),
        ])
    );
    assert_eq!(
        find(&d, "ClusterRoleBinding", "kubewasm-metrics-auth")["subjects"][0]["name"],
        "kubewasm"
    );
    // Plugin objects: watched, their status written, module ConfigMaps
    // read; pull Secrets only in the host's namespace.
    let objects = rules(find(&d, "ClusterRole", "kubewasm-plugin-objects"));
    for (resource, verbs) in [
        ("kubewasm.io/plugins", "get,list,watch"),
        ("kubewasm.io/plugins/status", "patch"),
        ("kubewasm.io/namespacedplugins", "get,list,watch"),
        ("kubewasm.io/namespacedplugins/status", "patch"),
        ("/configmaps", "get"),
    ] {
        assert_eq!(
            objects.get(resource).map(String::as_str),
            Some(verbs),
            "{objects:?}"
        );
    }
    // In its namespace: pull Secrets, and its own Pods (the leader's Ready
    // counts the ready replicas and prunes status.replicas).
    let pull = find(&d, "Role", "kubewasm-plugin-objects");
    assert_eq!(pull["metadata"]["namespace"], "kubewasm");
    assert_eq!(rules(pull), map(&[("/pods", "list"), ("/secrets", "get")]));
    // Events about Plugins, which live in default (cluster-scoped objects).
    let events = find(&d, "Role", "kubewasm-plugin-object-events");
    assert_eq!(events["metadata"]["namespace"], "default");
    assert_eq!(
        rules(events),
        map(&[("events.k8s.io/events", "create,patch")])
    );
    assert_eq!(d.len(), 10, "{generated}");
    assert!(
        !d.iter().any(|x| x["metadata"]["name"] == "kubewasm"),
        "no roles for plugins: {generated}"
    );
    check_up_to_date(&generated, &repo_root().join("deploy/base/rbac.yaml"));
}

#[test]
fn committed_plugin_rbac_is_what_kubewasm_rbac_generates_and_grants_only_what_sidecars_grant() {
    let dir = tempfile::tempdir().unwrap();
    let root = repo_root();
    let folder = dir.path().join("folder");
    plugin_folder(&root.join(FOLDER_SIDECARS), &folder, FOLDER);
    let plugins_only = [
        "--name",
        "kubewasm-plugins",
        "--service-account",
        "kubewasm",
        "--plugins-only",
    ];
    let generated = rbac(&folder, &dir.path().join("cache"), &plugins_only);

    let d = docs(&generated);
    assert_eq!(
        d.len(),
        2,
        "only the ClusterRole and its binding: {generated}"
    );
    let cluster = find(&d, "ClusterRole", "kubewasm-plugins");
    let expected = map(&[
        ("/configmaps", "create,delete,get,list,patch,watch"),
        ("/namespaces", "get,list,watch"),
        ("/pods", "get,list,watch"),
        ("/resourcequotas", "create,delete,get,list,patch,watch"),
        // Only what the sidecars grant: crashloop-watcher patches
        // Deployments (no create, delete or status although its
        // registration declares the kind a write), and only it records Events.
        ("apps/deployments", "get,list,patch,watch"),
        ("apps/replicasets", "get,list,watch"),
        ("events.k8s.io/events", "create,patch"),
        (
            "networking.k8s.io/networkpolicies",
            "create,delete,get,list,patch,watch",
        ),
    ]);
    assert_eq!(rules(cluster), expected, "{generated}");
    let binding = find(&d, "ClusterRoleBinding", "kubewasm-plugins");
    assert_eq!(binding["roleRef"]["name"], "kubewasm-plugins");
    assert_eq!(binding["subjects"][0]["name"], "kubewasm");
    assert_eq!(binding["subjects"][0]["namespace"], "kubewasm");
    assert!(
        generated.contains("# crashloop-watcher (reads the cache, writes)"),
        "each rule names the plugins that need it: {generated}"
    );
    check_up_to_date(
        &generated,
        &root.join("deploy/examples/plugin-folder/rbac.yaml"),
    );

    // The plugin image's config-replicator: the folder's rules for it.
    let image = dir.path().join("image");
    plugin_folder(&root.join(FOLDER_SIDECARS), &image, IMAGE);
    let generated = rbac(&image, &dir.path().join("cache"), &plugins_only);
    let d = docs(&generated);
    assert_eq!(
        rules(find(&d, "ClusterRole", "kubewasm-plugins")),
        map(&[
            ("/configmaps", "create,delete,get,list,patch,watch"),
            ("/namespaces", "get,list,watch"),
        ]),
        "{generated}"
    );
    check_up_to_date(
        &generated,
        &root.join("deploy/examples/plugin-image/rbac.yaml"),
    );

    // The added plugin is granted one namespace only: a Role there.
    let added = dir.path().join("added");
    plugin_folder(
        &root.join("deploy/examples/add-plugin/plugins"),
        &added,
        ADDED,
    );
    let generated = rbac(
        &added,
        &dir.path().join("cache"),
        &[
            "--name",
            "kubewasm-recorder",
            "--service-account",
            "kubewasm",
            "--plugins-only",
        ],
    );
    let d = docs(&generated);
    assert_eq!(d.len(), 2, "only the Role and its binding: {generated}");
    let role = find(&d, "Role", "kubewasm-recorder");
    assert_eq!(role["metadata"]["namespace"], "kubewasm");
    assert_eq!(
        rules(role),
        map(&[
            ("/configmaps", "get,list,watch"),
            ("events.k8s.io/events", "create,patch"),
        ])
    );
    assert_eq!(
        find(&d, "RoleBinding", "kubewasm-recorder")["subjects"][0]["name"],
        "kubewasm"
    );
    check_up_to_date(
        &generated,
        &root.join("deploy/examples/add-plugin/rbac.yaml"),
    );
}

#[test]
fn rbac_names_a_kind_it_cannot_resolve_offline_and_how_to_fix_it() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(
        plugin_artifacts().join("recorder.wasm"),
        plugins.join("recorder.wasm"),
    )
    .unwrap();
    std::fs::write(
        plugins.join("recorder.yaml"),
        "config: {namespace: ns, resources: [widgets]}\naccess: [{kinds: [widgets.example.com], verbs: [read], namespaces: [ns]}]\n",
    )
    .unwrap();
    let out = Command::new(kubewasm_bin())
        .args(["rbac", "--plugins"])
        .arg(&plugins)
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("recorder") && err.contains("\"widgets\"") && err.contains("--crd"),
        "{err}"
    );

    // With its CRD, the kind resolves (namespaced, plural from the CRD).
    let crd = dir.path().join("crd.yaml");
    std::fs::write(
        &crd,
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\n\
         spec:\n  group: example.com\n  scope: Namespaced\n  names: {kind: Widget, plural: widgets}\n  versions: [{name: v1, served: true, storage: true}]\n",
    )
    .unwrap();
    let crd_arg = crd.to_str().unwrap().to_owned();
    let generated = rbac(&plugins, &dir.path().join("cache"), &["--crd", &crd_arg]);
    let d = docs(&generated);
    let role = find(&d, "Role", "kubewasm");
    assert_eq!(role["metadata"]["namespace"], "ns");
    assert_eq!(
        rules(role).get("example.com/widgets").map(String::as_str),
        Some("get,list,watch"),
        "{generated}"
    );
}

/// A copy of deploy/ with the built plugins in place of the .wasm outputs
/// (the base needs none; the plugin-folder overlays do).
fn deploy_copy(dir: &Path) -> PathBuf {
    let to = dir.join("deploy");
    let status = Command::new("cp")
        .arg("-r")
        .arg(repo_root().join("deploy"))
        .arg(&to)
        .status()
        .unwrap();
    assert!(status.success());
    plugin_folder(
        &repo_root().join(FOLDER_SIDECARS),
        &to.join("examples/plugin-folder/plugins"),
        FOLDER,
    );
    plugin_folder(
        &repo_root().join("deploy/examples/add-plugin/plugins"),
        &to.join("examples/add-plugin/plugins"),
        ADDED,
    );
    to
}

fn container<'a>(deployment: &'a Value, name: &str) -> &'a Value {
    deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap()
}

fn check_restricted(sc: &Value, what: &str) {
    assert_eq!(sc["runAsNonRoot"], true, "{what}: {sc}");
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{what}: {sc}");
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{what}: {sc}");
    assert_eq!(
        sc["capabilities"]["drop"],
        serde_json::json!(["ALL"]),
        "{what}: {sc}"
    );
    assert_eq!(
        sc["seccompProfile"]["type"], "RuntimeDefault",
        "{what}: {sc}"
    );
}

#[test]
fn kustomize_renders_the_base_host_alone_with_security_context_probes_and_host_config() {
    // The repository's own deploy/: the base references nothing built.
    let d = docs(&kustomize(&repo_root().join("deploy")));
    let ns = find(&d, "Namespace", "kubewasm");
    assert_eq!(
        ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    find(&d, "ServiceAccount", "kubewasm");
    find(&d, "Role", "kubewasm-leader-election");
    find(&d, "ClusterRole", "kubewasm-plugin-objects");
    for crd in ["plugins.kubewasm.io", "namespacedplugins.kubewasm.io"] {
        find(&d, "CustomResourceDefinition", crd);
    }

    let dep = find(&d, "Deployment", "kubewasm");
    assert_eq!(dep["metadata"]["namespace"], "kubewasm");
    assert_eq!(dep["spec"]["replicas"], 2);
    let pod = &dep["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "kubewasm");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let c = container(dep, "kubewasm");
    assert_eq!(c["image"], "localhost/kubewasm:dev");
    check_restricted(&c["securityContext"], "kubewasm container");
    for (probe, path) in [
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
        ("startupProbe", "/healthz"),
    ] {
        assert_eq!(c[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(c[probe]["httpGet"]["port"], "metrics", "{probe}");
    }
    assert_eq!(c["ports"][0]["name"], "metrics");
    assert_eq!(c["ports"][0]["containerPort"], 9090);
    for k in ["requests", "limits"] {
        assert!(c["resources"][k]["memory"].is_string(), "{k}: {c}");
        assert!(c["resources"][k]["cpu"].is_string(), "{k}: {c}");
    }
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    for a in [
        "run",
        "--config=/etc/kubewasm/config.yaml",
        "--plugins=/plugins",
        "--cache-dir=/var/cache/kubewasm",
        "--metrics-addr=:9090",
        "--metrics-auth",
        "--leader-elect",
    ] {
        assert!(args.contains(&a), "{a} missing from {args:?}");
    }
    // The web view is off in the base (it would listen on the Pod's
    // loopback only, reached with kubectl port-forward).
    assert!(
        !args.iter().any(|a| a.starts_with("--ui")),
        "the base turns the web view on: {args:?}"
    );
    // What a scraper is bound to under --metrics-auth.
    for (role, url) in [
        ("kubewasm-metrics-reader", "/metrics"),
        ("kubewasm-dead-letters-reader", "/dead-letters"),
    ] {
        let rules = &find(&d, "ClusterRole", role)["rules"];
        assert_eq!(rules[0]["nonResourceURLs"][0], url, "{role}");
        assert_eq!(rules[0]["verbs"], serde_json::json!(["get"]), "{role}");
    }
    let env: BTreeMap<&str, &str> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?,
                e["valueFrom"]["fieldRef"]["fieldPath"].as_str()?,
            ))
        })
        .collect();
    assert_eq!(env.get("POD_NAME"), Some(&"metadata.name"));
    assert_eq!(env.get("POD_NAMESPACE"), Some(&"metadata.namespace"));
    let mounts: BTreeMap<&str, &Value> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["mountPath"].as_str().unwrap(), m))
        .collect();
    assert!(
        mounts["/plugins"]["subPath"].is_null(),
        "a subPath mount never sees ConfigMap updates"
    );
    let volumes: BTreeMap<&str, &Value> = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap(), v))
        .collect();
    // The plugin folder is empty: plugins come as Plugin objects.
    let plugins_volume = mounts["/plugins"]["name"].as_str().unwrap();
    assert!(
        volumes[plugins_volume]["emptyDir"].is_object(),
        "{}",
        volumes[plugins_volume]
    );
    let cache_volume = mounts["/var/cache/kubewasm"]["name"].as_str().unwrap();
    assert!(volumes[cache_volume]["emptyDir"].is_object());
    assert!(
        !d.iter()
            .any(|x| x["kind"] == "ConfigMap" && x["metadata"]["name"] == "kubewasm-plugins"),
        "the base has no plugin ConfigMap"
    );

    // The host config: a ConfigMap (its name hashed, so an edit rolls the
    // Deployment) mounted at /etc/kubewasm, a HostConfig the host accepts.
    let config_volume = mounts["/etc/kubewasm"]["name"].as_str().unwrap();
    assert!(mounts["/etc/kubewasm"]["subPath"].is_null());
    let config_map = volumes[config_volume]["configMap"]["name"]
        .as_str()
        .unwrap();
    assert!(config_map.starts_with("kubewasm-config-"), "{config_map}");
    let cm = find(&d, "ConfigMap", config_map);
    assert_eq!(cm["metadata"]["namespace"], "kubewasm");
    let settings = check_host_config(cm);
    let objects = settings.plugin_objects.unwrap_or_default();
    assert_eq!(objects.tenant_namespaces, Some(Vec::new()));
    assert!(objects.signatures.is_none() && objects.registry_ca.is_none());

    let svc = find(&d, "Service", "kubewasm-metrics");
    assert_eq!(
        svc["metadata"]["annotations"]["prometheus.io/scrape"],
        "true"
    );
    assert_eq!(svc["metadata"]["annotations"]["prometheus.io/port"], "9090");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "metrics");
    let pdb = find(&d, "PodDisruptionBudget", "kubewasm");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        dep["spec"]["selector"]["matchLabels"]
    );
}

#[test]
fn kustomize_renders_the_example_overlays() {
    let dir = tempfile::tempdir().unwrap();
    let deploy = deploy_copy(dir.path());

    // The plugin folder: a ConfigMap (no name hash) mounted at /plugins,
    // carrying the plugins byte for byte with their sidecars, and the RBAC
    // they need besides the host's.
    let d = docs(&kustomize(&deploy.join("examples/plugin-folder")));
    let cm = find(&d, "ConfigMap", "kubewasm-plugins");
    assert_eq!(cm["metadata"]["namespace"], "kubewasm");
    assert_eq!(
        cm["metadata"]["labels"]["app.kubernetes.io/part-of"],
        "kubewasm"
    );
    for (name, artifact) in FOLDER {
        let key = format!("{name}.wasm");
        let encoded = cm["binaryData"][&key]
            .as_str()
            .unwrap_or_else(|| panic!("{key} not in binaryData"));
        let bytes = std::fs::read(plugin_artifacts().join(format!("{artifact}.wasm"))).unwrap();
        assert_eq!(decode_base64(encoded), bytes, "{key}");
        assert!(
            cm["data"][format!("{name}.yaml")].is_string(),
            "{name}.yaml"
        );
    }
    check_configmap_fits(cm);
    let dep = find(&d, "Deployment", "kubewasm");
    let plugins = volume(dep, "plugins");
    assert_eq!(
        plugins["configMap"]["name"], "kubewasm-plugins",
        "{plugins}"
    );
    assert!(plugins["emptyDir"].is_null(), "{plugins}");
    find(&d, "ClusterRole", "kubewasm-plugins");
    find(&d, "ClusterRoleBinding", "kubewasm-plugins");
    find(&d, "ClusterRole", "kubewasm-plugin-objects");
    check_host_config(find_prefixed(&d, "ConfigMap", "kubewasm-config-"));

    // The added plugin comes in its own ConfigMap, projected into the
    // same folder: the base's ConfigMap has no room for it.
    let d = docs(&kustomize(&deploy.join("examples/add-plugin")));
    let base = find(&d, "ConfigMap", "kubewasm-plugins");
    assert!(base["binaryData"]["namespace-defaults.wasm"].is_string());
    let added = find(&d, "ConfigMap", "kubewasm-plugins-recorder");
    assert!(added["binaryData"]["recorder.wasm"].is_string(), "{added}");
    assert!(added["data"]["recorder.yaml"].is_string());
    for cm in [base, added] {
        check_configmap_fits(cm);
    }
    let dep = find(&d, "Deployment", "kubewasm");
    let plugins = volume(dep, "plugins");
    assert!(plugins["configMap"].is_null(), "{plugins}");
    assert!(plugins["emptyDir"].is_null(), "{plugins}");
    let sources: Vec<&str> = plugins["projected"]["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["configMap"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["kubewasm-plugins", "kubewasm-plugins-recorder"]);
    find(&d, "Role", "kubewasm-recorder");
    find(&d, "RoleBinding", "kubewasm-recorder");
    find(&d, "ClusterRole", "kubewasm-plugins");

    // The single node: the plugin folder, hostNetwork replicas on free
    // loopback ports, read from the node without a token, the host config,
    // and no web view.
    let d = docs(&kustomize(&deploy.join("examples/single-node")));
    let dep = find(&d, "Deployment", "kubewasm");
    let args = container(dep, "kubewasm")["args"].to_string();
    assert!(
        args.contains("--metrics-addr=127.0.0.1:0")
            && args.contains("--metrics-auth=false")
            && args.contains("--config=/etc/kubewasm/config.yaml"),
        "{args}"
    );
    assert_eq!(dep["spec"]["template"]["spec"]["hostNetwork"], true);
    assert_eq!(
        volume(dep, "plugins")["configMap"]["name"],
        "kubewasm-plugins"
    );
    find(&d, "ConfigMap", "kubewasm-plugins");
    find(&d, "ClusterRole", "kubewasm-plugins");
    assert!(
        !args.contains("--ui"),
        "the single-node overlay turns the web view on: {args}"
    );

    let d = docs(&kustomize(&deploy.join("examples/plugin-image")));
    assert!(
        !d.iter()
            .any(|x| x["kind"] == "ConfigMap" && x["metadata"]["name"] == "kubewasm-plugins"),
        "the plugin image needs no plugin ConfigMap"
    );
    find(&d, "ClusterRole", "kubewasm-plugins");
    let dep = find(&d, "Deployment", "kubewasm");
    let pod = &dep["spec"]["template"]["spec"];
    let init = &pod["initContainers"][0];
    assert_eq!(init["image"], "localhost/kubewasm-plugins:dev");
    check_restricted(&init["securityContext"], "init container");
    let plugins = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "plugins")
        .unwrap();
    assert!(plugins["emptyDir"].is_object() && plugins["configMap"].is_null());
    // Plugin files only: the image cannot put native code into the host's
    // compile cache.
    assert_eq!(init["volumeMounts"].as_array().unwrap().len(), 1);
    assert_eq!(init["volumeMounts"][0]["name"], "plugins");
    assert!(
        !init["command"].to_string().contains("cache"),
        "{}",
        init["command"]
    );

    // Signed artifacts: only *.cwasm go into the cache, and the host
    // verifies them with the operator's key from a Secret.
    let d = docs(&kustomize(&deploy.join("examples/plugin-image-signed")));
    let dep = find(&d, "Deployment", "kubewasm");
    let pod = &dep["spec"]["template"]["spec"];
    let init = &pod["initContainers"][0];
    assert_eq!(init["volumeMounts"][1]["name"], "compile-cache");
    assert!(
        init["command"]
            .to_string()
            .contains("cp /cache/*.cwasm /compile-cache/"),
        "{}",
        init["command"]
    );
    let c = container(dep, "kubewasm");
    assert!(
        c["args"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "--artifact-key=/var/run/kubewasm/artifact-key/key"),
        "{}",
        c["args"]
    );
    let key = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "artifact-key")
        .unwrap();
    assert_eq!(key["secret"]["secretName"], "kubewasm-artifact-key");
    assert!(
        !d.iter().any(|x| x["kind"] == "Secret"),
        "the key is the operator's, never rendered from the repository"
    );

    // The host config: the example's config.yaml replaces the base's, with
    // the operator's files it names next to it in the same ConfigMap.
    let overlay = deploy.join("examples/host-config");
    std::fs::write(overlay.join("registry-ca.crt"), "CA").unwrap();
    std::fs::write(overlay.join("cosign.pub"), "KEY").unwrap();
    let d = docs(&kustomize(&overlay));
    let configs: Vec<&Value> = d.iter().filter(|x| x["kind"] == "ConfigMap").collect();
    assert_eq!(configs.len(), 1, "replaced, not added: {configs:?}");
    let cm = configs[0];
    let settings = check_host_config(cm);
    let objects = settings.plugin_objects.unwrap();
    assert_eq!(objects.tenant_namespaces, Some(vec!["team-a".to_owned()]));
    let signatures = objects.signatures.unwrap();
    assert_eq!(signatures[0].prefix, "registry.example.com/signed");
    assert_eq!(cm["data"]["registry-ca.crt"], "CA");
    assert_eq!(cm["data"]["cosign.pub"], "KEY");
    let dep = find(&d, "Deployment", "kubewasm");
    assert_eq!(
        volume(dep, "config")["configMap"]["name"],
        cm["metadata"]["name"]
    );
}

/// The shards example: three replicas, `shards: 3` in its host config, and
/// the leader-election Role `kubewasm rbac --host-only --shards 3` writes
/// (its shard and member Lease rules) in place of the base's.
#[test]
fn kustomize_renders_the_shards_example_with_its_lease_rules() {
    let d = docs(&kustomize(&repo_root().join("deploy/examples/shards")));
    assert_eq!(find(&d, "Deployment", "kubewasm")["spec"]["replicas"], 3);
    let configs: Vec<&Value> = d.iter().filter(|x| x["kind"] == "ConfigMap").collect();
    assert_eq!(configs.len(), 1, "replaced, not added: {configs:?}");
    assert_eq!(check_host_config(configs[0]).shards, Some(3));
    let out = succeeded(
        Command::new(kubewasm_bin())
            .args(["rbac", "--host-only", "--shards", "3"])
            .output()
            .unwrap(),
    );
    let generated = docs(&String::from_utf8(out.stdout).unwrap());
    let want = find(&generated, "Role", "kubewasm-leader-election");
    let roles: Vec<&Value> = d
        .iter()
        .filter(|x| x["kind"] == "Role" && x["metadata"]["name"] == "kubewasm-leader-election")
        .collect();
    assert_eq!(roles.len(), 1, "the base's Role replaced, not added");
    assert_eq!(
        roles[0]["rules"], want["rules"],
        "deploy/examples/shards/leader-election.yaml is out of date: write it again from `kubewasm rbac --host-only --shards 3` (its Role)"
    );
    assert!(
        rules(roles[0]).contains_key("coordination.k8s.io/leases[\"kubewasm-shard-0\", \"kubewasm-shard-1\", \"kubewasm-shard-2\"]"),
        "{:?}",
        rules(roles[0])
    );
}

fn volume<'a>(deployment: &'a Value, name: &str) -> &'a Value {
    deployment["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no volume {name}"))
}

fn find_prefixed<'a>(docs: &'a [Value], kind: &str, prefix: &str) -> &'a Value {
    docs.iter()
        .find(|d| {
            d["kind"] == kind
                && d["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(prefix))
        })
        .unwrap_or_else(|| panic!("no {kind} {prefix}*"))
}

/// The ConfigMap's config.yaml is a HostConfig the host accepts, and every
/// file it names under /etc/kubewasm (where the ConfigMap is mounted) is
/// in the ConfigMap.
fn check_host_config(cm: &Value) -> RunSettings {
    let text = cm["data"]["config.yaml"]
        .as_str()
        .unwrap_or_else(|| panic!("no config.yaml in {cm}"));
    let settings = RunSettings::parse(text, Path::new("/etc/kubewasm/config.yaml"))
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    let objects = settings.plugin_objects.clone().unwrap_or_default();
    let named = objects.registry_ca.into_iter().chain(
        objects
            .signatures
            .unwrap_or_default()
            .into_iter()
            .flat_map(|r| r.keys),
    );
    for path in named {
        let file = path
            .strip_prefix("/etc/kubewasm")
            .unwrap_or_else(|_| panic!("{} is not under /etc/kubewasm", path.display()));
        assert!(
            cm["data"][file.to_str().unwrap()].is_string(),
            "{} is not in the ConfigMap {}",
            path.display(),
            cm["metadata"]["name"]
        );
    }
    settings
}
