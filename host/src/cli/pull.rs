//! `kubewasm pull`: a module fetched from an OCI registry, digest (and
//! signature) verified.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use kubewasm::oci;

use super::parse_size;
use super::registry::RegistryArgs;

#[derive(clap::Args, Debug)]
pub(crate) struct PullArgs {
    /// What: registry/repository:tag or registry/repository@sha256:<hex>.
    reference: String,
    /// Where to write the module [default: <repository name>.wasm here].
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Largest module accepted.
    #[arg(long, value_parser = parse_size, default_value = "64Mi")]
    max_module_size: u64,
    /// Write the module only if its cosign signature verifies with this
    /// public key PEM (cosign.pub); repeat to accept any of several keys.
    #[arg(long, value_name = "PUB.pem")]
    verify_key: Vec<PathBuf>,
    #[command(flatten)]
    registry: RegistryArgs,
}

pub(crate) async fn pull(args: PullArgs) -> anyhow::Result<()> {
    let keys = args
        .verify_key
        .iter()
        .map(|p| oci::PublicKey::load(p))
        .collect::<Result<Vec<_>, _>>()?;
    let options = oci::PullOptions {
        max_module_bytes: args.max_module_size,
        cache: None,
        signatures: if keys.is_empty() {
            oci::SignaturePolicy::default()
        } else {
            oci::SignaturePolicy::everything(keys)
        },
        ..oci::PullOptions::default()
    };
    let (client, credentials) = args.registry.client(&args.reference, options)?;
    let pulled = client.pull(&args.reference, &credentials).await?;
    let output = match args.output {
        Some(path) => path,
        None => {
            let parsed: oci::Reference = args.reference.parse()?;
            let name = parsed.repository().rsplit('/').next().unwrap_or("module");
            PathBuf::from(format!("{name}.wasm"))
        }
    };
    std::fs::write(&output, &pulled.bytes)
        .with_context(|| format!("cannot write {}", output.display()))?;
    let verified = pulled
        .verified
        .as_ref()
        .map(|v| format!("  signature verified by {}", v.key))
        .unwrap_or_default();
    writeln!(
        std::io::stdout().lock(),
        "{}  {}  {} bytes{verified}",
        pulled.pinned,
        output.display(),
        pulled.bytes.len()
    )?;
    Ok(())
}
