//! The Helm chart in charts/kubewasm: its generated files (the CRDs and the
//! host's RBAC) are what `kubewasm crds` and `kubewasm rbac` print, it lints
//! clean with `helm lint --strict`, its values render what they say, and
//! its default rendering is accepted by the real API server (server-side
//! dry run), its Pod in a namespace that enforces the `restricted` Pod
//! Security Standard.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Scope, pinned_kind};
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::{kubewasm_bin, namespace};
use kubewasm_tests::incluster::run;
use kubewasm_tests::manifests::docs;
use kubewasm_tests::repo_root;
use kubewasm_tests::tools::helm;
use serde_json::{Value, json};

fn chart() -> PathBuf {
    repo_root().join("charts/kubewasm")
}

/// `helm template` of the chart into `namespace` with `--set`/`-f` args.
fn template(namespace: &str, args: &[&str]) -> Vec<Value> {
    let out = run(
        Command::new(helm())
            .args(["template", "kubewasm"])
            .arg(chart())
            .args(["--namespace", namespace])
            .args(args),
        "helm template",
    );
    docs(&out)
}

fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {docs:#?}"))
}

fn container(docs: &[Value]) -> &Value {
    &find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
}

fn args(docs: &[Value]) -> Vec<String> {
    container(docs)["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

fn kinds(docs: &[Value]) -> Vec<String> {
    let mut k: Vec<String> = docs
        .iter()
        .map(|d| {
            format!(
                "{}/{}",
                d["kind"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    k.sort();
    k
}

#[test]
fn generated_files_are_what_kubewasm_prints() {
    let dir = tempfile::tempdir().unwrap();
    run(
        Command::new("bash")
            .arg(chart().join("generate.sh"))
            .arg(dir.path())
            .env("KUBEWASM", kubewasm_bin()),
        "charts/kubewasm/generate.sh",
    );
    for file in ["crds/crds.yaml", "templates/rbac.yaml"] {
        let generated = std::fs::read_to_string(dir.path().join(file)).unwrap();
        let committed = std::fs::read_to_string(chart().join(file)).unwrap_or_default();
        assert!(
            generated == committed,
            "charts/kubewasm/{file} is out of date: regenerate it with `bash charts/kubewasm/generate.sh`\n--- generated ---\n{generated}"
        );
    }
    // The CRDs are the kustomize base's too.
    assert_eq!(
        std::fs::read_to_string(chart().join("crds/crds.yaml")).unwrap(),
        std::fs::read_to_string(repo_root().join("deploy/base/crds.yaml")).unwrap()
    );
}

#[test]
fn lints_strict_with_every_switch() {
    for set in [
        &[][..],
        &[
            "--set",
            "hostNetwork=true,apiServer.host=127.0.0.1,apiServer.port=6443,networkPolicy.enabled=false,metrics.auth=false",
        ],
        &[
            "--set",
            "cache.persistence.enabled=true,serviceMonitor.enabled=true,ui.enabled=true,replicas=1",
        ],
        &[
            "--set",
            "cache.persistence.enabled=true,cache.persistence.existingClaim=mine,pluginFolder.configMap=plugins",
        ],
        &["--set", "leaderElection.shards=3,replicas=3"],
    ] {
        run(
            Command::new(helm())
                .args(["lint", "--strict", "--namespace", "kubewasm"])
                .arg(chart())
                .args(set),
            &format!("helm lint --strict {set:?}"),
        );
    }
}

#[test]
fn default_rendering_is_the_host_alone_with_plugins_as_objects() {
    let d = template("kubewasm", &[]);
    assert_eq!(
        kinds(&d),
        [
            "ClusterRole/kubewasm-dead-letters-reader",
            "ClusterRole/kubewasm-metrics-auth",
            "ClusterRole/kubewasm-metrics-reader",
            "ClusterRole/kubewasm-plugin-objects",
            "ClusterRoleBinding/kubewasm-metrics-auth",
            "ClusterRoleBinding/kubewasm-plugin-objects",
            "ConfigMap/kubewasm-config",
            "Deployment/kubewasm",
            "NetworkPolicy/kubewasm",
            "PodDisruptionBudget/kubewasm",
            "Role/kubewasm-leader-election",
            "Role/kubewasm-plugin-object-events",
            "Role/kubewasm-plugin-objects",
            "RoleBinding/kubewasm-leader-election",
            "RoleBinding/kubewasm-plugin-object-events",
            "RoleBinding/kubewasm-plugin-objects",
            "Service/kubewasm-metrics",
            "ServiceAccount/kubewasm",
        ]
    );
    for doc in &d {
        if let Some(ns) = doc["metadata"].get("namespace") {
            // Events about Plugins (cluster-scoped) live in default.
            let events = doc["metadata"]["name"] == "kubewasm-plugin-object-events";
            assert_eq!(ns, if events { "default" } else { "kubewasm" }, "{doc}");
        }
    }
    let deploy = find(&d, "Deployment");
    assert_eq!(deploy["spec"]["replicas"], 2);
    let c = container(&d);
    assert_eq!(c["image"], "localhost/kubewasm:0.1.0");
    assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    let a = args(&d);
    for want in [
        "run",
        "--config=/etc/kubewasm/config.yaml",
        "--plugins=/plugins",
        "--metrics-addr=:9090",
        "--metrics-auth=true",
        "--leader-elect=true",
    ] {
        assert!(a.iter().any(|x| x == want), "{want} not in {a:?}");
    }
    assert!(!a.iter().any(|x| x == "--ui"), "{a:?}");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    let volumes = &deploy["spec"]["template"]["spec"]["volumes"];
    assert_eq!(volumes[1]["name"], "plugins");
    assert!(volumes[1]["emptyDir"].is_object(), "{volumes}");
    assert!(volumes[2]["emptyDir"].is_object(), "{volumes}");
    // The config file is a HostConfig the host accepts.
    let config = find(&d, "ConfigMap")["data"]["config.yaml"]
        .as_str()
        .unwrap();
    assert_eq!(
        config,
        "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\n"
    );
}

/// The host accepts the config the chart renders: `kubewasm run` with it
/// reads it (an unknown key would be an error naming it) and goes on to
/// need a cluster.
#[test]
fn rendered_config_and_files_are_what_the_host_reads() {
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("values.yaml");
    std::fs::write(
        &values,
        "config:\n  limits: {memory: 256Mi}\n  grants: {network: [\"*.example.com:443\"]}\n  pluginObjects:\n    tenantNamespaces: [team-a]\n    registryCA: /etc/kubewasm/registry-ca.crt\n    signatures: [{prefix: registry.example/plugins, keys: [/etc/kubewasm/team.pub]}]\nconfigFiles:\n  team.pub: |\n    -----BEGIN PUBLIC KEY-----\n    abc\n    -----END PUBLIC KEY-----\n  registry-ca.crt: PEM\n",
    )
    .unwrap();
    let d = template("kubewasm", &["-f", values.to_str().unwrap()]);
    let data = &find(&d, "ConfigMap")["data"];
    assert_eq!(
        data["team.pub"],
        "-----BEGIN PUBLIC KEY-----\nabc\n-----END PUBLIC KEY-----\n"
    );
    assert_eq!(data["registry-ca.crt"], "PEM");
    let config: Value = serde_yaml_ng::from_str(data["config.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(config["kind"], "HostConfig");
    assert_eq!(config["limits"]["memory"], "256Mi");
    assert_eq!(config["pluginObjects"]["tenantNamespaces"][0], "team-a");
    // A key the host does not know fails the host's parse, naming it.
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        data["config.yaml"]
            .as_str()
            .unwrap()
            .replace("limits:", "limitz:"),
    )
    .unwrap();
    let out = Command::new(kubewasm_bin())
        .args([
            "run",
            "--local",
            "/nonexistent",
            "--plugins",
            "/nonexistent",
            "--until-idle",
            "--config",
        ])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("limitz"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `leaderElection.shards`: the host runs `--shards N`, and its Role grants
/// the N shard Leases by name and the member Leases; unsharded, neither.
#[test]
fn shards_pass_the_flag_and_grant_their_leases() {
    let role_rules = |d: &[Value]| -> Vec<Value> {
        d.iter()
            .find(|doc| {
                doc["kind"] == "Role" && doc["metadata"]["name"] == "kubewasm-leader-election"
            })
            .unwrap()["rules"]
            .as_array()
            .unwrap()
            .clone()
    };
    let d = template("kubewasm", &["--set", "leaderElection.shards=3,replicas=3"]);
    assert!(
        args(&d).contains(&"--shards=3".to_owned()),
        "{:?}",
        args(&d)
    );
    let rules = role_rules(&d);
    assert!(
        rules.iter().any(|r| r["resourceNames"]
            == json!(["kubewasm-shard-0", "kubewasm-shard-1", "kubewasm-shard-2"])
            && r["verbs"] == json!(["get", "patch", "update"])),
        "{rules:#?}"
    );
    assert!(
        rules.iter().any(|r| r.get("resourceNames").is_none()
            && r["verbs"] == json!(["delete", "list", "patch"])),
        "{rules:#?}"
    );
    let d = template("kubewasm", &[]);
    assert!(!args(&d).iter().any(|a| a.starts_with("--shards")));
    let rules = role_rules(&d);
    assert!(
        !rules
            .iter()
            .any(|r| r["verbs"] == json!(["delete", "list", "patch"])),
        "unsharded, no member Leases: {rules:#?}"
    );
}

#[test]
fn values_switch_what_they_say() {
    // The single-node test cluster: host network, the API server on the
    // node's loopback, exec probes on the address each replica wrote.
    let d = template(
        "kubewasm",
        &[
            "--set",
            "hostNetwork=true,apiServer.host=127.0.0.1,apiServer.port=6443,image.pullPolicy=Never,metrics.auth=false,ui.enabled=true",
        ],
    );
    let spec = &find(&d, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(spec["hostNetwork"], true);
    let c = container(&d);
    assert_eq!(c["imagePullPolicy"], "Never");
    assert!(c.get("ports").is_none(), "{c}");
    assert_eq!(
        c["readinessProbe"]["exec"]["command"],
        json!([
            "/kubewasm",
            "probe",
            "/readyz",
            "--addr-file",
            "/run/kubewasm/metrics-addr"
        ])
    );
    let env = c["env"].as_array().unwrap();
    assert!(env.contains(&json!({"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"})));
    assert!(env.contains(&json!({"name": "KUBERNETES_SERVICE_PORT", "value": "6443"})));
    let a = args(&d);
    for want in [
        "--metrics-addr=127.0.0.1:0",
        "--metrics-addr-file=/run/kubewasm/metrics-addr",
        "--metrics-auth=false",
        "--ui",
        "--ui-addr=127.0.0.1:0",
    ] {
        assert!(a.iter().any(|x| x == want), "{want} not in {a:?}");
    }
    assert!(
        !d.iter().any(|x| x["kind"] == "Service"),
        "no Service on the host network"
    );

    // A claim the chart creates, or one that exists.
    let d = template(
        "tools",
        &[
            "--set",
            "cache.persistence.enabled=true,cache.persistence.size=5Gi,cache.persistence.storageClassName=fast",
        ],
    );
    let pvc = find(&d, "PersistentVolumeClaim");
    assert_eq!(pvc["metadata"]["namespace"], "tools");
    assert_eq!(pvc["spec"]["resources"]["requests"]["storage"], "5Gi");
    assert_eq!(pvc["spec"]["storageClassName"], "fast");
    let volumes = &find(&d, "Deployment")["spec"]["template"]["spec"]["volumes"];
    assert_eq!(
        volumes[2]["persistentVolumeClaim"]["claimName"],
        pvc["metadata"]["name"]
    );
    let d = template(
        "kubewasm",
        &[
            "--set",
            "cache.persistence.enabled=true,cache.persistence.existingClaim=mine",
        ],
    );
    assert!(!d.iter().any(|x| x["kind"] == "PersistentVolumeClaim"));
    let volumes = &find(&d, "Deployment")["spec"]["template"]["spec"]["volumes"];
    assert_eq!(volumes[2]["persistentVolumeClaim"]["claimName"], "mine");

    // Off-able parts, the ServiceMonitor on, one replica without a PDB.
    let d = template(
        "kubewasm",
        &[
            "--set",
            "networkPolicy.enabled=false,serviceMonitor.enabled=true,replicas=1,leaderElection.enabled=false,image.tag=9.9.9",
        ],
    );
    assert!(
        !d.iter()
            .any(|x| x["kind"] == "NetworkPolicy" || x["kind"] == "PodDisruptionBudget")
    );
    assert_eq!(
        find(&d, "ServiceMonitor")["apiVersion"],
        "monitoring.coreos.com/v1"
    );
    assert!(args(&d).iter().any(|x| x == "--leader-elect=false"));
    assert_eq!(container(&d)["image"], "localhost/kubewasm:9.9.9");
    // The tenants' ServiceAccount the host impersonates follows the config.
    let d = template(
        "kubewasm",
        &[
            "--set",
            "config.pluginObjects.tenants.serviceAccount=runner",
        ],
    );
    let objects = d
        .iter()
        .find(|x| x["kind"] == "ClusterRole" && x["metadata"]["name"] == "kubewasm-plugin-objects")
        .unwrap();
    assert!(
        objects["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resourceNames"] == json!(["runner"])),
        "{objects}"
    );
}

/// Server-side dry-run apply of `doc` (its namespace must exist).
async fn dry_run_apply(client: &kube::Client, doc: &Value) -> Result<(), kube::Error> {
    let (group, version) = match doc["apiVersion"].as_str().unwrap().split_once('/') {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (
            String::new(),
            doc["apiVersion"].as_str().unwrap().to_owned(),
        ),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, doc["kind"].as_str().unwrap());
    let (ar, caps) = pinned_kind(client, &gvk).await?;
    let api: Api<DynamicObject> = match (caps.scope, doc["metadata"]["namespace"].as_str()) {
        (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &ar),
        _ => Api::all_with(client.clone(), &ar),
    };
    let name = doc["metadata"]["name"].as_str().unwrap();
    api.patch(
        name,
        &PatchParams::apply("chart-test").dry_run(),
        &Patch::Apply(doc),
    )
    .await
    .map(|_| ())
}

#[tokio::test]
async fn default_rendering_is_admitted_under_pod_security_restricted() {
    let cp = ControlPlane::shared();
    let _logs = cp.logs_on_failure();
    let client = cp.admin_client().await;
    let ns = "chart-restricted";
    namespace(&client, ns, json!({"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"})).await;
    let d = template(ns, &[]);
    // Every object the chart renders is valid for the API server. The
    // ServiceAccount is created for real: a Pod's admission looks it up.
    for doc in &d {
        dry_run_apply(&client, doc)
            .await
            .unwrap_or_else(|e| panic!("{}/{}: {e}", doc["kind"], doc["metadata"]["name"]));
    }
    let sa: ServiceAccount = serde_json::from_value(find(&d, "ServiceAccount").clone()).unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
    let pod = |docs: &[Value]| -> DynamicObject {
        let template = &find(docs, "Deployment")["spec"]["template"];
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "kubewasm-template", "namespace": ns, "labels": template["metadata"]["labels"]},
            "spec": template["spec"],
        }))
        .unwrap()
    };
    let pods: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &kube::core::ApiResource::erase::<Pod>(&()),
    );
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    pods.create(&dry, &pod(&d))
        .await
        .unwrap_or_else(|e| panic!("the default Pod is refused under restricted: {e}"));
    // The check bites: the host network (the single-node values) is not
    // restricted.
    let host = template(ns, &["--set", "hostNetwork=true"]);
    let err = pods
        .create(&dry, &pod(&host))
        .await
        .expect_err("a hostNetwork Pod is refused");
    assert!(err.to_string().contains("restricted"), "{err}");
}
