//! The admin surfaces over HTTP, against the `kubewasm` binary: a Secret
//! in the cache is never shown by any of them (the web view's object API,
//! state and feed, `/dead-letters`, `/metrics`, the log); the web view has
//! its own listener, on loopback by default and never the metrics port,
//! and refuses a foreign Host (421) and a foreign Origin (403); with
//! `--metrics-auth` against the real API server an unauthenticated scrape
//! is refused (401), a token without the RBAC gets 403 and a token bound
//! to the scraper ClusterRole of deploy/ gets 200, while probes need none.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, PostParams};
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::{HostProcess, eventually, http_get, kubewasm_bin, namespace};
use kubewasm_tests::host_child::HostChild;
use kubewasm_tests::manifests::docs;
use kubewasm_tests::repo_root;
use kubewasm_tests::{install, run_local};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(120);

/// The Secret's values, each in a form the host could leak it in.
const PASSWORD: &str = "s3cr3t-password-4711";
const TOKEN: &str = "plain-token-4711";

fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A GET with extra header lines (`Host` is one of them when given, else
/// the address): (status, head, body).
fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, String, String) {
    let s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    exchange(s, addr, path, headers)
}

/// [`get`] over TLS, not checking the host's self-signed certificate.
fn get_tls(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, String, String) {
    use kubewasm::admin::tls::client::{Verify, client_config, server_name};
    let s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let conn = rustls::ClientConnection::new(
        client_config(&Verify::Skip).unwrap(),
        server_name(&addr.ip().to_string()).unwrap(),
    )
    .unwrap();
    exchange(rustls::StreamOwned::new(conn, s), addr, path, headers)
}

fn exchange(
    mut s: impl Read + Write,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String, String) {
    let mut req = format!("GET {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    if let Err(e) = s.read_to_end(&mut out) {
        // A TLS peer closing after its answer without close_notify.
        assert!(
            e.kind() == std::io::ErrorKind::UnexpectedEof && !out.is_empty(),
            "{e}"
        );
    }
    let out = String::from_utf8(out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    let code = head[9..12].parse().unwrap();
    (code, head.to_owned(), body.to_owned())
}

fn poll(what: &str, logs: &dyn Fn() -> String, check: &mut dyn FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < WAIT,
            "timed out waiting for {what}; log:\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The address after `needle` in a text log line (`addr=` or `url=`).
fn logged_addr(logs: &str, message: &str, field: &str) -> Option<SocketAddr> {
    logs.lines()
        .filter(|l| l.contains(message))
        .find_map(|l| l.split(field).nth(1)?.split_whitespace().next())
        .map(|a| a.trim_start_matches("http://").trim_end_matches("/ui"))
        .and_then(|a| a.parse().ok())
}

/// `kubewasm run --local` with both listeners on free ports; stopped on
/// drop.
struct LocalHost {
    host: HostChild,
}

impl LocalHost {
    fn start(cluster: &Path, plugins: &Path, cache: &Path, log: std::path::PathBuf) -> Self {
        let host = HostChild::spawn(
            run_local(cluster, plugins, cache)
                // `:0`: a free port on the web view's default host, loopback.
                .args(["--metrics-addr", "127.0.0.1:0", "--ui", "--ui-addr", ":0"])
                // Keeps the last-applied annotation, which copies a Secret's data.
                .arg("--keep-managed-fields"),
            log,
        );
        Self { host }
    }

    fn logs(&self) -> String {
        self.host.logs()
    }
}

/// An open `/ui/events` stream, read into a buffer by a thread.
struct Stream {
    text: Arc<Mutex<String>>,
}

impl Stream {
    fn open(addr: SocketAddr) -> Self {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(s, "GET /ui/events HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
        let text = Arc::new(Mutex::new(String::new()));
        let sink = text.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Self { text }
    }

    fn text(&self) -> String {
        self.text.lock().unwrap().clone()
    }
}

fn assert_hidden(what: &str, text: &str) {
    let b64 = base64(PASSWORD.as_bytes());
    for secret in [PASSWORD, TOKEN, b64.as_str()] {
        assert!(
            !text.contains(secret),
            "{what} shows the Secret's value {secret:?}:\n{text}"
        );
    }
}

/// A plugin granted `read` on Secrets (the recorder, whose Event is not
/// granted, so every delta fails at once and becomes a dead letter), a
/// page open on the web view, and a Secret created: the page's stream
/// (state and feed), the object API, the state, the dead letters, the
/// metrics and the log name the Secret and never show its values; the
/// object API shows its keys with the values redacted, the last-applied
/// copy too. The web view listens on loopback apart from the metrics
/// listener, and refuses a foreign Host and a foreign Origin.
#[test]
fn a_secret_in_the_cache_is_never_shown_and_the_web_view_answers_only_its_own_host_and_origin() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, plugins, cache) = (
        dir.path().join("cluster"),
        dir.path().join("plugins"),
        dir.path().join("cache"),
    );
    for d in [&cluster, &plugins, &cache] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(
        cluster.join("team-a.json"),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
            .to_string(),
    )
    .unwrap();
    install(
        &plugins,
        "secret-reader",
        "recorder",
        Some(
            "config: {namespace: team-a, resources: [secrets]}\n\
             limits: {maxAttempts: 1}\n\
             access:\n  - {kinds: [secrets], verbs: [read], namespaces: [team-a]}\n",
        ),
    );
    let host = LocalHost::start(&cluster, &plugins, &cache, dir.path().join("host.log"));
    let logs = || host.logs();
    let (mut metrics, mut ui) = (None, None);
    poll("both listeners", &logs, &mut || {
        let l = host.logs();
        metrics = logged_addr(&l, "metrics listening", "addr=");
        ui = logged_addr(&l, "web view serving", "url=");
        metrics.is_some() && ui.is_some()
    });
    let (metrics, ui) = (metrics.unwrap(), ui.unwrap());
    assert_eq!(
        ui.ip().to_string(),
        "127.0.0.1",
        "`--ui-addr :PORT` stays on loopback"
    );
    assert_ne!(ui.port(), metrics.port());
    poll("/readyz 200", &logs, &mut || {
        http_get(metrics, "/readyz").unwrap().0 == 200
    });

    // Each listener serves only its own routes.
    for path in ["/ui", "/ui/api/state", "/ui/events"] {
        assert_eq!(get(metrics, path, &[]).0, 404, "{path} on the metrics port");
    }
    for path in ["/metrics", "/dead-letters", "/healthz"] {
        assert_eq!(get(ui, path, &[]).0, 404, "{path} on the web view's port");
    }

    // A page is open when the Secret arrives: its feed sees the delta.
    let stream = Stream::open(ui);
    poll("the page's first state", &logs, &mut || {
        stream.text().contains("event: state")
    });
    let last_applied = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "db-password", "namespace": "team-a"},
        "data": {"password": base64(PASSWORD.as_bytes())}})
    .to_string();
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "db-password", "namespace": "team-a",
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": last_applied}},
        "type": "Opaque",
        "data": {"password": base64(PASSWORD.as_bytes())},
        "stringData": {"token": TOKEN},
    });
    std::fs::create_dir_all(cluster.join("team-a")).unwrap();
    std::fs::write(cluster.join("team-a/.db-password.tmp"), secret.to_string()).unwrap();
    std::fs::rename(
        cluster.join("team-a/.db-password.tmp"),
        cluster.join("team-a/db-password.json"),
    )
    .unwrap();
    poll("the Secret's delta in the feed", &logs, &mut || {
        stream
            .text()
            .lines()
            .any(|l| l.starts_with("data:") && l.contains("\"rows\"") && l.contains("db-password"))
    });
    let mut dead = String::new();
    poll("the Secret's dead letter", &logs, &mut || {
        dead = get(metrics, "/dead-letters", &[]).2;
        dead.contains("db-password")
    });
    assert_hidden("/dead-letters", &dead);

    let (code, _, state) = get(ui, "/ui/api/state", &[]);
    assert_eq!(code, 200, "{state}");
    assert!(
        state.contains("db-password"),
        "the state names the dead letter: {state}"
    );
    assert_hidden("/ui/api/state", &state);
    let state: Value = serde_json::from_str(&state).unwrap();
    let informer = state["informers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["kind"] == "secrets")
        .unwrap_or_else(|| panic!("no secrets informer in {state}"))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let q = |s: &str| form_encode(s);
    let (code, _, listed) = get(
        ui,
        &format!("/ui/api/objects?informer={}&namespace=team-a", q(&informer)),
        &[],
    );
    assert_eq!(code, 200, "{listed}");
    assert!(listed.contains("db-password"), "{listed}");
    assert_hidden("/ui/api/objects", &listed);
    let object_path = format!(
        "/ui/api/object?informer={}&namespace=team-a&name=db-password",
        q(&informer)
    );
    let (code, head, shown) = get(ui, &object_path, &[]);
    assert_eq!(code, 200, "{shown}");
    assert!(
        head.to_lowercase().contains("cache-control: no-store"),
        "{head}"
    );
    assert_hidden("/ui/api/object", &shown);
    let shown: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["metadata"]["name"], "db-password");
    assert_eq!(shown["data"], json!({"password": "<redacted>"}));
    assert_eq!(shown["stringData"], json!({"token": "<redacted>"}));
    assert_eq!(
        shown["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"],
        "<redacted>"
    );
    let (code, _, metrics_body) = get(metrics, "/metrics", &[]);
    assert_eq!(code, 200);
    assert_hidden("/metrics", &metrics_body);
    assert_hidden("the page's event stream", &stream.text());
    assert_hidden("the host's log", &host.logs());

    // A DNS-rebinding page arrives under its own name: 421, on every path.
    for path in ["/ui", "/ui/app.js", &object_path, "/ui/events"] {
        let (code, _, body) = get(
            ui,
            path,
            &[("Host", &format!("evil.example:{}", ui.port()))],
        );
        assert_eq!(code, 421, "{path}: {body}");
        assert!(body.contains("evil.example"), "{body}");
    }
    // Another origin's page: 403 on the data and the stream.
    for path in [object_path.as_str(), "/ui/api/state", "/ui/events"] {
        let (code, _, body) = get(ui, path, &[("Origin", "http://evil.example")]);
        assert_eq!(code, 403, "{path}: {body}");
        let (code, _, _) = get(ui, path, &[("Sec-Fetch-Site", "cross-site")]);
        assert_eq!(code, 403, "{path}");
    }
    // The page itself, reached through a port-forward on another port.
    let localhost = "localhost:18080";
    let (code, _, body) = get(
        ui,
        "/ui/api/state",
        &[("Host", localhost), ("Origin", "http://localhost:18080")],
    );
    assert_eq!(code, 200, "{body}");
    let (code, head, _) = get(ui, "/ui", &[("Host", localhost)]);
    assert_eq!(code, 200);
    assert!(
        head.to_lowercase().contains("frame-ancestors 'none'"),
        "{head}"
    );
    drop(host);
}

/// `informer` ids hold spaces and slashes.
fn form_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Without `--ui-addr` the web view binds 127.0.0.1:9091, without the
/// metrics listener it does not need: the run logs that address, or, when
/// another process holds the port, fails naming it and the flag.
#[test]
fn the_web_view_binds_loopback_9091_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(kubewasm_bin())
        .args([
            "--log-format",
            "text",
            "run",
            "--until-idle",
            "--ui",
            "--metrics-addr",
            "off",
            "--local",
        ])
        .arg(dir.path())
        .arg("--plugins")
        .arg(dir.path())
        .env_remove("KUBECONFIG")
        .env_remove("KUBEWASM_UI_ADDR")
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("metrics listening"), "{stderr}");
    if out.status.success() {
        assert!(
            stderr.contains("web view serving url=http://127.0.0.1:9091/ui"),
            "{stderr}"
        );
    } else {
        assert!(
            stderr.contains("cannot listen on 127.0.0.1:9091 for the web view")
                && stderr.contains("--ui-addr"),
            "{stderr}"
        );
    }
}

/// A bound token of ServiceAccount `sa` in `ns` (created if missing).
async fn service_account_token(client: &kube::Client, ns: &str, sa: &str) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": sa, "namespace": ns}})).unwrap();
    let _ = accounts.create(&PostParams::default(), &account).await;
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"expirationSeconds": 3600}})).unwrap();
    accounts
        .create_token_request(sa, &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token
}

/// `--metrics-auth` against the real API server: probes answer without a
/// token; `/metrics` refuses no token and a refused token (401), a
/// ServiceAccount without RBAC (403), and answers one bound to deploy/'s
/// `kubewasm-metrics-reader` (200), which still may not read
/// `/dead-letters` (403), all over TLS (plain HTTP is refused before any
/// token is read); `kubewasm probe --token-file` scrapes with it over TLS,
/// and `kubewasm dead-letters` without a token says to pass one.
#[tokio::test]
async fn metrics_auth_refuses_unauthenticated_and_unauthorized_scrapes() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    let ns = "metrics-auth";
    namespace(&client, ns, json!({})).await;
    let host = HostProcess::start_args(cp.admin_kubeconfig(), &["--metrics-auth"], &[], |_| {});
    let addr = host.metrics_addr(WAIT).await;
    assert!(
        host.logs().lines().any(|l| l.contains("metrics listening")
            && l.contains("auth=true")
            && l.contains("tls=true")),
        "{}",
        host.logs()
    );
    assert_eq!(http_get(addr, "/healthz").unwrap().0, 200);
    eventually("/readyz 200 without a token", WAIT, || async {
        (http_get(addr, "/readyz").ok()?.0 == 200).then_some(())
    })
    .await;

    // A token never crosses in clear: plain HTTP is refused before any
    // authentication, saying how to ask.
    let (code, _, body) = get(addr, "/metrics", &[("Authorization", "Bearer not-a-token")]);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("served over TLS only"), "{body}");

    // No token, and a token the API server does not accept.
    let (code, head, body) = get_tls(addr, "/metrics", &[]);
    assert_eq!(code, 401, "{body}");
    assert!(
        head.to_lowercase().contains("www-authenticate: bearer"),
        "{head}"
    );
    let (code, _, body) = get_tls(addr, "/metrics", &[("Authorization", "Bearer not-a-token")]);
    assert_eq!(code, 401, "{body}");
    assert!(!body.contains("kubewasm_"), "{body}");

    // A ServiceAccount without RBAC for /metrics.
    let nobody = service_account_token(&client, ns, "nobody").await;
    let bearer = |t: &str| format!("Bearer {t}");
    let (code, _, body) = get_tls(addr, "/metrics", &[("Authorization", &bearer(&nobody))]);
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains("system:serviceaccount:metrics-auth:nobody")
            && body.contains("nonResourceURLs"),
        "{body}"
    );

    // One bound to the scraper ClusterRole deploy/ ships.
    let manifest =
        std::fs::read_to_string(repo_root().join("deploy/base/metrics-reader.yaml")).unwrap();
    let role = docs(&manifest)
        .into_iter()
        .find(|d| d["metadata"]["name"] == "kubewasm-metrics-reader")
        .unwrap();
    let role: ClusterRole = serde_json::from_value(role).unwrap();
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let _ = roles
        .delete("kubewasm-metrics-reader", &Default::default())
        .await;
    roles.create(&PostParams::default(), &role).await.unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "metrics-auth-scraper"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kubewasm-metrics-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": ns}],
    }))
    .unwrap();
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let _ = bindings
        .delete("metrics-auth-scraper", &Default::default())
        .await;
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let scraper = service_account_token(&client, ns, "scraper").await;
    // The API server's authorizer sees a new binding within moments; a
    // refusal before it does is cached 10 s by the host.
    let body = eventually("a 200 for the bound scraper", WAIT, || {
        let header = bearer(&scraper);
        async move {
            let (code, _, body) = get_tls(addr, "/metrics", &[("Authorization", &header)]);
            assert!(code == 200 || code == 403, "{code}: {body}");
            (code == 200).then_some(body)
        }
    })
    .await;
    assert!(body.contains("kubewasm_leader"), "{body}");
    let (code, _, body) = get_tls(
        addr,
        "/dead-letters",
        &[("Authorization", &bearer(&scraper))],
    );
    assert_eq!(code, 403, "a scraper may read metrics only: {body}");

    // The CLI sends a token from a file.
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{scraper}\n")).unwrap();
    let out = Command::new(kubewasm_bin())
        .args([
            "probe",
            "/metrics",
            "--addr",
            &addr.to_string(),
            "--token-file",
        ])
        .arg(&token_file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("--insecure-skip-tls-verify"),
        "a token without TLS settings is refused before it is sent: {stderr}"
    );
    let out = Command::new(kubewasm_bin())
        .args([
            "probe",
            "/metrics",
            "--addr",
            &addr.to_string(),
            "--insecure-skip-tls-verify",
            "--token-file",
        ])
        .arg(&token_file)
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("kubewasm_leader"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(kubewasm_bin())
        .args(["probe", "/readyz", "--addr", &addr.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(kubewasm_bin())
        .args([
            "dead-letters",
            "--addr",
            &addr.to_string(),
            "--insecure-skip-tls-verify",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("401") && stderr.contains("--token-file"),
        "{stderr}"
    );
    assert!(host.stop().success(), "the host exits 0 on SIGTERM");
    let _ = bindings
        .delete("metrics-auth-scraper", &Default::default())
        .await;
}
