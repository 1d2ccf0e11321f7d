//! The "Goals" section of docs/book/src/contributing/performance.md: every goal of issues 13
//! (and 12's per-call goals, which the runtime benchmark measures) with
//! what this run measured, whether it is met, by how much it is missed,
//! and, for a missed goal, why and what would close it. The figures come
//! from the run; the explanations are this file's (they say what the
//! profiles and split measurements found, and are kept next to the goal
//! they explain so a change to one shows in review with the other).

use std::fmt::Write as _;

/// One goal of the run.
#[derive(Debug, Clone)]
pub struct Goal {
    /// Which explanation applies when it is missed.
    pub topic: Topic,
    /// What is measured, e.g. "sync CPU, 10000 Pods, streaming".
    pub what: String,
    /// The goal as the issue states it.
    pub goal: String,
    /// The measured figure.
    pub measured: String,
    pub verdict: Verdict,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Met,
    /// Missed, with by how much.
    Missed(String),
    /// This run did not measure it, with why.
    NotMeasured(String),
}

/// A goal's "missed at most" ratio check: `value <= goal`.
pub fn at_most(value: f64, goal: f64, unit: &str) -> Verdict {
    if value <= goal {
        Verdict::Met
    } else {
        Verdict::Missed(format!(
            "{:.2}{unit} over ({:.1}x the goal)",
            value - goal,
            value / goal
        ))
    }
}

/// A "at least" check: `value >= goal`.
pub fn at_least(value: f64, goal: f64, unit: &str) -> Verdict {
    if value >= goal {
        Verdict::Met
    } else {
        Verdict::Missed(format!(
            "{:.0}{unit} short ({:.0} % of the goal)",
            goal - value,
            value / goal * 100.0
        ))
    }
}

/// The areas whose misses share one explanation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Topic {
    SyncCpu,
    SyncTime,
    ApiServerCpu,
    SyncRss,
    RssLinear,
    CacheBytes,
    PipelineThroughput,
    PipelineLatency,
    Epoch,
    NoopCall,
    RealisticCall,
    ParseAll,
    Swap,
    SwapPython,
    CompileRss,
    CompileCache,
    Precompiled,
}

impl Topic {
    fn title(self) -> &'static str {
        match self {
            Self::SyncCpu => "Sync CPU",
            Self::SyncTime => "Time to synced",
            Self::ApiServerCpu => "API-server CPU per sync",
            Self::SyncRss => "RSS after sync",
            Self::RssLinear => "Linear RSS",
            Self::CacheBytes => "Cache bytes per object",
            Self::PipelineThroughput => "Pipeline throughput",
            Self::PipelineLatency => "Pipeline latency at 5k deltas/s",
            Self::Epoch => "Epoch deadlines",
            Self::NoopCall => "No-op call",
            Self::RealisticCall => "Realistic call",
            Self::ParseAll => "Parse-all against native",
            Self::Swap => "Swap of a precompiled plugin",
            Self::SwapPython => "Swap of the precompiled Python plugin",
            Self::CompileRss => "RSS after compiling",
            Self::CompileCache => "Compile cache",
            Self::Precompiled => "Python plugin applied with a precompiled layer",
        }
    }

    /// Why the goal is missed and what would close it.
    fn why(self) -> &'static str {
        match self {
            Self::SyncCpu => {
                "kubewasm reads built-in kinds in protobuf, as client-go does (its `kubewasm-json` rows show the JSON path), transcoding each object into the JSON text the cache keeps, so plugins see the same objects either way. The transcoder walks the wire with a table read at start and writes JSON as it goes (about 35 us a Pod against client-go's generated decoders, which build typed structs directly); that text is then split into its members in serde_json's one pass over the event and the cache's form copied together from them (the JSON path does the same with the server's text: one scan per object). What would close it: transcoding code generated per message, writing the cache's form straight from the wire instead of JSON text that is scanned again. A LIST from a loopback server is not gzipped (the host asks uncompressed there)."
            }
            Self::SyncTime => {
                "with protobuf on the wire the server encodes faster and sends less; what remains is the host's own decode (see the CPU row) and, in paged mode, the list itself: kubewasm's paged LIST asks for the most recent state in pages (`limit`, no `resourceVersion`, kube-rs's default), which the server reads from etcd page by page, where client-go's first LIST asks for `resourceVersion=0`, which the watch cache answers at once. What would close it: the cheaper transcoder of the CPU row, and `resourceVersion=0` for the first LIST (the watch that follows catches up on anything older)."
            }
            Self::ApiServerCpu => {
                "the figure beside each ratio shows each client's cost to the server: protobuf costs the server far less to encode than JSON (kubewasm against `kubewasm-json`, client-go against `client-go-json`), and a LIST's response is gzipped when the client accepts gzip (kubewasm does not ask for it from a loopback server). What is left is the watch cache's own work per request, the same for every client, and in paged mode the pages read from etcd (see the time-to-synced row: client-go's first LIST is answered from the watch cache)."
            }
            Self::SyncRss => {
                "the goal compares with client-go stripping managedFields in its transform, so both keep the same fields. kubewasm's RSS is its cache (see the bytes per object below) plus the process's fixed part (the wasmtime engine, the plugin and the runtime's arenas), and the allocator's retained pages after the sync's transient buffers (the live heap column is what the cache holds)."
            }
            Self::RssLinear => {
                "the line is fitted to the counts this run measured: linearity up to 100k Pods needs the 100k count in the run."
            }
            Self::CacheBytes => {
                "each cached object keeps its compact JSON text, with labels and annotations as spans of it (only escaped strings are decoded beside it), plus its other metadata decoded (name, namespace, uid, resourceVersion, timestamps, owner references, each its own allocation), its entry in the key map and the indexes. What would close it: the rest of the metadata as spans of the text too, and index entries that refer to the object instead of copying its key."
            }
            Self::PipelineThroughput => {
                "a delta's cost through the pipeline is its call (`call p50` in the pipeline table) plus the producer side: the informer's decode into the cache, the dispatcher's queue with its per-object order and coalescing bookkeeping, and the hand-off to the instance's thread. The intake now queues up to 256 deltas under one lock and one wake-up (the `one delta per queue lock` rows measure the same list queued one at a time, in the same run). What would close the rest: batches from the informer's fan-out too (one channel send per delta today), the cheaper decode of the sync section, and a cheaper realistic call (its host calls: pointer reads of the object's text, the cache get, the patch's validation)."
            }
            Self::PipelineLatency => {
                "compare the latency with `call p50` in the same row: most of a delta's latency is spent before its call, on the informer's decode and the hand-off to the instance's thread, which sleeps between deltas at a paced 5k/s and has to be woken for each (and the realistic call itself runs slower cold than in the runtime benchmark's tight loop). What would close it: never handing a delta to a sleeping thread: spinning briefly before the worker parks, or making the calls on the dispatcher's own worker (wasmtime's async calls)."
            }
            Self::Epoch => {
                "epoch checks sit at every loop header and function entry of the guest; what they cost depends on Cranelift's register allocation around them, which is worst in very large functions (see the parse-all explanation)."
            }
            Self::NoopCall => {
                "the bare component call (the `synced` delta with no object, measured beside it) is most of the no-op call: wasmtime's entry and exit, the epoch deadline, and the lowering of the delta record. wasmtime lowers a record of this size through guest memory and calls the guest's `cabi_realloc` once for the record and once per string, even an empty one (`lower_string` in wasmtime's `typed.rs`), so a delta is five calls into the guest before the handler and one (post-return) after; the no-op adds two object handles the guest drops. What would close it: a delta with its strings behind the object handle (a new WIT version, since released WIT files never change), or a cheaper entry into wasm in wasmtime."
            }
            Self::RealisticCall => {
                "the realistic call is dominated by its host calls (pointer reads of the object's text, one cache get, one patch validated and handed to the sink). A profile of the remaining time is the next step."
            }
            Self::ParseAll => {
                "the split in the runtime section shows where the time goes: the call with the copy of the text into the guest (about a tenth of native), the guest's parse with epoch checks, and the same parse without them. The checks' cost is not spread over serde_json's byte loops: a perf profile (wasmtime's perf map) puts four fifths of it in one function, k8s-openapi's derived PodSpec visitor, into which LLVM at opt-level 3 inlines the field decoders: 31,000 wasm instructions with 160 loops and 970 calls in a Rust 1.95 build, 5x slower with checks. Cranelift loads the epoch and compares it with a deadline cached in a variable at every loop header, and the check's cold path calls into the runtime and redefines that variable, so in a function this large the deadline and the epoch pointer live on the stack and are moved at every join. A check of the same density that only branches to a trap (`global.get` + `if unreachable` inserted at every function entry and loop header by a test rewrite of the core module) costs 1-6 % where wasmtime's costs 60-100 % (`bash bench/epoch-probe/run.sh`), so it is the shape of the check, not its count. The benchmark plugins build at opt-level \"s\", like the `kubewasm new` scaffold, which keeps the visitors smaller (the parse 1.5x native with checks instead of 2.1x; 2.5x with Rust 1.95). What would close the rest: interruption without a compare in the guest (wasmtime's MMU-based epoch interruption, pull request 12990, still open; wasmtime 50.0.1 measured the same as 48 here), and Cranelift against LLVM with wasi-libc's dlmalloc (the parse without checks is 1.15-1.25x native; a bump allocator in the guest, an upper bound, saved 1.2 us of it). A deadline opt-out for trusted plugins would still miss 1.2x once the call is counted, so it is not built."
            }
            Self::Swap => {
                "the swap reads and hashes the file in one pass, loads the artifact, then instantiates and registers the new version before it serves. A profile of the instantiation is the next step."
            }
            Self::SwapPython => {
                "a componentize-py component is about 19 MB. The folder scan reads and hashes it in one pass (one SHA-256 of 19 MB takes about 9 ms on this machine with SHA-NI), then loads its 46 MB artifact, which is read into memory, authenticated and handed to wasmtime, which copies it and builds the memory images from that copy instead of mapping the file; then the new version is instantiated (CPython's start) and registered before it serves. What would close it: mapping the artifact (the authentication and the mapping must then see the same bytes) and a profile of the instantiation."
            }
            Self::CompileRss => {
                "the host holds the plugin's bytes while the child compiles, and glibc keeps freed pages, so the heap stays at its high-water mark. What would close it: the child reading the file itself (the host hashes it streaming), and returning freed pages after a load (`malloc_trim`, or jemalloc's purge in the image)."
            }
            Self::CompileCache => {
                "the cache exceeded its cap: the eviction after a write removes the oldest entries until the cap holds, so a run above it is a bug."
            }
            Self::Precompiled => {
                "from the Plugin's creation to `Ready`, the host sees the object, pulls the manifest and both layers from the registry (19 MB of wasm and the 46 MB compiled artifact), checks the layers' digests, the signature and the artifact's MAC, writes the artifact into its compile cache, deserializes it and starts the plugin (CPython's start), then writes the status. The host's log lines under the figure say which step took the time. What would close it: pulling the wasm layer only when the precompiled one does not match the engine (both are pulled today), and mapping the artifact instead of reading and copying it (see the swap of the Python plugin)."
            }
        }
    }
}

/// Writes the section: a table of every goal, then the explanation of each
/// topic with a missed goal.
pub fn write_section(w: &mut String, goals: &[Goal]) -> std::fmt::Result {
    writeln!(w, "## Goals")?;
    writeln!(w)?;
    let met = goals.iter().filter(|g| g.verdict == Verdict::Met).count();
    let missed = goals
        .iter()
        .filter(|g| matches!(g.verdict, Verdict::Missed(_)))
        .count();
    let unmeasured = goals.len() - met - missed;
    writeln!(
        w,
        "Every goal, against this run: {met} met, {missed} missed, {unmeasured} not measured. Each missed goal says by how much; the notes below the table say why and what would close it."
    )?;
    writeln!(w)?;
    writeln!(w, "| measure | goal | measured | met |")?;
    writeln!(w, "|---|---|---|---|")?;
    for g in goals {
        let verdict = match &g.verdict {
            Verdict::Met => "yes".to_owned(),
            Verdict::Missed(by) => format!("**no**: {by}"),
            Verdict::NotMeasured(why) => format!("not measured: {why}"),
        };
        writeln!(
            w,
            "| {} | {} | {} | {verdict} |",
            g.what, g.goal, g.measured
        )?;
    }
    writeln!(w)?;
    let mut topics: Vec<Topic> = goals
        .iter()
        .filter(|g| matches!(g.verdict, Verdict::Missed(_)))
        .map(|g| g.topic)
        .collect();
    topics.sort();
    topics.dedup();
    if !topics.is_empty() {
        writeln!(
            w,
            "### Why the missed goals are missed, and what would close them"
        )?;
        writeln!(w)?;
        for t in topics {
            writeln!(w, "- **{}:** {}", t.title(), t.why())?;
        }
        writeln!(w)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn goal(topic: Topic, verdict: Verdict) -> Goal {
        Goal {
            topic,
            what: "w".into(),
            goal: "g".into(),
            measured: "m".into(),
            verdict,
        }
    }

    #[test]
    fn verdicts_say_by_how_much() {
        assert_eq!(at_most(0.2, 0.25, "x"), Verdict::Met);
        assert_eq!(
            at_most(1.0, 0.25, "x"),
            Verdict::Missed("0.75x over (4.0x the goal)".into())
        );
        assert_eq!(at_least(200.0, 100.0, "/s"), Verdict::Met);
        assert_eq!(
            at_least(80.0, 100.0, "/s"),
            Verdict::Missed("20/s short (80 % of the goal)".into())
        );
    }

    #[test]
    fn only_missed_topics_are_explained_once_each() {
        let mut w = String::new();
        write_section(
            &mut w,
            &[
                goal(Topic::SyncCpu, Verdict::Missed("a".into())),
                goal(Topic::SyncCpu, Verdict::Missed("b".into())),
                goal(Topic::SyncRss, Verdict::Met),
                goal(Topic::Swap, Verdict::NotMeasured("c".into())),
            ],
        )
        .unwrap();
        assert!(w.contains("1 met, 2 missed, 1 not measured"), "{w}");
        assert_eq!(w.matches("**Sync CPU:**").count(), 1, "{w}");
        assert!(!w.contains("**RSS after sync:**"), "{w}");
        assert!(!w.contains("**Swap of a precompiled plugin:**"), "{w}");
    }
}
