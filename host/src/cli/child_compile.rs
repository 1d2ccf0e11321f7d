//! `kubewasm __compile`: the hidden compiler child the host spawns, so
//! the memory a compile takes goes back when it exits.

use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub(crate) struct ChildCompileArgs {
    #[arg(long)]
    out: PathBuf,
    #[arg(long)]
    compat: String,
    #[arg(long)]
    digest: String,
    #[arg(long, action = clap::ArgAction::Set)]
    epoch_deadlines: bool,
    #[arg(long, default_value = "optimized")]
    tier: kubewasm::runtime::Tier,
    /// A tier-up's compile: the lowest CPU priority.
    #[arg(long)]
    background: bool,
    #[arg(long)]
    parent_pid: Option<u32>,
}

/// The compiler child: no async runtime, the answer on stdout.
pub(crate) fn child_compile(args: ChildCompileArgs) -> std::process::ExitCode {
    let request = kubewasm::runtime::compiler::ChildRequest {
        out: args.out,
        compat: args.compat,
        digest: args.digest,
        epoch_deadlines: args.epoch_deadlines,
        tier: args.tier,
        priority: if args.background {
            kubewasm::runtime::Priority::Background
        } else {
            kubewasm::runtime::Priority::Load
        },
        parent: args.parent_pid,
    };
    if kubewasm::runtime::compiler::serve_child(
        &request,
        std::io::stdin().lock(),
        std::io::stdout().lock(),
    ) {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(2)
    }
}
