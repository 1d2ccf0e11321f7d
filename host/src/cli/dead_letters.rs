//! `kubewasm dead-letters`: a running host's dead letters, as a table or JSON.

use std::io::Write;

use anyhow::Context;
use clap::ValueEnum;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OutputFormat {
    Table,
    Json,
}

#[derive(clap::Args, Debug)]
pub(crate) struct DeadLettersArgs {
    #[command(flatten)]
    listener: crate::cli::probe::ListenerArgs,
    /// Output format.
    #[arg(long, short, value_enum, default_value = "table")]
    output: OutputFormat,
    /// Connect and read timeout.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    timeout: std::time::Duration,
}

pub(crate) fn dead_letters(args: DeadLettersArgs) -> anyhow::Result<()> {
    use kubewasm::dispatch::DeadLetterRecord;
    let (code, body) = args.listener.get("/dead-letters", args.timeout)?;
    if code == 401 {
        anyhow::bail!(
            "GET /dead-letters answered {code}: {} (the host runs with --metrics-auth: pass --token-file with a token whose user may get the non-resource URL /dead-letters)",
            body.trim()
        );
    }
    // 403: the host's answer says what to do (the RBAC to bind, or, without
    // --metrics-auth, to ask from loopback).
    if code != 200 {
        anyhow::bail!("GET /dead-letters answered {code}: {}", body.trim());
    }
    let records: Vec<DeadLetterRecord> =
        serde_json::from_str(&body).context("the host's /dead-letters answer is not a list")?;
    let mut out = std::io::stdout().lock();
    match args.output {
        OutputFormat::Json => writeln!(out, "{}", serde_json::to_string_pretty(&records)?)?,
        OutputFormat::Table => {
            writeln!(
                out,
                "{:<20} {:<24} {:<40} {:<8} {:>8}  {:<8} {:<20}  LAST ERROR",
                "PLUGIN", "KIND", "OBJECT", "DELTA", "ATTEMPTS", "STATE", "LAST FAILED"
            )?;
            for r in &records {
                let object = match &r.namespace {
                    Some(ns) => format!("{ns}/{}", r.name),
                    None => r.name.clone(),
                };
                writeln!(
                    out,
                    "{:<20} {:<24} {:<40} {:<8} {:>8}  {:<8} {:<20}  {}",
                    r.plugin,
                    r.kind,
                    object,
                    r.delta,
                    r.attempts,
                    // Parked keys are still retried at the backoff cap.
                    if r.parked { "parked" } else { "dead" },
                    r.last_failed,
                    r.last_error
                )?;
            }
        }
    }
    Ok(())
}
