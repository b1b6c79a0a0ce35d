//! A throw-away Alertmanager for tests and benches: Debian's `prometheus-alertmanager` (or an
//! `alertmanager` on `PATH`) on a free loopback port, gossip off (`--cluster.listen-address=`),
//! its storage in a temporary directory, one route sending every alert group to a webhook
//! receiver the test runs (`group_by: ['...']`: one notification per alert, `group_wait` 100 ms);
//! killed on drop. [`DevAlertmanager::get`] reads its API with a plain HTTP/1.0 request.
//! [`DevAlertmanager::start_tls`] serves HTTPS instead (`--web.config.file`), optionally requiring
//! a client certificate.

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian installs it.
pub const DEBIAN_BINARY: &str = "/usr/bin/prometheus-alertmanager";

/// How long [`DevAlertmanager::start`] waits for `/-/ready`.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Why an Alertmanager could not run or answer.
#[derive(Debug, thiserror::Error)]
pub enum DevAmError {
    /// No binary.
    #[error(
        "Alertmanager is not installed (no {DEBIAN_BINARY}, no alertmanager on PATH): apt-get install prometheus-alertmanager"
    )]
    NotInstalled,
    /// An I/O step failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// It did not become ready in time.
    #[error("Alertmanager on port {port} was not ready within {after:?}; its output: {log}")]
    NotReady {
        /// Its port.
        port: u16,
        /// How long it was given.
        after: Duration,
        /// The end of its output.
        log: String,
    },
    /// An API answer was not HTTP 200.
    #[error("GET {path}: {status_line}")]
    Status {
        /// The path asked for.
        path: String,
        /// The answer's status line.
        status_line: String,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DevAmError {
    let what = what.into();
    move |source| DevAmError::Io { what, source }
}

/// HTTPS for the Alertmanager's API (its `--web.config.file`).
#[derive(Debug, Clone)]
pub struct DevAmTls {
    /// Server certificate (PEM), valid for 127.0.0.1.
    pub cert: PathBuf,
    /// Its key (PEM).
    pub key: PathBuf,
    /// When set, clients must present a certificate signed by this CA.
    pub client_ca: Option<PathBuf>,
}

/// A running Alertmanager; killed on drop.
#[derive(Debug)]
pub struct DevAlertmanager {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    tls: bool,
}

impl DevAlertmanager {
    /// The binary: Debian's, else `alertmanager` on `PATH`.
    pub fn binary() -> Option<PathBuf> {
        let debian = PathBuf::from(DEBIAN_BINARY);
        if debian.exists() {
            return Some(debian);
        }
        std::env::var_os("PATH")
            .into_iter()
            .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .map(|d| d.join("alertmanager"))
            .find(|p| p.exists())
    }

    /// Whether an Alertmanager binary is installed.
    pub fn available() -> bool {
        Self::binary().is_some()
    }

    /// The configuration [`Self::start`] uses: every alert to `webhook_url`, one notification per
    /// alert, quickly.
    pub fn webhook_config(webhook_url: &str) -> String {
        format!(
            "route:\n  receiver: test\n  group_by: ['...']\n  group_wait: 100ms\n  group_interval: 1s\n  \
             repeat_interval: 1h\nreceivers:\n  - name: test\n    webhook_configs:\n      - url: '{webhook_url}'\n        \
             send_resolved: false\n"
        )
    }

    /// Starts one routing every alert to `webhook_url` and waits until it is ready.
    pub fn start(webhook_url: &str) -> Result<DevAlertmanager, DevAmError> {
        Self::start_with_config(&Self::webhook_config(webhook_url))
    }

    /// Starts one with the configuration `yaml` and waits until it is ready.
    pub fn start_with_config(yaml: &str) -> Result<DevAlertmanager, DevAmError> {
        Self::launch(yaml, None)
    }

    /// Starts one routing every alert to `webhook_url` that serves its API over HTTPS with `tls`
    /// ([`Self::url`] is `https://127.0.0.1:PORT`; [`Self::get`] does not work on it).
    pub fn start_tls(webhook_url: &str, tls: &DevAmTls) -> Result<DevAlertmanager, DevAmError> {
        Self::launch(&Self::webhook_config(webhook_url), Some(tls))
    }

    fn launch(yaml: &str, tls: Option<&DevAmTls>) -> Result<DevAlertmanager, DevAmError> {
        let binary = Self::binary().ok_or(DevAmError::NotInstalled)?;
        let dir =
            tempfile::Builder::new().prefix("oomlens-devam-").tempdir().map_err(io("temporary directory"))?;
        let config = dir.path().join("alertmanager.yml");
        std::fs::write(&config, yaml).map_err(io("writing the configuration"))?;
        let web_config = dir.path().join("web.yml");
        if let Some(tls) = tls {
            let mut web = format!(
                "tls_server_config:\n  cert_file: '{}'\n  key_file: '{}'\n",
                tls.cert.display(),
                tls.key.display()
            );
            if let Some(ca) = &tls.client_ca {
                web.push_str(&format!(
                    "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: '{}'\n",
                    ca.display()
                ));
            }
            std::fs::write(&web_config, web).map_err(io("writing the web configuration"))?;
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io("a free port"))?;
        let port = listener.local_addr().map_err(io("a free port"))?.port();
        drop(listener);
        let log = std::fs::File::create(dir.path().join("alertmanager.log")).map_err(io("the log file"))?;
        let err = log.try_clone().map_err(io("the log file"))?;
        let mut command = Command::new(binary);
        if tls.is_some() {
            command.arg(format!("--web.config.file={}", web_config.display()));
        }
        let child = command
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--cluster.listen-address=")
            .arg("--log.level=info")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(io("starting Alertmanager"))?;
        let mut am = DevAlertmanager { child: Some(child), port, dir, tls: tls.is_some() };
        let start = Instant::now();
        while start.elapsed() < START_TIMEOUT {
            // Over HTTPS a plain request is answered 400 ("Client sent an HTTP request to an
            // HTTPS server"): it listens.
            let ready = match am.get("/-/ready") {
                Ok(_) => true,
                Err(DevAmError::Status { .. }) => am.tls,
                Err(_) => false,
            };
            if ready {
                return Ok(am);
            }
            if let Some(c) = am.child.as_mut()
                && let Ok(Some(_)) = c.try_wait()
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let tail = am.log_tail();
        am.kill();
        Err(DevAmError::NotReady { port, after: START_TIMEOUT, log: tail })
    }

    /// The last lines of its output.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("alertmanager.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().rev().take(15).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    /// Its base URL (`http://127.0.0.1:PORT`, `https://…` with TLS).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The body of `GET <path>` (HTTP 200 only).
    pub fn get(&self, path: &str) -> Result<String, DevAmError> {
        let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).map_err(io("connecting"))?;
        s.set_read_timeout(Some(Duration::from_secs(5))).map_err(io("socket"))?;
        // HTTP/1.0: the answer is not chunked and ends with the connection.
        write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").map_err(io("sending"))?;
        let mut answer = String::new();
        s.read_to_string(&mut answer).map_err(io("reading"))?;
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        let status_line = head.lines().next().unwrap_or_default().to_owned();
        if status_line.split_whitespace().nth(1) != Some("200") {
            return Err(DevAmError::Status { path: path.to_owned(), status_line });
        }
        Ok(body.to_owned())
    }

    /// `GET /api/v2/alerts`: the active alerts as JSON.
    pub fn alerts_json(&self) -> Result<String, DevAmError> {
        self.get("/api/v2/alerts")
    }

    /// Kills it (SIGKILL).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for DevAlertmanager {
    fn drop(&mut self) {
        self.kill();
    }
}
