//! One test per rule, each with the message the real API server gave
//! (kube-apiserver v1.35.8; the e2e suite `tests/tests/openapi.rs` sends
//! the same objects to it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};

use super::*;

fn gvk(group: &str, kind: &str) -> Gvk {
    let version = if group == "autoscaling" { "v2" } else { "v1" };
    Gvk::new(group, version, kind)
}

fn create(group: &str, kind: &str, object: Value, write: Write) -> Refusal {
    validate_create(&gvk(group, kind), &object, write).expect_err("refused")
}

fn message(refusal: &Refusal) -> String {
    refusal.status().message
}

fn deployment(spec: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": spec})
}

fn good_spec() -> Value {
    json!({"selector": {"matchLabels": {"a": "b"}},
           "template": {"metadata": {"labels": {"a": "b"}},
                        "spec": {"containers": [{"name": "c", "image": "i"}]}}})
}

#[test]
fn a_valid_object_and_an_unknown_kind_pass() {
    let ok = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}});
    validate_create(&gvk("", "ConfigMap"), &ok, Write::Create).unwrap();
    validate_create(
        &gvk("apps", "Deployment"),
        &deployment(good_spec()),
        Write::Apply,
    )
    .unwrap();
    let custom = Gvk::new("example.com", "v1", "Widget");
    validate_create(&custom, &json!({"spec": 1}), Write::Apply).unwrap();
}

#[test]
fn a_wrong_type_is_undecodable_and_answered_per_verb() {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "x", "namespace": "ns"}, "data": {"foo": 1}});
    let r = create("", "ConfigMap", cm.clone(), Write::Create);
    let s = r.status();
    assert_eq!((s.code, s.reason.as_str()), (400, "BadRequest"));
    assert_eq!(
        s.message,
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ConfigMap.data of type string"
    );
    assert_eq!(r.fields(), ["data[foo]"]);
    let s = create("", "ConfigMap", cm.clone(), Write::Apply).status();
    assert_eq!((s.code, s.reason.as_str()), (500, ""));
    assert_eq!(
        s.message,
        "failed to create typed patch object (ns/x; /v1, Kind=ConfigMap): .data.foo: expected string, got &value.valueUnstructured{Value:1}"
    );
    let s = create("", "ConfigMap", cm, Write::Patch).status();
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    let causes = s.details.unwrap().causes;
    assert_eq!(causes[0].field, "patch");
    assert!(causes[0].message.ends_with(
        "json: cannot unmarshal number into Go struct field ConfigMap.data of type string"
    ));
}

#[test]
fn integers_name_the_innermost_struct_and_the_whole_path() {
    let mut d = deployment(good_spec());
    d["spec"]["replicas"] = json!("3");
    assert_eq!(
        message(&create("apps", "Deployment", d, Write::Create)),
        "Deployment in version \"v1\" cannot be handled as a Deployment: json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32"
    );
    let mut d = deployment(good_spec());
    d["spec"]["template"]["spec"]["containers"][0]["ports"] = json!([{"containerPort": "x"}]);
    let r = create("apps", "Deployment", d.clone(), Write::Create);
    assert!(message(&r).ends_with(
        "json: cannot unmarshal string into Go struct field ContainerPort.spec.template.spec.containers.ports.containerPort of type int32"
    ));
    let apply = message(&create("apps", "Deployment", d, Write::Apply));
    assert!(
        apply.ends_with(".spec.template.spec.containers[name=\"c\"].ports[containerPort=\"x\",protocol=\"TCP\"].containerPort: expected numeric (int or float), got string"),
        "{apply}"
    );
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                     "spec": {"containers": [{"name": "c", "image": "i"}], "activeDeadlineSeconds": 1.5}});
    assert!(message(&create("", "Pod", pod.clone(), Write::Create)).ends_with(
        "cannot unmarshal number 1.5 into Go struct field PodSpec.spec.activeDeadlineSeconds of type int64"
    ));
    assert!(message(&create("", "Pod", pod, Write::Apply)).ends_with(
        "to proper version: unable to convert unstructured object to /v1, Kind=Pod: cannot convert float64 to int64"
    ));
}

#[test]
fn structs_lists_quantities_and_base64_are_decoded_as_go_does() {
    let pod = |spec: Value| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec});
    let c = json!([{"name": "c", "image": "i"}]);
    let cases = [
        (
            json!({"containers": c, "tolerations": {"a": 1}}),
            "json: cannot unmarshal object into Go struct field PodSpec.spec.tolerations of type []v1.Toleration",
        ),
        (
            json!({"containers": c, "securityContext": "x"}),
            "json: cannot unmarshal string into Go struct field PodSpec.spec.securityContext of type v1.PodSecurityContext",
        ),
        (
            json!({"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": "abc"}}}]}),
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        ),
        (
            json!({"containers": [{"name": "c", "image": "i", "args": [1]}]}),
            "json: cannot unmarshal number into Go struct field Container.spec.containers.args of type string",
        ),
        (
            json!({"containers": [{"name": "c", "image": "i", "stdin": "yes"}]}),
            "json: cannot unmarshal string into Go struct field Container.spec.containers.stdin of type bool",
        ),
    ];
    for (spec, want) in cases {
        let m = message(&create("", "Pod", pod(spec), Write::Create));
        assert_eq!(
            m,
            format!("Pod in version \"v1\" cannot be handled as a Pod: {want}")
        );
    }
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"a": "abc!"}});
    assert_eq!(
        message(&create("", "Secret", secret, Write::Create)),
        "Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at input byte 3"
    );
    // Accepted: quantities as numbers, int-or-string as either.
    let mut d = deployment(good_spec());
    d["spec"]["strategy"] = json!({"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}});
    d["spec"]["template"]["spec"]["containers"][0]["resources"] =
        json!({"limits": {"cpu": 1.5, "memory": "1Gi"}});
    validate_create(&gvk("apps", "Deployment"), &d, Write::Create).unwrap();
}

#[test]
fn undeclared_fields_are_dropped_except_in_an_apply() {
    let cm =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "bogus": 1});
    validate_create(&gvk("", "ConfigMap"), &cm, Write::Create).unwrap();
    validate_create(&gvk("", "ConfigMap"), &cm, Write::Patch).unwrap();
    assert_eq!(
        message(&create("", "ConfigMap", cm, Write::Apply)),
        "failed to create typed patch object (/x; /v1, Kind=ConfigMap): .bogus: field not declared in schema"
    );
}

#[test]
fn required_fields_come_from_the_schema_and_descend_into_defaulted_structs() {
    let r = create(
        "apps",
        "Deployment",
        deployment(json!({"replicas": 3})),
        Write::Create,
    );
    assert_eq!(
        message(&r),
        "Deployment.apps \"d\" is invalid: [spec.selector: Required value, spec.template.metadata.labels: Invalid value: null: `selector` does not match template `labels`, spec.template.spec.containers: Required value]"
    );
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                     "spec": {"containers": [{"image": "i"}, {"name": "b"}]}});
    let r = create("", "Pod", pod, Write::Create);
    assert_eq!(
        message(&r),
        "Pod \"p\" is invalid: [spec.containers[0].name: Required value, spec.containers[1].image: Required value]"
    );
    let s = r.status();
    let causes = s.details.unwrap().causes;
    assert_eq!(causes[0].reason, "FieldValueRequired");
    assert_eq!(causes[0].message, "Required value");
}

#[test]
fn names_follow_each_kinds_rule() {
    let cm =
        |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    assert_eq!(
        message(&create("", "ConfigMap", cm("Bad_Name"), Write::Create)),
        "ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    );
    let none = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}});
    assert_eq!(
        message(&create("", "ConfigMap", none, Write::Create)),
        "ConfigMap \"\" is invalid: metadata.name: Required value: name or generateName is required"
    );
    let generated = json!({"metadata": {"generateName": "x-"}});
    validate_create(&gvk("", "ConfigMap"), &generated, Write::Create).unwrap();
    use meta::NameRule;
    assert_eq!(
        NameRule::of("", "Namespace").check("a.b"),
        ["must not contain dots"]
    );
    assert!(
        NameRule::of("", "Namespace").check("A_b")[0].starts_with("a lowercase RFC 1123 label")
    );
    assert!(NameRule::of("", "Service").check("1svc")[0].starts_with("a DNS-1035 label"));
    assert!(NameRule::of("", "Service").check("svc").is_empty());
    assert_eq!(
        NameRule::of("apps", "StatefulSet").check("a.b"),
        ["must not contain dots"]
    );
    assert!(
        NameRule::of("apiregistration.k8s.io", "APIService")
            .check("v1.")
            .is_empty()
    );
    assert!(
        NameRule::of("rbac.authorization.k8s.io", "ClusterRole")
            .check("system:x")
            .is_empty()
    );
    assert_eq!(
        NameRule::of("rbac.authorization.k8s.io", "Role").check("a/b"),
        ["may not contain '/'"]
    );
    assert_eq!(
        NameRule::of("", "ConfigMap").check(&"a".repeat(254)),
        ["must be no more than 253 characters"]
    );
}

#[test]
fn labels_and_finalizers_are_checked() {
    let cm = |meta: Value| {
        let mut m = json!({"name": "x"});
        m.as_object_mut()
            .unwrap()
            .extend(meta.as_object().unwrap().clone());
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": m})
    };
    let r = create(
        "",
        "ConfigMap",
        cm(json!({"labels": {"a": "b c"}})),
        Write::Create,
    );
    assert!(message(&r).starts_with("ConfigMap \"x\" is invalid: metadata.labels: Invalid value: \"b c\": a valid label must be an empty string"));
    let r = create(
        "",
        "ConfigMap",
        cm(json!({"finalizers": ["bad"]})),
        Write::Create,
    );
    assert_eq!(
        message(&r),
        "ConfigMap \"x\" is invalid: metadata.finalizers[0]: Invalid value: \"bad\": name is neither a standard finalizer name nor is it fully qualified"
    );
    validate_create(
        &gvk("", "ConfigMap"),
        &cm(
            json!({"finalizers": ["kubernetes", "a.io/x"], "labels": {"a.io/b": "", "c": "d_e.f"}}),
        ),
        Write::Create,
    )
    .unwrap();
}

#[test]
fn workload_selectors_must_select_their_template() {
    let mut d = deployment(good_spec());
    d["spec"]["selector"] = json!({"matchLabels": {"a": "c"}});
    assert_eq!(
        message(&create("apps", "Deployment", d.clone(), Write::Create)),
        "Deployment.apps \"d\" is invalid: spec.template.metadata.labels: Invalid value: {\"a\":\"b\"}: `selector` does not match template `labels`"
    );
    d["spec"]["selector"] =
        json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["b"]}]});
    validate_create(&gvk("apps", "Deployment"), &d, Write::Create).unwrap();
    d["spec"]["selector"] = json!({});
    assert_eq!(
        message(&create("apps", "Deployment", d, Write::Create)),
        "Deployment.apps \"d\" is invalid: spec.selector: Invalid value: {}: empty selector is invalid for deployment"
    );
}

#[test]
fn restart_policies_of_jobs_and_deployments() {
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                     "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    assert_eq!(
        message(&create("batch", "Job", job, Write::Create)),
        "Job.batch \"j\" is invalid: spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\""
    );
    let mut d = deployment(good_spec());
    d["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
    assert_eq!(
        message(&create("apps", "Deployment", d, Write::Create)),
        "Deployment.apps \"d\" is invalid: spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\""
    );
}

fn update(group: &str, kind: &str, old: &Value, new: &Value) -> Result<(), Refusal> {
    validate_update(&gvk(group, kind), old, new, Write::Patch)
}

#[test]
fn immutable_config_maps_and_secrets() {
    let old = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "im"}, "immutable": true, "data": {"a": "b"}});
    let mut new = old.clone();
    new["data"]["a"] = json!("c");
    assert_eq!(
        message(&update("", "ConfigMap", &old, &new).unwrap_err()),
        "ConfigMap \"im\" is invalid: data: Forbidden: field is immutable when `immutable` is set"
    );
    let mut new = old.clone();
    new["immutable"] = json!(false);
    assert_eq!(
        message(&update("", "ConfigMap", &old, &new).unwrap_err()),
        "ConfigMap \"im\" is invalid: immutable: Forbidden: field is immutable when `immutable` is set"
    );
    let mut new = old.clone();
    new["metadata"]["labels"] = json!({"x": "y"});
    update("", "ConfigMap", &old, &new).unwrap();
    let secret =
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "type": "Opaque"});
    let mut new = secret.clone();
    new["type"] = json!("foo");
    assert_eq!(
        message(&update("", "Secret", &secret, &new).unwrap_err()),
        "Secret \"s\" is invalid: type: Invalid value: \"foo\": field is immutable"
    );
}

#[test]
fn metadata_that_never_changes_and_terminating_objects() {
    let old = json!({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "fin", "uid": "u-1", "finalizers": ["a.io/x"],
                                  "deletionTimestamp": "2026-11-29T06:48:53Z", "deletionGracePeriodSeconds": 0}});
    let mut new = old.clone();
    new["metadata"]["uid"] = json!("abc");
    let r = update("", "ConfigMap", &old, &new).unwrap_err();
    assert_eq!(
        message(&r),
        "ConfigMap \"fin\" is invalid: metadata.uid: Invalid value: \"abc\": field is immutable"
    );
    assert_eq!(
        r.causes().len(),
        2,
        "the server lists a metadata cause twice on update"
    );
    let mut new = old.clone();
    new["metadata"]["finalizers"] = json!(["a.io/x", "b.io/y"]);
    assert_eq!(
        message(&update("", "ConfigMap", &old, &new).unwrap_err()),
        "ConfigMap \"fin\" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"b.io/y\"}"
    );
    let mut new = old.clone();
    new["metadata"]["deletionGracePeriodSeconds"] = json!(5);
    assert_eq!(
        message(&update("", "ConfigMap", &old, &new).unwrap_err()),
        "ConfigMap \"fin\" is invalid: metadata.deletionGracePeriodSeconds: Invalid value: 5: field is immutable"
    );
    let mut new = old.clone();
    new["metadata"]["finalizers"] = json!([]);
    update("", "ConfigMap", &old, &new).unwrap();
}

#[test]
fn pod_specs_change_only_where_allowed() {
    let old = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                     "spec": {"containers": [{"name": "a", "image": "i"}], "tolerations": [{"key": "t", "operator": "Exists"}]}});
    let mut new = old.clone();
    new["spec"]["containers"][0]["image"] = json!("j");
    new["spec"]["activeDeadlineSeconds"] = json!(30);
    new["spec"]["tolerations"] =
        json!([{"key": "t", "operator": "Exists"}, {"key": "x", "operator": "Exists"}]);
    update("", "Pod", &old, &new).unwrap();
    let mut new = old.clone();
    new["spec"]["restartPolicy"] = json!("Never");
    let r = update("", "Pod", &old, &new).unwrap_err();
    assert!(message(&r).starts_with("Pod \"p\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`"));
    let mut new = old.clone();
    new["spec"]["tolerations"] = json!([]);
    assert!(
        update("", "Pod", &old, &new).is_err(),
        "tolerations may only be added"
    );
}

#[test]
fn selectors_cluster_ips_claims_stateful_sets_and_jobs() {
    let old = deployment(good_spec());
    let mut new = old.clone();
    new["spec"]["selector"] = json!({"matchLabels": {"a": "b", "c": "d"}});
    new["spec"]["template"]["metadata"]["labels"]["c"] = json!("d");
    assert_eq!(
        message(&update("apps", "Deployment", &old, &new).unwrap_err()),
        "Deployment.apps \"d\" is invalid: spec.selector: Invalid value: {\"matchLabels\":{\"a\":\"b\",\"c\":\"d\"}}: field is immutable"
    );
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                     "spec": {"clusterIP": "10.0.0.62", "clusterIPs": ["10.0.0.62"], "ports": [{"port": 80}]}});
    let mut new = svc.clone();
    new["spec"]["clusterIP"] = json!("10.0.0.99");
    assert_eq!(
        message(&update("", "Service", &svc, &new).unwrap_err()),
        "Service \"s\" is invalid: spec.clusterIPs[0]: Invalid value: [\"10.0.0.99\"]: may not change once set"
    );
    let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c"},
                     "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
    let mut new = pvc.clone();
    new["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
    let r = update("", "PersistentVolumeClaim", &pvc, &new).unwrap_err();
    assert_eq!(
        r.fields(),
        ["spec"],
        "an unbound claim's requests are fixed too"
    );
    let mut bound = pvc.clone();
    bound["status"] = json!({"phase": "Bound"});
    update("", "PersistentVolumeClaim", &bound, &new).unwrap();
    let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s"},
                     "spec": {"serviceName": "a", "selector": {"matchLabels": {"a": "b"}},
                              "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    let mut new = sts.clone();
    new["spec"]["replicas"] = json!(3);
    update("apps", "StatefulSet", &sts, &new).unwrap();
    new["spec"]["serviceName"] = json!("b");
    assert_eq!(
        update("apps", "StatefulSet", &sts, &new)
            .unwrap_err()
            .fields(),
        ["spec"]
    );
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                     "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}});
    let mut new = job.clone();
    new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("j");
    assert_eq!(
        update("batch", "Job", &job, &new).unwrap_err().fields(),
        ["spec.template"]
    );
    let mut suspended = job.clone();
    suspended["spec"]["suspend"] = json!(true);
    let mut new2 = new.clone();
    new2["spec"]["suspend"] = json!(true);
    update("batch", "Job", &suspended, &new2).unwrap();
}

#[test]
fn a_refusal_converts_into_the_status_the_server_sends() {
    let r = create(
        "apps",
        "Deployment",
        deployment(json!({"replicas": 3})),
        Write::Create,
    );
    let status = serde_json::to_value(r.status()).unwrap();
    assert_eq!(
        status["kind"],
        json!(null),
        "kube's Status leaves kind and apiVersion to the caller"
    );
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["code"], 422);
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["details"]["name"], "d");
    assert_eq!(status["details"]["group"], "apps");
    assert_eq!(status["details"]["kind"], "Deployment");
    assert_eq!(
        status["details"]["causes"][0],
        json!({"reason": "FieldValueRequired", "message": "Required value", "field": "spec.selector"})
    );
}

#[test]
fn some_missing_fields_are_worded_as_go_checks_them() {
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                     "spec": {"ports": [{"targetPort": 80}]}});
    assert_eq!(
        message(&create("", "Service", svc, Write::Create)),
        "Service \"s\" is invalid: spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive"
    );
    let ing = json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "i"},
                     "spec": {"rules": [{"http": {"paths": [{"path": "/", "backend": {"service": {"name": "s", "port": {"number": 80}}}}]}}]}});
    assert_eq!(
        message(&create("networking.k8s.io", "Ingress", ing, Write::Create)),
        "Ingress.networking.k8s.io \"i\" is invalid: spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified"
    );
    let name = "a".repeat(70);
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
                     "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}});
    assert_eq!(
        message(&create("batch", "Job", job, Write::Create)),
        format!(
            "Job.batch \"{name}\" is invalid: spec.template.labels: Invalid value: \"{name}\": must be no more than 63 bytes"
        )
    );
}

#[test]
fn a_status_write_is_decoded_and_its_metadata_checked() {
    let old = deployment(good_spec());
    let mut new = old.clone();
    new["status"] = json!({"replicas": 2});
    validate_status_update(&gvk("apps", "Deployment"), &old, &new, Write::Patch).unwrap();
    new["status"]["replicas"] = json!("2");
    let r =
        validate_status_update(&gvk("apps", "Deployment"), &old, &new, Write::Create).unwrap_err();
    assert!(message(&r).ends_with(
        "json: cannot unmarshal string into Go struct field DeploymentStatus.status.replicas of type int32"
    ));
    let mut new = old.clone();
    new["metadata"]["uid"] = json!("abc");
    let r =
        validate_status_update(&gvk("apps", "Deployment"), &old, &new, Write::Patch).unwrap_err();
    assert_eq!(r.fields(), ["metadata.uid", "metadata.uid"]);
}
