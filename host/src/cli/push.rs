//! `kubewasm push`: a module published (and signed) to an OCI registry.

use std::io::Write;
use std::path::PathBuf;

use kubewasm::oci;

use super::registry::RegistryArgs;

#[derive(clap::Args, Debug)]
pub(crate) struct PushArgs {
    /// The module to publish (a component or core module).
    file: PathBuf,
    /// Where: registry/repository:tag.
    reference: String,
    /// Also sign the pushed manifest digest with this private key and push
    /// the signature where cosign keeps it (`sha256-<hex>.sig`), so that
    /// `cosign verify --key` and a verifying pull accept it. An unencrypted
    /// PKCS#8 (or SEC1) P-256 key PEM, e.g. from `openssl ecparam -genkey
    /// -name prime256v1 -noout | openssl pkcs8 -topk8 -nocrypt` (its public
    /// half, what verifiers need: `openssl ec -in KEY.pem -pubout`); cosign's
    /// encrypted cosign.key is not read. Where the signature went is
    /// printed on stderr; stdout stays the pinned reference alone.
    #[arg(long, value_name = "KEY.pem")]
    sign_key: Option<PathBuf>,
    #[command(flatten)]
    registry: RegistryArgs,
}

pub(crate) async fn push(args: PushArgs) -> anyhow::Result<()> {
    // The key is read before anything is pushed: a bad key pushes nothing.
    let key = args
        .sign_key
        .as_deref()
        .map(oci::SigningKey::load)
        .transpose()?;
    let (client, credentials) = args
        .registry
        .client(&args.reference, oci::PullOptions::default())?;
    let pushed = client
        .push_file(&args.file, &args.reference, &credentials)
        .await?;
    writeln!(std::io::stdout().lock(), "{}", pushed.pinned)?;
    if let Some(key) = key {
        let signature = client
            .push_signature(&args.reference, &pushed.digest, &key, &credentials)
            .await?;
        // stdout stays the one pinned reference, for `REF=$(kubewasm push
        // ...)`; where the signature went is for the reader.
        writeln!(std::io::stderr().lock(), "signature: {signature}")?;
    }
    Ok(())
}
