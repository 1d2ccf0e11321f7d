//! The policy as Kubernetes YAML: a ClusterRole and binding when any rule
//! spans the cluster, a Role and binding per namespace a plugin is confined
//! to, the host's leader-election Role, and the ClusterRole its
//! `--metrics-auth` needs, all bound to the host's ServiceAccount. Written by hand so that every rule carries a comment
//! naming the plugins that need it; the output is byte-for-byte stable.

use std::fmt::Write;

use super::access::Access;
use super::policy::Rule;
use super::{Derived, RbacOptions};

/// A YAML scalar: plain when that is unambiguous, else double-quoted.
fn scalar(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '/' | '_'))
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
        && !matches!(
            s,
            "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "y" | "n"
        );
    if plain {
        s.to_owned()
    } else {
        serde_json::Value::String(s.to_owned()).to_string()
    }
}

fn flow(items: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    let items: Vec<String> = items.into_iter().map(|i| scalar(i.as_ref())).collect();
    format!("[{}]", items.join(", "))
}

/// A comment line, kept on one line whatever a plugin name holds.
fn comment(out: &mut String, indent: &str, text: &str) {
    let text: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let _ = writeln!(out, "{indent}# {text}");
}

fn rules(out: &mut String, rules: &[Rule]) {
    let _ = writeln!(out, "rules:");
    for r in rules {
        if let Some(host) = &r.host {
            comment(out, "  ", &format!("kubewasm host: {host}"));
        }
        if !r.needed_by.is_empty() {
            let who: Vec<String> = r
                .needed_by
                .iter()
                .map(|(p, why)| {
                    let why: Vec<&str> = why.iter().map(|w| w.as_str()).collect();
                    format!("{p} ({})", why.join(", "))
                })
                .collect();
            comment(out, "  ", &who.join("; "));
        }
        for n in &r.notes {
            comment(out, "  ", &format!("check: {n}"));
        }
        let _ = writeln!(out, "  - apiGroups: {}", flow([&r.group]));
        let _ = writeln!(out, "    resources: {}", flow([&r.resource]));
        if !r.resource_names.is_empty() {
            let _ = writeln!(out, "    resourceNames: {}", flow(&r.resource_names));
        }
        let _ = writeln!(out, "    verbs: {}", flow(&r.verbs));
    }
}

fn metadata(out: &mut String, name: &str, namespace: Option<&str>, opts: &RbacOptions) {
    let _ = writeln!(out, "metadata:");
    let _ = writeln!(out, "  name: {}", scalar(name));
    if let Some(ns) = namespace {
        let _ = writeln!(out, "  namespace: {}", scalar(ns));
    }
    let _ = writeln!(out, "  labels:");
    let _ = writeln!(out, "    app.kubernetes.io/name: {}", scalar(&opts.name));
    let _ = writeln!(out, "    app.kubernetes.io/component: rbac");
}

fn binding(out: &mut String, kind: &str, name: &str, namespace: Option<&str>, opts: &RbacOptions) {
    binding_to(
        out,
        kind,
        name,
        namespace,
        opts,
        (&opts.service_account, &opts.namespace),
    );
}

/// A binding of the role `name` to the ServiceAccount `subject`
/// (name, namespace).
fn binding_to(
    out: &mut String,
    kind: &str,
    name: &str,
    namespace: Option<&str>,
    opts: &RbacOptions,
    subject: (&str, &str),
) {
    let _ = writeln!(out, "---");
    let _ = writeln!(out, "apiVersion: rbac.authorization.k8s.io/v1");
    let _ = writeln!(out, "kind: {kind}Binding");
    metadata(out, name, namespace, opts);
    let _ = writeln!(out, "roleRef:");
    let _ = writeln!(out, "  apiGroup: rbac.authorization.k8s.io");
    let _ = writeln!(out, "  kind: {kind}");
    let _ = writeln!(out, "  name: {}", scalar(name));
    let _ = writeln!(out, "subjects:");
    let _ = writeln!(out, "  - kind: ServiceAccount");
    let _ = writeln!(out, "    name: {}", scalar(subject.0));
    let _ = writeln!(out, "    namespace: {}", scalar(subject.1));
}

fn role(
    out: &mut String,
    kind: &str,
    name: &str,
    namespace: Option<&str>,
    why: &str,
    body: &[Rule],
    opts: &RbacOptions,
) {
    let _ = writeln!(out, "---");
    comment(out, "", why);
    let _ = writeln!(out, "apiVersion: rbac.authorization.k8s.io/v1");
    let _ = writeln!(out, "kind: {kind}");
    metadata(out, name, namespace, opts);
    rules(out, body);
    binding(out, kind, name, namespace, opts);
}

/// Renders the policy of `derived`.
pub fn render(opts: &RbacOptions, derived: &Derived) -> String {
    let policy = &derived.policy;
    let mut out = String::new();
    let with_objects = !opts.objects.is_empty() || opts.from_cluster.is_some();
    let mut sources = String::new();
    if opts.plugins.is_some() {
        sources.push_str(" --plugins DIR");
    }
    if !opts.objects.is_empty() {
        sources.push_str(" --objects PATH");
    }
    if opts.from_cluster.is_some() {
        sources.push_str(" --from-cluster");
    }
    if opts.host_only {
        sources.push_str(" --host-only");
    }
    comment(
        &mut out,
        "",
        "Least-privilege RBAC for kubewasm and its plugins, generated by",
    );
    comment(
        &mut out,
        "",
        &format!(
            "  kubewasm rbac{sources} --namespace {} --name {} --service-account {}{}",
            opts.namespace,
            opts.name,
            opts.service_account,
            if opts.host_role {
                format!(
                    " --lease-name {}{}{}",
                    opts.lease_name,
                    opts.shards
                        .map(|n| format!(" --shards {n}"))
                        .unwrap_or_default(),
                    if opts.metrics_auth {
                        ""
                    } else {
                        " --no-metrics-auth"
                    }
                )
            } else {
                " --plugins-only".to_owned()
            }
        ),
    );
    let names = |accesses: &[Access]| {
        let names: Vec<&str> = accesses.iter().map(|a| a.plugin.as_str()).collect();
        if names.is_empty() {
            "(none)".to_owned()
        } else {
            names.join(", ")
        }
    };
    let mut from = Vec::new();
    if opts.plugins.is_some() {
        from.push(format!(
            "the registrations and sidecar access lists of: {}",
            names(&derived.folder)
        ));
    }
    if with_objects {
        from.push(format!(
            "the access lists of the Plugin objects: {}",
            names(&derived.objects)
        ));
    }
    if opts.host_only {
        comment(
            &mut out,
            "",
            "for no plugins: the host's own roles alone. Plugins come as Plugin objects, each with its RBAC",
        );
        comment(
            &mut out,
            "",
            "(kubewasm rbac --objects FILE --name NAME --plugins-only).",
        );
    } else {
        comment(&mut out, "", &format!("from {}.", from.join("; and ")));
    }
    comment(
        &mut out,
        "",
        if opts.host_only {
            "Do not edit: regenerate it when kubewasm changes."
        } else if with_objects {
            "Do not edit: regenerate it when a plugin, its sidecar or a Plugin object changes."
        } else {
            "Do not edit: regenerate it when a plugin or its sidecar changes."
        },
    );
    if !policy.cluster.is_empty() {
        role(
            &mut out,
            "ClusterRole",
            &opts.name,
            None,
            "What the plugins need in every namespace (cluster-wide subscriptions, cluster-scoped kinds).",
            &policy.cluster,
            opts,
        );
    }
    for (ns, body) in &policy.namespaced {
        role(
            &mut out,
            "Role",
            &opts.name,
            Some(ns),
            &format!("What the plugins are granted in namespace {ns} only."),
            body,
            opts,
        );
    }
    for ((ns, account), body) in &policy.tenants {
        let name = format!("{}-tenant", opts.name);
        let _ = writeln!(out, "---");
        comment(
            &mut out,
            "",
            &format!(
                "The tenant {ns}'s: its NamespacedPlugins act as this ServiceAccount (the host impersonates it)."
            ),
        );
        let _ = writeln!(out, "apiVersion: v1");
        let _ = writeln!(out, "kind: ServiceAccount");
        metadata(&mut out, account, Some(ns), opts);
        let _ = writeln!(out, "---");
        comment(
            &mut out,
            "",
            &format!(
                "What the tenant {ns}'s plugins may do there, as {account}: their reads, writes and Events, and the objects their specs name."
            ),
        );
        let _ = writeln!(out, "apiVersion: rbac.authorization.k8s.io/v1");
        let _ = writeln!(out, "kind: Role");
        metadata(&mut out, &name, Some(ns), opts);
        rules(&mut out, body);
        binding_to(&mut out, "Role", &name, Some(ns), opts, (account, ns));
    }
    if opts.host_role {
        role(
            &mut out,
            "Role",
            &format!("{}-leader-election", opts.name),
            Some(&policy.host_namespace),
            "The host's own: its leader-election Lease.",
            &policy.host,
            opts,
        );
        if opts.metrics_auth {
            role(
                &mut out,
                "ClusterRole",
                &format!("{}-metrics-auth", opts.name),
                None,
                "The host's own: reviews of the tokens sent to /metrics and /dead-letters (--metrics-auth).",
                &policy.host_cluster,
                opts,
            );
        }
        role(
            &mut out,
            "ClusterRole",
            &format!("{}-plugin-objects", opts.name),
            None,
            "The host's own: Plugin and NamespacedPlugin objects (watch, status) and the ConfigMaps their modules are in.",
            &policy.objects_cluster,
            opts,
        );
        role(
            &mut out,
            "Role",
            &format!("{}-plugin-objects", opts.name),
            Some(&policy.host_namespace),
            "The host's own: the registry credentials Plugin objects name (pull Secrets).",
            &policy.objects_host,
            opts,
        );
        role(
            &mut out,
            "Role",
            &format!("{}-plugin-object-events", opts.name),
            Some("default"),
            "The host's own: Events about Plugin objects (a cluster-scoped object's Events live in default).",
            &policy.objects_events,
            opts,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_are_quoted_only_when_needed() {
        assert_eq!(scalar(""), "\"\"");
        assert_eq!(scalar("deployments/status"), "deployments/status");
        assert_eq!(scalar("events.k8s.io"), "events.k8s.io");
        assert_eq!(scalar("on"), "\"on\"");
        assert_eq!(scalar("a b"), "\"a b\"");
        assert_eq!(scalar("*"), "\"*\"");
        assert_eq!(flow(["get", "list"]), "[get, list]");
    }

    #[test]
    fn output_is_valid_yaml_with_the_bindings() {
        let opts = RbacOptions::new("p".into());
        let derived = Derived {
            folder: Vec::new(),
            objects: Vec::new(),
            policy: super::super::policy::derive(&[], &[], &Default::default(), "ops", "kubewasm"),
            notes: Vec::new(),
        };
        let text = render(&opts, &derived);
        let docs: Vec<serde_json::Value> = serde_yaml_ng::Deserializer::from_str(&text)
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .filter(|v: &serde_json::Value| !v.is_null())
            .collect();
        let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            vec![
                "Role",
                "RoleBinding",
                "ClusterRole",
                "ClusterRoleBinding",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
                "Role",
                "RoleBinding"
            ]
        );
        // Events about Plugins: in default, where a cluster-scoped
        // object's Events live.
        assert_eq!(docs[8]["metadata"]["name"], "kubewasm-plugin-object-events");
        assert_eq!(docs[8]["metadata"]["namespace"], "default");
        assert_eq!(docs[0]["metadata"]["namespace"], "ops");
        assert_eq!(docs[0]["rules"][1]["resourceNames"][0], "kubewasm");
        assert_eq!(docs[1]["subjects"][0]["namespace"], "kubewasm");
        assert_eq!(docs[2]["metadata"]["name"], "kubewasm-metrics-auth");
        let reviews: Vec<(&str, &str, &str)> = docs[2]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["apiGroups"][0].as_str().unwrap(),
                    r["resources"][0].as_str().unwrap(),
                    r["verbs"][0].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            reviews,
            [
                ("authentication.k8s.io", "tokenreviews", "create"),
                ("authorization.k8s.io", "subjectaccessreviews", "create")
            ]
        );
        assert_eq!(docs[3]["roleRef"]["name"], "kubewasm-metrics-auth");
        // Plugin objects: watched and their status written cluster-wide,
        // pull Secrets read in the host's namespace only.
        assert_eq!(docs[4]["metadata"]["name"], "kubewasm-plugin-objects");
        let objects = docs[4]["rules"].to_string();
        for needle in ["plugins/status", "namespacedplugins", "configmaps", "watch"] {
            assert!(objects.contains(needle), "{needle}: {objects}");
        }
        assert!(!objects.contains("secrets"), "{objects}");
        assert_eq!(docs[6]["metadata"]["namespace"], "ops");
        assert_eq!(docs[6]["rules"][0]["resources"][0], "secrets");
        // Without --metrics-auth: no token reviews.
        let opts = RbacOptions {
            metrics_auth: false,
            ..opts
        };
        let text = render(&opts, &derived);
        assert!(
            !text.contains("tokenreviews") && text.contains("--no-metrics-auth"),
            "{text}"
        );
    }
}
