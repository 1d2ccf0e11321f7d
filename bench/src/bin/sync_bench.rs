//! sync-bench: the side-by-side initial-sync benchmark and the
//! report it writes (docs/book/src/contributing/performance.md). `scripts/bench.sh` drives it.
//!
//! `run`: for each Pod count, has `load-pods` make the server hold that
//! many Pods, then starts the client-go informer, the kube-rs reflector
//! and kubewasm (a no-op plugin subscribed to every Pod) in turn, each in
//! both initial-list modes, for several rounds (interleaved, so a noisy
//! minute hits every program alike). Every program is measured the same
//! way, from outside: time from spawn to its "synced" line, then CPU
//! (user + system) and RSS from /proc once the process has gone quiet
//! (the work a synced cache leaves queued, e.g. kubewasm's plugin calls
//! for the initial list, counts); the API server's own CPU from spawn to
//! synced (its process's utime + stime); then, with those figures read,
//! the live heap (client-go and kube-rs print it on SIGUSR1: Go's
//! `HeapInuse` after a forced GC, glibc's `mallinfo2`; kubewasm's jemalloc
//! `stats.allocated` from its /metrics). One JSON line per run.
//!
//! `report`: medians and ranges, ratios against client-go and kube-rs
//! measured in the same run, the pipeline and runtime benchmarks' figures
//! (their `BENCH-JSON` lines), and PNG plots.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use kubewasm_bench::goals::{self, Goal, Topic, Verdict};

#[derive(Parser)]
#[command(about = "Side-by-side initial-sync benchmark and its report")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Load Pods and measure the three programs' initial sync.
    Run(RunArgs),
    /// Write docs/book/src/contributing/performance.md and its plots from the measurements.
    Report(ReportArgs),
}

#[derive(Parser)]
struct RunArgs {
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Pod counts, ascending (the loader only adds Pods).
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,30000,100000")]
    counts: Vec<usize>,
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// `client-go` speaks its default, protobuf; `client-go-json` the JSON
    /// that kube-rs speaks; `client-go-strip` is `client-go` with
    /// managedFields stripped by the informer's transform, `kube-rs-strip`
    /// kube-rs with them stripped by `.modify()`; `kubewasm` reads
    /// built-in kinds in protobuf (its default), `kubewasm-json` in JSON
    /// (`--wire json`).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "client-go,client-go-json,client-go-strip,kube-rs,kube-rs-strip,kubewasm,kubewasm-json"
    )]
    programs: Vec<String>,
    #[arg(long, value_delimiter = ',', default_value = "streaming,paged")]
    modes: Vec<String>,
    /// Where the binaries are: client-go-informer, kube-rs-informer, load-pods.
    #[arg(long)]
    bin_dir: PathBuf,
    /// The kubewasm binary to measure.
    #[arg(long)]
    kubewasm: PathBuf,
    /// The no-op plugin (subscribes to every Pod delta).
    #[arg(long)]
    noop_plugin: PathBuf,
    #[arg(long)]
    corpus: PathBuf,
    /// JSON lines, one per run (appended).
    #[arg(long)]
    out: PathBuf,
    /// The test control plane's pid: its kube-apiserver child is the one
    /// whose CPU is measured. Without it, the only process running
    /// `kubewasm-controlplane apiserver` is, if there is exactly one.
    #[arg(long)]
    controlplane_pid: Option<u32>,
    /// Give up on a program that has not synced after this long.
    #[arg(long, default_value = "600s", value_parser = humantime_secs)]
    timeout: Duration,
}

#[derive(Parser)]
struct ReportArgs {
    /// `run`'s output.
    #[arg(long)]
    sync: PathBuf,
    /// `cargo bench --bench pipeline` output.
    #[arg(long)]
    pipeline: Option<PathBuf>,
    /// `cargo bench --bench runtime` output.
    #[arg(long)]
    runtime: Option<PathBuf>,
    /// `cargo bench --bench languages -- per-delta` output (may come from
    /// another run than the rest: the section says which).
    #[arg(long)]
    languages: Option<PathBuf>,
    /// `cargo bench --bench loading` output.
    #[arg(long)]
    loading: Option<PathBuf>,
    /// The output of the e2e measurement of a Python Plugin applied with
    /// and without a precompiled layer (tests/tests/plugin_precompiled.rs,
    /// `python_time_to_ready_with_and_without_a_precompiled_layer`).
    #[arg(long)]
    precompiled: Option<PathBuf>,
    /// Machine and versions (JSON object of strings), written by bench.sh.
    #[arg(long)]
    meta: Option<PathBuf>,
    #[arg(long)]
    out: PathBuf,
    /// Folder for the PNG plots (linked from `out` relatively).
    #[arg(long)]
    plots: PathBuf,
    /// A TrueType font for the plots' text.
    #[arg(
        long,
        default_value = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
    )]
    font: PathBuf,
}

fn humantime_secs(s: &str) -> Result<Duration, String> {
    let n = s.strip_suffix('s').unwrap_or(s);
    n.parse::<f64>()
        .map(Duration::from_secs_f64)
        .map_err(|e| format!("{s:?}: {e} (use seconds, e.g. 600s)"))
}

/// One measured start of one program.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RunRecord {
    program: String,
    mode: String,
    count: usize,
    /// 0 is the discarded warm-up.
    round: usize,
    objects: usize,
    synced_s: f64,
    cpu_at_sync_s: f64,
    cpu_s: f64,
    rss_at_sync_bytes: u64,
    rss_bytes: u64,
    peak_rss_bytes: u64,
    /// The live heap once settled: Go's `HeapInuse` after a forced GC,
    /// glibc's `mallinfo2` in use, jemalloc's `stats.allocated`.
    #[serde(default)]
    live_heap_bytes: Option<u64>,
    /// The API server's CPU (user + system) from spawn to synced.
    #[serde(default)]
    apiserver_cpu_s: Option<f64>,
    /// Whether the process went quiet before the settle limit.
    settled: bool,
    /// The loader's average served size of a Pod at this count.
    served_bytes_avg: Option<f64>,
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Run(a) => run(&a),
        Cmd::Report(a) => report(&a),
    }
}

// ---------------------------------------------------------------- run

fn run(a: &RunArgs) -> Result<()> {
    for p in &a.programs {
        if !PROGRAMS.contains(&p.as_str()) {
            bail!("unknown program {p:?}: use {}", PROGRAMS.join(", "));
        }
    }
    for m in &a.modes {
        if !["streaming", "paged"].contains(&m.as_str()) {
            bail!("unknown mode {m:?}: use streaming, paged");
        }
    }
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&a.out)
        .with_context(|| format!("opening {}", a.out.display()))?;
    let work = tempfile::tempdir()?;
    let plugins = work.path().join("plugins");
    std::fs::create_dir_all(&plugins)?;
    std::fs::copy(&a.noop_plugin, plugins.join("noop.wasm"))
        .with_context(|| format!("copying {}", a.noop_plugin.display()))?;
    std::fs::write(
        plugins.join("noop.yaml"),
        "access:\n  - {kinds: [pods], verbs: [read]}\n",
    )?;
    // One compile cache for every kubewasm start: the warm-up compiles.
    let cache = work.path().join("cache");
    let mut first = true;
    for &count in &a.counts {
        let served = load(a, count)?;
        let warmup = usize::from(first);
        first = false;
        for round in (1 - warmup)..=a.rounds {
            for program in &a.programs {
                for mode in &a.modes {
                    let mut rec = measure(a, program, mode, count, &plugins, &cache)
                        .with_context(|| format!("{program} ({mode}) at {count} Pods"))?;
                    rec.round = round;
                    rec.served_bytes_avg = served;
                    eprintln!(
                        "sync-bench: {count} Pods, round {round}, {program} {mode}: synced {:.2} s, CPU {:.2} s, RSS {:.0} MiB, live heap {}, API server CPU {}{}",
                        rec.synced_s,
                        rec.cpu_s,
                        rec.rss_bytes as f64 / 1048576.0,
                        rec.live_heap_bytes.map_or_else(
                            || "-".to_owned(),
                            |b| format!("{:.0} MiB", b as f64 / 1048576.0)
                        ),
                        rec.apiserver_cpu_s
                            .map_or_else(|| "-".to_owned(), |c| format!("{c:.2} s")),
                        if rec.settled { "" } else { " (did not settle)" }
                    );
                    if rec.objects != count {
                        bail!(
                            "{program} ({mode}) synced {} objects where the server holds {count} Pods: is something else creating Pods?",
                            rec.objects
                        );
                    }
                    writeln!(out, "{}", serde_json::to_string(&rec)?)?;
                    out.flush()?;
                }
            }
        }
    }
    Ok(())
}

/// Has the loader make the server hold `count` Pods; returns their
/// average served size.
fn load(a: &RunArgs, count: usize) -> Result<Option<f64>> {
    eprintln!("sync-bench: loading {count} Pods");
    let output = Command::new(a.bin_dir.join("load-pods"))
        .arg("--kubeconfig")
        .arg(&a.kubeconfig)
        .arg("--count")
        .arg(count.to_string())
        .arg("--corpus")
        .arg(&a.corpus)
        .stderr(Stdio::inherit())
        .output()
        .context("running load-pods")?;
    if !output.status.success() {
        bail!("load-pods --count {count} failed ({})", output.status);
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let loaded = text
        .lines()
        .find_map(|l| l.strip_prefix("LOADED "))
        .and_then(|j| serde_json::from_str::<Value>(j).ok());
    Ok(loaded.and_then(|v| v["served_bytes_avg"].as_f64()))
}

/// Starts one program, waits for it to sync and go quiet, reads its
/// figures and stops it.
fn measure(
    a: &RunArgs,
    program: &str,
    mode: &str,
    count: usize,
    plugins: &Path,
    cache: &Path,
) -> Result<RunRecord> {
    let addr_file = plugins.parent().unwrap_or(plugins).join("metrics-addr");
    let _ = std::fs::remove_file(&addr_file);
    let mut cmd = match program {
        "client-go" | "client-go-json" | "client-go-strip" => {
            let mut c = Command::new(a.bin_dir.join("client-go-informer"));
            let format = if program == "client-go-json" {
                "json"
            } else {
                "protobuf"
            };
            c.args(["--content-type", format]);
            if program == "client-go-strip" {
                c.arg("--strip-managed-fields");
            }
            c
        }
        "kube-rs" | "kube-rs-strip" => {
            let mut c = Command::new(a.bin_dir.join("kube-rs-informer"));
            if program == "kube-rs-strip" {
                c.arg("--strip-managed-fields");
            }
            c
        }
        _ => {
            let mut c = Command::new(&a.kubewasm);
            c.arg("run")
                .arg("--plugins")
                .arg(plugins)
                .arg("--cache-dir")
                .arg(cache)
                .args(["--log-format", "text", "--metrics-addr", "127.0.0.1:0"])
                .arg("--metrics-addr-file")
                .arg(&addr_file)
                .env("RUST_LOG", "info");
            if program == "kubewasm-json" {
                c.args(["--wire", "json"]);
            }
            c
        }
    };
    // kubewasm spells the streaming mode `stream` (`--initial-list`).
    let mode_arg = if program.starts_with("kubewasm") && mode == "streaming" {
        "stream"
    } else {
        mode
    };
    cmd.arg("--kubeconfig")
        .arg(&a.kubeconfig)
        .arg("--initial-list")
        .arg(mode_arg)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let apiserver = apiserver_pid(a.controlplane_pid);
    let apiserver_before = apiserver.and_then(|p| ProcStat::read(p).ok());
    let start = Instant::now();
    let mut child = Guard(cmd.spawn().with_context(|| format!("starting {program}"))?);
    let (tx, rx) = mpsc::channel::<(Instant, String)>();
    let stdout = child.0.stdout.take().context("no stdout")?;
    let stderr = child.0.stderr.take().context("no stderr")?;
    // The line that says "synced": client-go and kube-rs print SYNCED on
    // stdout; kubewasm logs `cache synced informer=pods objects=N`. Their
    // HEAP lines (answers to SIGUSR1) come the same way.
    let tail = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    for (stream, is_err) in [
        (Box::new(stdout) as Box<dyn std::io::Read + Send>, false),
        (Box::new(stderr), true),
    ] {
        let tx = tx.clone();
        let tail = tail.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let synced = if is_err {
                    line.contains("cache synced") && line.contains("informer=pods ")
                } else {
                    line.starts_with("SYNCED ") || line.starts_with("HEAP ")
                };
                if synced {
                    let _ = tx.send((Instant::now(), line));
                } else if let Ok(mut t) = tail.lock() {
                    t.push(line);
                    if t.len() > 40 {
                        t.remove(0);
                    }
                }
            }
        });
    }
    drop(tx);
    let pid = child.0.id();
    let (at, line) = match rx.recv_timeout(a.timeout) {
        Ok(v) => v,
        Err(_) => {
            let status = child.0.try_wait()?;
            let tail = tail.lock().map(|t| t.join("\n")).unwrap_or_default();
            bail!(
                "{program} did not sync within {:?} (exit {status:?}); its last output:\n{tail}",
                a.timeout
            );
        }
    };
    let synced_s = at.duration_since(start).as_secs_f64();
    let at_sync = ProcStat::read(pid)?;
    let apiserver_cpu_s = apiserver_before
        .zip(apiserver.and_then(|p| ProcStat::read(p).ok()))
        .map(|(b, s)| s.cpu_s - b.cpu_s);
    let objects = if let Some(json) = line.strip_prefix("SYNCED ") {
        let v: Value = serde_json::from_str(json).context("parsing the SYNCED line")?;
        v["objects"].as_u64().unwrap_or(0) as usize
    } else {
        line.split("objects=")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let (settled, last) = settle(pid)?;
    // After CPU and RSS are read: the forced GC is not counted in them.
    let live_heap_bytes = if program.starts_with("kubewasm") {
        scrape_allocated(&addr_file)
    } else {
        request_heap(pid, &rx)
    };
    if live_heap_bytes.is_none() {
        eprintln!("sync-bench: {program} ({mode}) did not report its live heap");
    }
    child.stop();
    Ok(RunRecord {
        program: program.to_owned(),
        mode: mode.to_owned(),
        count,
        round: 0,
        objects,
        synced_s,
        cpu_at_sync_s: at_sync.cpu_s,
        cpu_s: last.cpu_s,
        rss_at_sync_bytes: at_sync.rss,
        rss_bytes: last.rss,
        peak_rss_bytes: last.hwm,
        live_heap_bytes,
        apiserver_cpu_s,
        settled,
        served_bytes_avg: None,
    })
}

/// Sends SIGUSR1 and waits (10 s at most) for the HEAP line it answers
/// with: Go's `heap_inuse_bytes` after a forced GC, or kube-rs's
/// `allocated_bytes`.
fn request_heap(pid: u32, rx: &mpsc::Receiver<(Instant, String)>) -> Option<u64> {
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(pid as i32, libc::SIGUSR1);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let (_, line) = rx.recv_timeout(left).ok()?;
        if let Some(json) = line.strip_prefix("HEAP ") {
            let v: Value = serde_json::from_str(json).ok()?;
            return v["heap_inuse_bytes"]
                .as_u64()
                .or_else(|| v["allocated_bytes"].as_u64());
        }
    }
    None
}

/// kubewasm's `kubewasm_allocator_allocated_bytes` from its /metrics (the
/// address it wrote to `addr_file`); `None` if the build has no jemalloc.
fn scrape_allocated(addr_file: &Path) -> Option<u64> {
    kubewasm_bench::scrape_metrics(addr_file)?
        .lines()
        .find_map(|l| l.strip_prefix("kubewasm_allocator_allocated_bytes "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

/// The pid of the test control plane's kube-apiserver: a process running
/// `kubewasm-controlplane apiserver ...`, the child of `parent` when given;
/// `None` unless exactly one matches.
fn apiserver_pid(parent: Option<u32>) -> Option<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let mut args = cmdline.split(|b| *b == 0);
        let prog = args.next().unwrap_or_default();
        if !prog.ends_with(b"kubewasm-controlplane") || args.next() != Some(b"apiserver") {
            continue;
        }
        if let Some(parent) = parent {
            let ppid = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')
                        .and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok())
                });
            if ppid != Some(parent) {
                continue;
            }
        }
        found.push(pid);
    }
    match found[..] {
        [pid] => Some(pid),
        _ => None,
    }
}

/// Waits until the process has used under 2 % of a core over the last
/// second (at most 60 s); returns whether it did and its last figures.
fn settle(pid: u32) -> Result<(bool, ProcStat)> {
    let start = Instant::now();
    let mut window: Vec<(Instant, f64)> = Vec::new();
    loop {
        let s = ProcStat::read(pid)?;
        let now = Instant::now();
        window.push((now, s.cpu_s));
        window.retain(|(t, _)| now.duration_since(*t) <= Duration::from_millis(1100));
        if let Some((t0, c0)) = window.first()
            && now.duration_since(*t0) >= Duration::from_millis(1000)
            && (s.cpu_s - c0) < 0.02
        {
            return Ok((true, s));
        }
        if start.elapsed() > Duration::from_secs(60) {
            return Ok((false, s));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

struct ProcStat {
    cpu_s: f64,
    rss: u64,
    hwm: u64,
}

impl ProcStat {
    fn read(pid: u32) -> Result<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .with_context(|| format!("reading /proc/{pid}/stat (did the program exit?)"))?;
        // Fields after the parenthesised command name; utime and stime
        // are the 14th and 15th fields of the whole line.
        let rest = stat
            .rsplit_once(')')
            .map(|(_, r)| r)
            .context("malformed /proc stat")?;
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
            + f.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
                * 1024
        };
        Ok(Self {
            cpu_s: ticks / hz,
            rss: kib("VmRSS:"),
            hwm: kib("VmHWM:"),
        })
    }
}

/// SIGTERM on drop (then SIGKILL after 20 s): no program outlives its run.
struct Guard(Child);

impl Guard {
    fn stop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.0.id() as i32, libc::SIGTERM);
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            self.stop();
        }
    }
}

// ---------------------------------------------------------------- report

/// Median, minimum and maximum of a group of runs.
#[derive(Clone, Copy)]
struct Stat {
    median: f64,
    min: f64,
    max: f64,
}

impl Stat {
    fn of(mut v: Vec<f64>) -> Option<Self> {
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Self {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }

    fn show(&self, unit: &str, digits: usize) -> String {
        format!(
            "{:.d$} {unit} ({:.d$}-{:.d$})",
            self.median,
            self.min,
            self.max,
            d = digits
        )
    }
}

type Key = (usize, String, String);

struct Groups {
    runs: BTreeMap<Key, Vec<RunRecord>>,
    counts: Vec<usize>,
}

impl Groups {
    fn stat(
        &self,
        count: usize,
        program: &str,
        mode: &str,
        f: fn(&RunRecord) -> f64,
    ) -> Option<Stat> {
        let runs = self
            .runs
            .get(&(count, program.to_owned(), mode.to_owned()))?;
        Stat::of(runs.iter().map(f).filter(|v| !v.is_nan()).collect())
    }
}

const PROGRAMS: [&str; 7] = [
    "client-go",
    "client-go-json",
    "client-go-strip",
    "kube-rs",
    "kube-rs-strip",
    "kubewasm",
    "kubewasm-json",
];
/// client-go's variants: the cheapest of them is the CPU goal's baseline.
const CLIENT_GO: [&str; 3] = ["client-go", "client-go-json", "client-go-strip"];
const MODES: [&str; 2] = ["streaming", "paged"];

fn cpu(r: &RunRecord) -> f64 {
    r.cpu_s
}
fn rss_mib(r: &RunRecord) -> f64 {
    r.rss_bytes as f64 / 1048576.0
}
fn synced(r: &RunRecord) -> f64 {
    r.synced_s
}
/// The API server's CPU during the sync; NaN when it was not measured
/// (`Groups::stat` leaves those runs out).
fn apiserver_cpu(r: &RunRecord) -> f64 {
    r.apiserver_cpu_s.unwrap_or(f64::NAN)
}
fn live_heap_mib(r: &RunRecord) -> f64 {
    r.live_heap_bytes.map_or(f64::NAN, |b| b as f64 / 1048576.0)
}

/// kubewasm's ratios at one count and mode: CPU against client-go's
/// cheapest variant and mode (with its name), time to synced, RSS and the
/// API server's CPU against client-go (protobuf) in the same mode, RSS
/// against client-go with managedFields stripped.
struct Ratios {
    cheapest: Option<String>,
    cpu_cg: Option<f64>,
    cpu_kr: Option<f64>,
    sync_cg: Option<f64>,
    rss_cg: Option<f64>,
    rss_cg_strip: Option<f64>,
    rss_kr: Option<f64>,
    rss_kr_strip: Option<f64>,
    api_cg: Option<f64>,
}

fn ratios(g: &Groups, count: usize, m: &str) -> Option<Ratios> {
    let kw_cpu = g.stat(count, "kubewasm", m, cpu)?;
    let cheapest = CLIENT_GO
        .iter()
        .flat_map(|p| MODES.iter().map(move |m| (*p, *m)))
        .filter_map(|(p, m)| {
            g.stat(count, p, m, cpu)
                .map(|s| (format!("{p} {m}"), s.median))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1));
    let ratio = |a: Option<Stat>, b: Option<Stat>| a.zip(b).map(|(a, b)| a.median / b.median);
    Some(Ratios {
        cpu_cg: cheapest.as_ref().map(|(_, c)| kw_cpu.median / c),
        cheapest: cheapest.map(|(n, _)| n),
        cpu_kr: ratio(Some(kw_cpu), g.stat(count, "kube-rs", m, cpu)),
        sync_cg: ratio(
            g.stat(count, "kubewasm", m, synced),
            g.stat(count, "client-go", m, synced),
        ),
        rss_cg: ratio(
            g.stat(count, "kubewasm", m, rss_mib),
            g.stat(count, "client-go", m, rss_mib),
        ),
        rss_cg_strip: ratio(
            g.stat(count, "kubewasm", m, rss_mib),
            g.stat(count, "client-go-strip", m, rss_mib),
        ),
        rss_kr: ratio(
            g.stat(count, "kubewasm", m, rss_mib),
            g.stat(count, "kube-rs", m, rss_mib),
        ),
        rss_kr_strip: ratio(
            g.stat(count, "kubewasm", m, rss_mib),
            g.stat(count, "kube-rs-strip", m, rss_mib),
        ),
        api_cg: ratio(
            g.stat(count, "kubewasm", m, apiserver_cpu),
            g.stat(count, "client-go", m, apiserver_cpu),
        ),
    })
}

/// kubewasm's RSS line in one mode: slope (MiB per Pod), intercept, worst
/// relative deviation, and the largest count it covers.
fn rss_line(g: &Groups, p: &str, m: &str) -> Option<(f64, f64, f64, usize)> {
    let pts: Vec<(f64, f64)> = g
        .counts
        .iter()
        .filter_map(|&c| g.stat(c, p, m, rss_mib).map(|s| (c as f64, s.median)))
        .collect();
    if pts.len() < 2 {
        return None;
    }
    let (slope, icpt) = fit(&pts);
    let dev = pts
        .iter()
        .map(|(x, y)| ((slope * x + icpt) - y).abs() / y)
        .fold(0.0, f64::max);
    Some((slope, icpt, dev, pts.last().map_or(0, |p| p.0 as usize)))
}

/// Every goal against this run's figures (see `kubewasm_bench::goals`).
fn goals(g: &Groups, pipeline: &[Value], runtime: &[Value], loading: &[Value]) -> Vec<Goal> {
    let mut out = Vec::new();
    let missing = |why: &str| Verdict::NotMeasured(why.to_owned());
    let mut push = |topic, what: String, goal: &str, measured: String, verdict| {
        out.push(Goal {
            topic,
            what,
            goal: goal.to_owned(),
            measured,
            verdict,
        });
    };
    // Sync, at 10k and 30k Pods in both modes; a smaller run (a smoke
    // test) also at its largest count.
    let mut sync_counts = vec![10_000, 30_000];
    if let Some(&largest) = g.counts.last()
        && largest < 10_000
    {
        sync_counts.insert(0, largest);
    }
    for count in sync_counts {
        for m in MODES {
            let Some(r) = ratios(g, count, m) else {
                push(
                    Topic::SyncCpu,
                    format!("sync, {count} Pods, {m}"),
                    "CPU <= 0.25x client-go's cheapest; synced <= 1x; API-server CPU <= 1x; RSS <= 0.4x client-go stripped",
                    "-".into(),
                    missing("this count was not in the run"),
                );
                continue;
            };
            let cheapest = r.cheapest.clone().unwrap_or_default();
            for (topic, what, goal, value, limit) in [
                (
                    Topic::SyncCpu,
                    "CPU",
                    "<= 0.25x client-go's cheapest",
                    r.cpu_cg,
                    0.25,
                ),
                (
                    Topic::SyncTime,
                    "time to synced",
                    "<= 1x client-go",
                    r.sync_cg,
                    1.0,
                ),
                (
                    Topic::ApiServerCpu,
                    "API-server CPU",
                    "<= client-go's",
                    r.api_cg,
                    1.0,
                ),
                (
                    Topic::SyncRss,
                    "RSS after sync",
                    "<= 0.4x client-go with the stripping transform",
                    r.rss_cg_strip,
                    0.4,
                ),
            ] {
                let (measured, verdict) = match value {
                    Some(v) => (
                        match topic {
                            Topic::SyncCpu => format!(
                                "{v:.2}x ({cheapest}); {:.2}x kube-rs",
                                r.cpu_kr.unwrap_or(f64::NAN)
                            ),
                            Topic::SyncRss => format!(
                                "{v:.2}x; {:.2}x client-go unstripped, {:.2}x kube-rs stripped, {:.2}x kube-rs",
                                r.rss_cg.unwrap_or(f64::NAN),
                                r.rss_kr_strip.unwrap_or(f64::NAN),
                                r.rss_kr.unwrap_or(f64::NAN)
                            ),
                            Topic::ApiServerCpu => {
                                let med = |p: &str| {
                                    g.stat(count, p, m, apiserver_cpu)
                                        .map_or(f64::NAN, |s| s.median)
                                };
                                format!(
                                    "{v:.2}x: kubewasm {:.2} s (JSON {:.2} s), client-go {:.2} s, client-go-json {:.2} s, kube-rs {:.2} s",
                                    med("kubewasm"),
                                    med("kubewasm-json"),
                                    med("client-go"),
                                    med("client-go-json"),
                                    med("kube-rs"),
                                )
                            }
                            _ => {
                                let med = |p: &str, f: fn(&RunRecord) -> f64| {
                                    g.stat(count, p, m, f).map_or(f64::NAN, |s| s.median)
                                };
                                format!(
                                    "{v:.2}x: kubewasm {:.2} s, of which {:.2} s of CPU (JSON: {:.2} s, {:.2} s of CPU); kube-rs (JSON) {:.2} s; client-go {:.2} s, client-go-json {:.2} s",
                                    med("kubewasm", synced),
                                    med("kubewasm", |r| r.cpu_at_sync_s),
                                    med("kubewasm-json", synced),
                                    med("kubewasm-json", |r| r.cpu_at_sync_s),
                                    med("kube-rs", synced),
                                    med("client-go", synced),
                                    med("client-go-json", synced),
                                )
                            }
                        },
                        goals::at_most(v, limit, "x"),
                    ),
                    None => (
                        "-".into(),
                        missing(if topic == Topic::ApiServerCpu {
                            "the API server's CPU was not measured (its process not found)"
                        } else {
                            "the client-go variant compared with did not run"
                        }),
                    ),
                };
                push(
                    topic,
                    format!("sync {what}, {count} Pods, {m}"),
                    goal,
                    measured,
                    verdict,
                );
            }
        }
    }
    for m in MODES {
        let (measured, verdict) = match rss_line(g, "kubewasm", m) {
            Some((slope, _, dev, last)) => (
                format!(
                    "{:.2} KiB per Pod up to {last} Pods, worst deviation {:.0} %",
                    slope * 1024.0,
                    dev * 100.0
                ),
                if last < 100_000 {
                    Verdict::Missed(format!("the run stopped at {last} Pods"))
                } else if dev > 0.1 {
                    Verdict::Missed(format!("a point {:.0} % off the line", dev * 100.0))
                } else {
                    Verdict::Met
                },
            ),
            None => ("-".into(), missing("fewer than two counts")),
        };
        push(
            Topic::RssLinear,
            format!("RSS growth, {m}"),
            "linear up to 100k Pods (within 10 % of a line), slope reported",
            measured,
            verdict,
        );
    }
    match pipeline.iter().find(|v| v["bench"] == "cache-bytes") {
        Some(c) => {
            let r = c["bytes_per_pod"].as_f64().unwrap_or(0.0)
                / c["stripped_json_avg"].as_f64().unwrap_or(1.0);
            push(
                Topic::CacheBytes,
                "cache bytes per Pod".into(),
                "<= 1.0x the stripped compact JSON",
                format!("{r:.2}x"),
                goals::at_most(r, 1.0, "x"),
            );
        }
        None => push(
            Topic::CacheBytes,
            "cache bytes per Pod".into(),
            "<= 1.0x the stripped compact JSON",
            "-".into(),
            missing("the pipeline benchmark did not run"),
        ),
    }
    // The pipeline: throughput on one instance, latency at 5k/s.
    let row = |plugin: &str, phase: &str, rate: Option<f64>| {
        pipeline.iter().find(|v| {
            v["bench"] == "pipeline"
                && v["plugin"] == plugin
                && v["instances"] == 1
                && v["phase"] == phase
                && rate.is_none_or(|r| v["rate"].as_f64() == Some(r))
        })
    };
    for (plugin, limit) in [("noop", 250_000.0), ("realistic", 120_000.0)] {
        let what = format!("pipeline throughput, {plugin}, one instance");
        let goal = format!(">= {}k deltas/s", limit / 1000.0);
        match row(plugin, "initial-list", None).and_then(|v| v["throughput"].as_f64()) {
            Some(t) => push(
                Topic::PipelineThroughput,
                what,
                &goal,
                format!("{t:.0}/s"),
                goals::at_least(t, limit, "/s"),
            ),
            None => push(
                Topic::PipelineThroughput,
                what,
                &goal,
                "-".into(),
                missing("the pipeline benchmark did not run"),
            ),
        }
    }
    for plugin in ["noop", "realistic"] {
        for (key, limit, name) in [("p50_us", 100.0, "p50"), ("p99_us", 1000.0, "p99")] {
            let what = format!("pipeline latency {name} at 5k deltas/s, {plugin}");
            let goal = format!("<= {limit:.0} us");
            match row(plugin, "paced", Some(5000.0)).and_then(|v| v[key].as_f64()) {
                Some(us) => push(
                    Topic::PipelineLatency,
                    what,
                    &goal,
                    format!("{us:.1} us"),
                    goals::at_most(us, limit, " us"),
                ),
                None => push(
                    Topic::PipelineLatency,
                    what,
                    &goal,
                    "-".into(),
                    missing("the pipeline benchmark did not run"),
                ),
            }
        }
    }
    // The runtime benchmark: issue 12's per-call goals and the epoch cost.
    let inline = |plugin: &str| {
        runtime
            .iter()
            .find(|v| v["plugin"] == plugin && v["wit"] == "0.2" && v["handoff_us"].is_number())
            .and_then(|v| v["us"].as_f64())
    };
    let not_run = || missing("the runtime benchmark did not run");
    match inline("noop") {
        Some(us) => {
            let bare = runtime
                .iter()
                .find(|v| v["plugin"] == "bare-call" && v["wit"] == "0.2")
                .and_then(|v| v["us"].as_f64());
            push(
                Topic::NoopCall,
                "no-op delta, WIT 0.2, inline".into(),
                "<= 1 us host overhead",
                format!(
                    "{us:.2} us (the bare call: {})",
                    bare.map_or_else(|| "-".to_owned(), |b| format!("{b:.2} us"))
                ),
                goals::at_most(us, 1.0, " us"),
            );
        }
        None => push(
            Topic::NoopCall,
            "no-op delta".into(),
            "<= 1 us",
            "-".into(),
            not_run(),
        ),
    }
    match inline("realistic") {
        Some(us) => push(
            Topic::RealisticCall,
            "realistic delta, WIT 0.2, inline, one core".into(),
            ">= 100k deltas/s",
            format!("{:.0}/s ({us:.2} us)", 1e6 / us),
            goals::at_least(1e6 / us, 100_000.0, "/s"),
        ),
        None => push(
            Topic::RealisticCall,
            "realistic delta".into(),
            ">= 100k/s",
            "-".into(),
            not_run(),
        ),
    }
    let native = runtime
        .iter()
        .find(|v| v["plugin"] == "parse-all-native")
        .and_then(|v| v["us"].as_f64());
    match inline("parse-all").zip(native) {
        Some((us, n)) => push(
            Topic::ParseAll,
            "parse-all against the same logic natively".into(),
            "<= 1.2x",
            format!("{:.2}x ({us:.2} against {n:.2} us)", us / n),
            goals::at_most(us / n, 1.2, "x"),
        ),
        None => push(
            Topic::ParseAll,
            "parse-all".into(),
            "<= 1.2x",
            "-".into(),
            not_run(),
        ),
    }
    match runtime
        .iter()
        .find(|v| v["plugin"] == "epoch-cost")
        .and_then(|v| v["percent"].as_f64())
    {
        Some(p) => push(
            Topic::Epoch,
            "epoch deadlines on the realistic plugin".into(),
            "<= 10 %",
            format!("{p:+.1} %"),
            goals::at_most(p, 10.0, " %"),
        ),
        None => push(
            Topic::Epoch,
            "epoch deadlines".into(),
            "<= 10 %",
            "-".into(),
            not_run(),
        ),
    }
    // Loading.
    let swaps: Vec<&Value> = loading.iter().filter(|v| v["bench"] == "swap").collect();
    if swaps.is_empty() {
        push(
            Topic::Swap,
            "precompiled plugin swapped in -> first delta".into(),
            "<= 10 ms",
            "-".into(),
            missing("the loading benchmark did not run"),
        );
    }
    for v in swaps {
        let plugin = v["plugin"].as_str().unwrap_or("?");
        let ms = v["median_ms"].as_f64().unwrap_or(f64::NAN);
        push(
            if plugin.contains("Python") {
                Topic::SwapPython
            } else {
                Topic::Swap
            },
            format!(
                "swap -> first delta, {plugin}, through the {}",
                if v["path"] == "watcher" {
                    "watcher"
                } else {
                    "folder scan"
                }
            ),
            "<= 10 ms",
            format!(
                "median {ms:.1} ms (max {:.1} ms, {} swaps)",
                v["max_ms"].as_f64().unwrap_or(f64::NAN),
                v["swaps"]
            ),
            goals::at_most(ms, 10.0, " ms"),
        );
    }
    let rss = |mode: &str| {
        loading
            .iter()
            .find(|v| v["bench"] == "rss" && v["mode"] == mode)
    };
    let after = |v: &Value| {
        v["loads"]
            .as_array()
            .and_then(|l| l.last())
            .and_then(|l| l["after_mib"].as_f64())
    };
    match rss("precompiled").zip(rss("child")) {
        Some((pre, child)) => {
            let (p, c) = (
                after(pre).unwrap_or(f64::NAN),
                after(child).unwrap_or(f64::NAN),
            );
            push(
                Topic::CompileRss,
                "RSS after compiling the JS and Python plugins (in a child)".into(),
                "within 20 % of the host without compiling (the same plugins precompiled)",
                format!(
                    "{c:.0} MiB against {p:.0} MiB ({:+.0} %; {:.0} MiB before any plugin)",
                    (c / p - 1.0) * 100.0,
                    child["before_mib"].as_f64().unwrap_or(f64::NAN)
                ),
                goals::at_most(c / p, 1.2, "x"),
            );
        }
        None => push(
            Topic::CompileRss,
            "RSS after compiling".into(),
            "within 20 %",
            "-".into(),
            missing("the loading benchmark did not run"),
        ),
    }
    match loading
        .iter()
        .find(|v| v["bench"] == "cache" && v["cap"].is_string())
    {
        Some(v) => {
            let cap = v["cap"].as_str().unwrap_or("?");
            let cap_mib: f64 = cap.trim_end_matches("Mi").parse().unwrap_or(f64::NAN);
            let max = v["mib"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_f64).fold(0.0, f64::max))
                .unwrap_or(f64::NAN);
            push(
                Topic::CompileCache,
                format!("compile cache over {} builds, cap {cap}", v["builds"]),
                "bounded: never above its cap",
                format!("at most {max:.1} MiB"),
                goals::at_most(max, cap_mib, " MiB"),
            );
        }
        None => push(
            Topic::CompileCache,
            "compile cache".into(),
            "bounded",
            "-".into(),
            missing("the loading benchmark did not run"),
        ),
    }
    out
}

/// The Python Plugin's apply -> Ready with a precompiled layer (<= 1 s),
/// from the e2e measurement's `precompiled` lines.
fn precompiled_goal(lines: &[Value]) -> Goal {
    let ready = |layer: &str| {
        lines
            .iter()
            .find(|v| v["bench"] == "precompiled" && v["layer"] == layer)
            .and_then(|v| Some((v["ready_s"].as_f64()?, v["compiles"].as_u64()?)))
    };
    let what = "Python Plugin created -> Ready, precompiled layer (real API server and registry)";
    match (ready("precompiled"), ready("plain")) {
        (Some((s, compiles)), plain) => Goal {
            topic: Topic::Precompiled,
            what: what.into(),
            goal: "<= 1 s".into(),
            measured: format!(
                "{s:.2} s ({compiles} compiles){}",
                plain.map_or(String::new(), |(p, c)| format!(
                    "; without the layer {p:.2} s ({c} compiles)"
                ))
            ),
            verdict: goals::at_most(s, 1.0, " s"),
        },
        (None, _) => Goal {
            topic: Topic::Precompiled,
            what: what.into(),
            goal: "<= 1 s".into(),
            measured: "-".into(),
            verdict: Verdict::NotMeasured(
                "the e2e measurement did not run (it needs the Python plugin, Debian's docker-registry and the test control plane)".into(),
            ),
        },
    }
}

fn report(a: &ReportArgs) -> Result<()> {
    let text = std::fs::read_to_string(&a.sync)
        .with_context(|| format!("reading {}", a.sync.display()))?;
    let mut runs: BTreeMap<Key, Vec<RunRecord>> = BTreeMap::new();
    let mut served: BTreeMap<usize, f64> = BTreeMap::new();
    let mut unsettled = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let r: RunRecord = serde_json::from_str(line).context("a line of the sync results")?;
        if let Some(s) = r.served_bytes_avg {
            served.insert(r.count, s);
        }
        if r.round == 0 {
            continue;
        }
        unsettled += usize::from(!r.settled);
        runs.entry((r.count, r.program.clone(), r.mode.clone()))
            .or_default()
            .push(r);
    }
    let mut counts: Vec<usize> = runs.keys().map(|k| k.0).collect();
    counts.dedup();
    let g = Groups { runs, counts };
    let meta: BTreeMap<String, String> = match &a.meta {
        Some(p) => serde_json::from_str(&std::fs::read_to_string(p)?)?,
        None => BTreeMap::new(),
    };
    let bench_lines = |p: &Option<PathBuf>| -> Result<Vec<Value>> {
        let Some(p) = p else { return Ok(Vec::new()) };
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        Ok(text
            .lines()
            .filter_map(|l| l.strip_prefix("BENCH-JSON "))
            .filter_map(|j| serde_json::from_str(j).ok())
            .collect())
    };
    let pipeline = bench_lines(&a.pipeline)?;
    let runtime = bench_lines(&a.runtime)?;
    let languages = bench_lines(&a.languages)?;
    let loading = bench_lines(&a.loading)?;
    let precompiled = bench_lines(&a.precompiled)?;

    std::fs::create_dir_all(&a.plots)?;
    let font: &'static [u8] = Box::leak(
        std::fs::read(&a.font)
            .with_context(|| {
                format!(
                    "reading the plot font {} (Debian: apt-get install fonts-dejavu-core, or pass --font)",
                    a.font.display()
                )
            })?
            .into_boxed_slice(),
    );
    plotters::style::register_font("sans-serif", plotters::style::FontStyle::Normal, font)
        .map_err(|_| anyhow::anyhow!("{} is not a usable TrueType font", a.font.display()))?;
    let rel = relative(&a.plots, a.out.parent().unwrap_or(Path::new(".")));
    let mut plots = Vec::new();
    for (file, title, y, f) in [
        (
            "sync-cpu.png",
            "CPU (user+sys) to synced and settled",
            "seconds",
            cpu as fn(&RunRecord) -> f64,
        ),
        ("sync-rss.png", "RSS after sync", "MiB", rss_mib),
        ("sync-time.png", "Wall time to synced", "seconds", synced),
    ] {
        plot_sync(&g, &a.plots.join(file), title, y, f)?;
        plots.push(format!("![{title}]({rel}/{file})"));
    }
    let latency = pipeline
        .iter()
        .filter(|v| v["phase"] == "paced" && v["instances"] == 1)
        .cloned()
        .collect::<Vec<_>>();
    if !latency.is_empty() {
        plot_latency(&latency, &a.plots.join("pipeline-latency.png"))?;
        plots.push(format!(
            "![Pipeline latency against delta rate]({rel}/pipeline-latency.png)"
        ));
    }

    let mut md = String::new();
    let w = &mut md;
    use std::fmt::Write as _;
    writeln!(w, "# Performance")?;
    writeln!(w)?;
    writeln!(
        w,
        "Written by `bash scripts/bench.sh` (do not edit by hand; rerun it). Initial sync of Pods of real-world shapes (from the corpus, server fields stripped, status set through the subresource, 50 namespaces) on one real kube-apiserver, measured for a client-go SharedInformer (`client-go`: its default wire format, protobuf; `client-go-json`: JSON, what kube-rs speaks), a kube-rs reflector and kubewasm with a no-op plugin subscribed to every Pod (`kubewasm`: protobuf for built-in kinds, its default; `kubewasm-json`: `--wire json`), in both initial-list modes (`streaming`: one watch with `sendInitialEvents=true`; `paged`: LIST, then WATCH. The informers' first LIST asks for `resourceVersion=0`, which the API server's watch cache answers in one response whatever the page size, so `paged` is one LIST here, as on a real cluster)."
    )?;
    writeln!(w)?;
    writeln!(w, "## Machine and versions")?;
    writeln!(w)?;
    writeln!(w, "| | |")?;
    writeln!(w, "|---|---|")?;
    for (k, v) in &meta {
        writeln!(w, "| {k} | {v} |")?;
    }
    writeln!(w)?;
    let mut all = goals(&g, &pipeline, &runtime, &loading);
    all.push(precompiled_goal(&precompiled));
    goals::write_section(w, &all)?;
    writeln!(w, "## How it is measured")?;
    writeln!(w)?;
    writeln!(
        w,
        "- Each program is started fresh for each measurement, against the same server holding the Pods. **Synced**: wall time from spawn to the program's own \"synced\" signal (client-go `WaitForCacheSync`, kube-rs `Store::wait_until_ready`, kubewasm's `cache synced informer=pods` log line). **CPU** (user + system) and **RSS** are read from `/proc` once the process has used under 2 % of a core for a second after syncing, so work a synced cache leaves queued (kubewasm's plugin calls for the initial list) counts. **API-server CPU**: the kube-apiserver process's user + system time from the program's spawn to its synced signal (`/proc/<pid>/stat`), i.e. what serving that client's initial sync cost the cluster (plus whatever else the server did meanwhile: little, on this otherwise idle test server). **Live heap**, read after CPU and RSS so that measuring it costs neither: client-go's `HeapInuse` after a forced `runtime.GC()` (HeapAlloc before a collection would count garbage not yet swept), kube-rs's glibc `mallinfo2()` bytes in use (all arenas plus mmapped chunks), kubewasm's jemalloc `stats.allocated` (the `kubewasm_allocator_allocated_bytes` metric, after an epoch advance). RSS minus the live heap is what the allocator or the runtime keeps from the system."
    )?;
    writeln!(
        w,
        "- {} round(s) after one discarded warm-up round; rounds interleave the programs so a noisy minute hits them alike. Figures are medians with the range (min-max) in brackets.",
        g.runs.values().map(Vec::len).max().unwrap_or(0)
    )?;
    writeln!(
        w,
        "- Ratios compare kubewasm's CPU with client-go's cheapest variant and mode at that count, its time to synced and the API server's CPU with client-go (protobuf) in the same mode, and its RSS with client-go-strip in the same mode (the plain ratios beside it); the goals are the project's, with client-go stripping managedFields as the RSS baseline."
    )?;
    writeln!(
        w,
        "- kubewasm is its release build with jemalloc (the image's allocator, with its statistics on); kube-rs and client-go use their defaults (glibc malloc; Go's runtime). `client-go` and `kube-rs` keep whole typed Pods (with managedFields), as their users' informers do by default; `client-go-strip` (protobuf) drops managedFields in the informer's transform (`SetTransform` with controller-runtime's `TransformStripManagedFields`), `kube-rs-strip` in the watcher stream (`WatchStreamExt::modify`), as users who do not read them do; kubewasm keeps compact JSON without managedFields. The RSS goal compares with `client-go-strip`, so the three keep the same fields."
    )?;
    if unsettled > 0 {
        writeln!(
            w,
            "- {unsettled} runs never went quiet within 60 s after syncing; their CPU is what they had used by then."
        )?;
    }
    writeln!(w)?;
    writeln!(w, "## Initial sync")?;
    writeln!(w)?;
    for &count in &g.counts {
        let served_note = served
            .get(&count)
            .map(|b| format!(", {:.1} KB served per Pod on average", b / 1000.0))
            .unwrap_or_default();
        writeln!(w, "### {count} Pods{served_note}")?;
        writeln!(w)?;
        writeln!(
            w,
            "| program | list mode | synced | CPU | API-server CPU | RSS after sync | live heap | peak RSS |"
        )?;
        writeln!(w, "|---|---|---|---|---|---|---|---|")?;
        for p in PROGRAMS {
            for m in MODES {
                let Some(runs) = g.runs.get(&(count, p.to_owned(), m.to_owned())) else {
                    continue;
                };
                let s = |f: fn(&RunRecord) -> f64| {
                    Stat::of(runs.iter().map(f).filter(|v| !v.is_nan()).collect())
                };
                let show = |st: Option<Stat>, unit: &str, d: usize| {
                    st.map_or_else(|| "-".to_owned(), |st| st.show(unit, d))
                };
                writeln!(
                    w,
                    "| {p} | {m} | {} | {} | {} | {} | {} | {} |",
                    show(s(synced), "s", 2),
                    show(s(cpu), "s", 2),
                    show(s(apiserver_cpu), "s", 2),
                    show(s(rss_mib), "MiB", 0),
                    show(s(live_heap_mib), "MiB", 0),
                    show(s(|r| r.peak_rss_bytes as f64 / 1048576.0), "MiB", 0),
                )?;
            }
        }
        writeln!(w)?;
        // Ratios and goals (issue 13): kubewasm against client-go's
        // cheapest mode (CPU), the same mode (wall time, RSS) and kube-rs.
        writeln!(
            w,
            "| kubewasm mode | CPU / client-go's cheapest | CPU / kube-rs | synced / client-go | API-server CPU / client-go | RSS / client-go-strip | RSS / client-go | RSS / kube-rs-strip | RSS / kube-rs | goals met |"
        )?;
        writeln!(w, "|---|---|---|---|---|---|---|---|---|---|")?;
        for m in MODES {
            let Some(r) = ratios(&g, count, m) else {
                continue;
            };
            let x = |r: Option<f64>| r.map_or_else(|| "-".to_owned(), |r| format!("{r:.2}x"));
            let mut goals = Vec::new();
            for (name, r, goal) in [
                ("CPU <= 0.25x", r.cpu_cg, 0.25),
                ("synced <= 1x", r.sync_cg, 1.0),
                ("API-server CPU <= 1x", r.api_cg, 1.0),
                ("RSS <= 0.4x stripped", r.rss_cg_strip, 0.4),
            ] {
                if let Some(r) = r {
                    goals.push(format!(
                        "{name}: {}",
                        if r <= goal { "yes" } else { "**no**" }
                    ));
                }
            }
            writeln!(
                w,
                "| {m} | {}{} | {} | {} | {} | {} | {} | {} | {} | {} |",
                x(r.cpu_cg),
                r.cheapest
                    .as_ref()
                    .map(|cm| format!(" ({cm})"))
                    .unwrap_or_default(),
                x(r.cpu_kr),
                x(r.sync_cg),
                x(r.api_cg),
                x(r.rss_cg_strip),
                x(r.rss_cg),
                x(r.rss_kr_strip),
                x(r.rss_kr),
                goals.join("; ")
            )?;
        }
        writeln!(w)?;
    }
    // RSS growth: a least-squares line through kubewasm's medians.
    writeln!(w, "### RSS growth")?;
    writeln!(w)?;
    writeln!(
        w,
        "Least-squares slope of the median RSS after sync against the Pod count, and the worst relative deviation of a point from that line (small means linear)."
    )?;
    writeln!(w)?;
    writeln!(
        w,
        "| program | list mode | slope | intercept | worst deviation |"
    )?;
    writeln!(w, "|---|---|---|---|---|")?;
    for p in PROGRAMS {
        for m in MODES {
            let Some((slope, icpt, dev, _)) = rss_line(&g, p, m) else {
                continue;
            };
            writeln!(
                w,
                "| {p} | {m} | {:.2} KiB per Pod | {icpt:.0} MiB | {:.0} % |",
                slope * 1024.0,
                dev * 100.0
            )?;
        }
    }
    writeln!(w)?;
    writeln!(w, "## Plots")?;
    writeln!(w)?;
    for p in &plots {
        writeln!(w, "{p}")?;
        writeln!(w)?;
    }
    if !pipeline.is_empty() {
        writeln!(w, "## Pipeline (cargo bench --bench pipeline)")?;
        writeln!(w)?;
        writeln!(
            w,
            "Source -> informer -> cache -> dispatcher -> plugin on this machine, 20k corpus Pods fed in-process (no API server), actions discarded. Latency: from the informer receiving a delta to the plugin call returning. Goals: >= 250k deltas/s no-op, >= 120k/s realistic on one instance (the `one delta per queue lock` rows measure the same initial list with the intake queueing each delta alone, as before batches), p50 <= 100 us and p99 <= 1 ms at 5k deltas/s."
        )?;
        writeln!(w)?;
        writeln!(
            w,
            "| plugin | instances | phase | throughput | p50 | p99 | call p50 |"
        )?;
        writeln!(w, "|---|---|---|---|---|---|---|")?;
        for v in pipeline.iter().filter(|v| v["bench"] == "pipeline") {
            let us = |k: &str| {
                v[k].as_f64()
                    .map_or_else(|| "-".to_owned(), |u| format!("{u:.1} us"))
            };
            let phase = if v["phase"] == "paced" {
                format!("updates at {:.0}/s", v["rate"].as_f64().unwrap_or(0.0))
            } else {
                "initial list".to_owned()
            };
            writeln!(
                w,
                "| {} | {} | {phase} | {} | {} | {} | {} |",
                v["plugin"].as_str().unwrap_or("?"),
                v["instances"],
                v["throughput"]
                    .as_f64()
                    .map_or_else(|| "-".to_owned(), |t| format!("{t:.0}/s")),
                us("p50_us"),
                us("p99_us"),
                us("call_p50_us")
            )?;
        }
        if let Some(d) = pipeline.iter().find(|v| v["bench"] == "decode") {
            let (before, now) = (
                d["before_us"].as_f64().unwrap_or(0.0),
                d["now_us"].as_f64().unwrap_or(f64::INFINITY),
            );
            writeln!(w)?;
            writeln!(
                w,
                "Decode: one watch event of a served Pod ({} B) into the cache's form takes {now:.1} us (the object's text scanned once), against {before:.1} us the way it was decoded before (a `DynamicObject`, then a `Value`, then text): {:.2}x.",
                d["event_bytes"],
                before / now
            )?;
        }
        if let Some(c) = pipeline.iter().find(|v| v["bench"] == "cache-bytes") {
            let per = c["bytes_per_pod"].as_f64().unwrap_or(0.0);
            let stripped = c["stripped_json_avg"].as_f64().unwrap_or(1.0);
            writeln!(w)?;
            writeln!(
                w,
                "Cache: {per:.0} bytes per cached Pod = {:.2}x its stripped compact JSON ({stripped:.0} B; goal <= 1.0x), {:.2}x the served JSON.",
                per / stripped,
                per / c["served_json_avg"].as_f64().unwrap_or(1.0)
            )?;
        }
        writeln!(w)?;
    }
    if !runtime.is_empty() {
        writeln!(w, "## Plugin calls (cargo bench --bench runtime)")?;
        writeln!(w)?;
        writeln!(
            w,
            "Per delta, one plugin instance: calls made inline on the instance's thread (the dispatcher's worker runs there: the hot path), and, for comparison, with a thread round trip per delta (how every delta was handed over before). Goals: no-op host overhead <= 1 us, realistic >= 100k/s, whole-object parse within 1.2x of native, epoch deadlines <= 10 %."
        )?;
        writeln!(w)?;
        writeln!(
            w,
            "| plugin | WIT | inline | per delta/s | thread round trip |"
        )?;
        writeln!(w, "|---|---|---|---|---|")?;
        for v in runtime.iter().filter(|v| v["handoff_us"].is_number()) {
            let us = v["us"].as_f64().unwrap_or(0.0);
            writeln!(
                w,
                "| {} | {} | {:.2} us | {:.0}/s | {:.2} us |",
                v["plugin"].as_str().unwrap_or("?"),
                v["wit"].as_str().unwrap_or("?"),
                us,
                1e6 / us,
                v["handoff_us"].as_f64().unwrap_or(0.0),
            )?;
        }
        for v in runtime.iter().filter(|v| v["plugin"] == "bare-call") {
            writeln!(
                w,
                "| bare call (synced delta, no object) | {} | {:.2} us | - | - |",
                v["wit"].as_str().unwrap_or("?"),
                v["us"].as_f64().unwrap_or(0.0),
            )?;
        }
        if let Some(n) = runtime.iter().find(|v| v["plugin"] == "parse-all-native") {
            writeln!(
                w,
                "| parse-all, same logic natively | - | {:.2} us | - | - |",
                n["us"].as_f64().unwrap_or(0.0)
            )?;
        }
        if let Some(p) = runtime.iter().find(|v| v["plugin"] == "parse-all-split") {
            let f = |k: &str| p[k].as_f64().unwrap_or(0.0);
            writeln!(w)?;
            writeln!(
                w,
                "Parse-all, split: the call with the text's copy into the guest and the patch {:.2} us; the guest's parse {:.2} us = {:.2}x native ({:.2} us = {:.2}x without epoch checks).",
                f("call_copy_us"),
                f("guest_parse_us"),
                f("guest_parse_us") / f("native_us"),
                f("guest_parse_no_epoch_us"),
                f("guest_parse_no_epoch_us") / f("native_us"),
            )?;
        }
        if let Some(e) = runtime.iter().find(|v| v["plugin"] == "epoch-cost") {
            writeln!(w)?;
            writeln!(
                w,
                "Epoch deadlines cost {:+.1} % on the realistic plugin.",
                e["percent"].as_f64().unwrap_or(0.0)
            )?;
        }
        writeln!(w)?;
    }
    if !languages.is_empty() {
        languages_section(w, &languages)?;
    }
    if let Some(dir) = a.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&a.out, md).with_context(|| format!("writing {}", a.out.display()))?;
    eprintln!(
        "sync-bench: wrote {} and {} plots",
        a.out.display(),
        plots.len()
    );
    Ok(())
}

/// "Cost per delta by guest language": the benchmark plugins in every
/// guest language next to native Rust, from the languages benchmark's
/// `BENCH-JSON` lines.
fn languages_section(w: &mut String, lines: &[Value]) -> Result<()> {
    use std::fmt::Write as _;
    let run = lines.iter().find(|v| v["bench"] == "languages-run");
    let cells: Vec<&Value> = lines.iter().filter(|v| v["bench"] == "languages").collect();
    let time = |lang: &str, plugin: &str| {
        cells
            .iter()
            .find(|v| v["lang"] == lang && v["plugin"] == plugin)
            .and_then(|v| v["us"].as_f64())
    };
    let text = |v: Option<&Value>, k: &str| {
        v.and_then(|v| v[k].as_str())
            .unwrap_or("unknown")
            .to_owned()
    };
    writeln!(
        w,
        "## Cost per delta by guest language (cargo bench --bench languages)"
    )?;
    writeln!(w)?;
    writeln!(
        w,
        "The benchmark plugins written in each guest language (`plugins/testing/{{noop,realistic,parse-all}}` in Rust, their twins in `plugins/<lang>/bench`, built by `plugins/build-languages.sh bench`; see the book's \"Other languages\" chapter), on the runtime benchmark's delta (an `updated` corpus Pod of {} bytes, its Node cached), one instance each, calls made inline on the instance's thread as the dispatcher's worker makes them, epoch deadlines on, best of five rounds of about a second. noop: the call alone; realistic: label `app`, two fields in one call, one cache get, one merge patch (no JSON parsed in the guest); parse-all: the whole Pod as JSON text (`to-json`) parsed by the language's own parser (Rust: serde_json into k8s-openapi's typed Pod; JS: `JSON.parse` in QuickJS; Python: `json.loads`; Go: `encoding/json` into a `map[string]any`; C: cJSON 1.7.19, vendored), then the decision of `plugins/bench-logic` and its patch. Before a plugin is timed its actions are compared with the Rust guest's on {} deltas (every scheduled corpus Pod that k8s-openapi accepts as a Pod, {} left out, an unscheduled one, a `synced` delta); a mismatch is reported instead of a figure. Native Rust is the same logic without a component: `bench_logic::evaluate` for parse-all, and for realistic the same reads on the host's own objects and the patch's text (without the action's validation that a guest's call includes).",
        run.and_then(|r| r["pod_bytes"].as_u64()).unwrap_or(0),
        run.and_then(|r| r["checked"].as_u64()).unwrap_or(0),
        run.and_then(|r| r["invalid_pods"].as_u64()).unwrap_or(0),
    )?;
    writeln!(w)?;
    writeln!(
        w,
        "Load average (1, 5, 15 min) {} at the start, {} at the end. This section may come from another run than the sections above; compare within its table.",
        text(run, "load_start"),
        text(run, "load_end"),
    )?;
    writeln!(w)?;
    writeln!(
        w,
        "| language | noop | realistic | parse-all | parse-all / native Rust | the parse alone (x native) |"
    )?;
    writeln!(w, "|---|---:|---:|---:|---:|---:|")?;
    let native = time("native", "parse-all");
    let fmt = |t: Option<f64>, base: Option<f64>| match (t, base) {
        (Some(t), Some(b)) => format!("{t:.2} us ({:.2}x)", t / b),
        (Some(t), None) => format!("{t:.2} us"),
        (None, _) => "-".to_owned(),
    };
    writeln!(
        w,
        "| native Rust (no component) | - | {} | {} | 1.00x | {} |",
        fmt(time("native", "realistic"), None),
        fmt(native, None),
        fmt(native, None),
    )?;
    let mut langs: Vec<&str> = Vec::new();
    for v in &cells {
        if let Some(l) = v["lang"].as_str()
            && l != "native"
            && !langs.contains(&l)
        {
            langs.push(l);
        }
    }
    let mut problems = Vec::new();
    for lang in &langs {
        let mut line = format!("| {lang} |");
        for plugin in ["noop", "realistic", "parse-all"] {
            let cell = match time(lang, plugin) {
                Some(t) => fmt(Some(t), time("rust", plugin)),
                None => {
                    if let Some(e) = cells
                        .iter()
                        .find(|v| v["lang"] == *lang && v["plugin"] == plugin)
                        .and_then(|v| v["error"].as_str())
                    {
                        problems.push(format!("{lang} {plugin}: {e}"));
                    }
                    "-".to_owned()
                }
            };
            write!(line, " {cell} |")?;
        }
        match (time(lang, "parse-all"), native) {
            (Some(t), Some(n)) => write!(line, " {:.2}x |", t / n)?,
            _ => line.push_str(" - |"),
        }
        write!(line, " {} |", fmt(time(lang, "parse-alone"), native))?;
        writeln!(w, "{line}")?;
    }
    writeln!(w)?;
    writeln!(
        w,
        "In a language's row, (x) is the ratio to the Rust guest's time for the same plugin. The parse alone: parse-all configured to decide 11 times per delta instead of once, the difference over 10 (the guest's parse and decision without the call, the copy of the text and the patch)."
    )?;
    for p in &problems {
        writeln!(w)?;
        writeln!(w, "- not measured: {p}")?;
    }
    writeln!(w)?;
    Ok(())
}

/// `path` as seen from `from` (both under the same root; good enough for
/// the chapter and its performance/ folder).
fn relative(path: &Path, from: &Path) -> String {
    let abs = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned());
    let (path, from) = (abs(path), abs(from));
    path.strip_prefix(&from)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| path.display().to_string())
}

/// Least squares: (slope, intercept).
fn fit(pts: &[(f64, f64)]) -> (f64, f64) {
    let n = pts.len() as f64;
    let (sx, sy) = pts.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let (num, den) = pts.iter().fold((0.0, 0.0), |(a, b), (x, y)| {
        (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
    });
    let slope = if den == 0.0 { 0.0 } else { num / den };
    (slope, my - slope * mx)
}

fn color(i: usize) -> plotters::style::RGBColor {
    use plotters::style::RGBColor;
    [
        RGBColor(0, 114, 178),
        RGBColor(86, 180, 233),
        RGBColor(213, 94, 0),
        RGBColor(230, 159, 0),
        RGBColor(0, 158, 115),
        RGBColor(120, 200, 160),
        RGBColor(204, 0, 0),
        RGBColor(240, 120, 160),
        RGBColor(100, 60, 150),
        RGBColor(170, 140, 210),
        RGBColor(90, 90, 90),
        RGBColor(170, 170, 170),
    ][i % 12]
}

/// One line per program and mode: the median against the Pod count (log
/// x), with the range as error bars.
fn plot_sync(
    g: &Groups,
    file: &Path,
    title: &str,
    y: &str,
    f: fn(&RunRecord) -> f64,
) -> Result<()> {
    use plotters::prelude::*;
    let root = BitMapBackend::new(file, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let xmin = *g.counts.first().unwrap_or(&1) as f64 * 0.8;
    let xmax = *g.counts.last().unwrap_or(&1) as f64 * 1.25;
    let ymax = g.runs.values().flatten().map(f).fold(0.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d((xmin..xmax).log_scale(), 0.0..ymax.max(1e-9))
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    chart
        .configure_mesh()
        .x_desc("Pods")
        .y_desc(y)
        .x_label_formatter(&|x| format!("{:.0}k", x / 1000.0))
        .draw()
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let mut i = 0;
    for p in PROGRAMS {
        for m in MODES {
            let pts: Vec<(f64, Stat)> = g
                .counts
                .iter()
                .filter_map(|&c| g.stat(c, p, m, f).map(|s| (c as f64, s)))
                .collect();
            let c = color(i);
            i += 1;
            if pts.is_empty() {
                continue;
            }
            let style = if m == "paged" {
                ShapeStyle::from(&c).stroke_width(2)
            } else {
                ShapeStyle::from(&c).stroke_width(3)
            };
            chart
                .draw_series(LineSeries::new(
                    pts.iter().map(|(x, s)| (*x, s.median)),
                    style,
                ))
                .map_err(|e| anyhow::anyhow!("{e:?}"))?
                .label(format!("{p} ({m})"))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3))
                });
            chart
                .draw_series(pts.iter().map(|(x, s)| {
                    ErrorBar::new_vertical(*x, s.min, s.median, s.max, c.filled(), 6)
                }))
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    root.present().map_err(|e| anyhow::anyhow!("{e:?}"))?;
    Ok(())
}

/// p50 and p99 against the paced delta rate, per plugin (one instance).
fn plot_latency(points: &[Value], file: &Path) -> Result<()> {
    use plotters::prelude::*;
    let root = BitMapBackend::new(file, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let rate = |v: &Value| v["rate"].as_f64().unwrap_or(1.0);
    let us = |v: &Value, k: &str| v[k].as_f64().unwrap_or(1.0).max(1.0);
    let xmin = points.iter().map(rate).fold(f64::INFINITY, f64::min) * 0.8;
    let xmax = points.iter().map(rate).fold(0.0, f64::max) * 1.25;
    let ymax = points
        .iter()
        .map(|v| us(v, "p99_us"))
        .fold(1000.0, f64::max)
        * 1.5;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Pipeline latency (watch event to plugin returned)",
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d((xmin..xmax).log_scale(), (5.0..ymax).log_scale())
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    chart
        .configure_mesh()
        .x_desc("deltas per second")
        .y_desc("microseconds")
        .x_labels(6)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let mut plugins: Vec<String> = points
        .iter()
        .filter_map(|v| v["plugin"].as_str().map(str::to_owned))
        .collect();
    plugins.sort();
    plugins.dedup();
    let mut i = 0;
    for p in &plugins {
        for (k, width) in [("p50_us", 3), ("p99_us", 2)] {
            let mut pts: Vec<(f64, f64)> = points
                .iter()
                .filter(|v| v["plugin"] == p.as_str())
                .map(|v| (rate(v), us(v, k)))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let c = color(i);
            i += 1;
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(width)))
                .map_err(|e| anyhow::anyhow!("{e:?}"))?
                .label(format!("{p} {}", &k[..3]))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3))
                });
            chart
                .draw_series(pts.iter().map(|p| Circle::new(*p, 4, c.filled())))
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        }
    }
    let grey = RGBColor(110, 110, 110);
    for (goal, label) in [(100.0, "p50 goal 100 us"), (1000.0, "p99 goal 1 ms")] {
        chart
            .draw_series(DashedLineSeries::new(
                vec![(xmin, goal), (xmax, goal)],
                8,
                5,
                grey.stroke_width(2),
            ))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], grey.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    root.present().map_err(|e| anyhow::anyhow!("{e:?}"))?;
    Ok(())
}
