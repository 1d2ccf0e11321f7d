//! A real OCI registry for the plugin distribution tests: Debian's
//! `docker-registry` (CNCF distribution) on 127.0.0.1, with filesystem
//! storage in a tempdir and HTTPS under a test CA the harness makes with
//! the openssl CLI; optionally htpasswd basic auth. Killed on drop.
//! Install it with scripts/setup-registry.sh.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BINARY: &str = "/usr/bin/docker-registry";

pub struct Registry {
    dir: tempfile::TempDir,
    child: Option<Child>,
    addr: String,
    basic: Option<(String, String)>,
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA and a server certificate for 127.0.0.1 signed by it.
fn make_certs(dir: &Path) {
    let p = |name: &str| dir.join(name);
    run(Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ])
        .args(["-days", "2", "-subj", "/CN=kubewasm test registry CA"])
        .args(["-addext", "basicConstraints=critical,CA:TRUE"])
        .args(["-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        .arg("-keyout")
        .arg(p("ca.key"))
        .arg("-out")
        .arg(p("ca.crt")));
    run(Command::new("openssl")
        .args([
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ])
        .args(["-subj", "/CN=127.0.0.1"])
        .arg("-keyout")
        .arg(p("server.key"))
        .arg("-out")
        .arg(p("server.csr")));
    std::fs::write(
        p("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
         keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run(Command::new("openssl")
        .args(["x509", "-req", "-days", "2", "-CAcreateserial"])
        .arg("-in")
        .arg(p("server.csr"))
        .arg("-CA")
        .arg(p("ca.crt"))
        .arg("-CAkey")
        .arg(p("ca.key"))
        .arg("-extfile")
        .arg(p("server.ext"))
        .arg("-out")
        .arg(p("server.crt")));
}

impl Registry {
    /// An open registry (anonymous pull and push).
    pub async fn start() -> Self {
        Self::launch(None).await
    }

    /// A registry that requires `username`/`password` (htpasswd, bcrypt).
    pub async fn start_with_auth(username: &str, password: &str) -> Self {
        Self::launch(Some((username.to_owned(), password.to_owned()))).await
    }

    async fn launch(basic: Option<(String, String)>) -> Self {
        assert!(
            Path::new(BINARY).exists(),
            "{BINARY} is missing: run scripts/setup-registry.sh (apt package docker-registry)"
        );
        let dir = tempfile::tempdir().unwrap();
        make_certs(dir.path());
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let d = dir.path().display();
        let mut config = format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\n\
             storage:\n  filesystem:\n    rootdirectory: {d}/data\n  delete:\n    enabled: true\n\
             http:\n  addr: {addr}\n  tls:\n    certificate: {d}/server.crt\n    key: {d}/server.key\n"
        );
        if let Some((user, pass)) = &basic {
            run(Command::new("htpasswd")
                .args(["-Bbc"])
                .arg(dir.path().join("htpasswd"))
                .args([user, pass]));
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: kubewasm-test\n    path: {d}/htpasswd\n"
            ));
        }
        std::fs::write(dir.path().join("config.yml"), config).unwrap();
        let mut registry = Self {
            dir,
            child: None,
            addr,
            basic,
        };
        registry.resume().await;
        registry
    }

    /// Starts the registry process (again, after [`Registry::stop`]) on the
    /// same port and storage, and waits until `/v2/` answers.
    pub async fn resume(&mut self) {
        assert!(self.child.is_none(), "the registry is running");
        let log = std::fs::File::create(self.dir.path().join("registry.log")).unwrap();
        let child = Command::new(BINARY)
            .arg("serve")
            .arg(self.dir.path().join("config.yml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let http = self.http();
        let url = format!("https://{}/v2/", self.addr);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(resp) = http.get(&url).send().await
                && (resp.status().is_success() || resp.status() == 401)
            {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("docker-registry exited ({status}): {}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "docker-registry did not answer on {url} in 30 s: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Kills the registry (its storage stays for [`Registry::resume`]).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// `127.0.0.1:PORT`: the registry part of references.
    pub fn host(&self) -> &str {
        &self.addr
    }

    /// The test CA's certificate (PEM file).
    pub fn ca_path(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// Where the registry's filesystem storage keeps blob `digest` (to
    /// serve other bytes under its name).
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap();
        self.dir.path().join(format!(
            "data/docker/registry/v2/blobs/sha256/{}/{hex}/data",
            &hex[..2]
        ))
    }

    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.ca_path()).unwrap()
    }

    /// kubewasm's OCI client for this registry (anonymous, trusting the
    /// test CA): what the tests push modules with.
    pub fn oci_client(&self) -> kubewasm::oci::OciClient {
        kubewasm::oci::OciClient::new(
            kubewasm::oci::Transport::default()
                .with_ca_pem(&self.ca_pem(), "test CA")
                .expect("the test CA parses"),
            kubewasm::oci::PullOptions::default(),
        )
    }

    /// An HTTP client for the registry API, trusting only the test CA.
    pub fn http(&self) -> reqwest::Client {
        kubewasm::oci::transport::install_crypto_provider();
        let ca = reqwest::Certificate::from_pem(&self.ca_pem()).unwrap();
        reqwest::Client::builder()
            .tls_certs_only([ca])
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap()
    }

    fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let req = self.http().request(method, url);
        match &self.basic {
            Some((u, p)) => req.basic_auth(u, Some(p)),
            None => req,
        }
    }

    /// The manifest `reference` (tag or digest) of `repo`: its content type and body.
    pub async fn manifest(&self, repo: &str, reference: &str) -> (String, Vec<u8>) {
        let url = format!("https://{}/v2/{repo}/manifests/{reference}", self.addr);
        let resp = self
            .request(reqwest::Method::GET, &url)
            .header(
                "Accept",
                "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json",
            )
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "GET {url}: {}", resp.status());
        let content_type = resp
            .headers()
            .get("content-type")
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        (content_type, resp.bytes().await.unwrap().to_vec())
    }

    /// A blob of `repo` by digest.
    pub async fn blob(&self, repo: &str, digest: &str) -> Vec<u8> {
        let url = format!("https://{}/v2/{repo}/blobs/{digest}", self.addr);
        let resp = self
            .request(reqwest::Method::GET, &url)
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "GET {url}: {}", resp.status());
        resp.bytes().await.unwrap().to_vec()
    }

    /// Uploads a blob to `repo` (POST then PUT); returns its digest.
    pub async fn put_blob(&self, repo: &str, bytes: &[u8]) -> String {
        let digest = kubewasm::oci::sha256_digest(bytes);
        let url = format!("https://{}/v2/{repo}/blobs/uploads/", self.addr);
        let resp = self
            .request(reqwest::Method::POST, &url)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 202, "POST {url}");
        let location = resp.headers()["location"].to_str().unwrap().to_owned();
        let location = if location.starts_with('/') {
            format!("https://{}{location}", self.addr)
        } else {
            location
        };
        let sep = if location.contains('?') { '&' } else { '?' };
        let resp = self
            .request(
                reqwest::Method::PUT,
                &format!("{location}{sep}digest={digest}"),
            )
            .header("content-type", "application/octet-stream")
            .body(bytes.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201, "PUT blob {digest}");
        digest
    }

    /// Puts a manifest under `repo:tag`.
    pub async fn put_manifest(&self, repo: &str, tag: &str, media_type: &str, body: &[u8]) {
        let url = format!("https://{}/v2/{repo}/manifests/{tag}", self.addr);
        let resp = self
            .request(reqwest::Method::PUT, &url)
            .header("content-type", media_type)
            .body(body.to_vec())
            .send()
            .await
            .unwrap();
        let status = resp.status();
        assert_eq!(status, 201, "PUT {url}: {}", resp.text().await.unwrap());
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A P-256 signing key made from its name: deterministic, for tests only.
pub fn test_key(name: &str) -> kubewasm::oci::SigningKey {
    let mut secret = [0u8; 32];
    for (i, b) in name.bytes().cycle().take(32).enumerate() {
        secret[i] = b ^ (i as u8 + 1);
    }
    kubewasm::oci::SigningKey::from_bytes(&secret, name).unwrap()
}
