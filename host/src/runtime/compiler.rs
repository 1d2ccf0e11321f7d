//! Where components are compiled. Cranelift needs hundreds of MB to compile
//! a JavaScript or Python guest (12-19 MB of wasm), and an allocator keeps
//! much of that after the compile; so the host compiles in a child
//! process, `kubewasm __compile`, which writes the artifact into the
//! compile cache and exits, taking its memory with it. The host then maps
//! the artifact. The host hands the child its artifact key ahead of the
//! component on stdin (never in arguments or the environment), so the
//! child writes a signed artifact and the host maps it only after its MAC
//! verifies, like any other. The child runs at a lower CPU priority (nice
//! 10; 19 for a tier-up's background compile, so that a plugin waiting for
//! its first code gets the CPU first), so plugins that are running keep
//! their cores, is killed when the host shuts down (and by the kernel if
//! the host dies), and reports a bad component as the same typed
//! [`CompileError`] an in-process compile gives. It compiles with the
//! engine of the tier it is asked for (see [`super::tier`]).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use super::artifact_key::{ArtifactKey, KeySource};
use super::cache::write_atomically;
use super::engine::{compat_key, engine_config};
use super::tier::Tier;

/// The hidden subcommand that compiles one component (see [`serve_child`]).
pub const CHILD_SUBCOMMAND: &str = "__compile";

/// Where components are compiled.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Compiler {
    /// On a blocking thread of this process (libraries, tests, benches).
    #[default]
    InProcess,
    /// In a child process: `program` (the kubewasm binary) run with
    /// [`CHILD_SUBCOMMAND`].
    Child { program: PathBuf },
}

impl Compiler {
    /// The running binary as the compiler child: `/proc/self/exe` on Linux
    /// (the same build even after the file on disk was replaced), else
    /// the path it was started from.
    pub fn child_of_current_exe() -> Self {
        let proc_exe = Path::new("/proc/self/exe");
        let program = if proc_exe.exists() {
            proc_exe.to_owned()
        } else {
            std::env::current_exe().unwrap_or_else(|_| PathBuf::from("kubewasm"))
        };
        Self::Child { program }
    }
}

/// Why a component could not be compiled. Travels from the child to the
/// host as JSON, so both paths give the same error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum CompileError {
    /// The component ends early (a half-written or cut file).
    #[error("the component is truncated")]
    Truncated,
    /// wasmtime refused the component; its message says why.
    #[error("the component is invalid: {message}")]
    Invalid { message: String },
    /// The compiled artifact could not be written.
    #[error("cannot write the compiled component to {path}: {message}")]
    Store { path: PathBuf, message: String },
    /// The compiled artifact could not be loaded.
    #[error("cannot load the compiled component {path}: {message}")]
    Artifact { path: PathBuf, message: String },
    /// The child is another build (its engine would write artifacts this
    /// host cannot load).
    #[error("the compiler process is another kubewasm build (engine {found}, host {expected})")]
    Mismatch { expected: String, found: String },
    /// The child died or answered nonsense.
    #[error("the compiler process failed: {message}")]
    Process { message: String },
    /// The host is shutting down; the compile was abandoned.
    #[error("the host is shutting down; compile abandoned")]
    Cancelled,
}

impl CompileError {
    /// Classifies wasmtime's refusal of a component.
    pub fn from_wasmtime(e: &wasmtime::Error) -> Self {
        let message = format!("{e:#}");
        if message.contains("unexpected end") || message.contains("out of bounds") {
            Self::Truncated
        } else {
            Self::Invalid { message }
        }
    }
}

/// What the child prints on stdout: one JSON document.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Reply {
    Compiled {
        elapsed_ms: u64,
        artifact_bytes: u64,
    },
    Failed(CompileError),
}

/// How soon a compile's result is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Priority {
    /// A plugin waits for it (nice 10).
    #[default]
    Load,
    /// A plugin is served meanwhile (a tier-up: nice 19).
    Background,
}

impl Priority {
    fn nice(self) -> i32 {
        match self {
            Priority::Load => 10,
            Priority::Background => 19,
        }
    }
}

/// What the host asks of the child; the artifact key and the component
/// come on stdin (see [`key_frame`]).
#[derive(Debug, Clone)]
pub struct ChildRequest {
    /// Where to write the artifact (atomically, signed).
    pub out: PathBuf,
    /// The host engine's compatibility key: the child refuses to compile
    /// with another.
    pub compat: String,
    /// The component's content digest (what the artifact's MAC binds).
    pub digest: String,
    pub epoch_deadlines: bool,
    /// The engine (compiler) to compile with.
    pub tier: Tier,
    pub priority: Priority,
    /// The host's pid: the child exits if it is already gone.
    pub parent: Option<u32>,
}

impl ChildRequest {
    fn args(&self) -> Vec<String> {
        let mut args = vec![
            CHILD_SUBCOMMAND.to_owned(),
            "--out".into(),
            self.out.to_string_lossy().into_owned(),
            "--compat".into(),
            self.compat.clone(),
            "--digest".into(),
            self.digest.clone(),
            format!("--epoch-deadlines={}", self.epoch_deadlines),
            format!("--tier={}", self.tier),
        ];
        if self.priority == Priority::Background {
            args.push("--background".into());
        }
        if let Some(pid) = self.parent {
            args.push(format!("--parent-pid={pid}"));
        }
        args
    }
}

/// A compile in a child that did not produce an artifact.
#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    /// The child could not be started: the caller may compile in process.
    #[error("cannot start {program}: {source}")]
    Spawn {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Failed(#[from] CompileError),
}

/// A finished child compile.
#[derive(Debug, Clone, Copy)]
pub struct ChildCompiled {
    /// The child's own compile time.
    pub elapsed_ms: u64,
    pub artifact_bytes: u64,
}

/// The key's frame on the child's stdin: its length (2 bytes, big endian),
/// then its bytes.
fn key_frame(key: &ArtifactKey) -> Vec<u8> {
    let bytes = key.bytes();
    let len = u16::try_from(bytes.len()).unwrap_or(u16::MAX);
    let mut frame = len.to_be_bytes().to_vec();
    frame.extend_from_slice(&bytes[..usize::from(len)]);
    frame
}

/// Reads the key frame [`key_frame`] wrote.
fn read_key(input: &mut impl Read) -> std::io::Result<ArtifactKey> {
    let mut len = [0; 2];
    input.read_exact(&mut len)?;
    let mut key = vec![0; usize::from(u16::from_be_bytes(len))];
    input.read_exact(&mut key)?;
    Ok(ArtifactKey::from_bytes(&key, KeySource::Ephemeral))
}

/// Compiles `bytes` in a child running `program`, which writes the
/// artifact, signed with `key`, to `request.out`. Cancelling `cancel`
/// kills the child (as does dropping the future).
pub async fn compile_in_child(
    program: &Path,
    request: &ChildRequest,
    key: &ArtifactKey,
    bytes: &[u8],
    cancel: &CancellationToken,
) -> Result<ChildCompiled, ChildError> {
    let mut child = tokio::process::Command::new(program)
        .args(request.args())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // The child logs nothing the host would not say itself.
        .env("RUST_LOG", "error")
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| ChildError::Spawn {
            program: program.to_owned(),
            source,
        })?;
    let mut stdin = child.stdin.take();
    let frame = key_frame(key);
    let feed = async {
        if let Some(stdin) = stdin.as_mut() {
            // A child that died early closes the pipe: its exit says why.
            let _ = stdin.write_all(&frame).await;
            let _ = stdin.write_all(bytes).await;
            let _ = stdin.shutdown().await;
        }
        drop(stdin.take());
    };
    let run = async {
        let ((), output) = tokio::join!(feed, child.wait_with_output());
        output
    };
    let output = tokio::select! {
        output = run => output.map_err(|e| CompileError::Process { message: format!("waiting for it: {e}") })?,
        // Dropping `run` drops the child: kill_on_drop sends SIGKILL and
        // tokio reaps it.
        () = cancel.cancelled() => return Err(CompileError::Cancelled.into()),
    };
    match serde_json::from_slice::<Reply>(&output.stdout) {
        Ok(Reply::Compiled {
            elapsed_ms,
            artifact_bytes,
        }) if output.status.success() => Ok(ChildCompiled {
            elapsed_ms,
            artifact_bytes,
        }),
        Ok(Reply::Failed(e)) => Err(e.into()),
        _ => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: String = {
                let t = stderr.trim();
                let start = t.len().saturating_sub(2000);
                let start = (start..t.len())
                    .find(|i| t.is_char_boundary(*i))
                    .unwrap_or(t.len());
                t[start..].to_owned()
            };
            Err(CompileError::Process {
                message: format!(
                    "{}{}",
                    describe_exit(output.status),
                    if tail.is_empty() {
                        String::new()
                    } else {
                        format!(": {tail}")
                    }
                ),
            }
            .into())
        }
    }
}

fn describe_exit(status: std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(9) = status.signal() {
            return "was killed (SIGKILL: out of memory? raise the container's memory limit or precompile with `kubewasm compile`)".into();
        }
        if let Some(sig) = status.signal() {
            return format!("was killed by signal {sig}");
        }
    }
    format!("exited with {status} without an answer")
}

/// The child's side: reads a component from `input`, compiles it with the
/// engine configuration `request` names, writes the artifact and answers
/// on `output`. Returns whether it compiled.
pub fn serve_child(request: &ChildRequest, input: impl Read, mut output: impl Write) -> bool {
    detach_from_hot_path(request.parent, request.priority);
    let reply = compile_request(request, input);
    let ok = matches!(reply, Reply::Compiled { .. });
    let written = serde_json::to_writer(&mut output, &reply).is_ok() && output.flush().is_ok();
    ok && written
}

fn compile_request(request: &ChildRequest, mut input: impl Read) -> Reply {
    let key = match read_key(&mut input) {
        Ok(k) => k,
        Err(e) => {
            return Reply::Failed(CompileError::Process {
                message: format!("reading the artifact key from stdin: {e}"),
            });
        }
    };
    let mut bytes = Vec::new();
    if let Err(e) = input.read_to_end(&mut bytes) {
        return Reply::Failed(CompileError::Process {
            message: format!("reading the component from stdin: {e}"),
        });
    }
    let engine = match wasmtime::Engine::new(&engine_config(request.epoch_deadlines, request.tier))
    {
        Ok(e) => e,
        Err(e) => {
            return Reply::Failed(CompileError::Process {
                message: format!("cannot configure the engine: {e:#}"),
            });
        }
    };
    let found = compat_key(&engine);
    if found != request.compat {
        return Reply::Failed(CompileError::Mismatch {
            expected: request.compat.clone(),
            found,
        });
    }
    let started = Instant::now();
    let artifact = match engine.precompile_component(&bytes) {
        Ok(a) => a,
        Err(e) => return Reply::Failed(CompileError::from_wasmtime(&e)),
    };
    let elapsed_ms = started.elapsed().as_millis() as u64;
    drop(bytes);
    let header = key.header(&request.digest, &request.compat, &artifact);
    if let Err(e) = write_atomically(&request.out, &[&header, &artifact]) {
        return Reply::Failed(CompileError::Store {
            path: request.out.clone(),
            message: e.to_string(),
        });
    }
    Reply::Compiled {
        elapsed_ms,
        artifact_bytes: artifact.len() as u64,
    }
}

/// Dies with the host (the kernel's parent-death signal; the host may
/// have gone before it was set) and yields CPU to the host's own threads
/// (and a background compile to every other).
fn detach_from_hot_path(parent: Option<u32>, priority: Priority) {
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{Signal, getppid, set_parent_process_death_signal};
        let _ = set_parent_process_death_signal(Some(Signal::KILL));
        if let Some(parent) = parent
            && getppid().map(|p| p.as_raw_nonzero().get() as u32) != Some(parent)
        {
            std::process::exit(1);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = parent;
    #[cfg(unix)]
    let _ = rustix::process::nice(priority.nice());
    #[cfg(not(unix))]
    let _ = priority;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ArtifactKey {
        ArtifactKey::from_bytes(&[3; 32], KeySource::Ephemeral)
    }

    /// A child's request to compile digest `d` into `dir`.
    fn child_request(dir: &tempfile::TempDir) -> ChildRequest {
        let engine = wasmtime::Engine::new(&engine_config(false, Tier::Optimized)).unwrap();
        ChildRequest {
            out: dir.path().join("a.cwasm"),
            compat: compat_key(&engine),
            digest: "d".into(),
            epoch_deadlines: false,
            tier: Tier::Optimized,
            priority: Priority::Load,
            parent: None,
        }
    }

    #[test]
    fn the_child_signs_what_it_compiles_with_the_key_it_was_handed() {
        let dir = tempfile::tempdir().unwrap();
        let request = child_request(&dir);
        let input = [key_frame(&key()), b"\0asm\x0d\0\x01\0".to_vec()].concat();
        let reply = compile_request(&request, &input[..]);
        assert!(matches!(reply, Reply::Compiled { .. }), "{reply:?}");
        let artifact = std::fs::read(&request.out).unwrap();
        assert!(key().verify("d", &request.compat, &artifact).is_ok());
        // Without the key on stdin: nothing compiled.
        let reply = compile_request(&request, &b"\x00"[..]);
        assert!(
            matches!(&reply, Reply::Failed(CompileError::Process { message }) if message.contains("artifact key")),
            "{reply:?}"
        );
    }

    #[test]
    fn the_child_compiles_with_the_engine_of_the_tier_it_is_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let fast = wasmtime::Engine::new(&engine_config(false, Tier::Fast)).unwrap();
        let optimized = wasmtime::Engine::new(&engine_config(false, Tier::Optimized)).unwrap();
        let mut request = child_request(&dir);
        assert_ne!(
            compat_key(&fast),
            request.compat,
            "each tier's artifacts have their own engine key"
        );
        let input = [key_frame(&key()), b"\0asm\x0d\0\x01\0".to_vec()].concat();
        // Asked for the fast tier under the optimized engine's key.
        request.tier = Tier::Fast;
        let reply = compile_request(&request, &input[..]);
        assert!(
            matches!(reply, Reply::Failed(CompileError::Mismatch { .. })),
            "{reply:?}"
        );
        request.compat = compat_key(&fast);
        request.priority = Priority::Background;
        let reply = compile_request(&request, &input[..]);
        assert!(matches!(reply, Reply::Compiled { .. }), "{reply:?}");
        let load = |engine| {
            crate::runtime::cache::load_signed(engine, &key(), &request.compat, "d", &request.out)
        };
        assert!(load(&fast).is_ok());
        assert!(
            load(&optimized).is_err(),
            "Winch code does not load into the Cranelift engine"
        );
        let args = request.args();
        assert!(args.contains(&"--tier=fast".to_owned()), "{args:?}");
        assert!(args.contains(&"--background".to_owned()), "{args:?}");
    }

    #[test]
    fn errors_survive_the_trip_from_the_child() {
        for e in [
            CompileError::Truncated,
            CompileError::Invalid {
                message: "bad section".into(),
            },
            CompileError::Store {
                path: "/x".into(),
                message: "read-only".into(),
            },
            CompileError::Mismatch {
                expected: "a".into(),
                found: "b".into(),
            },
        ] {
            let text = serde_json::to_string(&Reply::Failed(e.clone())).unwrap();
            match serde_json::from_str::<Reply>(&text).unwrap() {
                Reply::Failed(back) => assert_eq!(back, e),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn the_child_reports_a_bad_component_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let request = child_request(&dir);
        let input = [key_frame(&key()), b"\0asm\x0d\0\x01\0garbage".to_vec()].concat();
        let reply = compile_request(&request, &input[..]);
        assert!(
            matches!(
                reply,
                Reply::Failed(CompileError::Invalid { .. } | CompileError::Truncated)
            ),
            "{reply:?}"
        );
        assert!(!request.out.exists());
    }

    #[test]
    fn the_child_refuses_another_engine_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let request = ChildRequest {
            out: dir.path().join("a.cwasm"),
            compat: "0000000000000000".into(),
            digest: "d".into(),
            epoch_deadlines: false,
            tier: Tier::Optimized,
            priority: Priority::Load,
            parent: None,
        };
        let reply = compile_request(&request, &key_frame(&key())[..]);
        assert!(
            matches!(reply, Reply::Failed(CompileError::Mismatch { .. })),
            "{reply:?}"
        );
    }
}
