//! Runs one fixture case: the cluster built from its cache, a fresh
//! registered instance, then each step's deliveries through the real
//! runtime, the actions through the host's executor into the simulated
//! cluster, and the dispatcher's decisions (retry with backoff, requeue,
//! dead) on a virtual clock.
//!
//! The state of a case while it runs is `case_run.rs`'s; the cache it starts
//! from is built in `cache.rs`; `KIND NAMESPACE/NAME` references are read in
//! `reference.rs`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::cluster::SimCluster;
use super::diff::{self, Ignore};
use super::fixture::{Call, Fixture};
use super::mirror::MirrorHandle;
use super::plugin::PluginUnderTest;
use crate::actions::executor::{ActionSink, ExecutorOptions};
use crate::kind::KindRegistry;
use crate::runtime::LoadError;

mod cache;
mod case_run;
mod reference;

use cache::cache_objects;
pub(super) use case_run::CaseRun;
pub use reference::parse_ref;

/// How one case went.
#[derive(Debug)]
pub struct CaseReport {
    pub name: String,
    pub status: Status,
    pub time: Duration,
    /// Handler calls made.
    pub calls: usize,
    pub seed: u64,
    /// Per step, the calls observed (for `--update`); `None` for steps not
    /// run.
    pub observed: Vec<Option<Vec<Call>>>,
    /// Steps whose expectation is missing or not met.
    pub stale: Vec<usize>,
}

#[derive(Debug)]
pub enum Status {
    Passed,
    /// What did not match, one entry per step (or the load).
    Failed(Vec<String>),
    /// The fixture cannot be run as written.
    Error(String),
}

/// A fixture problem found while running: the field, and what to do.
pub(super) struct Bad {
    pub(super) field: String,
    pub(super) message: String,
}

fn bad(field: impl Into<String>, message: impl Into<String>) -> Bad {
    Bad {
        field: field.into(),
        message: message.into(),
    }
}

/// Runs case `index` of `fixture` (read from `file`).
pub fn run_case(
    plugin: &mut PluginUnderTest,
    rt: &tokio::runtime::Runtime,
    file: &Path,
    fixture: &Fixture,
    index: usize,
    seed: u64,
    mirror: Option<&MirrorHandle>,
) -> CaseReport {
    let case = &fixture.cases[index];
    let start = Instant::now();
    let mut report = CaseReport {
        name: case.name.clone(),
        status: Status::Passed,
        time: Duration::ZERO,
        calls: 0,
        seed,
        observed: vec![None; case.steps.len()],
        stale: Vec::new(),
    };
    let input = CaseInput {
        file,
        fixture,
        index,
        seed,
        mirror,
    };
    report.status = match run(plugin, rt, &input, &mut report) {
        Ok(failures) if failures.is_empty() => Status::Passed,
        Ok(failures) => Status::Failed(failures),
        Err(b) => Status::Error(format!(
            "{}: case {} ({:?}): {}: {}",
            file.display(),
            index + 1,
            case.name,
            b.field,
            b.message
        )),
    };
    report.time = start.elapsed();
    report
}

/// One case of a fixture file, as [`run_case`] was asked to run it.
struct CaseInput<'a> {
    file: &'a Path,
    fixture: &'a Fixture,
    index: usize,
    seed: u64,
    mirror: Option<&'a MirrorHandle>,
}

fn run(
    plugin: &mut PluginUnderTest,
    rt: &tokio::runtime::Runtime,
    input: &CaseInput<'_>,
    report: &mut CaseReport,
) -> Result<Vec<String>, Bad> {
    let CaseInput {
        file,
        fixture,
        index,
        seed,
        mirror,
    } = *input;
    let case = &fixture.cases[index];
    let at = |field: &str| format!("cases[{index}].{field}");
    let base = file.parent().unwrap_or(Path::new("."));
    let clock_text = case
        .clock
        .as_deref()
        .or(fixture.clock.as_deref())
        .unwrap_or(super::fixture::DEFAULT_CLOCK);
    let clock = super::fixture::parse_clock(clock_text).map_err(|m| bad(at("clock"), m))?;
    // Everything random from here on (retry jitter, the executor's backoff,
    // WASI random of instances created now) follows the seed.
    fastrand::seed(seed);
    let harness = plugin.harness.clone();
    harness.set_now(clock);
    harness.set_seed(seed);
    harness.take_logs();

    let kinds = KindRegistry::builtin();
    let objects = cache_objects(base, fixture, index)?;
    for (_, o) in &objects {
        if o["kind"] == "CustomResourceDefinition" {
            kinds.learn_crd(o);
        }
    }
    let cluster = SimCluster::new(
        kinds.clone(),
        harness.clone(),
        ExecutorOptions::default().timeout,
    );
    if let Some(m) = mirror {
        m.0.begin_case(file, &case.name);
        cluster.set_mirror(m.0.clone());
    }
    for (field, o) in objects {
        cluster.put(o).map_err(|m| bad(field, m))?;
    }
    cluster.set_case_failures(case.failures.clone());

    let sidecar = case
        .sidecar
        .as_ref()
        .or(fixture.sidecar.as_ref())
        .map(|s| base.join(s));
    if let Some(s) = &sidecar
        && !s.is_file()
    {
        let field = if case.sidecar.is_some() {
            at("sidecar")
        } else {
            "sidecar".to_owned()
        };
        return Err(bad(
            field,
            format!(
                "{} does not exist (give a path relative to the fixture)",
                s.display()
            ),
        ));
    }
    let config = case
        .config
        .as_ref()
        .or(fixture.config.as_ref())
        .map(Value::to_string);
    let started = plugin
        .prepared(sidecar.as_deref())
        .and_then(|p| plugin.start(p, config, kinds));
    let instance = match (started, &case.refused) {
        (Err(e), Some(want)) if e.to_string().contains(want.as_str()) => return Ok(Vec::new()),
        (Err(e), Some(want)) => {
            return Ok(vec![format!(
                "the host refused to load the plugin, but not with {want:?}: {e}"
            )]);
        }
        (Err(e), None) => {
            return Ok(vec![format!(
                "the host refuses to load the plugin: {e}{}",
                hint(&e)
            )]);
        }
        (Ok(_), Some(want)) => {
            return Ok(vec![format!(
                "the plugin loaded, but the case expects the host to refuse it with {want:?}"
            )]);
        }
        (Ok(i), None) => i,
    };
    // What register logged is not a call's.
    harness.take_logs();
    let limits = &instance.prepared.manifest.limits;
    let policy = crate::dispatch::DispatchOptions {
        max_attempts: limits.max_attempts,
        ..Default::default()
    }
    .policy();
    // A dry-run case's cluster answers actions without applying them, as
    // a recording's API server did (`kubewasm record`).
    cluster.set_dry_run(fixture.dry_run || case.dry_run);
    let sink: Arc<dyn ActionSink> = cluster.clone();
    let mut run = CaseRun::new(
        instance,
        cluster,
        sink,
        rt,
        harness,
        plugin.name.clone(),
        policy,
    );
    let volatile: Vec<String> = fixture
        .volatile
        .iter()
        .chain(&case.volatile)
        .cloned()
        .collect();
    let mut failures = Vec::new();
    for (j, step) in case.steps.iter().enumerate() {
        let observed = run
            .step(step)
            .map_err(|b| bad(at(&format!("steps[{j}].{}", b.field)), b.message))?;
        let title = match &step.name {
            Some(n) => format!("step {} ({n})", j + 1),
            None => format!("step {}", j + 1),
        };
        match &step.expect {
            None => {
                failures.push(format!(
                    "{title}: no `expect`; it made {} call(s). Run with --update to record them, then review the diff",
                    observed.len()
                ));
                report.stale.push(j);
            }
            Some(expected) => {
                let ignore = Ignore {
                    volatile: &volatile,
                    logs: case.logs,
                };
                if let Some(d) = diff::compare(expected, &observed, ignore) {
                    failures.push(format!("{title}: {d}"));
                    report.stale.push(j);
                }
            }
        }
        report.observed[j] = Some(recordable(observed, step.expect.as_deref(), case.logs));
    }
    report.calls = run.calls;
    Ok(failures)
}

/// The observed calls as `--update` writes them: the time only where the
/// expectation checks it, logs where the case or the expectation asks.
fn recordable(mut observed: Vec<Call>, expected: Option<&[Call]>, logs: bool) -> Vec<Call> {
    let expected = expected.unwrap_or_default();
    let any_logs = logs || expected.iter().any(|c| c.logs.is_some());
    for (i, call) in observed.iter_mut().enumerate() {
        if expected.get(i).is_none_or(|e| e.at.is_none()) {
            call.at = None;
        }
        if !any_logs {
            call.logs = None;
        }
    }
    observed
}

/// What to do about a refused load, when the fixture can fix it.
fn hint(e: &LoadError) -> &'static str {
    match e {
        LoadError::NotGranted(_) => {
            " (the sidecar's `access` must grant what the plugin registers; or expect it with `refused:`)"
        }
        LoadError::UnknownKind(_) => "",
        _ => " (expect it with `refused:` if that is the point of the case)",
    }
}
