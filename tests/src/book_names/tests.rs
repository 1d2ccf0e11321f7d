use super::*;

#[test]
fn metric_names_stand_alone() {
    assert_eq!(
        metric_names(
            "`kubewasm_actions_total{outcome=\"failed\"}` and rate(kubewasm_plugin_call_duration_seconds_bucket[5m])."
        ),
        [
            "kubewasm_actions_total",
            "kubewasm_plugin_call_duration_seconds_bucket"
        ]
    );
    assert_eq!(metric_names("see kubewasm_leader."), ["kubewasm_leader"]);
    for legit in [
        "`sdk/kubewasm_fake.py`",
        "`kubewasm_fake.install(WIT_DIR)`",
        "use kubewasm_sdk::prelude::*;",
        "(`committed_rbac_is_what_kubewasm_rbac_generates`)",
        "`sdk/fake/kubewasm_fake.h`",
    ] {
        assert!(metric_names(legit).is_empty(), "{legit}");
    }
}

#[test]
fn metrics_take_a_counters_or_a_histograms_family_name() {
    let metrics = Metrics::parse(
        "| metric | type |\n|---|---|\n| `kubewasm_actions_total` | counter |\n| `kubewasm_x_seconds_bucket`<br>`kubewasm_x_seconds_sum` | histogram |\n",
    );
    for name in [
        "kubewasm_actions_total",
        "kubewasm_actions",
        "kubewasm_x_seconds",
        "kubewasm_x_seconds_sum",
    ] {
        assert!(metrics.knows(name), "{name}");
    }
    for name in [
        "kubewasm_action_total",
        "kubewasm_x_seconds_total",
        "kubewasm_x_seconds_count",
    ] {
        assert!(!metrics.knows(name), "{name}");
    }
}

const CLI_PAGE: &str = "\
Options of every command:

| argument | meaning |
|---|---|
| `--log-format <LOG_FORMAT>` | format |

## Commands

## kubewasm run

| argument | meaning |
|---|---|
| `--plugins <PLUGINS>` | folder |
| `--metrics-auth[=<METRICS_AUTH>]` | auth |
| `--dry-run` | dry |

## kubewasm status

| argument | meaning |
|---|---|
| `-o, --output <OUTPUT>` | format |

## kubewasm help

## kubewasm help run

| argument | meaning |
|---|---|
| `<NAME>` | x |
";

fn check(cli: &Cli, line: &str) -> Vec<String> {
    commands(line)
        .iter()
        .flat_map(|words| cli.check(words))
        .map(|(name, _)| name)
        .collect()
}

#[test]
fn flags_are_those_of_their_command() {
    let cli = Cli::parse(CLI_PAGE);
    assert_eq!(cli.global.keys().collect::<Vec<_>>(), ["log-format"]);
    assert_eq!(cli.commands["run"].len(), 3);
    assert_eq!(
        cli.commands["status"].keys().collect::<Vec<_>>(),
        ["output"]
    );
    assert!(cli.commands["help"].is_empty());
    for good in [
        "kubewasm run --plugins DIR [--metrics-auth=false] --dry-run",
        "kubewasm --log-format json run --plugins x",
        "KUBEWASM_X=1 target/debug/kubewasm status --output json | jq --raw-output .x",
        "kubewasm run --plugins DIR [--dry-run | --log-format text]",
        "kubewasm help run",
        "kubewasm COMMAND --help",
        "cargo test -p kubewasm --lib reference",
        "kubectl -n kubewasm get pods --watch",
    ] {
        assert!(
            check(&cli, good).is_empty(),
            "{good}: {:?}",
            check(&cli, good)
        );
    }
    assert_eq!(check(&cli, "kubewasm run --plugin DIR"), ["--plugin"]);
    assert_eq!(check(&cli, "kubewasm status --plugins DIR"), ["--plugins"]);
    assert_eq!(check(&cli, "make && kubewasm --dry-run run"), ["--dry-run"]);
    assert_eq!(
        check(&cli, "kubewasm serve --plugins x"),
        ["kubewasm serve"]
    );
    assert_eq!(
        check(&cli, "x; kubewasm run --nope # --comment"),
        ["--nope"]
    );
    assert_eq!(check(&cli, "kubewasm __compile"), ["kubewasm __compile"]);
    let hidden = hidden_commands(
        "    #[command(name = \"__compile\", hide = true)]\n    #[command(name = \"shown\")]\n",
    );
    assert_eq!(hidden.iter().collect::<Vec<_>>(), ["__compile"]);
    let cli = Cli { hidden, ..cli };
    assert!(check(&cli, "kubewasm __compile").is_empty());
}

#[test]
fn shell_lines_join_continuations_and_skip_console_output() {
    let page = markdown::read(
        "```console\n$ kubewasm run \\\n  --plugins x\nkubewasm run --output-line\n```\n```sh\n# kubewasm status --x\nkubewasm run\n```\n```yaml\nkubewasm: run --x\n```\n",
    );
    let lines: Vec<(usize, String)> = page.blocks.iter().flat_map(shell_lines).collect();
    assert_eq!(
        lines,
        [
            (2, "kubewasm run --plugins x".to_owned()),
            (7, "kubewasm status --x".to_owned()),
            (8, "kubewasm run".to_owned()),
        ]
    );
}

fn schema() -> Value {
    serde_json::json!({
        "additionalProperties": false,
        "definitions": {
            "Limits": {"type": "object", "additionalProperties": false, "properties": {"memory": {"type": "string"}}},
        },
        "properties": {
            "kind": {"const": "HostConfig"},
            "limits": {"anyOf": [{"$ref": "#/definitions/Limits"}, {"type": "null"}]},
            "sensitiveFields": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
            "config": {"type": "object"},
            "access": {"type": "array", "items": {"type": "object", "properties": {"kinds": {"type": "array"}}}},
            "status": {"properties": {"replicas": {"type": "array", "items": {"properties": {"reason": {"type": "string"}}}}}},
        },
    })
}

#[test]
fn unknown_keys_are_found_through_refs_maps_and_arrays() {
    let schema = schema();
    let doc: Value = serde_yaml_ng::from_str(
        "kind: HostConfig\nlimits: {memory: 1Gi, memroy: 2Gi}\nsensitiveFields: {ConfigMap: [/data]}\nconfig: {anything: {goes: 1}}\naccess: [{kinds: [x], verbs: [read]}]\nleaderElection: true\n",
    )
    .unwrap();
    let mut unknown = unknown_keys(&doc, &schema, &schema, "");
    unknown.sort();
    assert_eq!(unknown, ["access.verbs", "leaderElection", "limits.memroy"]);
}

#[test]
fn field_paths_are_walked_through_arrays() {
    let schema = schema();
    assert_eq!(
        field_paths(
            "in `status.replicas`, status.replicas[].reason; host/src/objects/status.rs; status.md; spec.x."
        ),
        ["spec.x", "status.replicas", "status.replicas[].reason"]
    );
    assert!(has_path(&schema, &schema, "status.replicas"));
    assert!(has_path(&schema, &schema, "status.replicas[].reason"));
    assert!(has_path(&schema, &schema, "limits.memory"));
    assert!(!has_path(&schema, &schema, "status.digest"));
    assert!(!has_path(&schema, &schema, "limits.memory.x"));
}

const REASONS_PAGE: &str = "\
| reason | conditions | meaning |
|---|---|---|
| `Serving` | `Ready=True`, `Reconciling=False` | ok |
| `PullFailed` | `Ready=False`, `Reconciling=True` | pull |
| `PreviousVersion` | `Serving=True` | earlier |
";

#[test]
fn reasons_are_read_from_tables_and_condition_notation() {
    let reasons = Reasons::parse(REASONS_PAGE);
    assert_eq!(reasons.reasons.len(), 3);
    assert_eq!(
        reasons.conditions.iter().collect::<Vec<_>>(),
        ["Ready", "Reconciling", "Serving"]
    );
    assert_eq!(reasons.not_ready(), BTreeSet::from(["PullFailed"]));
    let page = markdown::read(
        "| condition | reasons |\n|---|---|\n| `Ready` | `Serving`; False: `PullFaild`, as `Ready`'s refusals, `a-b` |\n\nSo `Serving=True/PreviousVersionServing` and `Ready=False` (`Stalled`).\n",
    );
    let found: Vec<String> = reason_names(&page, &reasons.conditions)
        .into_iter()
        .map(|(_, n)| n)
        .filter(|n| !reasons.reasons.contains_key(n) && !reasons.conditions.contains(n))
        .collect();
    assert_eq!(found, ["PullFaild", "PreviousVersionServing"]);
}
