use super::*;

/// The smallest valid component: just the header.
const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";

fn engine_with(compiler: Compiler, cache: &std::path::Path) -> WasmEngine {
    WasmEngine::new(EngineOptions {
        epoch_deadlines: false,
        cache_dir: Some(cache.to_owned()),
        cache_max_bytes: cache::DEFAULT_MAX_BYTES,
        compiler,
        artifact_key: None,
        fast_first: FastFirst::Off,
    })
    .unwrap()
}

#[test]
fn a_file_read_and_hashed_in_one_pass_matches_read_then_hashed() {
    let dir = tempfile::tempdir().unwrap();
    // Empty, under one chunk, exactly one chunk, and over two.
    for len in [0usize, 7, 1 << 20, (2 << 20) + 3] {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let path = dir.path().join(format!("p{len}.wasm"));
        std::fs::write(&path, &bytes).unwrap();
        let c = Content::read_hashed(&path).unwrap();
        assert_eq!(c.bytes(), &bytes[..], "{len} bytes");
        assert_eq!(c.digest(), Some(content_digest(&bytes).as_str()), "{len}");
    }
    let missing = Content::read_hashed(&dir.path().join("gone.wasm")).unwrap_err();
    assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
}

/// A stand-in compiler child: a shell script (its pid in `pid`).
fn script(dir: &std::path::Path, body: &str) -> Compiler {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("fake-kubewasm");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    Compiler::Child { program: path }
}

#[tokio::test]
async fn a_compiler_child_that_cannot_start_falls_back_to_this_process() {
    let cache = tempfile::tempdir().unwrap();
    let engine = engine_with(
        Compiler::Child {
            program: "/nonexistent/kubewasm".into(),
        },
        cache.path(),
    );
    let got = engine.obtain("x", EMPTY_COMPONENT.to_vec()).await.unwrap();
    assert_eq!(got.source, CompileSource::Compiled);
    assert!(engine.cache().unwrap().contains(&got.digest));
    // The next load maps what the fallback cached.
    let again = engine.obtain("x", EMPTY_COMPONENT.to_vec()).await.unwrap();
    assert_eq!(again.source, CompileSource::Cached);
}

#[tokio::test]
async fn a_compiler_child_that_dies_is_a_process_error() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_with(script(dir.path(), "cat >/dev/null; kill -9 $$"), dir.path());
    match engine.obtain("x", EMPTY_COMPONENT.to_vec()).await {
        Err(CompileError::Process { message }) => {
            assert!(message.contains("SIGKILL"), "{message}")
        }
        other => panic!("expected a process error, got {other:?}"),
    }
}

#[tokio::test]
async fn shutdown_kills_the_compiler_child() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let shutdown = CancellationToken::new();
    let engine = engine_with(
        script(
            dir.path(),
            &format!("echo $$ > {}; exec sleep 600", pid_file.display()),
        ),
        dir.path(),
    )
    .with_shutdown(shutdown.clone());
    let compiling = tokio::spawn({
        let engine = engine.clone();
        async move { engine.obtain("x", EMPTY_COMPONENT.to_vec()).await }
    });
    let pid = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let Ok(text) = std::fs::read_to_string(&pid_file)
                && let Ok(pid) = text.trim().parse::<u32>()
            {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the child started");
    shutdown.cancel();
    let result = compiling.await.unwrap();
    assert!(matches!(result, Err(CompileError::Cancelled)), "{result:?}");
    // Killed: gone, or a zombie until tokio reaps it.
    let dead = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
                Err(_) => return,
                Ok(stat)
                    if stat
                        .rsplit(')')
                        .next()
                        .is_some_and(|r| r.trim_start().starts_with('Z')) =>
                {
                    return;
                }
                Ok(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    })
    .await;
    assert!(
        dead.is_ok(),
        "the compiler child {pid} outlived the shutdown"
    );
}

/// What a pulled precompiled layer comes to: adopted (its MAC verifies
/// under this host's key), the plugin is mapped, not compiled; refused
/// (another key's, or modified), it is compiled as if there were none.
#[tokio::test]
async fn an_adopted_precompiled_artifact_is_mapped_and_a_refused_one_compiled() {
    use crate::runtime::artifact_key::KeySource;
    let (pusher_dir, host_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let key_file = pusher_dir.path().join("key");
    std::fs::write(&key_file, [7u8; 32]).unwrap();
    let with_key = |cache: &std::path::Path| {
        WasmEngine::new(EngineOptions {
            epoch_deadlines: false,
            cache_dir: Some(cache.to_owned()),
            artifact_key: Some(key_file.clone()),
            fast_first: FastFirst::Off,
            ..EngineOptions::default()
        })
        .unwrap()
    };
    // What `kubewasm push --precompiled` puts in the layer.
    let pusher = with_key(pusher_dir.path());
    let compiled = pusher.obtain_blocking("x", EMPTY_COMPONENT).unwrap();
    let layer = std::fs::read(pusher.cache().unwrap().artifact(&compiled.digest)).unwrap();
    let digest = compiled.digest.clone();

    // A host with another key (its own per-host key): refused, compiled.
    let foreign = engine_with(Compiler::InProcess, host_dir.path());
    assert_eq!(foreign.engine_key(), pusher.engine_key());
    let e = foreign.cache().unwrap().adopt(&digest, &layer).unwrap_err();
    assert!(e.to_string().contains("another key"), "{e}");
    let got = foreign.obtain("x", EMPTY_COMPONENT.to_vec()).await.unwrap();
    assert_eq!(got.source, CompileSource::Compiled);

    // The operator's key, but the layer modified: refused, compiled.
    let host_dir = tempfile::tempdir().unwrap();
    let host = with_key(host_dir.path());
    let mut tampered = layer.clone();
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    assert!(host.cache().unwrap().adopt(&digest, &tampered).is_err());
    assert!(!host.cache().unwrap().contains(&digest));
    // As pushed: mapped without compiling.
    host.cache().unwrap().adopt(&digest, &layer).unwrap();
    let got = host.obtain("x", EMPTY_COMPONENT.to_vec()).await.unwrap();
    assert_eq!(got.source, CompileSource::Cached);
    assert!(matches!(
        host.cache().unwrap().key().source(),
        KeySource::Operator(_)
    ));
}

#[tokio::test]
async fn progress_ticks_until_its_guard_is_dropped() {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let guard = spawn_progress(Duration::from_millis(20), move |elapsed| {
        let _ = tx.send(elapsed);
    })
    .unwrap();
    let first = rx.recv().await.unwrap();
    let second = rx.recv().await.unwrap();
    assert!(second > first && first >= Duration::from_millis(20));
    drop(guard);
    // The ticker ends (dropping its sender) once its owner is gone.
    let rest = tokio::time::timeout(Duration::from_secs(10), async {
        let mut n = 0;
        while rx.recv().await.is_some() {
            n += 1;
        }
        n
    })
    .await
    .unwrap();
    assert!(rest <= 1, "{rest} ticks after the guard was dropped");
}
