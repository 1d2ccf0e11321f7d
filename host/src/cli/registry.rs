//! The registry flags `push` and `pull` share, and the client they make.

use std::path::PathBuf;

use anyhow::Context;
use kubewasm::oci;

/// How `push` and `pull` reach and log in to a registry.
#[derive(clap::Args, Debug)]
pub(crate) struct RegistryArgs {
    /// PEM file of a CA to trust besides the system roots (a private registry's).
    #[arg(long, env = "KUBEWASM_REGISTRY_CA")]
    ca: Option<PathBuf>,
    /// Talk plain HTTP to REF's registry (local development only; never the default).
    #[arg(long)]
    insecure_http: bool,
    /// Registry user (with --password).
    #[arg(long, requires = "password", conflicts_with = "docker_config")]
    username: Option<String>,
    /// Registry password (with --username).
    #[arg(
        long,
        requires = "username",
        env = "KUBEWASM_REGISTRY_PASSWORD",
        hide_env_values = true
    )]
    password: Option<String>,
    /// A docker config.json (or a Secret's .dockerconfigjson) to take REF's registry credentials from.
    #[arg(long)]
    docker_config: Option<PathBuf>,
}

impl RegistryArgs {
    pub(crate) fn client(
        &self,
        reference: &str,
        options: oci::PullOptions,
    ) -> anyhow::Result<(oci::OciClient, oci::Credentials)> {
        let registry = reference
            .parse::<oci::Reference>()
            .map(|r| r.resolve_registry().to_owned())
            .with_context(|| format!("{reference:?} is not an OCI reference"))?;
        let mut transport = oci::Transport::default();
        if let Some(ca) = &self.ca {
            let pem =
                std::fs::read(ca).with_context(|| format!("cannot read --ca {}", ca.display()))?;
            transport = transport.with_ca_pem(&pem, &ca.display().to_string())?;
        }
        if self.insecure_http {
            transport = transport.with_plain_http(&registry);
        }
        let credentials = match (&self.username, &self.password, &self.docker_config) {
            (Some(username), Some(password), _) => oci::Credentials::Basic {
                username: username.clone(),
                password: password.clone(),
            },
            (_, _, Some(file)) => {
                let bytes = std::fs::read(file)
                    .with_context(|| format!("cannot read --docker-config {}", file.display()))?;
                oci::credentials_from_docker_config(&bytes, &registry)
                    .with_context(|| format!("--docker-config {}", file.display()))?
            }
            _ => oci::Credentials::Anonymous,
        };
        Ok((oci::OciClient::new(transport, options), credentials))
    }
}
