use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::admin::server::MetricsAddr;
use crate::app::ClusterTarget;
use crate::runtime::Compiler;
use crate::runtime::limits::Ceiling;
use crate::source::kube::InitialList;

use super::*;

#[test]
fn file_settings_merge_under_flags_and_resolve_paths() {
    let file = RunSettings::parse(
        "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: plugins\nkubeconfig: /k/config\ncontext: dev\ninitialList: paged\ndispatch: {maxAttempts: 3, baseBackoff: 250ms}\nmetricsAddr: 127.0.0.1:0\nmetricsCertDir: tls\n",
        Path::new("/etc/kubewasm/config.yaml"),
    )
    .unwrap();
    assert_eq!(
        file.plugins.as_deref(),
        Some(Path::new("/etc/kubewasm/plugins"))
    );
    assert_eq!(
        file.metrics_cert_dir.as_deref(),
        Some(Path::new("/etc/kubewasm/tls"))
    );
    let flags = RunSettings {
        context: Some("prod".into()),
        dry_run: Some(true),
        ..RunSettings::default()
    };
    let opts = flags.over(file).into_options(false).unwrap();
    assert!(opts.dry_run);
    assert_eq!(opts.metrics_addr, MetricsAddr::Listen("127.0.0.1:0".into()));
    assert_eq!(opts.dispatch.max_attempts, Some(3));
    assert_eq!(opts.dispatch.base_backoff, Duration::from_millis(250));
    assert_eq!(
        opts.dispatch.default_resync,
        Some(crate::runtime::DEFAULT_RESYNC),
        "unset: the documented default"
    );
    match opts.cluster {
        ClusterTarget::Kube(t) => {
            assert_eq!(t.context.as_deref(), Some("prod"));
            assert_eq!(t.kubeconfig.as_deref(), Some(Path::new("/k/config")));
            assert_eq!(t.initial_list, InitialList::Paged);
        }
        other => panic!("expected a kube target, got {other:?}"),
    }
}

/// `pluginObjects.signatures`: rules as written, key paths resolved
/// against the config file's folder like every other path.
#[test]
fn signature_rules_resolve_their_key_paths() {
    let file = RunSettings::parse(
        "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\npluginObjects:\n  signatures:\n  - {prefix: reg.example/team, keys: [keys/cosign.pub, /abs/other.pub]}\n",
        Path::new("/etc/kubewasm/config.yaml"),
    )
    .unwrap();
    let rules = file.plugin_objects.unwrap().signatures.unwrap();
    assert_eq!(rules[0].prefix, "reg.example/team");
    assert_eq!(
        rules[0].keys,
        [
            PathBuf::from("/etc/kubewasm/keys/cosign.pub"),
            PathBuf::from("/abs/other.pub")
        ]
    );
}

/// The compile cache's cap and the compiler: defaults, file keys and
/// the refusal of a zero cap.
#[test]
fn compile_cache_cap_and_compiler_from_the_host_config() {
    let parse = |extra: &str| {
        RunSettings::parse(
            &format!("apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: /p\nlocal: /c\n{extra}"),
            Path::new("/etc/kubewasm/config.yaml"),
        )
        .unwrap()
        .into_options(false)
    };
    let defaults = parse("").unwrap();
    assert_eq!(
        defaults.engine.cache_max_bytes,
        crate::runtime::cache::DEFAULT_MAX_BYTES
    );
    assert!(matches!(defaults.engine.compiler, Compiler::Child { .. }));
    assert_eq!(defaults.engine.artifact_key, None);
    assert_eq!(
        defaults.engine.fast_first,
        crate::runtime::FastFirst::Auto {
            min_bytes: crate::runtime::tier::FAST_FIRST_MIN_BYTES
        }
    );
    let set = parse(
        "compileCacheMax: 256Mi\ncompiler: inProcess\nartifactKey: keys/artifact\nfastFirstCompile: off\n",
    )
    .unwrap();
    assert_eq!(set.engine.fast_first, crate::runtime::FastFirst::Off);
    assert_eq!(set.engine.cache_max_bytes, 256 << 20);
    assert_eq!(set.engine.compiler, Compiler::InProcess);
    assert_eq!(
        set.engine.artifact_key.as_deref(),
        Some(Path::new("/etc/kubewasm/keys/artifact"))
    );
    let err = parse("compileCacheMax: 0\n").unwrap_err().to_string();
    assert!(err.contains("compileCacheMax"), "{err}");
    let err = RunSettings::parse(
        "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\ncompileCacheMax: lots\n",
        Path::new("c.yaml"),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("1Gi"), "{err}");
}

/// `dispatch.defaultResync` sets the period of 0.2 subscriptions that
/// set none; `0s` turns those resyncs off.
#[test]
fn default_resync_from_the_host_config() {
    let resync = |text: &str| {
        RunSettings::parse(
            &format!("apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: p\nkubeconfig: k\n{text}"),
            Path::new("/c.yaml"),
        )
        .unwrap()
        .into_options(false)
        .unwrap()
        .dispatch
        .default_resync
    };
    assert_eq!(
        resync("dispatch: {defaultResync: 90m}\n"),
        Some(Duration::from_secs(5400))
    );
    assert_eq!(resync("dispatch: {defaultResync: 0s}\n"), None);
    use crate::runtime::Resync;
    assert_eq!(
        Resync::HostDefault.period(Some(Duration::from_secs(7))),
        Some(Duration::from_secs(7))
    );
    assert_eq!(Resync::HostDefault.period(None), None);
    assert_eq!(Resync::Off.period(Some(Duration::from_secs(7))), None);
    assert_eq!(
        Resync::Every(Duration::from_secs(3)).period(None),
        Some(Duration::from_secs(3))
    );
}

fn pod() -> Environment {
    Environment {
        kubeconfig_env: false,
        in_cluster: true,
        identity: "kubewasm-0".into(),
        namespace: Some("kubewasm-system".into()),
        own_names: vec!["kubewasm-0".into(), "10.0.0.7".into()],
    }
}

#[test]
fn the_limits_ceiling_comes_from_the_file_and_must_admit_the_defaults() {
    let parse = |limits: &str| {
        RunSettings::parse(
            &format!(
                "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: p\nlocal: c\nlimits: {limits}\n"
            ),
            Path::new("/x/config.yaml"),
        )
    };
    let opts = parse("{memory: 512Mi, actionsPerCall: 2000}")
        .unwrap()
        .into_options(false)
        .unwrap();
    assert_eq!(opts.limits.memory, 512 << 20);
    assert_eq!(opts.limits.actions_per_call, 2000);
    assert_eq!(opts.limits.timeout, Ceiling::default().timeout);
    let err = parse("{memory: 16Mi}")
        .unwrap()
        .into_options(false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("limits.memory"), "{err}");
    assert!(parse("{memry: 1Gi}").is_err(), "unknown keys are errors");
}

/// The grants ceiling is the file's top-level `grants`, relative
/// folders are the file's, nothing is granted by default, and the
/// host's own files are never granted whatever it lists.
#[test]
fn the_grants_ceiling_comes_from_the_file_and_protects_the_hosts_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    for d in ["plugins", "cluster", "certs"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    let config = root.join("config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: plugins\nlocal: cluster\nlimits: {totalMemory: 2Gi, instances: 20}\ngrants:\n  dirs: [certs, /]\n  env: [HTTP_PROXY]\n  network: ['*.example.com:443']\n  stdio: true\n",
    )
    .unwrap();
    let opts = RunSettings::from_file(&config)
        .unwrap()
        .into_options(false)
        .unwrap();
    let g = &opts.limits.grants;
    assert_eq!(g.dirs, [root.join("certs"), PathBuf::from("/")]);
    assert_eq!(g.env, ["HTTP_PROXY"]);
    assert!(g.stdio);
    assert_eq!(g.network.allow.len(), 1);
    assert_eq!(opts.limits.total_memory, 2 << 30);
    assert_eq!(opts.limits.instances, 20);
    for own in [config.clone(), root.join("plugins"), root.join("cluster")] {
        assert!(
            g.protected.contains(&own),
            "{}: {:?}",
            own.display(),
            g.protected
        );
    }
    // `/` is in the ceiling, yet the config file's folder (above the
    // host's files) and the plugin folder are refused.
    use crate::runtime::manifest::{DirGrant, Grants};
    for host in [root.clone(), root.join("plugins")] {
        let asked = Grants {
            dirs: vec![DirGrant {
                host: host.clone(),
                guest: "/g".into(),
            }],
            ..Grants::default()
        };
        let e = g.check(&asked).unwrap_err();
        assert!(e.contains("never granted"), "{}: {e}", host.display());
    }
    // Unset: nothing, and unknown keys are errors.
    let none = RunSettings::parse(
        "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: p\nlocal: c\n",
        Path::new("/x/c.yaml"),
    )
    .unwrap()
    .into_options(false)
    .unwrap();
    assert!(none.limits.grants.dirs.is_empty() && !none.limits.grants.stdio);
    assert!(none.limits.grants.network.allow.is_empty());
    let e = RunSettings::parse(
        "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\ngrants: {folders: [/x]}\n",
        Path::new("c.yaml"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("unknown field `folders`"), "{e}");
}

#[test]
fn election_is_on_in_a_pod_and_off_elsewhere() {
    let base = RunSettings {
        plugins: Some("p".into()),
        ..RunSettings::default()
    };
    let e = base
        .clone()
        .into_options_in(true, &pod())
        .unwrap()
        .election
        .expect("on by default in a pod");
    assert_eq!(e.identity, "kubewasm-0");
    assert_eq!(e.namespace, "kubewasm-system");
    assert_eq!(e.lease_name, "kubewasm");
    assert_eq!(e.lease_duration, Duration::from_secs(15));
    assert_eq!(e.renew_deadline, Duration::from_secs(10));
    assert_eq!(e.retry_period, Duration::from_secs(2));
    // A kubeconfig (flag or KUBECONFIG) means a run from outside.
    let outside = RunSettings {
        kubeconfig: Some("k".into()),
        ..base.clone()
    };
    assert_eq!(
        outside
            .clone()
            .into_options_in(true, &pod())
            .unwrap()
            .election,
        None
    );
    let env_kubeconfig = Environment {
        kubeconfig_env: true,
        ..pod()
    };
    assert_eq!(
        base.clone()
            .into_options_in(true, &env_kubeconfig)
            .unwrap()
            .election,
        None
    );
    // Explicitly on from outside, with the namespace fallback.
    let on = RunSettings {
        leader_elect: Some(true),
        ..outside
    };
    let e = on
        .into_options_in(true, &Environment::default())
        .unwrap()
        .election
        .unwrap();
    assert_eq!(e.namespace, "default");
    // Explicitly off in a pod: runs as without election.
    let off = RunSettings {
        leader_elect: Some(false),
        ..base.clone()
    };
    assert_eq!(off.into_options_in(true, &pod()).unwrap().election, None);
    // The local cluster: off by default, an error when asked for.
    let local = RunSettings {
        local: Some("l".into()),
        ..base.clone()
    };
    assert_eq!(
        local
            .clone()
            .into_options_in(false, &pod())
            .unwrap()
            .election,
        None
    );
    let e = RunSettings {
        leader_elect: Some(true),
        ..local
    }
    .into_options_in(false, &pod())
    .unwrap_err()
    .to_string();
    assert!(e.contains("--leader-elect needs a real cluster"), "{e}");
    // Durations are checked, naming the flag.
    let e = RunSettings {
        leader_elect_renew_deadline: Some(Duration::from_secs(15)),
        ..base
    }
    .into_options_in(true, &pod())
    .unwrap_err()
    .to_string();
    assert!(e.contains("--leader-elect-renew-deadline"), "{e}");
}

#[test]
fn election_keys_in_the_file() {
    let file = RunSettings::parse(
        "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: p\nkubeconfig: k\nleaderElect: true\nleaderElectLeaseDuration: 4s\nleaderElectRenewDeadline: 3s\nleaderElectRetryPeriod: 500ms\nleaderElectLeaseName: ha\nleaderElectNamespace: ops\nshutdownGrace: 5s\n",
        Path::new("c.yaml"),
    )
    .unwrap();
    let opts = RunSettings::default()
        .over(file)
        .into_options_in(false, &Environment::default())
        .unwrap();
    assert_eq!(opts.shutdown_grace, Duration::from_secs(5));
    assert_eq!(opts.event_queue, 1024, "the default Event queue");
    let e = opts.election.unwrap();
    assert_eq!((e.lease_name.as_str(), e.namespace.as_str()), ("ha", "ops"));
    assert_eq!(e.retry_period, Duration::from_millis(500));
    let e = RunSettings::parse(
        "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nleaderElection: true\n",
        Path::new("c.yaml"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("unknown field `leaderElection`"), "{e}");
}

#[test]
fn unknown_keys_wrong_version_and_conflicts_are_errors() {
    let p = Path::new("c.yaml");
    let e = RunSettings::parse(
        "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugin: x\n",
        p,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("unknown field `plugin`"), "{e}");
    let e = RunSettings::parse("plugins: x\n", p)
        .unwrap_err()
        .to_string();
    assert!(e.contains("apiVersion: kubewasm.io/v1alpha1"), "{e}");
    let both = RunSettings {
        plugins: Some("p".into()),
        local: Some("l".into()),
        kubeconfig: Some("k".into()),
        ..RunSettings::default()
    };
    assert!(matches!(
        both.into_options(false),
        Err(ConfigError::Conflict(_))
    ));
    let none = RunSettings {
        plugins: Some("p".into()),
        ..RunSettings::default()
    };
    let e = none.clone().into_options(false).unwrap_err().to_string();
    assert!(
        e.contains("--local DIR") && e.contains("--kubeconfig"),
        "{e}"
    );
    assert!(matches!(
        none.clone().into_options(true).unwrap().cluster,
        ClusterTarget::Kube(_)
    ));
    assert!(matches!(
        RunSettings::default().into_options(false),
        Err(ConfigError::NoPlugins)
    ));
    // The listener: on by default, off for runs that end by themselves,
    // and a bad address is an error naming it.
    assert_eq!(
        none.clone().into_options(true).unwrap().metrics_addr,
        MetricsAddr::Listen("0.0.0.0:9090".into())
    );
    let idle = RunSettings {
        until_idle: Some(true),
        ..none.clone()
    };
    assert_eq!(
        idle.into_options(true).unwrap().metrics_addr,
        MetricsAddr::Off
    );
    let e = RunSettings::parse(
        "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nmetricsAddr: nine\n",
        p,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("invalid metrics address \"nine\""), "{e}");
    // The web view: off by default, a file key, on its own loopback
    // listener whatever the metrics listener does.
    let defaults = none.clone().into_options(true).unwrap();
    assert!(!defaults.ui);
    assert_eq!(defaults.admin.ui_addr.as_str(), "127.0.0.1:9091");
    assert!(defaults.admin.ui_allowed_hosts.is_empty());
    let ui = RunSettings::parse(
        "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: p\nlocal: l\nui: true\n",
        p,
    )
    .unwrap();
    assert!(ui.clone().into_options(false).unwrap().ui);
    let off = RunSettings {
        metrics_addr: Some(MetricsAddr::Off),
        ..ui.clone()
    };
    let opts = off.into_options(false).unwrap();
    assert!(opts.ui && opts.metrics_addr == MetricsAddr::Off);
    let idle_ui = RunSettings {
        until_idle: Some(true),
        ..ui
    };
    assert!(idle_ui.into_options(false).unwrap().ui);
}

#[test]
fn the_web_view_address_and_hosts_and_sensitive_fields_from_the_file() {
    let parse = |extra: &str| {
        RunSettings::parse(
            &format!(
                "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: p\nlocal: l\n{extra}"
            ),
            Path::new("/c.yaml"),
        )
    };
    let opts = parse(
        "ui: true\nuiAddr: \":8443\"\nuiAllowedHosts: [kubewasm.internal]\nsensitiveFields: {ConfigMap: [/data/password]}\n",
    )
    .unwrap()
    .into_options(false)
    .unwrap();
    // `:PORT` stays on loopback.
    assert_eq!(opts.admin.ui_addr.as_str(), "127.0.0.1:8443");
    assert_eq!(opts.admin.ui_allowed_hosts, ["kubewasm.internal"]);
    let mut cm = serde_json::json!({"data": {"password": "p", "user": "u"}});
    opts.admin.redactor.redact("v1", "ConfigMap", &mut cm);
    assert_eq!(cm["data"]["password"], crate::redact::MARKER);
    assert_eq!(cm["data"]["user"], "u");
    let e = parse("sensitiveFields: {ConfigMap: [data]}\n")
        .unwrap()
        .into_options(false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("sensitiveFields.ConfigMap") && e.contains("\"data\""),
        "{e}"
    );
    let e = parse("uiAddr: nine\n").unwrap_err().to_string();
    assert!(e.contains("invalid web view address"), "{e}");
}

#[test]
fn metrics_auth_is_on_in_a_pod_off_elsewhere_and_needs_a_real_cluster() {
    let base = RunSettings {
        plugins: Some("p".into()),
        ..RunSettings::default()
    };
    assert!(
        base.clone()
            .into_options_in(true, &pod())
            .unwrap()
            .admin
            .metrics_auth
    );
    let kubeconfig = RunSettings {
        kubeconfig: Some("k".into()),
        ..base.clone()
    };
    assert!(
        !kubeconfig
            .clone()
            .into_options_in(true, &pod())
            .unwrap()
            .admin
            .metrics_auth
    );
    assert!(
        !base
            .clone()
            .into_options_in(true, &Environment::default())
            .unwrap()
            .admin
            .metrics_auth
    );
    let on = RunSettings {
        metrics_auth: Some(true),
        ..kubeconfig
    };
    assert!(
        on.into_options_in(true, &Environment::default())
            .unwrap()
            .admin
            .metrics_auth
    );
    let off = RunSettings {
        metrics_auth: Some(false),
        ..base.clone()
    };
    assert!(
        !off.into_options_in(true, &pod())
            .unwrap()
            .admin
            .metrics_auth
    );
    let local = RunSettings {
        local: Some("l".into()),
        metrics_auth: Some(true),
        ..base
    };
    let e = local
        .into_options_in(false, &pod())
        .unwrap_err()
        .to_string();
    assert!(e.contains("--metrics-auth needs a real cluster"), "{e}");
    let file = RunSettings::parse(
        "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: p\nkubeconfig: k\nmetricsAuth: true\n",
        Path::new("/c.yaml"),
    )
    .unwrap();
    assert!(
        file.into_options_in(false, &Environment::default())
            .unwrap()
            .admin
            .metrics_auth
    );
}

#[test]
fn metrics_tls_follows_authentication_and_a_mounted_certificate() {
    use crate::admin::tls::TlsSource;
    let base = RunSettings {
        plugins: Some("p".into()),
        ..RunSettings::default()
    };
    let tls = |s: &RunSettings, env: &Environment| {
        s.clone()
            .into_options_in(true, env)
            .unwrap()
            .admin
            .metrics_tls
    };
    // In a Pod, auth is on: a token never travels in clear, so TLS with a
    // certificate for the Pod's own names.
    assert_eq!(
        tls(&base, &pod()),
        Some(TlsSource::SelfSigned(vec![
            "kubewasm-0".into(),
            "10.0.0.7".into()
        ]))
    );
    // No auth, no certificate: plain, as before.
    assert_eq!(tls(&base, &Environment::default()), None);
    // A mounted certificate wins, with or without auth.
    let mounted = RunSettings {
        metrics_cert_dir: Some("/certs".into()),
        ..base.clone()
    };
    for env in [pod(), Environment::default()] {
        assert_eq!(tls(&mounted, &env), Some(TlsSource::Dir("/certs".into())));
    }
    let file = RunSettings::parse(
        "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: p\nmetricsCertDir: /etc/kubewasm/tls\n",
        Path::new("/c.yaml"),
    )
    .unwrap();
    assert_eq!(
        tls(&file, &Environment::default()),
        Some(TlsSource::Dir("/etc/kubewasm/tls".into()))
    );
}

#[test]
fn out_of_range_values_are_errors_not_panics() {
    let p = Path::new("c.yaml");
    for (text, key) in [
        ("poll: 0s", "poll"),
        ("pageSize: 0", "pageSize"),
        ("dispatch: {maxAttempts: 0}", "dispatch.maxAttempts"),
        ("dispatch: {unhealthyAfter: 0}", "dispatch.unhealthyAfter"),
        ("dispatch: {baseBackoff: 0s}", "dispatch.baseBackoff"),
        (
            "dispatch: {baseBackoff: 10s, maxBackoff: 1s}",
            "dispatch.maxBackoff",
        ),
    ] {
        let s = RunSettings::parse(
            &format!(
                "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: p\nlocal: l\n{text}\n"
            ),
            p,
        )
        .unwrap();
        let e = s.into_options(false).unwrap_err();
        assert!(
            matches!(&e, ConfigError::OutOfRange(m) if m.contains(key)),
            "{text}: {e}"
        );
    }
}

#[test]
fn the_event_queue_is_read_from_the_file_and_zero_is_refused() {
    let parse = |q: &str| {
        RunSettings::default()
            .over(
                RunSettings::parse(
                    &format!("apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: p\nkubeconfig: k\neventQueue: {q}\n"),
                    Path::new("c.yaml"),
                )
                .unwrap(),
            )
            .into_options_in(false, &Environment::default())
    };
    assert_eq!(parse("50000").unwrap().event_queue, 50_000);
    let e = parse("0").unwrap_err().to_string();
    assert!(e.contains("eventQueue must be at least 1"), "{e}");
}
