//! `kubewasm push`: a module published (and signed) to an OCI registry,
//! optionally with its compiled artifact as a second layer.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
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
    /// Also compile the module for the host's engine and push the compiled
    /// artifact beside it, as a layer of media type
    /// application/vnd.kubewasm.plugin.precompiled.v1 signed with
    /// --artifact-key: a host with the same engine key and artifact key
    /// maps it instead of compiling (any other host compiles as without
    /// it). Compile on a machine with the hosts' CPU features, with this
    /// release of kubewasm: both are part of the engine key.
    #[arg(long, requires = "artifact_key")]
    precompiled: bool,
    /// The artifact key (at least 32 bytes) the precompiled layer is signed
    /// with: the one the hosts run with (their --artifact-key).
    #[arg(long, env = "KUBEWASM_ARTIFACT_KEY")]
    artifact_key: Option<PathBuf>,
    /// Compile for a host run with --no-epoch-deadlines (benchmarks only).
    #[arg(long, hide = true)]
    no_epoch_deadlines: bool,
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
    let module = std::fs::read(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    // Compiled before anything is pushed: a module that does not compile
    // pushes nothing.
    let precompiled = if args.precompiled {
        Some(precompiled(&args, &module).await?)
    } else {
        None
    };
    let pushed = client
        .push_with(&module, precompiled.as_ref(), &args.reference, &credentials)
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

/// The module compiled for the host's default engine (its optimized tier)
/// and signed with the artifact key, as a layer to push.
async fn precompiled(args: &PushArgs, module: &[u8]) -> anyhow::Result<oci::PrecompiledLayer> {
    let engine = kubewasm::runtime::EngineOptions {
        epoch_deadlines: !args.no_epoch_deadlines,
        artifact_key: args.artifact_key.clone(),
        ..Default::default()
    };
    let name = args
        .file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let bytes = module.to_vec();
    let artifact = tokio::task::spawn_blocking(move || {
        kubewasm::precompile::compile_artifact(&name, &bytes, engine)
    })
    .await??;
    writeln!(
        std::io::stderr().lock(),
        "precompiled: engine key {}, {:.1} MiB, compiled in {:.2} s",
        artifact.engine_key,
        artifact.bytes.len() as f64 / f64::from(1 << 20),
        artifact.elapsed.as_secs_f64()
    )?;
    Ok(oci::PrecompiledLayer {
        bytes: artifact.bytes,
        engine_key: artifact.engine_key,
        key_id: artifact.key_id,
    })
}
