//! `kubewasm new`: a plugin project scaffolded.

use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub(crate) struct NewArgs {
    /// Language of the plugin.
    #[arg(long, value_enum)]
    lang: kubewasm::scaffold::Lang,
    /// Project name: lowercase letters, digits and dashes.
    name: String,
    /// Folder to create the project in.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Take the WIT from this folder instead of the one built into kubewasm.
    #[arg(long)]
    wit: Option<PathBuf>,
}

pub(crate) fn new_project(args: NewArgs) -> anyhow::Result<()> {
    let root = kubewasm::scaffold::create(args.lang, &args.name, &args.dir, args.wit.as_deref())?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "created {} ({}): see its README for build, test and install",
        root.display(),
        args.lang.as_str()
    )?;
    Ok(())
}
