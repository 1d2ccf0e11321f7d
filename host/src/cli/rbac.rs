//! `kubewasm rbac`: the least-privilege RBAC the plugins need, as YAML.

use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub(crate) struct RbacArgs {
    /// Folder of plugins (NAME.wasm plus optional NAME.yaml), loaded as `run` loads them.
    #[arg(long, env = "KUBEWASM_PLUGINS")]
    plugins: Option<PathBuf>,
    /// Plugin and NamespacedPlugin manifests (a YAML file of one or more documents, or a folder of them),
    /// as you would `kubectl apply` them: their access lists as the host grants them; repeatable.
    #[arg(long = "objects", value_name = "PATH")]
    objects: Vec<PathBuf>,
    /// Also the Plugin and NamespacedPlugin objects of the cluster (--kubeconfig, --context).
    #[arg(long)]
    from_cluster: bool,
    /// Kubeconfig of the cluster --from-cluster lists (unset: KUBECONFIG, the pod's service account, ~/.kube/config).
    #[arg(long, requires = "from_cluster")]
    kubeconfig: Option<PathBuf>,
    /// Context of the kubeconfig to use (default: its current context).
    #[arg(long, requires = "from_cluster")]
    context: Option<String>,
    /// The host's config file: NamespacedPlugins outside its `pluginObjects.tenantNamespaces`
    /// are never run, so they get no rules (without it, every NamespacedPlugin counts).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Namespace the host runs in (its ServiceAccount and Lease).
    #[arg(long, default_value = "kubewasm")]
    namespace: String,
    /// Name of the roles and bindings.
    #[arg(long, default_value = "kubewasm")]
    name: String,
    /// The host's ServiceAccount, in --namespace [default: --name].
    #[arg(long)]
    service_account: Option<String>,
    /// Only the plugins' roles, no leader-election Role (for more plugins bound to an existing ServiceAccount).
    #[arg(long)]
    plugins_only: bool,
    /// No plugins: only the host's own roles (its Lease, --metrics-auth, Plugin objects), for a host
    /// whose plugins come as Plugin objects, each given its RBAC with --objects FILE --plugins-only.
    #[arg(long, conflicts_with_all = ["plugins", "objects", "from_cluster", "plugins_only"])]
    host_only: bool,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "kubewasm")]
    lease_name: String,
    /// The host runs with `--shards N`: grant its shard Leases and member
    /// Leases too [default: the config file's `shards`].
    #[arg(long, value_name = "N")]
    shards: Option<u32>,
    /// Leave out the ClusterRole of --metrics-auth (create TokenReviews and
    /// SubjectAccessReviews), for a host run with metrics authentication off.
    #[arg(long)]
    no_metrics_auth: bool,
    /// CustomResourceDefinition manifest (file or folder) for kinds not built in; repeatable.
    #[arg(long = "crd")]
    crds: Vec<PathBuf>,
    /// Cache of compiled plugins (default: $XDG_CACHE_HOME/kubewasm/components).
    #[arg(long, env = "KUBEWASM_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
}

pub(crate) async fn rbac(args: RbacArgs) -> anyhow::Result<()> {
    let mut opts = kubewasm::rbac::RbacOptions {
        plugins: args.plugins,
        objects: args.objects,
        from_cluster: args
            .from_cluster
            .then(|| kubewasm::source::kube::KubeTarget::new(args.kubeconfig, args.context)),
        ..kubewasm::rbac::RbacOptions::default()
    };
    opts.namespace = args.namespace;
    opts.service_account = args.service_account.unwrap_or_else(|| args.name.clone());
    opts.name = args.name;
    opts.host_role = !args.plugins_only;
    opts.host_only = args.host_only;
    opts.lease_name = args.lease_name;
    opts.shards = args.shards;
    opts.metrics_auth = !args.no_metrics_auth;
    opts.crds = args.crds;
    if let Some(file) = &args.config {
        let settings = kubewasm::config::RunSettings::from_file(file)?;
        opts.shards = opts.shards.or(settings.shards);
        if let Some(tenants) = settings
            .plugin_objects
            .as_ref()
            .and_then(|o| o.tenants.as_ref())
        {
            opts.tenant_accounts = tenants.accounts();
        }
        opts.tenant_namespaces = Some(
            settings
                .plugin_objects
                .and_then(|o| o.tenant_namespaces)
                .unwrap_or_default(),
        );
    }
    if args.cache_dir.is_some() {
        opts.cache_dir = args.cache_dir;
    }
    let derived = kubewasm::rbac::derive(&opts).await?;
    for note in &derived.notes {
        eprintln!("note: {note}");
    }
    let yaml = kubewasm::rbac::render::render(&opts, &derived);
    std::io::stdout().lock().write_all(yaml.as_bytes())?;
    Ok(())
}
