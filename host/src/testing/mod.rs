//! `kubewasm test`: runs a plugin against fixture files, without a cluster
//! or a network, through the host's own runtime (engine and compile cache,
//! sidecar, access checks, limits, deadlines), registration resolution and
//! action executor, with a simulated cluster behind the caches and the
//! actions and a virtual clock that only retries, requeues and `advance`
//! move. Each case gets a fresh instance; each step's calls are compared
//! with its `expect` (see [`fixture`] for the format).
//!
//! Applied actions change the simulated cluster, so later steps (and the
//! plugin's cache reads) see them; the watch deltas a real cluster would
//! send back for them are not delivered by themselves: a step delivers
//! them when the fixture says so.

pub mod cluster;
pub mod diff;
pub mod fixture;
pub mod junit;
pub mod mirror;
pub mod outcome;
pub mod plugin;
pub mod record;
pub mod runner;
pub mod update;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fixture::Fixture;
use runner::{CaseReport, Status};

/// What `kubewasm test` runs.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub plugin: PathBuf,
    /// The plugin's name (what `register` is told; its field manager);
    /// default: the file name without `.wasm`, as the host names it.
    pub name: Option<String>,
    /// The sidecar of cases that name none; default: the plugin's own.
    pub sidecar: Option<PathBuf>,
    pub fixtures: Vec<PathBuf>,
    /// Write the observed calls of failing steps into their fixtures.
    pub update: bool,
    pub junit: Option<PathBuf>,
    /// The seed of every case (default: the case's, else a random one).
    pub seed: Option<u64>,
    /// Run only cases whose name contains this.
    pub filter: Option<String>,
    /// The compile cache (default: the host's).
    pub cache_dir: Option<PathBuf>,
    /// Another cluster every case is mirrored into (the conformance suite).
    pub mirror: Option<mirror::MirrorHandle>,
}

/// Why the run could not happen (the command exits 2).
#[derive(Debug, thiserror::Error)]
pub enum TestError {
    #[error(transparent)]
    Plugin(#[from] plugin::PluginError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write the JUnit report: {0}")]
    Junit(#[from] quick_junit::SerializeError),
    #[error("{path}: cannot write the observed outcome: {message}")]
    Update { path: PathBuf, message: String },
    #[error("no fixture given: pass one or more fixture files after the plugin")]
    NoFixture,
}

/// One fixture file's results.
#[derive(Debug)]
pub struct FileReport {
    pub path: PathBuf,
    /// The file cannot be read or parsed.
    pub error: Option<String>,
    pub cases: Vec<CaseReport>,
}

/// The whole run.
#[derive(Debug, Default)]
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
    /// Cases (or files) that cannot be run as written.
    pub errors: usize,
    /// Cases whose failing steps `--update` rewrote.
    pub updated: usize,
    /// Cases `--filter` left out.
    pub filtered: usize,
    pub seed: u64,
    pub time: Duration,
}

impl Summary {
    /// 0 all passed, 1 a case failed, 2 bad input.
    pub fn exit_code(&self) -> u8 {
        if self.errors > 0 {
            2
        } else if self.failed > 0 {
            1
        } else {
            0
        }
    }
}

/// Runs the fixtures, writing a line per case (and what differs) to `out`.
pub fn run(opts: &Options, out: &mut dyn Write) -> Result<Summary, TestError> {
    if opts.fixtures.is_empty() {
        return Err(TestError::NoFixture);
    }
    let started = Instant::now();
    let seed = opts.seed.unwrap_or_else(|| fastrand::u64(..));
    let harness = crate::runtime::harness::Harness::new(std::time::UNIX_EPOCH, seed);
    let mut plugin = plugin::PluginUnderTest::open(
        &opts.plugin,
        opts.name.clone(),
        opts.sidecar.clone(),
        opts.cache_dir.clone(),
        harness,
        // Nothing serves `/metrics` here: the run counts into its own.
        crate::telemetry::Telemetry::new(crate::telemetry::Identity::from_env()),
    )?;
    // The plugin file and its default sidecar must load at all.
    let prepared = plugin
        .prepared(None)
        .map_err(|source| plugin::PluginError::Load {
            path: opts.plugin.clone(),
            source,
        })?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(TestError::Runtime)?;
    let io = |e: std::io::Error| TestError::Write {
        path: "stdout".into(),
        source: e,
    };
    writeln!(
        out,
        "kubewasm test {} (plugin {:?}, version {}, {} in {:.1} ms); seed {seed}",
        opts.plugin.display(),
        plugin.name,
        prepared.version,
        match prepared.compile_source {
            crate::runtime::CompileSource::Cached => "compile cached",
            crate::runtime::CompileSource::Compiled => "compiled",
        },
        prepared.compile_time.as_secs_f64() * 1000.0
    )
    .map_err(io)?;
    drop(prepared);

    let mut summary = Summary {
        seed,
        ..Summary::default()
    };
    let mut files = Vec::new();
    for path in &opts.fixtures {
        let report = run_file(&mut plugin, &rt, path, opts, seed, &mut summary, out)?;
        files.push(report);
    }
    if let Some(junit) = &opts.junit {
        let xml = junit::render(&files)?;
        write_file(junit, &xml)?;
    }
    summary.time = started.elapsed();
    let verdict = if summary.exit_code() == 0 {
        "ok"
    } else {
        "FAILED"
    };
    let rerun = if opts.seed.is_none() && summary.exit_code() == 1 {
        format!(" (rerun with --seed {seed})")
    } else {
        String::new()
    };
    writeln!(
        out,
        "test result: {verdict}. {} passed; {} failed; {} errors{}{}; {:.1} ms; seed {seed}{rerun}",
        summary.passed,
        summary.failed,
        summary.errors,
        if summary.updated > 0 {
            format!("; {} updated", summary.updated)
        } else {
            String::new()
        },
        if summary.filtered > 0 {
            format!("; {} filtered out", summary.filtered)
        } else {
            String::new()
        },
        summary.time.as_secs_f64() * 1000.0
    )
    .map_err(io)?;
    Ok(summary)
}

fn run_file(
    plugin: &mut plugin::PluginUnderTest,
    rt: &tokio::runtime::Runtime,
    path: &Path,
    opts: &Options,
    seed: u64,
    summary: &mut Summary,
    out: &mut dyn Write,
) -> Result<FileReport, TestError> {
    let io = |e: std::io::Error| TestError::Write {
        path: "stdout".into(),
        source: e,
    };
    let fixture = match Fixture::load(path) {
        Ok(f) => f,
        Err(e) => {
            summary.errors += 1;
            writeln!(out, "ERROR {e}").map_err(io)?;
            return Ok(FileReport {
                path: path.to_owned(),
                error: Some(e.to_string()),
                cases: Vec::new(),
            });
        }
    };
    let mut cases = Vec::new();
    let mut updates = Vec::new();
    for (i, case) in fixture.cases.iter().enumerate() {
        if opts
            .filter
            .as_deref()
            .is_some_and(|f| !case.name.contains(f))
        {
            summary.filtered += 1;
            continue;
        }
        let case_seed = opts.seed.or(case.seed).unwrap_or(seed);
        let mut report = runner::run_case(
            plugin,
            rt,
            path,
            &fixture,
            i,
            case_seed,
            opts.mirror.as_ref(),
        );
        let only_stale =
            matches!(&report.status, Status::Failed(f) if f.len() == report.stale.len());
        if opts.update && only_stale && !report.stale.is_empty() {
            for &j in &report.stale {
                if let Some(Some(calls)) = report.observed.get(j) {
                    updates.push(update::StepUpdate {
                        case: i,
                        step: j,
                        calls: calls.clone(),
                    });
                }
            }
            writeln!(
                out,
                "UPDATED {} :: {}  ({} step(s) recorded, {} calls, {:.1} ms)",
                path.display(),
                report.name,
                report.stale.len(),
                report.calls,
                ms(report.time)
            )
            .map_err(io)?;
            summary.updated += 1;
            report.status = Status::Passed;
            cases.push(report);
            continue;
        }
        match &report.status {
            Status::Passed => {
                summary.passed += 1;
                writeln!(
                    out,
                    "PASS  {} :: {}  ({} calls, {:.1} ms)",
                    path.display(),
                    report.name,
                    report.calls,
                    ms(report.time)
                )
                .map_err(io)?;
            }
            Status::Failed(failures) => {
                summary.failed += 1;
                writeln!(
                    out,
                    "FAIL  {} :: {}  ({} calls, {:.1} ms, seed {})",
                    path.display(),
                    report.name,
                    report.calls,
                    ms(report.time),
                    report.seed
                )
                .map_err(io)?;
                for f in failures {
                    for line in f.lines() {
                        writeln!(out, "    {line}").map_err(io)?;
                    }
                }
            }
            Status::Error(e) => {
                summary.errors += 1;
                writeln!(out, "ERROR {e}").map_err(io)?;
            }
        }
        cases.push(report);
    }
    if !updates.is_empty() {
        let text = std::fs::read_to_string(path).map_err(|e| TestError::Write {
            path: path.to_owned(),
            source: e,
        })?;
        let rewritten = update::rewrite(&text, &updates).map_err(|message| TestError::Update {
            path: path.to_owned(),
            message,
        })?;
        let text = match rewritten {
            update::Rewritten::InPlace(t) => t,
            update::Rewritten::Whole(t) => {
                writeln!(
                    out,
                    "note: {} uses flow style for its cases or steps; it was written again whole and its comments are lost",
                    path.display()
                )
                .map_err(io)?;
                t
            }
        };
        write_file(path, &text)?;
    }
    Ok(FileReport {
        path: path.to_owned(),
        error: None,
        cases,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Writes `text` to `path` through a temporary file, so a reader never
/// sees half of it.
fn write_file(path: &Path, text: &str) -> Result<(), TestError> {
    let err = |source| TestError::Write {
        path: path.to_owned(),
        source,
    };
    let tmp = path.with_extension("kubewasm-tmp");
    std::fs::write(&tmp, text).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}
