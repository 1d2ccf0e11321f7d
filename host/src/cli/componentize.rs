//! `kubewasm componentize`: a core module made a plugin component.

use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub(crate) struct ComponentizeArgs {
    /// The core module the compiler wrote.
    core: PathBuf,
    /// The component to write.
    #[arg(long, short)]
    output: PathBuf,
    /// World to embed when the module carries no component type.
    #[arg(long, default_value = kubewasm::toolchain::componentize::DEFAULT_WORLD)]
    world: String,
    /// WIT folder to take the world from [default: the WIT built into kubewasm, wit/v0.2.0].
    #[arg(long)]
    wit: Option<PathBuf>,
}

pub(crate) fn componentize(args: ComponentizeArgs) -> anyhow::Result<()> {
    let opts = kubewasm::toolchain::Options {
        wit: args.wit,
        world: Some(args.world),
    };
    let done =
        kubewasm::toolchain::componentize::componentize_file(&args.core, &args.output, &opts)?;
    writeln!(
        std::io::stdout().lock(),
        "wrote {} ({} bytes): {done}",
        args.output.display(),
        done.component.len()
    )?;
    Ok(())
}
