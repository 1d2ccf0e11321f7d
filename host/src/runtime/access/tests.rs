use super::*;
use crate::informer::selector::LabelSelector;
use crate::kind::KindInfo;

fn rules(yaml: &str) -> Vec<Rule> {
    let raw: Vec<AccessRule> = serde_yaml_ng::from_str(yaml).unwrap();
    raw.iter()
        .enumerate()
        .map(|(i, r)| r.compile(i))
        .collect::<Result<_, _>>()
        .unwrap()
}

fn compile_err(yaml: &str) -> String {
    let raw: Vec<AccessRule> = serde_yaml_ng::from_str(yaml).unwrap();
    raw.iter()
        .enumerate()
        .map(|(i, r)| r.compile(i))
        .collect::<Result<Vec<_>, _>>()
        .unwrap_err()
}

fn cm() -> KindInfo {
    KindInfo::new("", "v1", "ConfigMap", "configmaps", true)
}
fn deploy() -> KindInfo {
    KindInfo::new("apps", "v1", "Deployment", "deployments", true)
}
fn ns_kind() -> KindInfo {
    KindInfo::new("", "v1", "Namespace", "namespaces", false)
}
fn no_cache(_: &LabelSelector, _: &str) -> Option<bool> {
    None
}

#[test]
fn grant_kinds_parse_as_rbac_names() {
    assert_eq!(
        GrantKind::parse("deployments.apps").unwrap(),
        GrantKind {
            group: "apps".into(),
            plural: "deployments".into()
        }
    );
    assert_eq!(GrantKind::parse("configmaps").unwrap().group, "");
    assert!(
        GrantKind::parse("Deployment")
            .unwrap_err()
            .contains("plural")
    );
    let e = GrantKind::parse("widgets.v1.example.com").unwrap_err();
    assert!(e.contains("widgets.example.com"), "{e}");
}

#[test]
fn rules_are_validated_with_their_place() {
    for (yaml, want) in [
        ("[{kinds: [], verbs: [read]}]", "access[0]: kinds is empty"),
        ("[{kinds: [pods], verbs: []}]", "verbs is empty"),
        (
            "[{kinds: [pods], verbs: [read]}, {kinds: [pods], verbs: [apply], namespaces: [a], namespaceSelector: {matchLabels: {a: b}}}]",
            "access[1]: give namespaces or namespaceSelector",
        ),
        (
            "[{kinds: [pods], verbs: [read], namespaceSelector: {matchLabels: {a: b}}}]",
            "cannot grant read",
        ),
        (
            "[{kinds: [pods], verbs: [apply], namespaces: [Bad_NS]}]",
            "namespace",
        ),
        (
            "[{kinds: [pods], verbs: [apply], namespaces: ['*', a]}]",
            "means all",
        ),
        (
            "[{kinds: [pods], verbs: [apply], namespaceSelector: {}}]",
            "every namespace",
        ),
        (
            "[{kinds: [pods], verbs: [apply], namespaceSelector: {matchExpressions: [{key: a, operator: Like}]}}]",
            "unknown operator",
        ),
    ] {
        let e = compile_err(yaml);
        assert!(e.contains(want), "{yaml}: {e}");
    }
    let raw: Result<Vec<AccessRule>, _> =
        serde_yaml_ng::from_str("[{kinds: [pods], verbs: [write]}]");
    assert!(
        raw.unwrap_err()
            .to_string()
            .contains("unknown variant `write`")
    );
    let r = rules("[{kinds: [pods], verbs: [apply], namespaces: ['*']}]");
    assert_eq!(r[0].namespaces, Namespaces::All);
}

#[test]
fn registration_asking_more_than_granted_is_refused_naming_kind_and_verb() {
    let g = Grant::new(
        "p",
        Some(rules(
            "[{kinds: [configmaps], verbs: [read, apply], namespaces: [team-a, team-b]}]",
        )),
    );
    // A write kind without any write verb.
    let e = g
        .check_registration(
            &[ReadRequest {
                kind: &cm(),
                namespace: Some("team-a"),
            }],
            &[deploy()],
        )
        .unwrap_err()
        .0;
    assert!(
        e.contains("deployments.apps") && e.contains("apply") && e.contains("p.yaml"),
        "{e}"
    );
    // A subscription to an ungranted kind.
    let e = g
        .check_registration(
            &[ReadRequest {
                kind: &deploy(),
                namespace: None,
            }],
            &[],
        )
        .unwrap_err()
        .0;
    assert!(e.contains("deployments.apps") && e.contains("read"), "{e}");
    // A subscription in a namespace outside the grant.
    let e = g
        .check_registration(
            &[ReadRequest {
                kind: &cm(),
                namespace: Some("team-c"),
            }],
            &[],
        )
        .unwrap_err()
        .0;
    assert!(
        e.contains("team-c") && e.contains("[team-a, team-b]") && e.contains("read"),
        "{e}"
    );
    // Every namespace is narrowed to the granted ones.
    let scopes = g
        .check_registration(
            &[ReadRequest {
                kind: &cm(),
                namespace: None,
            }],
            &[cm()],
        )
        .unwrap();
    assert_eq!(
        scopes,
        vec![ReadScope::Narrowed(
            ["team-a".to_owned(), "team-b".to_owned()].into()
        )]
    );
}

#[test]
fn no_access_list_reads_subscriptions_and_writes_nothing() {
    let g = Grant::new("p", None);
    let scopes = g
        .check_registration(
            &[ReadRequest {
                kind: &cm(),
                namespace: None,
            }],
            &[],
        )
        .unwrap();
    assert_eq!(scopes, vec![ReadScope::AsAsked]);
    let e = g.check_registration(&[], &[cm()]).unwrap_err().0;
    assert!(
        e.contains("no access list") && e.contains("access:") && e.contains("configmaps"),
        "{e}"
    );
    // The suggestion grants the whole registration: reads and writes.
    let e = g
        .check_registration(
            &[ReadRequest {
                kind: &deploy(),
                namespace: None,
            }],
            &[cm()],
        )
        .unwrap_err()
        .0;
    assert!(
        e.contains("{kinds: [deployments.apps], verbs: [read]}")
            && e.contains("{kinds: [configmaps], verbs: [apply, patch, delete, status]}"),
        "{e}"
    );
    g.check(&cm(), Verb::Read, Some("x"), &no_cache).unwrap();
    let e = g
        .check(&cm(), Verb::Events, Some("x"), &no_cache)
        .unwrap_err()
        .0;
    assert!(
        e.contains("no access list") && e.contains("verbs: [events]") && e.contains("p.yaml"),
        "{e}"
    );
}

#[test]
fn actions_are_checked_per_verb_and_namespace() {
    let g = Grant::new(
        "p",
        Some(rules(
            "[{kinds: [configmaps], verbs: [read, apply], namespaces: [team-a]},\n\
              {kinds: [configmaps], verbs: [delete]},\n\
              {kinds: [namespaces], verbs: [read, events]},\n\
              {kinds: [configmaps], verbs: [patch], namespaceSelector: {matchLabels: {tenant: 'yes'}}}]",
        )),
    );
    g.check(&cm(), Verb::Apply, Some("team-a"), &no_cache)
        .unwrap();
    let e = g
        .check(&cm(), Verb::Apply, Some("team-b"), &no_cache)
        .unwrap_err()
        .0;
    assert!(
        e.contains("apply configmaps in namespace team-b") && e.contains("[team-a]"),
        "{e}"
    );
    g.check(&cm(), Verb::Delete, Some("anywhere"), &no_cache)
        .unwrap();
    let e = g
        .check(&cm(), Verb::Status, Some("team-a"), &no_cache)
        .unwrap_err()
        .0;
    assert!(e.contains("grants no status on configmaps"), "{e}");
    g.check(&ns_kind(), Verb::Events, None, &no_cache).unwrap();
    // The selector is evaluated against the Namespace cache.
    let tenant = |_: &LabelSelector, ns: &str| Some(ns == "tenant-1");
    g.check(&cm(), Verb::Patch, Some("tenant-1"), &tenant)
        .unwrap();
    let e = g
        .check(&cm(), Verb::Patch, Some("other"), &tenant)
        .unwrap_err()
        .0;
    assert!(e.contains("matching \"tenant=yes\""), "{e}");
    // No cache: refused.
    assert!(
        g.check(&cm(), Verb::Patch, Some("tenant-1"), &no_cache)
            .is_err()
    );
}

#[test]
fn cluster_scoped_kinds_need_a_rule_without_namespaces() {
    let g = Grant::new(
        "p",
        Some(rules(
            "[{kinds: [namespaces], verbs: [read, apply], namespaces: [a]}]",
        )),
    );
    let e = g
        .check(&ns_kind(), Verb::Apply, None, &no_cache)
        .unwrap_err()
        .0;
    assert!(e.contains("cluster-scoped"), "{e}");
    let e = g
        .check_registration(
            &[ReadRequest {
                kind: &ns_kind(),
                namespace: None,
            }],
            &[],
        )
        .unwrap_err()
        .0;
    assert!(e.contains("cluster-scoped"), "{e}");
}

#[test]
fn selector_grants_need_the_namespace_cache() {
    let g = Grant::new(
        "p",
        Some(rules(
            "[{kinds: [configmaps], verbs: [read]}, {kinds: [configmaps], verbs: [apply], namespaceSelector: {matchLabels: {a: b}}}]",
        )),
    );
    let cmk = cm();
    let read_cm = ReadRequest {
        kind: &cmk,
        namespace: None,
    };
    let e = g
        .check_registration(std::slice::from_ref(&read_cm), &[cm()])
        .unwrap_err()
        .0;
    assert!(e.contains("subscribe to namespaces"), "{e}");
    let nsk = ns_kind();
    let g2 = Grant::new(
        "p",
        Some(rules(
            "[{kinds: [configmaps, namespaces], verbs: [read]}, {kinds: [configmaps], verbs: [apply], namespaceSelector: {matchLabels: {a: b}}}]",
        )),
    );
    g2.check_registration(
        &[
            read_cm,
            ReadRequest {
                kind: &nsk,
                namespace: None,
            },
        ],
        &[cm()],
    )
    .unwrap();
}
